package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaVirtualMemory;
import org.symmem4j.parallel.cuda.ffi.EverySteps;

/**
 * The device memory of one symmetric memory, every rank's buffer and signal pad together, freed once
 * every rank has closed its handle with its own streams drained.
 *
 * <p>Why not each rank its own, at its close: a peer's kernel reads and writes this rank's buffer and
 * pad over NVLink, and on another GPU nothing orders the peer's work before this rank's
 * {@code cuMemFree} (which waits only for this rank's device). After a failure a rank closes without
 * the barrier that would have drained its peers, so a peer still in its step — a put of the next
 * microbatch, say — writes into freed memory, and its GPU faults with {@code CUDA_ERROR_ILLEGAL_ADDRESS}:
 * sticky, the peer's context is lost for the rest of the process (seen on 4 × H100: a pipeline stage
 * that threw on the host took every GPU's context down). Ranks sharing one GPU never showed it:
 * there the free waits for every rank's kernels.
 *
 * <p>So a rank's close only marks it closed here, once its own streams are idle (its kernels touch
 * peers' memory too); the last rank to close frees every rank's pad and owned buffer, each with its
 * owner's context current. The rank's own device pointer tables and page-locked staging values are
 * freed then too, although no peer touches them: {@code cuMemFree} and {@code cuMemFreeHost} wait for
 * the device, and on a GPU shared with a peer whose kernel still waits for a signal (the peer
 * releases it only after this rank's close) an early free would never return. Each joining rank retains its device's primary context until then, so
 * releasing a rank ({@link CudaRank#close}) cannot destroy a context — and the memory in it — under a
 * peer's running kernel either. A rank whose streams never drain never closes here: the allocation
 * and those contexts then stay until the process exits, which is the price of never freeing memory a
 * kernel may still touch.
 *
 * <p>Ranks of one in-JVM group are threads of this process: they find the same instance through
 * {@link CudaTransport} by the memory's id (unique in the process).
 *
 * <p>Ranks in processes of their own ({@link CrossProcessMemory}) each have an instance with their
 * own share alone: their memory is a set of mappings of exported allocations, and the driver keeps
 * each physical allocation while any process maps it, so a rank unmaps everything at its own close
 * (its streams drained) without waiting for its peers.
 */
final class SymmetricAllocation {

    private static final Logger LOG = LoggerFactory.getLogger(SymmetricAllocation.class);

    /**
     * One rank's share: what to free, and with which context current. Cross-process shares hold
     * {@code mappings} (the rank's own allocation and its peers', unmapped at the close) and no
     * pointer of their own to free.
     */
    private record Share(long data, long pad, boolean ownsData, int device, MemorySegment context,
                         List<CudaVirtualMemory.Mapping> mappings, Runnable freeMemory) {
    }

    private final long id;
    /** This allocation's key among the transport's in this process (the id, in one process). */
    private final long key;
    private final Share[] shares;
    private final boolean[] closed;
    /** Each rank's device pointer tables (0 if never made) and page-locked staging values (null if none), given at its close. */
    private final long[] pointerTables;
    private final MemorySegment[] staging;
    private int open;
    /** Whether each rank has a process of its own (this instance then holds one rank's share). */
    private final boolean onePerProcess;
    private boolean freed;
    /** Whether freeing is itself collective (NVSHMEM's heap): then every rank must reach it, see {@link #collectiveFree()}. */
    private boolean collectiveFree;

    /**
     * @param id             the memory's id, equal on every rank (rank 0 draws it), for argument checks
     * @param key            its key in this process, unique among the transport's allocations here
     * @param worldSize      the group's size
     * @param ranksInProcess how many of its ranks join here: the group's size in one process, 1 when
     *                       each rank has a process of its own
     */
    SymmetricAllocation(long id, long key, int worldSize, int ranksInProcess) {
        this.id = id;
        this.key = key;
        this.shares = new Share[worldSize];
        this.closed = new boolean[worldSize];
        this.pointerTables = new long[worldSize];
        this.staging = new MemorySegment[worldSize];
        this.open = ranksInProcess;
        this.onePerProcess = ranksInProcess < worldSize;
        if (onePerProcess) {
            java.util.Arrays.fill(closed, true); // ranks of other processes close there; this one is open from its join
        }
    }

    long id() {
        return id;
    }

    long key() {
        return key;
    }

    /**
     * Rank {@code rank}'s buffer and pad join the allocation; retains the primary context of
     * {@code device} (released when the allocation is freed).
     */
    synchronized void join(CudaDriver driver, int rank, long data, long pad, boolean ownsData, int device) {
        join(driver, rank, data, pad, ownsData, device, List.of());
    }

