package org.symmem4j.launch;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

/**
 * The host of the launchers' rendezvous ({@link NodeRendezvous} describes the protocol): runs in node 0's launcher, on
 * {@code --master-addr} at {@link NodeRendezvous#port}, from the job's start to its end. A launcher hosts it when it
 * can bind that address and port (as torchrun's c10d rendezvous decides who hosts its store); it is then node 0.
 *
 * <p>Rounds, as torchrun's {@code dynamic_rendezvous} without its waiting list: round g is open from the first
 * {@code JOIN g} on; it closes when MAX launchers joined, or when MIN joined (node 0's among them) and
 * {@code --rdzv-last-call} has passed since the MIN-th did. Closing assigns node ranks: node 0 keeps 0, the others keep
 * the order of the generation before (then the order they joined in); every launcher of the round gets
 * {@code ASSIGN g rank n}. A round that does not close within {@code --rdzv-timeout} of its first join is refused to
 * everyone in it, naming the machines of the generation before that did not join. A {@code JOIN} for a round that
 * closed already (a launcher started late) is refused.
 *
 * <p>While generation g runs, the first {@code FAILED g} or a launcher of g whose connection closes before its
 * {@code DONE g} (killed, or its machine gone) makes the host send {@code STOP g why} to every other launcher of g.
 */
final class RendezvousHost implements AutoCloseable {

    private final ServerSocket server;
    private final byte[] key;
    private final String hostId;
    private final int nproc;
    private final int min;
    private final int max;
    private final Duration lastCall;
    private final Duration timeout;
    private final PrintStream err;

    /** One launcher's connection. Its fields are guarded by the host's lock. */
    private final class Conn {
        final Socket socket;
        final Writer out;
        String id = "(not identified)";
        int nodeRank = -1;
        int previousRank = Integer.MAX_VALUE;
        long joinedAt;
        boolean done;
        boolean gone;

        Conn(Socket socket) throws IOException {
            this.socket = socket;
            this.out = new OutputStreamWriter(socket.getOutputStream(), StandardCharsets.UTF_8);
        }

        boolean isHost() {
            return id.equals(hostId);
        }

        String describe() {
            return "node " + nodeRank + " (launcher " + id + ")";
        }

        void send(String line) {
            try {
                synchronized (out) {
                    out.write(line);
                    out.write('\n');
                    out.flush();
                }
            } catch (IOException e) {
                // gone: its reader thread sees the connection close and says so
            }
        }
    }

    /** Guarded by this. */
    private final List<Conn> all = new ArrayList<>();
    private final List<Conn> joining = new ArrayList<>();
    private List<Conn> members = List.of();
    private int closed = -1;
    private boolean stopped;
    private long openedAt;
    private long minReachedAt;
    private boolean ended;

