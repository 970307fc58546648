package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
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
import org.symmem4j.parallel.TransportCapabilities.Support;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.cuda.ffi.Nvshmem;

/**
 * GPUs joined by NVSHMEM ({@link Nvshmem}): one process per GPU, each process one NVSHMEM PE whose
 * number is its group rank. Symmetric memory lives on NVSHMEM's symmetric heap: {@code putWithSignal},
 * {@code signal} and the stream-side waits are NVSHMEM's put-with-signal and signal wait on the rank's
 * stream (what carries the pipeline's hand-off, and what reaches PEs of other nodes over InfiniBand or
 * RoCE), while every peer NVSHMEM maps ({@code nvshmem_ptr}: the GPUs of this node) is also in the
 * memory's device pointers, so our kernels and the user's run on it unchanged. The communicator is the
 * CUDA transport's ({@link org.symmem4j.parallel.DeviceCommunicator}: our ONE_SHOT and TWO_SHOT kernels, NCCL) with
 * its scratch on the heap and NVSHMEM's own on-stream reductions as {@link org.symmem4j.parallel.Algorithm#NVSHMEM}.
 *
 * <pre>{@code
 * try (NvshmemTransport nvshmem = NvshmemTransport.create();       // CudaUnavailableException: no CUDA or no NVSHMEM
 *      ProcessGroup group = ProcessGroup.fromEnvironment(options, nvshmem)) {   // one process per GPU (the launcher)
 *     try (SymmetricMemory inbox = SymmetricMemory.allocate(group, bytes)) {   // on the symmetric heap
 *         inbox.putWithSignal(next, activations, 0, 0, 1, SignalOp.ADD);         // nvshmemx_putmem_signal_on_stream
 *     }
 *     nvshmem.release(group);                                                  // nvshmemx_hostlib_finalize
 * }
 * }</pre>
 *
 * <h2>What NVSHMEM asks of the group</h2>
 * NVSHMEM keeps one set of PEs per process, so this transport serves one group per process at a time
 * (its world: the PEs are the group's ranks; sub-groups would be NVSHMEM teams, not bound yet), each
 * rank in a process of its own on a GPU of its own (NVSHMEM refuses barriers and collectives with
 * several processes on one GPU unless MPS runs; a group of one rank in one process is fine, for tests
 * on one GPU). Both are checked when the group first uses the transport, on every rank, before NVSHMEM
 * starts. NVSHMEM starts there (by unique id: rank 0 draws it, the group's exchange hands it out;
 * no MPI) and stops at {@link #release(Group)}; a later use starts it again. NVLink multicast stays
 * off unless {@code NVSHMEM_DISABLE_NVLS} is set. {@link #register} is refused: NVSHMEM reaches only
 * its heap. Memory is freed with {@code nvshmem_free}, a barrier of every PE: a rank whose close did
 * not meet its peers keeps it until the process exits.
 */
