package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
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
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.numeric.BFloat16;

/**
 * The {@link Communicator} surface on GPUs, reached only through the common interfaces: a world
 * created on the CUDA transport, {@link SymmetricMemory#allocate}, {@link Communicator#create} and
 * {@code unwrap(DeviceCommunicator.class)} — no CUDA class but the transport's factory. Every
 * collective of the interface, every dtype and op, against float64 references, ranks compared
 * bitwise. Skipped (not passed) without a CUDA driver or the kernels; with
 * {@code -Dsymmem4j.test.cudaRanks=N} the ranks share the GPUs (nothing here needs NCCL).
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaCommunicatorContractTest {

    static final GpuTestSupport.ClassTransport GPU = new GpuTestSupport.ClassTransport();

    @BeforeEach
    void needsAGpu() {
        GPU.open();
    }

    /** Releases every rank this class's transport made, so that a later class's test can be the kernels' last user. */
    @AfterAll
    static void closeTransport() {
        GPU.close();
    }

    // ---- values exactly representable in each dtype, and host access to them ----

    /** Rank {@code r}'s input for case {@code seed}: {@code count} values exact in {@code dtype}. */
    static double[] inputs(long seed, int r, long count, DType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed * 1_000_003L + r);
        double[] x = new double[(int) count];
        for (int i = 0; i < x.length; i++) {
            double v = rnd.nextDouble(-1, 1);
            x[i] = switch (dtype) {
                case FLOAT64 -> v;
                case FLOAT32 -> (float) v;
                case BFLOAT16 -> BFloat16.toFloat(BFloat16.fromFloat((float) v));
            };
        }
        return x;
    }

    static void put(MemorySegment host, DType dtype, long i, double x) {
        switch (dtype) {
            case FLOAT64 -> host.setAtIndex(ValueLayout.JAVA_DOUBLE, i, x);
            case FLOAT32 -> host.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) x);
            case BFLOAT16 -> host.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat((float) x));
        }
    }

    static double get(MemorySegment host, DType dtype, long i) {
        return switch (dtype) {
            case FLOAT64 -> host.getAtIndex(ValueLayout.JAVA_DOUBLE, i);
            case FLOAT32 -> host.getAtIndex(ValueLayout.JAVA_FLOAT, i);
            case BFLOAT16 -> BFloat16.toFloat(host.getAtIndex(ValueLayout.JAVA_SHORT, i));
        };
    }

    static MemorySegment hostOf(Arena arena, double[] x, DType dtype) {
        MemorySegment host = arena.allocate(Math.max(dtype.bytes(x.length), 16), 16).asSlice(0, dtype.bytes(x.length));
        for (int i = 0; i < x.length; i++) {
            put(host, dtype, i, x[i]);
        }
        return host;
    }

    /** Element {@code i} of the reduction over every rank's input, in float64. */
    static double reference(double[][] all, int i, ReduceOp op) {
        double acc = op == ReduceOp.MAX ? Double.NEGATIVE_INFINITY : op == ReduceOp.MIN ? Double.POSITIVE_INFINITY : 0;
        for (double[] x : all) {
            acc = switch (op) {
                case SUM, AVG -> acc + x[i];
                case MAX -> Math.max(acc, x[i]);
                case MIN -> Math.min(acc, x[i]);
            };
        }
        return op == ReduceOp.AVG ? acc / all.length : acc;
    }

    /**
     * Checks {@code got} against the float64 reduction: MAX and MIN exactly (they pick an input);
     * SUM and AVG within N·u·Σ|x| of accumulation (float32 for the 16/32-bit types, float64 for
     * FLOAT64) plus the output's rounding.
     */
    static void checkElement(String what, double got, double[][] all, int i, DType dtype, ReduceOp op) {
        double ref = reference(all, i, op);
        if (op == ReduceOp.MAX || op == ReduceOp.MIN) {
            if (got != ref) {
                fail(what + " element " + i + " got=" + got + " expected exactly " + ref);
            }
            return;
        }
        double abs = 0;
        for (double[] x : all) {
            abs += Math.abs(x[i]);
        }
        double scale = op == ReduceOp.AVG ? 1.0 / all.length : 1.0;
        double uAcc = dtype == DType.FLOAT64 ? 0x1p-53 : 0x1p-24;
        double uOut = dtype == DType.FLOAT64 ? 0x1p-53 : dtype == DType.FLOAT32 ? 0x1p-24 : 0x1p-8;
        double tol = 2 * ((all.length + 1) * uAcc * abs * scale + uOut * Math.abs(ref)) + Double.MIN_NORMAL;
        if (!(Math.abs(got - ref) <= tol)) {
            fail(what + " element " + i + " got=" + got + " reference=" + ref + " tolerance=" + tol);
        }
    }

    static long crc(MemorySegment host) {
        CRC32 c = new CRC32();
        c.update(host.asByteBuffer());
        return c.getValue();
    }

    /** Fails unless every rank's {@code host} has the same bytes. */
    static void sameOnEveryRank(Group group, MemorySegment host, String what) {
        // the exchange's tag must be equal on every rank: the description may name the rank
        String tag = "crc " + what.replaceAll(" rank=\\d+", "");
        List<byte[]> crcs = group.allGatherBytes(tag, ByteBuffer.allocate(8).putLong(crc(host)).array());
        for (int r = 1; r < crcs.size(); r++) {
            assertEquals(ByteBuffer.wrap(crcs.getFirst()).getLong(), ByteBuffer.wrap(crcs.get(r)).getLong(),
                    what + ": rank " + r + " differs bitwise from rank 0");
        }
    }

    // ---- the tests ----

    /**
     * A world created on the CUDA transport gives CUDA memory and communicators through the generic
     * entry points; GPU-only operations are reached by unwrap; RING is refused on every rank with a
     * mismatch naming the unsupported algorithm, and the group stays usable.
     */
    @Test
    void groupsOnTheCudaTransportGiveDeviceObjectsThroughTheCommonInterfaces() {
        GPU.onEveryRank(group -> {
            assertEquals(CudaTransport.NAME, group.transport().name());
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 4096);
                 Communicator comm = Communicator.create(group)) {
                assertFalse(mem.hostAddressable(), "device memory is not host-addressable");
                assertTrue(mem.unwrap(DeviceMemory.class).isPresent(), "CUDA memory unwraps to DeviceMemory");
                assertTrue(comm.unwrap(DeviceCommunicator.class).isPresent(), "CUDA communicator unwraps to DeviceCommunicator");
                assertTrue(comm.transportName().startsWith(CudaTransport.NAME), comm.transportName());
                assertFalse(comm.supports(Algorithm.RING), "RING is host-only");
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class,
                        () -> comm.allReduce(mem, 0, 16, DType.FLOAT32, ReduceOp.SUM, Algorithm.RING));
                assertTrue(e.getMessage().contains("algorithm"), e.getMessage());
                // still usable after the refused call
                try (Arena arena = Arena.ofConfined()) {
                    double[][] all = new double[GPU.worldSize()][];
                    for (int r = 0; r < GPU.worldSize(); r++) {
                        all[r] = inputs(7, r, 16, DType.FLOAT32);
                    }
                    MemorySegment host = hostOf(arena, all[group.rank()], DType.FLOAT32);
                    mem.copyFromHost(host, 0);
                    comm.allReduce(mem, 0, 16, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                    mem.copyToHost(0, host);
                    for (int i = 0; i < 16; i++) {
                        checkElement("all-reduce after a refused RING", get(host, DType.FLOAT32, i), all, i, DType.FLOAT32,
                                ReduceOp.SUM);
                    }
                }
            }
            return null;
        });
    }

    /**
     * The in-place reduce-scatter and all-gather over ShardPartition blocks (what ZeRO uses), for
     * every dtype and op, with uneven and empty blocks and offsets that take the kernel (multiples of
     * 16 bytes) and the host reduction (not): after the reduce-scatter, rank r's block r matches the
     * float64 reference and every other block of its region is its input unchanged, bitwise; for
     * FLOAT32/BFLOAT16 SUM block r is bitwise equal to the same elements of a TWO_SHOT all-reduce;
     * after the all-gather every rank's region is bitwise the same and every element matches.
     */
    @Test
    void inPlaceShardCollectivesMatchTheFloat64Reference() {
        long[] counts = {1, 10, 1001, 4099, 100_003};
        long[] offsets = {0, 64, 8};
        GPU.onEveryRank(group -> {
            int me = group.rank();
            long seed = 0;
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, 8L * 100_003 + 64);
                 SymmetricMemory twin = SymmetricMemory.allocate(group, 8L * 100_003 + 64);
                 Arena arena = Arena.ofConfined()) {
                for (DType dtype : DType.values()) {
                    for (ReduceOp op : ReduceOp.values()) {
                        for (long count : counts) {
                            for (long offset : offsets) {
                                seed++;
                                String what = "in-place " + dtype + " " + op + " count=" + count + " offset=" + offset
                                        + " rank=" + me;
                                double[][] all = new double[GPU.worldSize()][];
                                for (int r = 0; r < GPU.worldSize(); r++) {
                                    all[r] = inputs(seed, r, count, dtype);
                                }
                                MemorySegment host = hostOf(arena, all[me], dtype);
                                mem.copyFromHost(host, offset);
                                comm.reduceScatter(mem, offset, count, dtype, op);
                                MemorySegment out = arena.allocate(host.byteSize(), 16);
                                mem.copyToHost(offset, out);
                                ShardPartition blocks = ShardPartition.of(count, GPU.worldSize(), dtype);
                                for (long i = 0; i < count; i++) {
                                    if (i >= blocks.start(me) && i < blocks.end(me)) {
                                        checkElement(what + " reduce-scatter", get(out, dtype, i), all, (int) i, dtype, op);
                                    } else if (Double.doubleToRawLongBits(get(out, dtype, i))
                                            != Double.doubleToRawLongBits(all[me][(int) i])) {
                                        fail(what + " reduce-scatter wrote element " + i + " outside this rank's block: "
                                                + get(out, dtype, i) + " expected the input " + all[me][(int) i]);
                                    }
                                }
                                if ((dtype == DType.FLOAT32 || dtype == DType.BFLOAT16) && op == ReduceOp.SUM
                                        && offset % 16 == 0) {
                                    twin.copyFromHost(host, offset);
                                    comm.allReduce(twin, offset, count, dtype, op, Algorithm.TWO_SHOT);
                                    MemorySegment reduced = arena.allocate(host.byteSize(), 16);
                                    twin.copyToHost(offset, reduced);
                                    long from = dtype.bytes(blocks.start(me));
                                    long len = dtype.bytes(blocks.size(me));
                                    assertEquals(-1, out.asSlice(from, len).mismatch(reduced.asSlice(from, len)),
                                            what + ": reduce-scatter block differs bitwise from TWO_SHOT all-reduce");
                                }
                                comm.allGather(mem, offset, count, dtype);
                                mem.copyToHost(offset, out);
                                for (long i = 0; i < count; i++) {
                                    checkElement(what + " all-gather", get(out, dtype, i), all, (int) i, dtype, op);
                                }
                                sameOnEveryRank(group, out, what + " all-gather");
                            }
                        }
                    }
                }
            }
            return null;
        });
    }

    /**
     * Sub-groups on the CUDA transport: a mesh of {@code GPU.worldSize()/2} rows by 2 columns on the world's
     * GPUs, each sub-group with GPU memory and a communicator of its own. Every column, then every row,
     * all-reduces at once (disjoint sub-groups side by side) with ONE_SHOT and TWO_SHOT, and each result
     * matches the float64 reference over that sub-group's members.
     */
    @Test
    void meshSubGroupsRunCollectivesOnTheirOwnGpuMemory() {
        Assumptions.assumeTrue(GPU.worldSize() >= 4 && GPU.worldSize() % 2 == 0, "a mesh of rows and columns needs an even world of"
                + " at least 4 ranks, found " + GPU.worldSize() + " (-Dsymmem4j.test.cudaRanks=4 shares the GPUs)");
        int rows = GPU.worldSize() / 2;
        long count = 5000;
        GPU.onEveryRank(group -> {
            try (DeviceMesh mesh = DeviceMesh.of(group, "row", rows, "col", 2);
                 Arena arena = Arena.ofConfined()) {
                for (String dim : List.of("col", "row")) {
                    Group sub = mesh.group(dim);
                    int n = sub.worldSize();
                    int[] members = new int[n];
                    for (int i = 0; i < n; i++) {
                        members[i] = dim.equals("col") ? mesh.rankAt(mesh.coordinate("row"), i)
                                : mesh.rankAt(i, mesh.coordinate("col"));
                    }
                    assertEquals(group.rank(), members[sub.rank()], "sub-group " + dim + " numbers its members by coordinate");
                    for (Algorithm algorithm : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT)) {
                        long seed = (dim.equals("col") ? 7000 : 8000) + algorithm.ordinal();
                        double[][] all = new double[n][];
                        for (int i = 0; i < n; i++) {
                            all[i] = inputs(seed, members[i], count, DType.FLOAT32);
                        }
                        String what = "mesh " + dim + " " + algorithm + " rank=" + group.rank() + " (sub-group rank "
                                + sub.rank() + " of " + n + ")";
                        try (SymmetricMemory mem = SymmetricMemory.allocate(sub, DType.FLOAT32.bytes(count));
                             Communicator comm = Communicator.create(sub)) {
                            mem.copyFromHost(hostOf(arena, all[sub.rank()], DType.FLOAT32), 0);
                            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                            MemorySegment out = arena.allocate(DType.FLOAT32.bytes(count), 16);
                            mem.copyToHost(0, out);
                            for (int i = 0; i < count; i++) {
                                checkElement(what, get(out, DType.FLOAT32, i), all, i, DType.FLOAT32, ReduceOp.SUM);
                            }
                        }
                    }
                    GPU.cuda().release(sub);
                }
            }
            return null;
        });
    }

    /**
     * Arguments one rank can check alone are refused on every rank before anything is enqueued,
     * naming that rank, and the group stays usable: a read-only device segment as one rank's
     * all-reduce buffer, a ONE_SHOT in-place offset that is not 16-byte aligned (the kernels move
     * 16-byte vectors), and symmetric memory closed on every rank. The device buffers keep their
     * values (copied back and compared), and a TWO_SHOT all-reduce afterwards matches the reference.
     */
    @Test
    void unusableArgumentsAreRefusedOnEveryRankBeforeAnyKernel() {
        int bad = GPU.worldSize() - 1;
        GPU.onEveryRank(group -> {
            int me = group.rank();
            long count = 1024;
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, 4 * count + 64);
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                double[][] all = new double[GPU.worldSize()][];
                for (int r = 0; r < GPU.worldSize(); r++) {
                    all[r] = inputs(31, r, count, DType.FLOAT32);
                }
                MemorySegment buffer = device.allocateDevice(4 * count);
                try {
                    device.copyFromHost(buffer, hostOf(arena, all[me], DType.FLOAT32));
                    MemorySegment passed = me == bad ? buffer.asReadOnly() : buffer;
                    String readOnly = assertThrows(CollectiveMismatchException.class, () ->
                            comm.allReduce(passed, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT)).getMessage();
                    assertTrue(readOnly.contains("rank=" + bad + " buffer is read-only"), readOnly);
                    MemorySegment back = arena.allocate(4 * count, 16);
                    device.copyToHost(back, buffer);
                    for (long i = 0; i < count; i++) {
                        assertEquals(all[me][(int) i], get(back, DType.FLOAT32, i), "a refused call changed element " + i);
                    }
                    String misaligned = assertThrows(CollectiveMismatchException.class, () ->
                            comm.allReduce(mem, 4, 16, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT)).getMessage();
                    assertTrue(misaligned.contains("rank=0 offsetBytes is not 16-byte aligned"), misaligned);
                    comm.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                    device.copyToHost(back, buffer);
                    for (int i = 0; i < count; i++) {
                        checkElement("all-reduce after refusals", get(back, DType.FLOAT32, i), all, i, DType.FLOAT32, ReduceOp.SUM);
                    }
                } finally {
                    device.freeDevice(buffer);
                }
            }
            try (Communicator comm = Communicator.create(group)) {
                SymmetricMemory closed = SymmetricMemory.allocate(group, 4096);
                closed.close();
                String freed = assertThrows(CollectiveMismatchException.class, () ->
                        comm.allReduce(closed, 0, 16, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT)).getMessage();
                assertTrue(freed.contains("rank=" + me + " buffer memory is freed"), freed);
                comm.barrier();
            }
            return null;
        });
    }

    /**
     * The staged collectives on plain device segments (from {@code DeviceCommunicator.allocateDevice}),
     * with a 4 KiB staging so that messages go through it in many pieces: reduce-scatter for every
     * dtype and op, all-gather and broadcast bitwise, all-reduce with ONE_SHOT and TWO_SHOT.
     */
    @Test
    void stagedCollectivesOnDeviceSegmentsMatchTheFloat64Reference() {
        CommunicatorOptions smallStaging = new CommunicatorOptions(4096, 512);
        GPU.onEveryRank(group -> {
            int me = group.rank();
            try (Communicator comm = Communicator.create(group, smallStaging);
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                long seed = 1000;
                long recvCount = 1000;
                for (DType dtype : DType.values()) {
                    for (ReduceOp op : ReduceOp.values()) {
                        seed++;
                        String what = "staged reduce-scatter " + dtype + " " + op + " rank=" + me;
                        double[][] all = new double[GPU.worldSize()][];
                        for (int r = 0; r < GPU.worldSize(); r++) {
                            all[r] = inputs(seed, r, recvCount * GPU.worldSize(), dtype);
                        }
                        MemorySegment send = device.allocateDevice(dtype.bytes(recvCount * GPU.worldSize()));
                        MemorySegment recv = device.allocateDevice(dtype.bytes(recvCount));
                        try {
                            device.copyFromHost(send, hostOf(arena, all[me], dtype));
                            comm.reduceScatter(send, recv, recvCount, dtype, op);
                            MemorySegment out = arena.allocate(dtype.bytes(recvCount), 16);
                            device.copyToHost(out, recv);
                            for (long i = 0; i < recvCount; i++) {
                                checkElement(what, get(out, dtype, i), all, (int) (me * recvCount + i), dtype, op);
                            }
                        } finally {
                            device.freeDevice(send);
                            device.freeDevice(recv);
                        }
                    }
                }
                // all-gather: every rank's 777 bf16 values land in block r of every rank's output, bitwise
                long sendCount = 777;
                double[][] gathered = new double[GPU.worldSize()][];
                for (int r = 0; r < GPU.worldSize(); r++) {
                    gathered[r] = inputs(2000, r, sendCount, DType.BFLOAT16);
                }
                MemorySegment gsend = device.allocateDevice(DType.BFLOAT16.bytes(sendCount));
                MemorySegment grecv = device.allocateDevice(DType.BFLOAT16.bytes(sendCount * GPU.worldSize()));
                try {
                    device.copyFromHost(gsend, hostOf(arena, gathered[me], DType.BFLOAT16));
                    comm.allGather(gsend, grecv, sendCount, DType.BFLOAT16);
                    MemorySegment out = arena.allocate(DType.BFLOAT16.bytes(sendCount * GPU.worldSize()), 16);
                    device.copyToHost(out, grecv);
                    for (int r = 0; r < GPU.worldSize(); r++) {
                        for (int i = 0; i < sendCount; i++) {
                            assertEquals(gathered[r][i], get(out, DType.BFLOAT16, r * sendCount + i),
                                    "staged all-gather rank=" + me + " block " + r + " element " + i);
                        }
                    }
                } finally {
                    device.freeDevice(gsend);
                    device.freeDevice(grecv);
                }
                // broadcast from the last rank: 3001 float64 values, bitwise
                int root = GPU.worldSize() - 1;
                double[] rootData = inputs(3000, root, 3001, DType.FLOAT64);
                MemorySegment buf = device.allocateDevice(DType.FLOAT64.bytes(3001));
                try {
                    double[] mine = me == root ? rootData : inputs(3000, me, 3001, DType.FLOAT64);
                    device.copyFromHost(buf, hostOf(arena, mine, DType.FLOAT64));
                    comm.broadcast(buf, 3001, DType.FLOAT64, root);
                    MemorySegment out = arena.allocate(DType.FLOAT64.bytes(3001), 16);
                    device.copyToHost(out, buf);
                    assertEquals(-1, out.mismatch(hostOf(arena, rootData, DType.FLOAT64)),
                            "broadcast rank=" + me + " differs from the root's data");
                } finally {
                    device.freeDevice(buf);
                }
                // all-reduce of a device segment through the staging, both kernels
                for (Algorithm alg : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT}) {
                    long count = 5003;
                    double[][] all = new double[GPU.worldSize()][];
                    for (int r = 0; r < GPU.worldSize(); r++) {
                        all[r] = inputs(4000 + alg.ordinal(), r, count, DType.FLOAT32);
                    }
                    MemorySegment data = device.allocateDevice(DType.FLOAT32.bytes(count));
                    try {
                        device.copyFromHost(data, hostOf(arena, all[me], DType.FLOAT32));
                        comm.allReduce(data, count, DType.FLOAT32, ReduceOp.SUM, alg);
                        MemorySegment out = arena.allocate(DType.FLOAT32.bytes(count), 16);
                        device.copyToHost(out, data);
                        for (int i = 0; i < count; i++) {
                            checkElement("staged all-reduce " + alg + " rank=" + me, get(out, DType.FLOAT32, i), all, i,
                                    DType.FLOAT32, ReduceOp.SUM);
                        }
                        sameOnEveryRank(group, out, "staged all-reduce " + alg);
                    } finally {
                        device.freeDevice(data);
                    }
                }
            }
            return null;
        });
    }

    /**
     * NCCL_SYMMETRIC: where ranks share a GPU (or NCCL or its windows are missing) it is not supported
     * and the communicator says why; where it runs, all-reduces larger than its window (4 KiB here,
     * so in pieces) of FLOAT32 SUM, FLOAT64 SUM and FLOAT32 MAX match the float64 reference, on
     * symmetric memory and on a plain device segment, with every rank's result bitwise equal.
     */
    @Test
    void ncclSymmetricAllReduceMatchesTheReferenceWhereItIsAvailable() {
        CommunicatorOptions smallWindow = new CommunicatorOptions(4096, 512);
        List<Boolean> ran = GPU.onEveryRank(group -> {
            int me = group.rank();
            try (Communicator comm = Communicator.create(group, smallWindow);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, 8L * 5003);
                 Arena arena = Arena.ofConfined()) {
                CudaCommunicator cudaComm = comm.unwrap(CudaCommunicator.class).orElseThrow();
                if (!comm.supports(Algorithm.NCCL_SYMMETRIC)) {
                    assertTrue(cudaComm.ncclSymmetricUnavailableReason() != null, "unsupported, so a reason is given");
                    assertFalse(comm.supports(Algorithm.NCCL_SYMMETRIC, DType.FLOAT32, ReduceOp.SUM, 16));
                    if (CudaDriver.get().deviceCount() < GPU.worldSize()) {
                        assertFalse(comm.supports(Algorithm.NCCL), "ranks share a GPU: no NCCL");
                    }
                    return false;
                }
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                long count = 5003;
                long seed = 5000;
                for (DType dtype : new DType[] {DType.FLOAT32, DType.FLOAT64}) {
                    for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.MAX}) {
                        if (dtype == DType.FLOAT64 && op == ReduceOp.MAX) {
                            continue;
                        }
                        seed++;
                        double[][] all = new double[GPU.worldSize()][];
                        for (int r = 0; r < GPU.worldSize(); r++) {
                            all[r] = inputs(seed, r, count, dtype);
                        }
                        MemorySegment host = hostOf(arena, all[me], dtype);
                        MemorySegment out = arena.allocate(host.byteSize(), 16);
                        mem.copyFromHost(host, 0);
                        comm.allReduce(mem, 0, count, dtype, op, Algorithm.NCCL_SYMMETRIC);
                        mem.copyToHost(0, out);
                        for (int i = 0; i < count; i++) {
                            checkElement("NCCL_SYMMETRIC " + dtype + " " + op + " rank=" + me, get(out, dtype, i), all, i,
                                    dtype, op);
                        }
                        sameOnEveryRank(group, out, "NCCL_SYMMETRIC " + dtype + " " + op);
                        MemorySegment plain = device.allocateDevice(host.byteSize());
                        try {
                            device.copyFromHost(plain, host);
                            comm.allReduce(plain, count, dtype, op, Algorithm.NCCL_SYMMETRIC);
                            MemorySegment fromPlain = arena.allocate(host.byteSize(), 16);
                            device.copyToHost(fromPlain, plain);
                            assertEquals(-1, fromPlain.mismatch(out), "NCCL_SYMMETRIC " + dtype + " " + op + " rank=" + me
                                    + ": a device segment gives other bits than symmetric memory");
                        } finally {
                            device.freeDevice(plain);
                        }
                    }
                }
                return true;
            }
        });
        Assumptions.assumeTrue(ran.getFirst(), "NCCL_SYMMETRIC unavailable here (checked that it says so)");
    }
}
