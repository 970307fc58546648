package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * A Dense + BatchNorm + Dropout MLP trained with Adam in fp32, through the wrapper (2 workers × 32)
 * and as one model (batches of 64, the same examples per step): held-out accuracy in inference
 * mode, where BatchNorm normalizes with its running statistics, agrees within a small margin.
 * Dropout draws other masks on the workers than in the one model, so the runs are not equal;
 * the margin is what that costs.
 */
class BatchNormTrainingTest {

    private static final int FEATURES = 6;
    private static final int CLASSES = 3;
    private static final double MARGIN = 0.5;

    /**
     * Features far from zero mean and unit scale, so inference depends on the running statistics;
     * the class is the argmax of three sums of the centred features, and only examples whose class
     * wins by {@link #MARGIN} are kept, so that both runs reach a plateau where the workers'
     * dropout masks (another random stream than the one model's) move accuracy by less than the
     * test's margin (measured at margin 0.4 over 12 runs each: one model 1.0, wrapper 0.98 to 1.0).
     */
    private static DataSet data(SplittableRandom rnd, int size) {
        double[][] x = new double[size][FEATURES];
        double[][] y = new double[size][CLASSES];
        double[] z = new double[FEATURES];
        for (int i = 0; i < size; i++) {
            int best;
            double lead;
            do {
                double[] score = new double[CLASSES];
                for (int j = 0; j < FEATURES; j++) {
                    z[j] = rnd.nextDouble(-1, 1);
                    score[j % CLASSES] += z[j];
                }
                best = 0;
                for (int c = 1; c < CLASSES; c++) {
                    if (score[c] > score[best]) {
                        best = c;
                    }
                }
                double runnerUp = Double.NEGATIVE_INFINITY;
                for (int c = 0; c < CLASSES; c++) {
                    if (c != best) {
                        runnerUp = Math.max(runnerUp, score[c]);
                    }
                }
                lead = score[best] - runnerUp;
            } while (lead <= MARGIN);
            for (int j = 0; j < FEATURES; j++) {
                x[i][j] = 20 + j + (1 + j) * z[j];
            }
            y[i][best] = 1;
        }
        return new DataSet(Nd4j.create(x).castTo(DataType.FLOAT), Nd4j.create(y).castTo(DataType.FLOAT));
    }

    private static MultiLayerNetwork net() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(3).dataType(DataType.FLOAT).updater(new Adam(0.002)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(FEATURES).nOut(48).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().nOut(48).build())
                .layer(new DenseLayer.Builder().nIn(48).nOut(48).activation(Activation.RELU).dropOut(0.9).build())
                .layer(new BatchNormalization.Builder().nOut(48).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(48).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    private static double accuracy(MultiLayerNetwork net, DataSet test) {
        INDArray predicted = net.output(test.getFeatures(), false).argMax(1);
        INDArray actual = test.getLabels().argMax(1);
        long right = 0;
        for (long i = 0; i < predicted.length(); i++) {
            if (predicted.getLong(i) == actual.getLong(i)) {
                right++;
            }
        }
        return (double) right / predicted.length();
    }

    @Test
    void heldOutAccuracyMatchesOneModelOnTheMergedBatch() {
        int workers = 2;
        int perWorker = 32;
        int steps = 150;
        SplittableRandom rnd = new SplittableRandom(17);
        List<DataSet> train = new ArrayList<>();
        for (int i = 0; i < steps * workers; i++) {
            train.add(data(rnd, perWorker));
        }
        DataSet test = data(new SplittableRandom(18), 2000);

        MultiLayerNetwork single = net();
        MultiLayerNetwork wrapped = single.clone();
        for (int s = 0; s < steps; s++) {
            single.fit(Nets.merged(train.subList(s * workers, (s + 1) * workers)));
        }
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(wrapped).workers(workers).build()) {
            wrapper.fit(new BatchListIterator(train));
        }
        double singleAccuracy = accuracy(single, test);
        double wrappedAccuracy = accuracy(wrapped, test);
        assertTrue(singleAccuracy >= 0.95, "the task must be learnable for the comparison to mean something: " + singleAccuracy);
        // The workers' dropout masks come from their threads' ND4J generators, seeded by ND4J, not by the test: the
        // wrapped accuracy varies from run to run (0.966-1.0 seen, 0.966 once in CI). Without the merged running
        // statistics it is 0.34, so a margin of 0.05 still fails far from the line when the merge breaks.
        assertTrue(Math.abs(wrappedAccuracy - singleAccuracy) <= 0.05, "held-out inference accuracy through the wrapper "
                + wrappedAccuracy + " vs one model on the merged batch " + singleAccuracy + " (margin 0.05)");
    }
}
