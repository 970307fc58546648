package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * symmem4j's collective kernels as a {@link CudaCommunicator} launches them: the all-reduce
 * kernels by algorithm and {@link Protocol} (with the scratch each protocol lands its data in), the
 * reduce-scatter and all-gather kernels over a symmetric region's blocks, the grids all ranks agree
 * on, and the eager graph cache in front of the all-reduces. Arguments were checked and agreed on by
 * the communicator before any launch; every launch is enqueued on the rank's stream. Exists only
 * where the kernels are loaded.
 */
final class CollectiveKernels {

    /** Largest ONE_SHOT message: the size of one landing slot in the scratch. */
    static final long ONE_SHOT_SLOT_BYTES = 4L << 20;
    static final long LL_SLOT_WORDS = Protocol.LL_MAX_BYTES / 4;
    /**
     * Scratch of the write-only TWO_SHOT per rank. A message goes through it in rounds of half this
     * size (one meeting of the ranks per round; the other half takes the next round while peers
     * still read this one). On 2 x H200 at 64 MiB: 32 MiB rounds 195 us, 8 MiB rounds 200 us, 2 MiB
     * rounds 277 us; one round through a scratch as large as the message, 193 us.
     */
    static final long TWO_SHOT_SCRATCH_BYTES = 64L << 20;
    /**
     * Largest grid of the pulling TWO_SHOT kernel at one vector per thread; larger chunks take two per thread.
     * On 4 x H200, graph-captured: one per thread at 1 MiB (32 blocks) 13.5 -> 12.4 us bf16, 10.9 -> 10.0 us fp32;
     * at 4 MiB (128 blocks against 64) 27.1 -> 29.5 us bf16, so two per thread there
     * (bench/results/2026-11-28-4xh200-limits.md). On 2 GPUs the policy picks ONE_SHOT where the two differ.
     * Measured again once the kernel issued every peer's load before summing (2026-11-28-4xh200-allreduce-loads.md):
     * 128 blocks at 4 MiB still no faster (26.5 against 25.9 us bf16).
     */
    static final long TWO_SHOT_ONE_PER_THREAD_BLOCKS = 64;

    private final Group group;
    private final CudaRank rank;
    private final CudaDriver driver;
    private final int worldSize;
    /** Tells this communicator's calls apart from another's in the rank's eager graph cache. */
    private final long serial;
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
     * kernel's grid shrinks so that all ranks' grids fit at once (see {@link LaunchBudget}).
     */
    private final LaunchBudget grids;
    /** ONE_SHOT's landing slots: two parities of worldSize slots of {@link #ONE_SHOT_SLOT_BYTES} per rank. */
    private final CudaSymmetricMemory oneShotScratch;
    /** Small ONE_SHOTs use the LL protocol: 8-byte words (payload + epoch), two parities of worldSize slots. */
    private final CudaSymmetricMemory llScratch;
    /**
     * Large TWO_SHOTs land the peers' copies of this rank's chunk here: two parities of worldSize
     * slots of {@link #twoShotSlotBytes} per rank ({@link #TWO_SHOT_SCRATCH_BYTES} in all).
     */
    private final CudaSymmetricMemory twoShotScratch;
    private final long twoShotSlotBytes;
    private final long twoShotPushMinBytes;
    private final AllReduceParameters params;

    /**
     * Collective: allocates the protocols' scratch on {@code memory} (the group's transport).
     *
     * @param grids the grids every rank launches with ({@link #commonGrids})
     */
    CollectiveKernels(Group group, CudaRank rank, CudaDriver driver, Transport memory, LaunchBudget grids, long serial,
                      boolean sharedDevice) {
        this.group = group;
        this.rank = rank;
        this.driver = driver;
        this.worldSize = group.worldSize();
        this.serial = serial;
        this.sharedDevice = sharedDevice;
        this.grids = grids;
        this.oneShotScratch = (CudaSymmetricMemory) memory.allocate(group, 2L * worldSize * ONE_SHOT_SLOT_BYTES);
        this.llScratch = (CudaSymmetricMemory) memory.allocate(group, 2L * worldSize * LL_SLOT_WORDS * Long.BYTES);
        this.twoShotSlotBytes = TWO_SHOT_SCRATCH_BYTES / (2L * worldSize) / 16 * 16;
        this.twoShotPushMinBytes = Protocol.pushMinBytes(worldSize);
        this.twoShotScratch = (CudaSymmetricMemory) memory.allocate(group, TWO_SHOT_SCRATCH_BYTES);
        this.params = new AllReduceParameters(group.rank(), worldSize);
    }

