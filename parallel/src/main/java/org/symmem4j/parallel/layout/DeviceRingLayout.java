package org.symmem4j.parallel.layout;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Layout of a ring buffer in GPU symmetric memory ({@code org.symmem4j.state.DeviceRingBuffer}): the ring of
 * {@link RingBufferLayout} at offset 0 (used in the consumer's buffer only), then one line of this rank's own, the
 * status of its appends. The appending kernel ({@code symmem_ring_put} in {@code symmem4j_kernels.cu}) hard-codes
 * the ring's offsets: {@code RING_TAIL}, {@code RING_HEAD}, {@code RING_DATA} and {@code RING_PADDING} there are
 * {@link RingBufferLayout#TAIL_OFFSET}, {@link RingBufferLayout#HEAD_OFFSET}, {@link RingBufferLayout#DATA_OFFSET}
 * and {@link RingBufferLayout#PADDING_TYPE} here (checked by {@code DeviceRingLayoutTest}).
 *
 * <pre>
 *  offset                      field                                         written by              read by
 *  0                           HEADER (RingBufferLayout)                     consumer, once (a copy) every rank, verify (a copy)
 *  128                         TAIL: bytes claimed                           producers' kernels      producers' kernels
 *                                                                            (store, or system CAS)
 *  256                         HEAD: bytes consumed                          consumer (host copy,    producers' kernels
 *                                                                            after the zeroing)      (acquire, system)
 *  384                         DATA: capacity bytes of records:              producers' kernels      consumer (host copies)
 *                                +0 header word: low 32 bits header +        (payload, fence.sys,
 *                                   payload bytes, high 32 bits the type     release store of the
 *                                   (or -1: padding to the ring's end)       header); the consumer
 *                                +8 payload                                  zeroes what it read
 *  384 + capacity              STATUS (long), on a line of its own: appends  this rank's kernels     this rank's host
 *                              this rank dropped since the first that timed  (relaxed adds); host    after a synchronize
 *                              out waiting for room, or found the consumer   resets it to 0
 *                              closing; 0 = none
 *  384 + capacity + 8            CLOSED (long): 1 once this rank began       this rank's host, once  the consumer's host
 *                                closing the ring (its appends all ran)      in close (a copy after  (a peer copy) in take;
 *                                                                            its stream's sync)      producers' kernels
 *                                                                                                    (the consumer's word)
 *  384 + capacity + 128        end
 * </pre>
 *
 * Unlike the host ring, the consumer zeroes the records it read in both kinds (one copy before it moves HEAD), so a
 * one-to-one producer needs no spare word after its record and the appending kernel is the same for both kinds.
 *
 * <p>CLOSED plays the part of the host ring's closing words ({@link RingBufferLayout#CLOSED_OFFSET}): a consumer
 * waiting in {@code take} on an empty ring stops once its producers' words read 1, and an appending kernel waiting for
 * room stops (dropping its message) once the consumer's does. Each rank writes only its own word, in its own memory:
 * a GPU rank's host cannot store into a peer's memory except through a copy of its own, and the consumer's word has
 * to be where the kernel, which already maps the consumer's buffer, finds it. The kernel's {@code RING_CLOSED} is the
 * word's offset within the status line, {@link #CLOSED_IN_STATUS}.
 */
public final class DeviceRingLayout {

    /** Bytes of the status line. */
    public static final int STATUS_BYTES = RingBufferLayout.LINE_BYTES;
    /** Offset of the CLOSED word within the status line (the kernel's {@code RING_CLOSED}). */
    public static final int CLOSED_IN_STATUS = Long.BYTES;

    private DeviceRingLayout() {
    }

    /**
     * Bytes every rank allocates for a ring of {@code capacity} data bytes.
     *
     * @param capacity data bytes, a power of two
     * @return ring and status bytes
     */
    public static long totalBytes(int capacity) {
        return RingBufferLayout.totalBytes(capacity) + STATUS_BYTES;
    }

    /**
     * Where this rank's status word lies in its own buffer.
     *
     * @param capacity data bytes
     * @return byte offset
     */
    public static long statusOffset(int capacity) {
        return RingBufferLayout.totalBytes(capacity);
    }

    /**
     * Where a rank's CLOSED word lies in its own buffer: 1 once it began closing the ring.
     *
     * @param capacity data bytes
     * @return byte offset
     */
    public static long closedOffset(int capacity) {
        return statusOffset(capacity) + CLOSED_IN_STATUS;
    }

    /**
     * Where the record at position {@code position} starts in the consumer's buffer.
     *
     * @param capacity data bytes, a power of two
     * @param position bytes since creation (HEAD or TAIL)
     * @return byte offset of the record's header word
     */
    public static long recordOffset(int capacity, long position) {
        return RingBufferLayout.DATA_OFFSET + (position & (capacity - 1));
    }

    /**
     * The ring position after a record whose header word is {@code header}: a padding record runs to the ring's end,
     * any other is {@link RingBufferLayout#align aligned} to 8 bytes.
     *
     * @param header   a published header word
     * @param position the record's position
     * @return the next record's position
     */
    public static long nextPosition(long header, long position) {
        return position + RingBufferLayout.align(RingBufferLayout.recordLength(header));
    }

    /**
     * A published record header word as the appending kernel writes it (for tests and the host model).
     *
     * @param type          message type, at least 1, or {@link RingBufferLayout#PADDING_TYPE}
     * @param recordLength  header + payload bytes
     * @return the word
     */
    public static long header(int type, int recordLength) {
        return RingBufferLayout.headerWord(recordLength, type);
    }

    /**
     * Checks the header lines copied from the consumer's buffer, as {@link RingBufferLayout#verifyHeader}, and that
     * TAIL and HEAD start at 0 (a ring formatted afresh, not memory reused without zeroing).
     *
     * @param header   {@link RingBufferLayout#DATA_OFFSET} bytes copied from the consumer's buffer
     * @param kind     the expected kind
     * @param capacity the expected capacity
     * @param producer the expected producer, -1 for any
     * @param consumer the expected consumer
     * @throws IllegalStateException naming the field that differs
     */
    public static void verifyFresh(MemorySegment header, int kind, int capacity, int producer, int consumer) {
        RingBufferLayout.verifyHeader(header, kind, capacity, producer, consumer);
        long tail = header.get(ValueLayout.JAVA_LONG, RingBufferLayout.TAIL_OFFSET);
        long head = header.get(ValueLayout.JAVA_LONG, RingBufferLayout.HEAD_OFFSET);
        if (tail != 0 || head != 0) {
            throw new IllegalStateException("device ring buffer: TAIL=" + tail + " HEAD=" + head + " expected 0 in a"
                    + " fresh ring (its memory was not zeroed; fix: create the ring collectively, every rank at the"
                    + " same point, so the consumer zeroes it before any producer appends)");
        }
    }
}
