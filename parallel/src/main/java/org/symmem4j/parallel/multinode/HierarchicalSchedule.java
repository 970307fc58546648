package org.symmem4j.parallel.multinode;

import java.lang.foreign.MemorySegment;
import java.util.function.Function;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;

/**
 * The hierarchical algorithm of a group that spans machines, written once over two seams: the machine's
 * {@link Communicator} (the machine's ranks form a sub-group on the group's own transport: symmetric memory on the
 * host, our kernels on GPUs) and an {@link InterMachineLink} between machines (the ranks with the same local rank,
 * one per machine: MPI on the host, NCCL on GPUs), as Horovod and NCCL arrange them. What differs between host and
 * GPU buffers (copies, zeros, the division of an average, blocking or stream order) is the {@link StagingMemory}'s.
 *
 * <pre>
 *   all-reduce (HIERARCHICAL), L ranks per machine, N machines, the buffer padded to a multiple of L
 *   (L x N where the link splits the shard's all-reduce):
 *     1. inside each machine: reduce-scatter          -> local rank l holds block l summed over its machine
 *     2. between machines:    all-reduce of block l   -> block l summed over everything, on every machine
 *                             (MPI: a reduce-scatter of its N sub-blocks, then an all-gather)
 *     3. inside each machine: all-gather              -> the whole sum on every rank
 *
 *   reduce-scatter: the blocks packed so that local rank l reduces every machine's block l inside the machine
 *                   ({@link NodeTopology#packedIndex}), then a reduce-scatter between machines: rank r gets block r
 *   all-gather:     inside each machine, then between machines (machine-major is rank order)
 *   broadcast:      from the root to its local rank on every machine, then inside each machine
 *   barrier:        the machine's, the machines', the machine's again
 * </pre>
 *
 * Every element is reduced once, in a fixed order (inside a machine in local-rank order, between machines in the
 * link's), then copied: deterministic and bitwise identical on every rank, not bitwise equal to a flat all-reduce
 * (another association). {@link ReduceOp#AVG}: where the link averages, each level divides by its own size; where
 * not, every level sums and the result is divided by the group's size once. Not thread-safe and without argument
 * checks: the communicator that holds it checks (or agrees on) the arguments and serializes the calls.
 *
 * @param <C> the machine communicator's type
 * @param <L> the link's type
 */
public final class HierarchicalSchedule<C extends Communicator, L extends InterMachineLink> implements AutoCloseable {

    /**
     * The links of a schedule, opened once the machine's communicator exists.
     *
     * @param between the peers of every machine (rank in it: the machine's index)
     * @param flat    every rank of the group (rank in it: the group rank), for the flat algorithm
     * @param memory  the staging memory
     * @param <L>     the links' type
     */
    public record Links<L extends InterMachineLink>(L between, L flat, StagingMemory memory) {
    }

    /**
     * Opens the links of a schedule. On failure it frees what it opened itself; the schedule then closes the machine's
     * communicator and sub-group.
     *
     * @param <C> the machine communicator's type
     * @param <L> the links' type
     */
    @FunctionalInterface
    public interface LinkOpener<C extends Communicator, L extends InterMachineLink> {
        /**
         * Opens the links once the machine's communicator exists.
         *
         * @param machine the machine's sub-group
         * @param intra   the machine's communicator
         * @return the links and the staging memory
         */
        Links<L> open(Group machine, C intra);
    }

    private final Group group;
    private final NodeTopology topology;
    private final Group machine;
    private final C intra;
    private final L between;
    private final L flat;
    private final StagingMemory memory;
    /** The padded buffer of an all-reduce, the packed blocks of a reduce-scatter. */
    private MemorySegment staging = MemorySegment.NULL;
    private MemorySegment shard = MemorySegment.NULL;
    private MemorySegment subShard = MemorySegment.NULL;
    /** The in-place shard collectives' blocks, padded to the partition's block size (not used by the segment forms). */
    private MemorySegment paddedBlocks = MemorySegment.NULL;
    private MemorySegment ownBlock = MemorySegment.NULL;
    private boolean closed;

