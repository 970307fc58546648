package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.ThresholdTable;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.group.InJvmWorld;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * Measures this machine and writes the threshold table the calibrated {@link AlgorithmPolicy} uses:
 * for each message size (powers of 2), every eligible host algorithm with N ranks as threads is
 * measured in several interleaved repetitions (each the median of many calls); the median over the
 * repetitions picks the fastest per size, merged into ascending thresholds.
 *
 * <pre>
 *   bench/calibrate.sh [--ranks N] [--max-bytes B] [--repetitions R] [--max-spread S] [--out FILE]
 * </pre>
 * Default output {@code ~/.symmem4j/thresholds.properties}, which {@link ThresholdTable#load()}
 * picks up. Rows are written for {@code host-in-jvm} and, measured on the same memory system but
 * not through processes, {@code host-shm}. A busy machine measures noise: when the repetitions of a
 * cell spread too far, or a size takes more than {@link #MAX_SIZE_INVERSION} times as long as a larger
 * one, nothing is written, the problems are listed, and the exit status is 1 (see {@link #judge}).
 * {@code picocli} is an optional dependency of this module: the calibration command needs it on
 * the class path (bench/calibrate.sh uses the examples' class path, which has it).
 */
@Command(name = "CalibrateThresholds", mixinStandardHelpOptions = true, showDefaultValues = true,
        version = "symmem4j CalibrateThresholds", description = "Measures the host all-reduce algorithms on this"
                + " machine and writes the threshold table the calibrated algorithm policy reads. Run it on an idle"
                + " machine: a measurement that spreads too far is refused (exit status 1), not written.")
public final class CalibrateThresholds implements Callable<Integer> {

    private static final Algorithm[] CANDIDATES = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING};
    /** Within this fraction of the fastest, an algorithm ties with it. */
    static final double TIE_MARGIN = 0.05;
    /**
     * A size that takes more than this many times the time of a larger size (same algorithm) is noise:
     * an all-reduce does not get faster with more bytes (the run that prompted this check wrote a 2 KiB
     * ONE_SHOT at 257 us next to 8 KiB at 2.8 us).
     */
    static final double MAX_SIZE_INVERSION = 2.0;

    @Spec
    private CommandSpec spec;

    @Option(names = "--ranks", paramLabel = "N", description = "ranks (threads) of the group measured; the row is for this world size")
    private int ranks = 2;
    @Option(names = "--max-bytes", paramLabel = "B", description = "largest message in bytes (sizes are the powers of 2 from 1 KiB)")
    private long maxBytes = 64L << 20;
    @Option(names = "--repetitions", paramLabel = "R", description = "interleaved repetitions of every measurement (at least 3)")
    private int repetitions = 5;
    @Option(names = "--max-spread", paramLabel = "S", description = "largest accepted spread of a cell's repetitions:"
            + " interquartile range / median")
    private double maxSpread = RepetitionSpread.DEFAULT_MAX_SPREAD;
    @Option(names = "--out", paramLabel = "FILE", description = "where the table is written (its rows override the shipped defaults)")
    private Path out = Path.of(System.getProperty("user.home"), ".symmem4j", "thresholds.properties");

    private CalibrateThresholds() {
    }

    public static void main(String[] args) {
        System.exit(new CommandLine(new CalibrateThresholds()).execute(args));
    }

    @Override
    public Integer call() throws IOException {
        if (ranks < 2 || maxBytes < 1024 || repetitions < RepetitionSpread.MIN_REPETITIONS || !(maxSpread > 0)) {
            throw new ParameterException(spec.commandLine(), String.format(Locale.ROOT, "--ranks=%d --max-bytes=%d"
                    + " --repetitions=%d --max-spread=%s expected ranks >= 2, max-bytes >= 1024, repetitions >= 3,"
                    + " max-spread > 0", ranks, maxBytes, repetitions, maxSpread));
        }
        List<Long> sizes = new ArrayList<>();
        for (long b = 1024; b <= maxBytes; b *= 2) {
            sizes.add(b);
        }
        Judgement j = judge(sizes, measure(ranks, sizes, repetitions), maxSpread);
        String table = j.table(sizes);
        System.out.print(table);
        if (!j.accepted()) {
            System.out.println("not written: the measurement is noise at " + j.problems().size() + " place(s):");
            j.problems().forEach(problem -> System.out.println("  " + problem));
            System.out.println("fix: run again on an idle machine (nothing else running; bench/calibrate.sh), or accept"
                    + " more spread with --max-spread; " + out + " was left as it was");
            return 1;
        }
        List<ThresholdTable.Threshold> row = thresholds(sizes, j.medians());
        String comment = "measured by CalibrateThresholds on " + LocalDate.now() + ", " + ranks + " ranks as threads, "
                + Runtime.getRuntime().availableProcessors() + " cores\n"
                + "median over " + repetitions + " interleaved repetitions of the median microseconds per all-reduce"
                + " (float32 SUM, in place; within " + (int) (100 * TIE_MARGIN) + "% counts as a tie), and the"
                + " repetitions' spread (IQR / median, at most " + maxSpread + "):\n" + table;
        ThresholdTable written = ThresholdTable.parse("", "calibration")
                .with(Transport.HOST_IN_JVM, ranks, row)
                .with(Transport.HOST_SHM, ranks, row);
        String text = written.format(comment.strip());
        if (out.getParent() != null) {
            Files.createDirectories(out.getParent());
        }
        Files.writeString(out, text);
        System.out.println("kept: " + Transport.HOST_IN_JVM + "." + ranks + " and " + Transport.HOST_SHM + "."
                + ranks + " = " + row);
        System.out.println("wrote " + out);
        return 0;
    }

    /**
     * What the repetitions say: {@code medians[size][algorithm]} and {@code spreads[size][algorithm]}
     * (NaN where the algorithm is not eligible), and each reason the measurement cannot be trusted.
     */
    record Judgement(double[][] medians, double[][] spreads, List<String> problems) {

        boolean accepted() {
            return problems.isEmpty();
        }

        /** The medians and spreads as a text table, what the output prints and the file's comment keeps. */
        String table(List<Long> sizes) {
            StringBuilder t = new StringBuilder(String.format(Locale.ROOT, "%12s", "bytes"));
            for (Algorithm a : CANDIDATES) {
                t.append(String.format(Locale.ROOT, " %10s %7s", a, "spread"));
            }
            t.append('\n');
            for (int s = 0; s < sizes.size(); s++) {
                t.append(String.format(Locale.ROOT, "%12d", sizes.get(s)));
                for (int a = 0; a < CANDIDATES.length; a++) {
                    t.append(Double.isNaN(medians[s][a]) ? String.format(Locale.ROOT, " %10s %7s", "-", "-")
                            : String.format(Locale.ROOT, " %10.2f %7.3f", medians[s][a], spreads[s][a]));
                }
                t.append('\n');
            }
            return t.toString();
        }
    }

    /**
     * Judges {@code repetitions[size][algorithm][repetition]} (microseconds, NaN where the algorithm is
     * not eligible): the median of each cell's repetitions is its time; a cell whose repetitions
     * spread more than {@code maxSpread} ({@link RepetitionSpread#spread}: interquartile range / median,
     * quartiles by nearest rank; with 3 repetitions the whole range) is a problem, and so is a size that takes more than
     * {@link #MAX_SIZE_INVERSION} times the time of a larger size with the same algorithm. Pure: no
     * timing happens here, so it is tested on made-up numbers.
     */
    static Judgement judge(List<Long> sizes, double[][][] repetitions, double maxSpread) {
        int n = sizes.size();
        double[][] medians = new double[n][CANDIDATES.length];
        double[][] spreads = new double[n][CANDIDATES.length];
        List<String> problems = new ArrayList<>();
        for (int s = 0; s < n; s++) {
            for (int a = 0; a < CANDIDATES.length; a++) {
                double[] v = repetitions[s][a];
                if (v.length == 0 || Double.isNaN(v[0])) {
                    medians[s][a] = Double.NaN;
                    spreads[s][a] = Double.NaN;
                    continue;
                }
                medians[s][a] = RepetitionSpread.median(v);
                spreads[s][a] = RepetitionSpread.spread(v);
                RepetitionSpread.problem("bytes=" + sizes.get(s) + " " + CANDIDATES[a], v, maxSpread)
                        .ifPresent(problems::add);
            }
        }
        for (int a = 0; a < CANDIDATES.length; a++) {
            double fastestLarger = Double.POSITIVE_INFINITY;
            long fastestLargerBytes = 0;
            for (int s = n - 1; s >= 0; s--) {
                double m = medians[s][a];
                if (Double.isNaN(m)) {
                    continue;
                }
                if (m > MAX_SIZE_INVERSION * fastestLarger) {
                    problems.add(String.format(Locale.ROOT, "bytes=%d %s: median %.2f us, more than %.0fx the %.2f us of"
                            + " the larger bytes=%d (a larger message cannot be that much faster)", sizes.get(s),
                            CANDIDATES[a], m, MAX_SIZE_INVERSION, fastestLarger, fastestLargerBytes));
                }
                if (m < fastestLarger) {
                    fastestLarger = m;
                    fastestLargerBytes = sizes.get(s);
                }
            }
        }
        return new Judgement(medians, spreads, problems);
    }

    /**
     * times[size][algorithm][repetition] in microseconds; NaN where the algorithm is not eligible.
     * Repetitions interleave the algorithms, so a stretch of the machine running slow hits every
     * algorithm alike instead of deciding a winner.
     */
    static double[][][] measure(int ranks, List<Long> sizes, int repetitions) {
        long maxBytes = sizes.getLast();
        List<double[][][]> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults(), group -> {
            double[][][] times = new double[sizes.size()][CANDIDATES.length][repetitions];
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, maxBytes);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment reps = arena.allocate(16);
                // JIT warm-up: until the reduction loops are compiled, times are those of the
                // interpreter (milliseconds per call for the Vector API), not of the machine
                // (4096 elements, or fewer when --max-bytes leaves a smaller buffer)
                long warmCount = Math.min(4096, maxBytes / 4);
                for (int round = 0; round < 2_000; round++) {
                    for (Algorithm alg : CANDIDATES) {
                        comm.allReduce(mem, 0, warmCount, DType.FLOAT32, ReduceOp.SUM, alg);
                    }
                }
                for (int s = 0; s < sizes.size(); s++) {
                    long count = sizes.get(s) / 4;
                    for (int a = 0; a < CANDIDATES.length; a++) {
                        Arrays.fill(times[s][a], Double.NaN);
                    }
                    for (int rep = 0; rep < repetitions; rep++) {
                        for (int a = 0; a < CANDIDATES.length; a++) {
                            Algorithm alg = CANDIDATES[a];
                            if (AlgorithmPolicy.eligible(alg, comm, count, DType.FLOAT32, ReduceOp.SUM)) {
                                times[s][a][rep] = medianMicros(comm, mem, count, alg, reps);
                            }
                        }
                    }
                }
            }
            return times;
        });
        return perRank.getFirst();
    }

    /** Median microseconds of one all-reduce: ~30 ms warm-up, then ~100 ms of samples; counts set by rank 0. */
    private static double medianMicros(Communicator comm, SymmetricMemory mem, long count, Algorithm alg,
                                       MemorySegment counts) {
        // rank 0 times 10 calls and sizes the warm-up and the sampling; the counts are broadcast,
        // since every rank must make the same calls
        long t0 = System.nanoTime();
        for (int w = 0; w < 10; w++) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, alg);
        }
        long once = Math.max(1, (System.nanoTime() - t0) / 10);
        counts.set(ValueLayout.JAVA_LONG, 0, Math.min(100_000, 30_000_000L / once));
        counts.set(ValueLayout.JAVA_LONG, 8, Math.max(5, Math.min(50_000, 100_000_000L / once)));
        comm.broadcast(counts, 2, DType.FLOAT64, 0); // raw bits of two longs
        for (long w = counts.get(ValueLayout.JAVA_LONG, 0); w > 0; w--) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, alg);
        }
        int n = (int) counts.get(ValueLayout.JAVA_LONG, 8);
        long[] samples = new long[n];
        for (int i = 0; i < n; i++) {
            long t = System.nanoTime();
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, alg);
            samples[i] = System.nanoTime() - t;
        }
        Arrays.sort(samples);
        return samples[n / 2] / 1e3;
    }

    /**
     * The winner per size, merged into ascending thresholds: a run of sizes with the same winner
     * ends at its largest size. An algorithm within {@link #TIE_MARGIN} of the fastest counts as a
     * tie; ties go to the previous size's winner, so noise does not flip the table back and forth.
     */
    static List<ThresholdTable.Threshold> thresholds(List<Long> sizes, double[][] medians) {
        List<ThresholdTable.Threshold> row = new ArrayList<>();
        Algorithm current = null;
        long currentMax = 0;
        for (int s = 0; s < sizes.size(); s++) {
            double bestTime = Double.MAX_VALUE;
            for (int a = 0; a < CANDIDATES.length; a++) {
                if (!Double.isNaN(medians[s][a])) {
                    bestTime = Math.min(bestTime, medians[s][a]);
                }
            }
            Algorithm best = null;
            for (int a = 0; a < CANDIDATES.length; a++) {
                boolean tie = !Double.isNaN(medians[s][a]) && medians[s][a] <= bestTime * (1 + TIE_MARGIN);
                if (tie && (best == null || CANDIDATES[a] == current)) {
                    best = CANDIDATES[a];
                }
            }
            if (best == null) {
                continue;
            }
            if (current != null && best != current) {
                row.add(new ThresholdTable.Threshold(currentMax, current));
            }
            current = best;
            currentMax = sizes.get(s);
        }
        row.add(new ThresholdTable.Threshold(Long.MAX_VALUE, current == null ? Algorithm.TWO_SHOT : current));
        return row;
    }
}
