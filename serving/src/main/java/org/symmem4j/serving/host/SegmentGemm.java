package org.symmem4j.serving.host;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

/**
 * {@code C = A x B + bias}: A an {@code m x k} row-major FP32 matrix read in place from a memory segment (a layer's
 * weights), B a {@code k x n} and C an {@code m x n} row-major matrix in heap arrays. Register-blocked: four rows of
 * A times two vectors of B's columns in eight accumulators (A's values broadcast, B's rows loaded as vectors), then
 * one vector, then a scalar tail; rows of A left over after the blocks of four go one at a time.
 */
final class SegmentGemm {

    private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;
    private static final ValueLayout.OfFloat F = ValueLayout.JAVA_FLOAT_UNALIGNED;
    private static final ByteOrder NATIVE = ByteOrder.nativeOrder();
    private static final VectorOperators.Associative ADD = VectorOperators.ADD;

    private SegmentGemm() {
    }

    /**
     * Computes {@code c[cOff + i * n + j] = bias[i] + sum_t a[i, t] * b[bOff + t * n + j]}.
     *
     * @param a       the segment holding A
     * @param aOff    A's byte offset in {@code a}
     * @param bias    the segment holding the bias (m floats), or null for none
     * @param biasOff the bias's byte offset
     * @param b       B
     * @param bOff    B's offset
     * @param c       C, overwritten
     * @param cOff    C's offset
     * @param m       rows of A and C
     * @param n       columns of B and C
     * @param k       columns of A, rows of B
     */
    static void multiply(MemorySegment a, long aOff, MemorySegment bias, long biasOff, float[] b, int bOff, float[] c,
                         int cOff, int m, int n, int k) {
        int vl = S.length();
        long rowBytes = (long) k * Float.BYTES;
        int i = 0;
        for (; i + 4 <= m; i += 4) {
            long a0 = aOff + i * rowBytes, a1 = a0 + rowBytes, a2 = a1 + rowBytes, a3 = a2 + rowBytes;
            float z0 = biasOf(bias, biasOff, i), z1 = biasOf(bias, biasOff, i + 1);
            float z2 = biasOf(bias, biasOff, i + 2), z3 = biasOf(bias, biasOff, i + 3);
            int c0 = cOff + i * n, c1 = c0 + n, c2 = c1 + n, c3 = c2 + n;
            int j = 0;
            for (; j + 4 * vl <= n; j += 4 * vl) {
                quad(a, a0, rowBytes, z0, z1, z2, z3, b, bOff + j, n, k, c, c0 + j);
            }
            for (; j + 2 * vl <= n; j += 2 * vl) {
                FloatVector s00 = FloatVector.broadcast(S, z0), s01 = s00;
                FloatVector s10 = FloatVector.broadcast(S, z1), s11 = s10;
                FloatVector s20 = FloatVector.broadcast(S, z2), s21 = s20;
                FloatVector s30 = FloatVector.broadcast(S, z3), s31 = s30;
                int bj = bOff + j;
                for (int t = 0; t < k; t++, bj += n) {
                    long at = (long) t * Float.BYTES;
                    FloatVector b0 = FloatVector.fromArray(S, b, bj);
                    FloatVector b1 = FloatVector.fromArray(S, b, bj + vl);
                    FloatVector w = FloatVector.broadcast(S, a.get(F, a0 + at));
                    s00 = b0.fma(w, s00);
                    s01 = b1.fma(w, s01);
                    w = FloatVector.broadcast(S, a.get(F, a1 + at));
                    s10 = b0.fma(w, s10);
                    s11 = b1.fma(w, s11);
                    w = FloatVector.broadcast(S, a.get(F, a2 + at));
                    s20 = b0.fma(w, s20);
                    s21 = b1.fma(w, s21);
                    w = FloatVector.broadcast(S, a.get(F, a3 + at));
                    s30 = b0.fma(w, s30);
                    s31 = b1.fma(w, s31);
                }
                s00.intoArray(c, c0 + j);
                s01.intoArray(c, c0 + j + vl);
                s10.intoArray(c, c1 + j);
                s11.intoArray(c, c1 + j + vl);
                s20.intoArray(c, c2 + j);
                s21.intoArray(c, c2 + j + vl);
                s30.intoArray(c, c3 + j);
                s31.intoArray(c, c3 + j + vl);
            }
            for (; j + vl <= n; j += vl) {
                FloatVector s0 = FloatVector.broadcast(S, z0), s1 = FloatVector.broadcast(S, z1);
                FloatVector s2 = FloatVector.broadcast(S, z2), s3 = FloatVector.broadcast(S, z3);
                int bj = bOff + j;
                for (int t = 0; t < k; t++, bj += n) {
                    long at = (long) t * Float.BYTES;
                    FloatVector b0 = FloatVector.fromArray(S, b, bj);
                    s0 = b0.fma(FloatVector.broadcast(S, a.get(F, a0 + at)), s0);
                    s1 = b0.fma(FloatVector.broadcast(S, a.get(F, a1 + at)), s1);
                    s2 = b0.fma(FloatVector.broadcast(S, a.get(F, a2 + at)), s2);
                    s3 = b0.fma(FloatVector.broadcast(S, a.get(F, a3 + at)), s3);
                }
                s0.intoArray(c, c0 + j);
                s1.intoArray(c, c1 + j);
                s2.intoArray(c, c2 + j);
                s3.intoArray(c, c3 + j);
            }
            for (; j < n; j++) {
                c[c0 + j] = scalarDot(a, a0, b, bOff + j, n, k, z0);
                c[c1 + j] = scalarDot(a, a1, b, bOff + j, n, k, z1);
                c[c2 + j] = scalarDot(a, a2, b, bOff + j, n, k, z2);
                c[c3 + j] = scalarDot(a, a3, b, bOff + j, n, k, z3);
            }
        }
        for (; i < m; i++) {
            long ai = aOff + i * rowBytes;
            float zi = biasOf(bias, biasOff, i);
            int ci = cOff + i * n;
            int j = 0;
            for (; j + vl <= n; j += vl) {
                FloatVector s = FloatVector.broadcast(S, zi);
                int bj = bOff + j;
                for (int t = 0; t < k; t++, bj += n) {
                    FloatVector w = FloatVector.broadcast(S, a.get(F, ai + (long) t * Float.BYTES));
                    s = FloatVector.fromArray(S, b, bj).fma(w, s);
                }
                s.intoArray(c, ci + j);
            }
            for (; j < n; j++) {
                c[ci + j] = scalarDot(a, ai, b, bOff + j, n, k, zi);
            }
        }
    }

