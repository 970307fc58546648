package org.symmem4j.dl4j;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * What one step's stage-3 collectives cost one worker ({@link FullySharded}): how many all-gathers and
 * reduce-scatters it issued, how long each kind ran on the communication thread, and how long the worker waited for
 * each, which is what prefetching and overlap left exposed. A wait for a gather that was queued behind earlier
 * reduce-scatters on the one communication thread counts, up to the moment the gather began, as exposed
 * reduce-scatter time: the split says which collective the worker really waited for.
 *
 * <p>Two more figures say where time goes that the waits do not show: the communication thread's wake-up delay (a
 * collective issued while the thread was free, started only when the thread got a CPU: long when the worker's
 * compute threads hold every CPU of the process), the CPU time that thread used inside the collectives (what it takes
 * from the compute threads on shared CPUs) and the worker's own work inside the layer hooks (page releases,
 * regularization terms, submissions: time stage 3 adds to the compute).
 */
final class StageThreeClock {

    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    // busy times: written by the communication thread, read by the worker after the step's collectives ended
    // (FullySharded.finishBackward drains the thread: the Future's completion orders these writes before the read)
    private volatile long gatherNanos;
    private volatile long reduceScatterNanos;
    private volatile long commDelayNanos;
    private volatile long commCpuNanos;
    /** When the communication thread last ended a collective; only that thread reads and writes it. */
    private long lastEnded;
    /** The communication thread's CPU time when its current collective began; only that thread uses it. */
    private long cpuAtBegin;
    /** When the communication thread began each position's gather: written before it, read after its Future. */
    private final long[] gatherBegan;
    // the worker's own counts and waits
    private int gathers;
    private int reduceScatters;
    private long exposedGatherNanos;
    private long exposedReduceScatterNanos;
    private long gatherWaitNanos;
    private boolean inHook;
    private long hookNanos;
    private long hookWaitNanos;

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
        hookNanos = 0;
        hookWaitNanos = 0;
        // the communication thread is idle between steps (finishBackward drained it); the next submit publishes these
        gatherNanos = 0;
        reduceScatterNanos = 0;
        commDelayNanos = 0;
        commCpuNanos = 0;
    }

    /** On the worker: a gather issued now; returns the time, for {@link #gatherBegins}. */
    long gatherIssued() {
        gathers++;
        return System.nanoTime();
    }

    /** On the worker: a reduce-scatter issued now; returns the time, for {@link #reduceScatterBegins}. */
    long reduceScatterIssued() {
        reduceScatters++;
        return System.nanoTime();
    }

    /**
     * On the communication thread: the gather of {@code position}, issued at {@code issued}, begins now; returns the
     * time, for {@link #gatherRan}.
     */
    long gatherBegins(int position, long issued) {
        long t = begins(issued);
        gatherBegan[position] = t;
        return t;
    }

    /** On the communication thread: a reduce-scatter issued at {@code issued} begins now; returns the time. */
    long reduceScatterBegins(long issued) {
        return begins(issued);
    }

    /** On the communication thread: the wake-up delay, from when the collective could have begun to now. */
    private long begins(long issued) {
        long t = System.nanoTime();
        commDelayNanos += Math.max(0, t - Math.max(issued, lastEnded)); // queued behind another collective: not a delay
        cpuAtBegin = THREADS.getCurrentThreadCpuTime(); // after t and before the end's clock: CPU time <= ran time
        return t;
    }

    /** On the communication thread: a gather that began at {@code t0} has ended. */
    void gatherRan(long t0) {
        ended();
        gatherNanos += lastEnded - t0;
    }

    /** On the communication thread: a reduce-scatter that began at {@code t0} has ended. */
    void reduceScatterRan(long t0) {
        ended();
        reduceScatterNanos += lastEnded - t0;
    }

    /** On the communication thread: the current collective's CPU time, then the time it ended. */
    private void ended() {
        commCpuNanos += THREADS.getCurrentThreadCpuTime() - cpuAtBegin;
        lastEnded = System.nanoTime();
    }

    /** On the worker: runs a layer hook and counts its time; the gather waits inside it are told apart. */
    void inHook(Runnable hook) {
        long t0 = System.nanoTime();
        inHook = true;
        try {
            hook.run();
        } finally {
            inHook = false;
            hookNanos += System.nanoTime() - t0;
        }
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
        if (inHook) {
            hookWaitNanos += t1 - t0;
        }
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
                exposedReduceScatterNanos, reduceScatterNanos, commDelayNanos, commCpuNanos,
                hookNanos - hookWaitNanos);
    }
}
