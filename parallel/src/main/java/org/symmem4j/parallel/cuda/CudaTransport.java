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
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.cuda.ffi.Cublas;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaException;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.cuda.ffi.EverySteps;
import org.symmem4j.parallel.cuda.ffi.Nccl;

/**
 * GPUs of one machine, one per rank, ranks as threads of one JVM or as processes: each rank
 * allocates its buffer and signal pad on its device and every rank gets a device address for every
 * peer's, so kernels read and write peers' memory over NVLink (or PCIe). A rank uses
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
 * ({@link Group#allGatherBytes}, through which sizes, device ordinals and process ids travel) and the
 * rank numbers. The ranks of a group run either all in this process (threads, {@code InJvmWorld}:
 * device pointers and context handles swapped as numbers, peer access enabled between contexts) or
 * each in a process of its own (one JVM per GPU, {@code ProcessGroup.fromEnvironment(options, cuda)}
 * under the launcher or {@code mpirun}: each rank's memory is exported as a file descriptor, passed
 * to its peers over a Unix socket and mapped there, see {@link CrossProcessMemory}); a mix is refused.
 * Across processes, {@link #register} is refused (only memory allocated exportable can be mapped by
 * another process), each process must see the machine's GPUs alike (no per-process
 * {@code CUDA_VISIBLE_DEVICES}), and NCCL needs a GPU per rank as in one process. The communicators'
 * control plane (entry barriers, argument checks) runs on the group's host memory
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
    /** Symmetric memories by key until their last rank in this process closes them (see {@link SymmetricAllocation}). */
    private final Map<Long, SymmetricAllocation> allocations = new ConcurrentHashMap<>();
    /** Set once by {@link #close}; checked by every entry point. */
    private volatile boolean closed;
    /** The NCCL communicators of this transport's groups across an in-place shrink ({@code ncclCommShrink}). */
    private final NcclShrinks ncclShrinks = new NcclShrinks();

    private CudaTransport(CudaDriver driver) {
        this.driver = driver;
        this.crossProcess = new CrossProcessMemory(driver, instance);
    }

    /**
     * Why {@code unwrap(TensorParallelGemm.class)} is empty on this machine's communicators: cuBLAS did not
     * load (put {@code libcublas.so.13} on the library path, or pass {@code -Dsymmem4j.cublas.library=PATH}).
     *
     * @return the reason, or null when cuBLAS loaded
     */
    public static String cublasUnavailableReason() {
        return Cublas.unavailableReason();
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
                    + " cannot use it (it released every rank's stream, context and kernels; fix: create a new"
                    + " transport"
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
     * released already, is a no-op. A later use of the group on this transport creates a fresh state. The context
     * current on the calling thread before is current again after (none if it was the primary context this released
     * the last retain of).
     *
     * @param group a rank's group on this transport
     * @throws CudaException when the driver fails to release something (everything else is still released)
     */
    @Override
    public void release(Group group) {
        CudaRank r = ranks.remove(group);
        if (r != null) {
            try (CallerContext caller = CallerContext.capture(driver)) { // the rank's close leaves none current
                r.close();
            }
        }
    }

    /** The context current on the calling thread, put back at close (unless a release destroyed it). */
    @Override
    public Transport.CallerState callerState() {
        return CallerContext.capture(driver);
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
        crossProcess.close();
        ncclShrinks.abortParked();
        for (SymmetricAllocation a : allocations.values()) {
            LOG.warn("cuda transport closed while symmetric memory id={} is still open on ranks {}: its device memory, and"
                    + " the primary contexts it holds, stay until those ranks close it or the process exits", a.id(),
                    a.openRanks());
        }
        EverySteps.run(List.copyOf(ranks.keySet()).stream().<Runnable>map(g -> () -> release(g)).toList());
    }

    /**
     * True: a process group on this transport shrinks in place ({@code ProcessGroup.shrink()}). Each survivor closes the
     * old group's memories and communicators — its mappings of the dead ranks' exported memory are unmapped and released
     * with them, without the dead ranks (the group is aborted: the closing barriers fail at once, the frees run) — and
     * releases the old group ({@link #release}); the survivors' group then allocates and maps anew on this transport.
     */
    @Override
    public boolean survivesShrink() {
        return true;
    }

    /**
     * A group on this transport shrinks in place: its NCCL communicators, when closed, are kept for the survivors'
     * {@code ncclCommShrink} instead of destroyed ({@link NcclShrinks}), and the descriptor sockets the dead ranks'
     * processes left in the secrets' directory (a process killed by SIGKILL cannot remove its own) are removed
     * ({@link CrossProcessMemory#sweepStale()}: one listing, no waiting).
     */
    @Override
    public void shrinking(Group group, List<Integer> dead) {
        ncclShrinks.begin(group.worldSize(), dead);
        int removed = crossProcess.sweepStale();
        if (removed > 0) {
            LOG.debug("cuda transport: removed {} descriptor socket(s) of gone processes while rank {} shrinks without {}",
                    removed, group.rank(), dead);
        }
    }

    /** The survivors rebuilt their communicators: the old group's NCCL communicators nobody shrank are aborted. */
    @Override
    public void rebuilt(Group survivors) {
        ncclShrinks.abortParked();
    }

    NcclShrinks ncclShrinks() {
        return ncclShrinks;
    }

    /** Ranks this transport holds now (tests: 0 after every group was released). */
    int heldRanks() {
        return ranks.size();
    }

    @Override
    public String name() {
        return NAME;
    }

    /** {@return true: device memory of each rank's GPU} */
    @Override
    public boolean deviceMemory() {
        return true;
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
     * What a rank tells its peers first about one allocation, serialized for {@link Group#allGatherBytes}:
     * enough to refuse a bad request on every rank before anything is allocated, and to tell ranks in
     * one process (threads) from ranks in processes of their own.
     */
    private record Header(long bytes, int ordinal, long idProposal, long pid, long transport) {

        static final int BYTES = 5 * Long.BYTES;

        byte[] toBytes() {
            return ByteBuffer.allocate(BYTES).putLong(bytes).putLong(ordinal).putLong(idProposal).putLong(pid)
                    .putLong(transport).array();
        }

        static Header of(byte[] b) {
            if (b.length != BYTES) {
                throw new SymmemException("cuda transport: a peer's header has " + b.length + " bytes, expected "
                        + BYTES + " (fix: run the same symmem4j version on every rank)");
            }
            ByteBuffer in = ByteBuffer.wrap(b);
            return new Header(in.getLong(), (int) in.getLong(), in.getLong(), in.getLong(), in.getLong());
        }
    }

    /**
     * What a rank of an in-process group tells its peers next: device pointers and the context
     * handle as addresses, meaningful only in this process.
     */
    private record Pointers(long data, long pad, long context) {

        static final int BYTES = 3 * Long.BYTES;

        byte[] toBytes() {
            return ByteBuffer.allocate(BYTES).putLong(data).putLong(pad).putLong(context).array();
        }

        static Pointers of(byte[] b) {
            ByteBuffer in = ByteBuffer.wrap(b);
            return new Pointers(in.getLong(), in.getLong(), in.getLong());
        }
    }

    private static final java.util.concurrent.atomic.AtomicLong NEXT_ID = new java.util.concurrent.atomic.AtomicLong();
    private static final java.util.concurrent.atomic.AtomicLong NEXT_TRANSPORT = new java.util.concurrent.atomic.AtomicLong();
    /** This instance among the process's transports: every rank of a group must allocate on the same one. */
    private final long instance = NEXT_TRANSPORT.getAndIncrement();
    /** Allocations whose ranks are processes: this transport's descriptor channel, bound at first use. */
    private final CrossProcessMemory crossProcess;

    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes=" + bytes + " must be >= 0 (fix: pass the size to"
                    + " allocate in bytes)");
        }
        CudaRank r = rank(group);
        refuseAcrossMachines(group, "allocate");
        return share(group, r, bytes, null, "allocate");
    }

    /**
     * Which machines the group's ranks are on: learned once per group ({@code NodeTopology.of} remembers it), at its
     * first allocation or communicator (every rank makes those collectively, in the same order), from host names or
     * the pretend setting.
     */
    private org.symmem4j.parallel.multinode.NodeTopology topology(Group group) {
        return org.symmem4j.parallel.multinode.NodeTopology.of(group);
    }

    private void refuseAcrossMachines(Group group, String what) {
        capabilities(topology(group), null).require(what.equals("allocate") ? Capability.ALLOCATE : Capability.REGISTER);
    }

    /**
     * Collective: the group's machines ({@code NodeTopology.of}, learned once per group) and its ranks' processes
     * (one exchange of pids), the facts {@link #allocate} and {@link #register} decide by. Register is answered for
     * the actual group: supported when its ranks are threads of one JVM, refused when they are processes of their own
     * (only memory allocated exportable can be mapped by another process) or on several machines.
     */
    @Override
    public TransportCapabilities capabilities(Group group) {
        checkOpen(group);
        org.symmem4j.parallel.multinode.NodeTopology t = topology(group);
        long pid = ProcessHandle.current().pid();
        List<byte[]> raw = group.allGatherBytes("cuda-capabilities", ByteBuffer.allocate(Long.BYTES).putLong(pid).array());
        StringBuilder found = new StringBuilder();
        boolean oneProcess = true;
        for (int p = 0; p < raw.size(); p++) {
            long peer = ByteBuffer.wrap(raw.get(p)).getLong();
            oneProcess &= peer == pid;
            found.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" pid=").append(peer);
        }
        return capabilities(t, oneProcess ? null : found.toString());
    }

    /**
     * The answers for the given facts of a group, no GPU needed (the documentation's table is printed from it): what
     * every refusal of this transport and of its hierarchical communicator throws.
     *
     * @param t    the group's machines
     * @param pids where its ranks run, {@code "rank=0 pid=41, rank=1 pid=42"}, when in processes of their own; null
     *             when all are threads of one process
     * @return what {@link #capabilities(Group)} answers for such a group
     */
    public static TransportCapabilities capabilities(org.symmem4j.parallel.multinode.NodeTopology t, String pids) {
        TransportCapabilities.Builder b = TransportCapabilities.of(NAME)
                .yes(Capability.SUB_GROUPS, "each rank keeps its GPU")
                .yes(Capability.DEVICE_MEMORY, "")
                .yes(Capability.CROSS_PROCESS, "exported allocations passed over a Unix socket")
                .no(Capability.DECOMMIT, "transport " + NAME + " holds device memory, allocated whole: it gives no pages"
                        + " back (decommit is for host memory: the " + HOST_IN_JVM + " and " + HOST_SHM + " transports)");
        if (t.nodes() > 1) {
            String across = " the group's ranks are on " + t.nodes() + " machines (" + t.ranksPerNode() + " each) and GPU"
                    + " memory cannot be mapped across machines; allocate on a group within one machine (split the group by"
                    + " machine), or give the group's communicator (NCCL between machines) plain device buffers";
            String shards = " on SymmetricMemory: this GPU group spans " + t.nodes() + " machines and symmetric memory"
                    + " cannot; use the segment form with device buffers";
            return b.no(Capability.ALLOCATE, "symmetric memory allocate:" + across)
                    .no(Capability.REGISTER, "symmetric memory register:" + across)
                    .no(Capability.PEER_ACCESS, "symmetric memory allocate:" + across)
                    .no(Capability.IN_PLACE_REDUCE_SCATTER, "reduceScatter" + shards)
                    .no(Capability.IN_PLACE_ALL_GATHER, "allGather" + shards)
                    .build();
        }
        b.yes(Capability.ALLOCATE, "device memory, every peer's mapped")
                .yes(Capability.PEER_ACCESS, pids == null ? "peer access between the contexts" : "exported allocations")
                .yes(Capability.IN_PLACE_REDUCE_SCATTER, "")
                .yes(Capability.IN_PLACE_ALL_GATHER, "");
        return pids == null ? b.yes(Capability.REGISTER, "a device pointer on this rank's GPU").build()
                : b.no(Capability.REGISTER, "symmetric memory register: the ranks run in processes of their own (" + pids
                        + "), and another process can map only memory allocated exportable; allocate it with"
                        + " SymmetricMemory.allocate(group, bytes) and compute in it, or run the ranks as threads of one JVM")
                .build();
    }

    /**
     * Registers {@code buffer} — whose address must be a device pointer on this rank's GPU and whose
     * byte size is the buffer's size — so collectives run on it in place. Ranks in one process only:
     * another process can map only memory made exportable when it was allocated (allocate instead).
     */
    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        CudaRank r = rank(group);
        refuseAcrossMachines(group, "register");
        return share(group, r, buffer.byteSize(), buffer, "register");
    }

    /**
     * Collective: checks the request on every rank, then shares this rank's memory ({@code registered},
     * or a fresh zeroed buffer when null) with the group's ranks, in this process or across processes.
     */
    private SymmetricMemory share(Group g, CudaRank r, long bytes, MemorySegment registered, String what) {
        int n = g.worldSize();
        long pid = ProcessHandle.current().pid();
        Header[] headers = new Header[n];
        List<byte[]> raw = g.allGatherBytes("cuda-" + what, new Header(bytes, r.ordinal,
                g.rank() == 0 ? NEXT_ID.getAndIncrement() : -1, pid, instance).toBytes());
        for (int p = 0; p < n; p++) {
            headers[p] = Header.of(raw.get(p));
        }
        checkSizes(headers, bytes, what);
        ProcessLayout layout = ProcessLayout.of(g, headers);
        if (layout == ProcessLayout.ONE_PROCESS) {
            checkOneTransport(g, headers, what);
            return shareInProcess(g, r, bytes, registered, what, headers);
        }
        if (registered != null) {
            throw capabilities(topology(g), pids(headers)).refusal(Capability.REGISTER);
        }
        long[] pids = new long[n];
        int[] ordinals = new int[n];
        for (int p = 0; p < n; p++) {
            pids[p] = headers[p].pid();
            ordinals[p] = headers[p].ordinal();
        }
        // unique per channel: rank 0's process and its allocation number there
        long tag = headers[0].pid() << 32 | (headers[0].idProposal() & 0xffffffffL);
        CrossProcessMemory.Shared shared = crossProcess.share(g, r, bytes, pids, ordinals, tag);
        // the id is rank 0's number, as every rank sees it; the key is this process's own (rank 0's
        // number may be taken here by an allocation of another group)
        long key = NEXT_ID.getAndIncrement();
        SymmetricAllocation allocation = new SymmetricAllocation(headers[0].idProposal(), key, n, 1);
        allocations.put(key, allocation);
        allocation.join(driver, g.rank(), shared.data()[g.rank()], shared.pads()[g.rank()], false, r.device,
                shared.mappings());
        return new CudaSymmetricMemory(g, this, r, bytes, shared.data(), shared.pads(), allocation);
    }

    /** Where a group's ranks run: decided from the header exchange, so alike on every rank. */
    private enum ProcessLayout {
        ONE_PROCESS, PROCESS_PER_RANK;

        static ProcessLayout of(Group g, Header[] headers) {
            java.util.Set<Long> distinct = new java.util.HashSet<>();
            for (Header h : headers) {
                distinct.add(h.pid());
            }
            if (distinct.size() == 1) {
                return ONE_PROCESS;
            }
            if (distinct.size() == headers.length) {
                return PROCESS_PER_RANK;
            }
            throw new SymmemException("cuda transport needs the ranks of a group either all in one process (threads) or"
                    + " each in a process of its own; found " + pids(headers) + " on"
                    + " rank=" + g.rank() + " (fix: launch one"
                    + " process per GPU, e.g. bin/symmem4j-run --nproc-per-node N, or run every rank as a thread of one JVM)");
        }
    }

    private static String pids(Header[] headers) {
        StringBuilder found = new StringBuilder();
        for (int p = 0; p < headers.length; p++) {
            found.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" pid=").append(headers[p].pid());
        }
        return found.toString();
    }

    private static void checkSizes(Header[] headers, long bytes, String what) {
        StringBuilder sizes = new StringBuilder();
        boolean same = true;
        for (int p = 0; p < headers.length; p++) {
            same &= headers[p].bytes() == bytes;
            sizes.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" bytes=").append(headers[p].bytes());
        }
        if (!same) {
            throw new SymmemException("symmetric memory " + what + ": sizes differ across ranks: " + sizes
                    + " (fix: every rank must " + what + " the same number of bytes)");
        }
    }

    /** Ranks as threads of this process: device pointers swapped as numbers, peer access enabled between contexts. */
    private SymmetricMemory shareInProcess(Group g, CudaRank r, long bytes, MemorySegment registered, String what,
                                           Header[] headers) {
        long id = headers[0].idProposal();
        boolean ownsData = registered == null;
        long data;
        if (ownsData) {
            data = driver.malloc(Math.max(bytes, 16));
            driver.memset(data, (byte) 0, Math.max(bytes, 16));
        } else {
            data = registered.address();
        }
        long pad = driver.malloc(CudaKernels.PAD_BYTES);
        driver.memset(pad, (byte) 0, CudaKernels.PAD_BYTES);
        int n = g.worldSize();
        Pointers[] all = new Pointers[n];
        try {
            List<byte[]> raw = g.allGatherBytes("cuda-" + what + "-pointers", new Pointers(data, pad, r.context.address())
                    .toBytes());
            for (int p = 0; p < n; p++) {
                all[p] = Pointers.of(raw.get(p));
            }
            for (int p = 0; p < n; p++) {
                r.checkCanAccess(headers[p].ordinal(), p);
                if (headers[p].ordinal() != r.ordinal) {
                    driver.enablePeerAccess(MemorySegment.ofAddress(all[p].context()));
                }
            }
        } catch (RuntimeException e) {
            driver.free(pad);
            if (ownsData) {
                driver.free(data);
            }
            throw e;
        }
        long[] datas = new long[n];
        long[] pads = new long[n];
        for (int p = 0; p < n; p++) {
            datas[p] = all[p].data();
            pads[p] = all[p].pad();
        }
        SymmetricAllocation allocation = allocations.computeIfAbsent(id, k -> new SymmetricAllocation(k, k, n, n));
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
            allocations.remove(allocation.key(), allocation);
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
    private static void checkOneTransport(Group g, Header[] all, String what) {
        StringBuilder found = new StringBuilder();
        boolean same = true;
        for (int p = 0; p < all.length; p++) {
            same &= all[p].transport() == all[0].transport();
            found.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" transport=#").append(all[p].transport());
        }
        if (!same) {
            throw new SymmemException("symmetric memory " + what + ": the ranks of the group use different CudaTransport"
                    + " instances: " + found + " on rank=" + g.rank() + " (fix: create one CudaTransport and"
                    + " let every rank of"
                    + " the group use it, e.g. InJvmWorld.create(n, options, transport))");
        }
    }

    /**
     * The group's communicator: within one machine our kernels on CUDA symmetric memory (and NCCL); for a group
     * whose ranks are on several machines ({@code NodeTopology}), the hierarchical one — our kernels inside each
     * machine, NCCL between them ({@link CudaHierarchicalCommunicator}).
     */
    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        rank(group);
        org.symmem4j.parallel.multinode.NodeTopology t = topology(group);
        if (t.nodes() > 1) {
            return CudaHierarchicalCommunicator.create(this, group, t, options);
        }
        return new CudaCommunicator(this, group, options);
    }
}
