package org.symmem4j.gradsync;

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
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.InJvmWorld;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.host.InJvmTransport;
import org.symmem4j.parallel.host.SharedMemoryTransport;

/**
 * Measures this machine and writes the threshold table the calibrated {@link AlgorithmPolicy} uses:
 * for each message size (powers of 2), the median all-reduce time of every eligible host algorithm
 * with N ranks as threads, the fastest one per size, merged into ascending thresholds.
 *
 * <pre>
 *   java ... org.symmem4j.gradsync.CalibrateThresholds [--ranks N] [--max-bytes B] [--out FILE]
 * </pre>
 * Default output {@code ~/.symmem4j/thresholds.properties}, which {@link ThresholdTable#load()}
 * picks up. Rows are written for {@code host-in-jvm} and, measured on the same memory system but
 * not through processes, {@code host-shm}. Run it on an idle machine.
 */
public final class CalibrateThresholds {

    private static final Algorithm[] CANDIDATES = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING};
    /** Measurement passes per size; each algorithm keeps its best pass. */
    private static final int PASSES = 3;
    /** Within this fraction of the fastest, an algorithm ties with it. */
    static final double TIE_MARGIN = 0.05;

    private CalibrateThresholds() {
    }

    public static void main(String[] args) throws IOException {
        int ranks = 2;
        long maxBytes = 64L << 20;
        Path out = Path.of(System.getProperty("user.home"), ".symmem4j", "thresholds.properties");
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--ranks" -> ranks = Integer.parseInt(args[++i]);
                case "--max-bytes" -> maxBytes = Long.parseLong(args[++i]);
                case "--out" -> out = Path.of(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (expected --ranks N, --max-bytes B, --out FILE)");
            }
        }
        List<Long> sizes = new ArrayList<>();
        for (long b = 1024; b <= maxBytes; b *= 2) {
            sizes.add(b);
        }
        double[][] medians = measure(ranks, sizes);
        List<ThresholdTable.Threshold> row = thresholds(sizes, medians);
        StringBuilder comment = new StringBuilder("measured by CalibrateThresholds on " + LocalDate.now()
                + ", " + ranks + " ranks as threads, " + Runtime.getRuntime().availableProcessors() + " cores\n");
        comment.append("median microseconds per all-reduce (float32 SUM, in place; best of " + PASSES
                + " interleaved passes; within " + (int) (100 * TIE_MARGIN) + "% counts as a tie):\n");
        comment.append(String.format(Locale.ROOT, "%12s %10s %10s %10s%n", "bytes", "ONE_SHOT", "TWO_SHOT", "RING"));
        for (int s = 0; s < sizes.size(); s++) {
            comment.append(String.format(Locale.ROOT, "%12d %10.2f %10.2f %10.2f%n", sizes.get(s),
                    medians[s][0], medians[s][1], medians[s][2]));
        }
        ThresholdTable table = ThresholdTable.parse("", "calibration")
                .with(InJvmTransport.NAME, ranks, row)
                .with(SharedMemoryTransport.NAME, ranks, row);
        String text = table.format(comment.toString().strip());
        if (out.getParent() != null) {
            Files.createDirectories(out.getParent());
        }
        Files.writeString(out, text);
        System.out.print(text);
        System.out.println("wrote " + out);
    }

    /** medians[size][algorithm] in microseconds; NaN where the algorithm is not eligible. */
    static double[][] measure(int ranks, List<Long> sizes) {
        long maxBytes = sizes.getLast();
        List<double[][]> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults(), group -> {
            double[][] medians = new double[sizes.size()][CANDIDATES.length];
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, maxBytes);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment reps = arena.allocate(16);
                // JIT warm-up: until the reduction loops are compiled, times are those of the
                // interpreter (milliseconds per call for the Vector API), not of the machine
                for (int round = 0; round < 2_000; round++) {
                    for (Algorithm alg : CANDIDATES) {
                        comm.allReduce(mem, 0, 4096, DType.FLOAT32, ReduceOp.SUM, alg);
                    }
                }
                for (int s = 0; s < sizes.size(); s++) {
                    long count = sizes.get(s) / 4;
                    Arrays.fill(medians[s], Double.NaN);
                    // Passes interleave the algorithms, and each keeps its best pass: a stretch of
                    // the VM running slow then hits every algorithm alike instead of deciding a winner.
                    for (int pass = 0; pass < PASSES; pass++) {
                        for (int a = 0; a < CANDIDATES.length; a++) {
                            Algorithm alg = CANDIDATES[a];
                            if (!AlgorithmPolicy.eligible(alg, comm, count, DType.FLOAT32, ReduceOp.SUM)) {
                                continue;
                            }
                            double median = medianMicros(comm, mem, count, alg, reps);
                            medians[s][a] = Double.isNaN(medians[s][a]) ? median : Math.min(medians[s][a], median);
                        }
                    }
                }
            }
            return medians;
        });
        return perRank.getFirst();
    }

    /** Median microseconds of one all-reduce: ~50 ms warm-up, then ~150 ms of samples; counts set by rank 0. */
    private static double medianMicros(Communicator comm, SymmetricMemory mem, long count, Algorithm alg,
                                       MemorySegment counts) {
        // rank 0 times 10 calls and sizes the warm-up and the sampling; the counts are broadcast,
        // since every rank must make the same calls
        long t0 = System.nanoTime();
        for (int w = 0; w < 10; w++) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, alg);
        }
        long once = Math.max(1, (System.nanoTime() - t0) / 10);
        counts.set(ValueLayout.JAVA_LONG, 0, Math.min(100_000, 50_000_000L / once));
        counts.set(ValueLayout.JAVA_LONG, 8, Math.max(5, Math.min(50_000, 150_000_000L / once)));
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
