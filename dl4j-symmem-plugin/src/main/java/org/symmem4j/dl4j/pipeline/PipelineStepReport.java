package org.symmem4j.dl4j.pipeline;

import java.util.List;
import org.symmem4j.dl4j.train.TrainingStep;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.exec.TimelineReport;

/**
 * One pipeline training step (one batch), as a {@link PipelineParallelTrainer} reports it.
 *
 * @param step      step number within the trainer's life, from 0
 * @param examples  examples in the batch
 * @param loss      what {@code MultiLayerNetwork.score()} reports after {@code fit} of the whole network
 *                  on this batch: the output layer's loss over the batch (per-example losses summed,
 *                  divided by the example count for minibatch training) plus every layer's
 *                  regularization term (L1, L2, weight decay) at the parameters before the update
 * @param timelines one timeline per rank, rank order: what each rank did during the step
 */
public record PipelineStepReport(long step, long examples, double loss, List<StepTimeline> timelines)
        implements TrainingStep {

    /** Copies the timelines (the report is immutable). */
    public PipelineStepReport {
        timelines = List.copyOf(timelines);
    }

    /**
     * The measured bubble and a Chrome trace / SVG of this step.
     *
     * @return the step's timeline report
     */
    public TimelineReport timelineReport() {
        return TimelineReport.of(timelines);
    }
}
