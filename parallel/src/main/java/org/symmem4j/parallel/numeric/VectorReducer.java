package org.symmem4j.parallel.numeric;

import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * {@link Reducer} on the JDK Vector API: one pass, loading lane-width slices of every source and
 * storing the combined slice. The JIT does not auto-vectorize loops over native segments that may
 * alias (JDK 25), so explicit vectors are what reach memory bandwidth; the per-element arithmetic is
 * the same IEEE operation as {@link ScalarReducer}'s, so results are bitwise equal.
 */
final class VectorReducer implements Reducer {

    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    private static final VectorSpecies<Float> FS = FloatVector.SPECIES_PREFERRED;
    private static final VectorSpecies<Integer> IS = VectorSpecies.of(int.class, FS.vectorShape());
    /** Half the float shape: the same lane count of shorts. */
    private static final VectorSpecies<Short> SS =
            VectorSpecies.of(short.class, VectorShape.forBitSize(FS.vectorBitSize() / 2));
    private static final VectorSpecies<Double> DS = DoubleVector.SPECIES_PREFERRED;
    /*
     * Exact receivers. C2 keeps a vector in a register only when it inlines every Vector API call
     * down to its intrinsic, and most of those calls (add, max, intoMemorySegment) dispatch on the
     * vector's concrete class (Float512Vector, ...). A vector fresh from a load or an operation has
     * that class statically; one carried through a loop (the accumulator over the sources) or merged
     * after a branch has only the declared type, FloatVector, because the loop's phi is typed before
     * its back edge is parsed. There C2 inlines only by speculating on the call site's receiver type
     * profile, which is shared by every caller in the JVM and not guaranteed: the tiered policy may
     * run a method in C1 without type profiling (tier 2, seen here on the loaded 2-core machine),
     * another caller may pollute it, and after failed class checks C2 stops speculating. Without it
     * the call stays virtual and the vectors are heap objects: a virtual DoubleVector.max boxes three
     * 96-byte vectors per iteration, 4,608 bytes per staged two-shot all-reduce of 256 doubles, the
     * figure of SteadyStateAllocationTest's intermittent CI failure (about one run in four);
     * -XX:-UseTypeProfile made every host vector path allocate, every time. So every loop-carried or
     * merged vector is cast to its concrete class ({@code FV.cast(acc)}) before it is a receiver:
     * Class.cast of a constant final class is a C2 intrinsic that types its result exactly (one class
     * compare, removed where the type is known), so the calls bind without any profile. The sum and
     * max/min loops also call no helper of their own with a vector argument (the NaN blend is written
     * out): a helper C2 declines to inline (already compiled into a big method, inlining budget) boxes
     * its vectors too. The bf16 loop keeps load() and storeBf16(); the test without type profiles
     * measures it allocation-free.
     */
    @SuppressWarnings("unchecked")
    private static final Class<? extends FloatVector> FV = (Class<? extends FloatVector>) FS.vectorType();
    @SuppressWarnings("unchecked")
    private static final Class<? extends DoubleVector> DV = (Class<? extends DoubleVector>) DS.vectorType();

    private VectorReducer() {
    }

