package org.symmem4j.dl4j.pipeline;

import org.symmem4j.parallel.SymmemException;

/**
 * A pipeline step failed on a rank; the cause is that rank's exception. The trainer that threw it
 * cannot train further (stages may have updated their parameters or not): build a new one.
 */
public class PipelineTrainingException extends SymmemException {

    /** The rank whose failure stopped the pipeline. */
    private final int rank;
    /** The step in which it failed. */
    private final long step;

    /**
     * A failure of one rank in one step.
     *
     * @param message what failed, where, and the fix when one is known
     * @param rank    the rank (stage thread) whose failure stopped the pipeline
     * @param step    the step number within the trainer's life, from 0
     * @param cause   that rank's exception
     */
    public PipelineTrainingException(String message, int rank, long step, Throwable cause) {
        super(message, cause);
        this.rank = rank;
        this.step = step;
    }

    /**
     * The rank whose failure stopped the pipeline.
     *
     * @return the rank, from 0
     */
    public int rank() {
        return rank;
    }

    /**
     * The trainer's step number that failed.
     *
     * @return the step number, from 0
     */
    public long step() {
        return step;
    }
}
