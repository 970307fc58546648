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
 * @param collectives ZeRO stage 3 (and HSDP): the step's per-layer collectives, the slowest worker's
 *                    times; {@link Collectives#NONE} in the other modes
 */
public record StepReport(long step, long examples, double loss, long stepNanos, long syncNanos, boolean skipped,
                         long exposedSyncNanos, Collectives collectives) implements TrainingStep {

    /** A report without stage 3's per-layer collectives. */
    public StepReport(long step, long examples, double loss, long stepNanos, long syncNanos, boolean skipped,
                      long exposedSyncNanos) {
        this(step, examples, loss, stepNanos, syncNanos, skipped, exposedSyncNanos, Collectives.NONE);
    }

    /**
     * Stage 3's per-layer collectives in one step of one worker (of the slowest: each value the largest over the
     * workers): the parameter all-gathers before forward and backprop and the gradient reduce-scatters after backprop,
     * how many, how long they ran on the worker's communication thread (hidden or not), and how long the worker waited
     * for them: the exposed time, which prefetching and overlap did not hide. A wait for a gather queued behind
     * reduce-scatters counts as reduce-scatter time until the gather began.
     *
     * @param gathers                   all-gathers issued
     * @param exposedGatherNanos        the worker's waits for them
     * @param gatherNanos               their time on the communication thread
     * @param reduceScatters            reduce-scatters issued
     * @param exposedReduceScatterNanos the worker's waits for them
     * @param reduceScatterNanos        their time on the communication thread (the NaN check and page release included)
     * @param commDelayNanos            how long the collectives, once issued and with the communication thread free,
     *                                  waited for that thread to start them: its wake-up, which is long when the
     *                                  worker's compute threads hold every CPU the process may use
     * @param commCpuNanos              the CPU time the communication thread used inside the collectives (copies,
     *                                  sums, page faults, spinning in barriers): what it takes from the compute threads
     *                                  when they share its CPUs; the rest of the ran time it slept
     * @param hookWorkNanos             the worker's own time in the layer hooks, its waits for gathers left out: the
     *                                  releases of pages (hole punches in process mode), the regularization terms,
     *                                  the copies of state updates and the submissions; compute time that stage 3 adds
     */
    public record Collectives(int gathers, long exposedGatherNanos, long gatherNanos, int reduceScatters,
                              long exposedReduceScatterNanos, long reduceScatterNanos, long commDelayNanos,
                              long commCpuNanos, long hookWorkNanos) {

        /** No per-layer collectives: the modes other than stage 3. */
        public static final Collectives NONE = new Collectives(0, 0, 0, 0, 0, 0, 0, 0, 0);

        /** Each value the larger of this and {@code o}'s: the slowest worker's. */
        public Collectives max(Collectives o) {
            return new Collectives(Math.max(gathers, o.gathers), Math.max(exposedGatherNanos, o.exposedGatherNanos),
                    Math.max(gatherNanos, o.gatherNanos), Math.max(reduceScatters, o.reduceScatters),
                    Math.max(exposedReduceScatterNanos, o.exposedReduceScatterNanos),
                    Math.max(reduceScatterNanos, o.reduceScatterNanos), Math.max(commDelayNanos, o.commDelayNanos),
                    Math.max(commCpuNanos, o.commCpuNanos), Math.max(hookWorkNanos, o.hookWorkNanos));
        }
    }
}
