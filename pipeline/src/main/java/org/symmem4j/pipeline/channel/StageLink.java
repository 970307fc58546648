package org.symmem4j.pipeline.channel;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.pipeline.channel.ChannelLayout.Direction;

/**
 * One directed link between adjacent pipeline stages on different ranks: a bounded FIFO of
 * {@link ChannelLayout#slots()} messages in the receiver's symmetric memory. The sender puts a
 * message and bumps the receiver's data counter; the receiver reads it in place and, once done with
 * it, bumps the sender's credit counter. A sender that is {@code slots} messages ahead waits for
 * credit: that is the back-pressure.
 *
 * <p>Message {@code n} (0-based, counted over the link's whole life) lives in slot {@code n % slots}.
 * Counters only grow, so a waiter needs no reset between steps.
 *
 * <p>Both ends are single-threaded: one thread per rank drives its links, in schedule order.
 */
public final class StageLink {

    /**
     * Added to every counter of every pad to abort the pipeline. Sequence numbers never reach it (2^56
     * messages), and up to 127 ranks may add it before a counter could overflow.
     */
    public static final long POISON = 1L << 56;

    private StageLink() {
    }

    /** The sending end, on the rank of {@code fromStage}. */
    public static final class Sender implements LinkSender {
        private final SymmetricMemory memory;
        private final ChannelLayout layout;
        private final LinkEnds link;
        private final MemorySegment header;
        private long sent;
        /** Credits seen so far: messages the receiver has released; refreshed only when they run short. */
        private long releasedSeen;

        /**
         * The sending end of the link {@code fromStage -> toStage} in host symmetric memory.
         *
         * @param memory    the pipeline's symmetric memory
         * @param layout    where every link's slots lie in it
         * @param fromStage the sending stage
         * @param toStage   the receiving stage
         * @param arena     owns the sender's staging memory
         */
        public Sender(SymmetricMemory memory, ChannelLayout layout, int fromStage, int toStage, Arena arena) {
            this.memory = Objects.requireNonNull(memory, "memory");
            this.layout = Objects.requireNonNull(layout, "layout");
            this.link = LinkEnds.of(layout, fromStage, toStage);
            this.header = arena.allocate(ChannelLayout.HEADER_BYTES, 64);
        }

        /**
         * Posts {@code payload} as the next message for {@code microbatch}: waits for a free slot if
         * the receiver is {@code slots} messages behind, copies the payload and a header into that
         * slot of the receiver's region, then bumps the receiver's data counter.
         *
         * @throws IllegalArgumentException when the payload is larger than the layout's slotBytes
         * @throws PipelineAbortedException when another rank poisoned the pipeline
         */
        @Override
        public void send(int microbatch, MemorySegment payload) {
            long bytes = payload.byteSize();
            if (bytes > layout.slotBytes()) {
                throw new IllegalArgumentException("message too large for the stage link " + this + ": payloadBytes="
                        + bytes + " expected=payloadBytes <= slotBytes=" + layout.slotBytes()
                        + " (raise slotBytes to the largest activation or gradient of one microbatch)");
            }
            long needReleased = sent - layout.slots() + 1;
            if (releasedSeen < needReleased) {
                // acquire: pairs with the receiver's release in Receiver.release(), so its reads of the
                // slot we are about to overwrite are complete
                releasedSeen = checkPoison(memory.waitSignal(link.creditSignal(), needReleased, link.receiverRank()),
                        "waiting for a free slot to send microbatch " + microbatch);
            }
            long offset = layout.slotOffset(link.region(), (int) (sent % layout.slots()));
            header.set(ValueLayout.JAVA_LONG, ChannelLayout.PAYLOAD_BYTES_OFFSET, bytes);
            header.set(ValueLayout.JAVA_LONG, ChannelLayout.SEQUENCE_OFFSET, sent);
            header.set(ValueLayout.JAVA_INT, ChannelLayout.MICROBATCH_OFFSET, microbatch);
            header.set(ValueLayout.JAVA_INT, ChannelLayout.FROM_STAGE_OFFSET, link.fromStage());
            // The payload's signal adds 0: a put needs a slot, and adding 0 changes no count. The
            // header's put then adds 1 with release semantics, which orders both copies before the
            // count the receiver acquires in Receiver.receive().
            memory.putWithSignal(link.receiverRank(), payload, offset + ChannelLayout.HEADER_BYTES, link.dataSignal(), 0, SignalOp.ADD);
            memory.putWithSignal(link.receiverRank(), header, offset, link.dataSignal(), 1, SignalOp.ADD);
            sent++;
        }

        @Override
        public long sent() {
            return sent;
        }

        private long checkPoison(long value, String doing) {
            if (value >= POISON) {
                throw new PipelineAbortedException("pipeline aborted by another rank while stage " + link.fromStage()
                        + " was " + doing + " on the link to stage " + link.toStage() + " (the failing rank reports the cause)");
            }
            return value;
        }

        @Override
        public String toString() {
            return link.toString();
        }
    }

