package org.symmem4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import org.junit.jupiter.api.Test;

/**
 * A client connected to itself is recognised, and dropping it leaves the port free for the listener it was meant to
 * reach (the restarted job whose rank 0 could not bind its store for 60 s). The self-connection is made on purpose: a
 * socket bound to port P and connected to P meets itself on Linux every time.
 */
class SelfConnectionTest {

    private static final InetAddress LOOPBACK = InetAddress.getLoopbackAddress();

    @Test
    void aSocketConnectedToItselfIsRecognisedAndDiscardingItLeavesThePortFreeForTheStore() throws IOException {
        Socket self = selfConnected();
        int port = self.getLocalPort();
        assertTrue(SelfConnection.isSelfConnected(self), "bound to and connected to port " + port);
        assertTrue(SelfConnection.describe(self).contains("connected to itself"), SelfConnection.describe(self));
        SelfConnection.discard(self);
        assertTrue(self.isClosed());
        try (ServerSocket store = listener()) {
            store.bind(new InetSocketAddress(LOOPBACK, port)); // throws BindException if the port lingers in TIME_WAIT
        }
    }

    @Test
    void closedNormallyTheSelfConnectionHoldsThePortAgainstTheStore() throws IOException {
        // the hazard the discard avoids: without it rank 0 cannot bind its store port for TIME_WAIT's 60 s
        assumeTrue(System.getProperty("os.name").toLowerCase().contains("linux"), "TIME_WAIT's bind rule is Linux's");
        Socket self = selfConnected();
        int port = self.getLocalPort();
        self.close();
        try (ServerSocket store = listener()) {
            assertThrows(BindException.class, () -> store.bind(new InetSocketAddress(LOOPBACK, port)));
        }
    }

    @Test
    void aConnectionToAListenerIsNotSelfConnected() throws IOException {
        try (ServerSocket store = new ServerSocket(0, 1, LOOPBACK); Socket client = new Socket()) {
            client.connect(store.getLocalSocketAddress(), 5_000);
            try (Socket accepted = store.accept()) {
                assertFalse(SelfConnection.isSelfConnected(client));
                assertFalse(SelfConnection.isSelfConnected(accepted));
            }
        }
        try (Socket unconnected = new Socket()) {
            assertFalse(SelfConnection.isSelfConnected(unconnected));
        }
    }

    /** A socket connected to itself: bound to a port nothing listens on, then connected to that port. */
    private static Socket selfConnected() throws IOException {
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, LOOPBACK)) {
            port = probe.getLocalPort();
        }
        Socket s = new Socket();
        s.bind(new InetSocketAddress(LOOPBACK, port));
        try {
            s.connect(new InetSocketAddress(LOOPBACK, port), 5_000);
        } catch (IOException e) {
            s.close();
            assumeTrue(false, "this system does not let a socket connect to itself: " + e);
        }
        return s;
    }

    private static ServerSocket listener() throws IOException {
        ServerSocket s = new ServerSocket();
        s.setReuseAddress(true); // as TcpStoreServer binds
        return s;
    }
}
