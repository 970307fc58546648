package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * Checkpoints of DP x PP x TP ({@link PipelineTensorParallelCheckpoints}): a file per stage shard (its parameters and
 * updater state) and {@code model.zip}, the whole unsharded network; a run that dies, then resumes in a fresh trainer
 * from the newest complete checkpoint and trains on, ends bitwise equal to the uninterrupted run (parameters, Adam's
 * state, counters), in thread mode and in group mode; {@code model.zip} holds bitwise what the restored shards join
 * to; torn and foreign checkpoints are refused with the fix.
 */
class TensorParallelPipelineCheckpointTest {

    private static final int BATCHES = 6;
    private static final int[] BLOCKS = TensorParallelPipelineTest.BLOCKS;

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    /** dp 2 x pp 2 x tp 2 on threads: 4 stage shard files per checkpoint. */
    private static PipelineParallelTrainerBuilder threads(MultiLayerNetwork model) {
        return threads(model, PipelineSchedule.ONE_F_ONE_B);
    }

    private static PipelineParallelTrainerBuilder threads(MultiLayerNetwork model, PipelineSchedule schedule) {
        return PipelineParallelTrainer.builder(model).ranks(2).dataParallel(2).tensorParallel(2, BLOCKS)
                .microbatches(2).schedule(schedule).ompThreadsPerRank(1);
    }

