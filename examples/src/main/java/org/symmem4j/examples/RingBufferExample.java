package org.symmem4j.examples;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.zip.CRC32C;

import org.symmem4j.parallel.Group;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Log aggregation on a {@link SymmetricRingBuffer}, no DL4J: every rank but 0 is a service that writes log events
 * (short request lines, and now and then a stack trace up to the ring's {@link SymmetricRingBuffer#maxPayload()})
 * into one many-to-one ring in rank 0's memory, each event with its sequence number and a CRC-32C. The ring is small,
 * so the producers find it full and wait in {@link SymmetricRingBuffer#put} (back-pressure, counted); each ends its
 * stream with a summary encoded in place in the ring ({@link SymmetricRingBuffer#claim} and
 * {@link SymmetricRingBuffer.Claim#commit()}, the zero-copy path). Rank 0 polls with a handler that reads every event
 * where it lies in the ring, checks that each producer's sequence is complete and in order, every CRC matches and
 * each stream's digest equals the one it computes itself from the same generator, then answers every producer with
 * a receipt on a one-to-one ring of its own, which the producer checks against what it sent.
 *
 * <pre>
 *   java ... org.symmem4j.examples.RingBufferExample [--ranks N] [--events E] [--capacity BYTES]
 *   bin/symmem4j-run -n 3 --java -cp CLASSPATH org.symmem4j.examples.RingBufferExample
 * </pre>
 */
public final class RingBufferExample {

    private RingBufferExample() {
    }

    @Command(name = "RingBufferExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Log aggregation through a many-to-one ring buffer: producers"
            + " send sequenced, checksummed events into rank 0's ring; rank 0 checks every stream and sends receipts.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads, at least 2 (rank 0 aggregates);"
                + " ignored when started by a launcher")
        int ranks = 3;
        @Option(names = "--events", paramLabel = "E", description = "log events per producer")
        int events = 50_000;
        @Option(names = "--capacity", paramLabel = "BYTES", description = "the many-to-one ring's data bytes, a power"
                + " of two >= 1024 (its largest message is an eighth of it, less 8)")
        int capacity = 64 * 1024;
    }

    /** Message type of a log event. */
    static final int EVENT = 1;
    /** Message type of a producer's last message: its summary. */
    static final int END_OF_STREAM = 2;
    /** Message type of rank 0's receipt on a producer's one-to-one ring. */
    static final int RECEIPT = 3;

    /** An event: sequence number (8), producer rank (4), text length (4), the text, then the CRC-32C of all before. */
    static final int EVENT_HEADER_BYTES = 16;
    /** An event's bytes besides its text. */
    static final int EVENT_OVERHEAD = EVENT_HEADER_BYTES + Integer.BYTES;
    /** A summary: producer (4), events (8), payload bytes (8), times the ring was full (8), stream digest (4). */
    static final int SUMMARY_BYTES = 32;
    /** A receipt: events (8), payload bytes (8), stream digest (4). */
    static final int RECEIPT_BYTES = 20;
    /** The one-to-one reply rings: a receipt is 20 bytes, far below this ring's largest message (120). */
    static final int REPLY_CAPACITY = 1024;

    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED;
    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT_UNALIGNED;
    private static final String[] PATHS = {"/api/items", "/api/orders", "/api/users", "/api/cart", "/health"};
    private static final byte[] STACK_TRACE = filler("\n\tat org.example.shop.Handler.step", "(Handler.java:", ")");
    private static final byte[] QUERY = filler(" item=", "&qty=", "");

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--events", flags.events);
            checkCapacity(flags.capacity);
            if (flags.ranks < 2) {
                throw new IllegalArgumentException("--ranks=" + flags.ranks + " expected >= 2 (an aggregator and a"
                        + " producer)");
            }
            return flags;
        });
        ExampleRanks.runAndPrintRankZero("RingBufferExample", f.ranks, group -> run(group, f.events, f.capacity),
                Report::line);
    }

    static void checkCapacity(int capacity) {
        if (capacity < 1024 || Integer.bitCount(capacity) != 1) {
            throw new IllegalArgumentException("--capacity=" + capacity + " expected a power of two >= 1024 (fix: e.g."
                    + " 65536; an event needs " + EVENT_OVERHEAD + " bytes besides its text)");
        }
    }

    /**
     * What a rank did: on rank 0 the whole aggregation (every producer's events), on a producer its own stream.
     *
     * @param rank               the rank that reports
     * @param producers          producers counted in it (all of them on rank 0, 1 on a producer)
     * @param events             log events sent (producer) or received and checked (rank 0)
     * @param bytes              their payload bytes
     * @param eventsAtMaxPayload events exactly {@code maxPayload} bytes long
     * @param fullWaits          times a producer's offer found the ring full and it waited in put
     * @param nanos              rank 0: from its first poll to the last summary; a producer: its sending
     * @param capacity           the many-to-one ring's data bytes
     * @param maxPayload         its largest message
     */
    record Report(int rank, int producers, long events, long bytes, long eventsAtMaxPayload, long fullWaits,
                  long nanos, int capacity, int maxPayload) {

        /** {@return the one-line result} */
        String line() {
            double seconds = Math.max(1e-9, nanos / 1e9);
            if (rank != 0) {
                return String.format(Locale.ROOT, "producer %d: %d log events, %d bytes sent in %.3f s (the ring was"
                        + " full %d times); rank 0's receipt matches", rank, events, bytes, seconds, fullWaits);
            }
            return String.format(Locale.ROOT, "ring buffer: %d producer%s sent %d log events (%d..%d bytes, %d at"
                            + " maxPayload) into a many-to-one ring of %d bytes on rank 0: every sequence complete and"
                            + " in order, every CRC-32C matches, every stream digest equals the reference;"
                            + " %d bytes in %.3f s, %.0f messages/s, %.1f MB/s; producers found the ring full %d times"
                            + " and waited in put; %d receipt%s sent back on one-to-one rings",
                    producers, producers == 1 ? "" : "s", events, EVENT_OVERHEAD, maxPayload, eventsAtMaxPayload,
                    capacity, bytes, seconds, events / seconds, bytes / 1e6 / seconds, fullWaits, producers,
                    producers == 1 ? "" : "s");
        }
    }

    /**
     * One rank's part (collective: every rank calls it with the same arguments).
     *
     * @param group    the group; rank 0 aggregates, every other rank produces
     * @param events   log events per producer
     * @param capacity the many-to-one ring's data bytes
     * @return this rank's report
     * @throws IllegalStateException when a check fails (a missing, reordered or corrupted event, a wrong receipt)
     */
    static Report run(Group group, int events, int capacity) {
        int producers = group.worldSize() - 1;
        if (producers < 1) {
            throw new IllegalArgumentException("ring buffer example: worldSize=" + group.worldSize() + " expected >= 2"
                    + " (fix: run with --ranks 2 or more, or symmem4j-run -n 2 or more)");
        }
        List<SymmetricRingBuffer> replies = new ArrayList<>();
        try (SymmetricRingBuffer logs = SymmetricRingBuffer.manyToOne(group, 0, capacity)) {
            try {
                for (int r = 1; r <= producers; r++) {   // collective, in the same order on every rank
                    replies.add(SymmetricRingBuffer.oneToOne(group, 0, r, REPLY_CAPACITY));
                }
                // before the collective closes below
                return ExampleRanks.abortingOnFailure(group, () -> group.rank() == 0
                        ? aggregate(logs, replies, producers, events)
                        : produce(group.rank(), logs, replies.get(group.rank() - 1), events));
            } finally {
                for (SymmetricRingBuffer reply : replies) {
                    reply.close(); // collective, in creation order
                }
            }
        }
    }


    // ------------------------------------------------------------------------------------------ the producers

    private static Report produce(int rank, SymmetricRingBuffer logs, SymmetricRingBuffer reply, int events) {
        int maxPayload = logs.maxPayload();
        MemorySegment staging = MemorySegment.ofArray(new byte[maxPayload]);
        CRC32C streamDigest = new CRC32C();
        long bytes = 0;
        long atMax = 0;
        long fullWaits = 0;
        long start = System.nanoTime();
        for (long seq = 0; seq < events; seq++) {
            int length = encodeEvent(staging, rank, seq, maxPayload);
            if (!logs.offer(EVENT, staging, 0, length)) {
                fullWaits++;                              // back-pressure: the aggregator has not freed room yet
                logs.put(EVENT, staging, 0, length);      // waits, bounded by the group's timeout
            }
            streamDigest.update(staging.asSlice(0, length).asByteBuffer());
            bytes += length;
            atMax += length == maxPayload ? 1 : 0;
        }
        // the summary, encoded in place in the aggregator's ring: no staging copy (waits while the ring is full)
        SymmetricRingBuffer.Claim claim = logs.claim(END_OF_STREAM, SUMMARY_BYTES);
        MemorySegment ring = claim.buffer();
        long at = claim.offset();
        ring.set(INT, at, rank);
        ring.set(LONG, at + 4, events);
        ring.set(LONG, at + 12, bytes);
        ring.set(LONG, at + 20, fullWaits);
        ring.set(INT, at + 28, (int) streamDigest.getValue());
        claim.commit();                                   // one release store publishes it
        long nanos = System.nanoTime() - start;

        long[] receipt = new long[3];
        reply.take((type, buf, off, len) -> {
            if (type != RECEIPT || len != RECEIPT_BYTES) {
                throw new IllegalStateException("producer " + rank + ": reply type=" + type + " bytes=" + len
                        + " expected a receipt (type=" + RECEIPT + ", bytes=" + RECEIPT_BYTES + ")");
            }
            receipt[0] = buf.get(LONG, off);
            receipt[1] = buf.get(LONG, off + 8);
            receipt[2] = buf.get(INT, off + 16);
        }, 1);
        if (receipt[0] != events || receipt[1] != bytes || (int) receipt[2] != (int) streamDigest.getValue()) {
            throw new IllegalStateException("producer " + rank + ": rank 0's receipt events=" + receipt[0] + " bytes="
                    + receipt[1] + " digest=" + Integer.toHexString((int) receipt[2]) + " expected events=" + events
                    + " bytes=" + bytes + " digest=" + Integer.toHexString((int) streamDigest.getValue()));
        }
        return new Report(rank, 1, events, bytes, atMax, fullWaits, nanos, logs.capacity(), maxPayload);
    }

    /**
     * The payload length of producer {@code rank}'s event {@code seq}: mostly request lines of 60..340 bytes, one in
     * 16 a stack trace of half the largest message or more, one in 64 exactly the largest message.
     */
    static int eventLength(int rank, long seq, int maxPayload) {
        return eventLength(random(rank, seq), maxPayload);
    }

    private static int eventLength(SplittableRandom rnd, int maxPayload) {
        int kind = rnd.nextInt(64);
        int length;
        if (kind == 0) {
            length = maxPayload;
        } else if (kind < 4) {
            length = rnd.nextInt(maxPayload / 2, maxPayload + 1);
        } else {
            length = EVENT_OVERHEAD + rnd.nextInt(40, 320);
        }
        return Math.min(length, maxPayload);
    }

    private static SplittableRandom random(int rank, long seq) {
        return new SplittableRandom(0x10C5_EED5L + rank * 0x9E37_79B9_7F4A_7C15L + seq);
    }

    /**
     * Writes producer {@code rank}'s event {@code seq} at the start of {@code dst}: a pure function of its
     * arguments, so that the aggregator can compute every stream's reference itself.
     *
     * @return the payload's bytes
     */
    static int encodeEvent(MemorySegment dst, int rank, long seq, int maxPayload) {
        SplittableRandom rnd = random(rank, seq);
        int length = eventLength(rnd, maxPayload);
        int textLength = length - EVENT_OVERHEAD;
        boolean trace = length > EVENT_OVERHEAD + 360;
        long millis = (seq * 3 + rank) % 3_600_000; // within the hour of 12:00 on the example's day
        String line = "2026-11-30T12:" + twoDigits(millis / 60_000) + ":" + twoDigits(millis / 1000 % 60) + "."
                + (millis % 1000 + 1000 + "").substring(1) + "Z " + (trace ? "ERROR" : "INFO ") + " service-" + rank
                + " req=" + Integer.toHexString(rnd.nextInt()) + " GET " + PATHS[rnd.nextInt(PATHS.length)] + "/"
                + rnd.nextInt(100_000) + " status=" + (trace ? 500 : 200) + " took=" + rnd.nextInt(1, 900) + "ms";
        byte[] ascii = line.getBytes(StandardCharsets.US_ASCII);
        dst.set(LONG, 0, seq);
        dst.set(INT, 8, rank);
        dst.set(INT, 12, textLength);
        int written = Math.min(ascii.length, textLength);
        MemorySegment.copy(ascii, 0, dst, ValueLayout.JAVA_BYTE, EVENT_HEADER_BYTES, written);
        // the rest of the text: a stack trace's frames or the request's query, from a place the event picks
        byte[] filler = trace ? STACK_TRACE : QUERY;
        int from = rnd.nextInt(filler.length);
        while (written < textLength) {
            int chunk = Math.min(textLength - written, filler.length - from);
            MemorySegment.copy(filler, from, dst, ValueLayout.JAVA_BYTE, EVENT_HEADER_BYTES + written, chunk);
            written += chunk;
            from = 0;
        }
        CRC32C crc = new CRC32C();
        crc.update(dst.asSlice(0, EVENT_HEADER_BYTES + textLength).asByteBuffer());
        dst.set(INT, EVENT_HEADER_BYTES + textLength, (int) crc.getValue());
        return length;
    }

    private static String twoDigits(long value) {
        return value < 10 ? "0" + value : Long.toString(value);
    }

    /**
     * 16 KiB of {@code prefix N infix M suffix} repeated with made-up numbers: the frames of a stack trace that long
     * events carry, or the query of a request line (an event cycles through it where it is longer).
     */
    private static byte[] filler(String prefix, String infix, String suffix) {
        SplittableRandom rnd = new SplittableRandom(0x57AC_77AC_E000L + prefix.length());
        StringBuilder text = new StringBuilder();
        while (text.length() < 16 * 1024) {
            text.append(prefix).append(rnd.nextInt(40)).append(infix).append(rnd.nextInt(20, 900)).append(suffix);
        }
        return text.toString().getBytes(StandardCharsets.US_ASCII);
    }

    /**
     * The digest (CRC-32C of every payload in order) of producer {@code rank}'s stream of {@code events} events,
     * computed on one thread from the generator alone: the reference the received streams must equal.
     */
    static int referenceDigest(int rank, int events, int maxPayload) {
        MemorySegment event = MemorySegment.ofArray(new byte[maxPayload]);
        CRC32C digest = new CRC32C();
        for (long seq = 0; seq < events; seq++) {
            int length = encodeEvent(event, rank, seq, maxPayload);
            digest.update(event.asSlice(0, length).asByteBuffer());
        }
        return (int) digest.getValue();
    }

    // ------------------------------------------------------------------------------------------ the aggregator

    private static Report aggregate(SymmetricRingBuffer logs, List<SymmetricRingBuffer> replies, int producers,
                                    int events) {
        Aggregation aggregation = new Aggregation(producers, logs.maxPayload());
        long start = System.nanoTime();
        while (aggregation.finished < producers) {
            logs.take(aggregation, 256);   // waits, bounded by the group's timeout, for the next messages
        }
        long nanos = System.nanoTime() - start;
        for (int r = 1; r <= producers; r++) {
            if (aggregation.next[r] != events) {
                throw new IllegalStateException("producer " + r + " sent events=" + aggregation.next[r] + " expected "
                        + events);
            }
            int reference = referenceDigest(r, events, logs.maxPayload());
            if (aggregation.digest(r) != reference) {
                throw new IllegalStateException("producer " + r + "'s stream digest="
                        + Integer.toHexString(aggregation.digest(r)) + " expected the reference="
                        + Integer.toHexString(reference) + " (the events received differ from the ones generated)");
            }
        }
        MemorySegment receipt = MemorySegment.ofArray(new byte[RECEIPT_BYTES]);
        for (int r = 1; r <= producers; r++) {
            receipt.set(LONG, 0, aggregation.next[r]);
            receipt.set(LONG, 8, aggregation.bytes[r]);
            receipt.set(INT, 16, aggregation.digest(r));
            replies.get(r - 1).put(RECEIPT, receipt, 0, RECEIPT_BYTES);
        }
        long total = 0;
        long bytes = 0;
        long atMax = 0;
        long fullWaits = 0;
        for (int r = 1; r <= producers; r++) {
            total += aggregation.next[r];
            bytes += aggregation.bytes[r];
            atMax += aggregation.atMax[r];
            fullWaits += aggregation.fullWaits[r];
        }
        return new Report(0, producers, total, bytes, atMax, fullWaits, nanos, logs.capacity(), logs.maxPayload());
    }

    /**
     * Rank 0's handler: checks each message where it lies in the ring (zero-copy) and keeps per-producer state; a
     * failed check throws an {@link IllegalStateException} that says what was expected and what came.
     */
    static final class Aggregation implements MessageHandler {
        final long[] next;
        final long[] bytes;
        final long[] atMax;
        final long[] fullWaits;
        private final CRC32C[] digests;
        private final boolean[] ended;
        private final int maxPayload;
        private final CRC32C crc = new CRC32C();
        int finished;

        Aggregation(int producers, int maxPayload) {
            this.next = new long[producers + 1];
            this.bytes = new long[producers + 1];
            this.atMax = new long[producers + 1];
            this.fullWaits = new long[producers + 1];
            this.digests = new CRC32C[producers + 1];
            this.ended = new boolean[producers + 1];
            this.maxPayload = maxPayload;
            for (int r = 1; r <= producers; r++) {
                digests[r] = new CRC32C();
            }
        }

        int digest(int producer) {
            return (int) digests[producer].getValue();
        }

        @Override
        public void onMessage(int type, MemorySegment buf, long off, int len) {
            if (type == EVENT) {
                event(buf, off, len);
            } else if (type == END_OF_STREAM) {
                endOfStream(buf, off, len);
            } else {
                throw new IllegalStateException("log ring: message type=" + type + " expected " + EVENT + " (event) or "
                        + END_OF_STREAM + " (end of stream)");
            }
        }

        private int producer(int rank, String what) {
            if (rank < 1 || rank >= next.length) {
                throw new IllegalStateException("log ring: " + what + " from producer=" + rank + " expected 1.."
                        + (next.length - 1));
            }
            if (ended[rank]) {
                throw new IllegalStateException("log ring: " + what + " from producer=" + rank + " after its end of"
                        + " stream");
            }
            return rank;
        }

        private void event(MemorySegment buf, long off, int len) {
            if (len < EVENT_OVERHEAD || len > maxPayload) {
                throw new IllegalStateException("log ring: event bytes=" + len + " expected " + EVENT_OVERHEAD + ".."
                        + maxPayload);
            }
            long seq = buf.get(LONG, off);
            int p = producer(buf.get(INT, off + 8), "event seq=" + seq);
            int textLength = buf.get(INT, off + 12);
            if (textLength != len - EVENT_OVERHEAD) {
                throw new IllegalStateException("log ring: producer " + p + " event seq=" + seq + " text length="
                        + textLength + " expected " + (len - EVENT_OVERHEAD) + " (the message's bytes less "
                        + EVENT_OVERHEAD + ")");
            }
            if (seq != next[p]) {
                throw new IllegalStateException("log ring: producer " + p + " event seq=" + seq + " expected seq="
                        + next[p] + (seq > next[p] ? " (events lost)" : " (out of order or repeated)"));
            }
            crc.reset();
            crc.update(buf.asSlice(off, len - Integer.BYTES).asByteBuffer());
            int stored = buf.get(INT, off + len - Integer.BYTES);
            if ((int) crc.getValue() != stored) {
                throw new IllegalStateException("log ring: producer " + p + " event seq=" + seq + " CRC-32C="
                        + Integer.toHexString((int) crc.getValue()) + " expected the event's own="
                        + Integer.toHexString(stored) + " (the bytes were changed on the way)");
            }
            digests[p].update(buf.asSlice(off, len).asByteBuffer());
            next[p]++;
            bytes[p] += len;
            atMax[p] += len == maxPayload ? 1 : 0;
        }

        private void endOfStream(MemorySegment buf, long off, int len) {
            if (len != SUMMARY_BYTES) {
                throw new IllegalStateException("log ring: end of stream bytes=" + len + " expected " + SUMMARY_BYTES);
            }
            int p = producer(buf.get(INT, off), "end of stream");
            long events = buf.get(LONG, off + 4);
            long sent = buf.get(LONG, off + 12);
            int digest = buf.get(INT, off + 28);
            if (events != next[p] || sent != bytes[p] || digest != digest(p)) {
                throw new IllegalStateException("log ring: producer " + p + " says it sent events=" + events + " bytes="
                        + sent + " digest=" + Integer.toHexString(digest) + ", rank 0 received events=" + next[p]
                        + " bytes=" + bytes[p] + " digest=" + Integer.toHexString(digest(p)));
            }
            fullWaits[p] = buf.get(LONG, off + 20);
            ended[p] = true;
            finished++;
        }
    }
}
