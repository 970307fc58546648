package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/** The hash map between threads of one JVM: against a reference map, atomic compute, untorn reads, full, sizes. */
class SymmetricHashMapTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    private static MemorySegment value(Arena arena, long v, int bytes) {
        MemorySegment s = arena.allocate(bytes, 8);
        for (int i = 0; i + 8 <= bytes; i += 8) {
            s.set(ValueLayout.JAVA_LONG, i, v);
        }
        return s;
    }

    @Test
    void randomOperationsOfFourRanksMatchAReferenceMap() {
        int ranks = 4;
        Map<Long, Long> reference = new ConcurrentHashMap<>();
        InJvmWorld.runOnEveryRank(ranks, OPTIONS, group -> {
            try (SymmetricHashMap map = SymmetricHashMap.create(group, 8, 16, 256); Arena arena = Arena.ofConfined()) {
                SplittableRandom rnd = new SplittableRandom(group.rank());
                Map<Long, Long> mine = new HashMap<>();
                MemorySegment dst = arena.allocate(16, 8);
                for (int op = 0; op < 4_000; op++) {
                    long key = rnd.nextInt(100) * ranks + group.rank(); // each rank its own keys, every owner
                    long v = rnd.nextLong();
                    switch (rnd.nextInt(5)) {
                        case 0, 1 -> assertEquals(!mine.containsKey(key), map.put(key, value(arena, v, 16)), "put " + key);
                        case 2 -> assertEquals(mine.remove(key) != null, map.remove(key), "remove " + key);
                        case 3 -> {
                            boolean present = map.get(key, dst);
                            assertEquals(mine.containsKey(key), present, "get " + key);
                            if (present) {
                                assertEquals(mine.get(key), dst.get(ValueLayout.JAVA_LONG, 8), "value of " + key);
                            }
                        }
                        default -> {
                            assertTrue(map.compute(key, (cur, nxt) -> {
                                long base = cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 0);
                                nxt.set(ValueLayout.JAVA_LONG, 0, base + 1);
                                nxt.set(ValueLayout.JAVA_LONG, 8, base + 1);
                                return true;
                            }));
                            mine.merge(key, 1L, (a, b) -> a + 1);
                            continue;
                        }
                    }
                    if (map.get(key, dst)) {
                        mine.put(key, dst.get(ValueLayout.JAVA_LONG, 8)); // a put's value: v in both halves
                    }
                }
                reference.putAll(mine);
                group.allGatherBytes("map-test-done", new byte[0]);
                // every rank sees every rank's keys
                for (Map.Entry<Long, Long> e : reference.entrySet()) {
                    assertTrue(map.get(e.getKey(), dst), "key " + e.getKey() + " on rank " + group.rank());
                    assertEquals(e.getValue(), dst.get(ValueLayout.JAVA_LONG, 8), "value of " + e.getKey());
                }
                assertEquals(reference.size(), map.size());
                group.allGatherBytes("map-test-checked", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void concurrentComputeLosesNoIncrement() {
        int ranks = 4;
        int rounds = 2_000;
        InJvmWorld.runOnEveryRank(ranks, OPTIONS, group -> {
            try (SymmetricHashMap map = SymmetricHashMap.create(group, 8, 8, 64); Arena arena = Arena.ofConfined()) {
                for (int i = 0; i < rounds; i++) {
                    long key = i % 8;
                    map.compute(key, (cur, nxt) -> {
                        nxt.set(ValueLayout.JAVA_LONG, 0, (cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 0)) + 1);
                        return true;
                    });
                }
                group.allGatherBytes("increments-done", new byte[0]);
                MemorySegment dst = arena.allocate(8, 8);
                for (long key = 0; key < 8; key++) {
                    assertTrue(map.get(key, dst));
                    assertEquals((long) ranks * rounds / 8, dst.get(ValueLayout.JAVA_LONG, 0), "count of key " + key);
                }
                group.allGatherBytes("increments-checked", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void readersNeverSeeATornValue() {
        int values = 20_000;
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (SymmetricHashMap map = SymmetricHashMap.create(group, 8, 256, 16); Arena arena = Arena.ofConfined()) {
                if (group.rank() == 0) {
                    map.put(7L, value(arena, 0, 256));
                }
                group.allGatherBytes("seeded", new byte[0]);
                if (group.rank() == 0) {
                    for (long v = 1; v <= values; v++) {
                        map.put(7L, value(arena, v, 256));
                    }
                } else {
                    MemorySegment dst = arena.allocate(256, 8);
                    long last = 0;
                    while (last < values) {
                        assertTrue(map.get(7L, dst));
                        long first = dst.get(ValueLayout.JAVA_LONG, 0);
                        for (int i = 8; i < 256; i += 8) {
                            assertEquals(first, dst.get(ValueLayout.JAVA_LONG, i), "torn value at byte " + i);
                        }
                        assertTrue(first >= last, "versions go forward");
                        last = first;
                    }
                }
                group.allGatherBytes("read", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void fullPartitionAndWrongSizesAreRefusedClearly() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricHashMap map = SymmetricHashMap.create(group, 8, 8, 8); Arena arena = Arena.ofConfined()) {
                MemorySegment v = value(arena, 1, 8);
                for (long k = 0; k < 8; k++) {
                    assertTrue(map.put(k, v));
                }
                MapFullException full = assertThrows(MapFullException.class, () -> map.put(100L, v));
                assertEquals(0, full.owner());
                assertTrue(full.getMessage().contains("slotsPerRank=8"), full.getMessage());
                assertTrue(map.remove(3L));
                assertFalse(map.remove(3L));
                assertThrows(MapFullException.class, () -> map.put(100L, v), "a removed key keeps its slot");
                assertTrue(map.put(3L, v), "the removed key comes back to its slot");
                MemorySegment three = arena.allocate(8, 8);
                three.set(ValueLayout.JAVA_LONG, 0, 3L);
                assertFalse(map.putIfAbsent(three, value(arena, 2, 8)), "3 is present");
                assertFalse(map.putIfAbsent(3L, value(arena, 2, 8)), "3 is present, given as a long");
                assertThrows(MapFullException.class, () -> map.putIfAbsent(100L, v), "no slot for a new key");
                MemorySegment dst = arena.allocate(8, 8);
                assertTrue(map.get(3L, dst));
                assertEquals(1, dst.get(ValueLayout.JAVA_LONG, 0), "putIfAbsent left the value");
                IllegalArgumentException key = assertThrows(IllegalArgumentException.class,
                        () -> map.put(MemorySegment.ofArray(new byte[4]), v));
                assertTrue(key.getMessage().contains("key bytes=4 expected=8"), key.getMessage());
                IllegalArgumentException val = assertThrows(IllegalArgumentException.class,
                        () -> map.put(1L, MemorySegment.ofArray(new byte[9])));
                assertTrue(val.getMessage().contains("value bytes=9 expected 8"), val.getMessage());
                assertThrows(IllegalArgumentException.class, () -> map.get(1L, MemorySegment.ofArray(new byte[7])));
                assertEquals(8, map.size());
            }
            try (SymmetricHashMap wide = SymmetricHashMap.create(group, 16, 8, 8)) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> wide.get(1L, MemorySegment.ofArray(new byte[8])));
                assertTrue(e.getMessage().contains("keyBytes=16"), e.getMessage());
            }
            assertThrows(IllegalArgumentException.class, () -> SymmetricHashMap.create(group, 8, 8, 12));
            return null;
        });
    }

    @Test
    void computeThatThrowsLeavesTheValueAsItWas() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricHashMap map = SymmetricHashMap.create(group, 8, 8, 8); Arena arena = Arena.ofConfined()) {
                map.put(5L, value(arena, 55, 8));
                assertThrows(IllegalStateException.class, () -> map.compute(5L, (cur, nxt) -> {
                    nxt.set(ValueLayout.JAVA_LONG, 0, 99);
                    throw new IllegalStateException("boom");
                }));
                MemorySegment dst = arena.allocate(8, 8);
                assertTrue(map.get(5L, dst));
                assertEquals(55, dst.get(ValueLayout.JAVA_LONG, 0));
                assertFalse(map.compute(6L, (cur, nxt) -> false), "absent and kept absent");
                assertFalse(map.get(6L, dst));
            }
            return null;
        });
    }
}
