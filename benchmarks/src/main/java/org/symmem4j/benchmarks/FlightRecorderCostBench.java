package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
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
 * Is the flight recorder within 1 % of a 1 KiB all-reduce (issue #36)? Runs, in one call,
 * {@link FlightRecorderPairedBenchmark} (the all-reduce on one communicator per rank whose recorder is switched off and
 * on between short blocks, off, on, on, off ...; one JMH run per cell, the report rewritten to {@code --out} after each,
 * so that a run stopped by a time limit keeps its finished cells) and then {@link FlightRecorderOpsBenchmark} (the
 * recorder's three calls per collective alone, and a baseline that fills the same descriptor), and prints a markdown
 * report: per algorithm and rank count, the
 * all-reduce's time with the recorder off and on, the mean paired difference (on − off of blocks 2j and 2j + 1 of one
 * fork) with its 95 % t interval and a 95 % bootstrap interval (pairs resampled within each fork), both as ns and as a
 * percentage of the off time, each fork's mean difference, the lag-1 autocorrelation of the differences, and the
 * verdict against 1 %; then the recorder's own ns per collective against the off all-reduce of the same run.
 *
 * <pre>
 *   FlightRecorderCostBench [--out report.md] [--forks 2] [--pairs 200] [--block-ms 40] [--warmups 100]
 *                           [--ranks 2,4] [--algorithms ONE_SHOT,TWO_SHOT] [--bytes 1024] [--ops-forks 2]
 *                           [--entries 1024] [--arrivals in-shadow[,after-wait][,in-shadow+none]...]
 *                           [--jit-log]
 * </pre>
 * Every fork first runs {@link FlightRecorderPairedBenchmark#PREWARM_DEFAULT} all-reduces with each rank's recorder
 * switched every 64 collectives, so that C2 compiles the collective from a profile with the recorder on in half of
 * them in every fork; a cell with {@code +cold} leaves that out (the benchmark before 2026-11-29 22:00 UTC, whose forks were
 * bimodal: {@code bench/results/2026-11-29-recorder-bimodal-forks.md}), and one with {@code +shareN} pre-warms with the
 * recorder on in 1/N of the collectives instead of half (an off-heavy profile on purpose: {@code +share20} leaves the
 * recorder's calls out of line in every fork). {@code --jit-log} has each paired fork write
 * HotSpot's compilation log into {@code jit-pidPID.log} in the working directory;
 * {@code bench/shared-state/jit-forks.py DIR} reads them with {@code recorder.txt} and says, fork by fork in the
 * report's order, which of the recorder's calls C2 left out of line.
 * Each fork's placement (every rank's recorder storage, signal pads and data regions, with their offsets in a page and
 * a line: {@code FlightRecording.placement}) is printed under its mean difference, so that expensive forks can be held
 * against where their memory fell.
 * A cell of {@code --arrivals} is {@code WHERE[+arrival|+none][+spinN][+cold|+shareN][@ENTRIES]}: {@code --arrivals
 * in-shadow,after-wait} measures, in one run, the recorder writing its entry in the entry barrier's shadow (the
 * default) and after the barrier's wait ({@code -Dsymmem4j.flight.recorder.arrival} in the forks), one cell each per
 * algorithm and rank count, the two placements of one algorithm next to each other, so a run stopped by a time limit
 * has both of the first; {@code in-shadow@256} runs a ring of 256 entries instead of {@code --entries}.
 * {@code --arrivals in-shadow,in-shadow+none,in-shadow+arrival,in-shadow+spin64,in-shadow+arrival+spin64} finds
 * where the one-shot cost comes from: {@code +none} switches the recorder on but makes none of its calls (an A/A
 * control of the switching: on − off must be 0), {@code +arrival} makes only the entry's write in the barrier's shadow
 * (the rest, all − arrival, is the completion count's store at return), and {@code +spin64} has every pad wait poll
 * 64 times without a pause before its back-off, off and on alike: if the shadow's cost is the pause's granularity (the
 * work before the wait shifting every poll after it), it goes with the pauses.
 * The storage layouts measured against the own-line entries until 2026-11-30 ({@code +copy}, {@code +heap}, {@code
 * +padded}, {@code +compact}, {@code +runs}) were removed with them; their results are in {@code bench/results}.
 * Needs at least {@code max(ranks)} idle cores; {@code -Dsymmem4j.bench.cpus=A,B,C,D} pins rank r to the r-th CPU
 * ({@link BenchCpus}). With the defaults: 4 cells × 2 forks × (100 + 400) blocks of 40 ms, about 180 s with the
 * forks' start-up, and about 35 s for the ops (2 forks × 2 benchmarks × 8 s), about 3.6 minutes on 16 cores.
 */
public final class FlightRecorderCostBench {

    /** Bootstrap resamples. */
    static final int RESAMPLES = 4000;
    /** The bootstrap's seed: the same data give the same interval. */
    static final long SEED = 36;

    private FlightRecorderCostBench() {
    }

    @Command(name = "FlightRecorderCostBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "The flight recorder's cost in a host all-reduce: switched off and"
                    + " on between short blocks on one communicator, paired; and its own calls alone, in one run;"
                    + " prints a markdown report.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--forks", paramLabel = "F", description = "JVM forks per (algorithm, ranks)")
        int forks = 2;
        @Option(names = "--pairs", paramLabel = "P", description = "off/on pairs of blocks per fork")
        int pairs = 200;
        @Option(names = "--block-ms", paramLabel = "MS", description = "one block's length (a JMH iteration)")
        int blockMs = 40;
        @Option(names = "--warmups", paramLabel = "W", description = "warm-up blocks per fork (alternating too)")
        int warmups = 100;
        @Option(names = "--ranks", split = ",", paramLabel = "N", description = "ranks (threads of one JVM)")
        List<Integer> ranks = List.of(2, 4);
        @Option(names = "--algorithms", split = ",", paramLabel = "ALG", description = "host all-reduce algorithms")
        List<String> algorithms = List.of("ONE_SHOT", "TWO_SHOT");
        @Option(names = "--bytes", paramLabel = "B", description = "all-reduce size in bytes")
        long bytes = 1024;
        @Option(names = "--ops-forks", paramLabel = "F", description = "forks of the recorder-calls benchmark")
        int opsForks = 2;
        @Option(names = "--entries", paramLabel = "E", description = "the recorder's entries while on (the default is"
                + " the product's default, " + FlightRecorderPairedBenchmark.ENTRIES_ON + "; a smaller ring tests"
                + " whether its cache footprint is the cost)")
        int entries = FlightRecorderPairedBenchmark.ENTRIES_ON;
        @Option(names = "--arrivals", split = ",", paramLabel = "WHERE", description = "where the recorder writes a"
                + " collective's entry, one cell each: after-wait (once the entry barrier passed), in-shadow (between"
                + " the publish and the wait, the product's default); either with +arrival: only the entry's write"
                + " (-Dsymmem4j.flight.recorder.probe"
                + "=arrival), +none: none of the recorder's calls, the A/A control (probe=none); +spinN: the waits poll N"
                + " times without a pause first (-Dsymmem4j.wait.spinfirst=N, off and on alike); and @E: a ring of E"
                + " entries for that cell")
        List<String> arrivals = List.of(FlightRecorderPairedBenchmark.ARRIVAL_DEFAULT);
        @Option(names = "--jit-log", description = "each paired fork writes HotSpot's compilation log"
                + " (-XX:+LogCompilation) into jit-pidPID.log in the working directory (its set-up line names the pid);"
                + " bench/shared-state/jit-forks.py DIR says per fork which recorder calls C2 left out of line")
        boolean jitLog;
    }

    public static void main(String[] args) throws IOException, RunnerException {
        Flags flags = Cli.parse(new Flags(), args);
        Cli.positive("--forks", flags.forks);
        Cli.positive("--pairs", flags.pairs);
        Cli.positive("--block-ms", flags.blockMs);
        Cli.positive("--ops-forks", flags.opsForks);
        Cli.positive("--entries", flags.entries);
        for (String arrival : flags.arrivals) {
            FlightRecorderPairedBenchmark.Cell.parse(arrival, flags.entries); // a bad cell fails before any fork runs
        }
        if (flags.warmups < 0 || flags.bytes < 4 || flags.bytes % 4 != 0) {
            throw new IllegalArgumentException("--warmups=" + flags.warmups + " --bytes=" + flags.bytes + ": expected"
                    + " warm-ups >= 0 and bytes a positive multiple of 4 (float32 elements) (fix: e.g. --bytes 1024)");
        }
        if (flags.pairs < 2) {
            throw new IllegalArgumentException("--pairs=" + flags.pairs + " expected >= 2: an interval needs two pairs"
                    + " (fix: e.g. --pairs 200)");
        }
        // one JMH run per cell, the report rewritten after each: a run stopped by a time limit keeps its finished cells
        List<Row> rows = new ArrayList<>();
        for (String algorithm : flags.algorithms) {
            for (int ranks : flags.ranks) {
                for (String arrival : flags.arrivals) {
                    rows.add(runCell(flags, algorithm, ranks, arrival));
                    write(flags, report(flags, Double.NaN, Double.NaN, rows));
                }
            }
        }
        double[] plain = ops(flags);
        String report = report(flags, plain[0], plain[1], rows);
        System.out.println(report);
        write(flags, report);
    }

    /**
     * {@return FlightRecorderOpsBenchmark's baseline and recordOneCollective, ns/op}
     *
     * @param flags the run's flags
     */
    private static double[] ops(Flags flags) throws RunnerException {
        Options ops = new OptionsBuilder()
                .include("\\.FlightRecorderOpsBenchmark\\.")
                .param("entries", Integer.toString(flags.entries))
                .forks(flags.opsForks)
                .jvmArgsAppend("--enable-native-access=ALL-UNNAMED") // replaces the annotation's list
                .build();
        double[] scores = {Double.NaN, Double.NaN};
        for (RunResult r : new Runner(ops).run()) {
            String method = r.getParams().getBenchmark();
            double score = r.getPrimaryResult().getScore();
            if (method.endsWith(".baseline")) {
                scores[0] = score;
            } else if (method.endsWith(".recordOneCollective")) {
                scores[1] = score;
            }
        }
        return scores;
    }

    /**
     * One cell: {@link FlightRecorderPairedBenchmark} in its own JMH run, its forks' blocks paired, each fork's placement
     * (every rank's recorder storage, signal pads and data, {@code placement-CELL.txt} in the working directory, one
     * line per fork in the forks' order) kept with it.
     */
    private static Row runCell(Flags flags, String algorithm, int ranks, String arrival) throws RunnerException,
            IOException {
        Path placementFile = Path.of("placement-" + algorithm + "-" + ranks + "-" + arrival.replaceAll("[^A-Za-z0-9.@-]",
                "_") + ".txt").toAbsolutePath();
        Files.deleteIfExists(placementFile);
        List<String> forkFlags = new ArrayList<>(List.of(FlightRecorderPairedBenchmark.forkFlags(flags.entries, arrival,
                flags.jitLog)));
        forkFlags.add("-D" + FlightRecorderPairedBenchmark.PLACEMENT_FILE_PROPERTY + "=" + placementFile);
        Options paired = new OptionsBuilder()
                .include("\\.FlightRecorderPairedBenchmark\\.allReduce$")
                .param("bytes", Long.toString(flags.bytes))
                .param("algorithm", algorithm)
                .param("ranks", Integer.toString(ranks))
                .forks(flags.forks)
                .warmupIterations(flags.warmups)
                .warmupTime(TimeValue.milliseconds(flags.blockMs))
                .measurementIterations(2 * flags.pairs)
                .measurementTime(TimeValue.milliseconds(flags.blockMs))
                .jvmArgsAppend(forkFlags.toArray(String[]::new))
                .build();
        List<double[]> forks = new ArrayList<>();
        for (RunResult r : new Runner(paired).run()) {
            for (BenchmarkResult fork : r.getBenchmarkResults()) {
                Collection<IterationResult> its = fork.getIterationResults();
                double[] scores = new double[its.size()];
                int k = 0;
                for (IterationResult it : its) {
                    scores[k++] = it.getPrimaryResult().getScore();
                }
                forks.add(scores);
            }
        }
        List<String> placements = Files.exists(placementFile) ? Files.readAllLines(placementFile) : List.of();
        return new Row(algorithm, ranks, arrival, Paired.of(forks), placements);
    }

    private static void write(Flags flags, String report) throws IOException {
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
    }

    /**
     * One (algorithm, ranks, where the entry is written) cell's paired result.
     *
     * @param placements each fork's placement line ({@link FlightRecorderPairedBenchmark}'s "placement: ..."), in the
     *                   forks' order; empty when the forks wrote none
     */
    record Row(String algorithm, int ranks, String arrival, Paired paired, List<String> placements) {
    }

    /**
     * The paired comparison of one cell: every fork's measured blocks in order, block {@code k} with the recorder on
     * when {@link FlightRecorderPairedBenchmark#recorderOn recorderOn(k)}; pair {@code j} is blocks {@code 2j} and
     * {@code 2j + 1}.
     *
     * @param pairs         pairs in all
     * @param offMean       mean ns per all-reduce without the recorder
     * @param onMean        with it
     * @param diffMean      mean of on − off over the pairs
     * @param diffHalfWidth half-width of the 95 % t interval of {@code diffMean} (Student's t over the pairs)
     * @param bootLow       2.5th percentile of the bootstrap means (pairs resampled with replacement within each fork)
     * @param bootHigh      97.5th percentile
     * @param forkDiffs     each fork's mean difference
     * @param forkHalfWidths each fork's 95 % t half-width
     * @param lag1          lag-1 autocorrelation of the differences within the forks (near 0: pairs independent, as
     *                      both intervals assume)
     */
    record Paired(int pairs, double offMean, double onMean, double diffMean, double diffHalfWidth, double bootLow,
                  double bootHigh, double[] forkDiffs, double[] forkHalfWidths, double lag1) {

        static Paired of(List<double[]> forks) {
            List<double[]> diffsPerFork = new ArrayList<>();
            double offSum = 0;
            double onSum = 0;
            int n = 0;
            for (int f = 0; f < forks.size(); f++) {
                double[] s = forks.get(f);
                if (s.length < 2 || s.length % 2 != 0) {
                    throw new IllegalArgumentException("fork " + f + " has " + s.length + " measurement iterations:"
                            + " expected a positive even number (pairs of off and on; fix: run FlightRecorderPairedBenchmark with"
                            + " an even -i, as FlightRecorderCostBench does)");
                }
                double[] d = new double[s.length / 2];
                for (int j = 0; j < d.length; j++) {
                    boolean firstOn = FlightRecorderPairedBenchmark.recorderOn(2 * j);
                    double on = firstOn ? s[2 * j] : s[2 * j + 1];
                    double off = firstOn ? s[2 * j + 1] : s[2 * j];
                    d[j] = on - off;
                    offSum += off;
                    onSum += on;
                }
                n += d.length;
                diffsPerFork.add(d);
            }
            double[] all = new double[n];
            double[] forkDiffs = new double[forks.size()];
            double[] forkHalf = new double[forks.size()];
            int at = 0;
            double lagNum = 0;
            double lagDen = 0;
            for (int f = 0; f < diffsPerFork.size(); f++) {
                double[] d = diffsPerFork.get(f);
                System.arraycopy(d, 0, all, at, d.length);
                at += d.length;
                forkDiffs[f] = mean(d);
                forkHalf[f] = halfWidth(d);
                for (int j = 0; j < d.length; j++) {
                    double c = d[j] - forkDiffs[f];
                    lagDen += c * c;
                    if (j > 0) {
                        lagNum += c * (d[j - 1] - forkDiffs[f]);
                    }
                }
            }
            double[] boot = bootstrap(diffsPerFork, n, RESAMPLES, SEED);
            return new Paired(n, offSum / n, onSum / n, mean(all), halfWidth(all), boot[0], boot[1], forkDiffs,
                    forkHalf, lagDen == 0 ? 0 : lagNum / lagDen);
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

        double bootPercentLow() {
            return 100 * bootLow / offMean;
        }

        double bootPercentHigh() {
            return 100 * bootHigh / offMean;
        }

        /** Against the 1 % target, by both intervals: shown met, shown missed, or not decided by this run. */
        String verdict() {
            if (Double.isNaN(diffHalfWidth)) {
                return "undecided (one pair)";
            }
            if (percentHigh() <= 1 && bootPercentHigh() <= 1) {
                return "≤ 1 % (met)";
            }
            if (percentLow() > 1 && bootPercentLow() > 1) {
                return "> 1 % (missed)";
            }
            return "undecided (an interval reaches past 1 %)";
        }
    }

    static double mean(double[] x) {
        double s = 0;
        for (double v : x) {
            s += v;
        }
        return s / x.length;
    }

    /** Half-width of the 95 % t interval of {@code x}'s mean; NaN for fewer than two values. */
    static double halfWidth(double[] x) {
        if (x.length < 2) {
            return Double.NaN;
        }
        double m = mean(x);
        double var = 0;
        for (double v : x) {
            var += (v - m) * (v - m);
        }
        return t95(x.length - 1) * Math.sqrt(var / (x.length - 1) / x.length);
    }

    /**
     * Percentile bootstrap of the mean difference: {@code resamples} times, each fork's differences resampled with
     * replacement (as many as it has, so every fork weighs what it weighs in the mean), the overall mean taken.
     *
     * @return {2.5th, 97.5th percentile} of those means
     */
    static double[] bootstrap(List<double[]> perFork, int n, int resamples, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        double[] means = new double[resamples];
        for (int b = 0; b < resamples; b++) {
            double s = 0;
            for (double[] d : perFork) {
                for (int j = 0; j < d.length; j++) {
                    s += d[random.nextInt(d.length)];
                }
            }
            means[b] = s / n;
        }
        java.util.Arrays.sort(means);
        return new double[] {quantile(means, 0.025), quantile(means, 0.975)};
    }

    /** The {@code q} quantile of sorted {@code x}, linearly interpolated between order statistics. */
    static double quantile(double[] sorted, double q) {
        double pos = q * (sorted.length - 1);
        int lo = (int) Math.floor(pos);
        int hi = Math.min(lo + 1, sorted.length - 1);
        return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
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
        md.append("# Flight recorder cost in a ").append(flags.bytes)
                .append("-byte host all-reduce (one communicator, recorder switched per block, paired)\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- machine: ").append(Runtime.getRuntime().availableProcessors()).append(" cores; JDK ")
                .append(System.getProperty("java.vm.version")).append("; ranks pinned to CPUs: ")
                .append(System.getProperty(BenchCpus.PROPERTY, "none (no -D" + BenchCpus.PROPERTY + ")")).append('\n');
        md.append("- FlightRecorderPairedBenchmark: ").append(flags.forks).append(" forks × ").append(flags.pairs)
                .append(" pairs of ").append(flags.blockMs).append(" ms blocks (off, on, on, off, ...; after ")
                .append(flags.warmups).append(" alternating warm-up blocks; cells without +cold first run ")
                .append(FlightRecorderPairedBenchmark.PREWARM_DEFAULT).append(" all-reduces with the recorder switched every ")
                .append(FlightRecorderPairedBenchmark.PREWARM_PERIOD)
                .append(" collectives), one communicator per rank, recorder of ")
                .append(flags.entries)
                .append(" entries switched between blocks; float32 SUM in place, ranks as threads\n\n");
        md.append("| algorithm | ranks | entry written | off ns/op | on ns/op | on − off ns, 95 % t | 95 % bootstrap |"
                + " on − off % of off, t | bootstrap % | ≤ 1 %? |\n");
        md.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
        double offForOps = Double.NaN;
        StringBuilder details = new StringBuilder();
        for (Row row : rows) {
            Paired p = row.paired();
            md.append(String.format(Locale.ROOT, "| %s | %d | %s | %.1f | %.1f | %+.2f (%+.2f … %+.2f) | %+.2f … %+.2f |"
                            + " %+.3f %% (%+.3f … %+.3f) | %+.3f … %+.3f %% | %s |%n", row.algorithm(), row.ranks(),
                    row.arrival(), p.offMean(), p.onMean(), p.diffMean(), p.diffMean() - p.diffHalfWidth(),
                    p.diffMean() + p.diffHalfWidth(), p.bootLow(), p.bootHigh(), p.percent(), p.percentLow(),
                    p.percentHigh(), p.bootPercentLow(), p.bootPercentHigh(), p.verdict()));
            StringBuilder forks = new StringBuilder();
            for (int f = 0; f < p.forkDiffs().length; f++) {
                forks.append(forks.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%+.2f ± %.2f",
                        p.forkDiffs()[f], p.forkHalfWidths()[f]));
            }
            details.append(String.format(Locale.ROOT, "- %s, %d ranks, entry %s: %d pairs; each fork's mean difference"
                    + " (ns, 95 %% t): %s; lag-1 autocorrelation of the differences %+.2f%n", row.algorithm(), row.ranks(),
                    row.arrival(), p.pairs(), forks, p.lag1()));
            for (int f = 0; f < row.placements().size(); f++) {
                details.append(String.format(Locale.ROOT, "  - fork %d (%s ns): %s%n", f + 1,
                        f < p.forkDiffs().length ? String.format(Locale.ROOT, "%+.2f", p.forkDiffs()[f]) : "?",
                        row.placements().get(f).replaceFirst("^placement: ", "")));
            }
            if (Double.isNaN(offForOps) || p.offMean() < offForOps) {
                offForOps = p.offMean();
            }
        }
        md.append("\nBoth runs of a pair are the same communicator on the same threads, one block apart: what differs"
                + " is the recorder. The t interval is over every pair of every fork; the bootstrap resamples pairs"
                + " within each fork (").append(RESAMPLES).append(" resamples). Both assume independent pairs; a lag-1"
                + " autocorrelation far from 0 says they are not. The verdict needs both intervals on one side of 1 %.\n\n");
        md.append(details).append('\n');
        md.append("## The recorder's calls alone (FlightRecorderOpsBenchmark, same run)\n\n");
        double perCollective = record - baseline;
        if (Double.isNaN(perCollective)) {
            md.append("- not measured yet (it runs after the all-reduces)\n");
            return md.toString();
        }
        md.append(String.format(Locale.ROOT, "- recordOneCollective %.2f ns/op, baseline %.2f ns/op: %.2f ns per collective"
                + " (the entry's name word at arrival, the completion count at return)%n", record, baseline, perCollective));
        if (!Double.isNaN(offForOps)) {
            md.append(String.format(Locale.ROOT, "- against the fastest recorder-off all-reduce above (%.1f ns): %.2f %%%n",
                    offForOps, 100 * perCollective / offForOps));
        }
        return md.toString();
    }
}
