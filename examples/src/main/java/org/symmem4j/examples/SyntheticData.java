package org.symmem4j.examples;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Generated classification data (no downloads): a fixed random linear "teacher" labels Gaussian
 * inputs, with some label noise, so a network can learn it but not perfectly.
 */
public final class SyntheticData {

    private final int features;
    private final int classes;
    private final double[][] teacher;

    public SyntheticData(int features, int classes, long seed) {
        this.features = features;
        this.classes = classes;
        SplittableRandom rnd = new SplittableRandom(seed);
        teacher = new double[classes][features];
        for (double[] row : teacher) {
            for (int j = 0; j < features; j++) {
                row[j] = rnd.nextDouble(-1, 1);
            }
        }
    }

    /** {@code batches} batches of {@code batchSize} examples. */
    public List<DataSet> batches(long seed, int batches, int batchSize, DataType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>(batches);
        for (int b = 0; b < batches; b++) {
            double[][] x = new double[batchSize][features];
            double[][] y = new double[batchSize][classes];
            for (int i = 0; i < batchSize; i++) {
                for (int j = 0; j < features; j++) {
                    x[i][j] = gaussian(rnd);
                }
                int cls = rnd.nextInt(10) == 0 ? rnd.nextInt(classes) : argmax(x[i]);
                y[i][cls] = 1;
            }
            out.add(new DataSet(Nd4j.create(x).castTo(dtype), Nd4j.create(y).castTo(dtype)));
        }
        return out;
    }

    private int argmax(double[] x) {
        int best = 0;
        double bestScore = Double.NEGATIVE_INFINITY;
        for (int c = 0; c < classes; c++) {
            double s = 0;
            for (int j = 0; j < features; j++) {
                s += teacher[c][j] * x[j];
            }
            if (s > bestScore) {
                bestScore = s;
                best = c;
            }
        }
        return best;
    }

    private static double gaussian(SplittableRandom rnd) {
        double u = rnd.nextDouble();
        double v = rnd.nextDouble();
        return Math.sqrt(-2 * Math.log(1 - u)) * Math.cos(2 * Math.PI * v);
    }

    public int features() {
        return features;
    }

    public int classes() {
        return classes;
    }
}
