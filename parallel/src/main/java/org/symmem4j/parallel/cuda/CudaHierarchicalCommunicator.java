package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.multinode.NodeTopology;

/**
 * Collectives of a GPU group that spans machines: our kernels on CUDA symmetric memory inside each machine
 * (the machine's ranks form a sub-group on the CUDA transport), NCCL between machines (the ranks with the
 * same local rank, one per machine, form an NCCL communicator: NCCL's network transports, InfiniBand, RoCE
 * or sockets), as NCCL and Horovod arrange them; a second NCCL communicator over every rank is the flat
 * alternative ({@link Algorithm#NCCL}).
 *
 * <pre>
 *   all-reduce (HIERARCHICAL), L ranks per machine, N machines, the buffer padded to a multiple of L:
 *     1. inside each machine: reduce-scatter (our kernels) -> local rank l holds block l summed over its machine
 *     2. between machines:    NCCL all-reduce of block l    -> block l summed over everything, on every machine
 *     3. inside each machine: all-gather (our kernels)     -> the whole sum on every rank
 * </pre>
 *
 * Only 1/L of the bytes cross machines per rank, and each machine's L links to the network carry a block
 * each. Every element is reduced once in a fixed order (inside a machine in local-rank order, between machines
 * in NCCL's), then copied: deterministic and bitwise identical on every rank, not bitwise equal to the flat NCCL
 * all-reduce (another association). Reduce-scatter and all-gather are hierarchical likewise (the blocks packed
 * so that local rank l reduces every machine's block l), broadcast goes from the root to its local rank on
 * every machine (NCCL) and then inside each machine. Everything is enqueued on one stream, the machine
 * communicator's ({@link DeviceCommunicator}, reached by {@code unwrap}); buffers are plain device memory of
 * this rank (the {@link SymmetricMemory} forms work on this rank's buffer of device memory: symmetric memory
 * cannot span machines). FLOAT32 and BFLOAT16 with SUM or AVG run our kernels inside a machine; other
 * types and operations are correct but go through the machine communicator's host path. Arguments are compared
 * across the ranks of each machine (the machine communicator's entry check); between machines, as with NCCL itself,
 * they are not: a count that differs between machines makes NCCL wait or read past the shorter buffer.
 */
final class CudaHierarchicalCommunicator implements Communicator, DeviceCommunicator {

    private final Group group;
    private final NodeTopology topology;
    private final Group machine;
    private final CudaCommunicator intra;
    private final CudaDriver driver;
    private final CudaRank rank;
    /** NCCL over the ranks with this rank's local rank, one per machine (rank in it: this rank's machine). */
    private final MemorySegment between;
    /** NCCL over every rank of the group, for {@link Algorithm#NCCL}. */
    private final MemorySegment flat;
    /** Device staging: the padded buffer of an all-reduce, the packed blocks of a reduce-scatter; and the shard. */
    private MemorySegment staging = MemorySegment.NULL;
    private MemorySegment shard = MemorySegment.NULL;
    /** Zeros for the padding of an all-reduce whose count is not a multiple of the ranks per machine. */
    private final MemorySegment zeros;
    private boolean closed;

    private CudaHierarchicalCommunicator(Group group, NodeTopology topology, Group machine, CudaCommunicator intra,
                                         CudaDriver driver, CudaRank rank, MemorySegment between, MemorySegment flat,
                                         MemorySegment zeros) {
        this.group = group;
        this.topology = topology;
        this.machine = machine;
        this.intra = intra;
        this.driver = driver;
        this.rank = rank;
        this.between = between;
        this.flat = flat;
        this.zeros = zeros;
    }

