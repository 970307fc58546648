package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * {@link PayloadCopy} writes exactly the payload's bytes, whatever their order: every length from 0 to past three cache
 * lines, at every 8-aligned place on two lines of a ring whose data starts on a line, from a byte array (the short
 * path up to 64 bytes, the split bulk copy above) and from native memory (always the bulk copy), and nothing before or
 * after them; a ring without an address (a heap segment) takes the one checked copy. Both orders of cache lines
 * ({@link PayloadCopy#HEADER_LINE_FIRST} and its opposite) are checked, whichever the property chose.
 */
class PayloadCopyTest {

    private static final int MAX_LENGTH = 3 * RingBufferLayout.CACHE_LINE_BYTES + 17;
    private static final int GUARD = 64;
    private static final byte FILL = (byte) 0xA5;

    @Test
    void everyLengthAtEveryPlaceArrivesExactly() {
        SplittableRandom random = new SplittableRandom(33);
        byte[] source = new byte[MAX_LENGTH + 16];
        int dataBytes = 2 * RingBufferLayout.CACHE_LINE_BYTES + MAX_LENGTH + GUARD;
        try (Arena arena = Arena.ofConfined()) {
            // the ring's data on a cache line, as a mapped ring's (its base on a page, DATA_OFFSET a multiple of 128)
            MemorySegment ring = arena.allocate(RingBufferLayout.DATA_OFFSET + dataBytes, 4096);
            MemorySegment data = ring.asSlice(RingBufferLayout.DATA_OFFSET, dataBytes);
            MemorySegment nativeSource = arena.allocate(source.length);
            MemorySegment heapRing = MemorySegment.ofArray(new byte[(int) RingBufferLayout.DATA_OFFSET + dataBytes]);
            MemorySegment heapData = heapRing.asSlice(RingBufferLayout.DATA_OFFSET, dataBytes);
            for (int at = RingBufferLayout.RECORD_HEADER_BYTES; at < 2 * RingBufferLayout.CACHE_LINE_BYTES;
                 at += RingBufferLayout.RECORD_ALIGNMENT) {
                for (int length = 0; length <= MAX_LENGTH; length++) {
                    for (int n = 0; n < 6; n++) {
                        boolean headerLineFirst = n < 3; // both orders, from each source
                        int from = n % 3;
                        random.nextBytes(source);
                        int offset = 5 + from; // any alignment in the source
                        MemorySegment src = switch (from) {
                            case 0 -> MemorySegment.ofArray(source);
                            case 1 -> nativeSource.copyFrom(MemorySegment.ofArray(source));
                            default -> MemorySegment.ofArray(source).asSlice(2); // a slice: its offset in the array
                        };
                        long srcOffset = from == 2 ? offset - 2 : offset;
                        String where = "at=" + at + " length=" + length + " source=" + from + " headerLineFirst="
                                + headerLineFirst;
                        data.fill(FILL);
                        PayloadCopy.copy(src, srcOffset, RingBufferLayout.address(ring), data, at, length,
                                headerLineFirst);
                        check(data, at, length, source, offset, where);
                        heapData.fill(FILL);
                        PayloadCopy.copy(src, srcOffset, RingBufferLayout.address(heapRing), heapData, at, length,
                                headerLineFirst);
                        check(heapData, at, length, source, offset, where + " (ring without an address)");
                    }
                }
            }
        }
    }

    @Test
    void theOrderPropertyTakesTrueOrFalseAndRefusesAnythingElse() {
        assertTrue(PayloadCopy.headerLineFirst(null));
        assertTrue(PayloadCopy.headerLineFirst(" TRUE "));
        assertFalse(PayloadCopy.headerLineFirst("false"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PayloadCopy.headerLineFirst("flase"));
        assertTrue(e.getMessage().contains("symmem4j.ring.headerLineFirst=flase expected true or false (fix:"),
                e.getMessage());
    }

    private static void check(MemorySegment data, int at, int length, byte[] source, int offset, String where) {
        byte[] expected = new byte[(int) data.byteSize()];
        java.util.Arrays.fill(expected, FILL);
        System.arraycopy(source, offset, expected, at, length);
        byte[] found = data.toArray(ValueLayout.JAVA_BYTE);
        int i = java.util.Arrays.mismatch(expected, found);
        assertEquals(-1, i, () -> where + ": byte " + i + " expected=" + expected[i] + " found=" + found[i]);
    }
}
