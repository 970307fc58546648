package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;

import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.Options;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * symmem4j's rings against Agrona's, PAIRED: {@link RingFillBenchmark} in paired mode (one fork holds both rings at the
 * same fill level and alternates short blocks between them, ABBA), so that both sides of a comparison run on the same
 * cores, in the same JVMs, a block apart. A lent machine's level (its forks sit at ~25 M or ~40 M msg/s at 64 B for
 * seconds at a time, both rings') then cancels in each pair, where fork-to-fork comparisons could not separate
 * the rings. For each of our kinds (default the four) against Agrona's of the same family and way of writing
 * ({@code offer}/{@code write}, {@code tryClaim}/{@code tryClaim}), each size and fill level: both sides' msg/s, their
 * ratio, the mean paired difference as % of Agrona's with its 95 % t interval and a 95 % bootstrap interval (pairs
 * resampled within each fork; {@link FlightRecorderCostBench.Paired}, the recorder's paired statistic), each fork's
 * difference and both sides' fork means (a mode shows there and not in the difference), the lag-1 autocorrelation,
 * and the verdict: faster or slower only when both intervals are on one side of 0.
 *
 * <pre>
 *   RingPairedSuite [--out DIR] [--forks 3] [--pairs 30] [--block-ms 100] [--warmup-blocks 20] [--sizes 64]
 *                   [--fills 25,75] [--kinds SYMMEM_MANY_TO_ONE,...] [--round-trip]
 * </pre>
 *
 * {@code --round-trip} pairs the round trip instead ({@link RingBenchmark#roundTrip} in paired mode: one message
 * and its echo; each block's p50 and p99 from JMH's samples, each paired with the next block's), where the target is
 * ours ≤ Agrona's p50: "ours lower".
 *
 * One JMH run per (kind, size, level), the report ({@code --out}/ring-paired-summary.md) rewritten after each, so a run
 * stopped by a time limit keeps its finished cells. Time per cell: forks × ((warm-up blocks + 2 × pairs) × block + ~2 s
 * to start the two JVMs and map the rings): the defaults ~26 s, 4 kinds × 2 levels ~3.5 min on 16 cores.
 */
public final class RingPairedSuite {

    private RingPairedSuite() {
    }

    @Command(name = "RingPairedSuite", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "symmem4j's rings against Agrona's at a held fill level, paired:"
                    + " both rings in one fork, short blocks alternating ABBA; the paired difference with t and"
                    + " bootstrap intervals.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "DIR", description = "where JMH's JSON and the summary go")
        Path out = Path.of(".");
        @Option(names = "--forks", paramLabel = "N", description = "forks per cell")
        int forks = 3;
        @Option(names = "--pairs", paramLabel = "P", description = "pairs of blocks (ours, Agrona's) per fork")
        int pairs = 30;
        @Option(names = "--block-ms", paramLabel = "MS", description = "one block's length (a JMH iteration)")
        int blockMs = 100;
        @Option(names = "--warmup-blocks", paramLabel = "W", description = "warm-up blocks per fork (alternating too)")
        int warmupBlocks = 20;
        @Option(names = "--sizes", paramLabel = "B", split = ",", description = "message bytes")
        int[] sizes = {64};
        @Option(names = "--fills", paramLabel = "PERCENT", split = ",", description = "fill levels held, in %% of the"
                + " messages the ring holds")
        int[] fills = {25, 75};
        @Option(names = "--kinds", paramLabel = "KIND", split = ",", description = "our kinds (SYMMEM_...), each"
                + " measured against Agrona's of the same family and way of writing")
        RingPair.Kind[] kinds = {RingPair.Kind.SYMMEM_MANY_TO_ONE, RingPair.Kind.SYMMEM_MANY_TO_ONE_CLAIM,
            RingPair.Kind.SYMMEM_ONE_TO_ONE, RingPair.Kind.SYMMEM_ONE_TO_ONE_CLAIM};
        @Option(names = "--round-trip", description = "pair each block's round-trip p50 and p99"
                + " (RingBenchmark.roundTrip in paired mode: one message and its echo, no fill level) instead of the"
                + " throughput at a held level")
        boolean roundTrip;
    }

    /**
     * One cell: our kind against Agrona's at one size and level, or (fill 0) one percentile of the round trip: each
     * block's p50 or p99.
     */
    record Cell(RingPair.Kind ours, RingPair.Kind agrona, int bytes, int fill, int percentile,
                FlightRecorderCostBench.Paired paired, double[] oursForkMeans, double[] agronaForkMeans) {

        /** {@return whether the values are round-trip percentiles (fill 0), where lower is better} */
        boolean roundTrip() {
            return fill == 0;
        }

        /** {@return "round trip p50", "round trip p99" or "25 % full"} */
        String what() {
            return roundTrip() ? "round trip p" + percentile : fill + " % full";
        }
    }

    /** The round trip's percentiles paired block by block, each a cell of its own. */
    static final int[] ROUND_TRIP_PERCENTILES = {50, 99};

    /**
     * Agrona's kind of the same family and way of writing as {@code ours}: SYMMEM_X is measured against AGRONA_X.
     *
     * @throws IllegalArgumentException for a kind that is not symmem4j's
     */
    static RingPair.Kind counterpart(RingPair.Kind ours) {
        if (!ours.symmem()) {
            throw new IllegalArgumentException("--kinds " + ours + ": expected symmem4j's kinds (SYMMEM_...), each"
                    + " measured against Agrona's of the same family (fix: e.g. --kinds SYMMEM_MANY_TO_ONE)");
        }
        return RingPair.Kind.valueOf(ours.name().replaceFirst("^SYMMEM_", "AGRONA_"));
    }

    public static void main(String[] args) throws IOException, RunnerException {
        Flags f = Cli.parse(new Flags(), args, RingPairedSuite::check);
        Files.createDirectories(f.out);
        List<Cell> cells = new ArrayList<>();
        for (int fill : f.roundTrip ? new int[] {0} : f.fills) {
            for (int bytes : f.sizes) {
                for (RingPair.Kind ours : f.kinds) {
                    cells.addAll(runCell(f, ours, bytes, fill));
                    Files.writeString(f.out.resolve("ring-paired-summary.md"), report(f, cells));
                }
            }
        }
        System.out.print(report(f, cells));
    }

    /**
     * The check of the flags before any fork starts. A round trip holds no fill level: its sizes are checked alone, so
     * that 4 KiB round trips run with the default {@code --fills} (which 4 KiB throughput cannot hold at 75 %).
     *
     * @throws IllegalArgumentException naming the flag and the fix
     */
    static Flags check(Flags flags) {
        Cli.positive("--forks", flags.forks);
        Cli.positive("--block-ms", flags.blockMs);
        Cli.positive("--warmup-blocks", flags.warmupBlocks);
        if (flags.pairs < 2) {
            throw new IllegalArgumentException("--pairs=" + flags.pairs + " expected >= 2: an interval needs two"
                    + " pairs (fix: e.g. --pairs 30)");
        }
        for (RingPair.Kind k : flags.kinds) {
            counterpart(k);
        }
        RingFillBenchmark.checkSizesAndFills(flags.sizes, flags.roundTrip ? new int[0] : flags.fills);
        return flags;
    }

    /**
     * One JMH run: the cell of the throughput at level {@code fill}, or with fill 0 the round trip's cells, one per
     * {@link #ROUND_TRIP_PERCENTILES percentile} of each block's samples.
     */
    private static List<Cell> runCell(Flags f, RingPair.Kind ours, int bytes, int fill) throws RunnerException {
        RingPair.Kind agrona = counterpart(ours);
        boolean rtt = fill == 0;
        OptionsBuilder builder = new OptionsBuilder();
        builder.include(rtt ? RingBenchmark.class.getName() + "\\.roundTrip$"
                        : RingFillBenchmark.class.getName() + "\\.throughput$")
                .param("kind", ours.name())
                .param("against", agrona.name())
                .param("messageBytes", Integer.toString(bytes))
                .forks(f.forks)
                .warmupIterations(f.warmupBlocks)
                .warmupTime(TimeValue.milliseconds(f.blockMs))
                .measurementIterations(2 * f.pairs)
                .measurementTime(TimeValue.milliseconds(f.blockMs))
                .resultFormat(ResultFormatType.JSON)
                .result(f.out.resolve("ring-paired-" + ours.name().toLowerCase(Locale.ROOT) + "-" + bytes + "-"
                        + (rtt ? "rtt" : Integer.toString(fill)) + ".json").toString());
        if (!rtt) {
            builder.param("fillPercent", Integer.toString(fill));
        }
        Options options = builder.build();
        int[] percentiles = rtt ? ROUND_TRIP_PERCENTILES : new int[] {0};
        List<List<double[]>> forks = new ArrayList<>();
        for (int ignored : percentiles) {
            forks.add(new ArrayList<>());
        }
        for (RunResult r : new Runner(options).run()) {
            for (BenchmarkResult fork : r.getBenchmarkResults()) {
                Collection<IterationResult> its = fork.getIterationResults();
                for (int i = 0; i < percentiles.length; i++) {
                    int q = percentiles[i];
                    // throughput: the block's msg/s; round trip: the block's percentile (µs) from its samples
                    forks.get(i).add(its.stream().mapToDouble(it -> rtt
                            ? it.getPrimaryResult().getStatistics().getPercentile(q)
                            : it.getPrimaryResult().getScore()).toArray());
                }
            }
        }
        List<Cell> cells = new ArrayList<>();
        for (int i = 0; i < percentiles.length; i++) {
            cells.add(cell(ours, agrona, bytes, fill, percentiles[i], forks.get(i)));
        }
        return cells;
    }

    /**
     * The cell of each fork's measured blocks in order: block {@code k} is ours when
     * {@link FlightRecorderPairedBenchmark#recorderOn recorderOn(k)} ("on" in the paired statistic), Agrona's otherwise.
     */
    static Cell cell(RingPair.Kind ours, RingPair.Kind agrona, int bytes, int fill, List<double[]> forks) {
        return cell(ours, agrona, bytes, fill, fill == 0 ? 50 : 0, forks);
    }

    /** As {@link #cell(RingPair.Kind, RingPair.Kind, int, int, List)}, for a round trip's {@code percentile}. */
    static Cell cell(RingPair.Kind ours, RingPair.Kind agrona, int bytes, int fill, int percentile,
                     List<double[]> forks) {
        double[] oursMeans = new double[forks.size()];
        double[] agronaMeans = new double[forks.size()];
        for (int i = 0; i < forks.size(); i++) {
            double[] s = forks.get(i);
            double o = 0;
            double a = 0;
            for (int k = 0; k < s.length; k++) {
                if (FlightRecorderPairedBenchmark.recorderOn(k)) {
                    o += s[k];
                } else {
                    a += s[k];
                }
            }
            oursMeans[i] = o / (s.length / 2.0);
            agronaMeans[i] = a / (s.length / 2.0);
        }
        return new Cell(ours, agrona, bytes, fill, percentile, FlightRecorderCostBench.Paired.of(forks), oursMeans,
                agronaMeans);
    }

    /**
     * Faster or slower only when both intervals of the paired difference lie on one side of 0; for round trips
     * ({@code lowerIsBetter}) a negative difference is ours lower.
     */
    static String verdict(FlightRecorderCostBench.Paired p, boolean lowerIsBetter) {
        if (Double.isNaN(p.diffHalfWidth())) {
            return "undecided (one pair)";
        }
        boolean above = p.percentLow() > 0 && p.bootPercentLow() > 0;
        boolean below = p.percentHigh() < 0 && p.bootPercentHigh() < 0;
        if (above || below) {
            return lowerIsBetter ? (below ? "ours lower (measured)" : "ours higher (measured)")
                    : (above ? "ours faster (measured)" : "ours slower (measured)");
        }
        return "undecided (an interval spans 0)";
    }

    static String report(Flags f, List<Cell> cells) {
        StringBuilder md = new StringBuilder();
        md.append(String.format(Locale.ROOT, "%n## Rings paired%s, 2 processes: symmem4j against Agrona, block by"
                        + " block%n%ncpus: %s; %d forks per cell, each %d warm-up blocks and %d pairs of %d ms blocks"
                        + " (ABBA); ring %d bytes%s%n%n", f.roundTrip ? " (round trip, each block's p50 and p99)"
                        : " at a held fill level", System.getProperty(BenchCpus.PROPERTY, "not pinned"), f.forks,
                f.warmupBlocks, f.pairs, f.blockMs, RingFillBenchmark.CAPACITY, f.roundTrip ? ""
                        : "; consumer batch " + RingFillBenchmark.BATCH + " messages"));
        md.append("| family | fill % | bytes | ours | against | ours | Agrona | ours / Agrona | paired Δ %, 95 % t |"
                + " 95 % bootstrap | verdict |\n|---|---:|---:|---|---|---:|---:|---:|---:|---:|---|\n");
        StringBuilder details = new StringBuilder();
        for (Cell c : cells) {
            FlightRecorderCostBench.Paired p = c.paired();
            md.append(String.format(Locale.ROOT, "| %s | %s | %d | %s | %s | %s | %s | %.3f | %+.2f (%+.2f … %+.2f) |"
                            + " %+.2f … %+.2f | %s |%n", c.ours().oneToOne() ? "one-to-one" : "many-to-one",
                    c.roundTrip() ? "round trip p" + c.percentile() : Integer.toString(c.fill()), c.bytes(),
                    c.ours().maker(),
                    c.agrona().maker(), value(c, p.onMean()), value(c, p.offMean()), p.onMean() / p.offMean(),
                    p.percent(), p.percentLow(), p.percentHigh(), p.bootPercentLow(), p.bootPercentHigh(),
                    verdict(p, c.roundTrip())));
            StringBuilder forks = new StringBuilder();
            for (int i = 0; i < p.forkDiffs().length; i++) {
                forks.append(forks.isEmpty() ? "" : "; ").append(String.format(Locale.ROOT, "%s / %s, Δ %+.2f %%",
                        value(c, c.oursForkMeans()[i]), value(c, c.agronaForkMeans()[i]),
                        100 * p.forkDiffs()[i] / c.agronaForkMeans()[i]));
            }
            details.append(String.format(Locale.ROOT, "- %s, %s, %d B, %s against %s: %d pairs; forks (ours /"
                            + " Agrona, paired Δ): %s; lag-1 autocorrelation of the differences %+.2f%n",
                    c.ours().oneToOne() ? "one-to-one" : "many-to-one", c.what(), c.bytes(), c.ours().maker(), c.agrona().maker(), p.pairs(), forks,
                    p.lag1()));
        }
        md.append("\nBoth blocks of a pair ran in the same JVMs on the same cores, one block apart")
                .append(f.roundTrip ? "" : ", each ring held at the same level")
                .append("; Δ = (ours − Agrona's) / Agrona's mean. The t interval is over every pair of every fork;"
                        + " the bootstrap resamples pairs within each fork (").append(FlightRecorderCostBench.RESAMPLES)
                .append(" resamples). Both assume independent pairs (a lag-1 autocorrelation far from 0 says they are"
                        + " not). A verdict needs both intervals on one side of 0.\n\n");
        md.append(details);
        return md.toString();
    }

    /** Msg/s in millions, or a round trip's percentile in µs. */
    private static String value(Cell c, double v) {
        return c.roundTrip() ? String.format(Locale.ROOT, "%.3f µs", v) : RingSuite.mega(v);
    }
}
