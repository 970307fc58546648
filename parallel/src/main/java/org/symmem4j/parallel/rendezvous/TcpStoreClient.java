package org.symmem4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.StoreTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Claim;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Refusal;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * A rank's connection to the {@link TcpStoreServer} of rank 0. Requests are serialized on one
 * socket (set-up traffic is tiny).
 *
 * <p>Joining retries until the connect deadline: ranks start in any order, so rank 0 may not listen
 * yet, the port may still be held by the store of a previous group or another job, and a store
 * crowded by strangers may close this rank's connection before its handshake completes. Each
 * attempt runs the {@link StoreHandshake}: the store must prove the job's secret before this rank
 * says who it is, and this rank proves it in turn; a store that then refuses it says why, naming
 * both jobs. A store that cannot prove the secret is another job's (or the ranks were given
 * different secrets): it learns nothing about this rank, and when the deadline passes the final
 * error names the job holding the port if this user holds that job's secret (its host secret file).
 *
 * <p>Every call is bounded: a store that does not answer within {@code responseTimeout} (beyond the
 * wait a {@code getAll} asked for) fails the call, and the connection is then unusable, since the
 * reply may still come. So a stopped or wedged rank 0 cannot hold a rank forever.
 */
public final class TcpStoreClient implements RendezvousStore {

    private final String host;
    private final int port;
    private final JobIdentity identity;
    private final int rank;
    private final Duration responseTimeout;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private String broken;

    /**
     * Connects and authenticates, retrying until {@code connectTimeout}.
     *
     * @param host the store's host name or address
     * @param port the store's port
     * @param identity the job this rank belongs to; the store refuses another
     * @param rank this rank, in [1, worldSize) (rank 0 serves the store)
     * @param secret the job's secret, proved in the handshake
     * @param connectTimeout how long to keep trying to connect and authenticate
     * @param responseTimeout how long the store may take to answer a request (beyond a getAll's wait)
     */
    public TcpStoreClient(String host, int port, JobIdentity identity, int rank, StoreSecret secret,
                          Duration connectTimeout, Duration responseTimeout) {
        this.host = host;
        this.port = port;
        this.identity = identity;
        this.rank = rank;
        this.responseTimeout = responseTimeout;
        Connection c = connect(connectTimeout, secret);
        this.socket = c.socket;
        this.in = c.in;
        this.out = c.out;
    }

    private record Connection(Socket socket, DataInputStream in, DataOutputStream out) {
    }

    /** A failed attempt that a later one may get past. */
    private static final class Retry extends Exception {
        /** Whether a store answered (refused, denied, failed its proof), which says more than silence. */
        final boolean answered;
        /** Whether the listener may be another job's store: it failed its proof, or this job's secret is not there yet. */
        final boolean maybeForeign;
        /** Whether the store closed the connection mid-handshake (a crowded store sheds its oldest): retry at once. */
        final boolean dropped;

        Retry(String message, Throwable cause) {
            this(message, cause, false, false, false);
        }

        Retry(String message, Throwable cause, boolean answered, boolean maybeForeign, boolean dropped) {
            super(message, cause, false, false);
            this.answered = answered;
            this.maybeForeign = maybeForeign;
            this.dropped = dropped;
        }
    }

