package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@link RawCsv}: header once, rows appended, quoting that {@code Plots.readCsv} reads back, layouts never mixed. */
class RawCsvTest {

    @TempDir
    Path dir;

    @Test
    void rowsAppendUnderOneHeaderAndReadBackThroughPlots() throws IOException {
        Path file = dir.resolve("sub/runs.csv");
        try (RawCsv csv = RawCsv.open(file, List.of("config", "rep", "step_ms"))) {
            csv.row("4 ranks 1f1b, split by \"parameters\"", 1, RawCsv.num("%.3f", 12.34567));
        }
        try (RawCsv csv = RawCsv.open(file, List.of("config", "rep", "step_ms"))) {
            csv.row("plain", 2, RawCsv.num("%.3f", Double.NaN));
        }
        assertEquals(List.of("config,rep,step_ms", "\"4 ranks 1f1b, split by \"\"parameters\"\"\",1,12.346", "plain,2,"),
                Files.readAllLines(file));
        List<Map<String, String>> rows = Plots.readCsv(file);
        assertEquals("4 ranks 1f1b, split by \"parameters\"", rows.get(0).get("config"));
        assertEquals("", rows.get(1).get("step_ms"), "NaN is an empty field");
    }

    @Test
    void anotherHeaderIsRefusedBeforeAnythingIsWritten() throws IOException {
        Path file = dir.resolve("runs.csv");
        Files.writeString(file, "a,b\n1,2\n");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RawCsv.open(file, List.of("a", "b", "c")));
        assertTrue(e.getMessage().contains("has header=a,b expected=a,b,c"), e.getMessage());
        assertEquals("a,b\n1,2\n", Files.readString(file));
    }

    @Test
    void aRowOfTheWrongWidthIsRefused() throws IOException {
        try (RawCsv csv = RawCsv.open(dir.resolve("runs.csv"), List.of("a", "b"))) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> csv.row(1));
            assertTrue(e.getMessage().endsWith("row of 1 fields, expected 2 (a,b)"), e.getMessage());
        }
    }
}
