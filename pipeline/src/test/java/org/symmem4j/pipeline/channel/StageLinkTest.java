package org.symmem4j.pipeline.channel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.schedule.PipelineShape;

class StageLinkTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));
    private static final PipelineShape TWO_RANKS = PipelineShape.of(2, 8);

    /**
     * Stress: 20 000 messages of varying sizes through a 3-slot link in both directions at once,
     * every byte checked, so slot reuse races (a sender overwriting a slot still being read, a
     * receiver reading before the payload landed) would show as corrupt data.
     */
    @Test
    void everyMessageArrivesIntactAndInOrderUnderSlotReuse() {
        ChannelLayout layout = new ChannelLayout(TWO_RANKS, 3, 4096);
        int messages = 20_000;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricMemory memory = SymmetricMemory.allocate(group, layout.bytesPerRank());
                 Arena arena = Arena.ofConfined()) {
                memory.barrier();
                int me = group.rank();
                // stage 0 on rank 0 sends activations to stage 1; stage 1 sends gradients back
                StageLink.Sender sender = new StageLink.Sender(memory, layout, me, 1 - me, arena);
                StageLink.Receiver receiver = new StageLink.Receiver(memory, layout, 1 - me, me);
                MemorySegment payload = arena.allocate(4096, 64);
                for (int n = 0; n < messages; n++) {
                    int bytes = sizeOf(n);
                    for (int i = 0; i < bytes; i++) {
                        payload.set(ValueLayout.JAVA_BYTE, i, pattern(me, n, i));
                    }
                    sender.send(n % 8, payload.asSlice(0, bytes));
                    MemorySegment got = receiver.receive(n % 8);
                    assertEquals(sizeOf(n), got.byteSize(), "message " + n);
                    for (int i = 0; i < got.byteSize(); i++) {
                        if (got.get(ValueLayout.JAVA_BYTE, i) != pattern(1 - me, n, i)) {
                            throw new AssertionError("rank " + me + " message " + n + " byte " + i + " corrupt");
                        }
                    }
                    receiver.release();
                }
                assertEquals(messages, sender.sent());
                assertEquals(messages, receiver.received());
            }
            return null;
        });
    }

    private static int sizeOf(int n) {
        return 1 + (n * 7919) % 4096;
    }

    private static byte pattern(int rank, int n, int i) {
        return (byte) (rank * 131 + n * 31 + i * 7);
    }

    /** With two slots, the third send waits until the receiver gives the first slot back. */
    @Test
    void aFullLinkMakesTheSenderWait() {
        ChannelLayout layout = new ChannelLayout(TWO_RANKS, 2, 64);
        AtomicLong thirdSendReturned = new AtomicLong();
        AtomicLong firstReleased = new AtomicLong();
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricMemory memory = SymmetricMemory.allocate(group, layout.bytesPerRank());
                 Arena arena = Arena.ofConfined()) {
                memory.barrier();
                MemorySegment payload = arena.allocate(64);
                if (group.rank() == 0) {
                    StageLink.Sender sender = new StageLink.Sender(memory, layout, 0, 1, arena);
                    sender.send(0, payload);
                    sender.send(1, payload);
                    sender.send(2, payload);
                    thirdSendReturned.set(System.nanoTime());
                } else {
                    StageLink.Receiver receiver = new StageLink.Receiver(memory, layout, 0, 1);
                    LockSupport.parkNanos(Duration.ofMillis(200).toNanos()); // the sender fills both slots
                    receiver.receive(0);
                    firstReleased.set(System.nanoTime());
                    receiver.release();
                    for (int mb = 1; mb < 3; mb++) {
                        receiver.receive(mb);
                        receiver.release();
                    }
                }
                memory.barrier();
            }
            return null;
        });
        assertTrue(thirdSendReturned.get() > firstReleased.get(),
                "the third send returned " + (firstReleased.get() - thirdSendReturned.get()) / 1e6
                        + " ms before the first slot was released");
    }

    @Test
    void aMessageForAnotherMicrobatchIsAnError() {
        ChannelLayout layout = new ChannelLayout(TWO_RANKS, 2, 64);
        SymmemException e = assertThrows(SymmemException.class, () -> InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricMemory memory = SymmetricMemory.allocate(group, layout.bytesPerRank());
                 Arena arena = Arena.ofConfined()) {
                memory.barrier();
                if (group.rank() == 0) {
                    new StageLink.Sender(memory, layout, 0, 1, arena).send(4, arena.allocate(8));
                    memory.barrier();
                } else {
                    try {
                        new StageLink.Receiver(memory, layout, 0, 1).receive(5);
                    } finally {
                        memory.barrier();
                    }
                }
            }
            return null;
        }));
        assertTrue(e.getCause().getMessage().contains("expected sequence=0 microbatch=5 fromStage=0 found sequence=0"
                + " microbatch=4 fromStage=0"), e.getCause().getMessage());
    }

    /** A poisoned pipeline wakes a receiver and a sender that wait, and fails them with the abort. */
    @Test
    void poisonStopsWaitersOnBothEnds() {
        PipelineShape threeRanks = PipelineShape.of(3, 4);
        ChannelLayout layout = new ChannelLayout(threeRanks, 1, 64);
        SymmemException e = assertThrows(SymmemException.class, () -> InJvmWorld.runOnEveryRank(3,
                GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
                    try (SymmetricMemory memory = SymmetricMemory.allocate(group, layout.bytesPerRank());
                         Arena arena = Arena.ofConfined()) {
                        memory.barrier();
                        try {
                            switch (group.rank()) {
                                case 0 -> { // a receiver whose sender (rank 1) never sends
                                    new StageLink.Receiver(memory, layout, 1, 0).receive(0);
                                }
                                case 1 -> { // a sender whose one slot is never released by rank 2
                                    StageLink.Sender sender = new StageLink.Sender(memory, layout, 1, 2, arena);
                                    sender.send(0, arena.allocate(8));
                                    sender.send(1, arena.allocate(8));
                                }
                                default -> {
                                    LockSupport.parkNanos(Duration.ofMillis(300).toNanos());
                                    StageLink.poisonAll(memory, layout);
                                    throw new IllegalStateException("rank 2 failed");
                                }
                            }
                        } finally {
                            memory.barrier();
                        }
                    }
                    return null;
                }));
        // No elapsed-time bound (a loaded machine stretches it): waiters that had run into the timeout
        // would report PeerTimeoutException; PipelineAbortedException naming what each waited for is the
        // proof that the poison stopped them.
        assertTrue(e.getCause() instanceof PipelineAbortedException && e.getCause().getMessage().contains(
                "while stage 0 waited for microbatch 0 from stage 1"), String.valueOf(e.getCause()));
        assertEquals(2, e.getSuppressed().length);
        assertTrue(e.getSuppressed()[0].getCause() instanceof PipelineAbortedException
                && e.getSuppressed()[0].getCause().getMessage().contains("waiting for a free slot to send microbatch 1"),
                String.valueOf(e.getSuppressed()[0].getCause()));
    }

    @Test
    void linksJoinAdjacentStagesOnly() {
        ChannelLayout layout = new ChannelLayout(PipelineShape.of(4, 4), 1, 64);
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            try (SymmetricMemory memory = SymmetricMemory.allocate(group, layout.bytesPerRank())) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> new StageLink.Receiver(memory, layout, 0, 2));
                assertTrue(e.getMessage().contains("fromStage=0 toStage=2 expected toStage=1 or -1"), e.getMessage());
            }
            return null;
        });
    }
}
