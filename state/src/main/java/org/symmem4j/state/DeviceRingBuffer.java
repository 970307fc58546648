package org.symmem4j.state;

import static org.symmem4j.parallel.layout.RingBufferLayout.DATA_OFFSET;
import static org.symmem4j.parallel.layout.RingBufferLayout.PADDING_TYPE;
import static org.symmem4j.parallel.layout.RingBufferLayout.RECORD_HEADER_BYTES;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import java.util.Objects;

import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceRings;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.DeviceRingLayout;
import org.symmem4j.parallel.layout.RingBufferLayout;
import org.symmem4j.parallel.sync.Waiter;
import org.symmem4j.state.SymmetricRingBuffer.Kind;

/**
 * The GPU form of {@link SymmetricRingBuffer}: a bounded ring of variable-length messages in the consumer's GPU
 * symmetric memory, whose producers append <b>on their streams</b>. A message made by a kernel is appended by the
 * next work on the same stream, with no host synchronize in between:
 *
 * <pre>{@code
 * try (DeviceRingBuffer ring = DeviceRingBuffer.oneToOne(comm, 1, 0, 1 << 20)) {     // collective
 *     if (comm.group().rank() == 1) {
 *         myKernel.launch(...);                     // writes the message into the device buffer msg
 *         ring.putAsync(7, msg);                    // after it on this rank's stream; returns at once
 *         ring.flush();                             // synchronize; throws if the consumer left no room in time
 *     } else {
 *         ring.take((type, buf, off, len) -> gpu.copyToHost(host, buf.asSlice(off, len)), 16); // device bytes in place
 *     }
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>What runs on the producer's stream</b>: {@link #putAsync} enqueues one kernel ({@link DeviceRings}): it
 *       waits, on the GPU and bounded, until the consumer's HEAD leaves room (acquire at system scope), claims the
 *       room (one-to-one: a store of TAIL; many-to-one: {@code atomicCAS} at system scope on TAIL, so producers on
 *       several GPUs or streams share one ring), copies the payload from the device buffer into the consumer's
 *       ring, fences at system scope ({@code __threadfence_system}) and publishes the record with one release store
 *       of its header word.</li>
 *   <li><b>What the host drives</b>: the consumer polls from the host: it copies the header word at HEAD (a copy
 *       made after the producer's release shows the payload too), hands the payload <b>in place</b> to the handler
 *       as device memory, then zeroes the records it read and moves HEAD on, by synchronous copies made in that
 *       order (the release that producers' kernels acquire). The handler must have read the payload when it returns
 *       (e.g. {@link DeviceCommunicator#copyToHost}, or a kernel and {@link DeviceCommunicator#synchronize}).</li>
 *   <li><b>Back-pressure</b>: an append that finds no room within its wait ({@link #putAsync(int, MemorySegment,
 *       Duration)}; the group's timeout by default) writes nothing, and every later append of this rank is dropped
 *       too, so the consumer never sees a message without those before it; {@link #flush()} then throws a
 *       {@link PeerTimeoutException} naming the consumer and the count dropped. {@link #offer} is synchronous and
 *       returns false when the ring is full.</li>
 *   <li><b>Sizes</b>: 0..{@link #maxPayload()} bytes (an eighth of the capacity less the 8-byte header); a larger
 *       message is refused with an {@link IllegalArgumentException} before anything is enqueued.</li>
 * </ul>
 *
 * One thread per rank uses an instance; the consumer is the only rank that polls. Created on a {@link Communicator}
 * of a GPU group whose ranks map each other's memory (CUDA symmetric memory on one machine); refused elsewhere. The
 * layout is {@link DeviceRingLayout}'s. Unlike the host ring, a producer's death is not survived: a GPU rank that
 * dies takes its context, and the consumer's {@link #take} times out naming it. A rank that closes the ring (its
 * try-with-resources, after its code failed too) ends its peers' waits on it at once, as the host ring's close does:
 * see {@link #close()}.
 */
public final class DeviceRingBuffer implements AutoCloseable {

    private final Group group;
    private final int rank;
    private final SymmetricMemory memory;
    private final DeviceRings rings;
    private final DeviceCommunicator gpu;
    private final Kind kind;
    private final int producer;
    private final int consumer;
    private final int capacity;
    private final int maxPayload;
    private final boolean producerHere;
    private final boolean consumerHere;
    /** The consumer's data ring as device memory of this rank, handed to handlers (consumer only). */
    private final MemorySegment data;
    /** Host words for the header, HEAD and status copies. */
    private final Arena arena = Arena.ofShared();
    private final MemorySegment word;
    private final Waiter waiter;
    /** Consumer side: HEAD as this rank last wrote it (it alone writes HEAD). */
    private long headPosition;
    /** Whether this rank began closing the ring (its CLOSED word is written once). */
    private boolean closing;

