package org.symmem4j.dl4j.nd4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.shape.Shape;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * Collectives of ND4J host arrays over a communicator, as the plugin's trainers use them: in-place
 * sums (the pipeline's data-parallel replicas, the tensor-parallel layers), the sum of a number, and
 * the all-gather of arrays. Sums add the ranks in rank order ({@link Algorithm#ONE_SHOT} and
 * {@link Algorithm#TWO_SHOT} both do), so every rank gets the same bits. FLOAT and DOUBLE arrays.
 *
 * <p>Used by one thread at a time; every rank calls the same methods in the same order. The
 * communicator stays its owner's to close.
 */
public final class ArrayCollectives {

    /** Below this many elements one-shot is faster than two-shot (each rank reads every peer once). */
    private static final long ONE_SHOT_MAX_ELEMENTS = 16_384;

    private final Communicator communicator;
    // the scratch of numbers and gathers: freed by the collector with this object, never shared across calls in flight
    private final Arena arena = Arena.ofAuto();
    private MemorySegment scratch = MemorySegment.NULL;
    private long sums;

    /**
     * Collectives over {@code communicator}'s group.
     *
     * @param communicator a host communicator; not closed by this class
     */
    public ArrayCollectives(Communicator communicator) {
        this.communicator = communicator;
    }

    /**
     * This rank in the group.
     *
     * @return 0 .. size()-1
     */
    public int rank() {
        return communicator.group().rank();
    }

    /** {@return the communicator these collectives run over (not closed by this class)} */
    public Communicator communicator() {
        return communicator;
    }

    /** {@return the group these collectives run over (for set-up exchanges among its ranks)} */
    public org.symmem4j.parallel.Group group() {
        return communicator.group();
    }

    /**
     * The group's size.
     *
     * @return the number of ranks
     */
    public int size() {
        return communicator.group().worldSize();
    }

    /**
     * The in-place sums done so far ({@link #sumInPlace}), for tests and counters.
     *
     * @return the number of sums of arrays
     */
    public long sums() {
        return sums;
    }

    /**
     * Replaces {@code array} by its sum over the ranks, in place (through a row-major copy when it is
     * not contiguous).
     *
     * @param array FLOAT or DOUBLE, the same shape on every rank
     * @throws IllegalArgumentException for another data type
     */
    public void sumInPlace(INDArray array) {
        reduceInPlace(array, ReduceOp.SUM);
        sums++;
    }

    /**
     * Replaces {@code array} by its element-wise maximum over the ranks, in place (not counted in {@link #sums}).
     *
     * @param array FLOAT or DOUBLE, the same shape on every rank
     * @throws IllegalArgumentException for another data type
     */
    public void maxInPlace(INDArray array) {
        reduceInPlace(array, ReduceOp.MAX);
    }

    private void reduceInPlace(INDArray array, ReduceOp op) {
        DType dtype = dtypeOf(array.dataType());
        boolean contiguous = array.ordering() == 'c' && Shape.hasDefaultStridesForShape(array);
        INDArray buffer = contiguous ? array : array.dup('c');
        long n = buffer.length();
        communicator.allReduce(segmentOf(buffer), n, dtype, op,
                n <= ONE_SHOT_MAX_ELEMENTS ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT);
        if (!contiguous) {
            array.assign(buffer);
        }
    }

    /**
     * The sum of {@code x} over the ranks, added in rank order.
     *
     * @param x this rank's number
     * @return the sum, the same bits on every rank
     */
    public double sum(double x) {
        MemorySegment one = scratch(Double.BYTES);
        one.set(ValueLayout.JAVA_DOUBLE, 0, x);
        communicator.allReduce(one, 1, DType.FLOAT64, ReduceOp.SUM, Algorithm.ONE_SHOT);
        return one.get(ValueLayout.JAVA_DOUBLE, 0);
    }

    /**
     * Every rank's arrays, in rank order: result {@code [r][i]} is rank {@code r}'s {@code mine[i]}, as
     * a new row-major array.
     *
     * @param mine this rank's arrays: the same shapes and one type (FLOAT or DOUBLE) on every rank
     * @return every rank's arrays
     * @throws IllegalArgumentException for another data type
     */
    public INDArray[][] allGather(INDArray[] mine) {
        DataType type = mine[0].dataType();
        int ranks = size();
        long width = type.width();
        long count = 0;
        for (INDArray a : mine) {
            count += a.length();
        }
        MemorySegment send = scratch(width * count * (ranks + 1L));
        MemorySegment recv = send.asSlice(width * count, width * count * ranks);
        long offset = 0;
        for (INDArray a : mine) {
            INDArray contiguous = a.dup('c');
            MemorySegment.copy(segmentOf(contiguous), 0, send, offset, width * a.length());
            offset += width * a.length();
        }
        communicator.allGather(send.asSlice(0, width * count), recv, count, dtypeOf(type));
        INDArray[][] out = new INDArray[ranks][mine.length];
        for (int r = 0; r < ranks; r++) {
            long at = r * width * count;
            for (int i = 0; i < mine.length; i++) {
                INDArray a = Nd4j.createUninitialized(type, mine[i].shape(), 'c');
                MemorySegment.copy(recv, at, segmentOf(a), 0, width * a.length());
                at += width * a.length();
                out[r][i] = a;
            }
        }
        return out;
    }

    /**
     * The off-heap memory of a contiguous array (its elements in storage order), as a segment. The
     * segment does not keep the array alive: the caller must.
     *
     * @param contiguous an array whose elements are contiguous in its buffer
     * @return the array's elements as a native segment
     */
    public static MemorySegment segmentOf(INDArray contiguous) {
        long elementBytes = contiguous.dataType().width();
        long address = contiguous.data().address() + contiguous.offset() * elementBytes;
        return MemorySegment.ofAddress(address).reinterpret(contiguous.length() * elementBytes);
    }

    private static DType dtypeOf(DataType type) {
        return switch (type) {
            case FLOAT -> DType.FLOAT32;
            case DOUBLE -> DType.FLOAT64;
            default -> throw new IllegalArgumentException("an ND4J array of type " + type + ": the group's sums and"
                    + " gathers take FLOAT or DOUBLE (fix: build the network with .dataType(DataType.FLOAT) or DOUBLE)");
        };
    }

    private MemorySegment scratch(long bytes) {
        if (scratch.byteSize() < bytes) {
            scratch = arena.allocate(Math.max(bytes, 2 * scratch.byteSize()), 64);
        }
        return scratch.asSlice(0, bytes);
    }
}
