package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Provider;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.control.ControlPlane;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.cuda.ffi.Cublas;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.EverySteps;
import org.symmem4j.parallel.cuda.ffi.Nvshmem;
import org.symmem4j.parallel.numeric.Reducer;
import org.symmem4j.parallel.trace.Nvtx;

/**
 * Collectives on GPU symmetric memory, the whole {@link Communicator} surface: all-reduce,
 * reduce-scatter and all-gather (in place over {@link ShardPartition} blocks, or staged from plain
 * device segments through this communicator's staging window), broadcast, and the GPU-only
 * operations of {@link org.symmem4j.parallel.DeviceCommunicator}. Obtain it with
 * {@link Communicator#create(Group)} on a group created on the CUDA transport; GPU-only operations
 * through {@code unwrap(DeviceCommunicator.class)}.
 *
 * <p>Who computes what:
 * <ul>
 *   <li>all-reduce: symmem4j's kernels for ONE_SHOT and TWO_SHOT (FLOAT32 and BFLOAT16 with float32
 *       accumulation; SUM and AVG); NCCL for {@link Algorithm#NCCL} (every dtype and op; one GPU
 *       per rank); {@link Algorithm#NCCL_SYMMETRIC}, NCCL on this communicator's NCCL symmetric
 *       window, the message copied in and out (NCCL 2.27+, one GPU per rank). FLOAT64, MAX and MIN
 *       all-reduce only through NCCL; RING is not supported on GPUs.</li>
 *   <li>reduce-scatter (in place or staged): the reduce-scatter kernel for FLOAT32/BFLOAT16 SUM
 *       (the same bits as a ONE_SHOT or TWO_SHOT all-reduce); every other dtype and op on the host
 *       (each rank copies its block of every peer to host memory and reduces it with the host
 *       transport's reducer, in rank order), which cannot be captured into a graph.</li>
 *   <li>all-gather (in place or staged): the all-gather kernel, a byte copy for every dtype.</li>
 *   <li>broadcast: the copy engine through the root's staging window, between host barriers.</li>
 * </ul>
 * None of these but the two NCCL algorithms needs NCCL, so all run where ranks share a GPU.
 *
 * <p>Its parts, cut as NCCL's are: {@link NcclProvider} (NCCL's set-up, calls and teardown),
 * {@link CollectiveKernels} (symmem4j's kernels by algorithm and {@link Protocol}, the launch
 * parameters marshalled by {@link AllReduceParameters}), {@link DeviceOperations} (graph capture,
 * ordering, copies) and the {@link ControlPlane}. This class checks the arguments, has the ranks
 * agree on them, stages plain buffers, and dispatches: {@link #supports(Algorithm, DType, ReduceOp, long)}
 * is the eligibility filter, the protocol the measured choice inside an algorithm.
 *
 * <p>Operations are enqueued on this rank's stream and return before the GPU has run them (the
 * host reductions and broadcast wait for it); {@link #synchronize()} waits. A sequence of kernel
 * collectives can be captured into a CUDA graph and replayed ({@link #capture}).
 *
 * <p>Before enqueueing, the ranks check that they agree on the arguments, through the entry barrier
 * of a {@link ControlPlane} on the group's host transport (a mismatch would otherwise leave GPU
 * blocks waiting for partners that never come). Graph replays skip the check: it ran at capture.
 * Eager all-reduces launch a one-kernel graph captured at the first call with the same arguments
 * ({@link EagerGraphCache}).
 */
public final class CudaCommunicator implements Communicator, org.symmem4j.parallel.DeviceCommunicator {

    /** NVTX ranges of the collectives (payload: the call's count in bytes); nothing without NVTX. */
    private static final Nvtx.Range NVTX_ALL_REDUCE = Nvtx.range("symmem4j all_reduce");
    private static final Nvtx.Range NVTX_REDUCE_SCATTER = Nvtx.range("symmem4j reduce_scatter");
    private static final Nvtx.Range NVTX_ALL_GATHER = Nvtx.range("symmem4j all_gather");
    private static final Nvtx.Range NVTX_BROADCAST = Nvtx.range("symmem4j broadcast");

    private final CudaTransport transport;
    private final Group group;
    private final CudaRank rank;
    private final CudaDriver driver;
    private final ControlPlane control;
    private final int worldSize;
    /** Tells this communicator's calls apart from another's in the rank's eager graph cache. */
    private final long serial = SERIALS.incrementAndGet();
    private static final java.util.concurrent.atomic.AtomicLong SERIALS = new java.util.concurrent.atomic.AtomicLong();
    private final boolean sharedDevice;
    /** symmem4j's kernels and their protocols' scratch; null without kernels. */
    private final CollectiveKernels kernels;
    /** NCCL ({@link Algorithm#NCCL}, {@link Algorithm#NCCL_SYMMETRIC}, send and receive). */
    private final NcclProvider nccl;
    /** NVSHMEM's reductions ({@link Algorithm#NVSHMEM}) where the communicator was made by {@link NvshmemTransport}; else null. */
    private final Nvshmem nvshmem;
    /** Graph capture, stream ordering, timing, device memory and copies. */
    private final DeviceOperations device;
    /**
     * Staging for the collectives on plain device segments (all-reduce, reduce-scatter, all-gather,
     * broadcast): {@link CommunicatorOptions#stagingBytes()} per rank; messages go through it in pieces.
     */
    private final CudaSymmetricMemory staging;
    private final long stagingBytes;
    private final Reducer hostReducer = Reducer.forThisJvm();
    /** Times the all-reduces on the GPU ({@link #timeAllReduces}). The rank's thread only. */
    private final AllReduceTimings timings;

