package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.MergeVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.CenterLossOutputLayer;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.deeplearning4j.nn.params.CenterLossParamInitializer;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * Networks whose parameter vector holds state that DL4J updates outside its updaters
 * (BatchNormalization's running statistics, CenterLossOutputLayer's class centers), and data
 * whose batches differ in distribution, so that merging per-worker statistics wrongly shows.
 */
final class StateNets {

    /** Parameter names of non-gradient state: BatchNorm's running statistics and the center-loss centers. */
    static final Set<String> STATE_PARAMS = Set.of(BatchNormalizationParamInitializer.GLOBAL_MEAN,
            BatchNormalizationParamInitializer.GLOBAL_VAR, BatchNormalizationParamInitializer.GLOBAL_LOG_STD,
            CenterLossParamInitializer.CENTER_KEY);

    static final int CNN_SIDE = 5;
    static final int CNN_CHANNELS = 3;

    private StateNets() {
    }

    /**
     * Weights frozen (SGD with learning rate 0), so only the running statistics move: a dense
     * layer, then BatchNorm with the variance or the log10(std) parameterization (DL4J's default).
     * No BatchNorm takes another's output: in training mode each worker normalizes with its own
     * batch's statistics (as one model would on that batch alone), so a BatchNorm behind another
     * sees other activations than one model on the merged batch.
     */
    static MultiLayerNetwork batchNormMlp(DataType dtype, boolean useLogStd) {
        return batchNormMlp(dtype, useLogStd, new Sgd(0.0));
    }

