package org.symmem4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.group.ProcessGroupConfig;

/**
 * Rank 0's error for a MASTER_PORT that no symmem4j store holds: a foreign server is named as such, and a port held
 * by a socket that does not listen (the local port of a connection) is not blamed on "another job".
 */
class PortHolderTest {

    private static final byte[] SECRET = "port-holder-test-secret".getBytes(StandardCharsets.UTF_8);

    @Test
    void aForeignServerIsNamedAsOneAndNotAsAStore() throws Exception {
        try (ServerSocket foreign = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            String d = PortHolder.describe("127.0.0.1", foreign.getLocalPort(), Duration.ofSeconds(2));
            assertTrue(d.startsWith("a program that accepts connections on port " + foreign.getLocalPort()
                    + " but is not a symmem4j store"), d);
            assertTrue(d.contains("fix: stop that program, or give this job another MASTER_PORT"), d);
        }
    }

    @Test
    void aPortHeldByAConnectionsLocalEndIsNotBlamedOnAJob() throws Exception {
        try (ServerSocket server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
             Socket client = new Socket()) {
            // the client's local port P: in use by a connected socket that does not listen (no SO_REUSEADDR)
            client.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            client.connect(server.getLocalSocketAddress(), 2000);
            try (Socket accepted = server.accept()) {
                int held = client.getLocalPort();
                String d = PortHolder.describe("127.0.0.1", held, Duration.ofSeconds(2));
                assertTrue(d.startsWith("a socket that does not listen: no program accepts connections on port " + held),
                        d);
                assertTrue(d.contains("fix: give this job a MASTER_PORT outside the ephemeral range"), d);

                // rank 0 of a job on that port says the same after its bind retries, not "two jobs on one port"
                ProcessGroupConfig config = new ProcessGroupConfig(0, 2, 0, "127.0.0.1", held, "port-holder");
                SymmemException e = assertThrows(SymmemException.class, () -> ProcessGroup.join(config,
                        GroupOptions.defaults().withTimeout(Duration.ofMillis(600)), StoreSecret.of(SECRET)));
                String m = e.getMessage();
                assertTrue(m.contains("cannot host the rendezvous store: MASTER_PORT=" + held + " is still held after"), m);
                assertTrue(m.contains("by a socket that does not listen"), m);
                assertFalse(m.contains("two jobs on one port"), m);
                assertTrue(client.isConnected() && !client.isClosed(), "the probe left the holder alone");
            }
        }
    }

    @Test
    void thePortIsPlacedAgainstTheEphemeralRange() {
        assertArrayEquals(new int[] {32768, 60999}, PortHolder.parseEphemeralRange("32768\t60999\n"));
        assertNull(PortHolder.parseEphemeralRange("32768"));
        assertNull(PortHolder.parseEphemeralRange("60999 32768"));
        assertNull(PortHolder.parseEphemeralRange("a b"));
        if (java.nio.file.Files.isReadable(PortHolder.EPHEMERAL_RANGE_FILE)) {
            // read whole (Files.readString returned one byte of this file on JDK 25)
            int[] here = PortHolder.readEphemeralRange();
            assertTrue(here != null && here[1] > here[0] + 1, java.util.Arrays.toString(here));
        }
        int[] range = {32768, 60999};
        assertEquals("", PortHolder.ephemeralNote(29500, range));
        assertEquals("", PortHolder.ephemeralNote(40000, null));
        assertTrue(PortHolder.ephemeralNote(40000, range).contains("port 40000 is inside this machine's ephemeral range"
                + " 32768–60999 (net.ipv4.ip_local_port_range)"), PortHolder.ephemeralNote(40000, range));
    }
}