    CudaCommunicator(CudaTransport transport, Group group, CommunicatorOptions options) {
        this(transport, transport, null, group, options);
    }

    /**
     * As above, with the scratch and staging memory allocated on {@code memory} (the group's transport:
     * NVSHMEM's heap for {@link NvshmemTransport}) and, where {@code nvshmem} is non-null, NVSHMEM's
     * reductions as {@link Algorithm#NVSHMEM}.
     */
    CudaCommunicator(CudaTransport transport, org.symmem4j.parallel.Transport memory, Nvshmem nvshmem, Group group,
                     CommunicatorOptions options) {
        this.nvshmem = nvshmem;
        this.transport = transport;
        this.group = group;
        this.rank = transport.rank(group);
        this.driver = transport.driver();
        this.timings = new AllReduceTimings(driver, rank, rank.stream);
        this.worldSize = group.worldSize();
        if (worldSize > CudaKernels.MAX_RANKS) {
            throw new IllegalArgumentException("worldSize=" + worldSize + " exceeds the kernels' MAX_RANKS="
                    + CudaKernels.MAX_RANKS + " (one machine's GPUs; fix: split the group by machine)");
        }
        this.control = ControlPlane.open(group, group.hostTransport());
        String sharing = SharedGpus.firstSharing(group, driver, rank.device); // null: every rank has a GPU of its own
        this.sharedDevice = sharing != null;
        LaunchBudget grids = rank.kernels == null ? null : CollectiveKernels.commonGrids(group, rank);
        this.nccl = new NcclProvider(group, driver, rank, sharing, options.stagingBytes(), transport.ncclShrinks());
        this.kernels = rank.kernels == null ? null
                : new CollectiveKernels(group, rank, driver, memory, grids, serial, sharedDevice);
        this.stagingBytes = options.stagingBytes();
        this.staging = (CudaSymmetricMemory) memory.allocate(group, stagingBytes);
        this.device = new DeviceOperations(driver, rank, this::synchronize);
    }

    @Override
    public Group group() {
        return group;
    }

    /**
     * {@code cuda-<gpu model>}, for example {@code cuda-nvidia-h200}: thresholds are calibrated per
     * GPU model (and world size), so the policy's table is keyed by this name.
     */
    @Override
    public String transportName() {
        return CudaTransport.NAME + "-" + rank.deviceName.toLowerCase(java.util.Locale.ROOT).replaceAll("[^a-z0-9]+", "-")
                .replaceAll("(^-|-$)", "");
    }

    /**
     * Why NCCL is not usable here.
     *
     * @return the reason, or null when NCCL is usable
     */
    public String ncclUnavailableReason() {
        return nccl.unavailableReason();
    }

    /**
     * Why NCCL_SYMMETRIC is not usable here.
     *
     * @return the reason (no NCCL, ranks sharing a GPU, an NCCL without symmetric windows), or null when usable
     */
    public String ncclSymmetricUnavailableReason() {
        return nccl.symmetricUnavailableReason();
    }

    @Override
    public boolean supports(Algorithm algorithm) {
        if (algorithm == Algorithm.NVSHMEM) {
            return nvshmem != null;
        }
        if (algorithm == Algorithm.NCCL) {
            return nccl.available();
        }
        if (algorithm == Algorithm.NCCL_SYMMETRIC) {
            return nccl.symmetricAvailable();
        }
        return (algorithm == Algorithm.ONE_SHOT || algorithm == Algorithm.TWO_SHOT) && rank.kernels != null;
    }

    @Override
    public boolean supports(Algorithm algorithm, DType dtype, ReduceOp op, long count) {
        if (!supports(algorithm)) {
            return false;
        }
        if (algorithm.provider() == Provider.NCCL) {
            return true; // NCCL on plain buffers or on its symmetric window: every dtype and op
        }
        if (algorithm.provider() == Provider.NVSHMEM) {
            return Nvshmem.reduces(dtype, op);
        }
        boolean kernelCase = (dtype == DType.FLOAT32 || dtype == DType.BFLOAT16) && (op == ReduceOp.SUM || op == ReduceOp.AVG);
        return kernelCase && (algorithm != Algorithm.ONE_SHOT || dtype.bytes(count) <= oneShotCapacityBytes());
    }

    /** Smallest message, in bytes, that TWO_SHOT sends through its write-only kernel here. */
    long twoShotPushMinBytes() {
        return Protocol.pushMinBytes(worldSize);
    }

