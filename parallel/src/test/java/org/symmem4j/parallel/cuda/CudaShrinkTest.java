package org.symmem4j.parallel.cuda;

import java.nio.file.Path;
import java.util.Set;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.ffi.Cublas;

/**
 * In-place shrink of a GPU process group (issue 32): {@code -Dsymmem4j.test.cudaRanks=N} processes (N ≥ 3; default one
 * per GPU, sharing the GPUs where there are fewer) each run {@link CudaShrinkWorker} under this JVM acting as
 * {@code symmem4j-run --on-failure shrink} (it announces a rank whose process ends in the membership file,
 * {@link WorkerProcesses#runWithShrink}); rank 1 kills itself with SIGKILL after 3 of 6 steps of a
 * {@code ShrinkingMlp} (plain data parallelism), and the N − 1 survivors shrink in place, go on from step 3 and finish:
 * bitwise equal to a fresh model of N − 1 ranks from step 3's state, every replica the same, and the device's free
 * memory back where it was before the 4 GiB ballast per rank and the model (cuMemGetInfo). Skipped without a GPU, the
 * kernels or cuBLAS.
 */
class CudaShrinkTest {

    private static int ranks;

    @BeforeAll
    static void gpu() {
        GpuTestSupport.assumeGpuAndKernels();
        Assumptions.assumeTrue(Cublas.available(), "no cuBLAS: " + Cublas.unavailableReason());
        ranks = GpuTestSupport.ranks();
        Assumptions.assumeTrue(ranks >= 3, "a shrink from " + ranks + " ranks leaves " + (ranks - 1) + ": this test needs"
                + " at least 3 (-Dsymmem4j.test.cudaRanks=3)");
    }

    @Test
    void survivorsShrinkInPlaceAndTrainOnBitwiseAsAFreshGroup(@TempDir Path logs) throws Exception {
        WorkerProcesses.runWithShrink(CudaShrinkWorker.class, ranks, "SHRINK OK", logs, 240, Set.of(1), "6", "1", "3",
                "4096");
    }
}
