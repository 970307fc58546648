package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.gradsync.ThresholdTable;
import org.symmem4j.parallel.Algorithm;

/** {@link CalibrateThresholds#judge} on made-up repetitions: what is kept, what is refused and why. */
class CalibrationJudgementTest {

    private static final List<Long> SIZES = List.of(1024L, 2048L, 4096L, 8192L);
    private static final double[] NOT_ELIGIBLE = {Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN};

    /** Five repetitions around {@code median}, the middle three within +-2 %, one low and one high outlier. */
    private static double[] steady(double median) {
        return new double[] {median * 1.01, median * 0.6, median, median * 0.98, median * 3.0};
    }

    private static double[][][] steadyTable() {
        return new double[][][] {
            {steady(2.0), steady(3.0), NOT_ELIGIBLE},
            {steady(2.5), steady(3.2), steady(4.0)},
            {steady(3.0), steady(3.4), steady(4.1)},
            {steady(5.0), steady(3.6), steady(4.2)},
        };
    }

    @Test
    void steadyRepetitionsAreKeptWithTheirMedians() {
        CalibrateThresholds.Judgement j = CalibrateThresholds.judge(SIZES, steadyTable(), 0.25);
        assertTrue(j.accepted(), "problems: " + j.problems());
        assertArrayEquals(new double[] {2.0, 3.0, Double.NaN}, j.medians()[0], 1e-12, "median of each cell, NaN kept");
        assertEquals(0.03, j.spreads()[0][0], 1e-9, "IQR / median: (1.01 - 0.98) / 1, the outliers left out");
        assertTrue(Double.isNaN(j.spreads()[0][2]), "an ineligible cell has no spread");
        // the medians feed the threshold merge as before: ONE_SHOT up to 4 KiB, then TWO_SHOT
        assertEquals(List.of(new ThresholdTable.Threshold(4096, Algorithm.ONE_SHOT),
                new ThresholdTable.Threshold(Long.MAX_VALUE, Algorithm.TWO_SHOT)),
                CalibrateThresholds.thresholds(SIZES, j.medians()));
        assertTrue(j.table(SIZES).contains("        2048       2.50   0.030"), j.table(SIZES));
    }

    @Test
    void aCellWhoseRepetitionsSpreadIsRefusedNamingSizeAndAlgorithm() {
        double[][][] t = steadyTable();
        t[1][1] = new double[] {3.0, 4.5, 3.2, 6.0, 3.1}; // TWO_SHOT at 2 KiB: quartiles 3.1 and 4.5 around 3.2
        CalibrateThresholds.Judgement j = CalibrateThresholds.judge(SIZES, t, 0.25);
        assertFalse(j.accepted());
        assertEquals(1, j.problems().size(), "problems: " + j.problems());
        String p = j.problems().getFirst();
        assertTrue(p.startsWith("bytes=2048 TWO_SHOT: repetitions [3.00, 3.10, 3.20, 4.50, 6.00] us spread 0.43"), p);
        assertTrue(p.contains("expected at most 0.25"), p);
        assertTrue(CalibrateThresholds.judge(SIZES, t, 0.5).accepted(), "a looser --max-spread accepts it");
    }

    @Test
    void aSmallSizeFarSlowerThanALargerOneIsRefused() {
        double[][][] t = steadyTable();
        // the run: a 2 KiB ONE_SHOT at 257 us next to 8 KiB at 2.8 us, steady within itself
        t[1][0] = steady(257.0);
        t[3][0] = steady(2.8);
        CalibrateThresholds.Judgement j = CalibrateThresholds.judge(SIZES, t, 0.25);
        assertFalse(j.accepted());
        assertEquals(List.of("bytes=2048 ONE_SHOT: median 257.00 us, more than 2x the 2.80 us of the larger bytes=8192"
                + " (a larger message cannot be that much faster)"), j.problems());
    }

    @Test
    void threeRepetitionsUseTheWholeRange() {
        double[][][] t = new double[1][3][];
        t[0][0] = new double[] {1.0, 1.1, 1.3};
        t[0][1] = new double[] {2.0, 2.0, 2.0};
        t[0][2] = new double[] {Double.NaN, Double.NaN, Double.NaN};
        CalibrateThresholds.Judgement j = CalibrateThresholds.judge(List.of(1024L), t, 0.25);
        assertEquals(0.3 / 1.1, j.spreads()[0][0], 1e-12);
        assertEquals(0.0, j.spreads()[0][1], 0.0);
        assertFalse(j.accepted(), "(1.3 - 1.0) / 1.1 = 0.27 exceeds 0.25");
    }

    @Test
    void calibrationMergesWinnersAndBreaksTiesTowardsThePreviousWinner() {
        List<Long> sizes = List.of(1024L, 2048L, 4096L, 8192L);
        double[][] medians = {
            {1.0, 2.0, 3.0},      // ONE_SHOT
            {2.0, 1.02, 1.0},     // TWO_SHOT within 5% of RING: tie, no previous TWO_SHOT, first in order wins
            {3.0, 1.0, 1.04},     // TWO_SHOT again (RING within the margin but TWO_SHOT is the previous winner)
            {9.0, 5.0, 1.0},      // RING clearly
        };
        List<ThresholdTable.Threshold> row = CalibrateThresholds.thresholds(sizes, medians);
        assertEquals(List.of(new ThresholdTable.Threshold(1024, Algorithm.ONE_SHOT),
                new ThresholdTable.Threshold(4096, Algorithm.TWO_SHOT),
                new ThresholdTable.Threshold(Long.MAX_VALUE, Algorithm.RING)), row);
    }
}
