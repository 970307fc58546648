package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@link RingFillBenchmark}'s fill arithmetic, its pacing file ({@link FillPacer}) and the suite's fork spread. */
class RingFillBenchmarkTest {

    @TempDir
    Path dir;

    @Test
    void fillLevelIsThePercentOfRecordsRoundedToBatches() {
        // 64 B + 8 B header = 72 B records: 1 MiB holds 14563; 25 % = 3640.75 -> 57 batches of 64
        assertEquals(3648, RingFillBenchmark.fillMessages(1 << 20, 64, 25, 64));
        // 75 %: 10922.25 -> 171 batches
        assertEquals(10944, RingFillBenchmark.fillMessages(1 << 20, 64, 75, 64));
        // 1 KiB + 8 = 1032 B records: 1016 of them; 75 % = 762 -> 12 batches
        assertEquals(768, RingFillBenchmark.fillMessages(1 << 20, 1024, 75, 64));
        // 1 % of 1 KiB records is under one batch: one batch
        assertEquals(64, RingFillBenchmark.fillMessages(1 << 20, 1024, 1, 64));
        // 255 B rounds up to 256 + 8: 3971 records, 25 % = 992.75 -> 16 batches
        assertEquals(1024, RingFillBenchmark.fillMessages(1 << 20, 255, 25, 64));
    }

    @Test
    void aWindowThatDoesNotFitTheRingIsRefused() {
        // 99 % of 1016 records of 1 KiB rounds to 1024, over the ring before the 2 batches are added
        var e = assertThrows(IllegalArgumentException.class, () -> RingFillBenchmark.fillMessages(1 << 20, 1024, 99,
                64));
        assertTrue(e.getMessage().contains("capacity=1048576") && e.getMessage().contains("fix:"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> RingFillBenchmark.fillMessages(1 << 20, 64, 0, 64));
        assertThrows(IllegalArgumentException.class, () -> RingFillBenchmark.fillMessages(1 << 20, 64, 100, 64));
    }

    @Test
    void bothMappingsOfThePacingFileSeeEachOthersCounters() throws IOException {
        Path file = FillPacer.path(dir.resolve("ring"));
        try (FillPacer producer = FillPacer.create(file, 3648, 64);
             FillPacer consumer = FillPacer.open(file)) {
            assertEquals(3648, consumer.target());
            assertEquals(64, consumer.batch());
            assertEquals(0, consumer.sent());
            producer.publishSent(128);
            assertEquals(128, consumer.sent());
            consumer.publishConsumed(64);
            assertEquals(64, producer.consumed());
            assertFalse(consumer.stopped());
            producer.stop();
            assertTrue(consumer.stopped());
        }
        FillPacer.delete(file);
        assertFalse(Files.exists(file));
    }

    @Test
    void aMissingPacingFileIsNamedWithTheFix() {
        Path file = dir.resolve("none-pace");
        var e = assertThrows(IOException.class, () -> FillPacer.open(file));
        assertTrue(e.getMessage().contains(file.toString()) && e.getMessage().contains("found none")
                && e.getMessage().contains("fix:"), e.getMessage());
    }

    @Test
    void forksSpreadIsTheirRangeOverTheirMean() {
        assertEquals(1.0, RingFillSuite.spread(new double[] {1, 2, 3}), 1e-12);
        assertEquals(0.0, RingFillSuite.spread(new double[] {5, 5}), 1e-12);
    }
}
