package org.symmem4j.pipeline.schedule;

import java.util.Arrays;
import java.util.Objects;

/**
 * Per-stage action durations for a {@link ScheduleSimulator} dry run, in abstract integer time units:
 * real stages are never equal (an output stage computes the loss, a convolution stage is slower than a
 * dense one with the same parameters), and the bubble of a split depends on its slowest stage.
 * {@link ActionDurations} is the special case where every stage takes the same.
 *
 * @param forward              {@code forward[s]}: one forward of stage {@code s}, each {@code >= 1}
 * @param backward             {@code backward[s]}: one backward of stage {@code s}, each {@code >= 1}
 * @param weightGradient       {@code weightGradient[s]}: the weight-gradient half's share of stage {@code s}'s backward
 *                             where the schedule splits it (zero-bubble schedules), in {@code [0, backward[s] - 1]};
 *                             the input-gradient half takes the rest. Measured halves are rarely equal: DL4J's
 *                             output stage computes its forward and loss in the input-gradient half
 * @param communicationLatency as {@link ActionDurations#communicationLatency()}, {@code >= 0}
 */
public record StageDurations(long[] forward, long[] backward, long[] weightGradient, long communicationLatency) {

    /**
     * Durations whose split backwards, if any, take half the backward each (the input gradient the odd unit):
     * the zero-bubble paper's model, F = I = W when B = 2F.
     *
     * @param forward              one forward per stage, each {@code >= 1}
     * @param backward             one backward per stage, each {@code >= 1}
     * @param communicationLatency the hand-off latency, {@code >= 0}
     * @throws IllegalArgumentException when the arrays are empty, differ in length or hold a value below 1
     */
    public StageDurations(long[] forward, long[] backward, long communicationLatency) {
        this(forward, backward, halves(backward), communicationLatency);
    }

    private static long[] halves(long[] backward) {
        Objects.requireNonNull(backward, "backward");
        long[] w = new long[backward.length];
        for (int s = 0; s < w.length; s++) {
            w[s] = backward[s] / 2;
        }
        return w;
    }

    /**
     * Checks the durations.
     *
     * @throws IllegalArgumentException when the arrays are empty, differ in length or hold a value below 1, or a
     *                                  weight-gradient share is outside {@code [0, backward - 1]}
     */
    public StageDurations {
        Objects.requireNonNull(forward, "forward");
        Objects.requireNonNull(backward, "backward");
        if (forward.length == 0 || forward.length != backward.length) {
            throw new IllegalArgumentException("invalid stage durations: forward has " + forward.length
                    + " stages, backward " + backward.length + " expected the same count, at least 1 (fix: pass one"
                    + " forward and one backward duration per stage)");
        }
        Objects.requireNonNull(weightGradient, "weightGradient");
        if (weightGradient.length != forward.length) {
            throw new IllegalArgumentException("invalid stage durations: weightGradient has " + weightGradient.length
                    + " stages, forward " + forward.length + " expected the same count (fix: pass one weight-gradient"
                    + " share per stage, or use the constructor without it for halves)");
        }
        forward = forward.clone();
        backward = backward.clone();
        weightGradient = weightGradient.clone();
        for (int s = 0; s < forward.length; s++) {
            if (forward[s] < 1 || backward[s] < 1) {
                throw new IllegalArgumentException("invalid stage durations: stage=" + s + " forward=" + forward[s]
                        + " backward=" + backward[s] + " expected both >= 1 (fix: round measured times up to"
                        + " one unit)");
            }
            if (weightGradient[s] < 0 || weightGradient[s] > backward[s] - 1) {
                throw new IllegalArgumentException("invalid stage durations: stage=" + s + " weightGradient="
                        + weightGradient[s] + " backward=" + backward[s] + " expected 0 <= weightGradient <= backward - 1"
                        + " (fix: the input-gradient half keeps at least one unit; clamp the measured share)");
            }
        }
        if (communicationLatency < 0) {
            throw new IllegalArgumentException("invalid stage durations: communicationLatency=" + communicationLatency
                    + " expected=communicationLatency >= 0 (fix: pass 0 or more time units)");
        }
    }

    /**
     * Every one of {@code stages} stages takes {@code durations}.
     *
     * @param stages number of stages, {@code >= 1}
     * @param durations every stage's times and the communication latency
     * @return the durations
     * @throws IllegalArgumentException if {@code stages} is below 1
     */
    public static StageDurations uniform(int stages, ActionDurations durations) {
        Objects.requireNonNull(durations, "durations");
        if (stages < 1) {
            throw new IllegalArgumentException("stages=" + stages + " expected stages >= 1 (fix: pass the"
                    + " number of pipeline stages)");
        }
        long[] f = new long[stages];
        long[] b = new long[stages];
        Arrays.fill(f, durations.forward());
        Arrays.fill(b, durations.backward());
        return new StageDurations(f, b, durations.communicationLatency());
    }

    /**
     * Number of stages these durations describe.
     *
     * @return the stage count
     */
    public int stageCount() {
        return forward.length;
    }

    /**
     * Duration of an action of {@code type} on {@code stage}. The halves of a split backward
     * ({@link ActionType#INPUT_GRADIENT}, {@link ActionType#WEIGHT_GRADIENT}) share its time as
     * {@link #weightGradient()} says (by default half each, the input gradient the odd unit, so a
     * weight gradient of a one-unit backward takes no time).
     *
     * @param type the action type
     * @param stage the stage
     * @return the duration
     */
    public long of(ActionType type, int stage) {
        return switch (type) {
            case FORWARD -> forward[stage];
            case BACKWARD -> backward[stage];
            // a split backward's halves: by default each about one matmul per layer, as in the zero-bubble
            // paper's model (F = I = W when B = 2F), the input gradient the odd unit; or as measured
            case INPUT_GRADIENT -> backward[stage] - weightGradient[stage];
            case WEIGHT_GRADIENT -> weightGradient[stage];
        };
    }

    /**
     * Forward plus backward of {@code stage}: one microbatch's compute there.
     *
     * @param stage the stage
     * @return forward plus backward time
     */
    public long total(int stage) {
        return forward[stage] + backward[stage];
    }

    /**
     * Per stage, one microbatch's forward pass (a copy: the record is immutable).
     *
     * @return durations in the simulator's unit, at least 1 each
     */
    @Override
    public long[] forward() {
        return forward.clone();
    }

    /**
     * Per stage, one microbatch's backward pass (a copy: the record is immutable).
     *
     * @return durations in the simulator's unit, at least 1 each
     */
    @Override
    public long[] backward() {
        return backward.clone();
    }

    /**
     * Per stage, the weight-gradient half's share of a split backward (a copy: the record is immutable).
     *
     * @return durations in the simulator's unit, in {@code [0, backward - 1]} each
     */
    @Override
    public long[] weightGradient() {
        return weightGradient.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof StageDurations d && Arrays.equals(forward, d.forward) && Arrays.equals(backward, d.backward)
                && Arrays.equals(weightGradient, d.weightGradient) && communicationLatency == d.communicationLatency;
    }

    @Override
    public int hashCode() {
        return Objects.hash(Arrays.hashCode(forward), Arrays.hashCode(backward), Arrays.hashCode(weightGradient),
                communicationLatency);
    }

    @Override
    public String toString() {
        return "StageDurations[forward=" + Arrays.toString(forward) + ", backward=" + Arrays.toString(backward)
                + ", weightGradient=" + Arrays.toString(weightGradient) + ", communicationLatency="
                + communicationLatency + "]";
    }
}
