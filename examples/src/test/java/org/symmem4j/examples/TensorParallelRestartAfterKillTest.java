package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Tensor parallelism that survives a dead worker, across real processes (issue 32): {@code symmem4j-run --max-restarts 1}
 * starts the ranks of {@link TensorParallelRestartingTraining} (a {@code dp x tp} mesh, each rank a tensor-parallel
 * shard of a tiny MLP trained by a wrapper over its dp group, a checkpoint every {@value #EVERY} steps, each tp rank's
 * shard under {@code root/tp-R-of-S}). World rank 1 is killed ({@code kill -9}) after step {@value #KILL}; the launcher
 * stops the rest and starts generation 1, whose ranks resume from the newest step complete on every tp rank (step
 * {@value #RESUMED}, one batch into the second epoch) and finish. Every rank's final shard (parameters, updater state,
 * counters) equals, bitwise, the same rank's in the same job run without the kill (its ranks threads of the test's JVM:
 * {@link TensorParallelRestartingTraining#train}), and nothing of the job (process, {@code /dev/shm} file, port) is
 * left.
 *
 * <p>The waits' bounds are generous ({@link TensorParallelRestartingTraining#TIMEOUT}): they only end a hang; the test
 * asserts no timing.
 */
class TensorParallelRestartAfterKillTest {

    static final int EVERY = 3;
    static final int EPOCHS = 2;
    static final int KILL = 11;
    /** The newest checkpoint before the kill after step {@value #KILL}: 3, 6, 9 were taken. */
    static final int RESUMED = 9;

    /** One launch: its result, generation 0's port, the checkpoint root and the directory of the ranks' outputs. */
    static RestartAfterKillTest.Job launch(Path dir, int dp, int tp, String... faults) throws IOException {
        Path checkpoints = dir.resolve("checkpoints");
        Path out = dir.resolve("out");
        int port = RestartAfterKillTest.freePort();
        List<String> args = new ArrayList<>(List.of("-n", Integer.toString(dp * tp), "--cpu-bind", "none",
                "--master-port", Integer.toString(port), "--max-restarts", "1", "--restart-delay", "0",
                "--grace-period", "1", "--java", "--"));
        args.addAll(LaunchedJvm.options("-Xmx384m"));
        args.addAll(List.of(TensorParallelRestartingTraining.class.getName(), checkpoints.toString(), out.toString(),
                Integer.toString(EVERY), Integer.toString(EPOCHS), Integer.toString(dp), Integer.toString(tp)));
        args.addAll(List.of(faults));
        return new RestartAfterKillTest.Job(Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv())),
                port, checkpoints, out);
    }

    @ParameterizedTest(name = "dp={0} tp={1}")
    @CsvSource({"1, 2"})
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aRankKilledMidTrainingIsRestartedFromTheNewestCheckpointCompleteOnEveryTensorParallelRank(int dp, int tp,
                                                                                                   @TempDir Path dir)
            throws IOException {
        int ranks = dp * tp;
        int steps = EPOCHS * TensorParallelRestartingTraining.batches().size() / dp;
        long began = System.nanoTime();
        // the reference: the same job uninterrupted, its ranks threads of this JVM (process and thread ranks train
        // bitwise alike; a launch of its own would add two JVM starts to the test)
        Path plainRoot = Files.createDirectory(dir.resolve("plain"));
        List<byte[]> expected = InJvmWorld.runOnEveryRank(ranks,
                GroupOptions.defaults().withTimeout(TensorParallelRestartingTraining.TIMEOUT),
                group -> TensorParallelRestartingTraining.train(group, dp, tp, plainRoot, EVERY, EPOCHS, List.of(), 0));
        long referenceDone = System.nanoTime();
        RestartAfterKillTest.Job job = launch(Files.createDirectory(dir.resolve("killed")), dp, tp, "kill@g0r1s" + KILL);
        String log = "kill after step " + KILL + "\n" + job.log();
        assertEquals(0, job.result().status(), log);
        String out = job.result().out();
        assertTrue(out.contains("[rank 1] KILL rank 1 generation 0 after step " + KILL), log);
        assertTrue(job.result().err().contains("generation 0 failed: rank 1 (local rank 1, pid ")
                && job.result().err().contains("was killed by signal 9 (SIGKILL)"), "the launcher names the dead rank: " + log);
        assertTrue(job.result().err().contains("restarting as generation 1"), log);
        for (int r = 0; r < ranks; r++) {
            int t = r % tp; // world rank d * tp + t holds tp shard t
            String shard = String.format(Locale.ROOT, "tp-%d-of-%d", t, tp);
            assertTrue(out.contains(String.format(Locale.ROOT, "[rank %d] RESUMED generation 1 from step %d (epoch 1) dir"
                    + " %s/step-%012d", r, RESUMED, shard, RESUMED)), "rank " + r + " resumes its own shard's newest"
                    + " checkpoint: " + log);
            assertTrue(out.contains("[rank " + r + "] FIRST STEP " + (RESUMED + 1) + " of generation 1 "),
                    "rank " + r + " goes on after the checkpoint: " + log);
            assertTrue(out.contains("[rank " + r + "] DONE generation 1, " + steps + " iterations, tp rank " + t),
                    log);
            byte[] found = Files.readAllBytes(job.model().resolve("rank-" + r + ".bin"));
            assertEquals(steps, ByteBuffer.wrap(expected.get(r)).getInt(), "the reference trained every step");
            assertArrayEquals(expected.get(r), found, "rank " + r + ": parameters, updater state and counters bitwise as the"
                    + " uninterrupted run's: " + log);
        }
        // each tp rank's shard in its own directory
        List<String> shards = new ArrayList<>();
        for (int t = 0; t < tp; t++) {
            shards.add(String.format(Locale.ROOT, "tp-%d-of-%d", t, tp));
        }
        try (Stream<Path> listing = Files.list(job.checkpoints())) {
            assertEquals(shards, listing.filter(Files::isDirectory).map(p -> p.getFileName().toString()).sorted().toList());
        }
        RestartAfterKillTest.assertNoResidue(job, 1);
        out.lines().filter(l -> l.matches("\\[rank \\d\\] (START|KILL|FIRST STEP|RESUMED|DONE).*"))
                .forEach(System.out::println); // the phases' wall-clock times, for a reader of the test's output
        System.out.printf(Locale.ROOT, "TensorParallelRestartAfterKillTest dp=%d tp=%d: reference (threads) %.1f s, launch"
                        + " with the kill and the restart %.1f s%n", dp, tp, (referenceDone - began) / 1e9,
                (System.nanoTime() - referenceDone) / 1e9);
    }
}
