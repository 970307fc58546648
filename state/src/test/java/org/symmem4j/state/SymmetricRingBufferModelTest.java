package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * The ring in one thread against a model of its positions: every offer, claim, commit, abort and poll of a random
 * sequence over many laps of a small ring, with the model predicting which offers fit (padding at the wrap, and
 * the header word a one-to-one producer keeps free after its last record), which messages each poll hands out, in
 * which order and with which bytes, and {@code size()} after each step. Stale bytes of earlier laps stay in a
 * one-to-one ring (its consumer zeroes nothing), so a header read from them would show up here as a wrong message.
 */
class SymmetricRingBufferModelTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    /** A record in the model: its aligned bytes and, unless padding or aborted, its type and payload. */
    private record Rec(int bytes, int type, byte[] payload) {
    }

    @Test
    void oneToOneMatchesTheModel() {
        for (int capacity : new int[] {256, 1024}) {
            for (long seed = 1; seed <= 4; seed++) {
                run(SymmetricRingBuffer.Kind.ONE_TO_ONE, capacity, seed);
            }
        }
    }

    @Test
    void manyToOneMatchesTheModel() {
        for (int capacity : new int[] {256, 1024}) {
            for (long seed = 1; seed <= 4; seed++) {
                run(SymmetricRingBuffer.Kind.MANY_TO_ONE, capacity, seed);
            }
        }
    }

    @Test
    void oneToOneClaimIsCheckedAtCommitAndAbort() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 0, 0, 1024)) {
                SymmetricRingBuffer.Claim a = ring.tryClaim(3, 24);
                a.buffer().set(ValueLayout.JAVA_LONG, a.offset(), 7);
                assertEquals(0, ring.poll((t, b, o, l) -> { }, 10), "nothing before the commit");
                a.commit();
                assertThrows(IllegalStateException.class, a::commit, "a claim commits once");
                assertThrows(IllegalStateException.class, a::abort, "a committed claim is not aborted");
                assertThrows(IllegalStateException.class, a::offset, "a committed claim hands out no room");
                SymmetricRingBuffer.Claim b = ring.tryClaim(1, 8);
                b.abort();
                assertThrows(IllegalStateException.class, b::abort, "a claim aborts once");
                List<Long> got = new ArrayList<>();
                assertEquals(1, ring.poll((t, buf, o, l) -> got.add(t * 1000L + l * 100L + buf.get(ValueLayout.JAVA_LONG, o)), 10));
                assertEquals(List.of(3000L + 2400L + 7L), got);
                assertEquals(0, ring.size(), "the aborted claim was skipped and freed");
            }
            return null;
        });
    }

    private static void run(SymmetricRingBuffer.Kind kind, int capacity, long seed) {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            try (SymmetricRingBuffer ring = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE
                    ? SymmetricRingBuffer.oneToOne(group, 0, 0, capacity) : SymmetricRingBuffer.manyToOne(group, 0, capacity)) {
                String where = kind + " capacity=" + capacity + " seed=" + seed;
                SplittableRandom random = new SplittableRandom(seed);
                int keptFree = kind == SymmetricRingBuffer.Kind.ONE_TO_ONE ? RingBufferLayout.RECORD_HEADER_BYTES : 0;
                ArrayDeque<Rec> model = new ArrayDeque<>();
                long head = 0;
                long tail = 0;
                int sent = 0;
                for (int step = 0; step < 4_000; step++) {
                    String at = where + " step=" + step;
                    if (random.nextInt(5) < 3) { // write: offer, or claim then commit or abort
                        int length = random.nextInt(ring.maxPayload() + 1);
                        int bytes = RingBufferLayout.align(length + RingBufferLayout.RECORD_HEADER_BYTES);
                        int tailIndex = (int) (tail % capacity);
                        int padding = bytes > capacity - tailIndex ? capacity - tailIndex : 0;
                        boolean fits = padding + bytes + keptFree <= capacity - (tail - head);
                        byte[] payload = new byte[length];
                        random.nextBytes(payload);
                        int type = 1 + random.nextInt(1000);
                        int how = random.nextInt(3);
                        boolean written;
                        if (how == 0) {
                            written = ring.offer(type, payload);
                        } else {
                            SymmetricRingBuffer.Claim claim = ring.tryClaim(type, length);
                            written = claim != null;
                            if (written) {
                                MemorySegment.copy(MemorySegment.ofArray(payload), 0, claim.segment(), 0, length);
                                if (how == 1) {
                                    claim.commit();
                                } else {
                                    claim.abort();
                                }
                            }
                        }
                        assertEquals(fits, written, at + ": does a record of bytes=" + bytes + " fit (tail=" + tail
                                + " head=" + head + ")");
                        if (written) {
                            if (padding != 0) {
                                model.add(new Rec(padding, -1, null));
                            }
                            model.add(how == 2 ? new Rec(bytes, -1, null) : new Rec(bytes, type, payload));
                            tail += padding + bytes;
                            sent++;
                        }
                    } else {
                        int limit = 1 + random.nextInt(4);
                        List<Rec> expected = new ArrayList<>();
                        int messages = 0;
                        while (!model.isEmpty() && messages < limit) {
                            Rec r = model.poll();
                            head += r.bytes();
                            if (r.type() > 0) {
                                expected.add(r);
                                messages++;
                            }
                        }
                        List<Rec> got = new ArrayList<>();
                        int n = ring.poll((t, buf, off, len) -> got.add(new Rec(0, t,
                                buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE))), limit);
                        assertEquals(expected.size(), n, at + ": messages polled");
                        for (int i = 0; i < n; i++) {
                            assertEquals(expected.get(i).type(), got.get(i).type(), at + ": type of message " + i);
                            assertArrayEquals(expected.get(i).payload(), got.get(i).payload(), at + ": bytes of message " + i);
                        }
                    }
                    assertEquals(tail - head, ring.size(), at + ": size");
                }
                assertTrue(tail > 20L * capacity, where + ": the sequence must wrap many times, tail=" + tail
                        + " after " + sent + " writes");
            }
            return null;
        });
    }
}
