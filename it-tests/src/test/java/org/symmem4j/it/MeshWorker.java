package org.symmem4j.it;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One process of a cross-process device-mesh test ({@link ProcessWorker} scenarios {@code mesh} and
 * {@code mesh-abort}).
 * <ul>
 *   <li>{@code mesh <name=size,...>}: lays the process group out as the mesh, and on every dimension's
 *       sub-group (all at once: disjoint sub-groups run concurrently) all-reduces (one-shot and two-shot,
 *       float32 and float64 SUM, on symmetric memory), reduce-scatters and all-gathers every member's
 *       seeded input; every element is checked here against the float64 sum over the members, which
 *       this process computes from their seeds; prints {@code MESH <dimension> <sub rank> <sub size>} per
 *       dimension.</li>
 *   <li>{@code mesh-abort}: a 2 x 2 mesh; every rank all-reduces on its pp group, then its dp group, in a
 *       loop; world rank 3 aborts its pp group at step 5. Every rank must fail; each prints
 *       {@code REASON <reason>} of its {@link PeerTimeoutException} before {@code FAILED}.</li>
 * </ul>
 */
final class MeshWorker {

    private static final int COUNT = 4099;

    private MeshWorker() {
    }

    static void mesh(String shapeText) {
        List<Object> shape = new ArrayList<>();
        for (String dim : shapeText.split(",")) {
            String[] kv = dim.split("=");
            shape.add(kv[0]);
            shape.add(Integer.parseInt(kv[1]));
        }
        try (ProcessGroup world = ProcessGroup.fromEnvironment();
             DeviceMesh mesh = DeviceMesh.of(world, shape.toArray())) {
            int w = world.rank();
            List<String> names = mesh.dimensionNames();
            for (String dim : names) {
                Group sub = mesh.group(dim);
                check(sub.localRank() == world.localRank(), "localRank of " + dim + " is the process's LOCAL_RANK");
                check(sub.localWorldSize() == world.localWorldSize(), "localWorldSize of " + dim + " is the world's");
                check(sub.rank() == mesh.coordinate(dim), "sub-group rank is the coordinate along " + dim);
                int[] members = new int[sub.worldSize()];
                for (int i = 0; i < members.length; i++) {
                    int[] c = new int[names.size()];
                    for (int d = 0; d < c.length; d++) {
                        c[d] = mesh.coordinate(names.get(d));
                    }
                    c[names.indexOf(dim)] = i;
                    members[i] = mesh.rankAt(c);
                }
                check(sub.describe(0).contains("parent rank " + members[0] + " (pid "), sub.describe(0));
                checkCollectives(dim, sub, members, w);
                System.out.println("MESH " + dim + " " + sub.rank() + " " + sub.worldSize());
            }
        }
    }

    /** Rank {@code worldRank}'s input for case {@code caseId}, exactly representable in float32. */
    static double[] input(int caseId, int worldRank, int count) {
        SplittableRandom random = new SplittableRandom(caseId * 7919L + worldRank);
        double[] x = new double[count];
        for (int i = 0; i < count; i++) {
            x[i] = random.nextInt(-1 << 12, 1 << 12) / 64.0; // small dyadic values: every sum is exact
        }
        return x;
    }

    private static void checkCollectives(String dim, Group sub, int[] members, int worldRank) {
        int n = members.length;
        try (Communicator comm = Communicator.create(sub);
             SymmetricMemory mem = SymmetricMemory.allocate(sub, 8L * COUNT);
             Arena arena = Arena.ofConfined()) {
            int caseId = 1;
            for (DType dtype : new DType[] {DType.FLOAT32, DType.FLOAT64}) {
                for (Algorithm algorithm : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT}) {
                    caseId++;
                    write(mem.local(), dtype, input(caseId, worldRank, COUNT));
                    comm.allReduce(mem, 0, COUNT, dtype, ReduceOp.SUM, algorithm);
                    double[] sum = new double[COUNT];
                    for (int member : members) {
                        double[] x = input(caseId, member, COUNT);
                        for (int i = 0; i < COUNT; i++) {
                            sum[i] += x[i];
                        }
                    }
                    for (int i = 0; i < COUNT; i++) {
                        check(read(mem.local(), dtype, i) == sum[i], "all-reduce " + algorithm + " " + dtype + " on " + dim
                                + " element " + i + " got=" + read(mem.local(), dtype, i) + " expected=" + sum[i]);
                    }
                }
            }
            // reduce-scatter: this rank's block of the SUM over members; all-gather: every member's block
            int block = 1031;
            DType dtype = DType.FLOAT32;
            MemorySegment send = arena.allocate(4L * block * n, 64);
            MemorySegment recv = arena.allocate(4L * block, 64);
            write(send, dtype, input(50, worldRank, block * n));
            comm.reduceScatter(send, recv, block, dtype, ReduceOp.SUM);
            for (int i = 0; i < block; i++) {
                double expected = 0;
                for (int member : members) {
                    expected += input(50, member, block * n)[sub.rank() * block + i];
                }
                check(read(recv, dtype, i) == expected, "reduce-scatter on " + dim + " element " + i);
            }
            MemorySegment gathered = arena.allocate(4L * block * n, 64);
            write(recv, dtype, input(60, worldRank, block));
            comm.allGather(recv, gathered, block, dtype);
            for (int q = 0; q < n; q++) {
                double[] expected = input(60, members[q], block);
                for (int i = 0; i < block; i++) {
                    check(read(gathered, dtype, (long) q * block + i) == expected[i],
                            "all-gather on " + dim + " block " + q + " element " + i);
                }
            }
        }
    }

    static void meshAbort() {
        try (ProcessGroup world = ProcessGroup.fromEnvironment();
             DeviceMesh mesh = DeviceMesh.of(world, "dp", 2, "pp", 2);
             Communicator dpComm = Communicator.create(mesh.group("dp"));
             Communicator ppComm = Communicator.create(mesh.group("pp"));
             Arena arena = Arena.ofConfined()) {
            MemorySegment buf = arena.allocate(4L * 64, 64);
            for (int step = 0; ; step++) {
                if (world.rank() == 3 && step == 5) {
                    mesh.group("pp").abort("injected failure in the pp group");
                    throw new IllegalStateException("rank 3 aborted its pp group");
                }
                ppComm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                dpComm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
            }
        } catch (PeerTimeoutException e) {
            System.out.println("REASON " + e.reason());
            throw e;
        }
    }

    private static void write(MemorySegment seg, DType dtype, double[] values) {
        for (int i = 0; i < values.length; i++) {
            if (dtype == DType.FLOAT64) {
                seg.setAtIndex(ValueLayout.JAVA_DOUBLE, i, values[i]);
            } else {
                seg.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) values[i]);
            }
        }
    }

    private static double read(MemorySegment seg, DType dtype, long i) {
        return dtype == DType.FLOAT64 ? seg.getAtIndex(ValueLayout.JAVA_DOUBLE, i) : seg.getAtIndex(ValueLayout.JAVA_FLOAT, i);
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError("mesh check failed: " + what);
        }
    }
}
