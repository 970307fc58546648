package org.symmem4j.pipeline.schedule;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Checks a {@link Schedule} against a {@link PipelineShape} before anything runs it. Every violation
 * is reported, not just the first:
 *
 * <ul>
 *   <li><b>rank count</b>: one action list per rank of the shape;</li>
 *   <li><b>range</b>: every stage in {@code [0, stageCount)}, every microbatch in
 *       {@code [0, microbatches)};</li>
 *   <li><b>owner</b>: every action on the rank that owns its stage ({@code stage % ranks});</li>
 *   <li><b>counts</b>: every (stage, type, microbatch) exactly once: no duplicate, none missing;</li>
 *   <li><b>local order</b>: a microbatch's actions on one rank appear in pipeline order, forwards by
 *       ascending stage, then backwards by descending stage. Each action depends (through the stages
 *       between) on every action before it in that order, so a rank that lists them the other way
 *       round waits on itself forever. This covers B(s, mb) after F(s, mb) and, when interleaved,
 *       the order between a rank's virtual stages.</li>
 * </ul>
 *
 * Orders that are only wrong across ranks (two ranks each waiting on the other) pass here;
 * {@link ScheduleSimulator} finds them as deadlocks.
 */
public final class ScheduleValidator {

    private ScheduleValidator() {
    }

    /** Where an action sits in a schedule. */
    private record Position(int rank, int index) {
        @Override
        public String toString() {
            return "rank=" + rank + " index=" + index;
        }
    }

    /**
     * All violations, each a one-line message naming the rank, the action's index in the rank's
     * list (0-based), the action, what was expected and the fix; empty when the schedule is valid.
     *
     * @param schedule the schedule to check
     * @param shape the pipeline it is for
     * @return the violations (unmodifiable)
     */
    public static List<String> violations(Schedule schedule, PipelineShape shape) {
        Objects.requireNonNull(schedule, "schedule");
        Objects.requireNonNull(shape, "shape");
        List<String> violations = new ArrayList<>();
        if (schedule.rankCount() != shape.ranks()) {
            violations.add("rank count mismatch: found=" + schedule.rankCount() + " expected=" + shape.ranks()
                    + " (one action list per rank; " + shape + ")");
        }
        Map<Action, Position> firstSeen = new HashMap<>();
        for (int rank = 0; rank < schedule.rankCount(); rank++) {
            List<Action> actions = schedule.actions(rank);
            // per microbatch: the action furthest along the pipeline order seen so far on this rank
            Map<Integer, Action> furthestByMicrobatch = new HashMap<>();
            Map<Integer, Integer> furthestIndexByMicrobatch = new HashMap<>();
            for (int index = 0; index < actions.size(); index++) {
                Action action = actions.get(index);
                Position here = new Position(rank, index);
                if (action.stage() >= shape.stageCount()) {
                    violations.add("stage out of range: " + here + " action=" + action + " expected=stage in [0, "
                            + shape.stageCount() + ") (" + shape + ")");
                    continue;
                }
                if (action.microbatch() >= shape.microbatches()) {
                    violations.add("microbatch out of range: " + here + " action=" + action
                            + " expected=microbatch in [0, " + shape.microbatches() + ") (" + shape + ")");
                    continue;
                }
                Position first = firstSeen.putIfAbsent(action, here);
                if (first != null) {
                    violations.add("duplicate action: " + here + " action=" + action + " first at " + first
                            + " (each stage runs one F and one B per microbatch; remove one)");
                    continue;
                }
                int owner = shape.rankOf(action.stage());
                if (owner != rank) {
                    violations.add("stage on wrong rank: " + here + " action=" + action + " expected rank="
                            + owner + " (stage s lives on rank s % ranks = " + action.stage() + " % "
                            + shape.ranks() + "; move it to rank " + owner + ")");
                    continue;
                }
                Action furthest = furthestByMicrobatch.get(action.microbatch());
                if (furthest != null && pipelineOrder(action, shape) < pipelineOrder(furthest, shape)) {
                    violations.add("dependency order: " + here + " action=" + action + " comes after action="
                            + furthest + " at index=" + furthestIndexByMicrobatch.get(action.microbatch())
                            + ", which depends on it (on one rank a microbatch's forwards go by ascending stage,"
                            + " then its backwards by descending stage; move " + action + " before " + furthest
                            + ")");
                    continue;
                }
                furthestByMicrobatch.put(action.microbatch(), action);
                furthestIndexByMicrobatch.put(action.microbatch(), index);
            }
        }
        for (ActionType type : ActionType.values()) {
            for (int stage = 0; stage < shape.stageCount(); stage++) {
                for (int microbatch = 0; microbatch < shape.microbatches(); microbatch++) {
                    Action expected = new Action(stage, type, microbatch);
                    if (!firstSeen.containsKey(expected)) {
                        violations.add("missing action: action=" + expected + " expected on rank="
                                + shape.rankOf(stage) + " (each stage runs one F and one B per microbatch)");
                    }
                }
            }
        }
        return List.copyOf(violations);
    }

    /**
     * Throws when {@link #violations} finds any.
     *
     * @param schedule the schedule to check
     * @param shape the pipeline it is for
     * @throws IllegalArgumentException {@code invalid schedule: violations=N (shape): } followed by one
     *                                  line per violation
     */
    public static void requireValid(Schedule schedule, PipelineShape shape) {
        List<String> violations = violations(schedule, shape);
        if (!violations.isEmpty()) {
            throw new IllegalArgumentException("invalid schedule: violations=" + violations.size() + " (" + shape
                    + "):\n  " + String.join("\n  ", violations));
        }
    }

    /**
     * Position of an action in its microbatch's chain F(0) .. F(S-1), B(S-1) .. B(0): each action
     * needs the one before it done first.
     */
    static int pipelineOrder(Action action, PipelineShape shape) {
        return switch (action.type()) {
            case FORWARD -> action.stage();
            case BACKWARD -> 2 * shape.stageCount() - 1 - action.stage();
        };
    }
}
