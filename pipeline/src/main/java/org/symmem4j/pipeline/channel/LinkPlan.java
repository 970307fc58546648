package org.symmem4j.pipeline.channel;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.symmem4j.pipeline.schedule.Action;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.ActionType;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.ScheduleValidator;
import org.symmem4j.pipeline.schedule.SimulationResult;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * What a schedule asks of the stage links, checked before anything runs. Links are FIFOs, so each
 * one must be consumed in the order it is filled, and they hold a fixed number of messages, so the
 * schedule must make progress with that many:
 *
 * <ul>
 *   <li><b>order</b>: on the activation link {@code s -> s+1}, the order of the F(s, ·) on the
 *       sender's list must equal the order of the F(s+1, ·) on the receiver's; on the gradient link
 *       {@code s+1 -> s}, B(s+1, ·) against B(s, ·). {@link ScheduleValidator} and the simulator
 *       allow other orders (they model unbounded, addressable buffers); the executor does not.</li>
 *   <li><b>capacity</b>: {@link #minimumSlots()} dry-runs every rank with bounded links, exactly
 *       as the executor blocks: an action takes its input message, computes, releases the input's
 *       slot, then waits for room to post its output. Ranks are deterministic and every link has
 *       one writer and one reader, so whether this run deadlocks does not depend on timing (a
 *       Kahn process network): the dry run's answer is the real one.</li>
 * </ul>
 */
public final class LinkPlan {

    /**
     * One directed link between adjacent stages on different ranks.
     *
     * @param fromStage the sending stage
     * @param toStage the receiving stage, adjacent to {@code fromStage}
     * @param carriedBy FORWARD for activations, BACKWARD for gradients
     */
    public record Link(int fromStage, int toStage, ActionType carriedBy) {
        @Override
        public String toString() {
            return (carriedBy == ActionType.FORWARD ? "activation" : "gradient") + " link stage " + fromStage
                    + " -> stage " + toStage;
        }
    }

    private final Schedule schedule;
    private final PipelineShape shape;

    private LinkPlan(Schedule schedule, PipelineShape shape) {
        this.schedule = schedule;
        this.shape = shape;
    }

    /**
     * Checks {@code schedule} for {@code shape}: valid ({@link ScheduleValidator}) and every link
     * consumed in the order it is filled.
     *
     * @param schedule the schedule
     * @param shape the pipeline it is for
     * @return the plan
     * @throws IllegalArgumentException with the validator's violations, or naming the first link
     *                                  whose two ends disagree and where
     */
    public static LinkPlan of(Schedule schedule, PipelineShape shape) {
        ScheduleValidator.requireValid(schedule, shape);
        LinkPlan plan = new LinkPlan(schedule, shape);
        for (Link link : plan.links()) {
            List<Integer> sent = plan.microbatchOrder(link.fromStage(), link.carriedBy());
            List<Integer> received = plan.microbatchOrder(link.toStage(), link.carriedBy());
            if (!sent.equals(received)) {
                int at = 0;
                while (sent.get(at).equals(received.get(at))) {
                    at++;
                }
                throw new IllegalArgumentException("the schedule uses the " + link + " out of order: message " + at
                        + " is sent for microbatch " + sent.get(at) + " (rank " + shape.rankOf(link.fromStage())
                        + ") but expected as microbatch " + received.get(at) + " (rank " + shape.rankOf(link.toStage())
                        + "); sent order=" + sent + " received order=" + received
                        + " (links are FIFOs; fix: list each stage's microbatches in the same order on both ranks)");
            }
        }
        return plan;
    }

    /**
     * Links between stages on different ranks (none when there is one rank).
     *
     * @return the links, in stage order
     */
    public List<Link> links() {
        List<Link> links = new ArrayList<>();
        for (int stage = 0; stage + 1 < shape.stageCount(); stage++) {
            if (shape.rankOf(stage) != shape.rankOf(stage + 1)) {
                links.add(new Link(stage, stage + 1, ActionType.FORWARD));
                links.add(new Link(stage + 1, stage, ActionType.BACKWARD));
            }
        }
        return links;
    }

    /**
     * The fewest slots per link with which the schedule runs to the end; a link with fewer makes
     * some ranks wait on each other forever. At most the microbatch count (a link never holds more
     * messages than a step sends).
     *
     * @return the slot count, in [1, microbatches]
     * @throws IllegalArgumentException when the schedule deadlocks even with unbounded links (as
     *                                  {@code ScheduleSimulator} reports)
     */
    public int minimumSlots() {
        if (!completes(shape.microbatches())) {
            throw new IllegalArgumentException("the schedule deadlocks for " + shape + " however many slots the links"
                    + " have (ScheduleSimulator.simulate(...) names the ranks that wait on each other; fix:"
                    + " validate the"
                    + " schedule with ScheduleValidator, or use a generated one)");
        }
        for (int slots = 1; slots < shape.microbatches(); slots++) {
            if (completes(slots)) {
                return slots;
            }
        }
        return shape.microbatches();
    }

    /**
     * Throws unless the schedule runs to the end with {@code slots} per link.
     *
     * @param slots the configured slots per link
     * @throws IllegalArgumentException naming the configured and the needed slot count
     */
    public void requireSlots(int slots) {
        if (slots < 1 || !completes(slots)) {
            int needed = minimumSlots();
            throw new IllegalArgumentException("stage links with slots=" + slots + " deadlock this schedule: expected"
                    + " slots >= " + needed + " for " + shape + " (fix: raise the link slots: 1F1B needs few, GPipe as"
                    + " many as the microbatches one rank runs ahead)");
        }
    }

    /**
     * The slots per link with which no sender ever waits for room when actions take
     * {@code durations}: the most messages any link holds at once in the simulator's (unbounded)
     * run, a message counting from its sender's post (the end of the producing action) until its
     * receiver gives the slot back (the end of the consuming action). With at least this many, the
     * executor runs as the simulator predicts; {@link #minimumSlots()} only avoids deadlock.
     *
     * @param durations the action times to simulate with
     * @return the slot count, at least 1
     * @throws IllegalStateException if the schedule deadlocks
     */
    public int stallFreeSlots(ActionDurations durations) {
        return stallFreeSlots(StageDurations.uniform(shape.stageCount(), durations));
    }

    /**
     * As {@link #stallFreeSlots(ActionDurations)} with each stage's own action times: uneven stages (a split by
     * measured times whose stages still differ, an output stage that computes the loss) let a sender run further
     * ahead of a slower receiver than equal ones do.
     *
     * @param durations the per-stage action times to simulate with
     * @return the slot count, at least 1
     * @throws IllegalStateException if the schedule deadlocks
     */
    public int stallFreeSlots(StageDurations durations) {
        SimulationResult.Completed run = ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
        int most = 1;
        for (Link link : links()) {
            List<Long> posts = new ArrayList<>();
            List<Long> releases = new ArrayList<>();
            for (int rank = 0; rank < shape.ranks(); rank++) {
                List<Action> actions = schedule.actions(rank);
                for (int index = 0; index < actions.size(); index++) {
                    Action action = actions.get(index);
                    if (action.type() != link.carriedBy()) {
                        continue;
                    }
                    long end = run.startOf(rank, index) + durations.of(action.type(), action.stage());
                    if (action.stage() == link.fromStage()) {
                        posts.add(end);
                    } else if (action.stage() == link.toStage()) {
                        releases.add(end);
                    }
                }
            }
            posts.sort(null);
            releases.sort(null);
            // sweep: at equal times count the post first (the slot may not be back yet)
            int held = 0;
            for (int p = 0, r = 0; p < posts.size(); ) {
                if (r < releases.size() && releases.get(r) < posts.get(p)) {
                    held--;
                    r++;
                } else {
                    held++;
                    p++;
                    most = Math.max(most, held);
                }
            }
        }
        return Math.max(most, minimumSlots());
    }

    /** The microbatches of {@code type} actions of {@code stage}, in its rank's list order. */
    private List<Integer> microbatchOrder(int stage, ActionType type) {
        List<Integer> order = new ArrayList<>();
        for (Action action : schedule.actions(shape.rankOf(stage))) {
            if (action.stage() == stage && action.type() == type) {
                order.add(action.microbatch());
            }
        }
        return order;
    }

    /** The bounded dry run for {@code slots} per cross-rank link (same-rank hand-offs are unbounded). */
    private boolean completes(int slots) {
        int stages = shape.stageCount();
        // per receiving stage and direction: messages posted and released, as the executor counts them
        // indexed by the link's type (ActionType.link()): an I's gradient travels on its B's link
        long[][] posted = new long[ActionType.values().length][stages];
        long[][] released = new long[ActionType.values().length][stages];
        int ranks = shape.ranks();
        int[] next = new int[ranks];
        boolean[] computed = new boolean[ranks]; // the next action has run and holds its output, unposted
        boolean progressed = true;
        int done = 0;
        int total = schedule.actionCount();
        while (progressed) {
            progressed = false;
            for (int rank = 0; rank < ranks; rank++) {
                List<Action> actions = schedule.actions(rank);
                while (next[rank] < actions.size()) {
                    Action action = actions.get(next[rank]);
                    ActionType link = action.type().link();
                    int type = link == null ? 0 : link.ordinal();
                    if (!computed[rank]) {
                        if (hasInput(action) && posted[type][action.stage()] == released[type][action.stage()]) {
                            break; // input not posted yet
                        }
                        if (hasInput(action)) {
                            released[type][action.stage()]++;
                        }
                        computed[rank] = true;
                    }
                    int target = outputStage(action);
                    if (target >= 0) {
                        boolean bounded = shape.rankOf(target) != rank;
                        if (bounded && posted[type][target] - released[type][target] >= slots) {
                            break; // link full: wait for the receiver's release
                        }
                        posted[type][target]++;
                    }
                    computed[rank] = false;
                    next[rank]++;
                    done++;
                    progressed = true;
                }
            }
        }
        return done == total;
    }

    /** Whether the action takes a message: every F but stage 0's, every B or I but the last stage's, no W. */
    private boolean hasInput(Action action) {
        ActionType link = action.type().link();
        if (link == null) {
            return false;
        }
        return link == ActionType.FORWARD ? action.stage() > 0 : action.stage() < shape.stageCount() - 1;
    }

    /** The stage the action's output goes to, or -1 (F of the last stage, B or I of stage 0, every W). */
    private int outputStage(Action action) {
        ActionType link = action.type().link();
        if (link == null) {
            return -1;
        }
        int to = link == ActionType.FORWARD ? action.stage() + 1 : action.stage() - 1;
        return to >= 0 && to < shape.stageCount() ? to : -1;
    }

    /**
     * The shape the plan was made for.
     *
     * @return ranks, microbatches and stages per rank
     */
    public PipelineShape shape() {
        return shape;
    }

    /**
     * The schedule the plan was made for.
     *
     * @return the schedule, as data
     */
    public Schedule schedule() {
        return Objects.requireNonNull(schedule);
    }
}
