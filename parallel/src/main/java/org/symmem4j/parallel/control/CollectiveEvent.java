package org.symmem4j.parallel.control;

import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.EventType;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * A JDK Flight Recorder event per collective ({@code symmem4j.Collective}): its duration on this
 * rank from entry to return (for device communicators: to enqueue) and the fields of the flight
 * recorder. Off unless a recording enables it, for example
 * {@code java -XX:StartFlightRecording:filename=run.jfr,settings=profile ...} then
 * {@code jfr print --events symmem4j.Collective run.jfr}. While no recording enables it, the
 * control plane neither allocates the event nor reads a clock ({@link #TYPE} is checked first).
 */
@Name("symmem4j.Collective")
@Label("Collective")
@Category({"symmem4j", "Collectives"})
@Description("One collective of a symmem4j communicator on this rank, from its entry barrier to its return")
@StackTrace(false)
final class CollectiveEvent extends Event {

    /** The event's type, whose {@code isEnabled()} is a field read: checked before anything is allocated. */
    static final EventType TYPE = EventType.getEventType(CollectiveEvent.class);

    @Label("Operation")
    String operation;

    @Label("Sequence")
    @Description("The control plane's number of the collective on this communicator, equal on every rank")
    long sequence;

    @Label("Rank")
    int rank;

    @Label("World Size")
    int worldSize;

    @Label("Count")
    @Description("Elements (per block for staged reduce-scatter and all-gather), -1 when never agreed")
    long count;

    @Label("Buffer Bytes")
    @DataAmount
    long bufferBytes;

    @Label("Data Type")
    String dtype;

    @Label("Algorithm")
    String algorithm;

    @Label("Outcome")
    @Description("COMPLETED, or FAILED with the failure in Failure")
    String outcome;

    @Label("Failure")
    String failure;
}
