package org.symmem4j.pipeline.schedule;

import java.util.List;
import java.util.stream.Collectors;

/**
 * What a {@link ScheduleSimulator} dry run found: either every rank ran its whole list
 * ({@link Completed}), or some ranks wait forever ({@link Deadlocked}).
 */
public sealed interface SimulationResult permits SimulationResult.Completed, SimulationResult.Deadlocked {

    /**
     * This result as {@link Completed}.
     *
     * @return this result
     * @throws IllegalStateException with {@link Deadlocked#message()} when the schedule deadlocks
     */
    default Completed requireCompleted() {
        return switch (this) {
            case Completed completed -> completed;
            case Deadlocked deadlocked -> throw new IllegalStateException(deadlocked.message());
        };
    }

    /**
     * Every rank ran its whole list.
     *
     * <p><b>Bubble fraction</b>: every rank is counted over the same window, from time 0 (when the
     * first action may start) to the makespan (when the last action ends). A rank is busy while it
     * runs an action and idle otherwise, including before its first action, after its last one and
     * while it waits for another rank's output or for communication latency. Then
     *
     * <pre>
     *   bubbleFraction = sum over ranks of idleTime  /  (ranks * makespan)
     *                  = 1 - sum over ranks of busyTime / (ranks * makespan)
     * </pre>
     *
     * the idle share of the ranks x [0, makespan] rectangle. Both terms are exact integers
     * ({@link #totalIdleTime()}, {@link #totalTime()}); {@link #bubbleFraction()} divides them once,
     * and since IEEE division is correctly rounded, two schedules with the same rational bubble get
     * the same double. For 1F1B with any forward and backward times and no latency it is
     * {@code (p - 1) / (m + p - 1)}; for interleaved 1F1B with v virtual stages per rank, each taking
     * the same times, {@code (p - 1) / (v * m + p - 1)}.
     *
     * @param makespan     time at which the last action on any rank ends
     * @param ranks        per-rank figures, element {@code r} for rank {@code r}
     * @param actionStarts per rank, the start time of each action of its list, in list order (each
     *                     ends its {@link ActionDurations#of duration} later)
     */
    record Completed(long makespan, List<RankStats> ranks, List<long[]> actionStarts) implements SimulationResult {

        /** Copies the lists (the result is immutable). */
        public Completed {
            ranks = List.copyOf(ranks);
            actionStarts = actionStarts.stream().map(long[]::clone).toList();
        }

        /**
         * When action {@code index} of rank {@code rank}'s list starts.
         *
         * @param rank the rank
         * @param index the action's index in the rank's list
         * @return the start time
         */
        public long startOf(int rank, int index) {
            return actionStarts.get(rank)[index];
        }

        /**
         * Sum of every rank's idle time in {@code [0, makespan]}.
         *
         * @return the idle rank-time
         */
        public long totalIdleTime() {
            return ranks.stream().mapToLong(RankStats::idleTime).sum();
        }

        /**
         * {@code ranks * makespan}: the rank-time over which the bubble is measured.
         *
         * @return the rank-time
         */
        public long totalTime() {
            return ranks.size() * makespan;
        }

        /**
         * {@code totalIdleTime() / totalTime()}; see the class comment.
         *
         * @return the bubble fraction, in [0, 1]
         */
        public double bubbleFraction() {
            return (double) totalIdleTime() / totalTime();
        }

        /**
         * Rank {@code rank}'s figures.
         *
         * @param rank the rank
         * @return its figures
         */
        public RankStats rank(int rank) {
            return ranks.get(rank);
        }
    }

    /**
     * One rank's figures in a completed run.
     *
     * @param rank                    the rank
     * @param busyTime                sum of the durations of its actions
     * @param idleTime                {@code makespan - busyTime}
     * @param peakInFlightActivations most (stage, microbatch) pairs, over all of the rank's (virtual)
     *                                stages, whose forward has run on this rank and whose backward has
     *                                not, at any point of its list; a rank runs its list in order, so
     *                                this is the largest {@code #F - #B} over the list's prefixes and
     *                                does not depend on durations
     */
    record RankStats(int rank, long busyTime, long idleTime, int peakInFlightActivations) {
    }

    /**
     * Some ranks can never run their next action: the schedule has a cycle of cross-rank waits.
     *
     * @param stuckRanks       every rank that has actions left, in rank order
     * @param completedActions actions that did run before everything stopped
     * @param totalActions     actions in the schedule
     */
    record Deadlocked(List<StuckRank> stuckRanks, int completedActions, int totalActions)
            implements SimulationResult {

        /** Copies the stuck ranks (the result is immutable). */
        public Deadlocked {
            stuckRanks = List.copyOf(stuckRanks);
        }

        /**
         * One line naming every stuck rank, the action it is stuck at and what that action waits for.
         *
         * @return the message
         */
        public String message() {
            return "deadlock: stuckRanks=" + stuckRanks.size() + " completedActions=" + completedActions + "/"
                    + totalActions + ": "
                    + stuckRanks.stream().map(StuckRank::toString).collect(Collectors.joining("; "))
                    + " (each rank runs its list in order; reorder so no rank waits on an action queued"
                    + " behind its own)";
        }
    }

    /**
     * A rank that cannot go on.
     *
     * @param rank             the stuck rank
     * @param index            index of its next action in its list
     * @param action           its next action, which cannot start
     * @param waitingFor       the action whose output {@code action} needs and which has not run
     * @param waitingForRank   the rank whose list holds {@code waitingFor}
     * @param waitingForIndex  index of {@code waitingFor} in that rank's list
     */
    record StuckRank(int rank, int index, Action action, Action waitingFor, int waitingForRank,
                     int waitingForIndex) {
        @Override
        public String toString() {
            return "rank=" + rank + " index=" + index + " action=" + action + " waits for " + waitingFor
                    + " (rank=" + waitingForRank + " index=" + waitingForIndex + ", not run)";
        }
    }
}
