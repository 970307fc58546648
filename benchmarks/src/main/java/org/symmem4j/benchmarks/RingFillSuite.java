package org.symmem4j.benchmarks;

import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Locale;

import org.openjdk.jmh.profile.GCProfiler;
import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.Result;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@link RingFillBenchmark} in one JMH run (symmem4j's rings, {@code offer} and {@code tryClaim}, against Agrona's,
 * {@code write} and {@code tryClaim}, one-to-one and many-to-one, at each fill level and message size), then one
 * table: each ring's msg/s with JMH's 99.9 % error (over every measured iteration of every fork), its forks' means
 * (lowest–highest) and their spread ((highest − lowest) / mean), symmem4j's throughput over it, and one verdict line per
 * pair: the ratio and whether the error bars are apart. JMH's JSON goes to {@code --out}/ring-fill.json, the table to
 * standard output and {@code --out}/ring-fill-summary.md.
 *
 * <pre>
 *   RingFillSuite [--out DIR] [--forks 3] [--warmups 2] [--iterations 3] [--sizes 64] [--fills 25,75]
 *                 [--kinds SYMMEM_ONE_TO_ONE,...] [--gc]
 * </pre>
 *
 * Trials: kinds × sizes × fills, each {@code forks × (warmups + iterations)} s plus ~1.5 s per fork to start the two
 * JVMs: the defaults (8 kinds, 64 B, 2 levels, 3 forks) take ~5 min.
 */
public final class RingFillSuite {

    private RingFillSuite() {
    }

    /** The kinds a fill-level run compares by default: symmem4j's and Agrona's, both ways of writing, both families. */
    static final RingPair.Kind[] KINDS = Arrays.stream(RingPair.Kind.values()).filter(k -> !k.aeron())
            .toArray(RingPair.Kind[]::new);

    @Command(name = "RingFillSuite", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Ring throughput between 2 processes with the ring held at fixed"
                    + " fill levels: symmem4j against Agrona in one run, one summary table with the forks' spread.")
    static final class Flags extends JmhSuiteFlags {
        @Option(names = "--sizes", paramLabel = "B", split = ",", description = "message bytes")
        int[] sizes = {64};
        @Option(names = "--fills", paramLabel = "PERCENT", split = ",", description = "fill levels held, in %% of the"
                + " messages the ring holds")
        int[] fills = {25, 75};
        @Option(names = "--kinds", paramLabel = "KIND", split = ",", description = "the ring kinds (RingPair.Kind"
                + " names, Aeron's excluded: it has no ring to hold at a level; default symmem4j's and Agrona's)")
        RingPair.Kind[] kinds = KINDS;
        @Option(names = "--gc", description = "add JMH's GC profiler (allocation per message)")
        boolean gc;
    }

