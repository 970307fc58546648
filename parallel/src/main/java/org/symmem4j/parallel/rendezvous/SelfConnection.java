package org.symmem4j.parallel.rendezvous;

import java.io.IOException;
import java.net.Socket;

/**
 * TCP's self-connection, and how a retrying client gets out of one without blocking the port it wanted.
 *
 * <p>A client that connects to a port of its own machine on which nothing listens yet can be handed that very port as
 * its own ephemeral port by the kernel. Its SYN then meets itself (TCP's simultaneous open) and the socket is
 * <em>connected to itself</em>: the connect succeeds although no server exists. Linux hands {@code connect()} ports
 * of one parity and {@code bind(0)} ports of the other, so a port chosen as "a free port plus one" (the launcher's
 * next generation's store port) is exactly of the kind a connect may be given: on this project's 2-core VM, 6 to 9
 * of 2,000 loops of 60 refused connects to such a port connected to themselves, and none to a port chosen by
 * {@code bind(0)} itself (2026-11-30).
 *
 * <pre>
 *   client: connect(127.0.0.1:P)     kernel picks local port P    SYN P→P meets itself: ESTABLISHED P↔P
 *   normal close()                    → TIME_WAIT on P for 60 s (no SO_REUSEADDR on the client socket)
 *   rank 0: bind(P) with SO_REUSEADDR → EADDRINUSE for those 60 s: the store never starts, every rank waits out
 *                                       its timeout with "connection refused"
 *   discard(): SO_LINGER 0, close()   → RST, no TIME_WAIT: P is free at once
 * </pre>
 *
 * <p>That was a restarted job's false failure (its rank 1 retrying while rank 0's JVM started): so every client that
 * retries a connect to a port that may not listen yet checks {@link #isSelfConnected} right after the connect and
 * {@link #discard}s such a socket before retrying.
 */
public final class SelfConnection {

    private SelfConnection() {
    }

    /** Whether {@code socket} is connected to itself (same address and port at both ends). */
    public static boolean isSelfConnected(Socket socket) {
        return socket.isConnected() && socket.getLocalPort() == socket.getPort()
                && socket.getLocalAddress().equals(socket.getInetAddress());
    }

    /**
     * Closes {@code socket} abortively (SO_LINGER 0: a reset, no TIME_WAIT), so that its port is free for the listener
     * it was meant to reach at once, not 60 s later.
     */
    public static void discard(Socket socket) {
        try {
            socket.setSoLinger(true, 0);
        } catch (IOException e) {
            // closed already: nothing lingers
        }
        try {
            socket.close();
        } catch (IOException e) {
            // closing anyway
        }
    }

    /** What a client says of an attempt that connected to itself: for its retry message. */
    public static String describe(Socket socket) {
        return "connected to itself (" + socket.getLocalAddress().getHostAddress() + ":" + socket.getLocalPort()
                + ": nothing listened there yet and the system gave this client that port; dropped with a reset so the"
                + " port stays free for its listener)";
    }
}
