package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.dropout.Dropout;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.tensor.ColumnParallelDenseLayer;
import org.symmem4j.dl4j.tensor.RowParallelDenseLayer;
import org.symmem4j.dl4j.tensor.TensorParallel;

/**
 * DP x PP x TP ({@link PipelineParallelTrainerBuilder#tensorParallel}): the stages of a pipeline hold Megatron blocks
 * split over the {@code tp} sub-group of a {@code dp x pp x tp} mesh, and a step equals plain {@code fit} of the
 * unsharded network on the whole batch (fp64, {@link PipelineEquivalenceTest}'s tolerance), as
 * {@link DataParallelPipelineTest} checks DP x PP: parameters, loss, updater state after every step; the replicas of
 * every shard bitwise equal, the replicated layers bitwise equal over the tensor-parallel ranks. And what cannot train
 * so is refused at {@code build()}, naming it.
 */
class TensorParallelPipelineTest {

    static final int STEPS = DataParallelPipelineTest.STEPS;
    static final int BATCH = DataParallelPipelineTest.BATCH;
    /** Blocks of {@link PipelineNets#mlp}: layers 0-1 (16-32-48), 2-3 (48-64-48), 4-5 (48-32-24); 6 dense, 7 output. */
    static final int[] BLOCKS = {0, 2, 4};

    static Stream<Arguments> cases() {
        return Stream.of(
                // dp, pp, tp, schedule, stagesPerRank, microbatches, updater, l2
                Arguments.of(2, 2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 2, "adam", 1e-3),
                Arguments.of(2, 2, 2, PipelineSchedule.GPIPE, 1, 2, "sgd", 0.0),
                Arguments.of(1, 2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 4, "adam", 1e-3),
                Arguments.of(1, 2, 2, PipelineSchedule.GPIPE, 1, 4, "adam", 0.0),
                Arguments.of(1, 2, 2, PipelineSchedule.INTERLEAVED, 2, 4, "sgd", 1e-3),
                Arguments.of(2, 2, 2, PipelineSchedule.ZERO_BUBBLE_H1, 1, 2, "adam", 1e-3),
                Arguments.of(1, 2, 2, PipelineSchedule.ZERO_BUBBLE_H1, 1, 4, "sgd", 0.0));
    }

