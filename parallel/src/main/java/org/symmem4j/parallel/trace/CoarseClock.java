package org.symmem4j.parallel.trace;

import java.lang.ref.WeakReference;
import java.util.concurrent.CopyOnWriteArrayList;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A coarse clock that ticks: one daemon thread reads the wall clock every millisecond and hands it to each registered
 * {@link Listener}, which lets a hot path be timed without reading any clock: the listener samples the counters the hot
 * path bumps anyway (the flight recorder's collectives, {@code FlightRecorderTicks}), so a collective is dated by the
 * first tick that saw it, about 1 ms late, for no instruction of its own. (Until 2026-11-30 the hot path read a field
 * this thread refreshed, as Agrona's {@code CachedEpochClock} is read; that read and the stamps around it cost about
 * 1 % of a 1 KiB all-reduce.) The thread starts on first use and is shared by the whole JVM.
 *
 * <p>Resolution: about 1 ms (more when the machine is loaded and the thread runs late). Epoch milliseconds, so the
 * dumps of ranks in different JVMs and on different machines line up as far as their clocks do.
 */
public final class CoarseClock {

    /**
     * Called by the refresher thread after each refresh, off every rank's thread. Listeners are held weakly: one that
     * nothing else references is dropped, so a listener owned by a communicator goes with it.
     */
    @FunctionalInterface
    public interface Listener {
        /**
         * One tick.
         *
         * @param nowMillis the wall clock just read, epoch milliseconds
         */
        void tick(long nowMillis);
    }

    private static final Logger LOG = LoggerFactory.getLogger(CoarseClock.class);
    private static final CopyOnWriteArrayList<WeakReference<Listener>> LISTENERS = new CopyOnWriteArrayList<>();

    static {
        Thread refresher = Thread.ofPlatform().daemon().name("symmem4j-coarse-clock").unstarted(() -> {
            while (true) {
                long now = System.currentTimeMillis();
                for (WeakReference<Listener> ref : LISTENERS) {
                    Listener l = ref.get();
                    if (l == null) {
                        LISTENERS.remove(ref);
                        continue;
                    }
                    try {
                        l.tick(now);
                    } catch (RuntimeException | Error e) {
                        // a listener that throws would throw every millisecond: dropped once, said once
                        LISTENERS.remove(ref);
                        LOG.warn("{} threw and no longer receives ticks: {}", l, e.toString());
                    }
                }
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

    /**
     * Registers {@code listener} for every tick from now on, weakly held (keep a reference to it as long as it
     * should tick).
     *
     * @param listener what to call
     */
    public static void addListener(Listener listener) {
        LISTENERS.add(new WeakReference<>(java.util.Objects.requireNonNull(listener, "listener")));
    }
}
