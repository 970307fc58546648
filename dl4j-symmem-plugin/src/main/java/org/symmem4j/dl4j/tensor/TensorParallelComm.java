package org.symmem4j.dl4j.tensor;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicLong;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.shape.Shape;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * The tensor-parallel group's communicator as the layers use it: in-place sums of DL4J arrays in
 * host memory. Sums add the ranks in rank order (ONE_SHOT and TWO_SHOT both do), so every rank gets
 * the same bits and the replicated parts of the model (the row-parallel layer's output and bias, every
 * layer outside the tensor-parallel blocks) stay bitwise equal across ranks.
 */
final class TensorParallelComm {

    /** Below this many elements one-shot is faster than two-shot (each rank reads every peer once). */
    private static final long ONE_SHOT_MAX_ELEMENTS = 16_384;

    private final Communicator communicator;
    private final AtomicLong allReduces = new AtomicLong();

    TensorParallelComm(Communicator communicator) {
        this.communicator = communicator;
    }

    int rank() {
        return communicator.group().rank();
    }

    int size() {
        return communicator.group().worldSize();
    }

    Communicator communicator() {
        return communicator;
    }

    /** All-reduces (sums) done so far: the layers' communication count, for tests and metrics. */
    long allReduces() {
        return allReduces.get();
    }

    /** Replaces {@code array} (FLOAT or DOUBLE) by its sum over the group's ranks, in place. */
    void sumInPlace(INDArray array) {
        DType dtype = dtypeOf(array);
        boolean contiguous = array.ordering() == 'c' && Shape.hasDefaultStridesForShape(array);
        INDArray buffer = contiguous ? array : array.dup('c');
        long count = buffer.length();
        communicator.allReduce(segmentOf(buffer), count, dtype, ReduceOp.SUM,
                count <= ONE_SHOT_MAX_ELEMENTS ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT);
        allReduces.incrementAndGet();
        if (!contiguous) {
            array.assign(buffer);
        }
    }

    /** Every rank's {@code array} (same shape and type on every rank), in rank order, as row-major copies. */
    INDArray[] allGather(INDArray array) {
        DType dtype = dtypeOf(array);
        INDArray send = array.dup('c');
        long[] shape = array.shape();
        long[] allShape = new long[shape.length + 1];
        allShape[0] = size();
        System.arraycopy(shape, 0, allShape, 1, shape.length);
        INDArray recv = org.nd4j.linalg.factory.Nd4j.createUninitialized(array.dataType(), allShape, 'c');
        communicator.allGather(segmentOf(send), segmentOf(recv), send.length(), dtype);
        INDArray[] out = new INDArray[size()];
        for (int r = 0; r < out.length; r++) {
            out[r] = recv.get(org.nd4j.linalg.indexing.NDArrayIndex.point(r)).reshape('c', shape).dup('c');
        }
        return out;
    }

    private static DType dtypeOf(INDArray array) {
        return switch (array.dataType()) {
            case FLOAT -> DType.FLOAT32;
            case DOUBLE -> DType.FLOAT64;
            default -> throw new IllegalArgumentException("tensor-parallel layers exchange FLOAT or DOUBLE arrays, got "
                    + array.dataType() + " (build the network with .dataType(DataType.FLOAT) or DOUBLE)");
        };
    }

    private static MemorySegment segmentOf(INDArray contiguous) {
        long w = width(contiguous.dataType());
        return MemorySegment.ofAddress(contiguous.data().address() + contiguous.offset() * w).reinterpret(contiguous.length() * w);
    }

    private static long width(DataType type) {
        return type.width();
    }
}
