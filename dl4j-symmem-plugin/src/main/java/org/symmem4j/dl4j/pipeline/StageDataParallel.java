package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * What a pipeline stage shares with the same stage of the other data-parallel replicas, over their
 * {@code dp} sub-group: the step's gradient sum, the last stage's loss sum, and batch normalization's
 * per-microbatch statistics. Replica {@code d}'s microbatch {@code k} is piece {@code k * dp + d} of
 * the global batch cut into {@code microbatches x dp} pieces ({@link PipelineParallelTrainer}), so
 * after these exchanges every replica does exactly what one pipeline with {@code microbatches x dp}
 * microbatches does with that batch: the gradient sums add up to the same sum (in another order),
 * and the running statistics are updated by every piece in piece order, on every replica, with the
 * same operations (so the replicas stay bitwise identical).
 *
 * <p>All-reduces add the replicas in rank order ({@link Algorithm#ONE_SHOT} and
 * {@link Algorithm#TWO_SHOT} both do), so every replica gets the same bits. One per pipeline rank,
 * used by its thread only; every replica's stage calls the same methods in the same order (the
 * replicas run the same schedule).
 */
final class StageDataParallel implements AutoCloseable {

    /** Below this many elements one-shot is faster than two-shot (each rank reads every peer once). */
    private static final long ONE_SHOT_MAX_ELEMENTS = 16_384;

    private final Communicator dp;
    private final int replica;
    private final int replicas;
    private final Arena arena = Arena.ofConfined();
    private MemorySegment scratch = MemorySegment.NULL;

    /**
     * @param dp this pipeline rank's communicator over its stage's replicas, rank = replica index
     */
    StageDataParallel(Communicator dp) {
        this.dp = dp;
        this.replica = dp.group().rank();
        this.replicas = dp.group().worldSize();
    }

    /** This replica's index, 0..replicas()-1. */
    int replica() {
        return replica;
    }

    /** The number of replicas of every stage. */
    int replicas() {
        return replicas;
    }

    /** Replaces {@code sum} (contiguous, FLOAT or DOUBLE) by its sum over the replicas, in place. */
    void sumInPlace(INDArray sum) {
        DType dtype = dtypeOf(sum.dataType());
        long n = sum.length();
        dp.allReduce(Messages.segmentOf(sum), n, dtype, ReduceOp.SUM,
                n <= ONE_SHOT_MAX_ELEMENTS ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT);
    }

    /** The sum of {@code x} over the replicas, added in replica order. */
    double sum(double x) {
        MemorySegment one = scratch(2 * Double.BYTES).asSlice(0, Double.BYTES);
        one.set(ValueLayout.JAVA_DOUBLE, 0, x);
        dp.allReduce(one, 1, DType.FLOAT64, ReduceOp.SUM, Algorithm.ONE_SHOT);
        return one.get(ValueLayout.JAVA_DOUBLE, 0);
    }

    /**
     * Every replica's arrays, in replica order: {@code mine} (equal shapes and types on every replica,
     * FLOAT or DOUBLE) gathered over the replicas; result {@code [d][i]} is replica {@code d}'s
     * {@code mine[i]}.
     */
    INDArray[][] allGather(INDArray[] mine) {
        DataType type = mine[0].dataType();
        long width = type.width();
        long count = 0;
        for (INDArray a : mine) {
            count += a.length();
        }
        MemorySegment send = scratch(width * count * (replicas + 1L));
        MemorySegment recv = send.asSlice(width * count, width * count * replicas);
        long offset = 0;
        for (INDArray a : mine) {
            INDArray contiguous = a.dup('c');
            MemorySegment.copy(Messages.segmentOf(contiguous), 0, send, offset, width * a.length());
            offset += width * a.length();
        }
        dp.allGather(send.asSlice(0, width * count), recv, count, dtypeOf(type));
        INDArray[][] out = new INDArray[replicas][mine.length];
        for (int d = 0; d < replicas; d++) {
            long at = d * width * count;
            for (int i = 0; i < mine.length; i++) {
                INDArray a = Nd4j.createUninitialized(type, mine[i].shape(), 'c');
                MemorySegment.copy(recv, at, Messages.segmentOf(a), 0, width * a.length());
                at += width * a.length();
                out[d][i] = a;
            }
        }
        return out;
    }

    private MemorySegment scratch(long bytes) {
        if (scratch.byteSize() < bytes) {
            scratch = arena.allocate(Math.max(bytes, 2 * scratch.byteSize()), 64);
        }
        return scratch.asSlice(0, bytes);
    }

    private static DType dtypeOf(DataType type) {
        return switch (type) {
            case FLOAT -> DType.FLOAT32;
            case DOUBLE -> DType.FLOAT64;
            default -> throw new IllegalArgumentException("data-parallel pipeline stages reduce FLOAT or DOUBLE; found "
                    + type + " (the pipeline supports FLOAT and DOUBLE networks)");
        };
    }

    /** Closes the communicator over the replicas and the scratch. */
    @Override
    public void close() {
        try {
            dp.close();
        } finally {
            arena.close();
        }
    }
}
