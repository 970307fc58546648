package org.symmem4j.examples;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;

/**
 * MNIST-shaped data drawn in process (no download): 28 x 28 single-channel images of the digits 0-9,
 * each a hand-drawn-like glyph (a few polylines per digit, every control point jittered) under a
 * random affine transform (scale, rotation, shear, shift), drawn with a random stroke width and
 * anti-aliased, over Gaussian pixel noise. Pixels lie in [0, 1], the digit sits in the central
 * 20 x 20 box as in MNIST, and batches have MNIST's layout in DL4J: features {@code [n, 784]} (rows
 * of the image one after the other, for {@code InputType.convolutionalFlat(28, 28, 1)}) and one-hot
 * labels {@code [n, 10]}, so a program written against {@code MnistDataSetIterator} runs on these
 * batches unchanged. Labels cycle through the ten digits in a shuffled order, so every class is
 * equally frequent. The same seed gives the same images.
 */
public final class DigitGlyphs {

    /** Image side in pixels. */
    public static final int SIDE = 28;
    /** Number of classes (the digits 0-9). */
    public static final int CLASSES = 10;

    /** Per digit, its strokes; each stroke a polyline of (x, y) points in the unit box, y pointing down. */
    private static final double[][][] STROKES = {
        {ellipse(0.5, 0.5, 0.34, 0.5, 14)},
        {{0.3, 0.22, 0.55, 0.0, 0.55, 1.0}},
        {{0.15, 0.25, 0.3, 0.04, 0.6, 0.0, 0.84, 0.2, 0.8, 0.45, 0.15, 1.0, 0.9, 1.0}},
        {{0.15, 0.1, 0.5, 0.0, 0.8, 0.14, 0.76, 0.38, 0.45, 0.5, 0.8, 0.62, 0.85, 0.86, 0.5, 1.0, 0.14, 0.9}},
        {{0.72, 1.0, 0.72, 0.0, 0.1, 0.68, 0.92, 0.68}},
        {{0.85, 0.0, 0.22, 0.0, 0.16, 0.46, 0.55, 0.38, 0.84, 0.58, 0.8, 0.9, 0.5, 1.0, 0.14, 0.9}},
        {{0.76, 0.04, 0.42, 0.14, 0.2, 0.5, 0.2, 0.8, 0.45, 1.0, 0.76, 0.9, 0.8, 0.64, 0.5, 0.5, 0.2, 0.66}},
        {{0.1, 0.0, 0.9, 0.0, 0.4, 1.0}},
        {ellipse(0.5, 0.25, 0.27, 0.25, 12), ellipse(0.5, 0.74, 0.33, 0.26, 12)},
        {ellipse(0.48, 0.3, 0.3, 0.3, 12), {0.78, 0.3, 0.74, 1.0}},
    };

    private DigitGlyphs() {
    }

    /**
     * {@code batches} batches of {@code batchSize} images each, drawn from {@code seed}.
     *
     * @throws IllegalArgumentException if {@code batches} or {@code batchSize} is below 1
     */
    public static List<DataSet> batches(long seed, int batches, int batchSize) {
        if (batches < 1 || batchSize < 1) {
            throw new IllegalArgumentException("digit batches: batches=" + batches + " batchSize=" + batchSize
                    + " expected both >= 1");
        }
        SplittableRandom rnd = new SplittableRandom(seed);
        int[] order = shuffledDigits(rnd);
        List<DataSet> out = new ArrayList<>(batches);
        int drawn = 0;
        for (int b = 0; b < batches; b++) {
            float[] x = new float[batchSize * SIDE * SIDE];
            float[] y = new float[batchSize * CLASSES];
            for (int i = 0; i < batchSize; i++, drawn++) {
                if (drawn % CLASSES == 0 && drawn > 0) {
                    order = shuffledDigits(rnd);
                }
                int digit = order[drawn % CLASSES];
                draw(digit, rnd, x, i * SIDE * SIDE);
                y[i * CLASSES + digit] = 1;
            }
            out.add(new DataSet(Nd4j.create(x, new long[] {batchSize, SIDE * SIDE}, DataType.FLOAT),
                    Nd4j.create(y, new long[] {batchSize, CLASSES}, DataType.FLOAT)));
        }
        return out;
    }

