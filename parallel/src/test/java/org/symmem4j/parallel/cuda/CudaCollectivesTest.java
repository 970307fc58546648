package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.zip.CRC32;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.numeric.BFloat16;

/**
 * GPU collectives against a float64 reference on fresh random data, ranks bitwise equal; graph
 * capture and replay; reduce-scatter, all-gather, put/wait-signal; NCCL. Skipped (not passed)
 * without a CUDA driver or without the kernels. On one GPU the ranks share it (NCCL cases skip).
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaCollectivesTest {

    static final GpuTestSupport.ClassTransport GPU = new GpuTestSupport.ClassTransport();

    /** Per test (not @BeforeAll), so every test reports itself skipped on a machine without a GPU. */
    @BeforeEach
    void needsAGpu() {
        GPU.open();
    }

    /** Gives the GPUs back (streams, kernels, contexts), so later test classes start from a clean device. */
    @AfterAll
    static void closeTransport() {
        GPU.close();
    }

    /** Input of rank r for case c: exactly representable in dtype. */
    static float input(SplittableRandom rnd, DType dtype) {
        float x = (float) rnd.nextDouble(-1, 1);
        return dtype == DType.BFLOAT16 ? BFloat16.toFloat(BFloat16.fromFloat(x)) : x;
    }

    static void write(MemorySegment host, DType dtype, long i, float x) {
        if (dtype == DType.FLOAT32) {
            host.setAtIndex(ValueLayout.JAVA_FLOAT, i, x);
        } else {
            host.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat(x));
        }
    }

    static float read(MemorySegment host, DType dtype, long i) {
        return dtype == DType.FLOAT32 ? host.getAtIndex(ValueLayout.JAVA_FLOAT, i)
                : BFloat16.toFloat(host.getAtIndex(ValueLayout.JAVA_SHORT, i));
    }

    /**
     * Runs one all-reduce case on every rank and checks it: every element against the float64
     * sum (N·u·Σ|x| + output rounding), and the ranks' outputs bitwise equal (CRC of the bytes).
     */
    static void checkAllReduce(Communicator comm, CudaSymmetricMemory mem, Group group, Algorithm alg, DType dtype,
                               ReduceOp op, long count, long seed) {
        long bytes = dtype.bytes(count);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(Math.max(bytes, 16), 16);
            SplittableRandom mine = new SplittableRandom(seed * 31 + group.rank());
            for (long i = 0; i < count; i++) {
                write(host, dtype, i, input(mine, dtype));
            }
            mem.copyFromHost(host.asSlice(0, bytes), 0);
            comm.allReduce(mem, 0, count, dtype, op, alg);
            mem.copyToHost(0, host.asSlice(0, bytes));
            SplittableRandom[] all = new SplittableRandom[GPU.worldSize()];
            for (int r = 0; r < GPU.worldSize(); r++) {
                all[r] = new SplittableRandom(seed * 31 + r);
            }
            double uOut = dtype == DType.BFLOAT16 ? 0x1p-8 : 0x1p-24;
            // symmem4j's kernels accumulate in float32; NCCL's rings round to the element type at every
            // hop, so its bf16 error grows with N at bf16's unit roundoff (seen on 4 GPUs: 3e-3 at |x|~0.2)
            double uAcc = alg == Algorithm.NCCL && dtype == DType.BFLOAT16 ? 0x1p-8 : 0x1p-24;
            for (long i = 0; i < count; i++) {
                double ref = 0;
                double abs = 0;
                for (int r = 0; r < GPU.worldSize(); r++) {
                    float x = input(all[r], dtype);
                    ref += x;
                    abs += Math.abs(x);
                }
                double scale = op == ReduceOp.AVG ? 1.0 / GPU.worldSize() : 1.0;
                ref *= scale;
                double tol = 2 * ((GPU.worldSize() + 1) * uAcc * abs * scale + uOut * Math.abs(ref)) + Double.MIN_NORMAL;
                double got = read(host, dtype, i);
                if (!(Math.abs(got - ref) <= tol)) {
                    fail(alg + " " + dtype + " " + op + " count=" + count + " rank=" + group.rank() + " element " + i
                            + " got=" + got + " reference=" + ref + " tolerance=" + tol);
                }
            }
            CRC32 crc = new CRC32();
            crc.update(host.asSlice(0, bytes).asByteBuffer());
            List<byte[]> crcs = group.allGatherBytes("crc", ByteBuffer.allocate(8).putLong(crc.getValue()).array());
            for (int r = 1; r < GPU.worldSize(); r++) {
                assertEquals(ByteBuffer.wrap(crcs.getFirst()).getLong(), ByteBuffer.wrap(crcs.get(r)).getLong(),
                        alg + " " + dtype + " count=" + count + ": rank " + r + " differs bitwise from rank 0");
            }
        }
    }

    @Test
    void kernelsAndNcclMatchTheFloat64Reference() {
        long[] small = {0, 1, 1001, 4099, (1 << 20) / 4};
        long big = (256L << 20) / 4; // 256 MB of float32
        GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) GPU.cuda().allocate(group, 256L << 20)) {
                long seed = 1;
                List<Algorithm> algorithms = new ArrayList<>(List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT));
                if (comm.supports(Algorithm.NCCL)) {
                    algorithms.add(Algorithm.NCCL);
                }
                for (Algorithm alg : algorithms) {
                    for (DType dtype : new DType[] {DType.FLOAT32, DType.BFLOAT16}) {
                        for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG}) {
                            for (long count : small) {
                                if (alg == Algorithm.ONE_SHOT && dtype.bytes(count) > comm.oneShotCapacityBytes()) {
                                    continue;
                                }
                                checkAllReduce(comm, mem, group, alg, dtype, op, count, seed++);
                            }
                        }
                        if (alg != Algorithm.ONE_SHOT) {
                            long count = dtype == DType.FLOAT32 ? big : 2 * big;
                            checkAllReduce(comm, mem, group, alg, dtype, ReduceOp.SUM, count, seed++);
                            // TWO_SHOT's write-only kernel: several rounds through its scratch, a last
                            // partial round and 3 elements past the last whole vector
                            long rounds = comm.twoShotPushMinBytes() / 4 * 3 + 3;
                            for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG}) {
                                checkAllReduce(comm, mem, group, alg, dtype, op, rounds, seed++);
                            }
                        }
                    }
                }
            }
            return null;
        });
    }

    /**
     * Before any collective: every kernel is fully loaded in the shared context (a lazy load at a
     * launch could wait for a peer's spinning kernel), the ranks launch identical grids, and with ranks
     * sharing the GPU the worst case of LaunchBudget fits the occupancy measured here. Prints each
     * rank's budget into the log.
     */
    @Test
    void kernelsAreLoadedAndGridsFitBeforeAnyCollective() {
        GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults())) {
                CudaRank rank = comm.cudaRank();
                CudaDriver driver = CudaDriver.get();
                for (Kernel k : Kernel.values()) {
                    assertEquals(java.util.Optional.of(true), driver.functionLoaded(rank.kernels.function(k)),
                            k.symbol + " must be fully loaded before any launch");
                }
                LaunchBudget grids = comm.grids();
                int[] occupancy = rank.kernels.blocksPerMultiprocessor();
                int fewest = Arrays.stream(occupancy).min().orElseThrow();
                System.out.println("rank " + group.rank() + " lazyLoading=" + rank.kernels.lazyLoading + " occupancy="
                        + Arrays.toString(occupancy) + " own " + rank.budget + " group " + grids);
                int largest = 0;
                for (Kernel k : Kernel.values()) {
                    assertTrue(grids.limit(k) >= 1 && grids.limit(k) <= rank.budget.limit(k), k.symbol);
                    largest = Math.max(largest, grids.limit(k));
                }
                int n = rank.budget.ranksOnDevice();
                if (n > 1) {
                    long worstCase = (long) LaunchBudget.competingGrids(n, rank.budget.gridsInFlight()) * largest;
                    assertTrue(worstCase <= (long) rank.multiprocessors * fewest, "worst case " + worstCase + " blocks > "
                            + rank.multiprocessors + " SMs x " + fewest);
                }
                StringBuilder mine = new StringBuilder();
                for (Kernel k : Kernel.values()) {
                    mine.append(grids.limit(k)).append(',');
                }
                List<byte[]> all = group.allGatherBytes("grids", mine.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8));
                for (byte[] other : all) {
                    assertEquals(mine.toString(), new String(other, java.nio.charset.StandardCharsets.UTF_8),
                            "every rank launches the same grids (block b meets block b)");
                }
            }
            return null;
        });
    }

    @Test
    void oneShotAndTwoShotAgreeBitwise() {
        GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory a = (CudaSymmetricMemory) GPU.cuda().allocate(group, 1 << 20);
                 CudaSymmetricMemory b = (CudaSymmetricMemory) GPU.cuda().allocate(group, 1 << 20);
                 Arena arena = Arena.ofConfined()) {
                long count = 100_003;
                MemorySegment in = arena.allocate(count * 4);
                SplittableRandom rnd = new SplittableRandom(77 + group.rank());
                for (long i = 0; i < count; i++) {
                    in.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) rnd.nextDouble(-1e3, 1e3));
                }
                a.copyFromHost(in, 0);
                b.copyFromHost(in, 0);
                comm.allReduce(a, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                comm.allReduce(b, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                MemorySegment x = arena.allocate(count * 4);
                MemorySegment y = arena.allocate(count * 4);
                a.copyToHost(0, x);
                b.copyToHost(0, y);
                assertEquals(-1, x.mismatch(y), "rank-order sums must agree bit for bit");
            }
            return null;
        });
    }

    /**
     * Eager calls go through one-kernel graphs cached per launch: a repeated call captures nothing
     * new, a new size captures once, a call inside a user's capture is not captured separately, and
     * every result is right.
     */
    @Test
    void eagerCallsReplayCachedGraphs() {
        Assumptions.assumeTrue(EagerGraphCache.ENABLED, "-Dsymmem4j.cuda.eager.graphs=false");
        Assumptions.assumeTrue(CudaDriver.get().deviceCount() >= GPU.worldSize(), "ranks share a GPU: eager calls launch plainly");
        GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) GPU.cuda().allocate(group, 1 << 20)) {
                EagerGraphCache cache = comm.cudaRank().eagerGraphs;
                checkAllReduce(comm, mem, group, Algorithm.ONE_SHOT, DType.FLOAT32, ReduceOp.SUM, 1001, 7);
                long afterFirst = cache.captures();
                for (int i = 0; i < 3; i++) {
                    checkAllReduce(comm, mem, group, Algorithm.ONE_SHOT, DType.FLOAT32, ReduceOp.SUM, 1001, 8 + i);
                }
                assertEquals(afterFirst, cache.captures(), "the same launch again replays the cached graph");
                checkAllReduce(comm, mem, group, Algorithm.ONE_SHOT, DType.FLOAT32, ReduceOp.SUM, 1003, 11);
                assertEquals(afterFirst + 1, cache.captures(), "another count is another launch");
                try (CudaGraph g = comm.capture(() -> comm.allReduce(mem, 0, 2001, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT))) {
                    assertEquals(afterFirst + 1, cache.captures(), "a launch inside a user's capture is not cached");
                }
            }
            return null;
        });
    }

    @Test
    void capturedGraphReplaysOnFreshData() {
        GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) GPU.cuda().allocate(group, comm.twoShotPushMinBytes() + (1 << 20))) {
                long count = (4 << 20) / 2;
                long pushCount = comm.twoShotPushMinBytes() / 2 + 1001; // TWO_SHOT's write-only kernel
                for (Algorithm alg : new Algorithm[] {Algorithm.TWO_SHOT, Algorithm.ONE_SHOT, null}) {
                    Algorithm a = alg == null ? Algorithm.TWO_SHOT : alg;
                    long c = alg == null ? pushCount : alg == Algorithm.ONE_SHOT ? Math.min(count, comm.oneShotCapacityBytes() / 2) : count;
                    try (CudaGraph graph = comm.capture(() -> comm.allReduce(mem, 0, c, DType.BFLOAT16, ReduceOp.SUM, a))) {
                        for (int replay = 0; replay < 3; replay++) {
                            checkReplay(comm, mem, group, graph, c, 1000 + replay);
                        }
                    }
                }
            }
            return null;
        });
    }

    /**
     * Back-to-back all-reduces on one buffer, each reading what the previous one wrote, eager and as a
     * captured graph: with programmatic dependent launch (on by default from sm_90) a kernel starts
     * before its predecessor ends and must wait for it before touching memory, so any ordering hole
     * shows as a wrong element. Integer inputs keep every partial sum exact in float32 (below 2^24),
     * so the expected values are exact: x, then x * N^k after k more rounds.
     */
    @Test
    void chainedAllReducesSeeEachOthersResults() {
        int rounds = 6;
        GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) GPU.cuda().allocate(group, 2 * comm.twoShotPushMinBytes() + (1 << 20))) {
                CudaDriver driver = CudaDriver.get();
                int major = driver.attribute(driver.device(comm.cudaRank().ordinal), CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
                if (major >= 9 && Configuration.CUDA_PDL.get()) {
                    assertTrue(comm.programmaticLaunch(), "sm_" + major + "x: kernels should launch with PDL");
                }
                // the last count: TWO_SHOT's write-only kernel, two rounds and a tail
                for (long count : new long[] {256, 65_536, 1 << 20, comm.twoShotPushMinBytes() / 2 + 5}) {
                    for (Algorithm alg : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT}) {
                        if (alg == Algorithm.ONE_SHOT && count * 4 > comm.oneShotCapacityBytes()) {
                            continue;
                        }
                        for (boolean graph : new boolean[] {false, true}) {
                            checkChain(comm, mem, group, alg, count, rounds, graph);
                        }
                    }
                }
            }
            return null;
        });
    }

    private static void checkChain(CudaCommunicator comm, CudaSymmetricMemory mem, Group group, Algorithm alg, long count,
                                   int rounds, boolean graph) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(count * 4);
            for (long i = 0; i < count; i++) {
                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) ((i * 7 + group.rank() * 3) % 9 - 4));
            }
            comm.synchronize();
            group.allGatherBytes("chain-before-copy", new byte[0]);
            mem.copyFromHost(host, 0);
            group.allGatherBytes("chain-inputs-ready", new byte[0]);
            Runnable chain = () -> {
                for (int k = 0; k < rounds; k++) {
                    comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, alg);
                }
            };
            if (graph) {
                try (CudaGraph g = comm.capture(chain)) {
                    g.replay();
                    comm.synchronize();
                }
            } else {
                chain.run();
                comm.synchronize();
            }
            mem.copyToHost(0, host);
            double scale = Math.pow(GPU.worldSize(), rounds - 1);
            for (long i = 0; i < count; i++) {
                double sum = 0;
                for (int r = 0; r < GPU.worldSize(); r++) {
                    sum += (i * 7 + r * 3) % 9 - 4;
                }
                float got = host.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                if (got != (float) (sum * scale)) {
                    fail(alg + (graph ? " graph" : " eager") + " count=" + count + " rounds=" + rounds + " element " + i
                            + ": expected=" + sum * scale + " found=" + got
                            + " (an all-reduce read its input before the previous one had written it)");
                }
            }
        }
    }

    /** Fresh inputs, one replay, check (the signal pads must have returned to zero for this to pass). */
    private static void checkReplay(CudaCommunicator comm, CudaSymmetricMemory mem, Group group, CudaGraph graph, long count,
                                    long seed) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(count * 2);
            SplittableRandom rnd = new SplittableRandom(seed * 31 + group.rank());
            for (long i = 0; i < count; i++) {
                write(host, DType.BFLOAT16, i, input(rnd, DType.BFLOAT16));
            }
            comm.synchronize();
            group.allGatherBytes("before-copy", new byte[0]); // nobody still reads the previous round
            mem.copyFromHost(host, 0);
            group.allGatherBytes("inputs-ready", new byte[0]);
            graph.replay();
            mem.copyToHost(0, host);
            SplittableRandom[] all = new SplittableRandom[GPU.worldSize()];
            for (int r = 0; r < GPU.worldSize(); r++) {
                all[r] = new SplittableRandom(seed * 31 + r);
            }
            for (long i = 0; i < count; i++) {
                double ref = 0;
                for (int r = 0; r < GPU.worldSize(); r++) {
                    ref += input(all[r], DType.BFLOAT16);
                }
                double got = read(host, DType.BFLOAT16, i);
                assertTrue(Math.abs(got - ref) <= 0x1p-7 * Math.abs(ref) + GPU.worldSize() * 1e-6,
                        "replay seed=" + seed + " element " + i + " got=" + got + " ref=" + ref);
            }
        }
    }

    @Test
    void reduceScatterAndAllGather() {
        GPU.onEveryRankOfHostGroup(group -> {
            int n = GPU.worldSize();
            long block = 100_000;
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 Arena arena = Arena.ofConfined()) {
                MemorySegment host = arena.allocate(4 * block * n);
                for (long i = 0; i < block * n; i++) {
                    host.setAtIndex(ValueLayout.JAVA_FLOAT, i, i % 1000 + group.rank());
                }
                MemorySegment send = comm.allocateDevice(4 * block * n);
                comm.copyFromHost(send, host);
                MemorySegment out = comm.allocateDevice(4 * block);
                MemorySegment poison = arena.allocate(4 * block).fill((byte) 0x7f);
                comm.copyFromHost(out, poison); // poisoned: every element must be written
                comm.reduceScatter(send, out, block, DType.FLOAT32, ReduceOp.SUM);
                MemorySegment rs = arena.allocate(4 * block);
                comm.copyToHost(rs, out);
                for (long i = 0; i < block; i++) {
                    float expected = n * ((group.rank() * block + i) % 1000) + n * (n - 1) / 2f;
                    assertEquals(expected, rs.getAtIndex(ValueLayout.JAVA_FLOAT, i), "reduce-scatter element " + i);
                }
                MemorySegment gathered = comm.allocateDevice(4 * block * n);
                comm.copyFromHost(gathered, arena.allocate(4 * block * n).fill((byte) 0x7f));
                comm.allGather(out, gathered, block, DType.FLOAT32);
                MemorySegment ag = arena.allocate(4 * block * n);
                comm.copyToHost(ag, gathered);
                for (int q = 0; q < n; q++) {
                    for (long i = 0; i < block; i++) {
                        float expected = n * ((q * block + i) % 1000) + n * (n - 1) / 2f;
                        assertEquals(expected, ag.getAtIndex(ValueLayout.JAVA_FLOAT, q * block + i), "all-gather block " + q);
                    }
                }
                comm.freeDevice(send);
                comm.freeDevice(out);
                comm.freeDevice(gathered);
            }
            return null;
        });
    }

    @Test
    void putWithSignalHandsOffData() {
        GPU.onEveryRankOfHostGroup(group -> {
            int peer = (group.rank() + 1) % GPU.worldSize();
            int from = (group.rank() - 1 + GPU.worldSize()) % GPU.worldSize();
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory box = (CudaSymmetricMemory) GPU.cuda().allocate(group, 1 << 20);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment src = comm.allocateDevice(1 << 20);
                MemorySegment host = arena.allocate(1 << 20);
                for (int round = 1; round <= 5; round++) {
                    host.fill((byte) (group.rank() * 10 + round));
                    comm.copyFromHost(src, host);
                    box.putWithSignal(peer, src, 0, 3, round, SignalOp.SET);
                    assertEquals(round, box.waitSignal(3, round, from));
                    box.copyToHost(0, host);
                    assertEquals((byte) (from * 10 + round), host.get(ValueLayout.JAVA_BYTE, (1 << 20) - 1), "round " + round);
                    box.barrier(); // nobody puts the next round before its peer has read this one
                }
                comm.freeDevice(src);
            }
            return null;
        });
    }

    /**
     * A put+signal / consuming-wait hand-off around the ring, captured once as a graph and replayed
     * on fresh data: the data arrives every time and the consuming wait leaves the slot at zero, so
     * the same thresholds hold on every replay.
     */
    @Test
    void consumingWaitsReplayAsAGraph() {
        GPU.onEveryRankOfHostGroup(group -> {
            int peer = (group.rank() + 1) % GPU.worldSize();
            int from = (group.rank() - 1 + GPU.worldSize()) % GPU.worldSize();
            int bytes = 64 << 10;
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory box = (CudaSymmetricMemory) GPU.cuda().allocate(group, bytes);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment src = comm.allocateDevice(bytes);
                MemorySegment host = arena.allocate(bytes);
                CudaGraph graph = comm.capture(() -> {
                    box.putWithSignal(peer, src, 0, 4, 1, SignalOp.ADD);
                    box.enqueueWaitSignal(4, 1, true);
                });
                for (int replay = 1; replay <= 4; replay++) {
                    host.fill((byte) (group.rank() * 10 + replay));
                    comm.copyFromHost(src, host);
                    comm.barrier(); // every rank's source holds this replay's data before anyone puts
                    graph.replay();
                    comm.synchronize();
                    box.copyToHost(0, host);
                    assertEquals((byte) (from * 10 + replay), host.get(ValueLayout.JAVA_BYTE, bytes - 1), "replay " + replay);
                    assertEquals((byte) (from * 10 + replay), host.get(ValueLayout.JAVA_BYTE, 0), "replay " + replay);
                    assertEquals(0, box.readSignal(4), "the consuming wait gives the count back");
                    comm.barrier(); // nobody puts the next replay before its peer has read this one
                }
                graph.close();
                comm.freeDevice(src);
            }
            return null;
        });
    }

    @Test
    void mismatchedArgumentsAreRejectedBeforeAnyKernelRuns() {
        List<String> messages = GPU.onEveryRankOfHostGroup(group -> {
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) GPU.cuda().allocate(group, 1 << 16)) {
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class, () -> comm.allReduce(mem, 0,
                        group.rank() == 0 ? 100 : 200, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT));
                assertThrows(CollectiveMismatchException.class,
                        () -> comm.allReduce(mem, 0, 10, DType.FLOAT64, ReduceOp.MAX, Algorithm.TWO_SHOT),
                        "float64 MAX has no kernel: rejected on every rank");
                return e.getMessage();
            }
        });
        assertTrue(messages.getFirst().contains("rank=1 count=200"), messages.getFirst());
    }
}
