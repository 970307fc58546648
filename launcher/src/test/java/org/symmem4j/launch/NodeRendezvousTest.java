package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The launchers' rendezvous ({@link NodeRendezvous}, {@link RendezvousHost}) in one JVM, each "launcher" a member
 * connection: how rounds close (MAX, MIN and the last call, too few in time), node ranks, late and unauthenticated
 * launchers, and the stops a failed or vanished machine sends to the others. No timing is asserted: long last calls
 * make a round that closed for the wrong reason say so in its note, not in a clock.
 */
@Timeout(60)
class NodeRendezvousTest {

    private static final byte[] KEY = NodeRendezvous.key("s3cret".getBytes(StandardCharsets.UTF_8), "job-1");
    private static final Duration LONG = Duration.ofSeconds(30);

    private final ByteArrayOutputStream log = new ByteArrayOutputStream();
    private final PrintStream err = new PrintStream(log, true, StandardCharsets.UTF_8);
    private final List<AutoCloseable> open = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool();

    @AfterEach
    void closeAll() throws Exception {
        for (AutoCloseable c : open.reversed()) {
            c.close();
        }
        pool.shutdownNow();
    }

    private int port;

    private RendezvousHost host(int min, int max, Duration lastCall, Duration timeout) throws IOException {
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        RendezvousHost h = RendezvousHost.bind("127.0.0.1", port, KEY, "host", 2, min, max, lastCall, timeout, err);
        assertTrue(h != null, "the host binds");
        open.add(h);
        return h;
    }

    private NodeRendezvous.Member member(String id) {
        return member(id, KEY, 2);
    }

    private NodeRendezvous.Member member(String id, byte[] key, int nproc) {
        NodeRendezvous.Member m = NodeRendezvous.Member.connect("127.0.0.1", port, key, id, nproc, Duration.ofSeconds(5));
        open.add(m);
        return m;
    }

    private CompletableFuture<NodeRendezvous.Assignment> join(NodeRendezvous.Member m, int g, Duration lastCall) {
        return CompletableFuture.supplyAsync(() -> m.join(g, lastCall), pool);
    }

    /** Node 0's launcher ("host") and launcher "a", each through generation 0's round (a host of 2 nodes). */
    private NodeRendezvous.Member[] hostAndAJoined() throws Exception {
        NodeRendezvous.Member h = member("host");
        NodeRendezvous.Member a = member("a");
        var fh = join(h, 0, LONG);
        var fa = join(a, 0, LONG);
        fh.get(20, TimeUnit.SECONDS);
        fa.get(20, TimeUnit.SECONDS);
        return new NodeRendezvous.Member[] {h, a};
    }

    /** Records what the host asked this "launcher" to stop for. */
    private static final class Stops implements NodeRendezvous.Stoppable {
        final LinkedBlockingQueue<String> seen = new LinkedBlockingQueue<>();

        @Override
        public void stopFor(String why, boolean restartable) {
            seen.add(restartable + " " + why);
        }

        String next() throws InterruptedException {
            String s = seen.poll(20, TimeUnit.SECONDS);
            assertTrue(s != null, "a stop arrived");
            return s;
        }
    }

    @Test
    void aRoundClosesOnceMaxJoinedWithNodeZeroFirst() throws Exception {
        host(2, 3, LONG, LONG);
        NodeRendezvous.Member a = member("a");
        NodeRendezvous.Member h = member("host");
        NodeRendezvous.Member b = member("b");
        var fa = join(a, 0, LONG);
        var fh = join(h, 0, LONG);
        var fb = join(b, 0, LONG);
        Set<Integer> ranks = new TreeSet<>();
        for (var f : List.of(fa, fh, fb)) {
            NodeRendezvous.Assignment x = f.get(20, TimeUnit.SECONDS);
            assertEquals(3, x.nnodes());
            assertEquals(0, x.generation());
            assertTrue(x.note().contains("all 3 (MAX) machines joined"), x.note());
            ranks.add(x.nodeRank());
        }
        assertEquals(Set.of(0, 1, 2), ranks);
        assertEquals(0, fh.get().nodeRank(), "the host's own launcher is node 0");
    }

