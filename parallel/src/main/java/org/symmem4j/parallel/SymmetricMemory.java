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
     *         groups, host or CUDA): allocate instead
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

    // ---- What an executor needs to drive this memory the same way on the host and on a GPU ----

    /**
     * Whether {@link #putWithSignal}, {@link #signal} and {@link #orderAfterSignal} are enqueued — put
     * in this rank's work queue (a GPU stream) and run later, in call order, with the rank's other
     * work on that queue — rather than done when the call returns. Enqueued memory has no host view
     * ({@link #hostAddressable()} is false) and needs {@link #awaitWork} before the host reads results.
     *
     * @return true on GPUs, false for host memory
     */
    default boolean enqueued() {
        return false;
    }

    /**
     * Orders this rank's later work after signal slot {@code slot} holding at least {@code atLeast},
     * with acquire semantics: work after it sees every write the signalling rank released before its
     * signal (pairs with the release of {@link #putWithSignal} or {@link #signal}). Done at once, this
     * is {@link #waitSignal} (the calling thread waits, bounded by the group's timeout); enqueued, the
     * wait is put in this rank's queue and the call returns at once — the queue waits on the device,
     * unbounded, so pair every wait with a signal that will come or bound it with {@link #awaitWork}
     * and {@link #storeSignalsNow}.
     *
     * <p>With {@code consume}, the wait then subtracts {@code atLeast} from the slot (the signaller's
     * later additions are kept), so the slot counts like a semaphore and a repeated or replayed
     * sequence of puts and waits uses the same thresholds every time.
     *
     * @param slot     this rank's signal slot, 0..signalSlots()-1
     * @param atLeast  the value to wait for
     * @param fromRank the rank expected to signal, named in a timeout error ({@code -1} if any)
     * @param consume  whether to subtract {@code atLeast} once reached
     * @return done at once: the slot's value seen (at least {@code atLeast}, before any subtraction);
     *         enqueued: {@code atLeast} (the value is known only when the wait runs)
     * @throws PeerTimeoutException done at once, when no signal arrives within the group's timeout
     * @throws IndexOutOfBoundsException when the slot does not exist
     */
    default long orderAfterSignal(int slot, long atLeast, int fromRank, boolean consume) {
        // acquire: pairs with the signaller's release store or add; later reads of this thread see its data
        long seen = waitSignal(slot, atLeast, fromRank);
        if (consume) {
            signal(group().rank(), slot, -atLeast, SignalOp.ADD);
        }
        return seen;
    }

    /**
     * Stores {@code value} into signal slots {@code fromSlot..toSlot-1} of every rank's pad (this
     * rank's too) now, not after this rank's enqueued work, with release semantics (pairs with the
     * acquire of every wait on those slots). For aborting a protocol: a wait, host or device-side,
     * whose peer failed ends once a slot holds at least what it waits for, and a store of a value no
     * protocol reaches ends all of them — on a GPU even the waits of this rank's own queue, which may
     * itself be blocked. Not collective. The stores overwrite (a concurrent add lands before or after
     * one, never inside it).
     *
     * @param fromSlot first slot stored, inclusive
     * @param toSlot   last slot stored, exclusive
     * @param value    the value stored
     * @param timeout  how long to wait at most for enqueued stores to land (unused where they are done at once)
     * @return whether every store has landed: always on the host; on a GPU false when the stores did
     *         not complete within {@code timeout} (a device queue they need is blocked)
     * @throws IndexOutOfBoundsException when the slot range is not within 0..signalSlots()
     */
    default boolean storeSignalsNow(int fromSlot, int toSlot, long value, java.time.Duration timeout) {
        java.util.Objects.checkFromToIndex(fromSlot, toSlot, signalSlots());
        for (int rank = 0; rank < group().worldSize(); rank++) {
            for (int slot = fromSlot; slot < toSlot; slot++) {
                // release: pairs with the acquire of whoever waits on the slot; the value carries no data
                signal(rank, slot, value, SignalOp.SET);
            }
        }
        return true;
    }

    /**
     * Waits until the work this rank enqueued (on a GPU: everything on the rank's stream, this
     * memory's operations and the caller's kernels ordered with them) has run, or {@code timeout} has
     * passed. Unlike a plain synchronize it gives up, so work blocked in a device-side wait whose peer
     * failed cannot hold the caller forever. Where operations are done at once, there is nothing to
     * wait for.
     *
     * @param timeout how long to wait at most
     * @return true when the work has run, false on timeout
     */
    default boolean awaitWork(java.time.Duration timeout) {
        return true;
    }

    /**
     * A clock that marks points in this rank's work for timelines, with room for {@code marksPerRound}
     * marks between {@link WorkClock#restart()}s: the host clock where operations are done at once; on
     * a GPU, events recorded on the rank's stream. Create it before any rank starts the work it times
     * (on a GPU this creates the events), and close it after.
     *
     * @param marksPerRound the most {@link WorkClock#mark()}s per round
     * @return the clock; close it
     */
    default WorkClock clock(int marksPerRound) {
        return WorkClock.host();
    }

    /**
     * Gives the pages that lie fully inside bytes {@code [offsetBytes, offsetBytes + bytes)} of this
     * rank's buffer back to the operating system: they read as zero afterwards and hold no memory
     * until written again (on host memory allocated with {@link #allocate}, whose pages hold memory
     * only once written). Bytes of the pages at either end that the range covers only in part keep
     * their values. Not collective: only this rank's buffer changes, and no peer may touch the range
     * meanwhile (in process groups the peers' mappings of it read zero afterwards too). What fully
     * sharded training (ZeRO stage 3) releases a layer's working buffer with.
     *
     * @param offsetBytes first byte of the range in this rank's buffer
     * @param bytes       length of the range
     * @throws IndexOutOfBoundsException when the range falls outside this rank's buffer
     * @throws UnsupportedOperationException where the memory cannot give pages back
     *         ({@link TransportCapabilities.Capability#DECOMMIT}: registered memory, device memory, ...)
     */
    default void decommit(long offsetBytes, long bytes) {
        throw new UnsupportedOperationException("decommit on " + this + ": this memory cannot give pages back to the"
                + " operating system (see group.transport().capabilities(group), DECOMMIT); expected host memory"
                + " allocated with SymmetricMemory.allocate on the " + Transport.HOST_IN_JVM + " or " + Transport.HOST_SHM
                + " transport; fix: check group.transport().capabilities(group).supports(DECOMMIT) before calling,"
                + " or allocate on one of those transports");
    }

    /**
     * Bytes of this rank's buffer in {@code [offsetBytes, offsetBytes + bytes)} that hold memory now,
     * counted in whole pages (every page the range touches that is resident): what {@link #decommit}
     * saves, measured ({@code mincore} on Linux). For tests and memory reports. A page of private memory
     * that was only read since it was decommitted counts too: the read mapped the kernel's one shared
     * zero page there, which holds no memory of this process's own.
     *
     * @param offsetBytes first byte of the range in this rank's buffer
     * @param bytes       length of the range
     * @return resident bytes, a multiple of the page size
     * @throws IndexOutOfBoundsException when the range falls outside this rank's buffer
     * @throws UnsupportedOperationException where the memory cannot tell (as for {@link #decommit})
     */
    default long residentBytes(long offsetBytes, long bytes) {
        throw new UnsupportedOperationException("residentBytes on " + this + ": this memory cannot count its resident"
                + " pages (see group.transport().capabilities(group), DECOMMIT); fix: check"
                + " group.transport().capabilities(group).supports(DECOMMIT) before calling");
    }

    /** Collective: frees this rank's buffer once every rank has stopped using it. */
    @Override
    void close();
}
