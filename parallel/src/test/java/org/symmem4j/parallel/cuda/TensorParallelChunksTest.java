package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Configuration;

/**
 * How the fused tensor-parallel GEMMs cut a peer's block into chunks (no GPU needed): by default whole blocks on 2
 * ranks and 1024-row chunks on more ({@code -Dsymmem4j.tp.chunk.rows} sets it; 0 for whole blocks), at most
 * {@link CudaTensorParallelGemm#MAX_CHUNKS}, nearly equal, covering every row exactly once.
 */
class TensorParallelChunksTest {

    @Test
    void blocksAreWholeOnTwoRanksAndChunkedOnMoreByDefault() {
        Assumptions.assumeTrue(!Configuration.TP_CHUNK_ROWS.isSet(), "-Dsymmem4j.tp.chunk.rows is set");
        assertEquals(0, CudaTensorParallelGemm.chunkRows(2));
        assertEquals(CudaTensorParallelGemm.DEFAULT_CHUNK_ROWS, CudaTensorParallelGemm.chunkRows(4));
        assertEquals(CudaTensorParallelGemm.DEFAULT_CHUNK_ROWS, CudaTensorParallelGemm.chunkRows(8));
        for (int rows : new int[] {1, 1024, 8192, 100_000, Integer.MAX_VALUE}) {
            assertEquals(1, CudaTensorParallelGemm.chunksPerBlock(rows, CudaTensorParallelGemm.chunkRows(2)), rows + " rows");
        }
        assertEquals(4, CudaTensorParallelGemm.chunksPerBlock(4096, CudaTensorParallelGemm.chunkRows(4)));
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
