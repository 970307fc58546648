package org.symmem4j.pipeline.exec;

import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.CudaKernels;
import org.symmem4j.parallel.cuda.NvshmemTransport;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * The pipeline executor on NVSHMEM links: one process per GPU ({@code -Dsymmem4j.test.nvshmemRanks=N}, default
 * every GPU), each a {@link NvshmemPipelineWorker}. NVSHMEM needs a GPU per PE and a pipeline two stage ranks,
 * so this needs 2 GPUs; skipped, saying why, with fewer, or without CUDA, our kernels or NVSHMEM.
 */
class NvshmemPipelineExecutorTest {

    @Test
    void microbatchesCrossNvshmemLinksIntact(@TempDir Path logs) throws Exception {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
        Assumptions.assumeTrue(NvshmemTransport.available(), "no NVSHMEM: " + NvshmemTransport.unavailableReason());
        int ranks = Integer.getInteger("symmem4j.test.nvshmemRanks", CudaDriver.get().deviceCount());
        Assumptions.assumeTrue(ranks >= 2, "a pipeline over NVSHMEM needs 2 GPUs (a PE per GPU, 2 stage ranks); this"
                + " machine has " + CudaDriver.get().deviceCount());
        WorkerProcesses.runAndCheck(NvshmemPipelineWorker.class, ranks, "NVSHMEM PIPELINE OK", logs, 240);
    }
}