    /**
     * Four rows of A times four vectors of B's columns: sixteen accumulators, four loads and four broadcasts per
     * sixteen FMAs (AVX-512 has 32 vector registers; on AVX2 the JIT spills some).
     */
    private static void quad(MemorySegment a, long a0, long rowBytes, float z0, float z1, float z2, float z3,
                             float[] b, int bj, int n, int k, float[] c, int c0) {
        int vl = S.length();
        long a1 = a0 + rowBytes, a2 = a1 + rowBytes, a3 = a2 + rowBytes;
        FloatVector s00 = FloatVector.broadcast(S, z0), s01 = s00, s02 = s00, s03 = s00;
        FloatVector s10 = FloatVector.broadcast(S, z1), s11 = s10, s12 = s10, s13 = s10;
        FloatVector s20 = FloatVector.broadcast(S, z2), s21 = s20, s22 = s20, s23 = s20;
        FloatVector s30 = FloatVector.broadcast(S, z3), s31 = s30, s32 = s30, s33 = s30;
        for (int t = 0; t < k; t++, bj += n) {
            long at = (long) t * Float.BYTES;
            FloatVector b0 = FloatVector.fromArray(S, b, bj);
            FloatVector b1 = FloatVector.fromArray(S, b, bj + vl);
            FloatVector b2 = FloatVector.fromArray(S, b, bj + 2 * vl);
            FloatVector b3 = FloatVector.fromArray(S, b, bj + 3 * vl);
            FloatVector w = FloatVector.broadcast(S, a.get(F, a0 + at));
            s00 = b0.fma(w, s00);
            s01 = b1.fma(w, s01);
            s02 = b2.fma(w, s02);
            s03 = b3.fma(w, s03);
            w = FloatVector.broadcast(S, a.get(F, a1 + at));
            s10 = b0.fma(w, s10);
            s11 = b1.fma(w, s11);
            s12 = b2.fma(w, s12);
            s13 = b3.fma(w, s13);
            w = FloatVector.broadcast(S, a.get(F, a2 + at));
            s20 = b0.fma(w, s20);
            s21 = b1.fma(w, s21);
            s22 = b2.fma(w, s22);
            s23 = b3.fma(w, s23);
            w = FloatVector.broadcast(S, a.get(F, a3 + at));
            s30 = b0.fma(w, s30);
            s31 = b1.fma(w, s31);
            s32 = b2.fma(w, s32);
            s33 = b3.fma(w, s33);
        }
        store4(s00, s01, s02, s03, c, c0);
        store4(s10, s11, s12, s13, c, c0 + n);
        store4(s20, s21, s22, s23, c, c0 + 2 * n);
        store4(s30, s31, s32, s33, c, c0 + 3 * n);
    }

