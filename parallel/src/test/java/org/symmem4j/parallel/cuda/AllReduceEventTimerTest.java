package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;

/**
 * {@link AllReduceEventTimer}'s harvesting over a fake stream: a clock of GPU time that the test advances, on which
 * each recorded event completes when the work enqueued before it has run. Checks the reported durations, bytes and
 * algorithms against the work enqueued, the order, that nothing pending is reported or waited for, the pool running
 * full (untimed, counted, then timing again), a begin without an end, and stopping. No GPU.
 */
class AllReduceEventTimerTest {

    /** One stream's events on a fake GPU clock: work is enqueued in nanoseconds of GPU time, run as the clock advances. */
    static final class FakeStream implements AllReduceEventTimer.EventSource {
        /** GPU time at which everything enqueued so far will have run. */
        long enqueuedUntil;
        /** GPU time now: events whose work ends by then are done. */
        long now;
        final long[] completesAt;
        int records;
        int queries;
        boolean closed;

        FakeStream(int events) {
            completesAt = new long[events];
            Arrays.fill(completesAt, -1);
        }

        void enqueueWork(long nanos) {
            enqueuedUntil += nanos;
        }

        @Override
        public void record(int event) {
            records++;
            completesAt[event] = enqueuedUntil;
        }

        @Override
        public boolean done(int event) {
            queries++;
            return completesAt[event] <= now;
        }

        @Override
        public float elapsedMillis(int start, int end) {
            if (completesAt[start] < 0 || completesAt[end] > now || completesAt[start] > completesAt[end]) {
                throw new IllegalStateException("elapsedMillis on events not both completed in order: " + start + ", " + end);
            }
            return (float) ((completesAt[end] - completesAt[start]) / 1e6);
        }

        @Override
        public void close() {
            closed = true;
        }
    }

    record Sample(Algorithm algorithm, long bytes, long nanos) {
    }

    private final List<Sample> samples = new ArrayList<>();

    private AllReduceEventTimer timer(FakeStream stream, int pairs) {
        return new AllReduceEventTimer(stream, pairs, (a, b, n) -> samples.add(new Sample(a, b, n)));
    }

    /** An all-reduce as the communicator times it: begin, enqueue its work, end. */
    private static boolean allReduce(AllReduceEventTimer t, FakeStream s, long gpuNanos, Algorithm a, long bytes) {
        boolean timed = t.begin();
        s.enqueueWork(gpuNanos);
        if (timed) {
            t.end(a, bytes);
        }
        return timed;
    }

    @Test
    void reportsFinishedPairsInOrderWithTheirGpuTimeAndNothingPending() {
        FakeStream s = new FakeStream(16);
        AllReduceEventTimer t = timer(s, 8);
        s.enqueueWork(50_000); // the backward pass before the first all-reduce: not in its time
        assertTrue(allReduce(t, s, 5_000, Algorithm.ONE_SHOT, 1024));
        s.enqueueWork(100_000); // the optimizer step between them
        assertTrue(allReduce(t, s, 12_000, Algorithm.TWO_SHOT, 1 << 20));
        assertTrue(allReduce(t, s, 250_000, Algorithm.NCCL, 64 << 20));
        assertEquals(0, t.harvest(), "the GPU has run nothing yet");
        assertEquals(List.of(), samples);
        assertEquals(3, t.pending());

        s.now = 50_000 + 5_000 + 100_000 + 12_000; // the second has just finished, the third not
        assertEquals(2, t.harvest());
        assertEquals(List.of(new Sample(Algorithm.ONE_SHOT, 1024, 5_000), new Sample(Algorithm.TWO_SHOT, 1 << 20, 12_000)),
                samples);
        assertEquals(1, t.pending());
        assertEquals(0, t.harvest(), "the third is still running");

        s.now = Long.MAX_VALUE;
        assertEquals(1, t.harvest());
        assertEquals(new Sample(Algorithm.NCCL, 64 << 20, 250_000), samples.get(2));
        assertEquals(0, t.pending());
        assertEquals(0, t.harvest());
        assertEquals(0, t.dropped());
        t.close();
        assertTrue(s.closed);
    }

