package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.launch.Launcher;

/**
 * Resume on another worker count, end to end with processes (issue 32): {@code symmem4j-run -n 2} runs
 * {@link RestartingTraining} (data parallelism in group mode with ZeRO stage 2, a checkpoint every {@value #EVERY}
 * steps), whose rank 1 is killed ({@code kill -9}) after step {@value #KILL_AFTER} with no restart left, so the job
 * fails; its newest complete checkpoint is step 10, 20 batches into the epoch. Then {@code symmem4j-run -n 3} starts
 * the same program on the same checkpoint directory: its 3 ranks re-shard the 2 ranks' updater-state shards and finish
 * the epoch, 3 batches per step. The final model equals, bitwise (parameters, updater state, counters), an
 * uninterrupted 3-worker run started from the step-10 checkpoint's consolidated {@code model.zip} on the batches after
 * it.
 */
class ResumeOnAnotherWorkerCountTest {

    static final int EVERY = 2;
    static final int KILL_AFTER = 11;
    static final int EPOCHS = 1;
    /** Each rank keeps the Adam state of its shard only: the 2 shards are re-sliced into 3. */
    static final String STAGE = "GRADIENTS";

    private static Launcher.Result launch(int ranks, Path checkpoints, Path model, int killAfter) throws IOException {
        List<String> args = new ArrayList<>(List.of("-n", Integer.toString(ranks), "--master-port",
                Integer.toString(RestartAfterKillTest.freePort()), "--"));
        args.addAll(RestartAfterKillTest.restartingTraining(checkpoints, model, EVERY, EPOCHS, killAfter, STAGE));
        return Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
    }

    @Test
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aJobOfTwoRanksResumesOnThreeAsAnUninterruptedThreeWorkerRunFromItsCheckpoint(@TempDir Path dir)
            throws IOException {
        Path checkpoints = dir.resolve("checkpoints");
        Launcher.Result failed = launch(2, checkpoints, dir.resolve("unused.zip"), KILL_AFTER);
        assertNotEquals(0, failed.status(), "the 2-rank job fails: " + failed.err());
        CheckpointDirectory.Checkpoint taken = CheckpointDirectory.latestComplete(checkpoints).orElseThrow();
        assertEquals(new CheckpointDirectory.Counters(10, 0, 10, 20, 20 * 16, 2), taken.counters(),
                "the newest complete checkpoint: step 10, 20 batches (of 16 examples) into the epoch, by 2 ranks");
        assertTrue(Files.isRegularFile(taken.dir().resolve("shard-00001-of-00002.bin")), "a ZeRO checkpoint");
        // the consolidated state the 3 ranks resume from (the resumed run prunes this directory later)
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve("model.zip").toFile(), true);

        Path finalModel = dir.resolve("resumed.zip");
        Launcher.Result resumed = launch(3, checkpoints, finalModel, -1);
        String log = resumed.err() + "\n" + resumed.out();
        assertEquals(0, resumed.status(), log);
        for (int r = 0; r < 3; r++) {
            assertTrue(resumed.out().contains("[rank " + r + "] RESHARDED from 2 to 3 ranks at step 10 (batch 20 of epoch 0)"),
                    "rank " + r + ": " + log);
            assertTrue(resumed.out().contains("[rank " + r + "] FIRST STEP 11 of generation 0"), "rank " + r + ": " + log);
        }
        // RestartingTraining's epoch is 24 batches: 4 left, 3 per step: 2 more steps, the last of one batch (two ranks idle)
        assertTrue(resumed.out().contains("[rank 0] DONE generation 0, " + (10 + 2) + " iterations"), log);
        assertEquals(3, CheckpointDirectory.latestComplete(checkpoints).orElseThrow().counters().ranks());

        List<DataSet> data = RestartingTraining.batches();
        MultiLayerNetwork reference = consolidated.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(3).ompThreadsPerWorker(1)
                .sharding(ZeroStage.valueOf(STAGE)).build()) {
            w.fit(new ListIterator(data.subList((int) taken.counters().batchesInEpoch(), data.size())));
            for (int e = reference.getEpochCount(); e < EPOCHS; e++) {
                w.fit(new ListIterator(data));
            }
        }
        MultiLayerNetwork result = ModelSerializer.restoreMultiLayerNetwork(finalModel.toFile(), true);
        assertTrue(Arrays.equals(RestartAfterKillTest.bits(reference.params().data().asFloat()),
                RestartAfterKillTest.bits(result.params().data().asFloat())),
                "parameters bitwise as the uninterrupted 3-worker run's from the checkpoint");
        assertTrue(Arrays.equals(RestartAfterKillTest.bits(reference.getUpdater().getStateViewArray().data().asFloat()),
                RestartAfterKillTest.bits(result.getUpdater().getStateViewArray().data().asFloat())),
                "updater state bitwise");
        assertEquals(reference.getIterationCount(), result.getIterationCount());
        assertEquals(reference.getEpochCount(), result.getEpochCount());
        assertTrue(Files.isRegularFile(finalModel));
    }
}
