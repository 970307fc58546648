package org.symmem4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.rendezvous.StoreHandshake.Hello;

/**
 * The store as an adversary and an unlucky operator see it: strangers without the secret, clients of
 * another job or another group, rank collisions, garbage, huge announced lengths, slow senders, a
 * listener that never answers, and a full store. Nothing gets in without the secret, nothing takes
 * the server down, and every refusal names both sides.
 */
class StoreSecurityTest {

    private static final byte[] SECRET = "the-right-secret-0123456789".getBytes(StandardCharsets.UTF_8);
    private static final JobIdentity JOB = new JobIdentity("job-a", 0, 4);

    private static TcpStoreServer server(JobIdentity id, StoreLimits limits) {
        return new TcpStoreServer("127.0.0.1", 0, id, SECRET, limits);
    }

    private static TcpStoreServer server() {
        return server(JOB, StoreLimits.defaults(4).withHandshakeTimeout(Duration.ofMillis(500))
                .withRequestTimeout(Duration.ofMillis(500)));
    }

    private static TcpStoreClient client(int port, JobIdentity id, int rank, byte[] secret, Duration connect) {
        return new TcpStoreClient("127.0.0.1", port, id, rank, StoreSecret.of(secret), connect, Duration.ofSeconds(2));
    }

    /** An authenticated client must still work afterwards: the server survived whatever came before. */
    private static void assertServes(TcpStoreServer server, int rank) {
        try (TcpStoreClient c = client(server.port(), JOB, rank, SECRET, Duration.ofSeconds(5))) {
            c.set("alive/" + rank, new byte[] {7});
            assertArrayEquals(new byte[] {7}, c.get("alive/" + rank, Duration.ofSeconds(1)));
        }
    }

    @Test
    void aClientWithoutTheSecretIsDeniedAndReadsNothing() {
        try (TcpStoreServer server = server()) {
            server.store().set("group/member/0", "123 456".getBytes(StandardCharsets.UTF_8));
            SymmemException e = assertThrows(SymmemException.class,
                    () -> client(server.port(), JOB, 1, "a-wrong-secret-0123456789".getBytes(StandardCharsets.UTF_8),
                            Duration.ofMillis(800)));
            assertTrue(e.getMessage().contains("could not prove this job's secret"), e.getMessage());
            assertTrue(e.getMessage().contains("job-a"), e.getMessage());
            assertServes(server, 1); // a denied attempt does not take the seat
        }
    }

    @Test
    void theStoreMustProveTheSecretBeforeTheRankSendsAnything() throws Exception {
        // A listener that answers like a store but cannot compute the proof (it has no secret).
        try (ServerSocket fake = new ServerSocket(0)) {
            CompletableFuture<Boolean> sawARequest = CompletableFuture.supplyAsync(() -> {
                try (Socket s = fake.accept()) {
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    in.readInt();
                    in.readInt();
                    Hello.readBody(in);
                    out.writeInt(StoreHandshake.MAGIC);
                    out.writeInt(StoreHandshake.VERSION);
                    out.writeByte(StoreHandshake.ACCEPT);
                    out.writeUTF(JOB.runId());
                    out.writeLong(JOB.generation());
                    out.writeInt(JOB.worldSize());
                    out.write(new byte[StoreHandshake.NONCE_BYTES]);
                    out.write(new byte[StoreHandshake.PROOF_BYTES]); // not the HMAC of the secret
                    out.flush();
                    s.setSoTimeout(2000);
                    return in.read() >= 0; // the client must not send its proof (or anything) now
                } catch (IOException e) {
                    return false;
                }
            });
            SymmemException e = assertThrows(SymmemException.class,
                    () -> client(fake.getLocalPort(), JOB, 1, SECRET, Duration.ofMillis(600)));
            assertTrue(e.getMessage().contains("could not prove this job's secret"), e.getMessage());
            assertFalse(sawARequest.get(10, TimeUnit.SECONDS), "the client answered a store that failed its proof");
        }
    }

    @Test
    void aRankOfAnotherRunIsRefusedNamingBothRuns() {
        try (TcpStoreServer server = server()) {
            JobIdentity other = new JobIdentity("job-b", 0, 4);
            SymmemException e = assertThrows(SymmemException.class,
                    () -> client(server.port(), other, 1, SECRET, Duration.ofMillis(600)));
            assertTrue(e.getMessage().contains("run 'job-b'"), e.getMessage());
            assertTrue(e.getMessage().contains("run 'job-a'"), e.getMessage());
            assertTrue(e.getMessage().contains("two jobs on one MASTER_PORT"), e.getMessage());
            assertServes(server, 1);
        }
    }

