package org.symmem4j.parallel;

/** Element types collectives reduce. BFLOAT16 accumulates in FLOAT32 and rounds once, to nearest even. */
public enum DType {
    /** IEEE 754 binary32, 4 bytes. */
    FLOAT32(4),
    /** IEEE 754 binary64, 8 bytes. */
    FLOAT64(8),
    /** bfloat16 (the upper half of a binary32), 2 bytes; reduced in FLOAT32. */
    BFLOAT16(2);

    private final int byteSize;

    DType(int byteSize) {
        this.byteSize = byteSize;
    }

    /**
     * The size of one element.
     *
     * @return bytes per element: 4, 8 or 2
     */
    public int byteSize() {
        return byteSize;
    }

    /**
     * Bytes of {@code count} elements.
     *
     * @param count number of elements
     * @return {@code count * byteSize()}
     * @throws IllegalArgumentException when {@code count} is negative
     * @throws ArithmeticException      when the product overflows a {@code long}
     */
    public long bytes(long count) {
        if (count < 0) {
            throw new IllegalArgumentException("count=" + count + " must be >= 0 (an element count; fix: pass the"
                    + " number of elements, 0 or more)");
        }
        return Math.multiplyExact(count, (long) byteSize);
    }
}
