package org.symmem4j.parallel;

import java.util.List;

/**
 * N ranks that allocate symmetric memory and run collectives together. Each rank holds its own
 * {@code Group} object; every collective method must be called by all ranks in the same order.
 *
 * <p>Two kinds on the host:
 * <ul>
 *   <li>{@link org.symmem4j.parallel.group.InJvmWorld}: ranks are threads of one JVM (DL4J ParallelWrapper workers);</li>
 *   <li>{@link org.symmem4j.parallel.group.ProcessGroup}: ranks are JVM processes on one machine, configured with torchrun's
 *       variables {@code RANK}, {@code WORLD_SIZE}, {@code LOCAL_RANK}, {@code MASTER_ADDR},
 *       {@code MASTER_PORT}.</li>
 * </ul>
 * A group is used by one thread per rank; it is not safe to call one rank's group from two threads
 * at once.
 */
public interface Group extends AutoCloseable {

    /**
     * This rank's number.
     *
     * @return 0..{@code worldSize() - 1}
     */
    int rank();

    /**
     * The number of ranks.
     *
     * @return at least 1
     */
    int worldSize();

    /**
     * Rank among the ranks on this machine (equal to {@link #rank()} on one machine).
     *
     * @return 0..(ranks on this machine) - 1
     */
    int localRank();

    /**
     * How many ranks run on this machine and share its GPUs (torchrun's {@code LOCAL_WORLD_SIZE}); a
     * sub-group answers for its whole world, whose ranks its members share the machine with. A GPU
     * transport sizes its kernels' grids by it where ranks share a GPU.
     *
     * @return at least 1; {@link #worldSize()} where every rank runs on this machine
     */
    default int localWorldSize() {
        return worldSize();
    }

    /**
     * The options this group was created with (timeout, idle strategy, liveness checks).
     *
     * @return the group's options
     */
    GroupOptions options();

    /**
     * The set-up key-value store (handle exchange); collectives never use it.
     *
     * @return the group's store
     */
    RendezvousStore store();

    /**
     * The transport that {@link SymmetricMemory#allocate(Group, long)} uses for this group.
     *
     * @return the group's transport
     */
    Transport transport();

    /**
     * The transport of host memory among this group's ranks — {@code host-in-jvm} for threads of one
     * JVM, {@code host-shm} for processes — where a device transport keeps its control plane (entry
     * barriers, argument agreement). For a group on a host transport it is {@link #transport()}. For a
     * group on a GPU transport, its {@code allocate(group, bytes)} and {@code communicator(group, options)}
     * give host memory and host collectives among the same ranks (for host values beside device work:
     * a loss, a verdict).
     *
     * @return the host transport of this group's ranks
     */
    Transport hostTransport();

    /**
     * Collective: every rank contributes {@code mine}; returns every rank's value in rank order.
     * Set-up only (it goes through the store). Fails with a {@link PeerTimeoutException} naming
     * the ranks that did not contribute.
     *
     * @param tag  names this exchange; equal on every rank and unique within the group
     * @param mine this rank's value
     * @return every rank's value, in rank order
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    List<byte[]> allGatherBytes(String tag, byte[] mine);

    /**
     * Whether rank {@code rank}'s thread or process is still alive, as far as this rank can tell.
     *
     * @param rank a rank of the group
     * @return false once the rank's thread or process is known to have exited
     */
    boolean isAlive(int rank);

    /**
     * A short description of a rank for error messages, for example {@code "rank 1 (pid 4242)"}.
     *
     * @param rank a rank of the group
     * @return the description
     */
    String describe(int rank);

    /**
     * This rank's view of whether the group was aborted; symmetric memories and communicators of the
     * group register here, so an abort reaches every one of them.
     *
     * @return the group's abort state, shared by its memories and communicators
     */
    GroupAbort abortState();

    /**
     * Not collective: aborts the group with {@code reason}. Every peer waiting in, or later entering,
     * a collective or a signal wait on any of the group's symmetric memories fails promptly with a
     * {@link PeerTimeoutException} naming this rank, and teardown no longer waits for peers. For a
     * rank that hit an error outside the collectives and will not arrive at the next one.
     *
     * @param reason why, for the peers' exception messages
     */
    default void abort(String reason) {
        abortState().raise(rank(), "rank=" + rank() + " aborted: " + reason);
    }

    /**
     * Collective over this group, as {@code ncclCommSplit}: every rank passes a {@code color} and a
     * {@code key}; the ranks that pass the same color form a sub-group, numbered 0..n-1 by key (ties
     * broken by rank in this group). The sub-group has its own set-up exchanges, store key space,
     * symmetric memories and communicators ({@code SymmetricMemory.allocate(sub, n)},
     * {@code Communicator.create(sub)}) on a transport of this group's kind
     * ({@link Transport#forSubGroup(int[])}); disjoint sub-groups run collectives at the same time.
     * {@link DeviceMesh} splits a group by a mesh shape.
     *
     * <p>What a sub-group keeps from its parent: {@link #options()}, {@link #localRank()} (the
     * thread's or process's place on the machine, which picks its GPU, not its sub-group rank), and
     * liveness; {@link #describe(int)} names the parent's rank too. Aborts cross both ways: this
     * group's abort aborts every sub-group of this rank, and a sub-group's abort aborts this group
     * (and so this rank's other sub-groups), so a failure in one sub-group reaches the peers of every
     * group this rank shares with them instead of leaving them waiting out their timeouts. Close
     * order: a sub-group's memories and communicators, then the sub-group, then this group.
     *
     * @param color the sub-group this rank joins, {@code >= 0}
     * @param key   orders the ranks within the sub-group
     * @return this rank's part of its sub-group
     * @throws IllegalArgumentException when a rank passes a negative color (on every rank)
     * @throws UnsupportedOperationException when this group's transport cannot serve sub-groups
     * @throws PeerTimeoutException when a rank does not arrive within the timeout, or is gone
     */
    default Group split(int color, int key) {
        return split(color, key, "split");
    }

