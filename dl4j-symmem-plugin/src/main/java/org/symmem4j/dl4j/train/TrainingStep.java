package org.symmem4j.dl4j.train;

/**
 * What every trainer's step report says: the step's number, its examples and its loss. Each trainer's report adds what
 * is its own (the data-parallel wrapper's sync times, the pipeline's per-rank timelines).
 */
public interface TrainingStep {

    /**
     * The step's number.
     *
     * @return the step number within the trainer's life, from 0
     */
    long step();

    /**
     * The examples the step trained on.
     *
     * @return examples in the step, over all ranks
     */
    long examples();

    /**
     * The step's loss, as DL4J's {@code score()} reports it after a {@code fit} of one model on the step's batch.
     *
     * @return the loss
     */
    double loss();
}
