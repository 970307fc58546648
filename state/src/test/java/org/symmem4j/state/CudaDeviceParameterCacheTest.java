package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
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
 * The parameter cache in GPU memory ({@link DeviceParameterCache}), ranks as threads sharing GPU 0 where there is
 * one GPU (2 by default, {@code -Dsymmem4j.test.cudaRanks=N} for more): the owner puts from host and from device
 * memory and every other rank copies its zero-copy device view back bitwise; a replace while a reader holds the old
 * view leaves the old bytes intact and the view valid, a second replace is detected ({@code isValid} false); the
 * host cache's LRU eviction (a peer's get counts as a use) within the budget and within {@code maxEntries}, the
 * budget kept over many puts of mixed sizes, a held view of an evicted entry reported invalid while its memory stays
 * readable; bad names, an entry larger than the budget and a replace that cannot fit beside its old version refused
 * with clear errors; with the directory in shared host memory, a reader copying views back while the owner replaces
 * the entry reads whole versions or is told so, and a put whose copy throws gives its block back. Skipped without a
 * GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaDeviceParameterCacheTest extends CudaThreadRanksTestBase {


    /** Distinct bytes per (version, index), unaligned lengths included. */
    private static byte[] bytes(int version, int length) {
        byte[] b = new byte[length];
        for (int j = 0; j < length; j++) {
            b[j] = (byte) (version * 131 + j * 7 + (j >> 8));
        }
        return b;
    }

    private static MemorySegment host(Arena a, byte[] b) {
        MemorySegment s = a.allocate(Math.max(1, b.length), Long.BYTES).asSlice(0, b.length);
        MemorySegment.copy(b, 0, s, ValueLayout.JAVA_BYTE, 0, b.length);
        return s;
    }

    /** Copies a device view back to the host. */
    private static byte[] back(Arena a, DeviceCommunicator gpu, DeviceParameterCache.View v) {
        int n = (int) v.data().byteSize();
        if (n == 0) {
            return new byte[0];
        }
        MemorySegment h = a.allocate(n);
        gpu.copyToHost(h, v.data());
        return h.toArray(ValueLayout.JAVA_BYTE);
    }

    @Test
    void theOwnerPutsFromHostAndDeviceAndEveryRankCopiesItsDeviceViewBackBitwise() {
        byte[] fromHost = bytes(1, 1000 + 3);
        byte[] fromDevice = bytes(2, 64 * 1024 + 5);
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 1 << 20, 8)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                if (group.rank() == 0) {
                    assertEquals(1, cache.put("weights/a", host(a, fromHost)));
                    MemorySegment d = gpu.allocateDevice(fromDevice.length);
                    gpu.copyFromHost(d, host(a, fromDevice));
                    assertEquals(2, cache.putFromDevice("weights/b", d));
                    gpu.freeDevice(d);
                    assertEquals(2, cache.ownEntries());
                }
                hostBarrier(group, "put");
                DeviceParameterCache.View va = cache.get("weights/a");
                DeviceParameterCache.View vb = cache.get(0, "weights/b");
                assertNotNull(va, "rank " + group.rank() + " finds weights/a");
                assertNotNull(vb, "rank " + group.rank() + " finds weights/b");
                assertEquals(0, va.owner());
                assertEquals(1, va.version());
                assertEquals(2, vb.version());
                assertEquals(fromHost.length, va.data().byteSize());
                assertArrayEquals(fromHost, back(a, gpu, va), "rank " + group.rank() + " reads weights/a bitwise");
                assertArrayEquals(fromDevice, back(a, gpu, vb), "rank " + group.rank() + " reads weights/b bitwise");
                assertTrue(va.isValid() && vb.isValid());
                assertNull(cache.get("weights/none"));
                assertNull(cache.get(1, "weights/a"), "only rank 0 owns it");
                assertEquals(2, cache.version(0, "weights/b"), "the version a reader polls, without a view");
                assertEquals(-1, cache.version(1, "weights/a"), "only rank 0 owns it");
                hostBarrier(group, "read");
            }
            return null;
        });
    }

    @Test
    void aReplaceWhileAReaderHoldsTheOldViewLeavesItsBytesIntactAndASecondReplaceIsDetected() {
        int length = 4096 + 17;
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 4 * (length + 128), 4)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                boolean owner = group.rank() == 0;
                if (owner) {
                    cache.put("adapter", host(a, bytes(1, length)));
                }
                hostBarrier(group, "v1");
                DeviceParameterCache.View old = owner ? null : cache.get("adapter");
                hostBarrier(group, "held");
                if (owner) {
                    cache.put("adapter", host(a, bytes(2, length))); // the hot swap, into the other buffer
                }
                hostBarrier(group, "v2");
                if (!owner) {
                    assertArrayEquals(bytes(1, length), back(a, gpu, old), "the old view's bytes after one replace");
                    assertTrue(old.isValid(), "the old view stays valid across one replace");
                    DeviceParameterCache.View now = cache.get("adapter");
                    assertEquals(2, now.version());
                    assertArrayEquals(bytes(2, length), back(a, gpu, now));
                    assertFalse(now.deviceAddress() == old.deviceAddress(), "a replace writes the other buffer");
                }
                hostBarrier(group, "read v2");
                if (owner) {
                    cache.put("adapter", host(a, bytes(3, length))); // frees version 1's block
                }
                hostBarrier(group, "v3");
                if (!owner) {
                    assertFalse(old.isValid(), "a second replace frees the old view's block: the reader detects it");
                    DeviceParameterCache.View now = cache.get("adapter");
                    assertEquals(3, now.version());
                    assertArrayEquals(bytes(3, length), back(a, gpu, now));
                    assertTrue(now.isValid());
                }
                hostBarrier(group, "read v3");
                if (owner) {
                    assertTrue(cache.remove("adapter"));
                }
                hostBarrier(group, "removed");
                assertNull(cache.get("adapter"));
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void leastRecentlyUsedEntriesAreEvictedAsOnTheHostAndAGetFromAPeerCountsAsAUse() {
        int length = 1024;
        long block = ParameterCache.blockBytes(length);
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 3 * block, 8)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                if (group.rank() == 0) {
                    cache.put("a", host(a, bytes(1, length)));
                    cache.put("b", host(a, bytes(2, length)));
                    cache.put("c", host(a, bytes(3, length)));
                }
                hostBarrier(group, "abc");
                if (group.rank() == 1) {
                    assertNotNull(cache.get("a"), "rank 1 finds a"); // a peer's get: a is now used after b and c
                }
                hostBarrier(group, "a used");
                if (group.rank() == 0) {
                    cache.put("d", host(a, bytes(4, length))); // no room: evicts the least recently used, b
                    assertEquals(3, cache.ownEntries());
                }
                hostBarrier(group, "d");
                assertNull(cache.get("b"), "b was the least recently used: evicted");
                assertArrayEquals(bytes(1, length), back(a, gpu, cache.get("a")), "a kept, bitwise");
                assertArrayEquals(bytes(3, length), back(a, gpu, cache.get("c")), "c kept, bitwise");
                assertArrayEquals(bytes(4, length), back(a, gpu, cache.get("d")), "d in, bitwise");
                hostBarrier(group, "checked");
            }
            return null;
        });
    }

    @Test
    void manyPutsOfMixedSizesStayWithinTheBudgetAndTheEntriesLeftReadBackBitwise() {
        long budget = 16 * 1024;
        int names = 12;
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, budget, 6)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                int[] lastVersion = new int[names];
                int[] lastLength = new int[names];
                for (int round = 0; round < 60; round++) {
                    int n = (round * 7) % names;
                    int length = 100 + (round * 997) % 3000; // 100 .. 3099 B, unaligned
                    if (group.rank() == 0) {
                        cache.put("e" + n, host(a, bytes(round + 1, length)));
                    }
                    lastVersion[n] = round + 1;
                    lastLength[n] = length;
                    hostBarrier(group, "put " + round);
                    if (group.rank() == 1 && round % 3 == 0) {
                        cache.get("e" + ((round * 5) % names)); // peers' uses move entries up the LRU order
                    }
                    long used = 0;
                    int present = 0;
                    for (int i = 0; i < names; i++) {
                        DeviceParameterCache.View v = cache.get(0, "e" + i);
                        if (v != null) {
                            present++;
                            used += ParameterCache.blockBytes(v.data().byteSize());
                            assertArrayEquals(bytes(lastVersion[i], lastLength[i]), back(a, gpu, v),
                                    "round " + round + ": e" + i + " is its last put's, bitwise");
                            assertTrue(v.isValid());
                        }
                    }
                    assertTrue(used <= budget, "round " + round + ": current versions use bytes=" + used
                            + " of budget=" + budget);
                    assertTrue(present >= 1 && present <= 6, "round " + round + ": entries=" + present);
                    assertNotNull(cache.get(0, "e" + n), "round " + round + ": the entry just put is there");
                    hostBarrier(group, "checked " + round);
                }
            }
            return null;
        });
    }

    @Test
    void aNewNameBeyondMaxEntriesEvictsTheLeastRecentlyUsedEntry() {
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 1 << 16, 2)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                if (group.rank() == 0) {
                    cache.put("x", host(a, bytes(1, 100)));
                    cache.put("y", host(a, bytes(2, 100)));
                }
                hostBarrier(group, "xy");
                if (group.rank() == 1) {
                    assertNotNull(cache.get("x")); // x used after y
                }
                hostBarrier(group, "x used");
                if (group.rank() == 0) {
                    cache.put("z", host(a, bytes(3, 100)));
                    assertEquals(2, cache.ownEntries());
                }
                hostBarrier(group, "z");
                assertNull(cache.get("y"), "y, the least recently used, made room for z");
                assertArrayEquals(bytes(1, 100), back(a, gpu, cache.get("x")));
                assertArrayEquals(bytes(3, 100), back(a, gpu, cache.get("z")));
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void aHeldViewOfAnEvictedEntryReportsInvalidAndItsMemoryStaysMapped() {
        int length = 4096 + 40;
        long block = ParameterCache.blockBytes(length);
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 2 * block, 4)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                boolean owner = group.rank() == 0;
                if (owner) {
                    cache.put("old", host(a, bytes(1, length)));
                }
                hostBarrier(group, "old");
                DeviceParameterCache.View held = owner ? null : cache.get("old");
                if (!owner) {
                    assertArrayEquals(bytes(1, length), back(a, gpu, held));
                    assertTrue(held.isValid());
                }
                hostBarrier(group, "held");
                if (owner) {
                    cache.put("f1", host(a, bytes(2, length))); // the budget's second block
                    cache.put("f2", host(a, bytes(3, length))); // evicts "old" (least recently used), into its range
                }
                hostBarrier(group, "evicted");
                assertNull(cache.get("old"), "old was evicted");
                if (!owner) {
                    assertFalse(held.isValid(), "a held view of an evicted entry reports invalid");
                    // its memory is still mapped (the cache's allocation lives until close): reading it is safe, and
                    // what it reads is the newer entry's bytes, which is why the check after use says invalid
                    assertArrayEquals(bytes(3, length), back(a, gpu, held), "the range went to f2 (first fit)");
                    assertFalse(held.isValid());
                }
                assertArrayEquals(bytes(2, length), back(a, gpu, cache.get("f1")));
                assertArrayEquals(bytes(3, length), back(a, gpu, cache.get("f2")));
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void badNamesAnEntryLargerThanTheBudgetAndAReplaceThatCannotFitBesideItsOldVersionAreRefused() {
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 1024, 2)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                if (group.rank() == 0) {
                    assertThrows(IllegalArgumentException.class, () -> cache.put("", host(a, bytes(1, 8))));
                    assertThrows(IllegalArgumentException.class, () -> cache.put("n".repeat(69), host(a, bytes(1, 8))));
                    IllegalArgumentException over = assertThrows(IllegalArgumentException.class,
                            () -> cache.put("big", host(a, bytes(1, 2000))));
                    assertTrue(over.getMessage().contains("budgetBytes=1024") && over.getMessage().contains("fix:"),
                            over.getMessage());
                    assertEquals(0, cache.ownEntries(), "nothing claimed for the refused entry");
                    cache.put("x", host(a, bytes(1, 100)));
                    cache.put("y", host(a, bytes(2, 100)));
                    // 500 B (a 576 B block) fits beside x's current 192 B one; 900 B (1024 B) beside x's 576 B does not
                    cache.put("x", host(a, bytes(4, 500)));
                    IllegalArgumentException beside = assertThrows(IllegalArgumentException.class,
                            () -> cache.put("x", host(a, bytes(5, 900))));
                    assertTrue(beside.getMessage().contains("beside the version it replaces")
                            && beside.getMessage().contains("fix:"), beside.getMessage());
                }
                hostBarrier(group, "refused");
                assertArrayEquals(bytes(4, 500), back(a, gpu, cache.get("x")), "the refused put left x as it was");
                assertNull(cache.get("big"));
                hostBarrier(group, "done");
            }
            return null;
        });
        InJvmWorld.runOnEveryRank(2, OPTIONS, gpuTransport(), group -> {
            try (Communicator comm = Communicator.create(group)) {
                assertThrows(IllegalArgumentException.class, () -> DeviceParameterCache.create(comm, 64, 4));
                assertThrows(IllegalArgumentException.class, () -> DeviceParameterCache.create(comm, 1 << 20, 0));
            }
            return null;
        });
    }

    /**
     * The directory is host memory now: a reader that copies a view back while the owner keeps replacing the entry
     * either reads one version whole or is told by the check after use (two host loads) that the block was freed.
     */
    @Test
    void readersCopyingViewsWhileTheOwnerReplacesReadWholeVersionsOrAreToldSo() {
        int length = 16 * 1024;
        int versions = 300;
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 3 * ParameterCache.blockBytes(length),
                         2)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                MemorySegment src = a.allocate(length, Long.BYTES);
                if (group.rank() == 0) {
                    src.fill((byte) 0);
                    cache.put("m", src);
                }
                hostBarrier(group, "seeded");
                if (group.rank() == 0) {
                    for (long v = 1; v <= versions; v++) {
                        for (long i = 0; i < length / 8; i++) {
                            src.setAtIndex(ValueLayout.JAVA_LONG, i, v);
                        }
                        assertEquals(v + 1, cache.put("m", src));
                    }
                } else if (group.rank() == 1) {
                    MemorySegment h = a.allocate(length, Long.BYTES);
                    long lastSeen = -1;
                    int valid = 0;
                    int invalid = 0;
                    while (lastSeen < versions) {
                        DeviceParameterCache.View v = cache.get(0, "m");
                        gpu.copyToHost(h, v.data());
                        if (!v.isValid()) {
                            invalid++;
                            continue; // freed while read: the bytes may be torn and are not used
                        }
                        valid++;
                        long first = h.getAtIndex(ValueLayout.JAVA_LONG, 0);
                        for (long i = 1; i < length / 8; i++) {
                            assertEquals(first, h.getAtIndex(ValueLayout.JAVA_LONG, i), "a valid read is whole");
                        }
                        assertEquals(first + 1, v.version(), "the block holds the version the directory named");
                        assertTrue(first >= lastSeen, "versions never go back");
                        lastSeen = first;
                    }
                    System.out.println("device cache torn-read check: valid reads=" + valid + " invalid=" + invalid);
                }
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    /**
     * A put whose copy throws (its host source closed: the copy's call refuses it) gives its block and its new name
     * back, so the budget stays whole; a version given by the caller must grow.
     */
    @Test
    void aPutWhoseCopyThrowsGivesItsBlockBackAndGivenVersionsMustGrow() {
        int length = 1000;
        long block = ParameterCache.blockBytes(length);
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 Communicator comm = Communicator.create(group);
                 DeviceParameterCache cache = DeviceParameterCache.create(comm, 2 * block, 2)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                if (group.rank() == 0) {
                    MemorySegment closed;
                    try (Arena gone = Arena.ofConfined()) {
                        closed = gone.allocate(length);
                    }
                    for (int i = 0; i < 5; i++) {
                        assertThrows(IllegalStateException.class, () -> cache.put("x", closed), "attempt " + i);
                        assertEquals(2 * block, cache.freeBytes(), "the block came back (attempt " + i + ")");
                        assertEquals(0, cache.ownEntries(), "the name claimed for it too");
                    }
                    assertEquals(100, cache.put("p", host(a, bytes(1, length)), 100));
                    IllegalArgumentException low = assertThrows(IllegalArgumentException.class,
                            () -> cache.put("q", host(a, bytes(2, length)), 100));
                    assertTrue(low.getMessage().contains("fix:"), low.getMessage());
                    assertEquals(101, cache.put("q", host(a, bytes(3, length))), "the next version");
                    assertEquals(0, cache.freeBytes(), "the whole budget in use");
                }
                hostBarrier(group, "put");
                assertNull(cache.get("x"));
                assertArrayEquals(bytes(1, length), back(a, gpu, cache.get("p")));
                assertArrayEquals(bytes(3, length), back(a, gpu, cache.get("q")));
                hostBarrier(group, "done");
            }
            return null;
        });
    }
}
