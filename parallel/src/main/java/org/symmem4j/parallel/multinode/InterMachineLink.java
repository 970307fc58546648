package org.symmem4j.parallel.multinode;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Provider;
import org.symmem4j.parallel.ReduceOp;

/**
 * The traffic between machines of a {@link HierarchicalSchedule}: collectives over the peer ranks of every machine
 * (the ranks with this rank's local rank, one per machine; rank in the link: the machine's index), or over every
 * rank of the group for the flat algorithm. Each call is one collective on this rank's buffers, issued in the
 * caller's order, which every rank keeps: on the host it returns when done ({@code MpiLink}: MPI), on a GPU it is
 * enqueued on the rank's stream ({@code cuda.NcclLink}: NCCL). Buffers are this rank's memory of the link's kind
 * (host segments, or device memory whose address the segment carries); arguments are the caller's to check.
 */
public interface InterMachineLink extends AutoCloseable {

    /**
     * What carries the traffic, for the communicator's {@code transportName}.
     *
     * @return e.g. {@code mpi}, {@code nccl}
     */
    String name();

    /**
     * The library that carries the traffic; its {@link Provider#library()} is the flat algorithm this link runs over
     * every rank of the group (the alternative to {@link Algorithm#HIERARCHICAL}).
     *
     * @return {@link Provider#MPI} or {@link Provider#NCCL}
     */
    Provider provider();

    /**
     * Whether the link reduces with {@link ReduceOp#AVG} itself. When it does not, the schedule reduces with SUM at
     * every level and divides by the group's size at the end ({@link StagingMemory#divide}).
     *
     * @return true for NCCL, false for MPI
     */
    boolean averages();

    /**
     * Whether the all-reduce of a rank's shard between machines runs as a reduce-scatter and an all-gather of its
     * sub-blocks, one per machine (MPI: every element then reduced on one machine in a fixed order, whatever MPI picks
     * for the size; the buffer is padded to a multiple of the ranks per machine times the machines), or as one
     * all-reduce (NCCL; padded to a multiple of the ranks per machine).
     *
     * @return true for MPI
     */
    boolean splitsShardAllReduce();

    /**
     * In-place all-reduce of {@code count} elements at the start of {@code buffer}.
     *
     * @param buffer this rank's buffer
     * @param count  elements
     * @param dtype  element type
     * @param op     reduction ({@link ReduceOp#AVG} only where {@link #averages()})
     */
    void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op);

    /**
     * Reduce-scatter of equal blocks: the link's rank {@code n} receives block {@code n} of {@code send}, reduced.
     *
     * @param send      the link's size times {@code recvCount} elements
     * @param recv      {@code recvCount} elements
     * @param recvCount elements each rank receives
     * @param dtype     element type
     * @param op        reduction ({@link ReduceOp#AVG} only where {@link #averages()})
     */
    void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op);

    /**
     * All-gather in link rank order.
     *
     * @param send      {@code sendCount} elements
     * @param recv      the link's size times {@code sendCount} elements
     * @param sendCount elements each rank contributes
     * @param dtype     element type
     */
    void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype);

    /**
     * In-place broadcast from the link's rank {@code root}.
     *
     * @param buffer this rank's buffer (read on the root, written elsewhere)
     * @param count  elements
     * @param dtype  element type
     * @param root   the link rank that sends
     */
    void broadcast(MemorySegment buffer, long count, DType dtype, int root);

    /** The machines meet: returns (host) or is ordered (GPU) after every peer has arrived. */
    void barrier();

    /** Frees what the link holds (collective over its ranks where the library's free is). */
    @Override
    void close();
}