    @Test
    void aFullPoolLeavesAllReducesUntimedAndCountedThenTimesAgain() {
        FakeStream s = new FakeStream(8);
        AllReduceEventTimer t = timer(s, 4);
        for (int i = 0; i < 4; i++) {
            assertTrue(allReduce(t, s, 1_000 * (i + 1), Algorithm.ONE_SHOT, i));
        }
        int recordsBefore = s.records;
        assertFalse(allReduce(t, s, 9_000, Algorithm.ONE_SHOT, 99), "every pair pending: untimed");
        assertFalse(allReduce(t, s, 9_000, Algorithm.ONE_SHOT, 99));
        assertEquals(recordsBefore, s.records, "no event recorded over a pending pair");
        assertEquals(2, t.dropped());
        assertEquals(List.of(), samples, "nothing was waited for");

        s.now = 1_000 + 2_000; // the first two finished
        assertTrue(allReduce(t, s, 7_000, Algorithm.TWO_SHOT, 7), "begin harvested two pairs and timed this one");
        assertEquals(List.of(new Sample(Algorithm.ONE_SHOT, 0, 1_000), new Sample(Algorithm.ONE_SHOT, 1, 2_000)), samples);
        s.now = Long.MAX_VALUE;
        assertEquals(3, t.harvest());
        assertEquals(List.of(new Sample(Algorithm.ONE_SHOT, 2, 3_000), new Sample(Algorithm.ONE_SHOT, 3, 4_000),
                new Sample(Algorithm.TWO_SHOT, 7, 7_000)), samples.subList(2, 5));
        assertEquals(2, t.dropped());
    }

    @Test
    void beginHarvestsOnlyOnceHalfThePairsArePending() {
        FakeStream s = new FakeStream(16);
        AllReduceEventTimer t = timer(s, 8);
        s.now = Long.MAX_VALUE; // everything finishes at once
        for (int i = 0; i < 4; i++) {
            allReduce(t, s, 1_000, Algorithm.ONE_SHOT, 4);
        }
        assertEquals(0, s.queries, "fewer than half pending: begin queried no event");
        assertEquals(List.of(), samples);
        allReduce(t, s, 1_000, Algorithm.ONE_SHOT, 4);
        assertEquals(4, samples.size(), "the fifth begin found four pending and reported them");
        assertEquals(1, t.pending());
    }

    @Test
    void aBeginWithoutAnEndLeavesItsPairToTheNextAllReduce() {
        FakeStream s = new FakeStream(4);
        AllReduceEventTimer t = timer(s, 2);
        assertTrue(t.begin());
        s.enqueueWork(3_000); // the all-reduce enqueued part of its work, then threw: no end
        assertEquals(0, t.pending());
        assertTrue(allReduce(t, s, 6_000, Algorithm.NCCL, 8));
        s.now = Long.MAX_VALUE;
        assertEquals(1, t.harvest());
        assertEquals(List.of(new Sample(Algorithm.NCCL, 8, 6_000)), samples, "its start event was recorded again");
    }

    @Test
    void stopDropsWhatIsPendingAndANewListenerGetsTheRest() {
        FakeStream s = new FakeStream(8);
        AllReduceEventTimer t = timer(s, 4);
        allReduce(t, s, 1_000, Algorithm.ONE_SHOT, 1);
        List<Sample> other = new ArrayList<>();
        t.listener((a, b, n) -> other.add(new Sample(a, b, n)));
        s.now = Long.MAX_VALUE;
        assertEquals(1, t.harvest());
        assertEquals(List.of(new Sample(Algorithm.ONE_SHOT, 1, 1_000)), other);
        allReduce(t, s, 1_000, Algorithm.ONE_SHOT, 2);
        t.stop();
        assertEquals(0, t.harvest());
        assertEquals(1, other.size());
    }

    @Test
    void aListenerThatThrowsLosesOnlyItsSample() {
        FakeStream s = new FakeStream(8);
        List<Long> seen = new ArrayList<>();
        AllReduceEventTimer t = new AllReduceEventTimer(s, 4, (a, b, n) -> {
            seen.add(b);
            if (b == 1) {
                throw new IllegalStateException("listener failed");
            }
        });
        allReduce(t, s, 1_000, Algorithm.ONE_SHOT, 1);
        allReduce(t, s, 1_000, Algorithm.ONE_SHOT, 2);
        s.now = Long.MAX_VALUE;
        assertThrows(IllegalStateException.class, t::harvest);
        assertEquals(1, t.harvest());
        assertEquals(List.of(1L, 2L), seen);
    }

    @Test
    void rejectsAPoolWithoutPairs() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new AllReduceEventTimer(new FakeStream(0), 0, (a, b, n) -> { }));
        assertTrue(e.getMessage().contains("capacity=0"), e.getMessage());
    }
}
