package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * Collective operations of one rank of a group (as an NCCL communicator). Every method is
 * collective: all ranks call it in the same order with agreeing arguments. Arguments are checked
 * across ranks before any rank writes shared data or any destination: a disagreement, or a buffer on
 * any rank that is null, shorter than the count, read-only where the collective writes it, freed (its
 * arena or symmetric memory closed) or confined to another thread, throws
 * {@link CollectiveMismatchException} on every rank, naming the rank whose argument was bad.
 *
 * <p>Buffers are either plain segments, which are staged through the communicator's own symmetric
 * scratch memory, or regions of a {@link SymmetricMemory} of the same group, which are reduced in
 * place with no staging copy. A count of 0 is a no-op (the arguments are still checked).
 *
 * <p>Failures. A {@link CollectiveMismatchException} is thrown before anything is written: every
 * rank's buffers are as they were and the group stays usable. Any other failure — a peer that died,
 * stopped, aborted or closed its communicator instead of arriving ({@link PeerTimeoutException}), or
 * this rank's own error inside the collective (a buffer whose arena another thread closes while the
 * collective runs, say) — aborts the group: the
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

    /**
     * The transport's name, as metrics tag it.
     *
     * @return {@code host-in-jvm}, {@code host-shm}, ...
     */
    String transportName();

    /**
     * Whether {@code algorithm} can run on this communicator (NCCL needs a GPU transport).
     *
     * @param algorithm the algorithm
     * @return true when some all-reduce can use it here
     */
    boolean supports(Algorithm algorithm);

    /**
     * Whether {@code algorithm} can run this particular all-reduce here: on the host every
     * supported algorithm runs every message; GPU kernels take only some dtypes and ops, and
     * ONE_SHOT only messages that fit its landing slots.
     *
     * @param algorithm the algorithm
     * @param dtype     the element type
     * @param op        the reduction
     * @param count     the number of elements
     * @return true when this all-reduce can use {@code algorithm} here
     */
    default boolean supports(Algorithm algorithm, DType dtype, ReduceOp op, long count) {
        return supports(algorithm);
    }

    /**
     * Collective: in-place all-reduce of {@code count} elements at the start of {@code buffer}. A
     * buffer that is not symmetric memory is copied through the communicator's staging memory in
     * pieces. Every rank gets the same result, bitwise (see {@link ReduceOp}).
     *
     * @param buffer    this rank's data, overwritten with the result; at least {@code dtype.bytes(count)} bytes
     * @param count     the number of elements (not bytes); equal on every rank
     * @param dtype     the element type; equal on every rank
     * @param op        the reduction; equal on every rank
     * @param algorithm the algorithm; equal on every rank and {@link #supports supported} here
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm);

    /**
     * Collective: in-place all-reduce of {@code count} elements at {@code offsetBytes} of symmetric
     * memory {@code memory}, with no staging copy.
     *
     * @param memory      symmetric memory of this communicator's group
     * @param offsetBytes where the elements start in every rank's region, in bytes
     * @param count       the number of elements (not bytes); equal on every rank
     * @param dtype       the element type
     * @param op          the reduction
     * @param algorithm   the algorithm
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op, Algorithm algorithm);

    /**
     * Reduce-scatter: {@code send} holds worldSize blocks of {@code recvCount} elements; rank r
     * receives block r reduced over all ranks into {@code recv}.
     *
     * @param send      worldSize blocks of {@code recvCount} elements, in rank order
     * @param recv      receives this rank's reduced block: at least {@code dtype.bytes(recvCount)} bytes
     * @param recvCount elements per block (not bytes); equal on every rank
     * @param dtype     the element type
     * @param op        the reduction
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op);

    /**
     * Collective all-gather: every rank's {@code sendCount} elements land in {@code recv} at block {@code rank}.
     *
     * @param send      this rank's {@code sendCount} elements
     * @param recv      receives worldSize blocks of {@code sendCount} elements, in rank order
     * @param sendCount elements per rank (not bytes); equal on every rank
     * @param dtype     the element type
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype);

    /**
     * In-place reduce-scatter on symmetric memory, with no staging copy: the {@code count} elements
     * at {@code offsetBytes} of every rank's region are cut into the blocks of
     * {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)}, and block r of rank r's
     * region receives block r reduced over all ranks (peers added in rank order, bitwise equal to
     * the same elements of a ONE_SHOT or TWO_SHOT all-reduce). The other blocks of every region are
     * left as they were. Returns once every rank has read its block from this rank's region, so the
     * caller may overwrite it.
     *
     * @param memory      symmetric memory of this communicator's group
     * @param offsetBytes where the elements start in every rank's region, in bytes
     * @param count       the number of elements over all blocks (not bytes); equal on every rank
     * @param dtype       the element type
     * @param op          the reduction
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op);

    /**
     * In-place all-gather on symmetric memory: with the blocks of
     * {@link ShardPartition#of ShardPartition.of(count, worldSize, dtype)} over the {@code count}
     * elements at {@code offsetBytes}, every rank copies block q from rank q's region into its own,
     * for every q. Afterwards every rank's region holds every rank's own block, bitwise. Returns once
     * every rank has copied this rank's block.
     *
     * @param memory      symmetric memory of this communicator's group
     * @param offsetBytes where the elements start in every rank's region, in bytes
     * @param count       the number of elements over all blocks (not bytes); equal on every rank
     * @param dtype       the element type
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype);

    /**
     * Collective broadcast: {@code count} elements of rank {@code root}'s buffer are copied into every rank's buffer.
     *
     * @param buffer the data on {@code root}; overwritten with it on the other ranks
     * @param count  the number of elements (not bytes); equal on every rank
     * @param dtype  the element type
     * @param root   the rank whose data is copied; equal on every rank
     * @throws CollectiveMismatchException when the ranks passed arguments that do not agree (on every rank,
     *         before any shared data is written; the group stays usable)
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     * @throws IllegalArgumentException when the arguments do not fit this rank's buffers
     */
    void broadcast(MemorySegment buffer, long count, DType dtype, int root);

    /**
     * Collective barrier: returns once every rank has entered it.
     *
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    void barrier();

    /**
     * This communicator seen as {@code type}, for operations only some transports have — on GPUs
     * {@link DeviceCommunicator} (synchronize, graph capture, point-to-point, device buffers) — so
     * code above the runtime never casts to a transport's class.
     *
     * @param type the capability wanted
     * @param <T>  its type
     * @return this communicator as {@code type}, or empty when this transport has no such capability
     */
    default <T> java.util.Optional<T> unwrap(Class<T> type) {
        return type.isInstance(this) ? java.util.Optional.of(type.cast(this)) : java.util.Optional.empty();
    }

    /**
     * Not collective: marks the group aborted with {@code reason}, so every rank that waits in, or
     * later enters, a collective on this communicator fails with a {@link PeerTimeoutException}
     * naming this rank. For a rank that hit an error outside a collective (a failed training step)
     * and will not arrive: its peers then fail promptly instead of waiting out the timeout.
     *
     * @param reason why, for the peers' exception messages
     */
    void abort(String reason);

    /** Collective: frees the scratch memory. */
    @Override
    void close();
}
