package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A rank that stops arriving: every other rank fails with a {@link PeerTimeoutException} naming it,
 * within the timeout, and nothing hangs.
 */
class InJvmFaultTest {

    /** What the faulty rank does at iteration 50, given a latch that opens once every other rank has ended. */
    private interface Misbehaviour {
        void run(CountDownLatch othersEnded);
    }

    /** Runs all-reduces until {@code faultyRank} misbehaves at iteration 50; returns what each rank threw. */
    private static List<Throwable> runUntilFault(int worldSize, int faultyRank, Duration timeout, Misbehaviour misbehave) {
        List<Throwable> thrown = new ArrayList<>();
        for (int r = 0; r < worldSize; r++) {
            thrown.add(null);
        }
        try (InJvmWorld world = InJvmWorld.create(worldSize, GroupOptions.defaults().withTimeout(timeout))) {
            CountDownLatch done = new CountDownLatch(worldSize);
            CountDownLatch othersEnded = new CountDownLatch(worldSize - 1);
            for (int r = 0; r < worldSize; r++) {
                int rank = r;
                Thread.ofPlatform().name("fault-rank-" + r).start(() -> {
                    try {
                        Group group = world.join(rank);
                        Communicator comm = Communicator.create(group);
                        MemorySegment buf = Arena.ofAuto().allocate(4096);
                        for (int it = 0; it < 1_000_000; it++) {
                            if (rank == faultyRank && it == 50) {
                                misbehave.run(othersEnded);
                            }
                            comm.allReduce(buf, 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.values()[it % 3]);
                        }
                    } catch (Throwable t) {
                        thrown.set(rank, t);
                    } finally {
                        if (rank != faultyRank) {
                            othersEnded.countDown();
                        }
                        done.countDown();
                    }
                });
            }
            try {
                if (!done.await(timeout.multipliedBy(3).toMillis() + 10_000, java.util.concurrent.TimeUnit.MILLISECONDS)) {
                    fail("ranks still running long after the timeout: a wait is unbounded");
                }
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        }
        return thrown;
    }

    @Test
    void aDyingThreadIsNamedByEveryOtherRank() {
        List<Throwable> thrown = runUntilFault(4, 2, Duration.ofSeconds(30), othersEnded -> {
            throw new IllegalStateException("rank 2 crashes");
        });
        assertEquals("rank 2 crashes", thrown.get(2).getMessage());
        for (int r : new int[] {0, 1, 3}) {
            PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown.get(r), "rank " + r);
            assertTrue(e.getMessage().contains("rank 2"), e.getMessage());
            // the death is noticed, not waited out: the reason says so (no elapsed-time bound, which a
            // loaded machine stretches)
            assertNotEquals(PeerTimeoutException.Reason.DEADLINE_PASSED, e.reason(), e.getMessage());
        }
    }

    @Test
    void aStalledRankTimesOutOnEveryOtherRank() {
        Duration timeout = Duration.ofMillis(1500);
        long start = System.nanoTime();
        List<Throwable> thrown = runUntilFault(3, 1, timeout, othersEnded -> {
            try {
                // alive but silent: only the deadline can catch this. Silent until the others have failed (not a
                // fixed 3 timeouts of idle time), bounded by those 3 timeouts in case they never do
                othersEnded.await(timeout.multipliedBy(3).toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Duration took = Duration.ofNanos(System.nanoTime() - start);
        for (int r : new int[] {0, 2}) {
            PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown.get(r), "rank " + r);
            assertTrue(e.getMessage().contains("rank 1"), e.getMessage());
        }
        long deadlineHits = thrown.stream().filter(t -> t instanceof PeerTimeoutException p
                && p.reason() == PeerTimeoutException.Reason.DEADLINE_PASSED).count();
        assertTrue(deadlineHits >= 1, "at least one rank must hit the deadline itself: " + thrown);
        // the stalled rank wakes up to an aborted group and fails too
        assertInstanceOf(PeerTimeoutException.class, thrown.get(1));
        assertTrue(took.compareTo(timeout.multipliedBy(3).plusSeconds(5)) < 0, "took " + took);
    }
}
