package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * Zero-copy writes: {@link SymmetricRingBuffer#tryClaim(int, int)}, {@link SymmetricRingBuffer.Claim#commit()} and
 * {@link SymmetricRingBuffer.Claim#abort()} between threads: wrap-around, the padding record at the ring's end,
 * several producers claiming at once, several claims open in one producer, aborted claims that nobody reads, misuse.
 */
class SymmetricRingBufferClaimTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    /** Whether message {@code seq} of {@code rank} is aborted instead of committed (about one in five). */
    private static boolean aborted(int rank, int seq) {
        return new SplittableRandom(rank * 7_919L + seq).nextInt(5) == 0;
    }

    @Test
    void oneToOneClaimsWrapManyTimesAndAbortedOnesAreNeverRead() {
        int messages = 4_000;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                int max = ring.maxPayload();
                if (group.rank() == 1) {
                    for (int i = 0; i < messages; i++) {
                        byte[] payload = SymmetricRingBufferTest.payload(1, i, max);
                        SymmetricRingBuffer.Claim claim = ring.claim(1 + i % 7, payload.length); // waits while full
                        MemorySegment.copy(MemorySegment.ofArray(payload), 0, claim.buffer(), claim.offset(), payload.length);
                        if (aborted(1, i)) {
                            claim.abort();
                        } else {
                            claim.commit();
                        }
                    }
                    ring.put(99, new byte[0]); // the end
                    return null;
                }
                int[] next = {0};
                boolean[] done = {false};
                long bytes = 0;
                while (!done[0]) {
                    ring.take((type, buf, off, len) -> {
                        if (type == 99) {
                            done[0] = true;
                            return;
                        }
                        while (aborted(1, next[0])) {
                            next[0]++; // an aborted message is never handed out
                        }
                        assertEquals(1 + next[0] % 7, type, "type of message " + next[0]);
                        assertArrayEquals(SymmetricRingBufferTest.payload(1, next[0], max),
                                buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE), "bytes of message " + next[0]);
                        next[0]++;
                    }, 64);
                }
                while (next[0] < messages && aborted(1, next[0])) {
                    next[0]++;
                }
                assertEquals(messages, next[0], "every committed message, in order");
                assertEquals(0, ring.size());
            }
            return null;
        });
    }

    @Test
    void aClaimThatDoesNotFitBeforeTheEndFollowsAPaddingRecord() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                        ? SymmetricRingBuffer.oneToOne(group, 0, 0, 1024) : SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                    // 7 records of 128 bytes: the tail at 896, 128 bytes before the end
                    for (int i = 0; i < 7; i++) {
                        assertTrue(ring.offer(1, new byte[120]), kind + ": record " + i);
                    }
                    assertEquals(7, ring.poll((t, b, o, l) -> { }, 10), kind.name());
                    // 120 + 8 = 128 bytes fit the end exactly: no padding, the payload at 896 + 8
                    SymmetricRingBuffer.Claim exact = ring.tryClaim(2, 120);
                    assertEquals(904, exact.offset(), kind + ": an exact fit stays at the end");
                    exact.segment().fill((byte) 5);
                    exact.commit();
                    // the tail is at index 0 again, so the next claim follows the exact fit with no padding
                    SymmetricRingBuffer.Claim next = ring.tryClaim(3, 16);
                    assertEquals(RingBufferLayout.RECORD_HEADER_BYTES, next.offset(), kind + ": after the exact fit, index 0");
                    assertEquals(128 + 24, ring.size(), kind.name());
                    next.segment().fill((byte) 6);
                    next.commit();
                    List<String> got = new ArrayList<>();
                    assertEquals(2, ring.poll((t, b, o, l) -> got.add(t + ":" + l + ":" + b.get(ValueLayout.JAVA_BYTE, o)), 10));
                    assertEquals(List.of("2:120:5", "3:16:6"), got, kind.name());
                    // the tail at 24: 7 records of 128 and one of 72 take it to 992, 32 bytes before the end
                    for (int i = 0; i < 7; i++) {
                        assertTrue(ring.offer(1, new byte[120]), kind + ": record " + i);
                    }
                    assertTrue(ring.offer(1, new byte[64]), kind.name());
                    assertEquals(8, ring.poll((t, b, o, l) -> { }, 10), kind.name());
                    assertEquals(0, ring.size(), kind.name());
                    // 40 + 8 bytes do not fit the last 32: a padding record fills them, the claim starts at 0
                    SymmetricRingBuffer.Claim wrapped = ring.tryClaim(4, 40);
                    assertNotNull(wrapped, kind + ": room at the start");
                    assertEquals(RingBufferLayout.RECORD_HEADER_BYTES, wrapped.offset(),
                            kind + ": the claim starts at index 0, behind a padding record");
                    assertEquals(32 + 48, ring.size(), kind + ": the padding to the end counts as claimed");
                    assertEquals(0, ring.poll((t, b, o, l) -> { }, 10), kind + ": the padding alone is no message");
                    wrapped.segment().fill((byte) 7);
                    wrapped.commit();
                    got.clear();
                    int n = ring.poll((t, b, o, l) -> got.add(t + ":" + l + ":" + b.get(ValueLayout.JAVA_BYTE, o)
                            + ":" + b.get(ValueLayout.JAVA_BYTE, o + l - 1)), 10);
                    assertEquals(1, n, kind + ": the padding is not handed out");
                    assertEquals(List.of("4:40:7:7"), got, kind.name());
                    assertEquals(0, ring.size(), kind.name());
                }
            }
            return null;
        });
    }

    @Test
    void abortLeavesNoReadableMessage() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                        ? SymmetricRingBuffer.oneToOne(group, 0, 0, 1024) : SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                    SymmetricRingBuffer.Claim claim = ring.tryClaim(9, 64);
                    claim.segment().fill((byte) 0x5A);
                    claim.abort();
                    assertFalse(claim.isOpen(), kind.name());
                    int[] calls = {0};
                    assertEquals(0, ring.poll((t, b, o, l) -> calls[0]++, 10), kind + ": no message");
                    assertEquals(0, calls[0], kind + ": the handler is not called for an aborted claim");
                    assertEquals(0, ring.size(), kind + ": the aborted room is freed");
                    // the ring goes on, and the next message is the one committed, not the aborted bytes
                    SymmetricRingBuffer.Claim again = ring.tryClaim(4, 8);
                    again.segment().set(ValueLayout.JAVA_LONG, 0, 0x1122334455667788L);
                    again.commit();
                    List<Long> got = new ArrayList<>();
                    assertEquals(1, ring.poll((t, b, o, l) -> got.add(b.get(ValueLayout.JAVA_LONG, o) + t + l), 10));
                    assertEquals(List.of(0x1122334455667788L + 4 + 8), got, kind.name());
                }
            }
            return null;
        });
    }

    @Test
    void manyToOneClaimsFromSeveralProducersWithTwoOpenEach() {
        int ranks = 4;
        int perProducer = 1_500;
        InJvmWorld.runOnEveryRank(ranks, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 4096)) {
                int max = ring.maxPayload();
                int me = group.rank();
                if (me != 0) {
                    SymmetricRingBuffer.Claim second = new SymmetricRingBuffer.Claim();
                    for (int i = 0; i < perProducer; i += 2) {
                        // two claims open at once, finished in reverse order: the consumer still reads them in the
                        // order their room was claimed
                        byte[] first = SymmetricRingBufferTest.payload(me, i, max);
                        byte[] then = SymmetricRingBufferTest.payload(me, i + 1, max);
                        SymmetricRingBuffer.Claim a = ring.claim(me, first.length);
                        MemorySegment.copy(MemorySegment.ofArray(first), 0, a.segment(), 0, first.length);
                        if (ring.tryClaim(me, then.length, second)) {
                            MemorySegment.copy(MemorySegment.ofArray(then), 0, second.segment(), 0, then.length);
                            finish(second, me, i + 1);
                            finish(a, me, i);
                        } else {
                            // never wait for room while holding a claim: the consumer cannot pass an open claim,
                            // so producers that all did would wait for each other
                            finish(a, me, i);
                            SymmetricRingBuffer.Claim b = ring.claim(me, then.length);
                            MemorySegment.copy(MemorySegment.ofArray(then), 0, b.segment(), 0, then.length);
                            finish(b, me, i + 1);
                        }
                    }
                    ring.put(100 + me, new byte[0]);
                    return null;
                }
                int[] next = new int[ranks];
                int[] ended = {0};
                while (ended[0] < ranks - 1) {
                    ring.take((type, buf, off, len) -> {
                        if (type > 100) {
                            ended[0]++;
                            return;
                        }
                        byte[] got = buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE);
                        int from = MemorySegment.ofArray(got).get(ValueLayout.JAVA_INT_UNALIGNED, 0);
                        assertEquals(type, from, "a message's type is its producer");
                        while (aborted(from, next[from])) {
                            next[from]++;
                        }
                        assertArrayEquals(SymmetricRingBufferTest.payload(from, next[from], max), got,
                                "bytes of message " + next[from] + " of rank " + from);
                        next[from]++;
                    }, 64);
                }
                for (int r = 1; r < ranks; r++) {
                    while (next[r] < perProducer && aborted(r, next[r])) {
                        next[r]++;
                    }
                    assertEquals(perProducer, next[r], "every committed message of rank " + r);
                }
                assertEquals(0, ring.abandonedRecords(), "no live producer's claim is skipped");
            }
            return null;
        });
    }

    private static void finish(SymmetricRingBuffer.Claim claim, int rank, int seq) {
        if (aborted(rank, seq)) {
            claim.abort();
        } else {
            claim.commit();
        }
    }

    @Test
    void misuseIsRefusedBeforeAnythingIsWritten() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                if (group.rank() == 0) {
                    IllegalStateException e = assertThrows(IllegalStateException.class, () -> ring.tryClaim(1, 8));
                    assertTrue(e.getMessage().contains("its producer is rank=1"), e.getMessage());
                } else {
                    IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                            () -> ring.tryClaim(1, ring.maxPayload() + 1));
                    assertTrue(big.getMessage().contains("length=" + (ring.maxPayload() + 1)), big.getMessage());
                    IllegalArgumentException type = assertThrows(IllegalArgumentException.class, () -> ring.tryClaim(0, 8));
                    assertTrue(type.getMessage().contains("msgTypeId=0"), type.getMessage());
                    assertEquals(0, ring.size(), "refusals claim nothing");
                    SymmetricRingBuffer.Claim claim = ring.tryClaim(1, 8);
                    IllegalStateException open = assertThrows(IllegalStateException.class, () -> ring.tryClaim(1, 8),
                            "the ring's own claim is still open");
                    assertTrue(open.getMessage().contains("still open"), open.getMessage());
                    assertThrows(IndexOutOfBoundsException.class, () -> claim.segment().set(ValueLayout.JAVA_LONG, 8, 1L),
                            "the segment ends with the claim");
                    claim.segment().set(ValueLayout.JAVA_LONG, 0, 77L);
                    claim.commit();
                    assertThrows(IllegalStateException.class, claim::segment, "no room after the commit");
                    assertThrows(NullPointerException.class, () -> ring.tryClaim(1, 8, null));
                }
                group.allGatherBytes("claims-written", new byte[0]);
                if (group.rank() == 0) {
                    List<Long> got = new ArrayList<>();
                    assertEquals(1, ring.poll((t, b, o, l) -> got.add(b.get(ValueLayout.JAVA_LONG, o) * 100 + l), 10));
                    assertEquals(List.of(7708L), got, "only the committed claim");
                }
            }
            return null;
        });
    }

    @Test
    void claimOnAFullRingTimesOutNamingTheConsumer() throws Exception {
        GroupOptions fast = GroupOptions.defaults().withTimeout(Duration.ofMillis(300));
        CountDownLatch gaveUp = new CountDownLatch(1);
        AtomicReference<PeerTimeoutException> seen = new AtomicReference<>();
        InJvmWorld.runOnEveryRank(2, fast, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                if (group.rank() == 1) {
                    try {
                        for (int i = 0; i < 17; i++) {
                            ring.claim(1, 56).commit(); // 15 fit; the 16th waits for a consumer that does not poll
                        }
                    } catch (PeerTimeoutException e) {
                        seen.set(e);
                        assertNull(ring.tryClaim(1, 56), "still full");
                    } finally {
                        gaveUp.countDown();
                    }
                } else {
                    assertTrue(gaveUp.await(30, TimeUnit.SECONDS));
                }
            }
            return null;
        });
        PeerTimeoutException timeout = seen.get();
        assertNotNull(timeout, "the 16th claim must time out");
        assertEquals(List.of(0), timeout.missingRanks());
        assertTrue(timeout.getMessage().contains("ring buffer claim") && timeout.getMessage().contains("bytes=64"),
                timeout.getMessage());
    }
}
