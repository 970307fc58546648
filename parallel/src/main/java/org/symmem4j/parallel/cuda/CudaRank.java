package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaException;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.cuda.ffi.EverySteps;

/**
 * One rank's GPU: device, its primary context (made current on the rank's thread), a non-blocking
 * stream, the kernels loaded into the context (once per device, shared) and the rank's
 * {@link LaunchBudget}. Rank r uses device r mod deviceCount, so on a one-GPU machine all ranks share
 * it (correct, not fast): the budget then sizes every grid so that all ranks' blocks fit at once, or
 * the constructor refuses.
 *
 * <p>{@link #close()} gives everything back: the eager graphs, the users' graphs and modules still open, the
 * stream, the launch scratch, this rank's hold on the shared kernels (they stay loaded for the next
 * group: see {@link CudaKernels#release}) and its retain of the primary context.
 * {@link CudaTransport#release} and {@link CudaTransport#close} call it.
 */
final class CudaRank implements AutoCloseable {

    /** Ranks constructed and not yet closed, in this JVM (tests: back to its start after groups close). */
    private static final AtomicInteger OPEN = new AtomicInteger();

    final int rank;
    final int ordinal;
    final int device;
    final MemorySegment context;
    final MemorySegment stream;
    final CudaKernels kernels;
    final int multiprocessors;
    final String deviceName;
    /** Ranks of this rank's group on this rank's GPU (1 with one GPU per rank). */
    final int ranksOnDevice;
    private final CudaDriver driver;
    /**
     * Whether this rank's kernels are launched with programmatic dependent launch: on sm_90 and newer
     * with a driver that has {@code cuLaunchKernelEx}, unless {@code -Dsymmem4j.cuda.pdl=false}.
     */
    final boolean programmaticLaunch;
    /** Holds {@link #launchScratch}; closed with the rank. */
    private final Arena scratchArena;
    /** Launch configuration written by every programmatic launch of this rank (launches are serialized). */
    final MemorySegment launchScratch;
    /** Modules of users' kernels loaded through this rank ({@link CudaDeviceKernels}), unloaded at close at the latest. */
    private final Set<CudaDeviceModule> userModules = new LinkedHashSet<>();
    /** Graphs captured by users ({@link CudaCommunicator#capture}) not yet closed, destroyed at close at the latest. */
    private final Set<CudaGraph> userGraphs = new LinkedHashSet<>();
    /** Set by {@link #close}; launches after it are refused. */
    private volatile boolean closed;
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
     * Set by a capture's fused tensor-parallel calls: the enqueue order their graph's replays keep ({@link EnqueueOrder};
     * a replay enqueues them all at once). Taken, and cleared, by the capture that ends.
     */
    EnqueueOrder.Seat capturedOrder;

