package org.symmem4j.benchmarks;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.symmem4j.parallel.rendezvous.JobIdentity;
import org.symmem4j.parallel.rendezvous.StoreLimits;
import org.symmem4j.parallel.rendezvous.StoreSecret;
import org.symmem4j.parallel.rendezvous.TcpStoreClient;
import org.symmem4j.parallel.rendezvous.TcpStoreServer;

/**
 * How long a job takes to form on its rendezvous store while strangers hold connections to it
 * (issue #29's goal: within 2 s while 1,000 stranger connections are held). Each trial starts a
 * fresh store (rank 0, in this JVM), has a separate stranger JVM open {@code --strangers}
 * connections that each send half a handshake and then nothing, and times ranks 1..N-1 (threads of
 * this JVM, one store connection each, as {@code ProcessGroup}'s join does it) from the moment they
 * start connecting until every rank has read every rank's member record. Scenarios:
 * <ul>
 *   <li>{@code baseline}: no strangers;</li>
 *   <li>{@code held}: the strangers hold their connections (they are closed only by the store);</li>
 *   <li>{@code reconnect}: every stranger connection that the store closes (evicted, timed out) is
 *       reopened at once, an adversary that tries to keep ranks out.</li>
 * </ul>
 * Prints one line per trial and the median and maximum per scenario, with the store's eviction
 * counts (after three uncounted warm-up trials). Runs with plain {@code java -cp}: it needs symmem4j-parallel's classes, slf4j-api and an
 * slf4j binding (or none: then the store's warnings are not printed).
 *
 * <pre>
 *   java -cp benchmarks/target/classes:parallel/target/classes:slf4j-api.jar:slf4j-simple.jar \
 *       org.symmem4j.benchmarks.StoreStarvationBench [--ranks 8] [--strangers 1000] [--trials 20]
 *       [--scenarios baseline,held,reconnect] [--max-unauthenticated K] [--connect-timeout-s 30]
 * </pre>
 * {@code --max-unauthenticated} overrides the store's default bound (a quarter of the descriptor
 * limit, within [64, 4096]); 64, the bound of the store before issue #29, shows the eviction path.
 */
public final class StoreStarvationBench {

    private static final byte[] SECRET = "store-starvation-bench-secret-0123456789".getBytes(StandardCharsets.US_ASCII);
    private static final int MAGIC = 0x53594D53;

    private StoreStarvationBench() {
    }

