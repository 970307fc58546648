package org.symmem4j.dl4j;

import org.symmem4j.parallel.SymmemException;

/** A data-parallel {@code fit()} failed on a worker; the cause is that worker's exception. */
public class DataParallelTrainingException extends SymmemException {

    private final int worker;
    private final long step;

    public DataParallelTrainingException(String message, int worker, long step, Throwable cause) {
        super(message, cause);
        this.worker = worker;
        this.step = step;
    }

    /** The worker whose failure stopped training. */
    public int worker() {
        return worker;
    }

    public long step() {
        return step;
    }
}