    private DeviceRingBuffer(Group group, SymmetricMemory memory, DeviceRings rings, DeviceCommunicator gpu, Kind kind,
                             int producer, int consumer, int capacity) {
        this.group = group;
        this.rank = group.rank();
        this.memory = memory;
        this.rings = rings;
        this.gpu = gpu;
        this.kind = kind;
        this.producer = producer;
        this.consumer = consumer;
        this.capacity = capacity;
        this.maxPayload = RingBufferLayout.maxPayload(capacity);
        this.producerHere = kind == Kind.MANY_TO_ONE || rank == producer;
        this.consumerHere = rank == consumer;
        this.data = memory.local().asSlice(DATA_OFFSET, capacity);
        this.word = arena.allocate(Long.BYTES, Long.BYTES);
        this.waiter = SharedMemories.waiter(group);
    }

    /**
     * Collective: a ring with one producer rank and one consumer rank, in the consumer's GPU memory.
     *
     * @param comm     a communicator of this rank's GPU group
     * @param producer the rank that appends, 0..worldSize-1
     * @param consumer the rank that polls, 0..worldSize-1
     * @param capacity data bytes, a power of two, at least 64
     * @return this rank's view of the ring; close it collectively, before the communicator
     * @throws IllegalArgumentException for a rank outside the group, a bad capacity, or ranks that disagree on them
     *         (on every rank, before anything is allocated)
     * @throws UnsupportedOperationException on a host communicator, or where peers' GPU memory is not mapped here
     */
    public static DeviceRingBuffer oneToOne(Communicator comm, int producer, int consumer, int capacity) {
        Objects.requireNonNull(comm, "comm");
        SharedMemories.checkRank(comm.group(), producer, "device ring buffer producer");
        return create(comm, Kind.ONE_TO_ONE, producer, consumer, capacity);
    }

    /**
     * Collective: a ring into which any rank (the consumer too) appends, each on its own stream, and which one
     * consumer rank polls. Producers claim room by {@code atomicCAS} at system scope on the ring's TAIL.
     *
     * @param comm     a communicator of this rank's GPU group
     * @param consumer the rank that polls, 0..worldSize-1
     * @param capacity data bytes, a power of two, at least 64
     * @return this rank's view of the ring; close it collectively, before the communicator
     * @throws IllegalArgumentException for a rank outside the group, a bad capacity, or ranks that disagree on them
     * @throws UnsupportedOperationException on a host communicator, or where peers' GPU memory is not mapped here
     */
    public static DeviceRingBuffer manyToOne(Communicator comm, int consumer, int capacity) {
        Objects.requireNonNull(comm, "comm");
        return create(comm, Kind.MANY_TO_ONE, -1, consumer, capacity);
    }

    private static DeviceRingBuffer create(Communicator comm, Kind kind, int producer, int consumer, int capacity) {
        Group group = comm.group();
        SharedMemories.checkRank(group, consumer, "device ring buffer consumer");
        SymmetricRingBuffer.checkCapacity(capacity);
        DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow(() ->
                new UnsupportedOperationException("device ring buffer on communicator=" + comm + ": not a GPU"
                        + " communicator (fix: SymmetricRingBuffer.oneToOne or manyToOne with the group, for a ring in"
                        + " host memory)"));
        SharedMemories.agree(group, "device ring buffer", "device-ring-create", kind + " producer=" + producer
                + " consumer=" + consumer + " capacity=" + capacity, "create the ring on every rank with the same kind,"
                + " producer, consumer and capacity");
        int kindCode = kind == Kind.ONE_TO_ONE ? RingBufferLayout.KIND_ONE_TO_ONE : RingBufferLayout.KIND_MANY_TO_ONE;
        // the barrier after the format: every rank's zeroing and the consumer's header, before any producer appends
        return SharedMemories.createOnDevice(group, DeviceRingLayout.totalBytes(capacity), "device ring buffer",
                DeviceRings.class, "stream-ordered appends", "a CUDA group, CudaTransport",
                // zeroed: ring, TAIL, HEAD and this rank's status word 0
                (memory, rings) -> {
                    if (group.rank() == consumer) {
                        SharedMemories.writeHeader(DATA_OFFSET,
                                header -> RingBufferLayout.formatHeader(header, kindCode, capacity, producer, consumer),
                                header -> rings.writeNow(header, 0),
                                back -> rings.readNow(0, back),
                                back -> DeviceRingLayout.verifyFresh(back, kindCode, capacity, producer, consumer));
                    }
                },
                (memory, rings) -> new DeviceRingBuffer(group, memory, rings, gpu, kind, producer, consumer, capacity));
    }

