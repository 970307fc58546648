package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.layout.ParameterCacheLayout;

/** The parameter cache between threads: zero-copy gets, hot swaps under readers, LRU eviction, refusals. */
class ParameterCacheTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    private static MemorySegment filled(long v, int bytes) {
        MemorySegment s = MemorySegment.ofArray(new long[bytes / 8]);
        for (int i = 0; i < bytes; i += 8) {
            s.set(ValueLayout.JAVA_LONG, i, v);
        }
        return s;
    }

    @Test
    void anyRankGetsTheOwnersEntryWithoutACopy() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 1 << 16, 8)) {
                if (group.rank() == 0) {
                    assertEquals(1, cache.put("w", filled(7, 1024)));
                    assertEquals(2, cache.put("b", filled(8, 64)));
                }
                group.allGatherBytes("put", new byte[0]);
                ParameterCache.Entry w = cache.get("w");
                assertNotNull(w);
                assertEquals(0, w.owner());
                assertEquals(1024, w.data().byteSize());
                assertEquals(7, w.data().get(ValueLayout.JAVA_LONG, 1016));
                assertTrue(w.data().isReadOnly());
                assertTrue(w.isValid());
                assertNull(cache.get("missing"));
                assertNull(cache.get(1, "w"), "rank 1 owns no w");
                MemorySegment dst = MemorySegment.ofArray(new long[8]);
                assertEquals(2, cache.copy("b", dst));
                assertEquals(8, dst.get(ValueLayout.JAVA_LONG, 56));
                group.allGatherBytes("read", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void aReaderPollsTheVersionOfASwapWithoutAllocating() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 1 << 16, 8)) {
                if (group.rank() == 0) {
                    cache.put("model/w", filled(1, 256));
                }
                group.allGatherBytes("first", new byte[0]);
                long first = cache.version(0, "model/w");
                assertEquals(cache.get(0, "model/w").version(), first);
                assertEquals(-1, cache.version(1, "model/w"), "rank 1 owns no model/w");
                assertEquals(-1, cache.version(0, "model/missing"));
                if (group.rank() == 1) {
                    // a spinning reader's poll: nothing allocated once warm (no garbage, so no collection delays it)
                    com.sun.management.ThreadMXBean threads =
                            (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
                    long sum = 0;
                    for (int i = 0; i < 20_000; i++) {
                        sum += cache.version(0, "model/w");
                    }
                    long before = threads.getCurrentThreadAllocatedBytes();
                    for (int i = 0; i < 10_000; i++) {
                        sum += cache.version(0, "model/w");
                    }
                    long allocated = threads.getCurrentThreadAllocatedBytes() - before;
                    assertEquals(30_000 * first, sum);
                    // a per-call allocation is at least 16 bytes a poll; what the JVM may allocate once (a few
                    // hundred bytes when the loop is compiled) stays far below one byte a poll
                    assertTrue(allocated < 10_000, allocated + " bytes allocated by 10,000 version polls, expected"
                            + " less than one a poll");
                }
                group.allGatherBytes("polled", new byte[0]);
                if (group.rank() == 0) {
                    cache.put("model/w", filled(2, 256));
                }
                group.allGatherBytes("swapped", new byte[0]);
                assertEquals(first + 1, cache.version(0, "model/w"));
                ParameterCache.Entry e = cache.get(0, "model/w");
                assertEquals(first + 1, e.version());
                assertEquals(2, e.data().get(ValueLayout.JAVA_LONG, 248));
                group.allGatherBytes("read", new byte[0]);
                if (group.rank() == 0) {
                    assertTrue(cache.remove("model/w"));
                }
                group.allGatherBytes("removed", new byte[0]);
                assertEquals(-1, cache.version(0, "model/w"));
                assertThrows(IndexOutOfBoundsException.class, () -> cache.version(2, "model/w"));
                group.allGatherBytes("done", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void readersNeverSeeATornEntryWhileTheOwnerSwapsIt() {
        int versions = 3_000;
        int bytes = 4096;
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 4L * (bytes + 64), 4)) {
                if (group.rank() == 0) {
                    cache.put("model", filled(0, bytes));
                }
                group.allGatherBytes("seeded", new byte[0]);
                if (group.rank() == 0) {
                    for (long v = 1; v <= versions; v++) {
                        cache.put("model", filled(v, bytes));
                    }
                } else {
                    MemorySegment dst = MemorySegment.ofArray(new long[bytes / 8]);
                    long lastSeen = -1;
                    int validReads = 0;
                    while (lastSeen < versions) {
                        ParameterCache.Entry e = cache.get("model");
                        long first = e.data().get(ValueLayout.JAVA_LONG, 0);
                        boolean same = true;
                        for (int i = 8; i < bytes; i += 8) {
                            same &= e.data().get(ValueLayout.JAVA_LONG, i) == first;
                        }
                        if (e.isValid()) {
                            assertTrue(same, "a view that is still valid was torn: version " + e.version());
                            assertEquals(e.version() - 1, first, "the data belongs to the version");
                            validReads++;
                        }
                        cache.copy("model", dst);
                        long c = dst.get(ValueLayout.JAVA_LONG, 0);
                        assertEquals(c, dst.get(ValueLayout.JAVA_LONG, bytes - 8), "copy is whole");
                        assertTrue(c >= lastSeen, "versions go forward");
                        lastSeen = c;
                    }
                    assertTrue(validReads > 0);
                }
                group.allGatherBytes("done", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void leastRecentlyUsedEntryIsEvictedToFitTheBudget() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 3 * (1024 + 64), 8)) {
                cache.put("a", filled(1, 1024));
                cache.put("b", filled(2, 1024));
                cache.put("c", filled(3, 1024));
                assertNotNull(cache.get("a")); // a is now used more recently than b
                cache.put("d", filled(4, 1024));
                assertNull(cache.get("b"), "b was the least recently used");
                assertEquals(1, cache.get("a").data().get(ValueLayout.JAVA_LONG, 0));
                assertEquals(3, cache.get("c").data().get(ValueLayout.JAVA_LONG, 0));
                assertEquals(4, cache.get("d").data().get(ValueLayout.JAVA_LONG, 0));
                ParameterCache.Entry c = cache.get("c");
                assertTrue(cache.remove("c"));
                assertTrue(!c.isValid(), "a removed entry's view says so");
                assertEquals(2, cache.ownEntries());
                IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                        () -> cache.put("huge", filled(0, 4096)));
                assertTrue(big.getMessage().contains("does not fit budgetBytes=3264"), big.getMessage());
                assertThrows(IllegalArgumentException.class, () -> cache.put("x".repeat(69), filled(0, 8)));
                assertThrows(IllegalArgumentException.class, () -> cache.put("", filled(0, 8)));
            }
            return null;
        });
    }

    /**
     * The eviction policy the GPU cache shares ({@link CacheDirectory}), on two ranks: a peer's get counts as a use,
     * a new name past maxEntries evicts the least recently used entry, 60 puts of mixed sizes keep the current
     * versions within the budget and every entry left whole, and a view held across its entry's eviction says invalid.
     */
    @Test
    void evictionOrderBudgetAndAHeldViewOfAnEvictedEntryAcrossRanks() {
        long budget = 16 * 1024;
        int names = 12;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, budget, 6)) {
                if (group.rank() == 0) {
                    for (int i = 0; i < 6; i++) {
                        cache.put("n" + i, filled(i, 64));
                    }
                }
                group.allGatherBytes("six", new byte[0]);
                ParameterCache.Entry held = group.rank() == 1 ? cache.get("n0") : null; // a peer's use of n0
                group.allGatherBytes("n0 used", new byte[0]);
                if (group.rank() == 0) {
                    cache.put("n6", filled(6, 64)); // names used up: evicts n1, not n0
                }
                group.allGatherBytes("n6", new byte[0]);
                assertNull(cache.get("n1"), "n1, the least recently used, made room for n6");
                assertNotNull(cache.get("n0"));
                group.allGatherBytes("n0 checked", new byte[0]); // no remove before every rank looked
                if (group.rank() == 0) {
                    assertTrue(cache.remove("n0"));
                }
                group.allGatherBytes("n0 removed", new byte[0]);
                if (held != null) {
                    assertTrue(!held.isValid(), "a held view of a removed entry says so");
                }
                group.allGatherBytes("held checked", new byte[0]);
                int[] lastVersion = new int[names];
                int[] lastLength = new int[names];
                for (int round = 0; round < 60; round++) {
                    int n = (round * 7) % names;
                    int length = 8 * (10 + (round * 997) % 380); // 80 .. 3112 B
                    if (group.rank() == 0) {
                        cache.put("e" + n, filled(round + 1, length));
                    }
                    lastVersion[n] = round + 1;
                    lastLength[n] = length;
                    group.allGatherBytes("put " + round, new byte[0]);
                    long used = 0;
                    for (int i = 0; i < names; i++) {
                        ParameterCache.Entry e = cache.get(0, "e" + i);
                        if (e != null) {
                            used += ParameterCache.blockBytes(e.data().byteSize());
                            assertEquals(lastLength[i], e.data().byteSize());
                            for (int b = 0; b < lastLength[i]; b += 8) {
                                assertEquals(lastVersion[i], e.data().get(ValueLayout.JAVA_LONG, b),
                                        "round " + round + ": e" + i + " word " + b / 8);
                            }
                        }
                    }
                    assertTrue(used <= budget, "round " + round + ": bytes=" + used + " of budget=" + budget);
                    assertNotNull(cache.get(0, "e" + n), "round " + round + ": the entry just put is there");
                    group.allGatherBytes("checked " + round, new byte[0]);
                }
            }
            return null;
        });
    }

    /**
     * A held view whose block was freed and then overwritten by a later entry's data says invalid even when that data
     * holds small integers (the generation a fresh block got was once a small counter: 3 for the first publish at an
     * offset, which data of 3s at the block's header word then repeated).
     */
    @Test
    void aHeldViewStaysInvalidWhenALaterEntrysDataCoversItsBlockHeader() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 4096, 8)) {
                cache.put("p", filled(1, 64));   // block at 0
                cache.put("a", filled(2, 64));   // block at 128: the view's generation word
                ParameterCache.Entry held = cache.get("a");
                assertTrue(held.isValid());
                assertTrue(cache.remove("p"));
                assertTrue(cache.remove("a"));
                assertTrue(!held.isValid());
                for (long v = 0; v < 64; v++) {
                    cache.put("big", filled(v, 1024)); // from 0: its data covers offset 128 with v
                    assertTrue(!held.isValid(), "a's view reads valid again under data of " + v + "s");
                    assertTrue(cache.remove("big"));
                }
            }
            return null;
        });
    }

    @Test
    void theGpuFormIsRefusedOnAHostCommunicatorNamingTheHostCache() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Communicator comm = Communicator.create(group)) {
                UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class,
                        () -> DeviceParameterCache.create(comm, 1 << 20, 8));
                assertTrue(e.getMessage().contains("ParameterCache.create") && e.getMessage().contains("fix:"),
                        e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> DeviceParameterCache.create(comm, 64, 8));
            }
            return null;
        });
    }

    /** A put whose copy throws (its source closed) gives its block and its new name back: the budget stays usable. */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void aPutWhoseCopyThrowsGivesItsBlockBack() {
        int bytes = 1024;
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 2L * (bytes + 64), 2)) {
                MemorySegment closed;
                try (Arena a = Arena.ofConfined()) {
                    closed = a.allocate(bytes);
                }
                for (int i = 0; i < 5; i++) {
                    IllegalStateException e = assertThrows(IllegalStateException.class, () -> cache.put("x", closed),
                            "attempt " + i);
                    assertTrue(!e.getMessage().contains("no contiguous range"),
                            "the copy's own failure, not a heap full of leaked blocks (attempt " + i + "): "
                                    + e.getMessage());
                    assertEquals(0, cache.ownEntries(), "the name claimed for the failed put came back");
                }
                assertEquals(1, cache.put("a", filled(1, bytes)), "a failed put takes no version");
                assertEquals(2, cache.put("b", filled(2, bytes)));
                assertEquals(2, cache.ownEntries(), "both fit: the failed puts' blocks came back");
                assertNull(cache.get("x"));
                assertEquals(1, cache.get("a").data().get(ValueLayout.JAVA_LONG, 0));
            }
            return null;
        });
    }

    /**
     * A slot that lists a block whose generation is freed (a directory broken on purpose: the owner's rule is to drop
     * a block from its slot before freeing it) is reported naming the entry, where the reader used to read it again
     * forever.
     */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void aSlotListingAFreedBlockIsReportedByNameInsteadOfReadForever() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (ParameterCache cache = ParameterCache.create(group, 4096, 4)) {
                if (group.rank() == 0) {
                    cache.put("adapter/a", filled(1, 256)); // the first block: heap offset 0
                    MemorySegment part = cache.localPart();
                    long heap = ParameterCacheLayout.heapOffset(4);
                    ParameterCacheLayout.setGeneration(part, heap, 0,
                            ParameterCacheLayout.generationAcquire(part, heap, 0) + 1); // freed, still listed
                }
                group.allGatherBytes("broken", new byte[0]);
                IllegalStateException e = assertThrows(IllegalStateException.class, () -> cache.get("adapter/a"));
                assertTrue(e.getMessage().contains("'adapter/a'") && e.getMessage().contains("rank 0")
                        && e.getMessage().contains("fix:"), e.getMessage());
                group.allGatherBytes("done", new byte[0]);
            }
            return null;
        });
    }
}
