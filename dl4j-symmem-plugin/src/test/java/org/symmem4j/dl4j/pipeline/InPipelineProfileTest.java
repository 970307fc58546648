package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * The split from stage times measured inside the pipeline: given times to expected boundaries, the builder's rules
 * kept, and training after a re-split bitwise equal to training with that split from the start.
 */
class InPipelineProfileTest {

    /** The 32-core benchmark's model in small: 16 equal hidden layers and a light output layer (17 layers). */
    private static MultiLayerNetwork seventeenLayers() {
        int[] widths = new int[18];
        Arrays.fill(widths, 8);
        widths[17] = 3;
        return PipelineNets.mlp(new Sgd(0.1), 0, DataType.FLOAT, widths);
    }

    /** Alone, every hidden layer 5.3/12.8 ms and the output layer 0.06/2.0 ms (the 32-core run's profile, rounded). */
    private static StageProfile equalLayers() {
        long[] f = new long[17];
        long[] b = new long[17];
        Arrays.fill(f, 5_300_000L);
        Arrays.fill(b, 12_800_000L);
        f[16] = 60_000L;
        b[16] = 2_000_000L;
        return new StageProfile(f, b, 128);
    }

    /**
     * The stages' in-pipeline times for {@code ranWith}: each stage's alone time times {@code factor[s]}, as the
     * 32-core 4-rank 1F1B run measured them (84.6, 86.5, 69.4, 82.6 ms against 70-74 alone).
     */
    private static StageDurations measured(StageProfile alone, PipelineStageSplit ranWith, double... factor) {
        StageDurations d = alone.stageDurationsMicros(ranWith);
        long[] f = new long[factor.length];
        long[] b = new long[factor.length];
        for (int s = 0; s < factor.length; s++) {
            f[s] = Math.max(1, Math.round(d.forward()[s] * factor[s]));
            b[s] = Math.round(d.backward()[s] * factor[s]);
        }
        return new StageDurations(f, b, 20);
    }

    /**
     * Equal layers, split 0-3 | 4-7 | 8-11 | 12-16 by the alone profile; in the pipeline stages 0, 1 and 3 run 1.20,
     * 1.21 and 1.11 times their profile and stage 2 0.97 (the 32-core run's ratios). No split of whole layers makes the
     * slowest stage faster than stage 1's 4 layers at 1.21 (3 there put 5 on another stage); the fast third stage takes
     * layer 12 from the output stage, which the simulator finds shorter for 1F1B (a faster last stage drains the
     * pipeline sooner): 0-3 | 4-7 | 8-12 | 13-16. The alone profile's own split keeps 4 | 8 | 12 (fails on it).
     */
    @Test
    void stageTimesMeasuredInThePipelineMoveLayersFromSlowStagesToFastOnes() {
        MultiLayerNetwork net = seventeenLayers();
        StageProfile alone = equalLayers();
        PipelineShape shape = new PipelineShape(4, 8, 1);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        PipelineStageSplit ranWith = PipelineStageSplit.byProfile(net, alone, schedule, shape);
        assertArrayEquals(new int[] {4, 8, 12}, ranWith.stageStarts(), "the alone profile's split");
        List<StageDurations> steps = List.of(measured(alone, ranWith, 1.20, 1.21, 0.97, 1.11),
                measured(alone, ranWith, 1.19, 1.22, 0.96, 1.12), measured(alone, ranWith, 1.21, 1.20, 0.98, 1.10));
        InPipelineProfile times = InPipelineProfile.ofDurations(alone, ranWith, shape, steps);
        assertEquals(1.20, times.stageFactors()[0], 0.01, times.toString());
        assertEquals(0.97, times.stageFactors()[2], 0.01, times.toString());
        PipelineStageSplit rebalanced = times.split(net, schedule, shape);
        assertArrayEquals(new int[] {4, 8, 13}, rebalanced.stageStarts(), times + " -> " + rebalanced);
        long before = makespan(times, schedule, shape, starts(ranWith));
        long after = makespan(times, schedule, shape, starts(rebalanced));
        assertTrue(after < before, "simulated step " + after + " us against " + before + " us before the re-split");
        // the other attribution: the layers carry their stage's factor
        StageProfile layerTimes = times.layerTimes();
        assertEquals(12_800_000L * 1.21, layerTimes.backwardNanos()[5], 12_800_000L * 0.011);
        // equal times in the pipeline: nothing moves
        InPipelineProfile even = InPipelineProfile.ofDurations(alone, ranWith, shape,
                List.of(measured(alone, ranWith, 1.15, 1.15, 1.15, 1.15)));
        assertArrayEquals(new int[] {4, 8, 12}, even.split(net, schedule, shape).stageStarts());
    }

