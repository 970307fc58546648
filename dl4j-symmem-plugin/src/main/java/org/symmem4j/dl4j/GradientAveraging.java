package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;
import org.symmem4j.gradsync.GradientBuckets;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * One worker's gradient averaging for plain data parallelism, bucket by bucket. For each bucket:
 * this worker's contribution is completed (the earlier micro-batches' sum added, with gradient
 * accumulation) and checked for NaN/infinity, or zeroed when the worker has no batch this step;
 * summed over the workers by an all-reduce; then divided by the step's examples and checked again
 * in one pass ({@link Reducer#divideAndFindNonFinite}). With bf16 transfer the bucket is rounded to
 * bf16 into a symmetric buffer of its own, all-reduced there (fp32 accumulation, rounded once), and
 * widened back while divided.
 *
 * <p>Buckets run from the end of the gradient to its start, the order backprop writes them.
 * Without overlap the worker runs them all in the gradient hook, after the whole backward pass.
 * With overlap a communication thread runs each bucket as soon as every layer it covers has
 * written its gradient ({@link BackpropProgress}), while the worker's backprop goes on with the
 * layers below; the hook then only waits for the rest. Either way every element goes through the
 * same operations in the same order, so the results are bitwise equal (tested), and every worker
 * runs the same buckets in the same order, so the collectives match.
 *
 * <p>Threads: {@link #beginStep}, {@link #layerWritten}, {@link #finishStep} and
 * {@link #abandonStep} are called by the worker's thread; buckets run on exactly one thread per
 * step (the worker's, or the communication thread's), so the communicator is never used by two
 * threads at once: the worker uses it again only after {@link #finishStep} returned.
 */
final class GradientAveraging implements AutoCloseable {

    /**
     * The step's verdicts: the first non-finite element of this worker's own contribution and of
     * the averaged gradient (the same on every worker), or -1.
     */
    record Outcome(long localBad, long reducedBad) {
    }

    /**
     * Room for entries of the gradient view that need their own treatment (state updates such as
     * BatchNorm's running statistics, which are not sums over examples): called for every bucket
     * on the thread that syncs it — the communication thread with overlap.
     */
    interface BucketHook {
        BucketHook NONE = new BucketHook() {
        };

        /**
         * With overlap: whether the bucket must wait for the whole backward pass rather than for
         * its own layers (its {@link #beforeReduce} reads gradient entries outside the bucket).
         */
        default boolean waitsForWholeBackprop(long firstElement, long count) {
            return false;
        }

        /** Before the bucket's all-reduce: this worker's own values are still in it. */
        default void beforeReduce(long firstElement, long count) {
        }

        /** Whether this step wants {@link #afterSum} (it costs a separate division pass with bf16 transfer). */
        default boolean wantsUndividedSum() {
            return false;
        }

        /** After the bucket was summed over the workers, before the division; only if {@link #wantsUndividedSum}. */
        default void afterSum(long firstElement, long count) {
        }

        /**
         * After the bucket was summed, divided and checked; returns the first non-finite element
         * it wrote (an index into the whole gradient), or -1.
         */
        default long afterReduce(long firstElement, long count) {
            return -1;
        }
    }

    /** The bf16 transfer: a symmetric buffer of {@code count} bf16 elements and its bucketed all-reduce. */
    record Bf16Transfer(MemorySegment local, GradientSynchronizer synchronizer) {
    }

    private final MemorySegment gradient;
    private final DType dtype;
    private final long dsize;
    private final List<GradientBuckets.Bucket> buckets;
    private final GradientSynchronizer synchronizer;
    private final Bf16Transfer transfer;
    private final BucketHook hook;
    private final Reducer reducer = Reducer.forThisJvm();
    private final Duration timeout;

    /**
     * With a timeline: per bucket, {@link System#nanoTime()} when this step's sync of it started and
     * ended (check, all-reduce, division), written by the thread that runs the bucket — the worker,
     * or the comm thread — and read by the wrapper's thread after the step. Publication: the comm
     * thread's writes precede its volatile write of {@link #completed}, which the worker reads
     * (acquire) before it completes the step's result future; completing the future happens-before
     * the wrapper's {@code get()} returns; the next writes come only after the worker takes the next
     * task from its queue, which the wrapper puts there after reading. Null without a timeline.
     */
    private final long[] bucketStartNanos;
    private final long[] bucketEndNanos;

    // Operand arrays of the reductions, reused (one thread runs buckets at a time).
    private final MemorySegment[] srcs = new MemorySegment[2];
    private final long[] srcOffsets = new long[2];
    private final DType[] srcTypes = new DType[2];

    // Overlap only (null / empty without): which layers each bucket waits for.
    private final Thread commThread;
    private final Map<String, Integer> layerSlots = new HashMap<>();
    private final int[][] bucketLayers;
    /** Per layer slot, the epoch of the last step in which backprop wrote it (release by the worker, acquire by the comm thread). */
    private final AtomicLongArray layerWrittenEpoch;

    // The step, written by the worker before it publishes the epoch (armed), read by the thread running buckets.
    private boolean idle;
    private long stepExamples;
    private MemorySegment accumulated;
    // Results, written by the thread running buckets, read by the worker after `completed` (or inline).
    private long localBad;
    private long reducedBad;
    private Throwable failure;

    /** Published by the worker: the step the comm thread may start (its fields above are set). */
    private volatile long armed;
    /** Published by the worker in the hook: every layer of the step has written its gradient. */
    private volatile long allWritten;
    /** Published by the worker when a step failed before the hook: stop waiting for layers. */
    private volatile long abandoned;
    /** Published by the comm thread: every bucket of this step is done (or failed); results are set. */
    private volatile long completed;
    private volatile boolean closed;

    // Worker-thread state.
    private Thread worker;
    private long epoch;
    private boolean stepOpen;

    /**
     * @param layers  the replica's layer slices; with {@code overlap}, each bucket waits for the
     *                layers it overlaps (a bucket no slice covers waits for the whole backward pass)
     * @param overlap run buckets on a communication thread while backprop goes on
     * @param recordBucketTimes stamp each bucket's start and end every step (for a timeline)
     */
    GradientAveraging(int rank, MemorySegment gradient, DType dtype, GradientSynchronizer synchronizer, Bf16Transfer transfer,
                      List<ModelReplica.LayerSlice> layers, boolean overlap, BucketHook hook, Duration timeout,
                      boolean recordBucketTimes) {
        if (transfer != null && dtype != DType.FLOAT32) {
            throw new IllegalArgumentException("gradientTransfer=BFLOAT16 expected a FLOAT network, found dtype=" + dtype
                    + " (fix: train in FLOAT, or transfer gradients in the network's own type)");
        }
        this.gradient = gradient;
        this.dtype = dtype;
        this.dsize = dtype.byteSize();
        this.synchronizer = synchronizer;
        this.buckets = synchronizer.buckets();
        this.transfer = transfer;
        this.hook = hook;
        this.timeout = timeout;
        this.bucketStartNanos = recordBucketTimes ? new long[buckets.size()] : null;
        this.bucketEndNanos = recordBucketTimes ? new long[buckets.size()] : null;
        if (!overlap) {
            this.commThread = null;
            this.bucketLayers = new int[0][];
            this.layerWrittenEpoch = new AtomicLongArray(0);
            return;
        }
        for (ModelReplica.LayerSlice s : layers) {
            layerSlots.put(s.key(), layerSlots.size());
        }
        this.layerWrittenEpoch = new AtomicLongArray(layers.size());
        this.bucketLayers = new int[buckets.size()][];
        for (int i = 0; i < buckets.size(); i++) {
            GradientBuckets.Bucket b = buckets.get(i);
            long lo = b.firstElement();
            long hi = lo + b.count();
            List<Integer> covered = new ArrayList<>();
            long coveredElements = 0;
            for (ModelReplica.LayerSlice s : layers) {
                long from = Math.max(lo, s.start());
                long to = Math.min(hi, s.end());
                if (from < to) {
                    covered.add(layerSlots.get(s.key()));
                    coveredElements += to - from;
                }
            }
            // elements no layer reports on, or a hook that reads beyond the bucket: wait for the
            // whole backward pass (marked by -1)
            if (coveredElements < b.count() || hook.waitsForWholeBackprop(lo, b.count())) {
                covered.add(-1);
            }
            bucketLayers[i] = covered.stream().mapToInt(Integer::intValue).toArray();
        }
        this.commThread = Thread.ofPlatform().daemon().name("symmem4j-sync-" + rank).unstarted(this::runCommThread);
        commThread.start();
    }

    /** Whether buckets run on a communication thread while backprop goes on. */
    boolean overlaps() {
        return commThread != null;
    }

    /** The buckets, in gradient order (they run from the last to the first). */
    List<GradientBuckets.Bucket> buckets() {
        return buckets;
    }

    /** Per bucket, when the last finished step's sync of it started (see the field for publication); null without a timeline. */
    long[] bucketStartNanos() {
        return bucketStartNanos;
    }

    /** Per bucket, when the last finished step's sync of it ended; null without a timeline. */
    long[] bucketEndNanos() {
        return bucketEndNanos;
    }

    /**
     * Worker thread, right before the forward and backward pass whose gradient this step averages.
     *
     * @param accumulated the earlier micro-batches' summed gradient, added to this pass's; null for none
     */
    void beginStep(boolean idleWorker, long examples, MemorySegment accumulated) {
        if (stepOpen) {
            throw Invariants.violated("beginStep twice without finishStep or abandonStep");
        }
        this.worker = Thread.currentThread();
        this.idle = idleWorker;
        this.stepExamples = examples;
        this.accumulated = accumulated;
        this.localBad = -1;
        this.reducedBad = -1;
        this.failure = null;
        epoch++;
        stepOpen = true;
        if (commThread != null) {
            armed = epoch; // volatile write: publishes the step's fields above to the comm thread
            LockSupport.unpark(commThread);
        }
    }

    /** Worker thread, from backprop: the layer {@code key} has written its gradient. */
    void layerWritten(String key) {
        if (commThread == null || !stepOpen) {
            return; // no overlap, or a pass outside a step (an earlier micro-batch)
        }
        Integer slot = layerSlots.get(key);
        if (slot != null) {
            // release: publishes the layer's gradient writes to the comm thread, which reads it with acquire
            layerWrittenEpoch.setRelease(slot, epoch);
            LockSupport.unpark(commThread);
        }
    }

    /** Worker thread, in the gradient hook: every bucket done when this returns; rethrows a bucket's failure. */
    Outcome finishStep() {
        if (!stepOpen) {
            throw Invariants.violated("finishStep without beginStep");
        }
        stepOpen = false;
        if (commThread == null) {
            for (int i = buckets.size() - 1; i >= 0; i--) {
                runBucket(i);
            }
            return new Outcome(localBad, reducedBad);
        }
        allWritten = epoch; // volatile write: the whole gradient is written
        LockSupport.unpark(commThread);
        awaitCompleted();
        if (failure instanceof RuntimeException r) {
            throw r; // a peer's timeout, an abort, a mismatch: as if the worker had called the collective itself
        }
        if (failure instanceof Error e) {
            throw e;
        }
        if (failure != null) {
            throw new SymmemException("gradient sync failed: expected every bucket's collective to complete; found "
                    + failure + " (fix: correct what the cause names, then resume from the newest complete checkpoint"
                    + " with checkpointEvery(k, dir).resumeFrom(dir))", failure);
        }
        return new Outcome(localBad, reducedBad);
    }

    /**
     * Worker thread, when its step failed before {@link #finishStep}: the comm thread stops waiting
     * for layers (a collective it is in fails through the group's abort, which the worker raised).
     */
    void abandonStep() {
        if (!stepOpen) {
            return;
        }
        stepOpen = false;
        if (commThread != null) {
            abandoned = epoch;
            LockSupport.unpark(commThread);
            awaitCompleted();
        }
    }

    private void awaitCompleted() {
        long deadline = System.nanoTime() + timeout.multipliedBy(3).plusSeconds(30).toNanos();
        int spins = 0;
        while (completed != epoch) {
            if (spins < 200) {
                spins++;
                Thread.onSpinWait();
            } else {
                LockSupport.parkNanos(this, 100_000); // the comm thread unparks this worker when it completes
            }
            if (System.nanoTime() - deadline > 0) {
                // error-message: an internal invariant kept a SymmemException (callers treat it as a failed sync); its text ends with Invariants.HOW_TO_REPORT
                throw new SymmemException("gradient sync thread of " + worker.getName() + " did not finish step epoch="
                        + epoch + " within " + timeout.multipliedBy(3).plusSeconds(30)
                        + " (its collectives are bounded by the group timeout; " + Invariants.HOW_TO_REPORT + ")");
            }
        }
    }

    private void runCommThread() {
        long e = 0;
        while (true) {
            e++;
            while (armed < e) {
                if (closed) {
                    return;
                }
                LockSupport.park(this); // the worker unparks it when it arms a step or closes
            }
            try {
                for (int i = buckets.size() - 1; i >= 0; i--) {
                    if (!awaitLayers(i, e)) {
                        break; // the worker's step failed; nothing more to reduce
                    }
                    runBucket(i);
                }
            } catch (Throwable t) {
                failure = t;
            }
            completed = e; // volatile write: publishes the results (and failure) to the worker
            LockSupport.unpark(worker);
        }
    }

    /** Comm thread: waits until every layer of bucket {@code i} is written in step {@code e}; false if the step was abandoned. */
    private boolean awaitLayers(int i, long e) {
        while (true) {
            if (abandoned == e || closed) {
                return false;
            }
            if (allWritten == e) {
                return true;
            }
            boolean ready = true;
            for (int slot : bucketLayers[i]) {
                if (slot < 0 || layerWrittenEpoch.getAcquire(slot) != e) {
                    ready = false;
                    break;
                }
            }
            if (ready) {
                return true;
            }
            LockSupport.park(this); // layerWritten / finishStep / abandonStep unpark it
        }
    }

    /** The bucket pipeline (see the class comment), on whichever thread runs this step's buckets. */
    private void runBucket(int i) {
        if (bucketStartNanos != null) {
            bucketStartNanos[i] = System.nanoTime();
        }
        runBucketPipeline(i);
        if (bucketEndNanos != null) {
            bucketEndNanos[i] = System.nanoTime();
        }
    }

    private void runBucketPipeline(int i) {
        GradientBuckets.Bucket b = buckets.get(i);
        long first = b.firstElement();
        long n = b.count();
        long off = first * dsize;
        if (idle) {
            gradient.asSlice(off, n * dsize).fill((byte) 0); // contributes nothing; zero bits are 0.0 in every dtype
        } else {
            if (accumulated != null) {
                // the earlier micro-batches' sum joins this pass's: the worker's whole contribution
                srcs[0] = gradient;
                srcs[1] = accumulated;
                srcOffsets[0] = off;
                srcOffsets[1] = off;
                srcTypes[0] = dtype;
                srcTypes[1] = dtype;
                reducer.reduce(srcs, srcOffsets, srcTypes, 2, gradient, off, dtype, n, ReduceOp.SUM, 0, false);
            }
            long bad = reducer.firstNonFinite(gradient, off, dtype, n);
            if (bad >= 0) {
                localBad = first + bad; // buckets run from the top down: the last one found is the first element
            }
        }
        hook.beforeReduce(first, n);
        long bad;
        boolean wantsSum = hook.wantsUndividedSum();
        if (transfer == null) {
            synchronizer.allReduceBucket(i, ReduceOp.SUM);
            if (wantsSum) {
                hook.afterSum(first, n);
            }
            // what DL4J's updater would have done for one model seeing every example of the step
            bad = reducer.divideAndFindNonFinite(gradient, off, dtype, n, stepExamples);
        } else if (wantsSum) {
            roundToBf16AndAllReduce(i, first, off, n);
            srcs[0] = transfer.local();
            srcOffsets[0] = first * 2;
            srcTypes[0] = DType.BFLOAT16;
            // widen exactly, let the hook see the sum, then the same float division as below
            reducer.reduce(srcs, srcOffsets, srcTypes, 1, gradient, off, DType.FLOAT32, n, ReduceOp.SUM, 0, false);
            hook.afterSum(first, n);
            bad = reducer.divideAndFindNonFinite(gradient, off, dtype, n, stepExamples);
        } else {
            roundToBf16AndAllReduce(i, first, off, n);
            srcs[0] = transfer.local();
            srcOffsets[0] = first * 2;
            srcTypes[0] = DType.BFLOAT16;
            // widen exactly and divide by the step's examples (the same float division as the fp32 path)
            reducer.reduce(srcs, srcOffsets, srcTypes, 1, gradient, off, DType.FLOAT32, n, ReduceOp.SUM,
                    Math.toIntExact(stepExamples), false);
            bad = reducer.firstNonFinite(gradient, off, dtype, n);
        }
        long hookBad = hook.afterReduce(first, n);
        long bucketBad = bad < 0 ? hookBad : hookBad < 0 ? first + bad : Math.min(first + bad, hookBad);
        if (bucketBad >= 0) {
            reducedBad = bucketBad;
        }
    }

    /** bf16 transfer: the bucket rounded to bf16 (nearest even) into the transfer buffer and all-reduced there. */
    private void roundToBf16AndAllReduce(int i, long first, long off, long n) {
        srcs[0] = gradient;
        srcOffsets[0] = off;
        srcTypes[0] = DType.FLOAT32;
        reducer.reduce(srcs, srcOffsets, srcTypes, 1, transfer.local(), first * 2, DType.BFLOAT16, n, ReduceOp.SUM, 0,
                false); // round to bf16, nearest even
        transfer.synchronizer().allReduceBucket(i, ReduceOp.SUM); // fp32 accumulation, rounded once to bf16
    }

    /** Ends the communication thread (workers idle or failed). */
    @Override
    public void close() {
        if (commThread == null) {
            return;
        }
        closed = true;
        LockSupport.unpark(commThread);
        try {
            commThread.join(timeout.plusSeconds(10).toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
