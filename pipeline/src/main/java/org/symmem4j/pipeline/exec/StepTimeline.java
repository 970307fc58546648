package org.symmem4j.pipeline.exec;

import java.util.List;

/**
 * One rank's intervals in one {@link PipelineExecutor#runStep()}, in the order they happened.
 * Combine all ranks' timelines of a step with {@link TimelineReport#of}.
 *
 * @param rank   the rank the timeline belongs to
 * @param events the rank's intervals, in the order they happened
 */
public record StepTimeline(int rank, List<TimelineEvent> events) {

    /** Copies the events (the timeline is immutable). */
    public StepTimeline {
        events = List.copyOf(events);
    }

    /**
     * Nanoseconds spent in forward and backward passes.
     *
     * @return the compute time in nanoseconds
     */
    public long computeNanos() {
        return events.stream().filter(e -> e.kind().isCompute()).mapToLong(TimelineEvent::durationNanos).sum();
    }
}
