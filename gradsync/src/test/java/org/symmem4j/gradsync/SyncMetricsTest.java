package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.BuildInfo;

/** What {@link SyncMetrics} puts into a Prometheus scrape: names, units, tags, and histograms that resolve microseconds. */
class SyncMetricsTest {

    /**
     * An 8 µs and a 750 µs all-reduce series, read back from the Prometheus histogram as Prometheus'
     * {@code histogram_quantile} computes it (linear inside the bucket that holds the rank). With
     * Micrometer's default range (first bucket 1 ms) both came out as p50 = 500 µs, p99 = 990 µs.
     */
    @Test
    void prometheusQuantilesTellEightMicrosecondsFromSevenHundredFifty() {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        SyncMetrics metrics = new SyncMetrics("host-in-jvm");
        metrics.bindTo(registry);
        for (int i = 0; i < 1000; i++) {
            metrics.recordAllReduce(Algorithm.ONE_SHOT, 4096, 8_000);
            metrics.recordAllReduce(Algorithm.TWO_SHOT, 1 << 20, 750_000);
        }
        String scrape = registry.scrape();
        Map<Double, Double> oneShot = buckets(scrape, "symmem_allreduce_duration_seconds_bucket", "ONE_SHOT");
        Map<Double, Double> twoShot = buckets(scrape, "symmem_allreduce_duration_seconds_bucket", "TWO_SHOT");
        double p50fast = histogramQuantile(0.5, oneShot);
        double p99fast = histogramQuantile(0.99, oneShot);
        double p50slow = histogramQuantile(0.5, twoShot);
        double p99slow = histogramQuantile(0.99, twoShot);
        System.out.printf("8 us series: p50=%.2f us p99=%.2f us; 750 us series: p50=%.1f us p99=%.1f us%n",
                p50fast * 1e6, p99fast * 1e6, p50slow * 1e6, p99slow * 1e6);
        // every sample of a series lies in one bucket, whose bounds are within ~25 % of the value
        assertTrue(p50fast >= 6e-6 && p99fast <= 10e-6, "8 us series: p50=" + p50fast + " p99=" + p99fast + " s");
        assertTrue(p50slow >= 600e-6 && p99slow <= 900e-6, "750 us series: p50=" + p50slow + " p99=" + p99slow + " s");
        double lowest = oneShot.keySet().stream().mapToDouble(Double::doubleValue).min().orElseThrow();
        double highestFinite = oneShot.keySet().stream().filter(Double::isFinite).mapToDouble(Double::doubleValue).max()
                .orElseThrow();
        assertEquals(SyncMetrics.LATENCY_MIN.toNanos() / 1e9, lowest, 1e-12, "lowest bucket bound");
        assertEquals(SyncMetrics.LATENCY_MAX.toNanos() / 1e9, highestFinite, 1e-9, "highest finite bucket bound");
    }

