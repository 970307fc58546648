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
 *                   [--fills 25,75] [--kinds SYMMEM_MANY_TO_ONE,...] [--round-trip] [--control -Dname=value]
 *                   [--idle pause|noop]
 * </pre>
 *
 * {@code --control -Dsymmem4j.ring.X=old} measures a change of ours against its control in the same run: every fork of
 * the default (the change) is paired with a fork of its own under that system property (the fork's JVM and its peer's),
 * the two run back to back, in ABBA order over the fork pairs. Each side's forks are paired against Agrona block by
 * block as always; the report adds the control's rows and the change's effect: per fork pair, the default's paired
 * difference against Agrona less the control's, with a 95 % t interval over the fork pairs ({@link Effect}). Agrona's
 * ring, in both forks of a pair, cancels what the machine does between them.
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

    /** The ring benchmarks' idle strategy, as a JVM argument's name ({@link RingPair#PAUSE_WHEN_IDLE}). */
    static final String IDLE_PROPERTY = "-Dsymmem4j.bench.ring.idle";

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
        @Option(names = "--control", paramLabel = "-Dname=value", description = "a system property that selects the"
                + " old path of a change of ours (e.g. -Dsymmem4j.ring.headerLineFirst=false): each fork of the default is"
                + " paired with a fork of its own under it (ABBA over the fork pairs, the peer too); the report adds the"
                + " control's rows and the change's effect with a 95 %% t interval over the fork pairs")
        String control;
        @Option(names = "--idle", paramLabel = "STRATEGY", description = "what every spinning loop of both processes"
                + " does after an empty poll, for both rings: pause (Thread.onSpinWait, Agrona's BusySpinIdleStrategy)"
                + " or noop (poll again at once, Agrona's NoOpIdleStrategy)")
        String idle = "pause";
    }

    /**
     * One cell: our kind against Agrona's at one size and level, or (fill 0) one percentile of the round trip: each
     * block's p50 or p99.
     */
    record Cell(RingPair.Kind ours, RingPair.Kind agrona, int bytes, int fill, int percentile,
                FlightRecorderCostBench.Paired paired, double[] oursForkMeans, double[] agronaForkMeans, String control) {

        /** {@return each fork's paired difference against Agrona, in % of Agrona's mean in that fork} */
        double[] forkPercents() {
            double[] d = new double[oursForkMeans.length];
            for (int i = 0; i < d.length; i++) {
                d[i] = 100 * paired.forkDiffs()[i] / agronaForkMeans[i];
            }
            return d;
        }

        /** {@return ours as the report names it: "symmem4j offer", with the control's setting where it ran under one} */
        String oursName() {
            return ours.maker() + (control == null ? "" : " [" + control + "]");
        }

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
                    cells.addAll(f.control == null ? runCell(f, ours, bytes, fill, null, f.forks, "")
                            : runWithControl(f, ours, bytes, fill));
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
        if (flags.control != null && !flags.control.matches("-Dsymmem4j\\.[A-Za-z0-9_.]+=\\S+")) {
            throw new IllegalArgumentException("--control=" + flags.control + " expected one system property of"
                    + " symmem4j's, -Dsymmem4j.NAME=VALUE (fix: e.g. --control -Dsymmem4j.ring.headerLineFirst=false)");
        }
        RingPair.pauseWhenIdle(flags.idle); // refuses anything but pause or noop, before a fork starts
        RingFillBenchmark.checkSizesAndFills(flags.sizes, flags.roundTrip ? new int[0] : flags.fills);
        return flags;
    }

    /**
     * One JMH run: the cell of the throughput at level {@code fill}, or with fill 0 the round trip's cells, one per
     * {@link #ROUND_TRIP_PERCENTILES percentile} of each block's samples.
     */
    private static List<Cell> runCell(Flags f, RingPair.Kind ours, int bytes, int fill, String control, int forkCount,
                                      String tag) throws RunnerException {
        List<List<double[]>> forks = runForks(f, ours, bytes, fill, control, forkCount, tag);
        int[] percentiles = fill == 0 ? ROUND_TRIP_PERCENTILES : new int[] {0};
        List<Cell> cells = new ArrayList<>();
        for (int i = 0; i < percentiles.length; i++) {
            cells.add(cell(ours, counterpart(ours), bytes, fill, percentiles[i], forks.get(i), control));
        }
        return cells;
    }

    /**
     * The default and the control ({@link Flags#control}), fork by fork: fork pair {@code p} runs the default first when
     * {@code p} is even, the control first when odd (ABBA), each one JMH run of one fork; then the cells of each side
     * (the control's after the default's, in the same order).
     */
    private static List<Cell> runWithControl(Flags f, RingPair.Kind ours, int bytes, int fill) throws RunnerException {
        int[] percentiles = fill == 0 ? ROUND_TRIP_PERCENTILES : new int[] {0};
        List<List<double[]>> change = new ArrayList<>();
        List<List<double[]>> control = new ArrayList<>();
        for (int ignored : percentiles) {
            change.add(new ArrayList<>());
            control.add(new ArrayList<>());
        }
        for (int p = 0; p < f.forks; p++) {
            for (int side = 0; side < 2; side++) {
                boolean controlNow = (side == 0) == (p % 2 == 1);
                List<List<double[]>> into = controlNow ? control : change;
                List<List<double[]>> got = runForks(f, ours, bytes, fill, controlNow ? f.control : null, 1,
                        (controlNow ? "-control" : "-change") + "-pair" + p);
                for (int i = 0; i < percentiles.length; i++) {
                    into.get(i).addAll(got.get(i));
                }
            }
        }
        List<Cell> cells = new ArrayList<>();
        for (int i = 0; i < percentiles.length; i++) {
            cells.add(cell(ours, counterpart(ours), bytes, fill, percentiles[i], change.get(i), null));
        }
        for (int i = 0; i < percentiles.length; i++) {
            cells.add(cell(ours, counterpart(ours), bytes, fill, percentiles[i], control.get(i), f.control));
        }
        return cells;
    }

    /**
     * One JMH run of {@code forkCount} forks, under {@code control} (a system property prepended to the forks' JVM
     * arguments, which {@link PeerProcess} hands on to the peer) or none: per percentile (one for throughput), each
     * fork's measured blocks in order.
     */
    private static List<List<double[]>> runForks(Flags f, RingPair.Kind ours, int bytes, int fill, String control,
                                                 int forkCount, String tag) throws RunnerException {
        RingPair.Kind agrona = counterpart(ours);
        boolean rtt = fill == 0;
        OptionsBuilder builder = new OptionsBuilder();
        builder.include(rtt ? RingBenchmark.class.getName() + "\\.roundTrip$"
                        : RingFillBenchmark.class.getName() + "\\.throughput$")
                .param("kind", ours.name())
                .param("against", agrona.name())
                .param("messageBytes", Integer.toString(bytes))
                .forks(forkCount)
                .warmupIterations(f.warmupBlocks)
                .warmupTime(TimeValue.milliseconds(f.blockMs))
                .measurementIterations(2 * f.pairs)
                .measurementTime(TimeValue.milliseconds(f.blockMs))
                .resultFormat(ResultFormatType.JSON)
                .result(f.out.resolve("ring-paired-" + ours.name().toLowerCase(Locale.ROOT) + "-" + bytes + "-"
                        + (rtt ? "rtt" : Integer.toString(fill)) + tag + ".json").toString());
        if (!rtt) {
            builder.param("fillPercent", Integer.toString(fill));
        }
        // prepended, in one call (a second replaces the first): the benchmark's own appended arguments stay (the
        // options' jvmArgsAppend would replace its @Fork list, --add-exports included), and so do the host JVM's,
        // which JMH hands on. The idle strategy reaches both processes (the peer inherits the fork's
        // -Dsymmem4j.bench.* properties, PeerProcess), unless this run is a control of the idle strategy itself
        List<String> prepended = new ArrayList<>();
        if (control == null || !control.startsWith(IDLE_PROPERTY + "=")) {
            prepended.add(IDLE_PROPERTY + "=" + f.idle);
        }
        if (control != null) {
            prepended.add(control);
        }
        builder.jvmArgsPrepend(prepended.toArray(String[]::new));
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
        return forks;
    }

    /**
     * The cell of each fork's measured blocks in order: block {@code k} is ours when
     * {@link FlightRecorderPairedBenchmark#recorderOn recorderOn(k)} ("on" in the paired statistic), Agrona's otherwise.
     */
    static Cell cell(RingPair.Kind ours, RingPair.Kind agrona, int bytes, int fill, List<double[]> forks) {
        return cell(ours, agrona, bytes, fill, fill == 0 ? 50 : 0, forks, null);
    }

    /**
     * As {@link #cell(RingPair.Kind, RingPair.Kind, int, int, List)}, for a round trip's {@code percentile}, from forks
     * run under {@code control} (null: the default).
     */
    static Cell cell(RingPair.Kind ours, RingPair.Kind agrona, int bytes, int fill, int percentile,
                     List<double[]> forks, String control) {
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
                agronaMeans, control);
    }

    /**
     * A change against its control ({@link Flags#control}) in one cell: per fork pair, the default's paired difference
     * against Agrona (in % of Agrona's mean in its fork) less the control's. Agrona's ring runs in both forks of a pair,
     * so a machine that drifts between the two forks moves both sides' Agrona alike and cancels.
     *
     * @param change   the default's cell
     * @param control  the control's cell, from as many forks, fork {@code i} run next to the change's fork {@code i}
     * @param effects  per fork pair, the change's Δ % less the control's (percentage points)
     * @param mean     their mean
     * @param halfWidth the 95 % t half-width over the fork pairs (NaN for one pair)
     */
    record Effect(Cell change, Cell control, double[] effects, double mean, double halfWidth) {

        static Effect of(Cell change, Cell control) {
            double[] a = change.forkPercents();
            double[] b = control.forkPercents();
            if (a.length != b.length) {
                throw new IllegalArgumentException("change forks=" + a.length + " control forks=" + b.length
                        + " expected as many, one control fork per fork of the change (fix: a fork of one side failed;"
                        + " its error is in the JMH output, ring-paired.txt, above the summary)");
            }
            double[] d = new double[a.length];
            for (int i = 0; i < d.length; i++) {
                d[i] = a[i] - b[i];
            }
            return new Effect(change, control, d, FlightRecorderCostBench.mean(d), FlightRecorderCostBench.halfWidth(d));
        }

        /** Lower or higher (round trip), faster or slower (throughput), only when the interval is on one side of 0. */
        String verdict() {
            if (Double.isNaN(halfWidth)) {
                return "undecided (one fork pair)";
            }
            boolean lower = mean + halfWidth < 0;
            boolean higher = mean - halfWidth > 0;
            if (!lower && !higher) {
                return "undecided (the interval spans 0)";
            }
            return change.roundTrip() ? (lower ? "the change lowers it" : "the change raises it")
                    : (higher ? "the change is faster" : "the change is slower");
        }
    }

    /** The effects of the cells run with a control: each default cell with the control's cell of the same measure. */
    static List<Effect> effects(List<Cell> cells) {
        List<Effect> effects = new ArrayList<>();
        for (Cell c : cells) {
            if (c.control() != null) {
                continue;
            }
            for (Cell k : cells) {
                if (k.control() != null && k.ours() == c.ours() && k.bytes() == c.bytes() && k.fill() == c.fill()
                        && k.percentile() == c.percentile()) {
                    effects.add(Effect.of(c, k));
                }
            }
        }
        return effects;
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
                        + " (ABBA); ring %d bytes; idle strategy %s%s%n%n", f.roundTrip ? " (round trip, each block's p50 and p99)"
                        : " at a held fill level", System.getProperty(BenchCpus.PROPERTY, "not pinned"), f.forks,
                f.warmupBlocks, f.pairs, f.blockMs, RingFillBenchmark.CAPACITY, f.idle, f.roundTrip ? ""
                        : "; consumer batch " + RingFillBenchmark.BATCH + " messages"));
        md.append("| family | fill % | bytes | ours | against | ours | Agrona | ours / Agrona | paired Δ %, 95 % t |"
                + " 95 % bootstrap | verdict |\n|---|---:|---:|---|---|---:|---:|---:|---:|---:|---|\n");
        StringBuilder details = new StringBuilder();
        for (Cell c : cells) {
            FlightRecorderCostBench.Paired p = c.paired();
            md.append(String.format(Locale.ROOT, "| %s | %s | %d | %s | %s | %s | %s | %.3f | %+.2f (%+.2f … %+.2f) |"
                            + " %+.2f … %+.2f | %s |%n", c.ours().oneToOne() ? "one-to-one" : "many-to-one",
                    c.roundTrip() ? "round trip p" + c.percentile() : Integer.toString(c.fill()), c.bytes(),
                    c.oursName(),
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
                    c.ours().oneToOne() ? "one-to-one" : "many-to-one", c.what(), c.bytes(), c.oursName(), c.agrona().maker(), p.pairs(), forks,
                    p.lag1()));
        }
        md.append("\nBoth blocks of a pair ran in the same JVMs on the same cores, one block apart")
                .append(f.roundTrip ? "" : ", each ring held at the same level")
                .append("; Δ = (ours − Agrona's) / Agrona's mean. The t interval is over every pair of every fork;"
                        + " the bootstrap resamples pairs within each fork (").append(FlightRecorderCostBench.RESAMPLES)
                .append(" resamples). Both assume independent pairs (a lag-1 autocorrelation far from 0 says they are"
                        + " not). A verdict needs both intervals on one side of 0.\n\n");
        md.append(details);
        List<Effect> effects = effects(cells);
        if (!effects.isEmpty()) {
            md.append(String.format(Locale.ROOT, "%n### The change against its control (%s), fork pair by fork pair%n%n"
                    + "| family | measure | bytes | ours | Δ vs Agrona, change | Δ vs Agrona, control | effect"
                    + " (points), 95 %% t over fork pairs | verdict | per fork pair |%n"
                    + "|---|---|---:|---|---:|---:|---:|---|---|%n", f.control));
            for (Effect e : effects) {
                Cell c = e.change();
                StringBuilder per = new StringBuilder();
                for (double d : e.effects()) {
                    per.append(per.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%+.2f", d));
                }
                md.append(String.format(Locale.ROOT, "| %s | %s | %d | %s | %+.2f %% | %+.2f %% | %+.2f (%+.2f … %+.2f)"
                                + " | %s | %s |%n", c.ours().oneToOne() ? "one-to-one" : "many-to-one", c.what(),
                        c.bytes(), c.ours().maker(), c.paired().percent(), e.control().paired().percent(), e.mean(),
                        e.mean() - e.halfWidth(), e.mean() + e.halfWidth(), e.verdict(), per));
            }
            md.append("\nThe effect is, per fork pair, the change's paired difference against Agrona less the control's"
                    + " (each in % of Agrona's mean in its own fork); the two forks of a pair ran back to back (ABBA"
                    + " over the pairs). Negative lowers a round trip; positive raises throughput.\n");
        }
        return md.toString();
    }

    /** Msg/s in millions, or a round trip's percentile in µs. */
    private static String value(Cell c, double v) {
        return c.roundTrip() ? String.format(Locale.ROOT, "%.3f µs", v) : RingSuite.mega(v);
    }
}
