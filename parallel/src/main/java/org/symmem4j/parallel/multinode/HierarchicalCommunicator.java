package org.symmem4j.parallel.multinode;

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
 * local rank form an MPI communicator, one rank per machine), as Horovod and NCCL arrange them. The
 * schedule is {@link HierarchicalSchedule}'s (the GPU's hierarchical communicator runs the same one over
 * NCCL) over an {@code MpiLink} and host staging; this class agrees on the arguments first.
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

    /** The schedule: the machine's communicator, MPI between machines, host staging. */
    private final HierarchicalSchedule<Communicator, MpiLink> schedule;
    private final Group group;
    private final MpiComm world;
    /** Whether {@link #close} frees {@link #world} too (a sub-group's communicator made for it by its transport). */
    private final boolean ownsWorld;
    /** The agreement's vector: {@link #AGREED_FIELDS} doubles per rank of the group ({@link #agree}). */
    private final MemorySegment agreement;
    /** Collectives called on this communicator: names a refused call in its message ("all-reduce#12"). */
    private long seq;

    private HierarchicalCommunicator(HierarchicalSchedule<Communicator, MpiLink> schedule, MemorySegment agreement,
                                     MpiComm world, boolean ownsWorld) {
        this.schedule = schedule;
        this.group = schedule.group();
        this.agreement = agreement;
        this.world = world;
        this.ownsWorld = ownsWorld;
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
                    + group.rank() + " of " + group.worldSize() + ": expected the same processes in the same order (fix: join the"
                    + " group with ProcessGroup.fromEnvironment() in processes started by mpirun)");
        }
        NodeTopology topology = NodeTopology.of(group);
        HostStaging memory = new HostStaging();
        try {
            MemorySegment agreement = memory.allocate((long) AGREED_FIELDS * Double.BYTES * group.worldSize());
            // the world's MPI communicator carries the flat all-reduce and the agreement; it is the caller's (or ownsWorld)
            HierarchicalSchedule<Communicator, MpiLink> schedule = HierarchicalSchedule.open(group, topology,
                    Communicator::create, (machine, intra) -> new HierarchicalSchedule.Links<>(
                            new MpiLink(world.split(topology.localRank(), topology.node()), true), new MpiLink(world, false),
                            memory));
            return new HierarchicalCommunicator(schedule, agreement, world, ownsWorld);
        } catch (RuntimeException | Error e) {
            memory.close();
            throw e;
        }
    }

    /**
     * Which ranks share a machine.
     *
     * @return the layout this communicator was built on
     */
    public NodeTopology topology() {
        return schedule.topology();
    }

    @Override
    public Group group() {
        return group;
    }

    @Override
    public String transportName() {
        return schedule.transportName();
    }

    @Override
    public boolean supports(Algorithm algorithm) {
        return schedule.supports(algorithm);
    }

    @Override
    public boolean supports(Algorithm algorithm, DType dtype, ReduceOp op, long count) {
        return supports(algorithm) && (dtype == DType.FLOAT32 || dtype == DType.FLOAT64);
    }

    @Override
    public synchronized void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        Problem problem = either(arguments(dtype, op, algorithm, count), usable(buffer, dtype, count, true));
        agree("all-reduce", problem, count, dtype, op, algorithm, -1);
        schedule.allReduce(buffer, count, dtype, op, algorithm);
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
        schedule.allReduce(ownBuffer(memory, offsetBytes, count, dtype), count, dtype, op, algorithm);
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
        schedule.reduceScatter(send, recv, recvCount, dtype, op);
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
        schedule.allGather(send, recv, sendCount, dtype);
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
        schedule.reduceScatterShards(ownBuffer(memory, offsetBytes, count, dtype), count, dtype, op);
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
        schedule.allGatherShards(ownBuffer(memory, offsetBytes, count, dtype), count, dtype);
    }

    @Override
    public synchronized void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        Problem problem = root < 0 || root >= group.worldSize() ? Problem.ROOT_OUT_OF_RANGE
                : either(arguments(dtype, ReduceOp.SUM, Algorithm.HIERARCHICAL, count),
                        usable(buffer, dtype, count, group.rank() != root)); // the root only reads its buffer
        agree("broadcast", problem, count, dtype, null, null, root);
        schedule.broadcast(buffer, count, dtype, root);
    }

    @Override
    public synchronized void barrier() {
        schedule.barrier();
    }

    @Override
    public void abort(String reason) {
        schedule.abort(reason);
    }

    /**
     * Frees the MPI communicator between machines, the machine's communicator and sub-group, and a sub-group's own MPI
     * communicator (collective).
     */
    @Override
    public synchronized void close() {
        if (schedule.isClosed()) {
            return;
        }
        try {
            schedule.close();
        } finally {
            if (ownsWorld) {
                world.close();
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
        if (schedule.isClosed()) {
            throw new IllegalStateException("the hierarchical communicator is closed (expected an open one; fix: call"
                    + " collectives before close(), or create a new communicator)");
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
            throw new CollectiveMismatchException(call + " rejected: " + problems + " (fix: correct the arguments each"
                    + " rank's problem names; every rank refuses the call together, so nothing was written)");
        }
        if (differ) {
            StringBuilder each = new StringBuilder();
            for (int r = 0; r < n; r++) {
                each.append(r == 0 ? "" : "; ").append("rank=").append(r).append(' ').append(describe((long) field(r, 1),
                        (long) field(r, 2)));
            }
            throw new CollectiveMismatchException(call + " arguments differ across ranks: " + each
                    + " (fix: all ranks must pass the same count, dtype, op, algorithm and root)");
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
}
