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
    INTERLEAVED("interleaved");

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

    /** The schedule for {@code ranks} ranks, {@code microbatches} microbatches and {@code stagesPerRank} stages per rank. */
    Schedule generate(int ranks, int microbatches, int stagesPerRank) {
        return switch (this) {
            case GPIPE -> ScheduleGenerators.gpipe(ranks, microbatches);
            case ONE_F_ONE_B -> ScheduleGenerators.oneFOneB(ranks, microbatches);
            case INTERLEAVED -> ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank);
        };
    }
}