    /** Draws one glyph of {@code digit} into {@code image[offset .. offset + 784)}, row by row. */
    static void draw(int digit, SplittableRandom rnd, float[] image, int offset) {
        // the affine map from the unit box to pixels: the 20 x 20 box centred in 28 x 28, then jitter
        double scale = 20 * rnd.nextDouble(0.8, 1.05);
        double angle = Math.toRadians(rnd.nextDouble(-15, 15));
        double shear = rnd.nextDouble(-0.25, 0.25);
        double cx = SIDE / 2.0 + rnd.nextDouble(-2, 2);
        double cy = SIDE / 2.0 + rnd.nextDouble(-2, 2);
        double cos = Math.cos(angle);
        double sin = Math.sin(angle);
        double halfWidth = rnd.nextDouble(0.7, 1.3);
        List<double[]> segments = new ArrayList<>(); // x0, y0, x1, y1 in pixels
        for (double[] stroke : STROKES[digit]) {
            double px = 0;
            double py = 0;
            for (int p = 0; p < stroke.length; p += 2) {
                double u = stroke[p] - 0.5 + rnd.nextDouble(-0.07, 0.07);
                double v = stroke[p + 1] - 0.5 + rnd.nextDouble(-0.07, 0.07);
                u += shear * v;
                double qx = cx + scale * (cos * u - sin * v);
                double qy = cy + scale * (sin * u + cos * v);
                if (p > 0) {
                    segments.add(new double[] {px, py, qx, qy});
                }
                px = qx;
                py = qy;
            }
        }
        for (int r = 0; r < SIDE; r++) {
            for (int c = 0; c < SIDE; c++) {
                double d = Double.POSITIVE_INFINITY;
                for (double[] s : segments) {
                    d = Math.min(d, distance(c + 0.5, r + 0.5, s));
                }
                double ink = Math.clamp(halfWidth + 0.5 - d, 0, 1); // a one-pixel anti-aliased edge
                double noisy = ink + 0.3 * rnd.nextGaussian();
                image[offset + r * SIDE + c] = (float) Math.clamp(noisy, 0, 1);
            }
        }
    }

    private static double distance(double x, double y, double[] s) {
        double dx = s[2] - s[0];
        double dy = s[3] - s[1];
        double length2 = dx * dx + dy * dy;
        double t = length2 == 0 ? 0 : Math.clamp(((x - s[0]) * dx + (y - s[1]) * dy) / length2, 0, 1);
        return Math.hypot(x - (s[0] + t * dx), y - (s[1] + t * dy));
    }

    private static int[] shuffledDigits(SplittableRandom rnd) {
        int[] d = new int[CLASSES];
        for (int i = 0; i < CLASSES; i++) {
            d[i] = i;
        }
        for (int i = CLASSES - 1; i > 0; i--) {
            int j = rnd.nextInt(i + 1);
            int t = d[i];
            d[i] = d[j];
            d[j] = t;
        }
        return d;
    }

    /** A closed polyline of {@code points} points around an ellipse, starting at the top. */
    private static double[] ellipse(double cx, double cy, double rx, double ry, int points) {
        double[] p = new double[2 * (points + 1)];
        for (int i = 0; i <= points; i++) {
            double a = 2 * Math.PI * i / points;
            p[2 * i] = cx + rx * Math.sin(a);
            p[2 * i + 1] = cy - ry * Math.cos(a);
        }
        return p;
    }

    /** The image at {@code index} of a batch's features as 28 lines of characters, darker ink denser: for a look. */
    public static String ascii(DataSet batch, int index) {
        float[] x = batch.getFeatures().getRow(index).toFloatVector();
        StringBuilder sb = new StringBuilder();
        String ramp = " .:-=+*#%@";
        for (int r = 0; r < SIDE; r++) {
            for (int c = 0; c < SIDE; c++) {
                sb.append(ramp.charAt(Math.min(ramp.length() - 1, (int) (x[r * SIDE + c] * ramp.length()))));
            }
            sb.append('\n');
        }
        return sb.toString();
    }
}
