package org.symmem4j.parallel.layout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;

/**
 * {@link DeviceRingLayout} on the host (runs in CI, no GPU): the offsets of its picture, the record arithmetic the
 * consumer uses, the fresh-ring check, and that the appending kernel's hard-coded offsets in
 * {@code symmem4j_kernels.cu} are the layout's.
 */
class DeviceRingLayoutTest {

    @Test
    void offsetsAreThoseOfThePicture() {
        assertEquals(384 + 4096 + 128, DeviceRingLayout.totalBytes(4096));
        assertEquals(384 + 4096, DeviceRingLayout.statusOffset(4096));
        assertEquals(0, DeviceRingLayout.statusOffset(4096) % RingBufferLayout.LINE_BYTES, "status on a line of its own");
        assertEquals(384, DeviceRingLayout.recordOffset(4096, 0));
        assertEquals(384 + 8, DeviceRingLayout.recordOffset(4096, 4096 * 3 + 8), "positions wrap at the capacity");
    }

    @Test
    void recordsAdvanceByTheirAlignedLengthAndPaddingRunsToTheEnd() {
        long record = DeviceRingLayout.header(7, 8 + 13);
        assertEquals(7, RingBufferLayout.recordTypeOrRank(record));
        assertEquals(21, RingBufferLayout.recordLength(record));
        assertEquals(100 + 24, DeviceRingLayout.nextPosition(record, 100), "21 bytes take 24");
        long empty = DeviceRingLayout.header(1, 8);
        assertEquals(8, DeviceRingLayout.nextPosition(empty, 0), "an empty message is its header");
        // the kernel writes a padding as (0xFFFFFFFF << 32) | (capacity - index)
        long padding = (0xFFFF_FFFFL << 32) | (4096 - 4000);
        assertEquals(RingBufferLayout.PADDING_TYPE, RingBufferLayout.recordTypeOrRank(padding));
        assertEquals(padding, DeviceRingLayout.header(RingBufferLayout.PADDING_TYPE, 96));
        assertEquals(4096, DeviceRingLayout.nextPosition(padding, 4000), "to the ring's end");
    }

    @Test
    void aFreshRingVerifiesAndAStaleOneIsRefused() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment header = a.allocate(RingBufferLayout.DATA_OFFSET, 8);
            RingBufferLayout.formatHeader(header, RingBufferLayout.KIND_MANY_TO_ONE, 4096, -1, 2);
            DeviceRingLayout.verifyFresh(header, RingBufferLayout.KIND_MANY_TO_ONE, 4096, -1, 2);
            IllegalStateException kind = assertThrows(IllegalStateException.class, () -> DeviceRingLayout.verifyFresh(
                    header, RingBufferLayout.KIND_ONE_TO_ONE, 4096, -1, 2));
            assertTrue(kind.getMessage().contains("field=kind"), kind.getMessage());
            header.set(ValueLayout.JAVA_LONG, RingBufferLayout.HEAD_OFFSET, 64);
            IllegalStateException stale = assertThrows(IllegalStateException.class, () -> DeviceRingLayout.verifyFresh(
                    header, RingBufferLayout.KIND_MANY_TO_ONE, 4096, -1, 2));
            assertTrue(stale.getMessage().contains("HEAD=64") && stale.getMessage().contains("fix:"),
                    stale.getMessage());
        }
    }

    @Test
    void theKernelsOffsetsAreTheLayouts() throws IOException {
        Path cu = Path.of("..", "kernels", "src", "main", "cuda", "symmem4j_kernels.cu");
        String source = Files.readString(cu);
        assertEquals(RingBufferLayout.TAIL_OFFSET, define(source, "RING_TAIL"));
        assertEquals(RingBufferLayout.HEAD_OFFSET, define(source, "RING_HEAD"));
        assertEquals(RingBufferLayout.DATA_OFFSET, define(source, "RING_DATA"));
        assertEquals(RingBufferLayout.PADDING_TYPE, (int) define(source, "RING_PADDING"));
        // the kernel finds the consumer's CLOSED word at ring + RING_DATA + capacity + RING_CLOSED
        assertEquals(DeviceRingLayout.CLOSED_IN_STATUS, define(source, "RING_CLOSED"));
        for (int capacity : new int[] {64, 4096, 1 << 20}) {
            assertEquals(RingBufferLayout.DATA_OFFSET + capacity + DeviceRingLayout.CLOSED_IN_STATUS,
                    DeviceRingLayout.closedOffset(capacity));
            // on the status line, after the status word, inside what every rank allocates
            assertTrue(DeviceRingLayout.closedOffset(capacity) >= DeviceRingLayout.statusOffset(capacity) + Long.BYTES);
            assertTrue(DeviceRingLayout.closedOffset(capacity) + Long.BYTES <= DeviceRingLayout.totalBytes(capacity));
        }
    }

    private static long define(String source, String name) {
        Matcher m = Pattern.compile("#define " + name + " (0x[0-9A-Fa-f]+|[0-9]+)u?").matcher(source);
        assertTrue(m.find(), name + " not defined in symmem4j_kernels.cu");
        String v = m.group(1);
        return v.startsWith("0x") ? Long.parseLong(v.substring(2), 16) : Long.parseLong(v);
    }
}
