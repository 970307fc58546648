package org.symmem4j.dl4j.train;

import org.symmem4j.parallel.SymmemException;

/**
 * A training step failed on a rank (a worker thread, a pipeline rank, or a rank of a group); the cause is that rank's
 * own exception, the failures it caused on the other ranks are suppressed. Every trainer's failure is one, so one
 * catch block serves them all; each trainer throws its own subclass
 * ({@code DataParallelTrainingException}, {@code PipelineTrainingException}).
 */
public class TrainingException extends SymmemException {

    /** The rank whose failure stopped training. */
    private final int rank;
    /** The step in which it failed. */
    private final long step;

    /**
     * A failure of one rank in one step.
     *
     * @param message what failed, where, and the fix when one is known
     * @param rank    the rank whose failure stopped training, from 0
     * @param step    the step number within the trainer's life, from 0
     * @param cause   that rank's exception
     */
    public TrainingException(String message, int rank, long step, Throwable cause) {
        super(message, cause);
        this.rank = rank;
        this.step = step;
    }

    /**
     * The rank whose failure stopped training: a data-parallel worker, a pipeline rank.
     *
     * @return the rank, from 0
     */
    public int rank() {
        return rank;
    }

    /**
     * The step in which the rank failed.
     *
     * @return the step number within the trainer's life, from 0
     */
    public long step() {
        return step;
    }
}