    /**
     * Collective: the grids every rank of {@code group} launches with, each kernel's smallest limit
     * over the ranks' {@link LaunchBudget}s.
     *
     * @param group this rank's group
     * @param rank  this rank's GPU state (its kernels loaded)
     * @return the common grids
     */
    static LaunchBudget commonGrids(Group group, CudaRank rank) {
        ByteBuffer mine = ByteBuffer.allocate(Kernel.values().length * Integer.BYTES);
        for (int limit : rank.budget.limits()) {
            mine.putInt(limit);
        }
        List<int[]> limits = new ArrayList<>(group.worldSize());
        for (byte[] b : group.allGatherBytes("cuda-launch-limits", mine.array())) {
            ByteBuffer in = ByteBuffer.wrap(b);
            int[] l = new int[b.length / Integer.BYTES];
            for (int k = 0; k < l.length; k++) {
                l[k] = in.getInt();
            }
            limits.add(l);
        }
        return LaunchBudget.common(rank.budget, limits);
    }

    /** {@return the grids these kernels launch with} */
    LaunchBudget grids() {
        return grids;
    }

    /** Enqueues a ONE_SHOT or TWO_SHOT kernel, through the eager graph cache where it applies; arguments checked. */
    void allReduceEager(CudaSymmetricMemory mem, long offsetBytes, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        // Not where ranks share a GPU: there a capture and instantiation on one rank's thread waits for
        // the kernels running in the shared context, and so for a peer's kernel that waits for this
        // rank (seen for user captures: bench/results/2026-11-23-gpu-shared-ranks-h100.md), so shared
        // GPUs keep plain launches.
        if (EagerGraphCache.ENABLED && !sharedDevice && !rank.capturing) {
            EagerGraphCache cache = rank.eagerGraphs;
            MemorySegment exec = cache.find(serial, mem.id(), offsetBytes, count, dtype.ordinal(), op.ordinal(),
                    algorithm.ordinal());
            if (exec == null) {
                exec = cache.capture(() -> allReduce(mem, offsetBytes, count, dtype, op, algorithm));
            }
            driver.launchGraph(exec, rank.stream);
        } else {
            allReduce(mem, offsetBytes, count, dtype, op, algorithm);
        }
    }

