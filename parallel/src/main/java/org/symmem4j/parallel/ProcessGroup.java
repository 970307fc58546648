package org.symmem4j.parallel;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.symmem4j.parallel.host.SharedMemoryTransport;
import org.symmem4j.parallel.rendezvous.RendezvousStore;
import org.symmem4j.parallel.rendezvous.StoreTimeoutException;
import org.symmem4j.parallel.rendezvous.TcpStoreClient;
import org.symmem4j.parallel.rendezvous.TcpStoreServer;

/**
 * A group whose ranks are JVM processes on one machine. Rank 0 hosts the rendezvous store at
 * {@code MASTER_ADDR:MASTER_PORT}; every rank registers its pid there, so a waiting rank can tell
 * a peer that exited (for example after SIGKILL) from one that is merely slow.
 */
public final class ProcessGroup implements Group {

    private static final String MEMBER_KEY = "group/member/";
    private static final String CLOSED_KEY = "group/closed";
    private static final String ALL_CLOSED_KEY = "group/all-closed";
    /** Longest slice a store wait blocks before re-checking the liveness of missing ranks. */
    private static final Duration STORE_POLL_SLICE = Duration.ofMillis(200);

    private final ProcessGroupConfig config;
    private final GroupOptions options;
    private final TcpStoreServer server; // rank 0 only
    private final RendezvousStore store;
    private final long[] peerPids;
    private final Instant[] peerStarts;
    private final SharedMemoryTransport transport;
    private long exchangeSeq;
    private boolean closed;

    private ProcessGroup(ProcessGroupConfig config, GroupOptions options) {
        this.config = config;
        this.options = options;
        TcpStoreServer srv = null;
        RendezvousStore st;
        if (config.rank() == 0) {
            srv = new TcpStoreServer(config.masterAddr(), config.masterPort());
            st = new LocalServerStore(srv);
        } else {
            st = new TcpStoreClient(config.masterAddr(), config.masterPort(), options.timeout());
        }
        this.server = srv;
        this.store = st;
        this.peerPids = new long[config.worldSize()];
        this.peerStarts = new Instant[config.worldSize()];
        try {
            ProcessHandle self = ProcessHandle.current();
            String me = self.pid() + " " + self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
            List<byte[]> members = exchangeThroughStore(MEMBER_KEY, me.getBytes(StandardCharsets.UTF_8), "join");
            for (int r = 0; r < members.size(); r++) {
                String[] parts = new String(members.get(r), StandardCharsets.UTF_8).split(" ");
                peerPids[r] = Long.parseLong(parts[0]);
                long startMs = Long.parseLong(parts[1]);
                peerStarts[r] = startMs == 0 ? null : Instant.ofEpochMilli(startMs);
            }
        } catch (RuntimeException e) {
            closeStore();
            throw e;
        }
        this.transport = new SharedMemoryTransport();
    }

    /** Joins the group described by torchrun's environment variables. */
    public static ProcessGroup fromEnvironment() {
        return join(ProcessGroupConfig.fromEnvironment(), GroupOptions.defaults());
    }

    public static ProcessGroup fromEnvironment(GroupOptions options) {
        return join(ProcessGroupConfig.fromEnvironment(), options);
    }

    /** Collective across processes: returns once every rank has joined. */
    public static ProcessGroup join(ProcessGroupConfig config, GroupOptions options) {
        return new ProcessGroup(config, options);
    }

    public ProcessGroupConfig config() {
        return config;
    }

    @Override
    public int rank() {
        return config.rank();
    }

    @Override
    public int worldSize() {
        return config.worldSize();
    }

    @Override
    public int localRank() {
        return config.localRank();
    }

    @Override
    public GroupOptions options() {
        return options;
    }

    @Override
    public RendezvousStore store() {
        return store;
    }

    @Override
    public Transport transport() {
        return transport;
    }

    /** Pid of rank {@code peer}'s process. */
    public long pid(int peer) {
        return peerPids[peer];
    }

    @Override
    public List<byte[]> allGatherBytes(String tag, byte[] mine) {
        if (closed) {
            throw new IllegalStateException("rank=" + rank() + " group already closed");
        }
        return exchangeThroughStore("x/" + (exchangeSeq++) + "/" + tag + "/", mine, tag);
    }

