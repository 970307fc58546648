package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The acceptance numbers, for p in {2, 4, 8} and m in {p, 2p, 4p}, plus deadlock reports and
 * hand-computed timelines.
 */
class ScheduleSimulatorTest {

    /** Equal forward and backward, backward twice forward, and an arbitrary pair. */
    private static final List<ActionDurations> COMPUTE_TIMES =
            List.of(ActionDurations.unit(), ActionDurations.of(1, 2), ActionDurations.of(3, 5));

    static Stream<Arguments> pipelineSizes() {
        List<Arguments> sizes = new ArrayList<>();
        for (int ranks : new int[] {2, 4, 8}) {
            for (int microbatches : new int[] {ranks, 2 * ranks, 4 * ranks}) {
                sizes.add(Arguments.of(ranks, microbatches));
            }
        }
        return sizes.stream();
    }

    private static SimulationResult.Completed completed(Schedule schedule, PipelineShape shape,
                                                        ActionDurations durations) {
        return ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
    }

    /** Asserts bubbleFraction == numerator / denominator exactly, as integers and as the double. */
    private static void assertBubble(long numerator, long denominator, SimulationResult.Completed run,
                                     String context) {
        assertEquals(numerator * run.totalTime(), denominator * run.totalIdleTime(),
                context + ": idle/total=" + run.totalIdleTime() + "/" + run.totalTime() + " expected="
                        + numerator + "/" + denominator);
        assertEquals((double) numerator / denominator, run.bubbleFraction(), 0.0, context);
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void everyGeneratedScheduleValidatesAndRunsWithoutDeadlock(int ranks, int microbatches) {
        for (int stagesPerRank = 1; stagesPerRank <= 2; stagesPerRank++) {
            PipelineShape shape = new PipelineShape(ranks, microbatches, stagesPerRank);
            List<Schedule> schedules = stagesPerRank == 1
                    ? List.of(ScheduleGenerators.gpipe(ranks, microbatches),
                            ScheduleGenerators.oneFOneB(ranks, microbatches),
                            ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, 1))
                    : List.of(ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank));
            for (Schedule schedule : schedules) {
                assertEquals(List.of(), ScheduleValidator.violations(schedule, shape));
                for (ActionDurations durations : List.of(ActionDurations.unit(), ActionDurations.of(1, 2),
                        new ActionDurations(3, 5, 2))) {
                    SimulationResult result = ScheduleSimulator.simulate(schedule, shape, durations);
                    SimulationResult.Completed run = assertInstanceOf(SimulationResult.Completed.class, result,
                            () -> shape + " " + durations + ": " + result);
                    long busyPerRank = (long) microbatches * stagesPerRank * (durations.forward() + durations.backward());
                    for (SimulationResult.RankStats rank : run.ranks()) {
                        assertEquals(busyPerRank, rank.busyTime());
                        assertEquals(run.makespan(), rank.busyTime() + rank.idleTime());
                    }
                }
            }
        }
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void oneFOneBHoldsAtMostRanksActivations(int ranks, int microbatches) {
        SimulationResult.Completed run = completed(ScheduleGenerators.oneFOneB(ranks, microbatches),
                PipelineShape.of(ranks, microbatches), ActionDurations.unit());
        for (SimulationResult.RankStats rank : run.ranks()) {
            assertEquals(Math.min(ranks - rank.rank(), microbatches), rank.peakInFlightActivations(),
                    "rank=" + rank.rank());
            assertTrue(rank.peakInFlightActivations() <= ranks);
        }
        assertEquals(Math.min(ranks, microbatches), run.rank(0).peakInFlightActivations());
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void gpipeHoldsEveryMicrobatch(int ranks, int microbatches) {
        SimulationResult.Completed run = completed(ScheduleGenerators.gpipe(ranks, microbatches),
                PipelineShape.of(ranks, microbatches), ActionDurations.unit());
        for (SimulationResult.RankStats rank : run.ranks()) {
            assertEquals(microbatches, rank.peakInFlightActivations(), "rank=" + rank.rank());
        }
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void oneFOneBAndGpipeBubbleIsRanksMinusOneOverMicrobatchesPlusRanksMinusOne(int ranks, int microbatches) {
        PipelineShape shape = PipelineShape.of(ranks, microbatches);
        for (ActionDurations durations : COMPUTE_TIMES) {
            long stageTime = durations.forward() + durations.backward();
            for (Schedule schedule : List.of(ScheduleGenerators.oneFOneB(ranks, microbatches),
                    ScheduleGenerators.gpipe(ranks, microbatches))) {
                SimulationResult.Completed run = completed(schedule, shape, durations);
                String context = shape + " " + durations;
                assertEquals((microbatches + ranks - 1) * stageTime, run.makespan(), context);
                assertBubble(ranks - 1, microbatches + ranks - 1, run, context);
            }
        }
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void interleavedBubbleIsRanksMinusOneOverVirtualMicrobatchesPlusRanksMinusOne(int ranks, int microbatches) {
        for (int stagesPerRank = 2; stagesPerRank <= 4; stagesPerRank++) {
            PipelineShape shape = new PipelineShape(ranks, microbatches, stagesPerRank);
            for (ActionDurations durations : COMPUTE_TIMES) {
                long virtualStageTime = durations.forward() + durations.backward();
                String context = shape + " " + durations;
                SimulationResult.Completed run = completed(
                        ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank), shape, durations);
                // the fill and drain still take ranks - 1 steps, but a step is now one virtual stage
                assertEquals((stagesPerRank * microbatches + ranks - 1) * virtualStageTime, run.makespan(), context);
                assertBubble(ranks - 1, stagesPerRank * microbatches + ranks - 1, run, context);
            }
        }
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void interleavingTwoStagesPerRankCutsTheBubbleByAlmostTwo(int ranks, int microbatches) {
        int stagesPerRank = 2;
        PipelineShape shape = new PipelineShape(ranks, microbatches, stagesPerRank);
        for (ActionDurations durations : COMPUTE_TIMES) {
            String context = shape + " " + durations;
            SimulationResult.Completed interleaved = completed(
                    ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank), shape, durations);
            SimulationResult.Completed flat = completed(ScheduleGenerators.oneFOneB(ranks, microbatches),
                    PipelineShape.of(ranks, microbatches), durations);
            double ratio = flat.bubbleFraction() / interleaved.bubbleFraction();
            // exactly (v*m + p - 1) / (m + p - 1): below v, approaching it as m grows
            assertEquals((double) (stagesPerRank * microbatches + ranks - 1) / (microbatches + ranks - 1), ratio,
                    1e-12, context);
            assertTrue(ratio >= 1.5 && ratio < stagesPerRank, context + " ratio=" + ratio);
            if (microbatches >= 2 * ranks) {
                assertTrue(ratio >= 1.6 && ratio <= 2.4, context + " ratio=" + ratio);
            }
        }
    }

    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void interleavedPeakActivationsFollowTheWarmup(int ranks, int microbatches) {
        int stagesPerRank = 2;
        SimulationResult.Completed run = completed(
                ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank),
                new PipelineShape(ranks, microbatches, stagesPerRank), ActionDurations.unit());
        for (SimulationResult.RankStats rank : run.ranks()) {
            // warm-up forwards plus the first steady-state forward, capped by all v*m virtual microbatches
            int warmup = (stagesPerRank - 1) * ranks + 2 * (ranks - 1 - rank.rank());
            assertEquals(Math.min(stagesPerRank * microbatches, warmup + 1), rank.peakInFlightActivations(),
                    "rank=" + rank.rank());
        }
    }

    @Test
    void twoRanksWaitingOnEachOthersBackwardAreReportedAsDeadlock() {
        // rank 0 (stages 0, 2) runs B(2, 0) first, which needs B(3, 0) from rank 1; rank 1 (stages 1, 3)
        // runs B(1, 1) before B(3, 0), and B(1, 1) needs B(2, 1), which rank 0 queued behind B(2, 0).
        // Each rank's own order is fine, so the validator accepts it.
        PipelineShape shape = new PipelineShape(2, 2, 2);
        Schedule schedule = Schedule.parse("""
                rank 0: 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1
                rank 1: 1F0 1F1 3F0 3F1 3B1 1B1 3B0 1B0
                """);
        assertEquals(List.of(), ScheduleValidator.violations(schedule, shape));
        SimulationResult.Deadlocked deadlock = assertInstanceOf(SimulationResult.Deadlocked.class,
                ScheduleSimulator.simulate(schedule, shape));
        assertEquals(List.of(
                new SimulationResult.StuckRank(0, 4, Action.backward(2, 0), Action.backward(3, 0), 1, 6),
                new SimulationResult.StuckRank(1, 5, Action.backward(1, 1), Action.backward(2, 1), 0, 5)),
                deadlock.stuckRanks());
        assertEquals(9, deadlock.completedActions());
        assertEquals(16, deadlock.totalActions());
        String message = deadlock.message();
        assertTrue(message.startsWith("deadlock: stuckRanks=2 completedActions=9/16: "
                + "rank=0 index=4 action=2B0 waits for 3B0 (rank=1 index=6, not run); "
                + "rank=1 index=5 action=1B1 waits for 2B1 (rank=0 index=5, not run)"), message);
        IllegalStateException thrown = assertThrows(IllegalStateException.class,
                () -> ScheduleSimulator.simulate(schedule, shape).requireCompleted());
        assertEquals(message, thrown.getMessage());
    }

    @Test
    void deadlockNamesOnlyTheRanksThatAreStuck() {
        // rank 0 waits at 0B0 for 1B0; rank 1 waits at 1F1 for 0F1, queued behind rank 0's 0B0;
        // rank 2 finishes 2F0 2B0 and then waits at 2F1 for 1F1.
        PipelineShape shape = PipelineShape.of(3, 2);
        Schedule schedule = Schedule.parse("""
                rank 0: 0F0 0B0 0F1 0B1
                rank 1: 1F0 1F1 1B1 1B0
                rank 2: 2F0 2B0 2F1 2B1
                """);
        SimulationResult.Deadlocked deadlock = assertInstanceOf(SimulationResult.Deadlocked.class,
                ScheduleSimulator.simulate(schedule, shape));
        assertEquals(List.of(
                new SimulationResult.StuckRank(0, 1, Action.backward(0, 0), Action.backward(1, 0), 1, 3),
                new SimulationResult.StuckRank(1, 1, Action.forward(1, 1), Action.forward(0, 1), 0, 2),
                new SimulationResult.StuckRank(2, 2, Action.forward(2, 1), Action.forward(1, 1), 1, 1)),
                deadlock.stuckRanks());
    }

    @Test
    void invalidScheduleIsRejectedBeforeRunning() {
        Schedule missingBackward = Schedule.parse("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1\n");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ScheduleSimulator.simulate(missingBackward, PipelineShape.of(2, 2)));
        assertTrue(e.getMessage().startsWith("invalid schedule: violations=1"), e.getMessage());
        assertTrue(e.getMessage().contains("missing action: action=1B1 expected on rank=1"), e.getMessage());
    }

