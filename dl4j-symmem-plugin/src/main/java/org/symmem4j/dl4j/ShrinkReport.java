package org.symmem4j.dl4j;

import java.nio.file.Path;
import java.util.List;

/**
 * One in-place shrink of the data-parallel wrapper ({@link WorkerFailure#SHRINK}): a step that failed because
 * {@code dead} workers failed, and the rebuilt group of survivors that went on.
 *
 * @param step           the step that failed: with threads, the wrapper's step counter when it was handed out; in
 *                       group mode (a rank per process, or per thread of a shrinking world) the survivors' agreed one,
 *                       the same on every survivor: the first step that not every survivor completed (a survivor
 *                       that the abort reached still finishing the step before, past its update, had been handed out
 *                       that step; the others the next)
 * @param dead           the workers whose own failure it was, numbered as in the group before the shrink
 * @param workersBefore  workers before the shrink
 * @param workersAfter   workers after it (the survivors, numbered densely 0.. in their old order); with hybrid
 *                       sharding ({@code shardGroupSize}) each dead worker's shard group left whole, so the live
 *                       workers of those groups are not among them either
 * @param redone         whether the survivors redo {@code step} (true when a survivor had not completed it; false,
 *                       with threads only, when every survivor had completed it: the dead worker failed after the
 *                       step's sync; always true in group mode, whose {@code step} is the first one not every
 *                       survivor completed, and with ZeRO sharding without {@code shardGroupSize}, which goes back
 *                       to {@code resumedAt})
 * @param failure        the dead worker's failure, as {@code toString()} gives it
 * @param failedNanos    {@link System#nanoTime()} when the wrapper's thread had every worker's outcome of the step
 * @param resumedNanos   {@link System#nanoTime()} when the survivors' group was built and the next step was handed
 *                       out to it
 * @param resumedAt      the first step the survivors train: {@code step} when it is redone, else {@code step + 1};
 *                       with ZeRO sharding (not hybrid) the step of the state they went back to (the checkpoint's, or the fit's
 *                       first), so that steps {@code resumedAt} to {@code step} are redone
 * @param checkpoint     with ZeRO sharding, the periodic checkpoint the survivors went back to (re-sliced onto them),
 *                       or null when they went back to the fit's start (none taken yet in it); null without sharding and
 *                       with hybrid sharding (a surviving shard group's own copy)
 */
public record ShrinkReport(long step, List<Integer> dead, int workersBefore, int workersAfter, boolean redone,
                           String failure, long failedNanos, long resumedNanos, long resumedAt, Path checkpoint) {

    /** {@return milliseconds from the failed step's outcome to the survivors' next step} */
    public double rebuildMillis() {
        return (resumedNanos - failedNanos) / 1e6;
    }

    /** {@return the steps the survivors train again: from {@code resumedAt} to {@code step}, the failed one included} */
    public long redoneSteps() {
        return redone ? step - resumedAt + 1 : 0;
    }

    /** The warning the wrapper logs for this shrink ({@code rank}: this process's new rank, -1 in thread mode). */
    String logLine(int minWorkers, int rank) {
        String goesOn;
        if (checkpoint != null || resumedAt < step) {
            goesOn = "went back to " + (checkpoint == null ? "the fit's start" : "checkpoint " + checkpoint)
                    + " (step " + resumedAt + ", re-sliced onto the survivors: ZeRO sharding lost the dead worker's"
                    + " shard), steps " + resumedAt + ".." + step + " redone on the survivors";
        } else {
            goesOn = redone ? "step " + step + " redone on the survivors"
                    : "step " + step + " completed by every survivor, going on at step " + (step + 1);
        }
        return "symmem4j: worker(s) " + dead + " failed at step " + step + " (" + failure + "); shrunk in place from "
                + workersBefore + " to " + workersAfter + " workers (onWorkerFailure=SHRINK, minWorkers=" + minWorkers
                + (rank < 0 ? "" : ", this process now rank " + rank) + "), " + goesOn + ", rebuilt in "
                + String.format(java.util.Locale.ROOT, "%.1f", rebuildMillis()) + " ms";
    }
}
