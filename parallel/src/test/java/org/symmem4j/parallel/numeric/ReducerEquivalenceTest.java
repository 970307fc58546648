package org.symmem4j.parallel.numeric;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * The vectorized and scalar reducers must agree bit for bit, including NaN, infinities, signed
 * zeros, subnormals, bf16 rounding ties and overflow, mixed operand types, and every tail length.
 */
class ReducerEquivalenceTest {

    private static final float[] SPECIAL = {Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, 0.0f, -0.0f,
        Float.MIN_VALUE, -Float.MIN_VALUE, Float.MIN_NORMAL, Float.MAX_VALUE, -Float.MAX_VALUE,
        Float.intBitsToFloat(0x3F808000), Float.intBitsToFloat(0x3F818000), Float.intBitsToFloat(0x7F7F8000), 1.0f, -1.0f};

    @Test
    void vectorReducerIsAvailableInTheTestJvm() {
        // surefire runs with --add-modules=jdk.incubator.vector (see the parent pom), so the fast
        // path is the one under test here; without it this would silently test scalar twice.
        assertNotNull(VectorReducer.createIfAvailable(), "jdk.incubator.vector missing from the test JVM");
        assertTrue(Reducer.forThisJvm().name().startsWith("vector"), Reducer.forThisJvm().name());
    }

