package org.symmem4j.serving.host;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * A 2-D NCHW convolution (dilation 1) as im2col + GEMM, one example at a time: the example's input is unrolled into
 * a {@code [inC * kH * kW, outH * outW]} column matrix (zeros where the window covers padding), then the layer's
 * {@code [outC, inC * kH * kW]} weights (DL4J's {@code [outC, inC, kH, kW]} 'c'-ordered W, read in place) times that
 * matrix, plus the bias, give the example's {@code [outC, outH, outW]} output; the activation follows. The column
 * matrix is one example's, allocated once and reused, so scratch does not grow with the batch.
 */
final class ConvKernel implements HostLayer {

    private final Window2d g;
    private final int outC;
    private final MemorySegment params;
    private final long weightsOff;
    private final MemorySegment bias;
    private final long biasOff;
    private final HostActivation activation;
    private final int depth;
    private final int positions;
    private final float[] columns;

    /**
     * @param g          the window
     * @param outC       output channels
     * @param params     the network's parameters
     * @param weightsOff the byte offset of W {@code [outC, inC, kH, kW]} 'c'
     * @param biasOff    the byte offset of b {@code [outC]}, or -1 for none
     * @param activation the activation
     */
    ConvKernel(Window2d g, int outC, MemorySegment params, long weightsOff, long biasOff, HostActivation activation) {
        this.g = g;
        this.outC = outC;
        this.params = params;
        this.weightsOff = weightsOff;
        this.bias = biasOff < 0 ? null : params;
        this.biasOff = biasOff;
        this.activation = activation;
        this.depth = g.channels() * g.kH() * g.kW();
        this.positions = g.outPlane();
        this.columns = new float[depth * positions];
    }

    @Override
    public int inSize() {
        return g.inSize();
    }

    @Override
    public int outSize() {
        return outC * positions;
    }

    @Override
    public long flopsPerExample() {
        return 2L * outC * depth * positions;
    }

    @Override
    public void forward(float[] in, float[] out, int rows) {
        for (int r = 0; r < rows; r++) {
            unroll(in, r * inSize());
            SegmentGemm.multiply(params, weightsOff, bias, biasOff, columns, 0, out, r * outSize(), outC, positions,
                    depth);
        }
        activation.apply(out, 0, rows, outSize());
    }

    /** Fills {@link #columns}: row {@code (c * kH + ky) * kW + kx}, column {@code oy * outW + ox}. */
    private void unroll(float[] in, int inOff) {
        int h = g.inH(), w = g.inW(), outH = g.outH(), outW = g.outW(), sH = g.sH(), sW = g.sW();
        int row = 0;
        for (int c = 0; c < g.channels(); c++) {
            int plane = inOff + c * h * w;
            for (int ky = 0; ky < g.kH(); ky++) {
                for (int kx = 0; kx < g.kW(); kx++, row++) {
                    int dst = row * positions;
                    int dx = kx - g.padLeft();
                    // output columns whose input column ox * sW + dx lies in [0, w)
                    int lo = dx >= 0 ? 0 : Math.min(outW, (-dx + sW - 1) / sW);
                    int hi = Math.max(lo, Math.min(outW, Math.floorDiv(w - 1 - dx, sW) + 1));
                    for (int oy = 0; oy < outH; oy++, dst += outW) {
                        int iy = oy * sH - g.padTop() + ky;
                        if (iy < 0 || iy >= h) {
                            Arrays.fill(columns, dst, dst + outW, 0f);
                            continue;
                        }
                        int src = plane + iy * w + dx;
                        Arrays.fill(columns, dst, dst + lo, 0f);
                        if (sW == 1) {
                            System.arraycopy(in, src + lo, columns, dst + lo, hi - lo);
                        } else {
                            for (int ox = lo; ox < hi; ox++) {
                                columns[dst + ox] = in[src + ox * sW];
                            }
                        }
                        Arrays.fill(columns, dst + hi, dst + outW, 0f);
                    }
                }
            }
        }
    }
}