    /**
     * Largest message, in bytes, ONE_SHOT takes here: the size of a landing slot in its scratch.
     *
     * @return the capacity in bytes
     */
    public long oneShotCapacityBytes() {
        return CollectiveKernels.ONE_SHOT_SLOT_BYTES;
    }

    /**
     * All-reduce of a plain device segment ({@code buffer.address()} a device pointer of this rank,
     * {@code buffer.byteSize()} its size): NCCL reduces it where it is; ONE_SHOT and TWO_SHOT copy
     * it through this communicator's staging memory in pieces of {@link CommunicatorOptions#stagingBytes()}
     * (copy engine, stream-ordered) and run the kernels there.
     */
    @Override
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        Nvtx.push(NVTX_ALL_REDUCE, count, dtype);
        try {
            long pieceBytes = algorithm == Algorithm.ONE_SHOT ? Math.min(stagingBytes, CollectiveKernels.ONE_SHOT_SLOT_BYTES)
                    : stagingBytes;
            long piece = dtype == null ? 1 : Math.max(1, pieceBytes / dtype.byteSize());
            Problem problem = buffer == null ? Problem.NULL_BUFFER : dtype == null || op == null || algorithm == null
                    ? Problem.NULL_ARGUMENT : count < 0 ? Problem.NEGATIVE_COUNT
                    : !supports(algorithm, dtype, op, Math.min(count, piece)) ? Problem.UNSUPPORTED_ALGORITHM
                    : Problem.ofSegment(buffer, true);
            control.checkAgreement("cuda all-reduce", Kind.ALL_REDUCE, dtype, op, algorithm, -1, count,
                    buffer == null ? -1 : buffer.byteSize(), -1, 0, 0, problem);
            if (count == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            boolean timed = timings.begin();
            enqueueAllReduce(buffer, count, dtype, op, algorithm, piece);
            if (timed) {
                timings.end(algorithm, dtype.bytes(count));
            }
        } finally {
            Nvtx.pop();
        }
    }

