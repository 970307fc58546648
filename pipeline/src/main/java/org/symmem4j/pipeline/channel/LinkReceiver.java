package org.symmem4j.pipeline.channel;

import java.lang.foreign.MemorySegment;

/**
 * The receiving end of a link between adjacent pipeline stages on different ranks, whatever memory
 * carries it: {@link StageLink.Receiver} on the host, {@link CudaStageLink.Receiver} between GPUs.
 * Messages are read in place: {@link #receive} returns the slot, {@link #release} gives it back.
 */
public interface LinkReceiver {

    /** The next message, which must be {@code microbatch}'s; valid until {@link #release()}. */
    MemorySegment receive(int microbatch);

    /** Gives the slot of the last received message back to the sender. */
    void release();

    /** Messages received and released over the link's life. */
    long received();
}
