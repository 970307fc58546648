package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * The background reader on its own, stressed with random delays on both sides, random buffer sizes,
 * and a taker that stops at a random point: batches arrive complete and in order, an iterator
 * failure arrives after the batches before it, and once close() returns the iterator is never
 * called again.
 */
class BatchPrefetcherTest {

    /** A counting source with random delays that notes any call after close() returned. */
    private static final class Source implements Supplier<Object> {
        final int batches;
        final int failAt;
        final SplittableRandom rnd;
        final AtomicInteger calls = new AtomicInteger();
        final AtomicBoolean closed = new AtomicBoolean();
        final AtomicInteger callsAfterClose = new AtomicInteger();
        final RuntimeException failure = new IllegalStateException("unreadable");

        Source(int batches, int failAt, long seed) {
            this.batches = batches;
            this.failAt = failAt;
            this.rnd = new SplittableRandom(seed);
        }

        @Override
        public Object get() {
            if (closed.get()) {
                callsAfterClose.incrementAndGet();
            }
            int i = calls.getAndIncrement();
            LockSupport.parkNanos(rnd.nextInt(0, 50_000));
            if (i == failAt) {
                throw failure;
            }
            return i < batches ? Integer.valueOf(i) : null;
        }
    }

    @Test
    void batchesArriveInOrderAndCloseStopsTheReaderWherever() {
        SplittableRandom rnd = new SplittableRandom(99);
        for (int trial = 0; trial < 300; trial++) {
            int batches = rnd.nextInt(0, 25);
            int capacity = rnd.nextInt(1, 5);
            int take = rnd.nextInt(0, batches + 2); // sometimes past the end
            Source source = new Source(batches, -1, trial);
            BatchPrefetcher p = new BatchPrefetcher(source, capacity, Duration.ofSeconds(10));
            int taken = 0;
            try {
                for (; taken < take; taken++) {
                    Object b = p.next();
                    if (taken >= batches) {
                        assertNull(b, "trial " + trial + ": the end after " + batches + " batches");
                        assertNull(p.next(), "and it stays the end");
                        break;
                    }
                    assertEquals(taken, b, "trial " + trial + ": batches in order");
                    LockSupport.parkNanos(rnd.nextInt(0, 50_000));
                }
            } finally {
                p.close();
                source.closed.set(true);
            }
            LockSupport.parkNanos(200_000);
            assertEquals(0, source.callsAfterClose.get(), "trial " + trial + ": the iterator was read after close()");
            assertTrue(source.calls.get() <= Math.min(batches + 1, taken + capacity + 1),
                    "trial " + trial + ": read " + source.calls.get() + " with " + taken + " taken and capacity " + capacity);
        }
    }

    @Test
    void aFailureArrivesAfterTheBatchesBeforeItAsTheIteratorsOwnException() {
        for (int failAt = 0; failAt < 6; failAt++) {
            Source source = new Source(10, failAt, failAt);
            try (BatchPrefetcher p = new BatchPrefetcher(source, 2, Duration.ofSeconds(10))) {
                for (int i = 0; i < failAt; i++) {
                    assertEquals(i, p.next());
                }
                RuntimeException e = assertThrows(RuntimeException.class, p::next);
                assertSame(source.failure, e, "the iterator's own exception");
                assertTrue(e.getSuppressed()[e.getSuppressed().length - 1].getMessage().contains("reading batch " + failAt));
                assertNull(p.next(), "nothing after the failure");
            }
            assertEquals(failAt + 1, source.calls.get(), "the reader stopped at the failure");
        }
    }
}
