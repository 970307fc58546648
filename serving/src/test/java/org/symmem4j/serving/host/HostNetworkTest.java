package org.symmem4j.serving.host;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.stream.Stream;

import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** HostNetwork against DL4J's own forward pass over the same parameters, and its refusals. */
class HostNetworkTest {

    /** ServingBench's LeNet-like CNN (431,080 params). */
    static MultiLayerConfiguration lenet(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(20).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(50).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(500).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX)
                        .build())
                .setInputType(InputType.convolutional(28, 28, 1))
                .build();
    }

    /** ServingProcessBench's MLP 784-256-256-10. */
    static MultiLayerConfiguration mlp(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new DenseLayer.Builder().nIn(784).nOut(256).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nIn(256).nOut(256).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(256).nOut(10)
                        .activation(Activation.SOFTMAX).build())
                .build();
    }

    /** {@return the network's parameters copied into a fresh segment} */
    static MemorySegment paramsOf(MultiLayerNetwork net) {
        float[] p = net.params().toFloatVector();
        MemorySegment seg = Arena.ofAuto().allocate((long) p.length * Float.BYTES, 64);
        MemorySegment.copy(p, 0, seg, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, p.length);
        return seg;
    }

    static MultiLayerNetwork init(MultiLayerConfiguration conf) {
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** Asserts |host - ref| <= 1e-4 * max(1, |ref|) everywhere, shapes equal. */
    static void assertClose(INDArray ref, INDArray host, String what) {
        assertArrayEquals(ref.shape(), host.shape(), what + ": shape");
        float[] r = ref.castTo(DataType.FLOAT).dup('c').data().asFloat();
        float[] h = host.dup('c').data().asFloat();
        double worst = 0;
        for (int i = 0; i < r.length; i++) {
            worst = Math.max(worst, Math.abs(h[i] - r[i]) / Math.max(1.0, Math.abs(r[i])));
        }
        assertTrue(worst <= 1e-4, what + ": max relative difference " + worst + " > 1e-4");
    }

    static void assertSameAsDl4j(MultiLayerConfiguration conf, long[] example, int batch, long seed, String what) {
        MultiLayerNetwork net = init(conf);
        HostNetwork host = HostNetwork.of(conf, paramsOf(net), example);
        long[] shape = new long[example.length + 1];
        shape[0] = batch;
        System.arraycopy(example, 0, shape, 1, example.length);
        Nd4j.getRandom().setSeed(seed);
        INDArray x = Nd4j.rand(DataType.FLOAT, shape).subi(0.5).muli(2);
        assertClose(net.output(x, false), host.output(x), what + " batch=" + batch);
    }

    @Test
    void lenetCnnMatchesDl4j() {
        for (int batch : new int[] {1, 3, 17, 32}) {
            assertSameAsDl4j(lenet(7), new long[] {1, 28, 28}, batch, batch, "lenet");
        }
    }

    @Test
    void readsFeaturesOfAnyOrderTypeOrView() {
        MultiLayerNetwork net = init(lenet(4));
        HostNetwork host = HostNetwork.of(lenet(4), paramsOf(net), 1, 28, 28);
        INDArray all = Nd4j.rand(DataType.FLOAT, 9, 1, 28, 28);
        INDArray rows = all.get(org.nd4j.linalg.indexing.NDArrayIndex.interval(2, 7)); // a view at an offset
        INDArray ref = net.output(rows.dup('c'), false);
        assertTrue(rows.isView(), "the rows are a view");
        assertClose(ref, host.output(rows), "view");
        assertClose(ref, host.output(rows.dup('f')), "'f' order");
        assertClose(ref, host.output(rows.castTo(DataType.DOUBLE)), "DOUBLE features");
        assertThrows(IllegalArgumentException.class, () -> host.output(Nd4j.rand(DataType.FLOAT, 2, 1, 28, 27)));
    }

    @Test
    void flatInputThroughFeedForwardToCnnMatchesDl4j() {
        // convolutionalFlat: DL4J puts a FeedForwardToCnnPreProcessor before the first convolution
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(3).list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(5).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(4).activation(Activation.SOFTMAX)
                        .build())
                .setInputType(InputType.convolutionalFlat(10, 9, 2))
                .build();
        assertTrue(conf.getInputPreProcess(0) != null, "the configuration has the preprocessor under test");
        for (int batch : new int[] {1, 17}) {
            assertSameAsDl4j(conf, new long[] {180}, batch, batch, "convolutionalFlat");
        }
    }

    @Test
    void mlpMatchesDl4j() {
        for (int batch : new int[] {1, 3, 17}) {
            assertSameAsDl4j(mlp(11), new long[] {784}, batch, batch, "mlp");
        }
    }

    /**
     * One conv/pool shape: conv then pool then a dense output over the flattened image.
     *
     * @param name the case
     * @param c input channels
     * @param h input height
     * @param w input width
     * @param k conv kernel {kH, kW}, stride, padding, mode
     * @param bias conv bias
     * @param convAct conv activation
     * @param pool pooling type
     * @param pk pool kernel, stride, padding, mode
     * @param includePad average pooling's divisor
     * @param outAct output activation
     * @param batch rows
     */
    record Shape(String name, int c, int h, int w, int[] k, int[] s, int[] p, ConvolutionMode mode, boolean bias,
                 Activation convAct, SubsamplingLayer.PoolingType pool, int[] pk, int[] ps, int[] pp,
                 ConvolutionMode poolMode, boolean includePad, Activation outAct, int batch) {

        MultiLayerConfiguration conf() {
            return new NeuralNetConfiguration.Builder().seed(h * 31L + w).list()
                    .layer(new ConvolutionLayer.Builder(k, s, p).nOut(6).hasBias(bias).convolutionMode(mode)
                            .activation(convAct).build())
                    .layer(new SubsamplingLayer.Builder(pool).kernelSize(pk).stride(ps).padding(pp)
                            .convolutionMode(poolMode).avgPoolIncludePadInDivisor(includePad).build())
                    .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nOut(5).activation(outAct).build())
                    .setInputType(InputType.convolutional(h, w, c))
                    .build();
        }

        @Override
        public String toString() {
            return name + " batch=" + batch;
        }
    }

    static Stream<Shape> shapes() {
        ConvolutionMode t = ConvolutionMode.Truncate, same = ConvolutionMode.Same;
        SubsamplingLayer.PoolingType max = SubsamplingLayer.PoolingType.MAX, avg = SubsamplingLayer.PoolingType.AVG;
        Activation relu = Activation.RELU, id = Activation.IDENTITY;
        return Stream.of(
                new Shape("stride1-truncate", 1, 9, 9, i(3, 3), i(1, 1), i(0, 0), t, true, relu, max, i(2, 2), i(2, 2),
                        i(0, 0), t, true, id, 1),
                new Shape("stride2-same-odd-3ch", 3, 11, 13, i(3, 3), i(2, 2), i(0, 0), same, true, relu, max, i(3, 3),
                        i(2, 2), i(0, 0), same, true, id, 3),
                new Shape("padded-nobias-avg", 3, 10, 7, i(5, 3), i(1, 1), i(2, 1), t, false, relu, avg, i(2, 2),
                        i(2, 2), i(0, 0), t, true, id, 17),
                new Shape("even-kernel-same-avg", 2, 9, 9, i(4, 4), i(1, 1), i(0, 0), same, true, Activation.TANH, avg,
                        i(3, 3), i(2, 2), i(0, 0), same, true, Activation.SIGMOID, 3),
                new Shape("stride2-pad-avg-exclude-pad", 3, 8, 8, i(3, 3), i(2, 2), i(1, 1), t, true, relu, avg,
                        i(3, 3), i(1, 1), i(1, 1), t, false, id, 17),
                new Shape("stride2-pad-avg-include-pad", 3, 8, 8, i(3, 3), i(2, 2), i(1, 1), t, true, relu, avg,
                        i(3, 3), i(1, 1), i(1, 1), t, true, Activation.TANH, 1),
                new Shape("stride-2x1-max-padded", 3, 12, 9, i(3, 2), i(2, 1), i(1, 0), t, true, id, max, i(2, 3),
                        i(1, 2), i(1, 1), t, true, Activation.SOFTMAX, 17));
    }

    private static int[] i(int a, int b) {
        return new int[] {a, b};
    }

    @ParameterizedTest
    @MethodSource("shapes")
    void convPoolShapesMatchDl4j(Shape shape) {
        assertSameAsDl4j(shape.conf(), new long[] {shape.c(), shape.h(), shape.w()}, shape.batch(), 5, shape.name());
    }

    @Test
    void readsTheSegmentInPlace() {
        MultiLayerNetwork a = init(lenet(1));
        MultiLayerNetwork b = init(lenet(2));
        MemorySegment seg = paramsOf(a);
        HostNetwork host = HostNetwork.of(lenet(1), seg, 1, 28, 28);
        INDArray x = Nd4j.rand(DataType.FLOAT, 3, 1, 28, 28);
        assertClose(a.output(x, false), host.output(x), "before");
        MemorySegment.copy(paramsOf(b), 0, seg, 0, seg.byteSize()); // a new version written over the same memory
        assertClose(b.output(x, false), host.output(x), "after the segment was overwritten");
    }

    @Test
    void refusesAnLstm() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().list()
                .layer(new LSTM.Builder().nIn(4).nOut(8).activation(Activation.TANH).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build();
        assertRefused(conf, new long[] {4}, "layer=0 type=LSTM");
    }

    @Test
    void refusesADilatedConvolution() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().list()
                .layer(new ConvolutionLayer.Builder(3, 3).dilation(2, 2).nOut(4).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nOut(2).activation(Activation.IDENTITY)
                        .build())
                .setInputType(InputType.convolutional(9, 9, 1))
                .build();
        assertRefused(conf, new long[] {1, 9, 9}, "layer=0 type=ConvolutionLayer dilation=[2, 2]");
    }

    @Test
    void refusesADoubleNetwork() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().dataType(DataType.DOUBLE).list()
                .layer(new DenseLayer.Builder().nIn(4).nOut(4).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nIn(4).nOut(2)
                        .activation(Activation.IDENTITY).build())
                .build();
        assertRefused(conf, new long[] {4}, "dataType=DOUBLE");
    }

    @Test
    void refusesASegmentOfTheWrongSize() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> HostNetwork.of(mlp(1), Arena.ofAuto().allocate(8), 784));
        assertTrue(e.getMessage().contains("bytes=8 expected " + 4L * init(mlp(1)).numParams()), e.getMessage());
    }

    /** The refusal comes from the configuration alone: a 4-byte segment, never read, would fail later checks. */
    private static void assertRefused(MultiLayerConfiguration conf, long[] example, String expected) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> HostNetwork.of(conf, Arena.ofAuto().allocate(4), example));
        assertTrue(e.getMessage().contains(expected), e.getMessage());
        assertTrue(e.getMessage().contains("fix: serve it through DL4J's forward (ModelSpec.of)"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> HostNetwork.check(conf, example));
        assertEquals(e.getMessage(), assertThrows(IllegalArgumentException.class,
                () -> HostNetwork.check(conf, example)).getMessage());
    }

    @Test
    void aJvmWithoutC2IsNamedForItsWarning() {
        assertEquals("-XX:TieredStopAtLevel=1 (no C2)",
                HostNetwork.withoutC2(List.of("-Xmx512m", "-XX:TieredStopAtLevel=1", "-Xss512k")));
        assertEquals("-Xint (the interpreter only)", HostNetwork.withoutC2(List.of("-Xint")));
        assertNull(HostNetwork.withoutC2(List.of("-XX:TieredStopAtLevel=1", "-XX:TieredStopAtLevel=4")),
                "the last of a repeated flag wins");
        assertNull(HostNetwork.withoutC2(List.of("-XX:-TieredCompilation", "-Xmx1g")), "C2 alone is C2");
    }

    @Test
    void warmUpRunsBoundedPassesAndChangesNoAnswer() {
        MultiLayerNetwork net = init(lenet(6));
        HostNetwork host = HostNetwork.of(lenet(6), paramsOf(net), 1, 28, 28);
        INDArray x = Nd4j.rand(DataType.FLOAT, 5, 1, 28, 28);
        INDArray before = host.output(x);
        int passes = host.warmUp(16, java.time.Duration.ofMillis(200));
        assertTrue(passes >= 1 && passes <= HostNetwork.WARM_UP_PASSES, "passes=" + passes);
        assertClose(before, host.output(x), "after the warm-up");
        assertClose(net.output(x, false), host.output(x), "after the warm-up, against DL4J");
        assertEquals(0, host.warmUp(16, java.time.Duration.ZERO), "a spent budget runs no pass");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> host.warmUp(0, java.time.Duration.ofMillis(1)));
        assertTrue(e.getMessage().contains("maxRows=0") && e.getMessage().contains("fix:"), e.getMessage());
    }
}
