package org.symmem4j.dl4j.pipeline;

import org.symmem4j.dl4j.train.TrainingException;

/**
 * A pipeline step failed on a rank; the cause is that rank's exception. The trainer that threw it
 * cannot train further (stages may have updated their parameters or not): build a new one. A
 * {@link TrainingException}, as every trainer's failure is.
 */
public class PipelineTrainingException extends TrainingException {

    /**
     * A failure of one rank in one step.
     *
     * @param message what failed, where, and the fix when one is known
     * @param rank    the rank (stage thread) whose failure stopped the pipeline
     * @param step    the step number within the trainer's life, from 0
     * @param cause   that rank's exception
     */
    public PipelineTrainingException(String message, int rank, long step, Throwable cause) {
        super(message, rank, step, cause);
    }
}
