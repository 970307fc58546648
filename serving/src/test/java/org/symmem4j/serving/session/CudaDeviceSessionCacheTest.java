package org.symmem4j.serving.session;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.cuda.CudaThreadRanksTestBase;
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The session cache in GPU memory ({@link DeviceSessionCache}), ranks as threads sharing the GPUs (2 by default,
 * {@code -Dsymmem4j.test.cudaRanks=N}): rank 0 saves a session's state and rank 1 reads it in place (its device
 * address copied back) and by a peer copy into its own buffer, bitwise; rank 1 continues the session and its newer
 * save wins over rank 0's copy; the budget evicts the least recently used session and a read of it throws
 * {@code EVICTED} while an id never saved reads as unknown (-1); bad ids and oversized states refused; a find's stamp
 * and length come from the directory (host memory), and copies racing saves read one save whole. Skipped without a
 * GPU ({@link CudaThreadRanksTestBase}).
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaDeviceSessionCacheTest extends CudaThreadRanksTestBase {

    /** Distinct bytes per (step, index). */
    private static byte[] state(int step, int length) {
        byte[] b = new byte[length];
        for (int j = 0; j < length; j++) {
            b[j] = (byte) (step * 131 + j * 7 + (j >> 8));
        }
        return b;
    }

    private static MemorySegment host(Arena a, byte[] b) {
        MemorySegment s = a.allocate(Math.max(1, b.length), Long.BYTES).asSlice(0, b.length);
        MemorySegment.copy(b, 0, s, ValueLayout.JAVA_BYTE, 0, b.length);
        return s;
    }

    private static byte[] back(Arena a, DeviceCommunicator gpu, MemorySegment device, long n) {
        MemorySegment h = a.allocate(n);
        gpu.copyToHost(h, device.asSlice(0, n));
        return h.toArray(ValueLayout.JAVA_BYTE);
    }

    @Test
    void rankZeroSavesAndRankOneReadsInPlaceAndByPeerCopyBitwiseThenContinuesTheSession() {
        int length = 8 * 1024 + 12;
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceSessionCache cache = DeviceSessionCache.create(comm, 1 << 20, 16, 64 << 10)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                MemorySegment mine = gpu.allocateDevice(64 << 10);
                if (group.rank() == 0) {
                    assertEquals(-1, cache.copyInto("user-17", mine), "a new session is unknown");
                    MemorySegment d = gpu.allocateDevice(length);
                    gpu.copyFromHost(d, host(a, state(1, length)));
                    cache.saveFromDevice("user-17", d);
                    gpu.freeDevice(d);
                    assertEquals(1, cache.sessionsHere());
                }
                hostBarrier(group, "saved");
                if (group.rank() == 1) {
                    DeviceSessionCache.Block b = cache.find("user-17");
                    assertNotNull(b, "rank 1 finds rank 0's session");
                    assertEquals(0, b.owner());
                    assertEquals(length, b.length());
                    MemorySegment inPlace = MemorySegment.ofAddress(b.deviceAddress()).reinterpret(length);
                    assertArrayEquals(state(1, length), back(a, gpu, inPlace, length), "in place, bitwise");
                    assertTrue(b.isValid());
                    assertEquals(length, cache.copyInto("user-17", mine));
                    assertArrayEquals(state(1, length), back(a, gpu, mine, length), "peer copy, bitwise");
                    // rank 1 continues the session: its save is the newer copy
                    cache.save("user-17", host(a, state(2, length + 100)));
                }
                hostBarrier(group, "continued");
                DeviceSessionCache.Block now = cache.find("user-17");
                assertNotNull(now);
                assertEquals(1, now.owner(), "rank " + group.rank() + " finds the newer save, rank 1's");
                MemorySegment h = a.allocate(64 << 10);
                assertEquals(length + 100, cache.get("user-17", h));
                assertArrayEquals(state(2, length + 100), h.asSlice(0, length + 100).toArray(ValueLayout.JAVA_BYTE));
                hostBarrier(group, "read");
                if (group.rank() == 0) {
                    assertEquals(0, cache.sessionsHere(), "rank 0's find removed its stale copy");
                }
                gpu.freeDevice(mine);
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void theBudgetEvictsTheLeastRecentlyUsedSessionAndItsReadThrowsEvictedWhileAnUnknownIdReadsMinusOne() {
        int length = 4096;
        long block = 64 + 64 + length; // the cache's block header, the session header, the state
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceSessionCache cache = DeviceSessionCache.create(comm, 3 * block, 8, length)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                MemorySegment mine = gpu.allocateDevice(length);
                if (group.rank() == 0) {
                    cache.save("a", host(a, state(1, length)));
                    cache.save("b", host(a, state(2, length)));
                    cache.save("c", host(a, state(3, length)));
                }
                hostBarrier(group, "abc");
                if (group.rank() == 1) {
                    assertNotNull(cache.find("a"), "a peer's find is a use: a is now newer than b");
                }
                hostBarrier(group, "a used");
                if (group.rank() == 0) {
                    cache.save("d", host(a, state(4, length))); // no room: evicts b
                    assertEquals(3, cache.sessionsHere());
                }
                hostBarrier(group, "d");
                SessionExpiredException e = assertThrows(SessionExpiredException.class,
                        () -> cache.copyInto("b", mine), "rank " + group.rank() + ": b was evicted");
                assertEquals(SessionExpiredException.Reason.EVICTED, e.reason());
                assertEquals("b", e.sessionId());
                assertTrue(e.getMessage().contains("fix:"), e.getMessage());
                assertEquals(-1, cache.copyInto("never", mine), "an id never saved is unknown");
                for (String id : new String[] {"a", "c", "d"}) {
                    assertEquals(length, cache.copyInto(id, mine));
                    int step = id.charAt(0) - 'a' + 1;
                    assertArrayEquals(state(step, length), back(a, gpu, mine, length), id + " kept, bitwise");
                }
                hostBarrier(group, "checked");
                if (group.rank() == 0) {
                    cache.save("b", host(a, state(5, length))); // the session started again
                }
                hostBarrier(group, "b again");
                assertEquals(length, cache.copyInto("b", mine), "a session saved again is live again");
                assertArrayEquals(state(5, length), back(a, gpu, mine, length));
                gpu.freeDevice(mine);
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void badIdsOversizedStatesAndATooSmallBudgetAreRefusedBeforeAnythingIsWritten() {
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Communicator comm = Communicator.create(group)) {
                IllegalArgumentException small = assertThrows(IllegalArgumentException.class,
                        () -> DeviceSessionCache.create(comm, 1024, 4, 4096));
                assertTrue(small.getMessage().contains("fix:"), small.getMessage());
                try (Arena a = Arena.ofConfined();
                     DeviceSessionCache cache = DeviceSessionCache.create(comm, 1 << 16, 4, 256)) {
                    assertThrows(IllegalArgumentException.class, () -> cache.save("", host(a, state(1, 8))));
                    assertThrows(IllegalArgumentException.class, () -> cache.save("x".repeat(67), host(a, state(1, 8))));
                    IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                            () -> cache.save("big", host(a, state(1, 257))));
                    assertTrue(big.getMessage().contains("maxStateBytes=256") && big.getMessage().contains("fix:"),
                            big.getMessage());
                    assertEquals(0, cache.sessionsHere());
                    hostBarrier(group, "refused");
                    assertNull(cache.find("big"));
                    hostBarrier(group, "done");
                }
            }
            return null;
        });
    }

    /**
     * A find is the directory's host loads: its stamp is the save's, its length the state's; reads racing rank 0's
     * saves of the same session are each one save's state, whole (the check after use, host loads too, finds the
     * session again when a newer save freed what was read).
     */
    @Test
    void findsReadTheSavesStampAndReadsRacingSavesAreWhole() {
        int length = 32 * 1024;
        int saves = 200;
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceSessionCache cache = DeviceSessionCache.create(comm, 1 << 20, 16, length)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                MemorySegment src = a.allocate(length, Long.BYTES);
                long stamp = 0;
                if (group.rank() == 0) {
                    src.fill((byte) 0);
                    stamp = cache.save("s", src.asSlice(0, length - 24));
                }
                byte[] stamps = group.allGatherBytes("stamp", MemorySegment.ofArray(new long[] {stamp})
                        .toArray(ValueLayout.JAVA_BYTE)).getFirst();
                DeviceSessionCache.Block b = cache.find("s");
                assertNotNull(b);
                assertEquals(MemorySegment.ofArray(stamps).get(ValueLayout.JAVA_LONG_UNALIGNED, 0), b.stamp(),
                        "rank " + group.rank() + " finds rank 0's stamp");
                assertEquals(length - 24, b.length());
                hostBarrier(group, "found");
                MemorySegment mine = gpu.allocateDevice(length);
                if (group.rank() == 0) {
                    cache.save("s", src); // zeros, the whole length
                }
                hostBarrier(group, "whole length");
                if (group.rank() == 0) {
                    for (long k = 1; k <= saves; k++) {
                        for (long i = 0; i < length / 8; i++) {
                            src.setAtIndex(ValueLayout.JAVA_LONG, i, k);
                        }
                        cache.save("s", src);
                    }
                } else if (group.rank() == 1) {
                    MemorySegment h = a.allocate(length, Long.BYTES);
                    long last = -1;
                    while (last < saves) {
                        assertEquals(length, cache.copyInto("s", mine), "the session is known throughout");
                        gpu.copyToHost(h, mine); // the peer copy that copyInto checked after use
                        long first = h.getAtIndex(ValueLayout.JAVA_LONG, 0);
                        for (long i = 1; i < length / 8; i++) {
                            assertEquals(first, h.getAtIndex(ValueLayout.JAVA_LONG, i), "one save's state, whole");
                        }
                        assertTrue(first >= last, "saves never go back");
                        last = first;
                    }
                }
                hostBarrier(group, "raced");
                gpu.freeDevice(mine);
                hostBarrier(group, "done");
            }
            return null;
        });
    }
}
