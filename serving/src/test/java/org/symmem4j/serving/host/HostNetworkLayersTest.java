package org.symmem4j.serving.host;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.symmem4j.serving.host.HostNetworkTest.assertClose;
import static org.symmem4j.serving.host.HostNetworkTest.init;
import static org.symmem4j.serving.host.HostNetworkTest.paramsOf;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.DropoutLayer;
import org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.conf.weightnoise.DropConnect;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * HostNetwork's batch normalization, dropout, activation and global pooling layers against DL4J's own forward pass
 * ({@code net.output(x, false)}) over the same parameters, at batch 1 and 7, and their refusals.
 */
class HostNetworkLayersTest {

    private static final int[] BATCHES = {1, 7};

    /** conv, BN (log10 stdev, the default; a ReLU DL4J does not apply), max pool, BN locked, softmax output. */
    static MultiLayerConfiguration cnnWithBatchNorm(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(6).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2)
                        .build())
                .layer(new BatchNormalization.Builder().lockGammaBeta(true).gamma(1.5).beta(-0.25).eps(1e-3).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(5).activation(Activation.SOFTMAX)
                        .build())
                .setInputType(InputType.convolutional(10, 9, 3))
                .build();
    }

    /** dense, BN over features (variance stored as is), dense, BN locked, identity output. */
    static MultiLayerConfiguration mlpWithBatchNorm(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new DenseLayer.Builder().nIn(20).nOut(19).activation(Activation.TANH).build())
                .layer(new BatchNormalization.Builder().useLogStd(false).build())
                .layer(new DenseLayer.Builder().nOut(12).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().lockGammaBeta(true).useLogStd(false).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nOut(3).activation(Activation.IDENTITY)
                        .build())
                .setInputType(InputType.feedForward(20))
                .build();
    }

    /**
     * Sets every batch normalization's statistics (and gamma, beta where they are parameters) to random values away
     * from the initial 0 and 1, so that a swapped or misread vector shows.
     */
    static void randomizeBatchNorm(MultiLayerNetwork net, long seed) {
        Nd4j.getRandom().setSeed(seed);
        for (Layer layer : net.getLayers()) {
            if (!(layer.conf().getLayer() instanceof BatchNormalization b)) {
                continue;
            }
            long n = b.getNOut();
            if (!b.isLockGammaBeta()) {
                layer.getParam("gamma").assign(Nd4j.rand(DataType.FLOAT, 1, n).muli(1.5).addi(0.25));
                layer.getParam("beta").assign(Nd4j.rand(DataType.FLOAT, 1, n).subi(0.5).muli(2));
            }
            layer.getParam("mean").assign(Nd4j.rand(DataType.FLOAT, 1, n).subi(0.5).muli(3));
            if (b.isUseLogStd()) {
                layer.getParam("log10stdev").assign(Nd4j.rand(DataType.FLOAT, 1, n).subi(0.5)); // stdev 0.3 to 3
            } else {
                layer.getParam("var").assign(Nd4j.rand(DataType.FLOAT, 1, n).muli(4).addi(0.05));
            }
        }
    }

    private static INDArray features(long[] example, int batch, long seed) {
        long[] shape = new long[example.length + 1];
        shape[0] = batch;
        System.arraycopy(example, 0, shape, 1, example.length);
        Nd4j.getRandom().setSeed(seed);
        return Nd4j.rand(DataType.FLOAT, shape).subi(0.5).muli(2);
    }

    private static void assertSameAsDl4j(MultiLayerNetwork net, long[] example, String what) {
        HostNetwork host = HostNetwork.of(net.getLayerWiseConfigurations(), paramsOf(net), example);
        for (int batch : BATCHES) {
            INDArray x = features(example, batch, 31L * batch);
            assertClose(net.output(x, false), host.output(x), what + " batch=" + batch);
        }
    }

    @Test
    void batchNormAfterConvolutionMatchesDl4j() {
        MultiLayerNetwork net = init(cnnWithBatchNorm(3));
        randomizeBatchNorm(net, 5);
        assertSameAsDl4j(net, new long[] {3, 10, 9}, "BN after conv");
    }

    @Test
    void batchNormAfterDenseMatchesDl4j() {
        MultiLayerNetwork net = init(mlpWithBatchNorm(4));
        randomizeBatchNorm(net, 6);
        assertSameAsDl4j(net, new long[] {20}, "BN after dense");
    }

    @Test
    void batchNormTrainedByDl4jMatchesDl4j() {
        // DL4J's own training moves the global mean and log10 stdev (and gamma, beta): three iterations on random data
        MultiLayerNetwork net = init(cnnWithBatchNorm(8));
        float[] before = net.getLayer(1).getParam("mean").toFloatVector();
        for (int i = 0; i < 3; i++) {
            INDArray labels = Nd4j.zeros(DataType.FLOAT, 16, 5);
            for (int r = 0; r < 16; r++) {
                labels.putScalar(r, r % 5, 1f);
            }
            net.fit(features(new long[] {3, 10, 9}, 16, 100 + i).addi(0.7), labels);
        }
        float[] after = net.getLayer(1).getParam("mean").toFloatVector();
        assertFalse(Arrays.equals(before, after), "training moved the global mean");
        assertSameAsDl4j(net, new long[] {3, 10, 9}, "BN trained");
    }

    @Test
    void batchNormReadsNewParametersAtEveryCall() {
        // scale and shift are folded per call: a version written over the segment is what the next call uses
        MultiLayerNetwork a = init(mlpWithBatchNorm(1));
        MultiLayerNetwork b = init(mlpWithBatchNorm(1));
        randomizeBatchNorm(a, 1);
        randomizeBatchNorm(b, 2);
        MemorySegment seg = paramsOf(a);
        HostNetwork host = HostNetwork.of(mlpWithBatchNorm(1), seg, 20);
        INDArray x = features(new long[] {20}, 7, 9);
        assertClose(a.output(x, false), host.output(x), "before");
        MemorySegment.copy(paramsOf(b), 0, seg, 0, seg.byteSize());
        assertClose(b.output(x, false), host.output(x), "after the segment was overwritten");
    }

    @Test
    void dropoutActivationAndGlobalPoolingMatchDl4j() {
        for (PoolingType type : new PoolingType[] {PoolingType.MAX, PoolingType.AVG, PoolingType.SUM}) {
            for (boolean collapse : new boolean[] {true, false}) {
                MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(12).dropOut(0.5).list()
                        .layer(new ConvolutionLayer.Builder(3, 3).nOut(7).activation(Activation.IDENTITY).build())
                        .layer(new ActivationLayer.Builder().activation(Activation.TANH).build())
                        .layer(new DropoutLayer.Builder(0.3).build())
                        .layer(new GlobalPoolingLayer.Builder(type).collapseDimensions(collapse).build())
                        .layer(new DenseLayer.Builder().nOut(9).activation(Activation.IDENTITY).build())
                        .layer(new ActivationLayer(Activation.SOFTMAX))
                        .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nOut(4)
                                .activation(Activation.SIGMOID).build())
                        .setInputType(InputType.convolutional(8, 11, 2))
                        .build();
                assertSameAsDl4j(init(conf), new long[] {2, 8, 11}, "global " + type + " collapse=" + collapse);
            }
        }
    }

    @Test
    void globalPoolingCollapsesToTheShapeDl4jGives() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(2).list()
                .layer(new ConvolutionLayer.Builder(2, 2).nOut(3).activation(Activation.RELU).build())
                .layer(new GlobalPoolingLayer.Builder(PoolingType.AVG).collapseDimensions(false).build())
                .setInputType(InputType.convolutional(5, 5, 1))
                .build();
        MultiLayerNetwork net = init(conf);
        INDArray x = features(new long[] {1, 5, 5}, 7, 3);
        INDArray ref = net.output(x, false);
        assertEquals(4, ref.rank(), "DL4J keeps [n, c, 1, 1]");
        assertClose(ref, HostNetwork.of(conf, paramsOf(net), 1, 5, 5).output(x), "uncollapsed");
    }

    @Test
    void refusesWhatItDoesNotRun() {
        assertRefused(new NeuralNetConfiguration.Builder().list()
                        .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).activation(Activation.RELU).build())
                        .layer(new GlobalPoolingLayer.Builder(PoolingType.PNORM).build())
                        .setInputType(InputType.convolutional(6, 6, 1)).build(),
                new long[] {1, 6, 6}, "layer=1 type=GlobalPoolingLayer poolingType=PNORM");
        assertRefused(new NeuralNetConfiguration.Builder().list()
                        .layer(new DenseLayer.Builder().nOut(4).activation(Activation.RELU).build())
                        .layer(new BatchNormalization.Builder().weightNoise(new DropConnect(0.5)).build())
                        .setInputType(InputType.feedForward(3)).build(),
                new long[] {3}, "layer=1 type=BatchNormalization weightNoise=");
        assertRefused(new NeuralNetConfiguration.Builder().list()
                        .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).activation(Activation.RELU).build())
                        .layer(new ActivationLayer(Activation.SOFTMAX))
                        .setInputType(InputType.convolutional(6, 6, 1)).build(),
                new long[] {1, 6, 6}, "layer=1 type=ActivationLayer activation=softmax");
        assertRefused(new NeuralNetConfiguration.Builder().list()
                        .layer(new ConvolutionLayer.Builder(3, 3).nIn(1).nOut(4).activation(Activation.RELU).build())
                        .layer(new GlobalPoolingLayer.Builder(PoolingType.MAX).poolingDimensions(2).build())
                        .build(), // no setInputType, which sets the dimensions to 2, 3 for a CNN input
                new long[] {1, 6, 6}, "layer=1 type=GlobalPoolingLayer poolingDimensions=[2]");
        assertRefused(new NeuralNetConfiguration.Builder().list()
                        .layer(new BatchNormalization.Builder().build()) // setInputType gives it the input's format
                        .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nOut(2)
                                .activation(Activation.IDENTITY).build())
                        .setInputType(InputType.convolutional(6, 6, 1, CNN2DFormat.NHWC)).build(),
                new long[] {1, 6, 6}, "layer=0 type=BatchNormalization cnn2DFormat=NHWC");
    }

    @Test
    void refusalListsTheSupportedLayers() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> HostNetwork.check(
                new NeuralNetConfiguration.Builder().list()
                        .layer(new org.deeplearning4j.nn.conf.layers.LSTM.Builder().nIn(4).nOut(8).build())
                        .build(), 4));
        assertTrue(e.getMessage().contains("supported: ConvolutionLayer, SubsamplingLayer, DenseLayer, OutputLayer,"
                + " BatchNormalization, DropoutLayer, ActivationLayer, GlobalPoolingLayer;"), e.getMessage());
    }

    private static void assertRefused(MultiLayerConfiguration conf, long[] example, String expected) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> HostNetwork.of(conf, Arena.ofAuto().allocate(4), example));
        assertTrue(e.getMessage().contains(expected), e.getMessage());
        assertTrue(e.getMessage().contains("fix: serve it through DL4J's forward (ModelSpec.of)"), e.getMessage());
    }
}
