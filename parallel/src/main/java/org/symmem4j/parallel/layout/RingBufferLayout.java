package org.symmem4j.parallel.layout;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * Layout of a symmetric ring buffer in its consumer rank's buffer: a header, two position counters on lines of
 * their own, and the data ring of records. Agrona's {@code RingBufferDescriptor} and {@code RecordDescriptor}
 * are the model; the record header is one 64-bit word so that a record is published by one release store.
 *
 * <pre>
 *  offset         field                                                written by            read by
 *  0              HEADER: magic (int), version (int), kind (int:       consumer, once        every rank, verify
 *                 1 one-to-one, 2 many-to-one), capacity (int),
 *                 producer rank (int, -1 = any), consumer rank (int)
 *  24               CLOSED (int): ranks that began closing the ring    each rank, once, in   a rank waiting
 *                   (atomic add)                                       its close             in take or put
 *  28               PRODUCER CLOSED (int, one-to-one): 1 once the      the producer, in its  the consumer, in
 *                   producer began closing                             close (release)       take
 *  32               CONSUMER CLOSED (int): 1 once the consumer began   the consumer, in its  producers, in put
 *                   closing                                            close (release)
 *  128            TAIL (long): bytes claimed since creation, only      producers (CAS, or    producers
 *                 grows                                                the one producer)     (the CAS)
 *  256            HEAD (long): bytes consumed since creation, only     consumer (release)    producers (acquire)
 *                 grows
 *  384            DATA: capacity bytes (a power of two) of records,    producers (and, many- consumer
 *                 each 8-byte aligned:                                 to-one, the consumer
 *                   +0 header word (long):                             zeroes what it read)
 *                        low 32 bits:  record length (header + payload bytes); 0 = free,
 *                                      negative = claimed and being written
 *                        high 32 bits: committed: message type (&gt;= 1) or PADDING (-1);
 *                                      being written: the producer's rank
 *                   +8 payload
 *
 *  one-to-one, after the last record:  ... | record | 0 (next header word) | free ...
 *                                                     ^ TAIL: zeroed by the producer before it commits the record
 * </pre>
 *
 * A producer claims {@code align8(length)} bytes at TAIL, writes the payload and publishes the record by one release
 * store of the header word (positive length and the type); the consumer reads it with acquire, hands the payload out
 * and moves HEAD on with release, which frees the bytes for producers. A record that does not fit before the end of
 * the ring is preceded by a PADDING record that fills the ring to its end.
 *
 * <p>The word at TAIL must read as free (0) or in progress until its record is committed, never as stale bytes of
 * an earlier lap. The two kinds keep that differently, as Agrona 2's rings do:
 * <ul>
 *   <li><b>one-to-one</b>: the one producer zeroes the header word after its record (at the new TAIL) before the
 *       release that commits the record, so a claim needs {@link #RECORD_HEADER_BYTES} free bytes more than the
 *       record. The consumer writes nothing in the data ring: no cache line of the data moves back to the producer
 *       but the ones it writes next.</li>
 *   <li><b>many-to-one</b>: another producer may already own the bytes after a record, so the consumer zeroes the
 *       records it read before releasing HEAD. Producers mark a claim in progress (negative length and their rank)
 *       right after winning it: a consumer that finds that rank dead skips the record as padding.</li>
 * </ul>
 * A one-to-one producer marks nothing in progress, not even a claim written in place: the word at its record reads 0
 * until the commit, and the consumer waits there (a dead one-to-one producer is reported by the consumer's bounded
 * wait, not skipped: no record could follow it).
 *
 * <p>The CLOSED words let a rank that waits on a peer (a consumer in {@code take} on an empty ring, a producer in
 * {@code put} on a full one) see that the peer has begun closing the ring, and so will never write or free again, and
 * stop at once instead of at the group's timeout. Each rank writes them at the start of its close, before the
 * collective free, so the memory is still mapped everywhere when they are read. Only the waits read them.
 */
public final class RingBufferLayout {

    /** Bytes per line: fields written by different ranks sit on lines of their own. */
    public static final int LINE_BYTES = 128;
    /**
     * The unit a core fetches for writing (x86-64 and most aarch64 cores): a producer orders its stores by it, the
     * record header's line last ({@code SymmetricRingBuffer}'s copy). {@link #LINE_BYTES} pads by pairs of them,
     * against the adjacent-line prefetcher.
     */
    public static final int CACHE_LINE_BYTES = 64;
    /** Header magic, {@code "SYRB"}. */
    public static final int MAGIC = 0x53595242;
    /** Layout version (3: the CLOSED words). */
    public static final int VERSION = 3;
    /** Kind: exactly one producer rank. */
    public static final int KIND_ONE_TO_ONE = 1;
    /** Kind: any rank produces, producers claim space by CAS on TAIL. */
    public static final int KIND_MANY_TO_ONE = 2;

    /** Byte offset of the magic (int). */
    public static final long MAGIC_OFFSET = 0;
    /** Byte offset of the version (int). */
    public static final long VERSION_OFFSET = 4;
    /** Byte offset of the kind (int). */
    public static final long KIND_OFFSET = 8;
    /** Byte offset of the data capacity (int). */
    public static final long CAPACITY_OFFSET = 12;
    /** Byte offset of the producer rank (int, -1 = any rank). */
    public static final long PRODUCER_OFFSET = 16;
    /** Byte offset of the consumer rank (int). */
    public static final long CONSUMER_OFFSET = 20;
    /** Byte offset of CLOSED (int): how many ranks began closing the ring. */
    public static final long CLOSED_OFFSET = 24;
    /** Byte offset of PRODUCER CLOSED (int): 1 once a one-to-one ring's producer began closing it. */
    public static final long PRODUCER_CLOSED_OFFSET = 28;
    /** Byte offset of CONSUMER CLOSED (int): 1 once the consumer began closing the ring. */
    public static final long CONSUMER_CLOSED_OFFSET = 32;
    /** Byte offset of TAIL (long). */
    public static final long TAIL_OFFSET = LINE_BYTES;
    /** Byte offset of HEAD (long). */
    public static final long HEAD_OFFSET = 2L * LINE_BYTES;
    /** Byte offset of the data ring. */
    public static final long DATA_OFFSET = 3L * LINE_BYTES;

    /** Bytes of a record header (one long). */
    public static final int RECORD_HEADER_BYTES = Long.BYTES;
    /** Records start at multiples of this. */
    public static final int RECORD_ALIGNMENT = 8;
    /** Message type of a padding record (not handed out). */
    public static final int PADDING_TYPE = -1;
    /** Smallest data capacity. */
    public static final int MIN_CAPACITY = 64;

    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private RingBufferLayout() {
    }

    /**
     * Bytes a ring of {@code capacity} data bytes occupies.
     *
     * @param capacity data bytes, a power of two
     * @return header and data bytes
     */
    public static long totalBytes(int capacity) {
        return DATA_OFFSET + capacity;
    }

    /**
     * The largest payload a ring of {@code capacity} takes: an eighth of the ring, as Agrona's, so one
     * message never starves the others.
     *
     * @param capacity data bytes
     * @return payload bytes
     */
    public static int maxPayload(int capacity) {
        return capacity / 8 - RECORD_HEADER_BYTES;
    }

    /**
     * {@code n} rounded up to {@link #RECORD_ALIGNMENT}.
     *
     * @param n bytes
     * @return aligned bytes
     */
    public static int align(int n) {
        return (n + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT;
    }

    /**
     * Writes the header of a fresh ring (the consumer, at creation, before the barrier that publishes it).
     *
     * @param ring     the consumer's buffer
     * @param kind     {@link #KIND_ONE_TO_ONE} or {@link #KIND_MANY_TO_ONE}
     * @param capacity data bytes, a power of two
     * @param producer the producer rank, or -1 for any
     * @param consumer the consumer rank
     */
    public static void format(MemorySegment ring, int kind, int capacity, int producer, int consumer) {
        ring.asSlice(0, DATA_OFFSET + capacity).fill((byte) 0);
        formatHeader(ring, kind, capacity, producer, consumer);
    }

    /**
     * Writes the HEADER fields only (not TAIL, HEAD or the data): for a ring whose bytes are zeroed elsewhere and
     * whose header is staged in host memory first ({@link DeviceRingLayout}).
     *
     * @param ring     at least {@link #DATA_OFFSET} bytes: the header
     * @param kind     {@link #KIND_ONE_TO_ONE} or {@link #KIND_MANY_TO_ONE}
     * @param capacity data bytes, a power of two
     * @param producer the producer rank, or -1 for any
     * @param consumer the consumer rank
     */
    public static void formatHeader(MemorySegment ring, int kind, int capacity, int producer, int consumer) {
        ring.set(ValueLayout.JAVA_INT, MAGIC_OFFSET, MAGIC);
        ring.set(ValueLayout.JAVA_INT, VERSION_OFFSET, VERSION);
        ring.set(ValueLayout.JAVA_INT, KIND_OFFSET, kind);
        ring.set(ValueLayout.JAVA_INT, CAPACITY_OFFSET, capacity);
        ring.set(ValueLayout.JAVA_INT, PRODUCER_OFFSET, producer);
        ring.set(ValueLayout.JAVA_INT, CONSUMER_OFFSET, consumer);
    }

    /**
     * Checks that {@code ring} holds a ring of this layout with the expected facts.
     *
     * @param ring     the consumer's buffer as mapped here
     * @param kind     the expected kind
     * @param capacity the expected capacity
     * @param producer the expected producer rank, -1 for any
     * @param consumer the expected consumer rank
     * @throws IllegalStateException naming the field that differs, what was found and what was expected
     */
    public static void verify(MemorySegment ring, int kind, int capacity, int producer, int consumer) {
        if (ring.byteSize() < totalBytes(capacity)) {
            throw new IllegalStateException("ring buffer: memory bytes=" + ring.byteSize() + " expected at least "
                    + totalBytes(capacity) + " (header " + DATA_OFFSET + " + capacity " + capacity + "; fix: give the"
                    + " ring memory of at least that size, the same capacity on every rank)");
        }
        verifyHeader(ring, kind, capacity, producer, consumer);
    }

    /**
     * Checks the HEADER fields only, as {@link #verify} does after its size check: for a header copied out of memory
     * the host cannot read in place ({@link DeviceRingLayout}).
     *
     * @param ring     at least {@link #DATA_OFFSET} bytes: the header
     * @param kind     the expected kind
     * @param capacity the expected capacity
     * @param producer the expected producer rank, -1 for any
     * @param consumer the expected consumer rank
     * @throws IllegalStateException naming the field that differs, what was found and what was expected
     */
    public static void verifyHeader(MemorySegment ring, int kind, int capacity, int producer, int consumer) {
        expect(ring, MAGIC_OFFSET, "magic", MAGIC, " (not a ring buffer: memory of another structure or not formatted)");
        expect(ring, VERSION_OFFSET, "version", VERSION, " (ranks run different symmem4j versions)");
        expect(ring, KIND_OFFSET, "kind", kind, " (1 one-to-one, 2 many-to-one: every rank must create the same kind)");
        expect(ring, CAPACITY_OFFSET, "capacity", capacity, " (every rank must pass the same capacity)");
        expect(ring, PRODUCER_OFFSET, "producer", producer, " (every rank must name the same producer)");
        expect(ring, CONSUMER_OFFSET, "consumer", consumer, " (every rank must name the same consumer)");
    }

    private static void expect(MemorySegment ring, long offset, String field, int expected, String fix) {
        int found = ring.get(ValueLayout.JAVA_INT, offset);
        if (found != expected) {
            throw new IllegalStateException("ring buffer header mismatch: field=" + field + " found=" + found
                    + " expected=" + expected + fix + "; fix: create the ring on every rank with the same"
                    + " arguments, from the same symmem4j version");
        }
    }

    // ---- closing: the access mode is in the name ----

    private static final VarHandle INT = ValueLayout.JAVA_INT.varHandle();

    /**
     * Records that the calling rank began closing the ring: the count of closing ranks goes up by one (an atomic add:
     * every rank may close at once), then, with release, the producer's or the consumer's own word where the rank is
     * one. Called once per rank, before the collective free.
     *
     * @param ring             the consumer's buffer
     * @param oneToOneProducer whether the calling rank is the producer of a one-to-one ring
     * @param consumer         whether the calling rank is the consumer
     */
    public static void markClosing(MemorySegment ring, boolean oneToOneProducer, boolean consumer) {
        // volatile add: the count that a many-to-one consumer's acquire reads
        INT.getAndAdd(ring, CLOSED_OFFSET, 1);
        if (oneToOneProducer) {
            // release: everything this producer committed is visible to the consumer's acquire of the word
            INT.setRelease(ring, PRODUCER_CLOSED_OFFSET, 1);
        }
        if (consumer) {
            // release: pairs with the producers' acquire in put's wait
            INT.setRelease(ring, CONSUMER_CLOSED_OFFSET, 1);
        }
    }

    /**
     * CLOSED with acquire: how many ranks began closing the ring (pairs with {@link #markClosing}'s add, so the records
     * they committed before are seen).
     *
     * @param ring the consumer's buffer
     * @return the count
     */
    public static int closedAcquire(MemorySegment ring) {
        return (int) INT.getAcquire(ring, CLOSED_OFFSET);
    }

    /**
     * PRODUCER CLOSED with acquire: pairs with the one-to-one producer's release in {@link #markClosing}.
     *
     * @param ring the consumer's buffer
     * @return whether the producer began closing the ring
     */
    public static boolean producerClosedAcquire(MemorySegment ring) {
        return (int) INT.getAcquire(ring, PRODUCER_CLOSED_OFFSET) != 0;
    }

    /**
     * CONSUMER CLOSED with acquire: pairs with the consumer's release in {@link #markClosing}.
     *
     * @param ring the consumer's buffer
     * @return whether the consumer began closing the ring
     */
    public static boolean consumerClosedAcquire(MemorySegment ring) {
        return (int) INT.getAcquire(ring, CONSUMER_CLOSED_OFFSET) != 0;
    }

    // ---- positions: the access mode is in the name ----

    /**
     * TAIL with acquire: pairs with a producer's CAS or release of TAIL.
     *
     * @param ring the consumer's buffer
     * @return bytes claimed so far
     */
    public static long tailAcquire(MemorySegment ring) {
        return (long) LONG.getAcquire(ring, TAIL_OFFSET);
    }

    /**
     * TAIL with a plain read: for the one producer, which alone writes it.
     *
     * @param ring the consumer's buffer
     * @return bytes claimed so far
     */
    public static long tailPlain(MemorySegment ring) {
        return (long) LONG.get(ring, TAIL_OFFSET);
    }

    /**
     * TAIL with release: the one producer's claim (read back only by itself; the consumer follows record headers).
     *
     * @param ring  the consumer's buffer
     * @param value the new tail
     */
    public static void tailRelease(MemorySegment ring, long value) {
        LONG.setRelease(ring, TAIL_OFFSET, value);
    }

    /**
     * Claims bytes by CAS on TAIL and returns the TAIL found (many producers): {@code expected} when this producer won
     * the bytes (the linearization point of its claim), else the TAIL another producer moved it to, read by the same
     * atomic instruction, so a producer that lost needs no second load of TAIL. Volatile semantics: on success it
     * releases and acquires; on failure the witness is read with acquire, pairing with the winner's CAS.
     *
     * @param ring     the consumer's buffer
     * @param expected the tail this producer expects
     * @param value    the new tail
     * @return the tail found: {@code expected} on success
     */
    public static long tailCompareAndExchange(MemorySegment ring, long expected, long value) {
        return (long) LONG.compareAndExchange(ring, TAIL_OFFSET, expected, value);
    }

    /**
     * HEAD with acquire: pairs with the consumer's release in {@link #headRelease}; zeroed records are then seen.
     *
     * @param ring the consumer's buffer
     * @return bytes consumed so far
     */
    public static long headAcquire(MemorySegment ring) {
        return (long) LONG.getAcquire(ring, HEAD_OFFSET);
    }

    /**
     * HEAD with a plain read: for the consumer, which alone writes it.
     *
     * @param ring the consumer's buffer
     * @return bytes consumed so far
     */
    public static long headPlain(MemorySegment ring) {
        return (long) LONG.get(ring, HEAD_OFFSET);
    }

    /**
     * HEAD with release: publishes the zeroed records before it as free; producers read it in {@link #headAcquire}.
     *
     * @param ring  the consumer's buffer
     * @param value the new head
     */
    public static void headRelease(MemorySegment ring, long value) {
        LONG.setRelease(ring, HEAD_OFFSET, value);
    }

    // ---- records ----

    /**
     * A record's header word with acquire: pairs with the producer's release in {@link #commitRecord}.
     *
     * @param ring  the consumer's buffer
     * @param index byte index of the record in the data ring
     * @return the header word
     */
    public static long recordHeaderAcquire(MemorySegment ring, int index) {
        return (long) LONG.getAcquire(ring, DATA_OFFSET + index);
    }

    /**
     * Marks a claimed record as being written by {@code rank} (negative length): no data is published by it,
     * but a consumer that later finds {@code rank} dead knows whose record it skips and how long it is.
     *
     * @param ring   the consumer's buffer
     * @param index  byte index of the record
     * @param length record length (header + payload)
     * @param rank   the producer's rank
     */
    public static void markRecordInProgress(MemorySegment ring, int index, int length, int rank) {
        // release: orders the mark after the claim; nothing reads data because of it (the consumer skips or waits)
        LONG.setRelease(ring, DATA_OFFSET + index, headerWord(-length, rank));
    }

    /**
     * Zeroes a record header word with a plain store: the one-to-one producer's word after its record, and the
     * header of a record placed at index 0 after a padding record. Published by the release of the record (or
     * padding) header that follows in {@link #commitRecord}; the consumer reads the word only after that. A one-to-one
     * producer also zeroes a word of free room one line ahead after a commit (to own that line before its next record
     * needs it): free room holds no unread record, and the consumer reads none of it before a later commit.
     *
     * @param ring  the consumer's buffer
     * @param index byte index of the header word
     */
    public static void zeroRecordHeader(MemorySegment ring, int index) {
        LONG.set(ring, DATA_OFFSET + index, 0L);
    }

    /**
     * Zeroes {@code bytes} of data from {@code index} with plain stores: the many-to-one consumer's bytes it read, before
     * the release of HEAD that frees them (which publishes the zeros to the producers' acquire of HEAD). One bulk fill
     * per poll: measured in one thread, 8-byte stores of a short run in a loop cost more than the fill, even for one
     * record.
     *
     * @param ring  the consumer's buffer
     * @param index byte index of the first byte
     * @param bytes bytes to zero
     */
    public static void zeroData(MemorySegment ring, int index, int bytes) {
        ring.asSlice(DATA_OFFSET + index, bytes).fill((byte) 0);
    }

    /**
     * Publishes a record: the linearization point of a write. Pairs with {@link #recordHeaderAcquire}.
     *
     * @param ring   the consumer's buffer
     * @param index  byte index of the record
     * @param length record length (header + payload)
     * @param type   message type, or {@link #PADDING_TYPE}
     */
    public static void commitRecord(MemorySegment ring, int index, int length, int type) {
        // release: publishes the payload written before it to the consumer's acquire of the header word
        LONG.setRelease(ring, DATA_OFFSET + index, headerWord(length, type));
    }

    /**
     * Turns the in-progress record of a dead producer into padding, by CAS so that it happens once.
     *
     * @param ring     the consumer's buffer
     * @param index    byte index of the record
     * @param observed the in-progress header word seen
     * @return whether this call replaced it
     */
    public static boolean abandonRecord(MemorySegment ring, int index, long observed) {
        int length = -recordLength(observed);
        return LONG.compareAndSet(ring, DATA_OFFSET + index, observed, headerWord(length, PADDING_TYPE));
    }

    // ---- the hot paths of offer and poll, by address ----

    /**
     * All of memory as one segment, a constant: an access through it at an address carries no per-segment bounds,
     * read-only or liveness check (the JIT folds them), so that a producer's offer and a consumer's poll compile small
     * enough to be inlined into their caller's loop. Only for addresses inside a mapped native ring: see
     * {@link #address}.
     */
    private static final MemorySegment EVERYTHING = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);

    /**
     * The base address of {@code ring} for the {@code ...At} accesses below, or -1 where it has none (a heap segment):
     * the caller then keeps to the checked accesses. The caller must use an address only while {@code ring} is mapped
     * (it checks {@link MemorySegment.Scope#isAlive()} before a sequence of accesses, from the one thread that may
     * close it, or, as {@code SymmetricRingBuffer}, owns the memory and forgets the address when it closes it) and only
     * at the offsets of this layout, inside {@link #totalBytes} (verified at creation).
     *
     * @param ring the consumer's buffer as mapped here
     * @return its address, or -1
     */
    public static long address(MemorySegment ring) {
        return ring.isNative() ? ring.address() : -1;
    }

    /**
     * {@link #tailCompareAndExchange} at a ring's {@link #address}: the same volatile CAS.
     *
     * @param ringAddress the ring's address
     * @param expected    the tail this producer expects
     * @param value       the new tail
     * @return the tail found: {@code expected} on success
     */
    public static long tailCompareAndExchangeAt(long ringAddress, long expected, long value) {
        return (long) LONG.compareAndExchange(EVERYTHING, ringAddress + TAIL_OFFSET, expected, value);
    }

    /**
     * {@link #markRecordInProgress} at a ring's {@link #address}: the same release store.
     *
     * @param ringAddress the ring's address
     * @param index       byte index of the record, 8-aligned, below the capacity
     * @param length      record length (header + payload)
     * @param rank        the producer's rank
     */
    public static void markRecordInProgressAt(long ringAddress, int index, int length, int rank) {
        // release: orders the mark after the claim; nothing reads data because of it (the consumer skips or waits)
        LONG.setRelease(EVERYTHING, ringAddress + DATA_OFFSET + index, headerWord(-length, rank));
    }

    /**
     * {@link #commitRecord} at a ring's {@link #address}: the same release store, the linearization point of a write.
     *
     * @param ringAddress the ring's address
     * @param index       byte index of the record, 8-aligned, below the capacity
     * @param length      record length (header + payload)
     * @param type        message type, or {@link #PADDING_TYPE}
     */
    public static void commitRecordAt(long ringAddress, int index, int length, int type) {
        // release: publishes the payload written before it to the consumer's acquire of the header word
        LONG.setRelease(EVERYTHING, ringAddress + DATA_OFFSET + index, headerWord(length, type));
    }

    /**
     * {@link #recordHeaderAcquire} at a ring's {@link #address}: the same acquire load, pairing with the producer's
     * release in {@link #commitRecord} / {@link #commitRecordAt}.
     *
     * @param ringAddress the ring's address
     * @param index       byte index of the record, 8-aligned, below the capacity
     * @return the header word
     */
    public static long recordHeaderAcquireAt(long ringAddress, int index) {
        return (long) LONG.getAcquire(EVERYTHING, ringAddress + DATA_OFFSET + index);
    }

    /**
     * {@link #zeroRecordHeader} at a ring's {@link #address}: the same plain store, published by the release of the
     * record before it.
     *
     * @param ringAddress the ring's address
     * @param index       byte index of the header word, 8-aligned, below the capacity
     */
    public static void zeroRecordHeaderAt(long ringAddress, int index) {
        LONG.set(EVERYTHING, ringAddress + DATA_OFFSET + index, 0L);
    }

    /**
     * {@link #tailRelease} at a ring's {@link #address}: the same release store.
     *
     * @param ringAddress the ring's address
     * @param value       the new tail
     */
    public static void tailReleaseAt(long ringAddress, long value) {
        // release: the one producer's position, read by size()'s acquire of TAIL
        LONG.setRelease(EVERYTHING, ringAddress + TAIL_OFFSET, value);
    }

    /**
     * {@link #headRelease} at a ring's {@link #address}: the same release store, read by the producers'
     * {@link #headAcquire}.
     *
     * @param ringAddress the ring's address
     * @param value       the new head
     */
    public static void headReleaseAt(long ringAddress, long value) {
        // release: publishes the room before it as free to the producers' acquire of HEAD
        LONG.setRelease(EVERYTHING, ringAddress + HEAD_OFFSET, value);
    }

    /**
     * A plain 8-byte store of payload at a ring's {@link #address}, any alignment: published by the record's
     * {@link #commitRecordAt} after it.
     *
     * @param ringAddress the ring's address
     * @param dataOffset  byte offset in the data ring, inside a record this producer claimed
     * @param value       the bytes, in native order
     */
    public static void putPayloadLongAt(long ringAddress, long dataOffset, long value) {
        EVERYTHING.set(ValueLayout.JAVA_LONG_UNALIGNED, ringAddress + DATA_OFFSET + dataOffset, value);
    }

    /**
     * The length field of a header word.
     *
     * @param header the header word
     * @return record length; 0 free, negative being written
     */
    public static int recordLength(long header) {
        return (int) header;
    }

    /**
     * The high field of a header word: the type of a committed record, the producer's rank of one being written.
     *
     * @param header the header word
     * @return type or rank
     */
    public static int recordTypeOrRank(long header) {
        return (int) (header >>> 32);
    }

    static long headerWord(int length, int high) {
        return ((long) high << 32) | (length & 0xFFFF_FFFFL);
    }
}
