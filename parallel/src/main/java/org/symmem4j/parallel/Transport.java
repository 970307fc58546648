package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * How a group's ranks reach each other's memory: one class per transport behind this interface,
 * so the rest of the code never branches on where the memory lives. A group is created on its
 * transport ({@link org.symmem4j.parallel.group.InJvmWorld#create(int, GroupOptions, Transport)}), and
 * {@link Group#transport()} is what {@link SymmetricMemory#allocate} and {@link Communicator#create} use.
 *
 * <table>
 *   <caption>Transports</caption>
 *   <tr><th>transport</th><th>ranks</th><th>peer buffers</th></tr>
 *   <tr><td>{@code host-in-jvm}</td><td>threads</td><td>off-heap segments</td></tr>
 *   <tr><td>{@code host-shm}</td><td>processes</td><td>{@code /dev/shm} files mapped by every rank</td></tr>
 *   <tr><td>{@code cuda}</td><td>threads or processes, one GPU each</td><td>device memory, peers' through peer access
 *       (threads) or exported allocations (processes)</td></tr>
 *   <tr><td>{@code nvshmem}</td><td>processes, one GPU each</td><td>NVSHMEM's symmetric heap; puts and signals are
 *       NVSHMEM's, peers of the node also mapped</td></tr>
 * </table>
 *
 * <p>What a transport can and cannot do for a group (register a buffer, reach every peer, serve sub-groups, ...),
 * each refusal with the message the call would throw, is asked before calling: {@link #capabilities(Group)}.
 */
public interface Transport {

    /** {@link #name()} of the transport whose ranks are threads of one JVM (off-heap segments). */
    String HOST_IN_JVM = "host-in-jvm";

    /** {@link #name()} of the transport whose ranks are processes of one machine ({@code /dev/shm} files). */
    String HOST_SHM = "host-shm";

    /**
     * Short lowercase name, used as the {@code transport} metric tag.
     *
     * @return the name, e.g. {@code host-in-jvm}
     */
    String name();

    /**
     * Whether this transport's memory lives on GPUs: its {@link SymmetricMemory} is device memory
     * ({@code unwrap(DeviceMemory.class)}) and its communicators are device ones
     * ({@code unwrap(DeviceCommunicator.class)}) that take device buffers. Not collective, so code above
     * the runtime can choose its host or its device path before the first collective — a trainer at
     * build time — without naming transports.
     *
     * @return true for the GPU transports ({@code cuda}, {@code nvshmem}); false for host memory
     */
    default boolean deviceMemory() {
        return false;
    }

    /**
     * Collective: allocates {@code bytes} on every rank and maps every peer's allocation.
     *
     * @param group this rank's group
     * @param bytes bytes per rank, equal on every rank
     * @return this rank's view of the memory
     * @throws SymmemException when the memory cannot be allocated or mapped, or a peer does not arrive
     */
    SymmetricMemory allocate(Group group, long bytes);

    /**
     * Collective: makes a buffer each rank already has (same size everywhere) visible to all peers,
     * so collectives run on it in place with no staging copy.
     *
     * @throws UnsupportedOperationException where the transport cannot map private memory
     *                                       (across processes, host or CUDA); allocate instead. Asked before:
     *                                       {@link #capabilities}, {@link TransportCapabilities.Capability#REGISTER}
     *
     * @param group  this rank's group
     * @param buffer this rank's buffer, the same byte size on every rank
     * @return this rank's view of the memory
     */
    SymmetricMemory register(Group group, MemorySegment buffer);

    /**
     * Collective (as {@link #allocate} is: every rank of {@code group} calls it at the same point): what this
     * transport can and cannot do for {@code group}, each refusal with the message the call would throw. The
     * answer is the actual group's where it depends on it: on how many machines the ranks are (learned once per
     * group over its store, as the first allocation does), and whether they are threads of one JVM or processes of
     * their own ({@code cuda} registers a buffer only for threads). A transport may exchange nothing; callers may
     * not rely on that. The full matrix: {@code docs/transport-capabilities.md}.
     *
     * @param group this rank's group on this transport (or one whose host transport this is)
     * @return every capability, supported or refused with the reason
     * @throws SymmemException when a peer does not arrive for an exchange the answer needs
     */
    TransportCapabilities capabilities(Group group);

    /**
     * Collective: creates a communicator (collective operations) for the group on this transport.
     *
     * @param group   this rank's group
     * @param options scratch sizes, equal on every rank
     * @return this rank's communicator
     * @throws SymmemException when its scratch memory cannot be allocated, or a peer does not arrive
     */
    Communicator communicator(Group group, CommunicatorOptions options);

    /**
     * The transport of a sub-group of this transport's group ({@link Group#split(int, int)}): same
     * kind, serving the ranks {@code parentRanks} of the parent group, where {@code parentRanks[i]}
     * is the sub-group's rank {@code i}. Called once per sub-group on each of its ranks, while the
     * sub-group is created, before any memory is allocated on it. A transport that keeps per-rank
     * facts (processes' identities, GPUs, communicators) hands the members' facts on, re-indexed by
     * sub-group rank; one that needs nothing per rank may return itself.
     *
     * @param parentRanks the parent group's ranks that form the sub-group, in sub-group rank order
     * @return the transport that {@code SymmetricMemory.allocate} and {@code Communicator.create} use for
     *         the sub-group
     * @throws UnsupportedOperationException when this transport cannot serve sub-groups (its
     *                                       {@link TransportCapabilities.Capability#SUB_GROUPS} answer)
     */
    default Transport forSubGroup(int[] parentRanks) {
        throw new UnsupportedOperationException(TransportCapabilities.SUB_GROUPS_NOT_IMPLEMENTED.formatted(name()));
    }

    /**
     * Whether a process group that lives on this transport as its device transport can shrink in place
     * ({@link Group#shrink()}): the survivors' group is then joined on this same transport, and everything of the old
     * group on it must be closable without the dead ranks. A host transport is the group's own and is made anew by
     * the survivors' group; this asks only about device transports.
     *
     * @return false unless the transport rebuilds its memories and communicators on a shrunk group
     */
    default boolean survivesShrink() {
        return false;
    }

    /**
     * Told by a group on this transport that shrinks in place, on each survivor, before the survivors' group forms:
     * what the transport keeps for the old group may be handed on to the new one (CUDA: its NCCL communicators, for
     * {@code ncclCommShrink}). Nothing by default.
     *
     * @param group the group that shrinks (already aborted)
     * @param dead  its ranks that are gone, ascending
     */
    default void shrinking(Group group, java.util.List<Integer> dead) {
    }

    /**
     * Told on each survivor of an in-place shrink once it rebuilt what it needs on the survivors' group: what
     * {@link #shrinking} kept of the old group and nobody took is freed now (CUDA: NCCL communicators no new one was
     * shrunk from). Nothing by default.
     *
     * @param survivors this rank's part of the survivors' group
     */
    default void rebuilt(Group survivors) {
    }

    /**
     * Releases what this rank keeps on the transport for {@code group} (a device transport's stream, kernels and
     * context), after every memory and communicator of the group was closed; not collective. Nothing by default: a host
     * transport keeps nothing per group beyond its memories.
     *
     * @param group a rank's group on this transport
     */
    default void release(Group group) {
    }

    /**
     * The calling thread's device state as it is now (a GPU transport: the context current on it), to put back with
     * {@link CallerState#close()} once code that switches it (every GPU call makes its rank's context current, a
     * {@link #release} leaves none) is done: a caller's own driver calls after closing a model keep working. Nothing by
     * default: a host transport has no thread state.
     *
     * @return what puts the state back; closing it twice is harmless
     */
    default CallerState callerState() {
        return () -> { };
    }

    /** A thread's device state, captured by {@link #callerState()}; {@link #close()} puts it back. */
    @FunctionalInterface
    interface CallerState extends AutoCloseable {
        /** Puts the captured state back on the calling thread (the capturing one). */
        @Override
        void close();
    }
}
