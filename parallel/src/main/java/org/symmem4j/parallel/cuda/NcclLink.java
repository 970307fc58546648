package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Provider;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.multinode.InterMachineLink;

/**
 * The traffic between machines over NCCL (NCCL's network transports: InfiniBand, RoCE or sockets): every call
 * enqueued on the rank's stream, buffers device memory (the segments' addresses). The rank's context must be current
 * (the communicator makes it so before each collective). NCCL averages itself, and all-reduces a shard in one call.
 */
final class NcclLink implements InterMachineLink {

    private final MemorySegment comm;
    private final CudaRank rank;
    /** Where the machines meet for {@link #barrier}. */
    private final Group group;

    /**
     * @param comm  the NCCL communicator (destroyed by {@link #close})
     * @param rank  the rank whose stream the calls are enqueued on
     * @param group the whole group, for {@link #barrier}
     */
    NcclLink(MemorySegment comm, CudaRank rank, Group group) {
        this.comm = comm;
        this.rank = rank;
        this.group = group;
    }

    CudaRank rank() {
        return rank;
    }

    @Override
    public String name() {
        return "nccl";
    }

    @Override
    public Provider provider() {
        return Provider.NCCL;
    }

    @Override
    public boolean averages() {
        return true;
    }

    @Override
    public boolean splitsShardAllReduce() {
        return false;
    }

    @Override
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op) {
        Nccl.get().allReduce(buffer.address(), buffer.address(), count, dtype, op, comm, rank.stream);
    }

    @Override
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        Nccl.get().reduceScatter(send.address(), recv.address(), recvCount, dtype, op, comm, rank.stream);
    }

    @Override
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        Nccl.get().allGather(send.address(), recv.address(), sendCount, dtype, comm, rank.stream);
    }

    @Override
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        Nccl.get().broadcast(buffer.address(), buffer.address(), count, dtype, root, comm, rank.stream);
    }

    /** The ranks' meeting through the group (on the host: the machines' barriers around it order the streams). */
    @Override
    public void barrier() {
        group.allGatherBytes("cuda-hierarchical-barrier", new byte[0]);
    }

    /** NCCL point-to-point on this link's communicator (its ranks). */
    void send(MemorySegment buffer, int peer) {
        Nccl.get().send(buffer.address(), CudaCommunicator.p2pCount(buffer.byteSize()), DType.FLOAT32, peer, comm, rank.stream);
    }

    /** NCCL point-to-point on this link's communicator (its ranks). */
    void recv(MemorySegment buffer, int peer) {
        Nccl.get().recv(buffer.address(), CudaCommunicator.p2pCount(buffer.byteSize()), DType.FLOAT32, peer, comm, rank.stream);
    }

    @Override
    public void close() {
        Nccl.get().destroy(comm);
    }
}
