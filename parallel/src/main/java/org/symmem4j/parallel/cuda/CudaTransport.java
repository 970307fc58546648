package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;

/**
 * GPUs of one machine, one per rank, ranks as threads of one JVM: each rank allocates its buffer
 * and signal pad on its device, the ranks swap device pointers, and every context gets peer access
 * to every other device, so kernels read and write peers' memory over NVLink (or PCIe). A rank uses
 * device {@code localRank mod deviceCount}: on a one-GPU machine the ranks share the device, which
 * is right for testing correctness and meaningless for speed.
 *
 * <p>Groups are created on this transport, so that their {@link Group#transport()} is it and the
 * generic entry points give CUDA objects; user code names no CUDA class beyond choosing the
 * transport, and reaches GPU-only operations through {@code unwrap}:
 *
 * <pre>{@code
 * Transport cuda = CudaTransport.create();      // throws CudaUnavailableException without a driver
 * try (InJvmWorld world = InJvmWorld.create(2, GroupOptions.defaults(), cuda)) {
 *     InJvmWorld.runOnEveryRank(world, group -> {
 *         try (SymmetricMemory grads = SymmetricMemory.allocate(group, bytes);
 *              Communicator comm = Communicator.create(group)) {
 *             grads.copyFromHost(hostGrads, 0);
 *             comm.allReduce(grads, 0, count, DType.BFLOAT16, ReduceOp.SUM, Algorithm.TWO_SHOT);
 *             comm.unwrap(DeviceCommunicator.class).orElseThrow().synchronize();
 *         }
 *         return null;
 *     });
 * }
 * }</pre>
 *
 * <p>What the transport takes from a group is only what {@link Group} offers: the peer exchange
 * ({@link Group#allGatherBytes}, through which device pointers, device ordinals and context handles
 * travel as numbers) and the rank numbers. Device pointers and contexts mean something only in this
 * process, so every allocation checks that all ranks run in this process and says so otherwise
 * (CUDA symmetric memory across processes, through exported memory handles, is issue #15). The
 * communicators' control plane (entry barriers, argument checks) runs on the group's host memory
 * ({@link Group#hostTransport()}).
 *
 * <h2>Lifecycle</h2>
 * A rank's GPU state (its {@code CudaRank}: stream, primary-context retain, hold on the device's
 * kernels, eager graphs, launch scratch, user graphs and modules) is created at the group's first use
 * of this transport and lives until {@link #release(Group)} for that group or {@link #close()}.
 * Release a rank after closing its memories and communicators: they use the state. After
 * {@link #close()} every method that takes a group throws {@link IllegalStateException}.
 */
