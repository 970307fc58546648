package org.symmem4j.parallel.sync;

/**
 * What a thread does while it waits for a peer: spin, then yield, then park. Callers poll a
 * condition, call {@link #idle()} after every unsuccessful poll and {@link #reset()} before a new
 * wait. Implementations are single-threaded: one instance per waiting thread.
 *
 * <p>Bounding the wait is the caller's job (see {@link Waiter}); an idle strategy only decides how
 * to burn the time between polls.
 */
public interface IdleStrategy {

    /** Called after a poll found nothing. */
    void idle();

    /** Called before a new wait starts, so the next wait begins with cheap spinning again. */
    void reset();

    /**
     * True once this strategy has escalated to parking (polls are then far apart).
     *
     * @return true while the strategy parks
     */
    boolean isParking();
}
