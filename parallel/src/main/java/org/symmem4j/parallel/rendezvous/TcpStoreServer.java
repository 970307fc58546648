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
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.StoreTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Hello;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Refusal;

/**
 * The rendezvous store that rank 0 hosts for a cross-process group, at
 * {@code MASTER_ADDR:MASTER_PORT}. One virtual thread per connection; the map is an
 * {@link InMemoryStore}, so blocking {@code GET_ALL}s simply wait on its condition.
 *
 * <p>Who gets in: every connection starts with the {@link StoreHandshake}. A client of another run,
 * another generation or another world size, one claiming a rank out of range or a rank another
 * process already holds, is refused before any proof, with both identities in the answer; a client
 * that cannot prove the job's secret is denied. Only then are requests served.
 *
 * <p>What no client can do: hold a server thread with a half-sent handshake or request (both have a
 * deadline, {@link StoreLimits#handshakeTimeout()} and {@link StoreLimits#requestTimeout()}), make
 * the server allocate memory for bytes that have not arrived, exceed the key, value, per-connection
 * and total limits, open more than {@link StoreLimits#maxConnections()} connections, or take the
 * server down with malformed input: a bad request drops only its own connection.
 */
public final class TcpStoreServer implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(TcpStoreServer.class);

    private final JobIdentity identity;
    private final byte[] secret;
    private final StoreLimits limits;
    private final InMemoryStore store;
    private final ServerSocket serverSocket;
    private final Thread acceptor;
    private final Set<Socket> connections = ConcurrentHashMap.newKeySet();
    private final AtomicInteger unauthenticated = new AtomicInteger();
    private final AtomicLong refusedConnections = new AtomicLong();
    /** Per rank: the process that holds the seat ("pid start"), or null while free. Rank 0 is this process. */
    private final ConcurrentHashMap<Integer, String> seats = new ConcurrentHashMap<>();
    private final Set<String> loggedRefusals = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

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
            serverSocket.bind(new InetSocketAddress(host, port), 128);
        } catch (IOException e) {
            throw new SymmemException("rendezvous store: cannot listen on " + host + ":" + port + " (" + e.getMessage()
                    + "); another job may hold MASTER_PORT=" + port + ": give each job its own MASTER_PORT, or stop"
                    + " the process holding it", e);
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
     * Connections closed at accept because a connection limit was reached.
     *
     * @return the count since the server started
     */
    public long refusedConnections() {
        return refusedConnections.get();
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
        return connections.size();
    }

    private void acceptLoop() {
        while (!closed) {
            Socket s;
            try {
                s = serverSocket.accept();
            } catch (IOException e) {
                if (!closed) {
                    LOG.warn("rendezvous store: accept failed: " + e);
                }
                continue;
            }
            if (connections.size() >= limits.maxConnections() || unauthenticated.get() >= limits.maxUnauthenticated()) {
                refusedConnections.incrementAndGet();
                closeQuietly(s);
                continue;
            }
            unauthenticated.incrementAndGet();
            connections.add(s);
            Thread.ofVirtual().name("symmem4j-store-conn").start(() -> serve(s));
        }
    }

    private void serve(Socket s) {
        boolean authenticated = false;
        boolean handshaking = true; // counted in `unauthenticated` until the handshake ends
        try (s) {
            s.setTcpNoDelay(true);
            CountingInputStream counted = new CountingInputStream(s.getInputStream(), limits.maxBytesPerConnection());
            DataInputStream in = new DataInputStream(new BufferedInputStream(counted));
            DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            s.setSoTimeout(millis(limits.handshakeTimeout()));
            authenticated = handshake(in, out);
            handshaking = false;
            unauthenticated.decrementAndGet();
            if (!authenticated) {
                return;
            }
            while (!closed) {
                s.setSoTimeout(0); // between requests a rank may be quiet for as long as it likes
                int first = in.read();
                if (first < 0) {
                    return; // client closed its connection
                }
                s.setSoTimeout(millis(limits.requestTimeout())); // the rest of the request must come promptly
                int magic = (first << 24) | (in.readUnsignedByte() << 16) | (in.readUnsignedByte() << 8) | in.readUnsignedByte();
                if (magic != StoreProtocol.MAGIC) {
                    throw new IOException("rendezvous protocol: bad magic 0x" + Integer.toHexString(magic) + " expected 0x"
                            + Integer.toHexString(StoreProtocol.MAGIC));
                }
                handle(in.readByte(), in, out);
                out.flush();
            }
        } catch (SocketTimeoutException e) {
            log("dropping " + describe(s) + ": it stopped sending in the middle of a "
                    + (authenticated ? "request" : "handshake") + " (" + e.getMessage() + ")");
        } catch (SocketException | EOFException e) {
            // connection reset, closed mid-request, or server closing: nothing to report
        } catch (IOException | RuntimeException e) {
            log("dropping " + describe(s) + ": " + e.getMessage());
        } catch (Throwable t) {
            LOG.error("rendezvous store: dropping " + describe(s) + " after " + t, t);
        } finally {
            if (handshaking) {
                unauthenticated.decrementAndGet();
            }
            connections.remove(s);
        }
    }

    /** Returns true when the client proved the secret and holds its seat. */
    private boolean handshake(DataInputStream in, DataOutputStream out) throws IOException {
        int magic = in.readInt();
        if (magic != StoreHandshake.MAGIC) {
            throw new IOException("bad magic 0x" + Integer.toHexString(magic) + " (expected 0x"
                    + Integer.toHexString(StoreHandshake.MAGIC) + "; is something other than a symmem4j rank connecting"
                    + " to MASTER_PORT?)");
        }
        int version = in.readInt();
        if (version != StoreHandshake.VERSION) {
            refuse(out, Refusal.VERSION, "store speaks protocol version " + StoreHandshake.VERSION + ", client "
                    + version + " (run the same symmem4j version on every rank)");
            return false;
        }
        Hello hello = Hello.readBody(in);
        Refusal refusal = null;
        String detail = null;
        if (closed) {
            refusal = Refusal.CLOSING;
            detail = "the store of " + identity + " is shutting down";
        } else if (!hello.runId().equals(identity.runId())) {
            refusal = Refusal.OTHER_RUN;
            detail = "this store serves run '" + identity.runId() + "'; the client belongs to run '" + hello.runId() + "'";
        } else if (hello.generation() != identity.generation()) {
            refusal = Refusal.OTHER_GENERATION;
            detail = "this store serves generation " + identity.generation() + " of run '" + identity.runId()
                    + "'; the client belongs to generation " + hello.generation();
        } else if (hello.worldSize() != identity.worldSize()) {
            refusal = Refusal.WORLD_SIZE;
            detail = "this store serves a group of " + identity.worldSize() + " ranks; the client was started with WORLD_SIZE="
                    + hello.worldSize();
        } else if (hello.rank() < 1 || hello.rank() >= identity.worldSize()) {
            refusal = Refusal.RANK_OUT_OF_RANGE;
            detail = "rank=" + hello.rank() + " outside [1, " + identity.worldSize() + ") (rank 0 hosts the store)";
        } else {
            String holder = seats.get(hello.rank());
            if (holder != null) {
                refusal = Refusal.SEAT_TAKEN;
                detail = "rank " + hello.rank() + " of " + identity + " is already held by pid " + holder.split(" ")[0];
            }
        }
        if (refusal != null) {
            refuse(out, refusal, detail);
            logOnce(refusal + "/" + hello.runId() + "/" + hello.rank(), "refused a connection claiming rank " + hello.rank()
                    + " (pid " + hello.pid() + "): " + detail);
            return false;
        }
        byte[] serverNonce = StoreHandshake.nonce();
        writeIdentity(out, StoreHandshake.ACCEPT);
        out.write(serverNonce);
        out.write(StoreHandshake.serverProof(secret, hello, serverNonce));
        out.flush();
        byte[] proof = in.readNBytes(StoreHandshake.PROOF_BYTES);
        if (!StoreHandshake.matches(StoreHandshake.clientProof(secret, hello, serverNonce), proof)) {
            deny(out, "the client did not prove the job's secret (every rank needs the same " + StoreSecret.SECRET_ENV
                    + " or " + StoreSecret.SECRET_FILE_ENV + ")");
            logOnce("denied/" + hello.pid(), "denied a connection claiming rank " + hello.rank() + " (pid " + hello.pid()
                    + "): wrong secret");
            return false;
        }
        String me = hello.pid() + " " + hello.startMillis();
        String holder = seats.putIfAbsent(hello.rank(), me);
        if (holder != null) {
            deny(out, "rank " + hello.rank() + " of " + identity + " was taken by pid " + holder.split(" ")[0]
                    + " during this handshake");
            return false;
        }
        out.writeByte(StoreHandshake.OK);
        out.flush();
        return true;
    }

    private void writeIdentity(DataOutputStream out, byte verdict) throws IOException {
        out.writeInt(StoreHandshake.MAGIC);
        out.writeInt(StoreHandshake.VERSION);
        out.writeByte(verdict);
        out.writeUTF(identity.runId());
        out.writeLong(identity.generation());
        out.writeInt(identity.worldSize());
    }

    private void refuse(DataOutputStream out, Refusal refusal, String detail) throws IOException {
        writeIdentity(out, StoreHandshake.REFUSE);
        out.writeByte(refusal.code);
        out.writeUTF(detail);
        out.flush();
    }

    private static void deny(DataOutputStream out, String detail) throws IOException {
        out.writeByte(StoreHandshake.DENIED);
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
                    throw new IOException("rendezvous protocol: GET_ALL timeoutMs=" + timeoutMs + " must be >= 0");
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
            default -> throw new IOException("rendezvous protocol: unknown op=" + op + " expected 1..5");
        }
    }

    private static int millis(Duration d) {
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, d.toMillis()));
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
        for (Socket s : connections) {
            closeQuietly(s);
        }
        try {
            acceptor.join(1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
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
                        + " one connection may send (StoreLimits.maxBytesPerConnection)");
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
