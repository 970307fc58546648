package org.symmem4j.launch;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The launchers' rendezvous of an elastic job of several machines ({@code --nnodes MIN:MAX}, torchrun's
 * {@code --nnodes=MIN:MAX} with its c10d rendezvous): before each generation the launchers meet at node 0's launcher,
 * which hosts the rendezvous ({@link RendezvousHost}), and learn which machines run the generation, their node rank and
 * so the world size and their rank offset. A machine that is gone is left out and the job goes on with the machines it
 * still has, down to MIN.
 *
 * <p>One TCP connection per launcher for the whole job, to {@code --master-addr} at port
 * {@code --master-port + --max-restarts + 1} (the first port after the generations' store ports), authenticated with a
 * key derived from the job's secret (HMAC-SHA256 of the run id, so it is not the store's key). A launcher learns on the
 * same connection that another machine's generation failed or that a machine's launcher is gone (the host sees its
 * connection close), and stops its own processes at once: the processes need not notice the failure themselves.
 *
 * <pre>
 *  launcher (any node)                                host (node 0's launcher)
 *  ---------------------------------------------------  ------------------------------------------------------
 *                                        &lt;-- CHALLENGE nS            nS: 16 random bytes, hex
 *  HELLO id nproc nC mac(c|nS|nC|id|nproc) -->                          verifies the mac, nproc equal to node 0's
 *                                        &lt;-- WELCOME mac(s|nC|nS)     (or REFUSED why, and the connection closes)
 *  -- each generation g = 0, 1, ... ----------------------------------------------------------------------------
 *  JOIN g                                -->                          round g is open while g == last closed + 1
 *                                        &lt;-- ASSIGN g rank n \t note  round closes: MAX joined, or MIN joined
 *                                                                      and --rdzv-last-call passed (node 0 in)
 *                                        &lt;-- REFUSED why             late (round g closed) / too few in time
 *  FAILED g why                          -->                          this machine's generation g failed
 *                                        &lt;-- STOP g why              another machine's did, or its launcher left
 *  DONE g                                -->                          this machine's generation g exited 0
 *                                        &lt;-- END why                 node 0's launcher ends: no more rounds
 * </pre>
 *
 * Node 0 is fixed, as torchrun's static c10d endpoint: when node 0's launcher or machine is gone, the other launchers
 * see their connection close without {@code END}, stop their processes and end the job saying so. A launcher that
 * arrives after round 0 closed is refused (it is not part of the job; a replacement machine joins a new job).
 * Every wait is bounded: connecting and each round by {@code --rdzv-timeout}, the handshake by {@link #HANDSHAKE}.
 */
final class NodeRendezvous {

    /** How long each side of the handshake may take. */
    static final Duration HANDSHAKE = Duration.ofSeconds(10);

    private NodeRendezvous() {
    }

    /**
     * One generation's place of this machine in the job.
     *
     * @param generation the generation
     * @param nodeRank   this machine's node rank, 0 on node 0
     * @param nnodes     the machines that run the generation
     * @param note       what the host says about the round (who joined, who was left out)
     */
    record Assignment(int generation, int nodeRank, int nnodes, String note) {
    }

    /** The rendezvous port: the first after the store ports of every generation. */
    static int port(LaunchSpec spec) {
        return spec.masterPort() + spec.maxRestarts() + 1;
    }

    /** The rendezvous key: HMAC-SHA256 of the run id keyed with the job's secret (never the store's key itself). */
    static byte[] key(byte[] secret, String runId) {
        return hmac(secret, "symmem4j-run rendezvous " + runId);
    }

    static String mac(byte[] key, String what) {
        return HexFormat.of().formatHex(hmac(key, what));
    }

    static boolean macEquals(String expected, String found) {
        return found != null && MessageDigest.isEqual(expected.getBytes(StandardCharsets.US_ASCII),
                found.getBytes(StandardCharsets.US_ASCII));
    }

    static String nonce() {
        byte[] b = new byte[16];
        new SecureRandom().nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    private static byte[] hmac(byte[] key, String what) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            return mac.doFinal(what.getBytes(StandardCharsets.UTF_8));
        } catch (GeneralSecurityException e) {
            // error-message: every JDK has HmacSHA256 (Java SE requires it); no user input reaches here
            throw new IllegalStateException("HmacSHA256 is part of every JDK", e);
        }
    }

    /**
     * What the launcher's generation loop needs to hear from the rendezvous while a generation runs: stop it, because
     * another machine's failed ({@code restartable}) or node 0 is gone (not).
     */
    interface Stoppable {
        void stopFor(String why, boolean restartable);
    }

    /**
     * A launcher's side: its connection to the host, for the whole job. Made by {@link #connect}; {@link #join} once per
     * generation; {@link #watch} the generation while it runs; {@link #failed} or {@link #done} when it ends.
     */
    static final class Member implements AutoCloseable {
        private final Socket socket;
        private final BufferedReader in;
        private final Writer out;
        private final String where;
        private final Duration timeout;
        /** Guarded by this: what the host said, by generation. */
        private final Map<Integer, Assignment> assigned = new HashMap<>();
        private final Map<Integer, String> stops = new HashMap<>();
        private String refused;
        private String ended;
        private boolean lost;
        private int watchedGeneration = -1;
        private Stoppable watched;

        private Member(Socket socket, String where, Duration timeout) throws IOException {
            this.socket = socket;
            this.in = new BufferedReader(new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
            this.out = new OutputStreamWriter(socket.getOutputStream(), StandardCharsets.UTF_8);
            this.where = where;
            this.timeout = timeout;
        }

        /**
         * Connects to the host (retrying while it is not listening yet, until {@code timeout}) and proves the key.
         *
         * @param host    node 0's address, from {@code --master-addr}
         * @param port    {@link #port}
         * @param key     {@link #key}
         * @param id      this launcher, as the others' messages name it ({@code pid@host#tag})
         * @param nproc   this machine's processes per generation
         * @param timeout how long to try, and how long each round may take
         * @throws IllegalStateException when no host answered in time, or the host refused this launcher
         */
        static Member connect(String host, int port, byte[] key, String id, int nproc, Duration timeout) {
            String where = host + ":" + port;
            long deadline = System.nanoTime() + timeout.toNanos();
            long backoff = TimeUnit.MILLISECONDS.toNanos(20);
            IOException last = null;
            while (true) {
                Socket s = new Socket();
                try {
                    s.connect(new InetSocketAddress(host, port), (int) HANDSHAKE.toMillis());
                    if (s.getLocalPort() == s.getPort() && s.getLocalAddress().equals(s.getInetAddress())) {
                        // connected to itself: node 0's launcher does not listen yet and the system gave this socket
                        // that port; a normal close would hold it in TIME_WAIT for 60 s, so reset it (the runtime's
                        // SelfConnection tells the whole story; the launcher does not load the runtime)
                        s.setSoLinger(true, 0);
                        throw new IOException("connected to itself at " + where + " (node 0's launcher did not listen"
                                + " yet; retried until --rdzv-timeout; fix: start node 0's launcher, or raise"
                                + " --rdzv-timeout if it starts late)");
                    }
                    s.setSoTimeout((int) HANDSHAKE.toMillis());
                    s.setTcpNoDelay(true);
                    Member m = new Member(s, where, timeout);
                    m.handshake(key, id, nproc);
                    s.setSoTimeout(0); // from here the reader thread waits for the host's messages as long as the job runs
                    Thread.ofPlatform().name("symmem4j-run-rendezvous").daemon().start(m::read);
                    return m;
                } catch (IOException e) {
                    closeQuietly(s);
                    last = e;
                } catch (IllegalStateException refused) {
                    closeQuietly(s);
                    throw refused;
                }
                if (System.nanoTime() - deadline > 0) {
                    throw new IllegalStateException("the rendezvous host (node 0's launcher) did not answer at " + where
                            + " within --rdzv-timeout " + timeout.toSeconds() + " s (last: " + last + "); expected node 0's"
                            + " launcher running with the same --master-addr, --master-port, --max-restarts and --run-id"
                            + " (fix: start it, or check that this machine can reach " + where + ")");
                }
                LockSupport.parkNanos(backoff); // the host may not be listening yet: back off, bounded by the deadline
                backoff = Math.min(backoff * 2, TimeUnit.MILLISECONDS.toNanos(500));
            }
        }

        private void handshake(byte[] key, String id, int nproc) throws IOException {
            String challenge = in.readLine();
            if (challenge == null || !challenge.startsWith("CHALLENGE ")) {
                throw new IllegalStateException("the program at " + where + " is no symmem4j-run rendezvous host (it sent '"
                        + abbreviate(challenge) + "'); expected node 0's launcher there (fix: a --master-port whose next"
                        + " ports no other program uses, the same on every machine)");
            }
            String nS = challenge.substring("CHALLENGE ".length()).strip();
            String nC = nonce();
            send("HELLO " + id + " " + nproc + " " + nC + " " + mac(key, "c|" + nS + "|" + nC + "|" + id + "|" + nproc));
            String reply = in.readLine();
            if (reply != null && reply.startsWith("REFUSED ")) {
                // error-message: the host's refusal, worded there (RendezvousHost), with its fix
                throw new IllegalStateException(reply.substring("REFUSED ".length()));
            }
            if (reply == null || !reply.startsWith("WELCOME ")
                    || !macEquals(mac(key, "s|" + nC + "|" + nS), reply.substring("WELCOME ".length()).strip())) {
                throw new IllegalStateException("the rendezvous host at " + where + " could not prove the job's secret;"
                        + " expected node 0's launcher of this job (fix: the same --secret-file content and --run-id on"
                        + " every machine)");
            }
        }

        /**
         * Joins round {@code generation} and waits (bounded by {@code --rdzv-timeout} and the last call) until it closes.
         *
         * @return this machine's place in the generation
         * @throws IllegalStateException when the host refused it (late, too few machines) or is gone, or no answer came
         */
        Assignment join(int generation, Duration lastCall) {
            synchronized (this) {
                if (ended != null) {
                    throw new IllegalStateException("node 0's launcher has ended (" + ended + "): no generation "
                            + generation + " (fix: none needed; the job is over)");
                }
            }
            try {
                send("JOIN " + generation);
            } catch (IOException e) {
                markLost();
            }
            long deadline = System.nanoTime() + timeout.plus(lastCall).plus(HANDSHAKE).toNanos();
            synchronized (this) {
                while (true) {
                    Assignment a = assigned.get(generation);
                    if (a != null) {
                        return a;
                    }
                    if (refused != null) {
                        throw new IllegalStateException(refused);
                    }
                    if (lost) {
                        throw new IllegalStateException(gone());
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        throw new IllegalStateException("round " + generation + " of the rendezvous at " + where
                                + " did not close within " + timeout.plus(lastCall).toSeconds() + " s; expected node 0's"
                                + " launcher to close it (fix: check node 0's launcher and its messages)");
                    }
                    try {
                        TimeUnit.NANOSECONDS.timedWait(this, left);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException("interrupted while waiting for round " + generation
                                + " (fix: none needed; the launcher is stopping)");
                    }
                }
            }
        }

        /** Watches generation {@code g}: a stop the host sends for it (or sent already) stops {@code s}. */
        void watch(int g, Stoppable s) {
            String why;
            boolean restartable;
            synchronized (this) {
                watchedGeneration = g;
                watched = s;
                why = stops.get(g);
                restartable = why != null;
                if (why == null && lost && ended == null) { // lost after END: the job ended well, nothing to stop
                    why = gone();
                }
            }
            if (why != null) {
                s.stopFor(why, restartable);
            }
        }

        /** Tells the host that this machine's generation {@code g} failed, so that it stops the others. */
        void failed(int g, String why) {
            synchronized (this) {
                watched = null;
            }
            sendQuietly("FAILED " + g + " " + why.replace('\n', ' '));
        }

        /** Tells the host that this machine's generation {@code g} ended well. */
        void done(int g) {
            synchronized (this) {
                watched = null;
            }
            sendQuietly("DONE " + g);
        }

        /** Whether the host ended the job ({@code END}): no more rounds. */
        synchronized boolean ended() {
            return ended != null;
        }

        private void read() {
            try {
                String line;
                while ((line = in.readLine()) != null) {
                    try {
                        handle(line);
                    } catch (RuntimeException malformed) {
                        // a line this launcher cannot read (a newer host's): ignored, as the host ignores unknown words
                    }
                }
            } catch (IOException e) {
                // the connection broke: below
            }
            markLost();
        }

        private void handle(String line) {
            Stoppable stop = null;
            String why = null;
            synchronized (this) {
                if (line.startsWith("ASSIGN ")) {
                    String[] head = line.substring("ASSIGN ".length()).split("\t", 2)[0].strip().split(" ");
                    int g = Integer.parseInt(head[0]);
                    assigned.put(g, new Assignment(g, Integer.parseInt(head[1]), Integer.parseInt(head[2]),
                            line.contains("\t") ? line.substring(line.indexOf('\t') + 1) : ""));
                } else if (line.startsWith("REFUSED ")) {
                    refused = line.substring("REFUSED ".length());
                } else if (line.startsWith("STOP ")) {
                    String[] p = line.substring("STOP ".length()).split(" ", 2);
                    int g = Integer.parseInt(p[0]);
                    why = p.length > 1 ? p[1] : "stopped by node 0";
                    stops.put(g, why);
                    if (watched != null && watchedGeneration == g) {
                        stop = watched;
                    }
                } else if (line.startsWith("END ")) {
                    ended = line.substring("END ".length());
                }
                notifyAll();
            }
            if (stop != null) {
                stop.stopFor(why, true);
            }
        }

        private void markLost() {
            Stoppable stop;
            synchronized (this) {
                if (lost) {
                    return;
                }
                lost = true;
                notifyAll();
                stop = ended == null ? watched : null;
            }
            if (stop != null) {
                stop.stopFor(gone(), false);
            }
        }

        private String gone() {
            return "node 0's launcher (the rendezvous host at " + where + ") is gone: its connection closed without"
                    + " ending the job (its launcher or machine died); node 0 is fixed (as torchrun's static c10d"
                    + " endpoint), so the job ends here (fix: start the job again, with node 0 on a machine that is up)";
        }

        private synchronized void send(String line) throws IOException {
            out.write(line);
            out.write('\n');
            out.flush();
        }

        private void sendQuietly(String line) {
            try {
                send(line);
            } catch (IOException e) {
                markLost();
            }
        }

        @Override
        public void close() {
            closeQuietly(socket);
        }
    }

    static String abbreviate(String s) {
        return s == null ? "(nothing)" : s.length() > 60 ? s.substring(0, 60) + "..." : s;
    }

    static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // closing: nothing left to do with it
        }
    }

    /** The launcher's name in the rendezvous' messages: {@code pid@host#tag}, the tag random (one JVM may run several). */
    static String launcherId() {
        String host;
        try {
            host = java.net.InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            host = "unknown-host";
        }
        return ProcessHandle.current().pid() + "@" + host.replace(' ', '_') + "#" + nonce().substring(0, 4);
    }
}
