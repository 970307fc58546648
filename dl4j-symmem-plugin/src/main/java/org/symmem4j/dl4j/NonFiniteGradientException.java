package org.symmem4j.dl4j;

import java.util.List;
import org.symmem4j.parallel.SymmemException;

/** A training step produced a NaN or infinite gradient; thrown by {@code fit()} on the caller's thread. */
public class NonFiniteGradientException extends SymmemException {

    private final List<Integer> workers;
    private final long step;

    public NonFiniteGradientException(String message, List<Integer> workers, long step) {
        super(message);
        this.workers = List.copyOf(workers);
        this.step = step;
    }

    /** The workers whose own gradient was non-finite before averaging. */
    public List<Integer> workers() {
        return workers;
    }

    /** The step (round) number within the wrapper's life, from 0. */
    public long step() {
        return step;
    }
}
