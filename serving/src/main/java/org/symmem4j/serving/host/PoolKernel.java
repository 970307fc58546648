package org.symmem4j.serving.host;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * 2-D NCHW max or average pooling (dilation 1), per channel and output position over the window's cells that lie in
 * the input. Max ignores padding. Average divides by the window's area when DL4J's
 * {@code avgPoolIncludePadInDivisor} is set, else by the count of cells in the input. Each output row first
 * reduces the window's input rows into one line (vectorized across the row), then each window across that line.
 */
final class PoolKernel implements HostLayer {

    private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;

    private final Window2d g;
    private final boolean max;
    private final boolean includePadInDivisor;
    /** One input row reduced down a window's rows. */
    private final float[] line;
    /** Per output column, the first input column of its window that lies in the input, and one past the last. */
    private final int[] colStart;
    private final int[] colEnd;

    /**
     * @param g                   the window
     * @param max                 max pooling, else average
     * @param includePadInDivisor average: divide by {@code kH * kW} rather than the cells in the input
     */
    PoolKernel(Window2d g, boolean max, boolean includePadInDivisor) {
        this.g = g;
        this.max = max;
        this.includePadInDivisor = includePadInDivisor;
        this.line = new float[g.inW()];
        this.colStart = new int[g.outW()];
        this.colEnd = new int[g.outW()];
        for (int ox = 0; ox < g.outW(); ox++) {
            int x0 = ox * g.sW() - g.padLeft();
            colStart[ox] = Math.max(0, x0);
            colEnd[ox] = Math.min(g.inW(), x0 + g.kW());
        }
    }

    @Override
    public int inSize() {
        return g.inSize();
    }

    @Override
    public int outSize() {
        return g.channels() * g.outPlane();
    }

    @Override
    public long flopsPerExample() {
        return (long) outSize() * g.kH() * g.kW();
    }

    @Override
    public void forward(float[] in, float[] out, int rows) {
        int h = g.inH(), w = g.inW(), bound = S.loopBound(w);
        int planes = rows * g.channels();
        int o = 0;
        for (int p = 0; p < planes; p++) {
            int plane = p * h * w;
            for (int oy = 0; oy < g.outH(); oy++) {
                int y0 = oy * g.sH() - g.padTop();
                int ya = Math.max(0, y0), yb = Math.min(h, y0 + g.kH());
                // first down the window's rows, a whole input row at a time (vectorized), then across each window
                int first = plane + ya * w;
                System.arraycopy(in, first, line, 0, w);
                for (int y = ya + 1; y < yb; y++) {
                    int row = plane + y * w, x = 0;
                    for (; x < bound; x += S.length()) {
                        FloatVector v = FloatVector.fromArray(S, in, row + x);
                        FloatVector l = FloatVector.fromArray(S, line, x);
                        (max ? l.max(v) : l.add(v)).intoArray(line, x);
                    }
                    for (; x < w; x++) {
                        line[x] = max ? Math.max(line[x], in[row + x]) : line[x] + in[row + x];
                    }
                }
                if (max) {
                    for (int ox = 0; ox < g.outW(); ox++, o++) {
                        float r = line[colStart[ox]];
                        for (int x = colStart[ox] + 1; x < colEnd[ox]; x++) {
                            r = Math.max(r, line[x]);
                        }
                        out[o] = r;
                    }
                } else {
                    for (int ox = 0; ox < g.outW(); ox++, o++) {
                        float r = line[colStart[ox]];
                        for (int x = colStart[ox] + 1; x < colEnd[ox]; x++) {
                            r += line[x];
                        }
                        out[o] = r / (includePadInDivisor ? g.kH() * g.kW() : (yb - ya) * (colEnd[ox] - colStart[ox]));
                    }
                }
            }
        }
    }
}
