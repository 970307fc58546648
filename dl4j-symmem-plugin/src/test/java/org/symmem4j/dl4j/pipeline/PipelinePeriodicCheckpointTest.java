package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * Checkpoints the pipeline trainer takes itself ({@code checkpointEvery}) and resumes from ({@code resumeFrom}): they
 * appear at their steps (one per batch), the newest K stay, a torn newest one is skipped, and a run resumed from the
 * newest complete one and trained on equals the uninterrupted run bitwise.
 */
class PipelinePeriodicCheckpointTest {

    private static final int BATCHES = 6;

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    private static PipelineParallelTrainerBuilder builder(MultiLayerNetwork model) {
        return PipelineParallelTrainer.builder(model).ranks(2).microbatches(4).stageBoundaries(4);
    }

    private static List<String> stepDirs(Path root) throws Exception {
        try (Stream<Path> s = Files.list(root)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("step-")).sorted().toList();
        }
    }

    @Test
    void resumedAndTrainedOnEqualsUninterruptedAndTornOnesAreSkipped(@TempDir Path root) throws Exception {
        List<DataSet> data = PipelineNets.batches(41, BATCHES, 8, DataType.DOUBLE);
        int epochs = 2;
        MultiLayerNetwork uninterrupted = mlp();
        try (PipelineParallelTrainer trainer = builder(uninterrupted).build()) {
            for (int e = 0; e < epochs; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }

        // one epoch and 3 batches of the second, a checkpoint every 2 steps: 2, 4, 6, 8 taken, 6 and 8 kept; the
        // process "dies" after step 9
        MultiLayerNetwork dead = mlp();
        try (PipelineParallelTrainer trainer = builder(dead).checkpointEvery(2, root).resumeFrom(root).build()) {
            assertNull(trainer.resumedFrom());
            trainer.fit(new BatchListIterator(data));
            trainer.fit(new BatchListIterator(data.subList(0, 3)));
        }
        assertEquals(List.of("step-000000000006", "step-000000000008"), stepDirs(root));
        assertEquals(new CheckpointDirectory.Counters(8, 1, 8, 2, 2),
                CheckpointDirectory.verify(CheckpointDirectory.stepDir(root, 8)));

        // step 8's stage-1 shard truncated: torn, so the run resumes from step 6 (a step more is redone)
        Path shard = CheckpointDirectory.stepDir(root, 8).resolve("shard-00001-of-00002.bin");
        Files.write(shard, java.util.Arrays.copyOf(Files.readAllBytes(shard), 10));

        MultiLayerNetwork resumed = mlp();
        resumed.params().muli(0.5); // only the restore can make the runs agree
        try (PipelineParallelTrainer trainer = builder(resumed).checkpointEvery(2, root).resumeFrom(root).build()) {
            // step 6 ended epoch 0 inside its fit, before the epoch was counted: the first fit skips all its batches
            assertEquals(new CheckpointDirectory.Counters(6, 0, 6, BATCHES, 2), trainer.resumedFrom().counters());
            for (int e = resumed.getEpochCount(); e < epochs; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }
        assertTrue(PipelineNets.bitwiseEqual(uninterrupted.params(), resumed.params()), "parameters");
        assertTrue(PipelineNets.bitwiseEqual(uninterrupted.getUpdater().getStateViewArray(),
                resumed.getUpdater().getStateViewArray()), "updater state");
        assertEquals(uninterrupted.getIterationCount(), resumed.getIterationCount(), "iterations");
        assertEquals(uninterrupted.getEpochCount(), resumed.getEpochCount(), "epochs");
        // the resumed run wrote steps 8, 10 and 12 again: the newest two complete ones stay
        assertEquals(List.of("step-000000000010", "step-000000000012"), stepDirs(root));
    }
}
