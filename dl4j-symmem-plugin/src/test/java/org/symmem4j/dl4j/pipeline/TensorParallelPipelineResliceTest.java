package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;

/**
 * A DP x PP x TP pipeline checkpoint ({@link PipelineTensorParallelCheckpoints}) written at tensor-parallel degree T
 * resumes at degree U (same stage split; the data-parallel count may change too): each stage's T shards are re-sliced
 * onto U ({@code TensorParallelReslice}, the wrapper's re-slice), so right after the restore the trainer holds
 * bitwise {@code model.zip} (parameters, Adam's state, counters), and training on ends bitwise as degree U's pipeline
 * built on the consolidated {@code model.zip} (fp64). Another stage split is refused with the fix.
 */
class TensorParallelPipelineResliceTest {

    private static final int[] BLOCKS = TensorParallelPipelineTest.BLOCKS;

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    private static PipelineParallelTrainerBuilder trainer(MultiLayerNetwork model, int dp, int tp) {
        return trainer(model, dp, tp, PipelineSchedule.ONE_F_ONE_B);
    }

    private static PipelineParallelTrainerBuilder trainer(MultiLayerNetwork model, int dp, int tp,
                                                          PipelineSchedule schedule) {
        return PipelineParallelTrainer.builder(model).ranks(2).dataParallel(dp).tensorParallel(tp, BLOCKS)
                .microbatches(2).schedule(schedule).ompThreadsPerRank(1);
    }

    /** Also under ZB-H1, whose split layers stand in the stage networks in place of DL4J's. */
    @ParameterizedTest(name = "dp {0} x tp {1} -> dp {2} x tp {3}, {4}")
    @CsvSource({"1, 4, 2, 2, ONE_F_ONE_B", "2, 2, 1, 4, ONE_F_ONE_B", "1, 4, 2, 2, ZERO_BUBBLE_H1"})
    void resumedOnAnotherDegreeEqualsThatDegreeRunFromTheConsolidatedStepBitwise(int dpFrom, int tpFrom, int dpTo,
                                                                                 int tpTo, PipelineSchedule schedule,
                                                                                 @TempDir Path root)
            throws Exception {
        List<DataSet> data = PipelineNets.batches(47, 6, 8, DataType.DOUBLE);
        Path dir = root.resolve("step3");
        try (PipelineParallelTrainer trainer = trainer(mlp(), dpFrom, tpFrom, schedule).build()) {
            trainer.fit(new BatchListIterator(data.subList(0, 3)));
            trainer.saveCheckpoint(dir);
        }
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(dir.resolve("model.zip").toFile(),
                true);
        // the reference: degree U's pipeline built on the consolidated step, trained on
        MultiLayerNetwork reference = consolidated.clone();
        try (PipelineParallelTrainer trainer = trainer(reference, dpTo, tpTo, schedule).build()) {
            trainer.fit(new BatchListIterator(data.subList(3, 6)));
        }

        MultiLayerNetwork resumed = mlp();
        resumed.params().muli(0.5); // only the restore can make the runs agree
        try (PipelineParallelTrainer trainer = trainer(resumed, dpTo, tpTo, schedule).build()) {
            trainer.restoreCheckpoint(dir);
            assertEquals(3, trainer.resumedFrom().counters().step());
            PipelineNets.assertSameState(consolidated, resumed, "re-sliced onto tp " + tpTo + " vs model.zip");
            assertEquals(3, resumed.getIterationCount());
            DataParallelPipelineTest.assertReplicasBitwiseEqual(trainer, dpTo);
            trainer.fit(new BatchListIterator(data.subList(3, 6)));
        }
        PipelineNets.assertSameState(reference, resumed, "resumed on tp " + tpTo + " vs tp " + tpTo
                + " from model.zip");
        assertEquals(reference.getIterationCount(), resumed.getIterationCount(), "iterations");
    }

    /**
     * Group mode (one trainer per rank of a pp 2 x tp 2 group, the ranks threads of one JVM as one process per rank
     * runs them): a thread-mode checkpoint of tp 4 (group mode writes the same files) re-sliced on every rank, each
     * reading every old shard of the stages it holds: every rank's model is {@code model.zip} bitwise, and after three
     * more steps bitwise as thread mode's tp 2 run from {@code model.zip}.
     */
    @Test
    void groupModeReslicesOnEveryRankBitwise(@TempDir Path root) throws Exception {
        List<DataSet> data = PipelineNets.batches(53, 6, 8, DataType.DOUBLE);
        Path dir = root.resolve("step3");
        try (PipelineParallelTrainer trainer = trainer(mlp(), 1, 4).build()) {
            trainer.fit(new BatchListIterator(data.subList(0, 3)));
            trainer.saveCheckpoint(dir);
        }
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(dir.resolve("model.zip").toFile(),
                true);
        MultiLayerNetwork reference = consolidated.clone();
        try (PipelineParallelTrainer trainer = trainer(reference, 1, 2).build()) {
            trainer.fit(new BatchListIterator(data.subList(3, 6)));
        }
        List<MultiLayerNetwork> resumed = TensorParallelPipelineGroupModeTest.onEveryRank(4, group -> {
            MultiLayerNetwork mine = mlp();
            mine.params().muli(0.5); // only the restore can make the runs agree
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group)
                    .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
                trainer.restoreCheckpoint(dir);
                PipelineNets.assertSameState(consolidated, mine, "rank " + group.rank() + " re-sliced vs model.zip");
                trainer.fit(new BatchListIterator(data.subList(3, 6)));
            }
            return mine;
        });
        for (int r = 0; r < resumed.size(); r++) {
            PipelineNets.assertSameState(reference, resumed.get(r), "rank " + r + " resumed vs tp 2 from model.zip");
        }
    }

    @Test
    void anotherStageSplitOfAnotherDegreeIsRefusedWithTheFixAndChangesNothing(@TempDir Path root) throws Exception {
        Path dir = root.resolve("tp4");
        int other;
        try (PipelineParallelTrainer trainer = trainer(mlp(), 1, 4).build()) {
            trainer.fit(PipelineNets.batches(5, 1, 8, DataType.DOUBLE).getFirst());
            trainer.saveCheckpoint(dir);
            other = trainer.split().firstLayer(1) == 4 ? 6 : 4;
        }
        MultiLayerNetwork model = mlp();
        try (PipelineParallelTrainer trainer = trainer(model, 1, 2).stageBoundaries(other).build()) {
            MultiLayerNetwork before = model.clone();
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> trainer.restoreCheckpoint(dir));
            assertTrue(e.getMessage().contains("does not fit this trainer's stage shard 0: expected worldSize=8")
                    && e.getMessage().contains("fix:"), e.getMessage());
            PipelineNets.assertSameState(before, model, "the model as it was after the refusal");
            trainer.fit(PipelineNets.batches(6, 1, 8, DataType.DOUBLE).getFirst()); // and the trainer still trains
        }
    }
}
