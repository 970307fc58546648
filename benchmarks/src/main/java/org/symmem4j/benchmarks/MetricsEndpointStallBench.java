package org.symmem4j.benchmarks;

import io.micrometer.core.instrument.Timer;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.symmem4j.prometheus.PrometheusEndpoint;

/**
 * How long a scrape of {@link PrometheusEndpoint} takes while clients hold half-sent requests (issue #29's
 * goal: within 100 ms with 1,000 held). One JVM: starts an endpoint on 127.0.0.1 serving a registry of
 * timers like the trainers' (percentile histograms), times K scrapes with nothing held (the baseline), opens
 * M connections that each send part of a request and stop (cut inside the request line, after a header,
 * inside a header value), waits until the endpoint reads all M, times K scrapes again, then checks that the
 * M connections are still open (the server neither dropped nor evicted them) and prints key=value lines.
 *
 * <p>A scrape is what a first Prometheus scrape costs: a new TCP connection, {@code GET /metrics} with
 * Prometheus' text Accept header and {@code Connection: close}, the whole response read to its end; timed
 * from connect to the last byte, one after another. Loopback only; every wait bounded.
 *
 * <pre>
 * java -cp &lt;jars&gt; org.symmem4j.benchmarks.MetricsEndpointStallBench [--half-open 1000] [--scrapes 200]
 *      [--warmup 50] [--meters 20] [--max-requests 1024] [--request-timeout-s 600] [--pad 0]
 * </pre>
 *
 * {@code --pad N}: every held request is a header value of N bytes without its end of line instead (the
 * head-size bound's worst case for memory: {@code heapPerHeldBytes} tells).
 *
 * The client's M sockets and the server's M live in this JVM: it needs about 2 M + 256 file descriptors
 * (the JVM raises its soft limit to the hard one; a lower limit is reported before anything starts).
 */
public final class MetricsEndpointStallBench {