    /**
     * The exact balance the search starts from, against every split of 17 layers into 4 stages (560), with and without
     * a rule on where stages start; and the rule kept (only even layers, as tensor-parallel pairs would): a slow output
     * stage gives layers away, at an odd boundary when it may, at an even one when not.
     */
    @Test
    void theSplitIsTheExactBalanceAndKeepsBlocksInOneStage() {
        MultiLayerNetwork net = seventeenLayers();
        StageProfile alone = equalLayers();
        PipelineShape shape = new PipelineShape(4, 8, 1);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        PipelineStageSplit ranWith = PipelineStageSplit.atBoundaries(net, 4, 8, 12);
        InPipelineProfile times = InPipelineProfile.ofDurations(alone, ranWith, shape,
                List.of(measured(alone, ranWith, 1.0, 1.3, 0.9, 1.5)));
        java.util.function.IntPredicate evenOnly = layer -> layer % 2 == 0;
        for (java.util.function.IntPredicate rule : List.<java.util.function.IntPredicate>of(layer -> true, evenOnly)) {
            long best = Long.MAX_VALUE;
            for (int a = 1; a < 17; a++) {
                for (int b = a + 1; b < 17; b++) {
                    for (int c = b + 1; c < 17; c++) {
                        if (rule.test(a) && rule.test(b) && rule.test(c)) {
                            best = Math.min(best, largest(times, new int[] {0, a, b, c, 17}));
                        }
                    }
                }
            }
            int[] balanced = times.balancedStarts(rule);
            // per-stage rounding to microseconds: within a microsecond per stage
            assertEquals(best, largest(times, balanced), 4, Arrays.toString(balanced));
        }
        int[] any = times.split(net, schedule, shape).stageStarts();
        int[] even = times.split(net, schedule, shape, evenOnly).stageStarts();
        assertTrue(Arrays.stream(any).anyMatch(start -> start % 2 == 1), "unconstrained " + Arrays.toString(any));
        for (int start : even) {
            assertEquals(0, start % 2, Arrays.toString(even));
        }
        assertTrue(makespan(times, schedule, shape, new int[] {0, even[0], even[1], even[2], 17})
                < makespan(times, schedule, shape, starts(ranWith)), "even " + Arrays.toString(even));
        // 0-4 | 5-7 | 8-12 | 13-16: stage 0 at 1.0 takes a fifth layer, stage 1 at 1.3 keeps 3, stage 2 at 0.9 takes 5
        assertArrayEquals(new int[] {5, 8, 13}, any, times.toString());
        // even starts only: the output stage keeps 2 hidden layers, stage 2 at 0.9 takes 6
        assertArrayEquals(new int[] {4, 8, 14}, even, times.toString());
    }

    private static long largest(InPipelineProfile times, int[] starts) {
        StageDurations d = times.stageDurationsMicros(starts);
        long max = 0;
        for (int s = 0; s < d.stageCount(); s++) {
            max = Math.max(max, d.total(s));
        }
        return max;
    }

    private static long makespan(InPipelineProfile times, Schedule schedule, PipelineShape shape, int[] starts) {
        return ScheduleSimulator.simulate(schedule, shape, times.stageDurationsMicros(starts)).requireCompleted().makespan();
    }

