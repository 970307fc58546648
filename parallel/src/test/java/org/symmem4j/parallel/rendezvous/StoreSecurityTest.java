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
    void theDefaultStrangerCapIsAQuarterOfTheOpenFileLimitReadWithoutJdkManagement() {
        // the same limit as the JDK's own MXBean reports (the test's JDK has jdk.management; a jlinked runtime may not)
        long soft = ((com.sun.management.UnixOperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getMaxFileDescriptorCount();
        assertEquals(soft, StoreLimits.openFileLimit());
        assertEquals((int) Math.max(64, Math.min(4096, soft / 4)), StoreLimits.defaultMaxUnauthenticated());
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
            CompletableFuture<Integer> afterHello = CompletableFuture.supplyAsync(() -> {
                try (Socket s = fake.accept()) {
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    in.readInt();
                    in.readInt();
                    in.readNBytes(StoreHandshake.NONCE_BYTES);
                    out.writeInt(StoreHandshake.MAGIC);
                    out.writeInt(StoreHandshake.VERSION);
                    out.write(new byte[StoreHandshake.NONCE_BYTES]);
                    out.write(new byte[StoreHandshake.PROOF_BYTES]); // not the HMAC of the secret
                    out.flush();
                    s.setSoTimeout(2000);
                    return in.readAllBytes().length; // the client must not say who it is (or anything) now
                } catch (IOException e) {
                    return -1;
                }
            });
            SymmemException e = assertThrows(SymmemException.class,
                    () -> client(fake.getLocalPort(), JOB, 1, SECRET, Duration.ofMillis(600)));
            assertTrue(e.getMessage().contains("could not prove this job's secret"), e.getMessage());
            assertEquals(0, afterHello.get(10, TimeUnit.SECONDS), "bytes the client sent a store that failed its proof");
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
            // a real rank (it holds the secret) started with the wrong WORLD_SIZE hears both values and the fix
            SymmemException size = assertThrows(SymmemException.class,
                    () -> client(server.port(), new JobIdentity("job-a", 0, 8), 1, SECRET, Duration.ofMillis(500)));
            assertTrue(size.getMessage().contains("this store serves a group of 4 ranks; the client was started with"
                    + " WORLD_SIZE=8"), size.getMessage());
            assertTrue(size.getMessage().contains("(start every rank with the same WORLD_SIZE)"), size.getMessage());
            assertTrue(size.getMessage().contains("refused by the store of run 'job-a' generation 0 (world size 4)"),
                    size.getMessage());
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
        // 2 s: the 40 stalled requests must still be held when heldBytes is read (creating them takes over 1 s on a
        // loaded 2-core machine; a shorter requestTimeout would drop the first before the check, which then could not fail)
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
    void theOldestUnauthenticatedConnectionsMakeRoomForNewOnes() throws Exception {
        try (TcpStoreServer server = server(JOB, StoreLimits.defaults(4).withMaxConnections(4, 2)
                .withHandshakeTimeout(Duration.ofSeconds(30)))) {
            List<Socket> idle = new ArrayList<>();
            try {
                for (int i = 0; i < 6; i++) {
                    idle.add(new Socket("127.0.0.1", server.port()));
                    awaitEvictions(server, Math.max(0, i - 1)); // accepted in order: the i-th evicts the (i-2)-th
                }
                for (int i = 0; i < 6; i++) {
                    Socket s = idle.get(i);
                    s.setSoTimeout(i < 4 ? 10_000 : 300);
                    if (i < 4) {
                        assertEquals(-1, drain(s.getInputStream()), "connection " + i + " (among the oldest) must be closed");
                    } else {
                        assertThrows(java.net.SocketTimeoutException.class, () -> s.getInputStream().read(),
                                "connection " + i + " (among the newest) must still be open");
                    }
                }
                assertEquals(4, server.evictedConnections());
                assertEquals(0, server.refusedConnections());
                // a rank still gets in (evicting one more), and another, though only 2 unauthenticated are held
                try (TcpStoreClient r1 = client(server.port(), JOB, 1, SECRET, Duration.ofSeconds(10));
                     TcpStoreClient r2 = client(server.port(), JOB, 2, SECRET, Duration.ofSeconds(10))) {
                    r1.set("in", new byte[] {1});
                    assertArrayEquals(new byte[] {1}, r2.get("in", Duration.ofSeconds(5)));
                    assertEquals(5, server.evictedConnections(), "r1 evicted the 5th; r2 found room");
                    // every open connection authenticated, maxConnections=4: 2 more unauthenticated fit, then none
                    for (int i = 0; i < 3; i++) {
                        idle.add(new Socket("127.0.0.1", server.port()));
                    }
                    awaitEvictions(server, 7);
                }
            } finally {
                for (Socket s : idle) {
                    s.close();
                }
            }
        }
        try (TcpStoreServer server = server(JOB, StoreLimits.defaults(4).withMaxConnections(2, 2)
                .withHandshakeTimeout(Duration.ofSeconds(30)));
             TcpStoreClient r1 = client(server.port(), JOB, 1, SECRET, Duration.ofSeconds(10));
             TcpStoreClient r2 = client(server.port(), JOB, 2, SECRET, Duration.ofSeconds(10));
             Socket third = new Socket("127.0.0.1", server.port())) {
            third.setSoTimeout(10_000);
            assertEquals(-1, drain(third.getInputStream()), "2 authenticated of maxConnections=2: nothing to evict");
            assertEquals(1, server.refusedConnections());
            r1.set("still", new byte[] {2});
        }
    }

    private static void awaitEvictions(TcpStoreServer server, long n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (server.evictedConnections() < n && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        assertEquals(n, server.evictedConnections());
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
                    () -> client(silent.getLocalPort(), JOB, 1, SECRET, Duration.ofMillis(500))); // no answer comes
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
                    byte[] clientNonce = in.readNBytes(StoreHandshake.NONCE_BYTES);
                    byte[] nonce = StoreHandshake.nonce();
                    out.writeInt(StoreHandshake.MAGIC);
                    out.writeInt(StoreHandshake.VERSION);
                    out.write(nonce);
                    out.write(StoreHandshake.serverProof(SECRET, clientNonce, nonce));
                    out.flush();
                    StoreHandshake.Claim.read(in);
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

    /**
     * Everything a client without the secret can make the store say, whatever it claims: the bytes it
     * receives hold no run id, generation, world size or seat holder's pid, and they are the same
     * for every claim (magic, version, a nonce, a proof over the nonces alone, a fixed denial).
     */
    @Test
    void aStrangerLearnsNothingAboutTheRunWhateverItClaims() throws Exception {
        String runId = "run-only-its-ranks-know";
        long generation = 987_654_321L;
        int worldSize = 13;
        long holderPid = 3_141_592L;
        JobIdentity job = new JobIdentity(runId, generation, worldSize);
        byte[] wrongKey = "a-key-the-stranger-guessed-000".getBytes(StandardCharsets.UTF_8);
        try (TcpStoreServer server = server(job, StoreLimits.defaults(worldSize).withHandshakeTimeout(Duration.ofMillis(800)));
             Socket holder = authenticatedSocket(server.port(), job, 5, holderPid)) {
            record Stranger(String what, String runId, long generation, int worldSize, int rank) {
            }
            List<Stranger> strangers = List.of(
                    new Stranger("this run, a free seat", runId, generation, worldSize, 2),
                    new Stranger("another run (OTHER_RUN)", "another-run", generation, worldSize, 2),
                    new Stranger("another generation (OTHER_GENERATION)", runId, generation + 1, worldSize, 2),
                    new Stranger("another world size (WORLD_SIZE)", runId, generation, 8, 2),
                    new Stranger("rank 0 (RANK_OUT_OF_RANGE)", runId, generation, worldSize, 0),
                    new Stranger("rank 99 (RANK_OUT_OF_RANGE)", runId, generation, worldSize, 99),
                    new Stranger("a held seat (SEAT_TAKEN)", runId, generation, worldSize, 5));
            byte[] deniedTail = deniedTail();
            for (Stranger st : strangers) {
                try (Socket s = new Socket("127.0.0.1", server.port())) {
                    s.setSoTimeout(10_000);
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    byte[] clientNonce = StoreHandshake.nonce();
                    StoreHandshake.writeHello(out, clientNonce);
                    out.flush();
                    byte[] challenge = in.readNBytes(8 + StoreHandshake.NONCE_BYTES + StoreHandshake.PROOF_BYTES);
                    byte[] serverNonce = java.util.Arrays.copyOfRange(challenge, 8, 8 + StoreHandshake.NONCE_BYTES);
                    StoreHandshake.Claim claim = new StoreHandshake.Claim(st.runId(), st.generation(), st.worldSize(),
                            st.rank(), 4242, 0);
                    claim.write(out);
                    out.write(StoreHandshake.clientProof(wrongKey, clientNonce, serverNonce, claim));
                    out.flush();
                    byte[] rest = in.readAllBytes(); // until the server closes
                    byte[] all = concat(challenge, rest);
                    assertNothingAbout(all, st.what(), runId, generation, worldSize, holderPid);
                    // the challenge: magic, version, nonce, and a proof that is a function of the two nonces only
                    DataInputStream c = new DataInputStream(new java.io.ByteArrayInputStream(challenge));
                    assertEquals(StoreHandshake.MAGIC, c.readInt(), st.what());
                    assertEquals(StoreHandshake.VERSION, c.readInt(), st.what());
                    assertArrayEquals(StoreHandshake.serverProof(SECRET, clientNonce, serverNonce),
                            java.util.Arrays.copyOfRange(challenge, 8 + StoreHandshake.NONCE_BYTES, challenge.length), st.what());
                    assertArrayEquals(deniedTail, rest, st.what() + ": the denial must be the same fixed bytes for every claim");
                }
            }
            // Half a handshake, another protocol version, or garbage: nothing about the run either.
            List<byte[]> partials = List.of(helloBytes(), oldVersionHello(runId, generation, worldSize),
                    "GET / HTTP/1.1\r\n\r\n".getBytes(StandardCharsets.US_ASCII), new byte[0]);
            // all sent first, then read: the handshake timeouts of those the server waits out run at once, not in turn
            List<Socket> sockets = new ArrayList<>();
            try {
                for (byte[] sent : partials) {
                    Socket s = new Socket("127.0.0.1", server.port());
                    sockets.add(s);
                    s.setSoTimeout(10_000);
                    s.getOutputStream().write(sent);
                    s.getOutputStream().flush();
                }
                for (int i = 0; i < partials.size(); i++) {
                    int sent = partials.get(i).length;
                    byte[] all = sockets.get(i).getInputStream().readAllBytes(); // closed by the server by 800 ms
                    assertNothingAbout(all, "after sending " + sent + " bytes", runId, generation, worldSize, holderPid);
                    assertTrue(all.length == 0 || all.length == 8 || all.length == 72, "got " + all.length + " bytes");
                }
            } finally {
                for (Socket s : sockets) {
                    s.close();
                }
            }
            // the holder's seat is untouched, and a rank with the secret still gets in
            try (TcpStoreClient r1 = client(server.port(), job, 1, SECRET, Duration.ofSeconds(5))) {
                r1.set("k", new byte[] {1});
            }
            assertEquals(holderPid, server.seatHolder(5)[0]);
        }
    }

    private static byte[] deniedTail() throws IOException {
        java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
        DataOutputStream d = new DataOutputStream(b);
        d.writeByte(StoreHandshake.DENIED);
        d.writeUTF(StoreHandshake.DENIED_TEXT);
        return b.toByteArray();
    }

    private static byte[] helloBytes() throws IOException {
        java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
        StoreHandshake.writeHello(new DataOutputStream(b), StoreHandshake.nonce());
        return b.toByteArray();
    }

    /** A HELLO of protocol version 2, which carried the claim before any proof. */
    private static byte[] oldVersionHello(String runId, long generation, int worldSize) throws IOException {
        java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
        DataOutputStream d = new DataOutputStream(b);
        d.writeInt(StoreHandshake.MAGIC);
        d.writeInt(2);
        d.write(new byte[32]);
        d.writeUTF(runId);
        d.writeLong(generation);
        d.writeInt(worldSize);
        d.writeInt(1);
        d.writeLong(4242);
        d.writeLong(0);
        return b.toByteArray();
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] r = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, r, a.length, b.length);
        return r;
    }

    /** The run id, generation, world size and holder pid appear in {@code got} neither as text nor in binary. */
    private static void assertNothingAbout(byte[] got, String what, String runId, long generation, int worldSize,
                                           long pid) throws IOException {
        String text = new String(got, StandardCharsets.ISO_8859_1);
        for (String secret : List.of(runId, Long.toString(generation), Long.toString(pid), "world size", "WORLD_SIZE",
                "generation", "pid")) {
            assertFalse(text.contains(secret), what + ": the stranger received '" + secret + "'");
        }
        java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
        new DataOutputStream(b).writeLong(generation);
        new DataOutputStream(b).writeLong(pid);
        byte[] bin = b.toByteArray();
        assertFalse(indexOf(got, java.util.Arrays.copyOfRange(bin, 0, 8)) >= 0, what + ": generation in binary");
        assertFalse(indexOf(got, java.util.Arrays.copyOfRange(bin, 8, 16)) >= 0, what + ": pid in binary");
        // a 4-byte world size could match random nonce bytes by chance; check the non-random part instead
        int randomEnd = Math.min(got.length, 8 + StoreHandshake.NONCE_BYTES + StoreHandshake.PROOF_BYTES);
        byte[] fixedPart = java.util.Arrays.copyOfRange(got, randomEnd, got.length);
        assertFalse(indexOf(fixedPart, new byte[] {0, 0, 0, (byte) worldSize}) >= 0, what + ": world size in binary");
        assertFalse(new String(fixedPart, StandardCharsets.ISO_8859_1).contains(Integer.toString(worldSize)),
                what + ": world size as text");
    }

    private static int indexOf(byte[] hay, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= hay.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }

    /** Opens {@code n} connections that each send half a HELLO and then nothing. */
    private static List<Socket> holdHalfSentHandshakes(int port, int n) throws IOException {
        List<Socket> held = new ArrayList<>();
        byte[] half = java.util.Arrays.copyOf(helloBytes(), 20);
        for (int i = 0; i < n; i++) {
            Socket s = new Socket("127.0.0.1", port);
            s.getOutputStream().write(half);
            s.getOutputStream().flush();
            held.add(s);
        }
        return held;
    }

    /** Ranks 1..worldSize-1 join at once and exchange a key each; returns when all did. */
    private static void formJob(TcpStoreServer server, JobIdentity job, Duration connect) throws Exception {
        List<CompletableFuture<Void>> ranks = new ArrayList<>();
        for (int r = 1; r < job.worldSize(); r++) {
            int rank = r;
            ranks.add(CompletableFuture.runAsync(() -> {
                try (TcpStoreClient c = client(server.port(), job, rank, SECRET, connect)) {
                    c.set("member/" + rank, new byte[] {(byte) rank});
                    for (int o = 1; o < job.worldSize(); o++) {
                        assertEquals(o, c.get("member/" + o, Duration.ofSeconds(30))[0]);
                    }
                }
            }, runnable -> Thread.ofVirtual().start(runnable)));
        }
        for (CompletableFuture<Void> f : ranks) {
            f.get(60, TimeUnit.SECONDS);
        }
    }

    @Test
    @org.junit.jupiter.api.Timeout(120)
    void aJobFormsWhileStrangersHoldManyHalfSentHandshakes() throws Exception {
        JobIdentity job = new JobIdentity("crowded", 0, 4);
        // strangers' connections would be held for 60 s; the ranks give up after 20 s
        try (TcpStoreServer server = server(job, StoreLimits.defaults(4).withHandshakeTimeout(Duration.ofSeconds(60)))) {
            List<Socket> held = holdHalfSentHandshakes(server.port(), 256);
            try {
                formJob(server, job, Duration.ofSeconds(20));
                assertEquals(0, server.refusedConnections());
            } finally {
                for (Socket s : held) {
                    s.close();
                }
            }
        }
    }

    @Test
    @org.junit.jupiter.api.Timeout(120)
    void aJobFormsWhileStrangersBeyondTheLimitReconnectWheneverEvicted() throws Exception {
        JobIdentity job = new JobIdentity("crowded", 0, 4);
        int cap = 64;
        int strangers = 256; // more than the cap, each reopened as soon as it is evicted: evictions never stop
        try (TcpStoreServer server = server(job, StoreLimits.defaults(4).withMaxConnections(cap + 8, cap)
                .withHandshakeTimeout(Duration.ofSeconds(60)))) {
            java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            List<Thread> adversary = new ArrayList<>();
            byte[] half = java.util.Arrays.copyOf(helloBytes(), 20);
            for (int t = 0; t < strangers; t++) {
                adversary.add(Thread.ofVirtual().start(() -> {
                    while (!stop.get()) {
                        try (Socket s = new Socket("127.0.0.1", server.port())) {
                            s.getOutputStream().write(half);
                            s.setSoTimeout(30_000);
                            s.getInputStream().read(); // until evicted
                        } catch (IOException e) {
                            // refused or reset: again
                        }
                    }
                }));
            }
            try {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (server.unauthenticatedConnections() < cap && System.nanoTime() < until) {
                    Thread.sleep(5);
                }
                formJob(server, job, Duration.ofSeconds(30));
                assertTrue(server.evictedConnections() >= strangers - cap, "the strangers beyond the cap were evicted"
                        + " and came back: evicted=" + server.evictedConnections());
                assertTrue(server.unauthenticatedConnections() <= cap, "held=" + server.unauthenticatedConnections());
            } finally {
                stop.set(true);
                server.close(); // ends the adversary's reads
                for (Thread t : adversary) {
                    t.join(10_000);
                }
            }
        }
    }

    @Test
    void aHandshakeTrickledAByteAtATimeIsDroppedAtItsDeadline() throws Exception {
        try (TcpStoreServer server = server()) { // handshakeTimeout 500 ms, for the whole handshake
            byte[] hello = helloBytes();
            try (Socket s = new Socket("127.0.0.1", server.port())) {
                s.setSoTimeout(200);
                int sent = 0;
                boolean closed = false;
                // one byte every 200 ms: each read is short of a per-read timeout, the whole far past the deadline
                while (sent < hello.length && !closed) {
                    try {
                        s.getOutputStream().write(hello[sent++]);
                        s.getOutputStream().flush();
                        closed = s.getInputStream().read() == -1;
                    } catch (java.net.SocketTimeoutException quiet) {
                        // not closed yet
                    } catch (IOException reset) {
                        closed = true;
                    }
                }
                assertTrue(closed, "a handshake trickled over " + hello.length * 200 + " ms outlived handshakeTimeout=500ms");
                assertTrue(sent < hello.length, "closed only after the whole HELLO: sent=" + sent);
            }
            assertServes(server, 1);
        }
    }

    @Test
    void aRankWhoseStoreIsAnotherJobsNamesThatJobOnlyIfThisUserHoldsItsSecret(@org.junit.jupiter.api.io.TempDir
                                                                                  java.nio.file.Path tmp) {
        String saved = System.getProperty("symmem4j.secret.dir");
        System.setProperty("symmem4j.secret.dir", tmp.resolve("secrets").toString());
        try (TcpStoreServer server = server(JOB, StoreLimits.defaults(4))) {
            JobIdentity other = new JobIdentity("job-b", 0, 4);
            StoreSecret mine = StoreSecret.resolve(java.util.Map.of(), other.runId(), "127.0.0.1", server.port());
            // job-b's rank 0 never published its host secret (it lost the port): rank 1 retries, then gives up
            SymmemException unknown = assertThrows(SymmemException.class, () -> new TcpStoreClient("127.0.0.1",
                    server.port(), other, 1, mine, Duration.ofMillis(600), Duration.ofSeconds(2)));
            assertTrue(unknown.getMessage().contains("proved none of the secrets this user holds"), unknown.getMessage());
            assertFalse(unknown.getMessage().contains("job-a"), unknown.getMessage());
            // the same user runs job-a, whose rank 0 published its host secret: that user may know job-a's name
            StoreSecret.resolve(java.util.Map.of(), JOB.runId(), "127.0.0.1", server.port()).publish(SECRET);
            SymmemException named = assertThrows(SymmemException.class, () -> new TcpStoreClient("127.0.0.1",
                    server.port(), other, 1, mine, Duration.ofMillis(600), Duration.ofSeconds(2)));
            assertTrue(named.getMessage().contains("the port is held by the store of run 'job-a' generation 0"
                    + " (world size 4)"), named.getMessage());
            assertEquals("the store of run 'job-a' generation 0 (world size 4)",
                    TcpStoreClient.describeStoreAt("127.0.0.1", server.port(), Duration.ofSeconds(2), null));
        } finally {
            if (saved == null) {
                System.clearProperty("symmem4j.secret.dir");
            } else {
                System.setProperty("symmem4j.secret.dir", saved);
            }
        }
    }

    /** A connection that completed the handshake as {@code rank}, for sending raw requests. */
    private static Socket authenticatedSocket(int port, JobIdentity job, int rank) throws IOException {
        return authenticatedSocket(port, job, rank, ProcessHandle.current().pid());
    }

    private static Socket authenticatedSocket(int port, JobIdentity job, int rank, long pid) throws IOException {
        Socket s = new Socket("127.0.0.1", port);
        DataOutputStream out = new DataOutputStream(s.getOutputStream());
        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] clientNonce = StoreHandshake.nonce();
        StoreHandshake.writeHello(out, clientNonce);
        out.flush();
        assertEquals(StoreHandshake.MAGIC, in.readInt());
        assertEquals(StoreHandshake.VERSION, in.readInt());
        byte[] nonce = in.readNBytes(StoreHandshake.NONCE_BYTES);
        assertArrayEquals(StoreHandshake.serverProof(SECRET, clientNonce, nonce), in.readNBytes(StoreHandshake.PROOF_BYTES));
        StoreHandshake.Claim claim = new StoreHandshake.Claim(job.runId(), job.generation(), job.worldSize(), rank, pid, 0);
        claim.write(out);
        out.write(StoreHandshake.clientProof(SECRET, clientNonce, nonce, claim));
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
