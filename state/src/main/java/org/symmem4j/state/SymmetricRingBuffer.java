package org.symmem4j.state;

import static org.symmem4j.parallel.layout.RingBufferLayout.DATA_OFFSET;
import static org.symmem4j.parallel.layout.RingBufferLayout.PADDING_TYPE;
import static org.symmem4j.parallel.layout.RingBufferLayout.RECORD_ALIGNMENT;
import static org.symmem4j.parallel.layout.RingBufferLayout.RECORD_HEADER_BYTES;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Objects;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.RingBufferLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * A bounded ring buffer of variable-length messages between the ranks of a group, in the consumer rank's
 * symmetric memory: producers write records straight into the consumer's mapped buffer and publish each by one
 * release store of its header (a put with its signal in one word); the consumer reads records with acquire, in
 * the order their space was claimed. Agrona's {@code OneToOneRingBuffer} and {@code ManyToOneRingBuffer} are the
 * model, with the ring in symmetric memory so that it works between threads and between processes alike.
 *
 * <pre>{@code
 * try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 1 << 20)) {   // collective
 *     if (group.rank() == 0) {
 *         ring.take((type, buf, off, len) -> handle(buf.asSlice(off, len)), 100);      // bounded wait
 *     } else {
 *         ring.put(1, message);                       // waits (bounded) while the ring is full
 *     }
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>Kinds</b>: {@link #oneToOne one-to-one} (one producer rank, no CAS) and {@link #manyToOne many-to-one}
 *       (any rank, space claimed by CAS on the tail).</li>
 *   <li><b>Back-pressure</b>: {@link #offer} returns false when the ring is full; {@link #put} waits, bounded by
 *       the group's timeout, and then throws a {@link org.symmem4j.parallel.PeerTimeoutException} naming the
 *       consumer; it fails at once when the consumer has exited or the group was aborted.</li>
 *   <li><b>Sizes</b>: a payload is 0..{@link #maxPayload()} bytes (an eighth of the capacity, less the 8-byte
 *       header); a larger one is refused with an {@link IllegalArgumentException} before anything is written.</li>
 *   <li><b>Cost</b>: a one-to-one message costs the consumer no writes in the ring (its producer zeroes the next
 *       header instead, as Agrona 2's {@code OneToOneRingBuffer}); a many-to-one consumer zeroes what it read. The
 *       consumer moves HEAD once per {@link #poll}, the producer reads HEAD only when its cached copy says the ring is
 *       full, and TAIL, HEAD and the data sit on lines of their own ({@link RingBufferLayout}). A many-to-one claim is
 *       one CAS on TAIL from the TAIL the producer last left, with no load of TAIL before it.</li>
 *   <li><b>Zero-copy writes</b>: {@link #tryClaim(int, int)} hands out the room of one record as a {@link Claim};
 *       encode the message straight into it ({@link Claim#buffer()} at {@link Claim#offset()}, or
 *       {@link Claim#segment()}), then {@link Claim#commit()} publishes it with one release store, or
 *       {@link Claim#abort()} turns it into padding the consumer skips. That saves {@link #offer}'s copy from a
 *       staging buffer; records claimed after an open claim wait behind it.</li>
 *   <li><b>Crashes</b>: a record becomes visible only by its final release store, so a producer that dies while
 *       writing never exposes a torn message. A many-to-one record (offered or claimed) is marked with its
 *       producer's rank when its room is won; once the consumer finds that rank dead it skips the record
 *       ({@link #abandonedRecords()}) and the ring goes on; a one-to-one consumer whose producer died times out in
 *       {@link #take} naming it as exited. A many-to-one
 *       producer that dies in the few instructions between winning its claim and marking it leaves an unmarked
 *       gap that stalls the consumer (the consumer's {@link #take} then times out, naming every producer).</li>
 * </ul>
 *
 * One thread per rank uses an instance (as with {@link Group}); the consumer is the only rank that polls.
 * Where the group spans machines, creation is refused with the transport's reason; on a group of GPU memory it is
 * refused with the GPU form to use instead, {@link DeviceRingBuffer} (producers append on their streams).
 */
public final class SymmetricRingBuffer implements AutoCloseable {

    /** The kinds of ring. */
    public enum Kind {
        /** Exactly one producer rank. */
        ONE_TO_ONE,
        /** Any rank produces; producers claim space by CAS. */
        MANY_TO_ONE
    }

    private final Group group;
    /** This rank, read once: offer and poll check it on every call. */
    private final int rank;
    private final SymmetricMemory memory;
    private final Kind kind;
    private final int producer;
    private final int consumer;
    private final int capacity;
    private final int mask;
    private final int maxPayload;
    /** The consumer's buffer as mapped here: header, positions and data. */
    private final MemorySegment ring;
    /** The data ring alone, handed to handlers. */
    private final MemorySegment data;
    private final Waiter waiter;
    /**
     * The ring's address, for the hot paths of offer and poll ({@link RingBufferLayout#address}), or -1 where the memory
     * has none or is closed: those paths then take the checked accesses, which throw on a closed ring. No access by
     * address needs a liveness check of its own: the ring's memory is this instance's alone and only {@link #close()}
     * unmaps it, from the one thread that uses the instance, after setting this to -1 (a plain field: the same thread
     * reads it on its next call).
     */
    private long ringAddress;
    /** The claim {@link #tryClaim(int, int)} and {@link #claim} hand out, reused message after message. */
    private final Claim ownClaim = new Claim();

    /**
     * Free bytes a claim needs beyond its record: one-to-one, the header word after it, which its producer zeroes
     * (see {@link RingBufferLayout}); many-to-one, none.
     */
    private final int trailingHeaderBytes;
    /** Whether this rank may offer: any rank of a many-to-one ring, the producer of a one-to-one ring. */
    private final boolean producerHere;
    /** Whether this rank polls. */
    private final boolean consumerHere;

    /** Producer side: the last HEAD read, so that a producer reads the consumer's line only when it must. */
    private long headCache;
    /**
     * Producer side: TAIL as this rank last wrote it. The one producer of a one-to-one ring alone writes TAIL, so it
     * never reads it back from the ring: a message costs the producer no load of the TAIL line (the store stays, for
     * {@link #size()}). A many-to-one producer starts its CAS from it (the TAIL its last claim left, or the one its
     * last failed CAS found), so a producer whose last claim was the latest claims with the CAS alone: no load of TAIL
     * before it, and, where producers on other cores claim too, one transfer of the TAIL line per claim instead of two
     * (a load fetches the line shared, the CAS then needs it exclusive).
     */
    private long tailPosition;
    /**
     * Consumer side: HEAD as this rank last wrote it. The consumer alone writes HEAD, so a poll starts from this field
     * instead of a load of the HEAD line; the release store of HEAD after each poll stays (producers acquire it).
     */
    private long headPosition;
    /** Whether this rank began closing the ring (its CLOSED words are written once). */
    private boolean closing;
    /** Consumer side: in-progress records at the head whose producer died, turned into padding. */
    private final AbandonedRecords abandonedRecords = new AbandonedRecords();

    private SymmetricRingBuffer(Group group, SymmetricMemory memory, Kind kind, int producer, int consumer,
                                int capacity) {
        this.group = group;
        this.rank = group.rank();
        this.memory = memory;
        this.kind = kind;
        this.producer = producer;
        this.consumer = consumer;
        this.capacity = capacity;
        this.mask = capacity - 1;
        this.maxPayload = RingBufferLayout.maxPayload(capacity);
        this.ring = memory.peer(consumer);
        this.data = ring.asSlice(DATA_OFFSET, capacity);
        this.waiter = SharedMemories.waiter(group);
        this.ringAddress = RingBufferLayout.address(ring);
        this.trailingHeaderBytes = kind == Kind.ONE_TO_ONE ? RECORD_HEADER_BYTES : 0;
        this.producerHere = kind == Kind.MANY_TO_ONE || rank == producer;
        this.consumerHere = rank == consumer;
        // a fresh ring (creation formats it): both positions start at 0 on every rank
        this.tailPosition = RingBufferLayout.tailPlain(ring);
        this.headPosition = RingBufferLayout.headPlain(ring);
    }

    /**
     * Collective: a ring with one producer rank and one consumer rank.
     *
     * @param group    this rank's group
     * @param producer the rank that offers, 0..worldSize-1
     * @param consumer the rank that polls, 0..worldSize-1
     * @param capacity data bytes, a power of two, at least 64
     * @return this rank's view of the ring; close it collectively
     * @throws IllegalArgumentException for a rank outside the group or a bad capacity (on every rank, before
     *         anything is allocated)
     * @throws UnsupportedOperationException where the group's transport cannot carry the ring
     */
    public static SymmetricRingBuffer oneToOne(Group group, int producer, int consumer, int capacity) {
        SharedMemories.checkRank(group, producer, "ring buffer producer");
        return create(group, Kind.ONE_TO_ONE, producer, consumer, capacity);
    }

    /**
     * Collective: a ring into which any rank (the consumer too) offers and which one consumer rank polls.
     *
     * @param group    this rank's group
     * @param consumer the rank that polls, 0..worldSize-1
     * @param capacity data bytes, a power of two, at least 64
     * @return this rank's view of the ring; close it collectively
     * @throws IllegalArgumentException for a rank outside the group or a bad capacity
     * @throws UnsupportedOperationException where the group's transport cannot carry the ring
     */
    public static SymmetricRingBuffer manyToOne(Group group, int consumer, int capacity) {
        return create(group, Kind.MANY_TO_ONE, -1, consumer, capacity);
    }

    private static SymmetricRingBuffer create(Group group, Kind kind, int producer, int consumer, int capacity) {
        Objects.requireNonNull(group, "group");
        SharedMemories.checkRank(group, consumer, "ring buffer consumer");
        checkCapacity(capacity);
        int kindCode = kind == Kind.ONE_TO_ONE ? RingBufferLayout.KIND_ONE_TO_ONE : RingBufferLayout.KIND_MANY_TO_ONE;
        SymmetricMemory memory = SharedMemories.allocate(group, RingBufferLayout.totalBytes(capacity), "ring buffer",
                "DeviceRingBuffer.oneToOne or manyToOne with the group's Communicator: a ring in GPU memory whose"
                        + " producers append on their streams");
        try {
            if (group.rank() == consumer) {
                RingBufferLayout.format(memory.local(), kindCode, capacity, producer, consumer);
            }
            memory.barrier(); // the consumer's header, written before it, is visible to every rank after it
            RingBufferLayout.verify(memory.peer(consumer), kindCode, capacity, producer, consumer);
            return new SymmetricRingBuffer(group, memory, kind, producer, consumer, capacity);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    /** Refuses a capacity that is not a power of two of at least {@link RingBufferLayout#MIN_CAPACITY}. */
    static void checkCapacity(int capacity) {
        if (capacity < RingBufferLayout.MIN_CAPACITY || Integer.bitCount(capacity) != 1) {
            throw new IllegalArgumentException("ring buffer capacity=" + capacity + " expected a power of two >= "
                    + RingBufferLayout.MIN_CAPACITY + " (fix: pass e.g. " + Math.max(RingBufferLayout.MIN_CAPACITY,
                    Integer.highestOneBit(Math.max(1, capacity)) << 1) + ")");
        }
    }

    /** {@return the ring's kind} */
    public Kind kind() {
        return kind;
    }

    /** {@return the consumer's rank} */
    public int consumer() {
        return consumer;
    }

    /** {@return data bytes of the ring} */
    public int capacity() {
        return capacity;
    }

    /** {@return the largest payload an offer takes, in bytes: an eighth of the capacity less the record header} */
    public int maxPayload() {
        return maxPayload;
    }

    /**
     * Bytes claimed and not yet consumed, as seen now (a snapshot; other ranks move it).
     *
     * @return bytes in the ring, records and padding, 0..capacity
     */
    public int size() {
        long head = RingBufferLayout.headAcquire(ring);
        long tail = RingBufferLayout.tailAcquire(ring);
        return (int) Math.max(0, Math.min(capacity, tail - head));
    }

    // ------------------------------------------------------------------------------------------ producer side

    /**
     * Writes a message if the ring has room now.
     *
     * @param msgTypeId the message's type, at least 1, handed to the consumer's handler
     * @param src       the bytes
     * @param offset    where the payload starts in {@code src}
     * @param length    payload bytes, 0..{@link #maxPayload()}
     * @return true when written, false when the ring is full (nothing written)
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()} or a type below 1
     * @throws IllegalStateException on a rank that is not this ring's producer
     */
    public boolean offer(int msgTypeId, MemorySegment src, long offset, int length) {
        checkOffer(msgTypeId, length);
        // before the claim: a copy that failed after it would leave a claimed record that is never committed
        Objects.checkFromIndexSize(offset, length, src.byteSize());
        int index = reserve(length);
        if (index < 0) {
            return false;
        }
        // the payload, in PayloadCopy's order of cache lines: plain stores, published by the commit below
        PayloadCopy.copy(src, offset, ringAddress, data, index + RECORD_HEADER_BYTES, length,
                PayloadCopy.HEADER_LINE_FIRST);
        // release: publishes the payload to the consumer's acquire of the header word
        commitRecord(index, length + RECORD_HEADER_BYTES, msgTypeId);
        return true;
    }

    /** Publishes a record by one release store of its header word: by address where the ring has one. */
    private void commitRecord(int index, int recordLength, int type) {
        if (ringAddress >= 0) {
            // release: publishes the payload written before it to the consumer's acquire of the header word
            RingBufferLayout.commitRecordAt(ringAddress, index, recordLength, type);
        } else {
            // release: as above, through the checked segment (which throws on a closed ring)
            RingBufferLayout.commitRecord(ring, index, recordLength, type);
        }
    }

    /**
     * Writes a whole array if the ring has room now.
     *
     * @param msgTypeId the message's type, at least 1
     * @param src       the payload, at most {@link #maxPayload()} bytes
     * @return true when written, false when the ring is full
     */
    public boolean offer(int msgTypeId, byte[] src) {
        return offer(msgTypeId, MemorySegment.ofArray(src), 0, src.length);
    }

    /**
     * Writes a message, waiting while the ring is full: bounded by the group's timeout.
     *
     * @param msgTypeId the message's type, at least 1
     * @param src       the bytes
     * @param offset    where the payload starts in {@code src}
     * @param length    payload bytes, 0..{@link #maxPayload()}
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()} or a type below 1
     * @throws org.symmem4j.parallel.PeerTimeoutException naming the consumer when it does not free room within
     *         the timeout, has exited, or the group was aborted
     */
    public void put(int msgTypeId, MemorySegment src, long offset, int length) {
        if (offer(msgTypeId, src, offset, length)) {
            return;
        }
        var subject = waitForRoom(length, "ring buffer put");
        waiter.begin();
        while (!offer(msgTypeId, src, offset, length)) {
            waiter.idle(subject);
        }
    }

    private WaitSubject waitForRoom(int length, String what) {
        int required = RingBufferLayout.align(length + RECORD_HEADER_BYTES);
        return endingWhenPeersClose(SharedMemories.waitFor(group, consumer, what,
                () -> "free room for a record of bytes=" + required + " (in the ring now: " + size() + " of capacity="
                        + capacity + ")",
                "the consumer does not poll: poll more often, give the ring more capacity, or raise symmem4j.timeout.ms"),
                what, false);
    }

    /**
     * {@code inner}, which also ends, with {@link org.symmem4j.parallel.PeerTimeoutException.Reason#PEER_LEFT}, once the
     * ranks it waits on began closing this ring ({@link PeersClosingWait}): for a message ({@code forMessage}), the one
     * producer, or every other rank of a many-to-one ring, while the ring is still empty at its head; for room, the
     * consumer.
     */
    private WaitSubject endingWhenPeersClose(WaitSubject inner, String operation, boolean forMessage) {
        if (!forMessage) {
            return new PeersClosingWait(inner, group, operation, List.of(consumer), "room freed by consumer rank="
                    + consumer, "it will not poll again",
                    "make every rank offer only what the consumer polls before it closes",
                    () -> RingBufferLayout.consumerClosedAcquire(ring));
        }
        return PeersClosingWait.forMessage(inner, group, operation, kind == Kind.ONE_TO_ONE ? producer : -1, "offer",
                producers -> producersClosedOnEmptyRing());
    }

    /**
     * Whether every rank that could offer into this ring began closing it while its head holds no record: checked
     * after the closing words (acquire), whose release by a producer follows everything it committed, so a record it
     * offered before closing is seen at the head here and ends no wait.
     */
    private boolean producersClosedOnEmptyRing() {
        // many-to-one: every other rank (a group of one has none, and its wait keeps the timeout)
        boolean closed = kind == Kind.ONE_TO_ONE ? RingBufferLayout.producerClosedAcquire(ring)
                : group.worldSize() > 1 && RingBufferLayout.closedAcquire(ring) >= group.worldSize() - 1;
        return closed && RingBufferLayout.recordHeaderAcquire(ring, (int) headPosition & mask) == 0;
    }

    /**
     * Writes a whole array, waiting while the ring is full (see {@link #put(int, MemorySegment, long, int)}).
     *
     * @param msgTypeId the message's type, at least 1
     * @param src       the payload
     */
    public void put(int msgTypeId, byte[] src) {
        put(msgTypeId, MemorySegment.ofArray(src), 0, src.length);
    }

    /**
     * Claims the room of one record for a payload of {@code length} bytes, to be written in place (zero-copy):
     * encode the message into {@link Claim#buffer()} at {@link Claim#offset()} (or into {@link Claim#segment()}),
     * then {@link Claim#commit()} or {@link Claim#abort()} it. Until then the consumer sees nothing of it, and
     * records written after it wait behind it. The claim is this ring's own, reused by the next call: commit or
     * abort it first (several claims open at once take a {@link Claim} each, {@link #tryClaim(int, int, Claim)}).
     *
     * <pre>{@code
     * SymmetricRingBuffer.Claim claim = ring.tryClaim(7, 16);
     * if (claim != null) {
     *     claim.buffer().set(ValueLayout.JAVA_LONG_UNALIGNED, claim.offset(), orderId);
     *     claim.buffer().set(ValueLayout.JAVA_LONG_UNALIGNED, claim.offset() + 8, price);
     *     claim.commit();
     * }
     * }</pre>
     *
     * @param msgTypeId the message's type, at least 1, handed to the consumer's handler
     * @param length    payload bytes, 0..{@link #maxPayload()}
     * @return the open claim, or null when the ring is full (nothing claimed)
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()} or a type below 1
     * @throws IllegalStateException on a rank that is not this ring's producer, or while this ring's own claim is
     *         still open
     */
    public Claim tryClaim(int msgTypeId, int length) {
        return tryClaim(msgTypeId, length, ownClaim) ? ownClaim : null;
    }

    /**
     * As {@link #tryClaim(int, int)}, into a claim of the caller's ({@code new SymmetricRingBuffer.Claim()}, reused
     * from one message to the next), so that several claims may be open at once; the consumer reads them in the
     * order they were claimed.
     *
     * @param msgTypeId the message's type, at least 1
     * @param length    payload bytes, 0..{@link #maxPayload()}
     * @param claim     a claim that is not open
     * @return true when {@code claim} now holds room in this ring, false when the ring is full
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()} or a type below 1
     * @throws IllegalStateException on a rank that is not this ring's producer, or when {@code claim} is open
     */
    public boolean tryClaim(int msgTypeId, int length, Claim claim) {
        checkOffer(msgTypeId, length);
        if (Objects.requireNonNull(claim, "claim").open) {
            throw new IllegalStateException("ring buffer tryClaim: the claim is still open (payload bytes="
                    + claim.length + " at offset=" + claim.offset() + "; fix: commit() or abort() it first, or pass"
                    + " another Claim to keep several open)");
        }
        int index = reserve(length);
        if (index < 0) {
            return false;
        }
        // a one-to-one claim stays unmarked: its header word is 0 (zeroed by the record before it), so the consumer
        // waits at it as at an offer being copied; a many-to-one claim was marked with this rank by reserve
        claim.open(this, index, length, msgTypeId);
        return true;
    }

    /**
     * Claims room as {@link #tryClaim(int, int)}, waiting while the ring is full: bounded by the group's timeout.
     *
     * @param msgTypeId the message's type, at least 1
     * @param length    payload bytes, 0..{@link #maxPayload()}
     * @return this ring's own claim, open
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()} or a type below 1
     * @throws IllegalStateException while this ring's own claim is still open
     * @throws org.symmem4j.parallel.PeerTimeoutException naming the consumer when it does not free room within
     *         the timeout, has exited, or the group was aborted
     */
    public Claim claim(int msgTypeId, int length) {
        if (tryClaim(msgTypeId, length, ownClaim)) {
            return ownClaim;
        }
        var subject = waitForRoom(length, "ring buffer claim");
        waiter.begin();
        while (!tryClaim(msgTypeId, length, ownClaim)) {
            waiter.idle(subject);
        }
        return ownClaim;
    }

    /**
     * The room of one record handed out by {@link #tryClaim(int, int)}: write the payload into it, then
     * {@link #commit()} or {@link #abort()} it, once. A claim object is reused: after its commit or abort it holds
     * nothing until the next {@code tryClaim}. Like its ring, one thread uses it.
     */
    public static final class Claim {
        /**
         * The ring of the last claim, kept after its commit or abort: a claim reused on the same ring (the common case)
         * writes no reference per message, so it costs no garbage collector's write barrier.
         */
        private SymmetricRingBuffer ring;
        /** Whether the claim holds room not yet committed or aborted. */
        private boolean open;
        /** Byte index of the record (its header word) in the data ring. */
        private int index;
        private int length;
        private int type;

        /** An empty claim, for {@link SymmetricRingBuffer#tryClaim(int, int, Claim)}. */
        public Claim() {
        }

        private void open(SymmetricRingBuffer ring, int index, int length, int type) {
            this.index = index;
            this.length = length;
            this.type = type;
            if (this.ring != ring) {
                this.ring = ring;
            }
            this.open = true;
        }

        /** {@return whether the claim holds room not yet committed or aborted} */
        public boolean isOpen() {
            return open;
        }

        /**
         * The ring's data as mapped in this process; the claimed payload is {@link #length()} bytes at
         * {@link #offset()}. Writing outside them corrupts other records: {@link #segment()} is the bounded view.
         *
         * @return the data ring
         * @throws IllegalStateException when the claim is not open
         */
        public MemorySegment buffer() {
            return openRing().data;
        }

        /**
         * Where the payload starts in {@link #buffer()}.
         *
         * @return byte offset
         * @throws IllegalStateException when the claim is not open
         */
        public long offset() {
            openRing();
            return (long) index + RECORD_HEADER_BYTES;
        }

        /**
         * {@return payload bytes claimed}
         *
         * @throws IllegalStateException when the claim is not open
         */
        public int length() {
            openRing();
            return length;
        }

        /**
         * The payload's room as a segment of its own (a new view per call; for the hottest loops write through
         * {@link #buffer()} at {@link #offset()}, which creates none).
         *
         * @return {@link #length()} bytes
         * @throws IllegalStateException when the claim is not open
         */
        public MemorySegment segment() {
            return openRing().data.asSlice((long) index + RECORD_HEADER_BYTES, length);
        }

        /**
         * Publishes the message: one release store of its header word, as {@link SymmetricRingBuffer#offer} does.
         *
         * @throws IllegalStateException when the claim is not open (committed or aborted already)
         */
        public void commit() {
            SymmetricRingBuffer r = openRing();
            open = false;
            // release: publishes the payload the caller wrote into the claim to the consumer's acquire of the header
            r.commitRecord(index, length + RECORD_HEADER_BYTES, type);
        }

        /**
         * Gives the room up: the record becomes padding, which the consumer skips and frees; nothing of it is read.
         *
         * @throws IllegalStateException when the claim is not open (committed or aborted already)
         */
        public void abort() {
            SymmetricRingBuffer r = openRing();
            open = false;
            // release: the padding header, read by the consumer's acquire; it frees the record without reading it
            r.commitRecord(index, length + RECORD_HEADER_BYTES, PADDING_TYPE);
        }

        private SymmetricRingBuffer openRing() {
            if (!open) {
                throw new IllegalStateException("ring buffer claim: not open (committed or aborted already, or never"
                        + " claimed; fix: tryClaim again, and commit or abort each claim once)");
            }
            return ring;
        }

        @Override
        public String toString() {
            return !open ? "Claim[closed]" : "Claim[offset=" + ((long) index + RECORD_HEADER_BYTES) + ", length="
                    + length + ", type=" + type + "]";
        }
    }

    /** One predictable branch per message; the reasons are sorted out on the way to the exception. */
    private void checkOffer(int msgTypeId, int length) {
        if (Integer.compareUnsigned(length, maxPayload) > 0 | msgTypeId < 1 | !producerHere) {
            refuseOffer(msgTypeId, length);
        }
    }

    private void refuseOffer(int msgTypeId, int length) {
        checkType(msgTypeId);
        if (length < 0 || length > maxPayload) {
            throw new IllegalArgumentException("ring buffer message length=" + length + " bytes, expected 0.."
                    + maxPayload + " (an eighth of capacity=" + capacity + " less the " + RECORD_HEADER_BYTES
                    + "-byte header; fix: split the message or create the ring with capacity >= "
                    + Integer.highestOneBit(Math.max(1, (length + RECORD_HEADER_BYTES) * 8 - 1)) * 2L + ")");
        }
        if (!producerHere) {
            throw new IllegalStateException("one-to-one ring buffer: rank=" + rank + " offered, but its producer"
                    + " is rank=" + producer + " (fix: create a many-to-one ring for several producers)");
        }
        throw org.symmem4j.parallel.Invariants.violated("ring buffer offer refused with nothing to refuse: msgTypeId="
                + msgTypeId + " length=" + length + " maxPayload=" + maxPayload);
    }

    private static void checkType(int msgTypeId) {
        if (msgTypeId < 1) {
            throw new IllegalArgumentException("ring buffer msgTypeId=" + msgTypeId + " expected >= 1 (fix:"
                    + " pass a positive message type)");
        }
    }

    /**
     * Reserves room for a record and returns its index in the data ring, the record marked in progress (many-to-one)
     * or still free (one-to-one, whose consumer waits for the one producer's commit); -1 when full.
     */
    private int reserve(int length) {
        int recordLength = length + RECORD_HEADER_BYTES;
        int required = RingBufferLayout.align(recordLength);
        // the common claim of either kind, in a few instructions and by address: no padding before the end of the ring,
        // room by the cached HEAD (one-to-one: for the header word after the record too), and, many-to-one, the CAS from
        // the TAIL this producer last left wins. Anything else (the wrap, a full-looking ring, another producer's claim
        // first, memory without an address or closed) takes the general claim out of line, so that offer stays small
        // enough for the JIT to inline into a producer's loop
        long tail = tailPosition;
        int tailIndex = (int) tail & mask;
        if (ringAddress >= 0 & required <= capacity - tailIndex
                & required + trailingHeaderBytes <= capacity - (tail - headCache)) {
            long next = tail + required;
            if (kind == Kind.ONE_TO_ONE) {
                // the word after the record will be the next record's header: zeroed now, published by this record's
                // commit (a release), so the consumer, which reads it only after that commit, never sees an earlier
                // lap. Stored before the first store to the record's own header line, in Agrona's order (its
                // claimCapacity zeroes the next header before write stores its in-progress length): the line the
                // consumer spins on is taken from it only once this one (the record's second line, or a third) is
                // owned, so that, where stores leave in program order, the consumer cannot read the header line back
                // while the producer still waits for this one (bench/results/2026-11-30-ring-round-trip-lines.md)
                RingBufferLayout.zeroRecordHeaderAt(ringAddress, (tailIndex + required) & mask);
                tailPosition = next;
                // release: the producer's own position (read by size() only; the consumer follows headers)
                RingBufferLayout.tailReleaseAt(ringAddress, next);
                if (PayloadCopy.HEADER_LINE_FIRST) {
                    // the record's own header word, which holds 0 (free) already: zeroed by the record before it (or
                    // the format) and not yet committed. A plain store of the same value publishes nothing and needs no
                    // pair; it is the record's first store to the line the consumer spins on, before the payload, so
                    // that the fetch of that line overlaps the copy (Agrona's write stores its in-progress length there
                    // at this point; a many-to-one claim's mark below does the same). See PayloadCopy.
                    RingBufferLayout.zeroRecordHeaderAt(ringAddress, tailIndex);
                }
                return tailIndex;
            }
            // volatile CAS, the linearization point of the claim, as in claimManyToOne; a failure returns the TAIL
            // another producer's winning CAS (which it pairs with) left, where the general claim starts again
            long found = RingBufferLayout.tailCompareAndExchangeAt(ringAddress, tail, next);
            if (found == tail) {
                tailPosition = next;
                // release: orders the mark after the claim (see markRecordInProgress)
                RingBufferLayout.markRecordInProgressAt(ringAddress, tailIndex, recordLength, rank);
                return tailIndex;
            }
            tailPosition = found;
        }
        return kind == Kind.ONE_TO_ONE ? claimOneToOne(recordLength, required) : claimManyToOne(recordLength, required);
    }

    private int claimOneToOne(int recordLength, int required) {
        long tail = tailPosition; // only this rank writes TAIL: what it wrote last
        int tailIndex = (int) tail & mask;
        int toEnd = capacity - tailIndex;
        int padding = required > toEnd ? toEnd : 0;
        // the record, and the header word after it that this producer zeroes (see RingBufferLayout)
        int needed = padding + required + RECORD_HEADER_BYTES;
        if (needed > capacity - (tail - headCache)) {
            // acquire: pairs with the consumer's release of HEAD; it has read the records before it, so their
            // bytes may be written again
            headCache = RingBufferLayout.headAcquire(ring);
            if (needed > capacity - (tail - headCache)) {
                return -1;
            }
        }
        if (padding != 0) {
            // the record's header at 0 holds bytes of an earlier lap: zero it before the padding record, which
            // leads the consumer there, is published
            RingBufferLayout.zeroRecordHeader(ring, 0);
            // release: publishes the zeroed header at 0 to the consumer's acquire of the padding record's header
            RingBufferLayout.commitRecord(ring, tailIndex, padding, PADDING_TYPE);
            tailIndex = 0;
        }
        // the word after the record will be the next record's header: zeroed now, published by this record's
        // commit (a release), so the consumer, which reads it only after that commit, never sees an earlier lap there
        RingBufferLayout.zeroRecordHeader(ring, (tailIndex + required) & mask);
        // release: the producer's own position (read by size() only; the consumer follows headers)
        tailPosition = tail + padding + required;
        RingBufferLayout.tailRelease(ring, tailPosition);
        return tailIndex;
    }

    private int claimManyToOne(int recordLength, int required) {
        long head = headCache;
        long tail = tailPosition; // TAIL as this rank's last claim left it or found it: right unless another rank claimed
        int tailIndex;
        int padding;
        while (true) {
            tailIndex = (int) tail & mask;
            int toEnd = capacity - tailIndex;
            padding = required > toEnd ? toEnd : 0;
            // a stale tail is at most TAIL (it only grows): full with it is full with TAIL; room with it is checked again
            // by the CAS below, which fails unless the tail is TAIL itself
            if (required + padding > capacity - (tail - head)) {
                // acquire: pairs with the consumer's release of HEAD; the records it zeroed before are seen as free
                head = RingBufferLayout.headAcquire(ring);
                headCache = head;
                if (required + padding > capacity - (tail - head)) {
                    return -1;
                }
            }
            long next = tail + padding + required;
            // volatile CAS, the linearization point of the claim; on failure it returns the TAIL another rank's claim
            // (its winning CAS, which it pairs with) left, so that the retry needs no load of TAIL of its own
            long found = RingBufferLayout.tailCompareAndExchange(ring, tail, next);
            if (found == tail) {
                tailPosition = next;
                break;
            }
            tail = found;
        }
        if (padding != 0) {
            // release: a padding record carries nothing; the consumer's acquire of its header skips it
            RingBufferLayout.commitRecord(ring, tailIndex, padding, PADDING_TYPE);
            tailIndex = 0;
        }
        RingBufferLayout.markRecordInProgress(ring, tailIndex, recordLength, rank);
        return tailIndex;
    }

    // ------------------------------------------------------------------------------------------ consumer side

    /**
     * Hands up to {@code limit} messages that are in the ring now to {@code handler}, in order, and frees their
     * room. Returns at once when there are none.
     *
     * @param handler receives each message (zero-copy, valid during the call)
     * @param limit   the most messages handed out, at least 1
     * @return messages handed out
     * @throws IllegalStateException on a rank that is not the consumer
     */
    public int poll(MessageHandler handler, int limit) {
        if (!consumerHere | limit < 1) {
            refusePoll(limit);
        }
        long head = headPosition; // only the consumer writes HEAD: what it wrote last
        int headIndex = (int) head & mask;
        int bytesRead = 0;
        int messages = 0;
        // one loop, one handler call site, on past the ring's end in the same pass (the index wraps): the whole poll is
        // one small method, so that a spinning caller's loop inlines it whichever of the two the JIT compiles first;
        // at most a capacity of bytes, so that a full ring's first record, not yet freed, is not read twice
        try {
            while (bytesRead < capacity && messages < limit) {
                int index = (headIndex + bytesRead) & mask;
                // acquire: pairs with the producer's release in commitRecord; the payload written before it is seen
                long header = recordHeaderAcquire(index);
                int length = RingBufferLayout.recordLength(header);
                if (length <= 0) {
                    if (length < 0 && abandonIfProducerDead(index, header)) {
                        continue; // now padding: read again
                    }
                    break;
                }
                // RingBufferLayout.align written out: next to a spinning caller's empty polls the JIT finds this path
                // rare, and calls rather than inlines any method above a few bytecodes on it
                bytesRead += (length + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT;
                int type = RingBufferLayout.recordTypeOrRank(header);
                if (type != PADDING_TYPE) {
                    messages++;
                    handler.onMessage(type, data, index + RECORD_HEADER_BYTES, length - RECORD_HEADER_BYTES);
                }
            }
        } catch (Throwable t) {
            // a handler threw: what was read up to it (its own record included) is freed, as on a return
            if (bytesRead > 0) {
                free(head, headIndex, bytesRead);
            }
            throw t;
        }
        if (bytesRead > 0) {
            // the common free in line (a catch instead of a finally, whose body the compiler writes twice): one-to-one
            // with an address, one store; anything else out of line
            if (kind == Kind.ONE_TO_ONE & ringAddress >= 0) {
                // release: the records before it are read; publishes their room as free to the producer's acquire of
                // HEAD (one-to-one: nothing to zero, the producer zeroes the header word after its record)
                headPosition = head + bytesRead;
                RingBufferLayout.headReleaseAt(ringAddress, headPosition);
            } else {
                free(head, headIndex, bytesRead);
            }
        }
        return messages;
    }

    private void refusePoll(int limit) {
        if (!consumerHere) {
            throw new IllegalStateException("ring buffer poll on rank=" + rank + ": only the consumer rank="
                    + consumer + " polls (fix: poll on that rank only)");
        }
        throw new IllegalArgumentException("ring buffer poll limit=" + limit + " expected >= 1 (fix: pass"
                + " how many messages to read at most, e.g. 16)");
    }

    /** A record's header word with acquire: by address where the ring has one (see {@link #ringAddress}). */
    private long recordHeaderAcquire(int index) {
        // acquire: pairs with the producer's release in commitRecord (commitRecordAt); the same load either way
        return ringAddress >= 0 ? RingBufferLayout.recordHeaderAcquireAt(ringAddress, index)
                : RingBufferLayout.recordHeaderAcquire(ring, index);
    }

    /**
     * Frees the {@code bytesRead} bytes read from {@code head} (at {@code headIndex}, possibly on past the ring's end):
     * many-to-one (zeroing what was read), or memory without an address; out of {@link #poll}'s loop, so that the loop
     * a spinning consumer runs on every empty poll stays small.
     */
    private void free(long head, int headIndex, int bytesRead) {
        if (kind == Kind.MANY_TO_ONE) {
            // a many-to-one producer cannot zero the word after its record (another may own it already): the consumer
            // leaves the room it frees zeroed (see RingBufferLayout), in two runs where the poll read past the end
            int first = Math.min(bytesRead, capacity - headIndex);
            RingBufferLayout.zeroData(ring, headIndex, first);
            if (bytesRead > first) {
                RingBufferLayout.zeroData(ring, 0, bytesRead - first);
            }
        }
        // release: the records before it are read (and, many-to-one, zeroed); publishes their room as free to the
        // producers' acquire of HEAD
        headPosition = head + bytesRead;
        RingBufferLayout.headRelease(ring, headPosition);
    }

    /**
     * Waits until at least one message is in the ring, then hands up to {@code limit} to {@code handler}; bounded
     * by the group's timeout.
     *
     * @param handler receives each message
     * @param limit   the most messages handed out, at least 1
     * @return messages handed out, at least 1
     * @throws org.symmem4j.parallel.PeerTimeoutException when no message arrives within the timeout, naming the
     *         producer (every other rank for a many-to-one ring), or when the one producer has exited
     */
    public int take(MessageHandler handler, int limit) {
        int n = poll(handler, limit);
        if (n > 0) {
            return n;
        }
        var subject = endingWhenPeersClose(SharedMemories.waitFor(group, kind == Kind.ONE_TO_ONE ? producer : -1,
                "ring buffer take", () -> "a message (in the ring now: " + size() + " bytes claimed, not yet committed)",
                "no producer offered: check that the producers run, or raise symmem4j.timeout.ms"), "ring buffer take",
                true);
        waiter.begin();
        while ((n = poll(handler, limit)) == 0) {
            waiter.idle(subject);
        }
        return n;
    }

    /**
     * Records the consumer skipped because their producer died while writing them.
     *
     * @return the count on this (consumer) rank
     */
    public long abandonedRecords() {
        return abandonedRecords.count();
    }

    private boolean abandonIfProducerDead(int index, long header) {
        return abandonedRecords.abandonIfProducerDead(ring, group, index, header);
    }

    /** Collective: frees the ring's memory once every rank has stopped using it. */
    @Override
    public void close() {
        if (!closing) {
            closing = true;
            // before the collective free, while every rank still maps the ring: a peer waiting in take or put for this
            // rank sees it and stops, instead of waiting, as this rank does in the free, until the timeout
            RingBufferLayout.markClosing(ring, kind == Kind.ONE_TO_ONE && rank == producer, consumerHere);
        }
        ringAddress = -1; // before the unmap: a call after close takes the checked accesses, which throw
        memory.close();
    }

    @Override
    public String toString() {
        return "SymmetricRingBuffer[" + kind + ", consumer=" + consumer + (kind == Kind.ONE_TO_ONE ? ", producer="
                + producer : "") + ", capacity=" + capacity + ", rank=" + rank + "]";
    }
}
