package org.symmem4j.parallel.cuda;

import org.junit.jupiter.api.Assumptions;

/**
 * What the in-JVM GPU test classes share: skipping (not passing) without a CUDA driver or the kernels, and how many
 * ranks their groups have.
 */
final class GpuTestSupport {

    private GpuTestSupport() {
    }

    /** Skips the calling test where there is no CUDA driver or the kernels were not built. */
    static void assumeGpuAndKernels() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
    }

    /**
     * One rank per GPU (at least 2: on one GPU they share it, for correctness); {@code -Dsymmem4j.test.cudaRanks=N}
     * runs N ranks, sharing GPUs where N exceeds their number.
     *
     * @throws IllegalArgumentException when fewer than 2 ranks are asked for
     */
    static int ranks() {
        int ranks = Integer.getInteger("symmem4j.test.cudaRanks",
                Math.max(2, Math.min(CudaKernels.MAX_RANKS, CudaDriver.get().deviceCount())));
        if (ranks < 2) {
            throw new IllegalArgumentException("symmem4j.test.cudaRanks=" + ranks + ": these tests check what"
                    + " ranks do to each other and need at least 2 (2 share the GPU on a one-GPU machine)");
        }
        return ranks;
    }
}
