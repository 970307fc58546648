package org.symmem4j.parallel.sync;

import java.util.concurrent.locks.LockSupport;

/**
 * Spin, then yield, then park with exponential back-off (as Agrona's BackoffIdleStrategy).
 *
 * <p>Spinning gives the lowest hand-off latency when every rank has a core of its own; yielding
 * and parking keep oversubscribed groups (8 ranks on 2 cores in CI) making progress, because a
 * spinning waiter would otherwise burn the time slice the peer it waits for needs.
 */
public final class BackoffIdleStrategy implements IdleStrategy {

    /** What the next {@link #idle()} does. */
    public enum Phase {
        /** A busy poll: {@code Thread.onSpinWait()}. */
        SPIN,
        /** {@code Thread.yield()}. */
        YIELD,
        /** {@code LockSupport.parkNanos(nextParkNanos())}. */
        PARK
    }

    /** Busy polls before yielding. Defaults tuned for one rank per core; see the class comment. */
    public static final int DEFAULT_MAX_SPINS = 2_000;
    /** {@code Thread.yield()} polls before parking. */
    public static final int DEFAULT_MAX_YIELDS = 200;
    /** The first park, in nanoseconds (1 µs); each further park doubles it. */
    public static final long DEFAULT_MIN_PARK_NANOS = 1_000;
    /** The longest park, in nanoseconds (1 ms). */
    public static final long DEFAULT_MAX_PARK_NANOS = 1_000_000;

    private final int maxSpins;
    private final int maxYields;
    private final long minParkNanos;
    private final long maxParkNanos;

    private int spins;
    private int yields;
    private long parkNanos;

    /** A strategy with the defaults. */
    public BackoffIdleStrategy() {
        this(DEFAULT_MAX_SPINS, DEFAULT_MAX_YIELDS, DEFAULT_MIN_PARK_NANOS, DEFAULT_MAX_PARK_NANOS);
    }

    /**
     * A strategy with its own bounds.
     *
     * @param maxSpins     busy polls before yielding, at least 0
     * @param maxYields    yields before parking, at least 0
     * @param minParkNanos the first park in nanoseconds, at least 1
     * @param maxParkNanos the longest park in nanoseconds, at least {@code minParkNanos}
     * @throws IllegalArgumentException when a bound is out of range
     */
    public BackoffIdleStrategy(int maxSpins, int maxYields, long minParkNanos, long maxParkNanos) {
        if (maxSpins < 0 || maxYields < 0 || minParkNanos < 1 || maxParkNanos < minParkNanos) {
            throw new IllegalArgumentException("invalid back-off: maxSpins=" + maxSpins + " maxYields=" + maxYields
                    + " minParkNanos=" + minParkNanos + " maxParkNanos=" + maxParkNanos
                    + " (expected maxSpins>=0, maxYields>=0, 1<=minParkNanos<=maxParkNanos; fix: pass values in"
                    + " those ranges)");
        }
        this.maxSpins = maxSpins;
        this.maxYields = maxYields;
        this.minParkNanos = minParkNanos;
        this.maxParkNanos = maxParkNanos;
        reset();
    }

    @Override
    public void idle() {
        if (spins < maxSpins) {
            spins++;
            Thread.onSpinWait();
        } else if (yields < maxYields) {
            yields++;
            Thread.yield();
        } else {
            LockSupport.parkNanos(parkNanos);
            parkNanos = Math.min(parkNanos << 1, maxParkNanos);
        }
    }

    @Override
    public void reset() {
        spins = 0;
        yields = 0;
        parkNanos = minParkNanos;
    }

    @Override
    public boolean isParking() {
        return spins >= maxSpins && yields >= maxYields;
    }

    /** {@return what the next {@link #idle()} does} */
    public Phase phase() {
        return spins < maxSpins ? Phase.SPIN : yields < maxYields ? Phase.YIELD : Phase.PARK;
    }

    /** {@return the length of the next park in nanoseconds (while spinning or yielding, the first park's)} */
    public long nextParkNanos() {
        return parkNanos;
    }

    @Override
    public String toString() {
        return "BackoffIdleStrategy[maxSpins=" + maxSpins + ", maxYields=" + maxYields
                + ", parkNanos=" + minParkNanos + ".." + maxParkNanos + "]";
    }
}