    /** {@return the ring's kind} */
    public Kind kind() {
        return kind;
    }

    /** {@return the data capacity in bytes} */
    public int capacity() {
        return capacity;
    }

    /** {@return the largest payload a message may have} */
    public int maxPayload() {
        return maxPayload;
    }

    /** {@return the consumer rank} */
    public int consumer() {
        return consumer;
    }

    // ------------------------------------------------------------------------------------------ producer side

    /**
     * Enqueues the append of {@code src} on this rank's stream (after the work enqueued there before, e.g. the kernel
     * that wrote {@code src}) and returns at once. The kernel waits for room at most the group's timeout; see
     * {@link #putAsync(int, MemorySegment, Duration)}.
     *
     * @param msgTypeId the message's type, at least 1
     * @param src       the payload, device memory of this rank, 0..{@link #maxPayload()} bytes; read when the
     *                  kernel runs, so keep it unchanged until then
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()} or a type below 1 (nothing enqueued)
     * @throws IllegalStateException on a rank that is not a producer of this ring
     */
    public void putAsync(int msgTypeId, MemorySegment src) {
        putAsync(msgTypeId, src, group.options().timeout());
    }

    /**
     * As {@link #putAsync(int, MemorySegment)}, with the time the kernel waits for room. An append that finds no room
     * in time writes nothing into the ring, and every later append of this rank is dropped as well until
     * {@link #flush()} reports them (so the consumer never receives a message without those before it).
     *
     * @param msgTypeId the message's type, at least 1
     * @param src       the payload, device memory of this rank
     * @param wait      how long the kernel waits for room, measured on the GPU
     * @throws IllegalArgumentException for a payload over {@link #maxPayload()}, a type below 1 or a negative wait
     * @throws IllegalStateException on a rank that is not a producer of this ring
     */
    public void putAsync(int msgTypeId, MemorySegment src, Duration wait) {
        checkProducer(msgTypeId, src);
        if (wait.isNegative()) {
            throw new IllegalArgumentException("device ring buffer put wait=" + wait + " expected >= 0 (fix: pass"
                    + " Duration.ZERO to refuse at once when the ring is full)");
        }
        rings.enqueueAppend(consumer, capacity, kind == Kind.MANY_TO_ONE, msgTypeId, src, wait);
    }

    /**
     * Appends {@code src} if the ring has room now, synchronously: waits for this rank's stream (so earlier work,
     * earlier appends included, has run), enqueues an append that does not wait, and waits for it.
     *
     * @param msgTypeId the message's type, at least 1
     * @param src       the payload, device memory of this rank
     * @return whether the message is in the ring; false when it was full (nothing written)
     * @throws PeerTimeoutException naming the consumer when earlier {@link #putAsync} appends were dropped
     */
    public boolean offer(int msgTypeId, MemorySegment src) {
        checkProducer(msgTypeId, src);
        flush();
        rings.enqueueAppend(consumer, capacity, kind == Kind.MANY_TO_ONE, msgTypeId, src, Duration.ZERO);
        gpu.synchronize();
        return takeDropped() == 0;
    }

    /**
     * Waits for this rank's stream (every append enqueued so far has run), then reports dropped appends.
     *
     * @throws PeerTimeoutException naming the consumer, with the number of messages dropped, when an append found no
     *         room within its wait (the ring is usable again afterwards: later appends go in); with reason
     *         {@code PEER_LEFT} when the consumer began closing the ring (its close ends the append's wait for room)
     */
    public void flush() {
        gpu.synchronize();
        long dropped = takeDropped();
        if (dropped != 0 && closed(consumer)) {
            // the kernel stopped waiting for room because the consumer began closing (or its wait ended first: either
            // way the consumer will free no room, so this is the cause to report)
            throw new PeerTimeoutException("device ring buffer put: rank=" + rank + " waited for room freed by "
                    + group.describe(consumer) + ", which began closing the ring: it will not poll again; messages"
                    + " dropped=" + dropped + " (fix: read that rank's own error if its code failed; otherwise make"
                    + " every rank append only what the consumer takes before it closes)", rank, List.of(consumer),
                    "device ring buffer put", PeerTimeoutException.Reason.PEER_LEFT, group.options().timeout());
        }
        if (dropped != 0) {
            throw new PeerTimeoutException("device ring buffer put: rank=" + rank + " found no room in the ring of "
                    + group.describe(consumer) + " within its wait; messages dropped=" + dropped + " (that append and"
                    + " every later one of this rank, so that none arrives out of order; capacity=" + capacity
                    + "; fix: poll more often on the consumer, give the ring more capacity, or wait longer)", rank,
                    List.of(consumer), "device ring buffer put", PeerTimeoutException.Reason.DEADLINE_PASSED,
                    group.options().timeout());
        }
    }