    /** One ring at one size and level. */
    record Row(RingPair.Kind kind, int bytes, int fill, RunResult result) {
    }

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            flags.checkCounts();
            for (RingPair.Kind k : flags.kinds) {
                if (k.aeron()) {
                    throw new IllegalArgumentException("--kinds " + k + ": Aeron IPC has no ring to hold at a fill"
                            + " level (its publication limit is the driver's) (fix: name symmem4j's and Agrona's kinds)");
                }
            }
            RingFillBenchmark.checkSizesAndFills(flags.sizes, flags.fills);
            return flags;
        });
        Files.createDirectories(f.out);
        List<RingPair.Kind> chosen = Arrays.stream(RingPair.Kind.values())
                .filter(k -> Arrays.asList(f.kinds).contains(k)).toList();
        ChainedOptionsBuilder options = new OptionsBuilder()
                .include(RingFillBenchmark.class.getName() + "\\.throughput$")
                .param("kind", chosen.stream().map(Enum::name).toArray(String[]::new))
                .param("messageBytes", Arrays.stream(f.sizes).mapToObj(Integer::toString).toArray(String[]::new))
                .param("fillPercent", Arrays.stream(f.fills).mapToObj(Integer::toString).toArray(String[]::new))
                .resultFormat(ResultFormatType.JSON).result(f.out.resolve("ring-fill.json").toString());
        f.timing(options);
        if (f.gc) {
            options.addProfiler(GCProfiler.class);
        }
        Collection<RunResult> results = new Runner(options.build()).run();
        List<Row> rows = new ArrayList<>();
        for (int fill : f.fills) {
            for (int bytes : f.sizes) {
                for (RingPair.Kind kind : chosen) {
                    RunResult r = find(results, kind, bytes, fill);
                    if (r != null) {
                        rows.add(new Row(kind, bytes, fill, r));
                    }
                }
            }
        }
        String table = table(rows, f);
        System.out.print(table);
        Files.writeString(f.out.resolve("ring-fill-summary.md"), table);
    }

    private static RunResult find(Collection<RunResult> results, RingPair.Kind kind, int bytes, int fill) {
        return JmhResults.withParams(results, "kind", kind.name(), "messageBytes", Integer.toString(bytes),
                "fillPercent", Integer.toString(fill));
    }

    /** The markdown table and the verdicts (see the class comment). */
    static String table(List<Row> rows, Flags f) {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "%n## Ring throughput at a held fill level, 2 processes: symmem4j and"
                        + " Agrona in one run%n%ncpus: %s; %d forks per trial, %d warm-up + %d measured iterations of"
                        + " 1 s; ring %d bytes; consumer batch %d messages; the ring holds T..T+%d messages%n%n",
                System.getProperty(BenchCpus.PROPERTY, "not pinned"), f.forks, f.warmups, f.iterations,
                RingFillBenchmark.CAPACITY, RingFillBenchmark.BATCH, 2 * RingFillBenchmark.BATCH));
        sb.append("| kind | fill % (T msgs) | bytes | ring | msg/s | ± 99.9 % | forks' means, lowest–highest | forks'"
                + " spread | symmem4j offer / it | symmem4j tryClaim / it |\n"
                + "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
        List<String> verdicts = new ArrayList<>();
        for (Row row : rows) {
            Row offer = ours(rows, row, false);
            Row claim = ours(rows, row, true);
            Result<?> t = row.result.getPrimaryResult();
            if (!row.kind.symmem()) {
                for (Row o : new Row[] {offer, claim}) {
                    if (o != null) {
                        verdicts.add(verdict(o, row));
                    }
                }
            }
            double[] means = forkMeans(row.result);
            sb.append(String.format(Locale.ROOT, "| %s | %d (%d) | %d | %s | %s | %s | %s | %s | %s | %s |%n",
                    row.kind.oneToOne() ? "one-to-one" : "many-to-one", row.fill, RingFillBenchmark.fillMessages(
                            RingFillBenchmark.CAPACITY, row.bytes, row.fill, RingFillBenchmark.BATCH), row.bytes,
                    row.kind.maker(), RingSuite.mega(t.getScore()), RingSuite.mega(t.getScoreError()),
                    means.length < 2 ? "1 fork" : RingSuite.mega(min(means)) + "–" + RingSuite.mega(max(means)),
                    means.length < 2 ? "—" : String.format(Locale.ROOT, "%.1f %%", spread(means) * 100),
                    ratio(offer, row), ratio(claim, row)));
        }
        sb.append('\n').append(String.join("\n", verdicts)).append('\n');
        return sb.toString();
    }

    /** symmem4j's row of the same family, size and level, written by offer or by tryClaim; null when not measured. */
    private static Row ours(List<Row> rows, Row row, boolean claim) {
        return rows.stream().filter(r -> r.bytes == row.bytes && r.fill == row.fill && r.kind.symmem()
                && r.kind.claim() == claim && r.kind.oneToOne() == row.kind.oneToOne()).findFirst().orElse(null);
    }

    private static String ratio(Row ours, Row it) {
        if (ours == null || ours == it) {
            return "";
        }
        return String.format(Locale.ROOT, "%.2f", ours.result.getPrimaryResult().getScore()
                / it.result.getPrimaryResult().getScore());
    }

    private static String verdict(Row ours, Row it) {
        Result<?> o = ours.result.getPrimaryResult();
        Result<?> t = it.result.getPrimaryResult();
        boolean apart = Math.abs(o.getScore() - t.getScore()) > o.getScoreError() + t.getScoreError();
        double[] om = forkMeans(ours.result);
        double[] tm = forkMeans(it.result);
        boolean forksApart = om.length > 1 && tm.length > 1 && (min(om) > max(tm) || max(om) < min(tm));
        return String.format(Locale.ROOT, "- %s, %d %% full, %d B: %s %.2f × %s's throughput, %s%s",
                it.kind.oneToOne() ? "one-to-one" : "many-to-one", it.fill, it.bytes, ours.kind.maker(),
                o.getScore() / t.getScore(), it.kind.maker(), apart ? "error bars apart (the difference is measured)"
                        : "error bars overlap (the difference is not measured)",
                forksApart ? "; every fork of one above every fork of the other" : "");
    }

    /** Each fork's mean of its measured iterations. */
    static double[] forkMeans(RunResult r) {
        return r.getBenchmarkResults().stream().mapToDouble((BenchmarkResult fork) -> fork.getIterationResults()
                .stream().map(IterationResult::getPrimaryResult).mapToDouble(Result::getScore).average()
                .orElse(Double.NaN)).toArray();
    }

    /** (highest − lowest) / mean of the values. */
    static double spread(double[] values) {
        return (max(values) - min(values)) / Arrays.stream(values).average().orElse(Double.NaN);
    }

    private static double min(double[] v) {
        return Arrays.stream(v).min().orElse(Double.NaN);
    }

    private static double max(double[] v) {
        return Arrays.stream(v).max().orElse(Double.NaN);
    }
}
