package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@link RingFillBenchmark}'s fill arithmetic, its pacing file ({@link FillPacer}) and the suite's fork spread. */
class RingFillBenchmarkTest {

    @TempDir
    Path dir;

    @Test
    void fillLevelIsThePercentOfRecordsRoundedToBatches() {
        // 64 B + 8 B header = 72 B records: 1 MiB holds 14563; 25 % = 3640.75 -> 57 batches of 64
        assertEquals(3648, RingFillBenchmark.fillMessages(1 << 20, 64, 25, 64));
        // 75 %: 10922.25 -> 171 batches
        assertEquals(10944, RingFillBenchmark.fillMessages(1 << 20, 64, 75, 64));
        // 1 KiB + 8 = 1032 B records: 1016 of them; 75 % = 762 -> 12 batches
        assertEquals(768, RingFillBenchmark.fillMessages(1 << 20, 1024, 75, 64));
        // 1 % of 1 KiB records is under one batch: one batch
        assertEquals(64, RingFillBenchmark.fillMessages(1 << 20, 1024, 1, 64));
        // 255 B rounds up to 256 + 8: 3971 records, 25 % = 992.75 -> 16 batches
        assertEquals(1024, RingFillBenchmark.fillMessages(1 << 20, 255, 25, 64));
    }

