package org.symmem4j.pipeline.channel;

import java.util.Objects;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * What the host ({@link StageLink.Receiver}) and GPU ({@link CudaStageLink.Receiver}) receiving ends
 * of a stage link share: the count of messages received, the rule that a message is released before
 * the next is received, and the release itself, which gives the slot back to the sender as a credit
 * on its pad. Only the receive differs (a host wait and header check, or a wait enqueued on the
 * stream).
 */
abstract class CreditReceiver<M extends SymmetricMemory> implements LinkReceiver {
    final M memory;
    final ChannelLayout layout;
    final LinkEnds link;
    /** Messages received and released; also the sequence number of the next message. */
    long received;
    private boolean holding;

    CreditReceiver(M memory, ChannelLayout layout, int fromStage, int toStage) {
        this.memory = Objects.requireNonNull(memory, "memory");
        this.layout = Objects.requireNonNull(layout, "layout");
        this.link = LinkEnds.of(layout, fromStage, toStage);
    }

    /** At the start of a receive: the previous message must have been released. */
    final void checkReleased() {
        if (holding) {
            throw new IllegalStateException("receive on " + this + " before release() of the previous message");
        }
    }

    /** At the end of a successful receive: this rank holds the message until {@link #release()}. */
    final void hold() {
        holding = true;
    }

    /**
     * Gives the slot of the last received message back to the sender. On a GPU the credit is enqueued
     * on the rank's stream, after whatever the stream holds that reads the slot.
     */
    @Override
    public final void release() {
        if (!holding) {
            throw new IllegalStateException("release on " + this + " without a received message");
        }
        holding = false;
        received++;
        // release: every read of the slot happens before the sender, acquiring this credit in its
        // send, overwrites it (on the host: the reads made before this call; on a GPU: the work
        // enqueued on the stream before this stream-ordered signal, released at system scope)
        memory.signal(link.senderRank(), link.creditSignal(), 1, SignalOp.ADD);
    }

    @Override
    public final long received() {
        return received;
    }
}
