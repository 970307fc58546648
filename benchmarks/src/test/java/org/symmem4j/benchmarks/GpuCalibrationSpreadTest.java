package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.DType;

/**
 * The spread rule the GPU calibration shares with the host one ({@link RepetitionSpread}), and which
 * of {@code GpuAllReduceBench}'s cells it judges ({@link GpuAllReduceBench#calibrationProblems}), on
 * made-up repetitions: no GPU needed.
 */
class GpuCalibrationSpreadTest {

    /** Seven repetitions (the GPU bench's default) around {@code median}: the middle five within +-1 %, two outliers. */
    private static double[] steady(double median) {
        return new double[] {median * 1.01, median * 0.5, median, median * 0.99, median * 4.0, median * 1.005, median * 0.995};
    }

    private static GpuAllReduceBench.Cell graph(DType dtype, long bytes, String variant, double[] repetitions) {
        return GpuAllReduceBench.Cell.measured(dtype, bytes, variant, true, repetitions);
    }

    @Test
    void spreadIsTheInterquartileRangeOverTheMedianByNearestRank() {
        // 7 repetitions: quartiles are the 2nd and 6th smallest, so one outlier on each side is left out
        assertEquals(0.02, RepetitionSpread.spread(steady(10.0)), 1e-12);
        assertEquals(10.0, RepetitionSpread.median(steady(10.0)), 0.0);
        assertEquals(0.0, RepetitionSpread.spread(new double[] {3.0, 3.0, 3.0}), 0.0);
        // 3 repetitions: the whole range
        assertEquals(0.3 / 1.1, RepetitionSpread.spread(new double[] {1.3, 1.0, 1.1}), 1e-12);
        assertThrows(IllegalArgumentException.class, () -> RepetitionSpread.spread(new double[0]));
    }

    @Test
    void problemNamesTheCellItsSortedRepetitionsTheSpreadAndTheLimit() {
        assertEquals(Optional.empty(), RepetitionSpread.problem("bytes=1024 ONE_SHOT", steady(2.0), 0.25));
        Optional<String> p = RepetitionSpread.problem("bytes=1024 ONE_SHOT", new double[] {3.0, 4.6, 3.2, 6.0, 3.1}, 0.25);
        assertEquals(Optional.of("bytes=1024 ONE_SHOT: repetitions [3.00, 3.10, 3.20, 4.60, 6.00] us spread 0.469"
                + " (IQR / median), expected at most 0.25"), p);
    }

    @Test
    void steadyGpuTimingsGiveNoProblem() {
        List<GpuAllReduceBench.Cell> cells = List.of(
                graph(DType.BFLOAT16, 1024, "ONE_SHOT", steady(2.1)),
                graph(DType.BFLOAT16, 1024, "TWO_SHOT", steady(5.4)),
                graph(DType.BFLOAT16, 1024, "NCCL", steady(6.0)),
                GpuAllReduceBench.Cell.notRun(DType.BFLOAT16, 1024, "NCCL_SYMMETRIC", true));
        assertEquals(List.of(), GpuAllReduceBench.calibrationProblems(cells, RepetitionSpread.DEFAULT_MAX_SPREAD));
    }

    @Test
    void aSpreadGraphTimingRefusesTheRowsNamingDtypeSizeAndAlgorithm() {
        double[] noisy = {7.3, 7.4, 12.0, 7.2, 18.0, 11.5, 7.35}; // sorted: 7.2 7.3 7.35 7.4 11.5 12 18: (12 - 7.3) / 7.4
        List<GpuAllReduceBench.Cell> cells = List.of(
                graph(DType.BFLOAT16, 1024, "ONE_SHOT", steady(2.1)),
                graph(DType.FLOAT32, 1L << 20, "TWO_SHOT", noisy));
        List<String> problems = GpuAllReduceBench.calibrationProblems(cells, 0.25);
        assertEquals(1, problems.size(), "problems: " + problems);
        assertEquals("dtype=float32 bytes=1048576 TWO_SHOT graph-captured: repetitions [7.20, 7.30, 7.35, 7.40, 11.50,"
                + " 12.00, 18.00] us spread 0.635 (IQR / median), expected at most 0.25", problems.getFirst());
        assertTrue(GpuAllReduceBench.calibrationProblems(cells, 0.7).isEmpty(), "a looser --max-spread accepts it");
    }

    @Test
    void eagerTimingsAndThePolicyPassAreNotWhatTheRowsComeFrom() {
        double[] noisy = {1.0, 5.0, 9.0};
        List<GpuAllReduceBench.Cell> cells = List.of(
                GpuAllReduceBench.Cell.measured(DType.BFLOAT16, 1024, "ONE_SHOT", false, noisy),
                graph(DType.BFLOAT16, 1024, "policy:ONE_SHOT", noisy));
        assertEquals(List.of(), GpuAllReduceBench.calibrationProblems(cells, 0.25));
    }
}