    /** Launches the all-reduce kernel of {@code algorithm} and the message's {@link Protocol}. */
    private void allReduce(CudaSymmetricMemory mem, long offsetBytes, long count, DType dtype, ReduceOp op,
                           Algorithm algorithm) {
        params.call(count, op == ReduceOp.AVG ? worldSize : 0);
        int perVector = 16 / dtype.byteSize();
        long vectors = Math.max(1, count / perVector);
        boolean f32 = dtype == DType.FLOAT32;
        Protocol protocol = Protocol.of(algorithm, dtype.bytes(count), twoShotPushMinBytes);
        long blocks;
        MemorySegment launch;
        Kernel kernel;
        if (algorithm == Algorithm.ONE_SHOT && protocol == Protocol.LL) {
            kernel = Kernel.oneShotLl(f32);
            long words = (dtype.bytes(count) + 3) / 4;
            blocks = (words + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            // same parameter list as SIMPLE: (buf, Peers, Pads, count, rank, world, divisor, slot size)
            launch = params.oneShot(llScratch.dataPointers(), llScratch.padPointers(),
                    mem.dataPointer(group.rank()) + offsetBytes, LL_SLOT_WORDS);
        } else if (algorithm == Algorithm.ONE_SHOT) {
            kernel = Kernel.oneShot(f32);
            blocks = (vectors + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            launch = params.oneShot(oneShotScratch.dataPointers(), oneShotScratch.padPointers(),
                    mem.dataPointer(group.rank()) + offsetBytes, ONE_SHOT_SLOT_BYTES);
        } else if (protocol == Protocol.PUSH) {
            kernel = Kernel.twoShotPush(f32);
            long perRank = Math.min(twoShotSlotBytes / 16, (vectors + worldSize - 1) / worldSize);
            // one vector per thread per round; at most as many blocks as are resident at once
            blocks = (perRank + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            launch = params.twoShotPush(mem.dataPointers(), offsetBytes, twoShotScratch.dataPointers(), mem.padPointers(),
                    twoShotSlotBytes);
        } else {
            kernel = Kernel.twoShot(f32);
            long chunk = (vectors + worldSize - 1) / worldSize;
            // One vector per thread while that takes at most TWO_SHOT_ONE_PER_THREAD_BLOCKS blocks (more blocks,
            // more NVLink loads in flight), two per thread past it (the kernel's loop takes either); at most as many
            // blocks as are resident at once. The grid depends on the chunk alone: equal on every rank.
            long oneEach = (chunk + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS;
            blocks = oneEach <= TWO_SHOT_ONE_PER_THREAD_BLOCKS ? oneEach
                    : (chunk + 2L * CudaKernels.BLOCK_THREADS - 1) / (2L * CudaKernels.BLOCK_THREADS);
            launch = params.twoShot(mem.dataPointers(), offsetBytes, mem.padPointers());
        }
        rank.launch(driver, kernel, grids.grid(kernel, blocks), launch);
    }

    /**
     * Launches the reduce-scatter kernel: this rank's block — {@code len} elements at byte
     * {@code blockOffset} of every rank's region of {@code mem} — reduced over the ranks, in rank
     * order, into its own region; the grid is sized by {@code maxLen}, equal on every rank.
     */
    void reduceScatter(CudaSymmetricMemory mem, long blockOffset, long len, long maxLen, DType dtype) {
        long dsize = dtype.byteSize();
        int me = group.rank();
        // The kernel reads peer p at bufs[p] + rank * len * dsize: shift each pointer back by that
        // much, so it reads this rank's block wherever it starts (uneven ShardPartition blocks).
        // The shift is never below the region's start: block r starts at or after r * len.
        long shift = blockOffset - me * len * dsize;
        try (Arena a = Arena.ofConfined()) {
            long[] bufs = mem.dataPointers().clone();
            for (int p = 0; p < worldSize; p++) {
                bufs[p] += shift;
            }
            CudaLaunch launch = new CudaLaunch(a).pointers(bufs).pointers(mem.padPointers())
                    .pointer(mem.dataPointer(me) + blockOffset).size(len).integer(me).integer(worldSize);
            long vectors = Math.max(1, dtype.bytes(maxLen) / 16);
            Kernel kernel = Kernel.reduceScatter(dtype == DType.FLOAT32);
            rank.launch(driver, kernel, grids.grid(kernel, (vectors + CudaKernels.BLOCK_THREADS - 1)
                    / CudaKernels.BLOCK_THREADS), launch.array());
        }
    }

    /**
     * Launches the all-gather kernel: puts {@code bytes} at device address {@code in} into this
     * rank's block of every rank's region of {@code mem}, the block at byte {@code mine} of the
     * region; the grid is sized by {@code maxLen} elements, equal on every rank. The output pointers
     * are shifted as in {@link #reduceScatter}, since the kernel writes at {@code outs[p] + rank * bytes}.
     */
    void allGather(CudaSymmetricMemory mem, long mine, long in, long bytes, long maxLen, long dsize) {
        int me = group.rank();
        long shift = mine - me * bytes; // >= regionOffset: block r starts at or after r * its length
        try (Arena a = Arena.ofConfined()) {
            long[] outs = mem.dataPointers().clone();
            for (int p = 0; p < worldSize; p++) {
                outs[p] += shift;
            }
            CudaLaunch launch = new CudaLaunch(a).pointers(outs).pointers(mem.padPointers()).pointer(in)
                    .size(bytes).integer(me).integer(worldSize);
            long vectors = Math.max(1, maxLen * dsize / 16);
            rank.launch(driver, Kernel.ALL_GATHER, grids.grid(Kernel.ALL_GATHER,
                    (vectors + CudaKernels.BLOCK_THREADS - 1) / CudaKernels.BLOCK_THREADS), launch.array());
        }
    }

    /** Collective: frees the protocols' scratch. */
    void closeScratch() {
        // each is freed whatever the one before threw (after an abort their closing barriers fail at once)
        org.symmem4j.parallel.cuda.ffi.EverySteps.run(List.of(oneShotScratch::close, llScratch::close,
                twoShotScratch::close));
    }

    /** Frees the launch parameters; no launch may follow. */
    void closeParameters() {
        params.close();
    }
}
