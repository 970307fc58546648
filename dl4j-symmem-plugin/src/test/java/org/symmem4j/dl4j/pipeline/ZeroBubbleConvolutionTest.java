package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.Convolution1DLayer;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.conf.weightnoise.DropConnect;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.layers.Splittable;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.exec.TimelineEvent;

/**
 * ZB-H1 on convolutional stages ({@link SplitBackward.Conv2d}): DL4J's 2-D convolution backward split into the input
 * gradient (I) and the weight and bias gradient (W), bitwise DL4J's own backward. Checked on CNNs in both layouts,
 * Truncate and Same modes, strides, padding, dilation, with and without bias, ReLU, tanh and identity activations, fp64
 * and fp32, with BatchNorm (which stays unsplit) and dropout: the I pass leaves the weight views untouched (NaN stays
 * NaN) and W then writes exactly the unsplit gradients; a 2-rank pipeline trains bitwise as 1F1B does, with I and W
 * actions on the convolution stages, and in group mode bitwise as in thread mode.
 */
class ZeroBubbleConvolutionTest {

    private static final int STEPS = 3;
    private static final int BATCH = 16;
    private static final int MICROBATCHES = 4;

    /** A CNN, its data, where its two stages meet, and what stays unsplit there. */
    record Cnn(String name, MultiLayerNetwork network, List<DataSet> data, int boundary, int unsplit,
               boolean dropout) {
        @Override
        public String toString() {
            return name;
        }
    }

    static List<Cnn> cnns() {
        List<Cnn> cnns = new ArrayList<>();
        List<PipelineModels.Model> kinds = PipelineModels.layerKinds(new Adam(0.01));
        // conv 3x3 relu + max pool, conv 3x3 tanh + avg pool, dense, output (NCHW, Truncate, bias)
        PipelineModels.Model nchw = kinds.get(0);
        cnns.add(new Cnn("NCHW truncate relu/tanh", nchw.network(),
                PipelineModels.batches(nchw.data(), 31, STEPS, BATCH), 2, 0, false));
        PipelineModels.Model nhwc = kinds.get(1);
        cnns.add(new Cnn("NHWC relu", nhwc.network(), PipelineModels.batches(nhwc.data(), 32, STEPS, BATCH), 1, 0,
                false));
        // conv Same tanh, conv 1x1 identity (dZ is the incoming gradient itself), per-pixel loss layer
        PipelineModels.Model perPixel = kinds.get(2);
        cnns.add(new Cnn("Same tanh + 1x1 identity to CnnLossLayer", perPixel.network(),
                PipelineModels.batches(perPixel.data(), 33, STEPS, BATCH), 1, 0, false));
        cnns.add(new Cnn("no bias, stride, padding, dilation", stridedNoBias(),
                PipelineModels.batches(PipelineModels.Data.IMAGES, 34, STEPS, BATCH), 2, 0, false));
        cnns.add(new Cnn("example CNN fp32: conv+BN+pool x2, dense dropout", exampleCnn(), images16(35), 3, 2, true));
        return cnns;
    }

