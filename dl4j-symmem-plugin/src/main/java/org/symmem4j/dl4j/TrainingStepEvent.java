package org.symmem4j.dl4j;

import jdk.jfr.Category;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.EventType;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;
import jdk.jfr.Timespan;

/**
 * A JDK Flight Recorder event per worker per data-parallel step ({@code symmem4j.TrainingStep}):
 * its duration is the step as the wrapper's caller saw it (from handing out the batches to the
 * last local worker's result), and its fields split the worker's own part into compute (forward,
 * backward, update), sync (the gradient hook: all-reduce, division, waiting for peers included)
 * and wait (from this worker's arrival at the gradient sync to the last local worker's arrival: a
 * straggler waits least). Off unless a recording enables it; while none does the wrapper neither
 * allocates events nor reads a clock for them ({@link #TYPE} is checked first).
 */
@Name("symmem4j.TrainingStep")
@Label("Training Step")
@Category({"symmem4j", "Training"})
@Description("One worker's data-parallel training step: compute, gradient sync and the wait for the slowest local worker")
@StackTrace(false)
final class TrainingStepEvent extends Event {

    /** Checked before anything is allocated: {@code isEnabled()} is a field read. */
    static final EventType TYPE = EventType.getEventType(TrainingStepEvent.class);

    @Label("Step")
    @Description("The wrapper's step number, from 0 over all fit() calls")
    long step;

    @Label("Worker")
    @Description("The worker's rank in the wrapper's world")
    int worker;

    @Label("Examples")
    @Description("This worker's examples in the step; 0 for an idle worker past the last batch")
    long examples;

    @Label("Compute")
    @Description("The worker's step less its gradient sync: forward, backward and the update")
    @Timespan(Timespan.NANOSECONDS)
    long compute;

    @Label("Sync")
    @Description("The worker's gradient sync: all-reduce of every bucket, the division, waiting for peers included")
    @Timespan(Timespan.NANOSECONDS)
    long sync;

    @Label("Wait")
    @Description("From this worker's arrival at the gradient sync to the last local worker's (0 for the last one);"
            + " in group mode, with one worker per process, the wait for other processes is part of Sync")
    @Timespan(Timespan.NANOSECONDS)
    long waitForPeers;

    @Label("Skipped")
    @Description("Whether the step was skipped for a non-finite averaged gradient")
    boolean skipped;

    /**
     * One event per local worker, begun now; null while no recording enables the event.
     *
     * @param workers the local workers
     * @return the begun events, or null
     */
    static TrainingStepEvent[] beginAll(int workers) {
        if (!TYPE.isEnabled()) {
            return null;
        }
        TrainingStepEvent[] events = new TrainingStepEvent[workers];
        for (int j = 0; j < workers; j++) {
            events[j] = new TrainingStepEvent();
            events[j].begin();
        }
        return events;
    }
}
