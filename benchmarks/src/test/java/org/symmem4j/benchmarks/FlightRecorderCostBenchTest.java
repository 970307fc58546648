package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/** The paired cost report's arithmetic, against hand-computed values. */
class FlightRecorderCostBenchTest {

    @Test
    void aCellsForksGetThePlacementAndTheRingSize() {
        List<String> shadow = List.of(FlightRecorderPairedBenchmark.forkFlags(64, "in-shadow"));
        assertTrue(shadow.contains("-Dsymmem4j.flight.recorder.arrival=in-shadow"), shadow.toString());
        assertTrue(shadow.contains("-Dsymmem4j.flight.recorder.entries=64"), shadow.toString());
        List<String> plain = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "after-wait"));
        assertTrue(plain.contains("-Dsymmem4j.flight.recorder.arrival=after-wait"), plain.toString());
        // the removed layouts' settings are set no more: a fork runs the one layout
        String removed = "-Dsymmem4j\\.flight\\.recorder\\.(padded|compact|storage|runs)=.*";
        assertTrue(plain.stream().noneMatch(f -> f.matches(removed)), plain.toString());
        List<String> small = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow@256"));
        assertTrue(small.contains("-Dsymmem4j.flight.recorder.arrival=in-shadow"), small.toString());
        assertTrue(small.contains("-Dsymmem4j.flight.recorder.entries=256"), small.toString());
        for (String bad : new String[] {"in-shade", "in-shadow@", "in-shadow@0", "in-shadow+tight", "in-shadow@x",
            "in-shadow+padded", "in-shadow+compact", "in-shadow+heap", "in-shadow+copy", "in-shadow+runs"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> FlightRecorderPairedBenchmark.forkFlags(1024, bad), bad);
            assertTrue(e.getMessage().contains("fix: e.g. --arrivals in-shadow,after-wait"), e.getMessage());
        }
    }

    @Test
    void everyCellPrewarmsUnlessCold() {
        List<String> warm = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow"));
        assertTrue(warm.contains("-Dsymmem4j.bench.recorder.prewarm=" + FlightRecorderPairedBenchmark.PREWARM_DEFAULT),
                warm.toString());
        assertTrue(warm.stream().noneMatch(f -> f.startsWith("-XX:")), warm.toString());
        List<String> cold = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow+arrival+cold@64", true));
        assertTrue(cold.contains("-Dsymmem4j.bench.recorder.prewarm=0"), cold.toString());
        assertTrue(cold.contains("-Dsymmem4j.flight.recorder.probe=arrival"), cold.toString());
        assertTrue(cold.contains("-Dsymmem4j.flight.recorder.entries=64"), cold.toString());
        assertTrue(cold.containsAll(FlightRecorderPairedBenchmark.JIT_LOG_FLAGS), cold.toString());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow+cold+cold"));
        assertTrue(e.getMessage().contains("+cold twice"), e.getMessage());
        assertTrue(warm.contains("-Dsymmem4j.bench.recorder.prewarm.every=2"), warm.toString());
        List<String> skewed = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow+share20"));
        assertTrue(skewed.contains("-Dsymmem4j.bench.recorder.prewarm.every=20"), skewed.toString());
        assertTrue(skewed.contains("-Dsymmem4j.bench.recorder.prewarm=" + FlightRecorderPairedBenchmark.PREWARM_DEFAULT),
                skewed.toString());
        for (String bad : new String[] {"in-shadow+share1", "in-shadow+share", "in-shadow+cold+share4"}) {
            assertThrows(IllegalArgumentException.class, () -> FlightRecorderPairedBenchmark.forkFlags(1024, bad), bad);
        }
    }

    @Test
    void probeAndSpinCellsCombine() {
        List<String> f = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow+arrival+spin64@256"));
        assertTrue(f.contains("-Dsymmem4j.flight.recorder.arrival=in-shadow"), f.toString());
        assertTrue(f.contains("-Dsymmem4j.flight.recorder.probe=arrival"), f.toString());
        assertTrue(f.contains("-Dsymmem4j.wait.spinfirst=64"), f.toString());
        assertTrue(f.contains("-Dsymmem4j.flight.recorder.entries=256"), f.toString());
        List<String> plain = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow"));
        assertTrue(plain.contains("-Dsymmem4j.flight.recorder.probe=all"), plain.toString());
        assertTrue(plain.contains("-Dsymmem4j.wait.spinfirst=0"), plain.toString());
        List<String> none = List.of(FlightRecorderPairedBenchmark.forkFlags(1024, "in-shadow+none"));
        assertTrue(none.contains("-Dsymmem4j.flight.recorder.probe=none"), none.toString());
        for (String bad : new String[] {"in-shadow+arrival+none", "in-shadow+line", "in-shadow+spin", "in-shadow+spin-1",
            "in-shadow+spin5000", "in-shadow+spin8+spin8", "in-shadow+none+none", "in-shadow+"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> FlightRecorderPairedBenchmark.forkFlags(1024, bad), bad);
            assertTrue(e.getMessage().contains("fix: e.g. --arrivals in-shadow,"), e.getMessage());
        }
    }

    @Test
    void iterationsAlternateInAbbaPairs() {
        boolean[] expected = {false, true, true, false, false, true, true, false};
        for (int k = 0; k < expected.length; k++) {
            assertEquals(expected[k], FlightRecorderPairedBenchmark.recorderOn(k), "iteration " + k);
        }
    }

    @Test
    void pairsOnMinusOffWithinEachFork() {
        // fork 0: (off 1000, on 1010), (on 1004, off 1000) -> diffs 10, 4; fork 1 slower by 10 %: (off 1100, on 1102),
        // (on 1110, off 1100) -> diffs 2, 10. A fork effect far larger than the differences does not enter them.
        FlightRecorderCostBench.Paired p = FlightRecorderCostBench.Paired.of(List.of(
                new double[] {1000, 1010, 1004, 1000}, new double[] {1100, 1102, 1110, 1100}));
        assertEquals(4, p.pairs());
        assertEquals(6.5, p.diffMean(), 1e-12);
        assertEquals((1000 + 1000 + 1100 + 1100) / 4.0, p.offMean(), 1e-12);
        assertEquals((1010 + 1004 + 1102 + 1110) / 4.0, p.onMean(), 1e-12);
        assertArrayEquals(new double[] {7, 6}, p.forkDiffs(), 1e-12);
        // sample sd of {10, 4, 2, 10} = sqrt((3.5^2 + 2.5^2 + 4.5^2 + 3.5^2) / 3) = sqrt(17); t(3) = 3.182
        assertEquals(3.182 * Math.sqrt(17.0 / 4), p.diffHalfWidth(), 1e-9);
        assertEquals(100 * 6.5 / 1050, p.percent(), 1e-12);
        assertTrue(p.verdict().startsWith("undecided"), p.verdict()); // 0.62 % ± 0.62 %: spans 1 %
    }

    @Test
    void verdicts() {
        // differences 1, 2, 1, 2 ns on 1000 ns: 0.15 % ± small: met
        FlightRecorderCostBench.Paired met = FlightRecorderCostBench.Paired.of(List.of(
                new double[] {1000, 1001, 1002, 1000, 1000, 1001, 1002, 1000}));
        assertTrue(met.verdict().startsWith("≤ 1 %"), met.verdict());
        // differences 50, 52, 50, 52 ns on 1000 ns: 5 %: missed
        FlightRecorderCostBench.Paired missed = FlightRecorderCostBench.Paired.of(List.of(
                new double[] {1000, 1050, 1052, 1000, 1000, 1050, 1052, 1000}));
        assertTrue(missed.verdict().startsWith("> 1 %"), missed.verdict());
    }

    @Test
    void theBootstrapResamplesWithinEachFork() {
        // fork 0's differences are all 0 ns, fork 1's all 10 ns: each fork's resampled mean is fixed, so the
        // bootstrap of the overall mean is exactly 5 (a pooled resampling would spread it from 0 to 10)
        FlightRecorderCostBench.Paired p = FlightRecorderCostBench.Paired.of(List.of(
                new double[] {1000, 1000, 1000, 1000, 1000, 1000}, new double[] {1000, 1010, 1010, 1000, 1000, 1010}));
        assertEquals(5, p.diffMean(), 1e-12);
        assertEquals(5, p.bootLow(), 1e-12);
        assertEquals(5, p.bootHigh(), 1e-12);
        assertArrayEquals(new double[] {0, 10}, p.forkDiffs(), 1e-12);
        assertArrayEquals(new double[] {0, 0}, p.forkHalfWidths(), 1e-12);
    }

    @Test
    void bootstrapIntervalOfAlternatingDifferences() {
        // 400 pairs whose differences alternate +1, -1 ns: mean 0, the mean's standard error 1 / sqrt(400) = 0.05, so a
        // 95 % interval of about ±1.96 × 0.05 = ±0.098; successive differences are perfectly anticorrelated
        double[] s = new double[800];
        for (int j = 0; j < 400; j++) {
            boolean firstOn = FlightRecorderPairedBenchmark.recorderOn(2 * j);
            double on = 1000 + (j % 2 == 0 ? 1 : -1);
            s[2 * j] = firstOn ? on : 1000;
            s[2 * j + 1] = firstOn ? 1000 : on;
        }
        FlightRecorderCostBench.Paired p = FlightRecorderCostBench.Paired.of(List.of(s));
        assertEquals(0, p.diffMean(), 1e-12);
        assertTrue(p.bootLow() < -0.085 && p.bootLow() > -0.11, "bootstrap low " + p.bootLow());
        assertTrue(p.bootHigh() > 0.085 && p.bootHigh() < 0.11, "bootstrap high " + p.bootHigh());
        assertEquals(1.960 * Math.sqrt(400.0 / 399 / 400), p.diffHalfWidth(), 1e-12); // t(399) taken as 1.960
        assertEquals(-399.0 / 400, p.lag1(), 1e-12);
        // the same data, the same interval: the seed is fixed
        FlightRecorderCostBench.Paired again = FlightRecorderCostBench.Paired.of(List.of(s));
        assertEquals(p.bootLow(), again.bootLow());
        assertEquals(p.bootHigh(), again.bootHigh());
    }

    @Test
    void quantileInterpolates() {
        double[] sorted = {0, 10, 20, 30, 40};
        assertEquals(0, FlightRecorderCostBench.quantile(sorted, 0));
        assertEquals(40, FlightRecorderCostBench.quantile(sorted, 1));
        assertEquals(20, FlightRecorderCostBench.quantile(sorted, 0.5));
        assertEquals(1, FlightRecorderCostBench.quantile(sorted, 0.025), 1e-12); // position 0.1
    }

    @Test
    void refusesOddIterationCounts() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> FlightRecorderCostBench.Paired.of(List.of(new double[] {1, 2, 3})));
        assertTrue(e.getMessage().contains("3 measurement iterations"), e.getMessage());
    }

    @Test
    void studentT() {
        assertEquals(12.706, FlightRecorderCostBench.t95(1));
        assertEquals(2.045, FlightRecorderCostBench.t95(29));
        assertEquals(1.960, FlightRecorderCostBench.t95(1000));
        assertThrows(IllegalArgumentException.class, () -> FlightRecorderCostBench.t95(0));
    }
}
