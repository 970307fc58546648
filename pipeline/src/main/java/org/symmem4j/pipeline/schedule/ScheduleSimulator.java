package org.symmem4j.pipeline.schedule;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * Dry-runs every rank of a {@link Schedule} together, without running any model, to find deadlocks
 * and to measure the makespan, the bubble and peak in-flight activations before a real run.
 *
 * <p>Rules: each rank runs its actions strictly in list order, one at a time, each taking
 * {@link StageDurations#of(ActionType, int)} (with {@link ActionDurations}, the same for every stage).
 * An action starts as soon as its rank is free and its input is ready:
 *
 * <ul>
 *   <li>F(s, mb) needs F(s - 1, mb) done (nothing for s = 0);</li>
 *   <li>B(s, mb) needs B(s + 1, mb) done; B of the last stage needs F(last, mb) done;</li>
 *   <li>an I (input-gradient half of a split backward) needs what its B would, where a B of the next
 *       stage may be that stage's I; W(s, mb) needs I(s, mb) done, on the same rank;</li>
 *   <li>an input made on another rank is ready {@code communicationLatency} after
 *       its action ends; one made on the same rank is ready when it ends.</li>
 * </ul>
 *
 * Start times are therefore the longest paths through these dependencies; the result does not
 * depend on the order in which the simulator visits ranks.
 */
public final class ScheduleSimulator {

    /** End time of an action that has not run yet; real end times are >= 1. */
    private static final long NOT_RUN = -1;

    private ScheduleSimulator() {
    }

    /**
     * {@link #simulate(Schedule, PipelineShape, ActionDurations)} with {@link ActionDurations#unit()}.
     *
     * @param schedule the schedule to run
     * @param shape the pipeline it is for
     * @return the result
     * @throws IllegalArgumentException when {@link ScheduleValidator} rejects the schedule
     */
    public static SimulationResult simulate(Schedule schedule, PipelineShape shape) {
        return simulate(schedule, shape, ActionDurations.unit());
    }

    /**
     * Runs the dry run.
     *
     * @param schedule the schedule to run
     * @param shape the pipeline it is for
     * @param durations every stage's forward, backward and communication times
     * @return {@link SimulationResult.Completed} with makespan, busy/idle time and peak in-flight
     *         activations per rank, or {@link SimulationResult.Deadlocked} naming every stuck rank
     * @throws IllegalArgumentException when {@link ScheduleValidator} rejects the schedule (the
     *                                  validator's message): a run needs every action exactly once
     */
    public static SimulationResult simulate(Schedule schedule, PipelineShape shape, ActionDurations durations) {
        Objects.requireNonNull(durations, "durations");
        Objects.requireNonNull(shape, "shape");
        return simulate(schedule, shape, StageDurations.uniform(shape.stageCount(), durations));
    }

    /**
     * Runs the dry run with each stage's own forward and backward times, e.g. a split's measured or
     * profiled pass times.
     *
     * @param schedule the schedule to run
     * @param shape the pipeline it is for
     * @param durations each stage's forward and backward times, and the communication latency
     * @return the result, as for {@link #simulate(Schedule, PipelineShape, ActionDurations)}
     * @throws IllegalArgumentException when {@link ScheduleValidator} rejects the schedule, or the
     *                                  durations describe another number of stages than {@code shape}
     */
    public static SimulationResult simulate(Schedule schedule, PipelineShape shape, StageDurations durations) {
        Objects.requireNonNull(durations, "durations");
        ScheduleValidator.requireValid(schedule, shape);
        if (durations.stageCount() != shape.stageCount()) {
            throw new IllegalArgumentException("stage durations for stages=" + durations.stageCount() + " expected="
                    + shape.stageCount() + " (" + shape + "); fix: give one forward and one backward time per stage");
        }
        int ranks = shape.ranks();
        boolean[][] split = splitBackwards(schedule, shape);
        // end time of every action, by [type][stage][microbatch]; NOT_RUN until it has run
        long[][][] endTimes = new long[ActionType.values().length][shape.stageCount()][shape.microbatches()];
        for (long[][] byStage : endTimes) {
            for (long[] byMicrobatch : byStage) {
                Arrays.fill(byMicrobatch, NOT_RUN);
            }
        }
        int[] nextIndex = new int[ranks];
        long[][] starts = new long[ranks][];
        for (int rank = 0; rank < ranks; rank++) {
            starts[rank] = new long[schedule.actions(rank).size()];
        }
        long[] rankFreeAt = new long[ranks];
        long[] busyTime = new long[ranks];
        int completedActions = 0;
        boolean progressed = true;
        while (progressed) {
            progressed = false;
            for (int rank = 0; rank < ranks; rank++) {
                List<Action> actions = schedule.actions(rank);
                while (nextIndex[rank] < actions.size()) {
                    Action action = actions.get(nextIndex[rank]);
                    Action input = inputOf(action, shape, split);
                    long start = rankFreeAt[rank];
                    if (input != null) {
                        long inputEnd = endTime(endTimes, input);
                        if (inputEnd == NOT_RUN) {
                            break;
                        }
                        long latency = shape.rankOf(input.stage()) == rank ? 0 : durations.communicationLatency();
                        start = Math.max(start, Math.addExact(inputEnd, latency));
                    }
                    starts[rank][nextIndex[rank]] = start;
                    long duration = durations.of(action.type(), action.stage());
                    long end = Math.addExact(start, duration);
                    endTimes[action.type().ordinal()][action.stage()][action.microbatch()] = end;
                    rankFreeAt[rank] = end;
                    busyTime[rank] += duration;
                    nextIndex[rank]++;
                    completedActions++;
                    progressed = true;
                }
            }
        }
        if (completedActions < schedule.actionCount()) {
            return deadlock(schedule, shape, split, nextIndex, completedActions);
        }
        long makespan = 0;
        for (long freeAt : rankFreeAt) {
            makespan = Math.max(makespan, freeAt);
        }
        List<SimulationResult.RankStats> stats = new ArrayList<>(ranks);
        for (int rank = 0; rank < ranks; rank++) {
            stats.add(new SimulationResult.RankStats(rank, busyTime[rank], makespan - busyTime[rank],
                    peakInFlightActivations(schedule.actions(rank))));
        }
        return new SimulationResult.Completed(makespan, stats, List.of(starts));
    }

    /** The action whose output {@code action} consumes, or {@code null} for F of stage 0. */
    private static Action inputOf(Action action, PipelineShape shape, boolean[][] split) {
        int lastStage = shape.stageCount() - 1;
        int mb = action.microbatch();
        return switch (action.type()) {
            case FORWARD -> action.stage() == 0 ? null : Action.forward(action.stage() - 1, mb);
            case BACKWARD, INPUT_GRADIENT -> {
                if (action.stage() == lastStage) {
                    yield Action.forward(lastStage, mb);
                }
                int next = action.stage() + 1;
                yield split[next][mb] ? Action.inputGradient(next, mb) : Action.backward(next, mb);
            }
            case WEIGHT_GRADIENT -> Action.inputGradient(action.stage(), mb);
        };
    }

    /** {@code [stage][microbatch]}: whether the schedule splits that backward into I and W. */
    private static boolean[][] splitBackwards(Schedule schedule, PipelineShape shape) {
        boolean[][] split = new boolean[shape.stageCount()][shape.microbatches()];
        for (int rank = 0; rank < schedule.rankCount(); rank++) {
            for (Action action : schedule.actions(rank)) {
                if (action.type() == ActionType.INPUT_GRADIENT) {
                    split[action.stage()][action.microbatch()] = true;
                }
            }
        }
        return split;
    }

    private static long endTime(long[][][] endTimes, Action action) {
        return endTimes[action.type().ordinal()][action.stage()][action.microbatch()];
    }

    /**
     * Largest {@code #F - #B - #W} over the prefixes of one rank's list: a split backward frees the
     * activation only at its W, which still reads it.
     */
    private static int peakInFlightActivations(List<Action> actions) {
        int inFlight = 0;
        int peak = 0;
        for (Action action : actions) {
            inFlight += switch (action.type()) {
                case FORWARD -> 1;
                case BACKWARD, WEIGHT_GRADIENT -> -1;
                case INPUT_GRADIENT -> 0;
            };
            peak = Math.max(peak, inFlight);
        }
        return peak;
    }

    private static SimulationResult.Deadlocked deadlock(Schedule schedule, PipelineShape shape, boolean[][] split,
                                                        int[] nextIndex, int completedActions) {
        List<SimulationResult.StuckRank> stuck = new ArrayList<>();
        for (int rank = 0; rank < shape.ranks(); rank++) {
            List<Action> actions = schedule.actions(rank);
            if (nextIndex[rank] == actions.size()) {
                continue;
            }
            Action action = actions.get(nextIndex[rank]);
            // a valid schedule holds the input exactly once, on its owner's list; it has not run,
            // else this rank would have gone on
            Action input = inputOf(action, shape, split);
            int inputRank = shape.rankOf(input.stage());
            int inputIndex = schedule.actions(inputRank).indexOf(input);
            stuck.add(new SimulationResult.StuckRank(rank, nextIndex[rank], action, input, inputRank, inputIndex));
        }
        return new SimulationResult.Deadlocked(stuck, completedActions, schedule.actionCount());
    }
}
