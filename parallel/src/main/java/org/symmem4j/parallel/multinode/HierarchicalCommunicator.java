package org.symmem4j.parallel.multinode;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.mpi.MpiComm;

/**
 * Collectives of a group that spans machines: symmetric memory inside each machine (the machine's
 * ranks form a sub-group on the group's own transport), MPI between machines (the ranks with the same
 * local rank form an MPI communicator, one rank per machine), as Horovod and NCCL arrange them.
 *
 * <pre>
 *   all-reduce (HIERARCHICAL), L ranks per machine, N machines, the buffer padded to a multiple of L x N:
 *     1. inside each machine: reduce-scatter   -> local rank l holds block l summed over its machine
 *     2. between machines:    reduce-scatter   -> sub-block n of block l summed over every machine (on machine n)
 *     3. between machines:    all-gather       -> block l summed over everything, on every machine
 *     4. inside each machine: all-gather       -> the whole sum on every rank
 * </pre>
 *
 * Every element is reduced once, in a fixed order (inside a machine in local-rank order, between
 * machines in MPI's order for that size), then copied: the result is deterministic and bitwise
 * identical on every rank; it is not bitwise equal to a flat all-reduce (another association of the
 * sums). {@link Algorithm#MPI} is the flat alternative: one {@code MPI_Allreduce} over every rank.
 * Reduce-scatter, all-gather and broadcast are hierarchical likewise; barrier is a machine barrier,
 * an MPI barrier and a machine barrier. FLOAT32 and FLOAT64 (MPI has no bfloat16); SUM, AVG (a sum
 * divided by the size, the same division on every rank), MAX, MIN. Arguments are agreed over the whole
 * group before any data moves ({@link #agree}: one small MPI all-reduce): a count, dtype, op, algorithm
 * or root that differs, or a buffer that some rank finds unusable on its own (null, on the Java heap,
 * too short, read-only where it is written, freed, confined to another thread), throws the same
 * {@link CollectiveMismatchException} on every rank, naming the rank, with nothing written; the
 * communicator stays usable. Symmetric memory cannot span
 * machines: the {@link SymmetricMemory} forms work on this rank's buffer of host memory (what
 * {@link MultiNodeTransport} allocates: each machine's own) — the all-reduce in place, the reduce-scatter and
 * all-gather over {@link ShardPartition} blocks (ZeRO's) through padded staging.
 */
public final class HierarchicalCommunicator implements Communicator {

    private final Group group;
    private final NodeTopology topology;
    private final Group machine;
    private final Communicator intra;
    private final MpiComm inter;
    private final MpiComm world;
    /** Whether {@link #close} frees {@link #world} too (a sub-group's communicator made for it by its transport). */
    private final boolean ownsWorld;
    private final Arena arena = Arena.ofShared();
    private MemorySegment staging = MemorySegment.NULL;
    private MemorySegment shard = MemorySegment.NULL;
    private MemorySegment subShard = MemorySegment.NULL;
    /** The in-place shard collectives' blocks, padded to the partition's block size (not used by the segment forms). */
    private MemorySegment paddedBlocks = MemorySegment.NULL;
    private MemorySegment ownBlock = MemorySegment.NULL;
    /** The agreement's vector: {@link #AGREED_FIELDS} doubles per rank of the group ({@link #agree}). */
    private final MemorySegment agreement;
    /** Collectives called on this communicator: names a refused call in its message ("all-reduce#12"). */
    private long seq;
    private boolean closed;

    private HierarchicalCommunicator(Group group, NodeTopology topology, Group machine, Communicator intra, MpiComm inter,
                                     MpiComm world, boolean ownsWorld) {
        this.group = group;
        this.topology = topology;
        this.machine = machine;
        this.intra = intra;
        this.inter = inter;
        this.world = world;
        this.ownsWorld = ownsWorld;
        this.agreement = arena.allocate((long) AGREED_FIELDS * Double.BYTES * group.worldSize(), 64);
    }

