package org.symmem4j.dl4j;

import org.symmem4j.parallel.SymmemException;

/** A data-parallel {@code fit()} failed on a worker; the cause is that worker's exception. */
public class DataParallelTrainingException extends SymmemException {

    /** The worker whose failure stopped training. */
    private final int worker;
    /** The step (round) in which it failed. */
    private final long step;

    /**
     * A failure of one worker in one step.
     *
     * @param message what failed, where, and the fix when one is known
     * @param worker  the worker whose failure stopped training, from 0
     * @param step    the step (round) number within the wrapper's life, from 0
     * @param cause   that worker's exception
     */
    public DataParallelTrainingException(String message, int worker, long step, Throwable cause) {
        super(message, cause);
        this.worker = worker;
        this.step = step;
    }

    /**
     * The worker whose failure stopped training.
     *
     * @return the worker, from 0
     */
    public int worker() {
        return worker;
    }

    /**
     * The step in which the worker failed.
     *
     * @return the step (round) number within the wrapper's life, from 0
     */
    public long step() {
        return step;
    }
}
