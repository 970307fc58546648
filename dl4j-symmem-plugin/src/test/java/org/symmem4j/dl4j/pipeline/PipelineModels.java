package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.dropout.GaussianNoise;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.CnnLossLayer;
import org.deeplearning4j.nn.conf.layers.Convolution1DLayer;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.DropoutLayer;
import org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.LossLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.RnnLossLayer;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.conf.layers.Subsampling1DLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.conf.layers.recurrent.Bidirectional;
import org.deeplearning4j.nn.conf.layers.recurrent.LastTimeStep;
import org.deeplearning4j.nn.conf.layers.recurrent.SimpleRnn;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * Small networks of every layer kind the pipeline supports, with generated data of the right shapes
 * (images, sequences with masks), for the equivalence tests against plain DL4J. fp64 throughout: the
 * pipeline and DL4J then agree to rounding.
 */
final class PipelineModels {

    static final int CLASSES = 3;

    private PipelineModels() {
    }

    /** A network to test and the shape of its data. */
    record Model(String name, MultiLayerNetwork network, Data data, int[] boundaries) {
        @Override
        public String toString() {
            return name;
        }
    }

    /** What the generated features, labels and masks look like. */
    enum Data {
        /** [b, 8] features, [b, 3] one-hot labels */
        DENSE,
        /** [b, 2, 10, 10] images (NCHW), [b, 3] labels */
        IMAGES,
        /** [b, 10, 10, 2] images (NHWC), [b, 3] labels */
        IMAGES_NHWC,
        /** [b, 2, 10, 10] images, [b, 3, 10, 10] per-pixel one-hot labels */
        IMAGES_PER_PIXEL,
        /** [b, 4, 7] sequences with a features mask (lengths 2..7), [b, 3] labels */
        SEQUENCES_TO_ONE,
        /** [b, 4, 7] sequences with features and labels masks, [b, 3, 7] labels per step */
        SEQUENCES_TO_SEQUENCES
    }

