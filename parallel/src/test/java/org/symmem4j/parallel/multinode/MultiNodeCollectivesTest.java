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

/**
 * One machine pretending to be two: {@code mpirun -np 4} with Open MPI's TCP transport only (its shared
 * memory disabled, so traffic between the pretended machines goes through sockets), every process a
 * rank of a process group whose ranks 0-1 and 2-3 are two machines
 * ({@code -Dsymmem4j.pretendRanksPerNode=2}). The hierarchical all-reduce, reduce-scatter, all-gather
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

    static Run mpirun(int ranks, String... workerArgs) throws IOException, InterruptedException {
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
                "-Xmx256m", "-Dsymmem4j.pretendRanksPerNode=2", "-cp", System.getProperty("java.class.path"),
                MultiNodeWorker.class.getName()));
        cmd.addAll(List.of(workerArgs));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().remove("RANK"); // Open MPI's variables give each process its rank
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), "mpirun ends");
        return new Run(p.exitValue(), out);
    }

    @Test
    void twoPretendMachinesOfTwoRanksAgreeWithTheFloat64Reference() throws Exception {
        requireMpi();
        Run run = mpirun(4);
        assertEquals(0, run.status(), run.out());
        for (int r = 0; r < 4; r++) {
            assertTrue(run.out().contains("rank " + r + " OK: "), "rank " + r + " checked every collective:\n" + run.out());
        }
        assertTrue(run.out().contains("on 2 machines x 2 ranks"), run.out());
    }

    @Test
    void aProcessKilledMidRunFailsTheJob() throws Exception {
        requireMpi();
        Run run = mpirun(4, "die-at-allreduce");
        assertNotEquals(0, run.status(), run.out());
        assertTrue(run.out().contains("rank 3 halts now"), run.out());
        assertTrue(!run.out().contains("without rank 3"), "no rank finished the collective without rank 3:\n" + run.out());
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
