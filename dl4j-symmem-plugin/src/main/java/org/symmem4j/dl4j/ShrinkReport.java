package org.symmem4j.dl4j;

import java.util.List;

/**
 * One in-place shrink of the data-parallel wrapper ({@link WorkerFailure#SHRINK}): a step that failed because
 * {@code dead} workers failed, and the rebuilt group of survivors that went on.
 *
 * @param step           the step that failed: the wrapper's step counter when it was handed out
 * @param dead           the workers whose own failure it was, numbered as in the group before the shrink
 * @param workersBefore  workers before the shrink
 * @param workersAfter   workers after it (the survivors, numbered densely 0.. in their old order)
 * @param redone         whether the survivors redo {@code step} (true when a survivor had not completed it; false
 *                       when every survivor had completed it: the dead worker failed after the step's sync)
 * @param failure        the dead worker's failure, as {@code toString()} gives it
 * @param failedNanos    {@link System#nanoTime()} when the wrapper's thread had every worker's outcome of the step
 * @param resumedNanos   {@link System#nanoTime()} when the survivors' group was built and the next step was handed
 *                       out to it
 */
public record ShrinkReport(long step, List<Integer> dead, int workersBefore, int workersAfter, boolean redone,
                           String failure, long failedNanos, long resumedNanos) {

    /** {@return milliseconds from the failed step's outcome to the survivors' next step} */
    public double rebuildMillis() {
        return (resumedNanos - failedNanos) / 1e6;
    }

    /** The warning the wrapper logs for this shrink ({@code rank}: this process's new rank, -1 in thread mode). */
    String logLine(int minWorkers, int rank) {
        return "symmem4j: worker(s) " + dead + " failed at step " + step + " (" + failure + "); shrunk in place from "
                + workersBefore + " to " + workersAfter + " workers (onWorkerFailure=SHRINK, minWorkers=" + minWorkers
                + (rank < 0 ? "" : ", this process now rank " + rank) + "), " + (redone ? "step " + step
                + " redone on the survivors" : "step " + step + " completed by every survivor, going on at step "
                + (step + 1)) + ", rebuilt in " + String.format(java.util.Locale.ROOT, "%.1f", rebuildMillis()) + " ms";
    }
}
