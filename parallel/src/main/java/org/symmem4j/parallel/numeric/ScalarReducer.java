package org.symmem4j.parallel.numeric;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * The reference element loop (see {@link Reducer}); also the tail loop of {@link VectorReducer}, so
 * both share one definition of every element's arithmetic.
 */
public final class ScalarReducer implements Reducer {

    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED;
    static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED;
    static final ValueLayout.OfShort BF16 = ValueLayout.JAVA_SHORT_UNALIGNED;

    /** The scalar loops: what {@link Reducer#forThisJvm()} picks without the Vector API module, and the reference. */
    public ScalarReducer() {
    }

    @Override
    public String name() {
        return "scalar";
    }

    @Override
    public void reduce(MemorySegment[] srcs, long[] srcOffsets, DType[] srcTypes, int nsrc,
                       MemorySegment dst, long dstOffset, DType dstType, long count, ReduceOp op, int divisor,
                       boolean canonicalNaN) {
        reduceRange(srcs, srcOffsets, srcTypes, nsrc, dst, dstOffset, dstType, 0, count, op, divisor, canonicalNaN);
    }

    /** Elements {@code [from, to)}. */
    static void reduceRange(MemorySegment[] srcs, long[] srcOffsets, DType[] srcTypes, int nsrc,
                            MemorySegment dst, long dstOffset, DType dstType, long from, long to, ReduceOp op,
                            int divisor, boolean canonicalNaN) {
        if (dstType == DType.FLOAT64) {
            for (long i = from; i < to; i++) {
                double acc = srcs[0].get(F64, srcOffsets[0] + i * 8);
                for (int k = 1; k < nsrc; k++) {
                    acc = combine(acc, srcs[k].get(F64, srcOffsets[k] + i * 8), op);
                }
                if (divisor > 0) {
                    acc = acc / divisor;
                }
                if (canonicalNaN && acc != acc) {
                    acc = Double.NaN; // canonical: NaN sign and payload depend on operand order in hardware
                }
                dst.set(F64, dstOffset + i * 8, acc);
            }
            return;
        }
        for (long i = from; i < to; i++) {
            float acc = loadFloat(srcs[0], srcOffsets[0], srcTypes[0], i);
            for (int k = 1; k < nsrc; k++) {
                acc = combine(acc, loadFloat(srcs[k], srcOffsets[k], srcTypes[k], i), op);
            }
            if (divisor > 0) {
                acc = acc / divisor;
            }
            if (canonicalNaN && acc != acc) {
                acc = Float.NaN; // canonical: NaN sign and payload depend on operand order in hardware
            }
            if (dstType == DType.FLOAT32) {
                dst.set(F32, dstOffset + i * 4, acc);
            } else {
                dst.set(BF16, dstOffset + i * 2, BFloat16.fromFloat(acc));
            }
        }
    }

    @Override
    public long firstNonFinite(MemorySegment segment, long offset, DType type, long count) {
        return firstNonFiniteFrom(segment, offset, type, 0, count);
    }

    @Override
    public long divideAndFindNonFinite(MemorySegment segment, long offset, DType type, long count, long divisor) {
        checkDivisor(divisor);
        return divideRange(segment, offset, type, 0, count, divisor);
    }

    static void checkDivisor(long divisor) {
        if (divisor < 1 || divisor > (1L << 24)) {
            throw new IllegalArgumentException("divisor=" + divisor + " expected 1.." + (1L << 24)
                    + " (exact in FLOAT32, so every dtype divides by the same number;"
                    + " fix: divide by a count in that range)");
        }
    }

    /** Elements {@code [from, to)}; shared with the vector reducer's tail. */
    static long divideRange(MemorySegment segment, long offset, DType type, long from, long to, long divisor) {
        long firstBad = -1;
        if (type == DType.FLOAT64) {
            double d = divisor;
            for (long i = from; i < to; i++) {
                double v = segment.get(F64, offset + i * 8) / d;
                segment.set(F64, offset + i * 8, v);
                if (firstBad < 0 && !Double.isFinite(v)) {
                    firstBad = i;
                }
            }
            return firstBad;
        }
        float f = divisor;
        for (long i = from; i < to; i++) {
            float v = loadFloat(segment, offset, type, i) / f;
            if (type == DType.FLOAT32) {
                segment.set(F32, offset + i * 4, v);
            } else {
                short b = BFloat16.fromFloat(v);
                segment.set(BF16, offset + i * 2, b);
                v = BFloat16.toFloat(b);
            }
            if (firstBad < 0 && !Float.isFinite(v)) {
                firstBad = i;
            }
        }
        return firstBad;
    }

    /** Elements {@code [from, to)}; shared with the vector reducer's tail. */
    static long firstNonFiniteFrom(MemorySegment segment, long offset, DType type, long from, long to) {
        for (long i = from; i < to; i++) {
            boolean finite = type == DType.FLOAT64 ? Double.isFinite(segment.get(F64, offset + i * 8))
                    : Float.isFinite(loadFloat(segment, offset, type, i));
            if (!finite) {
                return i;
            }
        }
        return -1;
    }

    static float loadFloat(MemorySegment s, long base, DType type, long i) {
        return type == DType.FLOAT32 ? s.get(F32, base + i * 4) : BFloat16.toFloat(s.get(BF16, base + i * 2));
    }

    static float combine(float a, float b, ReduceOp op) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case MAX -> Math.max(a, b);
            case MIN -> Math.min(a, b);
        };
    }

    static double combine(double a, double b, ReduceOp op) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case MAX -> Math.max(a, b);
            case MIN -> Math.min(a, b);
        };
    }
}
