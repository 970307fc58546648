package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * Collective operations of one rank of a group (as an NCCL communicator). Every method is
 * collective: all ranks call it in the same order with agreeing arguments. Arguments are checked
 * across ranks before any rank writes shared data; a disagreement, or a buffer shorter than the
 * count on any rank, throws {@link CollectiveMismatchException} on every rank.
 *
 * <p>Buffers are either plain segments, which are staged through the communicator's own symmetric
 * scratch memory, or regions of a {@link SymmetricMemory} of the same group, which are reduced in
 * place with no staging copy. A count of 0 is a no-op (the arguments are still checked).
 *
 * <p>Failures. A {@link CollectiveMismatchException} is thrown before anything is written: every
 * rank's buffers are as they were and the group stays usable. Any other failure — a peer that died,
 * stopped, aborted or closed its communicator instead of arriving ({@link PeerTimeoutException}), or
 * this rank's own error inside the collective (a read-only destination, say) — aborts the group: the
 * rank that fails first poisons it at once, so every peer throws within microseconds to milliseconds
 * naming the culprit. What the collective leaves in its destination is then unspecified on every
 * rank: any mix of the rank's input, partial sums and final results (collectives on symmetric
 * memory likewise leave the region mixed). Inputs in buffers other than the destination are never
 * written. An aborted group cannot be used again; its {@code close()} calls free without waiting for
 * peers. Create a new group.
 *
 * <p>Not thread-safe: one thread per rank.
 */
public interface Communicator extends AutoCloseable {

    /**
     * Collective: creates a communicator on the group's transport with default options. Every rank
     * of the group calls it.
     *
     * @param group this rank's group
     * @return this rank's communicator; close it collectively
     * @throws SymmemException when the transport cannot allocate its scratch memory or a peer does
     *         not arrive ({@link PeerTimeoutException})
     */
    static Communicator create(Group group) {
        return group.transport().communicator(group, CommunicatorOptions.defaults());
    }

    /**
     * Collective: as {@link #create(Group)}, with the sizes of the communicator's scratch memory given.
     *
     * @param group   this rank's group
     * @param options scratch sizes; every rank must pass the same
     * @return this rank's communicator; close it collectively
     * @throws SymmemException when the transport cannot allocate its scratch memory or a peer does
     *         not arrive ({@link PeerTimeoutException})
     */
    static Communicator create(Group group, CommunicatorOptions options) {
        return group.transport().communicator(group, options);
    }

    /**
     * The group this communicator runs on.
     *
     * @return the group given at creation
     */
    Group group();

    /** The transport name ({@code host-in-jvm}, {@code host-shm}, ...). */
    String transportName();

    /** Whether {@code algorithm} can run on this communicator (NCCL needs a GPU transport). */
    boolean supports(Algorithm algorithm);

    /**
     * Whether {@code algorithm} can run this particular all-reduce here: on the host every
     * supported algorithm runs every message; GPU kernels take only some dtypes and ops, and
     * ONE_SHOT only messages that fit its landing slots.
     */
    default boolean supports(Algorithm algorithm, DType dtype, ReduceOp op, long count) {
        return supports(algorithm);
    }

    /** In-place all-reduce of {@code count} elements at the start of {@code buffer}. */
    void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm);

    /** In-place all-reduce of {@code count} elements at {@code offsetBytes} of symmetric memory {@code memory}, with no staging copy. */
    void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op, Algorithm algorithm);

    /**
     * Reduce-scatter: {@code send} holds worldSize blocks of {@code recvCount} elements; rank r
     * receives block r reduced over all ranks into {@code recv}.
     */
    void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op);

    /** All-gather: every rank's {@code sendCount} elements land in {@code recv} at block {@code rank}. */
    void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype);

    /**
     * In-place reduce-scatter on symmetric memory, with no staging copy: the {@code count} elements
     * at {@code offsetBytes} of every rank's region are cut into the blocks of
     * {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)}, and block r of rank r's
     * region receives block r reduced over all ranks (peers added in rank order, bitwise equal to
     * the same elements of a ONE_SHOT or TWO_SHOT all-reduce). The other blocks of every region are
     * left as they were. Returns once every rank has read its block from this rank's region, so the
     * caller may overwrite it.
     */
    void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op);

    /**
     * In-place all-gather on symmetric memory: with the blocks of
     * {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)} over the {@code count}
     * elements at {@code offsetBytes}, every rank copies block q from rank q's region into its own,
     * for every q. Afterwards every rank's region holds every rank's own block, bitwise. Returns once
     * every rank has copied this rank's block.
     */
    void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype);

    /** Broadcast: {@code count} elements of rank {@code root}'s buffer are copied into every rank's buffer. */
    void broadcast(MemorySegment buffer, long count, DType dtype, int root);

    /** Collective barrier. */
    void barrier();

    /**
     * Not collective: marks the group aborted with {@code reason}, so every rank that waits in, or
     * later enters, a collective on this communicator fails with a {@link PeerTimeoutException}
     * naming this rank. For a rank that hit an error outside a collective (a failed training step)
     * and will not arrive: its peers then fail promptly instead of waiting out the timeout.
     */
    void abort(String reason);

    /** Collective: frees the scratch memory. */
    @Override
    void close();
}
