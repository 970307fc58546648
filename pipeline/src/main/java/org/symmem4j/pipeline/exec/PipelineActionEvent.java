package org.symmem4j.pipeline.exec;

import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.EventType;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * A JDK Flight Recorder event per pipeline action a rank runs ({@code symmem4j.PipelineAction}): one
 * forward or backward of one microbatch on one stage, from waiting for its input through the
 * stage's compute to handing its output to the next stage (on a device memory: to enqueueing them).
 * Off unless a recording enables it; while none does the executor neither allocates events nor
 * reads a clock for them ({@link #TYPE} is checked first).
 */
@Name("symmem4j.PipelineAction")
@Label("Pipeline Action")
@Category({"symmem4j", "Pipeline"})
@Description("One forward or backward of one microbatch on one stage: receive, compute, send")
@StackTrace(false)
final class PipelineActionEvent extends Event {

    /** Checked before anything is allocated: {@code isEnabled()} is a field read. */
    static final EventType TYPE = EventType.getEventType(PipelineActionEvent.class);

    @Label("Action")
    @Description("The schedule's spelling of the action, e.g. 0F3: stage 0, forward, microbatch 3")
    String action;

    @Label("Rank")
    int rank;

    @Label("Stage")
    int stage;

    @Label("Type")
    @Description("FORWARD or BACKWARD")
    String type;

    @Label("Microbatch")
    int microbatch;

    @Label("Step")
    @Description("The executor's step number on this rank, from 0")
    long step;

    @Label("Input Bytes")
    @DataAmount
    long inputBytes;

    @Label("Output Bytes")
    @Description("What the stage produced for the next one; 0 at the pipeline's ends")
    @DataAmount
    long outputBytes;
}
