package org.symmem4j.serving.host;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.activations.impl.ActivationIdentity;
import org.nd4j.linalg.activations.impl.ActivationReLU;
import org.nd4j.linalg.activations.impl.ActivationSigmoid;
import org.nd4j.linalg.activations.impl.ActivationSoftmax;
import org.nd4j.linalg.activations.impl.ActivationTanH;

/** The activations the host path computes, in place, as DL4J defines them. */
enum HostActivation {
    /** {@code x}. */
    IDENTITY,
    /** {@code max(0, x)} (DL4J's ReLU without max, threshold or negative slope). */
    RELU,
    /** {@code tanh(x)}. */
    TANH,
    /** {@code 1 / (1 + exp(-x))}. */
    SIGMOID,
    /** {@code exp(x - max) / sum(exp(x - max))} over each example's row (flat layers only). */
    SOFTMAX;

    private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;

    /**
     * The host activation of a DL4J activation function, or null when the host path has none.
     *
     * @param fn the layer's activation function
     * @return the activation, or null
     */
    static HostActivation of(IActivation fn) {
        return switch (fn) {
            case ActivationIdentity a -> IDENTITY;
            case ActivationReLU r when isPlain(r) -> RELU;
            case ActivationTanH t -> TANH;
            case ActivationSigmoid s -> SIGMOID;
            case ActivationSoftmax s -> SOFTMAX;
            case null, default -> null;
        };
    }

    private static boolean isPlain(ActivationReLU r) {
        return r.getMax() == null && (r.getThreshold() == null || r.getThreshold() == 0.0)
                && (r.getNegativeSlope() == null || r.getNegativeSlope() == 0.0);
    }

    /**
     * Applies the activation to {@code rows} examples of {@code width} floats from {@code off}.
     *
     * @param a     the values
     * @param off   the first example's offset
     * @param rows  the examples
     * @param width the floats of one example (softmax normalises each)
     */
    void apply(float[] a, int off, int rows, int width) {
        int n = rows * width;
        switch (this) {
            case IDENTITY -> { }
            case RELU -> {
                int i = off, end = off + n, bound = off + S.loopBound(n);
                FloatVector zero = FloatVector.zero(S);
                for (; i < bound; i += S.length()) {
                    FloatVector.fromArray(S, a, i).max(zero).intoArray(a, i);
                }
                for (; i < end; i++) {
                    a[i] = a[i] > 0f ? a[i] : 0f;
                }
            }
            case TANH -> {
                for (int i = off; i < off + n; i++) {
                    a[i] = (float) Math.tanh(a[i]);
                }
            }
            case SIGMOID -> {
                for (int i = off; i < off + n; i++) {
                    a[i] = (float) (1.0 / (1.0 + Math.exp(-a[i])));
                }
            }
            case SOFTMAX -> {
                for (int r = 0; r < rows; r++) {
                    softmax(a, off + r * width, width);
                }
            }
        }
    }

    private static void softmax(float[] a, int off, int width) {
        float max = Float.NEGATIVE_INFINITY;
        for (int i = off; i < off + width; i++) {
            max = Math.max(max, a[i]);
        }
        double sum = 0;
        for (int i = off; i < off + width; i++) {
            float e = (float) Math.exp(a[i] - max);
            a[i] = e;
            sum += e;
        }
        float inv = (float) (1.0 / sum);
        for (int i = off; i < off + width; i++) {
            a[i] *= inv;
        }
    }

}
