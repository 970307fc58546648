package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.cuda.CudaThreadRanksTestBase;
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The hash map in GPU memory ({@link DeviceHashMap}), ranks as threads sharing GPU 0 where there is one GPU (2 by
 * default, {@code -Dsymmem4j.test.cudaRanks=N} for more): random put/get/remove/putIfAbsent/compute from every rank
 * into every partition against a {@link java.util.HashMap} model; concurrent puts of the same keys from every rank
 * (the last writer of some rank wins, and no read is torn: every value is one word repeated, which a torn copy
 * breaks); compute increments from every rank add up exactly; a full partition, wrong sizes and the host map on a
 * GPU group are refused; a slot held past the timeout names its holder. Skipped without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaSymmetricHashMapTest extends CudaThreadRanksTestBase {


    private static MemorySegment key(Arena a, long k) {
        MemorySegment s = a.allocate(Long.BYTES, Long.BYTES);
        s.set(ValueLayout.JAVA_LONG, 0, k);
        return s;
    }

    /** A value of {@code bytes / 8} equal words: a torn copy of two such values has unequal words. */
    private static MemorySegment value(Arena a, int bytes, long word) {
        MemorySegment s = a.allocate(bytes, Long.BYTES);
        for (int i = 0; i < bytes / Long.BYTES; i++) {
            s.setAtIndex(ValueLayout.JAVA_LONG, i, word);
        }
        return s;
    }

    private static long wholeWord(MemorySegment v, String what) {
        long first = v.get(ValueLayout.JAVA_LONG, 0);
        for (long i = 1; i < v.byteSize() / Long.BYTES; i++) {
            assertEquals(first, v.getAtIndex(ValueLayout.JAVA_LONG, i), what + ": torn value, word " + i);
        }
        return first;
    }

    @Test
    void randomOperationsFromEveryRankIntoEveryPartitionMatchAHashMapModel() {
        int world = world();
        int valueBytes = 24;
        int keys = 40 * world; // about 40 per partition of 64 slots: every partition used, none full
        int opsPerTurn = 60;
        InJvmWorld.runOnEveryRank(world, OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 DeviceHashMap map = DeviceHashMap.create(group, 8, valueBytes, 64)) {
                // every rank keeps the same model, from the same seed; ops of turn t run on rank t % world
                Map<Long, Long> model = new HashMap<>();
                Random random = new Random(33);
                Set<Integer> owners = new HashSet<>();
                MemorySegment dst = a.allocate(valueBytes, Long.BYTES);
                for (int turn = 0; turn < 4 * world; turn++) {
                    boolean mine = turn % world == group.rank();
                    for (int i = 0; i < opsPerTurn; i++) {
                        long k = random.nextInt(keys);
                        int op = random.nextInt(5);
                        long w = ((long) turn << 32) | i;
                        MemorySegment key = key(a, k);
                        Long before = model.get(k);
                        switch (op) {
                            case 0 -> {
                                if (mine) {
                                    owners.add(map.owner(key));
                                    assertEquals(before == null, map.put(key, value(a, valueBytes, w)), "put " + k);
                                }
                                model.put(k, w);
                            }
                            case 1 -> {
                                if (mine) {
                                    assertEquals(before != null, map.get(key, dst), "get " + k);
                                    if (before != null) {
                                        assertEquals(before, wholeWord(dst, "get " + k), "get " + k);
                                    }
                                }
                            }
                            case 2 -> {
                                if (mine) {
                                    assertEquals(before != null, map.remove(key), "remove " + k);
                                }
                                model.remove(k);
                            }
                            case 3 -> {
                                if (mine) {
                                    assertEquals(before == null, map.putIfAbsent(key, value(a, valueBytes, w)),
                                            "putIfAbsent " + k);
                                }
                                model.putIfAbsent(k, w);
                            }
                            default -> {
                                // increments the words when present; removes the key when its words are odd
                                if (mine) {
                                    boolean present = map.compute(key, (cur, next) -> {
                                        assertEquals(before != null, cur != null, "compute sees " + k);
                                        if (cur == null) {
                                            for (int j = 0; j < valueBytes / 8; j++) {
                                                next.setAtIndex(ValueLayout.JAVA_LONG, j, w);
                                            }
                                            return true;
                                        }
                                        long c = wholeWord(cur, "compute " + k);
                                        assertEquals(c, wholeWord(next, "compute's next " + k), "next starts as cur");
                                        if ((c & 1) == 1) {
                                            return false;
                                        }
                                        for (int j = 0; j < valueBytes / 8; j++) {
                                            next.setAtIndex(ValueLayout.JAVA_LONG, j, c + 1);
                                        }
                                        return true;
                                    });
                                    assertEquals(before == null || (before & 1) == 0, present, "compute " + k);
                                }
                                if (before == null) {
                                    model.put(k, w);
                                } else if ((before & 1) == 1) {
                                    model.remove(k);
                                } else {
                                    model.put(k, before + 1);
                                }
                            }
                        }
                    }
                    hostBarrier(group, "turn-" + turn); // this turn's writes, before the next rank's turn
                }
                // every rank reads every key of every partition: exactly the model
                for (long k = 0; k < keys; k++) {
                    MemorySegment key = key(a, k);
                    owners.add(map.owner(key));
                    Long expected = model.get(k);
                    assertEquals(expected != null, map.get(key, dst), "final get " + k + " on rank " + group.rank());
                    if (expected != null) {
                        assertEquals(expected, wholeWord(dst, "final get " + k));
                    }
                }
                assertEquals(world, owners.size(), "keys in every rank's partition");
                hostBarrier(group, "read");
            }
            return null;
        });
    }

    @Test
    void concurrentPutsOfTheSameKeysLeaveALastWrittenValueAndNoReadIsTorn() {
        int world = world();
        int valueBytes = 512; // 64 words: a copy of two values mixed shows
        int keys = 6;
        int rounds = 400;
        List<long[]> lastOfRank = InJvmWorld.runOnEveryRank(world, OPTIONS, gpuTransport(), group -> {
            int me = group.rank();
            long[] last = new long[keys];
            try (Arena a = Arena.ofConfined();
                 DeviceHashMap map = DeviceHashMap.create(group, 8, valueBytes, 64)) {
                MemorySegment dst = a.allocate(valueBytes, Long.BYTES);
                MemorySegment v = a.allocate(valueBytes, Long.BYTES);
                Random random = new Random(me);
                hostBarrier(group, "start");
                for (int i = 0; i < rounds; i++) {
                    int k = i % keys;
                    long w = ((long) (me + 1) << 32) | i;
                    for (int j = 0; j < valueBytes / 8; j++) {
                        v.setAtIndex(ValueLayout.JAVA_LONG, j, w);
                    }
                    map.put(k, v);
                    last[k] = w;
                    int rk = random.nextInt(keys);
                    if (map.get(rk, dst)) {
                        long got = wholeWord(dst, "concurrent get " + rk);
                        int writer = (int) (got >>> 32) - 1;
                        assertTrue(writer >= 0 && writer < world, "a value some rank wrote: " + Long.toHexString(got));
                        assertEquals(rk, (int) (got & 0xFFFFFFFFL) % keys, "the value of that key");
                    }
                }
                hostBarrier(group, "written");
                long[] seen = new long[keys];
                for (int k = 0; k < keys; k++) {
                    assertTrue(map.get(k, dst), "key " + k);
                    seen[k] = wholeWord(dst, "final get " + k);
                }
                hostBarrier(group, "read");
                long[] both = new long[2 * keys];
                System.arraycopy(last, 0, both, 0, keys);
                System.arraycopy(seen, 0, both, keys, keys);
                return both;
            }
        });
        for (int k = 0; k < keys; k++) {
            long finalValue = lastOfRank.getFirst()[keys + k];
            Set<Long> lastWrites = new HashSet<>();
            for (long[] r : lastOfRank) {
                assertEquals(finalValue, r[keys + k], "every rank reads the same final value of key " + k);
                lastWrites.add(r[k]);
            }
            assertTrue(lastWrites.contains(finalValue), "key " + k + ": final " + Long.toHexString(finalValue)
                    + " is the last put of some rank, one of " + lastWrites);
        }
    }

    @Test
    void computeIncrementsFromEveryRankAddUpExactly() {
        int world = world();
        int keys = 4;
        int perRank = 200;
        InJvmWorld.runOnEveryRank(world, OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 DeviceHashMap map = DeviceHashMap.create(group, 8, 16, 64)) {
                hostBarrier(group, "start");
                for (int i = 0; i < perRank; i++) {
                    // both halves count: a lost or torn update leaves them apart or short
                    map.compute(i % keys, (cur, next) -> {
                        long lo = cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 0);
                        long hi = cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 8);
                        assertEquals(lo, hi, "halves of a counter");
                        next.set(ValueLayout.JAVA_LONG, 0, lo + 1);
                        next.set(ValueLayout.JAVA_LONG, 8, hi + 1);
                        return true;
                    });
                }
                hostBarrier(group, "counted");
                MemorySegment dst = a.allocate(16, 8);
                for (int k = 0; k < keys; k++) {
                    assertTrue(map.get(k, dst));
                    assertEquals((long) world * perRank / keys, dst.get(ValueLayout.JAVA_LONG, 0), "key " + k);
                    assertEquals((long) world * perRank / keys, dst.get(ValueLayout.JAVA_LONG, 8), "key " + k);
                }
                // a function that throws gives the slot back unchanged
                assertThrows(IllegalStateException.class, () -> map.compute(0, (cur, next) -> {
                    next.set(ValueLayout.JAVA_LONG, 0, -1);
                    throw new IllegalStateException("refused");
                }));
                assertTrue(map.get(0, dst));
                assertEquals((long) world * perRank / keys, dst.get(ValueLayout.JAVA_LONG, 0), "unchanged after a throw");
                hostBarrier(group, "read");
            }
            return null;
        });
    }

    @Test
    void aFullPartitionWrongSizesAndTheHostMapAreRefused() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, gpuTransport(), group -> {
            UnsupportedOperationException host = assertThrows(UnsupportedOperationException.class,
                    () -> SymmetricHashMap.create(group, 8, 8, 64));
            assertTrue(host.getMessage().contains("DeviceHashMap") && host.getMessage().contains("fix:"),
                    host.getMessage());
            IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                    () -> DeviceHashMap.create(group, 8, 4096, 64));
            assertTrue(big.getMessage().contains("2048") && big.getMessage().contains("fix:"), big.getMessage());
            try (Arena a = Arena.ofConfined();
                 DeviceHashMap map = DeviceHashMap.create(group, 8, 16, 4)) {
                if (group.rank() == 0) {
                    // four keys of rank 1's partition fill it; the fifth is refused naming rank 1
                    List<Long> remote = new ArrayList<>();
                    for (long k = 0; remote.size() < 5; k++) {
                        if (map.owner(key(a, k)) == 1) {
                            remote.add(k);
                        }
                    }
                    for (int i = 0; i < 4; i++) {
                        assertTrue(map.put(remote.get(i), value(a, 16, i)));
                    }
                    MapFullException full = assertThrows(MapFullException.class,
                            () -> map.put(remote.get(4), value(a, 16, 4)));
                    assertEquals(1, full.owner());
                    assertTrue(full.getMessage().contains("fix:"), full.getMessage());
                    // the four are intact; a removed key keeps its slot and comes back into it
                    MemorySegment dst = a.allocate(16, 8);
                    for (int i = 0; i < 4; i++) {
                        assertTrue(map.get(remote.get(i), dst));
                        assertEquals(i, wholeWord(dst, "after full"));
                    }
                    assertTrue(map.remove(remote.get(2)));
                    assertFalse(map.get(remote.get(2), dst));
                    assertThrows(MapFullException.class, () -> map.put(remote.get(4), value(a, 16, 4)));
                    assertTrue(map.put(remote.get(2), value(a, 16, 22)));
                    // wrong sizes: refused before anything is launched
                    IllegalArgumentException k = assertThrows(IllegalArgumentException.class,
                            () -> map.put(a.allocate(4), value(a, 16, 1)));
                    assertTrue(k.getMessage().contains("expected=8") && k.getMessage().contains("fix:"), k.getMessage());
                    IllegalArgumentException v = assertThrows(IllegalArgumentException.class,
                            () -> map.put(remote.get(0), value(a, 8, 1)));
                    assertTrue(v.getMessage().contains("expected 16") && v.getMessage().contains("fix:"), v.getMessage());
                    assertThrows(IllegalArgumentException.class, () -> map.get(remote.get(0), a.allocate(8)));
                    assertTrue(map.get(remote.get(0), dst));
                    assertEquals(0, wholeWord(dst, "after the refusals"));
                }
                hostBarrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void aSlotHeldPastTheTimeoutNamesItsHolderThenReadsTheNewValue() {
        CountDownLatch timedOut = new CountDownLatch(1);
        CountDownLatch holding = new CountDownLatch(1);
        GroupOptions quick = OPTIONS.withTimeout(Duration.ofSeconds(2));
        InJvmWorld.runOnEveryRank(2, quick, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 DeviceHashMap map = DeviceHashMap.create(group, 8, 16, 64)) {
                MemorySegment dst = a.allocate(16, 8);
                if (group.rank() == 0) {
                    map.put(7, value(a, 16, 1));
                }
                hostBarrier(group, "put");
                if (group.rank() == 1) {
                    // holds key 7's slot LOCKED (host-driven compute) until rank 0 has timed out on it
                    map.compute(7, (cur, next) -> {
                        holding.countDown();
                        try {
                            assertTrue(timedOut.await(30, TimeUnit.SECONDS), "rank 0 timed out");
                        } catch (InterruptedException e) {
                            throw new IllegalStateException(e);
                        }
                        next.set(ValueLayout.JAVA_LONG, 0, 2);
                        next.set(ValueLayout.JAVA_LONG, 8, 2);
                        return true;
                    });
                } else {
                    assertTrue(holding.await(30, TimeUnit.SECONDS));
                    PeerTimeoutException held = assertThrows(PeerTimeoutException.class, () -> map.get(7, dst));
                    timedOut.countDown();
                    assertEquals(List.of(1), held.missingRanks(), held.getMessage());
                    assertTrue(held.getMessage().contains("slot"), held.getMessage());
                }
                hostBarrier(group, "released");
                assertTrue(map.get(7, dst));
                assertEquals(2, wholeWord(dst, "after the compute"));
            } finally {
                timedOut.countDown();
            }
            return null;
        });
    }

    @Test
    void keysAndValuesOfTheHostMapsSizesRoundTripBitwise() {
        // unaligned sizes: a 13-byte key and a 21-byte value, byte patterns that padding would show
        InJvmWorld.runOnEveryRank(world(), OPTIONS, gpuTransport(), group -> {
            try (Arena a = Arena.ofConfined();
                 DeviceHashMap map = DeviceHashMap.create(group, 13, 21, 64)) {
                int me = group.rank();
                for (int i = 0; i < 20; i++) {
                    map.put(bytes(a, 13, me * 100 + i), bytes(a, 21, me * 100 + i + 7));
                }
                hostBarrier(group, "put");
                MemorySegment dst = a.allocate(21);
                for (int r = 0; r < group.worldSize(); r++) {
                    for (int i = 0; i < 20; i++) {
                        assertTrue(map.get(bytes(a, 13, r * 100 + i), dst));
                        assertArrayEquals(bytes(a, 21, r * 100 + i + 7).toArray(ValueLayout.JAVA_BYTE),
                                dst.toArray(ValueLayout.JAVA_BYTE), "rank " + r + " key " + i);
                    }
                }
                assertFalse(map.get(bytes(a, 13, 99_999), dst));
                hostBarrier(group, "read");
            }
            return null;
        });
    }

    private static MemorySegment bytes(Arena a, int n, int seed) {
        MemorySegment s = a.allocate(n);
        for (int j = 0; j < n; j++) {
            s.set(ValueLayout.JAVA_BYTE, j, (byte) (seed * 31 + j * 7 + 1));
        }
        return s;
    }
}
