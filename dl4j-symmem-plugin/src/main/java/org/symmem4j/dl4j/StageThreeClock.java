package org.symmem4j.dl4j;

/**
 * What one step's stage-3 collectives cost one worker ({@link FullySharded}): how many all-gathers and
 * reduce-scatters it issued, how long each kind ran on the communication thread, and how long the worker waited for
 * each, which is what prefetching and overlap left exposed. A wait for a gather that was queued behind earlier
 * reduce-scatters on the one communication thread counts, up to the moment the gather began, as exposed
 * reduce-scatter time: the split says which collective the worker really waited for.
 */
final class StageThreeClock {

    // busy times: written by the communication thread, read by the worker after the step's collectives ended
    // (FullySharded.finishBackward drains the thread: the Future's completion orders these writes before the read)
    private volatile long gatherNanos;
    private volatile long reduceScatterNanos;
    /** When the communication thread began each position's gather: written before it, read after its Future. */
    private final long[] gatherBegan;
    // the worker's own counts and waits
    private int gathers;
    private int reduceScatters;
    private long exposedGatherNanos;
    private long exposedReduceScatterNanos;
    private long gatherWaitNanos;

    StageThreeClock(int positions) {
        this.gatherBegan = new long[positions];
    }

    /** On the worker, before the step's first collective. */
    void beginStep() {
        gathers = 0;
        reduceScatters = 0;
        exposedGatherNanos = 0;
        exposedReduceScatterNanos = 0;
        gatherWaitNanos = 0;
        gatherNanos = 0;
        reduceScatterNanos = 0;
    }

    /** On the worker: a gather issued. */
    void gatherIssued() {
        gathers++;
    }

    /** On the worker: a reduce-scatter issued. */
    void reduceScatterIssued() {
        reduceScatters++;
    }

    /** On the communication thread: the gather of {@code position} begins now; returns the time, for {@link #gatherRan}. */
    long gatherBegins(int position) {
        long t = System.nanoTime();
        gatherBegan[position] = t;
        return t;
    }

    /** On the communication thread: a gather that began at {@code t0} has ended. */
    void gatherRan(long t0) {
        gatherNanos += System.nanoTime() - t0;
    }

    /** On the communication thread: a reduce-scatter that began at {@code t0} has ended. */
    void reduceScatterRan(long t0) {
        reduceScatterNanos += System.nanoTime() - t0;
    }

    /**
     * On the worker, after the Future of {@code position}'s gather: the worker waited from {@code t0} to {@code t1};
     * before the gather began that was the queue ahead of it (reduce-scatters), after it the gather.
     */
    void waitedForGather(int position, long t0, long t1) {
        long queued = Math.clamp(gatherBegan[position] - t0, 0, t1 - t0);
        exposedReduceScatterNanos += queued;
        exposedGatherNanos += t1 - t0 - queued;
        gatherWaitNanos += t1 - t0;
    }

    /** On the worker: it waited from {@code t0} to {@code t1} for the reduce-scatters left at the end of backprop. */
    void waitedForReduceScatters(long t0, long t1) {
        exposedReduceScatterNanos += t1 - t0;
    }

    /**
     * How long this step's worker waited for gathers, the queue ahead of them included: the sync time spent inside
     * forward and backprop (the gradient hook's own time, which the worker counts as sync, holds the rest).
     */
    long gatherWaitNanos() {
        return gatherWaitNanos;
    }

    /** This step's counts and times; read by the worker once the step's collectives have ended. */
    StepReport.Collectives step() {
        return new StepReport.Collectives(gathers, exposedGatherNanos, gatherNanos, reduceScatters,
                exposedReduceScatterNanos, reduceScatterNanos);
    }
}