public final class NvshmemTransport implements Transport, AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(NvshmemTransport.class);

    /** The transport's name, the {@code transport} metric tag. */
    public static final String NAME = "nvshmem";

    /** NVSHMEM's PEs in this process: at most one world, whichever transport instance started it. */
    private static final Object WORLD_LOCK = new Object();
    private static Group world;

    private static final AtomicLong NEXT_ID = new AtomicLong();

    private final CudaTransport cuda;
    private final Nvshmem nvshmem;
    private volatile boolean closed;

    private NvshmemTransport(CudaTransport cuda, Nvshmem nvshmem) {
        this.cuda = cuda;
        this.nvshmem = nvshmem;
    }

    /**
     * A transport on this machine's GPUs through NVSHMEM.
     *
     * @return the transport; close it after releasing its groups
     * @throws CudaUnavailableException when there is no CUDA driver or no NVSHMEM library, saying what was tried
     */
    public static NvshmemTransport create() {
        Nvshmem n = Nvshmem.get();
        return new NvshmemTransport(CudaTransport.create(), n);
    }

    /**
     * Whether NVSHMEM's host library can be loaded here (CUDA is checked by {@link #create()}).
     *
     * @return true when it loaded and bound
     */
    public static boolean available() {
        return Nvshmem.available();
    }

    /**
     * Why NVSHMEM's host library could not be loaded.
     *
     * @return every place tried and why it failed, or null when available
     */
    public static String unavailableReason() {
        return Nvshmem.unavailableReason();
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
     * NVSHMEM's version and library, and the CUDA driver's, for reports.
     *
     * @return e.g. {@code "NVSHMEM 3.4.5 (OpenSHMEM 1.3) from /…/libnvshmem_host.so.3, CUDA driver 13000, NCCL 22703"}
     */
    public String runtimeVersions() {
        return nvshmem.version() + " from " + nvshmem.path() + ", " + cuda.runtimeVersions();
    }

    /**
     * Device name and ordinal of this rank's GPU, and its PE, for reports (starts NVSHMEM for the group).
     *
     * @param group a rank's group on this transport
     * @return e.g. {@code "NVIDIA H200 (device 1, 132 SMs), PE 1 of 2"}
     */
    public String describe(Group group) {
        rank(group);
        return cuda.describe(group) + ", PE " + nvshmem.myPe() + " of " + nvshmem.nPes();
    }

    /**
     * The CUDA transport underneath: its memory for the same group is the CUDA transport's own (our kernels'
     * puts, device-memory file descriptors across processes), for comparisons such as the hand-off benchmark.
     *
     * @return the CUDA transport this one runs on; closed with it
     */
    public CudaTransport cudaTransport() {
        return cuda;
    }

    /** This rank's GPU state, with NVSHMEM started for its group. */
    CudaRank rank(Group group) {
        checkOpen(group);
        CudaRank r = cuda.rank(group);
        startWorld(group, r);
        return r;
    }

    private void checkOpen(Group group) {
        if (closed) {
            throw new IllegalStateException("nvshmem transport closed: rank=" + (group == null ? "?" : group.rank())
                    + " cannot use it (fix: create a new one with NvshmemTransport.create())");
        }
    }

    /**
     * Starts NVSHMEM for {@code group} unless it runs for it already: checks on every rank that each has a
     * process and a GPU of its own (or the group is one rank), draws the unique id at rank 0, initialises,
     * and checks that NVSHMEM numbered the PEs as the group numbers its ranks.
     */
    private void startWorld(Group group, CudaRank r) {
        synchronized (WORLD_LOCK) {
            if (world == group) {
                return;
            }
            refuseSecondWorld();
        }
        // the exchanges wait for the group's other ranks: outside the lock, which another rank's thread of this
        // process (a refused layout) would otherwise wait for instead of reaching the exchange and its clear refusal
        String placement = ProcessHandle.current().pid() + " " + SharedGpus.deviceIdentity(cuda.driver(), r.device);
        List<byte[]> all = group.allGatherBytes("nvshmem-placement", placement.getBytes(StandardCharsets.UTF_8));
        String problem = placementProblem(all);
        if (problem != null) {
            throw new SymmemException("nvshmem transport: " + problem + " on rank=" + group.rank() + " (NVSHMEM needs one"
                    + " process per GPU; fix: launch one process per GPU, e.g. bin/symmem4j-run --nproc-per-node <GPUs>, or use"
                    + " the cuda transport for ranks that share a process or a GPU)");
        }
        byte[] id = group.rank() == 0 ? nvshmem.uniqueId() : new byte[Nvshmem.UNIQUE_ID_BYTES];
        byte[] shared = group.allGatherBytes("nvshmem-unique-id", id).getFirst();
        synchronized (WORLD_LOCK) {
            refuseSecondWorld(); // one rank per process (checked above): no peer of this process takes it meanwhile
            cuda.driver().setCurrent(r.context);
            nvshmem.initByUniqueId(group.rank(), group.worldSize(), shared);
            int pe = nvshmem.myPe();
            int pes = nvshmem.nPes();
            int status = nvshmem.initStatus();
            if (pe != group.rank() || pes != group.worldSize() || status != Nvshmem.STATUS_INITIALIZED) {
                nvshmem.finalizeHostlib();
                throw new SymmemException("nvshmem transport: NVSHMEM started as PE " + pe + " of " + pes + " (status " + status
                        + ", expected " + Nvshmem.STATUS_INITIALIZED + ") for rank=" + group.rank() + " of "
                        + group.worldSize() + " (status " + Nvshmem.STATUS_LIMITED_MPG + ": several processes on one GPU;"
                        + " fix: launch one process per GPU, e.g. bin/symmem4j-run --nproc-per-node <GPUs>, with"
                        + " CUDA_VISIBLE_DEVICES unset)");
            }
            world = group;
            LOG.debug("NVSHMEM started: PE {} of {} on device {}", pe, pes, r.ordinal);
        }
    }

    /** Under {@link #WORLD_LOCK}: refuses when NVSHMEM already runs in this process for another group. */
    private static void refuseSecondWorld() {
        if (world != null) {
            throw new IllegalStateException("NVSHMEM already runs in this process for another group (rank=" + world.rank()
                    + " of " + world.worldSize() + "): NVSHMEM has one set of PEs per process; fix: release that group"
                    + " (NvshmemTransport.release) before using another, or use sub-groups on the CUDA transport");
        }
    }

    /**
     * What is wrong with where the ranks run, from each rank's {@code "pid host/pci-address"}: null when every rank
     * has a process of its own on a GPU of its own (or there is one rank), else which ranks share what.
     */
    static String placementProblem(List<byte[]> placements) {
        int n = placements.size();
        String[][] parts = new String[n][];
        for (int p = 0; p < n; p++) {
            parts[p] = new String(placements.get(p), StandardCharsets.UTF_8).split(" ", 2);
        }
        for (int p = 0; p < n; p++) {
            for (int q = p + 1; q < n; q++) {
                if (parts[p][0].equals(parts[q][0])) {
                    return "ranks " + p + " and " + q + " run in one process (pid " + parts[p][0] + ")";
                }
                if (parts[p][1].equals(parts[q][1])) {
                    return "ranks " + p + " and " + q + " share GPU " + parts[p][1];
                }
            }
        }
        return null;
    }

    /**
     * Collective: {@code bytes} on NVSHMEM's symmetric heap on every rank, zeroed, with a signal pad
     * there too; every peer NVSHMEM maps gets device pointers for our kernels.
     */
    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes=" + bytes + " must be >= 0 (fix: pass the size to"
                    + " allocate in bytes)");
        }
        CudaRank r = rank(group);
        int n = group.worldSize();
        // sizes agreed before the heap is touched: nvshmem_malloc of different sizes would corrupt the heap's symmetry
        List<byte[]> headers = group.allGatherBytes("nvshmem-allocate", ByteBuffer.allocate(16).putLong(bytes)
                .putLong(group.rank() == 0 ? NEXT_ID.getAndIncrement() : -1).array());
        long[] sizes = new long[n];
        for (int p = 0; p < n; p++) {
            sizes[p] = ByteBuffer.wrap(headers.get(p)).getLong();
        }
        if (Arrays.stream(sizes).anyMatch(s -> s != bytes)) {
            StringBuilder found = new StringBuilder();
            for (int p = 0; p < n; p++) {
                found.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" bytes=").append(sizes[p]);
            }
            throw new SymmemException("symmetric memory allocate: sizes differ across ranks: " + found
                    + " (fix: every rank must allocate the same number of bytes)");
        }
        long id = ByteBuffer.wrap(headers.getFirst()).getLong(8);
        CudaDriver d = cuda.driver();
        d.setCurrent(r.context);
        long data = nvshmem.malloc(Math.max(bytes, 16));
        long pad;
        try {
            pad = nvshmem.malloc(CudaKernels.PAD_BYTES);
        } catch (RuntimeException e) {
            nvshmem.free(data);
            throw e;
        }
        d.memset(data, (byte) 0, Math.max(bytes, 16));
        d.memset(pad, (byte) 0, CudaKernels.PAD_BYTES);
        // every rank's zeroing done before any peer signals into its pad
        group.allGatherBytes("nvshmem-zeroed", new byte[0]);
        long[] datas = new long[n];
        long[] pads = new long[n];
        for (int p = 0; p < n; p++) {
            datas[p] = p == group.rank() ? data : nvshmem.peerPointer(data, p);
            pads[p] = p == group.rank() ? pad : nvshmem.peerPointer(pad, p);
        }
        SymmetricAllocation allocation = new SymmetricAllocation(id, NEXT_ID.getAndIncrement() | Long.MIN_VALUE, n, 1);
        allocation.joinCollectivelyFreed(d, group.rank(), data, pad, r.device, () -> {
            nvshmem.free(pad);
            nvshmem.free(data);
        });
        return new CudaSymmetricMemory(group, cuda, r, bytes, datas, pads, allocation, nvshmem);
    }

    /** Refused: NVSHMEM reaches only memory on its symmetric heap; allocate instead. */
    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        throw REGISTER_REFUSED.exception();
    }

    /** {@link #register}'s answer, whatever the group. */
    private static final Support REGISTER_REFUSED = Support.no("symmetric memory register: NVSHMEM reaches only its"
            + " symmetric heap; allocate with SymmetricMemory.allocate(group, bytes) and compute in it, or register on the"
            + " cuda transport");

    /** {@link #forSubGroup}'s answer, whatever the group. */
    private static final Support SUB_GROUPS_REFUSED = Support.no("transport nvshmem cannot serve sub-groups yet (they"
            + " would be NVSHMEM teams, not bound): split the group on the cuda transport instead");

    /**
     * Collective at the group's first use (its machine layout, {@code NodeTopology.of}): memory on NVSHMEM's heap,
     * no register, no sub-groups; our kernels' peer pointers only for the GPUs NVSHMEM maps (one machine), the ranks
     * of other machines reached through {@code putWithSignal} and {@code signal}.
     */
    @Override
    public TransportCapabilities capabilities(Group group) {
        return capabilities(org.symmem4j.parallel.multinode.NodeTopology.of(group).nodes());
    }

    /**
     * The answers for a group on {@code nodes} machines, no GPU needed (the documentation's table is printed from it).
     *
     * @param nodes the machines the group's ranks are on
     * @return what {@link #capabilities(Group)} answers for such a group
     */
    public static TransportCapabilities capabilities(int nodes) {
        TransportCapabilities.Builder b = TransportCapabilities.of(NAME)
                .yes(Capability.ALLOCATE, "NVSHMEM's symmetric heap")
                .set(Capability.REGISTER, REGISTER_REFUSED)
                .set(Capability.SUB_GROUPS, SUB_GROUPS_REFUSED)
                .yes(Capability.DEVICE_MEMORY, "")
                .yes(Capability.CROSS_PROCESS, "one process per GPU")
                .no(Capability.DECOMMIT, "transport " + NAME + " holds NVSHMEM's symmetric heap, allocated whole: it gives"
                        + " no pages back (decommit is for host memory: the " + HOST_IN_JVM + " and " + HOST_SHM
                        + " transports)");
        if (nodes == 1) {
            return b.yes(Capability.PEER_ACCESS, "every peer NVSHMEM maps: nvshmem_ptr, peer access on this machine")
                    .yes(Capability.IN_PLACE_REDUCE_SCATTER, "").yes(Capability.IN_PLACE_ALL_GATHER, "").build();
        }
        String across = " the group spans " + nodes + " machines and NVSHMEM gives no peer pointer to another machine's"
                + " memory; reach it with putWithSignal and signal, which NVSHMEM carries, or run the ranks on one machine"
                + " for our kernels and peer()";
        return b.no(Capability.PEER_ACCESS, "peer access:" + across)
                .no(Capability.IN_PLACE_REDUCE_SCATTER, "reduceScatter on SymmetricMemory (our kernels read every peer's"
                        + " block):" + across)
                .no(Capability.IN_PLACE_ALL_GATHER, "allGather on SymmetricMemory (our kernels write every peer's block):"
                        + across)
                .build();
    }

    /**
     * The CUDA transport's communicator for the group, its scratch and staging on NVSHMEM's heap, with
     * {@link org.symmem4j.parallel.Algorithm#NVSHMEM} (NVSHMEM's on-stream reductions) besides ours and NCCL.
     */
    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        rank(group);
        return new CudaCommunicator(cuda, this, nvshmem, group, options);
    }

    /** Refused: NVSHMEM's sub-groups are its teams, not bound yet. */
    @Override
    public Transport forSubGroup(int[] parentRanks) {
        throw SUB_GROUPS_REFUSED.exception();
    }

    /**
     * Stops NVSHMEM for {@code group} (collective: every rank calls it, after closing the group's memories
     * and communicators on this transport), then releases the rank's GPU state as
     * {@link CudaTransport#release(Group)} does. A group that never started NVSHMEM only has the latter.
     *
     * @param group a rank's group on this transport
     */
    public void release(Group group) {
        try (Transport.CallerState caller = cuda.callerState()) { // the caller's context, current again after
            synchronized (WORLD_LOCK) {
                if (world == group) {
                    world = null;
                    cuda.driver().setCurrent(cuda.rank(group).context);
                    nvshmem.finalizeHostlib();
                }
            }
        } finally {
            cuda.release(group);
        }
    }

    /** As {@link CudaTransport#callerState()}. */
    @Override
    public Transport.CallerState callerState() {
        return cuda.callerState();
    }

    /** Stops NVSHMEM if a group of this process still runs it, then closes the CUDA transport. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        try {
            Group running;
            synchronized (WORLD_LOCK) {
                running = world;
            }
            if (running != null) {
                release(running);
            }
        } finally {
            closed = true;
            cuda.close();
        }
    }
}
