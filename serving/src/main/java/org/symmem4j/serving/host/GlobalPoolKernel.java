package org.symmem4j.serving.host;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

/**
 * DL4J's {@code GlobalPoolingLayer} over an NCHW example: each channel's {@code h * w} plane reduced to one value by
 * max, average or sum (DL4J's default pooling dimensions for a CNN input, 2 and 3), so {@code [c, h, w]} becomes
 * {@code [c]} (or {@code [c, 1, 1]} when the layer keeps its dimensions, the same floats).
 */
final class GlobalPoolKernel implements HostLayer {

    private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;

    /** The reductions the host path has. */
    enum Reduction {
        /** The largest value. */
        MAX,
        /** The sum divided by {@code h * w}. */
        AVG,
        /** The sum. */
        SUM
    }

    private final int channels;
    private final int plane;
    private final Reduction reduction;

    /**
     * @param channels  channels
     * @param plane     {@code h * w}
     * @param reduction the reduction
     */
    GlobalPoolKernel(int channels, int plane, Reduction reduction) {
        this.channels = channels;
        this.plane = plane;
        this.reduction = reduction;
    }

    @Override
    public int inSize() {
        return channels * plane;
    }

    @Override
    public int outSize() {
        return channels;
    }

    @Override
    public long flopsPerExample() {
        return (long) channels * plane;
    }

    @Override
    public void forward(float[] in, float[] out, int rows) {
        int planes = rows * channels, bound = S.loopBound(plane);
        boolean max = reduction == Reduction.MAX;
        for (int p = 0; p < planes; p++) {
            int off = p * plane, i = 0;
            float r;
            if (max) {
                FloatVector acc = FloatVector.broadcast(S, Float.NEGATIVE_INFINITY);
                for (; i < bound; i += S.length()) {
                    acc = acc.max(FloatVector.fromArray(S, in, off + i));
                }
                r = acc.reduceLanes(VectorOperators.MAX);
                for (; i < plane; i++) {
                    r = Math.max(r, in[off + i]);
                }
            } else {
                FloatVector acc = FloatVector.zero(S);
                for (; i < bound; i += S.length()) {
                    acc = acc.add(FloatVector.fromArray(S, in, off + i));
                }
                r = acc.reduceLanes(VectorOperators.ADD);
                for (; i < plane; i++) {
                    r += in[off + i];
                }
                if (reduction == Reduction.AVG) {
                    r /= plane;
                }
            }
            out[p] = r;
        }
    }
}
