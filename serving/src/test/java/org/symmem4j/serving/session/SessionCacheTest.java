package org.symmem4j.serving.session;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/** The session cache between threads of one JVM: round trips, eviction, expiry, bad input, untorn reads. */
class SessionCacheTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new SplittableRandom(seed).nextBytes(b);
        return b;
    }

    @Test
    void everyRankReadsWhatAnyRankPutAcrossBlocks() {
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(64, 256 * 64, 16, 1000))) {
                for (int i = 0; i < 6; i++) {
                    String id = "s-" + group.rank() + "-" + i;
                    cache.put(id, MemorySegment.ofArray(pattern(group.rank() * 100 + i, 1 + 150 * i)));
                }
                group.allGatherBytes("put", new byte[0]);
                for (int r = 0; r < 3; r++) {
                    for (int i = 0; i < 6; i++) {
                        assertArrayEquals(pattern(r * 100 + i, 1 + 150 * i), cache.get("s-" + r + "-" + i),
                                "session s-" + r + "-" + i + " read on rank " + group.rank());
                    }
                }
                assertNull(cache.get("never"));
                group.allGatherBytes("read", new byte[0]);
                // rewrite with a smaller and a larger state, from another rank than the first writer
                int r = (group.rank() + 1) % 3;
                cache.put("s-" + r + "-5", MemorySegment.ofArray(pattern(7, 3)));
                cache.put("s-" + r + "-1", MemorySegment.ofArray(pattern(8, 999)));
                assertTrue(cache.remove("s-" + r + "-2"));
                group.allGatherBytes("rewrite", new byte[0]);
                for (int q = 0; q < 3; q++) {
                    assertArrayEquals(pattern(7, 3), cache.get("s-" + q + "-5"));
                    assertArrayEquals(pattern(8, 999), cache.get("s-" + q + "-1"));
                    assertNull(cache.get("s-" + q + "-2"));
                }
                group.allGatherBytes("done", new byte[0]);
            }
            return null;
        });
    }

    @Test
    void theLeastRecentlyUsedSessionIsEvictedAndReadsAsExpired() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            // 8 blocks of 64 bytes; each state takes 2 blocks: 4 fit
            try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(64, 8 * 64, 32, 256))) {
                for (int i = 0; i < 4; i++) {
                    cache.put("a" + i, MemorySegment.ofArray(pattern(i, 100)));
                }
                assertEquals(0, cache.freeBlocksHere());
                assertArrayEquals(pattern(0, 100), cache.get("a0")); // a0 used: a1 is now the least recent
                cache.put("a4", MemorySegment.ofArray(pattern(4, 100)));
                SessionExpiredException e = assertThrows(SessionExpiredException.class, () -> cache.get("a1"));
                assertEquals(SessionExpiredException.Reason.EVICTED, e.reason());
                assertEquals("a1", e.sessionId());
                assertTrue(e.getMessage().contains("expired"), e.getMessage());
                for (int i : new int[] {0, 2, 3, 4}) {
                    assertArrayEquals(pattern(i, 100), cache.get("a" + i), "a" + i);
                }
                // a larger state evicts two: a2 and a3 are the least recent now (a0 read, a4 written after them)
                cache.get("a0");
                cache.get("a4");
                cache.put("big", MemorySegment.ofArray(pattern(9, 256)));
                assertThrows(SessionExpiredException.class, () -> cache.get("a2"));
                assertThrows(SessionExpiredException.class, () -> cache.get("a3"));
                assertArrayEquals(pattern(9, 256), cache.get("big"));
                // an expired session starts again with a put
                cache.put("a1", MemorySegment.ofArray(pattern(11, 10)));
                assertArrayEquals(pattern(11, 10), cache.get("a1"));
            }
            return null;
        });
    }

    @Test
    void badInputIsRefusedBeforeAnythingIsWritten() {
        assertThrows(IllegalArgumentException.class, () -> SessionCache.Settings.of(100, 1 << 20, 4, 10));
        assertThrows(IllegalArgumentException.class, () -> SessionCache.Settings.of(64, 32, 4, 10));
        assertThrows(IllegalArgumentException.class, () -> SessionCache.Settings.of(64, 640, 0, 10));
        assertThrows(IllegalArgumentException.class, () -> SessionCache.Settings.of(64, 640, 4, 641));
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(64, 640, 4, 200))) {
                cache.put("x", MemorySegment.ofArray(pattern(1, 50)));
                IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                        () -> cache.put("x", MemorySegment.ofArray(new byte[201])));
                assertTrue(big.getMessage().contains("maxStateBytes=200"), big.getMessage());
                assertThrows(IllegalArgumentException.class, () -> cache.put("", MemorySegment.ofArray(new byte[1])));
                assertThrows(IllegalArgumentException.class,
                        () -> cache.put("y".repeat(81), MemorySegment.ofArray(new byte[1])));
                assertArrayEquals(pattern(1, 50), cache.get("x"), "the refused put left the state as it was");
                IllegalArgumentException small = assertThrows(IllegalArgumentException.class,
                        () -> cache.get("x", MemorySegment.ofArray(new byte[10])));
                assertTrue(small.getMessage().contains("bytes=50"), small.getMessage());
            }
            return null;
        });
    }

    @Test
    void slotsRunningOutEvictTheLeastRecentSession() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(64, 64 * 64, 3, 64))) {
                for (int i = 0; i < 3; i++) {
                    cache.put("k" + i, MemorySegment.ofArray(pattern(i, 8)));
                }
                cache.get("k0");
                cache.put("k3", MemorySegment.ofArray(pattern(3, 8)));
                // k1's slot went to k3: k1 is unknown now
                assertNull(cache.get("k1"));
                for (int i : new int[] {0, 2, 3}) {
                    assertArrayEquals(pattern(i, 8), cache.get("k" + i));
                }
                assertEquals(3, cache.liveSessionsHere());
            }
            return null;
        });
    }

    /**
     * Two ranks rewrite shared sessions with states whose every long is the write's number, at random lengths;
     * two ranks read them all the time: every read is whole (one number throughout, the length that number wrote).
     */
    @Test
    void readersNeverSeeATornStateWhileWritersRewriteIt() {
        AtomicLong reads = new AtomicLong();
        java.util.concurrent.atomic.AtomicInteger writersDone = new java.util.concurrent.atomic.AtomicInteger();
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(128, 40 * 128, 8, 1024))) {
                MemorySegment buf = MemorySegment.ofArray(new long[128]);
                if (group.rank() < 2) {
                    SplittableRandom rnd = new SplittableRandom(group.rank());
                    for (int w = 1; w <= 3_000; w++) {
                        long v = w * 2L + group.rank();
                        int longs = 1 + (int) (v % 128);
                        for (int i = 0; i < longs; i++) {
                            buf.setAtIndex(ValueLayout.JAVA_LONG, i, v);
                        }
                        cache.put("shared-" + rnd.nextInt(3), buf.asSlice(0, 8L * longs));
                    }
                    writersDone.incrementAndGet();
                } else {
                    while (writersDone.get() < 2) {
                        for (int k = 0; k < 3; k++) {
                            long n = cache.get("shared-" + k, buf);
                            if (n < 0) {
                                continue;
                            }
                            long v = buf.getAtIndex(ValueLayout.JAVA_LONG, 0);
                            assertEquals(8 * (1 + v % 128), n, "length of write " + v);
                            for (int i = 0; i < n / 8; i++) {
                                assertEquals(v, buf.getAtIndex(ValueLayout.JAVA_LONG, i), "long " + i + " of write " + v);
                            }
                            reads.incrementAndGet();
                        }
                    }
                }
                group.allGatherBytes("closing", new byte[0]);
            }
            return null;
        });
        assertTrue(reads.get() > 0);
    }
}
