package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
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
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A rank that fails locally — inside a collective, or just before one — poisons its group at once:
 * every peer throws naming it long before the timeout (here 60 s), and teardown after the failure
 * does not wait again. Bounds are generous (a third of the timeout) so a loaded machine cannot
 * fail them; the old behaviour took the whole timeout.
 */
class FailFastTest {

    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    /** Each rank's outcome: what it threw (null if nothing). */
    private record Outcome(Throwable thrown) {
    }

    private interface RankBody {
        void run(int rank, Group group, Communicator comm, SymmetricMemory mem) throws Exception;
    }

    private static List<Outcome> run(int worldSize, RankBody body) throws InterruptedException {
        List<Outcome> outcomes = new ArrayList<>();
        Throwable[] thrown = new Throwable[worldSize];
        try (InJvmWorld world = InJvmWorld.create(worldSize, GroupOptions.defaults().withTimeout(TIMEOUT))) {
            CountDownLatch done = new CountDownLatch(worldSize);
            for (int r = 0; r < worldSize; r++) {
                int rank = r;
                Thread.ofPlatform().name("failfast-rank-" + r).start(() -> {
                    try (Group group = world.join(rank);
                         Communicator comm = Communicator.create(group);
                         SymmetricMemory mem = SymmetricMemory.allocate(group, 1 << 16)) {
                        body.run(rank, group, comm, mem);
                    } catch (Throwable t) {
                        thrown[rank] = t;
                    } finally {
                        done.countDown();
                    }
                });
            }
            if (!done.await(TIMEOUT.multipliedBy(2).toSeconds(), TimeUnit.SECONDS)) {
                fail("ranks still running at twice the timeout: a wait is unbounded");
            }
        }
        for (int r = 0; r < worldSize; r++) {
            outcomes.add(new Outcome(thrown[r]));
        }
        return outcomes;
    }

