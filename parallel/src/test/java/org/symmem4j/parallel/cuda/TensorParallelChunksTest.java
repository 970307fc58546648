package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * How the fused tensor-parallel GEMMs cut a peer's block into chunks (no GPU needed): whole blocks by default
 * ({@code -Dsymmem4j.tp.chunkRows} unset or 0), else chunks of that many rows, at most
 * {@link CudaTensorParallelGemm#MAX_CHUNKS}, nearly equal, covering every row exactly once.
 */
class TensorParallelChunksTest {

    @Test
    void blocksAreWholeByDefault() {
        assertEquals(0, CudaTensorParallelGemm.CHUNK_ROWS, "the default without -Dsymmem4j.tp.chunkRows");
        for (int rows : new int[] {1, 1024, 8192, 100_000, Integer.MAX_VALUE}) {
            assertEquals(1, CudaTensorParallelGemm.chunksPerBlock(rows), rows + " rows");
        }
    }

    @Test
    void chunksCoverEveryRowOnceInNearlyEqualParts() {
        int chunkRows = 1024;
        for (int rows : new int[] {1, 7, 64, 1023, 1024, 1025, 1500, 2048, 3000, 8192, 100_000, Integer.MAX_VALUE}) {
            int chunks = CudaTensorParallelGemm.chunksPerBlock(rows, chunkRows);
            assertTrue(chunks >= 1 && chunks <= CudaTensorParallelGemm.MAX_CHUNKS, rows + " rows: " + chunks + " chunks");
            assertEquals(Math.min(CudaTensorParallelGemm.MAX_CHUNKS, (rows + (long) chunkRows - 1) / chunkRows), chunks,
                    rows + " rows");
            assertEquals(0, CudaTensorParallelGemm.chunkStart(rows, chunks, 0));
            assertEquals(rows, CudaTensorParallelGemm.chunkStart(rows, chunks, chunks));
            int smallest = Integer.MAX_VALUE;
            int largest = 0;
            for (int c = 0; c < chunks; c++) {
                int size = CudaTensorParallelGemm.chunkStart(rows, chunks, c + 1) - CudaTensorParallelGemm.chunkStart(rows, chunks, c);
                smallest = Math.min(smallest, size);
                largest = Math.max(largest, size);
            }
            assertTrue(largest - smallest <= 1, rows + " rows: chunk sizes " + smallest + ".." + largest);
        }
    }
}
