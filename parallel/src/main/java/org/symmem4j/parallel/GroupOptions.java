package org.symmem4j.parallel;

import java.time.Duration;
import java.util.Objects;
import java.util.function.Supplier;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * Settings shared by every rank of a group.
 *
 * @param timeout          how long any wait for a peer may last before it fails on every waiting
 *                         rank with a {@link PeerTimeoutException} naming the missing ranks
 *                         (default {@link Configuration#timeout()}: 60 s, or {@code -Dsymmem4j.timeout.ms} /
 *                         {@code SYMMEM4J_TIMEOUT_MS})
 * @param idleStrategy     makes the idle strategy each waiting thread uses
 * @param livenessInterval how often a long wait checks whether the missing ranks' threads or
 *                         processes are still alive, to fail fast when one has exited
 */
public record GroupOptions(Duration timeout, Supplier<IdleStrategy> idleStrategy, Duration livenessInterval) {

    /**
     * The built-in bound of every wait: 60 s. {@link #defaults()} takes {@link Configuration#timeout()}, which is this
     * unless {@code -Dsymmem4j.timeout.ms} (or {@code SYMMEM4J_TIMEOUT_MS}) says otherwise; a builder's default
     * timeout should be {@link Configuration#timeout()} too, not this constant, so that the setting reaches it.
     */
    public static final Duration DEFAULT_TIMEOUT = Configuration.TIMEOUT.defaultValue();
    /** The default interval of liveness checks during a long wait: 100 ms. */
    public static final Duration DEFAULT_LIVENESS_INTERVAL = Duration.ofMillis(100);

    /**
     * Checks the options.
     *
     * @throws NullPointerException     when an argument is null
     * @throws IllegalArgumentException when {@code timeout} or {@code livenessInterval} is zero or negative
     */
    public GroupOptions {
        Objects.requireNonNull(timeout, "timeout");
        Objects.requireNonNull(idleStrategy, "idleStrategy");
        Objects.requireNonNull(livenessInterval, "livenessInterval");
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout=" + timeout + " must be positive (default " + DEFAULT_TIMEOUT
                    + "; fix: pass e.g. Duration.ofMinutes(2), or leave it unset)");
        }
        if (livenessInterval.isNegative() || livenessInterval.isZero()) {
            throw new IllegalArgumentException("livenessInterval=" + livenessInterval + " must be positive"
                    + " (fix: pass e.g."
                    + " Duration.ofSeconds(1), or leave it unset)");
        }
    }

    /**
     * Defaults, with the timeout of {@link Configuration#timeout()} ({@code -Dsymmem4j.timeout.ms=...} or
     * {@code SYMMEM4J_TIMEOUT_MS} when set).
     *
     * @return a 60 s timeout (or the setting's), a spin-yield-park idle strategy, 100 ms liveness checks
     * @throws IllegalArgumentException when the setting is not a positive whole number of milliseconds
     */
    public static GroupOptions defaults() {
        return new GroupOptions(Configuration.timeout(), BackoffIdleStrategy::new, DEFAULT_LIVENESS_INTERVAL);
    }

    /**
     * These options with another timeout.
     *
     * @param newTimeout the bound of every wait; positive
     * @return a copy with {@code newTimeout}
     * @throws IllegalArgumentException when {@code newTimeout} is zero or negative
     */
    public GroupOptions withTimeout(Duration newTimeout) {
        return new GroupOptions(newTimeout, idleStrategy, livenessInterval);
    }

    /**
     * These options with another idle strategy.
     *
     * @param newIdleStrategy makes the strategy each waiting thread uses
     * @return a copy with {@code newIdleStrategy}
     */
    public GroupOptions withIdleStrategy(Supplier<IdleStrategy> newIdleStrategy) {
        return new GroupOptions(timeout, newIdleStrategy, livenessInterval);
    }
}
