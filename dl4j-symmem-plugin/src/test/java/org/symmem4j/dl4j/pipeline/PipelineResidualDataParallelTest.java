package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.SyncBatchNormLayer;
import org.symmem4j.dl4j.ZeroStage;

/**
 * The pipeline's data-parallel axis on graphs with residual connections (stages run their part of the graph,
 * {@link GraphStagePasses}): ZeRO on the dp axis is bitwise the unsharded DP x PP pipeline of the same graph, stage 3
 * included (each replica keeps 1/dp of its stages' parameters, gradients and updater state between steps), on rank
 * threads and on the ranks of a group; synchronized BatchNorm on a residual graph with BatchNormalization in both
 * stages equals DL4J's own graph passes on the merged microbatches (fp64, to 1e-12), on threads, and the ranks of a
 * group equal the threads bitwise. fp64 throughout.
 */
class PipelineResidualDataParallelTest {

    static final int DP = 2;
    static final int PP = 2;
    static final int STEPS = 3;
    static final int BATCH = 16;
    static final double LEARNING_RATE = 0.1;
    static final double TOLERANCE = 1e-12;

    /** What a trainer left: the graph copied out after every step, every step's loss, and the model bytes it held. */
    record Run(List<ComputationGraph> afterStep, List<Double> losses, long bytesHeld) {
    }