    /** Null when the module is missing or the platform has no usable vector shape. */
    static Reducer createIfAvailable() {
        if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) {
            return null;
        }
        try {
            if (FS.length() < 4) {
                return null;
            }
            return new VectorReducer();
        } catch (LinkageError e) {
            return null;
        }
    }

    @Override
    public String name() {
        return "vector-" + FS.vectorBitSize() + "bit";
    }

    @Override
    public void reduce(MemorySegment[] srcs, long[] srcOffsets, DType[] srcTypes, int nsrc,
                       MemorySegment dst, long dstOffset, DType dstType, long count, ReduceOp op, int divisor,
                       boolean canonicalNaN) {
        long done = 0;
        boolean sum = op == ReduceOp.SUM || op == ReduceOp.AVG;
        // The vector loops are only called with at least one iteration's worth of elements; fewer go
        // to the scalar loop directly. Calls that skip a loop's body would teach the JIT that the body
        // is cold, and C2 then compiles it without inlining the Vector API's intrinsics, which boxes
        // every vector (measured: 6 KiB allocated per 1 KiB all-reduce after 10,000 all-reduces of
        // 1..64 floats, AllReduceStressTest before SteadyStateAllocationTest in one JVM).
        if (dstType == DType.FLOAT64) {
            if (count >= (sum ? 4L : 1L) * DS.length()) {
                done = sum ? sumDouble(srcs, srcOffsets, nsrc, dst, dstOffset, count, divisor, canonicalNaN)
                        : maxMinDouble(op == ReduceOp.MAX, srcs, srcOffsets, nsrc, dst, dstOffset, count);
            }
        } else if (allFloat32(srcTypes, nsrc, dstType)) {
            if (count >= (sum ? 4L : 1L) * FS.length()) {
                done = sum ? sumFloat(srcs, srcOffsets, nsrc, dst, dstOffset, count, divisor, canonicalNaN)
                        : maxMinFloat(op == ReduceOp.MAX, srcs, srcOffsets, nsrc, dst, dstOffset, count);
            }
        } else {
            done = reduceWithBfloat16(srcs, srcOffsets, srcTypes, nsrc, dst, dstOffset, dstType, count, op, divisor);
        }
        ScalarReducer.reduceRange(srcs, srcOffsets, srcTypes, nsrc, dst, dstOffset, dstType, done, count, op, divisor,
                canonicalNaN);
    }

    @Override
    public long firstNonFinite(MemorySegment segment, long offset, DType type, long count) {
        long upper = 0;
        if (type == DType.FLOAT32) {
            int lanes = FS.length();
            upper = count - count % lanes;
            for (long i = 0; i < upper; i += lanes) {
                FloatVector v = FloatVector.fromMemorySegment(FS, segment, offset + i * 4, LE);
                if (!v.test(VectorOperators.IS_FINITE).allTrue()) {
                    return ScalarReducer.firstNonFiniteFrom(segment, offset, type, i, i + lanes);
                }
            }
        } else if (type == DType.FLOAT64) {
            int lanes = DS.length();
            upper = count - count % lanes;
            for (long i = 0; i < upper; i += lanes) {
                DoubleVector v = DoubleVector.fromMemorySegment(DS, segment, offset + i * 8, LE);
                if (!v.test(VectorOperators.IS_FINITE).allTrue()) {
                    return ScalarReducer.firstNonFiniteFrom(segment, offset, type, i, i + lanes);
                }
            }
        }
        return ScalarReducer.firstNonFiniteFrom(segment, offset, type, upper, count);
    }

    @Override
    public long divideAndFindNonFinite(MemorySegment segment, long offset, DType type, long count, long divisor) {
        ScalarReducer.checkDivisor(divisor);
        long done = 0;
        long firstBad = -1;
        // As in reduce(): the vector loop runs only with a full iteration's worth of elements.
        if (type == DType.FLOAT32 && count >= 4L * FS.length()) {
            int lanes = FS.length();
            long step = 4L * lanes;
            long vbytes = 4L * lanes;
            done = count - count % step;
            float d = divisor;
            for (long i = 0; i < done; i += step) {
                long b = offset + i * 4;
                FloatVector a0 = FloatVector.fromMemorySegment(FS, segment, b, LE).div(d);
                FloatVector a1 = FloatVector.fromMemorySegment(FS, segment, b + vbytes, LE).div(d);
                FloatVector a2 = FloatVector.fromMemorySegment(FS, segment, b + 2 * vbytes, LE).div(d);
                FloatVector a3 = FloatVector.fromMemorySegment(FS, segment, b + 3 * vbytes, LE).div(d);
                a0.intoMemorySegment(segment, b, LE);
                a1.intoMemorySegment(segment, b + vbytes, LE);
                a2.intoMemorySegment(segment, b + 2 * vbytes, LE);
                a3.intoMemorySegment(segment, b + 3 * vbytes, LE);
                // finite iff x - x == 0: one subtraction and compare per vector, no branch per lane
                if (firstBad < 0 && !a0.sub(a0).add(a1.sub(a1)).add(a2.sub(a2)).add(a3.sub(a3))
                        .compare(VectorOperators.EQ, 0f).allTrue()) {
                    firstBad = ScalarReducer.firstNonFiniteFrom(segment, offset, type, i, i + step);
                }
            }
        } else if (type == DType.FLOAT64 && count >= 4L * DS.length()) {
            int lanes = DS.length();
            long step = 4L * lanes;
            long vbytes = 8L * lanes;
            done = count - count % step;
            double d = divisor;
            for (long i = 0; i < done; i += step) {
                long b = offset + i * 8;
                DoubleVector a0 = DoubleVector.fromMemorySegment(DS, segment, b, LE).div(d);
                DoubleVector a1 = DoubleVector.fromMemorySegment(DS, segment, b + vbytes, LE).div(d);
                DoubleVector a2 = DoubleVector.fromMemorySegment(DS, segment, b + 2 * vbytes, LE).div(d);
                DoubleVector a3 = DoubleVector.fromMemorySegment(DS, segment, b + 3 * vbytes, LE).div(d);
                a0.intoMemorySegment(segment, b, LE);
                a1.intoMemorySegment(segment, b + vbytes, LE);
                a2.intoMemorySegment(segment, b + 2 * vbytes, LE);
                a3.intoMemorySegment(segment, b + 3 * vbytes, LE);
                if (firstBad < 0 && !a0.sub(a0).add(a1.sub(a1)).add(a2.sub(a2)).add(a3.sub(a3))
                        .compare(VectorOperators.EQ, 0d).allTrue()) {
                    firstBad = ScalarReducer.firstNonFiniteFrom(segment, offset, type, i, i + step);
                }
            }
        }
        long tailBad = ScalarReducer.divideRange(segment, offset, type, done, count, divisor);
        return firstBad >= 0 ? firstBad : tailBad;
    }

    private static boolean allFloat32(DType[] srcTypes, int nsrc, DType dstType) {
        if (dstType != DType.FLOAT32) {
            return false;
        }
        for (int k = 0; k < nsrc; k++) {
            if (srcTypes[k] != DType.FLOAT32) {
                return false;
            }
        }
        return true;
    }

    /*
     * The sum loops (the hot path: gradient averaging) handle four vectors per iteration. With one
     * vector per iteration the loop overhead and the segment checks of each access dominate on
     * cache-resident data (measured: 2-source float sum of 512 KiB, 22 us with one vector per
     * iteration, 15 us with four, memcpy of the same bytes 16 us). MAX/MIN keep the simple loop.
     * Canonicalizing NaNs costs a test and a blend per vector, as much as the sum itself on
     * cache-resident data (64 KiB: 2.6 us with, 1.2 us without), so it is done only when asked.
     */

    private static long sumFloat(MemorySegment[] srcs, long[] offs, int nsrc, MemorySegment dst, long dstOffset,
                                 long count, int divisor, boolean canonicalNaN) {
        int lanes = FS.length();
        long step = 4L * lanes;
        long vbytes = 4L * lanes;
        long upper = count - count % step;
        float scale = divisor;
        for (long i = 0; i < upper; i += step) {
            long b = i * 4;
            FloatVector a0 = FloatVector.fromMemorySegment(FS, srcs[0], offs[0] + b, LE);
            FloatVector a1 = FloatVector.fromMemorySegment(FS, srcs[0], offs[0] + b + vbytes, LE);
            FloatVector a2 = FloatVector.fromMemorySegment(FS, srcs[0], offs[0] + b + 2 * vbytes, LE);
            FloatVector a3 = FloatVector.fromMemorySegment(FS, srcs[0], offs[0] + b + 3 * vbytes, LE);
            for (int k = 1; k < nsrc; k++) {
                MemorySegment s = srcs[k];
                long o = offs[k] + b;
                a0 = FV.cast(a0).add(FloatVector.fromMemorySegment(FS, s, o, LE));
                a1 = FV.cast(a1).add(FloatVector.fromMemorySegment(FS, s, o + vbytes, LE));
                a2 = FV.cast(a2).add(FloatVector.fromMemorySegment(FS, s, o + 2 * vbytes, LE));
                a3 = FV.cast(a3).add(FloatVector.fromMemorySegment(FS, s, o + 3 * vbytes, LE));
            }
            // loop-carried and merged vectors: exact again before each use (see FV)
            a0 = FV.cast(a0);
            a1 = FV.cast(a1);
            a2 = FV.cast(a2);
            a3 = FV.cast(a3);
            if (divisor > 0) {
                a0 = a0.div(scale);
                a1 = a1.div(scale);
                a2 = a2.div(scale);
                a3 = a3.div(scale);
            }
            a0 = FV.cast(a0);
            a1 = FV.cast(a1);
            a2 = FV.cast(a2);
            a3 = FV.cast(a3);
            if (canonicalNaN) { // NaN lanes become the canonical NaN, as in the scalar loop
                a0 = a0.blend(Float.NaN, a0.test(VectorOperators.IS_NAN));
                a1 = a1.blend(Float.NaN, a1.test(VectorOperators.IS_NAN));
                a2 = a2.blend(Float.NaN, a2.test(VectorOperators.IS_NAN));
                a3 = a3.blend(Float.NaN, a3.test(VectorOperators.IS_NAN));
            }
            long d = dstOffset + b;
            FV.cast(a0).intoMemorySegment(dst, d, LE);
            FV.cast(a1).intoMemorySegment(dst, d + vbytes, LE);
            FV.cast(a2).intoMemorySegment(dst, d + 2 * vbytes, LE);
            FV.cast(a3).intoMemorySegment(dst, d + 3 * vbytes, LE);
        }
        return upper;
    }

    private static long maxMinFloat(boolean max, MemorySegment[] srcs, long[] offs, int nsrc, MemorySegment dst,
                                    long dstOffset, long count) {
        int lanes = FS.length();
        long upper = count - count % lanes;
        for (long i = 0; i < upper; i += lanes) {
            FloatVector acc = FloatVector.fromMemorySegment(FS, srcs[0], offs[0] + i * 4, LE);
            for (int k = 1; k < nsrc; k++) {
                FloatVector v = FloatVector.fromMemorySegment(FS, srcs[k], offs[k] + i * 4, LE);
                acc = max ? FV.cast(acc).max(v) : FV.cast(acc).min(v);
            }
            acc = FV.cast(acc); // loop-carried: exact again (see FV)
            // NaN lanes become the canonical NaN, as in the scalar loop
            acc.blend(Float.NaN, acc.test(VectorOperators.IS_NAN)).intoMemorySegment(dst, dstOffset + i * 4, LE);
        }
        return upper;
    }

    private static long sumDouble(MemorySegment[] srcs, long[] offs, int nsrc, MemorySegment dst, long dstOffset,
                                  long count, int divisor, boolean canonicalNaN) {
        int lanes = DS.length();
        long step = 4L * lanes;
        long vbytes = 8L * lanes;
        long upper = count - count % step;
        double scale = divisor;
        for (long i = 0; i < upper; i += step) {
            long b = i * 8;
            DoubleVector a0 = DoubleVector.fromMemorySegment(DS, srcs[0], offs[0] + b, LE);
            DoubleVector a1 = DoubleVector.fromMemorySegment(DS, srcs[0], offs[0] + b + vbytes, LE);
            DoubleVector a2 = DoubleVector.fromMemorySegment(DS, srcs[0], offs[0] + b + 2 * vbytes, LE);
            DoubleVector a3 = DoubleVector.fromMemorySegment(DS, srcs[0], offs[0] + b + 3 * vbytes, LE);
            for (int k = 1; k < nsrc; k++) {
                MemorySegment s = srcs[k];
                long o = offs[k] + b;
                a0 = DV.cast(a0).add(DoubleVector.fromMemorySegment(DS, s, o, LE));
                a1 = DV.cast(a1).add(DoubleVector.fromMemorySegment(DS, s, o + vbytes, LE));
                a2 = DV.cast(a2).add(DoubleVector.fromMemorySegment(DS, s, o + 2 * vbytes, LE));
                a3 = DV.cast(a3).add(DoubleVector.fromMemorySegment(DS, s, o + 3 * vbytes, LE));
            }
            // loop-carried and merged vectors: exact again before each use (see FV)
            a0 = DV.cast(a0);
            a1 = DV.cast(a1);
            a2 = DV.cast(a2);
            a3 = DV.cast(a3);
            if (divisor > 0) {
                a0 = a0.div(scale);
                a1 = a1.div(scale);
                a2 = a2.div(scale);
                a3 = a3.div(scale);
            }
            a0 = DV.cast(a0);
            a1 = DV.cast(a1);
            a2 = DV.cast(a2);
            a3 = DV.cast(a3);
            if (canonicalNaN) { // NaN lanes become the canonical NaN, as in the scalar loop
                a0 = a0.blend(Double.NaN, a0.test(VectorOperators.IS_NAN));
                a1 = a1.blend(Double.NaN, a1.test(VectorOperators.IS_NAN));
                a2 = a2.blend(Double.NaN, a2.test(VectorOperators.IS_NAN));
                a3 = a3.blend(Double.NaN, a3.test(VectorOperators.IS_NAN));
            }
            long d = dstOffset + b;
            DV.cast(a0).intoMemorySegment(dst, d, LE);
            DV.cast(a1).intoMemorySegment(dst, d + vbytes, LE);
            DV.cast(a2).intoMemorySegment(dst, d + 2 * vbytes, LE);
            DV.cast(a3).intoMemorySegment(dst, d + 3 * vbytes, LE);
        }
        return upper;
    }

    private static long maxMinDouble(boolean max, MemorySegment[] srcs, long[] offs, int nsrc, MemorySegment dst,
                                     long dstOffset, long count) {
        int lanes = DS.length();
        long upper = count - count % lanes;
        for (long i = 0; i < upper; i += lanes) {
            DoubleVector acc = DoubleVector.fromMemorySegment(DS, srcs[0], offs[0] + i * 8, LE);
            for (int k = 1; k < nsrc; k++) {
                DoubleVector v = DoubleVector.fromMemorySegment(DS, srcs[k], offs[k] + i * 8, LE);
                acc = max ? DV.cast(acc).max(v) : DV.cast(acc).min(v);
            }
            acc = DV.cast(acc); // loop-carried: exact again (see FV)
            // NaN lanes become the canonical NaN, as in the scalar loop
            acc.blend(Double.NaN, acc.test(VectorOperators.IS_NAN)).intoMemorySegment(dst, dstOffset + i * 8, LE);
        }
        return upper;
    }

    /** Any mix of BFLOAT16 and FLOAT32 operands, accumulated in FLOAT32. */
    private static long reduceWithBfloat16(MemorySegment[] srcs, long[] srcOffsets, DType[] srcTypes, int nsrc,
                                           MemorySegment dst, long dstOffset, DType dstType, long count, ReduceOp op,
                                           int divisor) {
        int lanes = FS.length();
        long upper = count - count % lanes;
        for (long i = 0; i < upper; i += lanes) {
            // load() merges two branches, the accumulator is loop-carried: exact before each use (see FV)
            FloatVector acc = FV.cast(load(srcs[0], srcOffsets[0], srcTypes[0], i));
            for (int k = 1; k < nsrc; k++) {
                FloatVector v = FV.cast(load(srcs[k], srcOffsets[k], srcTypes[k], i));
                acc = FV.cast(acc);
                acc = switch (op) {
                    case SUM, AVG -> acc.add(v);
                    case MAX -> acc.max(v);
                    case MIN -> acc.min(v);
                };
            }
            acc = FV.cast(acc);
            if (divisor > 0) {
                acc = acc.div(divisor);
            }
            acc = FV.cast(acc);
            acc = acc.blend(Float.NaN, acc.test(VectorOperators.IS_NAN)); // the canonical NaN, as in the scalar loop
            if (dstType == DType.FLOAT32) {
                acc.intoMemorySegment(dst, dstOffset + i * 4, LE);
            } else {
                storeBf16(acc, dst, dstOffset + i * 2);
            }
        }
        return upper;
    }

    private static FloatVector load(MemorySegment s, long base, DType type, long i) {
        if (type == DType.FLOAT32) {
            return FloatVector.fromMemorySegment(FS, s, base + i * 4, LE);
        }
        // bf16 -> f32 is exact: sign-extend to int, shift the 16 bits into the top half.
        ShortVector raw = ShortVector.fromMemorySegment(SS, s, base + i * 2, LE);
        IntVector wide = (IntVector) raw.convertShape(VectorOperators.S2I, IS, 0);
        return wide.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats();
    }

    /** Round to nearest even, NaN quieted: the same bit operations as {@link BFloat16#fromFloat}. */
    private static void storeBf16(FloatVector v, MemorySegment dst, long offset) {
        IntVector bits = v.reinterpretAsInts();
        IntVector high = bits.lanewise(VectorOperators.LSHR, 16);
        IntVector rounded = bits.add(0x7FFF).add(high.and(1)).lanewise(VectorOperators.LSHR, 16);
        VectorMask<Integer> nan = v.test(VectorOperators.IS_NAN).cast(IS);
        IntVector result = rounded.blend(high.or(0x40), nan);
        ShortVector narrow = (ShortVector) result.convertShape(VectorOperators.I2S, SS, 0);
        narrow.intoMemorySegment(dst, offset, LE);
    }
}