    /** The work of {@link #allReduce(MemorySegment, long, DType, ReduceOp, Algorithm)} once the ranks agreed. */
    private void enqueueAllReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm, long piece) {
        if (algorithm == Algorithm.NCCL) {
            nccl.allReduce(buffer.address(), count, dtype, op);
            return;
        }
        if (algorithm == Algorithm.NCCL_SYMMETRIC) {
            nccl.symmetricAllReduce(buffer.address(), count, dtype, op);
            return;
        }
        if (worldSize == 1 && algorithm != Algorithm.NVSHMEM) {
            return;
        }
        long dsize = dtype.byteSize();
        for (long start = 0; start < count; start += piece) {
            long len = Math.min(piece, count - start);
            // stream order: the copy in, the kernel (whose entry barrier waits for every rank's copy in),
            // the copy out; the next piece's copy in follows this piece's kernel, whose exit barrier
            // has every peer done with this rank's staging
            driver.copyDeviceToDeviceAsync(staging.dataPointer(group.rank()), buffer.address() + start * dsize, len * dsize,
                    rank.stream);
            if (algorithm == Algorithm.NVSHMEM) {
                // in place on the heap's staging: NVSHMEM's in-place reduction synchronises the PEs itself
                nvshmem.reduceOnStream(dtype, op, staging.dataPointer(group.rank()), staging.dataPointer(group.rank()), len,
                        rank.stream);
            } else {
                kernels.allReduceEager(staging, 0, len, dtype, op, algorithm);
            }
            driver.copyDeviceToDeviceAsync(buffer.address() + start * dsize, staging.dataPointer(group.rank()), len * dsize,
                    rank.stream);
        }
    }

    @Override
    public void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        Nvtx.push(NVTX_ALL_REDUCE, count, dtype);
        try {
            CudaSymmetricMemory mem = memory instanceof CudaSymmetricMemory c && c.group() == group ? c : null;
            Problem problem = problem(memory, mem, offsetBytes, count, dtype, op, algorithm);
            long available = mem == null || offsetBytes < 0 || offsetBytes > mem.byteSize() ? -1 : mem.byteSize() - offsetBytes;
            control.checkAgreement("cuda all-reduce", Kind.ALL_REDUCE, dtype, op, algorithm, -1, count, available,
                    memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
            if (count == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            boolean timed = timings.begin();
            enqueueAllReduce(mem, offsetBytes, count, dtype, op, algorithm);
            if (timed) {
                timings.end(algorithm, dtype.bytes(count));
            }
        } finally {
            Nvtx.pop();
        }
    }

    /** The work of {@link #allReduce(SymmetricMemory, long, long, DType, ReduceOp, Algorithm)} once the ranks agreed. */
    private void enqueueAllReduce(CudaSymmetricMemory mem, long offsetBytes, long count, DType dtype, ReduceOp op,
                                  Algorithm algorithm) {
        long ptr = mem.dataPointer(group.rank()) + offsetBytes;
        if (algorithm == Algorithm.NVSHMEM) {
            // in place on the symmetric heap (problem() refused memory elsewhere); runs with one PE too
            nvshmem.reduceOnStream(dtype, op, ptr, ptr, count, rank.stream);
            return;
        }
        if (algorithm == Algorithm.NCCL) {
            nccl.allReduce(ptr, count, dtype, op);
            return;
        }
        if (algorithm == Algorithm.NCCL_SYMMETRIC) {
            nccl.symmetricAllReduce(ptr, count, dtype, op);
            return;
        }
        if (worldSize == 1) {
            return;
        }
        kernels.allReduceEager(mem, offsetBytes, count, dtype, op, algorithm);
    }

    /** A local problem with the call, found before the ranks compare arguments (so all of them report it). */
    private Problem problem(SymmetricMemory memory, CudaSymmetricMemory mem, long offsetBytes, long count, DType dtype,
                            ReduceOp op, Algorithm algorithm) {
        if (memory == null) {
            return Problem.NULL_BUFFER;
        }
        if (mem == null) {
            return Problem.FOREIGN_MEMORY;
        }
        if (mem.isClosed()) {
            return Problem.FREED_BUFFER;
        }
        if (dtype == null || op == null || algorithm == null) {
            return Problem.NULL_ARGUMENT;
        }
        if (count < 0) {
            return Problem.NEGATIVE_COUNT;
        }
        if (offsetBytes < 0 || offsetBytes > mem.byteSize()) {
            return Problem.OFFSET_OUT_OF_RANGE;
        }
        boolean kernel = algorithm == Algorithm.ONE_SHOT || algorithm == Algorithm.TWO_SHOT;
        if (supports(algorithm, dtype, op, count) && kernel && offsetBytes % 16 != 0) {
            return Problem.MISALIGNED_OFFSET; // the kernels move 16-byte vectors
        }
        // our kernels read every peer's buffer: NVSHMEM memory whose peers are not all mapped here (another node) is refused
        if (!supports(algorithm, dtype, op, count) || (kernel && !mem.everyPeerMapped())
                || (algorithm == Algorithm.NVSHMEM && !mem.onNvshmemHeap())) {
            return Problem.UNSUPPORTED_ALGORITHM;
        }
        return Problem.NONE;
    }

    /**
     * Reduce-scatter of plain device segments: {@code send} (worldSize blocks of {@code recvCount}
     * elements) goes through this communicator's staging memory in pieces; each piece is reduced as
     * {@link #reduceScatter(SymmetricMemory, long, long, DType, ReduceOp)} reduces (the same kernel or
     * host reduction, so the same bits) and this rank's block is copied into {@code recv}.
     */
    @Override
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        Nvtx.push(NVTX_REDUCE_SCATTER, recvCount, dtype);
        try {
            Problem problem = send == null || recv == null ? Problem.NULL_BUFFER
                    : dtype == null || op == null ? Problem.NULL_ARGUMENT : recvCount < 0 ? Problem.NEGATIVE_COUNT
                    : Problem.ofSegment(send, false) != Problem.NONE ? Problem.ofSegment(send, false) : Problem.ofSegment(recv, true);
            if (problem == Problem.NONE && !kernelReduces(dtype, op, 0)) {
                checkNotCapturingHostPath(dtype, op, "reduce-scatter");
            }
            control.checkAgreement("cuda reduce-scatter", Kind.REDUCE_SCATTER, dtype, op, null, -1, recvCount,
                    send == null ? -1 : send.byteSize(), -1, 0, recv == null ? -1 : recv.byteSize(), problem);
            if (recvCount == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            long dsize = dtype.byteSize();
            long piece = pieceElements(dsize);
            long mine = staging.dataPointer(group.rank());
            for (long start = 0; start < recvCount; start += piece) {
                long len = Math.min(piece, recvCount - start);
                for (int p = 0; p < worldSize; p++) {
                    driver.copyDeviceToDeviceAsync(mine + p * len * dsize, send.address() + (p * recvCount + start) * dsize,
                            len * dsize, rank.stream);
                }
                reduceBlocks(staging, 0, group.rank() * len * dsize, len, len, dtype, op);
                driver.copyDeviceToDeviceAsync(recv.address() + start * dsize, mine + group.rank() * len * dsize, len * dsize,
                        rank.stream);
            }
        } finally {
            Nvtx.pop();
        }
    }

    /**
     * All-gather of plain device segments, in pieces through this communicator's staging memory:
     * each rank's piece is pushed into every rank's staging (the all-gather kernel; without the
     * kernels, copies from the peers' staging) and copied from there into {@code recv}. Bitwise.
     */
    @Override
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        Nvtx.push(NVTX_ALL_GATHER, sendCount, dtype);
        try {
            Problem problem = send == null || recv == null ? Problem.NULL_BUFFER
                    : dtype == null ? Problem.NULL_ARGUMENT : sendCount < 0 ? Problem.NEGATIVE_COUNT
                    : Problem.ofSegment(send, false) != Problem.NONE ? Problem.ofSegment(send, false) : Problem.ofSegment(recv, true);
            checkNotCapturingCopies("all-gather");
            control.checkAgreement("cuda all-gather", Kind.ALL_GATHER, dtype, null, null, -1, sendCount,
                    send == null ? -1 : send.byteSize(), -1, 0, recv == null ? -1 : recv.byteSize(), problem);
            if (sendCount == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            long dsize = dtype.byteSize();
            long piece = pieceElements(dsize);
            long mine = staging.dataPointer(group.rank());
            for (long start = 0; start < sendCount; start += piece) {
                long len = Math.min(piece, sendCount - start);
                gatherBlocks(staging, 0, send.address() + start * dsize, equalStarts(len), equalSizes(len), len, dsize);
                for (int q = 0; q < worldSize; q++) {
                    driver.copyDeviceToDeviceAsync(recv.address() + (q * sendCount + start) * dsize, mine + q * len * dsize,
                            len * dsize, rank.stream);
                }
            }
        } finally {
            Nvtx.pop();
        }
    }

    /**
     * In place over the blocks of {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)}:
     * FLOAT32 and BFLOAT16 with SUM run symmem4j's reduce-scatter kernel (peers in rank order,
     * float32 accumulation: the same bits as a ONE_SHOT or TWO_SHOT all-reduce of those elements),
     * capturable into a graph. Every other dtype and op (FLOAT64, AVG, MAX, MIN), an offset that is
     * not a multiple of 16 bytes, or a build without the kernels, reduces on the host: each rank
     * copies its block of every peer's region to host memory, reduces it there in rank order with the
     * host transport's reducer (so the same bits as the host transports) and copies it back. That
     * path waits on the host between the copies, so it cannot be captured (it throws while capturing).
     */
    @Override
    public void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op) {
        Nvtx.push(NVTX_REDUCE_SCATTER, count, dtype);
        try {
            CudaSymmetricMemory mem = memory instanceof CudaSymmetricMemory c && c.group() == group ? c : null;
            Problem problem = memory == null ? Problem.NULL_BUFFER : mem == null ? Problem.FOREIGN_MEMORY
                    : mem.isClosed() ? Problem.FREED_BUFFER
                    : dtype == null || op == null ? Problem.NULL_ARGUMENT : count < 0 ? Problem.NEGATIVE_COUNT
                    : offsetBytes < 0 || offsetBytes > mem.byteSize() ? Problem.OFFSET_OUT_OF_RANGE : Problem.NONE;
            if (problem == Problem.NONE && !kernelReduces(dtype, op, offsetBytes)) {
                checkNotCapturingHostPath(dtype, op, "reduce-scatter");
            }
            control.checkAgreement("cuda reduce-scatter", Kind.REDUCE_SCATTER, dtype, op, null, -1, count,
                    mem == null ? -1 : mem.byteSize() - offsetBytes, memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
            if (count == 0 || worldSize == 1) {
                return; // one rank: its block already holds the result (x/1 == x for AVG)
            }
            driver.setCurrent(rank.context);
            ShardPartition blocks = ShardPartition.of(count, worldSize, dtype);
            long dsize = dtype.byteSize();
            reduceBlocks(mem, offsetBytes, offsetBytes + blocks.start(group.rank()) * dsize, blocks.size(group.rank()),
                    blocks.blockElements(), dtype, op);
        } finally {
            Nvtx.pop();
        }
    }

    /**
     * In place over the blocks of {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)}:
     * every rank pushes its own block into every peer's region with symmem4j's all-gather kernel (a
     * byte copy, so any dtype, bitwise; capturable). Without the kernels every rank copies the peers'
     * blocks with the copy engine between host barriers.
     */
    @Override
    public void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        Nvtx.push(NVTX_ALL_GATHER, count, dtype);
        try {
            CudaSymmetricMemory mem = memory instanceof CudaSymmetricMemory c && c.group() == group ? c : null;
            Problem problem = memory == null ? Problem.NULL_BUFFER : mem == null ? Problem.FOREIGN_MEMORY
                    : mem.isClosed() ? Problem.FREED_BUFFER
                    : dtype == null ? Problem.NULL_ARGUMENT : count < 0 ? Problem.NEGATIVE_COUNT
                    : offsetBytes < 0 || offsetBytes > mem.byteSize() ? Problem.OFFSET_OUT_OF_RANGE : Problem.NONE;
            checkNotCapturingCopies("all-gather");
            control.checkAgreement("cuda all-gather", Kind.ALL_GATHER, dtype, null, null, -1, count,
                    mem == null ? -1 : mem.byteSize() - offsetBytes, memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
            if (count == 0 || worldSize == 1) {
                return;
            }
            driver.setCurrent(rank.context);
            ShardPartition blocks = ShardPartition.of(count, worldSize, dtype);
            long dsize = dtype.byteSize();
            int me = group.rank();
            gatherBlocks(mem, offsetBytes, mem.dataPointer(me) + offsetBytes + blocks.start(me) * dsize, starts(blocks),
                    sizes(blocks), blocks.blockElements(), dsize);
        } finally {
            Nvtx.pop();
        }
    }

    /**
     * Broadcast of a plain device segment by the copy engine: in pieces of the staging size, the root
     * copies a piece into its staging memory and every other rank copies it from the root's staging
     * (a peer address) into its buffer; host barriers order the pieces (any dtype, bitwise; not
     * capturable). NCCL is not used, so it runs also where ranks share a GPU.
     */
    @Override
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        Nvtx.push(NVTX_BROADCAST, count, dtype);
        try {
            Problem problem = buffer == null ? Problem.NULL_BUFFER : root < 0 || root >= worldSize ? Problem.ROOT_OUT_OF_RANGE
                    : dtype == null ? Problem.NULL_ARGUMENT : count < 0 ? Problem.NEGATIVE_COUNT
                    : Problem.ofSegment(buffer, group.rank() != root); // the root only reads its buffer
            if (rank.capturing) {
                throw new IllegalStateException("cuda broadcast cannot be captured into a graph: its pieces are ordered by host"
                        + " barriers (fix: call it outside capture)");
            }
            control.checkAgreement("cuda broadcast", Kind.BROADCAST, dtype, null, null, root, count,
                    buffer == null ? -1 : buffer.byteSize(), -1, 0, 0, problem);
            if (count == 0 || worldSize == 1) {
                return;
            }
            driver.setCurrent(rank.context);
            long dsize = dtype.byteSize();
            long piece = Math.max(1, stagingBytes / dsize);
            boolean isRoot = group.rank() == root;
            for (long start = 0; start < count; start += piece) {
                long bytes = Math.min(piece, count - start) * dsize;
                if (isRoot) {
                    driver.copyDeviceToDeviceAsync(staging.dataPointer(root), buffer.address() + start * dsize, bytes, rank.stream);
                }
                // every rank's stream is idle here: the root's piece is in its staging, and (from the
                // second piece on) every rank has copied the previous piece out of it
                driver.synchronize(rank.stream);
                control.barrier();
                if (!isRoot) {
                    driver.copyDeviceToDeviceAsync(buffer.address() + start * dsize, staging.dataPointer(root), bytes, rank.stream);
                }
                driver.synchronize(rank.stream);
                control.barrier();
            }
        } finally {
            Nvtx.pop();
        }
    }

    /** Elements per rank per staged piece: the staging split in worldSize blocks, each a multiple of 64 bytes. */
    private long pieceElements(long dsize) {
        long perRank = stagingBytes / worldSize / ShardPartition.ALIGN_BYTES * ShardPartition.ALIGN_BYTES;
        return Math.max(1, perRank / dsize);
    }

    /** Whether the reduce-scatter kernel reduces this case (otherwise the host does). */
    private boolean kernelReduces(DType dtype, ReduceOp op, long offsetBytes) {
        return rank.kernels != null && (dtype == DType.FLOAT32 || dtype == DType.BFLOAT16) && op == ReduceOp.SUM
                && offsetBytes % 16 == 0;
    }

    private void checkNotCapturingHostPath(DType dtype, ReduceOp op, String what) {
        if (rank.capturing) {
            throw new IllegalStateException("cuda " + what + " of dtype=" + dtype + " op=" + op + " reduces on the host,"
                    + " which a CUDA graph cannot capture; expected FLOAT32 or BFLOAT16 with SUM and 16-byte aligned offsets"
                    + " inside a capture (fix: call it outside capture)");
        }
    }

    private void checkNotCapturingCopies(String what) {
        if (rank.capturing && rank.kernels == null) {
            throw new IllegalStateException("cuda " + what + " without the symmem4j kernels copies between host barriers,"
                    + " which a CUDA graph cannot capture (fix: call it outside capture, or build with the kernels)");
        }
    }

    /**
     * Reduces this rank's block — {@code len} elements at byte {@code blockOffset} of every rank's
     * region of {@code mem}, the region starting at {@code regionOffset} — over the ranks, in rank
     * order, into its own region; blocks of every rank are {@code maxLen} elements apart from block
     * start to block start at most (the grid is sized by {@code maxLen}, equal on every rank, because
     * block b of the kernel meets block b of every peer). Kernel: {@link CollectiveKernels#reduceScatter}.
     * Enqueues after whatever this rank's stream holds (the data).
     */
    private void reduceBlocks(CudaSymmetricMemory mem, long regionOffset, long blockOffset, long len, long maxLen, DType dtype,
                              ReduceOp op) {
        long dsize = dtype.byteSize();
        int me = group.rank();
        // decided by the region's offset, equal on every rank (block offsets differ by multiples of 64 bytes)
        if (kernelReduces(dtype, op, regionOffset)) {
            kernels.reduceScatter(mem, blockOffset, len, maxLen, dtype);
            return;
        }
        // Host reduction: every rank's data is on its device once its stream is idle; the barrier
        // tells every rank that all of them are.
        driver.synchronize(rank.stream);
        control.barrier();
        long piece = Math.max(1, stagingBytes / dsize);
        try (Arena a = Arena.ofConfined()) {
            long pieceBytes = Math.min(len, piece) * dsize;
            MemorySegment[] srcs = new MemorySegment[worldSize];
            long[] offsets = new long[worldSize];
            DType[] types = new DType[worldSize];
            for (int p = 0; p < worldSize; p++) {
                srcs[p] = a.allocate(Math.max(pieceBytes, 1), 64);
                types[p] = dtype;
            }
            MemorySegment out = a.allocate(Math.max(pieceBytes, 1), 64);
            for (long start = 0; start < len; start += piece) {
                long n = Math.min(piece, len - start);
                long at = blockOffset + start * dsize;
                for (int p = 0; p < worldSize; p++) {
                    driver.copyDeviceToHost(srcs[p], mem.dataPointer(p) + at, n * dsize);
                }
                // one rank computes each element, as TWO_SHOT does: no canonical NaNs, the host's bits
                hostReducer.reduce(srcs, offsets, types, worldSize, out, 0, dtype, n, op,
                        op == ReduceOp.AVG ? worldSize : 0, false);
                driver.copyHostToDevice(mem.dataPointer(me) + at, out, n * dsize); // returns with the bytes landed
            }
        }
        control.barrier(); // every rank has read its block from every region: regions may be overwritten
    }

    /**
     * Puts this rank's elements at device address {@code in} into its block of every rank's region of
     * {@code mem}: rank q's block holds {@code lens[q]} elements from element {@code starts[q]} of the
     * region at {@code regionOffset}, each at most {@code maxLen} (the grid, equal on every rank).
     * Kernel: {@link CollectiveKernels#allGather}. Without the kernels: the copy engine between host barriers.
     */
    private void gatherBlocks(CudaSymmetricMemory mem, long regionOffset, long in, long[] starts, long[] lens, long maxLen,
                              long dsize) {
        int me = group.rank();
        long mine = regionOffset + starts[me] * dsize;
        if (rank.kernels != null) {
            kernels.allGather(mem, mine, in, lens[me] * dsize, maxLen, dsize);
            return;
        }
        if (in != mem.dataPointer(me) + mine) {
            driver.copyDeviceToDeviceAsync(mem.dataPointer(me) + mine, in, lens[me] * dsize, rank.stream);
        }
        driver.synchronize(rank.stream);
        control.barrier(); // every rank's own block is in its region
        for (int q = 0; q < worldSize; q++) {
            if (q != me && lens[q] > 0) {
                long at = regionOffset + starts[q] * dsize;
                driver.copyDeviceToDeviceAsync(mem.dataPointer(me) + at, mem.dataPointer(q) + at, lens[q] * dsize, rank.stream);
            }
        }
        driver.synchronize(rank.stream);
        control.barrier(); // every rank has copied every block: blocks may be overwritten
    }

    /** Rank q's block start (elements) of {@code blocks}, for every q. */
    private static long[] starts(ShardPartition blocks) {
        long[] s = new long[blocks.worldSize()];
        for (int q = 0; q < s.length; q++) {
            s[q] = blocks.start(q);
        }
        return s;
    }

    private static long[] sizes(ShardPartition blocks) {
        long[] s = new long[blocks.worldSize()];
        for (int q = 0; q < s.length; q++) {
            s[q] = blocks.size(q);
        }
        return s;
    }

    /** Equal blocks of {@code len} elements, rank q's at element {@code q * len}. */
    private long[] equalStarts(long len) {
        long[] s = new long[worldSize];
        for (int q = 0; q < worldSize; q++) {
            s[q] = q * len;
        }
        return s;
    }

    private long[] equalSizes(long len) {
        long[] s = new long[worldSize];
        java.util.Arrays.fill(s, len);
        return s;
    }

    /** Waits for this rank's stream, then checks NCCL for asynchronous errors and reports the timed all-reduces. */
    @Override
    public void synchronize() {
        driver.setCurrent(rank.context);
        driver.synchronize(rank.stream);
        nccl.checkAsyncError();
        timings.harvest();
    }

    @Override
    public void timeAllReduces(org.symmem4j.parallel.DeviceTimingListener listener) {
        timings.listen(listener);
    }

    @Override
    public int harvestTimings() {
        return timings.harvest();
    }

    @Override
    public long droppedTimings() {
        return timings.dropped();
    }

    @Override
    public void barrier() {
        synchronize();
        control.barrier();
    }

    /**
     * Collective: captures what {@code body} enqueues on this rank's stream into a CUDA graph
     * ({@link DeviceOperations#capture}). Every rank must capture the same sequence.
     *
     * @param body enqueues the work to capture
     * @return the graph, to replay and close
     */
    @Override
    public CudaGraph capture(Runnable body) {
        return device.capture(body, sharedDevice, control::barrier);
    }

    @Override
    public void orderAfter(MemorySegment other) {
        device.orderAfter(other);
    }

    @Override
    public void orderBefore(MemorySegment other) {
        device.orderBefore(other);
    }

    @Override
    public double elapsedMillis(Runnable body) {
        return device.elapsedMillis(body);
    }

    CudaRank cudaRank() {
        return rank;
    }

    /** The grids this communicator's collectives launch with (tests; null without kernels). */
    LaunchBudget grids() {
        return kernels == null ? null : kernels.grids();
    }

    /** {@return the NCCL communicator, with this rank's context current} (NCCL unavailable: throws) */
    MemorySegment requireNccl() {
        return nccl.require();
    }

    /** {@return NCCL's count of 4-byte words for {@code bytes}} (see {@link NcclProvider#p2pCount}) */
    static long p2pCount(long bytes) {
        return NcclProvider.p2pCount(bytes);
    }

    /** {@return this rank's GPU name, as the driver reports it} */
    @Override
    public String deviceName() {
        return rank.deviceName;
    }

    @Override
    public long[] memoryInfo() {
        driver.setCurrent(rank.context);
        return driver.memoryInfo();
    }

    /** {@return this rank's GPU ordinal (its group's local rank modulo the GPUs this process sees)} */
    @Override
    public int deviceOrdinal() {
        return rank.ordinal;
    }

    /**
     * Whether this rank launches the symmem4j kernels with programmatic dependent launch (sm_90+,
     * unless {@code -Dsymmem4j.cuda.pdl=false}): each kernel's launch overlaps the previous kernel's run.
     *
     * @return true if kernels use programmatic dependent launch
     */
    public boolean programmaticLaunch() {
        return rank.programmaticLaunch;
    }

    @Override
    public MemorySegment stream() {
        return rank.stream;
    }

    /** Events on this rank's stream, marks on any stream of its context ({@link CudaWorkClock}). */
    @Override
    public org.symmem4j.parallel.WorkClock clock(int marksPerRound) {
        return new CudaWorkClock(driver, rank.context, rank.stream, marksPerRound);
    }

    /** Made at the first {@code unwrap(DeviceKernels.class)}. */
    private volatile CudaDeviceKernels userKernels;
    /** Made at the first {@code unwrap(TensorParallelGemm.class)}; closed with this communicator. */
    private CudaTensorParallelGemm tensorParallel;

    /**
     * {@inheritDoc}
     *
     * <p>Also {@link org.symmem4j.parallel.DeviceKernels}: users' kernels on this rank's stream; and
     * {@link org.symmem4j.parallel.TensorParallelGemm}: cuBLAS GEMMs and the tensor-parallel fused GEMMs on
     * it, present where cuBLAS loads (else empty: {@link CudaTransport#cublasUnavailableReason()} says why).
     */
    @Override
    public <T> java.util.Optional<T> unwrap(Class<T> type) {
        if (type == org.symmem4j.parallel.TensorParallelGemm.class) {
            if (!Cublas.available()) {
                return java.util.Optional.empty();
            }
            synchronized (this) {
                if (tensorParallel == null) {
                    tensorParallel = new CudaTensorParallelGemm(this, rank, driver, worldSize, group.rank());
                }
                return java.util.Optional.of(type.cast(tensorParallel));
            }
        }
        if (type == org.symmem4j.parallel.DeviceKernels.class) {
            CudaDeviceKernels k = userKernels;
            if (k == null) {
                k = new CudaDeviceKernels(driver, rank, group, this);
                userKernels = k;
            }
            return java.util.Optional.of(type.cast(k));
        }
        return Communicator.super.unwrap(type);
    }

    @Override
    public void send(MemorySegment buffer, int peer) {
        nccl.send(buffer.address(), buffer.byteSize(), peer);
    }

    @Override
    public void recv(MemorySegment buffer, int peer) {
        nccl.recv(buffer.address(), buffer.byteSize(), peer);
    }

    @Override
    public MemorySegment allocateDevice(long bytes) {
        return device.allocateDevice(bytes);
    }

    @Override
    public void freeDevice(MemorySegment buffer) {
        device.freeDevice(buffer);
    }

    @Override
    public void copyAsync(MemorySegment dst, MemorySegment src) {
        device.copyAsync(dst, src);
    }

    @Override
    public void copyByKernelAsync(MemorySegment dst, MemorySegment src) {
        device.copyByKernelAsync(dst, src);
    }

    @Override
    public void copyFromHost(MemorySegment dst, MemorySegment src) {
        device.copyFromHost(dst, src);
    }

    @Override
    public void copyToHost(MemorySegment dst, MemorySegment src) {
        device.copyToHost(dst, src);
    }

    @Override
    public void abort(String reason) {
        control.abort(reason);
        nccl.abort();
    }

    @Override
    public void close() {
        // every step runs whatever failed before it: after an abort (a peer gone, a shrink) the memories' closing
        // barriers fail at once, and the scratch, the staging and NCCL must still be freed (no GPU memory left behind)
        EverySteps.run(List.of(this::synchronize, () -> { // synchronize reports the timed all-reduces
            synchronized (this) {
                if (tensorParallel != null) {
                    tensorParallel.close();
                }
            }
        }, staging::close, () -> {
            if (kernels != null) {
                kernels.closeScratch();
            }
        }, nccl::close, timings::close, device::close, control::close, () -> {
            if (kernels != null) {
                kernels.closeParameters();
            }
        }));
    }
}
