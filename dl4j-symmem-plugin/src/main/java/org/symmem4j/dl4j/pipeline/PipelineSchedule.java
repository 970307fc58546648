package org.symmem4j.dl4j.pipeline;

import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;

/**
 * The pipeline schedules a {@link PipelineParallelTrainer} can run; each names one generator of
 * {@link ScheduleGenerators}.
 */
public enum PipelineSchedule {
    /** All forwards, then all backwards: every rank holds all m microbatches' activations. */
    GPIPE("gpipe"),
    /** 1F1B (PipeDream-Flush): same bubble as GPipe, at most p microbatches in flight per rank. */
    ONE_F_ONE_B("1f1b"),
    /**
     * Interleaved 1F1B (Megatron-LM's virtual pipeline): v stages per rank shrink the bubble about v
     * times; the microbatch count must be a multiple of the rank count.
     */
    INTERLEAVED("interleaved"),
    /**
     * ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): 1F1B with each backward split into its input-gradient
     * action, which the previous stage waits for, and its weight-gradient action, which fills the cool-down; bubble
     * about (p - 1)/(3m) of the work instead of (p - 1)/m, with 1F1B's peak of p microbatches in flight. Dense,
     * output and 2-D convolution layers split their backward ({@code SplitBackward}: bitwise the unsplit backward), the
     * blocks' column- and row-parallel layers under tensor parallelism too (their tp all-reduces stay in the forward and
     * input-gradient actions; the weight-gradient action is local); other layers with parameters run their whole
     * backward in the input-gradient action
     * ({@link PipelineParallelTrainer#unsplitBackwardLayers()} names them). One stage per rank.
     */
    ZERO_BUBBLE_H1("zb-h1");

    private final String tag;

    PipelineSchedule(String tag) {
        this.tag = tag;
    }

    /**
     * The {@code schedule} tag of the pipeline's metrics.
     *
     * @return the tag value
     */
    public String tag() {
        return tag;
    }

    /**
     * Whether the schedule splits each backward into an input-gradient and a weight-gradient action.
     *
     * @return true for ZB-H1
     */
    public boolean splitsBackward() {
        return this == ZERO_BUBBLE_H1;
    }

    /** The schedule for {@code ranks} ranks, {@code microbatches} microbatches and {@code stagesPerRank} stages per rank. */
    Schedule generate(int ranks, int microbatches, int stagesPerRank) {
        return switch (this) {
            case GPIPE -> ScheduleGenerators.gpipe(ranks, microbatches);
            case ONE_F_ONE_B -> ScheduleGenerators.oneFOneB(ranks, microbatches);
            case INTERLEAVED -> ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank);
            case ZERO_BUBBLE_H1 -> ScheduleGenerators.zeroBubbleH1(ranks, microbatches);
        };
    }
}
