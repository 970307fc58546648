package org.symmem4j.parallel.cuda;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * What the in-JVM GPU test classes share: skipping (not passing) without a CUDA driver or the kernels, how many ranks
 * their groups have, and one transport per class ({@link ClassTransport}).
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

    /**
     * A test class's {@link CudaTransport}: made by the first test that runs (after the skip, so a machine without a GPU
     * reports every test skipped) and closed after the class, which releases every rank it made, so that a later class's
     * test can be the kernels' last user and start from a clean device.
     */
    static final class ClassTransport {
        private CudaTransport cuda;
        private int worldSize;

        /** Skips without a GPU or the kernels; makes the transport and reads the rank count at the first call. */
        void open() {
            assumeGpuAndKernels();
            if (cuda == null) {
                cuda = CudaTransport.create();
                worldSize = ranks();
            }
        }

        /** The transport ({@link #open} first). */
        CudaTransport cuda() {
            return cuda;
        }

        /** The ranks of the class's groups ({@link #ranks()}). */
        int worldSize() {
            return worldSize;
        }

        /** Runs {@code task} on every rank of a group of threads of this JVM on this transport. */
        <T> List<T> onEveryRank(InJvmWorld.RankTask<T> task) {
            return InJvmWorld.runOnEveryRank(worldSize, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), cuda, task);
        }

        /** Runs {@code task} on every rank of a group of threads of this JVM on the default (host) transport. */
        <T> List<T> onEveryRankOfHostGroup(InJvmWorld.RankTask<T> task) {
            return InJvmWorld.runOnEveryRank(worldSize, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), task);
        }

        /** Closes the transport, if one was made. */
        void close() {
            if (cuda != null) {
                cuda.close();
                cuda = null;
            }
        }
    }
}
