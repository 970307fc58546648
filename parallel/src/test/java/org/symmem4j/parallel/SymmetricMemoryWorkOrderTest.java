package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * What an executor drives symmetric memory with, on host memory: the operations are done at once,
 * {@link SymmetricMemory#orderAfterSignal} is the blocking acquire wait (consuming or not),
 * {@link SymmetricMemory#storeSignalsNow} stores into every rank's slots and ends their waits,
 * {@link SymmetricMemory#awaitWork} has nothing to wait for, and the clock is the host clock. The GPU
 * side of the same contract is {@code CudaWorkOrderTest}.
 */
class SymmetricMemoryWorkOrderTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(20));

    @Test
    void hostMemoryDoesItsOperationsAtOnce() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 64)) {
                assertFalse(mem.enqueued());
                assertTrue(mem.awaitWork(Duration.ZERO), "nothing enqueued: done at once, even with no time");
                try (WorkClock clock = mem.clock(4)) {
                    assertSame(WorkClock.host(), clock);
                    clock.restart();
                    long before = System.nanoTime();
                    long mark = clock.mark();
                    long after = System.nanoTime();
                    assertTrue(clock.nanos(mark) >= before && clock.nanos(mark) <= after, "a host mark is the host clock now");
                }
            }
            return null;
        });
    }

    /**
     * Many rounds of data put before a signal, each read after {@code orderAfterSignal}; the consuming
     * wait gives the count back, so every round waits for the same threshold of 1.
     */
    @Test
    void orderAfterSignalAcquiresThePutDataAndConsumesTheCount() {
        int rounds = 500;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            int rank = group.rank();
            int peer = 1 - rank;
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 1024); Arena arena = Arena.ofConfined()) {
                MemorySegment message = arena.allocate(1024);
                for (int round = 1; round <= rounds; round++) {
                    if ((round + rank) % 2 == 0) {
                        message.fill((byte) round);
                        mem.putWithSignal(peer, message, 0, 3, 1, SignalOp.ADD);
                        // the peer consumed the previous count before signalling back: wait for its ack
                        mem.orderAfterSignal(4, 1, peer, true);
                    } else {
                        long seen = mem.orderAfterSignal(3, 1, peer, true);
                        assertEquals(1, seen, "round " + round + ": the value seen, before the subtraction");
                        assertEquals(0, mem.readSignal(3), "round " + round + ": the consuming wait gives the count back");
                        assertEquals((byte) round, mem.local().get(ValueLayout.JAVA_BYTE, 0), "round " + round);
                        assertEquals((byte) round, mem.local().get(ValueLayout.JAVA_BYTE, 1023), "round " + round);
                        mem.signal(peer, 4, 1, SignalOp.ADD);
                    }
                }
            }
            return null;
        });
    }

    /** A rank that stores a large value into every rank's slots ends a peer's wait on one of them. */
    @Test
    void storeSignalsNowEndsEveryRanksWait() {
        long abort = 1L << 56;
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 64)) {
                mem.barrier();
                if (group.rank() == 2) {
                    assertTrue(mem.storeSignalsNow(1, 5, abort, Duration.ofSeconds(5)));
                } else {
                    // waits for a count nobody else would ever signal
                    assertEquals(abort, mem.orderAfterSignal(1 + group.rank(), 1, -1, false));
                }
                mem.barrier();
                for (int slot = 0; slot < 8; slot++) {
                    assertEquals(slot >= 1 && slot < 5 ? abort : 0, mem.readSignal(slot), "slot " + slot);
                }
                assertThrows(IndexOutOfBoundsException.class,
                        () -> mem.storeSignalsNow(0, mem.signalSlots() + 1, abort, Duration.ZERO));
            }
            return null;
        });
    }
}
