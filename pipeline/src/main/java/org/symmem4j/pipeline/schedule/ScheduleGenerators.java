package org.symmem4j.pipeline.schedule;

import java.util.ArrayList;
import java.util.List;

/**
 * Pure functions from a pipeline size to a {@link Schedule}. Stage {@code s} always lives on rank
 * {@code s % ranks}; every generated schedule passes {@link ScheduleValidator} for the
 * {@link PipelineShape} of its inputs.
 */
public final class ScheduleGenerators {

    private ScheduleGenerators() {
    }

    /**
     * GPipe: every rank runs all its forwards, then all its backwards, both in microbatch order. Peak
     * in-flight activations are {@code microbatches} on every rank.
     *
     * @param ranks        pipeline size p, {@code >= 1} (one stage per rank)
     * @param microbatches m, {@code >= 1}
     * @return the schedule
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static Schedule gpipe(int ranks, int microbatches) {
        requireInputs("gpipe", ranks, microbatches, 1);
        List<List<Action>> actionsByRank = new ArrayList<>(ranks);
        for (int rank = 0; rank < ranks; rank++) {
            List<Action> actions = new ArrayList<>(2 * microbatches);
            for (int microbatch = 0; microbatch < microbatches; microbatch++) {
                actions.add(Action.forward(rank, microbatch));
            }
            for (int microbatch = 0; microbatch < microbatches; microbatch++) {
                actions.add(Action.backward(rank, microbatch));
            }
            actionsByRank.add(actions);
        }
        return new Schedule(actionsByRank);
    }

    /**
     * 1F1B (PipeDream-Flush): rank {@code r} runs {@code min(ranks - 1 - r, microbatches)} warm-up
     * forwards, then alternates one forward and one backward until the forwards run out, then runs the
     * remaining backwards (cool-down). Microbatches go in order in both directions. Rank {@code r}
     * holds at most {@code min(ranks - r, microbatches)} activations, instead of GPipe's
     * {@code microbatches}, with the same bubble.
     *
     * @param ranks        pipeline size p, {@code >= 1} (one stage per rank)
     * @param microbatches m, {@code >= 1}
     * @return the schedule
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static Schedule oneFOneB(int ranks, int microbatches) {
        requireInputs("1F1B", ranks, microbatches, 1);
        List<List<Action>> actionsByRank = new ArrayList<>(ranks);
        for (int rank = 0; rank < ranks; rank++) {
            // the last rank can start backward right after its first forward; each rank further up
            // needs one more forward in flight to cover the backward's trip back to it
            int warmupForwards = Math.min(ranks - 1 - rank, microbatches);
            actionsByRank.add(warmupThenOneFOneB(rank, ranks, microbatches, 1, warmupForwards));
        }
        return new Schedule(actionsByRank);
    }

    /**
     * Interleaved 1F1B (Megatron-LM's virtual pipeline): each rank holds {@code stagesPerRank = v}
     * virtual stages, stage {@code s} on rank {@code s % ranks}, so a microbatch visits every rank v
     * times and the fill/drain bubble shrinks from {@code ranks - 1} to {@code (ranks - 1) / v} stage
     * times (relative to one rank's work).
     *
     * <p>Order of work on rank {@code r}: microbatches go in groups of {@code ranks}; the k-th forward
     * is microbatch {@code (k / (ranks*v)) * ranks + k % ranks} on the rank's virtual stage
     * {@code (k / ranks) % v} (so a group runs through virtual stage 0, then 1, ...), and the k-th
     * backward is the same microbatch on virtual stage {@code v - 1 - (k / ranks) % v}. Rank {@code r}
     * warms up with {@code min((v - 1) * ranks + 2 * (ranks - 1 - r), v * microbatches)} forwards, then
     * alternates forward and backward, then drains the backwards. The factor 2 (Megatron's) keeps the
     * pipeline full when stage-to-stage transfers take time: with one extra forward per hop, instead
     * of two, the simulator shows the makespan growing with every unit of communication latency in the
     * steady state, not just in the fill and drain.
     *
     * <p>With {@code stagesPerRank = 1} this is exactly {@link #oneFOneB(int, int)} (as in Megatron,
     * which falls back to the non-interleaved schedule): the factor 2 buys nothing without a second
     * trip through the pipeline and would raise peak activations.
     *
     * @param ranks         pipeline size p, {@code >= 1}
     * @param microbatches  m, a positive multiple of {@code ranks} (microbatches cycle through the
     *                      virtual stages in groups of {@code ranks})
     * @param stagesPerRank v, {@code >= 1}
     * @return the schedule
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static Schedule interleavedOneFOneB(int ranks, int microbatches, int stagesPerRank) {
        requireInputs("interleaved 1F1B", ranks, microbatches, stagesPerRank);
        if (microbatches % ranks != 0) {
            int lower = microbatches / ranks * ranks;
            String fix = lower == 0 ? "use microbatches=" + ranks
                    : "use microbatches=" + lower + " or " + (lower + ranks);
            throw new IllegalArgumentException("invalid interleaved 1F1B input: microbatches=" + microbatches
                    + " expected=a multiple of ranks=" + ranks + " (fix: " + fix + ")");
        }
        int virtualMicrobatches = microbatches * stagesPerRank;
        List<List<Action>> actionsByRank = new ArrayList<>(ranks);
        for (int rank = 0; rank < ranks; rank++) {
            int warmupForwards = stagesPerRank == 1
                    ? ranks - 1 - rank
                    : (stagesPerRank - 1) * ranks + 2 * (ranks - 1 - rank);
            actionsByRank.add(warmupThenOneFOneB(rank, ranks, microbatches, stagesPerRank,
                    Math.min(warmupForwards, virtualMicrobatches)));
        }
        return new Schedule(actionsByRank);
    }

    /**
     * ZB-H1, the zero-bubble schedule of Qi et al. ("Zero Bubble Pipeline Parallelism", 2023) that keeps
     * 1F1B's peak memory: every backward is split into its input-gradient half I, which the previous
     * stage waits for, and its weight-gradient half W, which nobody waits for. Rank {@code r} warms up
     * with 1F1B's {@code ranks - 1 - r} forwards, then repeats F, I, and a W once more than {@code r} of
     * its Is are waiting for theirs (so rank r postpones r Ws), then drains the Is and the postponed Ws.
     * The postponed Ws fill the cool-down that 1F1B leaves idle.
     *
     * <p>With F = I = W (the paper's model, {@code ActionDurations.of(1, 2)} here) each rank idles
     * {@code (ranks - 1)} units, {@code (ranks - 1) · (F + I - W)}, against 1F1B's {@code (ranks - 1) · (F + B)}:
     * a bubble of {@code (p - 1) / (3m)} of the work instead of {@code (p - 1) / m}. Every rank holds at
     * most {@code ranks} activations (an activation lives until its W), 1F1B's peak on rank 0; a W on
     * rank r frees what 1F1B's B would free, r microbatches later.
     *
     * @param ranks        pipeline size p, {@code >= 1} (one stage per rank)
     * @param microbatches m, {@code >= 1}
     * @return the schedule
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static Schedule zeroBubbleH1(int ranks, int microbatches) {
        requireInputs("ZB-H1", ranks, microbatches, 1);
        List<List<Action>> actionsByRank = new ArrayList<>(ranks);
        for (int rank = 0; rank < ranks; rank++) {
            List<Action> actions = new ArrayList<>(3 * microbatches);
            int forwards = 0;
            int inputs = 0;
            int weights = 0;
            int warmupForwards = Math.min(ranks - 1 - rank, microbatches);
            while (forwards < warmupForwards) {
                actions.add(Action.forward(rank, forwards++));
            }
            while (inputs < microbatches) {
                if (forwards < microbatches) {
                    actions.add(Action.forward(rank, forwards++));
                }
                actions.add(Action.inputGradient(rank, inputs++));
                if (inputs - weights > rank) {
                    actions.add(Action.weightGradient(rank, weights++));
                }
            }
            while (weights < microbatches) {
                actions.add(Action.weightGradient(rank, weights++));
            }
            actionsByRank.add(actions);
        }
        return new Schedule(actionsByRank);
    }

    /**
     * One rank's list: {@code warmupForwards} forwards, then forward/backward pairs while forwards
     * remain, then the remaining backwards. With one stage per rank the k-th forward and backward are
     * both microbatch k; with more, see {@link #interleavedOneFOneB(int, int, int)}.
     */
    private static List<Action> warmupThenOneFOneB(int rank, int ranks, int microbatches, int stagesPerRank,
                                                   int warmupForwards) {
        int total = microbatches * stagesPerRank;
        List<Action> actions = new ArrayList<>(2 * total);
        int forwards = 0;
        int backwards = 0;
        while (forwards < warmupForwards) {
            actions.add(virtualForward(forwards++, rank, ranks, stagesPerRank));
        }
        while (forwards < total) {
            actions.add(virtualForward(forwards++, rank, ranks, stagesPerRank));
            actions.add(virtualBackward(backwards++, rank, ranks, stagesPerRank));
        }
        while (backwards < total) {
            actions.add(virtualBackward(backwards++, rank, ranks, stagesPerRank));
        }
        return actions;
    }

