package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * Symmetric memory: every rank of a group holds a buffer of the same byte size, and every rank can
 * read and write every peer's buffer directly, plus a small signal pad per rank for flags.
 * Collectives are then plain loads and stores plus flag protocols (see {@link Communicator}).
 *
 * <p>Created collectively with {@link #allocate(Group, long)} or {@link #register(Group, MemorySegment)};
 * {@link #close()} is collective too (nobody frees memory a peer may still touch).
 *
 * <p>Signals: each pad has {@link #signalSlots()} 64-bit slots. {@link #putWithSignal} copies data
 * into a peer's buffer and then updates a slot of the peer's pad with release semantics;
 * {@link #waitSignal} waits with acquire semantics, so data put before a signal is visible once
 * the signal is seen. Slots start at zero.
 */
public interface SymmetricMemory extends AutoCloseable {

    /**
     * Collective: allocates {@code bytes} on every rank through the group's transport.
     *
     * @param group this rank's group
     * @param bytes bytes per rank, equal on every rank
     * @return this rank's view of the memory; close it collectively
     * @throws SymmemException when the memory cannot be allocated or mapped, or the ranks ask for different sizes
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    static SymmetricMemory allocate(Group group, long bytes) {
        return group.transport().allocate(group, bytes);
    }

    /**
     * Collective: registers an existing buffer of each rank (same size everywhere); see {@link Transport#register}.
     *
     * @param group  this rank's group
     * @param buffer this rank's existing buffer; the same byte size on every rank
     * @return this rank's view of the memory; close it collectively (the buffer itself stays the caller's)
     * @throws UnsupportedOperationException where the transport cannot map private memory (cross-process
     *         host groups): allocate instead
     * @throws SymmemException when the ranks' sizes differ
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    static SymmetricMemory register(Group group, MemorySegment buffer) {
        return group.transport().register(group, buffer);
    }

    /**
     * The group whose ranks share this memory.
     *
     * @return the group given at allocation
     */
    Group group();

    /**
     * Bytes per rank.
     *
     * @return the size of every rank's buffer, in bytes
     */
    long byteSize();

    /**
     * Allocation index within the group: equal on every rank for the same collective allocation.
     *
     * @return the allocation index
     */
    long id();

    /**
     * This rank's buffer.
     *
     * @return this rank's buffer, {@link #byteSize()} bytes
     */
    MemorySegment local();

    /**
     * Whether {@link #local()} and {@link #peer(int)} can be read and written by Java code on this
     * host: true for host transports; false for device memory, whose segments carry device addresses
     * that only kernels and copies may touch.
     *
     * @return true when Java code may access the segments
     */
    boolean hostAddressable();

    /**
     * Rank {@code rank}'s buffer as mapped in this rank ({@code peer(rank()) == local()}).
     *
     * @param rank a rank of the group, 0..worldSize-1
     * @return that rank's buffer, {@link #byteSize()} bytes
     * @throws IndexOutOfBoundsException when {@code rank} is not a rank of the group
     */
    MemorySegment peer(int rank);

    /**
     * Number of signal slots per pad.
     *
     * @return slots per pad
     */
    int signalSlots();

    /**
     * Collective: returns once every rank has called it; writes before it are visible after it.
     *
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    void barrier();

    /**
     * Copies {@code src} into rank {@code peer}'s buffer at {@code dstOffset}, then applies
     * {@code op value} to signal slot {@code slot} of that peer's pad (release), so a peer that
     * sees the signal also sees the data.
     *
     * @param peer      the destination rank
     * @param src       the data; at most {@code byteSize() - dstOffset} bytes
     * @param dstOffset where the data goes in the peer's buffer, in bytes
     * @param slot      the signal slot, 0..signalSlots()-1
     * @param value     the operand of {@code op}
     * @param op        set or add
     * @throws IndexOutOfBoundsException when the peer, the slot or the data's range does not exist
     */
    void putWithSignal(int peer, MemorySegment src, long dstOffset, int slot, long value, SignalOp op);

    /**
     * Applies {@code op value} to signal slot {@code slot} of rank {@code peer}'s pad (release).
     *
     * @param peer  the destination rank
     * @param slot  the signal slot, 0..signalSlots()-1
     * @param value the operand of {@code op}
     * @param op    set or add
     * @throws IndexOutOfBoundsException when the peer or the slot does not exist
     */
    void signal(int peer, int slot, long value, SignalOp op);

    /**
     * Waits until this rank's signal slot {@code slot} holds at least {@code atLeast} (acquire) and
     * returns the value seen.
     *
     * @param fromRank the rank expected to signal, named in the timeout error ({@code -1} if any)
     *
     * @param slot     this rank's signal slot, 0..signalSlots()-1
     * @param atLeast  the value to wait for
     * @return the slot's value, at least {@code atLeast}
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    long waitSignal(int slot, long atLeast, int fromRank);

    /**
     * This rank's signal slot {@code slot} now (acquire).
     *
     * @param slot this rank's signal slot, 0..signalSlots()-1
     * @return the slot's value
     */
    long readSignal(int slot);

    /**
     * This memory seen as {@code type}, for what only some transports have — on GPUs
     * {@link DeviceMemory} (device addresses of every rank's buffer and signal pad) — so code above
     * the runtime never casts to a transport's class.
     *
     * @param type the capability wanted
     * @param <T>  its type
     * @return this memory as {@code type}, or empty when this transport has no such capability
     */
    default <T> java.util.Optional<T> unwrap(Class<T> type) {
        return type.isInstance(this) ? java.util.Optional.of(type.cast(this)) : java.util.Optional.empty();
    }

    /**
     * Copies {@code src} (host memory) into this rank's buffer at {@code offset}; returns when done
     * (on a GPU after waiting for this rank's stream).
     *
     * @param src    host bytes, all of which are copied
     * @param offset byte offset in this rank's buffer
     * @throws IndexOutOfBoundsException when the range falls outside this rank's buffer
     */
    default void copyFromHost(MemorySegment src, long offset) {
        MemorySegment.copy(src, 0, local(), offset, src.byteSize());
    }

    /**
     * Copies {@code dst.byteSize()} bytes of this rank's buffer at {@code offset} into host memory;
     * returns when done (on a GPU after waiting for this rank's stream).
     *
     * @param offset byte offset in this rank's buffer
     * @param dst    destination host memory
     * @throws IndexOutOfBoundsException when the range falls outside this rank's buffer
     */
    default void copyToHost(long offset, MemorySegment dst) {
        MemorySegment.copy(local(), offset, dst, 0, dst.byteSize());
    }

    /** Collective: frees this rank's buffer once every rank has stopped using it. */
    @Override
    void close();
}
