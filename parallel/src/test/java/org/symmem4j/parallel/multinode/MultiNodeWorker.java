package org.symmem4j.parallel.multinode;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.zip.CRC32C;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.mpi.Mpi;
import org.symmem4j.parallel.mpi.MpiComm;

/**
 * One process of {@link MultiNodeCollectivesTest}, started by {@code mpirun}: joins the process group
 * (Open MPI's rank), builds the hierarchical communicator over pretended machines, and checks every
 * collective against a float64 reference; results must also be bitwise identical on every rank. Mode
 * {@code die-at-allreduce}: rank 3 halts before the second all-reduce (a machine's process killed mid-run).
 * Mode {@code refusals}: one rank's bad argument, for every collective, refused on every rank ({@link #refusals}).
 * Modes {@code refusals check}: the refusals, then the float64 check on the same communicator (one job for both
 * cases: a launch costs each of the four processes a JVM start).
 */
public final class MultiNodeWorker {

    private MultiNodeWorker() {
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "check";
        boolean checkAfter = args.length > 1 && args[1].equals("check");
        MpiComm world = Mpi.world();
        // on MultiNodeTransport, as a job across machines joins: its memories are each machine's own
        try (ProcessGroup group = ProcessGroup.fromEnvironment(org.symmem4j.parallel.GroupOptions.defaults(),
                MultiNodeTransport.over(world))) {
            try (HierarchicalCommunicator comm = HierarchicalCommunicator.create(group, world)) {
                NodeTopology t = comm.topology();
                if (mode.equals("die-at-allreduce")) {
                    dieMidRun(group.rank(), comm);
                    return;
                }
                if (mode.equals("refusals")) {
                    int cases = refusals(group, comm);
                    System.out.println("rank " + group.rank() + " REFUSALS OK: " + cases + " cases");
                    if (!checkAfter) {
                        return;
                    }
                }
                int checks = 0;
                for (DType dtype : new DType[] {DType.FLOAT32, DType.FLOAT64}) {
                    for (long count : new long[] {1, 7, 1000, 65_537}) {
                        for (Algorithm algorithm : new Algorithm[] {Algorithm.HIERARCHICAL, Algorithm.MPI}) {
                            for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX}) {
                                checkAllReduce(group, comm, dtype, count, algorithm, op);
                                checks++;
                            }
                        }
                        checkReduceScatter(group, comm, dtype, count);
                        checkAllGather(group, comm, dtype, count);
                        checkInPlaceShards(group, comm, dtype, count);
                        checkBroadcast(group, comm, dtype, count, group.worldSize() - 1);
                        checkBroadcast(group, comm, dtype, count, 0);
                        checks += 5;
                    }
                }
                checkTransportAcrossMachines(group, t);
                checks++;
                comm.barrier();
                System.out.println("rank " + group.rank() + " OK: " + checks + " checks on " + t.nodes() + " machines x "
                        + t.ranksPerNode() + " ranks (node " + t.node() + ", local rank " + t.localRank() + ")");
            }
        }
    }

    /**
     * For every collective, one rank (in turn, on either machine) passes an argument it can tell is bad on
     * its own — a read-only destination, a freed one, a heap buffer MPI cannot read, a range outside its
     * symmetric memory — or a count that differs: every rank must throw {@link CollectiveMismatchException}
     * naming that rank, its buffers unchanged byte for byte, and then run the same collective correctly.
     * Prints {@code REFUSED <case> rank=<bad>: <message>} per case; returns the number of cases.
     */
    private static int refusals(ProcessGroup group, HierarchicalCommunicator comm) {
        int n = group.worldSize();
        int me = group.rank();
        long count = 1000;
        DType dtype = DType.FLOAT64;
        String[] kinds = {"all-reduce/HIERARCHICAL", "all-reduce/MPI", "reduce-scatter", "all-gather", "broadcast"};
        String[] defects = {"read-only", "freed", "heap", "count"};
        int cases = 0;
        try (Arena arena = Arena.ofConfined()) {
            for (String defect : defects) {
                for (String kind : kinds) {
                    int bad = cases++ % n;
                    int root = (bad + 1) % n;
                    boolean oneBuffer = kind.startsWith("all-reduce") || kind.equals("broadcast");
                    long sendCount = kind.equals("reduce-scatter") ? count * n : count;
                    MemorySegment send = filled(arena, dtype, sendCount, me);
                    MemorySegment dst = oneBuffer ? send : arena.allocate(dtype.bytes(kind.equals("all-gather") ? count * n : count), 64);
                    byte[] sendBefore = send.toArray(ValueLayout.JAVA_BYTE);
                    byte[] dstBefore = dst.toArray(ValueLayout.JAVA_BYTE);
                    MemorySegment badDst = dst;
                    long badCount = count;
                    if (me == bad) {
                        switch (defect) {
                            case "read-only" -> badDst = dst.asReadOnly();
                            case "freed" -> {
                                try (Arena gone = Arena.ofShared()) {
                                    badDst = gone.allocate(dst.byteSize(), 64);
                                }
                            }
                            case "heap" -> badDst = MemorySegment.ofArray(new double[(int) (dst.byteSize() / 8)]);
                            default -> badCount = count - 1;
                        }
                    }
                    try {
                        collective(comm, kind, oneBuffer ? badDst : send, badDst, badCount, dtype, root);
                        throw new AssertionError(kind + " with a bad " + defect + " on rank " + bad + " was not refused on rank " + me);
                    } catch (CollectiveMismatchException e) {
                        String names = defect.equals("count") ? "rank=" + bad + " count=" + (count - 1) : "rejected: rank=" + bad + " ";
                        if (!e.getMessage().contains(names)) {
                            throw new AssertionError("the refusal does not name rank " + bad + " (" + names + "): " + e.getMessage(), e);
                        }
                        System.out.println("REFUSED " + kind + " " + defect + " rank=" + bad + ": " + e.getMessage());
                    }
                    if (!java.util.Arrays.equals(sendBefore, send.toArray(ValueLayout.JAVA_BYTE))
                            || !java.util.Arrays.equals(dstBefore, dst.toArray(ValueLayout.JAVA_BYTE))) {
                        throw new AssertionError("a refused " + kind + " changed rank " + me + "'s buffers");
                    }
                    collective(comm, kind, send, dst, count, dtype, root);
                    for (long i = 0; i < (kind.equals("all-gather") ? count * n : count); i++) {
                        double expected = switch (kind) {
                            case "reduce-scatter" -> reference(n, dtype, me * count + i, ReduceOp.SUM);
                            case "all-gather" -> value((int) (i / count), i % count);
                            case "broadcast" -> value(root, i);
                            default -> reference(n, dtype, i, ReduceOp.SUM);
                        };
                        long at = kind.equals("reduce-scatter") ? me * count + i : i;
                        boolean exact = !kind.startsWith("all-reduce") && !kind.equals("reduce-scatter") || at % 2 == 0;
                        double got = get(dst, dtype, i);
                        if (exact ? got != expected : Math.abs(got - expected) > 1e-12 * (1 + magnitude(n, at))) {
                            throw new AssertionError(kind + " after a refused call, element " + i + ": got " + got + " expected "
                                    + expected + " (float64 reference) on rank " + me);
                        }
                    }
                }
            }
        }
        // in place: one rank's range outside its buffer of the machine's memory
        int bad = cases++ % n;
        try (org.symmem4j.parallel.SymmetricMemory memory = org.symmem4j.parallel.SymmetricMemory.allocate(group, dtype.bytes(count))) {
            for (long i = 0; i < count; i++) {
                set(memory.local(), dtype, i, value(me, i));
            }
            byte[] before = memory.local().toArray(ValueLayout.JAVA_BYTE);
            try {
                comm.allReduce(memory, me == bad ? 8 : 0, count, dtype, ReduceOp.SUM, Algorithm.HIERARCHICAL);
                throw new AssertionError("an in-place all-reduce past the memory on rank " + bad + " was not refused on rank " + me);
            } catch (CollectiveMismatchException e) {
                if (!e.getMessage().contains("rejected: rank=" + bad + " offsetBytes is outside")) {
                    throw new AssertionError("the refusal does not name rank " + bad + ": " + e.getMessage(), e);
                }
                System.out.println("REFUSED in-place all-reduce/HIERARCHICAL range rank=" + bad + ": " + e.getMessage());
            }
            if (!java.util.Arrays.equals(before, memory.local().toArray(ValueLayout.JAVA_BYTE))) {
                throw new AssertionError("a refused in-place all-reduce changed rank " + me + "'s memory");
            }
            comm.allReduce(memory, 0, count, dtype, ReduceOp.SUM, Algorithm.HIERARCHICAL);
            for (long i = 0; i < count; i += 2) {
                if (get(memory.local(), dtype, i) != reference(n, dtype, i, ReduceOp.SUM)) {
                    throw new AssertionError("in-place all-reduce after a refused call, element " + i + " on rank " + me);
                }
            }
        }
        return cases;
    }

    private static void collective(HierarchicalCommunicator comm, String kind, MemorySegment send, MemorySegment dst, long count,
                                   DType dtype, int root) {
        switch (kind) {
            case "reduce-scatter" -> comm.reduceScatter(send, dst, count, dtype, ReduceOp.SUM);
            case "all-gather" -> comm.allGather(send, dst, count, dtype);
            case "broadcast" -> comm.broadcast(dst, count, dtype, root);
            default -> comm.allReduce(dst, count, dtype, ReduceOp.SUM, Algorithm.valueOf(kind.substring("all-reduce/".length())));
        }
    }

    /** Rank r's value at i: integers (exact in every order) on even i, fractions (order-dependent) on odd i. */
    static double value(int rank, long i) {
        return i % 2 == 0 ? (rank + 1) * ((i % 13) - 6) : Math.sin(rank * 31.0 + i) * 1000.5;
    }

    private static MemorySegment filled(Arena arena, DType dtype, long count, int rank) {
        MemorySegment s = arena.allocate(dtype.bytes(Math.max(1, count)), 64);
        for (long i = 0; i < count; i++) {
            set(s, dtype, i, value(rank, i));
        }
        return s;
    }

    static void set(MemorySegment s, DType dtype, long i, double v) {
        if (dtype == DType.FLOAT32) {
            s.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) v);
        } else {
            s.setAtIndex(ValueLayout.JAVA_DOUBLE, i, v);
        }
    }

    static double get(MemorySegment s, DType dtype, long i) {
        return dtype == DType.FLOAT32 ? s.getAtIndex(ValueLayout.JAVA_FLOAT, i) : s.getAtIndex(ValueLayout.JAVA_DOUBLE, i);
    }

    /** The reference of element i over every rank, in float64, from the values as each rank's dtype holds them. */
    private static double reference(int ranks, DType dtype, long i, ReduceOp op) {
        double acc = op == ReduceOp.MAX ? Double.NEGATIVE_INFINITY : 0;
        for (int r = 0; r < ranks; r++) {
            double v = dtype == DType.FLOAT32 ? (float) value(r, i) : value(r, i);
            acc = op == ReduceOp.MAX ? Math.max(acc, v) : acc + v;
        }
        return op == ReduceOp.AVG ? acc / ranks : acc;
    }

    /** The sum of the summands' magnitudes: what rounding in any summation order is relative to. */
    private static double magnitude(int ranks, long i) {
        double m = 0;
        for (int r = 0; r < ranks; r++) {
            m += Math.abs(value(r, i));
        }
        return m;
    }

    private static void checkAllReduce(ProcessGroup group, HierarchicalCommunicator comm, DType dtype, long count,
                                       Algorithm algorithm, ReduceOp op) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = filled(arena, dtype, count, group.rank());
            comm.allReduce(buffer, count, dtype, op, algorithm);
            double tolerance = dtype == DType.FLOAT32 ? 1e-5 : 1e-12;
            for (long i = 0; i < count; i++) {
                double expected = reference(group.worldSize(), dtype, i, op);
                double got = get(buffer, dtype, i);
                boolean exact = i % 2 == 0 && op != ReduceOp.AVG;
                if (exact ? got != expected : Math.abs(got - expected) > tolerance * (1 + magnitude(group.worldSize(), i))) {
                    throw new AssertionError(algorithm + " all-reduce " + op + " " + dtype + " count=" + count + " element " + i
                            + ": got " + got + " expected " + expected + " (float64 reference) on rank " + group.rank());
                }
            }
            sameOnEveryRank(group, buffer, dtype.bytes(count), algorithm + " all-reduce " + op + " " + dtype + " " + count);
        }
    }

    private static void checkReduceScatter(ProcessGroup group, HierarchicalCommunicator comm, DType dtype, long count) {
        int n = group.worldSize();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment send = filled(arena, dtype, count * n, group.rank());
            MemorySegment recv = arena.allocate(dtype.bytes(Math.max(1, count)), 64);
            comm.reduceScatter(send, recv, count, dtype, ReduceOp.SUM);
            for (long i = 0; i < count; i++) {
                long global = group.rank() * count + i;
                double expected = reference(n, dtype, global, ReduceOp.SUM);
                double got = get(recv, dtype, i);
                double tolerance = dtype == DType.FLOAT32 ? 1e-5 : 1e-12;
                if (global % 2 == 0 ? got != expected : Math.abs(got - expected) > tolerance * (1 + magnitude(n, global))) {
                    throw new AssertionError("reduce-scatter " + dtype + " count=" + count + " element " + i + ": got " + got
                            + " expected " + expected + " on rank " + group.rank());
                }
            }
        }
    }

    private static void checkAllGather(ProcessGroup group, HierarchicalCommunicator comm, DType dtype, long count) {
        int n = group.worldSize();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment send = filled(arena, dtype, count, group.rank());
            MemorySegment recv = arena.allocate(dtype.bytes(Math.max(1, count * n)), 64);
            comm.allGather(send, recv, count, dtype);
            for (int r = 0; r < n; r++) {
                for (long i = 0; i < count; i++) {
                    double expected = dtype == DType.FLOAT32 ? (float) value(r, i) : value(r, i);
                    if (get(recv, dtype, r * count + i) != expected) {
                        throw new AssertionError("all-gather " + dtype + " count=" + count + ": rank " + r + "'s element " + i
                                + " is " + get(recv, dtype, r * count + i) + " expected " + expected + " on rank " + group.rank());
                    }
                }
            }
        }
    }

    /**
     * ZeRO's in-place forms over {@link org.symmem4j.parallel.ShardPartition} blocks (the last one shorter, or
     * empty): the reduce-scatter leaves block r reduced in rank r's buffer and the other blocks as they were; the
     * all-gather then gives every rank every reduced block, the same bits everywhere. The memory is the group's own
     * here (one machine under the pretence); the communicator touches only this rank's buffer, as with
     * {@code MultiNodeTransport}'s per-machine memory.
     */
    private static void checkInPlaceShards(ProcessGroup group, HierarchicalCommunicator comm, DType dtype, long count) {
        int n = group.worldSize();
        int me = group.rank();
        long offset = 64;
        try (org.symmem4j.parallel.SymmetricMemory memory = org.symmem4j.parallel.SymmetricMemory.allocate(group,
                offset + dtype.bytes(Math.max(1, count)))) {
            MemorySegment region = memory.local().asSlice(offset);
            for (long i = 0; i < count; i++) {
                set(region, dtype, i, value(me, i));
            }
            org.symmem4j.parallel.ShardPartition blocks = org.symmem4j.parallel.ShardPartition.of(count, n, dtype);
            comm.reduceScatter(memory, offset, count, dtype, ReduceOp.SUM);
            double tolerance = dtype == DType.FLOAT32 ? 1e-5 : 1e-12;
            for (long i = 0; i < count; i++) {
                boolean mine = i >= blocks.start(me) && i < blocks.end(me);
                double expected = mine ? reference(n, dtype, i, ReduceOp.SUM) : (dtype == DType.FLOAT32 ? (float) value(me, i)
                        : value(me, i));
                double got = get(region, dtype, i);
                boolean exact = !mine || i % 2 == 0;
                if (exact ? got != expected : Math.abs(got - expected) > tolerance * (1 + magnitude(n, i))) {
                    throw new AssertionError("in-place reduce-scatter " + dtype + " count=" + count + " element " + i + " ("
                            + (mine ? "this rank's block" : "another rank's block, to be left as it was") + "): got " + got
                            + " expected " + expected + " on rank " + me);
                }
            }
            comm.allGather(memory, offset, count, dtype);
            for (long i = 0; i < count; i++) {
                double expected = reference(n, dtype, i, ReduceOp.SUM);
                double got = get(region, dtype, i);
                if (i % 2 == 0 ? got != expected : Math.abs(got - expected) > tolerance * (1 + magnitude(n, i))) {
                    throw new AssertionError("in-place all-gather after the reduce-scatter " + dtype + " count=" + count
                            + " element " + i + ": got " + got + " expected " + expected + " on rank " + me);
                }
            }
            sameOnEveryRank(group, region, dtype.bytes(count), "in-place reduce-scatter + all-gather " + dtype + " " + count);
        }
    }

    /**
     * {@link MultiNodeTransport} itself: the group's communicator is the hierarchical one; its memory maps this
     * machine's ranks and refuses another machine's, naming both; a sub-group of one rank per machine (which spans
     * machines) gets a hierarchical communicator of its own whose all-reduce sums its members' values exactly; a
     * sub-group inside a machine gets the host transport's.
     */
    private static void checkTransportAcrossMachines(ProcessGroup group, NodeTopology t) {
        // what the transport says it can do for this group, and that its refusals are the record's words
        org.symmem4j.parallel.TransportCapabilities caps = group.transport().capabilities(group);
        if (!caps.equals(MultiNodeTransport.capabilities(t))) {
            throw new AssertionError("capabilities across machines on rank " + group.rank() + ": " + caps.table());
        }
        try (Arena shared = Arena.ofShared()) {
            org.symmem4j.parallel.SymmetricMemory.register(group, shared.allocate(64)).close();
            throw new AssertionError("register across machines was accepted on rank " + group.rank());
        } catch (UnsupportedOperationException refused) {
            String expected = caps.get(org.symmem4j.parallel.TransportCapabilities.Capability.REGISTER).reason();
            if (!refused.getMessage().equals(expected)) {
                throw new AssertionError("register refused with '" + refused.getMessage() + "', expected '" + expected + "'");
            }
        }
        try (org.symmem4j.parallel.Communicator c = org.symmem4j.parallel.Communicator.create(group)) {
            if (!c.transportName().startsWith("hierarchical(")) {
                throw new AssertionError("the group's communicator on MultiNodeTransport is " + c.transportName());
            }
        }
        try (org.symmem4j.parallel.SymmetricMemory m = org.symmem4j.parallel.SymmetricMemory.allocate(group, 64)) {
            int sameMachine = t.node() * t.ranksPerNode() + (t.localRank() + 1) % t.ranksPerNode();
            m.peer(sameMachine).byteSize();
            int otherMachine = ((t.node() + 1) % t.nodes()) * t.ranksPerNode() + t.localRank();
            try {
                m.peer(otherMachine);
                throw new AssertionError("rank " + group.rank() + " mapped rank " + otherMachine + " of another machine");
            } catch (UnsupportedOperationException expected) {
                if (!expected.getMessage().contains("machine " + t.node())) {
                    throw new AssertionError("the refusal names neither machine: " + expected.getMessage());
                }
                if (!expected.getMessage().contains(NodeLocalSymmetricMemory.STAYS_INSIDE_A_MACHINE)) {
                    throw new AssertionError("the refusal does not give the capability record's reason: "
                            + expected.getMessage());
                }
            }
            m.barrier();
        }
        // one rank per machine (a data-parallel dimension across machines): a hierarchical communicator of its own, over
        // an MPI communicator of its processes alone; its all-reduce sums exactly its members' values
        try (org.symmem4j.parallel.Group acrossMachines = group.split(t.localRank(), t.node(), "across");
             org.symmem4j.parallel.Communicator c = org.symmem4j.parallel.Communicator.create(acrossMachines);
             Arena arena = Arena.ofConfined()) {
            if (!c.transportName().startsWith("hierarchical(")) {
                throw new AssertionError("a sub-group spanning machines got " + c.transportName());
            }
            int count = 1000;
            MemorySegment buffer = arena.allocate(8L * count, 8);
            for (org.symmem4j.parallel.Algorithm algorithm : List.of(org.symmem4j.parallel.Algorithm.HIERARCHICAL,
                    org.symmem4j.parallel.Algorithm.MPI)) {
                for (int i = 0; i < count; i++) {
                    buffer.setAtIndex(java.lang.foreign.ValueLayout.JAVA_DOUBLE, i, group.rank() * 1000.0 + i);
                }
                c.allReduce(buffer, count, DType.FLOAT64, org.symmem4j.parallel.ReduceOp.SUM, algorithm);
                for (int i = 0; i < count; i++) {
                    double expected = 0;
                    for (int node = 0; node < t.nodes(); node++) {
                        expected += (node * t.ranksPerNode() + t.localRank()) * 1000.0 + i;
                    }
                    double got = buffer.getAtIndex(java.lang.foreign.ValueLayout.JAVA_DOUBLE, i);
                    if (got != expected) {
                        throw new AssertionError(algorithm + " all-reduce of the sub-group across machines (local rank "
                                + t.localRank() + ") element " + i + ": got " + got + " expected " + expected + " on rank "
                                + group.rank());
                    }
                }
            }
        }
        try (org.symmem4j.parallel.Group machine = group.split(t.node(), t.localRank(), "inside");
             org.symmem4j.parallel.Communicator c = org.symmem4j.parallel.Communicator.create(machine)) {
            if (c.transportName().startsWith("hierarchical(")) {
                throw new AssertionError("a sub-group inside one machine got " + c.transportName());
            }
            // inside one machine: the host transport's answers (register refused across processes), sub-groups served
            org.symmem4j.parallel.TransportCapabilities inside = machine.transport().capabilities(machine);
            org.symmem4j.parallel.TransportCapabilities host = org.symmem4j.parallel.host.SharedMemoryTransport
                    .capabilities();
            if (!inside.transport().equals(MultiNodeTransport.NAME) || !inside.entries().equals(host.entries())) {
                throw new AssertionError("capabilities inside one machine on rank " + group.rank() + ": " + inside.table());
            }
        }
    }

    private static void checkBroadcast(ProcessGroup group, HierarchicalCommunicator comm, DType dtype, long count, int root) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = filled(arena, dtype, count, group.rank());
            comm.broadcast(buffer, count, dtype, root);
            for (long i = 0; i < count; i++) {
                double expected = dtype == DType.FLOAT32 ? (float) value(root, i) : value(root, i);
                if (get(buffer, dtype, i) != expected) {
                    throw new AssertionError("broadcast from " + root + " " + dtype + " count=" + count + " element " + i
                            + " is " + get(buffer, dtype, i) + " expected " + expected + " on rank " + group.rank());
                }
            }
        }
    }

    /** Every rank's CRC-32C of the result must equal rank 0's: bitwise identical everywhere. */
    private static void sameOnEveryRank(ProcessGroup group, MemorySegment result, long bytes, String what) {
        CRC32C crc = new CRC32C();
        crc.update(result.asSlice(0, bytes).asByteBuffer());
        long mine = crc.getValue();
        List<byte[]> all = group.allGatherBytes("crc-" + what.replace(' ', '-'), ByteBuffer.allocate(8).putLong(mine).array());
        for (int r = 0; r < all.size(); r++) {
            long theirs = ByteBuffer.wrap(all.get(r)).getLong();
            if (theirs != mine) {
                throw new AssertionError(what + ": rank " + r + "'s result differs bitwise from rank " + group.rank() + "'s");
            }
        }
    }

    private static void dieMidRun(int rank, HierarchicalCommunicator comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = filled(arena, DType.FLOAT32, 4096, rank);
            comm.allReduce(buffer, 4096, DType.FLOAT32, ReduceOp.SUM, Algorithm.HIERARCHICAL);
            if (rank == 3) {
                System.out.println("rank 3 halts now");
                System.out.flush();
                Runtime.getRuntime().halt(9);
            }
            comm.allReduce(buffer, 4096, DType.FLOAT32, ReduceOp.SUM, Algorithm.HIERARCHICAL);
            System.out.println("rank " + rank + " finished the second all-reduce without rank 3: wrong");
        }
    }
}
