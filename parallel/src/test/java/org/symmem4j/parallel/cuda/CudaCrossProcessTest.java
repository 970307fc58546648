package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.io.TempDir;

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
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        String java = ProcessHandle.current().info().command().orElse("java");
        String classPath = System.getProperty("symmem4j.test.classPath", System.getProperty("java.class.path"));
        String runId = "cuda-cross-process-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
        List<Process> processes = new ArrayList<>();
        List<Path> outputs = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            ProcessBuilder pb = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED",
                    "--add-modules=jdk.incubator.vector", "-Xmx1g", "-cp", classPath,
                    CudaCrossProcessWorker.class.getName(), "1000", "3000001");
            pb.environment().putAll(Map.of("RANK", Integer.toString(r), "WORLD_SIZE", Integer.toString(ranks),
                    "LOCAL_RANK", Integer.toString(r), "LOCAL_WORLD_SIZE", Integer.toString(ranks),
                    "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", Integer.toString(port), "SYMMEM4J_RUN_ID", runId));
            Path out = logs.resolve("rank-" + r + ".log");
            outputs.add(out);
            processes.add(pb.redirectErrorStream(true).redirectOutput(out.toFile()).start());
        }
        List<Integer> codes = new ArrayList<>();
        try {
            for (Process p : processes) {
                codes.add(p.waitFor(240, TimeUnit.SECONDS) ? p.exitValue() : -1);
            }
        } finally {
            processes.forEach(Process::destroyForcibly);
        }
        StringBuilder all = new StringBuilder();
        for (int r = 0; r < ranks; r++) {
            String text = Files.readString(outputs.get(r));
            all.append("---- rank ").append(r).append(" (exit ").append(codes.get(r)).append(")\n").append(text);
        }
        System.out.println(all);
        for (int r = 0; r < ranks; r++) {
            assertEquals(0, codes.get(r), "rank " + r + " failed (-1: still running after 240 s):\n" + all);
            assertTrue(Files.readString(outputs.get(r)).contains("CROSS-PROCESS OK rank=" + r), all::toString);
        }
    }
}