    private HierarchicalSchedule(Group group, NodeTopology topology, Group machine, C intra, Links<L> links) {
        this.group = group;
        this.topology = topology;
        this.machine = machine;
        this.intra = intra;
        this.between = links.between();
        this.flat = links.flat();
        this.memory = links.memory();
    }

    /**
     * Collective over {@code group}: splits it into one sub-group per machine, makes the machine's communicator, then
     * the links. On failure everything made so far is closed again.
     *
     * @param group    every rank of the job, this rank's view of it
     * @param topology which ranks share a machine
     * @param intra    makes the communicator of the machine's sub-group
     * @param links    opens the links between machines
     * @param <C>      the machine communicator's type
     * @param <L>      the links' type
     * @return the schedule; close it before the group
     */
    public static <C extends Communicator, L extends InterMachineLink> HierarchicalSchedule<C, L> open(
            Group group, NodeTopology topology, Function<Group, C> intra, LinkOpener<C, L> links) {
        Group machine = group.split(topology.node(), topology.localRank(), "machine");
        C communicator = null;
        try {
            communicator = intra.apply(machine);
            return new HierarchicalSchedule<>(group, topology, machine, communicator, links.open(machine, communicator));
        } catch (RuntimeException | Error e) {
            if (communicator != null) {
                communicator.close();
            }
            machine.close();
            throw e;
        }
    }

    /** @return the group this schedule runs over */
    public Group group() {
        return group;
    }

    /** @return which ranks share a machine */
    public NodeTopology topology() {
        return topology;
    }

    /** @return the machine's communicator */
    public C intra() {
        return intra;
    }

    /** @return the link over every rank of the group (the flat algorithm's) */
    public L flat() {
        return flat;
    }

    /** @return whether {@link #close} was called */
    public boolean isClosed() {
        return closed;
    }

    /** @return {@code hierarchical(<machine's transport> + <link>)} */
    public String transportName() {
        return "hierarchical(" + intra.transportName() + " + " + between.name() + ")";
    }

    /**
     * @param algorithm an algorithm
     * @return whether it is {@link Algorithm#HIERARCHICAL} or the link's flat one
     */
    public boolean supports(Algorithm algorithm) {
        return algorithm == Algorithm.HIERARCHICAL || algorithm == flat.provider().library();
    }

    /** The operation every level reduces with: AVG becomes SUM (divided at the end) where the link does not average. */
    private ReduceOp levelOp(ReduceOp op) {
        return op == ReduceOp.AVG && !between.averages() ? ReduceOp.SUM : op;
    }