    @Test
    void aRankOfAnotherGenerationOrSizeIsRefused() {
        try (TcpStoreServer server = server()) {
            SymmemException later = assertThrows(SymmemException.class,
                    () -> client(server.port(), new JobIdentity("job-a", 1, 4), 1, SECRET, Duration.ofMillis(500)));
            assertTrue(later.getMessage().contains("generation 0") && later.getMessage().contains("generation 1"),
                    later.getMessage());
            SymmemException size = assertThrows(SymmemException.class,
                    () -> client(server.port(), new JobIdentity("job-a", 0, 8), 1, SECRET, Duration.ofMillis(500)));
            assertTrue(size.getMessage().contains("WORLD_SIZE=8"), size.getMessage());
        }
    }

    @Test
    void aTakenRankIsRefusedNamingItsHolder() {
        try (TcpStoreServer server = server();
             TcpStoreClient first = client(server.port(), JOB, 2, SECRET, Duration.ofSeconds(5))) {
            SymmemException e = assertThrows(SymmemException.class,
                    () -> client(server.port(), JOB, 2, SECRET, Duration.ofMillis(500)));
            assertTrue(e.getMessage().contains("rank 2 of run 'job-a' generation 0"), e.getMessage());
            assertTrue(e.getMessage().contains("already held by pid " + ProcessHandle.current().pid()), e.getMessage());
            SymmemException zero = assertThrows(SymmemException.class,
                    () -> client(server.port(), JOB, 0, SECRET, Duration.ofMillis(500)));
            assertTrue(zero.getMessage().contains("rank=0 outside [1, 4)"), zero.getMessage());
            first.set("k", new byte[] {1});
        }
    }

    @Test
    void theNextGroupsRankWaitsForThePreviousStoreToGo() throws Exception {
        TcpStoreServer previous = server();
        int port = previous.port();
        JobIdentity next = new JobIdentity("job-a", 1, 4);
        CompletableFuture<TcpStoreClient> joining = CompletableFuture.supplyAsync(
                () -> client(port, next, 1, SECRET, Duration.ofSeconds(20)));
        Thread.sleep(300);
        assertFalse(joining.isDone(), "generation 1 must not join generation 0's store");
        previous.close();
        try (TcpStoreServer current = new TcpStoreServer("127.0.0.1", port, next, SECRET, StoreLimits.defaults(4));
             TcpStoreClient c = joining.get(20, TimeUnit.SECONDS)) {
            c.set("x", new byte[] {1});
            assertEquals(1, current.store().tryGet("x").orElseThrow()[0]);
        }
    }

    @Test
    void garbageDropsOnlyItsOwnConnection() throws Exception {
        try (TcpStoreServer server = server()) {
            for (byte[] junk : List.of("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII),
                    new byte[] {0x53, 0x59, 0x4d, 0x53, 0, 0, 0, 2, 1, 2, 3}, new byte[4096])) {
                try (Socket s = new Socket("127.0.0.1", server.port())) {
                    s.getOutputStream().write(junk);
                    s.getOutputStream().flush();
                    s.setSoTimeout(5000);
                    drain(s.getInputStream()); // the server closes it
                }
            }
            assertServes(server, 1);
        }
    }

    @Test
    void slowAndStalledSendersAreDroppedAndHoldNothing() throws Exception {
        try (TcpStoreServer server = server()) {
            List<Socket> stalled = new ArrayList<>();
            try {
                for (int i = 0; i < 20; i++) {
                    Socket s = new Socket("127.0.0.1", server.port());
                    s.getOutputStream().write(new byte[] {0x53, 0x59}); // half a magic, then silence
                    s.getOutputStream().flush();
                    stalled.add(s);
                }
                assertServes(server, 1); // served while 20 stalled handshakes are open
                for (Socket s : stalled) {
                    s.setSoTimeout(10_000);
                    assertEquals(-1, drain(s.getInputStream()), "a stalled handshake must be closed by the server");
                }
            } finally {
                for (Socket s : stalled) {
                    s.close();
                }
            }
        }
    }