    /**
     * Runs the benchmark, or (with {@code --stranger port count mode}) the stranger JVM.
     *
     * @param args see the class comment
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--stranger")) {
            stranger(Integer.parseInt(args[1]), Integer.parseInt(args[2]), args[3]);
            return;
        }
        int ranks = 8;
        int strangers = 1000;
        int trials = 20;
        int maxUnauthenticated = -1;
        int connectTimeoutS = 30;
        List<String> scenarios = List.of("baseline", "held", "reconnect");
        for (int i = 0; i < args.length; i += 2) {
            String v = args[i + 1];
            switch (args[i]) {
                case "--ranks" -> ranks = Integer.parseInt(v);
                case "--strangers" -> strangers = Integer.parseInt(v);
                case "--trials" -> trials = Integer.parseInt(v);
                case "--max-unauthenticated" -> maxUnauthenticated = Integer.parseInt(v);
                case "--connect-timeout-s" -> connectTimeoutS = Integer.parseInt(v);
                case "--scenarios" -> scenarios = Arrays.asList(v.split(","));
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (expected --ranks, --strangers, --trials, --max-unauthenticated, --connect-timeout-s, --scenarios)");
            }
        }
        StoreLimits defaults = StoreLimits.defaults(ranks);
        StoreLimits limits = maxUnauthenticated <= 0 ? defaults
                : defaults.withMaxConnections(maxUnauthenticated + 64 + 2 * ranks, maxUnauthenticated);
        System.out.printf(Locale.ROOT, "store starvation: ranks=%d strangers=%d trials=%d maxUnauthenticated=%d"
                        + " (default here %d) handshakeTimeout=%s cpus=%d%n", ranks, strangers, trials,
                limits.maxUnauthenticated(), defaults.maxUnauthenticated(), limits.handshakeTimeout(),
                Runtime.getRuntime().availableProcessors());
        // warm-up, not counted: class loading and the JIT would otherwise land in the first trial
        for (int w = 0; w < 3; w++) {
            trial("baseline", ranks, 0, limits, Duration.ofSeconds(connectTimeoutS), "bench-warmup-" + w);
        }
        List<String> summary = new ArrayList<>();
        for (String scenario : scenarios) {
            double[] ms = new double[trials];
            int failed = 0;
            long evicted = 0;
            for (int t = 0; t < trials; t++) {
                Trial r = trial(scenario, ranks, scenario.equals("baseline") ? 0 : strangers, limits,
                        Duration.ofSeconds(connectTimeoutS), "bench-" + scenario + "-" + t);
                ms[t] = r.formationMs;
                failed += r.failure == null ? 0 : 1;
                evicted += r.evicted;
                System.out.printf(Locale.ROOT, "%-9s trial %2d: formed in %8.1f ms  strangers held at start=%d"
                                + " evicted=%d refused=%d%s%n", scenario, t, r.formationMs, r.heldAtStart, r.evicted,
                        r.refused, r.failure == null ? "" : "  FAILED: " + r.failure);
            }
            double[] sorted = ms.clone();
            Arrays.sort(sorted);
            String line = String.format(Locale.ROOT, "%-9s ranks=%d strangers=%d: median %.1f ms, max %.1f ms, failed %d"
                            + " of %d, evictions per trial %.0f", scenario, ranks,
                    scenario.equals("baseline") ? 0 : strangers, sorted[trials / 2], sorted[trials - 1], failed, trials,
                    evicted / (double) trials);
            summary.add(line);
        }
        System.out.println();
        summary.forEach(System.out::println);
    }

    private record Trial(double formationMs, long evicted, long refused, int heldAtStart, String failure) {
    }

    private static Trial trial(String scenario, int ranks, int strangers, StoreLimits limits, Duration connectTimeout,
                               String runId) throws Exception {
        JobIdentity job = new JobIdentity(runId, 0, ranks);
        try (TcpStoreServer server = new TcpStoreServer("127.0.0.1", 0, job, SECRET, limits)) {
            Process attacker = null;
            try {
                if (strangers > 0) {
                    attacker = startStranger(server.port(), strangers, scenario);
                    int expected = Math.min(strangers, limits.maxUnauthenticated());
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    while (server.unauthenticatedConnections() < expected && System.nanoTime() < until) {
                        Thread.sleep(5);
                    }
                }
                int heldAtStart = server.unauthenticatedConnections();
                long evictedBefore = server.evictedConnections();
                long start = System.nanoTime();
                server.store().set("member/0", new byte[] {0});
                List<CompletableFuture<Void>> joins = new ArrayList<>();
                List<String> keys = new ArrayList<>();
                for (int r = 0; r < ranks; r++) {
                    keys.add("member/" + r);
                }
                for (int r = 1; r < ranks; r++) {
                    int rank = r;
                    joins.add(CompletableFuture.runAsync(() -> {
                        try (TcpStoreClient c = new TcpStoreClient("127.0.0.1", server.port(), job, rank,
                                StoreSecret.of(SECRET), connectTimeout, Duration.ofSeconds(10))) {
                            c.set("member/" + rank, new byte[] {(byte) rank});
                            c.getAll(keys, connectTimeout);
                        }
                    }, task -> Thread.ofPlatform().daemon().start(task)));
                }
                String failure = null;
                for (CompletableFuture<Void> j : joins) {
                    try {
                        j.get(connectTimeout.toSeconds() + 30, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        failure = failure != null ? failure : String.valueOf(e.getCause() != null ? e.getCause() : e);
                    }
                }
                double ms = (System.nanoTime() - start) / 1e6;
                return new Trial(ms, server.evictedConnections() - evictedBefore, server.refusedConnections(), heldAtStart,
                        failure);
            } finally {
                if (attacker != null) {
                    attacker.destroyForcibly().waitFor(30, TimeUnit.SECONDS);
                }
            }
        }
    }

    /** The stranger JVM: same java and class path; returns once it says its connections are open. */
    private static Process startStranger(int port, int count, String mode) throws IOException {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(java, "-Xss256k", "-cp", System.getProperty("java.class.path"),
                StoreStarvationBench.class.getName(), "--stranger", Integer.toString(port), Integer.toString(count), mode)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.US_ASCII));
        String line = out.readLine();
        if (line == null || !line.startsWith("OPEN")) {
            p.destroyForcibly();
            throw new IOException("the stranger JVM did not start: " + line);
        }
        return p;
    }

    /**
     * Opens {@code count} connections to {@code port}, each sending the first 20 bytes of a HELLO
     * (magic, version, half a nonce) and nothing more; with mode {@code reconnect}, each one the
     * store closes is reopened at once. Prints OPEN when all are open, then runs until killed.
     */
    private static void stranger(int port, int count, String mode) throws Exception {
        byte[] half = new byte[20];
        new SecureRandom().nextBytes(half);
        half[0] = (byte) (MAGIC >>> 24);
        half[1] = (byte) (MAGIC >>> 16);
        half[2] = (byte) (MAGIC >>> 8);
        half[3] = (byte) MAGIC;
        half[4] = 0;
        half[5] = 0;
        half[6] = 0;
        half[7] = 3; // protocol version 3
        boolean reconnect = mode.equals("reconnect");
        AtomicLong opened = new AtomicLong();
        AtomicBoolean announced = new AtomicBoolean();
        for (int i = 0; i < count; i++) {
            Thread.ofVirtual().start(() -> {
                do {
                    try (Socket s = new Socket("127.0.0.1", port)) {
                        OutputStream o = s.getOutputStream();
                        o.write(half);
                        o.flush();
                        if (opened.incrementAndGet() == count && announced.compareAndSet(false, true)) {
                            System.out.println("OPEN " + count);
                            System.out.flush();
                        }
                        while (s.getInputStream().read() >= 0) {
                            // a store answers nothing to half a HELLO; wait for it to close the connection
                        }
                    } catch (IOException closed) {
                        // refused, reset or closed: reopen (reconnect mode) or stop
                    }
                } while (reconnect);
            });
        }
        Thread.sleep(Long.MAX_VALUE);
    }
}
