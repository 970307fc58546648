package org.symmem4j.benchmarks;

import java.util.Arrays;
import java.util.Locale;
import java.util.Optional;

/**
 * How far repeated timings of one cell spread, and the rule that a calibration refuses a cell whose
 * repetitions spread too far: on a busy machine the median of a few repetitions is noise, and a
 * threshold row written from noise picks the wrong algorithm for every later run. Shared by the host
 * calibration ({@link CalibrateThresholds}) and the GPU one ({@code GpuAllReduceBench --thresholds}).
 * Pure: no timing happens here, so it is tested on made-up numbers.
 */
public final class RepetitionSpread {

    /**
     * The default largest accepted spread (interquartile range / median) of a cell's repetitions.
     * One slow repetition in five is tolerated (the quartiles leave it out); a machine whose middle
     * repetitions differ by a quarter of the median is not measuring the algorithm.
     */
    public static final double DEFAULT_MAX_SPREAD = 0.25;
    /** Fewer repetitions have no quartiles to speak of: the spread would be the whole range of two values. */
    public static final int MIN_REPETITIONS = 3;

    private RepetitionSpread() {
    }

    /**
     * Times {@code call} the way the doctor's calibrations do: {@code batch} calls to warm up, then {@code reps}
     * repetitions of {@code batch} calls, each started after {@code barrier} so every rank starts it together; the
     * median repetition's time per call.
     *
     * @param reps    repetitions (at least 1)
     * @param batch   calls per repetition (at least 1)
     * @param barrier lines the ranks up before each repetition (the group's barrier: MPI's, or a communicator's)
     * @param call    one call of the pattern timed
     * @return microseconds per call, the median repetition's
     */
    public static double medianMicrosPerCall(int reps, int batch, Runnable barrier, Runnable call) {
        for (int w = 0; w < batch; w++) {
            call.run();
        }
        double[] times = new double[reps];
        for (int r = 0; r < reps; r++) {
            barrier.run();
            long t0 = System.nanoTime();
            for (int i = 0; i < batch; i++) {
                call.run();
            }
            times[r] = (System.nanoTime() - t0) / 1e3 / batch;
        }
        return median(times);
    }

    /**
     * The median of the repetitions: the middle value (of an even count, the upper middle, as the
     * calibrations have always taken it).
     *
     * @param repetitions the timings, in any order, none NaN
     * @return the median
     * @throws IllegalArgumentException when there are no repetitions
     */
    public static double median(double[] repetitions) {
        double[] v = sorted(repetitions);
        return v[v.length / 2];
    }

    /**
     * The spread: interquartile range / median, quartiles by nearest rank (for 5 repetitions the 2nd
     * and 4th, so one outlier on either side is left out; with 3 the whole range).
     *
     * @param repetitions the timings, in any order, none NaN
     * @return the spread, 0 for identical repetitions
     * @throws IllegalArgumentException when there are no repetitions
     */
    public static double spread(double[] repetitions) {
        double[] v = sorted(repetitions);
        return (v[v.length - 1 - v.length / 4] - v[v.length / 4]) / v[v.length / 2];
    }

    /**
     * The refusal, if any: a message naming the cell, its repetitions, their spread and the limit, when
     * the spread exceeds {@code maxSpread}.
     *
     * @param cell        what was measured, as key=value ({@code bytes=2048 TWO_SHOT})
     * @param repetitions the timings in microseconds, in any order, none NaN
     * @param maxSpread   the largest accepted spread
     * @return the problem, or empty when the repetitions are steady enough
     * @throws IllegalArgumentException when there are no repetitions
     */
    public static Optional<String> problem(String cell, double[] repetitions, double maxSpread) {
        double spread = spread(repetitions);
        if (spread <= maxSpread) {
            return Optional.empty();
        }
        return Optional.of(String.format(Locale.ROOT, "%s: repetitions %s us spread %.3f (IQR / median), expected at most %s",
                cell, rounded(sorted(repetitions)), spread, maxSpread));
    }

    private static double[] sorted(double[] repetitions) {
        if (repetitions.length == 0) {
            throw new IllegalArgumentException("repetitions=[] expected at least one timing");
        }
        double[] v = repetitions.clone();
        Arrays.sort(v);
        return v;
    }

    private static String rounded(double[] v) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < v.length; i++) {
            b.append(i == 0 ? "" : ", ").append(String.format(Locale.ROOT, "%.2f", v[i]));
        }
        return b.append(']').toString();
    }
}
