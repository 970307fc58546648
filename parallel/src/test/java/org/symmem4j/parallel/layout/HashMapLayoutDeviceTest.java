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
 * The GPU form's part of {@link HashMapLayout} on the host (runs in CI, no GPU): the result area's place after the
 * partition, the size limit of the launch parameters, how key and value are packed into them, the header written and
 * checked apart from the slots, and that the kernel {@code symmem_map_op}'s hard-coded offsets, states, operations
 * and results in {@code symmem4j_kernels.cu} are the layout's.
 */
class HashMapLayoutDeviceTest {

    @Test
    void theResultAreaFollowsThePartitionOnALineOfItsOwn() {
        // keyBytes 8, valueBytes 13: a slot is 8 word + 8 hash + 8 key + 16 value = 40 bytes
        assertEquals(40, HashMapLayout.slotBytes(8, 13));
        assertEquals(128 + 4 * 40, HashMapLayout.partitionBytes(8, 13, 4));
        assertEquals(384, HashMapLayout.deviceOutOffset(8, 13, 4), "288 bytes of partition, then the next line");
        assertEquals(64 + 16, HashMapLayout.deviceOutBytes(13));
        assertEquals(512, HashMapLayout.deviceTotalBytes(8, 13, 4));
        // an exact line: no gap
        assertEquals(128 + 128, HashMapLayout.deviceOutOffset(8, 0, 4));
        for (int v : new int[] {0, 1, 8, 100, 2040}) {
            long out = HashMapLayout.deviceOutOffset(3, v, 64);
            assertTrue(out >= HashMapLayout.partitionBytes(3, v, 64));
            assertEquals(0, out % 128);
            assertTrue(HashMapLayout.deviceTotalBytes(3, v, 64) >= out + HashMapLayout.deviceOutBytes(v));
        }
    }

