package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
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
 * ComputationGraphs whose vertices form a chain train in the pipeline exactly as {@code graph.fit}:
 * parameters after every step (fp64, Adam, so the moments travel into the stages and back), and plain
 * {@code fit} continuing from the copied graph equals the reference continuing; graphs with branches
 * are refused at {@code build()} naming the vertex.
 */
class PipelineGraphTest {

    static final double TOLERANCE = 1e-11;

    private static NeuralNetConfiguration.Builder base(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).dataType(DataType.DOUBLE).updater(new Adam(0.01))
                .weightInit(WeightInit.XAVIER);
    }

    static ComputationGraph cnnChain() {
        ComputationGraphConfiguration conf = base(31).graphBuilder().addInputs("images")
                .addLayer("conv", new ConvolutionLayer.Builder(3, 3).nOut(4).activation(Activation.RELU).build(), "images")
                .addLayer("pool", new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build(), "conv")
                .addLayer("bn", new BatchNormalization.Builder().build(), "pool")
                .addLayer("dense", new DenseLayer.Builder().nOut(8).activation(Activation.TANH).build(), "bn")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build(), "dense")
                .setOutputs("out").setInputTypes(InputType.convolutional(10, 10, 2)).build();
        ComputationGraph graph = new ComputationGraph(conf);
        graph.init();
        return graph;
    }

    static ComputationGraph lstmChain() {
        ComputationGraphConfiguration conf = base(32).graphBuilder().addInputs("sequences")
                .addLayer("lstm1", new LSTM.Builder().nOut(6).activation(Activation.TANH).build(), "sequences")
                .addLayer("lstm2", new LSTM.Builder().nOut(5).activation(Activation.TANH).build(), "lstm1")
                .addLayer("out", new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build(), "lstm2")
                .setOutputs("out").setInputTypes(InputType.recurrent(4, 7)).build();
        ComputationGraph graph = new ComputationGraph(conf);
        graph.init();
        return graph;
    }

    static Stream<Arguments> chains() {
        return Stream.of(
                // batch normalization with one microbatch: its definition is DL4J's own, so plain fit is the reference
                Arguments.of("conv, pool, batch norm, dense", cnnChain(), PipelineModels.Data.IMAGES, 1, new int[] {2}),
                Arguments.of("LSTM x2, masks", lstmChain(), PipelineModels.Data.SEQUENCES_TO_SEQUENCES, 4, new int[] {1}));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("chains")
    void trainsLikeGraphFit(String name, ComputationGraph graph, PipelineModels.Data data, int microbatches,
                            int[] boundaries) {
        ComputationGraph reference = graph.clone();
        ComputationGraph trained = graph.clone();
        List<DataSet> batches = PipelineModels.batches(data, 6, 4, 8);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(graph).ranks(2).microbatches(microbatches)
                .stageBoundaries(boundaries).build()) {
            for (int s = 0; s < 3; s++) {
                trainer.fit(batches.get(s));
                reference.fit(batches.get(s));
                trainer.copyParametersTo(trained);
                double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                assertTrue(diff <= TOLERANCE, name + " step " + s + ": " + diff);
                assertEquals(reference.score(), trainer.lastStep().loss(), TOLERANCE * Math.abs(reference.score()));
            }
        }
        assertEquals(3, trained.getConfiguration().getIterationCount());
        // Adam's moments came back: plain fit goes on exactly
        trained.fit(batches.get(3));
        reference.fit(batches.get(3));
        double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
        assertTrue(diff <= TOLERANCE, name + ": plain fit after copyParametersTo differs by " + diff);
    }

    @Test
    void boundariesInsideABranchAndSeveralInputsAreRefusedAtBuild() {
        // a residual graph trains (PipelineResidualGraphTest), with no stage boundary inside a block: here one
        // after "a", whose output alone crosses to the block (b, sum), reads it twice
        ComputationGraph residual = new ComputationGraph(base(33).graphBuilder().addInputs("in")
                .addLayer("a", new DenseLayer.Builder().nIn(8).nOut(8).activation(Activation.TANH).build(), "in")
                .addLayer("b", new DenseLayer.Builder().nIn(8).nOut(8).activation(Activation.TANH).build(), "a")
                .addLayer("c", new DenseLayer.Builder().nIn(8).nOut(8).activation(Activation.TANH).build(), "b")
                .addVertex("sum", new ElementWiseVertex(ElementWiseVertex.Op.Add), "a", "c")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(3)
                        .activation(Activation.SOFTMAX).build(), "sum")
                .setOutputs("out").build());
        residual.init();
        PipelineParallelTrainerBuilder builder = PipelineParallelTrainer.builder(residual).ranks(2).microbatches(2)
                .stageBoundaries(2);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, builder::build);
        assertTrue(e.getMessage().contains("layer 2 (vertex \"c\") is not at a cut vertex")
                && e.getMessage().contains("vertex \"a\" is read by vertex \"sum\"")
                && e.getMessage().contains("one of [1 (vertex \"b\"), 3 (vertex \"out\")]"), e.getMessage());
        PipelineParallelTrainer.builder(residual).ranks(2).microbatches(2).stageBoundaries(1).build().close();

        ComputationGraph twoInputs = new ComputationGraph(base(34).graphBuilder().addInputs("x", "y")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(3)
                        .activation(Activation.SOFTMAX).build(), "x", "y")
                .setOutputs("out").setInputTypes(InputType.feedForward(4), InputType.feedForward(4)).build());
        twoInputs.init();
        e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(twoInputs).ranks(1)
                .microbatches(2).build());
        assertTrue(e.getMessage().contains("inputs=[x, y]") && e.getMessage().contains("expected one input"),
                e.getMessage());
    }
}
