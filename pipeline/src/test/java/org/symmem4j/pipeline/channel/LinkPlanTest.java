package org.symmem4j.pipeline.channel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.StageDurations;

class LinkPlanTest {

    /**
     * Rank 1 runs 3F0 (which waits for rank 0's 2F0) before it takes microbatch 1 off the 0 -> 1
     * link, while rank 0 posts three forwards of stage 0 before 2F0: with one slot rank 0 waits for
     * room that rank 1 only makes after 3F0, a cycle; with two it runs.
     */
    private static final Schedule NEEDS_TWO_SLOTS = Schedule.parse("""
            rank 0: 0F0 0F1 0F2 2F0 2F1 2F2 2B0 2B1 2B2 0B0 0B1 0B2
            rank 1: 1F0 3F0 1F1 3F1 1F2 3F2 3B0 1B0 3B1 1B1 3B2 1B2
            """);
    private static final PipelineShape TWO_BY_THREE_BY_TWO = new PipelineShape(2, 3, 2);

    @Test
    void generatedSchedulesNeedOneSlotAndTwoToNeverStall() {
        for (int p : new int[] {2, 4, 8}) {
            for (int m : new int[] {p, 2 * p, 4 * p}) {
                PipelineShape flat = PipelineShape.of(p, m);
                PipelineShape interleaved = new PipelineShape(p, m, 2);
                for (var plan : new LinkPlan[] {LinkPlan.of(ScheduleGenerators.gpipe(p, m), flat),
                        LinkPlan.of(ScheduleGenerators.oneFOneB(p, m), flat),
                        LinkPlan.of(ScheduleGenerators.interleavedOneFOneB(p, m, 2), interleaved)}) {
                    assertEquals(1, plan.minimumSlots(), plan.shape().toString());
                    int stallFree = plan.stallFreeSlots(ActionDurations.of(1, 2));
                    assertTrue(stallFree >= 2 && stallFree <= 4, plan.shape() + " stall-free slots " + stallFree);
                }
            }
        }
    }

    @Test
    void aBoundedLinkCanDeadlockWhatTheSimulatorRuns() {
        ScheduleSimulator.simulate(NEEDS_TWO_SLOTS, TWO_BY_THREE_BY_TWO).requireCompleted();
        LinkPlan plan = LinkPlan.of(NEEDS_TWO_SLOTS, TWO_BY_THREE_BY_TWO);
        assertEquals(2, plan.minimumSlots());
        plan.requireSlots(2);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> plan.requireSlots(1));
        assertTrue(e.getMessage().contains("slots=1 deadlock") && e.getMessage().contains("expected slots >= 2"),
                e.getMessage());
    }

    @Test
    void linksMustBeReadInTheOrderTheyAreWritten() {
        // valid and deadlock-free with addressable buffers, but stage 1 takes microbatch 1 before 0
        Schedule swapped = Schedule.parse("""
                rank 0: 0F0 0F1 0B0 0B1
                rank 1: 1F1 1F0 1B0 1B1
                """);
        PipelineShape shape = PipelineShape.of(2, 2);
        ScheduleSimulator.simulate(swapped, shape).requireCompleted();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LinkPlan.of(swapped, shape));
        assertTrue(e.getMessage().contains("activation link stage 0 -> stage 1 out of order: message 0 is sent for"
                + " microbatch 0 (rank 0) but expected as microbatch 1 (rank 1)"), e.getMessage());
    }

    @Test
    void aDeadlockedScheduleHasNoSlotCount() {
        // rank 0 waits for 1B0 before it sends 0F1; rank 1 needs 1F1 before it runs 1B0
        Schedule crossed = Schedule.parse("""
                rank 0: 0F0 0B0 0F1 0B1
                rank 1: 1F0 1F1 1B0 1B1
                """);
        PipelineShape shape = PipelineShape.of(2, 2);
        LinkPlan plan = LinkPlan.of(crossed, shape);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, plan::minimumSlots);
        assertTrue(e.getMessage().contains("deadlocks for ranks=2 microbatches=2 stagesPerRank=1 however many slots"),
                e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> plan.requireSlots(2));
    }

    @Test
    void oneRankHasNoLinks() {
        assertEquals(0, LinkPlan.of(ScheduleGenerators.interleavedOneFOneB(1, 2, 3), new PipelineShape(1, 2, 3))
                .links().size());
        assertEquals(2 * 3, LinkPlan.of(ScheduleGenerators.oneFOneB(4, 4), PipelineShape.of(4, 4)).links().size());
    }

    /**
     * Per-stage times: equal ones give the uniform answer; a first stage ten times faster than the rest runs ahead, and
     * 1F1B at 4 ranks then needs 4 slots per link where equal stages need 2.
     */
    @Test
    void unevenStagesNeedMoreSlotsThanEqualOnes() {
        PipelineShape shape = PipelineShape.of(4, 8);
        LinkPlan plan = LinkPlan.of(ScheduleGenerators.oneFOneB(4, 8), shape);
        assertEquals(plan.stallFreeSlots(ActionDurations.of(1, 2)),
                plan.stallFreeSlots(StageDurations.uniform(4, ActionDurations.of(1, 2))));
        assertEquals(2, plan.stallFreeSlots(ActionDurations.of(1, 2)));
        assertEquals(4, plan.stallFreeSlots(new StageDurations(new long[] {1, 10, 10, 10}, new long[] {2, 20, 20, 20}, 0)));
    }
}