    /**
     * Collective over {@code group}: the machine sub-group and its communicator on {@code cuda}, then the two NCCL
     * communicators (their unique ids drawn by the first rank of each and handed out through the group).
     *
     * @throws CudaUnavailableException without NCCL (it carries the traffic between machines)
     */
    static CudaHierarchicalCommunicator create(CudaTransport cuda, Group group, NodeTopology topology,
                                               CommunicatorOptions options) {
        if (!Nccl.available()) {
            throw new CudaUnavailableException("a GPU group spanning " + topology.nodes() + " machines needs NCCL between"
                    + " them: " + Nccl.unavailableReason() + " (install NCCL 2.27+ so libnccl.so.2 is on the library path)");
        }
        Group machine = group.split(topology.node(), topology.localRank(), "machine");
        CudaCommunicator intra = null;
        MemorySegment between = null;
        MemorySegment flat = null;
        CudaRank r = null;
        try {
            intra = (CudaCommunicator) cuda.communicator(machine, options);
            r = cuda.rank(machine);
            Nccl nccl = Nccl.get();
            // every NCCL id in one exchange: rank 0 draws the flat one, local rank l of machine 0 the one between machines
            byte[] mine = new byte[2 * Nccl.UNIQUE_ID_BYTES];
            if (group.rank() == 0) {
                System.arraycopy(nccl.uniqueId(), 0, mine, 0, Nccl.UNIQUE_ID_BYTES);
            }
            if (topology.node() == 0) {
                System.arraycopy(nccl.uniqueId(), 0, mine, Nccl.UNIQUE_ID_BYTES, Nccl.UNIQUE_ID_BYTES);
            }
            List<byte[]> ids = group.allGatherBytes("cuda-hierarchical-nccl-ids", mine);
            byte[] flatId = java.util.Arrays.copyOfRange(ids.getFirst(), 0, Nccl.UNIQUE_ID_BYTES);
            byte[] betweenId = java.util.Arrays.copyOfRange(ids.get(topology.localRank()), Nccl.UNIQUE_ID_BYTES,
                    2 * Nccl.UNIQUE_ID_BYTES);
            cuda.driver().setCurrent(r.context);
            flat = nccl.initRank(group.worldSize(), flatId, group.rank());
            between = nccl.initRank(topology.nodes(), betweenId, topology.node());
            MemorySegment zeros = intra.allocateDevice(Long.BYTES * (long) Math.max(1, topology.ranksPerNode()));
            cuda.driver().memset(zeros.address(), (byte) 0, zeros.byteSize());
            return new CudaHierarchicalCommunicator(group, topology, machine, intra, cuda.driver(), r, between, flat, zeros);
        } catch (RuntimeException | Error e) {
            if (between != null) {
                Nccl.get().destroy(between);
            }
            if (flat != null) {
                Nccl.get().destroy(flat);
            }
            if (intra != null) {
                intra.close();
            }
            machine.close();
            throw e;
        }
    }

    @Override
    public Group group() {
        return group;
    }

    @Override
    public String transportName() {
        return "hierarchical(" + intra.transportName() + " + nccl)";
    }

    @Override
    public boolean supports(Algorithm algorithm) {
        return algorithm == Algorithm.HIERARCHICAL || algorithm == Algorithm.NCCL;
    }

    @Override
    public synchronized void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        requireUsable(dtype, op, buffer, count, "buffer");
        if (count == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        if (algorithm == Algorithm.NCCL) {
            Nccl.get().allReduce(buffer.address(), buffer.address(), count, dtype, op, flat, rank.stream);
            return;
        }
        if (algorithm != Algorithm.HIERARCHICAL) {
            throw new IllegalArgumentException("algorithm=" + algorithm + " needs symmetric memory across every rank, and this"
                    + " group spans " + topology.nodes() + " machines: expected HIERARCHICAL or NCCL");
        }
        int perNode = topology.ranksPerNode();
        if (perNode == 1) {
            // one rank per machine: nothing to do inside a machine
            Nccl.get().allReduce(buffer.address(), buffer.address(), count, dtype, op, between, rank.stream);
            return;
        }
        long padded = (count + perNode - 1) / perNode * perNode;
        long piece = padded / perNode;
        MemorySegment all = buffer;
        if (padded != count) {
            all = staging(dtype.bytes(padded));
            intra.copyAsync(all, buffer.asSlice(0, dtype.bytes(count)));
            intra.copyAsync(all.asSlice(dtype.bytes(count)), zeros.asSlice(0, dtype.bytes(padded - count)));
        }
        MemorySegment mine = shard(dtype.bytes(piece));
        // AVG: each level divides by its own size (machine L, then NCCL's average over N): the average over L x N
        intra.reduceScatter(all, mine, piece, dtype, op);                                                // 1.
        Nccl.get().allReduce(mine.address(), mine.address(), piece, dtype, op, between, rank.stream);    // 2.
        intra.allGather(mine, all, piece, dtype);                                                        // 3.
        if (all != buffer) {
            intra.copyAsync(buffer.asSlice(0, dtype.bytes(count)), all.asSlice(0, dtype.bytes(count)));
        }
    }

