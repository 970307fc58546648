package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Sub-groups of threads: {@link Group#split} and {@link DeviceMesh} layouts, collectives on
 * concurrent disjoint sub-groups against float64 references, shape errors, and aborts crossing
 * sub-groups.
 */
class DeviceMeshTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));

    /** Rank {@code worldRank}'s input of case {@code caseId}. */
    static double[] input(int caseId, int worldRank, int count, DType dtype) {
        return TestData.random(caseId * 1000L + worldRank, count, dtype);
    }

    /**
     * All-reduces {@code count} elements on {@code sub} (staged and on symmetric memory) and checks
     * the result against the rank-order reference over the sub-group's members, whose world ranks
     * {@code members} lists in sub-group rank order.
     */
    static void checkAllReduce(Group sub, int[] members, int caseId, int count, DType dtype, ReduceOp op) {
        double[][] inputs = new double[members.length][];
        for (int i = 0; i < members.length; i++) {
            inputs[i] = input(caseId, members[i], count, dtype);
        }
        try (Communicator comm = Communicator.create(sub);
             SymmetricMemory mem = SymmetricMemory.allocate(sub, dtype.bytes(count))) {
            for (Algorithm algorithm : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT}) {
                TestData.write(mem.local(), 0, dtype, inputs[sub.rank()]);
                comm.allReduce(mem, 0, count, dtype, op, algorithm);
                for (int i = 0; i < count; i++) {
                    double exact = TestData.rankOrderResult(inputs, i, dtype, op);
                    double reference = TestData.reference(inputs, i, op);
                    double got = TestData.get(mem.local(), 0, dtype, i);
                    if (Double.compare(exact, got) != 0
                            || Math.abs(got - reference) > TestData.tolerance(inputs, i, dtype, op, reference)) {
                        fail("all-reduce " + algorithm + " " + dtype + " " + op + " on " + sub + " element " + i + " got="
                                + got + " rank-order=" + exact + " float64=" + reference);
                    }
                }
            }
        }
    }

    @Test
    void dpByPpLayoutIsRowMajorAndSubGroupsReduceConcurrently() {
        int dp = 2;
        int pp = 4;
        InJvmWorld.runOnEveryRank(dp * pp, OPTIONS, world -> {
            int w = world.rank();
            try (DeviceMesh mesh = DeviceMesh.of(world, "dp", dp, "pp", pp)) {
                assertEquals(w / pp, mesh.coordinate("dp"), "row-major: dp is the outer dimension");
                assertEquals(w % pp, mesh.coordinate("pp"));
                assertEquals(w, mesh.rankAt(mesh.coordinate("dp"), mesh.coordinate("pp")));
                Group dpGroup = mesh.group("dp");
                Group ppGroup = mesh.group("pp");
                assertEquals(dp, dpGroup.worldSize());
                assertEquals(pp, ppGroup.worldSize());
                assertEquals(mesh.coordinate("dp"), dpGroup.rank());
                assertEquals(mesh.coordinate("pp"), ppGroup.rank());
                // localRank stays the thread's world rank: it names the thread (and GPU), not the sub-group rank
                assertEquals(w, dpGroup.localRank());
                assertEquals(w, ppGroup.localRank());
                // and localWorldSize the world's: every thread shares the machine (a GPU transport sizes grids by it)
                assertEquals(dp * pp, dpGroup.localWorldSize());
                assertEquals(dp * pp, ppGroup.localWorldSize());
                assertTrue(dpGroup.describe(1).contains("world rank " + (pp + w % pp)), dpGroup.describe(1));
                int[] dpMembers = new int[dp];
                for (int i = 0; i < dp; i++) {
                    dpMembers[i] = i * pp + w % pp;
                }
                int[] ppMembers = new int[pp];
                for (int i = 0; i < pp; i++) {
                    ppMembers[i] = (w / pp) * pp + i;
                }
                // the four dp groups and the two pp groups run at the same time, each on its own memory
                for (DType dtype : new DType[] {DType.FLOAT32, DType.FLOAT64}) {
                    for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX}) {
                        checkAllReduce(dpGroup, dpMembers, 1 + op.ordinal(), 4099, dtype, op);
                        checkAllReduce(ppGroup, ppMembers, 11 + op.ordinal(), 70_001, dtype, op);
                    }
                }
            }
            return null;
        });
    }

    @Test
    void dpByPpByTpReduceScatterAndAllGatherOnEveryDimension() {
        InJvmWorld.runOnEveryRank(8, OPTIONS, world -> {
            int w = world.rank();
            try (DeviceMesh mesh = DeviceMesh.of(world, "dp", 2, "pp", 2, "tp", 2)) {
                assertEquals(List.of("dp", "pp", "tp"), mesh.dimensionNames());
                assertEquals(w, 4 * mesh.coordinate("dp") + 2 * mesh.coordinate("pp") + mesh.coordinate("tp"));
                int caseId = 100;
                for (String dim : mesh.dimensionNames()) {
                    Group sub = mesh.group(dim);
                    int n = sub.worldSize();
                    int[] members = new int[n];
                    for (int i = 0; i < n; i++) {
                        int[] c = {mesh.coordinate("dp"), mesh.coordinate("pp"), mesh.coordinate("tp")};
                        c[mesh.dimensionNames().indexOf(dim)] = i;
                        members[i] = mesh.rankAt(c);
                    }
                    assertEquals(w, members[sub.rank()]);
                    int count = 1031;
                    DType dtype = DType.FLOAT32;
                    caseId++;
                    try (Communicator comm = Communicator.create(sub);
                         java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                        // reduce-scatter: block b of the result on rank b = SUM over members of their block b
                        double[][] send = new double[n][];
                        for (int i = 0; i < n; i++) {
                            send[i] = input(caseId, members[i], count * n, dtype);
                        }
                        MemorySegment sendSeg = arena.allocate(dtype.bytes((long) count * n), 64);
                        MemorySegment recvSeg = arena.allocate(dtype.bytes(count), 64);
                        TestData.write(sendSeg, 0, dtype, send[sub.rank()]);
                        comm.reduceScatter(sendSeg, recvSeg, count, dtype, ReduceOp.SUM);
                        for (int i = 0; i < count; i++) {
                            double[][] column = new double[n][1];
                            for (int q = 0; q < n; q++) {
                                column[q][0] = send[q][sub.rank() * count + i];
                            }
                            double reference = TestData.reference(column, 0, ReduceOp.SUM);
                            double got = TestData.get(recvSeg, 0, dtype, i);
                            assertEquals(TestData.rankOrderResult(column, 0, dtype, ReduceOp.SUM), got,
                                    "reduce-scatter on " + dim + " element " + i);
                            assertEquals(reference, got, TestData.tolerance(column, 0, dtype, ReduceOp.SUM, reference));
                        }
                        // all-gather: block q = member q's input
                        MemorySegment agSend = arena.allocate(dtype.bytes(count), 64);
                        MemorySegment agRecv = arena.allocate(dtype.bytes((long) count * n), 64);
                        TestData.write(agSend, 0, dtype, input(caseId + 50, w, count, dtype));
                        comm.allGather(agSend, agRecv, count, dtype);
                        for (int q = 0; q < n; q++) {
                            double[] expected = input(caseId + 50, members[q], count, dtype);
                            for (int i = 0; i < count; i++) {
                                assertEquals(expected[i], TestData.get(agRecv, 0, dtype, (long) q * count + i),
                                        "all-gather on " + dim + " block " + q + " element " + i);
                            }
                        }
                    }
                }
            }
            return null;
        });
    }

    @Test
    void splitGroupsByColorAndOrdersByKey() {
        // 6 ranks: even and odd ranks form two groups, ordered by descending world rank
        List<int[]> seen = InJvmWorld.runOnEveryRank(6, OPTIONS, world -> {
            try (Group sub = world.split(world.rank() % 2, -world.rank())) {
                assertEquals(3, sub.worldSize());
                // nested split: the sub-group splits again, its ranks now in sub-group numbering
                try (Group pair = sub.split(sub.rank() == 2 ? 1 : 0, sub.rank())) {
                    assertEquals(world.rank(), pair.localRank());
                    assertEquals(6, pair.localWorldSize(), "a nested sub-group answers for the whole world");
                    checkAllReduce(pair, pairMembers(world.rank()), 300, 257, DType.FLOAT64, ReduceOp.SUM);
                }
                return new int[] {sub.rank(), sub.localRank()};
            }
        });
        for (int w = 0; w < 6; w++) {
            int expectedRank = 2 - w / 2; // 4,2,0 -> 0,1,2 and 5,3,1 -> 0,1,2
            assertEquals(expectedRank, seen.get(w)[0], "sub-group rank of world rank " + w);
            assertEquals(w, seen.get(w)[1]);
        }
    }

    /** World ranks of world rank w's pair group in splitGroupsByColorAndOrdersByKey, in pair-rank order. */
    private static int[] pairMembers(int w) {
        int parity = w % 2;
        // sub-group order is descending world rank: sub ranks 0,1 are world 4+p, 2+p; sub rank 2 is alone
        return w / 2 == 0 ? new int[] {w} : new int[] {4 + parity, 2 + parity};
    }

    /**
     * Stress: meshes made, used and closed again and again on one world, with random delays between a
     * rank's steps, so ranks set up one sub-group while their peers still work in the previous one;
     * every all-reduce checked exactly (small integers: every order of adding gives the same sum).
     */
    @Test
    void repeatedMeshesWithRandomDelaysStayExact() {
        InJvmWorld.runOnEveryRank(6, OPTIONS, world -> {
            java.util.SplittableRandom random = new java.util.SplittableRandom(world.rank());
            for (int round = 0; round < 40; round++) {
                boolean wide = round % 2 == 0;
                try (DeviceMesh mesh = wide ? DeviceMesh.of(world, "dp", 2, "tp", 3) : DeviceMesh.of(world, "dp", 3, "tp", 2)) {
                    for (String d : mesh.dimensionNames()) {
                        Group sub = mesh.group(d);
                        if (random.nextInt(4) == 0) {
                            Thread.sleep(random.nextInt(3));
                        }
                        try (Communicator comm = Communicator.create(sub);
                             java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                            int count = 1 + random.nextInt(2000);
                            // equal counts on every rank: the sub-group's rank 0 picks (a set-up exchange on the sub-group)
                            count = java.nio.ByteBuffer.wrap(sub.allGatherBytes("count", java.nio.ByteBuffer.allocate(4)
                                    .putInt(count).array()).getFirst()).getInt();
                            MemorySegment buf = arena.allocate(4L * count, 64);
                            for (int i = 0; i < count; i++) {
                                buf.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i, world.rank() + i % 7);
                            }
                            comm.allReduce(buf, count, DType.FLOAT32, ReduceOp.SUM,
                                    round % 3 == 0 ? Algorithm.TWO_SHOT : Algorithm.ONE_SHOT);
                            int memberSum = 0;
                            for (int c = 0; c < sub.worldSize(); c++) {
                                int[] coords = {mesh.coordinate("dp"), mesh.coordinate("tp")};
                                coords[mesh.dimensionNames().indexOf(d)] = c;
                                memberSum += mesh.rankAt(coords);
                            }
                            for (int i = 0; i < count; i++) {
                                float expected = memberSum + sub.worldSize() * (i % 7);
                                float got = buf.getAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i);
                                if (got != expected) {
                                    fail("round " + round + " " + d + " element " + i + " got=" + got + " expected=" + expected);
                                }
                            }
                        }
                    }
                }
            }
            return null;
        });
    }

    @Test
    void shapeProductMustEqualTheWorldSizeOnEveryRank() {
        List<Throwable> thrown = collectFailures(6, world -> DeviceMesh.of(world, "dp", 2, "pp", 2));
        for (Throwable t : thrown) {
            IllegalArgumentException e = assertInstanceOf(IllegalArgumentException.class, t);
            assertTrue(e.getMessage().contains("dp=2,pp=2 has 4 ranks but the group has worldSize=6"), e.getMessage());
        }
    }

    @Test
    void ranksThatDisagreeOnTheShapeAllFailBeforeAnySplit() {
        List<Throwable> thrown = collectFailures(4, world -> world.rank() == 3
                ? DeviceMesh.of(world, "pp", 2, "dp", 2)
                : DeviceMesh.of(world, "dp", 2, "pp", 2));
        for (Throwable t : thrown) {
            IllegalArgumentException e = assertInstanceOf(IllegalArgumentException.class, t);
            assertTrue(e.getMessage().contains("shape mismatch"), e.getMessage());
            assertTrue(e.getMessage().contains("rank 3 (thread 'symmem4j-rank-3'): pp=2,dp=2"), e.getMessage());
        }
    }

    @Test
    void malformedShapesAndUnknownDimensionsAreRejected() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, world -> {
            assertThrows(IllegalArgumentException.class, () -> DeviceMesh.of(world, "dp"));
            assertThrows(IllegalArgumentException.class, () -> DeviceMesh.of(world, "dp", 0));
            assertThrows(IllegalArgumentException.class, () -> DeviceMesh.of(world, "dp", 1, "dp", 2));
            assertThrows(IllegalArgumentException.class, () -> DeviceMesh.of(world, "d p", 2));
            try (DeviceMesh mesh = DeviceMesh.of(world, "dp", 2)) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> mesh.group("tp"));
                assertTrue(e.getMessage().contains("no dimension 'tp'; dimensions are dp=2"), e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> mesh.rankAt(2));
            }
            return null;
        });
    }

    @Test
    void negativeColorFailsOnEveryRank() {
        List<Throwable> thrown = collectFailures(3, world -> world.split(world.rank() == 1 ? -1 : 0, 0));
        for (Throwable t : thrown) {
            IllegalArgumentException e = assertInstanceOf(IllegalArgumentException.class, t);
            assertTrue(e.getMessage().contains("parent rank 1 color=-1"), e.getMessage());
        }
    }

    @Test
    void anAbortInOneSubGroupReachesEveryRankOfTheMesh() {
        // 2 x 2: world rank 3 aborts its pp group; ranks 0 and 1 share no sub-group with it except
        // through rank 1's dp group, so the abort must cross sub-group -> world -> sub-group on the way
        List<Throwable> thrown = collectFailures(4, world -> {
            try (DeviceMesh mesh = DeviceMesh.of(world, "dp", 2, "pp", 2);
                 Communicator dpComm = Communicator.create(mesh.group("dp"));
                 Communicator ppComm = Communicator.create(mesh.group("pp"));
                 java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(DType.FLOAT32.bytes(64), 64);
                for (int step = 0; ; step++) {
                    if (world.rank() == 3 && step == 5) {
                        mesh.group("pp").abort("injected failure in the pp group");
                        throw new IllegalStateException("rank 3 aborted its pp group");
                    }
                    ppComm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                    dpComm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                }
            }
        });
        assertEquals("rank 3 aborted its pp group", thrown.get(3).getMessage());
        for (int r = 0; r < 3; r++) {
            PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown.get(r), "world rank " + r);
            // heard of, not waited out: no elapsed-time bound, which a loaded machine stretches
            assertNotEquals(PeerTimeoutException.Reason.DEADLINE_PASSED, e.reason(), e.getMessage());
            assertTrue(e.getMessage().contains("injected failure in the pp group"), e.getMessage());
            assertTrue(e.getMessage().contains("rank 1 of 'pp' (world rank 3"), "names the culprit's world rank: "
                    + e.getMessage());
        }
    }

    /** Runs {@code task} on every rank of a new world; returns what each rank threw (every rank must throw). */
    static List<Throwable> collectFailures(int n, InJvmWorld.RankTask<?> task) {
        List<Throwable> thrown = new ArrayList<>(java.util.Collections.nCopies(n, null));
        InJvmWorld.runOnEveryRank(n, OPTIONS, world -> {
            try {
                task.run(world);
                fail("rank " + world.rank() + " did not fail");
            } catch (Exception e) {
                thrown.set(world.rank(), e);
            }
            return null;
        });
        return thrown;
    }
}
