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
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.rendezvous.JobIdentity;
import org.symmem4j.parallel.rendezvous.StoreLimits;
import org.symmem4j.parallel.rendezvous.StoreSecret;
import org.symmem4j.parallel.rendezvous.TcpStoreClient;
import org.symmem4j.parallel.rendezvous.TcpStoreServer;

class RendezvousStoreTest {

    static final byte[] SECRET = "sixteen-bytes-or-more-of-secret".getBytes(StandardCharsets.UTF_8);
    static final JobIdentity JOB = new JobIdentity("test-run", 0, 3);

    static TcpStoreServer server(int port) {
        return new TcpStoreServer("127.0.0.1", port, JOB, SECRET, StoreLimits.defaults(3));
    }

    static TcpStoreClient client(int port, int rank, Duration connectTimeout) {
        return new TcpStoreClient("127.0.0.1", port, JOB, rank, StoreSecret.of(SECRET), connectTimeout, Duration.ofSeconds(5));
    }

    @Test
    void setGetWaitAddDeleteOverTcp() throws Exception {
        try (TcpStoreServer server = server(0);
             TcpStoreClient a = client(server.port(), 1, Duration.ofSeconds(5));
             TcpStoreClient b = client(server.port(), 2, Duration.ofSeconds(5))) {
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
        try (TcpStoreServer server = server(0);
             TcpStoreClient c = client(server.port(), 1, Duration.ofSeconds(5))) {
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
        try (TcpStoreServer probe = server(0)) {
            port = probe.port();
        }
        int freePort = port;
        CompletableFuture<TcpStoreClient> connecting = CompletableFuture.supplyAsync(
                () -> client(freePort, 1, Duration.ofSeconds(10)));
        Thread.sleep(300);
        try (TcpStoreServer late = server(freePort); TcpStoreClient c = connecting.get(10, TimeUnit.SECONDS)) {
            c.set("x", new byte[] {1});
            assertEquals(1, late.store().size());
        }
        SymmemException e = assertThrows(SymmemException.class, () -> client(freePort, 1, Duration.ofMillis(300)));
        assertTrue(e.getMessage().contains("MASTER_ADDR:MASTER_PORT=127.0.0.1:" + freePort), e.getMessage());
    }

    @Test
    void environmentFollowsTorchrun() {
        ProcessGroupConfig c = ProcessGroupConfig.fromEnvironment(Map.of("RANK", "2", "WORLD_SIZE", "4",
                "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "1234"));
        assertEquals(new ProcessGroupConfig(2, 4, 2, "10.0.0.1", 1234), c);
        assertEquals(ProcessGroupConfig.defaultRunId(), c.runId(), "by default the run is the parent process");
        assertTrue(c.runId().startsWith("ppid-" + ProcessHandle.current().parent().orElseThrow().pid() + "-"), c.runId());
        assertEquals("job-7", ProcessGroupConfig.fromEnvironment(Map.of("RANK", "0", "WORLD_SIZE", "1",
                "TORCHELASTIC_RUN_ID", "job-7")).runId());
        assertEquals("mine", ProcessGroupConfig.fromEnvironment(Map.of("RANK", "0", "WORLD_SIZE", "1",
                "TORCHELASTIC_RUN_ID", "job-7", "SYMMEM4J_RUN_ID", "mine")).runId());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ProcessGroupConfig.fromEnvironment(Map.of(
                "RANK", "0", "WORLD_SIZE", "1", "SYMMEM4J_RUN_ID", "../etc"))).getMessage().contains("run id='../etc'"));
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

    /** LOCAL_WORLD_SIZE (symmem4j-run and torchrun set it) and Open MPI's variables under mpirun. */
    @Test
    void environmentGivesLocalWorldSizeAndAcceptsOpenMpi() {
        ProcessGroupConfig two = ProcessGroupConfig.fromEnvironment(Map.of("RANK", "3", "WORLD_SIZE", "4",
                "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "SYMMEM4J_RUN_ID", "job"));
        assertEquals(new ProcessGroupConfig(3, 4, 1, 2, "127.0.0.1", 29500, "job"), two);
        assertEquals(4, ProcessGroupConfig.fromEnvironment(Map.of("RANK", "3", "WORLD_SIZE", "4")).localWorldSize(),
                "one machine by default");
        ProcessGroupConfig mpi = ProcessGroupConfig.fromEnvironment(Map.of("OMPI_COMM_WORLD_RANK", "5",
                "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "4",
                "MASTER_ADDR", "10.0.0.1", "SYMMEM4J_RUN_ID", "job"));
        assertEquals(new ProcessGroupConfig(5, 8, 1, 4, "10.0.0.1", 29500, "job"), mpi);
        assertEquals(2, ProcessGroupConfig.fromEnvironment(Map.of("RANK", "2", "WORLD_SIZE", "4",
                "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1")).rank(), "torchrun's variables win when both are set");
        // the job rank alone (NodeTopology's pretended machines): the same choice, no other variable needed
        assertEquals(java.util.OptionalInt.of(2), ProcessGroupConfig.jobRank(Map.of("RANK", "2", "OMPI_COMM_WORLD_RANK", "0")));
        assertEquals(java.util.OptionalInt.of(5), ProcessGroupConfig.jobRank(Map.of("OMPI_COMM_WORLD_RANK", "5")));
        assertEquals(java.util.OptionalInt.empty(), ProcessGroupConfig.jobRank(Map.of("WORLD_SIZE", "4")));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ProcessGroupConfig.jobRank(Map.of("RANK", "x")))
                .getMessage().contains("RANK=x"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ProcessGroupConfig.fromEnvironment(Map.of(
                "OMPI_COMM_WORLD_RANK", "0"))).getMessage().contains("OMPI_COMM_WORLD_SIZE is not set"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ProcessGroupConfig.fromEnvironment(Map.of(
                "RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2"))).getMessage()
                .contains("LOCAL_RANK=2 outside [0, LOCAL_WORLD_SIZE=2)"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ProcessGroupConfig.fromEnvironment(Map.of(
                "RANK", "0", "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "3"))).getMessage()
                .contains("LOCAL_WORLD_SIZE=3 outside [1, WORLD_SIZE=2]"));
    }
}
