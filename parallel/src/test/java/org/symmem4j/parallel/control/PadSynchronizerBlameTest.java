package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Who a timed-out wait blames. Ranks wait in a chain as a ring does when one rank stops: rank 0 waits
 * for rank 1, which waits for rank 2, which neither arrives nor waits; rank 3 waits for rank 2 too.
 * Rank 0 starts waiting first, so its deadline passes first: it must blame rank 2, not rank 1 (which
 * only waits as well), and so must everyone else, through the abort rank 0 raises.
 */
class PadSynchronizerBlameTest {

    private static final Duration TIMEOUT = Duration.ofMillis(2_000);

    /** Each rank's waits: rank -> {peer it waits for (-1: none, it just sits there), delay before waiting ms}. */
    private static List<Throwable> run(int[][] plan) throws Exception {
        int n = plan.length;
        List<Throwable> thrown = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            thrown.add(null);
        }
        try (InJvmWorld world = InJvmWorld.create(n, GroupOptions.defaults().withTimeout(TIMEOUT));
             Arena arena = Arena.ofShared()) {
            MemorySegment[] pads = new MemorySegment[n];
            for (int r = 0; r < n; r++) {
                pads[r] = arena.allocate(SignalPadLayout.padBytes(n, 4), 4096);
                SignalPadLayout.initialize(pads[r], n, r, 4, 0);
            }
            CountDownLatch waitersDone = new CountDownLatch(n);
            CountDownLatch release = new CountDownLatch(1);
            List<Thread> threads = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                int rank = r;
                threads.add(Thread.ofPlatform().name("blame-rank-" + r).start(() -> {
                    try {
                        Group group = world.join(rank);
                        PadSynchronizer sync = new PadSynchronizer(group, pads);
                        sync.beginOp("all-reduce", 7);
                        Thread.sleep(plan[rank][1]);
                        if (plan[rank][0] < 0) {
                            waitersDone.countDown();
                            release.await(); // alive, but neither arriving nor waiting: a stopped process
                        } else {
                            sync.awaitStep(plan[rank][0], 1, "ring reduce-scatter");
                        }
                    } catch (Throwable t) {
                        thrown.set(rank, t);
                    } finally {
                        if (plan[rank][0] >= 0) {
                            waitersDone.countDown();
                        }
                    }
                }));
            }
            boolean ended = waitersDone.await(TIMEOUT.toMillis() * 5 + 10_000, TimeUnit.MILLISECONDS);
            release.countDown();
            for (Thread t : threads) {
                t.join(10_000);
            }
            if (!ended) {
                fail("waiters still waiting long after the timeout");
            }
        }
        return thrown;
    }

    @Test
    void aWaiterWhosePeerWaitsInTurnBlamesTheRankThatNeitherArrivesNorWaits() throws Exception {
        // rank 0 -> 1 -> 2 (stopped) <- 3; rank 0 waits first, so it times out first
        List<Throwable> thrown = run(new int[][] {{1, 0}, {2, 400}, {-1, 0}, {2, 400}});
        for (int r : new int[] {0, 1, 3}) {
            PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown.get(r), "rank " + r);
            assertEquals(List.of(2), e.missingRanks(), "rank " + r + " must blame rank 2 only: " + e.getMessage());
        }
        String first = thrown.get(0).getMessage();
        assertTrue(first.contains("waiting for rank 1") && first.contains("held up by rank 2"), first);
    }

    @Test
    void ranksWaitingForEachOtherAreBlamedAsBefore() throws Exception {
        // a cycle: nobody is behind; every path leads back to a waiting rank, so the direct peer is named
        List<Throwable> thrown = run(new int[][] {{1, 0}, {0, 400}});
        PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown.get(0));
        assertEquals(List.of(1), e.missingRanks(), e.getMessage());
        assertTrue(e.getMessage().contains("timed out after PT2S waiting for rank 1"), e.getMessage());
    }

    @Test
    void aMissingRankThatDoesNotWaitIsBlamedDirectly() throws Exception {
        List<Throwable> thrown = run(new int[][] {{1, 0}, {-1, 0}, {1, 400}});
        for (int r : new int[] {0, 2}) {
            PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown.get(r), "rank " + r);
            assertEquals(List.of(1), e.missingRanks(), e.getMessage());
        }
    }
}