    /** Reads this rank's dropped-append count (after a synchronize) and resets it, so later appends go in. */
    private long takeDropped() {
        long status = DeviceRingLayout.statusOffset(capacity);
        rings.readNow(status, word);
        long dropped = word.get(ValueLayout.JAVA_LONG, 0);
        if (dropped != 0) {
            rings.zeroNow(status, Long.BYTES);
        }
        return dropped;
    }

    private void checkProducer(int msgTypeId, MemorySegment src) {
        Objects.requireNonNull(src, "src");
        if (!producerHere) {
            throw new IllegalStateException("device ring buffer put on rank=" + rank + ": only the producer rank="
                    + producer + " appends to this one-to-one ring (fix: append on that rank, or create a manyToOne"
                    + " ring)");
        }
        if (msgTypeId < 1 || src.byteSize() > maxPayload) {
            throw new IllegalArgumentException("device ring buffer message type=" + msgTypeId + " bytes="
                    + src.byteSize() + " expected type >= 1 and bytes <= maxPayload=" + maxPayload + " (capacity="
                    + capacity + "; fix: " + (msgTypeId < 1 ? "use a type of at least 1" : "a ring of capacity >= "
                    + (Long.highestOneBit((src.byteSize() + RECORD_HEADER_BYTES) * 8 - 1) << 1) + ", or split the"
                    + " message") + ")");
        }
    }

    // ------------------------------------------------------------------------------------------ consumer side

    /**
     * Hands up to {@code limit} messages that are in the ring now to {@code handler}, in the order their room was
     * claimed, then frees their room. The handler gets the payload in place, in this rank's <b>device</b> memory
     * ({@code buffer} is a device address range: read it with copies or kernels, never host loads), and must have
     * read it when it returns. Returns at once when there are none.
     *
     * @param handler receives each message
     * @param limit   the most messages handed out, at least 1
     * @return messages handed out
     * @throws IllegalStateException on a rank that is not the consumer
     */
    public int poll(MessageHandler handler, int limit) {
        if (!consumerHere || limit < 1) {
            throw consumerHere ? new IllegalArgumentException("device ring buffer poll limit=" + limit
                    + " expected >= 1 (fix: pass how many messages to read at most, e.g. 16)")
                    : new IllegalStateException("device ring buffer poll on rank=" + rank + ": only the consumer rank="
                    + consumer + " polls (fix: poll on that rank only)");
        }
        long head = headPosition;
        int messages = 0;
        try {
            while (messages < limit && head - headPosition < capacity) {
                long at = DeviceRingLayout.recordOffset(capacity, head);
                // acquire: this copy is made after the producer kernel's release store of the header became visible
                // when it reads it non-zero; the kernel fenced the payload at system scope before that store, so the
                // handler's copies, made later, read the whole payload
                rings.readNow(at, word);
                long header = word.get(ValueLayout.JAVA_LONG, 0);
                int length = RingBufferLayout.recordLength(header);
                if (length <= 0) {
                    break; // not published yet (0): records after it wait for it
                }
                int type = RingBufferLayout.recordTypeOrRank(header);
                if (type != PADDING_TYPE) {
                    handler.onMessage(type, data, at - DATA_OFFSET + RECORD_HEADER_BYTES, length - RECORD_HEADER_BYTES);
                    messages++;
                }
                head = DeviceRingLayout.nextPosition(header, head);
            }
        } finally {
            if (head != headPosition) {
                release(head);
            }
        }
        return messages;
    }

    /** Zeroes the records read since the last release, then moves HEAD on to {@code head}. */
    private void release(long head) {
        long from = headPosition;
        int index = (int) (from & (capacity - 1));
        long bytes = head - from;
        long first = Math.min(bytes, capacity - index);
        rings.zeroNow(DATA_OFFSET + index, first);
        if (bytes > first) {
            rings.zeroNow(DATA_OFFSET, bytes - first);
        }
        word.set(ValueLayout.JAVA_LONG, 0, head);
        // release: one copy queue performs the zeroing above before this store of HEAD; a producer kernel that
        // acquires the new HEAD finds the freed room reading 0 (no header of an earlier lap)
        rings.writeNow(word, RingBufferLayout.HEAD_OFFSET);
        headPosition = head;
    }

