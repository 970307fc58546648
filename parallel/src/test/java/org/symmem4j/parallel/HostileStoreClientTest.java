package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.host.SharedMemoryFiles;
import org.symmem4j.parallel.rendezvous.JobIdentity;
import org.symmem4j.parallel.rendezvous.StoreSecret;
import org.symmem4j.parallel.rendezvous.TcpStoreClient;

/**
 * A client that holds the job's secret but lies (a compromised or buggy rank): malformed member
 * records, a path where an allocation record belongs, a file planted under the name a rank expects.
 * Rank 0 reports each with a clear error and never opens a path it did not build itself.
 */
class HostileStoreClientTest {

    private static final byte[] SECRET = "hostile-client-test-secret".getBytes(StandardCharsets.UTF_8);

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** Rank 0 of a 2-rank group joining in the background; the test plays rank 1 through a raw client. */
    private record Rank0(CompletableFuture<ProcessGroup> group, TcpStoreClient rank1, String runId) {
    }

    private static Rank0 startRank0(String runId, int port) {
        ProcessGroupConfig config = new ProcessGroupConfig(0, 2, 0, "127.0.0.1", port, runId);
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(20));
        CompletableFuture<ProcessGroup> group = CompletableFuture.supplyAsync(
                () -> ProcessGroup.join(config, options, StoreSecret.of(SECRET)));
        TcpStoreClient rank1 = new TcpStoreClient("127.0.0.1", port, new JobIdentity(runId, 0, 2), 1,
                StoreSecret.of(SECRET), Duration.ofSeconds(20), Duration.ofSeconds(5));
        return new Rank0(group, rank1, runId);
    }

    private static String me() {
        ProcessHandle self = ProcessHandle.current();
        return self.pid() + " " + self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
    }

    @Test
    void aMalformedMemberRecordIsAClearErrorOnTheRankThatReadsIt() throws Exception {
        Rank0 r = startRank0("hostile-member", freePort());
        try (TcpStoreClient liar = r.rank1()) {
            try {
                liar.set("group/member/1", "not-a-pid".getBytes(StandardCharsets.UTF_8));
            } catch (SymmemException cutOff) {
                // Rank 0 may read the record, fail and close its store before the store acknowledges the set:
                // the liar then sees the connection drop. Rank 0's error below is what this test is about.
            }
            ExecutionException e = assertThrows(ExecutionException.class, () -> r.group().get(30, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof SymmemException, String.valueOf(e.getCause()));
            String m = e.getCause().getMessage();
            assertTrue(m.contains("member record of rank 1 is malformed: 'not-a-pid'"), m);
            assertTrue(m.contains("expected '<pid> <startMillis>'"), m);
        }
    }

    @Test
    void aPathInAnAllocationRecordIsNeverOpened() throws Exception {
        Rank0 r = startRank0("hostile-path", freePort());
        try (TcpStoreClient liar = r.rank1()) {
            liar.set("group/member/1", me().getBytes(StandardCharsets.UTF_8));
            try (ProcessGroup group = r.group().get(30, TimeUnit.SECONDS)) {
                liar.set("x/0/shm-allocate/1", "../../etc/hostname 4096 -1".getBytes(StandardCharsets.UTF_8));
                SymmemException e = assertThrows(SymmemException.class, () -> SymmetricMemory.allocate(group, 4096));
                assertTrue(e.getMessage().contains("the record of rank 1 is malformed: '../../etc/hostname 4096 -1'"),
                        e.getMessage());
                liar.add("group/closed", 1); // rank 1 leaves, so rank 0's close need not wait for it
            }
        }
    }

    @Test
    void aFilePlantedUnderTheExpectedNameIsRefused() throws Exception {
        for (boolean otherUser : new boolean[] {false, true}) {
            if (otherUser && !isRoot()) {
                continue; // chown to another user needs root (CI runs as root)
            }
            Rank0 r = startRank0("hostile-file-" + otherUser, freePort());
            String tag = "0123456789ab";
            ProcessHandle self = ProcessHandle.current();
            long start = self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
            Path planted = SharedMemoryFiles.directory().resolve(
                    SharedMemoryFiles.PREFIX + self.pid() + "-" + start + "-" + tag + "-r1");
            try (TcpStoreClient liar = r.rank1()) {
                liar.set("group/member/1", me().getBytes(StandardCharsets.UTF_8));
                try (ProcessGroup group = r.group().get(30, TimeUnit.SECONDS)) {
                    Files.write(planted, new byte[1 << 16]);
                    Files.setPosixFilePermissions(planted, PosixFilePermissions.fromString("rw-rw-rw-"));
                    if (otherUser) {
                        Files.setAttribute(planted, "unix:uid", 65534);
                    }
                    liar.set("x/0/shm-allocate/1", (tag + " 4096 -1").getBytes(StandardCharsets.UTF_8));
                    SymmemException e = assertThrows(SymmemException.class, () -> SymmetricMemory.allocate(group, 4096));
                    assertTrue(e.getMessage().contains(otherUser ? "owner uid=65534" : "mode=666"), e.getMessage());
                    assertTrue(e.getMessage().contains("a file that this job's ranks did not create"), e.getMessage());
                    liar.add("group/closed", 1);
                }
            } finally {
                Files.deleteIfExists(planted);
            }
        }
        for (String name : SharedMemoryFiles.list()) {
            assertFalse(name.startsWith(SharedMemoryFiles.PREFIX + ProcessHandle.current().pid() + "-"),
                    "rank 0's own file must be gone after the failed allocation: " + name);
        }
    }

    /** Child process: joins the store as rank 1 of a 2-rank run (args: port, run id), then dies before registering. */
    public static void main(String[] args) {
        new TcpStoreClient("127.0.0.1", Integer.parseInt(args[0]), new JobIdentity(args[1], 0, 2), 1,
                StoreSecret.of(SECRET), Duration.ofSeconds(30), Duration.ofSeconds(5));
        System.out.println("CONNECTED");
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    @Test
    void aRankThatDiesAfterConnectingIsNamedDuringTheJoin() throws Exception {
        int port = freePort();
        ProcessGroupConfig config = new ProcessGroupConfig(0, 2, 0, "127.0.0.1", port, "dies-in-join");
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        CompletableFuture<ProcessGroup> group = CompletableFuture.supplyAsync(
                () -> ProcessGroup.join(config, options, StoreSecret.of(SECRET)));
        Process child = new ProcessBuilder(ProcessHandle.current().info().command().orElse("java"), "-cp",
                System.getProperty("java.class.path"), HostileStoreClientTest.class.getName(), Integer.toString(port),
                "dies-in-join").redirectErrorStream(true).start();
        String out = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(out.contains("CONNECTED"), out);
        ExecutionException e = assertThrows(ExecutionException.class, () -> group.get(90, TimeUnit.SECONDS));
        PeerTimeoutException p = (PeerTimeoutException) e.getCause();
        // PEER_EXITED, not DEADLINE_PASSED: seen from its handshake's pid, not at the 60 s timeout
        assertEquals(PeerTimeoutException.Reason.PEER_EXITED, p.reason(), p.getMessage());
        assertTrue(p.getMessage().contains("rank 1 (pid " + child.pid() + ") exited before arriving"), p.getMessage());
    }

    @Test
    void backToBackGroupsOnOnePortJoinInTurn() throws Exception {
        int port = freePort();
        String runId = "back-to-back";
        for (int generation = 0; generation < 3; generation++) {
            ProcessGroupConfig c0 = new ProcessGroupConfig(0, 2, 0, "127.0.0.1", port, runId);
            ProcessGroupConfig c1 = new ProcessGroupConfig(1, 2, 1, "127.0.0.1", port, runId);
            GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(20));
            CompletableFuture<ProcessGroup> g1 = CompletableFuture.supplyAsync(
                    () -> ProcessGroup.join(c1, options, StoreSecret.of(SECRET)));
            try (ProcessGroup g0 = ProcessGroup.join(c0, options, StoreSecret.of(SECRET));
                 ProcessGroup other = g1.get(30, TimeUnit.SECONDS)) {
                assertEquals(generation, g0.identity().generation());
                assertEquals(generation, other.identity().generation());
                CompletableFuture<Void> closing = CompletableFuture.runAsync(other::close);
                g0.close();
                closing.get(30, TimeUnit.SECONDS);
            }
        }
    }

    private static boolean isRoot() {
        try {
            return (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid") == 0;
        } catch (IOException | UnsupportedOperationException e) {
            return false;
        }
    }
}
