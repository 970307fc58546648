package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;
import java.time.Duration;

/**
 * Appends to a ring buffer in GPU symmetric memory on this rank's stream: what {@code org.symmem4j.state}'s
 * {@code DeviceRingBuffer} is built on. Reached through {@link SymmetricMemory#unwrap
 * SymmetricMemory.unwrap(DeviceRings.class)} on memory of the CUDA transport (empty on host transports); the memory
 * is laid out as {@link org.symmem4j.parallel.layout.DeviceRingLayout} says.
 *
 * <p>Ordering. {@link #enqueueAppend} runs a kernel on this rank's stream after the work enqueued there before it
 * (so a message produced by an earlier kernel is complete when it is appended, with no host synchronize). The kernel
 * takes room by waiting (acquire, system scope) until the consumer's HEAD leaves room, writes the payload into the
 * consumer's ring, fences at system scope and publishes the record with one release store of its header word. The
 * consumer reads header words with {@link #readNow} (a copy after that release sees the payload too), zeroes what
 * it read and moves HEAD on with {@link #writeNow} — synchronous copies, performed in the order they were made.
 */
public interface DeviceRings {

    /**
     * Enqueues on this rank's stream the append of one record to the ring in rank {@code consumer}'s buffer. The
     * kernel waits for room at most {@code wait} (on the GPU's clock), and stops waiting once the consumer's CLOSED
     * word ({@link org.symmem4j.parallel.layout.DeviceRingLayout#closedOffset}) reads non-zero: a consumer that began
     * closing frees no more room. An append that finds no room in time, or stops so, writes
     * nothing and counts itself in this rank's status word, and so does every later append on the stream until the
     * word is reset, so that the consumer never receives a message without the ones before it. Returns at once.
     *
     * @param consumer  the rank whose buffer holds the ring
     * @param capacity  the ring's data bytes, a power of two
     * @param manyToOne whether producers claim room by a system-scope CAS on TAIL (many producers), else by a store
     * @param type      the message type, at least 1
     * @param src       the payload: device memory of this rank, read when the kernel runs
     * @param wait      how long the kernel waits for room; {@link Duration#ZERO} refuses at once when full
     * @throws IllegalArgumentException for a type below 1 or a payload larger than an eighth of the ring
     * @throws IndexOutOfBoundsException when the memory is smaller than the layout needs
     */
    void enqueueAppend(int consumer, int capacity, boolean manyToOne, int type, MemorySegment src, Duration wait);

    /**
     * Copies bytes of this rank's buffer to the host now, without waiting for this rank's stream (the consumer's
     * poll: a peer's kernel writes the bytes, not this stream). Synchronous.
     *
     * @param offset byte offset in this rank's buffer
     * @param dst    host memory, filled whole
     * @throws IndexOutOfBoundsException if the range falls outside this rank's buffer
     */
    void readNow(long offset, MemorySegment dst);

    /**
     * Copies bytes of rank {@code peer}'s buffer, as this GPU maps it, to the host now, without waiting for any
     * stream; synchronous. For words a peer's host wrote into its own buffer and this rank only reads (a ring's
     * CLOSED word, {@link org.symmem4j.parallel.layout.DeviceRingLayout}).
     *
     * @param peer   the rank whose buffer is read (this rank's own too)
     * @param offset byte offset in that buffer
     * @param dst    host memory, filled whole
     * @throws IndexOutOfBoundsException if the range falls outside the buffer, or {@code peer} outside the group
     * @throws UnsupportedOperationException where this GPU does not map {@code peer}'s memory
     */
    void readPeerNow(int peer, long offset, MemorySegment dst);

    /**
     * Copies host bytes into this rank's buffer now, without waiting for this rank's stream; synchronous, and
     * performed after every earlier {@code readNow} and {@code writeNow} of this rank (one copy queue).
     *
     * @param src    host bytes, all copied
     * @param offset byte offset in this rank's buffer
     * @throws IndexOutOfBoundsException if the range falls outside this rank's buffer
     */
    void writeNow(MemorySegment src, long offset);

    /**
     * Sets bytes of this rank's buffer to zero, in order with {@link #readNow} and {@link #writeNow} (after the
     * earlier ones, before the later ones), without waiting for this rank's stream.
     *
     * @param offset byte offset in this rank's buffer
     * @param bytes  how many bytes
     * @throws IndexOutOfBoundsException if the range falls outside this rank's buffer
     */
    void zeroNow(long offset, long bytes);
}