    private static void assertPeersNamePromptly(List<Outcome> outcomes, int culprit,
                                                PeerTimeoutException.Reason... reasons) {
        for (int r = 0; r < outcomes.size(); r++) {
            if (r == culprit) {
                continue;
            }
            PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, outcomes.get(r).thrown(), "rank " + r);
            assertTrue(e.getMessage().contains("rank " + culprit) || e.getMessage().contains("rank=" + culprit),
                    "rank " + r + "'s error must name rank " + culprit + ": " + e.getMessage());
            // the reason is what proves promptness: a rank that had waited out the timeout would report
            // DEADLINE_PASSED, which no caller accepts (no elapsed-time bound: a loaded machine stretches it)
            assertTrue(List.of(reasons).contains(e.reason()), "rank " + r + " reason " + e.reason() + ": " + e.getMessage());
        }
    }

    enum Staged { TWO_SHOT, RING, ONE_SHOT }

    /**
     * A failure no rank can see before the collective: rank 2's buffer is fine when it arrives, and
     * another thread of its process frees it while rank 2 waits at the entry barrier (its peers are
     * held back until then). Rank 2 fails writing its result, inside the collective, and poisons the
     * group. (A buffer already unusable when the call starts is refused on every rank instead:
     * {@link UnusableBufferTest}.)
     */
    @ParameterizedTest(name = "{0}")
    @EnumSource(Staged.class)
    void aRankWhoseBufferIsFreedDuringTheCollectivePoisonsTheGroupInsideIt(Staged algorithm) throws Exception {
        CountDownLatch freed = new CountDownLatch(1);
        List<Outcome> outcomes = run(4, (rank, group, comm, mem) -> {
            MemorySegment buf = Arena.ofAuto().allocate(4L * 8192, 64);
            for (int it = 0; it < 20; it++) {
                comm.allReduce(buf, 8192, DType.FLOAT32, ReduceOp.SUM, Algorithm.valueOf(algorithm.name()));
            }
            if (rank == 2) {
                Arena doomed = Arena.ofShared();
                MemorySegment dst = doomed.allocate(4L * 8192, 64);
                Thread rankThread = Thread.currentThread();
                Thread.ofPlatform().name("frees-rank-2-buffer").start(() -> {
                    // parked: rank 2 is at the entry barrier, past its argument checks, touching no buffer
                    while (rankThread.getState() != Thread.State.TIMED_WAITING && rankThread.getState() != Thread.State.WAITING) {
                        Thread.onSpinWait();
                    }
                    doomed.close();
                    freed.countDown();
                });
                comm.allReduce(dst, 8192, DType.FLOAT32, ReduceOp.SUM, Algorithm.valueOf(algorithm.name()));
            } else {
                assertTrue(freed.await(TIMEOUT.toSeconds(), TimeUnit.SECONDS), "rank 2's buffer freed");
                comm.allReduce(buf, 8192, DType.FLOAT32, ReduceOp.SUM, Algorithm.valueOf(algorithm.name()));
            }
            comm.allReduce(buf, 8192, DType.FLOAT32, ReduceOp.SUM, Algorithm.valueOf(algorithm.name()));
        });
        Throwable own = outcomes.get(2).thrown();
        assertTrue(own instanceof IllegalStateException && own.getMessage().contains("closed"),
                "rank 2 sees its own error: " + own);
        assertPeersNamePromptly(outcomes, 2, PeerTimeoutException.Reason.PEER_ABORTED);
        for (int r : new int[] {0, 1, 3}) {
            assertTrue(outcomes.get(r).thrown().getMessage().contains("failed inside all-reduce#20"),
                    outcomes.get(r).thrown().getMessage());
        }
    }

    @Test
    void aRankThatFailsJustBeforeACollectiveAndClosesIsNamedAtOnce() throws Exception {
        List<Outcome> outcomes = run(3, (rank, group, comm, mem) -> {
            for (int it = 0; it < 10; it++) {
                comm.allReduce(mem, 0, 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
            }
            if (rank == 1) {
                throw new IllegalStateException("rank 1's own code fails before all-reduce #10");
            }
            comm.allReduce(mem, 0, 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
        });
        assertEquals("rank 1's own code fails before all-reduce #10", outcomes.get(1).thrown().getMessage());
        assertPeersNamePromptly(outcomes, 1, PeerTimeoutException.Reason.PEER_LEFT,
                PeerTimeoutException.Reason.PEER_ABORTED);
    }

    @Test
    void groupAbortReachesEveryMemoryAndTeardownDoesNotWaitAgain() throws Exception {
        List<Outcome> outcomes = run(3, (rank, group, comm, mem) -> {
            try (SymmetricMemory second = SymmetricMemory.allocate(group, 4096)) {
                comm.barrier();
                if (rank == 0) {
                        group.abort("the application gave up");
                    throw new IllegalStateException("rank 0 gives up");
                }
                // peers wait on the *other* memory's signal: the abort must reach it too
                second.waitSignal(0, 1, 0);
            }
        });
        assertPeersNamePromptly(outcomes, 0, PeerTimeoutException.Reason.PEER_ABORTED);
        assertTrue(outcomes.get(1).thrown().getMessage().contains("the application gave up"),
                outcomes.get(1).thrown().getMessage());
    }

    /**
     * An abort fails every exchange entered after it, on every rank, also one whose peers have all
     * contributed: rank 0's exchange, failed by its own abort, used to leave its contribution behind,
     * and rank 1, arriving later, completed the exchange as if nothing had happened (a GPU memory's
     * close then passed its barrier after an abort).
     */
    @Test
    void anExchangeEnteredAfterAnAbortFailsOnEveryRank() {
        CountDownLatch rank0Done = new CountDownLatch(1);
        List<String> messages = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(TIMEOUT), group -> {
            try {
                if (group.rank() == 0) {
                    group.abort("test: rank 0 gives up");
                } else {
                    assertTrue(rank0Done.await(TIMEOUT.toSeconds(), TimeUnit.SECONDS), "rank 0 finished");
                }
                return assertThrows(PeerTimeoutException.class,
                        () -> group.allGatherBytes("after-the-abort", new byte[] {(byte) group.rank()})).getMessage();
            } finally {
                if (group.rank() == 0) {
                    rank0Done.countDown();
                }
            }
        });
        for (String m : messages) {
            assertTrue(m.contains("group aborted") && m.contains("rank 0 gives up"), m);
        }
    }

    @Test
    void afterADeadlineEveryRankTearsDownWithinOneTimeout() throws Exception {
        Duration timeout = Duration.ofSeconds(3);
        long[] start = new long[1];
        long[] ends = new long[3];
        Throwable[] thrown = new Throwable[3];
        try (InJvmWorld world = InJvmWorld.create(3, GroupOptions.defaults().withTimeout(timeout))) {
            CountDownLatch done = new CountDownLatch(3);
            CountDownLatch othersEnded = new CountDownLatch(2); // ranks 0 and 2, torn down
            start[0] = System.nanoTime();
            for (int r = 0; r < 3; r++) {
                int rank = r;
                Thread.ofPlatform().start(() -> {
                    try (Group group = world.join(rank);
                         Communicator comm = Communicator.create(group);
                         SymmetricMemory a = SymmetricMemory.allocate(group, 4096);
                         SymmetricMemory b = SymmetricMemory.allocate(group, 4096);
                         SymmetricMemory c = SymmetricMemory.allocate(group, 4096)) {
                        if (rank == 1) {
                            // alive and silent until the others have torn down (not a fixed 2 timeouts of idle
                            // time), then leaves; bounded, in case they never end (the await below then fails)
                            othersEnded.await(60, TimeUnit.SECONDS);
                            return;
                        }
                        comm.barrier();
                    } catch (Throwable t) {
                        thrown[rank] = t;
                    } finally {
                        ends[rank] = System.nanoTime();
                        if (rank != 1) {
                            othersEnded.countDown();
                        }
                        done.countDown();
                    }
                });
            }
            assertTrue(done.await(60, TimeUnit.SECONDS));
        }
        for (int r : new int[] {0, 2}) {
            assertInstanceOf(PeerTimeoutException.class, thrown[r], "rank " + r);
            Duration took = Duration.ofNanos(ends[r] - start[0]);
            // one timeout for the barrier; the four closes (3 memories, the communicator) add nothing like another
            assertTrue(took.compareTo(timeout.plus(timeout.dividedBy(2))) < 0,
                    "rank " + r + " ended " + took + " after the start; timeout " + timeout);
        }
    }
}
