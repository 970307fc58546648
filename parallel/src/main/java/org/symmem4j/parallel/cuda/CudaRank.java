package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;

/**
 * One rank's GPU: device, its primary context (made current on the rank's thread), a non-blocking
 * stream and the kernels loaded into the context. Rank r uses device r mod deviceCount, so on a
 * one-GPU machine all ranks share it (correct, not fast).
 */
final class CudaRank {

    final int rank;
    final int ordinal;
    final int device;
    final MemorySegment context;
    final MemorySegment stream;
    final CudaKernels kernels;
    final int multiprocessors;
    final String deviceName;

    CudaRank(CudaDriver driver, int rank) {
        this.rank = rank;
        int count = driver.deviceCount();
        if (count < 1) {
            throw new CudaUnavailableException("CUDA driver reports no devices");
        }
        this.ordinal = rank % count;
        this.device = driver.device(ordinal);
        this.context = driver.retainPrimaryContext(device);
        driver.setCurrent(context);
        this.stream = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
        this.kernels = CudaKernels.present() ? new CudaKernels(driver) : null;
        this.multiprocessors = driver.multiprocessorCount(device);
        this.deviceName = driver.deviceName(device);
    }

    /** The kernels, or an exception saying they were not built. */
    CudaKernels kernels() {
        if (kernels == null) {
            throw new CudaUnavailableException("symmem4j CUDA kernels are absent (" + CudaKernels.RESOURCE
                    + " missing from the class path: built without nvcc); only Algorithm.NCCL can run");
        }
        return kernels;
    }
}
