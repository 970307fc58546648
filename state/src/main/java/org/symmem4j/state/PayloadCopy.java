package org.symmem4j.state;

import static org.symmem4j.parallel.layout.RingBufferLayout.CACHE_LINE_BYTES;
import static org.symmem4j.parallel.layout.RingBufferLayout.DATA_OFFSET;

import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * How a ring producer copies a payload into the record it claimed ({@link SymmetricRingBuffer#offer}), and in which
 * order of cache lines. The consumer spins on the line of the record's header word, so that line has to move to the
 * producer for writing once per message whatever the order; the order decides when its fetch starts. Two orders:
 * <ul>
 *   <li><b>header line first</b> ({@link #HEADER_LINE_FIRST}, the default), Agrona 2.6's: the producer stores to the
 *       record's header line before it copies the payload (a one-to-one producer stores the 0 its header word already
 *       holds, after zeroing the next record's header word, as Agrona's {@code claimCapacity} does, see
 *       {@code SymmetricRingBuffer.reserve}; a many-to-one producer's in-progress mark is that store), so the fetch of
 *       the line the consumer holds starts before the copy, overlapping it; then the payload from its first byte up,
 *       one bulk copy ({@code MemorySegment.copy}) whatever its length: at 64 B one-to-one on 32 cores the round trip
 *       went from +10.3 % over Agrona's {@code write} with eight 8-byte stores to +5.7 % (two runs on two machines,
 *       {@code bench/results/2026-11-30-ring-offer-bulk-32core.md});</li>
 *   <li><b>header line last</b> ({@code -Dsymmem4j.ring.headerLineFirst=false}): the payload from its last bytes down,
 *       the header's line last, next to the commit, so that the spinning reader cannot take the line back between two
 *       stores to it; above {@link #SHORT_COPY_BYTES} two bulk copies (the bytes past the header's line, then the rest).
 *       Measured on 32 cores at 64 B: the round trip stayed 14 % over Agrona's
 *       ({@code bench/results/2026-11-29-ring-rtt-payloadcopy-32core.md}).</li>
 * </ul>
 * The property is read once, at class initialization; the JIT folds it. Both orders write the same bytes.
 *
 * <p>All stores are plain: the record's commit, a release store of the header word after them, publishes them.
 */
final class PayloadCopy {

    /** Payloads of 8 up to this many bytes from a byte array take a few 8-byte loads and stores, straight-line. */
    static final int SHORT_COPY_BYTES = 64;
    /** 8-byte loads from a byte array at any index, in native order, one bounds check each. */
    private static final VarHandle BYTES_AS_LONGS = MethodHandles.byteArrayViewVarHandle(long[].class,
            ByteOrder.nativeOrder());
    /**
     * Whether a producer writes a record's header line first (Agrona's order, the default) or last
     * ({@code -Dsymmem4j.ring.headerLineFirst=false}); see the class comment.
     */
    static final boolean HEADER_LINE_FIRST = headerLineFirst(System.getProperty("symmem4j.ring.headerLineFirst"));

    private PayloadCopy() {
    }

    /**
     * Reads the order's property: unset means true; anything but true or false is refused, so that a misspelt control
     * run does not measure the default while claiming the other order.
     *
     * @param value the property's value, or null
     * @return whether the header line goes first
     */
    static boolean headerLineFirst(String value) {
        if (value == null || value.isBlank() || value.trim().equalsIgnoreCase("true")) {
            return true;
        }
        if (value.trim().equalsIgnoreCase("false")) {
            return false;
        }
        throw new IllegalArgumentException("symmem4j.ring.headerLineFirst=" + value + " expected true or false (fix:"
                + " pass -Dsymmem4j.ring.headerLineFirst=false for the header-line-last order, or leave it unset)");
    }

    /**
     * Copies {@code length} bytes of {@code src} from {@code offset} to {@code at} in the data ring.
     *
     * <p>Header line first (the default): one {@link #copyBulk bulk copy}. Header line last: one of 8 to
     * {@link #SHORT_COPY_BYTES} bytes from a byte array (an {@code offer(int, byte[])}, a segment of
     * {@code MemorySegment.ofArray}) takes at most 8 loads from the array, then 8 stores by address from the highest
     * address down, the last words overlapping the first where the length is not a multiple of 32, 16 or 8:
     * {@code MemorySegment.copy}'s general path compiles to about 1.5-3 KB and would keep {@code offer} above the size
     * up to which the JIT inlines a compiled method into its caller's loop ({@code InlineSmallCode}, 2,500 bytes).
     * Anything else takes {@link #copyBulk}. The source's bounds were checked before the claim; the array loads check
     * them again.
     *
     * @param src         the bytes
     * @param offset      where the payload starts in {@code src}
     * @param ringAddress the ring's address ({@link RingBufferLayout#address}), or -1 (then one checked copy)
     * @param data        the data ring
     * @param at          the payload's index in the data ring (the record's index plus its header)
     * @param length      payload bytes
     * @param headerLineFirst the order: {@link #HEADER_LINE_FIRST}, or its opposite in tests
     */
    static void copy(MemorySegment src, long offset, long ringAddress, MemorySegment data, int at, int length,
                     boolean headerLineFirst) {
        // header line first (the default): one bulk copy whatever the length, as a claim's writer does with
        // MemorySegment.copy; measured at 64 B one-to-one on 32 cores, a claim written that way made the round trip
        // 0.493 us where offer's straight-line stores below made it 0.612 us
        // (bench/results/2026-11-30-ring-claim-order-32core.md): a few wide stores leave the spinning consumer fewer
        // chances to take the header's line back between two of them than eight 8-byte stores do
        if (headerLineFirst | length > SHORT_COPY_BYTES | length < Long.BYTES | ringAddress < 0
                || !(src.heapBase().orElse(null) instanceof byte[] array)) {
            copyBulk(src, offset, ringAddress, data, at, length, headerLineFirst);
            return;
        }
        int from = (int) (src.address() + offset); // a heap segment's address: its offset in the array
        int last = length - Long.BYTES;
        // every load before the first store (no load waits behind a store to an address it may alias), then the
        // stores from the highest address down: the payload's first words share the header's line, stored last
        long a0 = (long) BYTES_AS_LONGS.get(array, from);
        long z0 = (long) BYTES_AS_LONGS.get(array, from + last);
        if (length > 2 * Long.BYTES) {
            long a1 = (long) BYTES_AS_LONGS.get(array, from + 8);
            long z1 = (long) BYTES_AS_LONGS.get(array, from + last - 8);
            if (length > 4 * Long.BYTES) {
                long a2 = (long) BYTES_AS_LONGS.get(array, from + 16);
                long a3 = (long) BYTES_AS_LONGS.get(array, from + 24);
                long z2 = (long) BYTES_AS_LONGS.get(array, from + last - 16);
                long z3 = (long) BYTES_AS_LONGS.get(array, from + last - 24);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + last, z0);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + last - 8, z1);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + last - 16, z2);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + last - 24, z3);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + 24, a3);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + 16, a2);
                RingBufferLayout.putPayloadLongAt(ringAddress, at + 8, a1);
                RingBufferLayout.putPayloadLongAt(ringAddress, at, a0);
                return;
            }
            RingBufferLayout.putPayloadLongAt(ringAddress, at + last, z0);
            RingBufferLayout.putPayloadLongAt(ringAddress, at + last - 8, z1);
            RingBufferLayout.putPayloadLongAt(ringAddress, at + 8, a1);
            RingBufferLayout.putPayloadLongAt(ringAddress, at, a0);
            return;
        }
        RingBufferLayout.putPayloadLongAt(ringAddress, at + last, z0);
        RingBufferLayout.putPayloadLongAt(ringAddress, at, a0);
    }

    /**
     * The bulk copy: one copy from the payload's first byte up (header line first, or a ring without an address), or
     * the bytes past the record header's line first, then the bytes on it. Out of line: a producer of short messages
     * never runs it.
     */
    private static void copyBulk(MemorySegment src, long offset, long ringAddress, MemorySegment data, int at,
                                 int length, boolean headerLineFirst) {
        if (headerLineFirst) {
            MemorySegment.copy(src, offset, data, at, length); // one call (one check, one stub) per message
            return;
        }
        // bytes from the payload's start to the next line boundary: the part on the header's line (0 where the header
        // fills its line's last word)
        int onHeaderLine = ringAddress < 0 ? length
                : (int) (-(ringAddress + DATA_OFFSET + at) & (CACHE_LINE_BYTES - 1));
        if (onHeaderLine < length) {
            MemorySegment.copy(src, offset + onHeaderLine, data, at + onHeaderLine, length - onHeaderLine);
            MemorySegment.copy(src, offset, data, at, onHeaderLine);
        } else {
            MemorySegment.copy(src, offset, data, at, length);
        }
    }
}
