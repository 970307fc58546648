package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * {@link CudaDriver#copyHostToDevice} returns once the bytes are in device memory, from pageable host memory too
 * (a plain {@code cuMemcpyHtoD} may return with its staged DMA in flight, CUDA Driver API "API synchronization
 * behavior"): a copy on a non-blocking stream, which nothing orders after the legacy stream the synchronous copy ran
 * on, reads every byte of the new round right after it returns. Skipped (not passed) without a CUDA driver.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaHostCopyCompletionTest {

    /** Large enough that the driver stages it in many pieces, the last still in flight on a bare return. */
    static final long BYTES = 256L << 20;
    static final int ROUNDS = 8;

    @Test
    void aStreamCopyRightAfterASynchronousCopyFromPageableMemoryReadsTheNewBytes() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        CudaDriver driver = CudaDriver.get();
        int device = driver.device(0);
        MemorySegment context = driver.retainPrimaryContext(device);
        try (Arena arena = Arena.ofConfined()) {
            driver.setCurrent(context);
            MemorySegment stream = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
            long a = driver.malloc(BYTES);
            long b = driver.malloc(BYTES);
            try {
                MemorySegment host = arena.allocate(BYTES, 64); // an arena's memory: pageable
                MemorySegment back = arena.allocate(BYTES, 64);
                int stale = 0;
                for (int round = 0; round < ROUNDS; round++) {
                    host.fill((byte) (round + 1)); // each round's bytes differ from the last one's
                    driver.copyHostToDevice(a, host, BYTES);
                    // not ordered after the legacy stream: reads a as it is when the copy above returned
                    driver.copyDeviceToDeviceAsync(b, a, BYTES, stream);
                    driver.synchronize(stream);
                    driver.copyDeviceToHost(back, b, BYTES);
                    if (back.mismatch(host) != -1) {
                        stale++;
                    }
                }
                assertEquals(0, stale, "rounds (of " + ROUNDS + ") whose stream copy read bytes the synchronous copy"
                        + " from pageable memory had not landed yet");
            } finally {
                driver.synchronize(stream);
                driver.free(a);
                driver.free(b);
                driver.destroyStream(stream);
            }
        } finally {
            driver.releasePrimaryContext(device);
        }
    }
}
