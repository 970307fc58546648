package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.numeric.BFloat16;

/** The parts of {@link FsdpMlpBench} that run without GPUs: shapes, the stacked widths, the weights and the batch tiles. */
class FsdpMlpBenchTest {

    @Test
    void shapesAreTokensByHiddenByFfnAndBlocksStackTheMlp() {
        assertArrayEquals(new int[] {8192, 4096, 14336}, FsdpMlpBench.shape("8192x4096x14336"));
        assertArrayEquals(new int[] {4096, 14336, 4096}, FsdpMlpBench.widths(4096, 14336, 1));
        assertArrayEquals(new int[] {64, 256, 64, 256, 64}, FsdpMlpBench.widths(64, 256, 2));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> FsdpMlpBench.shape("8192x4096"));
        assertTrue(e.getMessage().contains("tokens x hidden x ffn"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> FsdpMlpBench.shape("8192x0x14336"));
        assertTrue(e.getMessage().contains("positive"), e.getMessage());
    }

    /** Every rank computes any weight element alike (the float64 check and the bitwise comparison rely on it). */
    @Test
    void weightsAreAFunctionOfLayerAndIndexUniformWithinTheScale() {
        double scale = 1 / Math.sqrt(4096);
        double sum = 0;
        double sumSq = 0;
        int n = 1 << 20;
        for (int i = 0; i < n; i++) {
            double w = FsdpMlpBench.weightAt(0, i, scale);
            assertTrue(Math.abs(w) <= scale, "weight " + i + " = " + w);
            assertEquals(w, FsdpMlpBench.weightAt(0, i, scale));
            sum += w;
            sumSq += w * w;
        }
        assertTrue(Math.abs(sum / n) < 0.01 * scale, "mean " + sum / n);
        // uniform in ±s has variance s²/3
        assertEquals(scale * scale / 3, sumSq / n, 0.01 * scale * scale);
        assertTrue(FsdpMlpBench.weightAt(0, 5, scale) != FsdpMlpBench.weightAt(1, 5, scale), "layers differ");
    }

    @Test
    void batchTilesAreBfloat16ExactAndSeeded() {
        float[] a = FsdpMlpBench.tile(7000, 1.0);
        assertArrayEquals(a, FsdpMlpBench.tile(7000, 1.0));
        for (float x : a) {
            assertEquals(x, BFloat16.toFloat(BFloat16.fromFloat(x)));
            assertTrue(Math.abs(x) <= 1);
        }
        assertTrue(a[0] != FsdpMlpBench.tile(7001, 1.0)[0] || a[1] != FsdpMlpBench.tile(7001, 1.0)[1], "ranks' batches differ");
    }
}