    private static NeuralNetConfiguration.ListBuilder base(IUpdater updater, long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).dataType(DataType.DOUBLE).updater(updater)
                .weightInit(WeightInit.XAVIER).list();
    }

    private static MultiLayerNetwork init(MultiLayerConfiguration conf) {
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** Every layer kind without batch interaction, each with stage boundaries that cut where its activations are 3-D or 4-D. */
    static List<Model> layerKinds(IUpdater updater) {
        List<Model> models = new ArrayList<>();
        models.add(new Model("conv+subsampling NCHW, cut at 4-D", init(base(updater, 11)
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(6).activation(Activation.TANH).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.AVG).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(8).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(10, 10, 2)).build()), Data.IMAGES, new int[] {1, 3}));
        models.add(new Model("conv NHWC, cut at 4-D", init(base(updater, 12)
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).dataFormat(CNN2DFormat.NHWC)
                        .activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2)
                        .dataFormat(CNN2DFormat.NHWC).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(10, 10, 2, CNN2DFormat.NHWC)).build()), Data.IMAGES_NHWC,
                new int[] {1, 2}));
        models.add(new Model("conv to per-pixel CnnLossLayer", init(base(updater, 13)
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).convolutionMode(
                        org.deeplearning4j.nn.conf.ConvolutionMode.Same).activation(Activation.TANH).build())
                .layer(new ConvolutionLayer.Builder(1, 1).nOut(CLASSES).activation(Activation.IDENTITY).build())
                .layer(new CnnLossLayer.Builder(LossFunctions.LossFunction.MCXENT).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(10, 10, 2)).build()), Data.IMAGES_PER_PIXEL, new int[] {1, 2}));
        models.add(new Model("LSTM x2 to RnnOutputLayer, masks, cut at 3-D", init(base(updater, 14)
                .layer(new LSTM.Builder().nOut(6).activation(Activation.TANH).build())
                .layer(new LSTM.Builder().nOut(5).activation(Activation.TANH).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(4, 7)).build()), Data.SEQUENCES_TO_SEQUENCES, new int[] {1, 2}));
        models.add(new Model("LSTM to RnnLossLayer, masks", init(base(updater, 15)
                .layer(new LSTM.Builder().nOut(6).activation(Activation.TANH).build())
                .layer(new LSTM.Builder().nOut(CLASSES).activation(Activation.TANH).build())
                .layer(new RnnLossLayer.Builder(LossFunctions.LossFunction.MCXENT).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(4, 7)).build()), Data.SEQUENCES_TO_SEQUENCES, new int[] {1, 2}));
        models.add(new Model("SimpleRnn + global max pooling + dense, features mask", init(base(updater, 16)
                .layer(new SimpleRnn.Builder().nOut(6).activation(Activation.TANH).build())
                .layer(new GlobalPoolingLayer.Builder(PoolingType.MAX).build())
                .layer(new DenseLayer.Builder().nOut(5).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(4, 7)).build()), Data.SEQUENCES_TO_ONE, new int[] {1, 3}));
        models.add(new Model("LSTM + LastTimeStep(LSTM), features mask", init(base(updater, 17)
                .layer(new LSTM.Builder().nOut(6).activation(Activation.TANH).build())
                .layer(new LastTimeStep(new LSTM.Builder().nOut(5).activation(Activation.TANH).build()))
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(4, 7)).build()), Data.SEQUENCES_TO_ONE, new int[] {1, 2}));
        models.add(new Model("Bidirectional(LSTM) CONCAT and MUL, masks", init(base(updater, 18)
                .layer(new Bidirectional(Bidirectional.Mode.CONCAT, new LSTM.Builder().nOut(4)
                        .activation(Activation.TANH).build()))
                .layer(new Bidirectional(Bidirectional.Mode.MUL, new LSTM.Builder().nOut(3)
                        .activation(Activation.TANH).build()))
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(4, 7)).build()), Data.SEQUENCES_TO_SEQUENCES, new int[] {1, 2}));
        models.add(new Model("Convolution1D + Subsampling1D + global pooling, features mask", init(base(updater, 19)
                .layer(new Convolution1DLayer.Builder().kernelSize(3).nOut(5).activation(Activation.TANH).build())
                .layer(new Subsampling1DLayer.Builder(PoolingType.MAX).kernelSize(2).stride(1).build())
                .layer(new GlobalPoolingLayer.Builder(PoolingType.AVG).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(4, 7)).build()), Data.SEQUENCES_TO_ONE, new int[] {1, 2}));
        models.add(new Model("dense + ActivationLayer + LossLayer", init(base(updater, 20)
                .layer(new DenseLayer.Builder().nIn(8).nOut(12).activation(Activation.IDENTITY).build())
                .layer(new ActivationLayer.Builder().activation(Activation.ELU).build())
                .layer(new DenseLayer.Builder().nIn(12).nOut(CLASSES).activation(Activation.IDENTITY).build())
                .layer(new LossLayer.Builder(LossFunctions.LossFunction.MCXENT).activation(Activation.SOFTMAX).build())
                .build()), Data.DENSE, new int[] {1, 2}));
        return models;
    }

    /** An MLP with batch normalization (2-D) between dense layers. */
    static MultiLayerNetwork denseBatchNorm(IUpdater updater, boolean useLogStd) {
        return init(base(updater, 21)
                .layer(new DenseLayer.Builder().nIn(8).nOut(10).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().useLogStd(useLogStd).decay(0.8).build())
                .layer(new ActivationLayer.Builder().activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nOut(6).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.feedForward(8)).build());
    }

    /** A CNN with batch normalization (4-D, per channel) after each convolution. */
    static MultiLayerNetwork convBatchNorm(IUpdater updater, boolean useLogStd) {
        return init(base(updater, 22)
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().useLogStd(useLogStd).decay(0.7).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(5).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().useLogStd(useLogStd).decay(0.7).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(10, 10, 2)).build());
    }

    /** An MLP with dropout on two dense layers, a DropoutLayer and Gaussian noise on the output layer's input. */
    static MultiLayerNetwork denseDropout(IUpdater updater) {
        return init(base(updater, 23)
                .layer(new DenseLayer.Builder().nIn(8).nOut(12).activation(Activation.TANH).dropOut(0.7).build())
                .layer(new DenseLayer.Builder().nOut(12).activation(Activation.TANH).dropOut(0.6).build())
                .layer(new DropoutLayer.Builder(0.8).build())
                .layer(new DenseLayer.Builder().nOut(8).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .dropOut(new GaussianNoise(0.1)).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.feedForward(8)).build());
    }

    /** {@code count} batches of {@code size} examples of {@code data}'s shapes. */
    static List<DataSet> batches(Data data, long seed, int count, int size) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>();
        for (int b = 0; b < count; b++) {
            out.add(switch (data) {
                case DENSE -> new DataSet(uniform(rnd, size, 8), oneHot(rnd, size));
                case IMAGES -> new DataSet(uniform(rnd, size, 2, 10, 10), oneHot(rnd, size));
                case IMAGES_NHWC -> new DataSet(uniform(rnd, size, 10, 10, 2), oneHot(rnd, size));
                case IMAGES_PER_PIXEL -> new DataSet(uniform(rnd, size, 2, 10, 10), perPositionOneHot(rnd, size, 10, 10));
                case SEQUENCES_TO_ONE -> {
                    INDArray mask = lengthsMask(rnd, size, 7);
                    yield new DataSet(uniform(rnd, size, 4, 7), oneHot(rnd, size), mask, null);
                }
                case SEQUENCES_TO_SEQUENCES -> {
                    INDArray mask = lengthsMask(rnd, size, 7);
                    INDArray labels = perPositionOneHot(rnd, size, 7);
                    yield new DataSet(uniform(rnd, size, 4, 7), labels, mask, mask.dup());
                }
            });
        }
        return out;
    }

    private static INDArray uniform(SplittableRandom rnd, long... shape) {
        INDArray a = Nd4j.create(DataType.DOUBLE, shape);
        long n = a.length();
        INDArray flat = a.reshape(n);
        for (long i = 0; i < n; i++) {
            flat.putScalar(i, rnd.nextDouble(-1, 1));
        }
        return a;
    }

    private static INDArray oneHot(SplittableRandom rnd, int rows) {
        INDArray y = Nd4j.zeros(DataType.DOUBLE, rows, CLASSES);
        for (int i = 0; i < rows; i++) {
            y.putScalar(i, rnd.nextInt(CLASSES), 1.0);
        }
        return y;
    }

    /** Labels [rows, CLASSES, positions...] one-hot along dimension 1 at every position. */
    private static INDArray perPositionOneHot(SplittableRandom rnd, int rows, long... positions) {
        long[] shape = new long[positions.length + 2];
        shape[0] = rows;
        shape[1] = CLASSES;
        System.arraycopy(positions, 0, shape, 2, positions.length);
        INDArray y = Nd4j.zeros(DataType.DOUBLE, shape);
        long perRow = 1;
        for (long p : positions) {
            perRow *= p;
        }
        for (int i = 0; i < rows; i++) {
            for (long p = 0; p < perRow; p++) {
                long[] at = new long[shape.length];
                at[0] = i;
                at[1] = rnd.nextInt(CLASSES);
                long rest = p;
                for (int d = shape.length - 1; d >= 2; d--) {
                    at[d] = rest % shape[d];
                    rest /= shape[d];
                }
                y.putScalar(at, 1.0);
            }
        }
        return y;
    }

    /**
     * [rows, steps]: 1 for the first {@code length_i} steps of row i, lengths 2..steps (at least one
     * full row). FLOAT even for fp64 networks: DL4J 1.0.0-M2.1's 1-D convolution reduces masks into a
     * FLOAT array and fails on DOUBLE ones (ConvolutionUtils.cnn1dMaskReduction), in plain fit too.
     */
    private static INDArray lengthsMask(SplittableRandom rnd, int rows, int steps) {
        INDArray mask = Nd4j.zeros(DataType.FLOAT, rows, steps);
        for (int i = 0; i < rows; i++) {
            int length = i == 0 ? steps : rnd.nextInt(2, steps + 1);
            for (int t = 0; t < length; t++) {
                mask.putScalar(i, t, 1.0);
            }
        }
        return mask;
    }

    /** Rows {@code [from, from + count)} of every array of {@code batch} (masks included), as a batch of its own. */
    static DataSet rows(DataSet batch, int from, int count) {
        return new DataSet(rows(batch.getFeatures(), from, count), rows(batch.getLabels(), from, count),
                rows(batch.getFeaturesMaskArray(), from, count), rows(batch.getLabelsMaskArray(), from, count));
    }

    private static INDArray rows(INDArray array, int from, int count) {
        if (array == null) {
            return null;
        }
        INDArrayIndex[] index = new INDArrayIndex[array.rank()];
        index[0] = NDArrayIndex.interval(from, from + count);
        for (int d = 1; d < index.length; d++) {
            index[d] = NDArrayIndex.all();
        }
        return array.get(index).dup();
    }
}
