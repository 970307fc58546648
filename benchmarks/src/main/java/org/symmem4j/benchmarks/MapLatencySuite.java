package org.symmem4j.benchmarks;

import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Locale;

import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.util.Statistics;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The hash map's latency tail at 2 processes in one run: {@link MapBenchmark}'s {@code get} and {@code put} in JMH's
 * sample-time mode (every sampled call timed), symmem4j's {@link org.symmem4j.state.SymmetricHashMap} against
 * Chronicle Map persisted to a file in {@code /dev/shm}, both mapped by two JVMs: the JMH fork (rank 0) measures while
 * the other JVM ({@link BenchPeer}) runs 50 % gets and 50 % puts of random keys on the same map. Then one table: per
 * operation and map, the samples, p50, p90, p99, p99.9 in µs, the forks' p99 (lowest–highest), and symmem4j's p99
 * over Chronicle Map's, with a verdict line per operation (the p99s, and whether every fork of one is below every
 * fork of the other). JMH's JSON goes to {@code --out}/map-latency.json, the table to standard output and
 * {@code --out}/map-latency-summary.md.
 *
 * <pre>
 *   MapLatencySuite [--out DIR] [--forks 3] [--warmups 2] [--iterations 3] [--with-floor]
 * </pre>
 *
 * Trials: 2 operations × 2 maps (3 with {@code --with-floor}, {@code ConcurrentHashMap} in one JVM with a load
 * thread), each {@code forks × (warmups + iterations)} s plus ~2 s per fork to start the JVMs and fill the map: the
 * defaults take ~2 min (~3.5 min on a loaded 2-core machine).
 */
public final class MapLatencySuite {

    private MapLatencySuite() {
    }

    @Command(name = "MapLatencySuite", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Hash map get/put latency percentiles at 2 processes: symmem4j's"
                    + " SymmetricHashMap against Chronicle Map in one run, one table.")
    static final class Flags extends JmhSuiteFlags {
        @Option(names = "--with-floor", description = "also ConcurrentHashMap in one JVM (the floor)")
        boolean withFloor;
    }

    static final double[] PERCENTILES = {50, 90, 99, 99.9};

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            flags.checkCounts();
            return flags;
        });
        Files.createDirectories(f.out);
        List<SharedMapPair.Kind> kinds = new ArrayList<>(List.of(SharedMapPair.Kind.SYMMEM,
                SharedMapPair.Kind.CHRONICLE));
        if (f.withFloor) {
            kinds.add(SharedMapPair.Kind.CONCURRENT_HASH_MAP);
        }
        Collection<RunResult> results = new Runner(f.timing(new OptionsBuilder()
                .include(MapBenchmark.class.getName() + "\\.(get|put)$")
                .mode(Mode.SampleTime)
                .param("kind", kinds.stream().map(Enum::name).toArray(String[]::new))
                .param("processes", "2")
                .resultFormat(ResultFormatType.JSON).result(f.out.resolve("map-latency.json").toString()))
                .build()).run();
        String table = table(results, kinds, f);
        System.out.print(table);
        Files.writeString(f.out.resolve("map-latency-summary.md"), table);
    }

    private static RunResult find(Collection<RunResult> results, String op, SharedMapPair.Kind kind) {
        for (RunResult r : results) {
            if (r.getParams().getBenchmark().endsWith("." + op) && r.getParams().getParam("kind").equals(kind.name())) {
                return r;
            }
        }
        return null;
    }

    static String table(Collection<RunResult> results, List<SharedMapPair.Kind> kinds, Flags f) {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "%n## Hash map latency, 2 processes on one map: symmem4j and Chronicle"
                        + " Map in one run%n%n%d forks per trial, %d warm-up + %d measured iterations of 1 s; the other"
                        + " JVM runs 50 %% gets / 50 %% puts of random keys (of %d, %d-byte values) meanwhile;"
                        + " µs per call%n%n", f.forks, f.warmups, f.iterations, SharedMapPair.KEYS,
                SharedMapPair.VALUE_BYTES));
        sb.append("| op | map | samples | p50 | p90 | p99 | p99.9 | forks' p99, lowest–highest | symmem4j p99 / it |\n"
                + "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
        List<String> verdicts = new ArrayList<>();
        for (String op : List.of("get", "put")) {
            RunResult ours = find(results, op, SharedMapPair.Kind.SYMMEM);
            for (SharedMapPair.Kind kind : kinds) {
                RunResult r = find(results, op, kind);
                if (r == null) {
                    continue;
                }
                Statistics s = r.getPrimaryResult().getStatistics();
                double[] p99s = forkPercentiles(r, 99);
                sb.append(String.format(Locale.ROOT, "| %s | %s | %d |", op, name(kind), s.getN()));
                for (double p : PERCENTILES) {
                    sb.append(String.format(Locale.ROOT, " %.3f |", s.getPercentile(p)));
                }
                sb.append(String.format(Locale.ROOT, " %s | %s |%n", p99s.length < 2 ? "1 fork"
                                : String.format(Locale.ROOT, "%.3f–%.3f", min(p99s), max(p99s)),
                        ours == null || kind == SharedMapPair.Kind.SYMMEM ? ""
                                : String.format(Locale.ROOT, "%.2f", p(ours, 99) / s.getPercentile(99))));
                if (ours != null && kind == SharedMapPair.Kind.CHRONICLE) {
                    double[] o = forkPercentiles(ours, 99);
                    boolean below = o.length > 1 && max(o) < min(p99s);
                    boolean above = o.length > 1 && min(o) > max(p99s);
                    verdicts.add(String.format(Locale.ROOT, "- %s p99: symmem4j %.3f µs, Chronicle Map %.3f µs (%.2f ×;"
                                    + " p50 %.3f against %.3f): %s", op, p(ours, 99), s.getPercentile(99),
                            p(ours, 99) / s.getPercentile(99), p(ours, 50), s.getPercentile(50),
                            below ? "every fork of symmem4j below every fork of Chronicle Map"
                                    : above ? "every fork of symmem4j above every fork of Chronicle Map"
                                    : "the forks' p99 ranges overlap (or one fork)"));
                }
            }
        }
        sb.append('\n').append(String.join("\n", verdicts)).append('\n');
        return sb.toString();
    }

    private static String name(SharedMapPair.Kind kind) {
        return switch (kind) {
            case SYMMEM -> "symmem4j SymmetricHashMap";
            case CHRONICLE -> "Chronicle Map (/dev/shm)";
            case CONCURRENT_HASH_MAP -> "ConcurrentHashMap, 1 JVM (floor)";
        };
    }

    private static double p(RunResult r, double percentile) {
        return r.getPrimaryResult().getStatistics().getPercentile(percentile);
    }

    /** Each fork's percentile of its own samples. */
    static double[] forkPercentiles(RunResult r, double percentile) {
        return r.getBenchmarkResults().stream().mapToDouble((BenchmarkResult fork) -> fork.getPrimaryResult()
                .getStatistics().getPercentile(percentile)).toArray();
    }

    private static double min(double[] v) {
        return Arrays.stream(v).min().orElse(Double.NaN);
    }

    private static double max(double[] v) {
        return Arrays.stream(v).max().orElse(Double.NaN);
    }
}
