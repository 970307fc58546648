package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.lang.foreign.MemorySegment;
import org.junit.jupiter.api.Test;

/** The launch arguments' bytes are those of the CUDA C parameters, little-endian, in order. */
class KernelArgumentsTest {

    @Test
    void eachKindHasItsCSizeAndLittleEndianBytes() {
        KernelArguments a = new KernelArguments()
                .pointer(0x0102030405060708L)
                .pointer(MemorySegment.ofAddress(0x10L))
                .int32(0x0A0B0C0D)
                .int64(-2)
                .float32(1.0f)
                .float64(-0.5)
                .struct(new byte[] {1, 2, 3});
        assertEquals(7, a.count());
        int[] sizes = {8, 8, 4, 8, 4, 8, 3};
        for (int i = 0; i < sizes.length; i++) {
            assertEquals(sizes[i], a.byteSize(i), "argument " + i);
        }
        assertArrayEquals(new byte[] {8, 7, 6, 5, 4, 3, 2, 1}, a.bytes(0));
        assertArrayEquals(new byte[] {0x10, 0, 0, 0, 0, 0, 0, 0}, a.bytes(1));
        assertArrayEquals(new byte[] {0x0D, 0x0C, 0x0B, 0x0A}, a.bytes(2));
        assertArrayEquals(new byte[] {-2, -1, -1, -1, -1, -1, -1, -1}, a.bytes(3));
        assertArrayEquals(new byte[] {0, 0, (byte) 0x80, 0x3F}, a.bytes(4)); // 1.0f = 0x3F800000
        assertArrayEquals(new byte[] {0, 0, 0, 0, 0, 0, (byte) 0xE0, (byte) 0xBF}, a.bytes(5)); // -0.5 = 0xBFE0000000000000
        assertArrayEquals(new byte[] {1, 2, 3}, a.bytes(6));
        assertEquals("pointer", a.kind(0));
        assertEquals("struct", a.kind(6));
        assertEquals("KernelArguments[pointer(8 B), pointer(8 B), int32(4 B), int64(8 B), float32(4 B), float64(8 B),"
                + " struct(3 B)]", a.toString());
    }

    @Test
    void bytesAreCopiesAndEmptyStructsAreRefused() {
        byte[] struct = {9};
        KernelArguments a = new KernelArguments().struct(struct);
        struct[0] = 0;
        a.bytes(0)[0] = 0;
        assertArrayEquals(new byte[] {9}, a.bytes(0));
        assertThrows(IllegalArgumentException.class, () -> new KernelArguments().struct(new byte[0]));
    }
}
