package org.symmem4j.gradsync;

import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * One rank's gradient sync: all-reduces a flat gradient that lives in symmetric memory, bucket by
 * bucket, each bucket with the algorithm the policy picks for its size, in place. Records every
 * bucket's latency and size in {@link SyncMetrics}.
 *
 * <p>Not thread-safe: one per rank, used by one thread of that rank at a time (the worker, or the
 * communication thread that overlaps sync with backprop).
 */
public final class GradientSynchronizer {

    private final Communicator comm;
    private final SymmetricMemory gradients;
    private final long offsetBytes;
    private final List<GradientBuckets.Bucket> buckets;
    private final Algorithm[] algorithms;
    private final SyncMetrics metrics;
    private final DType dtype;
    private final long count;

    /**
     * A synchronizer over buckets of at most {@code bucketBytes}, each with the algorithm the policy
     * picks for its size (chosen once, here; every rank computes the same choices).
     *
     * @param comm        this rank's communicator
     * @param gradients   symmetric memory holding the gradient (for example a registered DL4J gradient view)
     * @param offsetBytes where element 0 lies in it
     * @param count       elements in the gradient
     * @param dtype       element type
     * @param bucketBytes the largest bucket in bytes, at least 64
     * @param policy      picks each bucket's algorithm
     * @param metrics     records each bucket's all-reduce
     * @throws IllegalArgumentException when the gradient does not fit {@code gradients} or {@code bucketBytes} is below 64
     */
    public GradientSynchronizer(Communicator comm, SymmetricMemory gradients, long offsetBytes, long count, DType dtype,
                                long bucketBytes, AlgorithmPolicy policy, SyncMetrics metrics) {
        this(comm, gradients, offsetBytes, dtype, GradientBuckets.split(count, dtype, bucketBytes), policy, metrics);
    }

    /**
     * With buckets cut by the caller (for example {@link GradientBuckets#splitAtBoundaries}); they
     * must tile {@code [0, count)} in order, in {@code dtype}.
     *
     * @param comm        this rank's communicator
     * @param gradients   symmetric memory holding the gradient
     * @param offsetBytes where element 0 lies in it
     * @param dtype       element type
     * @param buckets     the buckets, in element order
     * @param policy      picks each bucket's algorithm
     * @param metrics     records each bucket's all-reduce
     * @throws IllegalArgumentException when the buckets do not tile the gradient or it does not fit {@code gradients}
     */
    public GradientSynchronizer(Communicator comm, SymmetricMemory gradients, long offsetBytes, DType dtype,
                                List<GradientBuckets.Bucket> buckets, AlgorithmPolicy policy, SyncMetrics metrics) {
        long next = 0;
        for (GradientBuckets.Bucket b : buckets) {
            if (b.firstElement() != next || b.count() < 1 || b.dtype() != dtype) {
                throw new IllegalArgumentException("buckets must tile the gradient in order: expected a bucket of " + dtype
                        + " starting at element " + next + ", found " + b + " (fix: build the buckets with"
                        + " GradientBuckets.split or splitAtBoundaries for this dtype, and pass them in order)");
            }
            next += b.count();
        }
        long count = next;
        if (offsetBytes < 0 || dtype.bytes(count) > gradients.byteSize() - offsetBytes) {
            throw new IllegalArgumentException("gradient of count=" + count + " x " + dtype + " at offsetBytes=" + offsetBytes
                    + " does not fit symmetric memory of " + gradients.byteSize() + " bytes (expected offsetBytes >= 0"
                    + " and offsetBytes + " + dtype.bytes(count) + " <= " + gradients.byteSize() + "; fix: allocate"
                    + " symmetric memory of at least offsetBytes + " + dtype.bytes(count) + " bytes, or pass buckets"
                    + " covering only the gradient's elements)");
        }
        this.comm = comm;
        this.gradients = gradients;
        this.offsetBytes = offsetBytes;
        this.count = count;
        this.dtype = dtype;
        this.buckets = List.copyOf(buckets);
        this.metrics = metrics;
        // Chosen once: every rank computes the same choices from the same sizes and table.
        this.algorithms = new Algorithm[buckets.size()];
        for (int i = 0; i < algorithms.length; i++) {
            algorithms[i] = policy.choose(comm, buckets.get(i).count(), dtype, ReduceOp.SUM);
        }
    }

    /**
     * Collective: all-reduces every bucket with {@code op} (AVG for plain averaging, SUM for
     * pre-weighted gradients), in bucket order.
     *
     * @param op the reduction
     * @throws org.symmem4j.parallel.SymmemException when a peer does not arrive or passes other arguments
     *         (see {@link Communicator#allReduce})
     */
    public void allReduce(ReduceOp op) {
        for (int i = 0; i < algorithms.length; i++) {
            allReduceBucket(i, op);
        }
    }

    /**
     * Collective: all-reduces bucket {@code i} alone; every rank must reduce the same buckets in the
     * same order. Its time goes to the metrics' {@code symmem.allreduce.duration}.
     *
     * @param i  the bucket's index in {@link #buckets()}
     * @param op the reduction
     * @throws IndexOutOfBoundsException when there is no bucket {@code i}
     * @throws org.symmem4j.parallel.SymmemException when a peer does not arrive or passes other arguments
     */
    public void allReduceBucket(int i, ReduceOp op) {
        GradientBuckets.Bucket b = buckets.get(i);
        long start = System.nanoTime();
        comm.allReduce(gradients, offsetBytes + b.offsetBytes(), b.count(), dtype, op, algorithms[i]);
        metrics.recordAllReduce(algorithms[i], b.bytes(), System.nanoTime() - start);
    }

    /**
     * The buckets, in element order.
     *
     * @return the buckets, unmodifiable
     */
    public List<GradientBuckets.Bucket> buckets() {
        return buckets;
    }

    /**
     * The algorithm each bucket uses, in bucket order.
     *
     * @return one algorithm per bucket, unmodifiable
     */
    public List<Algorithm> algorithms() {
        return List.of(algorithms);
    }

    /**
     * The gradient's size.
     *
     * @return elements in the gradient
     */
    public long count() {
        return count;
    }

    /**
     * The gradient's element type.
     *
     * @return the element type
     */
    public DType dtype() {
        return dtype;
    }
}
