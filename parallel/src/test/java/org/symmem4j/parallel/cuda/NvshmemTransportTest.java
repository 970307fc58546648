package org.symmem4j.parallel.cuda;

import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.Nvshmem;

/**
 * The NVSHMEM transport with every PE in a process of its own on a GPU of its own:
 * {@code -Dsymmem4j.test.nvshmemRanks=N} processes (default: one per GPU; one on a one-GPU machine, where
 * NVSHMEM refuses a second process on the same GPU without MPS) each run {@link NvshmemWorker}. Skipped,
 * saying why, without CUDA, without our kernels or without NVSHMEM's host library.
 */
class NvshmemTransportTest {

    private static int ranks;

    @BeforeAll
    static void gpuAndNvshmem() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
        Assumptions.assumeTrue(Nvshmem.available(), "no NVSHMEM: " + Nvshmem.unavailableReason());
        ranks = Integer.getInteger("symmem4j.test.nvshmemRanks", CudaDriver.get().deviceCount());
    }

    @Test
    void processesShareTheSymmetricHeapAndHandOffThroughIt(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(NvshmemWorker.class, ranks, "NVSHMEM OK", logs, 240);
    }
}
