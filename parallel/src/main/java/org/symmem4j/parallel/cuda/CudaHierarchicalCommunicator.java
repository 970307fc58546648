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
import org.symmem4j.parallel.multinode.HierarchicalSchedule;
import org.symmem4j.parallel.multinode.NodeTopology;
import org.symmem4j.parallel.trace.Nvtx;

/**
 * Collectives of a GPU group that spans machines: our kernels on CUDA symmetric memory inside each machine
 * (the machine's ranks form a sub-group on the CUDA transport), NCCL between machines (the ranks with the
 * same local rank, one per machine, form an NCCL communicator: NCCL's network transports, InfiniBand, RoCE
 * or sockets), as NCCL and Horovod arrange them; a second NCCL communicator over every rank is the flat
 * alternative ({@link Algorithm#NCCL}). The schedule is {@link HierarchicalSchedule}'s (the host's
 * {@code HierarchicalCommunicator} runs the same one over MPI) over an {@link NcclLink} and {@link DeviceStaging};
 * this class checks the arguments, makes the rank's context current and adds the device operations.
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

    /** NVTX ranges around each level's ranges (payload: the call's count in bytes); nothing without NVTX. */
    private static final Nvtx.Range NVTX_ALL_REDUCE = Nvtx.range("symmem4j hierarchical all_reduce");
    private static final Nvtx.Range NVTX_REDUCE_SCATTER = Nvtx.range("symmem4j hierarchical reduce_scatter");
    private static final Nvtx.Range NVTX_ALL_GATHER = Nvtx.range("symmem4j hierarchical all_gather");
    private static final Nvtx.Range NVTX_BROADCAST = Nvtx.range("symmem4j hierarchical broadcast");

    /** The schedule: the machine's communicator (our kernels), NCCL between machines, device staging. */
    private final HierarchicalSchedule<CudaCommunicator, NcclLink> schedule;
    private final Group group;
    private final NodeTopology topology;
    private final CudaCommunicator intra;
    private final CudaDriver driver;
    private final CudaRank rank;
    /** NCCL over every rank of the group, for {@link Algorithm#NCCL} and point-to-point. */
    private final NcclLink flat;
    /** Times the all-reduces on the GPU ({@link #timeAllReduces}), on the machine communicator's stream. */
    private final AllReduceTimings timings;

    private CudaHierarchicalCommunicator(HierarchicalSchedule<CudaCommunicator, NcclLink> schedule, CudaDriver driver) {
        this.schedule = schedule;
        this.group = schedule.group();
        this.topology = schedule.topology();
        this.intra = schedule.intra();
        this.driver = driver;
        this.flat = schedule.flat();
        this.rank = flat.rank();
        this.timings = new AllReduceTimings(driver, rank, intra.stream());
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
                    + " them: " + Nccl.unavailableReason() + " (fix: install NCCL 2.27+ so libnccl.so.2 is on"
                    + " the library path)");
        }
        HierarchicalSchedule<CudaCommunicator, NcclLink> schedule = HierarchicalSchedule.open(group, topology,
                machine -> (CudaCommunicator) cuda.communicator(machine, options),
                (machine, intra) -> links(cuda, group, topology, machine, intra));
        return new CudaHierarchicalCommunicator(schedule, cuda.driver());
    }

    /** The two NCCL communicators and the device staging; on failure the NCCL communicators made are destroyed. */
    private static HierarchicalSchedule.Links<NcclLink> links(CudaTransport cuda, Group group, NodeTopology topology,
                                                              Group machine, CudaCommunicator intra) {
        CudaRank r = cuda.rank(machine);
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
        NcclLink flat = null;
        NcclLink between = null;
        try {
            flat = new NcclLink(nccl.initRank(group.worldSize(), flatId, group.rank()), r, group);
            between = new NcclLink(nccl.initRank(topology.nodes(), betweenId, topology.node()), r, group);
            DeviceStaging memory = new DeviceStaging(intra, cuda.driver(),
                    Long.BYTES * (long) Math.max(1, topology.ranksPerNode()));
            return new HierarchicalSchedule.Links<>(between, flat, memory);
        } catch (RuntimeException | Error e) {
            if (between != null) {
                between.close();
            }
            if (flat != null) {
                flat.close();
            }
            throw e;
        }
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
    public synchronized void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        Nvtx.push(NVTX_ALL_REDUCE, count, dtype);
        try {
            requireUsable(dtype, op, buffer, count, "buffer");
            if (count == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            if (algorithm != Algorithm.NCCL && algorithm != Algorithm.HIERARCHICAL) {
                throw new IllegalArgumentException("algorithm=" + algorithm + " needs symmetric memory across every rank, and this"
                        + " group spans " + topology.nodes() + " machines: expected HIERARCHICAL or NCCL (fix: pass"
                        + " Algorithm.HIERARCHICAL or Algorithm.NCCL)");
            }
            // AVG: each level divides by its own size (machine L, then NCCL's average over N): the average over L x N
            boolean timed = timings.begin();
            schedule.allReduce(buffer, count, dtype, op, algorithm);
            if (timed) {
                driver.setCurrent(rank.context); // the schedule's NCCL levels may leave another context current
                timings.end(algorithm, dtype.bytes(count));
            }
        } finally {
            Nvtx.pop();
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
                    + " within one machine, e.g. a machine's sub-group), found " + (memory == null ? "null" : "host memory")
                    + " (fix: allocate it with SymmetricMemory.allocate on a machine's sub-group of the CUDA transport,"
                    + " or pass the plain device buffer instead)");
        }
        if (dtype == null || offsetBytes < 0 || count < 0 || offsetBytes > memory.byteSize() - dtype.bytes(count)) {
            throw new IllegalArgumentException(op + ": " + count + " " + dtype + " elements at offsetBytes=" + offsetBytes
                    + " do not fit the memory's " + memory.byteSize() + " bytes (fix: pass offsetBytes >= 0 and a count"
                    + " whose bytes fit after it)");
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
        Nvtx.push(NVTX_REDUCE_SCATTER, recvCount, dtype);
        try {
            int world = group.worldSize();
            requireUsable(dtype, op, send, recvCount * world, "send");
            requireUsable(dtype, op, recv, recvCount, "recv");
            if (recvCount == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            schedule.reduceScatter(send, recv, recvCount, dtype, op);
        } finally {
            Nvtx.pop();
        }
    }

    /** Inside each machine, then between machines: machine-major is rank order. */
    @Override
    public synchronized void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        Nvtx.push(NVTX_ALL_GATHER, sendCount, dtype);
        try {
            requireUsable(dtype, ReduceOp.SUM, send, sendCount, "send");
            requireUsable(dtype, ReduceOp.SUM, recv, sendCount * group.worldSize(), "recv");
            if (sendCount == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            schedule.allGather(send, recv, sendCount, dtype);
        } finally {
            Nvtx.pop();
        }
    }

    /** The in-place forms over shards of symmetric memory need memory spanning the group: refused across machines. */
    @Override
    public void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op) {
        throw CudaTransport.capabilities(topology, null).refusal(org.symmem4j.parallel.TransportCapabilities.Capability.IN_PLACE_REDUCE_SCATTER);
    }

    /** Refused across machines, as {@link #reduceScatter(SymmetricMemory, long, long, DType, ReduceOp)}. */
    @Override
    public void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        throw CudaTransport.capabilities(topology, null).refusal(org.symmem4j.parallel.TransportCapabilities.Capability.IN_PLACE_ALL_GATHER);
    }

    /** From the root to the same local rank on every machine (NCCL), then inside each machine. */
    @Override
    public synchronized void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        Nvtx.push(NVTX_BROADCAST, count, dtype);
        try {
            requireUsable(dtype, ReduceOp.SUM, buffer, count, "buffer");
            if (root < 0 || root >= group.worldSize()) {
                throw new IllegalArgumentException("root=" + root + " expected 0 .. " + (group.worldSize() - 1)
                        + " (fix: pass a rank of the group as root, the same on every rank)");
            }
            if (count == 0) {
                return;
            }
            driver.setCurrent(rank.context);
            schedule.broadcast(buffer, count, dtype, root);
        } finally {
            Nvtx.pop();
        }
    }

    /** The machine's barrier, the ranks' meeting through the group, the machine's barrier again. */
    @Override
    public synchronized void barrier() {
        schedule.barrier();
    }

    @Override
    public void abort(String reason) {
        schedule.abort(reason);
    }

    @Override
    public String deviceName() {
        return intra.deviceName();
    }

    @Override
    public long[] memoryInfo() {
        return intra.memoryInfo();
    }

    @Override
    public int deviceOrdinal() {
        return intra.deviceOrdinal();
    }

    @Override
    public synchronized void synchronize() {
        intra.synchronize();
        timings.harvest();
    }

    /**
     * Times this communicator's all-reduces, each as a whole (the three levels of HIERARCHICAL, or the flat NCCL
     * call), on the machine communicator's stream; see {@link DeviceCommunicator#timeAllReduces}.
     */
    @Override
    public synchronized void timeAllReduces(org.symmem4j.parallel.DeviceTimingListener listener) {
        timings.listen(listener);
    }

    @Override
    public synchronized int harvestTimings() {
        return timings.harvest();
    }

    @Override
    public synchronized long droppedTimings() {
        return timings.dropped();
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
        flat.send(buffer, peer);
    }

    /** NCCL point-to-point over the whole group (group ranks). */
    @Override
    public void recv(MemorySegment buffer, int peer) {
        driver.setCurrent(rank.context);
        flat.recv(buffer, peer);
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
    public void copyByKernelAsync(MemorySegment dst, MemorySegment src) {
        intra.copyByKernelAsync(dst, src);
    }

    @Override
    public void copyFromHost(MemorySegment dst, MemorySegment src) {
        intra.copyFromHost(dst, src);
    }

    @Override
    public void copyToHost(MemorySegment dst, MemorySegment src) {
        intra.copyToHost(dst, src);
    }

    /** Frees the staging, destroys the NCCL communicators, closes the machine's communicator and sub-group (collective). */
    @Override
    public synchronized void close() {
        try {
            if (timings.on() && !schedule.isClosed()) {
                synchronize(); // reports the timed all-reduces
            }
        } finally {
            timings.close();
            schedule.close();
        }
    }

    private void requireUsable(DType dtype, ReduceOp op, MemorySegment buffer, long count, String what) {
        if (schedule.isClosed()) {
            throw new IllegalStateException("the hierarchical GPU communicator is closed (expected an open one; fix:"
                    + " call collectives before close(), or create a new communicator)");
        }
        if (dtype == null || op == null) {
            throw new IllegalArgumentException("dtype and op must be given, found dtype=" + dtype + " op=" + op
                    + " (fix: pass a DType and a ReduceOp, not null)");
        }
        if (buffer == null || count < 0 || buffer.byteSize() < dtype.bytes(count)) {
            throw new IllegalArgumentException(what + "=" + buffer + " expected device memory of at least "
                    + (count < 0 ? "0" : dtype.bytes(count)) + " bytes (" + count + " " + dtype + " elements; fix: pass"
                    + " count >= 0 and a buffer that holds count elements)");
        }
    }
}