    private static void store4(FloatVector v0, FloatVector v1, FloatVector v2, FloatVector v3, float[] c, int at) {
        int vl = S.length();
        v0.intoArray(c, at);
        v1.intoArray(c, at + vl);
        v2.intoArray(c, at + 2 * vl);
        v3.intoArray(c, at + 3 * vl);
    }

    private static float biasOf(MemorySegment bias, long biasOff, int i) {
        return bias == null ? 0f : bias.get(F, biasOff + (long) i * Float.BYTES);
    }

    private static float scalarDot(MemorySegment a, long aRow, float[] b, int bCol, int n, int k, float init) {
        float s = init;
        for (int t = 0; t < k; t++) {
            s = Math.fma(a.get(F, aRow + (long) t * Float.BYTES), b[bCol + t * n], s);
        }
        return s;
    }

    /**
     * Computes {@code out[oOff + r * m + o] = bias[o] + dot(x[xOff + r * k ..], W[o])} for {@code rows} rows: W an
     * {@code m x k} row-major matrix in the segment (a DL4J dense layer's {@code [nIn, nOut]} 'f'-ordered weights are
     * exactly that), so each output is a dot product of two contiguous runs. Blocked four rows by two outputs (eight
     * vector accumulators, six loads per eight FMAs), reduced across lanes at the end.
     *
     * @param w       the segment holding W
     * @param wOff    W's byte offset
     * @param bias    the segment holding the bias (m floats), or null
     * @param biasOff the bias's byte offset
     * @param x       the rows
     * @param xOff    the first row's offset
     * @param out     the outputs, overwritten
     * @param oOff    the first output's offset
     * @param rows    rows of x
     * @param m       outputs per row
     * @param k       inputs per row
     */
    static void rowsTimesTransposed(MemorySegment w, long wOff, MemorySegment bias, long biasOff, float[] x, int xOff,
                                    float[] out, int oOff, int rows, int m, int k) {
        int vl = S.length();
        int kb = S.loopBound(k);
        long rowBytes = (long) k * Float.BYTES;
        int r = 0;
        for (; r + 4 <= rows; r += 4) {
            int x0 = xOff + r * k, x1 = x0 + k, x2 = x1 + k, x3 = x2 + k;
            int o = 0;
            for (; o + 2 <= m; o += 2) {
                long w0 = wOff + o * rowBytes, w1 = w0 + rowBytes;
                FloatVector s00 = FloatVector.zero(S), s01 = s00, s10 = s00, s11 = s00;
                FloatVector s20 = s00, s21 = s00, s30 = s00, s31 = s00;
                for (int t = 0; t < kb; t += vl) {
                    long wt = (long) t * Float.BYTES;
                    FloatVector v0 = FloatVector.fromMemorySegment(S, w, w0 + wt, NATIVE);
                    FloatVector v1 = FloatVector.fromMemorySegment(S, w, w1 + wt, NATIVE);
                    FloatVector y = FloatVector.fromArray(S, x, x0 + t);
                    s00 = y.fma(v0, s00);
                    s01 = y.fma(v1, s01);
                    y = FloatVector.fromArray(S, x, x1 + t);
                    s10 = y.fma(v0, s10);
                    s11 = y.fma(v1, s11);
                    y = FloatVector.fromArray(S, x, x2 + t);
                    s20 = y.fma(v0, s20);
                    s21 = y.fma(v1, s21);
                    y = FloatVector.fromArray(S, x, x3 + t);
                    s30 = y.fma(v0, s30);
                    s31 = y.fma(v1, s31);
                }
                float b0 = biasOf(bias, biasOff, o), b1 = biasOf(bias, biasOff, o + 1);
                int p = oOff + r * m + o;
                out[p] = tail(w, w0, x, x0, kb, k, s00.reduceLanes(ADD) + b0);
                out[p + 1] = tail(w, w1, x, x0, kb, k, s01.reduceLanes(ADD) + b1);
                out[p + m] = tail(w, w0, x, x1, kb, k, s10.reduceLanes(ADD) + b0);
                out[p + m + 1] = tail(w, w1, x, x1, kb, k, s11.reduceLanes(ADD) + b1);
                out[p + 2 * m] = tail(w, w0, x, x2, kb, k, s20.reduceLanes(ADD) + b0);
                out[p + 2 * m + 1] = tail(w, w1, x, x2, kb, k, s21.reduceLanes(ADD) + b1);
                out[p + 3 * m] = tail(w, w0, x, x3, kb, k, s30.reduceLanes(ADD) + b0);
                out[p + 3 * m + 1] = tail(w, w1, x, x3, kb, k, s31.reduceLanes(ADD) + b1);
            }
            for (; o < m; o++) {
                for (int q = 0; q < 4; q++) {
                    out[oOff + (r + q) * m + o] = dot(w, wOff + o * rowBytes, x, xOff + (r + q) * k, kb, k)
                            + biasOf(bias, biasOff, o);
                }
            }
        }
        for (; r < rows; r++) { // rows left over (all of them at batch 1): four outputs at once, four FMA chains
            int xr = xOff + r * k, o = 0;
            for (; o + 4 <= m; o += 4) {
                long w0 = wOff + o * rowBytes, w1 = w0 + rowBytes, w2 = w1 + rowBytes, w3 = w2 + rowBytes;
                FloatVector s0 = FloatVector.zero(S), s1 = s0, s2 = s0, s3 = s0;
                for (int t = 0; t < kb; t += vl) {
                    long wt = (long) t * Float.BYTES;
                    FloatVector y = FloatVector.fromArray(S, x, xr + t);
                    s0 = y.fma(FloatVector.fromMemorySegment(S, w, w0 + wt, NATIVE), s0);
                    s1 = y.fma(FloatVector.fromMemorySegment(S, w, w1 + wt, NATIVE), s1);
                    s2 = y.fma(FloatVector.fromMemorySegment(S, w, w2 + wt, NATIVE), s2);
                    s3 = y.fma(FloatVector.fromMemorySegment(S, w, w3 + wt, NATIVE), s3);
                }
                int p = oOff + r * m + o;
                out[p] = tail(w, w0, x, xr, kb, k, s0.reduceLanes(ADD) + biasOf(bias, biasOff, o));
                out[p + 1] = tail(w, w1, x, xr, kb, k, s1.reduceLanes(ADD) + biasOf(bias, biasOff, o + 1));
                out[p + 2] = tail(w, w2, x, xr, kb, k, s2.reduceLanes(ADD) + biasOf(bias, biasOff, o + 2));
                out[p + 3] = tail(w, w3, x, xr, kb, k, s3.reduceLanes(ADD) + biasOf(bias, biasOff, o + 3));
            }
            for (; o < m; o++) {
                out[oOff + r * m + o] = dot(w, wOff + o * rowBytes, x, xr, kb, k) + biasOf(bias, biasOff, o);
            }
        }
    }

    private static float dot(MemorySegment w, long wRow, float[] x, int xRow, int kb, int k) {
        FloatVector s = FloatVector.zero(S);
        for (int t = 0; t < kb; t += S.length()) {
            s = FloatVector.fromArray(S, x, xRow + t)
                    .fma(FloatVector.fromMemorySegment(S, w, wRow + (long) t * Float.BYTES, NATIVE), s);
        }
        return tail(w, wRow, x, xRow, kb, k, s.reduceLanes(ADD));
    }

    private static float tail(MemorySegment w, long wRow, float[] x, int xRow, int from, int k, float init) {
        float s = init;
        for (int t = from; t < k; t++) {
            s = Math.fma(x[xRow + t], w.get(F, wRow + (long) t * Float.BYTES), s);
        }
        return s;
    }
}
