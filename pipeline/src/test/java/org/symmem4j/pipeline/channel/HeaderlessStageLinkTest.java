package org.symmem4j.pipeline.channel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.schedule.PipelineShape;

/**
 * The path {@link StageLink} takes on GPU memory, run on the host: host memory behind a view that
 * answers as GPU memory does — not host-addressable, operations enqueued, so waits return their
 * threshold instead of the value seen. The link then puts no header, receives a view spanning the
 * slot's capacity, and keeps its back-pressure without knowing the counters' values. Every byte of
 * every message is checked under slot reuse, as in {@link StageLinkTest}.
 */
class HeaderlessStageLinkTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    @Test
    void messagesArriveIntactWithoutHeadersUnderSlotReuse() {
        long slotBytes = 2048;
        ChannelLayout layout = new ChannelLayout(PipelineShape.of(2, 8), 2, slotBytes);
        int messages = 5_000;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricMemory host = SymmetricMemory.allocate(group, layout.bytesPerRank());
                 Arena arena = Arena.ofConfined()) {
                SymmetricMemory memory = new DeviceLike(host);
                memory.barrier();
                int me = group.rank();
                StageLink.Sender sender = new StageLink.Sender(memory, layout, me, 1 - me, arena);
                StageLink.Receiver receiver = new StageLink.Receiver(memory, layout, 1 - me, me);
                MemorySegment payload = arena.allocate(slotBytes, 64);
                for (int n = 0; n < messages; n++) {
                    int bytes = 1 + (n * 7919) % (int) slotBytes;
                    for (int i = 0; i < bytes; i++) {
                        payload.set(ValueLayout.JAVA_BYTE, i, pattern(me, n, i));
                    }
                    sender.send(n % 8, payload.asSlice(0, bytes));
                    MemorySegment got = receiver.receive(n % 8);
                    assertEquals(slotBytes, got.byteSize(), "message " + n + ": without a header the view is the slot");
                    for (int i = 0; i < bytes; i++) {
                        if (got.get(ValueLayout.JAVA_BYTE, i) != pattern(1 - me, n, i)) {
                            throw new AssertionError("rank " + me + " message " + n + " byte " + i + " corrupt");
                        }
                    }
                    receiver.release();
                }
                assertEquals(messages, sender.sent());
                assertEquals(messages, receiver.received());
                memory.barrier(); // nobody frees while the peer's last credit may still be landing
            }
            return null;
        });
    }

    private static byte pattern(int rank, int n, int i) {
        return (byte) (rank * 131 + n * 31 + i * 7);
    }

    /**
     * Host memory answering as GPU memory does: no host view, enqueued operations (here done at once,
     * but {@link #orderAfterSignal} returns the threshold, as an enqueued wait must).
     */
    private record DeviceLike(SymmetricMemory host) implements SymmetricMemory {
        @Override
        public boolean hostAddressable() {
            return false;
        }

        @Override
        public boolean enqueued() {
            return true;
        }

        @Override
        public long orderAfterSignal(int slot, long atLeast, int fromRank, boolean consume) {
            host.orderAfterSignal(slot, atLeast, fromRank, consume);
            return atLeast;
        }

        @Override
        public Group group() {
            return host.group();
        }

        @Override
        public long byteSize() {
            return host.byteSize();
        }

        @Override
        public long id() {
            return host.id();
        }

        @Override
        public MemorySegment local() {
            return host.local();
        }

        @Override
        public MemorySegment peer(int rank) {
            return host.peer(rank);
        }

        @Override
        public int signalSlots() {
            return host.signalSlots();
        }

        @Override
        public void barrier() {
            host.barrier();
        }

        @Override
        public void putWithSignal(int peer, MemorySegment src, long dstOffset, int slot, long value, SignalOp op) {
            host.putWithSignal(peer, src, dstOffset, slot, value, op);
        }

        @Override
        public void signal(int peer, int slot, long value, SignalOp op) {
            host.signal(peer, slot, value, op);
        }

        @Override
        public long waitSignal(int slot, long atLeast, int fromRank) {
            return host.waitSignal(slot, atLeast, fromRank);
        }

        @Override
        public long readSignal(int slot) {
            return host.readSignal(slot);
        }

        @Override
        public void close() {
            // the test closes the host memory it wraps
        }
    }
}
