package org.symmem4j.benchmarks.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.pipeline.schedule.MachineBound;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;
import org.symmem4j.pipeline.schedule.StageDurations;

/** PipelineBench's comparison with the machine's bound: step i against window i, medians of the pairs. */
class MachineBoundStepsTest {

    /** One rank, one microbatch: the bound's step is forward + backward + optimizer, its bubble 0. */
    private static MachineBound oneRank(long forward, long backward, long optimizer) {
        return MachineBound.of(ScheduleGenerators.oneFOneB(1, 1), PipelineShape.of(1, 1),
                new StageDurations(new long[] {forward}, new long[] {backward}, 0), new long[] {optimizer});
    }

    /**
     * Three steps of 10, 40 and 20 µs with windows after them whose bound steps are 9, 36 and 10 µs (the machine slow
     * during the second pair, and the third window fast): the pairs' speed ratios are 0.9, 0.9 and 0.5, median 0.9;
     * comparing the medians apart (20 µs against 10) would say 0.5.
     */
    @Test
    void eachStepIsComparedWithTheWindowAfterIt() {
        List<MachineBound> bounds = List.of(oneRank(1, 8, 0), oneRank(4, 30, 2), oneRank(1, 8, 1));
        MachineBoundSteps steps = MachineBoundSteps.of(new double[] {0.30, 0.25, 0.40}, new long[] {10_000, 40_000,
                20_000}, bounds, 128);
        assertEquals(0.9, steps.speedOverBound(), 1e-12);
        assertEquals(0.0, steps.boundBubble(), 0.0);
        assertEquals(30.0, steps.overBoundPoints(), 1e-9);
        assertEquals(128 / 10e-6, steps.boundExamplesPerSecond(), 1e-3, "the bound's speed, median of 9, 36, 10 µs");
        assertEquals(3, steps.pairs());
    }

    @Test
    void thePipelinesPassesAreComparedStageByStage() {
        StageDurations pipeline = new StageDurations(new long[] {10, 20}, new long[] {30, 20}, 0);
        StageDurations independent = new StageDurations(new long[] {10, 10}, new long[] {10, 20}, 0);
        assertEquals("2.00;1.33", MachineBoundSteps.passRatio(pipeline, independent));
    }

    /** 0.35 measured, 0.31 simulated with the hand-offs, 0.30 without, 0.27 the bound: +3 / +1 / +4 points, 8 in all. */
    @Test
    void theExcessSplitsIntoSlowerPassesHandoffsAndTheRest() {
        MachineBoundSteps.Excess e = MachineBoundSteps.Excess.of(0.35, 0.31, 0.30, 0.27);
        assertEquals(3.0, e.passes(), 1e-9);
        assertEquals(1.0, e.handoffs(), 1e-9);
        assertEquals(4.0, e.rest(), 1e-9);
        assertEquals(8.0, e.passes() + e.handoffs() + e.rest(), 1e-9);
        assertEquals("+3.0 / +1.0 / +4.0", e.toString());
    }

    @Test
    void unpairedStepsAreRefusedWithTheFix() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MachineBoundSteps.of(new double[] {0.3, 0.3}, new long[] {1, 1}, List.of(oneRank(1, 1, 0)), 1));
        assertTrue(e.getMessage().contains("fix:"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> MachineBoundSteps.of(new double[0], new long[0], List.of(), 1));
    }
}