    /** On device symmetric memory of this process (of any group: it cannot span machines), this rank's buffer from {@code offsetBytes}. */
    @Override
    public void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        allReduce(ownBuffer(memory, offsetBytes, count, dtype, "allReduce"), count, dtype, op, algorithm);
    }

    private static MemorySegment ownBuffer(SymmetricMemory memory, long offsetBytes, long count, DType dtype, String op) {
        if (memory == null || memory.unwrap(DeviceMemory.class).isEmpty()) {
            throw new IllegalArgumentException(op + " on SymmetricMemory: device memory of this process expected (a group"
                    + " within one machine, e.g. a machine's sub-group), found " + (memory == null ? "null" : "host memory"));
        }
        if (dtype == null || offsetBytes < 0 || count < 0 || offsetBytes > memory.byteSize() - dtype.bytes(count)) {
            throw new IllegalArgumentException(op + ": " + count + " " + dtype + " elements at offsetBytes=" + offsetBytes
                    + " do not fit the memory's " + memory.byteSize() + " bytes");
        }
        return memory.local().asSlice(offsetBytes, dtype.bytes(count));
    }

    /**
     * Hierarchical reduce-scatter: rank {@code r = node x L + l} receives block {@code r}. The blocks are packed so
     * that local rank {@code l} reduces every machine's block {@code l} inside the machine, then NCCL's
     * reduce-scatter between machines gives each its own machine's block.
     */
    @Override
    public synchronized void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        int world = group.worldSize();
        requireUsable(dtype, op, send, recvCount * world, "send");
        requireUsable(dtype, op, recv, recvCount, "recv");
        if (recvCount == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        int nodes = topology.nodes();
        long block = dtype.bytes(recvCount);
        MemorySegment packed = staging(block * world);
        for (int q = 0; q < world; q++) {
            intra.copyAsync(packed.asSlice(block * topology.packedIndex(q), block), send.asSlice(block * q, block));
        }
        MemorySegment mine = shard(block * nodes);
        intra.reduceScatter(packed, mine, recvCount * nodes, dtype, op);
        Nccl.get().reduceScatter(mine.address(), recv.address(), recvCount, dtype, op, between, rank.stream);
    }

    /** Inside each machine, then between machines: machine-major is rank order. */
    @Override
    public synchronized void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        int perNode = topology.ranksPerNode();
        requireUsable(dtype, ReduceOp.SUM, send, sendCount, "send");
        requireUsable(dtype, ReduceOp.SUM, recv, sendCount * group.worldSize(), "recv");
        if (sendCount == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        MemorySegment machineBlocks = shard(dtype.bytes(sendCount * perNode));
        intra.allGather(send, machineBlocks, sendCount, dtype);
        Nccl.get().allGather(machineBlocks.address(), recv.address(), sendCount * perNode, dtype, between, rank.stream);
    }

    /** The in-place forms over shards of symmetric memory need memory spanning the group: refused across machines. */
    @Override
    public void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op) {
        throw new UnsupportedOperationException("reduceScatter on SymmetricMemory: this GPU group spans " + topology.nodes()
                + " machines and symmetric memory cannot; use the segment form with device buffers");
    }

    /** Refused across machines, as {@link #reduceScatter(SymmetricMemory, long, long, DType, ReduceOp)}. */
    @Override
    public void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        throw new UnsupportedOperationException("allGather on SymmetricMemory: this GPU group spans " + topology.nodes()
                + " machines and symmetric memory cannot; use the segment form with device buffers");
    }

    /** From the root to the same local rank on every machine (NCCL), then inside each machine. */
    @Override
    public synchronized void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        requireUsable(dtype, ReduceOp.SUM, buffer, count, "buffer");
        if (root < 0 || root >= group.worldSize()) {
            throw new IllegalArgumentException("root=" + root + " expected 0 .. " + (group.worldSize() - 1));
        }
        if (count == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        int rootNode = root / topology.ranksPerNode();
        int rootLocal = root % topology.ranksPerNode();
        if (topology.localRank() == rootLocal) {
            Nccl.get().broadcast(buffer.address(), buffer.address(), count, dtype, rootNode, between, rank.stream);
        }
        intra.broadcast(buffer, count, dtype, rootLocal);
    }

    /** The machine's barrier, the ranks' meeting through the group, the machine's barrier again. */
    @Override
    public synchronized void barrier() {
        intra.barrier();
        group.allGatherBytes("cuda-hierarchical-barrier", new byte[0]);
        intra.barrier();
    }

    @Override
    public void abort(String reason) {
        try {
            intra.abort(reason);
        } finally {
            group.abort(reason);
        }
    }

    @Override
    public String deviceName() {
        return intra.deviceName();
    }

    @Override
    public int deviceOrdinal() {
        return intra.deviceOrdinal();
    }

    @Override
    public void synchronize() {
        intra.synchronize();
    }

    @Override
    public DeviceGraph capture(Runnable body) {
        return intra.capture(body);
    }

    @Override
    public double elapsedMillis(Runnable body) {
        return intra.elapsedMillis(body);
    }

    @Override
    public MemorySegment stream() {
        return intra.stream();
    }

    @Override
    public void orderAfter(MemorySegment other) {
        intra.orderAfter(other);
    }

    @Override
    public void orderBefore(MemorySegment other) {
        intra.orderBefore(other);
    }

    /** NCCL point-to-point over the whole group (group ranks). */
    @Override
    public void send(MemorySegment buffer, int peer) {
        driver.setCurrent(rank.context);
        Nccl.get().send(buffer.address(), CudaCommunicator.p2pCount(buffer.byteSize()), DType.FLOAT32, peer, flat, rank.stream);
    }

    /** NCCL point-to-point over the whole group (group ranks). */
    @Override
    public void recv(MemorySegment buffer, int peer) {
        driver.setCurrent(rank.context);
        Nccl.get().recv(buffer.address(), CudaCommunicator.p2pCount(buffer.byteSize()), DType.FLOAT32, peer, flat, rank.stream);
    }

    @Override
    public MemorySegment allocateDevice(long bytes) {
        return intra.allocateDevice(bytes);
    }

    @Override
    public void freeDevice(MemorySegment buffer) {
        intra.freeDevice(buffer);
    }

    @Override
    public void copyAsync(MemorySegment dst, MemorySegment src) {
        intra.copyAsync(dst, src);
    }

    @Override
    public void copyFromHost(MemorySegment dst, MemorySegment src) {
        intra.copyFromHost(dst, src);
    }

    @Override
    public void copyToHost(MemorySegment dst, MemorySegment src) {
        intra.copyToHost(dst, src);
    }

    /** Destroys the NCCL communicators, closes the machine's communicator and sub-group, frees the staging (collective). */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            intra.synchronize();
            for (MemorySegment buffer : new MemorySegment[] {staging, shard, zeros}) {
                if (buffer.address() != 0) {
                    intra.freeDevice(buffer);
                }
            }
            Nccl.get().destroy(between);
            Nccl.get().destroy(flat);
        } finally {
            try {
                intra.close();
            } finally {
                machine.close();
            }
        }
    }

    private void requireUsable(DType dtype, ReduceOp op, MemorySegment buffer, long count, String what) {
        if (closed) {
            throw new IllegalStateException("the hierarchical GPU communicator is closed");
        }
        if (dtype == null || op == null) {
            throw new IllegalArgumentException("dtype and op must be given, found dtype=" + dtype + " op=" + op);
        }
        if (buffer == null || count < 0 || buffer.byteSize() < dtype.bytes(count)) {
            throw new IllegalArgumentException(what + "=" + buffer + " expected device memory of at least "
                    + (count < 0 ? "0" : dtype.bytes(count)) + " bytes (" + count + " " + dtype + " elements)");
        }
    }

    private MemorySegment staging(long bytes) {
        return staging = atLeast(staging, bytes);
    }

    private MemorySegment shard(long bytes) {
        return shard = atLeast(shard, bytes);
    }

    /** {@code current}, or a new device buffer of at least {@code bytes} (doubling; the old one freed after the stream). */
    private MemorySegment atLeast(MemorySegment current, long bytes) {
        if (current.byteSize() >= bytes) {
            return current;
        }
        if (current.address() != 0) {
            intra.freeDevice(current); // waits for the stream first
        }
        return intra.allocateDevice(Math.max(bytes, 2 * current.byteSize()));
    }
}