    /**
     * The rank whose place on this machine is {@code rank}, among {@code worldSize} ranks on this machine's
     * GPUs (a group's {@code localRank()} and {@code localWorldSize()}); throws
     * {@link org.symmem4j.parallel.SymmemException} saying why when the ranks sharing a GPU cannot
     * all be resident ({@link LaunchBudget}), before anything is allocated.
     */
    CudaRank(CudaDriver driver, int rank, int worldSize) {
        this.driver = driver;
        this.rank = rank;
        int count = driver.deviceCount();
        if (count < 1) {
            throw new CudaUnavailableException("CUDA driver reports no devices, expected at least 1 (fix: run on a"
                    + " machine with an NVIDIA GPU, check nvidia-smi and CUDA_VISIBLE_DEVICES, or use a host transport)");
        }
        this.ordinal = rank % count;
        this.device = driver.device(ordinal);
        this.multiprocessors = driver.multiprocessorCount(device);
        this.deviceName = driver.deviceName(device);
        this.ranksOnDevice = LaunchBudget.ranksOnDevice(worldSize, count, ordinal);
        int major = driver.attribute(device, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        this.programmaticLaunch = major >= 9 && driver.supportsProgrammaticLaunch()
                && Configuration.CUDA_PDL.get();
        this.context = driver.retainPrimaryContext(device);
        CudaKernels acquired = null;
        try {
            driver.setCurrent(context);
            acquired = CudaKernels.present() ? CudaKernels.acquire(driver, ordinal) : null;
            this.kernels = acquired;
            this.budget = kernels == null ? null : LaunchBudget.of(deviceName + " (device " + ordinal + ")", multiprocessors,
                    kernels.blocksPerMultiprocessor(), ranksOnDevice,
                    LaunchBudget.ranksOnDevice(worldSize, count, 0), programmaticLaunch,
                    LaunchBudget.maxConnections(System.getenv("CUDA_DEVICE_MAX_CONNECTIONS")));
            this.stream = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
        } catch (RuntimeException e) {
            try {
                if (acquired != null) {
                    CudaKernels.release(driver, acquired);
                }
            } catch (RuntimeException suppressed) {
                e.addSuppressed(suppressed);
            }
            driver.releasePrimaryContext(device);
            throw e;
        }
        this.scratchArena = Arena.ofShared();
        this.launchScratch = scratchArena.allocate(CudaDriver.LAUNCH_CONFIG_BYTES + CudaDriver.LAUNCH_ATTRIBUTE_BYTES, 8);
        this.eagerGraphs = new EagerGraphCache(driver, this);
        OPEN.incrementAndGet();
    }

    /** How long {@link #close} waits for the rank's stream to drain before giving up. */
    static final long CLOSE_WAIT_NANOS = 60_000_000_000L;
    /** The code {@link #close} reports when the stream did not drain (not a driver code: {@code CUDA_ERROR_UNKNOWN} + 1). */
    static final int DEVICE_BUSY = 1000;

    /**
     * Waits until this rank's stream has no pending work or {@code nanos} have passed (spin, then
     * park 50 us between polls); the context is current. Unlike a stream synchronize it gives up.
     */
    private boolean awaitIdle(long nanos) {
        long deadline = System.nanoTime() + nanos;
        int polls = 0;
        while (!driver.streamIdle(stream)) {
            if (System.nanoTime() - deadline > 0) {
                return false;
            }
            if (++polls < 1_000) {
                Thread.onSpinWait();
            } else {
                java.util.concurrent.locks.LockSupport.parkNanos(50_000);
            }
        }
        return true;
    }

    /** Ranks open in this JVM (tests). */
    static int openRanks() {
        return OPEN.get();
    }

    /** Whether {@link #close} has run. */
    boolean closed() {
        return closed;
    }

    /**
     * Throws, saying so, unless this rank's GPU can reach the memory of GPU {@code peerOrdinal} (the
     * same GPU always can): symmetric memory maps every peer's buffer and pad.
     *
     * @param peerOrdinal the device ordinal of a peer's memory
     * @param peerRank    the peer's rank, for the message
     * @throws org.symmem4j.parallel.SymmemException when the two GPUs have no peer access
     */
    void checkCanAccess(int peerOrdinal, int peerRank) {
        if (peerOrdinal != ordinal && !driver.canAccessPeer(device, driver.device(peerOrdinal))) {
            throw new org.symmem4j.parallel.SymmemException("device " + ordinal + " cannot access device " + peerOrdinal
                    + " of rank=" + peerRank + " (no peer access between these GPUs; use Algorithm.NCCL)");
        }
    }

    /** Throws saying the rank is closed, for any use after {@link #close}. */
    void checkOpen(String what) {
        if (closed) {
            throw new IllegalStateException(what + ": the CUDA state of rank=" + rank + " (device " + ordinal
                    + ") is closed (its group was released from the CudaTransport, or the transport closed;"
                    + " fix: create a new group on an open transport)");
        }
    }

    /** Makes this rank's context current on the calling thread, refusing after {@link #close}. */
    void makeCurrent(String what) {
        checkOpen(what);
        driver.setCurrent(context);
    }

    /** Remembers a user module, so that {@link #close} unloads it if its owner did not. */
    synchronized void track(CudaDeviceModule module) {
        checkOpen("load a module");
        userModules.add(module);
    }

    /** Forgets a user module its owner unloaded. */
    synchronized void untrack(CudaDeviceModule module) {
        userModules.remove(module);
    }

    /** Remembers a user's graph, so that {@link #close} destroys it if its owner did not. */
    synchronized void track(CudaGraph graph) {
        checkOpen("capture a graph");
        userGraphs.add(graph);
    }

    /** Forgets a graph its owner closed. */
    synchronized void untrack(CudaGraph graph) {
        userGraphs.remove(graph);
    }

    /**
     * Waits for this rank's stream (at most {@link #CLOSE_WAIT_NANOS}: a stream that does not drain
     * is left alone, and a {@link CudaException} says so), then destroys its eager graphs and the users' graphs still open,
     * unloads user modules still loaded, destroys the stream, frees the launch scratch, gives back its hold on the device's
     * kernels (which stay loaded for the next group) and its retain of the primary context. Leaves no context current on the calling thread. Every step runs even if
     * an earlier one failed; the first failure is thrown with the later ones suppressed. Idempotent.
     * Call it after the rank's memories and communicators are closed; graphs and modules still open
     * are destroyed here, and launches and replays after it are refused.
     */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        OPEN.decrementAndGet();
        driver.setCurrent(context);
        // a kernel still queued must not find its module unloaded or its context gone
        if (!awaitIdle(CLOSE_WAIT_NANOS)) {
            throw new CudaException("CUDA", "close of rank=" + rank + " (device " + ordinal + ")", DEVICE_BUSY,
                    "STREAM_STILL_BUSY", "the rank's stream still runs after " + CLOSE_WAIT_NANOS / 1_000_000_000L
                    + " s (a kernel waiting for a peer that never came?): its stream, graphs, kernels and context are left"
                    + " as they are rather than torn down under a running kernel; fix: abort the group before releasing"
                    + " it");
        }
        List<Runnable> steps = new ArrayList<>();
        steps.add(eagerGraphs::close);
        for (CudaGraph g : List.copyOf(userGraphs)) {
            steps.add(g::destroy);
        }
        steps.add(userGraphs::clear);
        for (CudaDeviceModule m : List.copyOf(userModules)) {
            steps.add(m::unload);
        }
        steps.add(userModules::clear);
        steps.add(() -> driver.destroyStream(stream));
        steps.add(scratchArena::close);
        if (kernels != null) {
            steps.add(() -> CudaKernels.release(driver, kernels));
        }
        // the context may be destroyed by the release below: none stays current on this thread
        steps.add(() -> driver.setCurrent(MemorySegment.NULL));
        steps.add(() -> driver.releasePrimaryContext(device));
        EverySteps.run(steps);
    }

    /**
     * Launches one of the symmem4j kernels on this rank's stream: with programmatic dependent launch
     * where {@link #programmaticLaunch} (the next launch's latency overlaps this kernel's run; the
     * kernels wait for their predecessor before touching memory), plainly otherwise.
     */
    synchronized void launch(CudaDriver driver, Kernel kernel, int gridX, MemorySegment params) {
        checkOpen("launch " + kernel.symbol);
        MemorySegment function = kernels().function(kernel);
        if (gridX < 1 || gridX > budget.limit(kernel)) {
            throw new IllegalArgumentException("grid of " + kernel.symbol + ": gridX=" + gridX + " expected 1 <= gridX <= "
                    + budget.limit(kernel) + " (this rank's launch budget; fix: take grids from LaunchBudget.grid)");
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
        checkOpen("capture a graph");
        driver.beginCapture(stream);
        capturing = true;
        capturedOrder = null;
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
                    + " missing from the class path: built without nvcc); only Algorithm.NCCL can run (fix:"
                    + " build the kernels module with"
                    + " CUDA 13's nvcc, or use Algorithm.NCCL)");
        }
        return kernels;
    }
}
