package org.symmem4j.pipeline.channel;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.cuda.CudaSymmetricMemory;

/**
 * A stage link between GPUs: the same bounded FIFO as {@link StageLink}, in the same
 * {@link ChannelLayout}, but every step is enqueued on the rank's CUDA stream instead of done by
 * the host thread, so the host runs ahead through the schedule and the GPU waits:
 *
 * <ul>
 *   <li>send: a device-side wait until the receiver has released enough messages (credit counter
 *       on the sender's pad), then one kernel that copies the payload into the receiver's slot over
 *       NVLink and adds 1 to the receiver's data counter with release semantics at system scope
 *       ({@code symmem_put_signal});</li>
 *   <li>receive: a device-side acquire wait until the data counter holds the message
 *       ({@code symmem_wait_signal}); the stage's kernels, enqueued after it, read the slot;</li>
 *   <li>release: a signal kernel, enqueued after the stage's kernels, adds 1 to the sender's
 *       credit counter with release semantics.</li>
 * </ul>
 *
 * Counters only grow, as on the host, so captured and repeated steps need no reset. Two things
 * differ from the host link: there is no header (the host never sees the slot, so it cannot check
 * the microbatch; {@link LinkPlan} checks the schedules' FIFO order before training instead), and
 * the payload view a receive returns spans the slot's capacity ({@link ChannelLayout#slotBytes()}),
 * not the message's length, which only the stages know. Device-side waits are unbounded: the
 * executor bounds them from the host and aborts with {@link #poisonAll}.
 */
public final class CudaStageLink {

    private CudaStageLink() {
    }

    /** The sending end, on the rank of {@code fromStage}. */
    public static final class Sender implements LinkSender {
        private final CudaSymmetricMemory memory;
        private final ChannelLayout layout;
        private final LinkEnds link;
        private long sent;

        /**
         * The sending end of the link {@code fromStage -> toStage} in GPU symmetric memory.
         *
         * @param memory    the pipeline's symmetric memory
         * @param layout    where every link's slots lie in it
         * @param fromStage the sending stage
         * @param toStage   the receiving stage
         */
        public Sender(CudaSymmetricMemory memory, ChannelLayout layout, int fromStage, int toStage) {
            this.memory = Objects.requireNonNull(memory, "memory");
            this.layout = Objects.requireNonNull(layout, "layout");
            this.link = LinkEnds.of(layout, fromStage, toStage);
        }

        /**
         * Enqueues the send of {@code payload} (a device address of this rank, as a segment whose byte
         * size is the length) and returns at once.
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
            if (needReleased > 0) {
                // acquire (device side): pairs with the receiver's release kernel, so its reads of the
                // slot this send overwrites are complete before the put below runs
                memory.enqueueWaitSignal(link.creditSignal(), needReleased, false);
            }
            long offset = layout.slotOffset(link.region(), (int) (sent % layout.slots())) + ChannelLayout.HEADER_BYTES;
            // release (device side, system scope): the payload's copy is ordered before the count the
            // receiver's wait acquires
            memory.putWithSignal(link.receiverRank(), payload, offset, link.dataSignal(), 1, SignalOp.ADD);
            sent++;
        }

        @Override
        public long sent() {
            return sent;
        }

        @Override
        public String toString() {
            return "GPU " + link;
        }
    }

    /** The receiving end, on the rank of {@code toStage}. */
    public static final class Receiver extends CreditReceiver<CudaSymmetricMemory> {

        /**
         * The receiving end of the link {@code fromStage -> toStage} in GPU symmetric memory.
         *
         * @param memory    the pipeline's symmetric memory
         * @param layout    where every link's slots lie in it
         * @param fromStage the sending stage
         * @param toStage   the receiving stage
         */
        public Receiver(CudaSymmetricMemory memory, ChannelLayout layout, int fromStage, int toStage) {
            super(memory, layout, fromStage, toStage);
        }

        /**
         * Enqueues the wait for the next message and returns its slot: a device address view of
         * {@link ChannelLayout#slotBytes()} bytes, which work enqueued on this rank's stream after this
         * call may read until {@link #release()}.
         */
        @Override
        public MemorySegment receive(int microbatch) {
            checkReleased();
            // acquire (device side): pairs with the sender's put-with-signal; later work on this
            // stream sees the payload
            memory.enqueueWaitSignal(link.dataSignal(), received + 1, false);
            hold();
            long offset = layout.slotOffset(link.region(), (int) (received % layout.slots())) + ChannelLayout.HEADER_BYTES;
            return MemorySegment.ofAddress(memory.local().address() + offset).reinterpret(layout.slotBytes());
        }

        @Override
        public String toString() {
            return "GPU " + link;
        }
    }

    /**
     * Aborts the pipeline from the host: stores {@link StageLink#POISON} into every counter the layout
     * uses on every rank's pad at once, not through any stream, so every device-side wait on a link
     * (this rank's included, whose stream may be blocked) returns. Not collective.
     *
     * @param memory the pipeline's symmetric memory
     * @param layout the layout whose counters are poisoned
     */
    public static void poisonAll(CudaSymmetricMemory memory, ChannelLayout layout) {
        int ranks = memory.group().worldSize();
        for (int rank = 0; rank < ranks; rank++) {
            for (int slot = 0; slot < layout.signalSlotsNeeded(); slot++) {
                memory.storeSignalFromHost(rank, slot, StageLink.POISON);
            }
        }
    }

    /**
     * Whether any counter of this rank's pad carries the poison: another rank aborted the pipeline.
     *
     * @param memory the pipeline's symmetric memory
     * @param layout the layout whose counters are read
     * @return true if any counter holds {@link StageLink#POISON} or more
     */
    public static boolean poisoned(CudaSymmetricMemory memory, ChannelLayout layout) {
        for (int slot = 0; slot < layout.signalSlotsNeeded(); slot++) {
            if (memory.readSignal(slot) >= StageLink.POISON) {
                return true;
            }
        }
        return false;
    }
}
