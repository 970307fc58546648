package org.symmem4j.dl4j;

import java.util.List;
import org.symmem4j.parallel.SymmemException;

/** A training step produced a NaN or infinite gradient; thrown by {@code fit()} on the caller's thread. */
public class NonFiniteGradientException extends SymmemException {

    /** The workers whose own gradient was non-finite. */
    private final List<Integer> workers;
    /** The step (round) number. */
    private final long step;

    /**
     * A step whose gradient was not finite.
     *
     * @param message the workers, the step and the fix ({@code NonFiniteGradients.SKIP_STEP})
     * @param workers the workers whose own gradient was non-finite before averaging
     * @param step    the step (round) number within the wrapper's life, from 0
     */
    public NonFiniteGradientException(String message, List<Integer> workers, long step) {
        super(message);
        this.workers = List.copyOf(workers);
        this.step = step;
    }

    /**
     * The workers whose own gradient was non-finite before averaging.
     *
     * @return the workers, ascending
     */
    public List<Integer> workers() {
        return workers;
    }

    /**
     * The step (round) number within the wrapper's life, from 0.
     *
     * @return the step number
     */
    public long step() {
        return step;
    }
}