    /**
     * Re-balancing between steps in thread mode: train with the profile's split, measure, copy the state out, build again
     * with the in-pipeline split: parameters, Adam's state and counters bitwise equal to a trainer with that split from
     * the start. The times of the real steps feed {@link InPipelineProfile#of(PipelineParallelTrainer, List)}; the split
     * asserted is forced by given times, since the real ones are machine noise.
     */
    @Test
    void trainingAfterAReSplitIsBitwiseTrainingWithThatSplitFromTheStart() {
        int[] widths = {16, 32, 32, 32, 32, 32, 32, 32, 4};
        MultiLayerNetwork base = PipelineNets.mlp(new Adam(0.01), 1e-4, DataType.DOUBLE, widths);
        List<DataSet> data = PipelineNets.batches(5, 6, 16, 16, 4, DataType.DOUBLE);
        long[] f = new long[8];
        long[] b = new long[8];
        Arrays.fill(f, 1_000_000L);
        Arrays.fill(b, 2_000_000L);
        StageProfile alone = new StageProfile(f, b, 4);
        MultiLayerNetwork net = base.clone();
        List<PipelineStepReport> reports = new ArrayList<>();
        PipelineStageSplit split;
        try (PipelineParallelTrainer first = PipelineParallelTrainer.builder(net).ranks(4).microbatches(4).splitBy(alone)
                .stepListener(reports::add).build()) {
            for (int s = 0; s < 3; s++) {
                first.fit(data.get(s));
            }
            InPipelineProfile real = InPipelineProfile.of(first, reports.subList(1, 3));
            assertEquals(4, real.stageFactors().length, real.toString());
            // a valid split of the same network, whatever the machine measured
            assertEquals(8, real.split(net, first.schedule(), first.shape()).layerCount());
            first.copyParametersTo(net);
            split = first.split();
        }
        assertArrayEquals(new int[] {3, 5, 7}, split.stageStarts(), "the alone profile's split");
        // stage 1 measured twice as slow: it gives a layer away
        InPipelineProfile times = InPipelineProfile.ofDurations(alone, split, new PipelineShape(4, 4, 1),
                List.of(measured(alone, split, 1.0, 2.0, 1.0, 1.0)));
        int[] rebalanced;
        try (PipelineParallelTrainer second = PipelineParallelTrainer.builder(net).ranks(4).microbatches(4).splitBy(times)
                .build()) {
            rebalanced = second.split().stageStarts();
            assertArrayEquals(new int[] {3, 4, 6}, rebalanced, "stage 1 twice as slow gives layer 4 away");
            assertSame(alone, second.profile(), "the alone profile, for a second in-pipeline run to relate to");
            assertEquals(org.symmem4j.pipeline.channel.LinkPlan.of(second.schedule(), second.shape())
                    .stallFreeSlots(times.stageDurationsMicros(second.split())), second.linkSlots(), "links sized for"
                    + " the in-pipeline times");
            for (int s = 3; s < data.size(); s++) {
                second.fit(data.get(s));
            }
            second.copyParametersTo(net);
        }
        MultiLayerNetwork reference = base.clone();
        try (PipelineParallelTrainer fromStart = PipelineParallelTrainer.builder(reference).ranks(4).microbatches(4)
                .stageBoundaries(rebalanced).build()) {
            for (DataSet batch : data) {
                fromStart.fit(batch);
            }
            fromStart.copyParametersTo(reference);
        }
        PipelineNets.assertSameState(reference, net, "re-split after 3 steps against split " + Arrays.toString(rebalanced)
                + " from the start");
    }

    @Test
    void badInputIsRefusedWithTheFix() {
        MultiLayerNetwork net = seventeenLayers();
        StageProfile alone = equalLayers();
        PipelineShape shape = new PipelineShape(4, 8, 1);
        PipelineStageSplit ranWith = PipelineStageSplit.atBoundaries(net, 4, 8, 12);
        InPipelineProfile times = InPipelineProfile.ofDurations(alone, ranWith, shape,
                List.of(measured(alone, ranWith, 1, 1, 1, 1)));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> InPipelineProfile.ofDurations(
                alone, ranWith, new PipelineShape(2, 8, 1), List.of()));
        assertTrue(e.getMessage().contains("fix:"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> InPipelineProfile.ofDurations(alone, ranWith, shape,
                List.of()));
        assertTrue(e.getMessage().contains("fix:"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> times.split(net, ScheduleGenerators.oneFOneB(8, 8),
                new PipelineShape(8, 8, 1)));
        assertTrue(e.getMessage().contains("per stage position"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(net.clone()).ranks(4)
                .microbatches(8).splitBy(times).stageBoundaries(4, 8, 12).build());
        assertTrue(e.getMessage().contains("fix:"), e.getMessage());
        try (PipelineParallelTrainer plain = PipelineParallelTrainer.builder(net.clone()).ranks(4).microbatches(8).build()) {
            e = assertThrows(IllegalArgumentException.class, () -> InPipelineProfile.of(plain, List.of()));
            assertTrue(e.getMessage().contains("fix: build the profiling trainer"), e.getMessage());
        }
    }

    private static int[] starts(PipelineStageSplit split) {
        int[] starts = new int[split.stageCount() + 1];
        for (int s = 0; s < split.stageCount(); s++) {
            starts[s] = split.firstLayer(s);
        }
        starts[split.stageCount()] = split.layerCount();
        return starts;
    }
}