    @Test
    void vectorAndScalarAgreeBitwise() {
        Reducer vector = VectorReducer.createIfAvailable();
        Reducer scalar = new ScalarReducer();
        SplittableRandom rnd = new SplittableRandom(42);
        int[] lengths = {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 4099};
        try (Arena arena = Arena.ofConfined()) {
            for (DType out : DType.values()) {
                DType[] choices = out == DType.FLOAT64 ? new DType[] {DType.FLOAT64}
                        : out == DType.FLOAT32 ? new DType[] {DType.FLOAT32, DType.BFLOAT16} : new DType[] {DType.BFLOAT16, DType.FLOAT32};
                for (ReduceOp op : ReduceOp.values()) {
                    for (int nsrc = 1; nsrc <= 8; nsrc++) {
                        for (int len : lengths) {
                            MemorySegment[] srcs = new MemorySegment[nsrc];
                            long[] offs = new long[nsrc];
                            DType[] types = new DType[nsrc];
                            for (int k = 0; k < nsrc; k++) {
                                types[k] = choices[rnd.nextInt(choices.length)];
                                offs[k] = rnd.nextInt(4) * (long) types[k].byteSize() + (rnd.nextBoolean() ? 1 : 0);
                                srcs[k] = arena.allocate(offs[k] + (long) len * types[k].byteSize() + 8, 64);
                                fill(srcs[k], offs[k], types[k], len, rnd);
                            }
                            long bytes = (long) len * out.byteSize();
                            MemorySegment a = arena.allocate(bytes + 8, 64);
                            MemorySegment b = arena.allocate(bytes + 8, 64);
                            int divisor = op == ReduceOp.AVG ? nsrc : 0;
                            String label = "out=" + out + " op=" + op + " nsrc=" + nsrc + " len=" + len;
                            vector.reduce(srcs, offs, types, nsrc, a, 0, out, len, op, divisor, true);
                            scalar.reduce(srcs, offs, types, nsrc, b, 0, out, len, op, divisor, true);
                            assertArrayEquals(b.toArray(ValueLayout.JAVA_BYTE), a.toArray(ValueLayout.JAVA_BYTE), label);
                            // without canonical NaNs: the same values, NaN bits aside
                            vector.reduce(srcs, offs, types, nsrc, a, 0, out, len, op, divisor, false);
                            for (int i = 0; i < len; i++) {
                                double x = get(a, out, i);
                                double y = get(b, out, i);
                                if (!(Double.isNaN(x) && Double.isNaN(y))) {
                                    assertEquals(Double.doubleToRawLongBits(y), Double.doubleToRawLongBits(x),
                                            label + " non-canonical element " + i);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    @Test
    void divideAndFindNonFiniteMatchesDivisionThenCheckInEveryReducer() {
        Reducer vector = VectorReducer.createIfAvailable();
        Reducer scalar = new ScalarReducer();
        SplittableRandom rnd = new SplittableRandom(7);
        int[] lengths = {0, 1, 15, 16, 17, 63, 64, 65, 1000, 4099};
        try (Arena arena = Arena.ofConfined()) {
            for (DType type : DType.values()) {
                for (int len : lengths) {
                    for (int trial = 0; trial < 6; trial++) {
                        long divisor = 1 + rnd.nextInt(5000);
                        long off = rnd.nextInt(3) * (long) type.byteSize() + (rnd.nextBoolean() ? 1 : 0);
                        MemorySegment src = arena.allocate(off + (long) len * type.byteSize() + 8, 64);
                        // trial 0: all finite; later trials plant specials, some past the vector loop's first block
                        for (int i = 0; i < len; i++) {
                            boolean special = trial > 0 && rnd.nextInt(trial == 1 ? Math.max(1, len) : 40) == 0;
                            float f = special ? SPECIAL[rnd.nextInt(SPECIAL.length)] : (float) rnd.nextDouble(-1e4, 1e4);
                            switch (type) {
                                case FLOAT32 -> src.set(ValueLayout.JAVA_FLOAT_UNALIGNED, off + i * 4L, f);
                                case BFLOAT16 -> src.set(ValueLayout.JAVA_SHORT_UNALIGNED, off + i * 2L, BFloat16.fromFloat(f));
                                case FLOAT64 -> src.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, off + i * 8L,
                                        special ? (double) f : rnd.nextDouble(-1e4, 1e4));
                            }
                        }
                        // the reference: element by element, as the two separate passes computed it
                        long expectedBad = -1;
                        double[] expected = new double[len];
                        for (int i = 0; i < len; i++) {
                            double x = get(src.asSlice(off), type, i);
                            double q = switch (type) {
                                case FLOAT64 -> x / divisor;
                                case FLOAT32 -> (float) x / (float) divisor;
                                case BFLOAT16 -> BFloat16.toFloat(BFloat16.fromFloat((float) x / (float) divisor));
                            };
                            expected[i] = q;
                            if (expectedBad < 0 && !Double.isFinite(q)) {
                                expectedBad = i;
                            }
                        }
                        String label = "type=" + type + " len=" + len + " trial=" + trial + " divisor=" + divisor;
                        for (Reducer r : new Reducer[] {vector, scalar}) {
                            MemorySegment work = arena.allocate(src.byteSize(), 64);
                            work.copyFrom(src);
                            long bad = r.divideAndFindNonFinite(work, off, type, len, divisor);
                            assertEquals(expectedBad, bad, label + " reducer=" + r.name() + " first non-finite");
                            for (int i = 0; i < len; i++) {
                                double x = get(work.asSlice(off), type, i);
                                if (!(Double.isNaN(x) && Double.isNaN(expected[i]))) {
                                    assertEquals(Double.doubleToRawLongBits(expected[i]), Double.doubleToRawLongBits(x),
                                            label + " reducer=" + r.name() + " element " + i);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    @Test
    void inPlaceDestinationEqualsFirstSource() {
        Reducer vector = VectorReducer.createIfAvailable();
        try (Arena arena = Arena.ofConfined()) {
            int len = 1037;
            MemorySegment x = arena.allocate(len * 4L, 64);
            MemorySegment y = arena.allocate(len * 4L, 64);
            for (int i = 0; i < len; i++) {
                x.setAtIndex(ValueLayout.JAVA_FLOAT, i, i);
                y.setAtIndex(ValueLayout.JAVA_FLOAT, i, 2 * i);
            }
            vector.reduce(new MemorySegment[] {x, y}, new long[] {0, 0}, new DType[] {DType.FLOAT32, DType.FLOAT32}, 2,
                    x, 0, DType.FLOAT32, len, ReduceOp.SUM, 0, false);
            for (int i = 0; i < len; i++) {
                assertEquals(3f * i, x.getAtIndex(ValueLayout.JAVA_FLOAT, i), "element " + i);
            }
        }
    }

    @Test
    void bfloat16RoundsToNearestEven() {
        assertEquals((short) 0x3F80, BFloat16.fromFloat(1.0f));
        assertEquals((short) 0x3F80, BFloat16.fromFloat(Float.intBitsToFloat(0x3F808000)), "tie rounds to even (down)");
        assertEquals((short) 0x3F82, BFloat16.fromFloat(Float.intBitsToFloat(0x3F818000)), "tie rounds to even (up)");
        assertEquals((short) 0x3F81, BFloat16.fromFloat(Float.intBitsToFloat(0x3F808001)), "above tie rounds up");
        assertEquals((short) 0x7F80, BFloat16.fromFloat(Float.MAX_VALUE), "overflow rounds to +inf");
        assertEquals((short) 0xFF80, BFloat16.fromFloat(Float.NEGATIVE_INFINITY));
        assertTrue(Float.isNaN(BFloat16.toFloat(BFloat16.fromFloat(Float.NaN))));
        assertTrue(Float.isNaN(BFloat16.toFloat(BFloat16.fromFloat(Float.intBitsToFloat(0x7F800001)))), "signalling NaN stays NaN");
        assertEquals(-0.0f, BFloat16.toFloat(BFloat16.fromFloat(-0.0f)));
        assertEquals(Float.floatToRawIntBits(-0.0f), Float.floatToRawIntBits(BFloat16.toFloat(BFloat16.fromFloat(-0.0f))));
        for (int bits = 0; bits < 0x10000; bits += 7) {
            float f = BFloat16.toFloat((short) bits);
            if (!Float.isNaN(f)) {
                assertEquals((short) bits, BFloat16.fromFloat(f), "bf16 values round-trip exactly: 0x" + Integer.toHexString(bits));
            }
        }
    }

    private static double get(MemorySegment s, DType type, int i) {
        return switch (type) {
            case FLOAT32 -> s.get(ValueLayout.JAVA_FLOAT_UNALIGNED, i * 4L);
            case FLOAT64 -> s.get(ValueLayout.JAVA_DOUBLE_UNALIGNED, i * 8L);
            case BFLOAT16 -> BFloat16.toFloat(s.get(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2L));
        };
    }

    private static void fill(MemorySegment s, long off, DType type, int len, SplittableRandom rnd) {
        for (int i = 0; i < len; i++) {
            float f = rnd.nextInt(8) == 0 ? SPECIAL[rnd.nextInt(SPECIAL.length)] : (float) rnd.nextDouble(-4, 4);
            switch (type) {
                case FLOAT32 -> s.set(ValueLayout.JAVA_FLOAT_UNALIGNED, off + i * 4L, f);
                case BFLOAT16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, off + i * 2L, BFloat16.fromFloat(f));
                case FLOAT64 -> s.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, off + i * 8L,
                        rnd.nextInt(8) == 0 ? (double) f : rnd.nextDouble(-4, 4));
            }
        }
    }
}
