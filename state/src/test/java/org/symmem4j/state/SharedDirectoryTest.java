package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.layout.ParameterCacheLayout;

/**
 * The GPU cache's directory ({@link SharedDirectory}: names, versions, slot to block and the blocks' generations in
 * host memory the ranks share), on host groups: its blocks here are a host symmetric memory standing in for the GPU
 * heap, written by the put's writer and read by the readers as a GPU reader's copy would. Lookups across ranks, a view
 * valid across one replace and invalid after the second, readers that never see a torn version while the owner swaps,
 * a writer that throws gives its block back, a slot listing a freed block reported by name instead of read forever.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SharedDirectoryTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    private static void barrier(Group group, String tag) {
        group.allGatherBytes(tag, new byte[0]);
    }

    /** Fills the block's data with {@code value} (the stand-in for the GPU copy). */
    private static void fill(SymmetricMemory heap, long block, int bytes, long value) {
        for (int i = 0; i < bytes; i += 8) {
            heap.local().set(ValueLayout.JAVA_LONG, block + 64 + i, value);
        }
    }

    private static SharedDirectory.Found lookup(SharedDirectory dir, int owner, String name) {
        byte[] b = ParameterCacheLayout.nameBytes(name);
        return dir.lookup(owner, name, b, ParameterCache.hash(b));
    }

    private static long put(SharedDirectory dir, SymmetricMemory heap, String name, int bytes, long value) {
        return dir.put(name, ParameterCacheLayout.nameBytes(name), bytes, 0, block -> fill(heap, block, bytes, value));
    }

    @Test
    void everyRankFindsTheOwnersEntriesAndAViewHoldsAcrossOneReplaceButNotTwo() {
        int bytes = 1024;
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            long heapBytes = 8L * (bytes + 64);
            try (SymmetricMemory heap = SymmetricMemory.allocate(group, heapBytes);
                 SharedDirectory dir = SharedDirectory.create(group, "test directory", 4, heapBytes)) {
                if (group.rank() == 1) {
                    assertEquals(1, put(dir, heap, "w", bytes, 11));
                    assertEquals(5, dir.put("b", ParameterCacheLayout.nameBytes("b"), 64, 5, block -> { }),
                            "a version given by the caller");
                    IllegalArgumentException low = assertThrows(IllegalArgumentException.class,
                            () -> dir.put("b", ParameterCacheLayout.nameBytes("b"), 64, 5, block -> { }));
                    assertTrue(low.getMessage().contains("version=5") && low.getMessage().contains("fix:"),
                            low.getMessage());
                }
                barrier(group, "put");
                SharedDirectory.Found w = lookup(dir, 1, "w");
                assertNotNull(w, "rank " + group.rank() + " finds rank 1's w");
                assertEquals(1, w.owner());
                assertEquals(1, w.version());
                assertEquals(bytes, w.length());
                assertEquals(11, heap.peer(1).get(ValueLayout.JAVA_LONG, w.block() + 64));
                assertEquals(1, w.generation() & 1, "a published generation is odd");
                assertTrue(dir.holds(1, w.slot(), w.generation()));
                assertNull(lookup(dir, 0, "w"), "rank 0 owns no w");
                assertEquals(5, lookup(dir, 1, "b").version());
                assertEquals(1, dir.version(1, "w"), "the version a reader polls");
                assertEquals(-1, dir.version(0, "w"), "rank 0 owns no w");
                assertEquals(-1, dir.version(1, "missing"));
                barrier(group, "held");
                if (group.rank() == 1) {
                    put(dir, heap, "w", bytes, 12);
                }
                barrier(group, "replaced once");
                assertTrue(dir.holds(1, w.slot(), w.generation()), "the replaced version stays until the next put");
                assertEquals(11, heap.peer(1).get(ValueLayout.JAVA_LONG, w.block() + 64), "its bytes untouched");
                assertEquals(6, lookup(dir, 1, "w").version());
                assertEquals(6, dir.version(1, "w"));
                barrier(group, "read twice");
                if (group.rank() == 1) {
                    put(dir, heap, "w", bytes, 13);
                }
                barrier(group, "replaced twice");
                assertFalse(dir.holds(1, w.slot(), w.generation()), "two puts later the first block is freed");
                SharedDirectory.Found now = lookup(dir, 1, "w");
                assertTrue(dir.holds(1, now.slot(), now.generation()));
                barrier(group, "checked");
                if (group.rank() == 1) {
                    assertTrue(dir.remove("w"));
                }
                barrier(group, "removed");
                assertFalse(dir.holds(1, now.slot(), now.generation()), "a remove frees it");
                assertNull(lookup(dir, 1, "w"));
                assertEquals(-1, dir.version(1, "w"), "a removed name has no version");
                barrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void readersNeverSeeATornVersionWhileTheOwnerSwapsIt() {
        int versions = 3_000;
        int bytes = 2048;
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            long heapBytes = 3L * (bytes + 64);
            try (SymmetricMemory heap = SymmetricMemory.allocate(group, heapBytes);
                 SharedDirectory dir = SharedDirectory.create(group, "test directory", 2, heapBytes)) {
                if (group.rank() == 0) {
                    put(dir, heap, "model", bytes, 0);
                }
                barrier(group, "seeded");
                if (group.rank() == 0) {
                    for (long v = 1; v <= versions; v++) {
                        put(dir, heap, "model", bytes, v);
                    }
                } else {
                    long[] copy = new long[bytes / 8];
                    long lastSeen = -1;
                    int valid = 0;
                    while (lastSeen < versions) {
                        SharedDirectory.Found f = lookup(dir, 0, "model");
                        MemorySegment.copy(heap.peer(0), ValueLayout.JAVA_LONG, f.block() + 64, copy, 0, copy.length);
                        if (!dir.holds(0, f.slot(), f.generation())) {
                            continue; // freed while read: what was read may be torn, and is not used
                        }
                        valid++;
                        for (long x : copy) {
                            assertEquals(copy[0], x, "a valid read is one version, whole");
                        }
                        assertEquals(copy[0] + 1, f.version(), "the block holds the version the slot named");
                        assertTrue(copy[0] >= lastSeen, "versions never go back");
                        lastSeen = copy[0];
                    }
                    assertTrue(valid > 0);
                }
                barrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void aWriterThatThrowsGivesItsBlockAndItsNewNameBack() {
        int bytes = 1024;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            long heapBytes = 2L * (bytes + 64);
            try (SymmetricMemory heap = SymmetricMemory.allocate(group, heapBytes);
                 SharedDirectory dir = SharedDirectory.create(group, "test directory", 2, heapBytes)) {
                if (group.rank() == 0) {
                    IllegalStateException injected = new IllegalStateException("injected copy failure");
                    for (int i = 0; i < 5; i++) {
                        IllegalStateException e = assertThrows(IllegalStateException.class, () -> dir.put("x",
                                ParameterCacheLayout.nameBytes("x"), bytes, 0, block -> {
                                    throw injected;
                                }), "attempt " + i);
                        assertSame(injected, e, "the writer's own exception, not a full heap (attempt " + i + ")");
                        assertEquals(heapBytes, dir.freeBytes(), "the block came back (attempt " + i + ")");
                        assertEquals(0, dir.size(), "the name claimed for the failed put came back");
                    }
                    put(dir, heap, "a", bytes, 1);
                    put(dir, heap, "b", bytes, 2);
                    assertEquals(0, dir.freeBytes(), "the whole budget is usable after the failures");
                    assertTrue(dir.takeEvicted().isEmpty(), "nothing evicted to make room");
                }
                barrier(group, "put");
                assertNull(lookup(dir, 0, "x"), "a failed put is never seen");
                assertEquals(2, heap.peer(0).get(ValueLayout.JAVA_LONG, lookup(dir, 0, "b").block() + 64));
                barrier(group, "done");
            }
            return null;
        });
    }

    @Test
    void aSlotListingAFreedBlockIsReportedByNameInsteadOfReadForever() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            long heapBytes = 4096;
            try (SymmetricMemory heap = SymmetricMemory.allocate(group, heapBytes);
                 SharedDirectory dir = SharedDirectory.create(group, "test directory", 4, heapBytes)) {
                if (group.rank() == 0) {
                    put(dir, heap, "adapter/a", 256, 1);
                    SharedDirectory.Found f = lookup(dir, 0, "adapter/a");
                    // break the rule on purpose: the slot still lists the block, its generation turned even (freed)
                    ParameterCacheLayout.setGenerations(dir.local(), 4, f.slot(), f.generation() + 1, 0);
                }
                barrier(group, "broken");
                IllegalStateException e = assertThrows(IllegalStateException.class, () -> lookup(dir, 0, "adapter/a"));
                assertTrue(e.getMessage().contains("'adapter/a'") && e.getMessage().contains("rank 0")
                        && e.getMessage().contains("fix:"), e.getMessage());
                barrier(group, "done");
            }
            return null;
        });
    }
}
