package org.symmem4j.state;

import java.time.Duration;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.cuda.CudaKernels;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * What the state module's GPU tests share: they skip without CUDA or without the kernels, take their ranks (threads
 * of this JVM sharing the GPUs) from one CUDA transport per test class, closed after the class, and rendezvous on the
 * host between steps. Each test class runs in its own JVM on the GPU machines ({@code bench/gpu/run-on-device.sh}).
 */
abstract class CudaStateTestBase {

    /** Bounded waits generous enough for ranks sharing one GPU. */
    static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    private static CudaTransport cuda;

    @BeforeEach
    void needsAGpu() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
    }

    @AfterAll
    static void closeTransport() {
        synchronized (CudaStateTestBase.class) {
            if (cuda != null) {
                cuda.close();
                cuda = null;
            }
        }
    }

    /** Where the GPU memory comes from (every rank of a group must get the same instance). */
    static synchronized Transport gpuTransport() {
        if (cuda == null) {
            cuda = CudaTransport.create();
        }
        return cuda;
    }

    /** Ranks per test: {@code -Dsymmem4j.test.cudaRanks} (at least 2; default 2). */
    static int world() {
        return Math.max(2, Integer.getInteger("symmem4j.test.cudaRanks", 2));
    }

    /** A host-only rendezvous: no work on any stream, so it never waits behind a kernel. */
    static void hostBarrier(Group group, String tag) {
        group.allGatherBytes(tag, new byte[0]);
    }
}