    private static Action virtualForward(int k, int rank, int ranks, int stagesPerRank) {
        int virtualStage = k / ranks % stagesPerRank;
        return Action.forward(virtualStage * ranks + rank, microbatchOf(k, ranks, stagesPerRank));
    }

    private static Action virtualBackward(int k, int rank, int ranks, int stagesPerRank) {
        int virtualStage = stagesPerRank - 1 - k / ranks % stagesPerRank;
        return Action.backward(virtualStage * ranks + rank, microbatchOf(k, ranks, stagesPerRank));
    }

    private static int microbatchOf(int k, int ranks, int stagesPerRank) {
        return k / (ranks * stagesPerRank) * ranks + k % ranks;
    }

    private static void requireInputs(String schedule, int ranks, int microbatches, int stagesPerRank) {
        requireAtLeastOne(schedule, "ranks", ranks);
        requireAtLeastOne(schedule, "microbatches", microbatches);
        requireAtLeastOne(schedule, "stagesPerRank", stagesPerRank);
        // rejects sizes whose action count overflows, with the shape's own message
        new PipelineShape(ranks, microbatches, stagesPerRank);
    }

    private static void requireAtLeastOne(String schedule, String name, int value) {
        if (value < 1) {
            throw new IllegalArgumentException("invalid " + schedule + " input: " + name + "=" + value
                    + " expected=" + name + " >= 1 (fix: pass a positive count)");
        }
    }
}
