package org.symmem4j.serving.weights;

import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** Small networks for the serving tests, initialised from a seed (the same seed gives the same parameters). */
public final class Nets {

    private Nets() {
    }

    /** An MLP 8 -> 16 -> 4 (softmax). */
    public static MultiLayerConfiguration mlp(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(16).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(4)
                        .activation(Activation.SOFTMAX).build())
                .build();
    }

    /** A CNN over 1 x 8 x 8 images: conv 3x3 (4) -> max pool -> dense softmax (3). */
    public static MultiLayerConfiguration cnn(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3).activation(Activation.SOFTMAX)
                        .build())
                .setInputType(InputType.convolutional(8, 8, 1))
                .build();
    }

    /** A graph 8 -> 12 -> 4. */
    public static ComputationGraphConfiguration graph(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).graphBuilder().addInputs("in")
                .addLayer("hidden", new DenseLayer.Builder().nIn(8).nOut(12).activation(Activation.RELU).build(), "in")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nIn(12).nOut(4)
                        .activation(Activation.IDENTITY).build(), "hidden")
                .setOutputs("out").build();
    }

    /** @return an initialised network owning its parameters */
    public static MultiLayerNetwork owning(MultiLayerConfiguration conf) {
        MultiLayerNetwork net = new MultiLayerNetwork(conf.clone());
        net.init();
        return net;
    }

    /** @return an initialised graph owning its parameters */
    public static ComputationGraph owning(ComputationGraphConfiguration conf) {
        ComputationGraph net = new ComputationGraph(conf.clone());
        net.init();
        return net;
    }

    /** @return {@code rows} rows of the given example shape, from a seed */
    public static INDArray features(long seed, int rows, long... exampleShape) {
        long[] shape = new long[exampleShape.length + 1];
        shape[0] = rows;
        System.arraycopy(exampleShape, 0, shape, 1, exampleShape.length);
        return Nd4j.rand(Nd4j.getRandomFactory().getNewRandomInstance(seed), shape).subi(0.5);
    }
}