    /** Trains {@code builder}'s trainer one batch per step, copying the graph out (collective in group mode) after each. */
    static Run train(PipelineParallelTrainerBuilder builder, List<DataSet> data, ComputationGraph template) {
        List<ComputationGraph> after = new ArrayList<>();
        List<Double> losses = new ArrayList<>();
        try (PipelineParallelTrainer trainer = builder.ompThreadsPerRank(1).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                losses.add(trainer.lastStep().loss());
                ComputationGraph copy = template.clone();
                trainer.copyParametersTo(copy);
                after.add(copy);
            }
            return new Run(after, losses, trainer.modelBytesHeld());
        }
    }

    static void assertSameRun(Run expected, Run actual, String what) {
        assertEquals(expected.losses(), actual.losses(), what + ": every step's loss, bitwise (as doubles)");
        for (int s = 0; s < expected.afterStep().size(); s++) {
            ComputationGraph e = expected.afterStep().get(s);
            ComputationGraph a = actual.afterStep().get(s);
            assertTrue(PipelineNets.bitwiseEqual(e.params(), a.params()), what + " step " + s + ": parameters");
            org.nd4j.linalg.api.ndarray.INDArray state = e.getUpdater().getStateViewArray(); // null for Sgd: no state
            assertTrue(state == null ? a.getUpdater().getStateViewArray() == null
                    : PipelineNets.bitwiseEqual(state, a.getUpdater().getStateViewArray()), what + " step " + s
                    + ": updater state");
            assertEquals(e.getConfiguration().getIterationCount(), a.getConfiguration().getIterationCount(),
                    what + " step " + s + ": iterations");
        }
    }

    // ---- ZeRO on the dp axis ----

    static Stream<Arguments> zeroCases() {
        return Stream.of(
                Arguments.of(ZeroStage.PARAMETERS, PipelineSchedule.GPIPE),
                Arguments.of(ZeroStage.PARAMETERS, PipelineSchedule.ONE_F_ONE_B),
                // a graph's stages run their whole backward in I: stage 3 holds the stages whole through the step
                Arguments.of(ZeroStage.PARAMETERS, PipelineSchedule.ZERO_BUBBLE_H1),
                Arguments.of(ZeroStage.OPTIMIZER_STATE, PipelineSchedule.ONE_F_ONE_B),
                Arguments.of(ZeroStage.GRADIENTS, PipelineSchedule.ONE_F_ONE_B));
    }

    /**
     * Rank threads, dp 2 x pp 2, the residual MLP (two residual blocks and a merge, Adam): the sharded pipeline is the
     * unsharded one bitwise after every step, and holds less (stage 3: each replica 1/dp of its stages' parameters,
     * gradient view and updater state, the accumulated gradient given back).
     */
    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("zeroCases")
    void zeroOnAResidualGraphIsBitwiseTheUnshardedPipeline(ZeroStage stage, PipelineSchedule schedule) {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 21, STEPS, BATCH);
        ComputationGraph base = PipelineResidualGraphTest.residualMlp();
        Run plain = train(PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(schedule), data, base);
        Run sharded = train(PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(schedule).sharding(stage), data, base);
        assertSameRun(plain, sharded, stage + " " + schedule + " threads");
        assertTrue(sharded.bytesHeld() < plain.bytesHeld(), "sharded " + sharded.bytesHeld() + " bytes held against "
                + plain.bytesHeld() + " unsharded");
        if (stage == ZeroStage.PARAMETERS) {
            long state = base.getUpdater().getStateViewArray().length();
            // unsharded: dp replicas x (parameters, gradient view, accumulated gradient, updater state); stage 3: the
            // replicas' blocks of parameters, gradient view and state cover each once
            assertEquals(DP * (3 * base.numParams() + state) * Double.BYTES, plain.bytesHeld(), "unsharded bytes held");
            assertEquals((2 * base.numParams() + state) * Double.BYTES, sharded.bytesHeld(), "stage 3 bytes held");
        }
        assertTrue(!PipelineNets.bitwiseEqual(base.params(), plain.afterStep().getLast().params()), "training changed"
                + " the parameters");
    }

    /**
     * The ranks of a dp 2 x pp 2 group, each its own trainer, with ZeRO stage 3: every rank's gathered graph is the
     * unsharded thread-mode pipeline's bitwise after every step, started from the graph and from its configuration
     * (no rank ever holds the whole graph), and the ranks' model bytes add up to thread mode's sharded pipeline.
     */
    @ParameterizedTest(name = "from the configuration: {0}")
    @org.junit.jupiter.params.provider.ValueSource(booleans = {false, true})
    void groupRanksWithStageThreeAreBitwiseTheUnshardedPipeline(boolean fromConfiguration) {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 22, STEPS, BATCH);
        ComputationGraph base = PipelineResidualGraphTest.residualMlp();
        Run plain = train(PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(PipelineSchedule.ONE_F_ONE_B), data, base);
        Run threads = train(PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(PipelineSchedule.ONE_F_ONE_B).sharding(ZeroStage.PARAMETERS), data, base);
        List<Run> ranks = PipelineGroupModeTest.onEveryRank(DP * PP, group -> train((fromConfiguration
                ? PipelineParallelTrainer.builder(base.getConfiguration().clone())
                : PipelineParallelTrainer.builder(base.clone())).group(group).dataParallel(DP).microbatches(2)
                .schedule(PipelineSchedule.ONE_F_ONE_B).sharding(ZeroStage.PARAMETERS), data, base));
        long held = 0;
        for (int r = 0; r < ranks.size(); r++) {
            assertSameRun(plain, ranks.get(r), "rank " + r);
            held += ranks.get(r).bytesHeld();
        }
        assertEquals(threads.bytesHeld(), held, "the ranks' model bytes add up to thread mode's sharded pipeline");
    }

    // ---- synchronized BatchNorm on the dp axis ----

    private static DenseLayer dense(Activation activation) {
        return new DenseLayer.Builder().nIn(8).nOut(8).activation(activation).build();
    }

    /**
     * stem -> (dense -> batch norm -> relu -> dense) add(skip) -> (the same) add(skip) -> output, SGD, fp64. Layers in
     * topological order: stem 0, a1 1, bn1 2, r1 3, b1 4, a2 5, bn2 6, r2 7, b2 8, out 9; stages may start at a1, a2
     * and out, so with the boundary at a2 each stage holds a block with its BatchNormalization.
     */
    static ComputationGraph residualBatchNorm() {
        ComputationGraphConfiguration.GraphBuilder graph = new NeuralNetConfiguration.Builder().seed(45)
                .dataType(DataType.DOUBLE).updater(new Sgd(LEARNING_RATE)).weightInit(WeightInit.XAVIER).graphBuilder()
                .addInputs("in").addLayer("stem", dense(Activation.TANH), "in");
        String skip = "stem";
        for (int b = 1; b <= 2; b++) {
            graph.addLayer("a" + b, dense(Activation.IDENTITY), skip)
                    .addLayer("bn" + b, new BatchNormalization.Builder().decay(0.8).build(), "a" + b)
                    .addLayer("r" + b, new ActivationLayer.Builder().activation(Activation.RELU).build(), "bn" + b)
                    .addLayer("b" + b, dense(Activation.IDENTITY), "r" + b)
                    .addVertex("add" + b, new ElementWiseVertex(ElementWiseVertex.Op.Add), skip, "b" + b);
            skip = "add" + b;
        }
        ComputationGraph net = new ComputationGraph(graph.addLayer("out", new OutputLayer.Builder(
                        LossFunctions.LossFunction.MCXENT).nIn(8).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build(), skip)
                .setOutputs("out").setInputTypes(InputType.feedForward(8)).build());
        net.init();
        return net;
    }

    static Stream<Arguments> syncCases() {
        return Stream.of(
                Arguments.of(PipelineSchedule.GPIPE, 2),
                Arguments.of(PipelineSchedule.ONE_F_ONE_B, 4),
                // a graph's stages run their whole backward in I: BatchNorm's statistic-gradient all-reduce there
                Arguments.of(PipelineSchedule.ZERO_BUBBLE_H1, 4));
    }

    /**
     * Rank threads, dp 2 x pp 2, a block with BatchNormalization in each stage: with {@code syncBatchNorm(true)} replica
     * d's microbatch k is normalized with the statistics of both replicas' microbatch k, so every step equals DL4J's own
     * graph passes on the merged microbatches one after another (running statistics included) to 1e-12; without it,
     * the same comparison fails (the control).
     */
    @ParameterizedTest(name = "{0} m={1}")
    @MethodSource("syncCases")
    void syncBatchNormOnAResidualGraphEqualsDl4jOnTheMergedMicrobatches(PipelineSchedule schedule, int microbatches) {
        List<DataSet> batches = PipelineModels.batches(PipelineModels.Data.DENSE, 23, STEPS, BATCH);
        double synced = syncRun(batches, schedule, microbatches, true);
        assertTrue(synced <= TOLERANCE, schedule + ": synchronized BatchNorm differs from DL4J's passes on the merged"
                + " microbatches by " + synced);
        double alone = syncRun(batches, schedule, microbatches, false);
        System.out.printf("residual graph sync BatchNorm %s m=%d: synchronized %.3g, per replica %.3g%n", schedule,
                microbatches, synced, alone);
        assertTrue(alone > 1e-6, schedule + ": without syncBatchNorm the run should differ from the merged-microbatch"
                + " reference, found " + alone);
    }

    /** The largest relative difference from the merged-microbatch reference over the steps (parameters and statistics). */
    private static double syncRun(List<DataSet> batches, PipelineSchedule schedule, int microbatches, boolean sync) {
        ComputationGraph base = residualBatchNorm();
        ComputationGraph reference = base.clone();
        ComputationGraph trained = base.clone();
        double worst = 0;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP)
                .microbatches(microbatches).schedule(schedule).stageBoundaries(5).ompThreadsPerRank(1)
                .syncBatchNorm(sync).build()) {
            for (DataSet batch : batches) {
                trainer.fit(batch);
                // the replicas' microbatch k together are the batch's k-th 1/microbatches
                MicrobatchReference.sgdStep(reference, batch, microbatches, LEARNING_RATE);
                trainer.copyParametersTo(trained);
                worst = Math.max(worst, Nets.maxRelativeDifference(trained.params(), reference.params()));
            }
            for (int s = 0; s < PP; s++) {
                assertTrue(PipelineNets.bitwiseEqual(trainer.replicaStages(0).get(s).network().params(),
                        trainer.replicaStages(1).get(s).network().params()), "stage " + s + ": replicas differ");
                boolean swapped = false;
                for (org.deeplearning4j.nn.api.Layer layer : trainer.replicaStages(1).get(s).network().getLayers()) {
                    swapped |= layer instanceof SyncBatchNormLayer;
                }
                assertEquals(sync, swapped, "stage " + s + ": its BatchNormalization synchronized iff syncBatchNorm");
            }
        }
        return worst;
    }

    /** The ranks of a dp 2 x pp 2 group, each its own trainer, equal the rank threads bitwise with syncBatchNorm. */
    @ParameterizedTest(name = "{0}")
    @EnumSource(value = PipelineSchedule.class, names = {"ONE_F_ONE_B", "ZERO_BUBBLE_H1"})
    void groupRanksWithSyncBatchNormAreBitwiseTheThreads(PipelineSchedule schedule) {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 24, STEPS, BATCH);
        ComputationGraph base = residualBatchNorm();
        Run threads = train(PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(schedule).stageBoundaries(5).syncBatchNorm(true), data, base);
        Run unsynced = train(PipelineParallelTrainer.builder(base.clone()).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(schedule).stageBoundaries(5), data, base);
        assertTrue(!PipelineNets.bitwiseEqual(threads.afterStep().getLast().params(),
                unsynced.afterStep().getLast().params()), "syncBatchNorm changes the training");
        List<Run> ranks = PipelineGroupModeTest.onEveryRank(DP * PP, group -> train(PipelineParallelTrainer
                .builder(base.clone()).group(group).dataParallel(DP).microbatches(2).schedule(schedule)
                .stageBoundaries(5).syncBatchNorm(true), data, base));
        for (int r = 0; r < ranks.size(); r++) {
            assertSameRun(threads, ranks.get(r), "rank " + r);
        }
    }

    /** ZeRO with a BatchNormalization layer is refused for a graph as for a network (its statistics are not gradients). */
    @Test
    void zeroWithBatchNormInAGraphIsRefused() {
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(residualBatchNorm()).ranks(PP).dataParallel(DP).microbatches(2)
                        .sharding(ZeroStage.PARAMETERS).build().close());
        assertTrue(e.getMessage().contains("with a BatchNormalization layer (layer 2)") && e.getMessage().contains("fix:"),
                e.getMessage());
    }
}
