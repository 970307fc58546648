package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * One rank's GPU: device, its primary context (made current on the rank's thread), a non-blocking
 * stream, the kernels loaded into the context (once per device, shared) and the rank's
 * {@link LaunchBudget}. Rank r uses device r mod deviceCount, so on a one-GPU machine all ranks share
 * it (correct, not fast): the budget then sizes every grid so that all ranks' blocks fit at once, or
 * the constructor refuses.
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
    /**
     * Whether this rank's kernels are launched with programmatic dependent launch: on sm_90 and newer
     * with a driver that has {@code cuLaunchKernelEx}, unless {@code -Dsymmem4j.cuda.pdl=false}.
     */
    final boolean programmaticLaunch;
    /** Launch configuration written by every programmatic launch of this rank (launches are serialized). */
    private final MemorySegment launchScratch;
    /** Eager collective launches as cached one-kernel graphs (see {@link EagerGraphCache}). */
    final EagerGraphCache eagerGraphs;
    /**
     * This rank's own grid limits (its GPU, its ranks on that GPU); null without kernels. Puts and
     * signal waits use them; collectives use the group's {@link LaunchBudget#common} of them, which
     * {@link CudaCommunicator} agrees on.
     */
    final LaunchBudget budget;
    /** Whether this rank's stream is being captured ({@link #captureGraph}); the rank's thread only. */
    boolean capturing;

    /**
     * Rank {@code rank} of a group of {@code worldSize} on this machine's GPUs; throws
     * {@link org.symmem4j.parallel.SymmemException} saying why when the ranks sharing a GPU cannot
     * all be resident ({@link LaunchBudget}), before anything is allocated.
     */
    CudaRank(CudaDriver driver, int rank, int worldSize) {
        this.rank = rank;
        int count = driver.deviceCount();
        if (count < 1) {
            throw new CudaUnavailableException("CUDA driver reports no devices");
        }
        this.ordinal = rank % count;
        this.device = driver.device(ordinal);
        this.multiprocessors = driver.multiprocessorCount(device);
        this.deviceName = driver.deviceName(device);
        int major = driver.attribute(device, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        this.programmaticLaunch = major >= 9 && driver.supportsProgrammaticLaunch()
                && Boolean.parseBoolean(System.getProperty("symmem4j.cuda.pdl", "true"));
        this.context = driver.retainPrimaryContext(device);
        try {
            driver.setCurrent(context);
            this.kernels = CudaKernels.present() ? CudaKernels.forDevice(driver, ordinal) : null;
            this.budget = kernels == null ? null : LaunchBudget.of(deviceName + " (device " + ordinal + ")", multiprocessors,
                    kernels.blocksPerMultiprocessor(), LaunchBudget.ranksOnDevice(worldSize, count, ordinal),
                    LaunchBudget.ranksOnDevice(worldSize, count, 0), programmaticLaunch,
                    LaunchBudget.maxConnections(System.getenv("CUDA_DEVICE_MAX_CONNECTIONS")));
        } catch (RuntimeException e) {
            driver.releasePrimaryContext(device);
            throw e;
        }
        this.stream = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
        this.launchScratch = Arena.global().allocate(CudaDriver.LAUNCH_CONFIG_BYTES + CudaDriver.LAUNCH_ATTRIBUTE_BYTES, 8);
        this.eagerGraphs = new EagerGraphCache(driver, this);
    }

    /**
     * Launches one of the symmem4j kernels on this rank's stream: with programmatic dependent launch
     * where {@link #programmaticLaunch} (the next launch's latency overlaps this kernel's run; the
     * kernels wait for their predecessor before touching memory), plainly otherwise.
     */
    synchronized void launch(CudaDriver driver, Kernel kernel, int gridX, MemorySegment params) {
        MemorySegment function = kernels().function(kernel);
        if (gridX < 1 || gridX > budget.limit(kernel)) {
            throw new IllegalArgumentException("grid of " + kernel.symbol + ": gridX=" + gridX + " expected 1 <= gridX <= "
                    + budget.limit(kernel) + " (this rank's launch budget; take grids from LaunchBudget.grid)");
        }
        if (programmaticLaunch) {
            driver.launchProgrammatic(function, gridX, kernel.blockThreads, stream, params, launchScratch);
        } else {
            driver.launch(function, gridX, kernel.blockThreads, stream, params);
        }
    }

    /**
     * Captures what {@code body} enqueues on this rank's stream into an instantiated graph (the caller
     * has made the context current). While it runs, {@link #capturing} is set, so that launches go
     * into this graph rather than through the eager graph cache; a failing body ends the capture and
     * discards it.
     */
    MemorySegment captureGraph(CudaDriver driver, Runnable body) {
        driver.beginCapture(stream);
        capturing = true;
        try {
            body.run();
        } catch (RuntimeException e) {
            try {
                driver.destroyGraph(driver.endCaptureAndInstantiate(stream));
            } catch (RuntimeException ignored) {
                // the capture was already invalidated by the failure
            }
            throw e;
        } finally {
            capturing = false;
        }
        return driver.endCaptureAndInstantiate(stream);
    }

    /** This rank's own grid for {@code wantedBlocks} of {@code kernel} (puts and waits; collectives use the group's). */
    int ownGrid(Kernel kernel, long wantedBlocks) {
        kernels(); // says so when the kernels were not built
        return budget.grid(kernel, wantedBlocks);
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
