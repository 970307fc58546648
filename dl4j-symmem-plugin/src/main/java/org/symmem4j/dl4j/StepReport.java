package org.symmem4j.dl4j;

import org.symmem4j.dl4j.train.TrainingStep;

/**
 * One data-parallel step (a round: every worker one batch), as reported to a
 * {@link SymmemParallelWrapper.StepListener}.
 *
 * @param step        step number within the wrapper's life, from 0
 * @param examples    examples in this step, summed over workers
 * @param loss        DL4J's score of one model on the step's merged batch: the mean loss over all
 *                    {@code examples} plus the regularization term (L1, L2, ...) once, as
 *                    {@code model.score()} reports it after such a fit
 * @param stepNanos   the slowest worker's step time (forward, backward, sync, update)
 * @param syncNanos   the slowest worker's gradient-sync time within it
 * @param skipped     true if the step was skipped (non-finite gradient with SKIP_STEP)
 * @param exposedSyncNanos from the moment the last worker reached the sync (its backward pass
 *                    done) to the moment the last worker's sync finished: the sync time that no
 *                    computation hid (waiting for slower workers excluded)
 */
public record StepReport(long step, long examples, double loss, long stepNanos, long syncNanos, boolean skipped,
                         long exposedSyncNanos) implements TrainingStep {
}
