package org.symmem4j.parallel.group;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.Transport;

/**
 * A sub-group of a group whose ranks exchange bytes through a store ({@link ProcessGroup}, or a
 * sub-group of one): its set-up exchanges and its {@link #store()} are the parent's store under the
 * key prefix {@code sub/<id>/}, its liveness and descriptions are the parent's (naming the parent's
 * ranks), and its transport is the parent's kind, made for the members
 * ({@link Transport#forSubGroup(int[])}). Created by {@link Group#split(int, int)}.
 */
final class StoreSubGroup implements Group {

    private final Group parent;
    private final int[] parentRanks;
    private final int rank;
    private final String label;
    private final NamespacedStore store;
    private final Transport transport;
    private final Transport hostTransport;
    private final GroupAbort abortState = new GroupAbort();
    private final Runnable detachFromParent;
    private long exchangeSeq;
    private String previousExchangeKey;
    private boolean closed;

    StoreSubGroup(Group parent, int[] parentRanks, int rank, String id, String label) {
        this.parent = parent;
        this.parentRanks = parentRanks.clone();
        this.rank = rank;
        this.label = label;
        this.store = new NamespacedStore(parent.store(), "sub/" + id + "/");
        this.transport = parent.transport().forSubGroup(parentRanks.clone());
        this.hostTransport = GroupSplit.subGroupHostTransport(parent, transport, parentRanks);
        this.detachFromParent = GroupSplit.linkAborts(parent, this, this.parentRanks);
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int worldSize() {
        return parentRanks.length;
    }

    /** The parent's local rank: it says which process (and GPU) this is, whatever its rank in the sub-group. */
    @Override
    public int localRank() {
        return parent.localRank();
    }

    @Override
    public int localWorldSize() {
        return parent.localWorldSize();
    }

    @Override
    public GroupOptions options() {
        return parent.options();
    }

    @Override
    public RendezvousStore store() {
        return store;
    }

    @Override
    public Transport transport() {
        return transport;
    }

    @Override
    public Transport hostTransport() {
        return hostTransport;
    }

    @Override
    public List<byte[]> allGatherBytes(String tag, byte[] mine) {
        if (closed) {
            throw new IllegalStateException("rank=" + rank + " group '" + label + "' already closed; expected"
                    + " an open group (fix: make every"
                    + " call before close(), or split the group again)");
        }
        String prefix = "x/" + (exchangeSeq++) + "/" + tag + "/";
        List<byte[]> all;
        try {
            all = exchange(prefix, mine, tag);
        } catch (PeerTimeoutException e) {
            // the sub-group cannot be used any more; through the parent, no rank of the job waits forever
            abortState.raise(e.missingRanks().isEmpty() ? rank : e.missingRanks().getFirst(), e.getMessage());
            throw e;
        }
        // every rank set this exchange's key, so every rank finished reading the previous one
        if (previousExchangeKey != null) {
            store.delete(previousExchangeKey);
        }
        previousExchangeKey = prefix + rank;
        return all;
    }

    private List<byte[]> exchange(String prefix, byte[] mine, String what) {
        Duration timeout = options().timeout();
        return StoreExchange.exchange(store, prefix, rank, worldSize(), mine, timeout, (missing, deadlinePassed) -> {
            GroupAbort.Cause aborted = abortState.cause();
            if (aborted != null) {
                throw new PeerTimeoutException("rank=" + rank + " set-up '" + what + "' of group '" + label
                        + "': group aborted: " + aborted.reason() + " (fix: see the aborting rank's error, which names"
                        + " the cause)", rank, missing, what,
                        PeerTimeoutException.Reason.PEER_ABORTED, timeout);
            }
            List<Integer> dead = missing.stream().filter(p -> !isAlive(p)).toList();
            if (!dead.isEmpty()) {
                throw new PeerTimeoutException("rank=" + rank + " set-up '" + what + "' of group '" + label + "': "
                        + String.join(", ", dead.stream().map(this::describe).toList()) + " exited before arriving"
                        + " (fix: see that rank's own error or exit status, which names the cause)",
                        rank, dead, what, PeerTimeoutException.Reason.PEER_EXITED, timeout);
            }
            if (deadlinePassed) {
                throw new PeerTimeoutException("rank=" + rank + " set-up '" + what + "' of group '" + label
                        + "': timed out after " + timeout + " waiting for "
                        + String.join(", ", missing.stream().map(this::describe).toList())
                        + " (fix: make every rank of a sub-group make the same set-up calls in the same order, or"
                        + " raise symmem4j.timeout.ms if they legitimately lag)",
                        rank, missing, what, PeerTimeoutException.Reason.DEADLINE_PASSED, timeout);
            }
        });
    }

    @Override
    public boolean isAlive(int peer) {
        return parent.isAlive(parentRanks[peer]);
    }

    @Override
    public String describe(int peer) {
        return "rank " + peer + " of '" + label + "' (parent " + parent.describe(parentRanks[peer]) + ")";
    }

    @Override
    public GroupAbort abortState() {
        return abortState;
    }

    /** As {@link Group#abort(String)}, the reason naming this rank in the world too. */
    @Override
    public void abort(String reason) {
        abortState().raise(rank(), describe(rank()) + " aborted: " + reason);
    }

    /** Leaves the sub-group: deletes this rank's last exchange key and stops hearing of the parent's abort. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        detachFromParent.run();
        // The last exchange's key stays (one small entry per rank, gone with the parent's store): a peer may still be
        // reading it — it leaves that exchange only once it has read every key — and deleting it here made that peer
        // wait for a key that would never come back (seen: two ranks refused by the same call, both closing the
        // sub-group at once). Keys of earlier exchanges are deleted as the next exchange proves them read.
    }

    @Override
    public String toString() {
        return "StoreSubGroup[" + label + ", rank=" + rank + ", worldSize=" + worldSize() + ", parent=" + parent + "]";
    }

    /** The parent's store under a key prefix; closing it leaves the parent's store open. */
    private record NamespacedStore(RendezvousStore parent, String prefix) implements RendezvousStore {

        @Override
        public void set(String key, byte[] value) {
            parent.set(prefix + key, value);
        }

        @Override
        public byte[] get(String key, Duration timeout) {
            return parent.get(prefix + key, timeout);
        }

        @Override
        public Optional<byte[]> tryGet(String key) {
            return parent.tryGet(prefix + key);
        }

        @Override
        public List<byte[]> getAll(List<String> keys, Duration timeout) {
            return parent.getAll(keys.stream().map(k -> prefix + k).toList(), timeout);
        }

        @Override
        public long add(String key, long delta) {
            return parent.add(prefix + key, delta);
        }

        @Override
        public boolean delete(String key) {
            return parent.delete(prefix + key);
        }

        @Override
        public void close() {
            // the parent group owns and closes its store
        }
    }

    @Override
    public Group split(int color, int key, String label) {
        return GroupSplit.split(this, color, key, label);
    }
}