    /**
     * In-place all-reduce of {@code count} elements of {@code buffer}, hierarchical or flat (the link's provider).
     *
     * @param buffer    this rank's buffer
     * @param count     elements
     * @param dtype     element type
     * @param op        reduction
     * @param algorithm {@link Algorithm#HIERARCHICAL} or the link's flat one ({@code Provider.library()} of its
     *                  {@link InterMachineLink#provider()}; checked)
     */
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        ReduceOp levelOp = levelOp(op);
        if (algorithm == Algorithm.HIERARCHICAL) {
            hierarchicalAllReduce(buffer, count, dtype, levelOp);
        } else if (algorithm == flat.provider().library()) {
            flat.allReduce(buffer, count, dtype, levelOp);
        } else {
            throw Invariants.violated("unreachable: algorithm=" + algorithm + " refused by the agreement");
        }
        if (levelOp != op) {
            memory.divide(buffer, count, dtype, group.worldSize());
        }
    }

    private void hierarchicalAllReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op) {
        int perNode = topology.ranksPerNode();
        int nodes = topology.nodes();
        if (perNode == 1) {
            // one rank per machine (a data-parallel sub-group across machines): nothing to do inside a machine, and the
            // staging copies only cost (the pretend 2 x 1 job: 1.4-2.3x flat MPI before, 0.86-1.18x with this path;
            // bench/results/2026-11-26-multinode-allreduce-2x1{,-one-rank-path}.md): the link's in-place all-reduce
            between.allReduce(buffer, count, dtype, op);
            return;
        }
        long blocks = between.splitsShardAllReduce() ? (long) perNode * nodes : perNode;
        long padded = (count + blocks - 1) / blocks * blocks;
        long piece = padded / perNode;
        MemorySegment all = buffer;
        if (padded != count || memory.stagesEveryAllReduce()) {
            all = staging(dtype.bytes(padded));
            memory.copy(all, buffer.asSlice(0, dtype.bytes(count)));
            if (padded != count) {
                memory.zero(all.asSlice(dtype.bytes(count), dtype.bytes(padded - count)));
            }
        }
        MemorySegment mine = shard(dtype.bytes(piece));
        intra.reduceScatter(all, mine, piece, dtype, op);                      // 1. inside the machine
        if (nodes > 1) {                                                       // 2. between machines
            if (between.splitsShardAllReduce()) {
                long sub = piece / nodes;
                MemorySegment part = subShard(dtype.bytes(sub));
                between.reduceScatter(mine, part, sub, dtype, op);
                between.allGather(part, mine, sub, dtype);
            } else {
                between.allReduce(mine, piece, dtype, op);
            }
        }
        intra.allGather(mine, all, piece, dtype);                             // 3. inside the machine
        if (all != buffer) {
            memory.copy(buffer, all.asSlice(0, dtype.bytes(count)));
        }
    }

    /**
     * Reduce-scatter: rank {@code r = node x L + l} receives block {@code r} of {@code send}.
     *
     * @param send      the group's size times {@code recvCount} elements
     * @param recv      {@code recvCount} elements
     * @param recvCount elements each rank receives
     * @param dtype     element type
     * @param op        reduction
     */
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        int world = group.worldSize();
        long block = dtype.bytes(recvCount);
        MemorySegment packed = staging(block * world);
        for (int q = 0; q < world; q++) {
            memory.copy(packed.asSlice(packedOffset(q, block), block), send.asSlice(block * q, block));
        }
        reduceScatterPacked(packed, recv, recvCount, dtype, op);
    }

    /** Where rank {@code q}'s block of {@code block} bytes goes in the packed order ({@link NodeTopology#packedIndex}). */
    private long packedOffset(int q, long block) {
        return block * topology.packedIndex(q);
    }

    /** The reduce-scatter of blocks already in {@link #packedOffset} order; AVG divides at the end where the link does not. */
    private void reduceScatterPacked(MemorySegment packed, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        int nodes = topology.nodes();
        ReduceOp levelOp = levelOp(op);
        long block = dtype.bytes(recvCount);
        MemorySegment mine = shard(block * nodes);
        intra.reduceScatter(packed, mine, recvCount * nodes, dtype, levelOp);
        if (nodes > 1) {
            between.reduceScatter(mine, recv, recvCount, dtype, levelOp);
        } else {
            memory.copy(recv, mine.asSlice(0, block));
        }
        if (levelOp != op) {
            memory.divide(recv, recvCount, dtype, group.worldSize());
        }
    }

    /**
     * All-gather in rank order.
     *
     * @param send      {@code sendCount} elements
     * @param recv      the group's size times {@code sendCount} elements
     * @param sendCount elements each rank contributes
     * @param dtype     element type
     */
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        int perNode = topology.ranksPerNode();
        MemorySegment machineBlocks = shard(dtype.bytes(sendCount * perNode));
        intra.allGather(send, machineBlocks, sendCount, dtype);
        if (topology.nodes() > 1) {
            between.allGather(machineBlocks, recv, sendCount * perNode, dtype); // machine-major is rank order
        } else {
            memory.copy(recv, machineBlocks.asSlice(0, dtype.bytes(sendCount * perNode)));
        }
    }

    /**
     * In place over {@link ShardPartition} blocks of {@code region}: the blocks, each padded to the partition's block
     * size, go through {@link #reduceScatter}'s schedule, and block r comes back into rank r's region; the other blocks
     * are left as they were. Bitwise the same as the segment form.
     *
     * @param region this rank's {@code count} elements
     * @param count  elements
     * @param dtype  element type
     * @param op     reduction
     */
    public void reduceScatterShards(MemorySegment region, long count, DType dtype, ReduceOp op) {
        int world = group.worldSize();
        ShardPartition blocks = ShardPartition.of(count, world, dtype);
        long blockBytes = dtype.bytes(blocks.blockElements());
        // each block padded to the partition's block size and put straight into the packed order (one copy of the region)
        MemorySegment packed = staging(blockBytes * world);
        memory.zero(packed.asSlice(0, blockBytes * world));
        for (int q = 0; q < world; q++) {
            memory.copy(packed.asSlice(packedOffset(q, blockBytes)), region.asSlice(dtype.bytes(blocks.start(q)),
                    dtype.bytes(blocks.size(q))));
        }
        MemorySegment mine = ownBlock(blockBytes);
        reduceScatterPacked(packed, mine, blocks.blockElements(), dtype, op);
        int me = group.rank();
        memory.copy(region.asSlice(dtype.bytes(blocks.start(me))), mine.asSlice(0, dtype.bytes(blocks.size(me))));
    }

    /**
     * In place over {@link ShardPartition} blocks of {@code region}: this rank's block, padded to the partition's block
     * size, goes through {@link #allGather}'s schedule, and every rank's block comes back into this rank's region,
     * bitwise.
     *
     * @param region this rank's {@code count} elements
     * @param count  elements
     * @param dtype  element type
     */
    public void allGatherShards(MemorySegment region, long count, DType dtype) {
        int world = group.worldSize();
        int me = group.rank();
        ShardPartition blocks = ShardPartition.of(count, world, dtype);
        long blockBytes = dtype.bytes(blocks.blockElements());
        MemorySegment mine = ownBlock(blockBytes);
        memory.zero(mine.asSlice(0, blockBytes));
        memory.copy(mine, region.asSlice(dtype.bytes(blocks.start(me)), dtype.bytes(blocks.size(me))));
        MemorySegment padded = paddedBlocks(blockBytes * world);
        allGather(mine, padded, blocks.blockElements(), dtype);
        for (int q = 0; q < world; q++) {
            memory.copy(region.asSlice(dtype.bytes(blocks.start(q))), padded.asSlice(blockBytes * q,
                    dtype.bytes(blocks.size(q))));
        }
    }

    /**
     * In-place broadcast: from the root to the same local rank on every machine, then inside each machine.
     *
     * @param buffer this rank's buffer (read on the root)
     * @param count  elements
     * @param dtype  element type
     * @param root   the group rank that sends
     */
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        int rootNode = root / topology.ranksPerNode();
        int rootLocal = root % topology.ranksPerNode();
        if (topology.localRank() == rootLocal && topology.nodes() > 1) {
            between.broadcast(buffer, count, dtype, rootNode); // the root's machine to the same local rank everywhere
        }
        intra.broadcast(buffer, count, dtype, rootLocal);
    }

    /** The machine's barrier, the machines' ({@link InterMachineLink#barrier}), the machine's again. */
    public void barrier() {
        intra.barrier();
        if (topology.nodes() > 1) {
            between.barrier();
        }
        intra.barrier();
    }

    /**
     * Not collective: aborts the machine's communicator and the group, so that every rank's waits fail.
     *
     * @param reason why, for the peers' exception messages
     */
    public void abort(String reason) {
        try {
            intra.abort(reason);
        } finally {
            group.abort(reason);
        }
    }

    /**
     * Frees the staging memory, closes the links, the machine's communicator and sub-group (collective). Again: nothing.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            memory.close();
            between.close();
            flat.close();
        } finally {
            try {
                intra.close();
            } finally {
                machine.close();
            }
        }
    }

    private MemorySegment staging(long bytes) {
        return staging = atLeast(staging, bytes);
    }

    private MemorySegment shard(long bytes) {
        return shard = atLeast(shard, bytes);
    }

    private MemorySegment subShard(long bytes) {
        return subShard = atLeast(subShard, bytes);
    }

    private MemorySegment paddedBlocks(long bytes) {
        return paddedBlocks = atLeast(paddedBlocks, bytes);
    }

    private MemorySegment ownBlock(long bytes) {
        return ownBlock = atLeast(ownBlock, bytes);
    }

    /** {@code current}, or a new buffer of at least {@code bytes} (doubling, so that growing sizes reallocate rarely). */
    private MemorySegment atLeast(MemorySegment current, long bytes) {
        if (current.byteSize() >= bytes) {
            return current;
        }
        if (current.address() != 0) {
            memory.free(current); // GPU: waits for the stream first
        }
        return memory.allocate(Math.max(bytes, 2 * current.byteSize()));
    }
}
