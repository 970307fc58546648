package org.symmem4j.parallel.trace;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** The clock's ticks: what the flight recorder's times come from (no timing is asserted, only what is delivered). */
class CoarseClockTest {

    @Test
    void aListenerGetsWallClockTicksThatNeverGoBack() throws InterruptedException {
        CountDownLatch ticks = new CountDownLatch(20);
        AtomicLong last = new AtomicLong();
        AtomicInteger backwards = new AtomicInteger();
        long before = System.currentTimeMillis();
        CoarseClock.Listener listener = now -> {
            if (now < last.getAndSet(now)) {
                backwards.incrementAndGet();
            }
            ticks.countDown();
        };
        CoarseClock.addListener(listener);
        assertTrue(ticks.await(60, TimeUnit.SECONDS), "20 ticks within a minute (the clock thread runs every ms)");
        assertEquals(0, backwards.get(), "ticks went back");
        assertTrue(last.get() >= before && last.get() <= System.currentTimeMillis(), "epoch ms: " + last.get());
        reachabilityFence(listener);
    }

    /** A listener that throws would throw every millisecond: it is dropped after its first throw. */
    @Test
    void aListenerThatThrowsIsDroppedAndTheOthersKeepTicking() throws InterruptedException {
        AtomicInteger calls = new AtomicInteger();
        CoarseClock.Listener throwing = now -> {
            calls.incrementAndGet();
            throw new IllegalStateException("a broken listener");
        };
        CountDownLatch others = new CountDownLatch(50);
        CoarseClock.Listener counting = now -> others.countDown();
        CoarseClock.addListener(throwing);
        CoarseClock.addListener(counting);
        assertTrue(others.await(60, TimeUnit.SECONDS), "the other listener keeps ticking");
        assertEquals(1, calls.get(), "called once, then dropped");
        reachabilityFence(throwing);
        reachabilityFence(counting);
    }

    private static void reachabilityFence(Object o) {
        java.lang.ref.Reference.reachabilityFence(o); // held weakly by the clock: keep it until here
    }
}
