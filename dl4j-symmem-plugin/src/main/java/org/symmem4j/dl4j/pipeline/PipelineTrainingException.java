package org.symmem4j.dl4j.pipeline;

import org.symmem4j.parallel.SymmemException;

/**
 * A pipeline step failed on a rank; the cause is that rank's exception. The trainer that threw it
 * cannot train further (stages may have updated their parameters or not): build a new one.
 */
public class PipelineTrainingException extends SymmemException {

    private final int rank;
    private final long step;

    public PipelineTrainingException(String message, int rank, long step, Throwable cause) {
        super(message, cause);
        this.rank = rank;
        this.step = step;
    }

    /** The rank whose failure stopped the pipeline. */
    public int rank() {
        return rank;
    }

    /** The trainer's step number that failed. */
    public long step() {
        return step;
    }
}
