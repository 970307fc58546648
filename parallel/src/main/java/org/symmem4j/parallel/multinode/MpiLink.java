package org.symmem4j.parallel.multinode;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Provider;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.mpi.MpiComm;

/**
 * The traffic between machines over MPI (host memory, blocking): the peers' MPI communicator, or the world's for the
 * flat algorithm. MPI has no average ({@link #averages()} false) and its all-reduce of a shard runs as a
 * reduce-scatter and an all-gather.
 */
final class MpiLink implements InterMachineLink {

    private final MpiComm comm;
    /** Whether {@link #close} frees {@link #comm} (the peers' communicator; the world's belongs to its caller). */
    private final boolean owned;

    MpiLink(MpiComm comm, boolean owned) {
        this.comm = comm;
        this.owned = owned;
    }

    @Override
    public String name() {
        return "mpi";
    }

    @Override
    public Provider provider() {
        return Provider.MPI;
    }

    @Override
    public boolean averages() {
        return false;
    }

    @Override
    public boolean splitsShardAllReduce() {
        return true;
    }

    @Override
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op) {
        comm.allReduce(buffer, count, dtype, op);
    }

    @Override
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        comm.reduceScatterBlock(send, recv, recvCount, dtype, op);
    }

    @Override
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        comm.allGather(send, recv, sendCount, dtype);
    }

    @Override
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        comm.broadcast(buffer, count, dtype, root);
    }

    @Override
    public void barrier() {
        comm.barrier();
    }

    @Override
    public void close() {
        if (owned) {
            comm.close();
        }
    }
}
