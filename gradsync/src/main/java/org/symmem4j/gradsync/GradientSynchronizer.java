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
 * <p>Not thread-safe: one per rank, used by that rank's thread.
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
        if (offsetBytes < 0 || dtype.bytes(count) > gradients.byteSize() - offsetBytes) {
            throw new IllegalArgumentException("gradient of count=" + count + " x " + dtype + " at offsetBytes=" + offsetBytes
                    + " does not fit symmetric memory of " + gradients.byteSize() + " bytes");
        }
        this.comm = comm;
        this.gradients = gradients;
        this.offsetBytes = offsetBytes;
        this.count = count;
        this.dtype = dtype;
        this.buckets = GradientBuckets.split(count, dtype, bucketBytes);
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
            GradientBuckets.Bucket b = buckets.get(i);
            long start = System.nanoTime();
            comm.allReduce(gradients, offsetBytes + b.offsetBytes(), b.count(), dtype, op, algorithms[i]);
            metrics.recordAllReduce(algorithms[i], b.bytes(), System.nanoTime() - start);
        }
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