    /**
     * As {@link #join(CudaDriver, int, long, long, boolean, int)} for a rank of a cross-process group,
     * whose memory is {@code mappings} (unmapped at its close).
     */
    synchronized void join(CudaDriver driver, int rank, long data, long pad, boolean ownsData, int device,
                           List<CudaVirtualMemory.Mapping> mappings) {
        if (shares[rank] != null) {
            throw Invariants.violated("symmetric memory id=" + id + ": rank=" + rank + " joined twice");
        }
        if (onePerProcess) {
            closed[rank] = false;
        }
        MemorySegment context = driver.retainPrimaryContext(device);
        shares[rank] = new Share(data, pad, ownsData, device, context, mappings, null);
        LOG.debug("symmetric memory id={} rank={} joined: data=0x{} pad=0x{} device={}", id, rank, Long.toHexString(data),
                Long.toHexString(pad), device);
    }

    /**
     * As {@link #join(CudaDriver, int, long, long, boolean, int)} for a rank whose buffer and pad belong
     * to a library's heap that frees them collectively (NVSHMEM's symmetric heap: {@code nvshmem_free} is
     * a barrier of every PE): {@code freeMemory} frees both, run where the share is freed.
     */
    synchronized void joinCollectivelyFreed(CudaDriver driver, int rank, long data, long pad, int device, Runnable freeMemory) {
        if (shares[rank] != null) {
            throw Invariants.violated("symmetric memory id=" + id + ": rank=" + rank + " joined twice");
        }
        if (onePerProcess) {
            closed[rank] = false;
        }
        collectiveFree = true;
        MemorySegment context = driver.retainPrimaryContext(device);
        shares[rank] = new Share(data, pad, false, device, context, List.of(), freeMemory);
    }

    /**
     * Whether freeing this memory is a collective of every rank (NVSHMEM): a rank whose close did not meet
     * its peers must then keep the memory rather than free it, or it would wait forever for a peer that is gone.
     */
    synchronized boolean collectiveFree() {
        return collectiveFree;
    }

    /**
     * Marks {@code rank} closed: its streams are idle, so nothing of its own still touches any rank's
     * memory. Frees everything when it was the last rank open (on the calling thread, whose current
     * context is {@code current} again afterwards).
     *
     * @param rankPointerTables the rank's device pointer tables, freed with the rest (0: none)
     * @param rankStaging the rank's page-locked staging values, freed with the rest (null: none)
     * @return true when this call freed the allocation
     */
    boolean close(CudaDriver driver, int rank, long rankPointerTables, MemorySegment rankStaging, MemorySegment current) {
        List<Integer> toFree;
        synchronized (this) {
            if (closed[rank]) {
                return false;
            }
            closed[rank] = true;
            pointerTables[rank] = rankPointerTables;
            staging[rank] = rankStaging;
            LOG.debug("symmetric memory id={} rank={} closed; open={}", id, rank, open - 1);
            if (--open > 0) {
                return false;
            }
            freed = true;
            toFree = new ArrayList<>();
            for (int r = 0; r < shares.length; r++) {
                if (shares[r] != null) {
                    toFree.add(r);
                }
            }
        }
        // every share's step runs, whatever failed before it: free with its owner's context current, then
        // restore the caller's and give back the share's retain of its device's primary context
        List<Runnable> steps = new ArrayList<>();
        for (int r : toFree) {
            Share s = shares[r];
            long tables = pointerTables[r];
            MemorySegment hostValues = staging[r];
            steps.add(() -> {
                driver.setCurrent(s.context());
                if (s.freeMemory() != null) {
                    s.freeMemory().run();
                } else if (!s.mappings().isEmpty()) {
                    driver.virtualMemory().unmapAll(s.mappings());
                } else {
                    driver.free(s.pad());
                    if (s.ownsData()) {
                        driver.free(s.data());
                    }
                }
                if (tables != 0) {
                    driver.free(tables);
                }
                if (hostValues != null) {
                    driver.freeHost(hostValues);
                }
            });
            steps.add(() -> {
                driver.setCurrent(current);
                driver.releasePrimaryContext(s.device());
            });
        }
        EverySteps.run(steps);
        return true;
    }

    /** Whether the last rank closed and the memory was freed. */
    synchronized boolean freed() {
        return freed;
    }

    /** Ranks that have not closed yet, for messages. */
    synchronized List<Integer> openRanks() {
        List<Integer> ranks = new ArrayList<>();
        for (int r = 0; r < closed.length; r++) {
            if (!closed[r]) {
                ranks.add(r);
            }
        }
        return ranks;
    }
}
