package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class CpuListTest {

    @Test
    void parsesAndFormatsLinuxCpuLists() {
        assertEquals(List.of(0, 1, 2, 3, 8, 10, 11), CpuList.parse(" 0-3,8,10-11\n"));
        assertEquals(List.of(5), CpuList.parse("5"));
        assertEquals(List.of(1, 2, 3), CpuList.parse("3,1-2,2"), "sorted, each once");
        assertEquals("0-3,8,10-11", CpuList.format(List.of(0, 1, 2, 3, 8, 10, 11)));
        assertEquals("4,9", CpuList.format(List.of(4, 9)));
        assertEquals("7", CpuList.format(List.of(7)));
    }

    @Test
    void refusesWhatIsNoCpuList() {
        for (String bad : List.of("a", "3-1", "1,,2", "-1")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> CpuList.parse(bad));
            assertTrue(e.getMessage().contains("CPU list '" + bad + "'"), e.getMessage());
            assertTrue(e.getMessage().contains("fix: "), "every refusal names the fix: " + e.getMessage());
        }
    }
}
