package org.symmem4j.dl4j.train;

/**
 * Told of every completed step, after its update, on the thread that called {@code fit}. Each trainer names its own
 * listener type, a {@code StepListener} of its own report ({@code SymmemParallelWrapper.StepListener},
 * {@code PipelineParallelTrainer.StepListener}); code that serves every trainer takes this one.
 *
 * @param <R> the trainer's step report
 */
@FunctionalInterface
public interface StepListener<R extends TrainingStep> {

    /**
     * Called once per completed step, after its update.
     *
     * @param report the step's number, examples, loss and what the trainer adds
     */
    void onStep(R report);
}