public final class CudaTransport implements Transport, AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(CudaTransport.class);

    /** The transport's name, the {@code transport} metric tag. */
    public static final String NAME = "cuda";

    private final CudaDriver driver;
    private final Map<Group, CudaRank> ranks = new ConcurrentHashMap<>();
    /** Symmetric memories by id until their last rank closes them (see {@link SymmetricAllocation}). */
    private final Map<Long, SymmetricAllocation> allocations = new ConcurrentHashMap<>();
    /** Set once by {@link #close}; checked by every entry point. */
    private volatile boolean closed;

    private CudaTransport(CudaDriver driver) {
        this.driver = driver;
    }

    /**
     * A transport on this machine's GPUs; throws {@link CudaUnavailableException} saying why when there are none.
     *
     * @return the transport
     */
    public static CudaTransport create() {
        return new CudaTransport(CudaDriver.get());
    }

    CudaDriver driver() {
        return driver;
    }

    /**
     * This rank's GPU state, created on first use on the rank's thread (its context becomes current
     * there), on device {@code group.localRank() mod deviceCount} (a sub-group's local rank stays the
     * member's rank on this machine, so its ranks keep their GPUs); refused once the group was
     * released or the transport closed.
     */
    CudaRank rank(Group group) {
        checkOpen(group);
        // grids sized for every rank on this machine (a sub-group's peers and the rest of its world), so that
        // the ranks sharing a GPU fit there at once whichever group's kernels they run
        CudaRank r = ranks.computeIfAbsent(group, g -> new CudaRank(driver, g.localRank(), g.localWorldSize()));
        if (closed) { // close() ran while the rank was being made: it may have missed it
            ranks.remove(group, r);
            r.close();
            checkOpen(group);
        }
        r.makeCurrent("use the cuda transport");
        return r;
    }

    private void checkOpen(Group group) {
        if (closed) {
            throw new IllegalStateException("cuda transport closed: rank=" + (group == null ? "?" : group.rank())
                    + " cannot use it (it released every rank's stream, context and kernels; create a new transport"
                    + " with CudaTransport.create())");
        }
    }

    /**
     * Releases this rank's GPU state for {@code group}: waits for the rank's stream, then destroys
     * its stream and its cached graphs, unloads the user modules still loaded, frees its launch
     * scratch, and gives back its hold on the device's kernels and its retain of the device's primary
     * context (the kernels stay loaded on the device for the next group, see CudaKernels). Not
     * collective: each rank releases its own, on its own thread, after closing every memory and
     * communicator of {@code group} on this transport (those become unusable; graphs and user
     * modules still open are destroyed here). A group that never used this transport, or was
     * released already, is a no-op. A later use of the group on this transport creates a fresh state.
     *
     * @param group a rank's group on this transport
     * @throws CudaException when the driver fails to release something (everything else is still released)
     */
    public void release(Group group) {
        CudaRank r = ranks.remove(group);
        if (r != null) {
            r.close();
        }
    }

    /**
     * Releases every rank still held (as {@link #release(Group)} does, from the calling thread) and
     * refuses any later use of this transport with {@link IllegalStateException}. Call it after every
     * rank's thread is done with the transport. Idempotent.
     *
     * @throws CudaException when the driver fails to release something (everything else is still released)
     */
    @Override
    public void close() {
        closed = true;
        for (SymmetricAllocation a : allocations.values()) {
            LOG.warn("cuda transport closed while symmetric memory id={} is still open on ranks {}: its device memory, and"
                    + " the primary contexts it holds, stay until those ranks close it or the process exits", a.id(),
                    a.openRanks());
        }
        RuntimeException first = null;
        for (Group g : List.copyOf(ranks.keySet())) {
            try {
                release(g);
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** Ranks this transport holds now (tests: 0 after every group was released). */
    int heldRanks() {
        return ranks.size();
    }

    @Override
    public String name() {
        return NAME;
    }

    /**
     * This transport: it keeps nothing per rank that a sub-group would need re-indexed. A sub-group's
     * rank uses its world rank's GPU ({@link Group#localRank()}), gets GPU state of its own (a stream,
     * its hold on the kernels) at its first use, and is released with {@link #release(Group)} for the
     * sub-group, or by {@link #close()}.
     */
    @Override
    public Transport forSubGroup(int[] parentRanks) {
        return this;
    }

    /**
     * Device name and ordinal of this rank's GPU, for reports.
     *
     * @param group a rank's group on this transport
     * @return e.g. {@code "NVIDIA H100 80GB HBM3 (device 0, 132 SMs)"}
     */
    public String describe(Group group) {
        CudaRank r = rank(group);
        return r.deviceName + " (device " + r.ordinal + ", " + r.multiprocessors + " SMs)";
    }

    /**
     * The GPUs this transport sees; ranks beyond it share them ({@code localRank mod deviceCount}).
     *
     * @return the device count, at least 1
     */
    public int deviceCount() {
        return driver.deviceCount();
    }

    /**
     * The CUDA driver's version and, where NCCL loads, NCCL's, for reports.
     *
     * @return e.g. {@code "CUDA driver 13000, NCCL 22703"} or {@code "CUDA driver 13000, NCCL unavailable: ..."}
     */
    public String runtimeVersions() {
        return "CUDA driver " + driver.driverVersion() + ", " + (Nccl.available() ? "NCCL " + Nccl.get().version()
                : "NCCL unavailable: " + Nccl.unavailableReason());
    }

    /**
     * Whether this rank's kernels are launched with programmatic dependent launch (sm_90 and newer,
     * unless {@code -Dsymmem4j.cuda.pdl=false}), for reports.
     *
     * @param group a rank's group on this transport
     * @return true when each kernel's launch overlaps the previous kernel's run
     */
    public boolean programmaticLaunch(Group group) {
        return rank(group).programmaticLaunch;
    }

    /**
     * What a rank tells its peers about one allocation, serialized for {@link Group#allGatherBytes}:
     * device pointers and the context handle as addresses (meaningful only in the process that made
     * them, hence {@code pid}).
     */
    private record Contribution(long data, long pad, int ordinal, long context, long bytes, long idProposal, long pid,
                                long transport) {

        static final int BYTES = 8 * Long.BYTES;

        byte[] toBytes() {
            return ByteBuffer.allocate(BYTES).putLong(data).putLong(pad).putLong(ordinal).putLong(context).putLong(bytes)
                    .putLong(idProposal).putLong(pid).putLong(transport).array();
        }

        static Contribution of(byte[] b) {
            if (b.length != BYTES) {
                throw new SymmemException("cuda transport: a peer's contribution has " + b.length + " bytes, expected "
                        + BYTES + " (every rank must run the same symmem4j version)");
            }
            ByteBuffer in = ByteBuffer.wrap(b);
            return new Contribution(in.getLong(), in.getLong(), (int) in.getLong(), in.getLong(), in.getLong(),
                    in.getLong(), in.getLong(), in.getLong());
        }
    }

    private static final java.util.concurrent.atomic.AtomicLong NEXT_ID = new java.util.concurrent.atomic.AtomicLong();
    private static final java.util.concurrent.atomic.AtomicLong NEXT_TRANSPORT = new java.util.concurrent.atomic.AtomicLong();
    /** This instance among the process's transports: every rank of a group must allocate on the same one. */
    private final long instance = NEXT_TRANSPORT.getAndIncrement();

    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes=" + bytes + " must be >= 0");
        }
        CudaRank r = rank(group);
        long data = driver.malloc(Math.max(bytes, 16));
        driver.memset(data, (byte) 0, Math.max(bytes, 16));
        return share(group, r, data, bytes, true, "allocate");
    }

    /**
     * Registers {@code buffer} — whose address must be a device pointer on this rank's GPU and whose
     * byte size is the buffer's size — so collectives run on it in place.
     */
    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        CudaRank r = rank(group);
        return share(group, r, buffer.address(), buffer.byteSize(), false, "register");
    }

    private SymmetricMemory share(Group g, CudaRank r, long data, long bytes, boolean ownsData, String what) {
        long pad = driver.malloc(CudaKernels.PAD_BYTES);
        driver.memset(pad, (byte) 0, CudaKernels.PAD_BYTES);
        int n = g.worldSize();
        Contribution[] all = new Contribution[n];
        try {
            List<byte[]> raw = g.allGatherBytes("cuda-" + what, new Contribution(data, pad, r.ordinal, r.context.address(),
                    bytes, g.rank() == 0 ? NEXT_ID.getAndIncrement() : -1, ProcessHandle.current().pid(), instance).toBytes());
            for (int p = 0; p < n; p++) {
                all[p] = Contribution.of(raw.get(p));
            }
            checkInProcess(g, all);
            checkOneTransport(g, all, what);
        } catch (RuntimeException e) {
            driver.free(pad);
            if (ownsData) {
                driver.free(data);
            }
            throw e;
        }
        long[] datas = new long[n];
        long[] pads = new long[n];
        StringBuilder sizes = new StringBuilder();
        boolean same = true;
        for (int p = 0; p < n; p++) {
            Contribution c = all[p];
            datas[p] = c.data();
            pads[p] = c.pad();
            same &= c.bytes() == bytes;
            sizes.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" bytes=").append(c.bytes());
        }
        if (!same) {
            driver.free(pad);
            if (ownsData) {
                driver.free(data);
            }
            throw new SymmemException("symmetric memory " + what + ": sizes differ across ranks: " + sizes
                    + " (every rank must " + what + " the same number of bytes)");
        }
        for (Contribution c : all) {
            if (c.ordinal() != r.ordinal) {
                if (!driver.canAccessPeer(r.device, driver.device(c.ordinal()))) {
                    driver.free(pad);
                    if (ownsData) {
                        driver.free(data);
                    }
                    throw new SymmemException("device " + r.ordinal + " cannot access device " + c.ordinal()
                            + " (no peer access between these GPUs; use Algorithm.NCCL)");
                }
                driver.enablePeerAccess(MemorySegment.ofAddress(c.context()));
            }
        }
        long id = all[0].idProposal();
        SymmetricAllocation allocation = allocations.computeIfAbsent(id, k -> new SymmetricAllocation(k, n));
        allocation.join(driver, g.rank(), data, pad, ownsData, r.device);
        return new CudaSymmetricMemory(g, this, r, bytes, datas, pads, allocation);
    }

    /**
     * Rank {@code rank} gives its share of {@code allocation} back (its streams are idle), with its own
     * pointer tables and staging values; the last rank's call frees every rank's buffer, pad, tables and
     * staging and forgets the allocation.
     */
    void giveBack(SymmetricAllocation allocation, int rank, long pointerTables, MemorySegment staging,
                  MemorySegment current) {
        if (allocation.close(driver, rank, pointerTables, staging, current)) {
            allocations.remove(allocation.id(), allocation);
        }
    }

    /** Symmetric memories some rank has not closed yet (tests: none once every memory was closed). */
    int openAllocations() {
        return allocations.size();
    }

    /**
     * Checks that every rank of {@code g} allocates on this transport instance: the ranks' memory is
     * freed together by the last rank to close it, which finds its peers' shares through the
     * transport ({@link SymmetricAllocation}). Called after an exchange, so every rank throws alike.
     */
    private static void checkOneTransport(Group g, Contribution[] all, String what) {
        StringBuilder found = new StringBuilder();
        boolean same = true;
        for (int p = 0; p < all.length; p++) {
            same &= all[p].transport() == all[0].transport();
            found.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" transport=#").append(all[p].transport());
        }
        if (!same) {
            throw new SymmemException("symmetric memory " + what + ": the ranks of the group use different CudaTransport"
                    + " instances: " + found + " on rank=" + g.rank() + " (create one CudaTransport and let every rank of"
                    + " the group use it, e.g. InJvmWorld.create(n, options, transport))");
        }
    }

    /**
     * Checks that every rank of {@code g} runs in this process: device pointers and contexts from
     * another process mean nothing here. Called after an exchange, so every rank throws alike.
     */
    private static void checkInProcess(Group g, Contribution[] all) {
        long me = ProcessHandle.current().pid();
        StringBuilder found = new StringBuilder();
        boolean same = true;
        for (int p = 0; p < all.length; p++) {
            same &= all[p].pid() == me;
            found.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" pid=").append(all[p].pid());
        }
        if (!same) {
            throw new SymmemException("transport " + NAME + " needs every rank of the group in one process (ranks as threads,"
                    + " InJvmWorld); found " + found + " on rank=" + g.rank() + " (group " + g.getClass().getSimpleName()
                    + "); CUDA symmetric memory across processes is issue #15: use one process with a thread per GPU");
        }
    }

    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        checkInProcess(group);
        return new CudaCommunicator(this, group, options);
    }

    /** Collective: {@link #checkInProcess(Group, Contribution[])} through an exchange of process ids alone. */
    private static void checkInProcess(Group g) {
        List<byte[]> pids = g.allGatherBytes("cuda-pids", ByteBuffer.allocate(Long.BYTES)
                .putLong(ProcessHandle.current().pid()).array());
        Contribution[] all = new Contribution[pids.size()];
        for (int p = 0; p < all.length; p++) {
            all[p] = new Contribution(0, 0, 0, 0, 0, 0, ByteBuffer.wrap(pids.get(p)).getLong(), 0);
        }
        checkInProcess(g, all);
    }
}
