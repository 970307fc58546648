package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A tensor-parallel job whose restart changes the tensor-parallel degree, across real processes (issue 32):
 * {@code symmem4j-run -n 2:3 --max-restarts 2} runs {@link TensorParallelRestartingTraining} with its mesh taken from
 * the world size ({@code auto}: 3 processes run {@code dp 3 x tp 1}, 2 run {@code dp 1 x tp 2}: the MLP's hidden width
 * 16 is not divisible by 3). World rank 2 is killed ({@code kill -9}) after step {@value #KILL} in generations 0 and 1,
 * so its slot is given up and generation 2 runs 2 processes; they resume from step {@value #CHECKPOINT} of the
 * {@code 3 x 1} run ({@code tp-0-of-1}), each re-slicing that shard's column- and row-parallel weights and Adam state
 * onto its tp rank of 2, and finish. Every rank's final shard equals, bitwise, the same resume done by threads of this
 * JVM from a copy of that checkpoint ({@link TensorParallelResumeTest} in the plugin shows a thread resume equals the
 * 2-degree run from the consolidated step), and nothing of the job is left.
 */
class TensorParallelElasticRestartTest {

    static final int EVERY = 2;
    static final int EPOCHS = 2;
    static final int KILL = 5;
    /** The newest checkpoint when rank 2 dies after step {@value #KILL}: 2 and 4 were taken (3 steps an epoch). */
    static final int CHECKPOINT = 4;

    @Test
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aRestartOnFewerProcessesResumesOnAnotherTensorParallelDegreeReslicedBitwise(@TempDir Path dir)
            throws IOException {
        Path checkpoints = dir.resolve("checkpoints");
        Path out = dir.resolve("out");
        int port = RestartAfterKillTest.freePort();
        List<String> args = new ArrayList<>(List.of("-n", "2:3", "--cpu-bind", "none", "--master-port",
                Integer.toString(port), "--max-restarts", "2", "--restart-delay", "0",
                "--grace-period", "1", "--java", "--"));
        args.addAll(LaunchedJvm.options("-Xmx384m"));
        args.addAll(List.of(TensorParallelRestartingTraining.class.getName(), checkpoints.toString(), out.toString(),
                Integer.toString(EVERY), Integer.toString(EPOCHS), "auto", "auto", "kill@g0r2s" + KILL,
                "kill@g1r2s" + KILL));
        Launcher.Result r = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("symmem4j-run: local rank 2's slot failed in generations 0 and 1: not refilled;"
                + " generation 2 runs 2 process(es)"), log);
        // 3 steps of 3 ranks per epoch (3 + 3 + 2 batches): step 4 is one step (3 batches) into epoch 1; then 5
        // batches on 1 x 2, one a step
        int iterations = CHECKPOINT + 5;
        for (int rank = 0; rank < 2; rank++) {
            assertTrue(r.out().contains(String.format(Locale.ROOT, "[rank %d] RESUMED generation 2 from step %d (epoch 1)"
                    + " dir tp-0-of-1/step-%012d", rank, CHECKPOINT, CHECKPOINT)), "rank " + rank + " re-slices the"
                    + " 3 x 1 run's shard: " + log);
            assertTrue(r.out().contains("[rank " + rank + "] DONE generation 2, " + iterations + " iterations, tp rank "
                    + rank + " of 2"), log);
        }
        // the same resume by threads, from a copy of the checkpoints as they were when generation 2 started
        Path copy = dir.resolve("copy");
        try (Stream<Path> files = Files.walk(checkpoints.resolve("tp-0-of-1"))) {
            for (Path f : files.toList()) {
                Path to = copy.resolve(checkpoints.relativize(f).toString());
                if (Files.isDirectory(f)) {
                    Files.createDirectories(to);
                } else {
                    Files.copy(f, to);
                }
            }
        }
        List<byte[]> expected = InJvmWorld.runOnEveryRank(2,
                GroupOptions.defaults().withTimeout(TensorParallelRestartingTraining.TIMEOUT),
                group -> TensorParallelRestartingTraining.train(group, 1, 2, copy, EVERY, EPOCHS, List.of(), 2));
        for (int rank = 0; rank < 2; rank++) {
            byte[] found = Files.readAllBytes(out.resolve("rank-" + rank + ".bin"));
            assertEquals(iterations, ByteBuffer.wrap(expected.get(rank)).getInt(), "the threads resumed at step "
                    + CHECKPOINT);
            assertArrayEquals(expected.get(rank), found, "rank " + rank + ": parameters, updater state and counters"
                    + " bitwise as the threads' resume: " + log);
        }
        RestartAfterKillTest.assertNoResidue(new RestartAfterKillTest.Job(r, port, checkpoints, out), 2);
    }
}
