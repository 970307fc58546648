package org.symmem4j.parallel.numeric;

/** BFLOAT16 conversions: the top 16 bits of an IEEE float32. */
public final class BFloat16 {

    private BFloat16() {
    }

    /**
     * Exact widening.
     *
     * @param bits BFLOAT16 bits
     * @return the same value as a float
     */
    public static float toFloat(short bits) {
        return Float.intBitsToFloat(bits << 16);
    }

    /**
     * Rounds to nearest, ties to even; NaN stays NaN (quieted), overflow rounds to infinity.
     *
     * @param f the value
     * @return its BFLOAT16 bits
     */
    public static short fromFloat(float f) {
        int bits = Float.floatToRawIntBits(f);
        if (Float.isNaN(f)) {
            return (short) ((bits >>> 16) | 0x40);
        }
        return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
    }
}
