package org.symmem4j.dl4j;

/**
 * One data-parallel step (a round: every worker one batch), as reported to a
 * {@link SymmemParallelWrapper.StepListener}.
 *
 * @param step        step number within the wrapper's life, from 0
 * @param examples    examples in this step, summed over workers
 * @param loss        the mean loss per example over the step's examples (DL4J's score without the
 *                    division by batch size, summed over workers, divided by {@code examples};
 *                    regularization terms are counted once per worker)
 * @param stepNanos   the slowest worker's step time (forward, backward, sync, update)
 * @param syncNanos   the slowest worker's gradient-sync time within it
 * @param skipped     true if the step was skipped (non-finite gradient with SKIP_STEP)
 * @param exposedSyncNanos from the moment the last worker reached the sync (its backward pass
 *                    done) to the moment the last worker's sync finished: the sync time that no
 *                    computation hid (waiting for slower workers excluded)
 */
public record StepReport(long step, long examples, double loss, long stepNanos, long syncNanos, boolean skipped,
                         long exposedSyncNanos) {
}
