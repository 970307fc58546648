package org.symmem4j.parallel;

/** Element types collectives reduce. BFLOAT16 accumulates in FLOAT32 and rounds once, to nearest even. */
public enum DType {
    FLOAT32(4),
    FLOAT64(8),
    BFLOAT16(2);

    private final int byteSize;

    DType(int byteSize) {
        this.byteSize = byteSize;
    }

    public int byteSize() {
        return byteSize;
    }

    /** Bytes of {@code count} elements; throws on overflow or a negative count. */
    public long bytes(long count) {
        if (count < 0) {
            throw new IllegalArgumentException("count=" + count + " must be >= 0");
        }
        return Math.multiplyExact(count, (long) byteSize);
    }
}
