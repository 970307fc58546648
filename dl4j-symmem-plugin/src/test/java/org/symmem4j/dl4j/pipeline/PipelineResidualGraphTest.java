package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.graph.MergeVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.Nets;

/**
 * ComputationGraphs with residual connections and merges train in the pipeline as {@code graph.fit} on the merged
 * batch: stages start at cut vertices only (every residual block inside one stage), each stage runs its vertices
 * (layers, element-wise adds, a merge) forward and backward, and one activation and its gradient cross each
 * boundary. fp64 with Adam. One microbatch: bitwise {@code graph.fit} (the same operations on the same values); several
 * microbatches: to rounding (a stage adds its microbatches' gradients, {@code fit} computes the batch's in one product).
 */
class PipelineResidualGraphTest {

    /** Several microbatches: the gradient is a sum in another order than one product over the batch. */
    static final double TOLERANCE = 1e-11;

    private static NeuralNetConfiguration.Builder base(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).dataType(DataType.DOUBLE).updater(new Adam(0.01))
                .weightInit(WeightInit.XAVIER);
    }

    private static DenseLayer dense(int nIn, int nOut, Activation activation) {
        return new DenseLayer.Builder().nIn(nIn).nOut(nOut).activation(activation).build();
    }

    /**
     * stem -> (dense -> dense -> add(skip)) x 2 -> merge(block output, dense of it) -> output. Layers in topological
     * order: stem 0, a1 1, b1 2, a2 3, b2 4, m 5, out 6; stages may start at a1 (after the stem), a2 (after add1), m
     * (after add2) and out (after the merge).
     */
    static ComputationGraph residualMlp() {
        ComputationGraphConfiguration conf = base(41).graphBuilder().addInputs("in")
                .addLayer("stem", dense(8, 8, Activation.TANH), "in")
                .addLayer("a1", dense(8, 8, Activation.TANH), "stem")
                .addLayer("b1", dense(8, 8, Activation.IDENTITY), "a1")
                .addVertex("add1", new ElementWiseVertex(ElementWiseVertex.Op.Add), "stem", "b1")
                .addLayer("a2", dense(8, 8, Activation.TANH), "add1")
                .addLayer("b2", dense(8, 8, Activation.IDENTITY), "a2")
                .addVertex("add2", new ElementWiseVertex(ElementWiseVertex.Op.Add), "add1", "b2")
                .addLayer("m", dense(8, 4, Activation.RELU), "add2")
                .addVertex("merge", new MergeVertex(), "add2", "m")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(12)
                        .nOut(PipelineModels.CLASSES).activation(Activation.SOFTMAX).build(), "merge")
                .setOutputs("out").setInputTypes(InputType.feedForward(8)).build();
        ComputationGraph graph = new ComputationGraph(conf);
        graph.init();
        return graph;
    }

    /** conv stem -> (conv -> conv -> add(skip)) -> pool -> dense -> output, NCHW. */
    static ComputationGraph residualConv() {
        ComputationGraphConfiguration conf = base(42).graphBuilder().addInputs("images")
                .addLayer("stem", new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(ConvolutionMode.Same)
                        .activation(Activation.RELU).build(), "images")
                .addLayer("c1", new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(ConvolutionMode.Same)
                        .activation(Activation.RELU).build(), "stem")
                .addLayer("c2", new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(ConvolutionMode.Same)
                        .activation(Activation.IDENTITY).build(), "c1")
                .addVertex("add", new ElementWiseVertex(ElementWiseVertex.Op.Add), "stem", "c2")
                .addLayer("pool", new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build(), "add")
                .addLayer("dense", new DenseLayer.Builder().nOut(8).activation(Activation.TANH).build(), "pool")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build(), "dense")
                .setOutputs("out").setInputTypes(InputType.convolutional(10, 10, 2)).build();
        ComputationGraph graph = new ComputationGraph(conf);
        graph.init();
        return graph;
    }

    /**
     * A ResNet basic block as DL4J's zoo writes them: stem conv -> (conv -> batch norm -> relu -> conv -> batch norm)
     * add(skip) -> relu -> global average pooling -> output.
     */
    static ComputationGraph resnetBlock() {
        ComputationGraphConfiguration conf = base(44).graphBuilder().addInputs("images")
                .addLayer("stem", new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(ConvolutionMode.Same)
                        .activation(Activation.RELU).build(), "images")
                .addLayer("c1", new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(ConvolutionMode.Same)
                        .activation(Activation.IDENTITY).build(), "stem")
                .addLayer("bn1", new org.deeplearning4j.nn.conf.layers.BatchNormalization.Builder().build(), "c1")
                .addLayer("relu1", new org.deeplearning4j.nn.conf.layers.ActivationLayer(Activation.RELU), "bn1")
                .addLayer("c2", new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(ConvolutionMode.Same)
                        .activation(Activation.IDENTITY).build(), "relu1")
                .addLayer("bn2", new org.deeplearning4j.nn.conf.layers.BatchNormalization.Builder().build(), "c2")
                .addVertex("add", new ElementWiseVertex(ElementWiseVertex.Op.Add), "stem", "bn2")
                .addLayer("relu2", new org.deeplearning4j.nn.conf.layers.ActivationLayer(Activation.RELU), "add")
                .addLayer("gap", new org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer(PoolingType.AVG), "relu2")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build(), "gap")
                .setOutputs("out").setInputTypes(InputType.convolutional(10, 10, 2)).build();
        ComputationGraph graph = new ComputationGraph(conf);
        graph.init();
        return graph;
    }

    static Stream<Arguments> runs() {
        return Stream.of(
                Arguments.of("MLP, 2 stages, GPipe, 1 microbatch", true, PipelineSchedule.GPIPE, 2, 1, null),
                Arguments.of("MLP, 3 stages, 1F1B, 1 microbatch", true, PipelineSchedule.ONE_F_ONE_B, 3, 1, new int[] {1, 5}),
                Arguments.of("MLP, 4 stages, GPipe, 4 microbatches", true, PipelineSchedule.GPIPE, 4, 4, null),
                Arguments.of("MLP, 3 stages, 1F1B, 4 microbatches", true, PipelineSchedule.ONE_F_ONE_B, 3, 4,
                        new int[] {3, 6}),
                Arguments.of("conv block, 2 stages, 1F1B, 1 microbatch", false, PipelineSchedule.ONE_F_ONE_B, 2, 1,
                        new int[] {3}),
                Arguments.of("conv block, 3 stages, GPipe, 2 microbatches", false, PipelineSchedule.GPIPE, 3, 2,
                        new int[] {1, 4}),
                // batch normalization normalizes each microbatch alone: one microbatch is DL4J's own definition
                Arguments.of("ResNet basic block with batch norm, 3 stages, 1F1B, 1 microbatch", null,
                        PipelineSchedule.ONE_F_ONE_B, 3, 1, null));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("runs")
    void trainsLikeGraphFitOnTheMergedBatch(String name, Boolean mlp, PipelineSchedule schedule, int ranks,
                                            int microbatches, int[] boundaries) {
        ComputationGraph graph = mlp == null ? resnetBlock() : mlp ? residualMlp() : residualConv();
        ComputationGraph reference = graph.clone();
        ComputationGraph trained = graph.clone();
        List<DataSet> batches = PipelineModels.batches(Boolean.TRUE.equals(mlp) ? PipelineModels.Data.DENSE
                : PipelineModels.Data.IMAGES, 7, 4, 8);
        PipelineParallelTrainerBuilder builder = PipelineParallelTrainer.builder(graph).ranks(ranks)
                .microbatches(microbatches).schedule(schedule);
        if (boundaries != null) {
            builder.stageBoundaries(boundaries);
        }
        try (PipelineParallelTrainer trainer = builder.build()) {
            for (int s = 0; s < 3; s++) {
                trainer.fit(batches.get(s));
                reference.fit(batches.get(s));
                trainer.copyParametersTo(trained);
                if (microbatches == 1) {
                    assertArrayEquals(reference.params().toDoubleVector(), trained.params().toDoubleVector(),
                            name + " step " + s + ": expected bitwise graph.fit");
                    assertEquals(reference.score(), trainer.lastStep().loss(), 0.0, name + " loss step " + s);
                } else {
                    double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                    assertTrue(diff <= TOLERANCE, name + " step " + s + ": " + diff);
                    assertEquals(reference.score(), trainer.lastStep().loss(), TOLERANCE * Math.abs(reference.score()));
                }
            }
        }
        assertEquals(3, trained.getConfiguration().getIterationCount());
        // Adam's moments came back into the graph: plain fit goes on as the reference
        trained.fit(batches.get(3));
        reference.fit(batches.get(3));
        double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
        assertTrue(diff <= TOLERANCE, name + ": plain fit after copyParametersTo differs by " + diff);
    }

    /** Parameters and Adam's state, bitwise. */
    private static void assertBitwise(ComputationGraph expected, ComputationGraph actual) {
        assertArrayEquals(expected.params().toDoubleVector(), actual.params().toDoubleVector(), "parameters");
        assertArrayEquals(expected.getUpdater().getStateViewArray().toDoubleVector(),
                actual.getUpdater().getStateViewArray().toDoubleVector(), "Adam state");
    }

    /** Trains {@code builder}'s trainer on {@code data}; the trained parameters and updater state copied into {@code into}. */
    private static ComputationGraph train(PipelineParallelTrainerBuilder builder, List<DataSet> data,
                                          ComputationGraph into) {
        try (PipelineParallelTrainer trainer = builder.build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
            trainer.copyParametersTo(into); // collective in group mode
        }
        return into;
    }

    /**
     * Group mode (a rank per stage, each its own trainer over an in-JVM group): every rank's gathered graph is bitwise
     * the thread-mode trainer's, parameters and Adam state, 1F1B with several microbatches.
     */
    @ParameterizedTest(name = "{0} ranks")
    @org.junit.jupiter.params.provider.ValueSource(ints = {2, 3})
    void groupModeRanksTrainBitwiseLikeThreadMode(int ranks) {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 9, 3, 8);
        ComputationGraph threads = train(PipelineParallelTrainer.builder(residualMlp()).ranks(ranks).microbatches(4)
                .schedule(PipelineSchedule.ONE_F_ONE_B), data, residualMlp());
        List<ComputationGraph> perRank = PipelineGroupModeTest.onEveryRank(ranks, group -> train(
                PipelineParallelTrainer.builder(residualMlp()).group(group).microbatches(4)
                        .schedule(PipelineSchedule.ONE_F_ONE_B), data, residualMlp()));
        for (int r = 0; r < ranks; r++) {
            assertArrayEquals(threads.params().toDoubleVector(), perRank.get(r).params().toDoubleVector(),
                    "rank " + r + " of " + ranks + ": parameters");
            assertArrayEquals(threads.getUpdater().getStateViewArray().toDoubleVector(),
                    perRank.get(r).getUpdater().getStateViewArray().toDoubleVector(), "rank " + r + ": Adam state");
        }
    }

    /**
     * builder(configuration): the stages draw their parameters as DL4J's init() of the graph would (hollow graph and
     * layer network, holding no values) and train bitwise as {@code graph.fit} from that init, one microbatch.
     */
    @Test
    void fromTheConfigurationTrainsBitwiseLikeTheInitialisedGraph() {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 10, 3, 8);
        ComputationGraph reference = residualMlp();
        for (DataSet batch : data) {
            reference.fit(batch);
        }
        ComputationGraph trained = train(PipelineParallelTrainer.builder(residualMlp().getConfiguration().clone())
                .ranks(3).microbatches(1), data, residualMlp());
        assertBitwise(reference, trained);
    }

    /**
     * DP x PP: 2 data-parallel replicas of a 3-stage residual pipeline, each replica 2 microbatches of the batch,
     * agree with {@code graph.fit} on the merged batch to rounding (a sum over 4 pieces in place of one product).
     */
    @Test
    void dataParallelReplicasOfAResidualPipelineTrainLikeGraphFit() {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 12, 3, 8);
        ComputationGraph reference = residualMlp();
        ComputationGraph trained = residualMlp();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(trained).ranks(3).dataParallel(2)
                .microbatches(2).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                reference.fit(batch);
                double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                assertTrue(diff <= TOLERANCE, "dp x pp: " + diff);
            }
        }
    }

    /** Interleaved 1F1B: 2 ranks of 2 stages each, the 4 stages at the MLP's 4 cut vertices; to rounding. */
    @Test
    void interleavedStagesTrainLikeGraphFit() {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 13, 3, 8);
        ComputationGraph reference = residualMlp();
        ComputationGraph trained = residualMlp();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(trained).ranks(2).microbatches(4)
                .schedule(PipelineSchedule.INTERLEAVED, 2).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                reference.fit(batch);
                double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                assertTrue(diff <= TOLERANCE, "interleaved: " + diff);
            }
        }
    }

    /**
     * A checkpoint of a residual graph (a shard per stage and the graph as model.zip) restores into a fresh trainer on
     * another graph of the configuration, which trains on bitwise as the uninterrupted one.
     */
    @Test
    void restoredTrainingGoesOnBitwiseAsUninterruptedTraining(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws Exception {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 11, 4, 8);
        ComputationGraph uninterrupted = residualMlp();
        ComputationGraph atSave;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(uninterrupted).ranks(3).microbatches(4)
                .build()) {
            trainer.fit(data.get(0));
            trainer.fit(data.get(1));
            trainer.saveCheckpoint(dir);
            atSave = uninterrupted.clone();
            trainer.fit(data.get(2));
            trainer.fit(data.get(3));
        }
        ComputationGraph loaded = org.deeplearning4j.util.ModelSerializer.restoreComputationGraph(
                dir.resolve("model.zip").toFile(), true);
        assertArrayEquals(atSave.params().toDoubleVector(), loaded.params().toDoubleVector(), "model.zip");
        ComputationGraph restored = residualMlp();
        restored.params().muli(0.5);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(restored).ranks(3).microbatches(4)
                .schedule(PipelineSchedule.GPIPE).build()) {
            trainer.restoreCheckpoint(dir);
            assertArrayEquals(atSave.params().toDoubleVector(), restored.params().toDoubleVector(), "after the restore");
            trainer.fit(data.get(2));
            trainer.fit(data.get(3));
        }
        assertBitwise(uninterrupted, restored);
    }

    @Test
    void zeroBubbleRunsGraphStagesWholeAndEqualsOneFOneBBitwise() {
        List<DataSet> batches = PipelineModels.batches(PipelineModels.Data.DENSE, 8, 3, 8);
        ComputationGraph oneFOneB = residualMlp();
        ComputationGraph zeroBubble = residualMlp();
        try (PipelineParallelTrainer a = PipelineParallelTrainer.builder(oneFOneB).ranks(3).microbatches(4)
                .schedule(PipelineSchedule.ONE_F_ONE_B).build();
             PipelineParallelTrainer b = PipelineParallelTrainer.builder(zeroBubble).ranks(3).microbatches(4)
                     .schedule(PipelineSchedule.ZERO_BUBBLE_H1).build()) {
            assertEquals(7, b.unsplitBackwardLayers().size(), b.unsplitBackwardLayers().toString());
            assertTrue(b.unsplitBackwardLayers().getFirst().contains("\"stem\"")
                    && b.unsplitBackwardLayers().getFirst().contains("graph with branches"), b.unsplitBackwardLayers()
                    .toString());
            for (DataSet batch : batches) {
                a.fit(batch);
                b.fit(batch);
            }
            a.copyParametersTo(oneFOneB);
            b.copyParametersTo(zeroBubble);
        }
        assertArrayEquals(oneFOneB.params().toDoubleVector(), zeroBubble.params().toDoubleVector());
    }

    @Test
    void aBoundaryInsideAResidualBlockAndASplitByMeasuredTimesAreRefused() {
        // layer 2 is b1: stem's output crosses to add1
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(residualMlp()).ranks(2).microbatches(2).stageBoundaries(2).build());
        assertTrue(e.getMessage().contains("layer 2 (vertex \"b1\") is not at a cut vertex")
                && e.getMessage().contains("vertex \"stem\" is read by vertex \"add1\"")
                && e.getMessage().contains("1 (vertex \"a1\"), 3 (vertex \"a2\"), 5 (vertex \"m\"), 6 (vertex \"out\")")
                && e.getMessage().contains("fix:"), e.getMessage());

        e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(residualMlp()).ranks(6)
                .microbatches(6).build());
        assertTrue(e.getMessage().contains("stages=6 but the graph has 5 places a stage may start")
                && e.getMessage().contains("fix: use at most 5 stages"), e.getMessage());

        DataSet sample = PipelineModels.batches(PipelineModels.Data.DENSE, 14, 1, 8).getFirst();
        e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(residualMlp()).ranks(2)
                .microbatches(2).splitByMeasuredTimes(sample).build());
        assertTrue(e.getMessage().contains("with splitByMeasuredTimes") && e.getMessage().contains("fix:"),
                e.getMessage());
    }

    @Test
    void severalOutputsAreRefusedAtBuild() {
        ComputationGraph twoOutputs = new ComputationGraph(base(43).graphBuilder().addInputs("in")
                .addLayer("a", dense(8, 8, Activation.TANH), "in")
                .addLayer("out1", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(3)
                        .activation(Activation.SOFTMAX).build(), "a")
                .addLayer("out2", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(3)
                        .activation(Activation.SOFTMAX).build(), "a")
                .setOutputs("out1", "out2").build());
        twoOutputs.init();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(twoOutputs).ranks(2).microbatches(2).build());
        assertTrue(e.getMessage().contains("outputs=[out1, out2]") && e.getMessage().contains("expected one input and"
                + " one output") && e.getMessage().contains("fix:"), e.getMessage());
    }
}
