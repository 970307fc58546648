package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.WorkClock;

/**
 * The executor's operations on GPU symmetric memory, through the {@link SymmetricMemory} interface
 * only (no cast): they are enqueued on the rank's stream, {@link SymmetricMemory#orderAfterSignal} is
 * a device-side wait (consuming or not), {@link SymmetricMemory#storeSignalsNow} lands while the
 * rank's own stream is blocked in such a wait and ends every rank's wait, {@link SymmetricMemory#awaitWork}
 * gives up on a blocked stream and succeeds once it ran, and the clock's marks follow the stream. The
 * host side of the same contract is {@code SymmetricMemoryWorkOrderTest}. Skipped without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaWorkOrderTest {

    static final GpuTestSupport.ClassTransport GPU = new GpuTestSupport.ClassTransport();

    private static final long ABORT = 1L << 56;

    @BeforeEach
    void needsAGpu() {
        GPU.open();
    }

    /** Releases every rank this class's transport made, so that a later class's test can be the kernels' last user. */
    @AfterAll
    static void closeTransport() {
        GPU.close();
    }

    /** Host-only meeting of the ranks: no stream synchronize (the streams may be blocked on purpose). */
    private static void meet(Group group, String tag) {
        group.allGatherBytes("cuda-work-order-" + tag, new byte[0]);
    }

    /**
     * Every rank blocks its own stream in a device-side wait that no put will satisfy; one rank stores
     * the abort value into every rank's slots from the host: its store lands though its own stream is
     * blocked, and every rank's stream runs on.
     */
    @Test
    void storeSignalsNowEndsEveryDeviceWaitEvenOnTheStoringRanksBlockedStream() {
        GPU.onEveryRankOfHostGroup(group -> {
            try (SymmetricMemory mem = GPU.cuda().allocate(group, 4096)) {
                assertTrue(mem.enqueued());
                mem.barrier();
                int slot = 1 + group.rank() % 3;
                assertEquals(1, mem.orderAfterSignal(slot, 1, -1, false), "enqueued: returns the threshold");
                assertFalse(mem.awaitWork(Duration.ofMillis(200)), "nothing signals slot " + slot + " yet: the stream waits");
                meet(group, "blocked");
                if (group.rank() == GPU.worldSize() - 1) {
                    assertTrue(mem.storeSignalsNow(1, 4, ABORT, Duration.ofSeconds(60)), "the abort store landed");
                }
                assertTrue(mem.awaitWork(Duration.ofSeconds(60)), "the abort ended the device-side wait of rank " + group.rank());
                for (int s = 0; s < 6; s++) {
                    assertEquals(s >= 1 && s < 4 ? ABORT : 0, mem.readSignal(s), "rank " + group.rank() + " slot " + s);
                }
            }
            return null;
        });
    }

    /**
     * A ring of puts, each followed by a consuming device-side wait on the receiving rank and a copy of
     * the message, enqueued after the wait, into the second half of the buffer: the copy sees the
     * put's data (acquire), and the count goes back to zero every round.
     */
    @Test
    void orderAfterSignalOrdersLaterWorkAndConsumes() {
        int half = 32 << 10;
        GPU.onEveryRankOfHostGroup(group -> {
            int next = (group.rank() + 1) % GPU.worldSize();
            int previous = (group.rank() - 1 + GPU.worldSize()) % GPU.worldSize();
            try (SymmetricMemory mem = GPU.cuda().allocate(group, 3L * half); Arena arena = Arena.ofConfined()) {
                MemorySegment host = arena.allocate(half);
                MemorySegment base = MemorySegment.ofAddress(mem.local().address()).reinterpret(3L * half);
                for (int round = 1; round <= 5; round++) {
                    host.fill((byte) (group.rank() * 16 + round));
                    mem.copyFromHost(host, 2L * half); // the source of this round's put
                    mem.barrier(); // every rank's previous round is read before anyone puts again
                    mem.putWithSignal(next, base.asSlice(2L * half, half), 0, 7, 1, SignalOp.ADD);
                    mem.orderAfterSignal(7, 1, previous, true);
                    // a put into this rank's own buffer, enqueued after the wait: copies what arrived
                    mem.putWithSignal(group.rank(), base.asSlice(0, half), half, 8, 0, SignalOp.ADD);
                    assertTrue(mem.awaitWork(Duration.ofSeconds(60)), "round " + round);
                    mem.copyToHost(half, host);
                    byte expected = (byte) (previous * 16 + round);
                    assertEquals(expected, host.get(ValueLayout.JAVA_BYTE, 0), "round " + round);
                    assertEquals(expected, host.get(ValueLayout.JAVA_BYTE, half - 1), "round " + round);
                    assertEquals(0, mem.readSignal(7), "round " + round + ": the consuming wait gives the count back");
                }
            }
            return null;
        });
    }

    /** Marks are events on the stream: in order, placed after the round's origin; a full clock says so. */
    @Test
    void clockMarksFollowTheStream() {
        GPU.onEveryRankOfHostGroup(group -> {
            try (SymmetricMemory mem = GPU.cuda().allocate(group, 1 << 20)) {
                MemorySegment base = MemorySegment.ofAddress(mem.local().address()).reinterpret(1 << 20);
                try (WorkClock clock = mem.clock(2)) {
                    for (int round = 0; round < 3; round++) {
                        long before = System.nanoTime();
                        clock.restart();
                        long first = clock.mark();
                        mem.putWithSignal(group.rank(), base.asSlice(0, 1 << 19), 1 << 19, 0, 0, SignalOp.ADD);
                        long second = clock.mark();
                        assertThrows(IllegalStateException.class, clock::mark, "a third mark does not fit a clock of 2");
                        assertTrue(mem.awaitWork(Duration.ofSeconds(60)));
                        assertTrue(clock.nanos(first) >= before, "round " + round + ": a mark follows the round's origin");
                        assertTrue(clock.nanos(second) >= clock.nanos(first), "round " + round + ": marks run forward");
                    }
                }
            }
            return null;
        });
    }
}