    /**
     * Collective: as {@link #split(int, int)}, with the name the sub-group goes by in errors and store
     * keys ({@link DeviceMesh} passes its dimension names).
     *
     * @param color the sub-group this rank joins, {@code >= 0}
     * @param key   orders the ranks within the sub-group
     * @param label the sub-group's name, matching {@link DeviceMesh#LABEL}; equal on the sub-group's ranks
     * @return this rank's part of its sub-group
     * @throws IllegalArgumentException when a rank passes a negative color or a malformed label (on every rank)
     * @throws UnsupportedOperationException when this group's transport cannot serve sub-groups
     * @throws PeerTimeoutException when a rank does not arrive within the timeout, or is gone
     */
    Group split(int color, int key, String label);

    /**
     * The survivors of an in-place shrink ({@link #shrink()}).
     *
     * @param group   the new group of the survivors, this rank's part of it (the caller closes it); null on a rank
     *                that leaves with the dead ({@code leaving}: it is alive, but its replica is lost)
     * @param dead    the ranks of the old group that are gone, ascending; the survivors keep their order and are
     *                numbered densely from 0 in the new group
     * @param leaving the ranks that are alive but leave with the dead ({@link #shrink(java.util.function.IntFunction)}),
     *                ascending; empty for a plain {@link #shrink()}
     */
    record Survivors(Group group, List<Integer> dead, List<Integer> leaving) {

        /** As a plain {@link #shrink()} forms them: no rank leaves that is alive. */
        public Survivors(Group group, List<Integer> dead) {
            this(group, dead, List.of());
        }

        /** {@return whether this rank leaves: it is alive, but a dead rank took it out (its group is null)} */
        public boolean left() {
            return group == null;
        }
    }

    /**
     * Whether this group can shrink in place ({@link #shrink()}): a group with a membership authority that names
     * its dead ranks (a process group started by {@code symmem4j-run --on-failure shrink}, or the world group of
     * threads of {@code InJvmWorld.createShrinking}, whose failed tasks are its dead).
     *
     * @return false unless {@link #shrink()} is available
     */
    default boolean canShrink() {
        return false;
    }

    /**
     * In-place shrink, as NCCL's {@code ncclCommShrink}: collective over the surviving ranks, after a collective of
     * this group failed because ranks died. Waits (at most the group's timeout) until the group's membership
     * authority names the dead ranks, then forms a new group of the survivors (its own store, set-up exchange and
     * memories) and aborts this one, whose teardown then waits for nobody. Every survivor must call it; a rank
     * that dies during it makes the others fail within the timeout, naming it, instead of hanging.
     *
     * @return the survivors' new group and the dead ranks
     * @throws UnsupportedOperationException when this group cannot shrink ({@link #canShrink()} is false)
     * @throws SymmemException when no dead rank is named within the timeout, or the new group cannot form
     */
    default Survivors shrink() {
        return shrink(dead -> new int[] {dead});
    }

    /**
     * As {@link #shrink()}, for ranks that live or die in sets (the tensor-parallel peers of one data-parallel
     * replica: one of them cannot go on without the others): each dead rank takes the ranks {@code lostWith} names out
     * of the group with it. Those that are alive get {@link Survivors} with a null group ({@link Survivors#left()}):
     * they leave, and the others form their group without them. {@code lostWith} must give every survivor the same
     * answer for the same dead rank.
     *
     * @param lostWith for a dead rank of this group, the ranks of this group that leave with it (itself included)
     * @return the survivors' new group (null on a rank that leaves), the dead ranks and those that leave alive
     * @throws UnsupportedOperationException when this group cannot shrink ({@link #canShrink()} is false)
     * @throws SymmemException when no dead rank is named within the timeout, or the new group cannot form
     */
    default Survivors shrink(java.util.function.IntFunction<int[]> lostWith) {
        throw new UnsupportedOperationException(getClass().getSimpleName() + " cannot shrink in place: expected a"
                + " process group started by symmem4j-run --on-failure shrink, or the world group of threads of"
                + " InJvmWorld.createShrinking (a group with a membership authority); fix: start the job with"
                + " symmem4j-run --on-failure shrink, or its threads with InJvmWorld.createShrinking(n, options), and"
                + " call shrink() only when canShrink() is true");
    }

    /** Leaves the group. Close symmetric memory and communicators first. */
    @Override
    void close();
}