    private static List<String> files(Path dir) throws Exception {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    /** Also under ZB-H1, whose split layers stand in the stage networks in place of the layers DL4J's updater names. */
    @ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.EnumSource(value = PipelineSchedule.class, names = {"ONE_F_ONE_B", "ZERO_BUBBLE_H1"})
    void resumedInAFreshTrainerEqualsTheUninterruptedRunBitwise(PipelineSchedule schedule, @TempDir Path root)
            throws Exception {
        List<DataSet> data = PipelineNets.batches(41, BATCHES, 8, DataType.DOUBLE);
        int epochs = 2;
        MultiLayerNetwork uninterrupted = mlp();
        try (PipelineParallelTrainer trainer = threads(uninterrupted, schedule).build()) {
            for (int e = 0; e < epochs; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }

        // one epoch and 3 batches of the second, a checkpoint every 2 steps: 6 and 8 kept; the process "dies" at step 9
        MultiLayerNetwork dead = mlp();
        try (PipelineParallelTrainer trainer = threads(dead, schedule).checkpointEvery(2, root).resumeFrom(root).build()) {
            assertNull(trainer.resumedFrom());
            trainer.fit(new BatchListIterator(data));
            trainer.fit(new BatchListIterator(data.subList(0, 3)));
        }
        Path step8 = CheckpointDirectory.stepDir(root, 8);
        // 2 stages x 2 shards; the manifest counts the files
        assertEquals(new CheckpointDirectory.Counters(8, 1, 8, 2, 4), CheckpointDirectory.verify(step8));
        assertEquals(List.of("manifest.properties", "model.zip", "shard-00000-of-00004.bin", "shard-00001-of-00004.bin",
                "shard-00002-of-00004.bin", "shard-00003-of-00004.bin"), files(step8));

        // model.zip is the whole unsharded network, bitwise what the restored shards join to
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(step8.resolve("model.zip").toFile(),
                true);
        assertFalse(TensorParallel.isSharded(consolidated), "model.zip holds the unsharded network");
        MultiLayerNetwork restored = mlp();
        try (PipelineParallelTrainer trainer = threads(restored, schedule).build()) {
            trainer.restoreCheckpoint(step8);
            assertEquals(8, trainer.resumedFrom().counters().step());
            PipelineNets.assertSameState(consolidated, restored, "restored from the shards vs model.zip");
            assertEquals(8, restored.getIterationCount());
            assertEquals(1, restored.getEpochCount());
            MultiLayerNetwork copied = mlp();
            trainer.copyParametersTo(copied); // every shard of every replica holds it
            PipelineNets.assertSameState(consolidated, copied, "copyParametersTo after the restore");
            DataParallelPipelineTest.assertReplicasBitwiseEqual(trainer, 2);
        }
        // a checkpoint belongs to the split and the tensor-parallel degree, not to the data-parallel count
        MultiLayerNetwork oneReplica = mlp();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(oneReplica).ranks(2)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            trainer.restoreCheckpoint(step8);
            PipelineNets.assertSameState(consolidated, oneReplica, "restored on dp 1");
        }

        // step 8's last stage shard truncated: torn, refused by name, and the resume takes step 6
        Path shard = step8.resolve("shard-00003-of-00004.bin");
        Files.write(shard, Arrays.copyOf(Files.readAllBytes(shard), 10));
        try (PipelineParallelTrainer trainer = threads(mlp(), schedule).build()) {
            CheckpointDirectory.TornCheckpointException e = assertThrows(CheckpointDirectory.TornCheckpointException.class,
                    () -> trainer.restoreCheckpoint(step8));
            assertTrue(e.getMessage().contains("shard-00003-of-00004.bin") && e.getMessage().contains("fix:"),
                    e.getMessage());
        }
        MultiLayerNetwork resumed = mlp();
        resumed.params().muli(0.5); // only the restore can make the runs agree
        try (PipelineParallelTrainer trainer = threads(resumed, schedule).checkpointEvery(2, root).resumeFrom(root).build()) {
            assertEquals(new CheckpointDirectory.Counters(6, 0, 6, BATCHES, 4), trainer.resumedFrom().counters());
            for (int e = resumed.getEpochCount(); e < epochs; e++) {
                trainer.fit(new BatchListIterator(data));
            }
        }
        PipelineNets.assertSameState(uninterrupted, resumed, "resumed vs uninterrupted");
        assertEquals(uninterrupted.getIterationCount(), resumed.getIterationCount(), "iterations");
        assertEquals(uninterrupted.getEpochCount(), resumed.getEpochCount(), "epochs");
    }

    @Test
    void aMissingShardAndAnotherTrainersCheckpointAreRefusedWithTheFix(@TempDir Path root) throws Exception {
        List<DataSet> data = PipelineNets.batches(7, 2, 8, DataType.DOUBLE);
        Path tpDir = root.resolve("tp");
        try (PipelineParallelTrainer trainer = threads(mlp()).build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.saveCheckpoint(tpDir);
        }
        // a pipeline of 4 stages without tensor parallelism has as many files: the files' kind refuses them
        Path plainDir = root.resolve("plain");
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mlp()).ranks(4).microbatches(2)
                .stageBoundaries(2, 4, 6).build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.saveCheckpoint(plainDir);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> trainer.restoreCheckpoint(tpDir));
            assertTrue(e.getMessage().contains("holds shards of stage=PIPELINE_TP2")
                    && e.getMessage().contains("fix:"), e.getMessage());
        }
        MultiLayerNetwork model = mlp();
        try (PipelineParallelTrainer trainer = threads(model).build()) {
            MultiLayerNetwork before = model.clone();
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> trainer.restoreCheckpoint(plainDir));
            assertTrue(e.getMessage().contains("holds shards of stage=PIPELINE (")
                    && e.getMessage().contains("reads the stage shards of a pipeline trainer with tensorParallel=2"
                    + " (PIPELINE_TP2)") && e.getMessage().contains("fix:"), e.getMessage());
            // a shard file gone: the manifest refuses the directory before anything is read
            Files.delete(tpDir.resolve("shard-00001-of-00004.bin"));
            CheckpointDirectory.TornCheckpointException torn = assertThrows(
                    CheckpointDirectory.TornCheckpointException.class, () -> trainer.restoreCheckpoint(tpDir));
            assertTrue(torn.getMessage().contains("shard-00001-of-00004.bin"), torn.getMessage());
            PipelineNets.assertSameState(before, model, "the model as it was after the refusals");
            trainer.fit(data.getFirst()); // and the trainer still trains
        }
        // another split of the same degree: as many files, other stage ranges
        Path balanced = root.resolve("balanced");
        try (PipelineParallelTrainer saver = threads(mlp()).build()) {
            saver.saveCheckpoint(balanced);
            int other = saver.split().firstLayer(1) == 4 ? 6 : 4;
            try (PipelineParallelTrainer trainer = threads(mlp()).stageBoundaries(other).build()) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> trainer.restoreCheckpoint(balanced));
                assertTrue(e.getMessage().contains("does not fit this trainer's stage shard 0: expected worldSize=4"
                        + " rank=0") && e.getMessage().contains("fix:"), e.getMessage());
            }
        }
    }

    /**
     * Group mode (one trainer per rank of a dp x pp 2 x tp 2 group, the ranks threads of one JVM as one process per
     * rank runs them): replica 0's ranks each write their own stage shard, rank 0 model.zip; a group that dies after 3
     * steps resumes in fresh trainers from the step-2 checkpoint (every replica's ranks reading their shards) and ends,
     * on every rank, bitwise as thread mode's uninterrupted run.
     */
    @ParameterizedTest(name = "dp={0}")
    @ValueSource(ints = {1, 2})
    void groupModeResumesEveryRankBitwiseAsThreadModeUninterrupted(int dp, @TempDir Path root) throws Exception {
        List<DataSet> data = PipelineNets.batches(43, BATCHES, 8, DataType.DOUBLE);
        MultiLayerNetwork uninterrupted = mlp();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(uninterrupted).ranks(2).dataParallel(dp)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            trainer.fit(new BatchListIterator(data));
        }
        int world = dp * 4;
        TensorParallelPipelineGroupModeTest.onEveryRank(world, group -> {
            MultiLayerNetwork mine = mlp();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp)
                    .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).checkpointEvery(2, root).build()) {
                trainer.fit(new BatchListIterator(data.subList(0, 3))); // "dies" after step 3
            }
            return null;
        });
        assertEquals(new CheckpointDirectory.Counters(2, 0, 2, 2, 4),
                CheckpointDirectory.verify(CheckpointDirectory.stepDir(root, 2)));
        List<MultiLayerNetwork> resumed = TensorParallelPipelineGroupModeTest.onEveryRank(world, group -> {
            MultiLayerNetwork mine = mlp();
            mine.params().muli(0.5); // only the restore can make the runs agree
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp)
                    .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).checkpointEvery(2, root)
                    .resumeFrom(root).build()) {
                assertEquals(2, trainer.resumedFrom().counters().step(), "rank " + group.rank());
                for (int e = mine.getEpochCount(); e < 1; e++) {
                    trainer.fit(new BatchListIterator(data)); // skips the 2 batches the checkpoint had trained
                }
            }
            return mine;
        });
        for (int r = 0; r < resumed.size(); r++) {
            PipelineNets.assertSameState(uninterrupted, resumed.get(r), "rank " + r + " resumed vs uninterrupted");
        }

        // one stage shard of the newest checkpoint (step 6) damaged: every rank refuses it, its model as it was
        Path step6 = CheckpointDirectory.stepDir(root, 6);
        Path shard = step6.resolve("shard-00002-of-00004.bin");
        byte[] bytes = Files.readAllBytes(shard);
        bytes[bytes.length / 2] ^= 1;
        Files.write(shard, bytes);
        List<String> refusals = TensorParallelPipelineGroupModeTest.onEveryRank(world, group -> {
            MultiLayerNetwork mine = mlp();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp)
                    .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
                CheckpointDirectory.TornCheckpointException e = assertThrows(
                        CheckpointDirectory.TornCheckpointException.class, () -> trainer.restoreCheckpoint(step6));
                PipelineNets.assertSameState(mlp(), mine, "rank " + group.rank() + ": the model as it was");
                return e.getMessage();
            }
        });
        refusals.forEach(m -> assertTrue(m.contains("shard-00002-of-00004.bin") && m.contains("fix:"), m));
    }
}
