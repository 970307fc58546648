package org.symmem4j.parallel.group;

import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.host.PeerThreads;

/**
 * One rank of an {@link InJvmWorld}: a thread. Either the world's group (from
 * {@link InJvmWorld#join(int)}) or one of its sub-groups ({@link Group#split(int, int)},
 * {@link DeviceMesh}): a sub-group's ranks are a subset of the world's threads, numbered 0..n-1 in
 * the split's key order, and its exchanges run through the world's exchange under keys of its own,
 * so disjoint sub-groups set up at the same time. A sub-group is an {@code InJvmGroup} too because
 * in-JVM transports exchange live objects (off-heap segments, device pointers), not bytes.
 */
public final class InJvmGroup implements Group, PeerThreads {

    private final InJvmWorld world;
    private final int rank;
    /** World rank of each rank of this group; for the world's group, rank r is world rank r. */
    private final int[] worldRanks;
    /** Prefix of this group's exchange keys: empty for the world's group, the sub-group's id otherwise. */
    private final String exchangeNamespace;
    /** What this group is called in error messages: "world", or the split's name (a mesh dimension). */
    private final String label;
    private final Transport transport;
    private final Transport hostTransport;
    private final GroupAbort abortState = new GroupAbort();
    /** Detaches this sub-group's abort from its parent's (both ways); a no-op for the world's group. */
    private final Runnable detachFromParent;
    private long exchangeSeq;
    private boolean closed;

    InJvmGroup(InJvmWorld world, int rank) {
        this.world = world;
        this.rank = rank;
        this.worldRanks = null;
        this.exchangeNamespace = "";
        this.label = "world";
        this.transport = world.transport();
        this.hostTransport = world.hostTransport();
        this.detachFromParent = () -> { };
        world.registerAbort(exchangeNamespace, rank, world.worldSize(), abortState);
    }

    private InJvmGroup(InJvmGroup parent, int[] parentRanks, int rank, String id, String label) {
        this.world = parent.world;
        this.rank = rank;
        this.worldRanks = new int[parentRanks.length];
        for (int i = 0; i < parentRanks.length; i++) {
            worldRanks[i] = parent.worldRank(parentRanks[i]);
        }
        this.exchangeNamespace = "sub/" + id + "/";
        this.label = label;
        this.transport = parent.transport().forSubGroup(parentRanks.clone());
        this.hostTransport = GroupSplit.subGroupHostTransport(parent, transport, parentRanks);
        this.detachFromParent = GroupSplit.linkAborts(parent, this, parentRanks);
        world.registerAbort(exchangeNamespace, rank, parentRanks.length, abortState);
    }

    /** This rank's part of a sub-group of {@code this}, whose membership {@link GroupSplit} agreed. */
    InJvmGroup newSubGroup(int[] parentRanks, int myIndex, String id, String label) {
        checkOpen();
        return new InJvmGroup(this, parentRanks, myIndex, id, label);
    }

    /**
     * The world this rank joined.
     *
     * @return the world that created this group
     */
    public InJvmWorld world() {
        return world;
    }

