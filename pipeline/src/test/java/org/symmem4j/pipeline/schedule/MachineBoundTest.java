package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The machine's bound: the simulator fed with per-core stage times, free hand-offs, and each rank's optimizer step
 * after its last pass; against timelines worked out by hand.
 */
class MachineBoundTest {

    private static final Schedule ONE_F_ONE_B = ScheduleGenerators.oneFOneB(2, 2);
    private static final PipelineShape SHAPE = PipelineShape.of(2, 2);

    /**
     * 1F1B, 2 ranks, 2 microbatches; rank 1's core runs its (equal) stage at half the speed: F 2, B 4 against rank 0's
     * F 1, B 2. By hand: rank 0 F0 [0,1] F1 [1,2] B0 [7,9] B1 [13,15]; rank 1 F0 [1,3] B0 [3,7] F1 [7,9] B1 [9,13];
     * makespan 15, busy 6 + 12, bubble 12 / 30 = 0.4, where equal cores give the ideal (p - 1) / (m + p - 1) = 1/3.
     * Optimizer steps 5 and 1: rank 0 ends at 20, rank 1 at 14, the step at 20.
     */
    @Test
    void theBoundIsTheScheduleRunWithEachCoresOwnStageTimes() {
        MachineBound slowLast = MachineBound.of(ONE_F_ONE_B, SHAPE,
                new StageDurations(new long[] {1, 2}, new long[] {2, 4}, 0), new long[] {5, 1});
        assertEquals(15, slowLast.simulated().makespan());
        assertEquals(0.4, slowLast.bubbleFraction(), 0.0);
        assertEquals(20, slowLast.stepTime());
        assertEquals(256 / 20e-6, slowLast.examplesPerSecondMicros(256), 1e-6);
        MachineBound equal = MachineBound.of(ONE_F_ONE_B, SHAPE,
                new StageDurations(new long[] {1, 1}, new long[] {2, 2}, 0), new long[] {0, 0});
        assertEquals(1.0 / 3, equal.bubbleFraction(), 0.0);
        assertTrue(slowLast.bubbleFraction() > equal.bubbleFraction(), "a slow core must show in the bound");
        // the slow core on rank 0 instead: rank 0 F0 [0,2] F1 [2,4] B0 [5,9] B1 [9,13]; rank 1 F0 [2,3] B0 [3,5]
        // F1 [5,6] B1 [6,8]: makespan 13, busy 12 + 6, bubble 8 / 26 (which core is slow matters, not only how slow)
        MachineBound slowFirst = MachineBound.of(ONE_F_ONE_B, SHAPE,
                new StageDurations(new long[] {2, 1}, new long[] {4, 2}, 0), new long[] {0, 0});
        assertEquals(13, slowFirst.simulated().makespan());
        assertEquals(8.0 / 26, slowFirst.bubbleFraction(), 0.0);
        assertEquals(13, slowFirst.stepTime());
    }

    /** The measured hand-off latency is the pipeline's, not the machine's: the bound runs with free hand-offs. */
    @Test
    void theBoundIgnoresTheHandoffLatency() {
        MachineBound withLatency = MachineBound.of(ONE_F_ONE_B, SHAPE,
                new StageDurations(new long[] {1, 2}, new long[] {2, 4}, 3), new long[] {0, 0});
        assertEquals(15, withLatency.simulated().makespan());
        assertEquals(0.4, withLatency.bubbleFraction(), 0.0);
        assertEquals(0, withLatency.perCore().communicationLatency());
    }

    /**
     * ZB-H1's last action on a rank is a weight gradient: the step ends after it plus the optimizer, with the measured
     * weight share. 2 ranks, 2 microbatches, every stage F 1, B 4 of which W 1 (I 3): the bound's makespan is what the
     * simulator gives for the same durations with no latency, and the step adds the optimizer to the rank that ends last.
     */
    @Test
    void zeroBubbleStepsEndAfterTheLastWeightGradient() {
        Schedule zb = ScheduleGenerators.zeroBubbleH1(2, 2);
        StageDurations d = new StageDurations(new long[] {1, 1}, new long[] {4, 4}, new long[] {1, 1}, 0);
        MachineBound bound = MachineBound.of(zb, SHAPE, d, new long[] {2, 7});
        SimulationResult.Completed direct = ScheduleSimulator.simulate(zb, SHAPE, d).requireCompleted();
        assertEquals(direct.makespan(), bound.simulated().makespan());
        long[] ends = new long[2];
        for (int r = 0; r < 2; r++) {
            int last = zb.actions(r).size() - 1;
            Action a = zb.actions(r).get(last);
            ends[r] = direct.startOf(r, last) + d.of(a.type(), a.stage());
        }
        assertEquals(Math.max(ends[0] + 2, ends[1] + 7), bound.stepTime());
    }

    @Test
    void badInputIsRefusedWithTheFix() {
        StageDurations d = new StageDurations(new long[] {1, 1}, new long[] {2, 2}, 0);
        IllegalArgumentException length = assertThrows(IllegalArgumentException.class,
                () -> MachineBound.of(ONE_F_ONE_B, SHAPE, d, new long[] {0}));
        assertTrue(length.getMessage().contains("expected=2") && length.getMessage().contains("fix:"), length.getMessage());
        IllegalArgumentException negative = assertThrows(IllegalArgumentException.class,
                () -> MachineBound.of(ONE_F_ONE_B, SHAPE, d, new long[] {0, -1}));
        assertTrue(negative.getMessage().contains("fix:"), negative.getMessage());
        IllegalArgumentException stages = assertThrows(IllegalArgumentException.class, () -> MachineBound.of(ONE_F_ONE_B,
                SHAPE, new StageDurations(new long[] {1, 1, 1}, new long[] {2, 2, 2}, 0), new long[] {0, 0}));
        assertTrue(stages.getMessage().contains("fix:"), stages.getMessage());
    }
}
