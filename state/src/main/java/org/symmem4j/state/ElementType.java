package org.symmem4j.state;

import java.util.Optional;

import org.symmem4j.parallel.DType;

/** Element types of a {@link DistributedTensor}. */
public enum ElementType {
    /** IEEE 754 binary32. */
    FLOAT32(4, DType.FLOAT32),
    /** IEEE 754 binary64. */
    FLOAT64(8, DType.FLOAT64),
    /** bfloat16: the high half of a binary32. */
    BFLOAT16(2, DType.BFLOAT16),
    /** 32-bit two's-complement integer. */
    INT32(4, null),
    /** 64-bit two's-complement integer. */
    INT64(8, null);

    private final int byteSize;
    private final DType dtype;

    ElementType(int byteSize, DType dtype) {
        this.byteSize = byteSize;
        this.dtype = dtype;
    }

    /** {@return bytes per element} */
    public int byteSize() {
        return byteSize;
    }

    /** {@return the runtime's collective type for this element type, where the collectives reduce it} */
    public Optional<DType> dtype() {
        return Optional.ofNullable(dtype);
    }
}
