package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.group.InJvmWorld;

/** The ring buffer between threads of one JVM: order, wrap-around, back-pressure, sizes, many producers, refusals. */
class SymmetricRingBufferTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    /** The payload of message {@code seq} from {@code rank}: its length varies, its bytes are a function of both. */
    static byte[] payload(int rank, int seq, int maxPayload) {
        SplittableRandom r = new SplittableRandom(rank * 1_000_003L + seq);
        byte[] b = new byte[Math.max(8, r.nextInt(maxPayload + 1))];
        r.nextBytes(b);
        MemorySegment.ofArray(b).set(ValueLayout.JAVA_INT_UNALIGNED, 0, rank);
        MemorySegment.ofArray(b).set(ValueLayout.JAVA_INT_UNALIGNED, 4, seq);
        return b;
    }

    /** The GPU form of the ring is refused on a host communicator, with the host ring as the fix, on every rank. */
    @Test
    void theDeviceRingIsRefusedOnAHostCommunicator() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (org.symmem4j.parallel.Communicator comm = org.symmem4j.parallel.Communicator.create(group)) {
                UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class,
                        () -> DeviceRingBuffer.oneToOne(comm, 1, 0, 1024));
                assertTrue(e.getMessage().contains("not a GPU communicator")
                        && e.getMessage().contains("SymmetricRingBuffer.oneToOne"), e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> DeviceRingBuffer.manyToOne(comm, 0, 1000));
                assertThrows(IllegalArgumentException.class, () -> DeviceRingBuffer.oneToOne(comm, 2, 0, 1024));
            }
            return null;
        });
    }

    @Test
    void oneToOneDeliversInOrderThroughManyWrapArounds() {
        int messages = 5_000;
        List<Integer> received = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                int max = ring.maxPayload();
                if (group.rank() == 1) {
                    SplittableRandom jitter = new SplittableRandom(7);
                    for (int i = 0; i < messages; i++) {
                        ring.put(1 + i % 5, payload(1, i, max));
                        if (jitter.nextInt(500) == 0) {
                            Thread.yield();
                        }
                    }
                    return messages;
                }
                int[] next = {0};
                while (next[0] < messages) {
                    ring.take((type, buf, off, len) -> {
                        byte[] expected = payload(1, next[0], max);
                        assertEquals(1 + next[0] % 5, type, "type of message " + next[0]);
                        assertArrayEquals(expected, buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE),
                                "bytes of message " + next[0]);
                        next[0]++;
                    }, 64);
                }
                assertEquals(0, ring.poll((t, b, o, l) -> { throw new AssertionError("extra message"); }, 1));
                return next[0];
            }
        });
        assertEquals(List.of(messages, messages), received);
    }

    /**
     * A record that ends exactly at the end of the ring, then records from index 0: one poll hands out both sides of
     * the wrap in order when its limit allows, and stops at the end of the ring when the limit is spent there (the
     * next poll starts after the wrap). Both kinds; one thread, so every position is known.
     */
    @Test
    void aPollReadsAcrossTheWrapOnlyWithinItsLimit() {
        for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
            InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
                try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                        ? SymmetricRingBuffer.oneToOne(group, 0, 0, 256) : SymmetricRingBuffer.manyToOne(group, 0, 256)) {
                    int payload = ring.maxPayload(); // 24 bytes: 32-byte records, 8 of them fill the ring
                    assertEquals(24, payload);
                    List<Integer> got = new ArrayList<>();
                    MessageHandler collect = (type, buf, off, len) -> {
                        assertEquals(payload, len, kind + ": payload bytes");
                        assertEquals(type, buf.get(ValueLayout.JAVA_INT_UNALIGNED, off), kind + ": bytes of type " + type);
                        got.add(type);
                    };
                    int seq = 1;
                    long tail = 0; // 32-byte records never need padding in a 256-byte ring
                    for (int round = 0; round < 3; round++) {
                        // records up to 32 bytes before the end of the ring, read back
                        int before = (int) ((224 - tail % 256 + 256) % 256) / 32;
                        for (int i = 0; i < before; i++) {
                            assertTrue(ring.offer(seq, message(seq++, payload)), kind + " round " + round);
                        }
                        tail += 32L * before;
                        assertEquals(before, ring.poll(collect, 100), kind + " round " + round);
                        // one record fills the ring to its end (no padding), three more start at index 0
                        for (int i = 0; i < 4; i++) {
                            assertTrue(ring.offer(seq, message(seq++, payload)), kind + " round " + round + " record " + i);
                        }
                        tail += 4 * 32;
                        if (round == 1) {
                            // the limit is spent at the end of the ring: the records after the wrap stay for the next poll
                            assertEquals(1, ring.poll(collect, 1), kind + ": the record before the end only");
                            assertEquals(3 * 32, ring.size(), kind + ": the three after the wrap are still there");
                            assertEquals(3, ring.poll(collect, 100), kind + ": the records after the wrap");
                        } else {
                            assertEquals(4, ring.poll(collect, 100), kind + ": both sides of the wrap in one poll");
                        }
                        assertEquals(0, ring.size(), kind + " round " + round);
                        assertEquals(0, ring.poll(collect, 100), kind + ": nothing more");
                    }
                    List<Integer> expected = new ArrayList<>();
                    for (int i = 1; i < seq; i++) {
                        expected.add(i);
                    }
                    assertEquals(expected, got, kind + ": every message once, in order");
                }
                return null;
            });
        }
    }

    /**
     * A many-to-one ring filled to its last byte, from the middle of the ring: one poll reads the whole ring across the
     * wrap, every record once (it stops after a capacity of bytes: the records it read are zeroed only when the poll
     * ends, so reading on would hand the first ones out again), and the room is free for a full ring more.
     */
    @Test
    void aPollOfAFullRingReadsEachRecordOnceAcrossTheWrap() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 256)) {
                int payload = ring.maxPayload(); // 32-byte records, 8 fill the ring
                List<Integer> got = new ArrayList<>();
                MessageHandler collect = (type, buf, off, len) -> got.add(buf.get(ValueLayout.JAVA_INT_UNALIGNED, off));
                int seq = 1;
                for (int i = 0; i < 4; i++) {
                    assertTrue(ring.offer(1, message(seq++, payload)));
                }
                assertEquals(4, ring.poll(collect, 100)); // HEAD in the middle of the ring
                for (int lap = 0; lap < 2; lap++) {
                    for (int i = 0; i < 8; i++) {
                        assertTrue(ring.offer(1, message(seq++, payload)), "lap " + lap + " record " + i);
                    }
                    assertFalse(ring.offer(1, message(seq, payload)), "lap " + lap + ": the ring is full");
                    assertEquals(256, ring.size());
                    assertEquals(8, ring.poll(collect, 100), "lap " + lap + ": the whole ring, each record once");
                    assertEquals(0, ring.size());
                    assertEquals(0, ring.poll(collect, 100), "lap " + lap + ": nothing more");
                }
                List<Integer> expected = new ArrayList<>();
                for (int i = 1; i < seq; i++) {
                    expected.add(i);
                }
                assertEquals(expected, got, "every message once, in order");
            }
            return null;
        });
    }

    /** {@code bytes} bytes whose first int is {@code seq}. */
    private static byte[] message(int seq, int bytes) {
        byte[] b = new byte[bytes];
        MemorySegment.ofArray(b).set(ValueLayout.JAVA_INT_UNALIGNED, 0, seq);
        return b;
    }

    @Test
    void manyToOneKeepsEachProducersOrderAndLosesNothing() {
        int producers = 3;
        int messages = 3_000;
        InJvmWorld.runOnEveryRank(producers + 1, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 2048)) {
                int max = ring.maxPayload();
                if (group.rank() != 0) {
                    for (int i = 0; i < messages; i++) {
                        ring.put(group.rank(), payload(group.rank(), i, max));
                    }
                    return null;
                }
                int[] next = new int[producers + 1];
                int total = 0;
                while (total < producers * messages) {
                    total += ring.take((type, buf, off, len) -> {
                        byte[] got = buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE);
                        int rank = MemorySegment.ofArray(got).get(ValueLayout.JAVA_INT_UNALIGNED, 0);
                        assertEquals(type, rank, "type names the producer");
                        assertArrayEquals(payload(rank, next[rank], max), got, "message " + next[rank] + " of rank " + rank);
                        next[rank]++;
                    }, 100);
                }
                for (int r = 1; r <= producers; r++) {
                    assertEquals(messages, next[r], "messages of rank " + r);
                }
                return null;
            }
        });
    }

    @Test
    void aManyToOneProducerWhoseLastClaimIsLapsOldClaimsAtTheTail() {
        // a many-to-one producer starts its CAS from the TAIL it last left: here rank 1's is 5 laps behind TAIL (and
        // HEAD) when it offers again, after rank 2 lapped the ring; its claims must land at TAIL, in order, and a full
        // ring must still refuse it; then rank 2, behind by rank 1's claims, claims at TAIL too
        int lap = 16; // 64-byte records: 16 fill the 1024-byte ring
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                int rank = group.rank();
                byte[] msg = new byte[56];
                List<String> got = new ArrayList<>();
                MessageHandler record = (type, buf, off, len) -> got.add(type + ":" + buf.get(ValueLayout.JAVA_BYTE, off));
                if (rank == 1) {
                    assertTrue(ring.offer(1, msg), "rank 1's first message");
                }
                group.allGatherBytes("first", new byte[0]);
                if (rank == 0) {
                    assertEquals(1, ring.poll(record, 100));
                }
                for (int l = 0; l < 5; l++) {
                    group.allGatherBytes("lap " + l, new byte[0]);
                    if (rank == 2) {
                        for (int i = 0; i < lap; i++) {
                            assertTrue(ring.offer(2, msg), "rank 2, lap " + l + ", message " + i);
                        }
                    }
                    group.allGatherBytes("lapped " + l, new byte[0]);
                    if (rank == 0) {
                        assertEquals(lap, ring.poll(record, 100), "lap " + l);
                    }
                }
                group.allGatherBytes("stale", new byte[0]);
                if (rank == 1) {
                    for (int i = 0; i < lap; i++) {
                        msg[0] = (byte) i;
                        assertTrue(ring.offer(1, msg), "rank 1 from a stale tail, message " + i);
                    }
                    assertFalse(ring.offer(1, msg), "rank 1: the ring is full");
                }
                group.allGatherBytes("refilled", new byte[0]);
                if (rank == 0) {
                    got.clear();
                    assertEquals(lap, ring.poll(record, 100));
                    List<String> expected = new ArrayList<>();
                    for (int i = 0; i < lap; i++) {
                        expected.add("1:" + i);
                    }
                    assertEquals(expected, got, "rank 1's messages in order, whole");
                }
                group.allGatherBytes("drained", new byte[0]);
                if (rank == 2) {
                    msg[0] = 42;
                    assertTrue(ring.offer(2, msg), "rank 2 from a stale tail");
                }
                group.allGatherBytes("last", new byte[0]);
                if (rank == 0) {
                    got.clear();
                    assertEquals(1, ring.poll(record, 100));
                    assertEquals(List.of("2:42"), got);
                    assertEquals(0, ring.size());
                }
                return null;
            }
        });
    }

    @Test
    void fullRingRefusesOfferUntilTheConsumerPolls() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                        ? SymmetricRingBuffer.oneToOne(group, 0, 0, 1024) : SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                    // 64-byte records: 16 fill 1024 bytes; a one-to-one ring keeps the 8-byte header word after its
                    // last record free (its producer zeroes it), so it holds 15
                    int fit = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE ? 15 : 16;
                    byte[] msg = new byte[56];
                    for (int i = 0; i < fit; i++) {
                        msg[0] = (byte) i;
                        assertTrue(ring.offer(1, msg), kind + " offer " + i);
                    }
                    assertFalse(ring.offer(1, msg), kind + ": record " + (fit + 1) + " does not fit");
                    assertEquals(fit * 64, ring.size());
                    List<Byte> firsts = new ArrayList<>();
                    assertEquals(1, ring.poll((t, b, o, l) -> firsts.add(b.get(ValueLayout.JAVA_BYTE, o)), 1));
                    assertEquals(List.of((byte) 0), firsts);
                    assertTrue(ring.offer(1, msg), kind + ": room again after one poll");
                    assertFalse(ring.offer(1, msg), kind + ": full again");
                    if (kind == SymmetricRingBuffer.Kind.MANY_TO_ONE) {
                        assertFalse(ring.offer(1, new byte[0]), kind + ": not even an empty message fits");
                    }
                    assertEquals(fit, ring.poll((t, b, o, l) -> firsts.add(b.get(ValueLayout.JAVA_BYTE, o)), 100));
                    assertEquals((byte) (fit - 1), firsts.get(fit - 1));
                }
            }
            return null;
        });
    }

    @Test
    void oversizedMessageIsRefusedBeforeAnythingIsWritten() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 4096)) {
                assertEquals(4096 / 8 - 8, ring.maxPayload());
                assertTrue(ring.offer(1, new byte[ring.maxPayload()]));
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> ring.offer(1, new byte[ring.maxPayload() + 1]));
                assertTrue(e.getMessage().contains("length=505") && e.getMessage().contains("expected 0..504")
                        && e.getMessage().contains("capacity >= 8192"), e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> ring.put(0, new byte[1]), "type 0");
                assertEquals(512, ring.size(), "only the first message is in the ring");
                assertEquals(1, ring.poll((t, b, o, l) -> assertEquals(504, l), 10));
            }
            assertThrows(IllegalArgumentException.class, () -> SymmetricRingBuffer.manyToOne(group, 0, 1000));
            assertThrows(IllegalArgumentException.class, () -> SymmetricRingBuffer.manyToOne(group, 1, 1024));
            return null;
        });
    }

    @Test
    void offerOutsideItsSourceIsRefusedBeforeAnythingIsClaimed() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                        ? SymmetricRingBuffer.oneToOne(group, 0, 0, 1024) : SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                    MemorySegment src = MemorySegment.ofArray(new byte[16]);
                    assertThrows(IndexOutOfBoundsException.class, () -> ring.offer(1, src, 8, 16), kind + ": past the end");
                    assertThrows(IndexOutOfBoundsException.class, () -> ring.offer(1, src, -1, 4), kind + ": before it");
                    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                            () -> ring.offer(1, src, 0, -1), kind + ": negative length");
                    assertTrue(e.getMessage().contains("length=-1"), e.getMessage());
                    assertEquals(0, ring.size(), kind + ": no claim left behind");
                    // the ring goes on: a claim left open by a refused offer would hold every later message back
                    src.set(ValueLayout.JAVA_BYTE, 8, (byte) 9);
                    assertTrue(ring.offer(2, src, 8, 8));
                    List<Integer> got = new ArrayList<>();
                    assertEquals(1, ring.poll((t, b, o, l) -> got.add(t * 100 + l * 10 + b.get(ValueLayout.JAVA_BYTE, o)), 10));
                    assertEquals(List.of(289), got, kind + ": type 2, 8 bytes, first byte 9");
                    assertEquals(0, ring.size());
                }
            }
            return null;
        });
    }

    /**
     * Every payload length from 0 to the largest, from each kind of source (a byte array, a heap segment at an odd
     * offset, a native segment, a read-only one), arrives byte for byte, over many laps of a small ring: the short copy
     * (8..64 bytes from an array, by 8-byte words that overlap at the end) and the bulk copy alike.
     */
    @Test
    void everyPayloadLengthFromEverySourceArrivesExactly() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                        ? SymmetricRingBuffer.oneToOne(group, 0, 0, 1024) : SymmetricRingBuffer.manyToOne(group, 0, 1024);
                     java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                    SplittableRandom r = new SplittableRandom(7);
                    byte[] big = new byte[ring.maxPayload() + 16];
                    MemorySegment nativeSrc = arena.allocate(big.length);
                    for (int round = 0; round < 3; round++) {
                        for (int length = 0; length <= ring.maxPayload(); length++) {
                            for (int source = 0; source < 4; source++) {
                                r.nextBytes(big);
                                byte[] expected = java.util.Arrays.copyOfRange(big, 3, 3 + length);
                                boolean written = switch (source) {
                                    case 0 -> ring.offer(9, expected.clone());
                                    case 1 -> ring.offer(9, MemorySegment.ofArray(big).asSlice(1), 2, length);
                                    case 2 -> ring.offer(9, nativeSrc.copyFrom(MemorySegment.ofArray(big)), 3, length);
                                    default -> ring.offer(9, MemorySegment.ofArray(big).asReadOnly(), 3, length);
                                };
                                assertTrue(written, kind + " length " + length + " source " + source);
                                byte[][] got = new byte[1][];
                                assertEquals(1, ring.poll((t, b, o, l) -> got[0] = b.asSlice(o, l)
                                        .toArray(ValueLayout.JAVA_BYTE), 4));
                                assertArrayEquals(expected, got[0], kind + " length " + length + " source " + source);
                                assertEquals(0, ring.size());
                            }
                        }
                    }
                }
            }
            return null;
        });
    }

    /**
     * Every access after close is refused with an exception, never made by address into unmapped memory: the hot paths
     * by address (offer, poll, a claim's commit) take the checked accesses once the ring forgot its address in close.
     */
    @Test
    void everyAccessAfterCloseThrows() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                SymmetricRingBuffer ring = ring(group, kind, 1024);
                assertTrue(ring.offer(1, new byte[16]));
                SymmetricRingBuffer.Claim open = new SymmetricRingBuffer.Claim();
                assertTrue(ring.tryClaim(2, 16, open));
                ring.close();
                assertThrows(IllegalStateException.class, () -> ring.offer(1, new byte[16]), kind + " offer");
                assertThrows(IllegalStateException.class, () -> ring.poll((t, b, o, l) -> { }, 10), kind + " poll");
                assertThrows(IllegalStateException.class, () -> ring.tryClaim(1, 16), kind + " tryClaim");
                assertThrows(IllegalStateException.class, open::commit, kind + " commit of a claim opened before");
            }
            return null;
        });
    }

    /** A handler that closes the ring stops its poll with an exception: the poll reads no header by address after it. */
    @Test
    void aHandlerThatClosesTheRingStopsThePoll() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            for (SymmetricRingBuffer.Kind kind : SymmetricRingBuffer.Kind.values()) {
                SymmetricRingBuffer ring = ring(group, kind, 1024);
                assertTrue(ring.offer(1, new byte[16]));
                assertTrue(ring.offer(1, new byte[16]));
                int[] handled = {0};
                assertThrows(IllegalStateException.class, () -> ring.poll((t, b, o, l) -> {
                    handled[0]++;
                    ring.close();
                }, 10), kind.toString());
                assertEquals(1, handled[0], kind + ": the second message is not handed out");
            }
            return null;
        });
    }

    private static SymmetricRingBuffer ring(org.symmem4j.parallel.Group group, SymmetricRingBuffer.Kind kind,
                                            int capacity) {
        return kind == SymmetricRingBuffer.Kind.ONE_TO_ONE ? SymmetricRingBuffer.oneToOne(group, 0, 0, capacity)
                : SymmetricRingBuffer.manyToOne(group, 0, capacity);
    }

    @Test
    void claimCommitAndAbortWriteInPlace() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                SymmetricRingBuffer.Claim a = ring.tryClaim(5, 16);
                SymmetricRingBuffer.Claim b = new SymmetricRingBuffer.Claim();
                assertTrue(ring.tryClaim(6, 8, b), "a second claim open beside the first");
                a.buffer().set(ValueLayout.JAVA_LONG, a.offset(), 42);
                b.segment().set(ValueLayout.JAVA_LONG, 0, 43);
                assertEquals(0, ring.poll((t, buf, o, l) -> { }, 10), "nothing before the commit");
                b.abort();
                assertEquals(0, ring.poll((t, buf, o, l) -> { }, 10), "b aborted, a still open ahead of it");
                a.commit();
                assertThrows(IllegalStateException.class, a::commit, "a claim commits once");
                List<Long> got = new ArrayList<>();
                assertEquals(1, ring.poll((t, buf, o, l) -> got.add(t * 1000L + buf.get(ValueLayout.JAVA_LONG, o)), 10));
                assertEquals(List.of(5042L), got);
            }
            return null;
        });
    }

    @Test
    void wrongRanksAreRefused() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                if (group.rank() == 0) {
                    IllegalStateException e = assertThrows(IllegalStateException.class, () -> ring.offer(1, new byte[4]));
                    assertTrue(e.getMessage().contains("its producer is rank=1"), e.getMessage());
                } else {
                    IllegalStateException e = assertThrows(IllegalStateException.class, () -> ring.poll((t, b, o, l) -> { }, 1));
                    assertTrue(e.getMessage().contains("only the consumer rank=0"), e.getMessage());
                }
            }
            return null;
        });
    }

    @Test
    void putOnAFullRingTimesOutNamingTheConsumer() throws Exception {
        GroupOptions fast = GroupOptions.defaults().withTimeout(Duration.ofMillis(300));
        java.util.concurrent.CountDownLatch gaveUp = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.atomic.AtomicReference<PeerTimeoutException> seen = new java.util.concurrent.atomic.AtomicReference<>();
        InJvmWorld.runOnEveryRank(2, fast, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                if (group.rank() == 1) {
                    try {
                        for (int i = 0; i < 17; i++) {
                            ring.put(1, new byte[56]); // 15 fit; the 16th waits for a consumer that does not poll
                        }
                    } catch (PeerTimeoutException e) {
                        seen.set(e);
                    } finally {
                        gaveUp.countDown();
                    }
                } else {
                    // the consumer stays alive without polling until the producer gave up, then meets it in close
                    assertTrue(gaveUp.await(30, java.util.concurrent.TimeUnit.SECONDS));
                }
            }
            return null;
        });
        PeerTimeoutException timeout = seen.get();
        assertTrue(timeout != null, "the 16th put must time out");
        assertEquals(1, timeout.rank());
        assertEquals(List.of(0), timeout.missingRanks());
        assertEquals(PeerTimeoutException.Reason.DEADLINE_PASSED, timeout.reason());
        assertTrue(timeout.getMessage().contains("ring buffer put") && timeout.getMessage().contains("rank 0")
                && timeout.getMessage().contains("bytes=64"), timeout.getMessage());
    }

    /**
     * A timeout far longer than these tests: a wait that ends does so because its peer began closing the ring
     * (PEER_LEFT), not because the timeout passed (which would fail the assertions on the reason).
     */
    private static final GroupOptions PATIENT = GroupOptions.defaults().withTimeout(Duration.ofMinutes(5));

    @Test
    void takeStopsAtOnceWhenTheOneProducerClosesTheRingAfterItsLastMessage() {
        java.util.concurrent.atomic.AtomicReference<PeerTimeoutException> seen = new java.util.concurrent.atomic.AtomicReference<>();
        List<Integer> got = InJvmWorld.runOnEveryRank(2, PATIENT, group -> {
            int received = 0;
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 0, 1, 1024)) {
                if (group.rank() == 0) {
                    ring.put(7, new byte[24]); // the last message, then the close
                } else {
                    int[] length = new int[1];
                    // the message offered before the close is still handed out, even if the close came first
                    received = ring.take((type, buf, off, len) -> length[0] = len, 16);
                    assertEquals(24, length[0]);
                    try {
                        ring.take((type, buf, off, len) -> { }, 16);
                    } catch (PeerTimeoutException e) {
                        seen.set(e);
                    }
                }
            }
            return received;
        });
        assertEquals(List.of(0, 1), got);
        PeerLeftAssert.assertPeerLeft(seen.get(), "the second take must stop: the producer closed the ring", 1,
                List.of(0), "ring buffer take", "producer rank=0");
    }

    @Test
    void takeOnAManyToOneRingStopsOnlyOnceEveryProducerClosedIt() {
        java.util.concurrent.atomic.AtomicReference<PeerTimeoutException> seen = new java.util.concurrent.atomic.AtomicReference<>();
        List<Integer> got = InJvmWorld.runOnEveryRank(3, PATIENT, group -> {
            int received = 0;
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                if (group.rank() != 0) {
                    ring.put(group.rank(), new byte[8]);
                } else {
                    // the first producer to close does not end the take: the other's message still comes
                    while (received < 2) {
                        received += ring.take((type, buf, off, len) -> { }, 16);
                    }
                    try {
                        ring.take((type, buf, off, len) -> { }, 16);
                    } catch (PeerTimeoutException e) {
                        seen.set(e);
                    }
                }
            }
            return received;
        });
        assertEquals(List.of(2, 0, 0), got);
        PeerLeftAssert.assertPeerLeft(seen.get(), "the third take must stop: both producers closed the ring", 0,
                List.of(1, 2), "any of ranks [1, 2]", "(all of them)");
    }

    @Test
    void putOnAFullRingStopsAtOnceWhenTheConsumerClosesIt() {
        java.util.concurrent.atomic.AtomicReference<PeerTimeoutException> seen = new java.util.concurrent.atomic.AtomicReference<>();
        InJvmWorld.runOnEveryRank(2, PATIENT, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 1024)) {
                if (group.rank() == 1) {
                    try {
                        for (int i = 0; i < 17; i++) {
                            ring.put(1, new byte[56]); // 15 fit; the 16th waits for room the consumer never frees
                        }
                    } catch (PeerTimeoutException e) {
                        seen.set(e);
                    }
                }
                // the consumer closes the ring at once, without polling
            }
            return null;
        });
        PeerLeftAssert.assertPeerLeft(seen.get(), "the 16th put must stop: the consumer closed the ring", 1,
                List.of(0), "ring buffer put", "consumer rank=0", "will not poll again");
    }

    /**
     * The case the closing words are for: a rank whose code throws inside the ring's try-with-resources closes the ring
     * on the way out, and its peer, waiting in take for that rank's message, stops at once with PEER_LEFT instead of
     * both waiting for each other (one in the collective free, one in take) until the group's timeout.
     */
    @Test
    void aProducerWhoseCodeFailsInsideTheRingsTryStopsTheConsumersTake() {
        java.util.concurrent.atomic.AtomicReference<PeerTimeoutException> seen = new java.util.concurrent.atomic.AtomicReference<>();
        var failure = assertThrows(org.symmem4j.parallel.SymmemException.class, () -> InJvmWorld.runOnEveryRank(2,
                PATIENT, group -> {
                    try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 0, 1, 1024)) {
                        if (group.rank() == 0) {
                            throw new IllegalStateException("the producer's own check failed");
                        }
                        try {
                            ring.take((type, buf, off, len) -> { }, 16);
                        } catch (PeerTimeoutException e) {
                            seen.set(e);
                        }
                    }
                    return null;
                }));
        assertTrue(String.valueOf(failure.getMessage()).contains("the producer's own check failed")
                || String.valueOf(failure.getCause()).contains("the producer's own check failed"), failure.toString());
        assertEquals(PeerTimeoutException.Reason.PEER_LEFT, seen.get().reason());
    }

    @Test
    void takeOnAManyToOneRingOfAGroupOfOneKeepsItsTimeout() {
        GroupOptions fast = GroupOptions.defaults().withTimeout(Duration.ofMillis(300));
        InJvmWorld.runOnEveryRank(1, fast, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 1024)) {
                // no other rank exists that could close the ring: an empty take waits for the timeout, as before
                PeerTimeoutException e = assertThrows(PeerTimeoutException.class,
                        () -> ring.take((type, buf, off, len) -> { }, 16));
                assertEquals(PeerTimeoutException.Reason.DEADLINE_PASSED, e.reason(), e.getMessage());
            }
            return null;
        });
    }
}
