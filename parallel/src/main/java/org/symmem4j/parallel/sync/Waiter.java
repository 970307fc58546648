package org.symmem4j.parallel.sync;

import java.time.Duration;

/**
 * Bounds a polling wait: drives an {@link IdleStrategy}, and every few polls asks the
 * {@link WaitSubject} whether progress is still possible and checks the deadline.
 *
 * <p>Usage (one instance per waiting thread, reused across waits):
 * <pre>{@code
 * waiter.begin();
 * while (SLOT.getAcquire(pad, offset) < target) {
 *     waiter.idle(subject);   // throws once the deadline passes or a peer is known lost
 * }
 * }</pre>
 *
 * <p>The clock is read lazily, only after {@value #POLLS_PER_CHECK} unsuccessful polls or once the
 * idle strategy parks, so a hand-off that completes while spinning never pays for
 * {@code System.nanoTime()}. The wait therefore lasts at most the timeout plus one check period.
 */
public final class Waiter {

    /** Polls between deadline checks while spinning (a power of two). */
    public static final int POLLS_PER_CHECK = 256;

    private final IdleStrategy idleStrategy;
    private final long timeoutNanos;
    private final Duration timeout;

    private long startNanos;
    private int polls;

    /**
     * Creates a waiter; reuse it for successive waits with {@link #begin()}.
     *
     * @param idleStrategy how to spend the time between polls
     * @param timeout how long one wait may last
     */
    public Waiter(IdleStrategy idleStrategy, Duration timeout) {
        this.idleStrategy = idleStrategy;
        this.timeout = timeout;
        this.timeoutNanos = timeout.toNanos();
    }

    /** Starts a new wait. */
    public void begin() {
        idleStrategy.reset();
        polls = 0;
        startNanos = 0;
    }

    /**
     * Called after an unsuccessful poll. Returns when the caller should poll again; throws what
     * {@code subject} supplies when the deadline has passed or progress has become impossible.
     *
     * @param subject what is waited for: checks progress and supplies the timeout exception
     */
    public void idle(WaitSubject subject) {
        idleStrategy.idle();
        if ((++polls & (POLLS_PER_CHECK - 1)) != 0 && !idleStrategy.isParking()) {
            return;
        }
        long now = System.nanoTime();
        if (startNanos == 0) {
            startNanos = now;
            return;
        }
        subject.checkProgressPossible(now - startNanos);
        if (now - startNanos > timeoutNanos) {
            throw subject.deadlinePassed(timeout);
        }
    }

    /** {@return how long one wait may last} */
    public Duration timeout() {
        return timeout;
    }
}
