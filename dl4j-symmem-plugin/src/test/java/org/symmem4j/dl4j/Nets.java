package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.learning.config.Nesterovs;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** Small networks and generated data for the plugin tests (no downloads). */
public final class Nets {

    static final int IN = 12;
    static final int HIDDEN = 24;
    static final int OUT = 3;

    private Nets() {
    }

    public static IUpdater updater(String name) {
        return switch (name) {
            case "sgd" -> new Sgd(0.1);
            case "adam" -> new Adam(0.01);
            default -> throw new IllegalArgumentException(name);
        };
    }

    public static MultiLayerNetwork mlp(IUpdater updater, DataType dtype) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(42).dataType(dtype).updater(updater).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(IN).nOut(HIDDEN).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(HIDDEN).nOut(HIDDEN).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(HIDDEN).nOut(OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /**
     * An MLP for sharding tests, by recipe: {@code sgd}, {@code nesterov}, {@code adam},
     * {@code adamw} (Adam with decoupled weight decay scaled by the learning rate, DL4J's
     * {@code WeightDecay} after the updater), {@code nesterov+l2} (L2 before the updater),
     * {@code mixed} (three updater blocks with 2, 1 and 0 state arrays per parameter), or
     * {@code adam+<GradientNormalization>} with threshold {@code normThreshold}.
     */
    static MultiLayerNetwork mlp(String recipe, DataType dtype, int hidden, double normThreshold) {
        NeuralNetConfiguration.Builder b = new NeuralNetConfiguration.Builder()
                .seed(42).dataType(dtype).weightInit(WeightInit.XAVIER);
        IUpdater hiddenUpdater = null;
        IUpdater outputUpdater = null;
        switch (recipe) {
            case "sgd" -> b.updater(new Sgd(0.1));
            case "nesterov" -> b.updater(new Nesterovs(0.05, 0.9));
            case "adam" -> b.updater(new Adam(0.01));
            case "adamw" -> b.updater(new Adam(0.01)).weightDecay(0.05, true);
            case "nesterov+l2" -> b.updater(new Nesterovs(0.05, 0.9)).l2(1e-2);
            case "mixed" -> {
                b.updater(new Adam(0.01));
                hiddenUpdater = new Nesterovs(0.05, 0.9);
                outputUpdater = new Sgd(0.1);
            }
            default -> {
                if (!recipe.startsWith("adam+")) {
                    throw new IllegalArgumentException(recipe);
                }
                b.updater(new Adam(0.01)).gradientNormalization(GradientNormalization.valueOf(recipe.substring(5)))
                        .gradientNormalizationThreshold(normThreshold);
            }
        }
        DenseLayer.Builder second = new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.RELU);
        OutputLayer.Builder out = new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(OUT)
                .activation(Activation.SOFTMAX);
        if (hiddenUpdater != null) {
            second.updater(hiddenUpdater);
            out.updater(outputUpdater);
        }
        MultiLayerConfiguration conf = b.list()
                .layer(new DenseLayer.Builder().nIn(IN).nOut(hidden).activation(Activation.TANH).build())
                .layer(second.build())
                .layer(out.build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    static ComputationGraph graph(IUpdater updater, DataType dtype) {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(7).dataType(dtype).updater(updater).weightInit(WeightInit.XAVIER)
                .graphBuilder()
                .addInputs("in")
                .addLayer("dense", new DenseLayer.Builder().nIn(IN).nOut(HIDDEN).activation(Activation.TANH).build(), "in")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(HIDDEN).nOut(OUT)
                        .activation(Activation.SOFTMAX).build(), "dense")
                .setOutputs("out")
                .build();
        ComputationGraph g = new ComputationGraph(conf);
        g.init();
        return g;
    }

    /** {@code count} batches of {@code size} examples: a learnable rule (class = argmax of three feature sums). */
    static List<DataSet> batches(long seed, int count, int size, DataType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>();
        for (int b = 0; b < count; b++) {
            out.add(batch(rnd, size, dtype));
        }
        return out;
    }

    static DataSet batch(SplittableRandom rnd, int size, DataType dtype) {
        double[][] x = new double[size][IN];
        double[][] y = new double[size][OUT];
        for (int i = 0; i < size; i++) {
            double[] sums = new double[OUT];
            for (int j = 0; j < IN; j++) {
                x[i][j] = rnd.nextDouble(-1, 1);
                sums[j % OUT] += x[i][j];
            }
            int cls = sums[0] >= sums[1] && sums[0] >= sums[2] ? 0 : sums[1] >= sums[2] ? 1 : 2;
            y[i][cls] = 1;
        }
        INDArray features = Nd4j.create(x).castTo(dtype);
        INDArray labels = Nd4j.create(y).castTo(dtype);
        return new DataSet(features, labels);
    }

    /** The batches of one step merged into one, in worker order: what one model sees as one big batch. */
    static DataSet merged(List<DataSet> batches) {
        return DataSet.merge(batches);
    }

    /**
     * Largest |a-b| / (1 + |b|) over all elements. Plain Java over copies: ND4J's math helpers work
     * in place, and castTo returns the same array when the type already matches.
     */
    public static double maxRelativeDifference(INDArray a, INDArray b) {
        double[] x = a.dup().castTo(DataType.DOUBLE).toDoubleVector();
        double[] y = b.dup().castTo(DataType.DOUBLE).toDoubleVector();
        if (x.length != y.length) {
            throw new IllegalArgumentException("lengths differ: " + x.length + " vs " + y.length);
        }
        double max = 0;
        for (int i = 0; i < x.length; i++) {
            double d = Math.abs(x[i] - y[i]) / (1 + Math.abs(y[i]));
            max = Double.isNaN(d) ? Double.POSITIVE_INFINITY : Math.max(max, d);
        }
        return max;
    }
}
