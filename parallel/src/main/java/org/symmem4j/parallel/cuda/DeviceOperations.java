package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * The GPU-only operations of a {@link CudaCommunicator} that are not collectives
 * ({@link org.symmem4j.parallel.DeviceCommunicator}): graph capture, ordering against other
 * streams, timing, device memory and copies, all on the rank's stream and context.
 */
final class DeviceOperations {

    private final CudaDriver driver;
    private final CudaRank rank;
    /** The communicator's synchronize: waits for the rank's stream, then checks NCCL for asynchronous errors. */
    private final Runnable synchronize;
    /**
     * The two events of {@link #orderAfter} and {@link #orderBefore}, made at the first call (ordering only: no timing).
     * A recorded event may be recorded again at once: a waiter enqueued earlier keeps the state it captured.
     */
    private MemorySegment afterEvent;
    private MemorySegment beforeEvent;

    DeviceOperations(CudaDriver driver, CudaRank rank, Runnable synchronize) {
        this.driver = driver;
        this.rank = rank;
        this.synchronize = synchronize;
    }

    /**
     * Collective: captures what {@code body} enqueues on this rank's stream into a CUDA graph.
     * Every rank must capture the same sequence.
     *
     * <p>Where ranks share a GPU, every rank also uploads its graph and waits for the others before
     * it returns, so that no rank replays while a peer is still instantiating: ranks on one GPU share
     * its context, and cuGraphInstantiate waits for kernels running in that context — a replay that
     * spins waiting for a rank still inside cuGraphInstantiate never ends (seen with 8 ranks on one
     * H100: five ranks in cuGraphInstantiateWithFlags, three in the replay's synchronize;
     * bench/results/2026-11-23-gpu-shared-ranks-h100.md).
     *
     * @param body         enqueues the work to capture
     * @param sharedDevice whether ranks of the group share a GPU
     * @param barrier      the group's host barrier
     * @return the graph, to replay and close
     */
    CudaGraph capture(Runnable body, boolean sharedDevice, Runnable barrier) {
        driver.setCurrent(rank.context);
        driver.synchronize(rank.stream);
        MemorySegment exec = rank.captureGraph(driver, body);
        EnqueueOrder.Seat order = rank.capturedOrder;
        rank.capturedOrder = null;
        if (sharedDevice) {
            try {
                driver.uploadGraph(exec, rank.stream);
                driver.synchronize(rank.stream);
                barrier.run(); // every rank's graph is instantiated and uploaded; replays may start
            } catch (RuntimeException e) {
                driver.destroyGraph(exec);
                throw e;
            }
        }
        return new CudaGraph(driver, rank, exec, order);
    }

    synchronized void orderAfter(MemorySegment other) {
        driver.setCurrent(rank.context);
        if (afterEvent == null) {
            afterEvent = driver.createEvent(CudaDriver.EVENT_DISABLE_TIMING);
        }
        // other's work so far, then this rank's stream waits for it on the device
        driver.record(afterEvent, other);
        driver.waitEvent(rank.stream, afterEvent);
    }

    synchronized void orderBefore(MemorySegment other) {
        driver.setCurrent(rank.context);
        if (beforeEvent == null) {
            beforeEvent = driver.createEvent(CudaDriver.EVENT_DISABLE_TIMING);
        }
        driver.record(beforeEvent, rank.stream);
        driver.waitEvent(other, beforeEvent);
    }

    double elapsedMillis(Runnable body) {
        driver.setCurrent(rank.context);
        MemorySegment start = driver.createEvent();
        MemorySegment end = null;
        try {
            end = driver.createEvent();
            driver.record(start, rank.stream);
            body.run();
            driver.setCurrent(rank.context);
            driver.record(end, rank.stream);
            driver.synchronizeEvent(end);
            return driver.elapsedMillis(start, end);
        } finally {
            driver.destroyEvent(start);
            if (end != null) {
                driver.destroyEvent(end);
            }
        }
    }

    MemorySegment allocateDevice(long bytes) {
        driver.setCurrent(rank.context);
        return MemorySegment.ofAddress(driver.malloc(bytes)).reinterpret(bytes);
    }

    void freeDevice(MemorySegment buffer) {
        synchronize.run();
        driver.free(buffer.address());
    }

    void copyAsync(MemorySegment dst, MemorySegment src) {
        if (dst.byteSize() < src.byteSize()) {
            throw new IllegalArgumentException("copyAsync: dst has " + dst.byteSize() + " bytes, expected at least src's "
                    + src.byteSize() + " (fix: pass a dst at least as large as src, or copy a slice of src)");
        }
        driver.setCurrent(rank.context);
        driver.copyDeviceToDeviceAsync(dst.address(), src.address(), src.byteSize(), rank.stream);
    }

    void copyByKernelAsync(MemorySegment dst, MemorySegment src) {
        if (dst.byteSize() < src.byteSize()) {
            throw new IllegalArgumentException("copyByKernelAsync: dst has " + dst.byteSize()
                    + " bytes, expected at least src's " + src.byteSize() + " (fix: pass a dst at least as large as src,"
                    + " or copy a slice of src)");
        }
        long bytes = src.byteSize();
        if (bytes == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        // four 16-byte vectors per thread per pass; as many blocks as that needs, up to what the GPU holds at once
        long perBlock = 4L * 16 * Kernel.COPY.blockThreads;
        int blocks = rank.ownGrid(Kernel.COPY, Math.max(1, (bytes + perBlock - 1) / perBlock));
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            CudaLaunch params = new CudaLaunch(a).pointer(dst.address()).pointer(src.address()).size(bytes);
            rank.launch(driver, Kernel.COPY, blocks, params.array());
        }
    }

    void copyFromHost(MemorySegment dst, MemorySegment src) {
        if (dst.byteSize() < src.byteSize()) {
            throw new IllegalArgumentException("copyFromHost: dst has " + dst.byteSize() + " bytes, expected at least src's "
                    + src.byteSize() + " (fix: pass a dst at least as large as src, or copy a slice of src)");
        }
        synchronize.run();
        driver.copyHostToDevice(dst.address(), src, src.byteSize());
    }

    void copyToHost(MemorySegment dst, MemorySegment src) {
        if (src.byteSize() < dst.byteSize()) {
            throw new IllegalArgumentException("copyToHost: src has " + src.byteSize() + " bytes, expected at least dst's "
                    + dst.byteSize() + " (fix: pass a dst no larger than src, e.g. a slice of it)");
        }
        synchronize.run();
        driver.copyDeviceToHost(dst, src.address(), dst.byteSize());
    }

    /** Destroys the ordering events made so far. */
    synchronized void close() {
        for (MemorySegment event : new MemorySegment[] {afterEvent, beforeEvent}) {
            if (event != null) {
                driver.destroyEvent(event);
            }
        }
        afterEvent = null;
        beforeEvent = null;
    }
}
