package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * Checkpoints of a pipeline with ZeRO stage 1 on its dp axis ({@code checkpointEvery}, {@code resumeFrom}): each
 * replica's block of each stage's updater state is a shard file of its own ({@code stages x dp} files) beside the
 * consolidated {@code model.zip}, and a run that "dies", resumes in a fresh trainer from the newest complete checkpoint
 * and trains on equals the uninterrupted unsharded run bitwise (parameters, updater state, counters), on threads and in
 * group mode (one trainer per rank). A checkpoint is read in the cut it was saved in: a trainer with or without
 * sharding resumes from either.
 */
class PipelineZeroCheckpointTest {

    private static final int BATCHES = 4;
    private static final int EPOCHS = 2;
    private static final int DP = 2;
    private static final int PP = 2;
    private static final int[] WIDTHS = {10, 13, 11, 9, 7, 3};

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE, WIDTHS);
    }

    private static List<DataSet> data() {
        return PipelineNets.batches(43, BATCHES, 16, WIDTHS[0], WIDTHS[WIDTHS.length - 1], DataType.DOUBLE);
    }

    private static PipelineParallelTrainerBuilder sharded(MultiLayerNetwork model) {
        return sharded(model, ZeroStage.OPTIMIZER_STATE);
    }

    private static PipelineParallelTrainerBuilder sharded(MultiLayerNetwork model, ZeroStage stage) {
        return PipelineParallelTrainer.builder(model).dataParallel(DP).microbatches(2).ompThreadsPerRank(1)
                .sharding(stage);
    }

    /** The reference: the unsharded pipeline, two epochs uninterrupted. */
    private static MultiLayerNetwork uninterrupted(List<DataSet> data) {
        MultiLayerNetwork model = mlp();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(model).ranks(PP).dataParallel(DP)
                .microbatches(2).ompThreadsPerRank(1).build()) {
            for (int e = 0; e < EPOCHS; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }
        return model;
    }

    /** One epoch and one batch of the next, a checkpoint every 2 steps (2 and 4 taken); then the process "dies". */
    private static void trainAndDie(PipelineParallelTrainerBuilder builder, List<DataSet> data) {
        try (PipelineParallelTrainer trainer = builder.build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.fit(new BatchListIterator(data.subList(0, 1)));
        }
    }

    /** A fresh trainer on a model the restore alone can make right, resumed, trained to the end of the run. */
    private static MultiLayerNetwork resume(PipelineParallelTrainerBuilder builder, MultiLayerNetwork model,
                                            List<DataSet> data) {
        try (PipelineParallelTrainer trainer = builder.build()) {
            assertEquals(new CheckpointDirectory.Counters(4, 0, 4, BATCHES, PP * DP),
                    trainer.resumedFrom().counters(), "resumed from step 4, the newest checkpoint");
            for (int e = model.getEpochCount(); e < EPOCHS; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }
        return model;
    }

    private static MultiLayerNetwork halved() {
        MultiLayerNetwork m = mlp();
        m.params().muli(0.5);
        return m;
    }

    @org.junit.jupiter.params.ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.EnumSource(value = ZeroStage.class, names = {"OPTIMIZER_STATE", "GRADIENTS", "PARAMETERS"})
    void resumedOnThreadsFromEachReplicasBlockEqualsTheUninterruptedRun(ZeroStage stage, @TempDir Path root)
            throws Exception {
        List<DataSet> data = data();
        MultiLayerNetwork reference = uninterrupted(data);
        trainAndDie(sharded(mlp(), stage).ranks(PP).checkpointEvery(2, root).resumeFrom(root), data);

        Path step4 = CheckpointDirectory.stepDir(root, 4);
        assertEquals(new CheckpointDirectory.Counters(4, 0, 4, BATCHES, PP * DP), CheckpointDirectory.verify(step4));
        try (Stream<Path> files = Files.list(step4)) {
            assertEquals(List.of("shard-00000-of-00004.bin", "shard-00001-of-00004.bin", "shard-00002-of-00004.bin",
                    "shard-00003-of-00004.bin"), files.map(f -> f.getFileName().toString())
                    .filter(n -> n.startsWith("shard-")).sorted().toList(), "a file per stage and replica");
        }
        // model.zip: the whole network, its state gathered from the blocks
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                new File(step4.resolve("model.zip").toString()), true);
        assertEquals(mlp().getUpdater(true).getStateViewArray().length(),
                consolidated.getUpdater().getStateViewArray().length(), "model.zip: the whole updater state");

        // the blocks are read in the cut they were saved in: a trainer without sharding resumes from them too
        MultiLayerNetwork unsharded = halved();
        resume(PipelineParallelTrainer.builder(unsharded).ranks(PP).dataParallel(DP).microbatches(2)
                .ompThreadsPerRank(1).resumeFrom(root), unsharded, data);
        PipelineNets.assertSameState(reference, unsharded, "an unsharded trainer resumed from the blocks");

        MultiLayerNetwork resumed = halved();
        resume(sharded(resumed, stage).ranks(PP).checkpointEvery(2, root).resumeFrom(root), resumed, data);
        PipelineNets.assertSameState(reference, resumed, "resumed on threads vs the uninterrupted unsharded run");
    }

    @Test
    void aShardedTrainerResumesFromAnUnshardedCheckpoint(@TempDir Path root) {
        List<DataSet> data = data();
        MultiLayerNetwork reference = uninterrupted(data);
        trainAndDie(PipelineParallelTrainer.builder(mlp()).ranks(PP).dataParallel(DP).microbatches(2)
                .ompThreadsPerRank(1).checkpointEvery(2, root), data);
        MultiLayerNetwork resumed = halved();
        try (PipelineParallelTrainer trainer = sharded(resumed).ranks(PP).resumeFrom(root).build()) {
            assertEquals(4, trainer.resumedFrom().counters().step(), "resumed from step 4");
            for (int e = resumed.getEpochCount(); e < EPOCHS; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }
        PipelineNets.assertSameState(reference, resumed, "a sharded trainer resumed from a file per stage");
    }

    @org.junit.jupiter.params.ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.EnumSource(value = ZeroStage.class, names = {"OPTIMIZER_STATE", "PARAMETERS"})
    void resumedInGroupModeFromEachRanksBlocksEqualsTheUninterruptedRun(ZeroStage stage, @TempDir Path root)
            throws Exception {
        List<DataSet> data = data();
        MultiLayerNetwork reference = uninterrupted(data);
        PipelineGroupModeTest.onEveryRank(DP * PP, group -> {
            trainAndDie(sharded(mlp(), stage).group(group).checkpointEvery(2, root).resumeFrom(root), data);
            return null;
        });
        // every rank wrote its own blocks: rank (d, p) stage p's block d, the file p * dp + d
        assertTrue(Files.isRegularFile(CheckpointDirectory.stepDir(root, 4).resolve("shard-00003-of-00004.bin")));
        List<MultiLayerNetwork> resumed = PipelineGroupModeTest.onEveryRank(DP * PP, group -> {
            MultiLayerNetwork mine = halved();
            return resume(sharded(mine, stage).group(group).checkpointEvery(2, root).resumeFrom(root), mine, data);
        });
        for (int r = 0; r < resumed.size(); r++) {
            PipelineNets.assertSameState(reference, resumed.get(r), "rank " + r + " resumed in group mode");
        }
    }
}
