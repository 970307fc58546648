package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.launch.Launcher;

/**
 * {@code symmem4j-run --nproc-per-node MIN:MAX} end to end with DL4J (issue 32): {@code -n 2:3 --max-restarts 2}
 * starts three JVMs of {@link RestartingTraining} (data parallelism in group mode, a checkpoint every
 * {@value #EVERY} steps, 2 epochs of 24 batches). Local rank 2 is killed ({@code kill -9}) in generation 0 after step
 * {@value #FIRST_KILL} and again, in generation 1, after step {@value #SECOND_KILL}: its slot failed twice in a row, so
 * the launcher starts generation 2 with two processes. Those resume from the newest complete checkpoint, step
 * {@value #CHECKPOINT} of three workers (12 batches into the first epoch), re-sharded onto two, and finish.
 *
 * <p>The final model equals, bitwise (parameters, updater state, counters), an uninterrupted run that does the same
 * steps on the same worker counts: three workers for the first {@value #CHECKPOINT} steps (12 batches), then two
 * workers on the rest of the data (the first epoch's last 12 batches, then the second epoch). With ZeRO stage 2 the
 * three ranks' updater-state shards are re-sliced into two (a shrink with ZeRO shards), with plain data parallelism
 * the consolidated state is restored on each.
 */
class ElasticRestartTest {

    static final int EVERY = 4;
    static final int EPOCHS = 2;
    static final int FIRST_KILL = 5;
    static final int SECOND_KILL = 6;
    /** The newest complete checkpoint when rank 2 dies after step {@value #SECOND_KILL}. */
    static final int CHECKPOINT = 4;
    /** Batches per epoch ({@link RestartingTraining#batches}). */
    static final int BATCHES = 24;

    private static final Pattern START = Pattern.compile("\\[rank (\\d)\\] START rank \\d generation (\\d+) pid");

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"plain", "GRADIENTS"})
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aSlotThatFailsTwiceShrinksTheJobWhichResumesReshardedAsAnUninterruptedRunOnThoseCounts(String sharding,
                                                                                                  @TempDir Path dir)
            throws IOException {
        Path checkpoints = dir.resolve("checkpoints");
        Path model = dir.resolve("model.zip");
        List<String> args = new ArrayList<>(List.of("-n", "2:3", "--cpu-bind", "none", "--master-port",
                Integer.toString(RestartAfterKillTest.freePort()), "--max-restarts", "2", "--restart-delay", "0",
                "--grace-period", "1", "--"));
        List<String> more = new ArrayList<>(List.of("kill@g0r2s" + FIRST_KILL, "kill@g1r2s" + SECOND_KILL));
        if (!sharding.equals("plain")) {
            more.add(sharding);
        }
        args.addAll(RestartAfterKillTest.restartingTraining(checkpoints, model, EVERY, EPOCHS, -1,
                more.toArray(String[]::new)));
        Launcher.Result r = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("generation 0 failed: rank 2 (local rank 2, pid "), log);
        assertTrue(r.err().contains("generation 1 failed: rank 2 (local rank 2, pid "), log);
        assertTrue(r.err().contains("symmem4j-run: local rank 2's slot failed in generations 0 and 1: not refilled;"
                + " generation 2 runs 2 process(es) (--nproc-per-node 2:3;"), log);
        assertEquals(List.of(3, 3, 2), startsPerGeneration(r.out()), "processes per generation: " + log);
        assertTrue(r.out().contains("[rank 0] RESUMED generation 1 from step " + CHECKPOINT), log);
        for (int rank = 0; rank < 2; rank++) {
            assertTrue(r.out().contains("[rank " + rank + "] RESHARDED from 3 to 2 ranks at step " + CHECKPOINT
                    + " (batch " + 3 * CHECKPOINT + " of epoch 0)"), "rank " + rank + ": " + log);
            assertTrue(r.out().contains("[rank " + rank + "] FIRST STEP " + (CHECKPOINT + 1) + " of generation 2"),
                    "rank " + rank + " goes on after the checkpoint: " + log);
        }
        assertFalse(r.out().contains("RESHARDED from 3 to 3"), log);
        // 4 steps of 3 batches, then the first epoch's last 12 batches and the second epoch's 24, 2 per step
        long iterations = CHECKPOINT + (BATCHES - 3 * CHECKPOINT) / 2 + (long) (EPOCHS - 1) * BATCHES / 2;
        assertTrue(r.out().contains("[rank 0] DONE generation 2, " + iterations + " iterations"), log);
        assertEquals(2, CheckpointDirectory.latestComplete(checkpoints).orElseThrow().counters().ranks(),
                "the checkpoints after the shrink are of two workers: " + log);

        MultiLayerNetwork expected = uninterrupted(sharding.equals("plain") ? null : ZeroStage.valueOf(sharding));
        MultiLayerNetwork found = ModelSerializer.restoreMultiLayerNetwork(model.toFile(), true);
        assertTrue(Arrays.equals(RestartAfterKillTest.bits(expected.params().data().asFloat()),
                RestartAfterKillTest.bits(found.params().data().asFloat())),
                "parameters bitwise as the uninterrupted 3-then-2-worker run's: " + log);
        assertTrue(Arrays.equals(RestartAfterKillTest.bits(expected.getUpdater().getStateViewArray().data().asFloat()),
                RestartAfterKillTest.bits(found.getUpdater().getStateViewArray().data().asFloat())),
                "updater state bitwise: " + log);
        assertEquals(expected.getIterationCount(), found.getIterationCount(), log);
        assertEquals(expected.getEpochCount(), found.getEpochCount(), log);
    }

    /** How many processes of each generation started (their START lines), in generation order. */
    private static List<Integer> startsPerGeneration(String out) {
        List<Integer> counts = new ArrayList<>();
        for (Matcher m = START.matcher(out); m.find(); ) {
            int g = Integer.parseInt(m.group(2));
            while (counts.size() <= g) {
                counts.add(0);
            }
            counts.set(g, counts.get(g) + 1);
        }
        return counts;
    }

    /**
     * The same steps without failures, in threads of this JVM: three workers on the first {@value #CHECKPOINT} steps'
     * batches, then two workers on the rest of the first epoch and on the second. The first part is a {@code fit} of
     * its own, which counts an epoch: the count is set back, as the job's checkpoint (taken mid-epoch) has it.
     */
    static MultiLayerNetwork uninterrupted(ZeroStage sharding) {
        List<DataSet> data = RestartingTraining.batches();
        MultiLayerNetwork net = DataParallelExample.mlp(64, 32, 10);
        SymmemParallelWrapper.Builder three = SymmemParallelWrapper.builder(net).workers(3).ompThreadsPerWorker(1);
        if (sharding != null) {
            three.sharding(sharding);
        }
        try (SymmemParallelWrapper w = three.build()) {
            w.fit(new ListIterator(data.subList(0, 3 * CHECKPOINT)));
        }
        assertEquals(CHECKPOINT, net.getIterationCount());
        net.setEpochCount(0);
        SymmemParallelWrapper.Builder two = SymmemParallelWrapper.builder(net).workers(2).ompThreadsPerWorker(1);
        if (sharding != null) {
            two.sharding(sharding);
        }
        try (SymmemParallelWrapper w = two.build()) {
            w.fit(new ListIterator(data.subList(3 * CHECKPOINT, data.size())));
            for (int e = net.getEpochCount(); e < EPOCHS; e++) {
                w.fit(new ListIterator(data));
            }
        }
        return net;
    }
}
