package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.ChildJvmFlags;

/**
 * JVM ranks started by the launcher ({@code symmem4j-run}): they join one process group from the
 * variables it sets (its generated secret, its run id, LOCAL_WORLD_SIZE), run every collective
 * bitwise equal across ranks, each bound to its own CPUs; and a rank that crashes mid-run fails
 * the job with its own exit code, named, the others stopped.
 */
class LauncherProcessTest {

    /**
     * Runs the launcher in this JVM: {@code --nproc-per-node nproc} ({@code N} or {@code MIN:MAX}) ranks of
     * {@link ProcessWorker} running {@code scenario}, with more of the launcher's {@code options} and more rank JVM
     * flags {@code jvmFlags}, output in {@code logDir}.
     */
    static Launcher.Result launch(Path logDir, String nproc, List<String> options, List<String> jvmFlags,
                                  String... scenario) {
        List<String> args = new ArrayList<>(options);
        args.addAll(List.of("-n", nproc, "--log-dir", logDir.toString(),
                "--master-port", Integer.toString(Workers.freePort()), "--grace-period", "5", "--java", "-Xmx256m",
                "-XX:+UseSerialGC"));
        args.addAll(jvmFlags);
        args.addAll(List.of("-Dsymmem4j.timeout.ms=60000", "-cp", System.getProperty("java.class.path"),
                ProcessWorker.class.getName()));
        args.addAll(List.of(scenario));
        return Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
    }

    @ParameterizedTest(name = "{0} processes")
    @ValueSource(ints = {2, 4})
    void everyCollectiveAcrossLaunchedProcesses(int n, @TempDir Path logs) throws IOException {
        Launcher.Result r = launch(logs, Integer.toString(n), List.of(), List.of(), "collectives"); // C2, as users run it
        assertEquals(0, r.status(), r.err() + "\n" + tail(r.out()));
        String[] rank0 = checksums(Files.readString(logs.resolve("rank-0.log")));
        assertTrue(rank0.length > 100, "expected a checksum per case, found " + rank0.length);
        for (int rank = 0; rank < n; rank++) {
            String log = Files.readString(logs.resolve("rank-" + rank + ".log"));
            assertTrue(log.contains("OK"), log);
            assertArrayEquals(rank0, checksums(log), "rank " + rank + " results differ bitwise from rank 0");
        }
        assertTrue(r.err().contains("all " + n + " ranks exited 0"), r.err());
    }

    @Test
    void aCrashedRankFailsTheJobWithItsCodeAndTheOthersAreStopped(@TempDir Path logs) throws IOException {
        // rank 1 halts at iteration 300 of an endless all-reduce loop; rank 0 would wait for it in a collective
        Launcher.Result r = launch(logs, "2", List.of(), ChildJvmFlags.get(), "loop", Long.toString(Long.MAX_VALUE), "1",
                "300", "halt");
        assertEquals(7, r.status(), r.err());
        assertTrue(r.err().contains("rank 1 (local rank 1, pid ") && r.err().contains("exited with code 7"), r.err());
        assertTrue(Files.readString(logs.resolve("rank-1.log")).contains("HALT with code 7 at iteration 300"),
                Files.readString(logs.resolve("rank-1.log")));
    }

    @Test
    @Timeout(300)
    void aJobWhoseRankCrashesIsRestartedAndTheNewGenerationFormsItsGroup(@TempDir Path logs) throws IOException {
        // generation 0: rank 1 halts at iteration 300; generation 1 (a new run id, port and secret) runs all 1000
        Launcher.Result r = launch(logs, "2", List.of("--max-restarts", "1", "--restart-delay", "0"), ChildJvmFlags.get(),
                "loop", "1000", "1", "300", "halt-once");
        assertEquals(0, r.status(), r.err() + "\n" + tail(r.out()));
        assertTrue(r.err().contains("generation 0 failed: rank 1 (local rank 1, pid ") && r.err().contains("exited with code 7")
                && r.err().contains("restarting as generation 1"), r.err());
        Matcher runId = Pattern.compile("run id (\\S+), ").matcher(r.err());
        assertTrue(runId.find(), r.err());
        for (int rank = 0; rank < 2; rank++) {
            String log = Files.readString(logs.resolve("rank-" + rank + ".log"));
            int restart = log.indexOf("--- symmem4j-run: generation 1, run id " + runId.group(1) + "-g1 ---");
            assertTrue(restart > 0, log);
            assertTrue(log.indexOf("RUN " + runId.group(1) + "-g1 ") > restart, "the new generation's group: " + log);
            assertTrue(log.indexOf("SUMS 1000") > restart, log);
        }
        assertTrue(Files.readString(logs.resolve("rank-1.log")).contains("HALT with code 7 at iteration 300"));
    }

    /**
     * {@code --nproc-per-node 2:3}: rank 2 halts in every generation of 3 processes, so its slot fails again after its
     * restart and is not refilled: the job goes on as 2 processes (a new group of world size 2) and finishes.
     */
    @Test
    @Timeout(300)
    void anElasticJobWhoseSlotCannotBeRefilledGoesOnWithFewerProcesses(@TempDir Path logs) throws IOException {
        Launcher.Result r = launch(logs, "2:3", List.of("--max-restarts", "3", "--restart-delay", "0"), ChildJvmFlags.get(),
                "loop", "400", "2", "100", "halt");
        String log = r.err() + "\n" + tail(r.out());
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("generation 0 failed: rank 2 (local rank 2, pid ")
                && r.err().contains("generation 1 failed: rank 2 (local rank 2, pid "), log);
        assertTrue(r.err().contains("local rank 2's slot failed in generations 0 and 1: not refilled; generation 2 runs 2"
                + " process(es) (--nproc-per-node 2:3;"), log);
        assertTrue(r.err().contains("generation 2: all 2 ranks exited 0"), log);
        assertFalse(r.err().contains("restarting as generation 3"), log);
        for (int rank = 0; rank < 2; rank++) {
            String out = Files.readString(logs.resolve("rank-" + rank + ".log"));
            int g2 = out.indexOf("--- symmem4j-run: generation 2, run id ");
            assertTrue(g2 > 0 && out.indexOf("SUMS 400", g2) > g2, "rank " + rank + " finishes in generation 2: " + out);
        }
    }

    private static String[] checksums(String log) {
        return log.lines().filter(l -> l.startsWith("CHECKSUM ")).toArray(String[]::new);
    }

    private static String tail(String s) {
        return s.length() <= 4000 ? s : s.substring(s.length() - 4000);
    }
}