    @ParameterizedTest(name = "dp={0} pp={1} tp={2} {3} v={4} m={5} {6} l2={7}")
    @MethodSource("cases")
    void matchesPlainFitOfTheUnshardedNetwork(int dp, int pp, int tp, PipelineSchedule schedule, int stagesPerRank,
                                              int microbatches, String updater, double l2) {
        DataType dtype = DataType.DOUBLE;
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater(updater), l2, dtype);
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork model = base.clone();
        MultiLayerNetwork copied = base.clone();
        List<DataSet> data = PipelineNets.batches(11, STEPS, BATCH, dtype);
        double tol = PipelineEquivalenceTest.tolerance(dtype, updater);
        double worst = 0;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(model).ranks(pp).dataParallel(dp)
                .tensorParallel(tp, BLOCKS).microbatches(microbatches).schedule(schedule, stagesPerRank).build()) {
            assertEquals(tp, trainer.tensorParallel());
            assertBlocksInsideStages(trainer.split());
            for (int s = 0; s < STEPS; s++) {
                if (s == 2) {
                    // a model changed between fits is taken by every shard of every replica
                    model.params().muli(0.5);
                    reference.params().muli(0.5);
                }
                trainer.fit(data.get(s));
                reference.fit(data.get(s));
                double diff = Nets.maxRelativeDifference(model.params(), reference.params());
                worst = Math.max(worst, diff);
                assertTrue(diff <= tol, "step " + s + ": the model's parameters differ from plain fit of the unsharded"
                        + " network on the whole batch by " + diff + " > " + tol);
                if (reference.getUpdater().getStateViewArray() != null) {
                    double state = Nets.maxRelativeDifference(model.getUpdater().getStateViewArray(),
                            reference.getUpdater().getStateViewArray());
                    assertTrue(state <= tol, "step " + s + ": updater state differs by " + state);
                }
                double loss = trainer.lastStep().loss();
                assertTrue(Math.abs(loss - reference.score()) / (1 + Math.abs(reference.score()))
                        <= PipelineEquivalenceTest.lossTolerance(dtype), "step " + s + ": loss " + loss + " vs score "
                        + reference.score());
                assertEquals(BATCH, trainer.lastStep().examples());
                DataParallelPipelineTest.assertReplicasBitwiseEqual(trainer, dp);
                assertReplicatedLayersBitwiseEqualOverTensorParallelRanks(trainer, tp);
            }
            assertEquals(STEPS, model.getIterationCount());
            assertEquals(pp, trainer.lastStep().timelines().size(), "one timeline per pipeline rank");
            trainer.copyParametersTo(copied);
            if (model.getUpdater().getStateViewArray() != null) {
                PipelineNets.assertSameState(model, copied, "copyParametersTo");
            } else {
                assertTrue(PipelineNets.bitwiseEqual(model.params(), copied.params()), "copyParametersTo: parameters");
            }
            long shards = 0;
            for (int t = 0; t < tp; t++) {
                shards += TensorParallel.shard(base, t, tp, BLOCKS).numParams();
            }
            assertEquals(shards, trainer.parametersHeld(), "every shard of one replica, replicated parameters in each");
        }
        System.out.printf("dp=%d pp=%d tp=%d %s v=%d m=%d %s l2=%s: params %.3g%n", dp, pp, tp, schedule, stagesPerRank,
                microbatches, updater, l2, worst);
    }

    /**
     * ZB-H1 with tensor-parallel stages: the blocks' column- and row-parallel layers split their backward as the other
     * dense and output layers do (their tp all-reduces in the forward and input-gradient actions, the weight-gradient
     * action local), so {@code unsplitBackwardLayers} is empty; every tp rank of a stage runs the same actions in the
     * same order. Same arithmetic in the same order as 1F1B (and as the whole-backward fallback of the blocks, which
     * equalled 1F1B bitwise): bitwise equal parameters, updater state and losses, on dp x pp x tp and pp x tp.
     */
    @ParameterizedTest(name = "dp={0} pp={1} tp={2} m={3}")
    @org.junit.jupiter.params.provider.CsvSource({"2, 2, 2, 4", "1, 4, 2, 8"})
    void zeroBubbleEqualsOneFOneBBitwise(int dp, int pp, int tp, int microbatches) {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
        List<DataSet> data = PipelineNets.batches(13, STEPS, BATCH, DataType.DOUBLE);
        MultiLayerNetwork zb = base.clone();
        MultiLayerNetwork oneFOneB = base.clone();
        List<Double> zbLosses = new java.util.ArrayList<>();
        List<Double> oneFOneBLosses = new java.util.ArrayList<>();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(zb).ranks(pp).dataParallel(dp)
                .tensorParallel(tp, BLOCKS).microbatches(microbatches).schedule(PipelineSchedule.ZERO_BUBBLE_H1).build()) {
            assertEquals(List.of(), trainer.unsplitBackwardLayers(), "every layer splits, the blocks' too");
            for (DataSet batch : data) {
                trainer.fit(batch);
                zbLosses.add(trainer.lastStep().loss());
                DataParallelPipelineTest.assertReplicasBitwiseEqual(trainer, dp);
                assertReplicatedLayersBitwiseEqualOverTensorParallelRanks(trainer, tp);
            }
            // the W actions compute every layer's dW and db on every stage of every tp rank: the blocks' 6
            // column- and row-parallel layers (split from the start, in place) and layers 6 (dense) and 7 (output)
            for (int t = 0; t < tp; t++) {
                int split = 0;
                int blocks = 0;
                for (Dl4jPipelineStage stage : trainer.replicaStages(0, t)) {
                    assertEquals((long) STEPS * microbatches, stage.weightPasses(), "tp rank " + t + ": W actions");
                    for (org.deeplearning4j.nn.api.Layer layer : stage.network().getLayers()) {
                        boolean block = layer.conf().getLayer() instanceof org.symmem4j.dl4j.tensor.TensorParallelDenseLayer;
                        boolean splits = layer instanceof org.symmem4j.dl4j.layers.Splittable;
                        assertTrue(splits, "tp rank " + t + ": a layer did not split: " + layer);
                        assertTrue(!block || layer instanceof org.symmem4j.dl4j.tensor.TensorParallelDenseLayerImpl,
                                "tp rank " + t + ": a block layer was replaced: " + layer);
                        split += splits ? 1 : 0;
                        blocks += block ? 1 : 0;
                    }
                }
                assertEquals(2 * BLOCKS.length, blocks, "tp rank " + t + ": the blocks' layers");
                assertEquals(2 * BLOCKS.length + 2, split, "tp rank " + t + ": the blocks' layers and layers 6, 7 split");
            }
        }
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(oneFOneB).ranks(pp).dataParallel(dp)
                .tensorParallel(tp, BLOCKS).microbatches(microbatches).schedule(PipelineSchedule.ONE_F_ONE_B).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                oneFOneBLosses.add(trainer.lastStep().loss());
            }
        }
        PipelineNets.assertSameState(oneFOneB, zb, "ZB-H1 against 1F1B, dp=" + dp + " pp=" + pp + " tp=" + tp);
        assertEquals(oneFOneBLosses, zbLosses, "every step's loss, bitwise (as doubles)");
    }

    /**
     * The split of a block's layers on its own, on 2 tp ranks (a shard of {@link PipelineNets#mlp}, blocks 0-1, 2-3,
     * 4-5, attached to the group): deferring, DL4J's backward leaves every weight and bias gradient view untouched
     * (NaN-filled) and issues exactly the whole backward's tp sums; the weight halves then issue none and write the
     * whole backward's gradient bit for bit, on every rank. Fails if a weight half held a collective or the input half
     * missed one.
     */
    @Test
    void blockLayersSplitWithTheirSumsInTheInputHalfAndNoneInTheWeightHalf() {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("adam"), 0.0, DataType.DOUBLE);
        DataSet batch = PipelineNets.batches(5, 1, 8, DataType.DOUBLE).getFirst();
        List<String> failures = org.symmem4j.parallel.group.InJvmWorld.runOnEveryRank(2,
                org.symmem4j.parallel.GroupOptions.defaults().withTimeout(java.time.Duration.ofSeconds(60)), group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(base, group.rank(), 2, BLOCKS);
                    // as in a stage: what the weight half keeps must outlive the backward's workspaces
                    mine.getLayerWiseConfigurations().setTrainingWorkspaceMode(
                            org.deeplearning4j.nn.conf.WorkspaceMode.NONE);
                    try (org.symmem4j.parallel.Communicator c = org.symmem4j.parallel.Communicator.create(group)) {
                        TensorParallel.attach(mine, c);
                        org.symmem4j.dl4j.nd4j.ArrayCollectives comm =
                                ((org.symmem4j.dl4j.tensor.TensorParallelDenseLayerImpl) mine.getLayer(0)).comm();
                        mine.setInput(batch.getFeatures());
                        mine.setLabels(batch.getLabels());
                        long before = comm.sums();
                        mine.computeGradientAndScore();
                        long whole = comm.sums() - before;
                        org.nd4j.linalg.api.ndarray.INDArray expected = mine.getGradientsViewArray().dup();

                        org.deeplearning4j.nn.api.Layer[] layers = mine.getLayers();
                        List<org.symmem4j.dl4j.layers.Splittable> splits = new java.util.ArrayList<>();
                        for (int i = 0; i < layers.length; i++) {
                            org.deeplearning4j.nn.api.Layer split = SplitBackward.splitOf(layers[i]);
                            if (split == null) {
                                return "rank " + group.rank() + ": layer " + i + " does not split";
                            }
                            if (i < 6 && split != layers[i]) {
                                return "rank " + group.rank() + ": block layer " + i + " was replaced";
                            }
                            layers[i] = split;
                            splits.add((org.symmem4j.dl4j.layers.Splittable) split);
                            splits.getLast().defer(true);
                        }
                        mine.getGradientsViewArray().assign(Double.NaN);
                        mine.setInput(batch.getFeatures());
                        mine.setLabels(batch.getLabels());
                        before = comm.sums();
                        mine.computeGradientAndScore();
                        long inputHalf = comm.sums() - before;
                        for (double v : mine.getGradientsViewArray().toDoubleVector()) {
                            if (!Double.isNaN(v)) {
                                return "rank " + group.rank() + ": the input half wrote a weight gradient: " + v;
                            }
                        }
                        before = comm.sums();
                        for (org.symmem4j.dl4j.layers.Splittable s : splits) {
                            s.weightGradient(s.takeDeferred());
                            s.defer(false);
                        }
                        long weightHalf = comm.sums() - before;
                        if (whole == 0 || inputHalf != whole || weightHalf != 0) {
                            return "rank " + group.rank() + ": tp sums whole=" + whole + " input half=" + inputHalf
                                    + " weight half=" + weightHalf;
                        }
                        if (!PipelineNets.bitwiseEqual(expected, mine.getGradientsViewArray())) {
                            return "rank " + group.rank() + ": weight halves' gradient differs from the whole backward's";
                        }
                        return "";
                    }
                });
        assertEquals(List.of("", ""), failures);
    }

    /** No stage starts at a block's row-parallel layer: the trainer's own split keeps blocks whole. */
    private static void assertBlocksInsideStages(PipelineStageSplit split) {
        for (int s = 1; s < split.stageCount(); s++) {
            for (int c : BLOCKS) {
                assertTrue(split.firstLayer(s) != c + 1, "stage " + s + " starts inside block " + c + ": " + split);
            }
        }
    }

    /**
     * Every tensor-parallel rank holds the replicated parameters (layers outside the blocks, the row-parallel layers'
     * bias) bit for bit alike, and the blocks' column-parallel shards differ (each holds its own columns).
     */
    private static void assertReplicatedLayersBitwiseEqualOverTensorParallelRanks(PipelineParallelTrainer trainer, int tp) {
        List<Dl4jPipelineStage> first = trainer.replicaStages(0, 0);
        for (int t = 1; t < tp; t++) {
            List<Dl4jPipelineStage> other = trainer.replicaStages(0, t);
            for (int s = 0; s < first.size(); s++) {
                MultiLayerNetwork a = first.get(s).network();
                MultiLayerNetwork b = other.get(s).network();
                for (int l = 0; l < a.getnLayers(); l++) {
                    Object conf = a.getLayer(l).conf().getLayer();
                    String where = "tp rank " + t + " stage " + s + " layer " + l;
                    if (conf instanceof ColumnParallelDenseLayer) {
                        assertTrue(!PipelineNets.bitwiseEqual(a.getLayer(l).getParam("W").ravel(), b.getLayer(l).getParam("W").ravel()),
                                where + ": column-parallel shards should hold different columns");
                    } else if (conf instanceof RowParallelDenseLayer) {
                        assertTrue(PipelineNets.bitwiseEqual(a.getLayer(l).getParam("b").ravel(), b.getLayer(l).getParam("b").ravel()),
                                where + ": row-parallel bias");
                    } else if (a.getLayer(l).numParams() > 0) {
                        assertTrue(PipelineNets.bitwiseEqual(a.getLayer(l).params().ravel(), b.getLayer(l).params().ravel()),
                                where + ": replicated parameters");
                    }
                }
            }
        }
    }

    @Test
    void aStageBoundaryInsideABlockIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(mlp()).ranks(2).tensorParallel(2, BLOCKS).microbatches(2).stageBoundaries(3).build());
        assertTrue(e.getMessage().contains("stage 1 starts at layer 3, inside the tensor-parallel block of layers 2-3")
                && e.getMessage().contains("fix: start the stage at layer 2 or 4"), e.getMessage());
    }

    @Test
    void moreStagesThanTheBlocksLeaveAreRefused() {
        // 8 layers, blocks 0-1, 2-3, 4-5: stages can start at layers 2, 4, 6 and 7 only
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(mlp()).ranks(6).tensorParallel(2, BLOCKS).microbatches(6).build());
        assertTrue(e.getMessage().contains("stages=6 expected at most 5"), e.getMessage());
    }

    @Test
    void aWidthNotDivisibleByTheTensorParallelSizeIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(mlp()).ranks(2).tensorParallel(3, 0).microbatches(2).build());
        assertTrue(e.getMessage().contains("layer 0 has nOut=32, not divisible by the tensor-parallel size 3"),
                e.getMessage());
    }

    @Test
    void aBlockThatIsNotTwoDenseLayersIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(mlp()).ranks(2).tensorParallel(2, 6).microbatches(2).build());
        assertTrue(e.getMessage().contains("layer 7 is a OutputLayer: a tensor-parallel block is two DenseLayers"),
                e.getMessage());
    }

    @Test
    void aBlockThatCannotSplitExactlyIsRefused() {
        MultiLayerNetwork net = mlp();
        net.getLayerWiseConfigurations().getConf(2).getLayer().setIDropout(new Dropout(0.8));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(net).ranks(2).tensorParallel(2, BLOCKS).microbatches(2).build());
        assertTrue(e.getMessage().contains("has dropout on its input (each rank would draw its own mask)"), e.getMessage());
    }

    @Test
    void anAlreadyShardedNetworkAndAMissingBlockAreRefused() {
        MultiLayerNetwork sharded = TensorParallel.shard(mlp(), 0, 2, 0);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(sharded).ranks(2).microbatches(2).build());
        assertTrue(e.getMessage().contains("the network already holds tensor-parallel layers"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(mlp()).tensorParallel(2));
        assertTrue(e.getMessage().contains("expected at least one column-parallel layer"), e.getMessage());
    }

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("sgd"), 0, DataType.DOUBLE);
    }
}
