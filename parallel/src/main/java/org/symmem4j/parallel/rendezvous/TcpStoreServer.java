package org.symmem4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The rendezvous store that rank 0 hosts for a cross-process group, at
 * {@code MASTER_ADDR:MASTER_PORT}. One virtual thread per connection; the map is an
 * {@link InMemoryStore}, so blocking {@code GET_ALL}s simply wait on its condition.
 *
 * <p>The store carries set-up handles only and has no authentication: bind it to loopback or to a
 * private network (tests always use loopback).
 */
public final class TcpStoreServer implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger(TcpStoreServer.class.getName());

    private final InMemoryStore store = new InMemoryStore();
    private final ServerSocket serverSocket;
    private final Thread acceptor;
    private final Set<Socket> connections = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    /**
     * Binds and starts serving.
     *
     * @param port 0 picks a free port (see {@link #port()})
     */
    public TcpStoreServer(String host, int port) {
        try {
            serverSocket = new ServerSocket();
            serverSocket.setReuseAddress(true);
            serverSocket.bind(new InetSocketAddress(host, port), 128);
        } catch (IOException e) {
            throw new org.symmem4j.parallel.SymmemException("rendezvous store: cannot listen on " + host + ":" + port
                    + " (" + e.getMessage() + "); pick a free MASTER_PORT or stop the process holding it", e);
        }
        acceptor = Thread.ofPlatform().daemon().name("symmem4j-store-" + port()).start(this::acceptLoop);
    }

    public int port() {
        return serverSocket.getLocalPort();
    }

    /** The map behind the server; rank 0 uses it directly instead of a loopback connection. */
    public InMemoryStore store() {
        return store;
    }

    private void acceptLoop() {
        while (!closed) {
            try {
                Socket s = serverSocket.accept();
                s.setTcpNoDelay(true);
                connections.add(s);
                Thread.ofVirtual().name("symmem4j-store-conn").start(() -> serve(s));
            } catch (IOException e) {
                if (!closed) {
                    LOG.log(System.Logger.Level.WARNING, "rendezvous store: accept failed: " + e);
                }
            }
        }
    }

    private void serve(Socket s) {
        try (s;
             DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
             DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()))) {
            while (!closed) {
                int magic;
                try {
                    magic = in.readInt();
                } catch (EOFException eof) {
                    return; // client closed its connection
                }
                if (magic != StoreProtocol.MAGIC) {
                    throw new IOException("rendezvous protocol: bad magic 0x" + Integer.toHexString(magic)
                            + " expected 0x" + Integer.toHexString(StoreProtocol.MAGIC)
                            + " (is something other than a symmem4j rank connecting to MASTER_PORT?)");
                }
                handle(in.readByte(), in, out);
                out.flush();
            }
        } catch (SocketException e) {
            // connection reset or server closing: nothing to report
        } catch (IOException | RuntimeException e) {
            if (!closed) {
                LOG.log(System.Logger.Level.WARNING, "rendezvous store: dropping connection: " + e);
            }
        } finally {
            connections.remove(s);
        }
    }

    private void handle(byte op, DataInputStream in, DataOutputStream out) throws IOException {
        switch (op) {
            case StoreProtocol.SET -> {
                String key = in.readUTF();
                store.set(key, StoreProtocol.readBytes(in));
                out.writeByte(StoreProtocol.OK);
            }
            case StoreProtocol.GET_ALL -> {
                List<String> keys = StoreProtocol.readKeys(in);
                long timeoutMs = in.readLong();
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
                Optional<byte[]> v = store.tryGet(in.readUTF());
                if (v.isPresent()) {
                    out.writeByte(StoreProtocol.OK);
                    StoreProtocol.writeBytes(out, v.get());
                } else {
                    out.writeByte(StoreProtocol.ABSENT);
                }
            }
            case StoreProtocol.ADD -> {
                String key = in.readUTF();
                long v = store.add(key, in.readLong());
                out.writeByte(StoreProtocol.OK);
                out.writeLong(v);
            }
            case StoreProtocol.DELETE -> {
                boolean had = store.delete(in.readUTF());
                out.writeByte(StoreProtocol.OK);
                out.writeBoolean(had);
            }
            default -> throw new IOException("rendezvous protocol: unknown op=" + op + " expected 1..5");
        }
    }

    @Override
    public void close() {
        closed = true;
        try {
            serverSocket.close();
        } catch (IOException ignored) {
            // closing anyway
        }
        for (Socket s : connections) {
            try {
                s.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }
        try {
            acceptor.join(1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