    @Test
    void announcedLengthsTakeNoMemoryAndBreakingLimitsDropsTheConnection() throws Exception {
        JobIdentity wide = new JobIdentity(JOB.runId(), 0, 48);
        try (TcpStoreServer server = server(wide, StoreLimits.defaults(48).withRequestTimeout(Duration.ofSeconds(2)));
             TcpStoreClient rank1 = client(server.port(), wide, 1, SECRET, Duration.ofSeconds(5))) {
            // 40 authenticated connections each announce a 4 MiB value and send nothing more.
            List<Socket> sockets = new ArrayList<>();
            try {
                for (int i = 0; i < 40; i++) {
                    Socket s = authenticatedSocket(server.port(), wide, 2 + i);
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    out.writeInt(StoreProtocol.MAGIC);
                    out.writeByte(StoreProtocol.SET);
                    out.writeUTF("big/" + i);
                    out.writeInt(4 << 20);
                    out.flush();
                    sockets.add(s);
                }
                rank1.set("ok", new byte[] {1}); // still served
                assertTrue(server.store().heldBytes() < 1 << 10, "nothing held for values that never arrived: "
                        + server.store().heldBytes());
                for (Socket s : sockets) {
                    s.setSoTimeout(10_000);
                    assertEquals(-1, drain(s.getInputStream()), "a request stalled mid-value must be dropped");
                }
            } finally {
                for (Socket s : sockets) {
                    s.close();
                }
            }
        }
        // A value longer than the limit is refused at its length, before any byte of it is taken.
        try (TcpStoreServer server = server()) {
            Socket s = authenticatedSocket(server.port(), JOB, 1);
            DataOutputStream out = new DataOutputStream(s.getOutputStream());
            out.writeInt(StoreProtocol.MAGIC);
            out.writeByte(StoreProtocol.SET);
            out.writeUTF("huge");
            out.writeInt(Integer.MAX_VALUE);
            out.flush();
            s.setSoTimeout(10_000);
            assertEquals(-1, drain(s.getInputStream()));
            s.close();
            assertEquals(0, server.store().heldBytes());
            assertServes(server, 2);
        }
    }

    @Test
    void aFullStoreRefusesWithAClearErrorAndStaysUsable() {
        try (TcpStoreServer server = server(JOB, StoreLimits.defaults(4).withMaxTotalBytes(100_000));
             TcpStoreClient c = client(server.port(), JOB, 1, SECRET, Duration.ofSeconds(5))) {
            c.set("a", new byte[60_000]);
            StoreCapacityException e = assertThrows(StoreCapacityException.class, () -> c.set("b", new byte[60_000]));
            assertTrue(e.getMessage().contains("capacity=100000"), e.getMessage());
            assertFalse(c.tryGet("b").isPresent());
            c.set("a", new byte[10]); // replacing frees what the old value held
            c.set("b", new byte[60_000]);
        }
    }

    @Test
    void oversizedKeysAndValuesAreRefusedBeforeTheyAreSent() {
        try (TcpStoreServer server = server();
             TcpStoreClient c = client(server.port(), JOB, 1, SECRET, Duration.ofSeconds(5))) {
            IllegalArgumentException key = assertThrows(IllegalArgumentException.class, () -> c.set("k".repeat(600), new byte[0]));
            assertTrue(key.getMessage().contains("key of 600 bytes; at most 512"), key.getMessage());
            IllegalArgumentException value = assertThrows(IllegalArgumentException.class, () -> c.set("v", new byte[5 << 20]));
            assertTrue(value.getMessage().contains("at most 4194304"), value.getMessage());
            c.set("still", new byte[] {1}); // the connection was never touched
            assertEquals(1, server.store().tryGet("still").orElseThrow()[0]);
        }
    }

    @Test
    void connectionsBeyondTheLimitAreClosedAtOnce() throws Exception {
        try (TcpStoreServer server = server(JOB, StoreLimits.defaults(4).withMaxConnections(4, 2)
                .withHandshakeTimeout(Duration.ofSeconds(30)))) {
            List<Socket> idle = new ArrayList<>();
            try {
                for (int i = 0; i < 6; i++) {
                    idle.add(new Socket("127.0.0.1", server.port()));
                }
                int closedAtOnce = 0;
                for (Socket s : idle) {
                    s.setSoTimeout(2000);
                    try {
                        if (s.getInputStream().read() == -1) {
                            closedAtOnce++;
                        }
                    } catch (java.net.SocketTimeoutException stillOpen) {
                        // one of the two the server keeps
                    }
                }
                assertEquals(4, closedAtOnce, "only maxUnauthenticated=2 unauthenticated connections are kept");
                assertTrue(server.refusedConnections() >= 4);
            } finally {
                for (Socket s : idle) {
                    s.close();
                }
            }
        }
    }

