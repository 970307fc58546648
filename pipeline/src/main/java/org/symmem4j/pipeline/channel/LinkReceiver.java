package org.symmem4j.pipeline.channel;

import java.lang.foreign.MemorySegment;

/**
 * The receiving end of a link between adjacent pipeline stages on different ranks, whatever memory
 * carries it ({@link StageLink.Receiver} on the host and between GPUs alike).
 * Messages are read in place: {@link #receive} returns the slot, {@link #release} gives it back.
 */
public interface LinkReceiver {

    /**
     * The next message, which must be {@code microbatch}'s; valid until {@link #release()}.
     *
     * @param microbatch the microbatch the next message must belong to
     * @return the message's payload, in place in this rank's memory
     */
    MemorySegment receive(int microbatch);

    /** Gives the slot of the last received message back to the sender. */
    void release();

    /**
     * Messages received and released over the link's life.
     *
     * @return the message count
     */
    long received();
}
