package org.symmem4j.serving.host;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * Batch normalization at inference, as DL4J's {@code BatchNormalization} layer computes it with its global
 * statistics: {@code y = gamma * (x - mean) / sqrt(var + eps) + beta} per channel of an NCHW example (over its
 * {@code h * w} positions) or per feature of a flat one. The four vectors are folded into one scale
 * ({@code gamma / sqrt(var + eps)}) and one shift ({@code beta - mean * scale}) per channel, computed from the
 * parameters at every call: the parameters are read in place and may be overwritten by a new version between calls,
 * so nothing derived from them is kept across calls (a channel count of floats per call).
 *
 * <p>DL4J's layout of one layer's parameters, {@code C} floats each: gamma, beta (both absent when
 * {@code lockGammaBeta}: then they are the configuration's two constants), mean, then the variance or, when
 * {@code useLogStd} (the builder's default), {@code log10(stdev)}, from which DL4J takes {@code var = (10^x)^2}.
 * DL4J applies no activation in this layer's forward pass (its {@code activate} is its {@code preOutput}), so none is
 * applied here either.
 */
final class BatchNormKernel implements HostLayer {

    private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;
    private static final ValueLayout.OfFloat F = ValueLayout.JAVA_FLOAT_UNALIGNED;

    private final int channels;
    private final int plane;
    private final MemorySegment params;
    /** Byte offset of gamma (beta follows), or -1 when {@code lockGammaBeta} leaves them out of the parameters. */
    private final long gammaOff;
    private final double lockedGamma;
    private final double lockedBeta;
    /** Byte offset of the mean; the variance (or log10 of the standard deviation) follows. */
    private final long meanOff;
    private final boolean logStd;
    private final double eps;
    private final float[] scale;
    private final float[] shift;

    /**
     * @param channels    channels (or features of a flat input)
     * @param plane       positions per channel: {@code h * w}, or 1 for a flat input
     * @param params      the network's parameters
     * @param gammaOff    the byte offset of gamma (beta follows), or -1 when gamma and beta are locked
     * @param lockedGamma gamma when locked
     * @param lockedBeta  beta when locked
     * @param meanOff     the byte offset of the mean (the variance or log10 stdev follows)
     * @param logStd      whether the last vector is {@code log10(stdev)} rather than the variance
     * @param eps         added to the variance
     */
    BatchNormKernel(int channels, int plane, MemorySegment params, long gammaOff, double lockedGamma, double lockedBeta,
                    long meanOff, boolean logStd, double eps) {
        this.channels = channels;
        this.plane = plane;
        this.params = params;
        this.gammaOff = gammaOff;
        this.lockedGamma = lockedGamma;
        this.lockedBeta = lockedBeta;
        this.meanOff = meanOff;
        this.logStd = logStd;
        this.eps = eps;
        this.scale = new float[channels];
        this.shift = new float[channels];
    }

    @Override
    public int inSize() {
        return channels * plane;
    }

    @Override
    public int outSize() {
        return channels * plane;
    }

    @Override
    public long flopsPerExample() {
        return 2L * channels * plane;
    }

    @Override
    public void forward(float[] in, float[] out, int rows) {
        fold();
        int width = channels * plane;
        if (plane == 1) {
            // a flat input: one row of features at a time, vectorized across the features
            int bound = S.loopBound(channels);
            for (int r = 0, o = 0; r < rows; r++, o += width) {
                int c = 0;
                for (; c < bound; c += S.length()) {
                    FloatVector.fromArray(S, in, o + c)
                            .fma(FloatVector.fromArray(S, scale, c), FloatVector.fromArray(S, shift, c))
                            .intoArray(out, o + c);
                }
                for (; c < channels; c++) {
                    out[o + c] = in[o + c] * scale[c] + shift[c];
                }
            }
            return;
        }
        int bound = S.loopBound(plane);
        for (int r = 0, o = 0; r < rows; r++) {
            for (int c = 0; c < channels; c++, o += plane) {
                FloatVector a = FloatVector.broadcast(S, scale[c]), b = FloatVector.broadcast(S, shift[c]);
                int i = 0;
                for (; i < bound; i += S.length()) {
                    FloatVector.fromArray(S, in, o + i).fma(a, b).intoArray(out, o + i);
                }
                for (; i < plane; i++) {
                    out[o + i] = in[o + i] * scale[c] + shift[c];
                }
            }
        }
    }

    /** Computes this call's per-channel scale and shift from the parameters as they are now. */
    private void fold() {
        long cBytes = (long) channels * Float.BYTES;
        for (int c = 0; c < channels; c++) {
            long at = (long) c * Float.BYTES;
            double gamma = gammaOff < 0 ? lockedGamma : params.get(F, gammaOff + at);
            double beta = gammaOff < 0 ? lockedBeta : params.get(F, gammaOff + cBytes + at);
            double mean = params.get(F, meanOff + at);
            double v = params.get(F, meanOff + cBytes + at);
            double var = logStd ? Math.pow(10.0, 2.0 * v) : v; // DL4J: stdev = 10^v, var = stdev * stdev
            double s = gamma / Math.sqrt(var + eps);
            scale[c] = (float) s;
            shift[c] = (float) (beta - mean * s);
        }
    }
}
