package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;

class ThresholdTableTest {

    @Test
    void lookupFollowsThresholdsAndFallsBackToNearestWorldSize() {
        ThresholdTable t = ThresholdTable.parse("""
                host-in-jvm.2=ONE_SHOT:4096,TWO_SHOT:1048576,RING:max
                host-in-jvm.8=ONE_SHOT:1024,RING:max
                """, "test");
        assertEquals(Algorithm.ONE_SHOT, t.lookup("host-in-jvm", 2, 1));
        assertEquals(Algorithm.ONE_SHOT, t.lookup("host-in-jvm", 2, 4096));
        assertEquals(Algorithm.TWO_SHOT, t.lookup("host-in-jvm", 2, 4097));
        assertEquals(Algorithm.RING, t.lookup("host-in-jvm", 2, 1L << 30));
        assertEquals(Algorithm.TWO_SHOT, t.lookup("host-in-jvm", 4, 8192), "world size 4 uses the nearest smaller row (2)");
        assertEquals(Algorithm.RING, t.lookup("host-in-jvm", 16, 8192), "world size 16 uses the nearest smaller row (8)");
        assertEquals(Algorithm.ONE_SHOT, t.lookup("host-in-jvm", 1, 100), "below every row: the nearest larger (2)");
        assertEquals(Algorithm.ONE_SHOT, t.lookup("cuda", 2, 1024), "unknown transport: built-in ONE_SHOT up to 64 KiB");
        assertEquals(Algorithm.TWO_SHOT, t.lookup("cuda", 2, 1 << 20));
    }

