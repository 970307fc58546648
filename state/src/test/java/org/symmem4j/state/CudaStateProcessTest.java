package org.symmem4j.state;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.CudaThreadRanksTestBase;
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.cuda.WorkerProcesses;

/**
 * The GPU shared-state structures with one process per rank, the ranks sharing the machine's GPUs
 * ({@code -Dsymmem4j.test.cudaRanks=N} processes, default 2), each a JVM of its own running
 * {@link CudaStateProcessWorker} on a CUDA process group, with the last rank killed by SIGKILL while it holds a
 * {@link DeviceHashMap} slot locked (a host-driven compute in progress). The child JVMs get
 * {@code -Dsymmem4j.test.classPath} as their class path where it is set (the GPU machine's runner sets it). Skipped
 * without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaStateProcessTest extends CudaThreadRanksTestBase {

    @Test
    void deviceMapHolderKilledInsideComputeLeavesNoValidSlotAndTheSurvivorsGoOn(@TempDir Path dir) throws Exception {
        int ranks = world();
        Path logs = Files.createDirectories(dir.resolve("logs"));
        Path signals = Files.createDirectories(dir.resolve("signals"));
        WorkerProcesses.runAndCheck(CudaStateProcessWorker.class, ranks, "GPU STATE OK", logs, 180,
                Set.of(ranks - 1), "device-map-killed-holder", signals.toString());
    }
}
