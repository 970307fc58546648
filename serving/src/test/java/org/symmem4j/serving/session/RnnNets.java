package org.symmem4j.serving.session;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.conf.layers.recurrent.SimpleRnn;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** The recurrent network of the session tests (LSTM, then SimpleRnn, then an RNN output), and its inputs. */
final class RnnNets {

    static final int IN = 6;
    static final int OUT = 5;

    private RnnNets() {
    }

    /** The same weights for the same seed, in every thread and process. */
    static MultiLayerNetwork net(long seed) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(seed).dataType(DataType.FLOAT).list()
                .layer(new LSTM.Builder().nIn(IN).nOut(16).activation(Activation.TANH).build())
                .layer(new SimpleRnn.Builder().nIn(16).nOut(12).activation(Activation.TANH).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(12).nOut(OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** Session {@code session}'s input at step {@code step}: [1, IN] values from a fixed formula. */
    static INDArray input(int session, int step) {
        float[] v = new float[IN];
        for (int i = 0; i < IN; i++) {
            v[i] = (float) Math.sin(0.7 * session + 1.3 * step + 0.37 * i);
        }
        return Nd4j.create(v, new long[] {1, IN}, DataType.FLOAT);
    }

    /** One step of the network on that input, as floats. */
    static float[] step(MultiLayerNetwork net, int session, int step) {
        return net.rnnTimeStep(input(session, step)).dup().data().asFloat();
    }
}
