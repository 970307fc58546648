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
 * Counters only grow, so a waiter needs no reset between steps, and a captured or repeated sequence
 * of sends and receives needs none either.
 *
 * <p>One class for every transport: each step goes through {@link SymmetricMemory}, so it is done at
 * once on the host and enqueued on the rank's stream on a GPU ({@link SymmetricMemory#enqueued()}),
 * where the host thread runs ahead through the schedule and the GPU waits:
 * <ul>
 *   <li>send: a wait for credit ({@link SymmetricMemory#orderAfterSignal}, acquire) when the link is
 *       full, then the put of the message and an add of 1 to the receiver's data counter (release);</li>
 *   <li>receive: a wait until the data counter holds the message (acquire); what the stage does
 *       after it, host code or kernels enqueued after it, reads the slot;</li>
 *   <li>release: an add of 1 to the sender's credit counter (release), after the stage's reads.</li>
 * </ul>
 * Where the memory is host-addressable, each message carries a header (length, sequence, microbatch,
 * stage) that the receiver checks. Elsewhere (GPU memory) the host cannot read the slot, so there is
 * no header: {@link LinkPlan} checks the schedules' FIFO order before training instead, and the
 * payload a receive returns spans the slot's capacity ({@link ChannelLayout#slotBytes()}) rather than
 * the message's length, which only the stages know.
 *
 * <p>Nothing is copied or allocated per message beyond the put itself: the receiver reads the slot in place
 * through views made once per slot (a payload view is remade only when a slot's message length changes).
 *
 * <p>Host waits are bounded by the group's timeout; device-side waits are not, so an executor bounds
 * them from the host ({@link SymmetricMemory#awaitWork}) and aborts with {@link #poisonAll}. Both ends
 * are single-threaded: one thread per rank drives its links, in schedule order.
 */
public final class StageLink {

    /**
     * Stored into every counter of every pad to abort the pipeline. Sequence numbers never reach it
     * (2^56 messages), so every wait on a link is satisfied by it, and the adds that may follow it (a
     * credit or a message in flight) cannot overflow it.
     */
    public static final long POISON = 1L << 56;

    private StageLink() {
    }

    /** The sending end, on the rank of {@code fromStage}. */
    public static final class Sender implements LinkSender {
        private final SymmetricMemory memory;
        private final ChannelLayout layout;
        private final LinkEnds link;
        /** Host staging of the header; null where the memory is not host-addressable (no headers). */
        private final MemorySegment header;
        private long sent;
        /** Credits known so far: messages the receiver has released; refreshed only when they run short. */
        private long releasedSeen;

        /**
         * The sending end of the link {@code fromStage -> toStage}.
         *
         * @param memory    the pipeline's symmetric memory, host or GPU
         * @param layout    where every link's slots lie in it
         * @param fromStage the sending stage
         * @param toStage   the receiving stage
         * @param arena     owns the sender's header staging (host-addressable memory only)
         */
        public Sender(SymmetricMemory memory, ChannelLayout layout, int fromStage, int toStage, Arena arena) {
            this.memory = Objects.requireNonNull(memory, "memory");
            this.layout = Objects.requireNonNull(layout, "layout");
            this.link = LinkEnds.of(layout, fromStage, toStage);
            this.header = memory.hostAddressable() ? arena.allocate(ChannelLayout.HEADER_BYTES, 64) : null;
        }

        /**
         * Posts {@code payload} as the next message for {@code microbatch}: waits for a free slot if
         * the receiver is {@code slots} messages behind, copies the payload (and, in host memory, a
         * header) into that slot of the receiver's region, then bumps the receiver's data counter. On
         * enqueued memory the payload is a device address of this rank, as a segment whose byte size
         * is the length, and the call returns once all of it is enqueued.
         *
         * @throws IllegalArgumentException when the payload is larger than the layout's slotBytes
         * @throws PipelineAbortedException when another rank poisoned the pipeline (seen by host waits)
         */
        @Override
        public void send(int microbatch, MemorySegment payload) {
            long bytes = payload.byteSize();
            if (bytes > layout.slotBytes()) {
                throw new IllegalArgumentException("message too large for the stage link " + this + ": payloadBytes="
                        + bytes + " expected=payloadBytes <= slotBytes=" + layout.slotBytes()
                        + " (fix: raise slotBytes to the largest activation or gradient of one microbatch)");
            }
            long needReleased = sent - layout.slots() + 1;
            if (releasedSeen < needReleased) {
                // acquire: pairs with the receiver's release in Receiver.release(), so its reads of the
                // slot we are about to overwrite are complete (on a GPU: before the put below runs)
                releasedSeen = checkPoison(memory.orderAfterSignal(link.creditSignal(), needReleased, link.receiverRank(),
                        false), microbatch);
            }
            long offset = layout.slotOffset(link.region(), (int) (sent % layout.slots()));
            if (header == null) {
                // release (on a GPU at system scope): the payload's copy is ordered before the count the
                // receiver's wait acquires in Receiver.receive()
                memory.putWithSignal(link.receiverRank(), payload, offset + ChannelLayout.HEADER_BYTES, link.dataSignal(),
                        1, SignalOp.ADD);
            } else {
                header.set(ValueLayout.JAVA_LONG, ChannelLayout.PAYLOAD_BYTES_OFFSET, bytes);
                header.set(ValueLayout.JAVA_LONG, ChannelLayout.SEQUENCE_OFFSET, sent);
                header.set(ValueLayout.JAVA_INT, ChannelLayout.MICROBATCH_OFFSET, microbatch);
                header.set(ValueLayout.JAVA_INT, ChannelLayout.FROM_STAGE_OFFSET, link.fromStage());
                // The payload's signal adds 0: a put needs a slot, and adding 0 changes no count. The
                // header's put then adds 1 with release semantics, which orders both copies before the
                // count the receiver acquires in Receiver.receive().
                memory.putWithSignal(link.receiverRank(), payload, offset + ChannelLayout.HEADER_BYTES, link.dataSignal(),
                        0, SignalOp.ADD);
                memory.putWithSignal(link.receiverRank(), header, offset, link.dataSignal(), 1, SignalOp.ADD);
            }
            sent++;
        }

        @Override
        public long sent() {
            return sent;
        }

        /** The message is built only on failure: the wait for credit allocates nothing. */
        private long checkPoison(long value, int microbatch) {
            if (value >= POISON) {
                throw new PipelineAbortedException("pipeline aborted by another rank while stage " + link.fromStage()
                        + " was waiting for a free slot to send microbatch " + microbatch + " on the link to stage " + link.toStage() + " (the failing rank reports the cause;"
                        + " fix: correct what the failing rank's error names, then create new links in a new group)");
            }
            return value;
        }

        @Override
        public String toString() {
            return link.toString();
        }
    }

    /** The receiving end, on the rank of {@code toStage}. */
    public static final class Receiver implements LinkReceiver {
        private final SymmetricMemory memory;
        private final ChannelLayout layout;
        private final LinkEnds link;
        /** Whether messages carry a header to check: the host can read this rank's memory. */
        private final boolean headers;
        /** Messages received and released; also the sequence number of the next message. */
        private long received;
        /** Messages known posted so far; refreshed only when this rank has consumed them all. */
        private long postedSeen;
        private boolean holding;
        /**
         * By slot, made once: the whole slot (header and payload; host-addressable memory), or the payload's device
         * address spanning the slot's capacity (elsewhere). A receive returns views of these, so it makes no object.
         */
        private final MemorySegment[] slotViews;
        /** By slot: the last payload view handed out, reused while the next message there has the same length. */
        private final MemorySegment[] payloadViews;

        /**
         * The receiving end of the link {@code fromStage -> toStage}.
         *
         * @param memory    the pipeline's symmetric memory, host or GPU
         * @param layout    where every link's slots lie in it
         * @param fromStage the sending stage
         * @param toStage   the receiving stage
         */
        public Receiver(SymmetricMemory memory, ChannelLayout layout, int fromStage, int toStage) {
            this.memory = Objects.requireNonNull(memory, "memory");
            this.layout = Objects.requireNonNull(layout, "layout");
            this.link = LinkEnds.of(layout, fromStage, toStage);
            this.headers = memory.hostAddressable();
            this.slotViews = new MemorySegment[layout.slots()];
            this.payloadViews = new MemorySegment[layout.slots()];
            for (int slot = 0; slot < layout.slots(); slot++) {
                long offset = layout.slotOffset(link.region(), slot);
                slotViews[slot] = headers ? memory.local().asSlice(offset, layout.slotStride())
                        : MemorySegment.ofAddress(memory.local().address() + offset + ChannelLayout.HEADER_BYTES)
                                .reinterpret(layout.slotBytes());
            }
        }

        /**
         * Waits for the next message and returns its payload in place, valid until {@link #release()},
         * which must come before the next receive. In host-addressable memory the message's header is
         * checked to be {@code microbatch}'s and the view is the message's length; otherwise the wait
         * is enqueued, the view (a device address) spans the slot's capacity, and only work enqueued
         * after this call may read it.
         *
         * @throws IllegalStateException when the message is not the one expected (sender and receiver
         *                               schedules disagree on the link's order), or the previous message
         *                               was not released
         * @throws PipelineAbortedException when another rank poisoned the pipeline (seen by host waits)
         */
        @Override
        public MemorySegment receive(int microbatch) {
            if (holding) {
                throw new IllegalStateException("receive on " + this + " before release() of the previous message"
                        + " (fix: call release() once the previous message's payload is no longer read, then receive)");
            }
            if (postedSeen <= received) {
                // acquire: pairs with the sender's release in Sender.send(), so the payload (and header)
                // it put are visible to what reads the slot after this wait
                postedSeen = memory.orderAfterSignal(link.dataSignal(), received + 1, link.senderRank(), false);
                if (postedSeen >= POISON) {
                    throw new PipelineAbortedException("pipeline aborted by another rank while stage " + link.toStage()
                            + " waited for microbatch " + microbatch + " from stage " + link.fromStage()
                            + " (the failing rank reports the cause; fix: correct what the failing rank's error names,"
                            + " then create new links in a new group)");
                }
            }
            int slotIndex = (int) (received % layout.slots());
            MemorySegment payload = headers ? checkedPayload(slotIndex, microbatch) : slotViews[slotIndex];
            holding = true;
            return payload;
        }

        private MemorySegment checkedPayload(int slotIndex, int microbatch) {
            MemorySegment slot = slotViews[slotIndex];
            long bytes = slot.get(ValueLayout.JAVA_LONG, ChannelLayout.PAYLOAD_BYTES_OFFSET);
            long sequence = slot.get(ValueLayout.JAVA_LONG, ChannelLayout.SEQUENCE_OFFSET);
            int foundMicrobatch = slot.get(ValueLayout.JAVA_INT, ChannelLayout.MICROBATCH_OFFSET);
            int foundStage = slot.get(ValueLayout.JAVA_INT, ChannelLayout.FROM_STAGE_OFFSET);
            if (sequence != received || foundMicrobatch != microbatch || foundStage != link.fromStage()
                    || bytes < 0 || bytes > layout.slotBytes()) {
                throw new IllegalStateException("unexpected message on " + this + ": expected sequence=" + received
                        + " microbatch=" + microbatch + " fromStage=" + link.fromStage() + " found sequence=" + sequence
                        + " microbatch=" + foundMicrobatch + " fromStage=" + foundStage + " payloadBytes=" + bytes
                        + " (the two ranks' schedules must list this link's microbatches in the same order; fix: check"
                        + " the schedule with ScheduleValidator.requireValid, and give both ranks the same schedule)");
            }
            MemorySegment payload = payloadViews[slotIndex];
            if (payload == null || payload.byteSize() != bytes) {
                // a message of another length than the slot's last: a new view (steady state: same lengths, none)
                payload = slot.asSlice(ChannelLayout.HEADER_BYTES, bytes);
                payloadViews[slotIndex] = payload;
            }
            return payload;
        }

        /**
         * Gives the slot of the last received message back to the sender. On enqueued memory the credit
         * is enqueued after whatever the rank's stream holds that reads the slot.
         *
         * @throws IllegalStateException when no message is held
         */
        @Override
        public void release() {
            if (!holding) {
                throw new IllegalStateException("release on " + this + " without a received message (fix: release"
                        + " each message once, after receive(microbatch) returned it)");
            }
            holding = false;
            received++;
            // release: every read of the slot happens before the sender, acquiring this credit in its
            // send, overwrites it (on the host: the reads made before this call; on a GPU: the work
            // enqueued on the stream before this stream-ordered signal, released at system scope)
            memory.signal(link.senderRank(), link.creditSignal(), 1, SignalOp.ADD);
        }

        @Override
        public long received() {
            return received;
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
     * Aborts the pipeline: stores {@link #POISON} into every counter the layout uses on every rank's
     * pad, now and not behind this rank's enqueued work ({@link SymmetricMemory#storeSignalsNow}), so
     * every rank waiting on a link (or about to), on the host or in a device-side wait — this rank's
     * own blocked stream included — stops instead of waiting out the timeout. Not collective; called
     * by a rank that failed. Bounded by the group's timeout.
     *
     * @param memory the pipeline's symmetric memory
     * @param layout where the links' counters lie
     * @return whether every store landed within the group's timeout (always on the host; false on a
     *         GPU whose queue for the stores stayed blocked)
     */
    public static boolean poisonAll(SymmetricMemory memory, ChannelLayout layout) {
        // release (inside storeSignalsNow): nothing to order, the poison carries no data; acquired by the
        // waits on these counters, which then see a value >= POISON
        return memory.storeSignalsNow(0, layout.signalSlotsNeeded(), POISON, memory.group().options().timeout());
    }

    static Direction directionInto(int fromStage, int toStage) {
        if (toStage == fromStage + 1) {
            return Direction.ACTIVATION;
        }
        if (toStage == fromStage - 1) {
            return Direction.GRADIENT;
        }
        throw new IllegalArgumentException("a stage link joins adjacent stages: fromStage=" + fromStage + " toStage="
                + toStage + " expected toStage=" + (fromStage + 1) + " or " + (fromStage - 1) + " (fix: link only"
                + " neighbouring stages; a message for a farther stage goes through the stages between)");
    }
}
