package org.symmem4j.serving.host;

/**
 * 2-D NCHW max or average pooling (dilation 1), per channel and output position over the window's cells that lie in
 * the input. Max ignores padding. Average divides by the window's area when DL4J's
 * {@code avgPoolIncludePadInDivisor} is set, else by the count of cells in the input.
 */
final class PoolKernel implements HostLayer {

    private final Window2d g;
    private final boolean max;
    private final boolean includePadInDivisor;

    /**
     * @param g                   the window
     * @param max                 max pooling, else average
     * @param includePadInDivisor average: divide by {@code kH * kW} rather than the cells in the input
     */
    PoolKernel(Window2d g, boolean max, boolean includePadInDivisor) {
        this.g = g;
        this.max = max;
        this.includePadInDivisor = includePadInDivisor;
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
        int h = g.inH(), w = g.inW();
        int planes = rows * g.channels();
        int o = 0;
        for (int p = 0; p < planes; p++) {
            int plane = p * h * w;
            for (int oy = 0; oy < g.outH(); oy++) {
                int y0 = oy * g.sH() - g.padTop();
                int ya = Math.max(0, y0), yb = Math.min(h, y0 + g.kH());
                for (int ox = 0; ox < g.outW(); ox++, o++) {
                    int x0 = ox * g.sW() - g.padLeft();
                    int xa = Math.max(0, x0), xb = Math.min(w, x0 + g.kW());
                    out[o] = max ? max(in, plane, w, ya, yb, xa, xb) : average(in, plane, w, ya, yb, xa, xb);
                }
            }
        }
    }

    private static float max(float[] in, int plane, int w, int ya, int yb, int xa, int xb) {
        float m = Float.NEGATIVE_INFINITY;
        for (int y = ya; y < yb; y++) {
            for (int x = xa; x < xb; x++) {
                m = Math.max(m, in[plane + y * w + x]);
            }
        }
        return m;
    }

    private float average(float[] in, int plane, int w, int ya, int yb, int xa, int xb) {
        float s = 0f;
        for (int y = ya; y < yb; y++) {
            for (int x = xa; x < xb; x++) {
                s += in[plane + y * w + x];
            }
        }
        int divisor = includePadInDivisor ? g.kH() * g.kW() : (yb - ya) * (xb - xa);
        return s / divisor;
    }
}
