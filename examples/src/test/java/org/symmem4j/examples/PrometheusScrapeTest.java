package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.micrometer.core.instrument.Tags;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.symmem4j.prometheus.PrometheusEndpoint;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Algorithm;

/**
 * End to end through a real Prometheus server: the README's {@code DataParallelExample} trains in its
 * own JVM and serves {@code /metrics}; this JVM trains a small pipeline and records known all-reduce
 * latencies (8 µs and 750 µs) into a registry it serves with {@code PrometheusEndpoint}; a private
 * {@code prometheus} scrapes both every second; the test then asks Prometheus's HTTP API for the series
 * and checks the numbers against what the example did (steps x workers, parameters x 4 bytes, examples)
 * and against a direct scrape of the endpoint, reads the known latencies back with
 * {@code histogram_quantile}, and runs every query of the Grafana dashboard
 * {@code examples/grafana/symmem4j-gradsync.json}.
 *
 * <p>Needs the {@code prometheus} binary (Debian package {@code prometheus}). Without it the tests are
 * skipped, unless {@code -Dsymmem4j.requirePrometheus=true} or {@code SYMMEM4J_REQUIRE_PROMETHEUS=1}
 * (CI sets the latter) makes that a failure.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class PrometheusScrapeTest {

    private static final String APPLICATION = DataParallelExample.APPLICATION; // the application tag the example sets
    /** Selects the example's series: the pipeline and the latency probe of this JVM are scraped too. */
    private static final String EXAMPLE = "application=\"" + APPLICATION + "\"";
    private static final String PIPELINE_APPLICATION = "pipeline-it";
    private static final String LATENCY_PROBE = "latency-probe";
    private static final String TRANSPORT = "host-in-jvm";
    private static final int WORKERS = 2;
    private static final int FLOAT32_BYTES = 4; // the example trains in FLOAT, so gradients are float32
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    private String skipReason; // set when the prometheus binary is missing and not required

    private Path tmp;
    private Process example;
    private Path exampleLog;
    private PrometheusServer prometheus;
    private PrometheusEndpoint inProcessEndpoint;

    // what the example reported, and a direct scrape of its endpoint after training
    private long steps;
    private long examples;
    private long parameters;
    private List<ExpositionSample> direct;
    private long pipelineExamples;

    @BeforeAll
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void startExampleAndPrometheus() throws Exception {
        Optional<Path> binary = PrometheusServer.findBinary();
        if (binary.isEmpty()) {
            String msg = "no prometheus binary on PATH or at /usr/bin/prometheus: install Debian package prometheus"
                    + " (apt-get install prometheus) to run the end-to-end scrape test";
            if (prometheusRequired()) {
                fail(msg + " (required: symmem4j.requirePrometheus=true or SYMMEM4J_REQUIRE_PROMETHEUS set)");
            }
            // Each test assumes instead of aborting here: surefire does not report an aborted class at all.
            skipReason = msg;
            return;
        }
        long started = System.nanoTime();
        try {
            System.out.println("prometheus: " + binary.get() + " " + PrometheusServer.version(binary.get()));
            tmp = Files.createTempDirectory("symmem4j-prometheus-");
            Path logDir = Files.createDirectories(Path.of("target", "worker-logs"));
            String stamp = Long.toString(System.currentTimeMillis());

            exampleLog = logDir.resolve("prometheus-scrape-example-" + stamp + ".log");
            example = startExample(exampleLog);
            Matcher url = awaitExampleLog(Pattern.compile("metrics: (http://([^/\\s]+)/metrics)"), Duration.ofSeconds(90));
            String metricsUrl = url.group(1);

            // this JVM's target: a small pipeline run, and all-reduce latencies of known size
            PrometheusMeterRegistry inProcess = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
            pipelineExamples = InProcessTraining.pipeline(inProcess, Tags.of("application", PIPELINE_APPLICATION), 4);
            SyncMetrics probe = new SyncMetrics(TRANSPORT, Tags.of("application", LATENCY_PROBE));
            probe.bindTo(inProcess);
            for (int i = 0; i < 1000; i++) {
                probe.recordAllReduce(Algorithm.ONE_SHOT, 4096, 8_000);
                probe.recordAllReduce(Algorithm.TWO_SHOT, 1 << 20, 750_000);
            }
            inProcessEndpoint = PrometheusEndpoint.start(inProcess, 0);

            prometheus = PrometheusServer.start(binary.get(), tmp,
                    List.of(url.group(2), "127.0.0.1:" + inProcessEndpoint.port()),
                    logDir.resolve("prometheus-scrape-server-" + stamp + ".log"));
            await("prometheus ready at " + prometheus.baseUrl(), Duration.ofSeconds(30), () -> {
                if (prometheus.ready()) {
                    return Optional.of(true);
                }
                if (!prometheus.process.isAlive()) {
                    fail("prometheus exited with code " + prometheus.process.exitValue() + "; log:\n" + prometheus.log());
                }
                return Optional.empty();
            });

            // Training done: from here on the endpoint's numbers are final (the example lingers serving them).
            awaitExampleLog(Pattern.compile("serving .*/metrics for"), Duration.ofSeconds(120));
            String log = exampleLog();
            steps = Long.parseLong(find(log, "trained (\\d+) steps"));
            examples = Long.parseLong(find(log, "trained \\d+ steps, (\\d+) examples"));
            parameters = Long.parseLong(find(log, "(\\d+) parameters"));
            direct = ExpositionSample.parse(get(metricsUrl));

            // Wait until Prometheus has scraped the final numbers: its total equals the endpoint's.
            double expected = sumOf("symmem_allreduce_duration_seconds_count");
            assertTrue(expected > 0, "the endpoint reports no all-reduce at all:\n" + log);
            await("prometheus to hold sum(symmem_allreduce_duration_seconds_count{" + EXAMPLE + "}) == " + expected,
                    Duration.ofSeconds(30), () -> value("sum(symmem_allreduce_duration_seconds_count{" + EXAMPLE + "})")
                            .filter(v -> v == expected));
            await("prometheus to hold the in-process pipeline's " + pipelineExamples + " examples", Duration.ofSeconds(30),
                    () -> value("sum(symmem_pipeline_examples_total{application=\"" + PIPELINE_APPLICATION + "\"})")
                            .filter(v -> v == pipelineExamples));
            System.out.println("prometheus holds the final all-reduce count " + expected + " after "
                    + Duration.ofNanos(System.nanoTime() - started).toMillis() + " ms (steps=" + steps + ", parameters="
                    + parameters + ")");
        } catch (Throwable t) {
            try {
                stop();
            } catch (Throwable s) {
                t.addSuppressed(s);
            }
            throw t;
        }
    }

    @AfterAll
    void stop() throws IOException, InterruptedException {
        if (inProcessEndpoint != null) {
            inProcessEndpoint.close();
            inProcessEndpoint = null;
        }
        if (example != null) {
            example.destroyForcibly();
            example.waitFor(10, TimeUnit.SECONDS);
            example = null;
        }
        if (prometheus != null) {
            prometheus.close();
            prometheus = null;
        }
        if (tmp != null) {
            try (Stream<Path> files = Files.walk(tmp)) {
                for (Path p : files.sorted(Comparator.reverseOrder()).toList()) {
                    Files.deleteIfExists(p);
                }
            }
            tmp = null;
        }
    }

    /** Every worker's step is counted once, every all-reduce moves its bucket's bytes: exact numbers. */
    @Test
    void prometheusHoldsTheFinalCounts() throws Exception {
        assumePrometheus();
        long syncs = steps * WORKERS; // one gradient sync per worker per step
        assertEquals((double) syncs, scalar("sum(symmem_gradsync_sync_duration_seconds_count{" + EXAMPLE + "})").orElseThrow(),
                "sync count = steps=" + steps + " x workers=" + WORKERS);
        assertEquals((double) syncs, scalar("sum(symmem_gradsync_step_duration_seconds_count{" + EXAMPLE + "})").orElseThrow(),
                "step count = steps=" + steps + " x workers=" + WORKERS);

        double allReduces = scalar("sum(symmem_allreduce_duration_seconds_count{" + EXAMPLE + "})").orElseThrow();
        assertEquals(sumOf("symmem_allreduce_duration_seconds_count"), allReduces, "all-reduce count vs the endpoint");
        assertEquals(allReduces, scalar("sum(symmem_allreduce_bytes_count{" + EXAMPLE + "})").orElseThrow(),
                "one bytes observation per all-reduce");
        assertTrue(allReduces >= syncs, "at least one bucket per sync: allReduces=" + allReduces + " syncs=" + syncs);

        // The buckets partition the flat gradient, so every sync moves exactly parameters x 4 bytes.
        double bytes = scalar("sum(symmem_allreduce_bytes_sum{" + EXAMPLE + "})").orElseThrow();
        assertEquals((double) syncs * parameters * FLOAT32_BYTES, bytes,
                "bytes = syncs=" + syncs + " x parameters=" + parameters + " x " + FLOAT32_BYTES + " bytes");
        assertEquals(sumOf("symmem_allreduce_bytes_sum"), bytes, "bytes vs the endpoint");

        // step-level counters: once per step, not per worker
        assertEquals((double) steps, scalar("sum(symmem_gradsync_steps_total{" + EXAMPLE + "})").orElseThrow(), "steps");
        assertEquals((double) examples, scalar("sum(symmem_gradsync_examples_total{" + EXAMPLE + "})").orElseThrow(),
                "examples the example printed");
        assertEquals(0.0, scalar("sum(symmem_gradsync_skipped_steps_total{" + EXAMPLE + "})").orElseThrow(), "skipped");
        assertEquals(0.0, scalar("sum(symmem_gradsync_failures_total{" + EXAMPLE + "})").orElseThrow(), "failures");
        assertEquals((double) steps, scalar("sum(symmem_gradsync_step_bytes_count{" + EXAMPLE + "})").orElseThrow());
        assertEquals((double) steps * parameters * FLOAT32_BYTES,
                scalar("sum(symmem_gradsync_step_bytes_sum{" + EXAMPLE + "})").orElseThrow(),
                "bytes per step = parameters x 4, once per step");
    }

    /** Each worker's compute and sync series carries its worker tag and one sample per step. */
    @Test
    void perWorkerSeries() throws Exception {
        assumePrometheus();
        for (String meter : List.of("symmem_gradsync_worker_compute_seconds_count", "symmem_gradsync_worker_sync_seconds_count")) {
            Map<String, Double> byWorker = new TreeMap<>();
            for (PrometheusServer.Sample s : query(meter + "{" + EXAMPLE + "}")) {
                byWorker.put(s.label("worker"), s.value());
            }
            assertEquals(Map.of("0", (double) steps, "1", (double) steps), byWorker, meter + " per worker");
        }
    }

    /**
     * The in-process probe's 8 µs and 750 µs all-reduces, read back through Prometheus'
     * histogram_quantile: a few microseconds apart from a sub-millisecond series (with Micrometer's
     * default range, whose lowest bucket is 1 ms, both read 500 µs).
     */
    @Test
    void knownLatenciesReadBackThroughHistogramQuantile() throws Exception {
        assumePrometheus();
        String buckets = "sum by (le) (symmem_allreduce_duration_seconds_bucket{application=\"" + LATENCY_PROBE
                + "\",algorithm=\"%s\"})";
        double fastP50 = scalar("histogram_quantile(0.5, " + buckets.formatted("ONE_SHOT") + ")").orElseThrow();
        double fastP99 = scalar("histogram_quantile(0.99, " + buckets.formatted("ONE_SHOT") + ")").orElseThrow();
        double slowP50 = scalar("histogram_quantile(0.5, " + buckets.formatted("TWO_SHOT") + ")").orElseThrow();
        double slowP99 = scalar("histogram_quantile(0.99, " + buckets.formatted("TWO_SHOT") + ")").orElseThrow();
        assertTrue(fastP50 >= 6e-6 && fastP99 <= 10e-6, "8 us series: p50=" + fastP50 + " p99=" + fastP99 + " s");
        assertTrue(slowP50 >= 600e-6 && slowP99 <= 900e-6, "750 us series: p50=" + slowP50 + " p99=" + slowP99 + " s");
    }

    /**
     * The series carry the algorithm that ran, the transport and the example's application tag, and
     * Prometheus' own job label (the scrape job) stands untouched beside it: no exported_job.
     */
    @Test
    void seriesCarryAlgorithmTransportAndApplication() throws Exception {
        assumePrometheus();
        List<PrometheusServer.Sample> series =
                prometheus.query("symmem_allreduce_duration_seconds_count{transport=\"" + TRANSPORT + "\"," + EXAMPLE + "}");
        assertFalse(series.isEmpty(), "no symmem_allreduce_duration_seconds_count{transport=\"" + TRANSPORT + "\"," + EXAMPLE + "}");
        Set<String> algorithmNames = Arrays.stream(Algorithm.values()).map(Enum::name).collect(Collectors.toSet());
        for (PrometheusServer.Sample s : series) {
            assertTrue(algorithmNames.contains(s.label("algorithm")), "algorithm label " + s.labels());
            assertNotNull(s.label("size_class"), "size_class label " + s.labels());
            assertEquals(APPLICATION, s.label("application"), "application label " + s.labels());
            assertEquals(PrometheusServer.JOB, s.label("job"), "Prometheus' own job label " + s.labels());
            assertFalse(s.labels().containsKey("exported_job"), "nothing renamed: " + s.labels());
        }

        // The algorithms that actually ran, per Prometheus and per the endpoint, with their counts.
        Map<String, Double> used = new TreeMap<>();
        for (PrometheusServer.Sample s : prometheus.query("sum by (algorithm) (symmem_allreduce_duration_seconds_count{"
                + "transport=\"" + TRANSPORT + "\"," + EXAMPLE + "}) > 0")) {
            used.put(s.label("algorithm"), s.value());
        }
        Map<String, Double> expected = new TreeMap<>();
        for (ExpositionSample s : direct) {
            if (s.name().equals("symmem_allreduce_duration_seconds_count") && s.value() > 0) {
                expected.merge(s.labels().get("algorithm"), s.value(), Double::sum);
            }
        }
        System.out.println("all-reduces per algorithm: prometheus " + used + ", endpoint " + expected);
        assertFalse(used.isEmpty(), "no algorithm with a non-zero count");
        assertEquals(expected, used, "all-reduces per algorithm: prometheus vs the endpoint");
        assertFalse(used.containsKey(Algorithm.NCCL.name()), "NCCL cannot run on the host transport: " + used);
    }

    /** histogram_quantile over the scraped buckets: finite, ordered, and inside the buckets' range. */
    @Test
    void quantilesFromBuckets() throws Exception {
        assumePrometheus();
        String buckets = "sum by (le) (symmem_allreduce_duration_seconds_bucket{transport=\"" + TRANSPORT + "\"," + EXAMPLE + "})";
        double p50 = scalar("histogram_quantile(0.5, " + buckets + ")").orElseThrow();
        double p99 = scalar("histogram_quantile(0.99, " + buckets + ")").orElseThrow();
        // The smallest bucket bound that holds every observation: no quantile can lie above it.
        double total = sumOf("symmem_allreduce_duration_seconds_count");
        Map<Double, Double> cumulative = new TreeMap<>();
        for (ExpositionSample s : direct) {
            if (s.name().equals("symmem_allreduce_duration_seconds_bucket")) {
                cumulative.merge(PrometheusServer.parseValue(s.labels().get("le")), s.value(), Double::sum);
            }
        }
        double bound = cumulative.entrySet().stream().filter(e -> e.getValue() == total)
                .mapToDouble(Map.Entry::getKey).min().orElseThrow();
        assertTrue(p50 > 0 && p50 <= p99 && p99 <= bound,
                "expected 0 < p50 <= p99 <= " + bound + " s, found p50=" + p50 + " p99=" + p99);
    }

    /** The cumulative sync share gauge: a ratio in (0, 1), equal to the endpoint's value. */
    @Test
    void syncShareGauge() throws Exception {
        assumePrometheus();
        double share = scalar("symmem_gradsync_sync_share_ratio{transport=\"" + TRANSPORT + "\"," + EXAMPLE + "}")
                .orElseThrow();
        assertTrue(share > 0 && share < 1, "sync share " + share + " must lie in (0, 1)");
        assertEquals(sumOf("symmem_gradsync_sync_share_ratio"), share, 1e-12, "sync share vs the endpoint");
    }

    /**
     * Every query of the Grafana dashboard, with its variables filled in as Grafana would (the
     * application variable set to the example and the in-process pipeline), parses and returns at
     * least one series (so no metric or label name in it is misspelled). rate() needs two samples in
     * its window, hence the polling.
     */
    @Test
    void dashboardQueriesReturnSeries() throws Exception {
        assumePrometheus();
        List<String> queries = GrafanaDashboardTest.queries(GrafanaDashboardTest.readDashboard());
        assertTrue(queries.size() >= 20, "expected the dashboard's queries, found " + queries);
        String applications = APPLICATION + "|" + PIPELINE_APPLICATION;
        for (String q : queries) {
            String promql = q.replace("$__rate_interval", "1m").replace("$application", applications)
                    .replace("$job", ".+");
            assertFalse(promql.contains("$"), "unsubstituted variable in " + q);
            List<PrometheusServer.Sample> r = await("a non-empty result for dashboard query " + promql,
                    Duration.ofSeconds(20), () -> {
                        List<PrometheusServer.Sample> x = query(promql);
                        return x.isEmpty() ? Optional.empty() : Optional.of(x);
                    });
            System.out.println("dashboard query " + promql + " -> " + r.size() + " series");
        }
        // the application variable: label_values(SELECTOR, application) lists both applications
        Map<String, Object> variable = GrafanaDashboardTest.variable(GrafanaDashboardTest.readDashboard(), "application");
        Matcher selector = Pattern.compile("label_values\\((.+), application\\)")
                .matcher(((String) variable.get("definition")).replace("$job", ".+"));
        assertTrue(selector.matches(), "variable definition " + variable.get("definition"));
        Set<String> listed = new TreeSet<>();
        for (PrometheusServer.Sample s : query("count by (application) (" + selector.group(1) + ")")) {
            listed.add(s.label("application"));
        }
        assertTrue(listed.containsAll(Set.of(APPLICATION, PIPELINE_APPLICATION)), "the variable lists " + listed);
    }

    // ---------------------------------------------------------------------------------------------

    private void assumePrometheus() {
        Assumptions.assumeTrue(skipReason == null, skipReason);
    }

    static boolean prometheusRequired() {
        String env = System.getenv("SYMMEM4J_REQUIRE_PROMETHEUS");
        return Boolean.getBoolean("symmem4j.requirePrometheus")
                || (env != null && !env.isBlank() && !env.equals("0") && !env.equalsIgnoreCase("false"));
    }

    private static Process startExample(Path log) throws IOException {
        List<String> cmd = LaunchedJvm.command(List.of("-Xmx512m"), DataParallelExample.class, List.of("--port", "0",
                "--workers", Integer.toString(WORKERS), "--epochs", "1", "--linger-seconds", "60"));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    }

    private String exampleLog() {
        try {
            return Files.readString(exampleLog);
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }

    /** Waits for the example's output to match {@code pattern}; fails at the deadline or if the example exits. */
    private Matcher awaitExampleLog(Pattern pattern, Duration timeout) throws InterruptedException {
        return await("example output matching /" + pattern + "/", timeout, () -> {
            Matcher m = pattern.matcher(exampleLog());
            if (m.find()) {
                return Optional.of(m);
            }
            if (!example.isAlive()) {
                fail("example exited with code " + example.exitValue() + " before printing /" + pattern + "/; output:\n"
                        + exampleLog());
            }
            return Optional.empty();
        });
    }

    private interface Probe<T> {
        Optional<T> poll() throws Exception;
    }

    /** Polls {@code probe} every 100 ms until it yields a value; fails with diagnostics at the deadline. */
    private <T> T await(String what, Duration timeout, Probe<T> probe) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last = null;
        while (true) {
            try {
                Optional<T> v = probe.poll();
                if (v.isPresent()) {
                    return v.get();
                }
            } catch (InterruptedException e) {
                throw e;
            } catch (Exception e) {
                last = e;
            }
            if (System.nanoTime() - deadline > 0) {
                break;
            }
            Thread.sleep(100);
        }
        return fail("timed out after " + timeout.toSeconds() + " s waiting for " + what
                + (last == null ? "" : "; last error: " + last) + diagnostics());
    }

    private String diagnostics() {
        return "\n--- example output ---\n" + exampleLog()
                + (prometheus == null ? "" : "\n--- prometheus log ---\n" + prometheus.log());
    }

    private List<PrometheusServer.Sample> query(String promql) throws IOException, InterruptedException {
        return prometheus.query(promql);
    }

    /** The single value of a query expected to return at most one series; empty when it returns none. */
    private Optional<Double> scalar(String promql) throws IOException, InterruptedException {
        Optional<Double> v = value(promql);
        System.out.println("query " + promql + " -> " + v.map(String::valueOf).orElse("<empty>"));
        return v;
    }

    /** {@link #scalar} without the log line, for polling. */
    private Optional<Double> value(String promql) throws IOException, InterruptedException {
        List<PrometheusServer.Sample> r = prometheus.query(promql);
        if (r.size() > 1) {
            throw new IllegalStateException("expected at most one series for " + promql + ", found " + r);
        }
        return r.stream().findFirst().map(PrometheusServer.Sample::value);
    }

    /** Sum of every series of {@code name} in the direct scrape of the endpoint. */
    private double sumOf(String name) {
        return direct.stream().filter(s -> s.name().equals(name)).mapToDouble(ExpositionSample::value).sum();
    }

    private static String find(String text, String regex) {
        Matcher m = Pattern.compile(regex).matcher(text);
        if (!m.find()) {
            throw new AssertionError("expected /" + regex + "/ in the example's output:\n" + text);
        }
        return m.group(1);
    }

    private static String get(String url) throws IOException, InterruptedException {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), "GET " + url);
        return r.body();
    }

    /** One line of Prometheus' text exposition format: {@code name{label="value",...} value}. */
    record ExpositionSample(String name, Map<String, String> labels, double value) {
        private static final Pattern LINE = Pattern.compile("^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\\{(.*)\\})?\\s+(\\S+)(?:\\s+\\S+)?$");
        private static final Pattern LABEL = Pattern.compile("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\"");

        static List<ExpositionSample> parse(String text) {
            List<ExpositionSample> out = new ArrayList<>();
            for (String line : text.lines().toList()) {
                if (line.isBlank() || line.startsWith("#")) {
                    continue;
                }
                Matcher m = LINE.matcher(line);
                if (!m.matches()) {
                    throw new IllegalStateException("unparsable exposition line: " + line);
                }
                Map<String, String> labels = new LinkedHashMap<>();
                if (m.group(2) != null) {
                    Matcher l = LABEL.matcher(m.group(2));
                    while (l.find()) {
                        labels.put(l.group(1), l.group(2));
                    }
                }
                out.add(new ExpositionSample(m.group(1), Map.copyOf(labels), PrometheusServer.parseValue(m.group(3))));
            }
            Set<String> names = out.stream().map(ExpositionSample::name).collect(Collectors.toCollection(TreeSet::new));
            if (!names.contains("symmem_allreduce_duration_seconds_count")) {
                throw new IllegalStateException("no symmem_allreduce_duration_seconds_count in the scrape; names=" + names);
            }
            return List.copyOf(out);
        }
    }
}