    /**
     * Collective over {@code group} and {@code world}: the machine sub-groups and the MPI communicators
     * between machines. {@code world}'s ranks must be {@code group}'s (the same processes in the same order:
     * {@code ProcessGroup.fromEnvironment()} under {@code mpirun} reads Open MPI's rank).
     *
     * @param group every rank of the job, this rank's view of it
     * @param world the MPI communicator of the same processes (e.g. {@code Mpi.world()})
     * @return the communicator; close it before the group
     * @throws IllegalArgumentException when the MPI ranks are not the group's, or the layout is refused ({@link NodeTopology#of})
     */
    public static HierarchicalCommunicator create(Group group, MpiComm world) {
        return create(group, world, false);
    }

    /**
     * As {@link #create(Group, MpiComm)}; with {@code ownsWorld} the communicator frees {@code world} when it closes (or
     * when it cannot be made), as for a sub-group's MPI communicator made for it alone.
     */
    static HierarchicalCommunicator create(Group group, MpiComm world, boolean ownsWorld) {
        try {
            return build(group, world, ownsWorld);
        } catch (RuntimeException | Error e) {
            if (ownsWorld) {
                world.close();
            }
            throw e;
        }
    }

    private static HierarchicalCommunicator build(Group group, MpiComm world, boolean ownsWorld) {
        if (world.size() != group.worldSize() || world.rank() != group.rank()) {
            throw new IllegalArgumentException("MPI rank " + world.rank() + " of " + world.size() + " is group rank "
                    + group.rank() + " of " + group.worldSize() + ": expected the same processes in the same order (join the"
                    + " group with ProcessGroup.fromEnvironment() in processes started by mpirun)");
        }
        NodeTopology topology = NodeTopology.of(group);
        Group machine = group.split(topology.node(), topology.localRank(), "machine");
        Communicator intra = null;
        MpiComm inter = null;
        try {
            intra = Communicator.create(machine);
            inter = world.split(topology.localRank(), topology.node());
            return new HierarchicalCommunicator(group, topology, machine, intra, inter, world, ownsWorld);
        } catch (RuntimeException | Error e) {
            if (inter != null) {
                inter.close();
            }
            if (intra != null) {
                intra.close();
            }
            machine.close();
            throw e;
        }
    }

    /**
     * Which ranks share a machine.
     *
     * @return the layout this communicator was built on
     */
    public NodeTopology topology() {
        return topology;
    }

    @Override
    public Group group() {
        return group;
    }

    @Override
    public String transportName() {
        return "hierarchical(" + intra.transportName() + " + mpi)";
    }

    @Override
    public boolean supports(Algorithm algorithm) {
        return algorithm == Algorithm.HIERARCHICAL || algorithm == Algorithm.MPI;
    }

    @Override
    public boolean supports(Algorithm algorithm, DType dtype, ReduceOp op, long count) {
        return supports(algorithm) && (dtype == DType.FLOAT32 || dtype == DType.FLOAT64);
    }