    /** The receiving end, on the rank of {@code toStage}. */
    public static final class Receiver extends CreditReceiver<SymmetricMemory> {
        /** Messages seen posted so far; refreshed only when this rank has consumed them all. */
        private long postedSeen;

        /**
         * The receiving end of the link {@code fromStage -> toStage} in host symmetric memory.
         *
         * @param memory    the pipeline's symmetric memory
         * @param layout    where every link's slots lie in it
         * @param fromStage the sending stage
         * @param toStage   the receiving stage
         */
        public Receiver(SymmetricMemory memory, ChannelLayout layout, int fromStage, int toStage) {
            super(hostAddressable(memory), layout, fromStage, toStage);
        }

        private static SymmetricMemory hostAddressable(SymmetricMemory memory) {
            if (!memory.hostAddressable()) {
                throw new IllegalArgumentException("stage links read messages on the host, but " + memory
                        + " is device memory (use a host transport for the pipeline executor)");
            }
            return memory;
        }

        /**
         * Waits for the next message, checks that it is {@code microbatch}'s, and returns its payload
         * in place. The view is valid until {@link #release()}, which must come before the next receive.
         *
         * @throws IllegalStateException when the message is not the one expected (sender and receiver
         *                               schedules disagree on the link's order)
         * @throws PipelineAbortedException when another rank poisoned the pipeline
         */
        @Override
        public MemorySegment receive(int microbatch) {
            checkReleased();
            if (postedSeen <= received) {
                // acquire: pairs with the sender's release in Sender.send(), so the header and payload
                // it put are visible below
                postedSeen = memory.waitSignal(link.dataSignal(), received + 1, link.senderRank());
                if (postedSeen >= POISON) {
                    throw new PipelineAbortedException("pipeline aborted by another rank while stage " + link.toStage()
                            + " waited for microbatch " + microbatch + " from stage " + link.fromStage()
                            + " (the failing rank reports the cause)");
                }
            }
            MemorySegment slot = memory.local().asSlice(layout.slotOffset(link.region(), (int) (received % layout.slots())),
                    layout.slotStride());
            long bytes = slot.get(ValueLayout.JAVA_LONG, ChannelLayout.PAYLOAD_BYTES_OFFSET);
            long sequence = slot.get(ValueLayout.JAVA_LONG, ChannelLayout.SEQUENCE_OFFSET);
            int foundMicrobatch = slot.get(ValueLayout.JAVA_INT, ChannelLayout.MICROBATCH_OFFSET);
            int foundStage = slot.get(ValueLayout.JAVA_INT, ChannelLayout.FROM_STAGE_OFFSET);
            if (sequence != received || foundMicrobatch != microbatch || foundStage != link.fromStage()
                    || bytes < 0 || bytes > layout.slotBytes()) {
                throw new IllegalStateException("unexpected message on " + this + ": expected sequence=" + received
                        + " microbatch=" + microbatch + " fromStage=" + link.fromStage() + " found sequence=" + sequence
                        + " microbatch=" + foundMicrobatch + " fromStage=" + foundStage + " payloadBytes=" + bytes
                        + " (the two ranks' schedules must list this link's microbatches in the same order)");
            }
            hold();
            return slot.asSlice(ChannelLayout.HEADER_BYTES, bytes);
        }

        @Override
        public String toString() {
            return link.toString();
        }
    }

    /**
     * Whether another rank poisoned this rank's counters (acquire reads of this rank's own slots).
     *
     * @param memory the pipeline's symmetric memory
     * @param layout the layout whose counters are read
     * @return true if any counter holds {@link #POISON} or more
     */
    public static boolean poisoned(SymmetricMemory memory, ChannelLayout layout) {
        for (int slot = 0; slot < layout.signalSlotsNeeded(); slot++) {
            if (memory.readSignal(slot) >= POISON) {
                return true;
            }
        }
        return false;
    }

    /**
     * Aborts the pipeline: adds {@link #POISON} to every counter the layout uses on every rank's pad,
     * so every rank waiting on a link (or about to) stops with a {@link PipelineAbortedException}
     * instead of waiting out the timeout. Not collective; called by a rank that failed.
     *
     * @param memory the pipeline's symmetric memory
     * @param layout where the links' counters lie
     */
    public static void poisonAll(SymmetricMemory memory, ChannelLayout layout) {
        int ranks = memory.group().worldSize();
        for (int rank = 0; rank < ranks; rank++) {
            for (int slot = 0; slot < layout.signalSlotsNeeded(); slot++) {
                // release (as every signal): nothing to order here, the poison carries no data
                memory.signal(rank, slot, POISON, SignalOp.ADD);
            }
        }
    }

    static Direction directionInto(int fromStage, int toStage) {
        if (toStage == fromStage + 1) {
            return Direction.ACTIVATION;
        }
        if (toStage == fromStage - 1) {
            return Direction.GRADIENT;
        }
        throw new IllegalArgumentException("a stage link joins adjacent stages: fromStage=" + fromStage + " toStage="
                + toStage + " expected toStage=" + (fromStage + 1) + " or " + (fromStage - 1));
    }
}