    @Test
    void aWindowThatDoesNotFitTheRingIsRefused() {
        // 99 % of 1016 records of 1 KiB rounds to 1024, over the ring before the 2 batches are added
        var e = assertThrows(IllegalArgumentException.class, () -> RingFillBenchmark.fillMessages(1 << 20, 1024, 99,
                64));
        assertTrue(e.getMessage().contains("capacity=1048576") && e.getMessage().contains("fix:"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> RingFillBenchmark.fillMessages(1 << 20, 64, 0, 64));
        assertThrows(IllegalArgumentException.class, () -> RingFillBenchmark.fillMessages(1 << 20, 64, 100, 64));
    }

    /**
     * RingPairedSuite's flags: 4 KiB throughput cannot hold 75 % (the window does not fit), but a round trip holds no
     * level, so 64 B and 4 KiB round trips pass with the default fills, and a size outside the ring is refused either way.
     */
    @Test
    void theRoundTripChecksItsSizesButNoFillLevel() {
        RingPairedSuite.Flags tput = new RingPairedSuite.Flags();
        tput.sizes = new int[] {64, 4096};
        var e = assertThrows(IllegalArgumentException.class, () -> RingPairedSuite.check(tput));
        assertTrue(e.getMessage().contains("percent=75") && e.getMessage().contains("bytes=4096"), e.getMessage());
        tput.fills = new int[] {25};
        assertEquals(tput, RingPairedSuite.check(tput), "4 KiB throughput at 25 % fits");
        RingPairedSuite.Flags rtt = new RingPairedSuite.Flags();
        rtt.roundTrip = true;
        rtt.sizes = new int[] {64, 4096};
        assertEquals(rtt, RingPairedSuite.check(rtt), "round trips at 64 B and 4 KiB with the default fills");
        rtt.sizes = new int[] {64, RingFillBenchmark.CAPACITY};
        var big = assertThrows(IllegalArgumentException.class, () -> RingPairedSuite.check(rtt));
        assertTrue(big.getMessage().startsWith("--sizes: " + RingFillBenchmark.CAPACITY), big.getMessage());
    }

    @Test
    void bothMappingsOfThePacingFileSeeEachOthersCounters() throws IOException {
        Path file = FillPacer.path(dir.resolve("ring"));
        try (FillPacer producer = FillPacer.create(file, 3648, 64);
             FillPacer consumer = FillPacer.open(file)) {
            assertEquals(3648, consumer.target());
            assertEquals(64, consumer.batch());
            assertEquals(0, consumer.sent());
            producer.publishSent(128);
            assertEquals(128, consumer.sent());
            consumer.publishConsumed(64);
            assertEquals(64, producer.consumed());
            assertFalse(consumer.stopped());
            producer.stop();
            assertTrue(consumer.stopped());
        }
        FillPacer.delete(file);
        assertFalse(Files.exists(file));
    }

    @Test
    void aMissingPacingFileIsNamedWithTheFix() {
        Path file = dir.resolve("none-pace");
        var e = assertThrows(IOException.class, () -> FillPacer.open(file));
        assertTrue(e.getMessage().contains(file.toString()) && e.getMessage().contains("found none")
                && e.getMessage().contains("fix:"), e.getMessage());
    }

    @Test
    void forksSpreadIsTheirRangeOverTheirMean() {
        assertEquals(1.0, RingFillSuite.spread(new double[] {1, 2, 3}), 1e-12);
        assertEquals(0.0, RingFillSuite.spread(new double[] {5, 5}), 1e-12);
    }

    @Test
    void pairedTrialsHoldTwoLanesAndThePeerReadsThemBack() {
        assertEquals(java.util.List.of(RingPair.Kind.SYMMEM_MANY_TO_ONE),
                RingFillBenchmark.kinds(RingPair.Kind.SYMMEM_MANY_TO_ONE, RingFillBenchmark.NONE));
        var both = RingFillBenchmark.kinds(RingPair.Kind.SYMMEM_MANY_TO_ONE, "AGRONA_MANY_TO_ONE");
        assertEquals(java.util.List.of(RingPair.Kind.SYMMEM_MANY_TO_ONE, RingPair.Kind.AGRONA_MANY_TO_ONE), both);
        assertEquals("SYMMEM_MANY_TO_ONE+AGRONA_MANY_TO_ONE", RingFillBenchmark.variant(both));
        assertEquals(both, RingFillBenchmark.parseVariant(RingFillBenchmark.variant(both)));
        assertEquals(java.util.List.of(RingPair.Kind.AGRONA_ONE_TO_ONE), RingFillBenchmark.parseVariant("AGRONA_ONE_TO_ONE"));
        for (String bad : new String[] {"SYMMEM_MANY_TO_ONE", "AERON_MANY_TO_ONE", "nothing"}) {
            var e = assertThrows(IllegalArgumentException.class,
                    () -> RingFillBenchmark.kinds(RingPair.Kind.SYMMEM_MANY_TO_ONE, bad));
            assertTrue(e.getMessage().contains("against=" + bad) && e.getMessage().contains("fix:"), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class,
                () -> RingFillBenchmark.kinds(RingPair.Kind.AERON_ONE_TO_ONE, RingFillBenchmark.NONE));
        assertTrue(RingFillBenchmark.laneFiles(dir.resolve("t"), 1).toString().endsWith("t-lane1"));
        // RingBenchmark's peer: one kind (Aeron's too) or a pair
        assertEquals(java.util.List.of(RingPair.Kind.AERON_MANY_TO_ONE), RingPair.lanes("AERON_MANY_TO_ONE"));
        assertEquals(both, RingPair.lanes("SYMMEM_MANY_TO_ONE+AGRONA_MANY_TO_ONE"));
    }

    @Test
    void eachOfOurKindsIsPairedWithAgronasOfTheSameFamilyAndWrite() {
        assertEquals(RingPair.Kind.AGRONA_MANY_TO_ONE, RingPairedSuite.counterpart(RingPair.Kind.SYMMEM_MANY_TO_ONE));
        assertEquals(RingPair.Kind.AGRONA_ONE_TO_ONE_CLAIM,
                RingPairedSuite.counterpart(RingPair.Kind.SYMMEM_ONE_TO_ONE_CLAIM));
        var e = assertThrows(IllegalArgumentException.class,
                () -> RingPairedSuite.counterpart(RingPair.Kind.AGRONA_MANY_TO_ONE));
        assertTrue(e.getMessage().contains("fix:"), e.getMessage());
    }

    @Test
    void aMachineLevelThatMovesBothSidesCancelsInThePairs() {
        // blocks in ABBA order (ours when recorderOn(k)); ours is 5 % above Agrona's in every pair, while the fork's
        // level jumps between 25 M and 40 M every 4 blocks: the forks' means spread, the paired difference does not
        double[] fork = new double[40];
        for (int k = 0; k < fork.length; k++) {
            double level = (k / 4) % 2 == 0 ? 25e6 : 40e6;
            fork[k] = FlightRecorderPairedBenchmark.recorderOn(k) ? level * 1.05 : level;
        }
        RingPairedSuite.Cell c = RingPairedSuite.cell(RingPair.Kind.SYMMEM_MANY_TO_ONE, RingPair.Kind.AGRONA_MANY_TO_ONE,
                64, 25, java.util.List.of(fork, fork.clone()));
        assertEquals(5.0, c.paired().percent(), 1e-9);
        assertEquals(1.05, c.paired().onMean() / c.paired().offMean(), 1e-12);
        assertEquals(32.5e6, c.agronaForkMeans()[0], 1e-3);
        assertEquals("ours faster (measured)", RingPairedSuite.verdict(c.paired(), false));
        // the same numbers as round-trip p50s (fill 0): lower is better, so 5 % above is "higher"
        RingPairedSuite.Cell rtt = RingPairedSuite.cell(RingPair.Kind.SYMMEM_MANY_TO_ONE,
                RingPair.Kind.AGRONA_MANY_TO_ONE, 64, 0, java.util.List.of(fork));
        assertTrue(rtt.roundTrip());
        assertEquals("ours higher (measured)", RingPairedSuite.verdict(rtt.paired(), true));
        // a round trip's p99 is a cell of its own, a row of its own in the report
        RingPairedSuite.Cell p99 = RingPairedSuite.cell(RingPair.Kind.SYMMEM_MANY_TO_ONE,
                RingPair.Kind.AGRONA_MANY_TO_ONE, 64, 0, 99, java.util.List.of(fork), null);
        RingPairedSuite.Flags flags = new RingPairedSuite.Flags();
        flags.roundTrip = true;
        String md = RingPairedSuite.report(flags, java.util.List.of(rtt, p99));
        assertTrue(md.contains("| many-to-one | round trip p50 | 64 |") && md.contains("| many-to-one | round trip p99 | 64 |")
                && md.contains("round trip p99, 64 B"), md);
        // ours level with Agrona's but for noise of both signs: not decided
        double[] level = new double[40];
        for (int k = 0; k < level.length; k++) {
            level[k] = 30e6 + ((k * 7919) % 13 - 6) * 1e5;
        }
        RingPairedSuite.Cell same = RingPairedSuite.cell(RingPair.Kind.SYMMEM_MANY_TO_ONE,
                RingPair.Kind.AGRONA_MANY_TO_ONE, 64, 25, java.util.List.of(level));
        assertEquals("undecided (an interval spans 0)", RingPairedSuite.verdict(same.paired(), false));
    }

    /**
     * --control: per fork pair, the change's paired Δ against Agrona less the control's. The machine's level differs
     * from fork to fork (and between the two forks of a pair); in every fork ours is 5 % above Agrona's with the change
     * and 10 % above with the control: the effect is -5 points in every pair, whatever the levels, and a round trip
     * calls that lower. Effects of both signs are undecided; a control that is not one symmem4j property is refused.
     */
    @Test
    void theControlForksGiveTheChangesEffectFromAgronaInBoth() {
        java.util.List<double[]> change = new java.util.ArrayList<>();
        java.util.List<double[]> control = new java.util.ArrayList<>();
        for (int pair = 0; pair < 4; pair++) {
            change.add(roundTrips(0.50 + 0.04 * pair, 1.05));
            control.add(roundTrips(0.55 - 0.03 * pair, 1.10));
        }
        RingPairedSuite.Cell a = RingPairedSuite.cell(RingPair.Kind.SYMMEM_ONE_TO_ONE, RingPair.Kind.AGRONA_ONE_TO_ONE,
                64, 0, 50, change, null);
        RingPairedSuite.Cell b = RingPairedSuite.cell(RingPair.Kind.SYMMEM_ONE_TO_ONE, RingPair.Kind.AGRONA_ONE_TO_ONE,
                64, 0, 50, control, "-Dsymmem4j.ring.headerLineFirst=false");
        java.util.List<RingPairedSuite.Effect> effects = RingPairedSuite.effects(java.util.List.of(a, b));
        assertEquals(1, effects.size());
        RingPairedSuite.Effect e = effects.get(0);
        assertEquals(-5.0, e.mean(), 1e-9);
        for (double d : e.effects()) {
            assertEquals(-5.0, d, 1e-9);
        }
        assertEquals("the change lowers it", e.verdict());
        RingPairedSuite.Flags flags = new RingPairedSuite.Flags();
        flags.roundTrip = true;
        flags.control = "-Dsymmem4j.ring.headerLineFirst=false";
        String md = RingPairedSuite.report(flags, java.util.List.of(a, b));
        assertTrue(md.contains("### The change against its control (-Dsymmem4j.ring.headerLineFirst=false)")
                && md.contains("| +5.00 % | +10.00 % | -5.00 (-5.00 … -5.00) | the change lowers it |")
                && md.contains("symmem4j offer [-Dsymmem4j.ring.headerLineFirst=false]"), md);
        // one pair better, one worse: no verdict
        RingPairedSuite.Cell worse = RingPairedSuite.cell(RingPair.Kind.SYMMEM_ONE_TO_ONE,
                RingPair.Kind.AGRONA_ONE_TO_ONE, 64, 0, 50, java.util.List.of(roundTrips(0.5, 1.05),
                        roundTrips(0.5, 1.10)), null);
        RingPairedSuite.Cell mixed = RingPairedSuite.cell(RingPair.Kind.SYMMEM_ONE_TO_ONE,
                RingPair.Kind.AGRONA_ONE_TO_ONE, 64, 0, 50, java.util.List.of(roundTrips(0.5, 1.10),
                        roundTrips(0.5, 1.05)), "-Dsymmem4j.ring.headerLineFirst=false");
        assertEquals("undecided (the interval spans 0)", RingPairedSuite.Effect.of(worse, mixed).verdict());
        RingPairedSuite.Flags bad = new RingPairedSuite.Flags();
        bad.control = "symmem4j.ring.headerLineFirst=false";
        var refused = assertThrows(IllegalArgumentException.class, () -> RingPairedSuite.check(bad));
        assertTrue(refused.getMessage().contains("fix: e.g. --control -Dsymmem4j.ring.headerLineFirst=false"),
                refused.getMessage());
        bad.control = "-Dsymmem4j.ring.headerLineFirst=false";
        assertEquals(bad, RingPairedSuite.check(bad));
    }

    /** 20 pairs of blocks in ABBA order: Agrona's p50 {@code level} µs, ours {@code ratio} times it. */
    private static double[] roundTrips(double level, double ratio) {
        double[] fork = new double[40];
        for (int k = 0; k < fork.length; k++) {
            fork[k] = FlightRecorderPairedBenchmark.recorderOn(k) ? level * ratio : level;
        }
        return fork;
    }

    @Test
    void theIdleStrategyIsPauseOrNoopAndAnythingElseIsRefused() {
        assertTrue(RingPair.pauseWhenIdle(null));
        assertTrue(RingPair.pauseWhenIdle("pause"));
        assertFalse(RingPair.pauseWhenIdle(" noop "));
        var e = assertThrows(IllegalArgumentException.class, () -> RingPair.pauseWhenIdle("busy"));
        assertTrue(e.getMessage().contains("=busy expected pause or noop") && e.getMessage().contains("fix:"),
                e.getMessage());
    }

    @Test
    void thePairedPeerPollsTheActiveLaneOrEveryLaneAndAnythingElseIsRefused() {
        assertTrue(RingPair.peerPollsActiveLane(null));
        assertTrue(RingPair.peerPollsActiveLane("active"));
        assertFalse(RingPair.peerPollsActiveLane(" all "));
        var e = assertThrows(IllegalArgumentException.class, () -> RingPair.peerPollsActiveLane("first"));
        assertTrue(e.getMessage().contains("=first expected active or all") && e.getMessage().contains("fix:"),
                e.getMessage());
    }

    /**
     * A lane that delivers its scripted bursts, one per poll that finds one due, and counts its polls; its last
     * delivery is the STOP.
     */
    private static final class ScriptedLane extends RingPair {
        private final java.util.ArrayDeque<Integer> dueAtPoll = new java.util.ArrayDeque<>();
        private final boolean[] stop;
        private final int lane;
        int polls;
        int delivered;

        ScriptedLane(boolean[] stop, int lane, int... dueAtPolls) {
            this.stop = stop;
            this.lane = lane;
            for (int d : dueAtPolls) {
                dueAtPoll.add(d);
            }
        }

        @Override
        boolean send(int type, int length) {
            return true;
        }

        @Override
        int receive(int limit) {
            polls++;
            if (dueAtPoll.isEmpty() || polls < dueAtPoll.peek()) {
                return 0;
            }
            dueAtPoll.poll();
            delivered++;
            if (dueAtPoll.isEmpty()) {
                stop[lane] = true;
            }
            return 1;
        }

        @Override
        public void close() {
        }
    }

    @Test
    void thePairedPeerServesTheLaneThatDeliveredLastAndFindsTheOtherWithinItsPeriod() {
        boolean[] stop = new boolean[2];
        int[] block = new int[201];
        for (int i = 0; i < block.length; i++) {
            block[i] = i + 1; // lane 0 delivers on each of its first 201 polls, the last its STOP
        }
        ScriptedLane lane0 = new ScriptedLane(stop, 0, block);
        ScriptedLane lane1 = new ScriptedLane(stop, 1, 1); // lane 1's STOP, due whenever it is first polled
        RingPair.serveActiveLane(new RingPair[] {lane0, lane1}, stop);
        assertEquals(201, lane0.delivered);
        assertEquals(1, lane1.delivered);
        // while lane 0 delivers, lane 1 is not polled at all (polled in turn it would be, 201 times); once lane 0 is
        // empty, lane 1 is polled after OTHER_LANES_EVERY empty polls of it, and the peer returns after both STOPs
        assertEquals(1, lane1.polls);
        assertEquals(201 + RingPair.OTHER_LANES_EVERY, lane0.polls);
    }
}