    @Test
    void communicationLatencyDelaysOnlyCrossRankInputs() {
        // by hand: 0F0 [0,2], 1F0 [2+5, 9], 1B0 [9, 12], 0B0 [12+5, 20]
        ActionDurations durations = new ActionDurations(2, 3, 5);
        SimulationResult.Completed gpipe = completed(ScheduleGenerators.gpipe(2, 1), PipelineShape.of(2, 1),
                durations);
        assertEquals(20, gpipe.makespan());
        assertEquals(List.of(new SimulationResult.RankStats(0, 5, 15, 1), new SimulationResult.RankStats(1, 5, 15, 1)),
                gpipe.ranks());
        assertBubble(3, 4, gpipe, "gpipe p=2 m=1 latency=5");

        // one rank holding both stages: no transfer, no latency, no bubble: 0F0 1F0 1B0 0B0 back to back
        SimulationResult.Completed oneRank = completed(ScheduleGenerators.interleavedOneFOneB(1, 1, 2),
                new PipelineShape(1, 1, 2), durations);
        assertEquals(10, oneRank.makespan());
        assertEquals(0.0, oneRank.bubbleFraction());
    }

    @Test
    void megatronWarmupKeepsTheInterleavedPipelineFullUnderLatency() {
        // the same interleaved order with one extra warm-up forward per hop instead of two (rank 0
        // warms up with 3 forwards instead of 4; rank 1, the last, is unchanged)
        PipelineShape shape = new PipelineShape(2, 4, 2);
        Schedule shortWarmup = Schedule.parse("""
                rank 0: 0F0 0F1 2F0 2F1 2B0 0F2 2B1 0F3 0B0 2F2 0B1 2F3 2B2 2B3 0B2 0B3
                rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3
                """);
        Schedule generated = ScheduleGenerators.interleavedOneFOneB(2, 4, 2);
        ActionDurations free = ActionDurations.of(2, 4);
        ActionDurations slowLinks = free.withCommunicationLatency(1);
        // without latency both reach the ideal (v*m + p - 1) * (F + B) = 9 * 6
        assertEquals(54, completed(shortWarmup, shape, free).makespan());
        assertEquals(54, completed(generated, shape, free).makespan());
        // with latency the short warm-up stalls in the steady state too
        assertEquals(64, completed(shortWarmup, shape, slowLinks).makespan());
        assertEquals(60, completed(generated, shape, slowLinks).makespan());
    }

