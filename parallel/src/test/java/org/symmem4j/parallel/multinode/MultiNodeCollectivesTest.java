package org.symmem4j.parallel.multinode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.ChildJvmFlags;

/**
 * One machine pretending to be two: {@code mpirun -np 4} with Open MPI's TCP transport only (its shared
 * memory disabled, so traffic between the pretended machines goes through sockets), every process a
 * rank of a process group whose ranks 0-1 and 2-3 are two machines
 * ({@code -Dsymmem4j.pretend.ranks.per.node=2}). The hierarchical all-reduce, reduce-scatter, all-gather
 * and broadcast equal a float64 reference (exactly where the values are integers), bitwise identical on
 * every rank ({@link MultiNodeWorker}); a process killed mid-run fails the job. Skipped where Open MPI
 * is not installed, unless {@code SYMMEM4J_REQUIRE_MPI=1} (CI) makes that a failure.
 */
class MultiNodeCollectivesTest {

    static boolean mpirunPresent() {
        try {
            Process p = new ProcessBuilder("mpirun", "--version").redirectErrorStream(true).start();
            p.getInputStream().readAllBytes();
            return p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }

    static void requireMpi() {
        boolean present = mpirunPresent();
        if (!present && "1".equals(System.getenv("SYMMEM4J_REQUIRE_MPI"))) {
            throw new AssertionError("SYMMEM4J_REQUIRE_MPI=1 but mpirun is not on the PATH (install Debian's openmpi-bin)");
        }
        Assumptions.assumeTrue(present, "Open MPI (mpirun) is not installed");
    }

    record Run(int status, String out) {
    }

    /**
     * Runs {@link MultiNodeWorker} on {@code ranks} processes, 2 to a pretended machine, with more JVM flags
     * {@code jvmFlags} ({@link ChildJvmFlags} for the failure jobs; none for the float64 check, which runs C2's code).
     */
    static Run mpirun(int ranks, List<String> jvmFlags, String... workerArgs) throws IOException, InterruptedException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        List<String> cmd = new ArrayList<>(List.of("mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                Integer.toString(ranks), "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
                "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + port,
                "-x", "SYMMEM4J_RUN_ID=multinode-test-" + port,
                "-x", "SYMMEM4J_SECRET=multinode-test-secret-of-enough-bytes-" + port,
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
                "-Xmx256m"));
        cmd.addAll(jvmFlags);
        cmd.addAll(List.of("-Dsymmem4j.pretend.ranks.per.node=2", "-cp", System.getProperty("java.class.path"),
                MultiNodeWorker.class.getName()));
        cmd.addAll(List.of(workerArgs));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().remove("RANK"); // Open MPI's variables give each process its rank
        Process p = pb.start();
        // read on another thread, so that a job that hangs ends the test at the bound instead of blocking the read
        java.util.concurrent.CompletableFuture<String> out = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            try {
                return new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(output unreadable: " + e + ")";
            }
        });
        boolean ended = p.waitFor(300, TimeUnit.SECONDS);
        if (!ended) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
        }
        String text;
        try {
            text = out.get(30, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            text = "(output not read: " + e + ")";
        }
        assertTrue(ended, "mpirun ends within 300 s:\n" + text);
        return new Run(p.exitValue(), text);
    }

    /** The job both the float64 check and the refusals read, once it ended. */
    private static Run checkAndRefusals;

    /**
     * One job for two cases: the refusals, then the float64 check on the same communicator (a launch costs each of
     * the four processes a JVM start). Without {@link ChildJvmFlags}: the check is to run C2's code.
     */
    private static synchronized Run checkAndRefusals() throws IOException, InterruptedException {
        if (checkAndRefusals == null) {
            Run run = mpirun(4, List.of(), "refusals", "check");
            assertEquals(0, run.status(), run.out());
            checkAndRefusals = run;
        }
        return checkAndRefusals;
    }

    @Test
    void twoPretendMachinesOfTwoRanksAgreeWithTheFloat64Reference() throws Exception {
        requireMpi();
        Run run = checkAndRefusals();
        assertEquals(0, run.status(), run.out());
        for (int r = 0; r < 4; r++) {
            assertTrue(run.out().contains("rank " + r + " OK: "), "rank " + r + " checked every collective:\n" + run.out());
        }
        assertTrue(run.out().contains("on 2 machines x 2 ranks"), run.out());
    }

    @Test
    void aProcessKilledMidRunFailsTheJob() throws Exception {
        requireMpi();
        Run run = mpirun(4, ChildJvmFlags.get(), "die-at-allreduce");
        assertNotEquals(0, run.status(), run.out());
        assertTrue(run.out().contains("rank 3 halts now"), run.out());
        assertTrue(!run.out().contains("without rank 3"), "no rank finished the collective without rank 3:\n" + run.out());
    }

    /**
     * A bad argument on one rank of either pretended machine — read-only, freed or heap destination, a
     * count that differs, a range outside its memory — is refused by all four processes before any
     * byte moves, naming that rank, and the next collective is correct ({@code MultiNodeWorker.refusals}).
     * Before the agreement, the bad rank threw alone: the others returned with results, or waited in MPI. The
     * job runs the float64 check after the refusals ({@link #checkAndRefusals}).
     */
    @Test
    void aBadArgumentOnOneRankIsRefusedOnEveryRankOfEveryMachine() throws Exception {
        requireMpi();
        Run run = checkAndRefusals();
        assertEquals(0, run.status(), run.out());
        for (int r = 0; r < 4; r++) {
            assertTrue(run.out().contains("rank " + r + " REFUSALS OK: 21 cases"), "rank " + r + ":\n" + run.out());
        }
        assertTrue(run.out().contains("REFUSED all-reduce/MPI read-only rank=1: all-reduce#"), run.out());
        assertTrue(run.out().contains("rank=1 buffer is read-only"), run.out());
    }

    @Test
    void layoutsTheCollectivesCannotUseAreRefused() {
        IllegalArgumentException uneven = assertThrows(IllegalArgumentException.class,
                () -> NodeTopology.fromIds(List.of("a", "a", "a", "b"), 0));
        assertTrue(uneven.getMessage().contains("machine 'b' runs 1 ranks, expected 2 on every machine")
                || uneven.getMessage().contains("machine 'a' runs 3 ranks"), uneven.getMessage());
        IllegalArgumentException interleaved = assertThrows(IllegalArgumentException.class,
                () -> NodeTopology.fromIds(List.of("a", "b", "a", "b"), 0));
        assertTrue(interleaved.getMessage().contains("the ranks of machine 'a' are not consecutive"), interleaved.getMessage());
        assertEquals(new NodeTopology(2, 3, 1, 2), NodeTopology.fromIds(List.of("a", "a", "a", "b", "b", "b"), 5));
    }
}