    @Test
    void minAndTheLastCallCloseARoundWithoutTheMissingMachine() throws Exception {
        host(2, 3, Duration.ofMillis(200), LONG);
        NodeRendezvous.Member h = member("host");
        NodeRendezvous.Member a = member("a");
        var fh = join(h, 0, Duration.ofMillis(200));
        var fa = join(a, 0, Duration.ofMillis(200));
        assertEquals(2, fh.get(20, TimeUnit.SECONDS).nnodes());
        NodeRendezvous.Assignment x = fa.get(20, TimeUnit.SECONDS);
        assertEquals(1, x.nodeRank());
        assertTrue(x.note().contains("at least 2 (MIN), and the last call"), x.note());
    }

    @Test
    void withoutNodeZeroARoundDoesNotCloseAndTimesOutSayingSo() throws Exception {
        host(1, 3, Duration.ZERO, Duration.ofMillis(300));
        NodeRendezvous.Member a = member("a");
        NodeRendezvous.Member b = member("b");
        var fa = join(a, 0, Duration.ZERO);
        var fb = join(b, 0, Duration.ZERO);
        for (var f : List.of(fa, fb)) {
            Exception e = assertThrows(Exception.class, () -> f.get(20, TimeUnit.SECONDS));
            assertTrue(e.getCause().getMessage().contains("did not close within --rdzv-timeout")
                    && e.getCause().getMessage().contains("node 0's own launcher has not joined")
                    && e.getCause().getMessage().contains("fix:"), e.getCause().getMessage());
        }
    }

    @Test
    void aMachineWhoseLauncherVanishesStopsTheOthersAndIsLeftOutOfTheNextRound() throws Exception {
        host(2, 3, Duration.ofMillis(200), LONG);
        NodeRendezvous.Member h = member("host");
        NodeRendezvous.Member a = member("a");
        NodeRendezvous.Member b = member("b");
        List<CompletableFuture<NodeRendezvous.Assignment>> round0 = List.of(join(h, 0, LONG), join(a, 0, LONG),
                join(b, 0, LONG));
        int bRank = round0.get(2).get(20, TimeUnit.SECONDS).nodeRank();
        Stops hs = new Stops();
        Stops as = new Stops();
        h.watch(0, hs);
        a.watch(0, as);
        b.close(); // kill -9 of b's launcher: its connection closes without DONE
        for (Stops s : List.of(hs, as)) {
            String stop = s.next();
            assertTrue(stop.startsWith("true node " + bRank + " (launcher b) is gone in generation 0"), stop);
        }
        var h1 = join(h, 1, Duration.ofMillis(200));
        var a1 = join(a, 1, Duration.ofMillis(200));
        assertEquals(0, h1.get(20, TimeUnit.SECONDS).nodeRank());
        NodeRendezvous.Assignment x = a1.get(20, TimeUnit.SECONDS);
        assertEquals(2, x.nnodes());
        assertEquals(1, x.nodeRank());
        assertTrue(x.note().contains("left out: node " + bRank + " (launcher b)"), x.note());
    }

    @Test
    void aFailedGenerationStopsTheOtherMachinesOnlyOnce() throws Exception {
        host(2, 2, LONG, LONG);
        NodeRendezvous.Member[] joined = hostAndAJoined();
        NodeRendezvous.Member h = joined[0];
        NodeRendezvous.Member a = joined[1];
        Stops hs = new Stops();
        h.watch(0, hs);
        a.failed(0, "rank 3 (local rank 1, pid 7) exited with code 1");
        a.failed(0, "a second failure of the same generation");
        String stop = hs.next();
        assertTrue(stop.equals("true node 1 (launcher a) failed in generation 0: rank 3 (local rank 1, pid 7) exited"
                + " with code 1"), stop);
        assertEquals(null, hs.seen.poll(300, TimeUnit.MILLISECONDS), "one stop per generation");
        // a stop that arrived before the generation was watched stops it as soon as it is
        Stops late = new Stops();
        h.watch(0, late);
        assertTrue(late.next().startsWith("true node 1"));
    }

