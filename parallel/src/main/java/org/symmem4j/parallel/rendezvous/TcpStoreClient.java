package org.symmem4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.StoreTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Hello;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Refusal;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * A rank's connection to the {@link TcpStoreServer} of rank 0. Requests are serialized on one
 * socket (set-up traffic is tiny).
 *
 * <p>Joining retries until the connect deadline: ranks start in any order, so rank 0 may not listen
 * yet, and the port may still be held by the store of a previous group or another job, which
 * refuses this rank (the last refusal is in the final error, naming both jobs). Each attempt runs
 * the {@link StoreHandshake}: the store must prove the job's secret before this rank sends
 * anything else, and this rank proves it in turn.
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

        Retry(String message, Throwable cause) {
            this(message, cause, false);
        }

        Retry(String message, Throwable cause, boolean answered) {
            super(message, cause, false, false);
            this.answered = answered;
        }
    }

    private Connection connect(Duration timeout, StoreSecret secret) {
        long deadline = System.nanoTime() + timeout.toNanos();
        // Parks between attempts (no spinning): a refused connect costs a syscall round trip.
        IdleStrategy idle = new BackoffIdleStrategy(0, 0, 1_000_000, 100_000_000);
        String last = "no attempt finished";
        String lastAnswer = null;
        Throwable lastCause = null;
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
            }
            idle.idle();
        }
        throw new SymmemException("rank=" + rank + " of " + identity + " could not join the rendezvous store at"
                + " MASTER_ADDR:MASTER_PORT=" + host + ":" + port + " within timeout=" + timeout + "; "
                + (lastAnswer == null || lastAnswer.equals(last) ? "last attempt: " + last
                        : "last answer: " + lastAnswer + "; last attempt: " + last), lastCause);
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
                throw new Retry("connect failed: " + e + " (rank 0 hosts the store: check that it started and that"
                        + " MASTER_ADDR/MASTER_PORT match on every rank)", e);
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
                    + " symmem4j handshake in time (is something else listening on MASTER_PORT, or is rank 0 stopped?)", e);
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
     * The identities are exchanged before the secret is needed, so a rank of another job learns whose
     * store holds the port even while its own host secret does not exist yet.
     */
    private void handshake(DataInputStream i, DataOutputStream o, StoreSecret secret) throws IOException, Retry {
        ProcessHandle self = ProcessHandle.current();
        Hello hello = new Hello(StoreHandshake.nonce(), identity.runId(), identity.generation(), identity.worldSize(),
                rank, self.pid(), self.info().startInstant().map(Instant::toEpochMilli).orElse(0L));
        hello.write(o);
        o.flush();
        int magic = i.readInt();
        int version = i.readInt();
        if (magic != StoreHandshake.MAGIC) {
            throw new Retry("the process at " + host + ":" + port + " is not a symmem4j store (magic 0x"
                    + Integer.toHexString(magic) + ")", null);
        }
        if (version != StoreHandshake.VERSION) {
            throw new SymmemException("the rendezvous store at " + host + ":" + port + " speaks protocol version " + version
                    + "; this rank speaks " + StoreHandshake.VERSION + " (run the same symmem4j version on every rank)");
        }
        byte verdict = i.readByte();
        String runId = i.readUTF();
        long generation = i.readLong();
        int worldSize = i.readInt();
        String theirs = "run '" + runId + "' generation " + generation + " (world size " + worldSize + ")";
        if (verdict == StoreHandshake.REFUSE) {
            Refusal refusal = Refusal.of(i.readByte());
            String detail = i.readUTF();
            String message = "refused by the store of " + theirs + ": " + detail + hint(refusal);
            if (!refusal.retryable) {
                throw new SymmemException("rank=" + rank + " of " + identity + " " + message);
            }
            throw new Retry(message, null, true);
        }
        byte[] serverNonce = i.readNBytes(StoreHandshake.NONCE_BYTES);
        byte[] serverProof = i.readNBytes(StoreHandshake.PROOF_BYTES);
        byte[] key;
        try {
            key = secret.bytes();
        } catch (StoreSecret.SecretNotReadyException e) {
            throw new Retry(e.getMessage(), e);
        }
        if (!StoreHandshake.matches(StoreHandshake.serverProof(key, hello, serverNonce), serverProof)) {
            throw new Retry("the store at " + host + ":" + port + " (" + theirs + ") could not prove this job's secret:"
                    + " it is not this job's store, or the ranks were given different secrets", null, true);
        }
        o.write(StoreHandshake.clientProof(key, hello, serverNonce));
        o.flush();
        if (i.readByte() != StoreHandshake.OK) {
            throw new Retry("denied by the store of " + theirs + ": " + i.readUTF(), null, true);
        }
    }

    /**
     * Asks the store at {@code host:port} who it is, without a secret: a HELLO claiming rank 0, which
     * every store refuses, naming its own run and generation. Returns null when nothing answers like a
     * symmem4j store within {@code timeout}. For rank 0's error when its port is taken.
     *
     * @param host the host to ask
     * @param port the port to ask
     * @param timeout how long to wait for an answer
     * @return the store's self-description, or null
     */
    public static String describeStoreAt(String host, int port, Duration timeout) {
        try (Socket s = new Socket()) {
            int ms = (int) Math.max(1, timeout.toMillis());
            s.connect(new InetSocketAddress(host, port), ms);
            s.setSoTimeout(ms);
            DataInputStream i = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            DataOutputStream o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            ProcessHandle self = ProcessHandle.current();
            new Hello(StoreHandshake.nonce(), "probe", 0, 1, 0, self.pid(), 0).write(o);
            o.flush();
            if (i.readInt() != StoreHandshake.MAGIC || i.readInt() != StoreHandshake.VERSION) {
                return "a process that is not a symmem4j store of this version";
            }
            i.readByte();
            return "the store of run '" + i.readUTF() + "' generation " + i.readLong() + " (world size " + i.readInt() + ")";
        } catch (IOException e) {
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
            case CLOSING, VERSION, RANK_OUT_OF_RANGE -> "";
        };
    }

    private SymmemException failure(String what, IOException e) {
        broken = what + " failed: " + e;
        if (e instanceof SocketTimeoutException) {
            return new SymmemException("rendezvous store " + host + ":" + port + " did not answer " + what + " within "
                    + responseTimeout + " beyond the requested wait (rank 0, which hosts the store, may be stopped or"
                    + " overloaded)", e);
        }
        return new SymmemException("rendezvous store " + host + ":" + port + ": " + what + " failed: " + e
                + " (rank 0, which hosts the store, may have exited)", e);
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
                    + limits.maxKeyBytes() + " (keys name set-up values; keep them short)");
        }
        if (value != null && value.length > limits.maxValueBytes()) {
            throw new IllegalArgumentException("rendezvous store value of " + value.length + " bytes for key " + key
                    + "; at most " + limits.maxValueBytes() + " (the store carries set-up handles, not data)");
        }
    }

    private void begin(byte op, Duration wait) throws IOException {
        if (broken != null) {
            throw new SymmemException("rendezvous store " + host + ":" + port + ": connection unusable since " + broken);
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
