package org.symmem4j.parallel.trace;

/**
 * Wall-clock milliseconds read from a field that one daemon thread refreshes every millisecond, so a
 * hot path can stamp an event for about a nanosecond (a volatile load) instead of the 15–25 ns of a
 * {@link System#currentTimeMillis()} or {@link System#nanoTime()} call: what lets the flight recorder
 * stay under 1 % of a 450 ns host all-reduce. Agrona's {@code CachedEpochClock} is the same idea;
 * here the refresh thread starts on first use and is shared by the whole JVM.
 *
 * <p>Resolution: about 1 ms (more when the machine is loaded and the refresher runs late). Epoch
 * milliseconds, so the dumps of ranks in different JVMs and on different machines line up as far as
 * their clocks do.
 */
public final class CoarseClock {

    private static volatile long nowMillis = System.currentTimeMillis();

    static {
        Thread refresher = Thread.ofPlatform().daemon().name("symmem4j-coarse-clock").unstarted(() -> {
            while (true) {
                nowMillis = System.currentTimeMillis();
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    return; // nobody interrupts a daemon of ours; if someone does, stop refreshing
                }
            }
        });
        refresher.start();
    }

    private CoarseClock() {
    }

    /** {@return epoch milliseconds as of the last refresh (at most about 1 ms old)} */
    public static long millis() {
        return nowMillis;
    }
}