    @Test
    void keyAndValueBeyondTheLaunchParametersAreRefusedWithTheFix() {
        HashMapLayout.checkDeviceSizes(8, 2040); // 8 + 2040 = 2048: the limit, taken
        HashMapLayout.checkDeviceSizes(1, 2033); // 8 + 2040 after padding
        IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                () -> HashMapLayout.checkDeviceSizes(8, 2041));
        assertTrue(big.getMessage().contains("2056") && big.getMessage().contains("2048")
                && big.getMessage().contains("fix:"), big.getMessage());
        assertEquals(16 + 8, HashMapLayout.inlineBytes(9, 1));
    }

    @Test
    void keyAndValueArePackedPaddedWithZerosOverWhatWasThere() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment inline = a.allocate(HashMapLayout.DEVICE_INLINE_BYTES, 8);
            inline.fill((byte) 0x5A);
            MemorySegment key = a.allocate(3);
            key.copyFrom(MemorySegment.ofArray(new byte[] {1, 2, 3}));
            MemorySegment value = a.allocate(5);
            value.copyFrom(MemorySegment.ofArray(new byte[] {9, 8, 7, 6, 5}));
            HashMapLayout.packInline(inline, key, value, 3, 5);
            byte[] got = inline.asSlice(0, 16).toArray(ValueLayout.JAVA_BYTE);
            assertEquals(java.util.Arrays.toString(new byte[] {1, 2, 3, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 0, 0, 0}),
                    java.util.Arrays.toString(got));
            assertEquals(0x5A, inline.get(ValueLayout.JAVA_BYTE, 16), "nothing written past the packed words");
            HashMapLayout.packInline(inline, key, null, 3, 5);
            assertEquals(0, inline.get(ValueLayout.JAVA_BYTE, 8), "no value: zeros");
        }
    }

    @Test
    void theHeaderIsWrittenAndCheckedApartFromTheSlots() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment header = a.allocate(HashMapLayout.HEADER_BYTES, 8);
            HashMapLayout.formatHeader(header, 8, 16, 64, 3, 2);
            HashMapLayout.verifyHeader(header, 8, 16, 64, 3, 2);
            IllegalStateException other = assertThrows(IllegalStateException.class,
                    () -> HashMapLayout.verifyHeader(header, 8, 24, 64, 3, 2));
            assertTrue(other.getMessage().contains("valueBytes") && other.getMessage().contains("found=16"),
                    other.getMessage());
            // the whole-partition check still refuses a buffer too small for the slots
            assertThrows(IllegalStateException.class, () -> HashMapLayout.verify(header, 8, 16, 64, 3, 2));
        }
    }

    @Test
    void slotWordsCarryStateHolderAndVersion() {
        long w = HashMapLayout.slotWord(HashMapLayout.LOCKED, 5, 77);
        assertEquals(HashMapLayout.LOCKED, HashMapLayout.state(w));
        assertEquals(5, HashMapLayout.lockHolder(w));
        assertEquals(77, HashMapLayout.version(w));
    }

    @Test
    void theKernelsDefinesAreTheLayouts() throws IOException {
        String source = Files.readString(Path.of("..", "kernels", "src", "main", "cuda", "symmem4j_kernels.cu"));
        assertEquals(HashMapLayout.KEY_BYTES_OFFSET, define(source, "MAP_KEY_BYTES"));
        assertEquals(HashMapLayout.VALUE_BYTES_OFFSET, define(source, "MAP_VALUE_BYTES"));
        assertEquals(HashMapLayout.SLOTS_OFFSET, define(source, "MAP_SLOTS"));
        assertEquals(HashMapLayout.HEADER_BYTES, define(source, "MAP_HEADER"));
        assertEquals(HashMapLayout.SLOT_HASH, define(source, "MAP_SLOT_HASH"));
        assertEquals(HashMapLayout.SLOT_KEY, define(source, "MAP_SLOT_KEY"));
        assertEquals(HashMapLayout.DEVICE_INLINE_BYTES, define(source, "MAP_INLINE_BYTES"));
        assertEquals(HashMapLayout.DEVICE_OUT_VALUE, define(source, "MAP_OUT_VALUE"));
        assertEquals(HashMapLayout.EMPTY, define(source, "MAP_EMPTY"));
        assertEquals(HashMapLayout.FULL, define(source, "MAP_FULL"));
        assertEquals(HashMapLayout.REMOVED, define(source, "MAP_REMOVED"));
        assertEquals(HashMapLayout.LOCKED, define(source, "MAP_LOCKED"));
        assertEquals(HashMapLayout.DEAD, define(source, "MAP_DEAD"));
        assertEquals(HashMapLayout.OP_GET, define(source, "MAP_OP_GET"));
        assertEquals(HashMapLayout.OP_PUT, define(source, "MAP_OP_PUT"));
        assertEquals(HashMapLayout.OP_PUT_IF_ABSENT, define(source, "MAP_OP_PUT_IF_ABSENT"));
        assertEquals(HashMapLayout.OP_REMOVE, define(source, "MAP_OP_REMOVE"));
        assertEquals(HashMapLayout.OP_LOCK, define(source, "MAP_OP_LOCK"));
        assertEquals(HashMapLayout.OP_UNLOCK, define(source, "MAP_OP_UNLOCK"));
        assertEquals(HashMapLayout.OP_RETIRE, define(source, "MAP_OP_RETIRE"));
        assertEquals(HashMapLayout.UNLOCK_WRITE, define(source, "MAP_UNLOCK_WRITE"));
        assertEquals(HashMapLayout.RESULT_ABSENT, define(source, "MAP_ABSENT"));
        assertEquals(HashMapLayout.RESULT_PRESENT, define(source, "MAP_PRESENT"));
        assertEquals(HashMapLayout.RESULT_BUSY, define(source, "MAP_BUSY"));
        assertEquals(HashMapLayout.RESULT_NO_SLOT, define(source, "MAP_NO_SLOT"));
        // the slot word: bits 0-2 state, 3-23 rank, 24-63 version, as map_word builds it
        assertTrue(source.contains("return (version << 24) | (rank << 3) | state;"), "map_word's bit layout");
        assertEquals(HashMapLayout.slotWord(HashMapLayout.LOCKED, 2, 9), (9L << 24) | (2L << 3) | 3);
    }

    private static long define(String source, String name) {
        Matcher m = Pattern.compile("#define " + name + " (0x[0-9A-Fa-f]+|[0-9]+)u?\\b").matcher(source);
        assertTrue(m.find(), name + " not defined in symmem4j_kernels.cu");
        String v = m.group(1);
        return v.startsWith("0x") ? Long.parseLong(v.substring(2), 16) : Long.parseLong(v);
    }
}
