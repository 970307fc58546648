package org.symmem4j.serving.host;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.junit.jupiter.api.Test;

/** The convolution and pooling kernels against float64 loops written here, independently of DL4J. */
class KernelReferenceTest {

    private static float[] random(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] a = new float[n];
        for (int i = 0; i < n; i++) {
            a[i] = (float) (r.nextDouble() * 2 - 1);
        }
        return a;
    }

    private static void assertClose(double[] ref, float[] got, String what) {
        double worst = 0;
        for (int i = 0; i < ref.length; i++) {
            worst = Math.max(worst, Math.abs(got[i] - ref[i]) / Math.max(1.0, Math.abs(ref[i])));
        }
        assertTrue(worst <= 1e-5, what + ": max relative difference " + worst);
    }

    @Test
    void convolutionMatchesFloat64Loops() {
        // 3 channels 11 x 10, 9 output channels (not a multiple of the 4-row block), kernel 3x4, stride 2x1, Same
        int rows = 3, c = 3, h = 11, w = 10, outC = 9, kH = 3, kW = 4;
        Window2d g = Window2d.of(0, "test", ConvolutionMode.Same, new int[] {kH, kW}, new int[] {2, 1},
                new int[] {0, 0}, c, h, w);
        float[] params = random(outC + outC * c * kH * kW, 1); // bias first, then W [outC, c, kH, kW] as DL4J
        MemorySegment seg = Arena.ofAuto().allocate((long) params.length * Float.BYTES);
        MemorySegment.copy(params, 0, seg, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, params.length);
        float[] in = random(rows * c * h * w, 2);
        float[] out = new float[rows * outC * g.outPlane()];
        new ConvKernel(g, outC, seg, (long) outC * Float.BYTES, 0, HostActivation.IDENTITY).forward(in, out, rows);

        double[] ref = new double[out.length];
        int o = 0;
        for (int r = 0; r < rows; r++) {
            for (int oc = 0; oc < outC; oc++) {
                for (int oy = 0; oy < g.outH(); oy++) {
                    for (int ox = 0; ox < g.outW(); ox++, o++) {
                        double s = params[oc];
                        for (int ic = 0; ic < c; ic++) {
                            for (int ky = 0; ky < kH; ky++) {
                                for (int kx = 0; kx < kW; kx++) {
                                    int iy = oy * 2 - g.padTop() + ky, ix = ox - g.padLeft() + kx;
                                    if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
                                        s += (double) params[outC + ((oc * c + ic) * kH + ky) * kW + kx]
                                                * in[((r * c + ic) * h + iy) * w + ix];
                                    }
                                }
                            }
                        }
                        ref[o] = s;
                    }
                }
            }
        }
        // Same: out = ceil(11 / 2) = 6 rows, 10 columns; padding (6-1)*2+3-11 = 2 -> 1 above; 3 -> 1 left
        assertTrue(g.outH() == 6 && g.outW() == 10 && g.padTop() == 1 && g.padLeft() == 1, g.toString());
        assertClose(ref, out, "conv");
    }

    @Test
    void poolingMatchesFloat64Loops() {
        int rows = 2, c = 3, h = 9, w = 8;
        Window2d g = Window2d.of(0, "test", ConvolutionMode.Truncate, new int[] {3, 3}, new int[] {2, 2},
                new int[] {1, 1}, c, h, w);
        float[] in = random(rows * c * h * w, 3);
        for (int mode = 0; mode < 3; mode++) { // max, average over the cells in the input, average over kH * kW
            float[] out = new float[rows * c * g.outPlane()];
            new PoolKernel(g, mode == 0, mode == 2).forward(in, out, rows);
            double[] ref = new double[out.length];
            int o = 0;
            for (int p = 0; p < rows * c; p++) {
                for (int oy = 0; oy < g.outH(); oy++) {
                    for (int ox = 0; ox < g.outW(); ox++, o++) {
                        double max = Double.NEGATIVE_INFINITY, sum = 0;
                        int cells = 0;
                        for (int ky = 0; ky < 3; ky++) {
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
                                if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
                                    double v = in[(p * h + iy) * w + ix];
                                    max = Math.max(max, v);
                                    sum += v;
                                    cells++;
                                }
                            }
                        }
                        ref[o] = mode == 0 ? max : sum / (mode == 1 ? cells : 9);
                    }
                }
            }
            assertTrue(g.outH() == 5 && g.outW() == 4, g.toString());
            assertClose(ref, out, "pool mode " + mode);
        }
    }

    @Test
    void batchNormMatchesFloat64Loops() {
        // per channel of an NCHW example (plane 13, not a multiple of a vector) and per feature of a flat one (19)
        for (int[] cp : new int[][] {{5, 13}, {19, 1}}) {
            int rows = 3, c = cp[0], plane = cp[1];
            for (boolean locked : new boolean[] {false, true}) {
                for (boolean logStd : new boolean[] {false, true}) {
                    float[] params = random(7 + 4 * c, 4); // 7 floats of another layer first
                    int meanAt = 7 + (locked ? 0 : 2 * c);
                    for (int i = 0; i < c; i++) {
                        int last = meanAt + c + i; // var (kept > 0) or log10 stdev
                        params[last] = logStd ? params[last] * 0.5f : Math.abs(params[last]) + 0.1f;
                    }
                    MemorySegment seg = Arena.ofAuto().allocate((long) params.length * Float.BYTES);
                    MemorySegment.copy(params, 0, seg, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, params.length);
                    float[] in = random(rows * c * plane, 5);
                    float[] out = new float[in.length];
                    long first = 7L * Float.BYTES;
                    new BatchNormKernel(c, plane, seg, locked ? -1 : first, 1.25, -0.5,
                            first + (locked ? 0 : 2L * c * Float.BYTES), logStd, 1e-3).forward(in, out, rows);
                    double[] ref = new double[in.length];
                    for (int r = 0, o = 0; r < rows; r++) {
                        for (int ch = 0; ch < c; ch++) {
                            double gamma = locked ? 1.25 : params[7 + ch], beta = locked ? -0.5 : params[7 + c + ch];
                            double v = params[meanAt + c + ch];
                            double std = logStd ? Math.pow(10, v) : Math.sqrt(v);
                            double var = std * std;
                            for (int i = 0; i < plane; i++, o++) {
                                ref[o] = gamma * (in[o] - params[meanAt + ch]) / Math.sqrt(var + 1e-3) + beta;
                            }
                        }
                    }
                    assertClose(ref, out, "batch norm c=" + c + " plane=" + plane + " locked=" + locked
                            + " logStd=" + logStd);
                }
            }
        }
    }

    @Test
    void globalPoolingMatchesFloat64Loops() {
        int rows = 2, c = 3, plane = 7 * 5;
        float[] in = random(rows * c * plane, 6);
        for (GlobalPoolKernel.Reduction reduction : GlobalPoolKernel.Reduction.values()) {
            float[] out = new float[rows * c];
            new GlobalPoolKernel(c, plane, reduction).forward(in, out, rows);
            double[] ref = new double[out.length];
            for (int p = 0; p < rows * c; p++) {
                double max = Double.NEGATIVE_INFINITY, sum = 0;
                for (int i = 0; i < plane; i++) {
                    max = Math.max(max, in[p * plane + i]);
                    sum += in[p * plane + i];
                }
                ref[p] = switch (reduction) {
                    case MAX -> max;
                    case AVG -> sum / plane;
                    case SUM -> sum;
                };
            }
            assertClose(ref, out, "global " + reduction);
        }
    }
}