    @Test
    void aLauncherThatArrivesAfterTheRoundClosedIsRefused() throws Exception {
        host(1, 3, Duration.ZERO, LONG);
        NodeRendezvous.Member h = member("host");
        assertEquals(1, join(h, 0, Duration.ZERO).get(20, TimeUnit.SECONDS).nnodes());
        NodeRendezvous.Member late = member("late");
        Exception e = assertThrows(Exception.class, () -> join(late, 0, Duration.ZERO).get(20, TimeUnit.SECONDS));
        assertTrue(e.getCause().getMessage().contains("round 0 of the rendezvous closed already")
                && e.getCause().getMessage().contains("launcher late arrived after it closed")
                && e.getCause().getMessage().contains("fix:"), e.getCause().getMessage());
        assertTrue(log.toString(StandardCharsets.UTF_8).contains("refused launcher late"), log.toString());
    }

    @Test
    void aLauncherWithoutTheJobsSecretOrWithAnotherProcessCountIsRefused() throws Exception {
        host(1, 3, Duration.ZERO, LONG);
        byte[] wrong = NodeRendezvous.key("other".getBytes(StandardCharsets.UTF_8), "job-1");
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> member("intruder", wrong, 2));
        assertTrue(e.getMessage().contains("could not verify this launcher") && e.getMessage().contains("fix:"),
                e.getMessage());
        e = assertThrows(IllegalStateException.class, () -> member("odd", KEY, 3));
        assertTrue(e.getMessage().contains("--nproc-per-node 3 on launcher odd but 2 on node 0"), e.getMessage());
    }

    @Test
    void theHostsEndIsNoFailureButItsVanishingIs() throws Exception {
        RendezvousHost host = host(2, 2, LONG, LONG);
        NodeRendezvous.Member a = hostAndAJoined()[1];
        Stops as = new Stops();
        a.watch(0, as);
        host.close(); // node 0's launcher ends the job: END, then the connection closes
        assertEquals(null, as.seen.poll(500, TimeUnit.MILLISECONDS), "an ended job stops nobody");
        assertTrue(a.ended());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> a.join(1, LONG));
        assertTrue(e.getMessage().contains("node 0's launcher has ended"), e.getMessage());
    }

    @Test
    void nodeZeroVanishingStopsTheOthersForGood() throws Exception {
        // a fake node 0 that authenticates, assigns round 0 and then dies without END
        try (ServerSocket fake = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = fake.getLocalPort();
            CompletableFuture<Void> node0 = CompletableFuture.runAsync(() -> {
                try (var s = fake.accept();
                     var in = new java.io.BufferedReader(new java.io.InputStreamReader(s.getInputStream(),
                             StandardCharsets.UTF_8));
                     var out = new java.io.PrintWriter(s.getOutputStream(), true, StandardCharsets.UTF_8)) {
                    out.println("CHALLENGE n0");
                    String[] hello = in.readLine().split(" ");
                    out.println("WELCOME " + NodeRendezvous.mac(KEY, "s|" + hello[3] + "|n0"));
                    in.readLine(); // JOIN 0
                    out.println("ASSIGN 0 1 2\tround 0 closed");
                    in.readLine(); // nothing more comes: wait until the member's watch is set, then vanish
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }, pool);
            NodeRendezvous.Member a = member("a");
            assertEquals(1, a.join(0, LONG).nodeRank());
            Stops as = new Stops();
            a.watch(0, as);
            a.done(0); // DONE 0 ends the fake's last read: it closes without END
            node0.get(20, TimeUnit.SECONDS);
            a.watch(0, as); // done() stopped the watch; a restarted generation watches again
            String stop = as.next();
            assertTrue(stop.startsWith("false node 0's launcher (the rendezvous host at 127.0.0.1:" + port + ") is gone")
                    && stop.contains("fix:"), stop);
            assertFalse(a.ended());
        }
    }
}
