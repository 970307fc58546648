package org.symmem4j.parallel.trace;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The test-side JSON reader accepts JSON and nothing else. */
class JsonTest {

    @Test
    void readsValues() {
        Map<String, Object> expected = new LinkedHashMap<>();
        expected.put("a", List.of(1.0, -2.5, 3e2));
        expected.put("s", "q\"\\/\n\u00e9");
        expected.put("t", true);
        expected.put("n", null);
        expected.put("o", Map.of());
        assertEquals(expected, Json.parse(" {\"a\": [1, -2.5, 3E+2], \"s\": \"q\\\"\\\\\\/\\n\\u00e9\", \"t\": true,"
                + " \"n\": null, \"o\": {}}\n"));
        assertEquals(List.of(), Json.parse("[]"));
        assertEquals(0.0, Json.parse("0"));
    }

    @Test
    void rejectsWhatIsNotJson() {
        for (String bad : List.of("{\"a\": 1,}", "[1, 2,]", "{'a': 1}", "{\"a\": 1} x", "// c\n{}", "{\"a\": 01}",
                "{\"a\": 1, \"a\": 2}", "[1 2]", "\"tab\there\"", "{\"a\" 1}", "", "tru", "[.5]", "{\"a\": NaN}")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
            assertTrue(e.getMessage().startsWith("invalid JSON at line="), e.getMessage());
        }
        IllegalArgumentException dup = assertThrows(IllegalArgumentException.class, () -> Json.parse("{\"k\": 1,\n \"k\": 2}"));
        assertTrue(dup.getMessage().contains("line=2") && dup.getMessage().contains("duplicate \"k\""), dup.getMessage());
        assertEquals(Arrays.asList(1.0, null), Json.parse("[1,null]"));
    }
}
