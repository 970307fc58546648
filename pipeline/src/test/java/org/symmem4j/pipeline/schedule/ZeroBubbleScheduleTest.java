package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** ZB-H1 and the split backward it runs on: the schedule, its bubble and memory, and what the validator refuses. */
class ZeroBubbleScheduleTest {

    /** F = I = W = 1: the zero-bubble paper's cost model (a whole backward B = I + W = 2). */
    private static final ActionDurations PAPER_MODEL = ActionDurations.of(1, 2);

    @Test
    void matchesTheGoldenFileWrittenFromThePapersRule() throws IOException {
        try (InputStream in = ZeroBubbleScheduleTest.class.getResourceAsStream("/golden/zb-h1-p4-m8.txt")) {
            String golden = new String(in.readAllBytes(), StandardCharsets.UTF_8).lines()
                    .filter(line -> !line.isBlank() && !line.startsWith("#")).map(line -> line + "\n")
                    .collect(Collectors.joining());
            assertEquals(golden, ScheduleGenerators.zeroBubbleH1(4, 8).toText());
            assertEquals(Schedule.parse(golden), ScheduleGenerators.zeroBubbleH1(4, 8));
        }
    }

    /**
     * With m >= p every rank idles p - 1 units, a third of 1F1B's 3 (p - 1): the makespan is 3m + p - 1
     * against 1F1B's 3m + 3(p - 1), and no rank holds more activations than 1F1B's rank 0 (p).
     */
    @Test
    void cutsOneFOneBsBubbleToAThirdAtItsPeakMemory() {
        for (int ranks = 1; ranks <= 8; ranks++) {
            for (int microbatches = ranks; microbatches <= 3 * ranks + 1; microbatches++) {
                PipelineShape shape = PipelineShape.of(ranks, microbatches);
                SimulationResult.Completed zb = ScheduleSimulator.simulate(ScheduleGenerators.zeroBubbleH1(ranks,
                        microbatches), shape, PAPER_MODEL).requireCompleted();
                SimulationResult.Completed oneFOneB = ScheduleSimulator.simulate(ScheduleGenerators.oneFOneB(ranks,
                        microbatches), shape, PAPER_MODEL).requireCompleted();
                String at = "p=" + ranks + " m=" + microbatches;
                assertEquals(3L * microbatches + ranks - 1, zb.makespan(), at);
                assertEquals(3L * microbatches + 3L * (ranks - 1), oneFOneB.makespan(), at);
                for (int rank = 0; rank < ranks; rank++) {
                    assertEquals(ranks - 1, zb.rank(rank).idleTime(), at + " rank " + rank);
                    assertEquals(Math.min(ranks, microbatches), zb.rank(rank).peakInFlightActivations(), at + " rank " + rank);
                    assertTrue(zb.rank(rank).peakInFlightActivations() <= oneFOneB.rank(0).peakInFlightActivations(), at);
                }
            }
        }
    }

    @Test
    void isValidAndDeadlockFreeForAnySizeAndLatency() {
        for (int ranks = 1; ranks <= 6; ranks++) {
            for (int microbatches = 1; microbatches <= 2 * ranks + 1; microbatches++) {
                PipelineShape shape = PipelineShape.of(ranks, microbatches);
                Schedule zb = ScheduleGenerators.zeroBubbleH1(ranks, microbatches);
                assertEquals(List.of(), ScheduleValidator.violations(zb, shape));
                assertEquals(3 * ranks * microbatches, zb.actionCount());
                for (long latency : new long[] {0, 1, 5}) {
                    ScheduleSimulator.simulate(zb, shape, PAPER_MODEL.withCommunicationLatency(latency)).requireCompleted();
                }
            }
        }
    }

    @Test
    void theInputGradientOfTheNextStageFeedsAWholeBackward() {
        // stage 1 splits, stage 0 does not: 0B0 waits for 1I0 and the simulator finds it
        Schedule mixed = Schedule.parse("""
                rank 0: 0F0 0B0
                rank 1: 1F0 1I0 1W0
                """);
        SimulationResult.Completed run = ScheduleSimulator.simulate(mixed, PipelineShape.of(2, 1), PAPER_MODEL)
                .requireCompleted();
        assertEquals(1 + 1 + 1 + 2, run.makespan(), "0F0, 1F0, 1I0, then 0B0 (W runs beside it on rank 1)");
    }

    @Test
    void refusesAWeightGradientBeforeItsInputGradientAndABackwardTwice() {
        PipelineShape shape = PipelineShape.of(1, 2);
        List<String> early = ScheduleValidator.violations(Schedule.parse("rank 0: 0F0 0W0 0I0 0F1 0B1\n"), shape);
        assertEquals(1, early.size(), early.toString());
        assertTrue(early.get(0).startsWith("dependency order: rank=0 index=1 action=0W0 comes before 0I0"), early.get(0));

        List<String> twice = ScheduleValidator.violations(Schedule.parse("rank 0: 0F0 0B0 0I0 0W0 0F1 0B1\n"), shape);
        assertEquals(1, twice.size(), twice.toString());
        assertTrue(twice.get(0).startsWith("backward twice: action=0B0 and its halves 0I0/0W0"), twice.get(0));

        List<String> half = ScheduleValidator.violations(Schedule.parse("rank 0: 0F0 0I0 0F1 0B1\n"), shape);
        assertEquals(List.of("missing action: action=0W0 expected on rank=0 (each stage runs one F per microbatch and"
                + " one B, or its halves one I and one W)"), half);
    }

    @Test
    void aSplitBackwardsHalvesShareItsTime() {
        StageDurations durations = new StageDurations(new long[] {1, 1}, new long[] {5, 1}, 0);
        assertEquals(3, durations.of(ActionType.INPUT_GRADIENT, 0));
        assertEquals(2, durations.of(ActionType.WEIGHT_GRADIENT, 0));
        assertEquals(1, durations.of(ActionType.INPUT_GRADIENT, 1));
        assertEquals(0, durations.of(ActionType.WEIGHT_GRADIENT, 1));
        assertEquals("1I2", Action.inputGradient(1, 2).toString());
        assertEquals(Action.weightGradient(3, 4), Action.parse("3W4"));
    }
}
