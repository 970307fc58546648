package org.symmem4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.StoreTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Claim;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Refusal;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * The rendezvous store that rank 0 hosts for a cross-process group, at
 * {@code MASTER_ADDR:MASTER_PORT}. One virtual thread per connection; the map is an
 * {@link InMemoryStore}, so blocking {@code GET_ALL}s simply wait on its condition.
 *
 * <p>Who gets in: every connection starts with the {@link StoreHandshake}, in which the store and
 * the client first prove to each other that they hold the job's secret. Until the client has
 * proved it, the store tells it nothing about the run (not its id, generation, size, nor who holds
 * which seat), and everything it sends is the same whatever the client claims. A client that proved
 * the secret but belongs to another run, another generation or another world size, or claims a rank
 * out of range or one another process already holds, is then refused with both identities in the
 * answer. Only then are requests served.
 *
 * <p>Strangers cannot keep ranks out: at most {@link StoreLimits#maxUnauthenticated()} connections
 * that have not proved the secret are held, and a new connection beyond that takes the place of
 * the one held longest, which is closed (a rank's handshake lasts two round trips; a connection
 * held longer is almost surely not a rank's, and a rank that is evicted all the same reconnects).
 * The residual limit: a client that keeps more than {@code maxUnauthenticated} connections coming
 * (reopening each one evicted) makes a joining rank wait behind its queued connections, and evicts
 * the rank again if that many of them are accepted during the rank's handshake; how much that
 * delays a job depends on the machine's accept rate ({@code StoreStarvationBench} measures it:
 * 1.5 s at most on a loaded 2-core VM with 6,000 such connections against the default 4,096).
 *
 * <p>What no client can do: hold a server thread with a half-sent handshake or request (both have a
 * deadline, {@link StoreLimits#handshakeTimeout()} from accept and {@link StoreLimits#requestTimeout()}
 * from a request's first byte), make the server allocate memory for bytes that have not arrived,
 * exceed the key, value, per-connection and total limits, take more than a quarter of rank 0's file
 * descriptors by default, flood rank 0's log (drops before authentication are logged once per kind,
 * then counted), or take the server down with malformed input: a bad request drops only its own
 * connection.
 */
public final class TcpStoreServer implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(TcpStoreServer.class);
    /** Buffer of each connection's streams: handshakes and set-up requests are small, and strangers are many. */
    private static final int STREAM_BUFFER = 1024;
    private static final int ACCEPT_BACKLOG = 4096;

    private final JobIdentity identity;
    private final byte[] secret;
    private final StoreLimits limits;
    private final InMemoryStore store;
    private final ServerSocket serverSocket;
    private final Thread acceptor;
    /** Guards {@link #connections} and {@link #pending}. */
    private final Object admission = new Object();
    /** Every open connection. */
    private final Set<Conn> connections = new HashSet<>();
    /** Open connections that have not proved the secret, oldest first: the next to evict is the first. */
    private final LinkedHashSet<Conn> pending = new LinkedHashSet<>();
    private final AtomicLong refusedConnections = new AtomicLong();
    /** Per kind ("evicted", "stalled", ...): connections dropped before they proved the secret. */
    private final ConcurrentHashMap<String, AtomicLong> unauthenticatedDrops = new ConcurrentHashMap<>();
    /** Per rank: the process that holds the seat ("pid start"), or null while free. Rank 0 is this process. */
    private final ConcurrentHashMap<Integer, String> seats = new ConcurrentHashMap<>();
    private final Set<String> loggedRefusals = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    /** One connection: its socket and when it was accepted (its handshake's deadline counts from there). */
    private static final class Conn {
        final Socket socket;
        final long acceptedNanos = System.nanoTime();

        Conn(Socket socket) {
            this.socket = socket;
        }
    }

    /**
     * Binds {@code host:port} and starts serving the group {@code identity}, whose ranks prove
     * {@code secret}. A wildcard host (0.0.0.0, ::) listens on every interface and says so in the log.
     *
     * @param host the address to bind; a wildcard listens on every interface
     * @param port 0 picks a free port (see {@link #port()})
     * @param identity the job whose ranks may join
     * @param secret the secret joining ranks must prove (copied)
     * @param limits limits on keys, values, connections and timeouts
     * @throws SymmemException if {@code host:port} cannot be bound (for example, it is taken)
     */
    public TcpStoreServer(String host, int port, JobIdentity identity, byte[] secret, StoreLimits limits) {
        this.identity = identity;
        this.secret = secret.clone();
        this.limits = limits;
        this.store = new InMemoryStore(limits.maxTotalBytes());
        ProcessHandle self = ProcessHandle.current();
        seats.put(0, self.pid() + " " + self.info().startInstant().map(java.time.Instant::toEpochMilli).orElse(0L));
        try {
            serverSocket = new ServerSocket();
            serverSocket.setReuseAddress(true);
            // a deep accept queue, so that connections arriving while strangers flood the port wait to be
            // accepted (and to evict a stranger) instead of having their SYNs dropped, which costs a rank a
            // 1 s retransmission (the kernel caps it at net.core.somaxconn)
            serverSocket.bind(new InetSocketAddress(host, port), ACCEPT_BACKLOG);
        } catch (IOException e) {
            throw new SymmemException("rendezvous store: cannot listen on " + host + ":" + port + " (" + e.getMessage()
                    + "); another job may hold MASTER_PORT=" + port + " (fix: give each job its own"
                    + " MASTER_PORT, or stop"
                    + " the process holding it)", e);
        }
        InetAddress bound = serverSocket.getInetAddress();
        if (bound.isAnyLocalAddress()) {
            LOG.warn("rendezvous store of " + identity + " listens on EVERY interface at port "
                    + port() + " (MASTER_ADDR=" + host + "): anyone who reaches it can try to join; only the job's secret"
                    + " keeps them out. Bind a private or loopback address where you can.");
        }
        acceptor = Thread.ofPlatform().daemon().name("symmem4j-store-" + port()).start(this::acceptLoop);
    }

    /** {@return the port the server listens on} */
    public int port() {
        return serverSocket.getLocalPort();
    }

    /** {@return the job this server serves} */
    public JobIdentity identity() {
        return identity;
    }

    /**
     * The map behind the server; rank 0 uses it directly instead of a loopback connection.
     *
     * @return the store
     */
    public InMemoryStore store() {
        return store;
    }

    /**
     * Connections closed at accept because every open connection was authenticated and
     * {@link StoreLimits#maxConnections()} were open.
     *
     * @return the count since the server started
     */
    public long refusedConnections() {
        return refusedConnections.get();
    }

    /**
     * Unauthenticated connections closed to make room for newer ones (see the class comment).
     *
     * @return the count since the server started
     */
    public long evictedConnections() {
        AtomicLong n = unauthenticatedDrops.get("evicted");
        return n == null ? 0 : n.get();
    }

    /**
     * The process that holds rank {@code rank}'s seat, as its handshake declared it: {pid,
     * startMillis}, or null while nobody does. Lets rank 0 tell, during the join, a rank that
     * connected and then died from one that is slow.
     *
     * @param rank the rank whose seat is asked about
     * @return {pid, startMillis}, or null while the seat is free
     */
    public long[] seatHolder(int rank) {
        String holder = seats.get(rank);
        if (holder == null) {
            return null;
        }
        String[] f = holder.split(" ");
        return new long[] {Long.parseLong(f[0]), Long.parseLong(f[1])};
    }

    /**
     * Connections open now (authenticated or not).
     *
     * @return the number of open connections
     */
    public int openConnections() {
        synchronized (admission) {
            return connections.size();
        }
    }

    /**
     * Connections open now that have not proved the secret.
     *
     * @return the number of unauthenticated connections
     */
    public int unauthenticatedConnections() {
        synchronized (admission) {
            return pending.size();
        }
    }

    private void acceptLoop() {
        // Parks after a failed accept (no descriptor left, say) instead of spinning; reset by the next success.
        IdleStrategy afterFailure = new BackoffIdleStrategy(0, 0, 1_000_000, 100_000_000);
        while (!closed) {
            Socket s;
            try {
                s = serverSocket.accept();
            } catch (IOException e) {
                if (closed) {
                    return;
                }
                // Usually EMFILE: the connection waits in the kernel's queue. A stranger's descriptor makes room.
                Conn victim = evictOldest();
                dropUnauthenticated("accept-failed", null, () -> "accept failed: " + e + (victim == null ? ""
                        : "; closed the oldest unauthenticated connection to free a descriptor"));
                afterFailure.idle();
                continue;
            }
            afterFailure.reset();
            admit(s);
        }
    }

    /**
     * Admits a new connection, evicting the unauthenticated connection held longest when a limit is
     * reached; refuses it only when every open connection is authenticated.
     */
    private void admit(Socket s) {
        Conn c = new Conn(s);
        Conn victim = null;
        boolean admitted;
        synchronized (admission) {
            boolean full = pending.size() >= limits.maxUnauthenticated() || connections.size() >= limits.maxConnections();
            if (full && !pending.isEmpty()) {
                victim = pending.removeFirst();
                connections.remove(victim);
                full = pending.size() >= limits.maxUnauthenticated() || connections.size() >= limits.maxConnections();
            }
            admitted = !full;
            if (admitted) {
                pending.add(c);
                connections.add(c);
            }
        }
        if (victim != null) {
            Conn v = victim;
            closeQuietly(v.socket);
            dropUnauthenticated("evicted", v.socket, () -> "held "
                    + (System.nanoTime() - v.acceptedNanos) / 1_000_000 + " ms without proving the secret, it was"
                    + " the oldest of maxUnauthenticated=" + limits.maxUnauthenticated() + " when another connection came");
        }
        if (!admitted) {
            refusedConnections.incrementAndGet();
            closeQuietly(s);
            return;
        }
        try {
            Thread.ofVirtual().name("symmem4j-store-conn").start(() -> serve(c));
        } catch (RuntimeException | OutOfMemoryError e) {
            forget(c);
            closeQuietly(s);
        }
    }

    /** Closes the unauthenticated connection held longest, if any; returns it. */
    private Conn evictOldest() {
        Conn victim;
        synchronized (admission) {
            victim = pending.isEmpty() ? null : pending.removeFirst();
            if (victim != null) {
                connections.remove(victim);
            }
        }
        if (victim != null) {
            closeQuietly(victim.socket);
            unauthenticatedDrops.computeIfAbsent("evicted", k -> new AtomicLong()).incrementAndGet();
        }
        return victim;
    }

    private void forget(Conn c) {
        synchronized (admission) {
            pending.remove(c);
            connections.remove(c);
        }
    }

    private void serve(Conn c) {
        Socket s = c.socket;
        boolean authenticated = false;
        try (s) {
            s.setTcpNoDelay(true);
            DeadlineInputStream timed = new DeadlineInputStream(s);
            CountingInputStream counted = new CountingInputStream(timed, limits.maxBytesPerConnection());
            DataInputStream in = new DataInputStream(new BufferedInputStream(counted, STREAM_BUFFER));
            DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream(), STREAM_BUFFER));
            // the whole handshake, not each read, must finish in time: a byte every few seconds holds nothing
            timed.deadline(c.acceptedNanos + limits.handshakeTimeout().toNanos());
            authenticated = handshake(c, in, out);
            if (!authenticated) {
                return;
            }
            while (!closed) {
                timed.noDeadline(); // between requests a rank may be quiet for as long as it likes
                int first = in.read();
                if (first < 0) {
                    return; // client closed its connection
                }
                timed.deadline(System.nanoTime() + limits.requestTimeout().toNanos()); // the rest must come promptly
                int magic = (first << 24) | (in.readUnsignedByte() << 16) | (in.readUnsignedByte() << 8) | in.readUnsignedByte();
                if (magic != StoreProtocol.MAGIC) {
                    throw new IOException("rendezvous protocol: bad magic 0x" + Integer.toHexString(magic) + " expected 0x"
                            + Integer.toHexString(StoreProtocol.MAGIC) + " (fix: only symmem4j ranks of this job, of one"
                            + " symmem4j version, may connect to MASTER_PORT)");
                }
                handle(in.readByte(), in, out);
                out.flush();
            }
        } catch (SocketTimeoutException e) {
            if (authenticated) {
                log("dropping " + describe(s) + ": it stopped sending in the middle of a request (" + e.getMessage() + ")");
            } else {
                dropUnauthenticated("stalled", s, () -> "it did not finish its handshake within handshakeTimeout="
                        + limits.handshakeTimeout());
            }
        } catch (SocketException | EOFException e) {
            // connection reset, closed mid-request, evicted, or server closing: nothing to report
        } catch (IOException | RuntimeException e) {
            if (authenticated) {
                log("dropping " + describe(s) + ": " + e.getMessage());
            } else {
                dropUnauthenticated("malformed", s, e::getMessage);
            }
        } catch (Throwable t) {
            LOG.error("rendezvous store: dropping " + describe(s) + " after " + t, t);
        } finally {
            forget(c);
        }
    }

    /**
     * Returns true when the client proved the secret and holds its seat. Until the client's proof
     * is checked, what is sent does not depend on anything the client claimed nor on this store's
     * identity beyond the secret: the protocol version, a nonce, and a proof over the two nonces.
     */
    private boolean handshake(Conn c, DataInputStream in, DataOutputStream out) throws IOException {
        int magic = in.readInt();
        if (magic != StoreHandshake.MAGIC) {
            throw new IOException("bad magic 0x" + Integer.toHexString(magic) + " (expected 0x"
                    + Integer.toHexString(StoreHandshake.MAGIC) + "; is something other than a symmem4j rank connecting"
                    + " to MASTER_PORT? fix: give this job a MASTER_PORT no other program uses)");
        }
        int version = in.readInt();
        out.writeInt(StoreHandshake.MAGIC);
        out.writeInt(StoreHandshake.VERSION);
        if (version != StoreHandshake.VERSION) {
            out.flush(); // the client reads our version and says what to do; we close
            dropUnauthenticated("version", c.socket, () -> "it speaks store protocol version " + version + ", this store "
                    + StoreHandshake.VERSION + " (run the same symmem4j version on every rank)");
            return false;
        }
        byte[] clientNonce = StoreHandshake.readExactly(in, StoreHandshake.NONCE_BYTES);
        if (closed) {
            return false;
        }
        byte[] serverNonce = StoreHandshake.nonce();
        out.write(serverNonce);
        out.write(StoreHandshake.serverProof(secret, clientNonce, serverNonce));
        out.flush();
        Claim claim = Claim.read(in);
        byte[] proof = StoreHandshake.readExactly(in, StoreHandshake.PROOF_BYTES);
        if (!StoreHandshake.matches(StoreHandshake.clientProof(secret, clientNonce, serverNonce, claim), proof)) {
            out.writeByte(StoreHandshake.DENIED);
            out.writeUTF(StoreHandshake.DENIED_TEXT);
            out.flush();
            dropUnauthenticated("denied", c.socket, () -> "its proof of the job's secret was wrong");
            return false;
        }
        // Authenticated: from here on it is not counted against maxUnauthenticated and never evicted.
        synchronized (admission) {
            if (!pending.remove(c)) {
                return false; // evicted (and closed) while its proof was checked: it reconnects
            }
        }
        Refusal refusal = null;
        String detail = null;
        if (closed) {
            refusal = Refusal.CLOSING;
            detail = "the store of " + identity + " is shutting down";
        } else if (!claim.runId().equals(identity.runId())) {
            refusal = Refusal.OTHER_RUN;
            detail = "this store serves run '" + identity.runId() + "'; the client belongs to run '" + claim.runId() + "'";
        } else if (claim.generation() != identity.generation()) {
            refusal = Refusal.OTHER_GENERATION;
            detail = "this store serves generation " + identity.generation() + " of run '" + identity.runId()
                    + "'; the client belongs to generation " + claim.generation();
        } else if (claim.worldSize() != identity.worldSize()) {
            refusal = Refusal.WORLD_SIZE;
            detail = "this store serves a group of " + identity.worldSize() + " ranks; the client was started with WORLD_SIZE="
                    + claim.worldSize();
        } else if (claim.rank() < 1 || claim.rank() >= identity.worldSize()) {
            refusal = Refusal.RANK_OUT_OF_RANGE;
            detail = "rank=" + claim.rank() + " outside [1, " + identity.worldSize() + ") (rank 0 hosts the store)";
        } else {
            String holder = seats.get(claim.rank());
            if (holder != null) {
                refusal = Refusal.SEAT_TAKEN;
                detail = "rank " + claim.rank() + " of " + identity + " is already held by pid " + holder.split(" ")[0];
            }
        }
        if (refusal != null) {
            refuse(out, refusal, detail);
            logOnce(refusal + "/" + claim.runId() + "/" + claim.rank(), "refused a connection claiming rank " + claim.rank()
                    + " (pid " + claim.pid() + "), which proved the job's secret: " + detail);
            return false;
        }
        String me = claim.pid() + " " + claim.startMillis();
        String holder = seats.putIfAbsent(claim.rank(), me);
        if (holder != null) {
            refuse(out, Refusal.SEAT_TAKEN, "rank " + claim.rank() + " of " + identity + " was taken by pid "
                    + holder.split(" ")[0] + " during this handshake");
            return false;
        }
        out.writeByte(StoreHandshake.OK);
        out.flush();
        return true;
    }

    /** A refusal of a client that proved the secret: this store's identity, the reason and its detail. */
    private void refuse(DataOutputStream out, Refusal refusal, String detail) throws IOException {
        out.writeByte(StoreHandshake.REFUSE);
        out.writeByte(refusal.code);
        out.writeUTF(identity.runId());
        out.writeLong(identity.generation());
        out.writeInt(identity.worldSize());
        out.writeUTF(detail);
        out.flush();
    }

    private void handle(byte op, DataInputStream in, DataOutputStream out) throws IOException {
        switch (op) {
            case StoreProtocol.SET -> {
                String key = StoreProtocol.readKey(in, limits.maxKeyBytes());
                byte[] value = StoreProtocol.readBytes(in, limits.maxValueBytes());
                try {
                    store.set(key, value);
                    out.writeByte(StoreProtocol.OK);
                } catch (StoreCapacityException e) {
                    out.writeByte(StoreProtocol.ERROR);
                    out.writeUTF(e.getMessage());
                }
            }
            case StoreProtocol.GET_ALL -> {
                List<String> keys = StoreProtocol.readKeys(in, limits.maxKeyBytes());
                long timeoutMs = in.readLong();
                if (timeoutMs < 0) {
                    throw new IOException("rendezvous protocol: GET_ALL timeoutMs=" + timeoutMs + " must be >= 0 (fix:"
                            + " only symmem4j ranks of one version may connect to MASTER_PORT)");
                }
                try {
                    List<byte[]> values = store.getAll(keys, Duration.ofMillis(timeoutMs));
                    out.writeByte(StoreProtocol.OK);
                    for (byte[] v : values) {
                        StoreProtocol.writeBytes(out, v);
                    }
                } catch (StoreTimeoutException e) {
                    out.writeByte(StoreProtocol.TIMEOUT);
                    StoreProtocol.writeKeys(out, e.missingKeys());
                }
            }
            case StoreProtocol.TRY_GET -> {
                Optional<byte[]> v = store.tryGet(StoreProtocol.readKey(in, limits.maxKeyBytes()));
                if (v.isPresent()) {
                    out.writeByte(StoreProtocol.OK);
                    StoreProtocol.writeBytes(out, v.get());
                } else {
                    out.writeByte(StoreProtocol.ABSENT);
                }
            }
            case StoreProtocol.ADD -> {
                String key = StoreProtocol.readKey(in, limits.maxKeyBytes());
                long delta = in.readLong();
                try {
                    long v = store.add(key, delta);
                    out.writeByte(StoreProtocol.OK);
                    out.writeLong(v);
                } catch (StoreCapacityException e) {
                    out.writeByte(StoreProtocol.ERROR);
                    out.writeUTF(e.getMessage());
                }
            }
            case StoreProtocol.DELETE -> {
                boolean had = store.delete(StoreProtocol.readKey(in, limits.maxKeyBytes()));
                out.writeByte(StoreProtocol.OK);
                out.writeBoolean(had);
            }
            default -> throw new IOException("rendezvous protocol: unknown op=" + op + " expected 1..5 (fix: only"
                    + " symmem4j ranks of one version may connect to MASTER_PORT)");
        }
    }

    private static String describe(Socket s) {
        return "connection from " + s.getRemoteSocketAddress();
    }

    private void log(String message) {
        if (!closed) {
            LOG.warn("rendezvous store of " + identity + ": " + message);
        }
    }

    /** Logs a refusal once per distinct kind, so a peer that retries for a minute does not flood the log. */
    private void logOnce(String kind, String message) {
        if (loggedRefusals.size() < 1000 && loggedRefusals.add(kind)) {
            log(message);
        }
    }

    /**
     * Counts a connection dropped before it proved the secret; logs the first of each kind only, so
     * a stranger cannot flood rank 0's log (the counts are logged when the store closes).
     */
    private void dropUnauthenticated(String kind, Socket s, Supplier<String> why) {
        if (unauthenticatedDrops.computeIfAbsent(kind, k -> new AtomicLong()).getAndIncrement() == 0) {
            log("dropping " + (s == null ? "a connection" : describe(s)) + " that had not proved the job's secret: "
                    + why.get() + " (further drops of this kind are counted, not logged)");
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    @Override
    public void close() {
        closed = true;
        store.close();
        try {
            serverSocket.close();
        } catch (IOException ignored) {
            // closing anyway
        }
        List<Conn> open;
        synchronized (admission) {
            open = new ArrayList<>(connections);
        }
        for (Conn c : open) {
            closeQuietly(c.socket);
        }
        try {
            acceptor.join(1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        long dropped = unauthenticatedDrops.values().stream().mapToLong(AtomicLong::get).sum();
        if (dropped > 1) {
            LOG.warn("rendezvous store of " + identity + " closed; it dropped " + dropped + " connections that had not"
                    + " proved the job's secret: " + new TreeMap<>(unauthenticatedDrops) + ", refused at accept="
                    + refusedConnections.get());
        }
    }

    /**
     * Reads from a socket within a deadline (or none): each read may wait only for what is left of
     * it, so a peer that trickles a byte at a time gains nothing.
     */
    private static final class DeadlineInputStream extends FilterInputStream {
        private final Socket socket;
        private boolean armed;
        private long deadlineNanos;

        DeadlineInputStream(Socket socket) throws IOException {
            super(socket.getInputStream());
            this.socket = socket;
        }

        void deadline(long nanos) {
            armed = true;
            deadlineNanos = nanos;
        }

        void noDeadline() {
            armed = false;
        }

        private void arm() throws IOException {
            if (!armed) {
                socket.setSoTimeout(0);
                return;
            }
            long left = deadlineNanos - System.nanoTime();
            if (left <= 0) {
                throw new SocketTimeoutException("request deadline passed: the connection did not send its whole request"
                        + " within StoreLimits.requestTimeout (fix: the client is stopped or too slow, see its side; or"
                        + " raise StoreLimits.requestTimeout)");
            }
            socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE, (left + 999_999) / 1_000_000)));
        }

        @Override
        public int read() throws IOException {
            arm();
            return super.read();
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            arm();
            return super.read(b, off, len);
        }
    }

    /** Counts the bytes a connection sends and drops it once it passes its lifetime allowance. */
    private static final class CountingInputStream extends FilterInputStream {
        private final long limit;
        private long count;

        CountingInputStream(InputStream in, long limit) {
            super(in);
            this.limit = limit;
        }

        private void add(long n) throws IOException {
            count += n;
            if (count > limit) {
                throw new IOException("connection sent " + count + " bytes, more than the " + limit
                        + " one connection may send (StoreLimits.maxBytesPerConnection; fix: store set-up values only,"
                        + " or raise that limit)");
            }
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            if (b >= 0) {
                add(1);
            }
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            if (n > 0) {
                add(n);
            }
            return n;
        }
    }
}
