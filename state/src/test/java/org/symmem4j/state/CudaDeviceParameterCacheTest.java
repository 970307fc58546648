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
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The parameter cache in GPU memory ({@link DeviceParameterCache}), ranks as threads sharing GPU 0 where there is
 * one GPU (2 by default, {@code -Dsymmem4j.test.cudaRanks=N} for more): the owner puts from host and from device
 * memory and every other rank copies its zero-copy device view back bitwise; a replace while a reader holds the old
 * view leaves the old bytes intact and the view valid, a second replace is detected ({@code isValid} false); bad
 * names, an over-budget put, too many entries and a used-up budget (no LRU on GPUs) are refused with clear errors.
 * Skipped without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaDeviceParameterCacheTest extends CudaStateTestBase {


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
    void badNamesAnOverBudgetPutTooManyEntriesAndAUsedUpBudgetAreRefusedWithClearErrors() {
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
                    assertEquals(0, cache.ownEntries());
                    cache.put("x", host(a, bytes(1, 100)));
                    cache.put("y", host(a, bytes(2, 100)));
                    IllegalStateException many = assertThrows(IllegalStateException.class,
                            () -> cache.put("z", host(a, bytes(3, 100))));
                    assertTrue(many.getMessage().contains("maxEntries=2") && many.getMessage().contains("fix:"),
                            many.getMessage());
                    // x (192 B) + y (192 B) + a replace of x (192 B) + ... the budget is used up by versions kept
                    cache.put("x", host(a, bytes(4, 300)));
                    IllegalStateException full = assertThrows(IllegalStateException.class,
                            () -> cache.put("y", host(a, bytes(5, 500))));
                    assertTrue(full.getMessage().contains("no LRU") && full.getMessage().contains("fix:"),
                            full.getMessage());
                }
                hostBarrier(group, "refused");
                DeviceParameterCache.View x = cache.get("x");
                DeviceParameterCache.View y = cache.get("y");
                assertArrayEquals(bytes(4, 300), back(a, gpu, x), "x is its last put's");
                assertArrayEquals(bytes(2, 100), back(a, gpu, y), "the refused put left y as it was");
                assertNull(cache.get("z"));
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
}