    /** conv 3x3 stride 2 padding 1 without bias (relu), conv Same 3x3 dilation 2 without bias (tanh), conv 2x2 stride 2, output. */
    private static MultiLayerNetwork stridedNoBias() {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(41)
                .dataType(DataType.DOUBLE).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).list()
                .layer(new ConvolutionLayer.Builder(3, 3).stride(2, 2).padding(1, 1).nOut(5).hasBias(false)
                        .activation(Activation.RELU).build())
                .layer(new ConvolutionLayer.Builder(3, 3).convolutionMode(ConvolutionMode.Same).dilation(2, 2)
                        .nOut(4).hasBias(false).activation(Activation.TANH).build())
                .layer(new ConvolutionLayer.Builder(2, 2).stride(2, 2).nOut(3).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(10, 10, 2)).build());
        net.init();
        return net;
    }

    /** The pipeline CNN example's network (fp32, BatchNorm after each convolution, dropout on the dense layer). */
    private static MultiLayerNetwork exampleCnn() {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(2026)
                .dataType(DataType.FLOAT).updater(new Adam(2e-3)).weightInit(WeightInit.RELU).list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(8).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(16).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(32).activation(Activation.RELU).dropOut(0.8).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).weightInit(WeightInit.XAVIER).build())
                .setInputType(InputType.convolutional(16, 16, 1)).build());
        net.init();
        return net;
    }

    /** fp32 images [b, 1, 16, 16] and one-hot labels. */
    private static List<DataSet> images16(long seed) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>();
        for (int s = 0; s < STEPS; s++) {
            float[] pixels = new float[BATCH * 16 * 16];
            for (int i = 0; i < pixels.length; i++) {
                pixels[i] = (float) rnd.nextDouble(-1, 1);
            }
            INDArray labels = Nd4j.zeros(DataType.FLOAT, BATCH, PipelineModels.CLASSES);
            for (int r = 0; r < BATCH; r++) {
                labels.putScalar(r, rnd.nextInt(PipelineModels.CLASSES), 1);
            }
            out.add(new DataSet(Nd4j.create(pixels, new long[]{BATCH, 1, 16, 16}, DataType.FLOAT), labels));
        }
        return out;
    }

    static Stream<Arguments> cases() {
        return cnns().stream().map(Arguments::of);
    }

    /**
     * The split itself, on one network: with deferring on, DL4J's backward of the swapped network leaves every split
     * layer's gradient view untouched (NaN stays NaN) and returns the same score and input gradient; the weight halves
     * then write exactly the unsplit backward's gradient. Fails if the I pass computed any weight or bias gradient or
     * if W's arithmetic differs from DL4J's by one bit.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void inputPassLeavesWeightGradientsToTheWeightPass(Cnn cnn) {
        MultiLayerNetwork net = cnn.network().clone();
        // as in a stage (Dl4jPipelineStage): what the weight pass keeps must outlive the backward's workspaces
        net.getLayerWiseConfigurations().setTrainingWorkspaceMode(WorkspaceMode.NONE);
        DataSet batch = cnn.data().getFirst();
        Nd4j.getRandom().setSeed(7); // the same dropout masks in both backwards
        Pair<Gradient, INDArray> unsplit = net.calculateGradients(batch.getFeatures(), batch.getLabels(), null, null);
        INDArray expected = net.getGradientsViewArray().dup();
        INDArray expectedEpsilon = unsplit.getSecond().dup();
        double expectedScore = net.score();

        Layer[] layers = net.getLayers();
        List<Splittable> splits = new ArrayList<>();
        List<INDArray> splitViews = new ArrayList<>();
        int convolutions = 0;
        for (int i = 0; i < layers.length; i++) {
            Layer split = SplitBackward.splitOf(layers[i]);
            if (split == null) {
                continue;
            }
            if (split instanceof SplitBackward.Conv2d) {
                convolutions++;
            }
            layers[i] = split;
            splits.add((Splittable) split);
            ((Splittable) split).defer(true);
            splitViews.add(split.getGradientsViewArray());
        }
        assertTrue(convolutions >= 1, cnn + ": its convolutions split");
        for (INDArray view : splitViews) {
            view.assign(Double.NaN);
        }
        Nd4j.getRandom().setSeed(7);
        Pair<Gradient, INDArray> input = net.calculateGradients(batch.getFeatures(), batch.getLabels(), null, null);
        assertEquals(Double.doubleToRawLongBits(expectedScore), Double.doubleToRawLongBits(net.score()), "score");
        assertTrue(PipelineNets.bitwiseEqual(flat(expectedEpsilon), flat(input.getSecond())), "input gradient of the I pass");
        for (INDArray view : splitViews) {
            for (double v : view.castTo(DataType.DOUBLE).toDoubleVector()) {
                assertTrue(Double.isNaN(v), cnn + ": the input-gradient pass wrote a weight or bias gradient: " + v);
            }
        }
        for (Splittable s : splits) {
            Splittable.Deferred d = s.takeDeferred();
            assertNotNull(d, "kept for the weight pass");
            assertNull(s.takeDeferred(), "handed over once");
            s.weightGradient(d);
        }
        assertTrue(PipelineNets.bitwiseEqual(expected, net.getGradientsViewArray()),
                cnn + ": weight pass gradient vs DL4J's unsplit backward");
    }

    /**
     * A 2-rank ZB-H1 pipeline of each CNN: bitwise the 1F1B pipeline (parameters, updater state, every step's loss),
     * each convolution stage's backward run as I and W actions, the stages' convolutions split; fp64 networks without
     * dropout also within 1e-11 of one plain {@code fit}.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void pipelineEqualsOneFOneBBitwise(Cnn cnn) {
        Run zb = train(cnn, PipelineSchedule.ZERO_BUBBLE_H1);
        Run oneFOneB = train(cnn, PipelineSchedule.ONE_F_ONE_B);
        PipelineNets.assertSameState(oneFOneB.network(), zb.network(), cnn + ": ZB-H1 against 1F1B");
        assertEquals(oneFOneB.losses(), zb.losses(), cnn + ": every step's loss, bitwise (as doubles)");
        assertEquals(cnn.unsplit(), zb.unsplit().size(), cnn + ": unsplit layers " + zb.unsplit());
        for (String why : zb.unsplit()) {
            assertTrue(why.contains("(BatchNormalization"), why);
        }
        assertEquals(List.of(0L, 0L), oneFOneB.convolutionsSplit(), "1F1B keeps DL4J's layers");
        int layers = cnn.network().getnLayers();
        assertEquals(List.of(convolutions(cnn, 0, cnn.boundary()), convolutions(cnn, cnn.boundary(), layers)),
                zb.convolutionsSplit(), cnn + ": every stage's convolutions split");
        for (StepTimeline t : zb.lastTimelines()) {
            assertEquals(MICROBATCHES, count(t, TimelineEvent.Kind.INPUT_GRADIENT), "rank " + t.rank() + " I actions");
            assertEquals(MICROBATCHES, count(t, TimelineEvent.Kind.WEIGHT_GRADIENT), "rank " + t.rank() + " W actions");
            assertEquals(0, count(t, TimelineEvent.Kind.BACKWARD), "rank " + t.rank() + " whole backwards");
        }
        for (StepTimeline t : oneFOneB.lastTimelines()) {
            assertEquals(0, count(t, TimelineEvent.Kind.WEIGHT_GRADIENT), "1F1B: no W actions");
        }
        if (!cnn.dropout() && cnn.network().getLayerWiseConfigurations().getDataType() == DataType.DOUBLE) {
            MultiLayerNetwork reference = cnn.network().clone();
            for (DataSet batch : cnn.data()) {
                reference.fit(batch);
            }
            double diff = Nets.maxRelativeDifference(zb.network().params(), reference.params());
            assertTrue(diff <= 1e-11, cnn + ": ZB-H1 differs from one plain fit by " + diff);
        }
    }

    /**
     * Group mode (a rank per group member, each swapping the convolutions of the stage it holds): every rank ends
     * bitwise where the rank threads of one trainer do, ZB-H1 on both.
     */
    @Test
    void groupModeRanksEqualRankThreadsBitwise() {
        Cnn cnn = cnns().getFirst();
        MultiLayerNetwork threadsModel = cnn.network().clone();
        PipelineGroupModeTest.Outcome threads = PipelineGroupModeTest.train(threadsModel,
                PipelineParallelTrainer.builder(threadsModel).ranks(2).microbatches(MICROBATCHES)
                        .schedule(PipelineSchedule.ZERO_BUBBLE_H1).stageBoundaries(cnn.boundary()), cnn.data());
        List<PipelineGroupModeTest.Outcome> perRank = PipelineGroupModeTest.onEveryRank(2, group -> {
            MultiLayerNetwork mine = cnn.network().clone();
            return PipelineGroupModeTest.train(mine, PipelineParallelTrainer.builder(mine).group(group)
                    .microbatches(MICROBATCHES).schedule(PipelineSchedule.ZERO_BUBBLE_H1)
                    .stageBoundaries(cnn.boundary()), cnn.data());
        });
        for (int r = 0; r < 2; r++) {
            PipelineGroupModeTest.Outcome o = perRank.get(r);
            assertTrue(PipelineNets.bitwiseEqual(threads.params(), o.params()), "rank " + r + ": parameters");
            assertTrue(PipelineNets.bitwiseEqual(threads.updaterState(), o.updaterState()), "rank " + r + ": updater state");
            assertEquals(threads.losses(), o.losses(), "rank " + r + ": every step's loss, bitwise (as doubles)");
        }
        assertFalse(PipelineNets.bitwiseEqual(cnn.network().params(), threads.params()), "training changed the parameters");
    }

    /** What one training run left: the network, every step's loss, the unsplit layers, the last step's timelines. */
    private record Run(MultiLayerNetwork network, List<Double> losses, List<String> unsplit,
                       List<StepTimeline> lastTimelines, List<Long> convolutionsSplit) {
    }

    private static Run train(Cnn cnn, PipelineSchedule schedule) {
        MultiLayerNetwork network = cnn.network().clone();
        List<Double> losses = new ArrayList<>();
        Nd4j.getRandom().setSeed(11);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(network).ranks(2)
                .microbatches(MICROBATCHES).schedule(schedule).stageBoundaries(cnn.boundary()).build()) {
            for (DataSet batch : cnn.data()) {
                trainer.fit(batch);
                losses.add(trainer.lastStep().loss());
            }
            List<Long> split = new ArrayList<>();
            for (Dl4jPipelineStage stage : trainer.replicaStages(0)) {
                split.add(Stream.of(stage.network().getLayers()).filter(l -> l instanceof SplitBackward.Conv2d).count());
            }
            return new Run(network, losses, trainer.unsplitBackwardLayers(), trainer.lastStep().timelines(), split);
        }
    }

    private static INDArray flat(INDArray a) {
        return a.dup('c').reshape(a.length());
    }

    /** How many of layers {@code from..to-1} are 2-D convolutions. */
    private static long convolutions(Cnn cnn, int from, int to) {
        long n = 0;
        for (int i = from; i < to; i++) {
            n += cnn.network().getLayer(i) instanceof org.deeplearning4j.nn.layers.convolution.ConvolutionLayer ? 1 : 0;
        }
        return n;
    }

    private static long count(StepTimeline t, TimelineEvent.Kind kind) {
        return t.events().stream().filter(e -> e.kind() == kind).count();
    }

    /** What does not split is named, per layer kind: weight noise on a convolution, and 1-D convolutions. */
    @Test
    void convolutionsThatDoNotSplitAreNamed() {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(3)
                .dataType(DataType.DOUBLE).updater(new Adam(0.01)).list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(3).weightNoise(new DropConnect(0.9))
                        .activation(Activation.RELU).build())
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(3).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(PipelineModels.CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(10, 10, 2)).build());
        net.init();
        assertNull(SplitBackward.splitOf(net.getLayer(0)), "weight noise: not split");
        assertInstanceOf(SplitBackward.Conv2d.class, SplitBackward.splitOf(net.getLayer(1)));
        List<String> unsplit = SplitBackward.unsplitLayers(net.getLayerWiseConfigurations());
        assertEquals(1, unsplit.size(), unsplit.toString());
        assertTrue(unsplit.getFirst().startsWith("layer 0 (ConvolutionLayer") && unsplit.getFirst().contains("weight noise"),
                unsplit.toString());
        String conv1d = SplitBackward.whyUnsplit(new Convolution1DLayer.Builder().kernelSize(3).nIn(2).nOut(3).build());
        assertNotNull(conv1d, "1-D convolutions run their whole backward in I");
        assertTrue(conv1d.contains("ConvolutionLayer only"), conv1d);
        assertNull(SplitBackward.whyUnsplit(new SubsamplingLayer.Builder().build()), "no parameters: all I");
    }
}