    private Connection connect(Duration timeout, StoreSecret secret) {
        long deadline = System.nanoTime() + timeout.toNanos();
        // Parks between attempts (no spinning): a refused connect costs a syscall round trip.
        IdleStrategy idle = new BackoffIdleStrategy(0, 0, 1_000_000, 100_000_000);
        String last = "no attempt finished";
        String lastAnswer = null;
        Throwable lastCause = null;
        boolean maybeForeign = false;
        while (true) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                break;
            }
            try {
                return attempt(secret, Duration.ofNanos(left));
            } catch (Retry r) {
                last = r.getMessage();
                lastCause = r.getCause();
                if (r.answered) {
                    lastAnswer = r.getMessage();
                }
                // sticky: the attempt that met another job's store may not be the last (under load the last one can
                // start with a few ms left and time out); the final probe asks the port again, so a store that left
                // since is not named
                maybeForeign |= r.maybeForeign;
                if (r.dropped) {
                    idle.reset(); // shed by a crowded store: a prompt retry is the way in
                }
            }
            idle.idle();
        }
        String holder = maybeForeign ? describeStoreAt(host, port, Duration.ofSeconds(2), secret) : null;
        throw new SymmemException("rank=" + rank + " of " + identity + " could not join the rendezvous store at"
                + " MASTER_ADDR:MASTER_PORT=" + host + ":" + port + " within timeout=" + timeout + "; "
                + (lastAnswer == null || lastAnswer.equals(last) ? "last attempt: " + last
                        : "last answer: " + lastAnswer + "; last attempt: " + last)
                + (holder == null ? "" : "; the port is held by " + holder
                        + " (two jobs on one MASTER_PORT: give each job its own MASTER_PORT)")
                + " (fix: check that rank 0 runs and that MASTER_ADDR:MASTER_PORT reaches it from this host, or raise"
                + " symmem4j.timeout.ms if rank 0 starts late)", lastCause);
    }

    private Connection attempt(StoreSecret secret, Duration left) throws Retry {
        Socket s = new Socket();
        boolean ok = false;
        try {
            int attemptMs = (int) Math.max(1, Math.min(left.toMillis(), 5_000));
            s.setTcpNoDelay(true);
            try {
                s.connect(new InetSocketAddress(host, port), attemptMs);
            } catch (IOException e) {
                throw new Retry("connect failed: " + e + " (rank 0 hosts the store; fix: check that it started and that"
                        + " MASTER_ADDR/MASTER_PORT match on every rank)", e);
            }
            if (SelfConnection.isSelfConnected(s)) {
                // before rank 0 listens; a normal close would hold the port in TIME_WAIT for 60 s (SelfConnection)
                String self = SelfConnection.describe(s);
                SelfConnection.discard(s);
                throw new Retry("connect failed: " + self, null);
            }
            // the handshake must finish promptly: a listener that accepts and never answers is not a store
            s.setSoTimeout(attemptMs);
            DataInputStream i = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            DataOutputStream o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            handshake(i, o, secret);
            ok = true;
            return new Connection(s, i, o);
        } catch (SocketTimeoutException e) {
            throw new Retry("the process at " + host + ":" + port + " accepted the connection but did not answer the"
                    + " symmem4j handshake in time (is something else listening on MASTER_PORT, or is rank 0 stopped?"
                        + " fix: give the job a free MASTER_PORT, or resume rank 0)", e);
        } catch (EOFException | SocketException e) {
            throw new Retry("the store at " + host + ":" + port + " closed the connection before the handshake completed"
                    + " (" + e + "; a store holding many unauthenticated connections closes the oldest to admit new ones,"
                    + " and a store shutting down closes them all)", e, false, false, true);
        } catch (IOException e) {
            throw new Retry("handshake with " + host + ":" + port + " failed: " + e, e);
        } finally {
            if (!ok) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // retrying
                }
            }
        }
    }

    /**
     * Proof first: this rank tells the store who it is only once the store proved the secret, and
     * learns who the store is only once it proved the secret in turn (a refusal then names both jobs).
     */
    private void handshake(DataInputStream i, DataOutputStream o, StoreSecret secret) throws IOException, Retry {
        byte[] clientNonce = StoreHandshake.nonce();
        StoreHandshake.writeHello(o, clientNonce);
        o.flush();
        readServerVersion(i, host, port);
        byte[] serverNonce = StoreHandshake.readExactly(i, StoreHandshake.NONCE_BYTES);
        byte[] serverProof = StoreHandshake.readExactly(i, StoreHandshake.PROOF_BYTES);
        byte[] key;
        try {
            key = secret.bytes();
        } catch (StoreSecret.SecretNotReadyException e) {
            throw new Retry(e.getMessage(), e, false, true, false);
        }
        if (!StoreHandshake.matches(StoreHandshake.serverProof(key, clientNonce, serverNonce), serverProof)) {
            throw new Retry("the store at " + host + ":" + port + " could not prove this job's secret: it is another"
                    + " job's store (two jobs on one MASTER_PORT?), or the ranks were given different secrets", null,
                    true, true, false);
        }
        ProcessHandle self = ProcessHandle.current();
        Claim claim = new Claim(identity.runId(), identity.generation(), identity.worldSize(), rank, self.pid(),
                self.info().startInstant().map(Instant::toEpochMilli).orElse(0L));
        claim.write(o);
        o.write(StoreHandshake.clientProof(key, clientNonce, serverNonce, claim));
        o.flush();
        byte verdict = i.readByte();
        if (verdict == StoreHandshake.OK) {
            return;
        }
        if (verdict == StoreHandshake.REFUSE) {
            Refusal refusal = Refusal.of(i.readByte());
            String theirs = readIdentity(i);
            String message = "refused by the store of " + theirs + ": " + i.readUTF() + hint(refusal);
            if (!refusal.retryable) {
                throw new SymmemException("rank=" + rank + " of " + identity + " " + message + " (fix: start every rank"
                        + " with the same WORLD_SIZE, a RANK in 0 .. WORLD_SIZE-1 and the same symmem4j version)");
            }
            throw new Retry(message, null, true, false, false);
        }
        String detail = verdict == StoreHandshake.DENIED ? i.readUTF() : "verdict=" + verdict + " expected 0..2";
        throw new Retry("denied by the store at " + host + ":" + port + ": " + detail, null, true, false, false);
    }

    /** Reads the store's MAGIC and VERSION; a mismatch is final (a listener of another kind is retried). */
    private static void readServerVersion(DataInputStream i, String host, int port) throws IOException, Retry {
        int magic = i.readInt();
        if (magic != StoreHandshake.MAGIC) {
            throw new Retry("the process at " + host + ":" + port + " is not a symmem4j store (magic 0x"
                    + Integer.toHexString(magic) + ")", null);
        }
        int version = i.readInt();
        if (version != StoreHandshake.VERSION) {
            throw new SymmemException("the rendezvous store at " + host + ":" + port + " speaks protocol version " + version
                    + "; this rank speaks " + StoreHandshake.VERSION + " (fix: run the same symmem4j version on"
                    + " every rank)");
        }
    }

    /** The store identity a refusal carries (sent only to a client that proved the secret). */
    private static String readIdentity(DataInputStream i) throws IOException {
        String runId = i.readUTF();
        long generation = i.readLong();
        int worldSize = i.readInt();
        return "run '" + runId + "' generation " + generation + " (world size " + worldSize + ")";
    }

    /**
     * Asks the store at {@code host:port} who it is. It tells only a client that proves its secret,
     * so this tries the secrets this user holds: {@code secret} (if given and available) and, for a
     * loopback address, the host secret files of other jobs on this port ({@link StoreSecret}); with
     * one that the store proves, it claims rank 0 (which every store refuses, naming its run). For
     * rank 0's error when its port is taken, and a rank's when the store there is not its job's.
     *
     * @param host the host to ask
     * @param port the port to ask
     * @param timeout how long to spend on it in all
     * @param secret this job's secret, or null
     * @return the store's self-description ("the store of run ..."), a description of what answered
     *         when it proved none of these secrets, or null when nothing answered like a symmem4j store
     */
    public static String describeStoreAt(String host, int port, Duration timeout, StoreSecret secret) {
        List<byte[]> candidates = new ArrayList<>();
        if (secret != null) {
            try {
                candidates.add(secret.bytes());
            } catch (RuntimeException notThere) {
                // a host secret not published yet, or unreadable: the other candidates may still do
            }
        }
        if (StoreSecret.isLoopback(host)) {
            for (byte[] c : StoreSecret.hostSecretsOfPort(port)) {
                if (candidates.stream().noneMatch(k -> Arrays.equals(k, c))) {
                    candidates.add(c);
                }
            }
        }
        if (candidates.isEmpty()) {
            candidates.add(StoreHandshake.nonce()); // a key no store holds: still tells a store from something else
        }
        long deadline = System.nanoTime() + timeout.toNanos();
        String unproved = null;
        for (byte[] key : candidates) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                break;
            }
            String answer = probe(host, port, Duration.ofNanos(left), key);
            if (answer == null) {
                return unproved; // nothing (more) answers like a store
            }
            if (!answer.isEmpty()) {
                return answer;
            }
            unproved = "a symmem4j store that proved none of the secrets this user holds for the port (another"
                    + " user's job, or a job whose secret comes from elsewhere)";
        }
        return unproved;
    }

    /** One probe: the store's identity, "" if it did not prove {@code key}, or null if no store answered. */
    private static String probe(String host, int port, Duration timeout, byte[] key) {
        try (Socket s = new Socket()) {
            int ms = (int) Math.max(1, Math.min(Integer.MAX_VALUE, timeout.toMillis()));
            s.connect(new InetSocketAddress(host, port), ms);
            if (SelfConnection.isSelfConnected(s)) {
                SelfConnection.discard(s); // no store listens: keep the port free (SelfConnection)
                return null;
            }
            s.setSoTimeout(ms);
            DataInputStream i = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            DataOutputStream o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            byte[] clientNonce = StoreHandshake.nonce();
            StoreHandshake.writeHello(o, clientNonce);
            o.flush();
            if (i.readInt() != StoreHandshake.MAGIC) {
                return null;
            }
            int version = i.readInt();
            if (version != StoreHandshake.VERSION) {
                return "a symmem4j store speaking protocol version " + version + " (this process speaks "
                        + StoreHandshake.VERSION + ")";
            }
            byte[] serverNonce = StoreHandshake.readExactly(i, StoreHandshake.NONCE_BYTES);
            byte[] serverProof = StoreHandshake.readExactly(i, StoreHandshake.PROOF_BYTES);
            if (!StoreHandshake.matches(StoreHandshake.serverProof(key, clientNonce, serverNonce), serverProof)) {
                return "";
            }
            Claim claim = new Claim("probe", 0, 1, 0, ProcessHandle.current().pid(), 0);
            claim.write(o);
            o.write(StoreHandshake.clientProof(key, clientNonce, serverNonce, claim));
            o.flush();
            if (i.readByte() != StoreHandshake.REFUSE) {
                return "";
            }
            i.readByte();
            return "the store of " + readIdentity(i);
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    private static String hint(Refusal refusal) {
        return switch (refusal) {
            case OTHER_RUN -> " (two jobs on one MASTER_PORT: give each job its own MASTER_PORT; every rank of one job"
                    + " needs the same SYMMEM4J_RUN_ID, which by default is its parent process)";
            case OTHER_GENERATION -> " (a group of the same run created before or after this one still holds the port)";
            case WORLD_SIZE -> " (start every rank with the same WORLD_SIZE)";
            case SEAT_TAKEN -> " (two processes were started with the same RANK, or the previous group on this port"
                    + " has not shut down yet)";
            case CLOSING, UNKNOWN, RANK_OUT_OF_RANGE -> "";
        };
    }

    private SymmemException failure(String what, IOException e) {
        broken = what + " failed: " + e;
        if (e instanceof SocketTimeoutException) {
            return new SymmemException("rendezvous store " + host + ":" + port + " did not answer " + what + " within "
                    + responseTimeout + " beyond the requested wait (rank 0, which hosts the store, may be stopped or"
                    + " overloaded; fix: see rank 0's own error, or raise symmem4j.timeout.ms if it is only slow)", e);
        }
        return new SymmemException("rendezvous store " + host + ":" + port + ": " + what + " failed: " + e
                + " (rank 0, which hosts the store, may have exited; fix: see rank 0's own error or exit status)", e);
    }

    /**
     * Rejects, before anything is sent, a key or value the store would refuse by dropping the
     * connection (the store's default {@link StoreLimits}).
     */
    private static void checkSizes(String key, byte[] value) {
        StoreLimits limits = StoreLimits.defaults(1);
        int keyBytes = key.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        if (keyBytes > limits.maxKeyBytes()) {
            throw new IllegalArgumentException("rendezvous store key of " + keyBytes + " bytes; at most "
                    + limits.maxKeyBytes() + " (keys name set-up values; fix: keep them short)");
        }
        if (value != null && value.length > limits.maxValueBytes()) {
            throw new IllegalArgumentException("rendezvous store value of " + value.length + " bytes for key " + key
                    + "; at most " + limits.maxValueBytes() + " (the store carries set-up handles, not data; fix: send"
                    + " data through symmetric memory or a collective)");
        }
    }

    private void begin(byte op, Duration wait) throws IOException {
        if (broken != null) {
            throw new SymmemException("rendezvous store " + host + ":" + port + ": connection unusable since " + broken
                    + " (fix: see the first failure, named here, and rank 0's own error)");
        }
        socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE, wait.plus(responseTimeout).toMillis())));
        out.writeInt(StoreProtocol.MAGIC);
        out.writeByte(op);
    }

    private byte status() throws IOException {
        byte st = in.readByte();
        if (st == StoreProtocol.ERROR) {
            throw new StoreCapacityException(in.readUTF());
        }
        return st;
    }

    @Override
    public synchronized void set(String key, byte[] value) {
        checkSizes(key, value);
        try {
            begin(StoreProtocol.SET, Duration.ZERO);
            out.writeUTF(key);
            StoreProtocol.writeBytes(out, value);
            out.flush();
            status();
        } catch (IOException e) {
            throw failure("set(" + key + ")", e);
        }
    }

    @Override
    public byte[] get(String key, Duration timeout) {
        return getAll(List.of(key), timeout).getFirst();
    }

    @Override
    public synchronized Optional<byte[]> tryGet(String key) {
        try {
            begin(StoreProtocol.TRY_GET, Duration.ZERO);
            out.writeUTF(key);
            out.flush();
            return status() == StoreProtocol.OK ? Optional.of(StoreProtocol.readBytes(in, Integer.MAX_VALUE - 8))
                    : Optional.empty();
        } catch (IOException e) {
            throw failure("tryGet(" + key + ")", e);
        }
    }

    @Override
    public synchronized List<byte[]> getAll(List<String> keys, Duration timeout) {
        try {
            begin(StoreProtocol.GET_ALL, timeout);
            StoreProtocol.writeKeys(out, keys);
            out.writeLong(timeout.toMillis());
            out.flush();
            if (status() == StoreProtocol.TIMEOUT) {
                throw new StoreTimeoutException(StoreProtocol.readKeys(in, 65_535), timeout);
            }
            List<byte[]> values = new ArrayList<>(keys.size());
            for (int i = 0; i < keys.size(); i++) {
                values.add(StoreProtocol.readBytes(in, Integer.MAX_VALUE - 8));
            }
            return values;
        } catch (IOException e) {
            throw failure("getAll(" + keys + ")", e);
        }
    }

    @Override
    public synchronized long add(String key, long delta) {
        try {
            begin(StoreProtocol.ADD, Duration.ZERO);
            out.writeUTF(key);
            out.writeLong(delta);
            out.flush();
            status();
            return in.readLong();
        } catch (IOException e) {
            throw failure("add(" + key + ")", e);
        }
    }

    @Override
    public synchronized boolean delete(String key) {
        try {
            begin(StoreProtocol.DELETE, Duration.ZERO);
            out.writeUTF(key);
            out.flush();
            status();
            return in.readBoolean();
        } catch (IOException e) {
            throw failure("delete(" + key + ")", e);
        }
    }

    @Override
    public synchronized void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }
}