    /** The step-level meters under the names the README and the Grafana board use. */
    @Test
    void stepCountersGaugesAndPerWorkerTimersInTheScrape() {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        SyncMetrics metrics = new SyncMetrics("host-in-jvm", Tags.of("application", "unit"));
        metrics.bindTo(registry);
        // two steps of two workers: worker 1 computes longer (the straggler), worker 0 waits for it in sync
        for (int step = 0; step < 2; step++) {
            metrics.recordWorkerStep(0, 10_000_000, 6_000_000);
            metrics.recordWorkerStep(1, 10_000_000, 1_000_000);
        }
        metrics.recordStep(128, 4000, 10_000_000, 0.75, false);
        metrics.recordStep(64, 4000, 20_000_000, Double.NaN, true);
        metrics.recordFailure(SyncMetrics.FailureReason.TIMEOUT);
        String scrape = registry.scrape();

        assertEquals(2.0, value(scrape, "symmem_gradsync_steps_total", ""));
        assertEquals(192.0, value(scrape, "symmem_gradsync_examples_total", ""));
        assertEquals(1.0, value(scrape, "symmem_gradsync_skipped_steps_total", ""));
        assertEquals(1.0, value(scrape, "symmem_gradsync_failures_total", "reason=\"timeout\""));
        assertEquals(0.0, value(scrape, "symmem_gradsync_failures_total", "reason=\"non_finite\""));
        assertEquals(0.0, value(scrape, "symmem_gradsync_failures_total", "reason=\"error\""));
        assertEquals(2.0, value(scrape, "symmem_gradsync_step_bytes_count", ""));
        assertEquals(8000.0, value(scrape, "symmem_gradsync_step_bytes_sum", ""));
        assertEquals(64 / 0.02, value(scrape, "symmem_gradsync_throughput_examples_per_second", ""), 1e-9,
                "the last step: 64 examples in 20 ms");
        assertTrue(Double.isNaN(value(scrape, "symmem_gradsync_loss", "")), "the last step's loss (NaN)");
        assertEquals(0.35, value(scrape, "symmem_gradsync_sync_share_ratio", ""), 1e-12, "(6+1+6+1) / 40 ms");
        assertEquals(4.0, value(scrape, "symmem_gradsync_step_duration_seconds_count", ""), "two workers x two steps");
        assertEquals(0.018, value(scrape, "symmem_gradsync_worker_compute_seconds_sum", "worker=\"1\""), 1e-12);
        assertEquals(0.008, value(scrape, "symmem_gradsync_worker_compute_seconds_sum", "worker=\"0\""), 1e-12);
        assertEquals(0.012, value(scrape, "symmem_gradsync_worker_sync_seconds_sum", "worker=\"0\""), 1e-12);
        assertEquals(2.0, value(scrape, "symmem_gradsync_worker_sync_seconds_count", "worker=\"1\""));
        for (String line : scrape.lines().filter(l -> l.startsWith("symmem_")).toList()) {
            assertTrue(line.contains("application=\"unit\"") && line.contains("transport=\"host-in-jvm\""),
                    "extra and transport tags on every series: " + line);
            assertTrue(!line.contains("worker=") || line.startsWith("symmem_gradsync_worker_"),
                    "only the per-worker timers carry the worker tag: " + line);
            assertTrue(!line.contains("worker=") || !line.contains("_bucket"), "per-worker timers have no histogram: " + line);
        }
    }

    /** A binder may serve several registries; each gets every sample. */
    @Test
    void bindsToSeveralRegistries() {
        SimpleMeterRegistry a = new SimpleMeterRegistry();
        SimpleMeterRegistry b = new SimpleMeterRegistry();
        SyncMetrics metrics = new SyncMetrics("host-in-jvm");
        metrics.bindTo(a);
        metrics.recordAllReduce(Algorithm.RING, 1 << 20, 5_000);
        metrics.bindTo(b);
        metrics.recordAllReduce(Algorithm.RING, 1 << 20, 5_000);
        metrics.recordStep(10, 100, 1_000, 0.5, false);
        assertEquals(2, a.get("symmem.allreduce.duration").timer().count());
        assertEquals(1, b.get("symmem.allreduce.duration").timer().count(), "only what came after binding");
        assertEquals(1.0, a.get("symmem.gradsync.steps").counter().count());
        assertEquals(1.0, b.get("symmem.gradsync.steps").counter().count());
        assertEquals(5_000, b.get("symmem.allreduce.duration").timer().totalTime(TimeUnit.NANOSECONDS), 1e-9);
    }

    /**
     * The registry outlives the binder (the example serves its metrics after the wrapper closed): the
     * gauges keep the last values after the binder is garbage-collected, instead of turning into NaN.
     */
    @Test
    void gaugesOutliveTheBinder() throws InterruptedException {
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        SyncMetrics metrics = new SyncMetrics("host-in-jvm");
        metrics.bindTo(registry);
        metrics.recordWorkerStep(0, 4_000_000, 1_000_000);
        metrics.recordStep(32, 100, 4_000_000, 0.5, false);
        java.lang.ref.WeakReference<SyncMetrics> binder = new java.lang.ref.WeakReference<>(metrics);
        metrics = null;
        for (int i = 0; i < 20 && binder.get() != null; i++) {
            System.gc();
            Thread.sleep(10);
        }
        assertEquals(null, binder.get(), "the binder was collected");
        assertEquals(0.25, registry.get("symmem.gradsync.sync.share").gauge().value(), 1e-12);
        assertEquals(0.5, registry.get("symmem.gradsync.loss").gauge().value());
        assertEquals(8000.0, registry.get("symmem.gradsync.throughput").gauge().value(), 1e-9);
    }