    @Test
    void durationsRejectNonPositiveTimes() {
        assertEquals("invalid action durations: forward=0 expected=forward >= 1 (fix: round measured times up to one unit)",
                assertThrows(IllegalArgumentException.class, () -> ActionDurations.of(0, 1)).getMessage());
        assertEquals("invalid action durations: backward=-1 expected=backward >= 1 (fix: round measured times up"
                + " to one unit)",
                assertThrows(IllegalArgumentException.class, () -> ActionDurations.of(1, -1)).getMessage());
        assertEquals("invalid action durations: communicationLatency=-2 expected=communicationLatency >= 0"
                + " (fix: pass 0 or more time units)",
                assertThrows(IllegalArgumentException.class,
                        () -> ActionDurations.unit().withCommunicationLatency(-2)).getMessage());
    }

    @Test
    void fewerMicrobatchesThanRanksStillRuns() {
        for (int microbatches = 1; microbatches < 4; microbatches++) {
            SimulationResult.Completed run = completed(ScheduleGenerators.oneFOneB(4, microbatches),
                    PipelineShape.of(4, microbatches), ActionDurations.of(1, 2));
            assertEquals(microbatches, run.rank(0).peakInFlightActivations());
            assertBubble(3, microbatches + 3, run, "p=4 m=" + microbatches);
        }
    }