    /**
     * Waits, bounded by the group's timeout, until at least one message arrives, then hands out up to {@code limit}
     * as {@link #poll} does.
     *
     * @param handler receives each message
     * @param limit   the most messages handed out, at least 1
     * @return messages handed out, at least 1
     * @throws PeerTimeoutException naming the producer (every other rank for many-to-one) when none arrives in time,
     *         a producer has exited, or the group was aborted; with reason {@code PEER_LEFT} once the one producer (every
     *         other rank, many-to-one) began closing the ring while it is empty at its head
     */
    public int take(MessageHandler handler, int limit) {
        int n = poll(handler, limit);
        if (n > 0) {
            return n;
        }
        var inner = SharedMemories.waitFor(group, kind == Kind.ONE_TO_ONE ? producer : -1, "device ring buffer take",
                () -> "a message in the ring (HEAD=" + headPosition + ", capacity=" + capacity + ")",
                "the producer appends nothing, or its appends were dropped: check its flush(), or raise"
                        + " symmem4j.timeout.ms");
        var subject = PeersClosingWait.forMessage(inner, group, "device ring buffer take",
                kind == Kind.ONE_TO_ONE ? producer : -1, "append", this::producersClosedOnEmptyRing);
        waiter.begin();
        while ((n = poll(handler, limit)) == 0) {
            waiter.idle(subject);
        }
        return n;
    }

    /**
     * Whether every rank that could append began closing the ring while its head holds no record. Each producer wrote
     * its CLOSED word after its stream had run, so every record it appended was published before (its kernel's release
     * store, after a system-scope fence): one appended before the close is seen at the head here and ends no wait.
     */
    private boolean producersClosedOnEmptyRing(List<Integer> producers) {
        if (producers.isEmpty()) {
            return false; // a many-to-one ring of a group of one: nobody else could close it, the timeout stays
        }
        for (int r : producers) {
            if (!closed(r)) {
                return false;
            }
        }
        if (kind == Kind.MANY_TO_ONE) {
            gpu.synchronize(); // this rank's own appends, if it made any, have run before the head is read
        }
        rings.readNow(DeviceRingLayout.recordOffset(capacity, headPosition), word);
        return word.get(ValueLayout.JAVA_LONG, 0) == 0;
    }

    /** Whether rank {@code r} began closing the ring: its CLOSED word, read by a copy of its memory. */
    private boolean closed(int r) {
        rings.readPeerNow(r, DeviceRingLayout.closedOffset(capacity), word);
        return word.get(ValueLayout.JAVA_LONG, 0) != 0;
    }

    /**
     * Collective: frees the ring on every rank (after each rank's stream has run). Flush first on producers: dropped
     * appends are not reported here.
     *
     * <p>Before the free, while every rank still maps the ring, this rank waits for its stream and then marks the ring
     * as closing in its CLOSED word ({@link DeviceRingLayout}). A consumer waiting in {@link #take} for this producer
     * on an empty ring then stops with {@link PeerTimeoutException.Reason#PEER_LEFT}, and a producer's kernel waiting
     * for room from this consumer stops, reported by its {@link #flush()}, instead of both waiting, as this rank does
     * in the free, until the timeout.
     */
    @Override
    public void close() {
        if (closing) {
            return; // closed already (an explicit close, then the try-with-resources')
        }
        closing = true;
        RuntimeException markFailed = null;
        try {
            gpu.synchronize(); // this rank's appends have all run (published, or dropped) before the mark
            word.set(ValueLayout.JAVA_LONG, 0, 1L);
            rings.writeNow(word, DeviceRingLayout.closedOffset(capacity));
        } catch (RuntimeException e) {
            markFailed = e; // the free below still runs: the peers wait for it
        }
        try {
            memory.close();
        } catch (RuntimeException e) {
            if (markFailed != null) {
                e.addSuppressed(markFailed);
            }
            throw e;
        } finally {
            arena.close();
        }
        if (markFailed != null) {
            throw markFailed;
        }
    }

    @Override
    public String toString() {
        return "DeviceRingBuffer[" + kind + ", consumer=" + consumer + (kind == Kind.ONE_TO_ONE ? ", producer="
                + producer : "") + ", capacity=" + capacity + ", rank=" + rank + "]";
    }
}