    // ---------------------------------------------------------------------------------------------

    /**
     * {@code symmem4j_build_info} carries this build's version, commit and Java runtime with the value 1,
     * once, although both a sync binder with extra tags and one without register it.
     */
    @Test
    void buildInfoGaugeIsOneSeriesWithVersionCommitAndJava() {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        new SyncMetrics("host-in-jvm", Tags.of("application", "unit")).bindTo(registry);
        new SyncMetrics("host-processes", Tags.of("application", "unit")).bindTo(registry);
        BuildInfo build = BuildInfo.current();
        assertTrue(build.version().matches("\\d+\\.\\d+\\.\\d+.*"), "version from build-info.properties: " + build);
        assertTrue(build.commit().matches("[0-9a-f]{12}(-dirty)?|unknown"), "commit: " + build);
        List<String> lines = registry.scrape().lines().filter(l -> l.startsWith("symmem4j_build_info")).toList();
        assertEquals(1, lines.size(), "one build-info series: " + lines);
        String line = lines.get(0);
        assertTrue(line.contains("version=\"" + build.version() + "\""), line);
        assertTrue(line.contains("commit=\"" + build.commit() + "\""), line);
        assertTrue(line.contains("java=\"" + System.getProperty("java.runtime.version") + "\""), line);
        assertEquals(1.0, Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1)), line);
    }

    private static final Pattern SAMPLE = Pattern.compile("^([a-zA-Z_:][a-zA-Z0-9_:]*)\\{([^}]*)\\}\\s+(\\S+)$");
    private static final Pattern LE = Pattern.compile("le=\"([^\"]+)\"");

    /** Cumulative counts by upper bound of the bucket series {@code name} whose algorithm is {@code algorithm}. */
    private static Map<Double, Double> buckets(String scrape, String name, String algorithm) {
        Map<Double, Double> out = new TreeMap<>();
        for (String line : scrape.lines().toList()) {
            Matcher m = SAMPLE.matcher(line);
            if (m.matches() && m.group(1).equals(name) && m.group(2).contains("algorithm=\"" + algorithm + "\"")) {
                Matcher le = LE.matcher(m.group(2));
                assertTrue(le.find(), line);
                out.put(le.group(1).equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(le.group(1)),
                        Double.parseDouble(m.group(3)));
            }
        }
        assertTrue(out.size() > 2, "no buckets of " + name + "{algorithm=" + algorithm + "} in\n" + scrape);
        return out;
    }

    /**
     * Prometheus' {@code histogram_quantile}: the bucket that holds rank q x count, and a linear
     * interpolation between its bounds (the first bucket's lower bound is 0).
     */
    static double histogramQuantile(double q, Map<Double, Double> cumulative) {
        List<Map.Entry<Double, Double>> b = new ArrayList<>(new TreeMap<>(cumulative).entrySet());
        double total = b.getLast().getValue();
        double rank = q * total;
        double lowerBound = 0;
        double lowerCount = 0;
        for (Map.Entry<Double, Double> e : b) {
            if (e.getValue() >= rank) {
                if (e.getKey().isInfinite()) {
                    return lowerBound; // Prometheus answers the highest finite bound
                }
                return lowerBound + (e.getKey() - lowerBound) * (rank - lowerCount) / (e.getValue() - lowerCount);
            }
            lowerBound = e.getKey();
            lowerCount = e.getValue();
        }
        throw new IllegalStateException("rank " + rank + " beyond the buckets " + cumulative);
    }

    /** The one sample of {@code name} whose labels contain {@code labelFragment}. */
    private static double value(String scrape, String name, String labelFragment) {
        List<Double> found = new ArrayList<>();
        for (String line : scrape.lines().toList()) {
            Matcher m = SAMPLE.matcher(line);
            if (m.matches() && m.group(1).equals(name) && m.group(2).contains(labelFragment)) {
                found.add(Double.parseDouble(m.group(3)));
            }
        }
        assertEquals(1, found.size(), "samples of " + name + "{" + labelFragment + "} in\n" + scrape);
        return found.getFirst();
    }
}
