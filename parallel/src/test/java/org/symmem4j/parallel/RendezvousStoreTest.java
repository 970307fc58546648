package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.rendezvous.StoreTimeoutException;
import org.symmem4j.parallel.rendezvous.TcpStoreClient;
import org.symmem4j.parallel.rendezvous.TcpStoreServer;

class RendezvousStoreTest {

    @Test
    void setGetWaitAddDeleteOverTcp() throws Exception {
        try (TcpStoreServer server = new TcpStoreServer("127.0.0.1", 0);
             TcpStoreClient a = new TcpStoreClient("127.0.0.1", server.port(), Duration.ofSeconds(5));
             TcpStoreClient b = new TcpStoreClient("127.0.0.1", server.port(), Duration.ofSeconds(5))) {
            a.set("k", "v".getBytes(StandardCharsets.UTF_8));
            assertArrayEquals("v".getBytes(StandardCharsets.UTF_8), b.get("k", Duration.ofSeconds(1)));
            assertTrue(b.tryGet("absent").isEmpty());
            // a blocking get on b returns when a sets the key later
            CompletableFuture<byte[]> waiting = CompletableFuture.supplyAsync(() -> b.get("later", Duration.ofSeconds(10)));
            Thread.sleep(100);
            assertFalse(waiting.isDone());
            a.set("later", new byte[] {42});
            assertArrayEquals(new byte[] {42}, waiting.get(5, TimeUnit.SECONDS));
            assertEquals(1, a.add("counter", 1));
            assertEquals(11, b.add("counter", 10));
            assertTrue(a.delete("k"));
            assertFalse(a.delete("k"));
            byte[] big = new byte[1 << 20];
            big[12345] = 7;
            a.set("big", big);
            assertArrayEquals(big, b.get("big", Duration.ofSeconds(1)));
        }
    }

    @Test
    void timeoutNamesTheMissingKeys() {
        try (TcpStoreServer server = new TcpStoreServer("127.0.0.1", 0);
             TcpStoreClient c = new TcpStoreClient("127.0.0.1", server.port(), Duration.ofSeconds(5))) {
            c.set("present", new byte[0]);
            StoreTimeoutException e = assertThrows(StoreTimeoutException.class,
                    () -> c.getAll(List.of("present", "gone/1", "gone/3"), Duration.ofMillis(200)));
            assertEquals(List.of("gone/1", "gone/3"), e.missingKeys());
            assertTrue(e.getMessage().contains("gone/1"), e.getMessage());
        }
    }

    @Test
    void clientRetriesUntilTheServerListensThenGivesUpClearly() throws Exception {
        int port;
        try (TcpStoreServer probe = new TcpStoreServer("127.0.0.1", 0)) {
            port = probe.port();
        }
        int freePort = port;
        CompletableFuture<TcpStoreClient> connecting = CompletableFuture.supplyAsync(
                () -> new TcpStoreClient("127.0.0.1", freePort, Duration.ofSeconds(10)));
        Thread.sleep(300);
        try (TcpStoreServer late = new TcpStoreServer("127.0.0.1", freePort); TcpStoreClient c = connecting.get(10, TimeUnit.SECONDS)) {
            c.set("x", new byte[] {1});
            assertEquals(1, late.store().size());
        }
        SymmemException e = assertThrows(SymmemException.class,
                () -> new TcpStoreClient("127.0.0.1", freePort, Duration.ofMillis(300)));
        assertTrue(e.getMessage().contains("MASTER_ADDR:MASTER_PORT=127.0.0.1:" + freePort), e.getMessage());
    }

    @Test
    void environmentFollowsTorchrun() {
        ProcessGroupConfig c = ProcessGroupConfig.fromEnvironment(Map.of("RANK", "2", "WORLD_SIZE", "4",
                "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "1234"));
        assertEquals(new ProcessGroupConfig(2, 4, 2, "10.0.0.1", 1234), c);
        ProcessGroupConfig d = ProcessGroupConfig.fromEnvironment(Map.of("RANK", "0", "WORLD_SIZE", "1"));
        assertEquals(ProcessGroupConfig.DEFAULT_MASTER_ADDR, d.masterAddr());
        assertEquals(ProcessGroupConfig.DEFAULT_MASTER_PORT, d.masterPort());
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> ProcessGroupConfig.fromEnvironment(Map.of("WORLD_SIZE", "2"))).getMessage().contains("RANK is not set"));
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> ProcessGroupConfig.fromEnvironment(Map.of("RANK", "x", "WORLD_SIZE", "2"))).getMessage().contains("RANK=x"));
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> ProcessGroupConfig.fromEnvironment(Map.of("RANK", "2", "WORLD_SIZE", "2"))).getMessage()
                .contains("RANK=2 outside [0, WORLD_SIZE=2)"));
    }
}