    @Override
    public synchronized void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        Problem problem = either(arguments(dtype, op, algorithm, count), usable(buffer, dtype, count, true));
        agree("all-reduce", problem, count, dtype, op, algorithm, -1);
        agreedAllReduce(buffer, count, dtype, op, algorithm);
    }

    /** The all-reduce of {@code buffer}, after {@link #agree}. */
    private void agreedAllReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        ReduceOp mpiOp = op == ReduceOp.AVG ? ReduceOp.SUM : op;
        switch (algorithm) {
            case MPI -> world.allReduce(buffer, count, dtype, mpiOp);
            case HIERARCHICAL -> hierarchicalAllReduce(buffer, count, dtype, mpiOp);
            default -> throw new IllegalStateException("unreachable: algorithm=" + algorithm + " refused by the agreement");
        }
        if (op == ReduceOp.AVG) {
            divide(buffer, count, dtype, group.worldSize());
        }
    }

    private void hierarchicalAllReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op) {
        int perNode = topology.ranksPerNode();
        int nodes = topology.nodes();
        if (perNode == 1) {
            // one rank per machine (a data-parallel sub-group across machines): nothing to do inside a machine, and the
            // staging copies only cost (the pretend 2 x 1 job: 1.4-2.3x flat MPI before, 0.86-1.18x with this path;
            // bench/results/2026-11-26-multinode-allreduce-2x1{,-one-rank-path}.md): MPI's in-place all-reduce
            inter.allReduce(buffer, count, dtype, op);
            return;
        }
        long blocks = (long) perNode * nodes;
        long padded = (count + blocks - 1) / blocks * blocks;
        long piece = padded / perNode;
        long sub = piece / nodes;
        MemorySegment all = staging(dtype.bytes(padded));
        MemorySegment.copy(buffer, 0, all, 0, dtype.bytes(count));
        all.asSlice(dtype.bytes(count), dtype.bytes(padded - count)).fill((byte) 0);
        MemorySegment mine = shard(dtype.bytes(piece));
        intra.reduceScatter(all, mine, piece, dtype, op);                 // 1. inside the machine
        if (nodes > 1) {
            MemorySegment part = subShard(dtype.bytes(sub));
            inter.reduceScatterBlock(mine, part, sub, dtype, op);        // 2. between machines
            inter.allGather(part, mine, sub, dtype);                     // 3. between machines
        }
        intra.allGather(mine, all, piece, dtype);                        // 4. inside the machine
        MemorySegment.copy(all, 0, buffer, 0, dtype.bytes(count));
    }

    /**
     * On memory from {@link MultiNodeTransport#allocate} (each machine's own; see {@link NodeLocalSymmetricMemory}),
     * or any host memory of this group: the all-reduce of this rank's buffer from {@code offsetBytes}, as the
     * segment form does it. Device memory is refused.
     */
    @Override
    public synchronized void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op,
                                       Algorithm algorithm) {
        Problem problem = either(arguments(dtype, op, algorithm, count), regionProblem(memory, offsetBytes, count, dtype));
        agree("all-reduce", problem, count, dtype, op, algorithm, -1);
        agreedAllReduce(ownBuffer(memory, offsetBytes, count, dtype), count, dtype, op, algorithm);
    }

    /**
     * What makes {@code memory} unusable for an in-place collective of {@code count} elements from
     * {@code offsetBytes} on this rank: memory of another group or on a device (host memory of this
     * communicator's group expected: {@code SymmetricMemory.allocate(group, bytes)} on a group joined on
     * MultiNodeTransport), a range outside it, or its memory freed or read-only.
     */
    private Problem regionProblem(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        if (memory == null) {
            return Problem.NULL_BUFFER;
        }
        if (memory.group() != group || !memory.hostAddressable()) {
            return Problem.FOREIGN_MEMORY;
        }
        if (dtype == null || count < 0) {
            return Problem.NONE; // arguments() reports these
        }
        if (offsetBytes < 0 || offsetBytes > memory.byteSize()
                || count > Long.MAX_VALUE / dtype.byteSize() || offsetBytes > memory.byteSize() - dtype.bytes(count)) {
            return Problem.OFFSET_OUT_OF_RANGE;
        }
        return Problem.ofSegment(memory.local(), true);
    }

    /** This rank's bytes of {@code memory} for a collective of {@code count} elements from {@code offsetBytes} (agreed). */
    private static MemorySegment ownBuffer(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        return memory.local().asSlice(offsetBytes, dtype.bytes(count));
    }

    /**
     * Hierarchical reduce-scatter: rank {@code r = node x L + l} receives block {@code r}. Inside each
     * machine the blocks are packed so that local rank {@code l} reduces the blocks of every machine's
     * local rank {@code l}; between machines each rank then keeps its own machine's block.
     */
    @Override
    public synchronized void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        int world = group.worldSize();
        Problem problem = arguments(dtype, op, Algorithm.HIERARCHICAL, recvCount);
        if (problem == Problem.NONE) {
            problem = recvCount > Long.MAX_VALUE / world / dtype.byteSize() ? Problem.SHORT_BUFFER
                    : either(usable(send, dtype, recvCount * world, false), usable(recv, dtype, recvCount, true));
        }
        agree("reduce-scatter", problem, recvCount, dtype, op, null, -1);
        long block = dtype.bytes(recvCount);
        MemorySegment packed = staging(block * world);
        for (int q = 0; q < world; q++) {
            MemorySegment.copy(send, block * q, packed, packedOffset(q, block), block);
        }
        reduceScatterPacked(packed, recv, recvCount, dtype, op);
    }

    /** Where rank {@code q}'s block of {@code block} bytes goes in the packed order ({@link NodeTopology#packedIndex}). */
    private long packedOffset(int q, long block) {
        return block * topology.packedIndex(q);
    }

    /** The hierarchical reduce-scatter of blocks already in {@link #packedOffset} order; AVG divides at the end. */
    private void reduceScatterPacked(MemorySegment packed, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        int world = group.worldSize();
        int nodes = topology.nodes();
        ReduceOp mpiOp = op == ReduceOp.AVG ? ReduceOp.SUM : op;
        long block = dtype.bytes(recvCount);
        MemorySegment mine = shard(block * nodes);
        intra.reduceScatter(packed, mine, recvCount * nodes, dtype, mpiOp);
        if (nodes > 1) {
            inter.reduceScatterBlock(mine, recv, recvCount, dtype, mpiOp);
        } else {
            MemorySegment.copy(mine, 0, recv, 0, block);
        }
        if (op == ReduceOp.AVG) {
            divide(recv, recvCount, dtype, world);
        }
    }

    @Override
    public synchronized void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        int world = group.worldSize();
        Problem problem = arguments(dtype, ReduceOp.SUM, Algorithm.HIERARCHICAL, sendCount);
        if (problem == Problem.NONE) {
            problem = sendCount > Long.MAX_VALUE / world / dtype.byteSize() ? Problem.SHORT_BUFFER
                    : either(usable(send, dtype, sendCount, false), usable(recv, dtype, sendCount * world, true));
        }
        agree("all-gather", problem, sendCount, dtype, null, null, -1);
        agreedAllGather(send, recv, sendCount, dtype);
    }

    /** The all-gather, after {@link #agree}. */
    private void agreedAllGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        int perNode = topology.ranksPerNode();
        MemorySegment machineBlocks = shard(dtype.bytes(sendCount * perNode));
        intra.allGather(send, machineBlocks, sendCount, dtype);
        if (topology.nodes() > 1) {
            inter.allGather(machineBlocks, recv, sendCount * perNode, dtype); // machine-major is rank order
        } else {
            MemorySegment.copy(machineBlocks, 0, recv, 0, dtype.bytes(sendCount * perNode));
        }
    }

    /**
     * In place over {@link ShardPartition} blocks of this rank's buffer of host memory (what
     * {@link MultiNodeTransport} allocates): the blocks, each padded to the partition's block size, go through
     * the hierarchical reduce-scatter of the segment form, and block r comes back into rank r's buffer; the other
     * blocks are left as they were. Every element is reduced once in the hierarchy's fixed order: bitwise the same
     * as the segment form, not as a single machine's in-place reduce-scatter (another association) except with
     * one rank per machine.
     */
    @Override
    public synchronized void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op) {
        Problem problem = either(arguments(dtype, op, Algorithm.HIERARCHICAL, count), regionProblem(memory, offsetBytes, count, dtype));
        agree("reduce-scatter", problem, count, dtype, op, null, -1);
        MemorySegment region = ownBuffer(memory, offsetBytes, count, dtype);
        int world = group.worldSize();
        ShardPartition blocks = ShardPartition.of(count, world, dtype);
        long blockBytes = dtype.bytes(blocks.blockElements());
        // each block padded to the partition's block size and put straight into the packed order (one copy of the region)
        MemorySegment packed = staging(blockBytes * world);
        packed.asSlice(0, blockBytes * world).fill((byte) 0);
        for (int q = 0; q < world; q++) {
            MemorySegment.copy(region, dtype.bytes(blocks.start(q)), packed, packedOffset(q, blockBytes), dtype.bytes(blocks.size(q)));
        }
        MemorySegment mine = ownBlock(blockBytes);
        reduceScatterPacked(packed, mine, blocks.blockElements(), dtype, op);
        int me = group.rank();
        MemorySegment.copy(mine, 0, region, dtype.bytes(blocks.start(me)), dtype.bytes(blocks.size(me)));
    }

    /**
     * In place over {@link ShardPartition} blocks of this rank's buffer of host memory: this rank's block, padded to
     * the partition's block size, goes through the hierarchical all-gather of the segment form, and every rank's block
     * comes back into this rank's buffer, bitwise.
     */
    @Override
    public synchronized void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        Problem problem = either(arguments(dtype, ReduceOp.SUM, Algorithm.HIERARCHICAL, count),
                regionProblem(memory, offsetBytes, count, dtype));
        agree("all-gather", problem, count, dtype, null, null, -1);
        MemorySegment region = ownBuffer(memory, offsetBytes, count, dtype);
        int world = group.worldSize();
        int me = group.rank();
        ShardPartition blocks = ShardPartition.of(count, world, dtype);
        long blockBytes = dtype.bytes(blocks.blockElements());
        MemorySegment mine = ownBlock(blockBytes);
        mine.asSlice(0, blockBytes).fill((byte) 0);
        MemorySegment.copy(region, dtype.bytes(blocks.start(me)), mine, 0, dtype.bytes(blocks.size(me)));
        MemorySegment padded = paddedBlocks(blockBytes * world);
        agreedAllGather(mine, padded, blocks.blockElements(), dtype);
        for (int q = 0; q < world; q++) {
            MemorySegment.copy(padded, blockBytes * q, region, dtype.bytes(blocks.start(q)), dtype.bytes(blocks.size(q)));
        }
    }

    @Override
    public synchronized void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        Problem problem = root < 0 || root >= group.worldSize() ? Problem.ROOT_OUT_OF_RANGE
                : either(arguments(dtype, ReduceOp.SUM, Algorithm.HIERARCHICAL, count),
                        usable(buffer, dtype, count, group.rank() != root)); // the root only reads its buffer
        agree("broadcast", problem, count, dtype, null, null, root);
        int rootNode = root / topology.ranksPerNode();
        int rootLocal = root % topology.ranksPerNode();
        if (topology.localRank() == rootLocal && topology.nodes() > 1) {
            inter.broadcast(buffer, count, dtype, rootNode); // the root's machine to the same local rank everywhere
        }
        intra.broadcast(buffer, count, dtype, rootLocal);
    }

    @Override
    public synchronized void barrier() {
        intra.barrier();
        if (topology.nodes() > 1) {
            inter.barrier();
        }
        intra.barrier();
    }

    @Override
    public void abort(String reason) {
        intra.abort(reason);
        group.abort(reason);
    }

    /**
     * Frees the MPI communicator between machines, the machine's communicator and sub-group, and a sub-group's own MPI
     * communicator (collective).
     */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            inter.close();
        } finally {
            try {
                intra.close();
            } finally {
                try {
                    machine.close();
                    arena.close();
                } finally {
                    if (ownsWorld) {
                        world.close();
                    }
                }
            }
        }
    }

    /** Doubles per rank in the agreement: problem, count, and dtype/op/algorithm/root packed into one. */
    private static final int AGREED_FIELDS = 3;
    private static final DType[] DTYPES = DType.values();
    private static final ReduceOp[] OPS = ReduceOp.values();
    private static final Algorithm[] ALGORITHMS = Algorithm.values();
    private static final Problem[] PROBLEMS = Problem.values();

    /**
     * The cross-rank argument agreement, before any data moves: every rank puts its locally found
     * {@link Problem}, its count and its other arguments in its own doubles of a vector, and one MPI
     * all-reduce (a sum over the group's world communicator) gives every rank every rank's. A problem
     * on any rank, or arguments that differ, throw the same {@link CollectiveMismatchException} on every
     * rank, naming the ranks; nothing was written and the communicator stays usable. Without it a bad
     * buffer on one rank made that rank throw alone, while the others returned (the destination was
     * written last) or waited in MPI, which has no timeout. Every value is an integer below 2^53, so
     * the double sum is exact.
     */
    private void agree(String what, Problem mine, long count, DType dtype, ReduceOp op, Algorithm algorithm, int root) {
        if (closed) {
            throw new IllegalStateException("the hierarchical communicator is closed");
        }
        String call = what + "#" + seq++;
        int n = group.worldSize();
        long base = (long) AGREED_FIELDS * group.rank();
        agreement.fill((byte) 0);
        agreement.setAtIndex(ValueLayout.JAVA_DOUBLE, base, mine.ordinal());
        agreement.setAtIndex(ValueLayout.JAVA_DOUBLE, base + 1, Math.clamp(count, -1L, 1L << 52));
        agreement.setAtIndex(ValueLayout.JAVA_DOUBLE, base + 2, pack(dtype, op, algorithm, root));
        world.allReduce(agreement, (long) AGREED_FIELDS * n, DType.FLOAT64, ReduceOp.SUM);
        StringBuilder problems = new StringBuilder();
        boolean differ = false;
        for (int r = 0; r < n; r++) {
            int problem = (int) field(r, 0);
            if (problem != 0) {
                problems.append(problems.isEmpty() ? "" : "; ").append("rank=").append(r).append(' ')
                        .append(problem > 0 && problem < PROBLEMS.length ? PROBLEMS[problem].text(destination(what))
                                : "problem " + problem);
            }
            differ |= field(r, 1) != field(0, 1) || field(r, 2) != field(0, 2);
        }
        if (!problems.isEmpty()) {
            throw new CollectiveMismatchException(call + " rejected: " + problems);
        }
        if (differ) {
            StringBuilder each = new StringBuilder();
            for (int r = 0; r < n; r++) {
                each.append(r == 0 ? "" : "; ").append("rank=").append(r).append(' ').append(describe((long) field(r, 1),
                        (long) field(r, 2)));
            }
            throw new CollectiveMismatchException(call + " arguments differ across ranks: " + each
                    + " (all ranks must pass the same count, dtype, op, algorithm and root)");
        }
    }

    /** What a collective's destination argument is called. */
    private static String destination(String what) {
        return what.equals("reduce-scatter") || what.equals("all-gather") ? "recv" : "buffer";
    }

    private double field(int rank, int field) {
        return agreement.getAtIndex(ValueLayout.JAVA_DOUBLE, (long) AGREED_FIELDS * rank + field);
    }

    /** dtype, op, algorithm and root as one integer below 2^53 (each ordinal + 1, 0 for none). */
    private static double pack(DType dtype, ReduceOp op, Algorithm algorithm, int root) {
        long packed = ordinal(dtype);
        packed = packed * 64 + ordinal(op);
        packed = packed * 64 + ordinal(algorithm);
        packed = packed * (1L << 32) + Math.clamp(root + 1L, 0L, (1L << 32) - 1);
        return packed;
    }

    private static int ordinal(Enum<?> e) {
        return e == null ? 0 : e.ordinal() + 1;
    }

    private static String describe(long count, long packed) {
        long root = (packed & ((1L << 32) - 1)) - 1;
        packed >>>= 32;
        int algorithm = (int) (packed % 64) - 1;
        packed /= 64;
        int op = (int) (packed % 64) - 1;
        int dtype = (int) (packed / 64) - 1;
        return "count=" + count + " dtype=" + name(DTYPES, dtype) + " op=" + name(OPS, op) + " algorithm="
                + name(ALGORITHMS, algorithm) + " root=" + root;
    }

    private static String name(Enum<?>[] values, int ordinal) {
        return ordinal >= 0 && ordinal < values.length ? values[ordinal].name() : "none";
    }

    /** Problems with the non-buffer arguments: null, a negative count, an algorithm or dtype MPI cannot run. */
    private Problem arguments(DType dtype, ReduceOp op, Algorithm algorithm, long count) {
        if (dtype == null || op == null || algorithm == null) {
            return Problem.NULL_ARGUMENT;
        }
        if (count < 0) {
            return Problem.NEGATIVE_COUNT;
        }
        if (!supports(algorithm)) {
            return Problem.UNSUPPORTED_ALGORITHM; // the others need symmetric memory across every rank: HIERARCHICAL or MPI
        }
        return dtype == DType.FLOAT32 || dtype == DType.FLOAT64 ? Problem.NONE : Problem.UNSUPPORTED_DTYPE;
    }

    /**
     * What makes {@code buffer} unusable here for {@code count} elements of {@code dtype} (agreed
     * non-null and non-negative): null, on the Java heap (MPI cannot read it), too short, or freed,
     * confined to another thread or read-only where written ({@link Problem#ofSegment}).
     */
    private static Problem usable(MemorySegment buffer, DType dtype, long count, boolean written) {
        if (buffer == null) {
            return Problem.NULL_BUFFER;
        }
        if (dtype == null || count < 0) {
            return Problem.NONE; // arguments() reports these
        }
        if (!buffer.isNative()) {
            return Problem.HEAP_BUFFER;
        }
        if (count > Long.MAX_VALUE / dtype.byteSize() || buffer.byteSize() < dtype.bytes(count)) {
            return Problem.SHORT_BUFFER;
        }
        return Problem.ofSegment(buffer, written);
    }

    private static Problem either(Problem first, Problem second) {
        return first != Problem.NONE ? first : second;
    }

    private MemorySegment staging(long bytes) {
        return staging = atLeast(staging, bytes);
    }

    private MemorySegment shard(long bytes) {
        return shard = atLeast(shard, bytes);
    }

    private MemorySegment paddedBlocks(long bytes) {
        return paddedBlocks = atLeast(paddedBlocks, bytes);
    }

    private MemorySegment ownBlock(long bytes) {
        return ownBlock = atLeast(ownBlock, bytes);
    }

    private MemorySegment subShard(long bytes) {
        return subShard = atLeast(subShard, bytes);
    }

    /** {@code current}, or a new buffer of at least {@code bytes} (doubling, so that growing sizes reallocate rarely). */
    private MemorySegment atLeast(MemorySegment current, long bytes) {
        return current.byteSize() >= bytes ? current : arena.allocate(Math.max(bytes, 2 * current.byteSize()), 64);
    }

    private static void divide(MemorySegment buffer, long count, DType dtype, int by) {
        if (dtype == DType.FLOAT32) {
            for (long i = 0; i < count; i++) {
                buffer.setAtIndex(ValueLayout.JAVA_FLOAT, i, buffer.getAtIndex(ValueLayout.JAVA_FLOAT, i) / by);
            }
        } else {
            for (long i = 0; i < count; i++) {
                buffer.setAtIndex(ValueLayout.JAVA_DOUBLE, i, buffer.getAtIndex(ValueLayout.JAVA_DOUBLE, i) / by);
            }
        }
    }
}
