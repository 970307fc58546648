package org.symmem4j.parallel.cuda;

import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * CUDA symmetric memory with every rank in a process of its own (one JVM per GPU, as under the
 * launcher): {@code -Dsymmem4j.test.cudaRanks=N} processes (default: one per GPU, at least 2, sharing
 * the GPUs where there are fewer) each run {@link CudaCrossProcessWorker}, which joins a process group
 * on the CUDA transport and checks our all-reduce kernels against the float64 reference and the
 * all-gather bitwise, that {@code register} is refused with the reason, and that memory allocated
 * and closed 20 times leaves the GPU's free memory where it was. The child JVMs get
 * {@code -Dsymmem4j.test.classPath} as their class path where it is set (the GPU machine's runner
 * sets it: JUnit's console launcher keeps the test class path to itself), else this JVM's.
 */
class CudaCrossProcessTest {

    private static int ranks;

    @BeforeAll
    static void gpu() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
        ranks = Integer.getInteger("symmem4j.test.cudaRanks", Math.max(2, CudaDriver.get().deviceCount()));
    }

    @Test
    void processesShareCudaMemoryAndReduceThroughIt(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(CudaCrossProcessWorker.class, ranks, "CROSS-PROCESS OK", logs, 240, "1000", "3000001");
    }
}
