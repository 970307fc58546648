package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Function;
import java.util.function.IntPredicate;
import org.junit.jupiter.api.Test;

/**
 * The split chosen by simulated step time against every split of a small chain (exhaustive), and against the
 * linear partition it starts from (the rule before it: the smallest largest stage).
 */
class StageSplitSearchTest {

    /**
     * Per layer, one microbatch's forward and backward microseconds: the 17-layer MLP of the 16-core pipeline runs
     * (bench/results/2026-11-29-pipeline-bound-speculative-16core.md), a 64-wide first layer and a 10-class output.
     */
    private static final long[] FORWARD = {2809, 7069, 6942, 7185, 6848, 7055, 6969, 7031, 7089, 7212, 7117, 7044, 7088,
        7255, 7029, 7036, 239};
    private static final long[] BACKWARD = {4953, 17675, 18033, 17671, 17754, 17868, 17951, 17811, 17838, 17621, 18197,
        17945, 18012, 17923, 17833, 17764, 2194};

    /** Layers summed per stage, the last stage's forward inside its backward (as DL4J's output stage runs it). */
    private static final Function<int[], StageDurations> PROFILE = starts -> {
        int stages = starts.length - 1;
        long[] f = new long[stages];
        long[] b = new long[stages];
        for (int s = 0; s < stages; s++) {
            for (int l = starts[s]; l < starts[s + 1]; l++) {
                f[s] += FORWARD[l];
                b[s] += BACKWARD[l];
            }
        }
        b[stages - 1] += f[stages - 1] - 1;
        f[stages - 1] = 1;
        return new StageDurations(f, b, 45);
    };

    /** The smallest largest stage (forward plus backward), ties as late as possible from the last stage. */
    private static int[] linearPartition(int stages) {
        List<int[]> all = splits(FORWARD.length, stages, l -> true);
        long best = all.stream().mapToLong(StageSplitSearchTest::largestStage).min().orElseThrow();
        return all.stream().filter(s -> largestStage(s) == best).reduce((a, b) -> b).orElseThrow();
    }

    private static long largestStage(int[] starts) {
        long max = 0;
        for (int s = 0; s + 1 < starts.length; s++) {
            long stage = 0;
            for (int l = starts[s]; l < starts[s + 1]; l++) {
                stage += FORWARD[l] + BACKWARD[l];
            }
            max = Math.max(max, stage);
        }
        return max;
    }

    /** Every split of {@code layers} into {@code stages} non-empty stages whose inner starts pass {@code canStart}. */
    private static List<int[]> splits(int layers, int stages, IntPredicate canStart) {
        List<int[]> out = new ArrayList<>();
        int[] starts = new int[stages + 1];
        starts[stages] = layers;
        fill(starts, 1, layers, canStart, out);
        return out;
    }

    private static void fill(int[] starts, int index, int layers, IntPredicate canStart, List<int[]> out) {
        int stages = starts.length - 1;
        if (index == stages) {
            out.add(starts.clone());
            return;
        }
        for (int l = starts[index - 1] + 1; l <= layers - (stages - index); l++) {
            if (canStart.test(l)) {
                starts[index] = l;
                fill(starts, index + 1, layers, canStart, out);
            }
        }
    }

    /**
     * 1F1B at 4 ranks and 8 microbatches: the linear partition (0-3 | 4-7 | 8-11 | 12-16: the cheap first layer leaves
     * stage 0 at 82 % of the others) is not the fastest split; the search finds the exhaustive optimum, a split whose
     * first stage takes the fifth layer. Fails on the old rule, which kept the linear partition.
     */
    @Test
    void oneFOneBAtFourRanksTakesTheFastestSplitNotTheLinearPartition() {
        PipelineShape shape = new PipelineShape(4, 8, 1);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        int[] balanced = linearPartition(4);
        assertArrayEquals(new int[] {0, 4, 8, 12, 17}, balanced);
        int[] chosen = StageSplitSearch.search(balanced, l -> true, PROFILE, schedule, shape);
        long exhaustive = splits(17, 4, l -> true).stream()
                .mapToLong(s -> StageSplitSearch.makespan(s, PROFILE, schedule, shape)).min().orElseThrow();
        long chosenTime = StageSplitSearch.makespan(chosen, PROFILE, schedule, shape);
        assertEquals(exhaustive, chosenTime, "chosen " + Arrays.toString(chosen));
        assertTrue(chosenTime < StageSplitSearch.makespan(balanced, PROFILE, schedule, shape));
        assertArrayEquals(new int[] {0, 5, 9, 13, 17}, chosen);
    }

    /** Never slower than where it starts, for every schedule the trainer runs, at 4 and 8 ranks. */
    @Test
    void neverSlowerThanTheLinearPartition() {
        for (int ranks : new int[] {4, 8}) {
            int m = 2 * ranks;
            PipelineShape shape = new PipelineShape(ranks, m, 1);
            for (Schedule schedule : List.of(ScheduleGenerators.gpipe(ranks, m), ScheduleGenerators.oneFOneB(ranks, m),
                    ScheduleGenerators.zeroBubbleH1(ranks, m))) {
                int[] balanced = linearPartition(ranks);
                int[] chosen = StageSplitSearch.search(balanced, l -> true, PROFILE, schedule, shape);
                assertTrue(StageSplitSearch.makespan(chosen, PROFILE, schedule, shape)
                        <= StageSplitSearch.makespan(balanced, PROFILE, schedule, shape), Arrays.toString(chosen));
            }
        }
    }

    /** Layers that may not start a stage (inside a tensor-parallel block) are never chosen; the optimum among the rest is. */
    @Test
    void respectsWhereStagesMayStart() {
        PipelineShape shape = new PipelineShape(4, 8, 1);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        IntPredicate canStart = l -> l != 5 && l != 9;
        int[] chosen = StageSplitSearch.search(new int[] {0, 4, 8, 12, 17}, canStart, PROFILE, schedule, shape);
        for (int s = 1; s < 4; s++) {
            assertTrue(canStart.test(chosen[s]), Arrays.toString(chosen));
        }
        assertTrue(StageSplitSearch.makespan(chosen, PROFILE, schedule, shape)
                <= StageSplitSearch.makespan(new int[] {0, 4, 8, 12, 17}, PROFILE, schedule, shape));
    }

    @Test
    void refusesAStartThatIsNotASplit() {
        PipelineShape shape = new PipelineShape(4, 8, 1);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        for (int[] bad : new int[][] {{0, 4, 8, 17}, {1, 4, 8, 12, 17}, {0, 4, 4, 12, 17}, {0, 4, 9, 12, 17}}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> StageSplitSearch.search(bad, l -> l != 9, PROFILE, schedule, shape));
            assertTrue(e.getMessage().contains("fix:"), e.getMessage());
        }
    }
}