    /** {@link #batchNormMlp(DataType, boolean)} with {@code updater} for the weights. */
    static MultiLayerNetwork batchNormMlp(DataType dtype, boolean useLogStd, IUpdater updater) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(11).dataType(dtype).updater(updater).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build())
                .layer(new BatchNormalization.Builder().nIn(Nets.HIDDEN).nOut(Nets.HIDDEN).useLogStd(useLogStd).decay(0.8)
                        .build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /**
     * A graph with two BatchNorms side by side: the variance parameterization right on the input
     * (its statistics are the data's own) and log10(std) after a dense layer, merged for the output.
     */
    static ComputationGraph batchNormGraph(DataType dtype) {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(13).dataType(dtype).updater(new Sgd(0.0)).weightInit(WeightInit.XAVIER)
                .graphBuilder()
                .addInputs("in")
                .addLayer("bnIn", new BatchNormalization.Builder().nIn(Nets.IN).nOut(Nets.IN).useLogStd(false).decay(0.8)
                        .build(), "in")
                .addLayer("dense", new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build(),
                        "in")
                .addLayer("bnHidden", new BatchNormalization.Builder().nIn(Nets.HIDDEN).nOut(Nets.HIDDEN).useLogStd(true)
                        .build(), "dense")
                .addVertex("both", new MergeVertex(), "bnIn", "bnHidden")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.IN + Nets.HIDDEN)
                        .nOut(Nets.OUT).activation(Activation.SOFTMAX).build(), "both")
                .setOutputs("out")
                .build();
        ComputationGraph g = new ComputationGraph(conf);
        g.init();
        return g;
    }

    /** Convolution, then BatchNorm over channels (statistics over examples and positions: DL4J's 4-D path). */
    static MultiLayerNetwork batchNormCnn(DataType dtype, boolean useLogStd) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(17).dataType(dtype).updater(new Sgd(0.0)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new ConvolutionLayer.Builder(2, 2).nOut(4).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().useLogStd(useLogStd).decay(0.7).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(CNN_SIDE, CNN_SIDE, CNN_CHANNELS))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /**
     * A dense layer feeding a center-loss output layer; weights frozen (SGD, learning rate 0), so
     * only the centers move (DL4J gives them the NoOp updater and computes their update itself).
     */
    static MultiLayerNetwork centerLossMlp(DataType dtype, boolean gradientCheck) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(19).dataType(dtype).updater(new Sgd(0.0)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build())
                .layer(centerLoss(gradientCheck))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    static ComputationGraph centerLossGraph(DataType dtype) {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(23).dataType(dtype).updater(new Sgd(0.0)).weightInit(WeightInit.XAVIER)
                .graphBuilder()
                .addInputs("in")
                .addLayer("dense", new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build(),
                        "in")
                .addLayer("out", centerLoss(false), "dense")
                .setOutputs("out")
                .build();
        ComputationGraph g = new ComputationGraph(conf);
        g.init();
        return g;
    }

    private static CenterLossOutputLayer centerLoss(boolean gradientCheck) {
        return new CenterLossOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                .activation(Activation.SOFTMAX).alpha(0.5).lambda(0.01).gradientCheck(gradientCheck).build();
    }

    /**
     * One batch per size. Every batch has its own offset and scale per feature, and its own class
     * mix (batch b draws class b mod 3 half the time), so per-worker means, variances and class
     * counts all differ from the merged batch's.
     */
    static List<DataSet> shiftedBatches(long seed, int[] sizes, DataType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>();
        for (int b = 0; b < sizes.length; b++) {
            double[] offset = new double[Nets.IN];
            double[] scale = new double[Nets.IN];
            for (int j = 0; j < Nets.IN; j++) {
                offset[j] = rnd.nextDouble(-3, 3);
                scale[j] = rnd.nextDouble(0.3, 2.5);
            }
            double[][] x = new double[sizes[b]][Nets.IN];
            double[][] y = new double[sizes[b]][Nets.OUT];
            for (int i = 0; i < sizes[b]; i++) {
                int cls = rnd.nextBoolean() ? b % Nets.OUT : rnd.nextInt(Nets.OUT);
                y[i][cls] = 1;
                for (int j = 0; j < Nets.IN; j++) {
                    double z = rnd.nextDouble(-1, 1) + (j % Nets.OUT == cls ? 0.8 : 0);
                    x[i][j] = offset[j] + scale[j] * z;
                }
            }
            out.add(new DataSet(Nd4j.create(x).castTo(dtype), Nd4j.create(y).castTo(dtype)));
        }
        return out;
    }

    /** Image batches [n, channels, side, side] with a per-batch offset and scale per channel. */
    static List<DataSet> shiftedImageBatches(long seed, int[] sizes, DataType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>();
        for (int size : sizes) {
            double[] flat = new double[size * CNN_CHANNELS * CNN_SIDE * CNN_SIDE];
            double[][] y = new double[size][Nets.OUT];
            double[] offset = new double[CNN_CHANNELS];
            double[] scale = new double[CNN_CHANNELS];
            for (int c = 0; c < CNN_CHANNELS; c++) {
                offset[c] = rnd.nextDouble(-2, 2);
                scale[c] = rnd.nextDouble(0.5, 2);
            }
            int k = 0;
            for (int i = 0; i < size; i++) {
                y[i][rnd.nextInt(Nets.OUT)] = 1;
                for (int c = 0; c < CNN_CHANNELS; c++) {
                    for (int p = 0; p < CNN_SIDE * CNN_SIDE; p++) {
                        flat[k++] = offset[c] + scale[c] * rnd.nextDouble(-1, 1);
                    }
                }
            }
            INDArray features = Nd4j.create(flat, new long[] {size, CNN_CHANNELS, CNN_SIDE, CNN_SIDE}, 'c').castTo(dtype);
            out.add(new DataSet(features, Nd4j.create(y).castTo(dtype)));
        }
        return out;
    }

    /** The state parameters of {@code model} (running statistics, centers), concatenated in parameter-table order. */
    static INDArray stateParams(Model model) {
        Map<String, INDArray> table = model instanceof MultiLayerNetwork m ? m.paramTable() : ((ComputationGraph) model).paramTable();
        List<INDArray> parts = new ArrayList<>();
        for (Map.Entry<String, INDArray> e : table.entrySet()) {
            String param = e.getKey().substring(e.getKey().lastIndexOf('_') + 1);
            if (STATE_PARAMS.contains(param)) {
                parts.add(e.getValue().dup().reshape(e.getValue().length()));
            }
        }
        if (parts.isEmpty()) {
            throw new IllegalArgumentException("model has no state parameters: " + table.keySet());
        }
        return Nd4j.concat(0, parts.toArray(INDArray[]::new));
    }

    /**
     * Trains a clone of {@code original} through the wrapper ({@code stage} null: plain data
     * parallelism), checking after every step that the replicas' parameters are bitwise equal;
     * returns the trained clone.
     */
    static Model trainWrapped(Model original, int workers, ZeroStage stage, List<DataSet> data) {
        Model copy = original instanceof MultiLayerNetwork m ? m.clone() : ((ComputationGraph) original).clone();
        SymmemParallelWrapper.Builder builder = copy instanceof MultiLayerNetwork m
                ? SymmemParallelWrapper.builder(m) : SymmemParallelWrapper.builder((ComputationGraph) copy);
        builder.workers(workers);
        if (stage != null) {
            builder.sharding(stage);
        }
        SymmemParallelWrapper[] holder = new SymmemParallelWrapper[1];
        builder.stepListener(report -> {
            List<ModelReplica> replicas = holder[0].replicas();
            for (int r = 1; r < replicas.size(); r++) {
                if (!ModelReplica.bitwiseEqual(replicas.getFirst().params(), replicas.get(r).params())) {
                    throw new AssertionError("replica " + r + " differs bitwise from replica 0 after step " + report.step()
                            + " (stage " + stage + ")");
                }
            }
        });
        try (SymmemParallelWrapper wrapper = builder.build()) {
            holder[0] = wrapper;
            wrapper.fit(new BatchListIterator(data));
        }
        return copy;
    }

    /**
     * Trains a clone of {@code original} as one model: each step is one {@code fit} on the merged
     * batch of the step's (up to {@code workers}) batches, in worker order.
     */
    static Model trainMerged(Model original, int workers, List<DataSet> data) {
        Model copy = original instanceof MultiLayerNetwork m ? m.clone() : ((ComputationGraph) original).clone();
        for (int s = 0; s < data.size(); s += workers) {
            DataSet merged = Nets.merged(data.subList(s, Math.min(data.size(), s + workers)));
            if (copy instanceof MultiLayerNetwork m) {
                m.fit(merged);
            } else {
                ((ComputationGraph) copy).fit(merged);
            }
        }
        return copy;
    }

    /** The model's inference-mode output for {@code features} (BatchNorm normalizes with its running statistics). */
    static INDArray inferenceOutput(Model model, INDArray features) {
        INDArray out = model instanceof MultiLayerNetwork m ? m.output(features, false)
                : ((ComputationGraph) model).outputSingle(false, features);
        return out.reshape(out.length());
    }
}
