package org.symmem4j.parallel;

import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.rendezvous.RendezvousStore;

/** One rank of an {@link InJvmWorld}: a thread. */
public final class InJvmGroup implements Group {

    private final InJvmWorld world;
    private final int rank;
    private final GroupAbort abortState = new GroupAbort();
    private long exchangeSeq;
    private boolean closed;

    InJvmGroup(InJvmWorld world, int rank) {
        this.world = world;
        this.rank = rank;
    }

    /**
     * The world this rank joined.
     *
     * @return the world that created this group
     */
    public InJvmWorld world() {
        return world;
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int worldSize() {
        return world.worldSize();
    }

    @Override
    public int localRank() {
        return rank;
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
        return world.transport();
    }

    /**
     * Collective: every rank contributes an object (for example its off-heap segments); returns all
     * contributions in rank order. Objects cross threads through the world's lock, which orders the
     * contributor's earlier writes before the readers' later reads.
     *
     * @param tag  names this exchange; equal on every rank and unique within the world
     * @param mine this rank's contribution
     * @return every rank's contribution, in rank order
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone
     */
    public Object[] allGatherObjects(String tag, Object mine) {
        checkOpen();
        return world.exchange((exchangeSeq++) + "/" + tag, rank, mine, this);
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
        Thread t = world.owner(peer);
        // A rank that has not joined yet is not known dead: it may still be starting.
        return t == null || t.isAlive();
    }

    @Override
    public String describe(int peer) {
        Thread t = world.owner(peer);
        return "rank " + peer + (t == null ? " (not joined)" : " (thread '" + t.getName() + "')");
    }

    @Override
    public GroupAbort abortState() {
        return abortState;
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("rank=" + rank + " group already closed");
        }
    }

    @Override
    public void close() {
        closed = true;
    }

    @Override
    public String toString() {
        return "InJvmGroup[rank=" + rank + ", worldSize=" + worldSize() + "]";
    }
}
