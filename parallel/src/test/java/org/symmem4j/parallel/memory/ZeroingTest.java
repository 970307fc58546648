package org.symmem4j.parallel.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import org.junit.jupiter.api.Test;

/** {@link Zeroing}: every byte of the run zeroed, none outside it, on both sides of the odd-start threshold. */
class ZeroingTest {

    @Test
    void everyByteOfTheRunIsZeroedAndNoneAroundIt() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment memory = arena.allocate(8192, 64);
            int[] lengths = {0, 1, 7, 8, 31, 32, 33, 64, 72, 255, 256, Zeroing.ODD_START_BYTES - 1,
                Zeroing.ODD_START_BYTES, Zeroing.ODD_START_BYTES + 1, 4104, 4096 + 63};
            for (int length : lengths) {
                for (int start : new int[] {0, 1, 8, 13, 64, 1000}) {
                    memory.fill((byte) 0x5A);
                    Zeroing.zero(memory.asSlice(start, length));
                    for (int i = 0; i < 8192; i++) {
                        byte expected = i >= start && i < start + length ? 0 : (byte) 0x5A;
                        assertEquals(expected, memory.get(ValueLayout.JAVA_BYTE, i),
                                "byte " + i + " after zeroing " + length + " bytes from " + start);
                    }
                }
            }
        }
    }

    @Test
    void theControlSwitchIsTrueOrFalseAndAnythingElseIsRefused() {
        assertTrue(Zeroing.oddStart(null));
        assertTrue(Zeroing.oddStart(" TRUE "));
        assertFalse(Zeroing.oddStart("false"));
        var e = assertThrows(IllegalArgumentException.class, () -> Zeroing.oddStart("odd"));
        assertTrue(e.getMessage().contains("zeroOddStart=odd expected true or false") && e.getMessage().contains("fix:"),
                e.getMessage());
    }
}
