package org.symmem4j.benchmarks;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.Result;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Issue #33's ring comparison in one run: {@link RingBenchmark} for symmem4j's rings, Agrona's and Aeron IPC, 2
 * processes on one host, then one table of all three side by side. Three JMH runs:
 * <ol>
 *   <li>throughput of the one-to-one kinds (the target) with {@code --forks} forks, so that the error bar
 *       holds the fork-to-fork spread (the table also gives the lowest and highest fork's mean);</li>
 *   <li>throughput of the many-to-one kinds with {@code --other-forks};</li>
 *   <li>round trip (p50, p99) of every kind with {@code --other-forks}: a fork samples millions of round trips.</li>
 * </ol>
 * The JVM's own flags (e.g. {@code -Dsymmem4j.bench.cpus}, see {@link BenchCpus}) reach the forks and their peers.
 * JMH's JSON goes to {@code --out}: ring-throughput-one-to-one.json, ring-throughput-many-to-one.json,
 * ring-round-trip.json; the table to standard output and {@code --out}/ring-summary.md.
 *
 * <pre>
 *   RingSuite [--out DIR] [--forks 3] [--other-forks 1] [--warmups 2] [--iterations 4] [--sizes 64,4096]
 *             [--kinds SYMMEM_ONE_TO_ONE,SYMMEM_ONE_TO_ONE_CLAIM,...] [--no-many-to-one] [--round-trip-only]
 * </pre>
 *
 * With {@code --round-trip-only} only the third run is made (its forks {@code --other-forks}): a p50 comparison of a
 * few kinds over several forks fits one device call that way, e.g. {@code --kinds SYMMEM_ONE_TO_ONE,AGRONA_ONE_TO_ONE
 * --sizes 64 --other-forks 5}.
 */
public final class RingSuite {

    private RingSuite() {
    }

    @Command(name = "RingSuite", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Ring buffers between 2 processes: symmem4j against Agrona and"
                    + " Aeron IPC in one run, throughput and round trip, one summary table.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "DIR", description = "where JMH's JSON and ring-summary.md go")
        Path out = Path.of(".");
        @Option(names = "--forks", paramLabel = "N", description = "forks per one-to-one throughput trial")
        int forks = 3;
        @Option(names = "--other-forks", paramLabel = "N",
                description = "forks per many-to-one throughput trial and per round-trip trial")
        int otherForks = 1;
        @Option(names = "--warmups", paramLabel = "N", description = "warm-up iterations of 1 s per fork")
        int warmups = 2;
        @Option(names = "--iterations", paramLabel = "N", description = "measured iterations of 1 s per fork")
        int iterations = 4;
        @Option(names = "--sizes", paramLabel = "B", split = ",", description = "message bytes")
        int[] sizes = {64, 4096};
        @Option(names = "--no-many-to-one", description = "measure the one-to-one kinds only")
        boolean noManyToOne;
        @Option(names = "--round-trip-only", description = "measure round trips only (no throughput runs), over"
                + " --other-forks forks per kind and size")
        boolean roundTripOnly;
        @Option(names = "--kinds", paramLabel = "KIND", split = ",", description = "the ring kinds to measure"
                + " (RingPair.Kind names; default all: symmem4j offer and tryClaim, Agrona write and tryClaim, Aeron"
                + " IPC, one-to-one and many-to-one)")
        RingPair.Kind[] kinds = RingPair.Kind.values();
    }

    /** One kind at one size: its throughput and round-trip results, either absent when not measured. */
    record Row(RingPair.Kind kind, int bytes, RunResult throughput, RunResult roundTrip) {
    }

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--forks", flags.forks);
            Cli.positive("--other-forks", flags.otherForks);
            Cli.positive("--warmups", flags.warmups);
            Cli.positive("--iterations", flags.iterations);
            for (int b : flags.sizes) {
                if (b < Integer.BYTES || b > RingBenchmark.CAPACITY / 8 - 8) {
                    throw new IllegalArgumentException("--sizes: " + b + " bytes, expected " + Integer.BYTES + ".."
                            + (RingBenchmark.CAPACITY / 8 - 8) + " (fix: pass e.g. --sizes 64,4096)");
                }
            }
            return flags;
        });
        Files.createDirectories(f.out);
        // in the enum's order (the table's), whatever the order on the command line
        List<RingPair.Kind> chosen = Arrays.stream(RingPair.Kind.values()).filter(k -> Arrays.asList(f.kinds).contains(k))
                .toList();
        List<RingPair.Kind> oneToOne = chosen.stream().filter(RingPair.Kind::oneToOne).toList();
        List<RingPair.Kind> manyToOne = f.noManyToOne ? List.of() : chosen.stream().filter(k -> !k.oneToOne()).toList();
        List<RingPair.Kind> all = new ArrayList<>(oneToOne);
        all.addAll(manyToOne);
        if (all.isEmpty()) {
            throw new IllegalArgumentException("--kinds " + Arrays.toString(f.kinds) + " with --no-many-to-one leaves"
                    + " nothing to measure (fix: name a one-to-one kind, or drop --no-many-to-one)");
        }
        List<RunResult> throughput = new ArrayList<>();
        if (!oneToOne.isEmpty() && !f.roundTripOnly) {
            throughput.addAll(run(f, "throughput", oneToOne, f.forks, "ring-throughput-one-to-one"));
        }
        if (!manyToOne.isEmpty() && !f.roundTripOnly) {
            throughput.addAll(run(f, "throughput", manyToOne, f.otherForks, "ring-throughput-many-to-one"));
        }
        Collection<RunResult> roundTrip = run(f, "roundTrip", all, f.otherForks, "ring-round-trip");
        List<Row> rows = new ArrayList<>();
        for (RingPair.Kind kind : all) {
            for (int bytes : f.sizes) {
                rows.add(new Row(kind, bytes, find(throughput, kind, bytes), find(roundTrip, kind, bytes)));
            }
        }
        String table = table(rows, f);
        System.out.print(table);
        Files.writeString(f.out.resolve("ring-summary.md"), table);
    }

    private static Collection<RunResult> run(Flags f, String method, List<RingPair.Kind> kinds, int forks, String file)
            throws RunnerException {
        return new Runner(new OptionsBuilder()
                .include(RingBenchmark.class.getName() + "\\." + method + "$")
                .param("kind", kinds.stream().map(Enum::name).toArray(String[]::new))
                .param("messageBytes", Arrays.stream(f.sizes).mapToObj(Integer::toString).toArray(String[]::new))
                .warmupIterations(f.warmups).warmupTime(TimeValue.seconds(1))
                .measurementIterations(f.iterations).measurementTime(TimeValue.seconds(1))
                .forks(forks)
                .resultFormat(ResultFormatType.JSON).result(f.out.resolve(file + ".json").toString())
                .build()).run();
    }

    private static RunResult find(Collection<RunResult> results, RingPair.Kind kind, int bytes) {
        return JmhResults.withParams(results, "kind", kind.name(), "messageBytes", Integer.toString(bytes));
    }

    /**
     * The markdown table: per family and size, each ring's throughput, symmem4j's (offer, and tryClaim) over it, p50
     * and p99; then one verdict line per pair of symmem4j and another maker.
     */
    static String table(List<Row> rows, Flags f) {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "%n## Ring buffers, 2 processes: symmem4j, Agrona, Aeron IPC in one run%n%n"
                + "cpus: %s; %s; %d warm-up + %d measured iterations of 1 s per fork;"
                + " Aeron term length %d bytes; tryClaim rows write the same bytes in place%n%n",
                System.getProperty(BenchCpus.PROPERTY, "not pinned"), f.roundTripOnly
                        ? "round trips only, " + f.otherForks + (f.otherForks == 1 ? " fork" : " forks") + " per kind and size"
                        : "throughput forks: one-to-one " + f.forks + ", many-to-one " + f.otherForks
                        + "; round-trip forks " + f.otherForks, f.warmups, f.iterations, RingPair.aeronTermLength()));
        sb.append("| kind | bytes | ring | msg/s | ± 99.9 % | forks' means, lowest–highest | symmem4j offer / it"
                + " | symmem4j tryClaim / it | RTT p50 µs | RTT p99 µs |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
        List<String> verdicts = new ArrayList<>();
        for (Row row : rows) {
            Row offer = ours(rows, row, false);
            Row claim = ours(rows, row, true);
            Result<?> t = row.throughput == null ? null : row.throughput.getPrimaryResult();
            if (!row.kind.symmem()) {
                for (Row o : new Row[] {offer, claim}) {
                    if (o != null && o.throughput != null && t != null) {
                        verdicts.add(verdict(o, row));
                    } else if (o != null && o.roundTrip != null && row.roundTrip != null) {
                        verdicts.add(roundTripVerdict(o, row));
                    }
                }
            }
            sb.append(String.format(Locale.ROOT, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |%n",
                    row.kind.oneToOne() ? "one-to-one" : "many-to-one", row.bytes, row.kind.maker(),
                    t == null ? "—" : mega(t.getScore()), t == null ? "—" : mega(t.getScoreError()),
                    row.throughput == null ? "—" : forkMeans(row.throughput), ratio(offer, row), ratio(claim, row),
                    row.roundTrip == null ? "—" : String.format(Locale.ROOT, "%.3f", p(row.roundTrip, 50)),
                    row.roundTrip == null ? "—" : String.format(Locale.ROOT, "%.3f", p(row.roundTrip, 99))));
        }
        sb.append('\n').append(String.join("\n", verdicts)).append('\n');
        return sb.toString();
    }

    /** symmem4j's row of the same family and size, written by offer or by tryClaim; null when not measured. */
    private static Row ours(List<Row> rows, Row row, boolean claim) {
        return rows.stream().filter(r -> r.bytes == row.bytes && r.kind.symmem() && r.kind.claim() == claim
                && r.kind.oneToOne() == row.kind.oneToOne()).findFirst().orElse(null);
    }

    /** {@code ours}'s throughput over {@code it}'s, blank for a ring against itself or what was not measured. */
    private static String ratio(Row ours, Row it) {
        if (ours == null || ours == it || ours.throughput == null || it.throughput == null) {
            return "";
        }
        return String.format(Locale.ROOT, "%.2f", ours.throughput.getPrimaryResult().getScore()
                / it.throughput.getPrimaryResult().getScore());
    }

    private static String verdict(Row ours, Row it) {
        Result<?> o = ours.throughput.getPrimaryResult();
        Result<?> t = it.throughput.getPrimaryResult();
        boolean apart = Math.abs(o.getScore() - t.getScore()) > o.getScoreError() + t.getScoreError();
        String p50 = "";
        if (it.roundTrip != null && ours.roundTrip != null) {
            double op = p(ours.roundTrip, 50);
            double tp = p(it.roundTrip, 50);
            p50 = String.format(Locale.ROOT, "; RTT p50 %.3f vs %.3f µs (%s)", op, tp, op <= tp ? "≤" : ">");
        }
        return String.format(Locale.ROOT, "- %s, %d B: %s %.2f × %s's throughput, %s%s",
                it.kind.oneToOne() ? "one-to-one" : "many-to-one", it.bytes, ours.kind.maker(),
                o.getScore() / t.getScore(), it.kind.maker(), apart ? "error bars apart (the difference is measured)"
                        : "error bars overlap (the difference is not measured)", p50);
    }

    /** A round trip's p50 against another's, for a run without throughput: with each fork's p50, lowest–highest. */
    private static String roundTripVerdict(Row ours, Row it) {
        double op = p(ours.roundTrip, 50);
        double tp = p(it.roundTrip, 50);
        return String.format(Locale.ROOT, "- %s, %d B: RTT p50 %s %.3f µs (%s) vs %s %.3f µs (%s): %s",
                it.kind.oneToOne() ? "one-to-one" : "many-to-one", it.bytes, ours.kind.maker(), op,
                forkP50s(ours.roundTrip), it.kind.maker(), tp, forkP50s(it.roundTrip), op <= tp ? "≤" : ">");
    }

    /** The lowest and highest p50 of one fork's samples, in µs. */
    private static String forkP50s(RunResult r) {
        double lo = Double.POSITIVE_INFINITY;
        double hi = Double.NEGATIVE_INFINITY;
        for (BenchmarkResult fork : r.getBenchmarkResults()) {
            double p50 = fork.getPrimaryResult().getStatistics().getPercentile(50);
            lo = Math.min(lo, p50);
            hi = Math.max(hi, p50);
        }
        return r.getBenchmarkResults().size() < 2 ? "1 fork"
                : String.format(Locale.ROOT, "forks' p50 %.3f–%.3f", lo, hi);
    }

    private static double p(RunResult r, double percentile) {
        return r.getPrimaryResult().getStatistics().getPercentile(percentile);
    }

    /** The lowest and highest mean of one fork's measured iterations. */
    private static String forkMeans(RunResult r) {
        List<Double> means = new ArrayList<>();
        for (BenchmarkResult fork : r.getBenchmarkResults()) {
            means.add(fork.getIterationResults().stream().map(IterationResult::getPrimaryResult)
                    .mapToDouble(Result::getScore).average().orElse(Double.NaN));
        }
        if (means.size() < 2) {
            return "1 fork";
        }
        return means.stream().mapToDouble(Double::doubleValue).min().stream().mapToObj(RingSuite::mega)
                .collect(Collectors.joining()) + "–" + mega(means.stream().mapToDouble(Double::doubleValue).max()
                .orElse(Double.NaN));
    }

    static String mega(double perSecond) {
        return String.format(Locale.ROOT, "%.2f M", perSecond / 1e6);
    }
}
