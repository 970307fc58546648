package org.symmem4j.parallel.host;

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
                       MemorySegment dst, long dstOffset, DType dstType, long count, ReduceOp op, int divisor) {
        long done = dstType == DType.FLOAT64
                ? reduceDouble(srcs, srcOffsets, nsrc, dst, dstOffset, count, op, divisor)
                : reduceFloat(srcs, srcOffsets, srcTypes, nsrc, dst, dstOffset, dstType, count, op, divisor);
        ScalarReducer.reduceRange(srcs, srcOffsets, srcTypes, nsrc, dst, dstOffset, dstType, done, count, op, divisor);
    }

    private static long reduceDouble(MemorySegment[] srcs, long[] srcOffsets, int nsrc, MemorySegment dst,
                                     long dstOffset, long count, ReduceOp op, int divisor) {
        int lanes = DS.length();
        long upper = count - count % lanes;
        for (long i = 0; i < upper; i += lanes) {
            DoubleVector acc = DoubleVector.fromMemorySegment(DS, srcs[0], srcOffsets[0] + i * 8, LE);
            for (int k = 1; k < nsrc; k++) {
                DoubleVector v = DoubleVector.fromMemorySegment(DS, srcs[k], srcOffsets[k] + i * 8, LE);
                acc = switch (op) {
                    case SUM, AVG -> acc.add(v);
                    case MAX -> acc.max(v);
                    case MIN -> acc.min(v);
                };
            }
            if (divisor > 0) {
                acc = acc.div(divisor);
            }
            acc = acc.blend(Double.NaN, acc.test(VectorOperators.IS_NAN)); // canonical NaN, as the scalar loop
            acc.intoMemorySegment(dst, dstOffset + i * 8, LE);
        }
        return upper;
    }

    private static long reduceFloat(MemorySegment[] srcs, long[] srcOffsets, DType[] srcTypes, int nsrc,
                                    MemorySegment dst, long dstOffset, DType dstType, long count, ReduceOp op,
                                    int divisor) {
        int lanes = FS.length();
        long upper = count - count % lanes;
        for (long i = 0; i < upper; i += lanes) {
            FloatVector acc = load(srcs[0], srcOffsets[0], srcTypes[0], i);
            for (int k = 1; k < nsrc; k++) {
                FloatVector v = load(srcs[k], srcOffsets[k], srcTypes[k], i);
                acc = switch (op) {
                    case SUM, AVG -> acc.add(v);
                    case MAX -> acc.max(v);
                    case MIN -> acc.min(v);
                };
            }
            if (divisor > 0) {
                acc = acc.div(divisor);
            }
            acc = acc.blend(Float.NaN, acc.test(VectorOperators.IS_NAN)); // canonical NaN, as the scalar loop
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
