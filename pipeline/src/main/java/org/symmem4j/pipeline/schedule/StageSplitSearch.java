package org.symmem4j.pipeline.schedule;

import java.util.Arrays;
import java.util.Objects;
import java.util.function.Function;
import java.util.function.IntPredicate;

/**
 * Chooses where a chain of layers is cut into pipeline stages by the step time the schedule that runs them would
 * take: the simulator's makespan ({@link ScheduleSimulator}) for each candidate's per-stage pass times, least wins.
 *
 * <p>Why not the smallest largest stage alone (the linear partition every split starts from): at layer granularity
 * the stages are rarely equal (a cheap first layer, an output layer that computes the loss), and which of the splits
 * near the balanced one runs fastest depends on the schedule and the microbatch count. With few microbatches per rank
 * the warm-up and cool-down weigh as much as the steady state, and a split whose largest stage is a little larger but
 * whose first stages are fuller fills the pipeline sooner: in 1F1B at 4 ranks and 8 microbatches, a 17-layer MLP whose
 * first layer costs a third of the others runs a simulated 1.0 % faster as layers {@code 0-4 | 5-8 | 9-12 | 13-16}
 * than as the balanced {@code 0-3 | 4-7 | 8-11 | 12-16}. Planners that simulate their candidates (PipeDream's,
 * AutoPipe's) do the same for the same reason.
 *
 * <p>The search is local and deterministic: from the given split it tries every move of a run of consecutive
 * boundaries by one layer either way (a run, so that a layer can travel from the last stage to the first in one
 * move), takes the move whose makespan is least if it is strictly less than the current one, and repeats until no
 * move helps. The result is never slower, by the simulator, than the split it starts from.
 */
public final class StageSplitSearch {

    private StageSplitSearch() {
    }

    /**
     * The stage starts, from {@code starts} by moves of consecutive boundaries, whose simulated step is shortest.
     *
     * @param starts    the split to start from: {@code starts[s]} is stage s's first layer, {@code starts[0] == 0},
     *                  {@code starts[stages]} the layer count, strictly increasing
     * @param canStart  which layers may start a stage (layer 0 always); the given split's starts must all pass
     * @param durations the per-stage pass times of a split, given its starts (e.g. a profile's layer times summed)
     * @param schedule  the schedule the stages will run
     * @param shape     the pipeline it runs on; its stage count is {@code starts.length - 1}
     * @return the chosen starts (a new array), {@code starts}' values when no move shortens the step
     * @throws IllegalArgumentException when {@code starts} is not a split of its layers into {@code shape}'s stages,
     *                                  or a start fails {@code canStart}, or the schedule deadlocks
     */
    public static int[] search(int[] starts, IntPredicate canStart, Function<int[], StageDurations> durations,
                               Schedule schedule, PipelineShape shape) {
        Objects.requireNonNull(starts, "starts");
        Objects.requireNonNull(canStart, "canStart");
        Objects.requireNonNull(durations, "durations");
        requireSplit(starts, canStart, shape);
        int[] best = starts.clone();
        long bestTime = makespan(best, durations, schedule, shape);
        int stages = best.length - 1;
        while (true) {
            int[] move = null;
            long moveTime = bestTime;
            for (int first = 1; first < stages; first++) {
                for (int last = first; last < stages; last++) {
                    for (int delta = -1; delta <= 1; delta += 2) {
                        int[] candidate = shifted(best, first, last, delta, canStart);
                        if (candidate == null) {
                            continue;
                        }
                        long time = makespan(candidate, durations, schedule, shape);
                        if (time < moveTime) {
                            moveTime = time;
                            move = candidate;
                        }
                    }
                }
            }
            if (move == null) {
                return best;
            }
            best = move;
            bestTime = moveTime;
        }
    }

    /**
     * The simulated step time of the split {@code starts}.
     *
     * @param starts    stage starts, as {@link #search} takes them
     * @param durations the per-stage pass times of a split, given its starts
     * @param schedule  the schedule
     * @param shape     the pipeline
     * @return the makespan in {@code durations}' unit
     * @throws IllegalStateException when the schedule deadlocks
     */
    public static long makespan(int[] starts, Function<int[], StageDurations> durations, Schedule schedule,
                                PipelineShape shape) {
        return ScheduleSimulator.simulate(schedule, shape, durations.apply(starts.clone())).requireCompleted().makespan();
    }

    /** Boundaries {@code first..last} moved by {@code delta}, or null when a stage would empty or start where it may not. */
    private static int[] shifted(int[] starts, int first, int last, int delta, IntPredicate canStart) {
        int[] moved = starts.clone();
        for (int s = first; s <= last; s++) {
            moved[s] += delta;
            if (!canStart.test(moved[s])) {
                return null;
            }
        }
        for (int s = 1; s < moved.length; s++) {
            if (moved[s] <= moved[s - 1]) {
                return null;
            }
        }
        return moved;
    }

    private static void requireSplit(int[] starts, IntPredicate canStart, PipelineShape shape) {
        Objects.requireNonNull(shape, "shape");
        boolean ok = starts.length == shape.stageCount() + 1 && starts[0] == 0;
        for (int s = 1; ok && s < starts.length; s++) {
            ok = starts[s] > starts[s - 1] && (s == starts.length - 1 || canStart.test(starts[s]));
        }
        if (!ok) {
            throw new IllegalArgumentException("stage starts " + Arrays.toString(starts) + " expected " + (shape.stageCount()
                    + 1) + " strictly increasing entries from 0 to the layer count, each inner one a layer that may start a"
                    + " stage (fix: start from PipelineStageSplit's balanced split of the same network)");
        }
    }
}