    @Test
    void aListenerThatNeverAnswersFailsTheJoinAtItsDeadline() throws Exception {
        try (ServerSocket silent = new ServerSocket(0)) {
            List<Socket> held = new ArrayList<>();
            Thread acceptor = Thread.ofVirtual().start(() -> {
                try {
                    while (true) {
                        held.add(silent.accept());
                    }
                } catch (IOException closed) {
                    // test over
                }
            });
            SymmemException e = assertThrows(SymmemException.class,
                    () -> client(silent.getLocalPort(), JOB, 1, SECRET, Duration.ofMillis(1500)));
            assertTrue(e.getMessage().contains("did not answer the symmem4j handshake"), e.getMessage());
            silent.close();
            acceptor.join(5000);
            for (Socket s : held) {
                s.close();
            }
        }
    }

    @Test
    void aStoreThatStopsAnsweringFailsTheCallWithinTheResponseTimeout() throws Exception {
        // A store that completes the handshake and then never answers a request (rank 0 stopped).
        try (ServerSocket fake = new ServerSocket(0)) {
            Thread server = Thread.ofVirtual().start(() -> {
                try (Socket s = fake.accept()) {
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    in.readInt();
                    in.readInt();
                    Hello hello = Hello.readBody(in);
                    byte[] nonce = StoreHandshake.nonce();
                    out.writeInt(StoreHandshake.MAGIC);
                    out.writeInt(StoreHandshake.VERSION);
                    out.writeByte(StoreHandshake.ACCEPT);
                    out.writeUTF(JOB.runId());
                    out.writeLong(JOB.generation());
                    out.writeInt(JOB.worldSize());
                    out.write(nonce);
                    out.write(StoreHandshake.serverProof(SECRET, hello, nonce));
                    out.flush();
                    in.readNBytes(StoreHandshake.PROOF_BYTES);
                    out.writeByte(StoreHandshake.OK);
                    out.flush();
                    drain(in); // reads requests, answers none
                } catch (IOException e) {
                    // client gave up
                }
            });
            try (TcpStoreClient c = new TcpStoreClient("127.0.0.1", fake.getLocalPort(), JOB, 1, StoreSecret.of(SECRET),
                    Duration.ofSeconds(5), Duration.ofMillis(300))) {
                SymmemException e = assertThrows(SymmemException.class, () -> c.add("group/closed", 1));
                assertTrue(e.getMessage().contains("did not answer add(group/closed)"), e.getMessage());
                SymmemException after = assertThrows(SymmemException.class, () -> c.set("k", new byte[0]));
                assertTrue(after.getMessage().contains("connection unusable"), after.getMessage());
            }
            server.join(5000);
        }
    }

    /** A connection that completed the handshake as {@code rank}, for sending raw requests. */
    private static Socket authenticatedSocket(int port, JobIdentity job, int rank) throws IOException {
        Socket s = new Socket("127.0.0.1", port);
        DataOutputStream out = new DataOutputStream(s.getOutputStream());
        DataInputStream in = new DataInputStream(s.getInputStream());
        Hello hello = new Hello(StoreHandshake.nonce(), job.runId(), job.generation(), job.worldSize(), rank,
                ProcessHandle.current().pid(), 0);
        hello.write(out);
        out.flush();
        assertEquals(StoreHandshake.MAGIC, in.readInt());
        assertEquals(StoreHandshake.VERSION, in.readInt());
        assertEquals(StoreHandshake.ACCEPT, in.readByte());
        in.readUTF();
        in.readLong();
        in.readInt();
        byte[] nonce = in.readNBytes(StoreHandshake.NONCE_BYTES);
        in.readNBytes(StoreHandshake.PROOF_BYTES);
        out.write(StoreHandshake.clientProof(SECRET, hello, nonce));
        out.flush();
        assertEquals(StoreHandshake.OK, in.readByte());
        return s;
    }

    /** Reads until the peer closes; returns -1 then (a timeout throws). */
    private static int drain(InputStream in) throws IOException {
        byte[] buf = new byte[8192];
        while (in.read(buf) >= 0) {
            // discard
        }
        return -1;
    }

}