    /**
     * Binds the rendezvous on {@code addr:port}, or returns null when this launcher cannot (the address is another
     * machine's, or another launcher of this machine hosts it already): it then joins as a member.
     *
     * @param hostId the id this launcher's own member connection gives (it becomes node 0)
     * @param nproc  processes per machine: every launcher must bring as many
     */
    static RendezvousHost bind(String addr, int port, byte[] key, String hostId, int nproc, int min, int max,
                               Duration lastCall, Duration timeout, PrintStream err) {
        ServerSocket s = null;
        try {
            InetAddress a = InetAddress.getByName(addr);
            s = new ServerSocket();
            s.bind(new InetSocketAddress(a, port), 64);
        } catch (IOException e) {
            if (s != null) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // not bound: nothing held
                }
            }
            return null;
        }
        RendezvousHost h = new RendezvousHost(s, key, hostId, nproc, min, max, lastCall, timeout, err);
        Thread.ofPlatform().name("symmem4j-run-rendezvous-accept").daemon().start(h::accept);
        Thread.ofPlatform().name("symmem4j-run-rendezvous-rounds").daemon().start(h::rounds);
        return h;
    }

    private RendezvousHost(ServerSocket server, byte[] key, String hostId, int nproc, int min, int max, Duration lastCall,
                           Duration timeout, PrintStream err) {
        this.server = server;
        this.key = key;
        this.hostId = hostId;
        this.nproc = nproc;
        this.min = min;
        this.max = max;
        this.lastCall = lastCall;
        this.timeout = timeout;
        this.err = err;
    }

    private void accept() {
        while (true) {
            Socket s;
            try {
                s = server.accept();
            } catch (IOException e) {
                return; // closed: the job ended
            }
            Thread.ofPlatform().name("symmem4j-run-rendezvous-conn").daemon().start(() -> serve(s));
        }
    }

    private void serve(Socket s) {
        Conn c;
        BufferedReader in;
        try {
            s.setTcpNoDelay(true);
            s.setSoTimeout((int) NodeRendezvous.HANDSHAKE.toMillis());
            c = new Conn(s);
            in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            if (!handshake(c, in)) {
                NodeRendezvous.closeQuietly(s);
                return;
            }
            s.setSoTimeout(0); // a member's connection lasts the job; its end is what tells that its launcher is gone
        } catch (IOException e) {
            NodeRendezvous.closeQuietly(s);
            return;
        }
        synchronized (this) {
            all.add(c);
        }
        try {
            String line;
            while ((line = in.readLine()) != null) {
                String[] p = line.split(" ", 3);
                int g = p.length > 1 ? parse(p[1]) : -1;
                switch (p[0]) {
                    case "JOIN" -> join(c, g);
                    case "FAILED" -> failed(c, g, p.length > 2 ? p[2] : "(no message)");
                    case "DONE" -> done(c, g);
                    default -> { } // a newer launcher's word: ignored
                }
            }
        } catch (IOException e) {
            // the connection broke: below
        }
        left(c);
    }

    private boolean handshake(Conn c, BufferedReader in) throws IOException {
        String nS = NodeRendezvous.nonce();
        c.send("CHALLENGE " + nS);
        String hello = in.readLine();
        String[] p = hello == null ? new String[0] : hello.split(" ");
        if (p.length != 5 || !p[0].equals("HELLO")
                || !NodeRendezvous.macEquals(NodeRendezvous.mac(key, "c|" + nS + "|" + p[3] + "|" + p[1] + "|" + p[2]), p[4])) {
            c.send("REFUSED the rendezvous host at " + server.getLocalSocketAddress() + " could not verify this launcher:"
                    + " expected the job's secret and run id (fix: the same --secret-file content and --run-id on every"
                    + " machine)");
            say("refused a connection from " + c.socket.getRemoteSocketAddress() + ": it did not prove the job's secret");
            return false;
        }
        if (parse(p[2]) != nproc) {
            c.send("REFUSED --nproc-per-node " + p[2] + " on launcher " + p[1] + " but " + nproc + " on node 0: every"
                    + " machine of an elastic job runs as many processes (fix: pass --nproc-per-node " + nproc
                    + " on every machine)");
            return false;
        }
        c.id = p[1];
        c.send("WELCOME " + NodeRendezvous.mac(key, "s|" + p[3] + "|" + nS));
        return true;
    }

    private synchronized void join(Conn c, int g) {
        if (ended) {
            c.send("REFUSED node 0's launcher has ended the job (fix: none needed)");
            return;
        }
        if (g <= closed) {
            // said before the answer: once the late launcher reads its refusal, node 0's log has it too
            say("refused launcher " + c.id + ": it joined round " + g + ", which closed already");
            c.send("REFUSED round " + g + " of the rendezvous closed already (the job runs generation " + closed + " on "
                    + members.size() + " machine(s)); launcher " + c.id + " arrived after it closed and is not part of"
                    + " the job (fix: start it together with the others, within --rdzv-last-call of the MIN-th, or start"
                    + " a new job with its own --run-id)");
            return;
        }
        if (g != closed + 1 || joining.contains(c)) {
            c.send("REFUSED launcher " + c.id + " joined round " + g + " but the open round is " + (closed + 1)
                    + " (fix: the same --max-restarts and --run-id on every machine)");
            return;
        }
        long now = System.nanoTime();
        if (joining.isEmpty()) {
            openedAt = now;
        }
        c.joinedAt = now;
        joining.add(c);
        recountMin(now);
        notifyAll(); // the rounds thread looks again
    }

    private void recountMin(long now) {
        boolean enough = joining.size() >= min && joining.stream().anyMatch(Conn::isHost);
        if (!enough) {
            minReachedAt = 0;
        } else if (minReachedAt == 0) {
            minReachedAt = now == 0 ? 1 : now;
        }
    }

    private synchronized void failed(Conn c, int g, String why) {
        if (g != closed || stopped || !members.contains(c)) {
            return; // an older generation's, or the stop went out already
        }
        stop(c, c.describe() + " failed in generation " + g + ": " + why);
    }

    private synchronized void done(Conn c, int g) {
        if (g == closed && members.contains(c)) {
            c.done = true;
        }
    }

    private synchronized void left(Conn c) {
        c.gone = true;
        all.remove(c);
        NodeRendezvous.closeQuietly(c.socket);
        if (joining.remove(c)) {
            recountMin(System.nanoTime());
            say("launcher " + c.id + " left round " + (closed + 1) + " before it closed");
            notifyAll();
        }
        if (!ended && members.contains(c) && !c.done && !stopped) {
            stop(c, c.describe() + " is gone in generation " + closed + ": its launcher's connection closed (the"
                    + " launcher was killed, or its machine is gone)");
        }
    }

    /** Sends {@code STOP} for the running generation to every launcher of it but {@code from}. Holds the lock. */
    private void stop(Conn from, String why) {
        stopped = true;
        say(why + "; stopping the other machines' processes");
        for (Conn m : members) {
            if (m != from && !m.gone) {
                m.send("STOP " + closed + " " + why);
            }
        }
    }

    /** The rounds thread: closes a round when it may, refuses one that took too long. */
    private synchronized void rounds() {
        while (!ended) {
            long wait = 0; // 0: until a join or a leave
            if (!joining.isEmpty()) {
                long now = System.nanoTime();
                boolean hostIn = joining.stream().anyMatch(Conn::isHost);
                if (hostIn && joining.size() >= max) {
                    close("all " + max + " (MAX) machines joined");
                    continue;
                }
                if (minReachedAt != 0 && now - minReachedAt >= lastCall.toNanos()) {
                    close(joining.size() + " machine(s) joined, at least " + min + " (MIN), and the last call of "
                            + seconds(lastCall) + " passed");
                    continue;
                }
                if (now - openedAt >= timeout.toNanos()) {
                    refuseRound();
                    continue;
                }
                wait = Math.min(timeout.toNanos() - (now - openedAt),
                        minReachedAt != 0 ? lastCall.toNanos() - (now - minReachedAt) : Long.MAX_VALUE);
            }
            try {
                if (wait > 0) {
                    TimeUnit.NANOSECONDS.timedWait(this, wait);
                } else {
                    wait();
                }
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** Closes the open round: assigns node ranks and tells every launcher in it. Holds the lock. */
    private void close(String why) {
        int g = closed + 1;
        List<Conn> previous = members;
        List<Conn> round = new ArrayList<>(joining);
        round.sort(Comparator.comparing((Conn c) -> !c.isHost()).thenComparingInt(c -> c.previousRank)
                .thenComparingLong(c -> c.joinedAt));
        List<String> leftOut = new ArrayList<>();
        for (Conn c : previous) {
            if (!round.contains(c)) {
                leftOut.add(c.describe());
            }
        }
        StringBuilder names = new StringBuilder();
        for (int r = 0; r < round.size(); r++) {
            Conn c = round.get(r);
            c.nodeRank = r;
            c.previousRank = r;
            c.done = false;
            names.append(r == 0 ? "" : ", ").append(r).append('=').append(c.id);
        }
        String note = "round " + g + " closed (" + why + "): " + round.size() + " machine(s), world size "
                + round.size() * nproc + ", nodes " + names + (leftOut.isEmpty() ? "" : "; left out: "
                + String.join(", ", leftOut));
        members = List.copyOf(round);
        closed = g;
        stopped = false;
        joining.clear();
        minReachedAt = 0;
        say(note);
        for (Conn c : round) {
            c.send("ASSIGN " + g + " " + c.nodeRank + " " + round.size() + "\t" + note);
        }
    }

    /** Refuses the open round to everyone in it: too few machines within --rdzv-timeout. Holds the lock. */
    private void refuseRound() {
        int g = closed + 1;
        boolean hostIn = joining.stream().anyMatch(Conn::isHost);
        List<String> missing = new ArrayList<>();
        for (Conn c : members) {
            if (!joining.contains(c)) {
                missing.add(c.describe());
            }
        }
        String why = "round " + g + " of the rendezvous did not close within --rdzv-timeout " + seconds(timeout) + ": "
                + joining.size() + " machine(s) joined, expected at least " + min + " (MIN) with node 0"
                + (hostIn ? "" : " (node 0's own launcher has not joined)")
                + (missing.isEmpty() ? "" : "; missing from generation " + closed + ": " + String.join(", ", missing))
                + " (fix: start the missing launchers, or lower MIN in --nnodes)";
        say(why);
        for (Conn c : joining) {
            c.send("REFUSED " + why);
        }
        joining.clear();
        minReachedAt = 0;
        ended = true;
    }

    private void say(String what) {
        synchronized (err) {
            err.println("symmem4j-run: rendezvous: " + what);
        }
    }

    private static String seconds(Duration d) {
        return String.format(Locale.ROOT, "%.1f s", d.toNanos() / 1e9);
    }

    private static int parse(String s) {
        try {
            return Integer.parseInt(s.strip());
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    /** Ends the job's rendezvous: {@code END} to every launcher, then the listener and the connections close. */
    @Override
    public void close() {
        List<Conn> conns;
        synchronized (this) {
            ended = true;
            notifyAll(); // the rounds thread ends
            conns = List.copyOf(all);
        }
        for (Conn c : conns) {
            c.send("END node 0's launcher has ended");
        }
        try {
            server.close();
        } catch (IOException e) {
            // closing: nothing left to do
        }
        for (Conn c : conns) {
            NodeRendezvous.closeQuietly(c.socket);
        }
    }
}
