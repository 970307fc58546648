package org.symmem4j.parallel.cuda;

import java.time.Duration;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.Transport;

/**
 * What the GPU tests of the modules above {@code parallel} share (state, serving, pipeline; published in parallel's
 * test-jar): they skip without CUDA or without the kernels, take their ranks (threads of this JVM sharing the GPUs)
 * from one CUDA transport per test class, closed after the class, and rendezvous on the host between steps. Each test
 * class runs in its own JVM on the GPU machines ({@code bench/gpu/run-on-device.sh}). The name does not end in
 * {@code Test}, so neither surefire nor {@code gpu_test_classes()} runs it as a test class.
 */
public abstract class CudaThreadRanksTestBase {

    /** Bounded waits generous enough for ranks sharing one GPU. */
    protected static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    private static CudaTransport cuda;

    @BeforeEach
    void needsAGpu() {
        GpuTestSupport.assumeGpuAndKernels();
    }

    /** Releases every rank this class's transport made, so that a later class's test can be the kernels' last user. */
    @AfterAll
    static void closeTransport() {
        synchronized (CudaThreadRanksTestBase.class) {
            if (cuda != null) {
                cuda.close();
                cuda = null;
            }
        }
    }

    /**
     * Where the GPU memory comes from. Synchronized: the ranks' threads ask at once, and every rank of a group must get
     * the same instance.
     */
    protected static synchronized Transport gpuTransport() {
        if (cuda == null) {
            cuda = CudaTransport.create();
        }
        return cuda;
    }

    /** Ranks per test: {@code -Dsymmem4j.test.cudaRanks} (at least 2; default 2). */
    protected static int world() {
        return Math.max(2, Integer.getInteger("symmem4j.test.cudaRanks", 2));
    }

    /** A host-only rendezvous: no work on any stream, so it never waits behind a kernel. */
    protected static void hostBarrier(Group group, String tag) {
        group.allGatherBytes(tag, new byte[0]);
    }
}
