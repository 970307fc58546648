package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;

/**
 * Pipeline checkpoints (one shard file per stage and {@code model.zip}): training restored into a fresh trainer goes
 * on bitwise as uninterrupted training; {@code model.zip} loads in plain DL4J and holds the trained network; a
 * checkpoint of another split or stage count is refused with key=value messages, changing nothing.
 */
class PipelineCheckpointTest {

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    @Test
    void restoredTrainingGoesOnBitwiseAsUninterruptedTraining(@TempDir Path dir) throws Exception {
        List<DataSet> data = PipelineNets.batches(21, 4, 8, DataType.DOUBLE);
        MultiLayerNetwork uninterrupted = mlp();
        MultiLayerNetwork atSave;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(uninterrupted).ranks(2).microbatches(4)
                .stageBoundaries(4).build()) {
            trainer.fit(data.get(0));
            trainer.fit(data.get(1));
            trainer.saveCheckpoint(dir);
            atSave = uninterrupted.clone();
            trainer.fit(data.get(2));
            trainer.fit(data.get(3));
        }
        assertTrue(Files.isRegularFile(dir.resolve("shard-00000-of-00002.bin")), "stage 0's shard");
        assertTrue(Files.isRegularFile(dir.resolve("shard-00001-of-00002.bin")), "stage 1's shard");

        // the consolidated model: plain DL4J loads it, with the gathered parameters, updater state and counters
        File modelFile = dir.resolve("model.zip").toFile();
        MultiLayerNetwork loaded = ModelSerializer.restoreMultiLayerNetwork(modelFile, true);
        PipelineNets.assertSameState(atSave, loaded, "model.zip");

        // a fresh trainer on a different network of the configuration, with another schedule: restored, then on
        MultiLayerNetwork restored = mlp();
        restored.params().muli(0.5);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(restored).ranks(2).microbatches(4)
                .schedule(PipelineSchedule.GPIPE).stageBoundaries(4).build()) {
            trainer.restoreCheckpoint(dir);
            PipelineNets.assertSameState(atSave, restored, "right after the restore");
            trainer.fit(data.get(2));
            trainer.fit(data.get(3));
        }
        PipelineNets.assertSameState(uninterrupted, restored, "restored and trained on");
    }

    /**
     * The pipeline's data-parallel replicas hold no shards of their own (every replica holds every stage, the
     * checkpoint one file per stage): a checkpoint of 2 replicas restores into 1 or 3, and trained on equals, bitwise,
     * an uninterrupted trainer of that many replicas built on the checkpoint's consolidated {@code model.zip}.
     */
    @Test
    void aCheckpointOfTwoReplicasRestoresIntoOneOrThree(@TempDir Path dir) throws Exception {
        List<DataSet> data = PipelineNets.batches(24, 3, 12, DataType.DOUBLE);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mlp()).ranks(2).microbatches(2)
                .dataParallel(2).stageBoundaries(4).build()) {
            trainer.fit(data.get(0));
            trainer.saveCheckpoint(dir);
        }
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(dir.resolve("model.zip").toFile(), true);
        for (int replicas : new int[] {1, 3}) {
            MultiLayerNetwork restored = mlp();
            restored.params().muli(0.5);
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(restored).ranks(2).microbatches(2)
                    .dataParallel(replicas).stageBoundaries(4).build()) {
                trainer.restoreCheckpoint(dir);
                PipelineNets.assertSameState(consolidated, restored, replicas + " replicas, right after the restore");
                trainer.fit(data.get(1));
                trainer.fit(data.get(2));
            }
            MultiLayerNetwork reference = consolidated.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(reference).ranks(2).microbatches(2)
                    .dataParallel(replicas).stageBoundaries(4).build()) {
                trainer.fit(data.get(1));
                trainer.fit(data.get(2));
            }
            PipelineNets.assertSameState(reference, restored, replicas + " replicas, trained on");
        }
    }

    @Test
    void aCheckpointOfAnotherSplitIsRefusedChangingNothing(@TempDir Path dir) throws Exception {
        List<DataSet> data = PipelineNets.batches(22, 1, 8, DataType.DOUBLE);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mlp()).ranks(2).microbatches(4)
                .stageBoundaries(4).build()) {
            trainer.fit(data.getFirst());
            trainer.saveCheckpoint(dir);
        }
        MultiLayerNetwork other = mlp();
        MultiLayerNetwork before = other.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(other).ranks(2).microbatches(4)
                .stageBoundaries(3).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.restoreCheckpoint(dir));
            assertTrue(e.getMessage().contains("does not fit this trainer's stage 0: expected worldSize=2 rank=0"), e.getMessage());
            assertTrue(e.getMessage().matches("(?s).*expected .*shard=\\[0,\\d+\\).*found .*shard=\\[0,\\d+\\).*"), e.getMessage());
        }
        PipelineNets.assertSameState(before, other, "the model after a refused restore");
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mlp()).ranks(3).microbatches(4).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.restoreCheckpoint(dir));
            assertTrue(e.getMessage().contains("has no shard-00000-of-00003.bin for stages=3"), e.getMessage());
        }
    }

    /**
     * Group mode (dp=2 x pp=2, four ranks): replica 0's ranks write their stages, rank 0 the model; every rank restores
     * every stage; each rank's model, never given to copyParametersTo, equals thread mode's uninterrupted training.
     */
    @Test
    void inGroupModeEveryRankRestoresTheWholeNetwork(@TempDir Path dir) throws Exception {
        List<DataSet> data = PipelineNets.batches(23, 4, 8, DataType.DOUBLE);
        MultiLayerNetwork initial = mlp();
        MultiLayerNetwork threads = initial.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(threads).ranks(2).dataParallel(2)
                .microbatches(2).ompThreadsPerRank(1).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
        }
        List<MultiLayerNetwork> perRank = PipelineGroupModeTest.onEveryRank(4, group -> {
            MultiLayerNetwork first = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(first).group(group).dataParallel(2)
                    .microbatches(2).ompThreadsPerRank(1).build()) {
                trainer.fit(data.get(0));
                trainer.fit(data.get(1));
                trainer.saveCheckpoint(dir);
            }
            MultiLayerNetwork mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).dataParallel(2)
                    .microbatches(2).ompThreadsPerRank(1).build()) {
                trainer.restoreCheckpoint(dir);
                trainer.fit(data.get(2));
                trainer.fit(data.get(3));
            }
            return mine;
        });
        for (int r = 0; r < perRank.size(); r++) {
            PipelineNets.assertSameState(threads, perRank.get(r), "rank " + r);
        }
    }
}
