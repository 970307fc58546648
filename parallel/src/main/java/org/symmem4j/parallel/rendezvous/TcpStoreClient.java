package org.symmem4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * A rank's connection to the {@link TcpStoreServer} of rank 0. Requests are serialized on one
 * socket (set-up traffic is tiny). Connecting retries until {@code connectTimeout}, because ranks
 * start in any order and rank 0 may not be listening yet.
 */
public final class TcpStoreClient implements RendezvousStore {

    /** Slack added to a blocking request's socket read timeout beyond the server-side wait. */
    private static final int READ_SLACK_MS = 10_000;

    private final String host;
    private final int port;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;

    public TcpStoreClient(String host, int port, Duration connectTimeout) {
        this.host = host;
        this.port = port;
        this.socket = connect(host, port, connectTimeout);
        try {
            this.in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
            this.out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
        } catch (IOException e) {
            throw failure("open streams", e);
        }
    }

    private static Socket connect(String host, int port, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        // Parks between attempts (no spinning): a refused connect costs a syscall round trip.
        IdleStrategy idle = new BackoffIdleStrategy(0, 0, 1_000_000, 100_000_000);
        IOException last = null;
        while (System.nanoTime() < deadline) {
            Socket s = new Socket();
            try {
                s.setTcpNoDelay(true);
                s.connect(new InetSocketAddress(host, port), (int) Math.max(1, Math.min(timeout.toMillis(), 5_000)));
                return s;
            } catch (IOException e) {
                last = e;
                try {
                    s.close();
                } catch (IOException ignored) {
                    // retrying
                }
                idle.idle();
            }
        }
        throw new SymmemException("rendezvous store: could not connect to MASTER_ADDR:MASTER_PORT=" + host + ":" + port
                + " within timeout=" + timeout + " (last error: " + last + "); rank 0 hosts the store:"
                + " check that it started and that MASTER_ADDR/MASTER_PORT match on every rank", last);
    }

    private SymmemException failure(String what, IOException e) {
        return new SymmemException("rendezvous store " + host + ":" + port + ": " + what + " failed: " + e
                + " (rank 0, which hosts the store, may have exited)", e);
    }

    private void header(byte op) throws IOException {
        out.writeInt(StoreProtocol.MAGIC);
        out.writeByte(op);
    }

    private byte status() throws IOException {
        byte st = in.readByte();
        if (st == StoreProtocol.ERROR) {
            throw new IOException("server reported an error");
        }
        return st;
    }

    @Override
    public synchronized void set(String key, byte[] value) {
        try {
            header(StoreProtocol.SET);
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
            header(StoreProtocol.TRY_GET);
            out.writeUTF(key);
            out.flush();
            return status() == StoreProtocol.OK ? Optional.of(StoreProtocol.readBytes(in)) : Optional.empty();
        } catch (IOException e) {
            throw failure("tryGet(" + key + ")", e);
        }
    }

    @Override
    public synchronized List<byte[]> getAll(List<String> keys, Duration timeout) {
        try {
            socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, timeout.toMillis() + READ_SLACK_MS));
            header(StoreProtocol.GET_ALL);
            StoreProtocol.writeKeys(out, keys);
            out.writeLong(timeout.toMillis());
            out.flush();
            if (status() == StoreProtocol.TIMEOUT) {
                throw new StoreTimeoutException(StoreProtocol.readKeys(in), timeout);
            }
            List<byte[]> values = new ArrayList<>(keys.size());
            for (int i = 0; i < keys.size(); i++) {
                values.add(StoreProtocol.readBytes(in));
            }
            return values;
        } catch (IOException e) {
            throw failure("getAll(" + keys + ")", e);
        } finally {
            try {
                socket.setSoTimeout(0);
            } catch (IOException ignored) {
                // socket already broken; the next call reports it
            }
        }
    }

    @Override
    public synchronized long add(String key, long delta) {
        try {
            header(StoreProtocol.ADD);
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
            header(StoreProtocol.DELETE);
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
