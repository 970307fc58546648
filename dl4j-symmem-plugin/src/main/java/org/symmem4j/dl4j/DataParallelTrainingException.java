package org.symmem4j.dl4j;

import org.symmem4j.dl4j.train.TrainingException;

/**
 * A data-parallel {@code fit()} failed on a worker; the cause is that worker's exception. A {@link TrainingException},
 * as every trainer's failure is: its {@link #rank()} is the {@link #worker()}.
 */
public class DataParallelTrainingException extends TrainingException {

    /**
     * A failure of one worker in one step.
     *
     * @param message what failed, where, and the fix when one is known
     * @param worker  the worker whose failure stopped training, from 0
     * @param step    the step (round) number within the wrapper's life, from 0
     * @param cause   that worker's exception
     */
    public DataParallelTrainingException(String message, int worker, long step, Throwable cause) {
        super(message, worker, step, cause);
    }

    /**
     * The worker whose failure stopped training.
     *
     * @return the worker, from 0
     */
    public int worker() {
        return rank();
    }
}
