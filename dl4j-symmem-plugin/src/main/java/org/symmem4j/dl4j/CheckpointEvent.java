package org.symmem4j.dl4j;

import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.EventType;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * A JDK Flight Recorder event per checkpoint a process writes ({@code symmem4j.Checkpoint}), from
 * its first file to the ranks' agreement that the checkpoint is complete (or failed): both trainers
 * write through {@link ShardedCheckpoints#save}. Off unless a recording enables it; while none does
 * nothing is allocated or measured for it.
 */
@Name("symmem4j.Checkpoint")
@Label("Checkpoint")
@Category({"symmem4j", "Training"})
@Description("One checkpoint written by this process: its shard files, the model (leader), the manifest (leader)")
@StackTrace(false)
final class CheckpointEvent extends Event {

    /** Checked before anything is allocated. */
    static final EventType TYPE = EventType.getEventType(CheckpointEvent.class);

    @Label("Directory")
    String directory;

    @Label("Step")
    @Description("The trainer's steps done when the checkpoint was taken (its manifest's step)")
    long step;

    @Label("World Size")
    @Description("Shards of the checkpoint; 0 for a model-only checkpoint (plain data parallelism)")
    int worldSize;

    @Label("Shards Written")
    @Description("Shard files this process wrote")
    int shards;

    @Label("Leader")
    @Description("Whether this process wrote the model and the manifest")
    boolean leader;

    @Label("Bytes Written")
    @Description("Bytes of the files this process wrote")
    @DataAmount
    long bytes;

    @Label("Outcome")
    @Description("COMPLETED, or FAILED with the failure in Failure")
    String outcome;

    @Label("Failure")
    String failure;
}