    /** Partial requests, cut where a slow or hostile client stops; the held connections take them in turn. */
    private static final List<String> HALF_SENT = List.of(
            "GET /metr",
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nX-Slow: ");
    private static final String SCRAPE = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: stall-bench\r\n"
            + "Accept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nConnection: close\r\n\r\n";
    /** A series every scrape must contain: a scrape that lacks it counts as failed. */
    private static final String PROBE_SERIES = "stall_bench_probe_seconds_count";
    private static final Duration IO_TIMEOUT = Duration.ofSeconds(30);
    private static final double GOAL_MS = 100;

    private MetricsEndpointStallBench() {
    }

    /**
     * Runs the measurement; see the class comment for the options.
     *
     * @param args options as {@code --name value}
     * @throws Exception when the endpoint cannot start or a socket fails outside a scrape
     */
    public static void main(String[] args) throws Exception {
        int halfOpen = option(args, "--half-open", 1000);
        int scrapes = option(args, "--scrapes", 200);
        int warmup = option(args, "--warmup", 50);
        int meters = option(args, "--meters", 20);
        int maxRequests = option(args, "--max-requests", PrometheusEndpoint.DEFAULT_MAX_REQUESTS);
        int requestTimeoutS = option(args, "--request-timeout-s", 600);
        int pad = option(args, "--pad", 0);

        long fdLimit = openFileLimit();
        long fdsNeeded = 2L * halfOpen + 256;
        System.out.printf(Locale.ROOT, "metrics-endpoint-stall: cores=%d fdLimit=%d fdsNeeded=%d halfOpen=%d scrapes=%d"
                        + " warmup=%d meters=%d maxRequests=%d requestTimeout=%ds pad=%d java=%s%n",
                Runtime.getRuntime().availableProcessors(), fdLimit, fdsNeeded, halfOpen, scrapes, warmup, meters,
                maxRequests, requestTimeoutS, pad, Runtime.version());
        if (fdLimit >= 0 && fdLimit < fdsNeeded) {
            System.out.println("error: open-file limit too low: fdLimit=" + fdLimit + " expected>=" + fdsNeeded
                    + " (raise it: ulimit -n " + fdsNeeded + ", or pass a smaller --half-open)");
            System.exit(2);
        }

        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        for (int m = 0; m < meters; m++) {
            Timer t = Timer.builder(m == 0 ? "stall.bench.probe" : "stall.bench.timer" + m)
                    .publishPercentileHistogram().minimumExpectedValue(Duration.ofNanos(1000))
                    .maximumExpectedValue(Duration.ofSeconds(10)).tag("size.class", "s" + (m % 4)).register(registry);
            for (int i = 1; i <= 100; i++) {
                t.record(Duration.ofNanos(1000L * i * (m + 1)));
            }
        }

        List<Socket> held = new ArrayList<>(halfOpen);
        try (PrometheusEndpoint endpoint = PrometheusEndpoint.builder(registry).maxRequests(maxRequests)
                .requestTimeout(Duration.ofSeconds(requestTimeoutS)).start()) {
            InetSocketAddress at = new InetSocketAddress("127.0.0.1", endpoint.port());
            int bytes = scrape(at).bytes;
            System.out.printf(Locale.ROOT, "endpoint: url=%s scrapeBytes=%d%n", endpoint.url(), bytes);
            for (int i = 0; i < warmup; i++) {
                scrape(at);
            }
            report("baseline", 0, scrapeMany(at, scrapes));

            long heapBefore = usedHeapAfterGc();
            long openStart = System.nanoTime();
            String padded = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + "a".repeat(pad);
            for (int i = 0; i < halfOpen; i++) {
                Socket s = new Socket();
                held.add(s);
                s.connect(at, (int) IO_TIMEOUT.toMillis());
                OutputStream out = s.getOutputStream();
                out.write((pad > 0 ? padded : HALF_SENT.get(i % HALF_SENT.size())).getBytes(StandardCharsets.US_ASCII));
                out.flush();
            }
            int expected = Math.min(halfOpen, maxRequests);
            long deadline = System.nanoTime() + IO_TIMEOUT.toNanos();
            while (endpoint.requestsInFlight() + endpoint.evictedRequests() < halfOpen
                    && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            double openMs = (System.nanoTime() - openStart) / 1e6;
            long heapPerHeld = halfOpen == 0 ? 0 : (usedHeapAfterGc() - heapBefore) / halfOpen;
            System.out.printf(Locale.ROOT, "held: opened=%d inFlight=%d expected=%d evicted=%d openMs=%.0f"
                            + " heapPerHeldBytes=%d%n", halfOpen, endpoint.requestsInFlight(), expected,
                    endpoint.evictedRequests(), openMs, heapPerHeld);
            if (endpoint.requestsInFlight() < expected) {
                System.out.println("error: the endpoint reads " + endpoint.requestsInFlight() + " requests, expected="
                        + expected + " after " + IO_TIMEOUT + " (the scrapes below run with fewer held)");
            }

            Samples underLoad = scrapeMany(at, scrapes);
            report("held", halfOpen, underLoad);

            int open = 0;
            int closed = 0;
            for (Socket s : held) {
                if (stillOpen(s)) {
                    open++;
                } else {
                    closed++;
                }
            }
            System.out.printf(Locale.ROOT, "after: stillOpen=%d closedByServer=%d inFlight=%d evicted=%d"
                            + " timedOut=%d%n", open, closed, endpoint.requestsInFlight(),
                    endpoint.evictedRequests(), endpoint.timedOutRequests());
            double p99 = underLoad.percentile(0.99);
            System.out.printf(Locale.ROOT, "goal: scrape within %.0f ms with %d half-open requests held:"
                            + " p99_ms=%.2f max_ms=%.2f failures=%d -> %s%n", GOAL_MS, open, p99, underLoad.max(),
                    underLoad.failures, p99 <= GOAL_MS && underLoad.failures == 0 ? "met (p99)" : "NOT met");
        } finally {
            for (Socket s : held) { // after the endpoint: closed first, a half-sent request would end its head
                s.close();
            }
        }
    }

    /** One scrape's duration and size, or a failure. */
    private record Scrape(double millis, int bytes, String failure) {
    }

    /** K scrape durations in ms, sorted, and the failures. */
    private static final class Samples {
        private final double[] sorted;
        private final int failures;
        private final String firstFailure;

        Samples(double[] millis, int failures, String firstFailure) {
            this.sorted = millis.clone();
            Arrays.sort(sorted);
            this.failures = failures;
            this.firstFailure = firstFailure;
        }

        double percentile(double q) {
            return sorted.length == 0 ? Double.NaN : sorted[(int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
        }

        double max() {
            return sorted.length == 0 ? Double.NaN : sorted[sorted.length - 1];
        }
    }

    private static Samples scrapeMany(InetSocketAddress at, int n) {
        double[] millis = new double[n];
        int failures = 0;
        String first = null;
        for (int i = 0; i < n; i++) {
            Scrape s = scrape(at);
            millis[i] = s.millis;
            if (s.failure != null) {
                failures++;
                first = first == null ? s.failure : first;
            }
        }
        return new Samples(millis, failures, first);
    }

    private static void report(String what, int held, Samples s) {
        System.out.printf(Locale.ROOT, "%s: held=%d scrapes=%d median_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f"
                        + " failures=%d%s%n", what, held, s.sorted.length, s.percentile(0.5), s.percentile(0.9),
                s.percentile(0.99), s.max(), s.failures, s.firstFailure == null ? "" : " firstFailure=" + s.firstFailure);
    }

    /** One scrape on a new connection, connect to last byte; a failure is timed too (to when it failed). */
    private static Scrape scrape(InetSocketAddress at) {
        long start = System.nanoTime();
        try (Socket s = new Socket()) {
            s.connect(at, (int) IO_TIMEOUT.toMillis());
            s.setSoTimeout((int) IO_TIMEOUT.toMillis());
            s.getOutputStream().write(SCRAPE.getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
            byte[] response = s.getInputStream().readAllBytes();
            double millis = (System.nanoTime() - start) / 1e6;
            String text = new String(response, StandardCharsets.ISO_8859_1);
            if (!text.startsWith("HTTP/1.1 200") || !text.contains(PROBE_SERIES)) {
                return new Scrape(millis, response.length, "status/body: "
                        + text.substring(0, Math.min(80, text.length())).replace("\r\n", " | "));
            }
            return new Scrape(millis, response.length, null);
        } catch (IOException e) {
            return new Scrape((System.nanoTime() - start) / 1e6, 0, e.toString());
        }
    }

    /** Held: open and silent (a read times out); not held: closed (end of stream, a reset) or answered. */
    private static boolean stillOpen(Socket s) throws IOException {
        s.setSoTimeout(1);
        InputStream in = s.getInputStream();
        try {
            in.read(); // end of stream, or data: an error reply to a half-sent request
            return false;
        } catch (SocketTimeoutException silent) {
            return true;
        } catch (SocketException reset) {
            return false;
        }
    }

    private static long usedHeapAfterGc() throws InterruptedException {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(50);
        }
        return rt.totalMemory() - rt.freeMemory();
    }

    /** This process's soft limit on open files, or -1 where /proc does not tell. */
    private static long openFileLimit() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/limits"))) {
                if (line.startsWith("Max open files")) {
                    String soft = line.substring("Max open files".length()).trim().split("\\s+")[0];
                    return soft.equals("unlimited") ? Long.MAX_VALUE : Long.parseLong(soft);
                }
            }
        } catch (IOException | RuntimeException e) {
            return -1;
        }
        return -1;
    }

    private static int option(String[] args, String name, int dflt) {
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals(name)) {
                if (i + 1 == args.length) {
                    throw new IllegalArgumentException(name + " expects a value, found none");
                }
                return Integer.parseInt(args[i + 1]);
            }
            if (args[i].startsWith("--") && !args[i].matches("--(half-open|scrapes|warmup|meters|max-requests|request-timeout-s|pad)")) {
                throw new IllegalArgumentException("unknown option " + args[i] + " (expected --half-open, --scrapes,"
                        + " --warmup, --meters, --max-requests, --request-timeout-s, --pad)");
            }
        }
        return dflt;
    }
}
