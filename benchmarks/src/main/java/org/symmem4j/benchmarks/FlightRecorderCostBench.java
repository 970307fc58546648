package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.Options;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Is the flight recorder within 1 % of a 1 KiB all-reduce (issue #36)? Runs, in one call, {@link FlightRecorderOpsBenchmark}
 * (the recorder's four calls per collective alone, and an empty baseline) and {@link FlightRecorderPairedBenchmark} (the
 * all-reduce with the recorder off and on, alternating within each fork), then writes a markdown report: per algorithm
 * and rank count, the off and on means, the mean paired difference (on − off of iterations 2j and 2j + 1 of one fork)
 * with its 95 % confidence interval, the same as a percentage of the off mean, each fork's mean difference, and the
 * verdict against 1 %; and the ops benchmark's ns per collective as a percentage of the off all-reduce measured in the
 * same run.
 *
 * <pre>
 *   FlightRecorderCostBench [--out report.md] [--forks 3] [--pairs 10] [--warmups 4] [--ranks 2,4]
 *                           [--algorithms ONE_SHOT,TWO_SHOT] [--bytes 1024]
 * </pre>
 * Needs at least {@code max(ranks)} idle cores. With the defaults: about 4 × 3 × 24 s for the all-reduce and 30 s for
 * the ops, about 5.5 minutes.
 */
public final class FlightRecorderCostBench {

    private FlightRecorderCostBench() {
    }

    @Command(name = "FlightRecorderCostBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "The flight recorder's cost in a host all-reduce, on and off paired in"
                    + " one JVM, and its own calls alone, in one run; writes a markdown report.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--forks", paramLabel = "F", description = "JVM forks per (algorithm, ranks)")
        int forks = 3;
        @Option(names = "--pairs", paramLabel = "P", description = "off/on pairs of 1 s iterations per fork")
        int pairs = 10;
        @Option(names = "--warmups", paramLabel = "W", description = "warm-up iterations per fork (alternating too)")
        int warmups = 4;
        @Option(names = "--ranks", split = ",", paramLabel = "N", description = "ranks (threads of one JVM)")
        List<Integer> ranks = List.of(2, 4);
        @Option(names = "--algorithms", split = ",", paramLabel = "ALG", description = "host all-reduce algorithms")
        List<String> algorithms = List.of("ONE_SHOT", "TWO_SHOT");
        @Option(names = "--bytes", paramLabel = "B", description = "all-reduce size in bytes")
        long bytes = 1024;
        @Option(names = "--ops-forks", paramLabel = "F", description = "forks of the recorder-calls benchmark")
        int opsForks = 2;
    }

    public static void main(String[] args) throws IOException, RunnerException {
        Flags flags = Cli.parse(new Flags(), args);
        Cli.positive("--forks", flags.forks);
        Cli.positive("--pairs", flags.pairs);
        Cli.positive("--ops-forks", flags.opsForks);
        if (flags.warmups < 0 || flags.bytes < 4 || flags.bytes % 4 != 0) {
            throw new IllegalArgumentException("--warmups=" + flags.warmups + " --bytes=" + flags.bytes + ": expected"
                    + " warm-ups >= 0 and bytes a positive multiple of 4 (float32 elements) (fix: e.g. --bytes 1024)");
        }
        Options ops = new OptionsBuilder()
                .include("\\.FlightRecorderOpsBenchmark\\.")
                .forks(flags.opsForks)
                .build();
        Collection<RunResult> opsResults = new Runner(ops).run();
        double baseline = Double.NaN;
        double record = Double.NaN;
        for (RunResult r : opsResults) {
            String method = r.getParams().getBenchmark();
            double score = r.getPrimaryResult().getScore();
            if (method.endsWith(".baseline")) {
                baseline = score;
            } else if (method.endsWith(".recordOneCollective")) {
                record = score;
            }
        }
        Options paired = new OptionsBuilder()
                .include("\\.FlightRecorderPairedBenchmark\\.allReduce$")
                .param("bytes", Long.toString(flags.bytes))
                .param("algorithm", flags.algorithms.toArray(String[]::new))
                .param("ranks", flags.ranks.stream().map(String::valueOf).toArray(String[]::new))
                .forks(flags.forks)
                .warmupIterations(flags.warmups)
                .warmupTime(TimeValue.seconds(1))
                .measurementIterations(2 * flags.pairs)
                .measurementTime(TimeValue.seconds(1))
                .build();
        Collection<RunResult> pairedResults = new Runner(paired).run();
        List<Row> rows = new ArrayList<>();
        for (RunResult r : pairedResults) {
            List<double[]> forks = new ArrayList<>();
            for (BenchmarkResult fork : r.getBenchmarkResults()) {
                Collection<IterationResult> its = fork.getIterationResults();
                double[] scores = new double[its.size()];
                int k = 0;
                for (IterationResult it : its) {
                    scores[k++] = it.getPrimaryResult().getScore();
                }
                forks.add(scores);
            }
            rows.add(new Row(r.getParams().getParam("algorithm"), Integer.parseInt(r.getParams().getParam("ranks")),
                    Paired.of(forks)));
        }
        String report = report(flags, baseline, record, rows);
        System.out.println(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
    }

    /** One (algorithm, ranks) cell's paired result. */
    record Row(String algorithm, int ranks, Paired paired) {
    }

    /**
     * The paired comparison of one cell: every fork's measurement iterations in order, iteration {@code k} with the
     * recorder on when {@link FlightRecorderPairedBenchmark#recorderOn recorderOn(k)}; pair {@code j} is iterations
     * {@code 2j} and {@code 2j + 1}.
     *
     * @param pairs        pairs in all
     * @param offMean      mean ns per all-reduce without the recorder
     * @param onMean       with it
     * @param diffMean     mean of on − off over the pairs
     * @param diffHalfWidth half-width of the 95 % confidence interval of {@code diffMean} (Student's t over the pairs)
     * @param forkDiffs    each fork's mean difference
     */
    record Paired(int pairs, double offMean, double onMean, double diffMean, double diffHalfWidth, double[] forkDiffs) {

        static Paired of(List<double[]> forks) {
            List<Double> diffs = new ArrayList<>();
            double offSum = 0;
            double onSum = 0;
            double[] forkDiffs = new double[forks.size()];
            for (int f = 0; f < forks.size(); f++) {
                double[] s = forks.get(f);
                if (s.length < 2 || s.length % 2 != 0) {
                    throw new IllegalArgumentException("fork " + f + " has " + s.length + " measurement iterations:"
                            + " expected a positive even number (pairs of off and on; fix: run FlightRecorderPairedBenchmark with"
                            + " an even -i, as FlightRecorderCostBench does)");
                }
                double forkSum = 0;
                for (int j = 0; j < s.length / 2; j++) {
                    boolean firstOn = FlightRecorderPairedBenchmark.recorderOn(2 * j);
                    double on = firstOn ? s[2 * j] : s[2 * j + 1];
                    double off = firstOn ? s[2 * j + 1] : s[2 * j];
                    diffs.add(on - off);
                    forkSum += on - off;
                    offSum += off;
                    onSum += on;
                }
                forkDiffs[f] = forkSum / (s.length / 2);
            }
            int n = diffs.size();
            double mean = 0;
            for (double d : diffs) {
                mean += d;
            }
            mean /= n;
            double var = 0;
            for (double d : diffs) {
                var += (d - mean) * (d - mean);
            }
            double half = n < 2 ? Double.NaN : t95(n - 1) * Math.sqrt(var / (n - 1) / n);
            return new Paired(n, offSum / n, onSum / n, mean, half, forkDiffs);
        }

        double percent() {
            return 100 * diffMean / offMean;
        }

        double percentHigh() {
            return 100 * (diffMean + diffHalfWidth) / offMean;
        }

        double percentLow() {
            return 100 * (diffMean - diffHalfWidth) / offMean;
        }

        /** Against the 1 % target: shown met, shown missed, or not decided by this run. */
        String verdict() {
            if (Double.isNaN(diffHalfWidth)) {
                return "undecided (one pair)";
            }
            if (percentHigh() <= 1) {
                return "≤ 1 % (met)";
            }
            if (percentLow() > 1) {
                return "> 1 % (missed)";
            }
            return "undecided (the interval spans 1 %)";
        }
    }

    /** Student's t, two-sided 95 %, for {@code df} degrees of freedom. */
    static double t95(int df) {
        double[] table = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
            2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
            2.045, 2.042};
        if (df < 1) {
            throw new IllegalArgumentException("df=" + df + ": expected >= 1 (fix: at least two pairs)");
        }
        if (df <= table.length) {
            return table[df - 1];
        }
        return df <= 40 ? 2.021 : df <= 60 ? 2.000 : df <= 120 ? 1.980 : 1.960;
    }

    static String report(Flags flags, double baseline, double record, List<Row> rows) {
        StringBuilder md = new StringBuilder();
        md.append("# Flight recorder cost in a ").append(flags.bytes).append("-byte host all-reduce (paired, one JVM)\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- machine: ").append(Runtime.getRuntime().availableProcessors()).append(" cores; JDK ")
                .append(System.getProperty("java.vm.version")).append('\n');
        md.append("- FlightRecorderPairedBenchmark: ").append(flags.forks).append(" forks × ").append(flags.pairs)
                .append(" pairs of 1 s iterations (off, on, on, off, ...; after ").append(flags.warmups)
                .append(" alternating warm-ups), recorder on = ").append(FlightRecorderPairedBenchmark.ENTRIES_ON)
                .append(" entries; float32 SUM in place, ranks as threads\n\n");
        md.append("| algorithm | ranks | off ns/op | on ns/op | on − off ns (95 % CI) | on − off % of off (95 % CI) |"
                + " each fork's mean difference, ns | ≤ 1 %? |\n");
        md.append("|---|---:|---:|---:|---:|---:|---|---|\n");
        double offForOps = Double.NaN;
        for (Row row : rows) {
            Paired p = row.paired();
            StringBuilder forks = new StringBuilder();
            for (double d : p.forkDiffs()) {
                forks.append(forks.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%+.1f", d));
            }
            md.append(String.format(Locale.ROOT, "| %s | %d | %.1f | %.1f | %+.1f (%+.1f … %+.1f) | %+.2f %% (%+.2f … %+.2f) |"
                            + " %s | %s |%n", row.algorithm(), row.ranks(), p.offMean(), p.onMean(), p.diffMean(),
                    p.diffMean() - p.diffHalfWidth(), p.diffMean() + p.diffHalfWidth(), p.percent(), p.percentLow(),
                    p.percentHigh(), forks, p.verdict()));
            if (Double.isNaN(offForOps) || p.offMean() < offForOps) {
                offForOps = p.offMean();
            }
        }
        md.append("\nThe interval is Student's t over every pair of every fork. Each fork's mean difference shows the spread"
                + " between forks (the two communicators' placement differs per fork, their creation order is random).\n\n");
        md.append("## The recorder's calls alone (FlightRecorderOpsBenchmark, same run)\n\n");
        double perCollective = record - baseline;
        md.append(String.format(Locale.ROOT, "- recordOneCollective %.2f ns/op, baseline %.2f ns/op: %.2f ns per collective"
                + " (begin, arguments, started, completed)%n", record, baseline, perCollective));
        if (!Double.isNaN(offForOps)) {
            md.append(String.format(Locale.ROOT, "- against the fastest recorder-off all-reduce above (%.1f ns): %.2f %%%n",
                    offForOps, 100 * perCollective / offForOps));
        }
        return md.toString();
    }
}
