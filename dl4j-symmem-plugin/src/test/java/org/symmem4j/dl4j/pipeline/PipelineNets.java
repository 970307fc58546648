package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** Small MLPs and generated data for the pipeline tests (no downloads). */
final class PipelineNets {

    /** Layer widths of the 8-layer test MLP: 7 dense layers and an output layer, 16 inputs, 4 classes. */
    static final int[] WIDTHS = {16, 32, 48, 64, 48, 32, 24, 16, 4};

    private PipelineNets() {
    }

    static IUpdater updater(String name) {
        return switch (name) {
            case "sgd" -> new Sgd(0.1);
            case "adam" -> new Adam(0.01);
            default -> throw new IllegalArgumentException(name);
        };
    }

    /** The 8-layer MLP: tanh hidden layers (no dead units), softmax + cross-entropy, fixed seed. */
    static MultiLayerNetwork mlp(IUpdater updater, double l2, DataType dtype) {
        return mlp(updater, l2, dtype, WIDTHS);
    }

    /** An MLP with {@code widths.length - 1} layers: dense layers, then an output layer; layer i maps widths[i] to widths[i+1]. */
    static MultiLayerNetwork mlp(IUpdater updater, double l2, DataType dtype, int... widths) {
        NeuralNetConfiguration.ListBuilder list = new NeuralNetConfiguration.Builder()
                .seed(42).dataType(dtype).updater(updater).weightInit(WeightInit.XAVIER).l2(l2)
                .list();
        for (int i = 0; i + 2 < widths.length; i++) {
            list.layer(new DenseLayer.Builder().nIn(widths[i]).nOut(widths[i + 1]).activation(Activation.TANH).build());
        }
        int last = widths.length - 2;
        list.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(widths[last]).nOut(widths[last + 1])
                .activation(Activation.SOFTMAX).build());
        MultiLayerConfiguration conf = list.build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /**
     * {@code count} batches of {@code size} examples with {@code in} features and {@code classes}
     * classes; the class is the argmax of per-class feature sums, a rule the network can learn.
     */
    static List<DataSet> batches(long seed, int count, int size, int in, int classes, DataType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>(count);
        for (int b = 0; b < count; b++) {
            double[][] x = new double[size][in];
            double[][] y = new double[size][classes];
            for (int i = 0; i < size; i++) {
                double[] sums = new double[classes];
                for (int j = 0; j < in; j++) {
                    x[i][j] = rnd.nextDouble(-1, 1);
                    sums[j % classes] += x[i][j];
                }
                int best = 0;
                for (int c = 1; c < classes; c++) {
                    best = sums[c] > sums[best] ? c : best;
                }
                y[i][best] = 1;
            }
            out.add(new DataSet(Nd4j.create(x).castTo(dtype), Nd4j.create(y).castTo(dtype)));
        }
        return out;
    }

    static List<DataSet> batches(long seed, int count, int size, DataType dtype) {
        return batches(seed, count, size, WIDTHS[0], WIDTHS[WIDTHS.length - 1], dtype);
    }

    /** Rows {@code [from, from + count)} of {@code batch}, as a batch of its own. */
    static DataSet rows(DataSet batch, int from, int count) {
        return new DataSet(
                batch.getFeatures().get(NDArrayIndex.interval(from, from + count), NDArrayIndex.all()).dup(),
                batch.getLabels().get(NDArrayIndex.interval(from, from + count), NDArrayIndex.all()).dup());
    }

    /** Bitwise equality of two arrays' values (same type and length). */
    static boolean bitwiseEqual(INDArray a, INDArray b) {
        if (a.dataType() != b.dataType() || a.length() != b.length()) {
            return false;
        }
        double[] x = a.dup().castTo(DataType.DOUBLE).toDoubleVector();
        double[] y = b.dup().castTo(DataType.DOUBLE).toDoubleVector();
        for (int i = 0; i < x.length; i++) {
            if (Double.doubleToRawLongBits(x[i]) != Double.doubleToRawLongBits(y[i])) {
                return false;
            }
        }
        return true;
    }

    /** Asserts two networks hold the same state: parameters and updater state bitwise, iteration and epoch counts. */
    static void assertSameState(MultiLayerNetwork expected, MultiLayerNetwork actual, String what) {
        org.junit.jupiter.api.Assertions.assertTrue(bitwiseEqual(expected.params(), actual.params()), what + ": parameters");
        org.junit.jupiter.api.Assertions.assertTrue(bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), what + ": updater state");
        org.junit.jupiter.api.Assertions.assertEquals(expected.getIterationCount(), actual.getIterationCount(), what + ": iterations");
        org.junit.jupiter.api.Assertions.assertEquals(expected.getEpochCount(), actual.getEpochCount(), what + ": epochs");
    }
}
