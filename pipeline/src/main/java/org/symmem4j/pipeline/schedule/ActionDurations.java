package org.symmem4j.pipeline.schedule;

/**
 * How long actions take in a {@link ScheduleSimulator} dry run, in abstract integer time units
 * (integers keep every simulated time, and so the bubble fraction's numerator and denominator, exact).
 *
 * @param forward              time of one forward on one (virtual) stage, {@code >= 1}
 * @param backward             time of one backward on one (virtual) stage, {@code >= 1}
 * @param communicationLatency time from an action's end until an action on another rank that needs
 *                             its output may start, {@code >= 0}; an action on the same rank (an
 *                             interleaved rank's next virtual stage) may start at once
 */
public record ActionDurations(long forward, long backward, long communicationLatency) {

    /**
     * Checks the durations.
     *
     * @throws IllegalArgumentException when a duration is below 1
     */
    public ActionDurations {
        if (forward < 1) {
            throw new IllegalArgumentException("invalid action durations:"
                    + " forward=" + forward + " expected=forward >= 1 (fix: round measured times up to one unit)");
        }
        if (backward < 1) {
            throw new IllegalArgumentException(
                    "invalid action durations: backward=" + backward + " expected=backward >= 1 (fix: round"
                            + " measured times up to one unit)");
        }
        if (communicationLatency < 0) {
            throw new IllegalArgumentException("invalid action durations: communicationLatency="
                    + communicationLatency + " expected=communicationLatency >= 0 (fix: pass 0 or more time units)");
        }
    }

    /**
     * Forward and backward take 1, communication is free.
     *
     * @return the durations
     */
    public static ActionDurations unit() {
        return new ActionDurations(1, 1, 0);
    }

    /**
     * The given compute times, communication free (e.g. {@code of(1, 2)}: backward twice forward).
     *
     * @param forward duration of a forward, {@code >= 1}
     * @param backward duration of a backward, {@code >= 1}
     * @return the durations
     * @throws IllegalArgumentException if either is below 1
     */
    public static ActionDurations of(long forward, long backward) {
        return new ActionDurations(forward, backward, 0);
    }

    /**
     * These compute times with {@code communicationLatency} between ranks.
     *
     * @param communicationLatency time for a hand-off between ranks, {@code >= 0}
     * @return the new durations
     * @throws IllegalArgumentException if it is negative
     */
    public ActionDurations withCommunicationLatency(long communicationLatency) {
        return new ActionDurations(forward, backward, communicationLatency);
    }

    /**
     * Duration of an action of {@code type}; the halves of a split backward as in
     * {@link StageDurations#of(ActionType, int)}.
     *
     * @param type the action type
     * @return the duration, in this record's time unit
     */
    public long of(ActionType type) {
        return StageDurations.uniform(1, this).of(type, 0);
    }
}
