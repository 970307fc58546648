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
 *   <li><b>counts</b>: per stage and microbatch one F, and either one B or one I and one W (a split
 *       backward, see {@link ActionType}): no duplicate, none missing, no B beside an I or a W;</li>
 *   <li><b>local order</b>: a microbatch's actions on one rank appear in pipeline order, forwards by
 *       ascending stage, then backwards by descending stage. Each action depends (through the stages
 *       between) on every action before it in that order, so a rank that lists them the other way
 *       round waits on itself forever. This covers B(s, mb) after F(s, mb) and, when interleaved,
 *       the order between a rank's virtual stages. An I stands where its B would; a W comes after
 *       its own I and nothing waits for it.</li>
 * </ul>
 *
 * Orders that are only wrong across ranks (two ranks each waiting on the other) pass here;
 * {@link ScheduleSimulator} finds them as deadlocks.
 */
public final class ScheduleValidator {

    /** What every stage runs per microbatch, as violations say it. */
    private static final String ONCE = "each stage runs one F per microbatch and one B, or its halves one I and one W";

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
                            + " (" + ONCE + "; remove one)");
                    continue;
                }
                int owner = shape.rankOf(action.stage());
                if (owner != rank) {
                    violations.add("stage on wrong rank: " + here + " action=" + action + " expected rank="
                            + owner + " (stage s lives on rank s % ranks = " + action.stage() + " % "
                            + shape.ranks() + "; move it to rank " + owner + ")");
                    continue;
                }
                if (action.type() == ActionType.WEIGHT_GRADIENT) {
                    // needs only its own input-gradient half, which holds what it uses; nothing waits for it
                    Action half = Action.inputGradient(action.stage(), action.microbatch());
                    Position halfAt = firstSeen.get(half);
                    if (halfAt == null || halfAt.rank() != rank) {
                        violations.add("dependency order: " + here + " action=" + action + " comes before " + half
                                + " (a weight gradient uses what its input gradient kept; move " + action + " after "
                                + half + ")");
                    }
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
        for (int stage = 0; stage < shape.stageCount(); stage++) {
            for (int microbatch = 0; microbatch < shape.microbatches(); microbatch++) {
                missing(violations, firstSeen, shape, Action.forward(stage, microbatch));
                Action whole = Action.backward(stage, microbatch);
                Action input = Action.inputGradient(stage, microbatch);
                Action weight = Action.weightGradient(stage, microbatch);
                boolean split = firstSeen.containsKey(input) || firstSeen.containsKey(weight);
                if (split && firstSeen.containsKey(whole)) {
                    violations.add("backward twice: action=" + whole + " and its halves " + input + "/" + weight
                            + " on rank=" + shape.rankOf(stage) + " (" + ONCE + "; keep " + whole + " or the halves)");
                } else if (split) {
                    missing(violations, firstSeen, shape, input);
                    missing(violations, firstSeen, shape, weight);
                } else {
                    missing(violations, firstSeen, shape, whole);
                }
            }
        }
        return List.copyOf(violations);
    }

    private static void missing(List<String> violations, Map<Action, Position> seen, PipelineShape shape,
                                Action expected) {
        if (!seen.containsKey(expected)) {
            violations.add("missing action: action=" + expected + " expected on rank=" + shape.rankOf(expected.stage())
                    + " (" + ONCE + ")");
        }
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
                    + "; fix: change the actions as each line says, or build the schedule with ScheduleGenerators):\n  "
                    + String.join("\n  ", violations));
        }
    }

    /**
     * Position of an action in its microbatch's chain F(0) .. F(S-1), B(S-1) .. B(0) (an I in its B's
     * place): each action needs the one before it done first. A W is off the chain: it needs only its
     * own I.
     */
    static int pipelineOrder(Action action, PipelineShape shape) {
        return switch (action.type()) {
            case FORWARD -> action.stage();
            case BACKWARD, INPUT_GRADIENT -> 2 * shape.stageCount() - 1 - action.stage();
            case WEIGHT_GRADIENT -> throw org.symmem4j.parallel.Invariants.violated("pipelineOrder(" + action + "): a"
                    + " weight gradient is not on the chain of its microbatch; violations() checks it apart");
        };
    }
}
