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
     * @param gradients   symmetric memory holding the gradient (for example a registered DL4J gradient view)
     * @param offsetBytes where element 0 lies in it
     * @param count       elements in the gradient
     */
    public GradientSynchronizer(Communicator comm, SymmetricMemory gradients, long offsetBytes, long count, DType dtype,
                                long bucketBytes, AlgorithmPolicy policy, SyncMetrics metrics) {
        this(comm, gradients, offsetBytes, dtype, GradientBuckets.split(count, dtype, bucketBytes), policy, metrics);
    }

    /**
     * With buckets cut by the caller (for example {@link GradientBuckets#splitAtBoundaries}); they
     * must tile {@code [0, count)} in order, in {@code dtype}.
     */
    public GradientSynchronizer(Communicator comm, SymmetricMemory gradients, long offsetBytes, DType dtype,
                                List<GradientBuckets.Bucket> buckets, AlgorithmPolicy policy, SyncMetrics metrics) {
        long next = 0;
        for (GradientBuckets.Bucket b : buckets) {
            if (b.firstElement() != next || b.count() < 1 || b.dtype() != dtype) {
                throw new IllegalArgumentException("buckets must tile the gradient in order: expected a bucket of " + dtype
                        + " starting at element " + next + ", found " + b);
            }
            next += b.count();
        }
        long count = next;
        if (offsetBytes < 0 || dtype.bytes(count) > gradients.byteSize() - offsetBytes) {
            throw new IllegalArgumentException("gradient of count=" + count + " x " + dtype + " at offsetBytes=" + offsetBytes
                    + " does not fit symmetric memory of " + gradients.byteSize() + " bytes");
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

    /** All-reduces every bucket with {@code op} (AVG for plain averaging, SUM for pre-weighted gradients). */
    public void allReduce(ReduceOp op) {
        for (int i = 0; i < algorithms.length; i++) {
            allReduceBucket(i, op);
        }
    }

    /** All-reduces bucket {@code i} alone; every rank must reduce the same buckets in the same order. */
    public void allReduceBucket(int i, ReduceOp op) {
        GradientBuckets.Bucket b = buckets.get(i);
        long start = System.nanoTime();
        comm.allReduce(gradients, offsetBytes + b.offsetBytes(), b.count(), dtype, op, algorithms[i]);
        metrics.recordAllReduce(algorithms[i], b.bytes(), System.nanoTime() - start);
    }

    public List<GradientBuckets.Bucket> buckets() {
        return buckets;
    }

    /** The algorithm each bucket uses, in bucket order. */
    public List<Algorithm> algorithms() {
        return List.of(algorithms);
    }

    public long count() {
        return count;
    }

    public DType dtype() {
        return dtype;
    }
}
