package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.control.ControlPlane;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.cuda.ffi.Cublas;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.cuda.ffi.Nvshmem;
import org.symmem4j.parallel.numeric.Reducer;

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
    /**
     * The grids of the collective kernels, the same on every rank (block b of a rank meets block b of
     * each peer): each kernel's smallest {@link LaunchBudget} limit over the ranks. With one rank per
     * GPU: ONE_SHOT (incl. LL), reduce-scatter and all-gather one block per SM; both TWO_SHOTs as many
     * blocks as the SMs hold at once (the occupancy calculator), since every block must be resident
     * together. The write-only TWO_SHOT as built (__launch_bounds__(512, 2)) uses 56 registers on
     * sm_90: 2 blocks of 512 per SM. (Built without the second bound, bf16 used 32 registers and 4
     * blocks per SM and measured about 1 % faster at 64 and 256 MiB on 2 x H200, but f32 spilled on
     * sm_80; the published benchmarks are of the kernels as built.) With ranks sharing a GPU, every
     * kernel's grid shrinks so that all ranks' grids fit at once (see {@link LaunchBudget}). Null
     * without kernels.
     */
    private final LaunchBudget grids;
    private final MemorySegment ncclComm;
    /** NVSHMEM's reductions ({@link Algorithm#NVSHMEM}) where the communicator was made by {@link NvshmemTransport}; else null. */
    private final Nvshmem nvshmem;
    private final String ncclUnavailable;
    /**
     * NCCL_SYMMETRIC's window: {@link CommunicatorOptions#stagingBytes()} from {@code ncclMemAlloc},
     * registered with {@code NCCL_WIN_COLL_SYMMETRIC}; messages go through it in pieces. Null where
     * NCCL or its windows are unavailable ({@link #windowUnavailable} says why).
     */
    private final NcclWindow window;
    private final String windowUnavailable;
    /** ONE_SHOT's landing slots: two parities of worldSize slots of {@link #oneShotSlotBytes} per rank. */
    private final CudaSymmetricMemory oneShotScratch;
    private final long oneShotSlotBytes;
    /** Small ONE_SHOTs use the LL protocol: 8-byte words (payload + epoch), two parities of worldSize slots. */
    private final CudaSymmetricMemory llScratch;
    /**
     * Large TWO_SHOTs land the peers' copies of this rank's chunk here: two parities of worldSize
     * slots of {@link #twoShotSlotBytes} per rank ({@link #TWO_SHOT_SCRATCH_BYTES} in all).
     */
    private final CudaSymmetricMemory twoShotScratch;
    private final long twoShotSlotBytes;
    private final long twoShotPushMinBytes;
    /**
     * Staging for the collectives on plain device segments (all-reduce, reduce-scatter, all-gather,
     * broadcast): {@link CommunicatorOptions#stagingBytes()} per rank; messages go through it in pieces.
     */
    private final CudaSymmetricMemory staging;
    private final long stagingBytes;
    private final Reducer hostReducer = Reducer.forThisJvm();

    // Launch parameters, reused by every launch of this rank's thread (no allocation per call).
    private final Arena arena = Arena.ofShared();
    private final MemorySegment peersSlot;
    private final MemorySegment padsSlot;
    private final MemorySegment countSlot;
    private final MemorySegment rankSlot;
    private final MemorySegment worldSlot;
    private final MemorySegment divisorSlot;
    private final MemorySegment bufSlot;
    private final MemorySegment slotBytesSlot;
    private final MemorySegment scratchSlot;
    private final MemorySegment twoShotParams;
    private final MemorySegment twoShotPushParams;
    private final MemorySegment oneShotParams;

    /** Largest ONE_SHOT message: the size of one landing slot in the scratch. */
    static final long ONE_SHOT_SLOT_BYTES = 4L << 20;
    /** ONE_SHOTs up to this size use the LL kernel (no barrier; payload words carry the epoch). */
    static final long LL_MAX_BYTES = 64L << 10;
    static final long LL_SLOT_WORDS = LL_MAX_BYTES / 4;
    /**
     * TWO_SHOTs from this size (up to 4 ranks) move every byte over NVLink as a store
     * (symmem_two_shot_push_*), below it they pull the peers' chunks with loads (symmem_two_shot_*):
     * on 2 x H200 the write-only kernel was 8 % faster at 16 MiB and 7 % at 256 MiB, the pulling one
     * 3 % faster at 4 MiB (bench/results/2026-11-22-nvlink-patterns-2xh200.md); on 4 x H200 the
     * write-only kernel took 16 MiB from 99 to 87 us.
     */
    static final long TWO_SHOT_PUSH_MIN_BYTES = 16L << 20;
    /**
     * The same from 5 ranks: on 8 x H200 the write-only kernel was slower at 16 MiB (150 us against
     * 125 us) and faster at 64 MiB (426 against 493 us) and 256 MiB (1485 against 1658 us)
     * (bench/results/2026-11-22-gpu-allreduce-8xh200.md and its previous version).
     */
    static final long TWO_SHOT_PUSH_MIN_BYTES_MANY_RANKS = 64L << 20;
    /**
     * Scratch of the write-only TWO_SHOT per rank. A message goes through it in rounds of half this
     * size (one meeting of the ranks per round; the other half takes the next round while peers
     * still read this one). On 2 x H200 at 64 MiB: 32 MiB rounds 195 us, 8 MiB rounds 200 us, 2 MiB
     * rounds 277 us; one round through a scratch as large as the message, 193 us.
     */
    static final long TWO_SHOT_SCRATCH_BYTES = 64L << 20;

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
        this.worldSize = group.worldSize();
        if (worldSize > CudaKernels.MAX_RANKS) {
            throw new IllegalArgumentException("worldSize=" + worldSize + " exceeds the kernels' MAX_RANKS="
                    + CudaKernels.MAX_RANKS + " (one machine's GPUs)");
        }
        this.control = ControlPlane.open(group, group.hostTransport());
        // ranks share a GPU when two of them name the same one (host and PCI address: ordinals differ between processes
        // bound to their GPUs, and a sub-group's ranks may sit on any of the machine's GPUs)
        List<byte[]> gpus = group.allGatherBytes("cuda-device-identity",
                deviceIdentity(driver, rank.device).getBytes(java.nio.charset.StandardCharsets.UTF_8));
        String sharing = null;
        for (int p = 0; p < worldSize && sharing == null; p++) {
            for (int q = p + 1; q < worldSize && sharing == null; q++) {
                if (java.util.Arrays.equals(gpus.get(p), gpus.get(q))) {
                    sharing = "ranks " + p + " and " + q + " share GPU " + new String(gpus.get(p), java.nio.charset.StandardCharsets.UTF_8);
                }
            }
        }
        this.sharedDevice = sharing != null;
        if (rank.kernels == null) {
            this.grids = null;
        } else {
            java.nio.ByteBuffer mine = java.nio.ByteBuffer.allocate(Kernel.values().length * Integer.BYTES);
            for (int limit : rank.budget.limits()) {
                mine.putInt(limit);
            }
            List<int[]> limits = new java.util.ArrayList<>(worldSize);
            for (byte[] b : group.allGatherBytes("cuda-launch-limits", mine.array())) {
                java.nio.ByteBuffer in = java.nio.ByteBuffer.wrap(b);
                int[] l = new int[b.length / Integer.BYTES];
                for (int k = 0; k < l.length; k++) {
                    l[k] = in.getInt();
                }
                limits.add(l);
            }
            this.grids = LaunchBudget.common(rank.budget, limits);
        }
        MemorySegment comm = null;
        String why = null;
        if (sharedDevice) {
            why = "NCCL needs one GPU per rank; " + sharing;
        } else if (!Nccl.available()) {
            why = Nccl.unavailableReason();
        } else {
            byte[] id = group.rank() == 0 ? Nccl.get().uniqueId() : new byte[Nccl.UNIQUE_ID_BYTES];
            List<byte[]> ids = group.allGatherBytes("nccl-unique-id", id);
            driver.setCurrent(rank.context);
            comm = Nccl.get().initRank(worldSize, ids.getFirst(), group.rank());
        }
        this.ncclComm = comm;
        this.ncclUnavailable = why;
        if (comm == null) {
            this.window = null;
            this.windowUnavailable = why;
        } else if (!Nccl.get().hasSymmetricWindows()) {
            this.window = null;
            this.windowUnavailable = "NCCL " + Nccl.get().version() + " has no symmetric windows"
                    + " (ncclCommWindowRegister and ncclMemAlloc need NCCL 2.27 or newer)";
        } else {
            // collective: every rank of the NCCL communicator registers its window here
            Nccl nccl = Nccl.get();
            long ptr = nccl.memAlloc(options.stagingBytes());
            this.window = new NcclWindow(nccl, comm, ptr, options.stagingBytes(),
                    nccl.registerWindow(comm, ptr, options.stagingBytes(), Nccl.WIN_COLL_SYMMETRIC));
            this.windowUnavailable = null;
        }
        this.oneShotSlotBytes = ONE_SHOT_SLOT_BYTES;
        this.oneShotScratch = rank.kernels == null ? null
                : (CudaSymmetricMemory) memory.allocate(group, 2L * worldSize * oneShotSlotBytes);
        this.llScratch = rank.kernels == null ? null
                : (CudaSymmetricMemory) memory.allocate(group, 2L * worldSize * LL_SLOT_WORDS * Long.BYTES);
        this.twoShotSlotBytes = TWO_SHOT_SCRATCH_BYTES / (2L * worldSize) / 16 * 16;
        this.twoShotPushMinBytes = worldSize <= 4 ? TWO_SHOT_PUSH_MIN_BYTES : TWO_SHOT_PUSH_MIN_BYTES_MANY_RANKS;
        this.twoShotScratch = rank.kernels == null ? null : (CudaSymmetricMemory) memory.allocate(group, TWO_SHOT_SCRATCH_BYTES);
        this.stagingBytes = options.stagingBytes();
        this.staging = (CudaSymmetricMemory) memory.allocate(group, stagingBytes);
        peersSlot = arena.allocate(8L * CudaKernels.MAX_RANKS, 16);
        padsSlot = arena.allocate(8L * CudaKernels.MAX_RANKS, 16);
        countSlot = arena.allocate(8, 8);
        rankSlot = arena.allocate(4, 4);
        worldSlot = arena.allocate(4, 4);
        divisorSlot = arena.allocate(4, 4);
        bufSlot = arena.allocate(8, 8);
        slotBytesSlot = arena.allocate(8, 8);
        scratchSlot = arena.allocate(8L * CudaKernels.MAX_RANKS, 16);
        // parameter order of symmem_two_shot_*: (Peers bufs, Pads pads, count, rank, world, divisor)
        twoShotParams = paramArray(peersSlot, padsSlot, countSlot, rankSlot, worldSlot, divisorSlot);
        // symmem_two_shot_push_*: (Peers bufs, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes)
        twoShotPushParams = paramArray(peersSlot, scratchSlot, padsSlot, countSlot, rankSlot, worldSlot, divisorSlot, slotBytesSlot);
        // symmem_one_shot_*: (buf, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes)
        oneShotParams = paramArray(bufSlot, peersSlot, padsSlot, countSlot, rankSlot, worldSlot, divisorSlot, slotBytesSlot);
        rankSlot.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, group.rank());
        worldSlot.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, worldSize);
    }

    private MemorySegment paramArray(MemorySegment... slots) {
        MemorySegment a = arena.allocate(java.lang.foreign.ValueLayout.ADDRESS, slots.length);
        for (int i = 0; i < slots.length; i++) {
            a.setAtIndex(java.lang.foreign.ValueLayout.ADDRESS, i, slots[i]);
        }
        return a;
    }

    /** {@return the machine's name and the PCI address of {@code device}: equal for two ranks exactly when they share the GPU} */
    static String deviceIdentity(CudaDriver driver, int device) {
        String host;
        try {
            host = java.net.InetAddress.getLocalHost().getHostName();
        } catch (java.net.UnknownHostException e) {
            host = System.getenv().getOrDefault("HOSTNAME", "localhost");
        }
        return host + "/" + String.format(java.util.Locale.ROOT, "%04x:%02x:%02x",
                driver.attribute(device, CudaDriver.ATTRIBUTE_PCI_DOMAIN_ID), driver.attribute(device, CudaDriver.ATTRIBUTE_PCI_BUS_ID),
                driver.attribute(device, CudaDriver.ATTRIBUTE_PCI_DEVICE_ID));
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
        return ncclUnavailable;
    }

    /**
     * Why NCCL_SYMMETRIC is not usable here.
     *
     * @return the reason (no NCCL, ranks sharing a GPU, an NCCL without symmetric windows), or null when usable
     */
    public String ncclSymmetricUnavailableReason() {
        return windowUnavailable;
    }

    @Override
    public boolean supports(Algorithm algorithm) {
        if (algorithm == Algorithm.NVSHMEM) {
            return nvshmem != null;
        }
        if (algorithm == Algorithm.NCCL) {
            return ncclComm != null;
        }
        if (algorithm == Algorithm.NCCL_SYMMETRIC) {
            return window != null;
        }
        return (algorithm == Algorithm.ONE_SHOT || algorithm == Algorithm.TWO_SHOT) && rank.kernels != null;
    }

    @Override
    public boolean supports(Algorithm algorithm, DType dtype, ReduceOp op, long count) {
        if (!supports(algorithm)) {
            return false;
        }
        if (algorithm == Algorithm.NCCL || algorithm == Algorithm.NCCL_SYMMETRIC) {
            return true;
        }
        if (algorithm == Algorithm.NVSHMEM) {
            return Nvshmem.reduces(dtype, op);
        }
        boolean kernelCase = (dtype == DType.FLOAT32 || dtype == DType.BFLOAT16) && (op == ReduceOp.SUM || op == ReduceOp.AVG);
        return kernelCase && (algorithm != Algorithm.ONE_SHOT || dtype.bytes(count) <= oneShotCapacityBytes());
    }

    /** Smallest message, in bytes, that TWO_SHOT sends through its write-only kernel here. */
    long twoShotPushMinBytes() {
        return twoShotPushMinBytes;
    }

    /**
     * Largest message, in bytes, ONE_SHOT takes here: the size of a landing slot in its scratch.
     *
     * @return the capacity in bytes
     */
    public long oneShotCapacityBytes() {
        return oneShotSlotBytes;
    }

    /**
     * All-reduce of a plain device segment ({@code buffer.address()} a device pointer of this rank,
     * {@code buffer.byteSize()} its size): NCCL reduces it where it is; ONE_SHOT and TWO_SHOT copy
     * it through this communicator's staging memory in pieces of {@link CommunicatorOptions#stagingBytes()}
     * (copy engine, stream-ordered) and run the kernels there.
     */
    @Override
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        long pieceBytes = algorithm == Algorithm.ONE_SHOT ? Math.min(stagingBytes, oneShotSlotBytes) : stagingBytes;
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
        if (algorithm == Algorithm.NCCL) {
            Nccl.get().allReduce(buffer.address(), buffer.address(), count, dtype, op, ncclComm, rank.stream);
            return;
        }
        if (algorithm == Algorithm.NCCL_SYMMETRIC) {
            ncclSymmetricAllReduce(buffer.address(), count, dtype, op);
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
                launchAllReduceEager(staging, 0, len, dtype, op, algorithm);
            }
            driver.copyDeviceToDeviceAsync(buffer.address() + start * dsize, staging.dataPointer(group.rank()), len * dsize,
                    rank.stream);
        }
    }

    @Override
    public void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        CudaSymmetricMemory mem = memory instanceof CudaSymmetricMemory c && c.group() == group ? c : null;
        Problem problem = problem(memory, mem, offsetBytes, count, dtype, op, algorithm);
        long available = mem == null || offsetBytes < 0 || offsetBytes > mem.byteSize() ? -1 : mem.byteSize() - offsetBytes;
        control.checkAgreement("cuda all-reduce", Kind.ALL_REDUCE, dtype, op, algorithm, -1, count, available,
                memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
        if (count == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        long ptr = mem.dataPointer(group.rank()) + offsetBytes;
        if (algorithm == Algorithm.NVSHMEM) {
            // in place on the symmetric heap (problem() refused memory elsewhere); runs with one PE too
            nvshmem.reduceOnStream(dtype, op, ptr, ptr, count, rank.stream);
            return;
        }
        if (algorithm == Algorithm.NCCL) {
            Nccl.get().allReduce(ptr, ptr, count, dtype, op, ncclComm, rank.stream);
            return;
        }
        if (algorithm == Algorithm.NCCL_SYMMETRIC) {
            ncclSymmetricAllReduce(ptr, count, dtype, op);
            return;
        }
        if (worldSize == 1) {
            return;
        }
        launchAllReduceEager(mem, offsetBytes, count, dtype, op, algorithm);
    }

    /**
     * NCCL_SYMMETRIC: in pieces of the window's size, copies the elements at device address
     * {@code ptr} into this rank's window, all-reduces the window with NCCL and copies the result back,
     * all on this rank's stream (capturable).
     */
    private void ncclSymmetricAllReduce(long ptr, long count, DType dtype, ReduceOp op) {
        long dsize = dtype.byteSize();
        long piece = Math.max(1, window.bytes() / dsize);
        for (long start = 0; start < count; start += piece) {
            long len = Math.min(piece, count - start);
            driver.copyDeviceToDeviceAsync(window.pointer(), ptr + start * dsize, len * dsize, rank.stream);
            Nccl.get().allReduce(window.pointer(), window.pointer(), len, dtype, op, ncclComm, rank.stream);
            driver.copyDeviceToDeviceAsync(ptr + start * dsize, window.pointer(), len * dsize, rank.stream);
        }
    }

    /** Enqueues a ONE_SHOT or TWO_SHOT kernel, through the eager graph cache where it applies; arguments checked. */
    private void launchAllReduceEager(CudaSymmetricMemory mem, long offsetBytes, long count, DType dtype, ReduceOp op,
                                      Algorithm algorithm) {
        // Not where ranks share a GPU: there a capture and instantiation on one rank's thread waits for
        // the kernels running in the shared context, and so for a peer's kernel that waits for this
        // rank (seen for user captures: bench/results/2026-11-23-gpu-shared-ranks-h100.md), so shared
        // GPUs keep plain launches.
        if (EagerGraphCache.ENABLED && !sharedDevice && !rank.capturing) {
            EagerGraphCache cache = rank.eagerGraphs;
            MemorySegment exec = cache.find(serial, mem.id(), offsetBytes, count, dtype.ordinal(), op.ordinal(),
                    algorithm.ordinal());
            if (exec == null) {
                exec = cache.capture(() -> launchAllReduce(mem, offsetBytes, count, dtype, op, algorithm));
            }
            driver.launchGraph(exec, rank.stream);
        } else {
            launchAllReduce(mem, offsetBytes, count, dtype, op, algorithm);
        }
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

    private void launchAllReduce(CudaSymmetricMemory mem, long offsetBytes, long count, DType dtype, ReduceOp op,
                                 Algorithm algorithm) {
        countSlot.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, count);
        divisorSlot.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, op == ReduceOp.AVG ? worldSize : 0);
        int perVector = 16 / dtype.byteSize();
        long vectors = Math.max(1, count / perVector);
        boolean f32 = dtype == DType.FLOAT32;
        long blocks;
        MemorySegment params;
        Kernel kernel;
        if (algorithm == Algorithm.ONE_SHOT && dtype.bytes(count) <= LL_MAX_BYTES) {
            setPointers(peersSlot, llScratch.dataPointers(), 0);
            setPointers(padsSlot, llScratch.padPointers(), 0);
            bufSlot.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, mem.dataPointer(group.rank()) + offsetBytes);
            slotBytesSlot.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, LL_SLOT_WORDS);
            kernel = Kernel.oneShotLl(f32);
            long words = (dtype.bytes(count) + 3) / 4;
            blocks = (words + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            params = oneShotParams; // same parameter list: (buf, Peers, Pads, count, rank, world, divisor, slot size)
        } else if (algorithm == Algorithm.ONE_SHOT) {
            setPointers(peersSlot, oneShotScratch.dataPointers(), 0);
            setPointers(padsSlot, oneShotScratch.padPointers(), 0);
            bufSlot.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, mem.dataPointer(group.rank()) + offsetBytes);
            slotBytesSlot.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, oneShotSlotBytes);
            kernel = Kernel.oneShot(f32);
            blocks = (vectors + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            params = oneShotParams;
        } else if (dtype.bytes(count) >= twoShotPushMinBytes) {
            setPointers(peersSlot, mem.dataPointers(), offsetBytes);
            setPointers(scratchSlot, twoShotScratch.dataPointers(), 0);
            setPointers(padsSlot, mem.padPointers(), 0);
            slotBytesSlot.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, twoShotSlotBytes);
            kernel = Kernel.twoShotPush(f32);
            long perRank = Math.min(twoShotSlotBytes / 16, (vectors + worldSize - 1) / worldSize);
            // one vector per thread per round; at most as many blocks as are resident at once
            blocks = (perRank + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            params = twoShotPushParams;
        } else {
            setPointers(peersSlot, mem.dataPointers(), offsetBytes);
            setPointers(padsSlot, mem.padPointers(), 0);
            kernel = Kernel.twoShot(f32);
            long chunk = (vectors + worldSize - 1) / worldSize;
            // two vectors per thread per iteration; at most as many blocks as are resident at once
            blocks = (chunk + 2L * CudaKernels.BLOCK_THREADS - 1) / (2L * CudaKernels.BLOCK_THREADS);
            params = twoShotParams;
        }
        rank.launch(driver, kernel, grids.grid(kernel, blocks), params);
    }

    /** Writes the ranks' pointers (plus {@code offset}) into a kernel's 8-pointer struct slot; unused entries 0. */
    private void setPointers(MemorySegment slot, long[] pointers, long offset) {
        for (int p = 0; p < CudaKernels.MAX_RANKS; p++) {
            slot.setAtIndex(java.lang.foreign.ValueLayout.JAVA_LONG, p, p < worldSize ? pointers[p] + offset : 0);
        }
    }

    /**
     * Reduce-scatter of plain device segments: {@code send} (worldSize blocks of {@code recvCount}
     * elements) goes through this communicator's staging memory in pieces; each piece is reduced as
     * {@link #reduceScatter(SymmetricMemory, long, long, DType, ReduceOp)} reduces (the same kernel or
     * host reduction, so the same bits) and this rank's block is copied into {@code recv}.
     */
    @Override
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
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
    }

    /**
     * All-gather of plain device segments, in pieces through this communicator's staging memory:
     * each rank's piece is pushed into every rank's staging (the all-gather kernel; without the
     * kernels, copies from the peers' staging) and copied from there into {@code recv}. Bitwise.
     */
    @Override
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
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
    }

    /**
     * In place over the blocks of {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)}:
     * every rank pushes its own block into every peer's region with symmem4j's all-gather kernel (a
     * byte copy, so any dtype, bitwise; capturable). Without the kernels every rank copies the peers'
     * blocks with the copy engine between host barriers.
     */
    @Override
    public void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
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
    }

    /**
     * Broadcast of a plain device segment by the copy engine: in pieces of the staging size, the root
     * copies a piece into its staging memory and every other rank copies it from the root's staging
     * (a peer address) into its buffer; host barriers order the pieces (any dtype, bitwise; not
     * capturable). NCCL is not used, so it runs also where ranks share a GPU.
     */
    @Override
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        Problem problem = buffer == null ? Problem.NULL_BUFFER : root < 0 || root >= worldSize ? Problem.ROOT_OUT_OF_RANGE
                : dtype == null ? Problem.NULL_ARGUMENT : count < 0 ? Problem.NEGATIVE_COUNT
                : Problem.ofSegment(buffer, group.rank() != root); // the root only reads its buffer
        if (rank.capturing) {
            throw new IllegalStateException("cuda broadcast cannot be captured into a graph: its pieces are ordered by host"
                    + " barriers (call it outside capture)");
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
                    + " inside a capture (call it outside capture)");
        }
    }

    private void checkNotCapturingCopies(String what) {
        if (rank.capturing && rank.kernels == null) {
            throw new IllegalStateException("cuda " + what + " without the symmem4j kernels copies between host barriers,"
                    + " which a CUDA graph cannot capture (call it outside capture, or build with the kernels)");
        }
    }

    /**
     * Reduces this rank's block — {@code len} elements at byte {@code blockOffset} of every rank's
     * region of {@code mem}, the region starting at {@code regionOffset} — over the ranks, in rank order, into its own region; blocks of every
     * rank are {@code maxLen} elements apart from block start to block start at most (the grid is
     * sized by {@code maxLen}, equal on every rank, because block b of the kernel meets block b of
     * every peer). Enqueues after whatever this rank's stream holds (the data).
     */
    private void reduceBlocks(CudaSymmetricMemory mem, long regionOffset, long blockOffset, long len, long maxLen, DType dtype,
                              ReduceOp op) {
        long dsize = dtype.byteSize();
        int me = group.rank();
        // decided by the region's offset, equal on every rank (block offsets differ by multiples of 64 bytes)
        if (kernelReduces(dtype, op, regionOffset)) {
            // The kernel reads peer p at bufs[p] + rank * len * dsize: shift each pointer back by that
            // much, so it reads this rank's block wherever it starts (uneven ShardPartition blocks).
            // The shift is never below the region's start: block r starts at or after r * len.
            long shift = blockOffset - me * len * dsize;
            try (Arena a = Arena.ofConfined()) {
                long[] bufs = mem.dataPointers().clone();
                for (int p = 0; p < worldSize; p++) {
                    bufs[p] += shift;
                }
                CudaLaunch params = new CudaLaunch(a).pointers(bufs).pointers(mem.padPointers())
                        .pointer(mem.dataPointer(me) + blockOffset).size(len).integer(me).integer(worldSize);
                long vectors = Math.max(1, dtype.bytes(maxLen) / 16);
                Kernel kernel = Kernel.reduceScatter(dtype == DType.FLOAT32);
                rank.launch(driver, kernel, grids.grid(kernel, (vectors + CudaKernels.BLOCK_THREADS - 1)
                        / CudaKernels.BLOCK_THREADS), params.array());
            }
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
                driver.copyHostToDevice(mem.dataPointer(me) + at, out, n * dsize);
            }
        }
        // a copy from pageable host memory may return before its DMA lands: wait for the context (no
        // peer kernel can be waiting for this rank here: every rank's stream went idle before the barrier above)
        driver.synchronizeContext();
        control.barrier(); // every rank has read its block from every region: regions may be overwritten
    }

    /**
     * Puts this rank's elements at device address {@code in} into its block of every rank's region of
     * {@code mem}: rank q's block holds {@code lens[q]} elements from element {@code starts[q]} of the
     * region at {@code regionOffset}, each at most {@code maxLen} (the grid, equal on every rank).
     * Kernel: the output pointers are shifted as in {@link #reduceBlocks}, since the kernel writes at
     * {@code outs[p] + rank * bytes}. Without the kernels: the copy engine between host barriers.
     */
    private void gatherBlocks(CudaSymmetricMemory mem, long regionOffset, long in, long[] starts, long[] lens, long maxLen,
                              long dsize) {
        int me = group.rank();
        long mine = regionOffset + starts[me] * dsize;
        if (rank.kernels != null) {
            long shift = mine - me * lens[me] * dsize; // >= regionOffset: block r starts at or after r * its length
            try (Arena a = Arena.ofConfined()) {
                long[] outs = mem.dataPointers().clone();
                for (int p = 0; p < worldSize; p++) {
                    outs[p] += shift;
                }
                CudaLaunch params = new CudaLaunch(a).pointers(outs).pointers(mem.padPointers()).pointer(in)
                        .size(lens[me] * dsize).integer(me).integer(worldSize);
                long vectors = Math.max(1, maxLen * dsize / 16);
                rank.launch(driver, Kernel.ALL_GATHER, grids.grid(Kernel.ALL_GATHER,
                        (vectors + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS), params.array());
            }
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

    /** Waits for this rank's stream, then checks NCCL for asynchronous errors. */
    @Override
    public void synchronize() {
        driver.setCurrent(rank.context);
        driver.synchronize(rank.stream);
        if (ncclComm != null) {
            Nccl.get().checkAsyncError(ncclComm);
        }
    }

    @Override
    public void barrier() {
        synchronize();
        control.barrier();
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
     * @param body enqueues the work to capture
     * @return the graph, to replay and close
     */
    @Override
    public CudaGraph capture(Runnable body) {
        driver.setCurrent(rank.context);
        driver.synchronize(rank.stream);
        MemorySegment exec = rank.captureGraph(driver, body);
        EnqueueOrder.Seat order = rank.capturedOrder;
        rank.capturedOrder = null;
        if (sharedDevice) {
            try {
                driver.uploadGraph(exec, rank.stream);
                driver.synchronize(rank.stream);
                control.barrier(); // every rank's graph is instantiated and uploaded; replays may start
            } catch (RuntimeException e) {
                driver.destroyGraph(exec);
                throw e;
            }
        }
        return new CudaGraph(driver, rank, exec, order);
    }

    /**
     * The two events of {@link #orderAfter} and {@link #orderBefore}, made at the first call (ordering only: no timing).
     * A recorded event may be recorded again at once: a waiter enqueued earlier keeps the state it captured.
     */
    private MemorySegment afterEvent;
    private MemorySegment beforeEvent;

    @Override
    public synchronized void orderAfter(MemorySegment other) {
        driver.setCurrent(rank.context);
        if (afterEvent == null) {
            afterEvent = driver.createEvent(CudaDriver.EVENT_DISABLE_TIMING);
        }
        // other's work so far, then this rank's stream waits for it on the device
        driver.record(afterEvent, other);
        driver.waitEvent(rank.stream, afterEvent);
    }

    @Override
    public synchronized void orderBefore(MemorySegment other) {
        driver.setCurrent(rank.context);
        if (beforeEvent == null) {
            beforeEvent = driver.createEvent(CudaDriver.EVENT_DISABLE_TIMING);
        }
        driver.record(beforeEvent, rank.stream);
        driver.waitEvent(other, beforeEvent);
    }

    @Override
    public double elapsedMillis(Runnable body) {
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

    CudaRank cudaRank() {
        return rank;
    }

    /** The grids this communicator's collectives launch with (tests; null without kernels). */
    LaunchBudget grids() {
        return grids;
    }

    /**
     * NCCL point-to-point on this rank's stream: sends {@code bytes} at device address {@code ptr} to
     * {@code peer}, which must post the matching {@link #ncclRecv}; behind {@link #send}.
     *
     * @param ptr device address of the data
     * @param bytes bytes to send, a multiple of 4
     * @param peer the receiving rank
     * @throws IllegalArgumentException if {@code bytes} is not a multiple of 4
     * @throws CudaUnavailableException if NCCL is unavailable
     */
    private void ncclSend(long ptr, long bytes, int peer) {
        Nccl.get().send(ptr, p2pCount(bytes), DType.FLOAT32, peer, requireNccl(), rank.stream);
    }

    /**
     * Receives {@code bytes} from {@code peer} into device address {@code ptr}; see {@link #ncclSend}.
     *
     * @param ptr device address to receive into
     * @param bytes bytes to receive, a multiple of 4
     * @param peer the sending rank
     * @throws IllegalArgumentException if {@code bytes} is not a multiple of 4
     * @throws CudaUnavailableException if NCCL is unavailable
     */
    private void ncclRecv(long ptr, long bytes, int peer) {
        Nccl.get().recv(ptr, p2pCount(bytes), DType.FLOAT32, peer, requireNccl(), rank.stream);
    }

    MemorySegment requireNccl() {
        if (ncclComm == null) {
            throw new CudaUnavailableException("NCCL unavailable: " + ncclUnavailable);
        }
        driver.setCurrent(rank.context);
        return ncclComm;
    }

    static long p2pCount(long bytes) {
        if (bytes % 4 != 0) {
            throw new IllegalArgumentException("NCCL send/recv here moves whole 4-byte words: bytes=" + bytes
                    + " expected a multiple of 4 (pad the message)");
        }
        return bytes / 4;
    }

    /** {@return this rank's GPU name, as the driver reports it} */
    @Override
    public String deviceName() {
        return rank.deviceName;
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
        ncclSend(buffer.address(), buffer.byteSize(), peer);
    }

    @Override
    public void recv(MemorySegment buffer, int peer) {
        ncclRecv(buffer.address(), buffer.byteSize(), peer);
    }

    @Override
    public MemorySegment allocateDevice(long bytes) {
        driver.setCurrent(rank.context);
        return MemorySegment.ofAddress(driver.malloc(bytes)).reinterpret(bytes);
    }

    @Override
    public void freeDevice(MemorySegment buffer) {
        synchronize();
        driver.free(buffer.address());
    }

    @Override
    public void copyAsync(MemorySegment dst, MemorySegment src) {
        if (dst.byteSize() < src.byteSize()) {
            throw new IllegalArgumentException("copyAsync: dst has " + dst.byteSize() + " bytes, expected at least src's "
                    + src.byteSize());
        }
        driver.setCurrent(rank.context);
        driver.copyDeviceToDeviceAsync(dst.address(), src.address(), src.byteSize(), rank.stream);
    }

    @Override
    public void copyFromHost(MemorySegment dst, MemorySegment src) {
        if (dst.byteSize() < src.byteSize()) {
            throw new IllegalArgumentException("copyFromHost: dst has " + dst.byteSize() + " bytes, expected at least src's "
                    + src.byteSize());
        }
        synchronize();
        driver.copyHostToDevice(dst.address(), src, src.byteSize());
    }

    @Override
    public void copyToHost(MemorySegment dst, MemorySegment src) {
        if (src.byteSize() < dst.byteSize()) {
            throw new IllegalArgumentException("copyToHost: src has " + src.byteSize() + " bytes, expected at least dst's "
                    + dst.byteSize());
        }
        synchronize();
        driver.copyDeviceToHost(dst, src.address(), dst.byteSize());
    }

    @Override
    public void abort(String reason) {
        control.abort(reason);
        if (ncclComm != null) {
            Nccl.get().abort(ncclComm);
        }
    }

    @Override
    public void close() {
        try {
            synchronize();
            synchronized (this) {
                if (tensorParallel != null) {
                    tensorParallel.close();
                }
            }
            staging.close();
            if (oneShotScratch != null) {
                oneShotScratch.close();
                llScratch.close();
                twoShotScratch.close();
            }
            if (window != null) {
                window.close();
            }
            if (ncclComm != null) {
                Nccl.get().destroy(ncclComm);
            }
        } finally {
            synchronized (this) {
                for (MemorySegment event : new MemorySegment[] {afterEvent, beforeEvent}) {
                    if (event != null) {
                        driver.destroyEvent(event);
                    }
                }
                afterEvent = null;
                beforeEvent = null;
            }
            control.close();
            arena.close();
        }
    }
}
