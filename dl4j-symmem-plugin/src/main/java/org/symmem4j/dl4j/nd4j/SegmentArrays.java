package org.symmem4j.dl4j.nd4j;

import java.lang.foreign.MemorySegment;

import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * ND4J arrays over memory that symmem4j owns (symmetric memory, a parameter-cache entry): the array wraps the
 * segment's address without copying and without owning it (its buffer is externalized: ND4J never frees that
 * memory). The plugin's gradient views, fully sharded parameters and the serving module's shared weights are all
 * put over symmetric memory this way.
 */
public final class SegmentArrays {

    private SegmentArrays() {
    }

    /**
     * A row vector of {@code length} elements of {@code type} over {@code home}, no copy.
     *
     * @param home   the memory, at least {@code length * type.width()} bytes; it must outlive the array
     * @param type   the element type
     * @param length the element count
     * @return a {@code [1, length]} array whose buffer is {@code home}
     * @throws IllegalArgumentException when {@code home} is too small
     */
    public static INDArray over(MemorySegment home, DataType type, long length) {
        long bytes = length * type.width();
        if (home.byteSize() < bytes) {
            throw new IllegalArgumentException("array home of bytes=" + home.byteSize() + " expected at least " + bytes
                    + " (" + length + " x " + type + "); fix: pass a home of at least " + bytes + " bytes, or a"
                    + " smaller length");
        }
        org.bytedeco.javacpp.Pointer pointer = new org.bytedeco.javacpp.Pointer() {
            {
                address = home.address();
                limit = bytes;
                capacity = bytes;
            }
        };
        return Nd4j.create(Nd4j.createBuffer(pointer, length, type), new long[] {1, length});
    }
}