    /**
     * The world rank of rank {@code peer} of this group (the world's thread that is that rank).
     *
     * @param peer a rank of this group, 0..worldSize()-1
     * @return its rank in the world
     */
    public int worldRank(int peer) {
        return worldRanks == null ? peer : worldRanks[peer];
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int worldSize() {
        return worldRanks == null ? world.worldSize() : worldRanks.length;
    }

    /**
     * The thread's rank in the world, in every group it belongs to: it says which thread (and, for a
     * GPU transport, which device) this is, whatever its rank in a sub-group.
     */
    @Override
    public int localRank() {
        return worldRank(rank);
    }

    /** Every thread of the world runs on this machine, a sub-group's peers and the others alike. */
    @Override
    public int localWorldSize() {
        return world.worldSize();
    }

    @Override
    public GroupOptions options() {
        return world.options();
    }

    @Override
    public RendezvousStore store() {
        return world.store();
    }

    @Override
    public Transport transport() {
        return transport;
    }

    @Override
    public Transport hostTransport() {
        return hostTransport;
    }

    /**
     * Collective: every rank contributes an object (for example its off-heap segments); returns all
     * contributions in rank order. Objects cross threads through the world's lock, which orders the
     * contributor's earlier writes before the readers' later reads.
     *
     * @param tag  names this exchange; equal on every rank and unique within the group
     * @param mine this rank's contribution
     * @return every rank's contribution, in rank order
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone,
     *                              or the group is aborted
     */
    @Override
    public Object[] allGatherObjects(String tag, Object mine) {
        checkOpen();
        try {
            return world.exchange(exchangeNamespace, exchangeNamespace + (exchangeSeq++) + "/" + tag, rank, mine, this);
        } catch (PeerTimeoutException e) {
            if (worldRanks != null) {
                // a sub-group that cannot set up aborts its parent too, so no rank of the world waits forever
                abortState.raise(e.missingRanks().isEmpty() ? rank : e.missingRanks().getFirst(), e.getMessage());
            }
            throw e;
        }
    }

    @Override
    public List<byte[]> allGatherBytes(String tag, byte[] mine) {
        Object[] all = allGatherObjects(tag, mine.clone());
        List<byte[]> out = new ArrayList<>(all.length);
        for (Object o : all) {
            out.add(((byte[]) o).clone());
        }
        return out;
    }

    @Override
    public boolean isAlive(int peer) {
        InJvmMembership m = world.membership();
        if (m != null && m.isDead(worldRank(peer))) {
            return false; // its task failed: a shrink's join never waits for it
        }
        Thread t = world.owner(worldRank(peer));
        // A rank that has not joined yet is not known dead: it may still be starting.
        return t == null || t.isAlive();
    }

    @Override
    public String describe(int peer) {
        int w = worldRank(peer);
        Thread t = world.owner(w);
        String thread = t == null ? "not joined" : "thread '" + t.getName() + "'";
        return worldRanks == null
                ? "rank " + peer + " (" + thread + ")"
                : "rank " + peer + " of '" + label + "' (world rank " + w + ", " + thread + ")";
    }

    @Override
    public GroupAbort abortState() {
        return abortState;
    }

    /** As {@link Group#abort(String)}; a sub-group's reason names this rank's world rank too. */
    @Override
    public void abort(String reason) {
        abortState.raise(rank, (worldRanks == null ? "rank=" + rank : describe(rank)) + " aborted: " + reason);
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("rank=" + rank + " group '" + label + "' already closed; expected"
                    + " an open group (fix: make every"
                    + " call before close(), or create a new group)");
        }
    }

    /** Leaves the group; a sub-group stops hearing of its parent's abort (close its memories first). */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            detachFromParent.run();
        }
    }

    @Override
    public String toString() {
        return worldRanks == null
                ? "InJvmGroup[rank=" + rank + ", worldSize=" + worldSize() + "]"
                : "InJvmGroup[" + label + ", rank=" + rank + ", worldSize=" + worldSize() + ", worldRank=" + localRank() + "]";
    }

    @Override
    public Group split(int color, int key, String label) {
        return GroupSplit.split(this, color, key, label);
    }

    /**
     * True for the world's group of a world created by {@link InJvmWorld#createShrinking} (the world names its dead
     * ranks); a sub-group cannot shrink (shrink the world's group, or a {@link DeviceMesh} over it).
     */
    @Override
    public boolean canShrink() {
        return world.membership() != null && worldRanks == null && transport == hostTransport;
    }

    /**
     * In-place shrink ({@link Group#shrink(java.util.function.IntFunction)}) of a shrinking world's group: waits (at
     * most the timeout) until a rank's task failed, then the survivors join a new world of their own, numbered densely
     * in their old order; this group is aborted (its teardown waits for nobody). The new world is closed with this one.
     */
    @Override
    public Survivors shrink(java.util.function.IntFunction<int[]> lostWith) {
        if (!canShrink()) {
            return Group.super.shrink(lostWith); // says why not
        }
        checkOpen();
        return world.membership().shrink(this, lostWith);
    }

    @Override
    public void keepUntilWorldCloses(AutoCloseable resource) {
        world.track(resource);
    }

    @Override
    public void forget(AutoCloseable resource) {
        world.untrack(resource);
    }
}
