package org.symmem4j.pipeline.channel;

import java.lang.foreign.MemorySegment;

/**
 * The sending end of a link between adjacent pipeline stages on different ranks, whatever memory
 * carries it ({@link StageLink.Sender} on the host and between GPUs alike).
 */
public interface LinkSender {

    /**
     * Posts {@code payload} as the link's next message, for {@code microbatch}: after a free slot
     * (back-pressure), copied into the receiver's memory, then signalled.
     *
     * @param microbatch the microbatch the message belongs to
     * @param payload the bytes to send, at most the layout's slot size
     */
    void send(int microbatch, MemorySegment payload);

    /**
     * Messages posted over the link's life.
     *
     * @return the message count
     */
    long sent();
}