    /**
     * Per-stage times by hand, 1F1B p=2 m=2, stage 0 F=1 B=2, stage 1 F=3 B=4:
     * rank 1 runs 1F0 [1,4] 1B0 [4,8] 1F1 [8,11] 1B1 [11,15]; rank 0 runs 0F0 [0,1] 0F1 [1,2]
     * 0B0 [8,10] 0B1 [15,17]. Makespan 17, busy 6 and 14, bubble (11 + 3) / 34.
     */
    @Test
    void perStageDurationsByHand() {
        PipelineShape shape = PipelineShape.of(2, 2);
        Schedule schedule = ScheduleGenerators.oneFOneB(2, 2);
        StageDurations durations = new StageDurations(new long[] {1, 3}, new long[] {2, 4}, 0);
        SimulationResult.Completed run = ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
        assertEquals(17, run.makespan());
        assertEquals(6, run.rank(0).busyTime());
        assertEquals(14, run.rank(1).busyTime());
        assertBubble(14, 34, run, "by hand");
        List<Long> rank0Starts = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            rank0Starts.add(run.startOf(0, i));
        }
        assertEquals(List.of(0L, 1L, 8L, 15L), rank0Starts);
        assertThrows(IllegalArgumentException.class, () -> ScheduleSimulator.simulate(schedule, PipelineShape.of(2, 2),
                new StageDurations(new long[] {1, 1, 1}, new long[] {1, 1, 1}, 0)));
        assertEquals("invalid stage durations: stage=1 forward=0 backward=4 expected both >= 1 (fix: round measured times up"
                        + " to one unit)",
                assertThrows(IllegalArgumentException.class,
                        () -> new StageDurations(new long[] {1, 0}, new long[] {2, 4}, 0)).getMessage());
        assertEquals("invalid stage durations: stage=1 weightGradient=4 backward=4 expected 0 <= weightGradient <="
                        + " backward - 1 (fix: the input-gradient half keeps at least one unit; clamp the measured share)",
                assertThrows(IllegalArgumentException.class, () -> new StageDurations(new long[] {1, 1},
                        new long[] {2, 4}, new long[] {1, 4}, 0)).getMessage());
        StageDurations measured = new StageDurations(new long[] {1, 1}, new long[] {2, 5}, new long[] {1, 1}, 0);
        assertEquals(4, measured.of(ActionType.INPUT_GRADIENT, 1));
        assertEquals(1, measured.of(ActionType.WEIGHT_GRADIENT, 1));
        assertEquals(new StageDurations(new long[] {1, 1}, new long[] {2, 5}, new long[] {1, 2}, 0),
                new StageDurations(new long[] {1, 1}, new long[] {2, 5}, 0), "halves by default, I the odd unit");
    }

    /** Equal stages: the per-stage simulator is the uniform one, action for action. */
    @ParameterizedTest(name = "p={0} m={1}")
    @MethodSource("pipelineSizes")
    void uniformStageDurationsEqualActionDurations(int ranks, int microbatches) {
        PipelineShape shape = new PipelineShape(ranks, microbatches, 2);
        Schedule schedule = ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, 2);
        ActionDurations durations = new ActionDurations(3, 5, 2);
        SimulationResult.Completed uniform = completed(schedule, shape, durations);
        SimulationResult.Completed perStage = ScheduleSimulator.simulate(schedule, shape,
                StageDurations.uniform(shape.stageCount(), durations)).requireCompleted();
        assertEquals(uniform.makespan(), perStage.makespan());
        for (int rank = 0; rank < ranks; rank++) {
            assertEquals(uniform.rank(rank), perStage.rank(rank));
            for (int i = 0; i < schedule.actions(rank).size(); i++) {
                assertEquals(uniform.startOf(rank, i), perStage.startOf(rank, i));
            }
        }
    }

    /**
     * The slowest stage sets the pace: 1F1B's steady state runs one microbatch per slowest stage's
     * F + B, so with stage times t_s the makespan is at least (m - 1) * max t + sum t.
     */
    @Test
    void theSlowestStageBoundsTheMakespan() {
        PipelineShape shape = PipelineShape.of(4, 8);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        StageDurations durations = new StageDurations(new long[] {1, 1, 1, 3}, new long[] {2, 2, 2, 6}, 0);
        SimulationResult.Completed run = ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
        long slowest = 9;
        long sum = 3 + 3 + 3 + 9;
        assertEquals((8 - 1) * slowest + sum, run.makespan());
    }
}