    @Test
    void aDtypeRowTakesPrecedenceForItsDtypeOnly() {
        ThresholdTable t = ThresholdTable.parse("""
                cuda-x.4=ONE_SHOT:262144,TWO_SHOT:4194304,NCCL:max
                cuda-x.4.float32=ONE_SHOT:4194304,NCCL:max
                cuda-x.8.BFLOAT16=NCCL:max
                """, "test");
        assertEquals(Algorithm.ONE_SHOT, t.lookup("cuda-x", 4, DType.FLOAT32, 4 << 20), "the float32 row");
        assertEquals(Algorithm.TWO_SHOT, t.lookup("cuda-x", 4, DType.BFLOAT16, 4 << 20), "no bfloat16 row: the plain one");
        assertEquals(Algorithm.TWO_SHOT, t.lookup("cuda-x", 4, 4 << 20), "no dtype: the plain row");
        assertEquals(Algorithm.NCCL, t.lookup("cuda-x", 8, DType.BFLOAT16, 1024), "dtype names are case-insensitive");
        assertEquals(Algorithm.TWO_SHOT, t.lookup("cuda-x", 8, DType.FLOAT32, 1 << 20),
                "no plain row for 8: the nearest plain row (4), never another dtype's");
        assertEquals(t.row("cuda-x", 4, DType.FLOAT32), ThresholdTable.parse(t.format("c"), "back").row("cuda-x", 4, DType.FLOAT32));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ThresholdTable.parse("x.2.float33=NCCL:max\n", "f"))
                .getMessage().contains("world size is not a number"));
    }

    @Test
    void formatParsesBack() {
        ThresholdTable t = ThresholdTable.parse("host-shm.4=ONE_SHOT:2048,TWO_SHOT:max\n", "a")
                .with("host-in-jvm", 2, List.of(new ThresholdTable.Threshold(100, Algorithm.RING),
                        new ThresholdTable.Threshold(Long.MAX_VALUE, Algorithm.TWO_SHOT)));
        ThresholdTable back = ThresholdTable.parse(t.format("comment\nsecond line"), "b");
        assertEquals(t.row("host-shm", 4), back.row("host-shm", 4));
        assertEquals(t.row("host-in-jvm", 2), back.row("host-in-jvm", 2));
        assertTrue(t.format("c").startsWith("# c\n"));
    }

    @Test
    void algorithmNamesParseInEverySpellingOldFilesUse() {
        ThresholdTable t = ThresholdTable.parse("""
                cuda-x.2=one-shot:1024,NCCL_SYMMETRIC:4096,two_shot:65536,Nccl:max
                """, "test");
        assertEquals(List.of(new ThresholdTable.Threshold(1024, Algorithm.ONE_SHOT),
                new ThresholdTable.Threshold(4096, Algorithm.NCCL_SYMMETRIC), new ThresholdTable.Threshold(65536, Algorithm.TWO_SHOT),
                new ThresholdTable.Threshold(Long.MAX_VALUE, Algorithm.NCCL)), t.row("cuda-x", 2));
        assertTrue(t.format("c").contains("cuda-x.2=ONE_SHOT:1024,NCCL_SYMMETRIC:4096,TWO_SHOT:65536,NCCL:max"), t.format("c"));
    }

    @Test
    void malformedRowsAreRejectedWithWhatWasExpected() {
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ThresholdTable.parse("x.2=ONE_SHOT:10\n", "f"))
                .getMessage().contains("must end with <ALGORITHM>:max"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ThresholdTable.parse("x.2=TURBO:max\n", "f"))
                .getMessage().contains("algorithm=TURBO expected one of"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ThresholdTable.parse("x.2=ONE_SHOT:10,RING:5,TWO_SHOT:max\n", "f"))
                .getMessage().contains("thresholds must ascend"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ThresholdTable.parse("x=ONE_SHOT:max\n", "f"))
                .getMessage().contains("expected <transport>.<worldSize>"));
    }

    @Test
    void shippedDefaultsCoverTheHostTransports() {
        ThresholdTable d = ThresholdTable.defaults();
        assertNotNull(d.row("host-in-jvm", 2));
        assertNotNull(d.row("host-shm", 2));
    }

    /** The H100 rows measured on 2026-11-26: ONE_SHOT up to the row's threshold, TWO_SHOT above, per dtype. */
    @Test
    void shippedDefaultsCoverTwoAndFourH100s() {
        ThresholdTable d = ThresholdTable.defaults();
        String h100 = "cuda-nvidia-h100-80gb-hbm3";
        assertEquals(Algorithm.ONE_SHOT, d.lookup(h100, 2, DType.BFLOAT16, 4L << 20));
        assertEquals(Algorithm.TWO_SHOT, d.lookup(h100, 2, DType.BFLOAT16, 8L << 20));
        assertEquals(Algorithm.ONE_SHOT, d.lookup(h100, 4, DType.BFLOAT16, 1L << 20));
        assertEquals(Algorithm.TWO_SHOT, d.lookup(h100, 4, DType.BFLOAT16, 2L << 20));
        assertEquals(Algorithm.ONE_SHOT, d.lookup(h100, 4, DType.FLOAT32, 256L << 10));
        assertEquals(Algorithm.TWO_SHOT, d.lookup(h100, 4, DType.FLOAT32, 512L << 10));
    }

    @Test
    void aCalibrationFileOverridesTheDefaults(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("t.properties");
        Files.writeString(file, "host-in-jvm.2=RING:max\n");
        String old = System.getProperty(ThresholdTable.PROPERTY);
        System.setProperty(ThresholdTable.PROPERTY, file.toString());
        try {
            ThresholdTable t = ThresholdTable.load();
            assertEquals(Algorithm.RING, t.lookup("host-in-jvm", 2, 1));
            assertNotNull(t.row("host-shm", 2), "rows the file lacks come from the defaults");
            System.setProperty(ThresholdTable.PROPERTY, dir.resolve("missing").toString());
            assertTrue(assertThrows(IllegalArgumentException.class, ThresholdTable::load).getMessage()
                    .contains("is not a readable file"));
        } finally {
            if (old == null) {
                System.clearProperty(ThresholdTable.PROPERTY);
            } else {
                System.setProperty(ThresholdTable.PROPERTY, old);
            }
        }
    }
}