    /**
     * Sets {@code prefix+rank} and waits for every rank's key, in slices, checking between slices
     * whether the missing ranks' processes still exist.
     */
    private List<byte[]> exchangeThroughStore(String prefix, byte[] mine, String what) {
        store.set(prefix + rank(), mine);
        List<String> keys = new ArrayList<>(worldSize());
        for (int r = 0; r < worldSize(); r++) {
            keys.add(prefix + r);
        }
        long deadline = System.nanoTime() + options.timeout().toNanos();
        while (true) {
            long left = deadline - System.nanoTime();
            Duration slice = Duration.ofNanos(Math.max(1_000_000, Math.min(left, STORE_POLL_SLICE.toNanos())));
            try {
                return store.getAll(keys, slice);
            } catch (StoreTimeoutException e) {
                List<Integer> missing = new ArrayList<>();
                for (String k : e.missingKeys()) {
                    missing.add(Integer.parseInt(k.substring(prefix.length())));
                }
                List<Integer> dead = missing.stream().filter(p -> peerPids[p] != 0 && !isAlive(p)).toList();
                if (!dead.isEmpty()) {
                    throw new PeerTimeoutException("rank=" + rank() + " set-up '" + what + "': "
                            + InJvmWorld.describeAll(this, dead) + " exited before arriving", rank(), dead, what,
                            PeerTimeoutException.Reason.PEER_EXITED, options.timeout());
                }
                if (System.nanoTime() - deadline >= 0) {
                    throw new PeerTimeoutException("rank=" + rank() + " set-up '" + what + "': timed out after "
                            + options.timeout() + " waiting for ranks " + missing
                            + " (start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT)",
                            rank(), missing, what, PeerTimeoutException.Reason.DEADLINE_PASSED, options.timeout());
                }
            }
        }
    }

    @Override
    public boolean isAlive(int peer) {
        long pid = peerPids[peer];
        if (pid == 0) {
            return true; // not joined yet: unknown, so not known dead
        }
        Optional<ProcessHandle> h = ProcessHandle.of(pid);
        if (h.isEmpty() || !h.get().isAlive()) {
            return false;
        }
        // A recycled pid belongs to another process: compare start times when both are known.
        Instant expected = peerStarts[peer];
        Optional<Instant> actual = h.get().info().startInstant();
        return expected == null || actual.isEmpty() || actual.get().toEpochMilli() == expected.toEpochMilli();
    }

    @Override
    public String describe(int peer) {
        return "rank " + peer + (peerPids[peer] == 0 ? "" : " (pid " + peerPids[peer] + ")");
    }

    /**
     * Leaves the group. Rank 0 keeps serving the store until every live rank has left (bounded by
     * the timeout), because peers may still be finishing set-up exchanges.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            long n = store.add(CLOSED_KEY, 1);
            if (n == worldSize()) {
                store.set(ALL_CLOSED_KEY, new byte[] {1});
            }
            if (rank() == 0) {
                awaitPeersLeft();
            }
        } catch (RuntimeException e) {
            // rank 0 already gone: nothing left to coordinate with
        } finally {
            closeStore();
        }
    }

    private void awaitPeersLeft() {
        long deadline = System.nanoTime() + options.timeout().toNanos();
        while (System.nanoTime() < deadline) {
            try {
                store.get(ALL_CLOSED_KEY, STORE_POLL_SLICE);
                return;
            } catch (StoreTimeoutException e) {
                boolean anyAlive = false;
                for (int r = 1; r < worldSize(); r++) {
                    anyAlive |= isAlive(r);
                }
                if (!anyAlive) {
                    return;
                }
            }
        }
    }

    private void closeStore() {
        store.close();
        if (server != null) {
            server.close();
        }
    }

    @Override
    public String toString() {
        return "ProcessGroup[rank=" + rank() + ", worldSize=" + worldSize() + ", master=" + config.masterAddr() + ":"
                + config.masterPort() + "]";
    }

    /** Rank 0 talks to its own server's map directly rather than through a loopback socket. */
    private record LocalServerStore(TcpStoreServer server) implements RendezvousStore {
        @Override
        public void set(String key, byte[] value) {
            server.store().set(key, value);
        }

        @Override
        public byte[] get(String key, Duration timeout) {
            return server.store().get(key, timeout);
        }

        @Override
        public Optional<byte[]> tryGet(String key) {
            return server.store().tryGet(key);
        }

        @Override
        public List<byte[]> getAll(List<String> keys, Duration timeout) {
            return server.store().getAll(keys, timeout);
        }

        @Override
        public long add(String key, long delta) {
            return server.store().add(key, delta);
        }

        @Override
        public boolean delete(String key) {
            return server.store().delete(key);
        }

        @Override
        public void close() {
            // the server is closed by the group
        }
    }
}
