package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Cell;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Flags;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Phase;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Settings;
import org.symmem4j.benchmarks.ProcessAllReduceReport.Comparison;
import org.symmem4j.benchmarks.ProcessAllReduceReport.ReportHeader;
import org.symmem4j.benchmarks.ProcessAllReduceReport.Summary;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import picocli.CommandLine;

/**
 * {@link ProcessAllReduceReport} on made-up cells: the summary's ratios, the report's tables and notes, and the
 * {@code --raw} CSV.
 */
class ProcessAllReduceReportTest {

    @TempDir
    Path dir;

    private static Comparison row(Algorithm a, DType d, boolean graph, long bytes, double proc, double threads) {
        Cell p = Double.isNaN(proc) ? GpuProcessAllReduceBenchTest.cell(d, a, graph, bytes)
                : GpuProcessAllReduceBenchTest.cell(d, a, graph, bytes, proc);
        Cell t = Double.isNaN(threads) ? GpuProcessAllReduceBenchTest.cell(d, a, graph, bytes)
                : GpuProcessAllReduceBenchTest.cell(d, a, graph, bytes, threads);
        return new Comparison(d, a, graph, bytes, p, t, proc, threads);
    }

    @Test
    void theSummaryGivesTheLargestRatioWhereItIsTheMedianAndTheCellsAboveTarget() {
        List<Comparison> rows = List.of(row(Algorithm.ONE_SHOT, DType.BFLOAT16, true, 1024, 10.0, 10.0),
                row(Algorithm.ONE_SHOT, DType.BFLOAT16, true, 4096, 11.0, 10.0),
                row(Algorithm.ONE_SHOT, DType.FLOAT32, true, 1024, 10.2, 10.0),
                row(Algorithm.ONE_SHOT, DType.FLOAT32, true, 4096, 9.0, 10.0),
                row(Algorithm.ONE_SHOT, DType.FLOAT32, true, 16384, Double.NaN, 10.0));
        Summary s = Summary.of(rows);
        assertEquals(4, s.cells(), "a size that ran in one phase only has no ratio");
        assertEquals(1.1, s.largest(), 1e-12);
        assertEquals("bf16 graph-captured 4 KiB", s.largestAt());
        assertEquals((1.0 + 1.02) / 2, s.median(), 1e-12, "an even count: the mean of the middle two");
        assertEquals(1, s.above());
        assertEquals("not within 5 %: 1 of 4 cells above 1.05", s.verdict());
        assertEquals("within 5 %", Summary.of(rows.subList(2, 4)).verdict());
        Summary none = Summary.of(rows.subList(4, 5));
        assertEquals(0, none.cells());
        assertNull(none.worst());
        assertEquals("not measured", none.verdict());
    }

    @Test
    void theReportHasASummaryLinePerAlgorithmATablePerAlgorithmAndTheNcclNote() throws IOException {
        Settings s = GpuProcessAllReduceBenchTest.settings("--max-bytes", "4096", "--dtypes", "bf16");
        Phase processes = GpuProcessAllReduceBenchTest.phase(false, List.of(List.of(
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 10.0, 10.5, 9.5),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 4096, 12.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 1024, 20.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 4096, 20.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.NCCL, true, 1024),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.NCCL, true, 4096))));
        Phase threads = GpuProcessAllReduceBenchTest.phase(true, List.of(List.of(
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 10.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 4096, 10.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 1024, 20.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 4096, 19.5),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.NCCL, true, 1024, 30.0),
                GpuProcessAllReduceBenchTest.cell(DType.BFLOAT16, Algorithm.NCCL, true, 4096, 30.0))));
        List<Comparison> rows = ProcessAllReduceReport.compare(s, processes, threads);
        assertEquals(6, rows.size());
        String md = ProcessAllReduceReport.report(new ReportHeader("2026-11-26T00:00:00Z", 2, 2,
                "see the results file", "CUDA driver 13000, NCCL 22703", List.of("-Xmx24g"),
                List.of("processes, threads", "threads, processes")), s, processes, threads, rows);
        assertTrue(md.contains("- GPUs: 2 × GPU (CUDA shows 2)"), md);
        assertTrue(md.contains("- commit: see the results file"), md);
        assertTrue(md.contains("- ONE_SHOT: largest processes / threads 1.200 (bf16 graph-captured 4 KiB), median 1.100"
                + " over 2 cells: not within 5 %: 1 of 2 cells above 1.05"), md);
        assertTrue(md.contains("- TWO_SHOT: largest processes / threads 1.026 (bf16 graph-captured 4 KiB), median 1.013"
                + " over 2 cells: within 5 %"), md);
        assertTrue(md.contains("- NCCL: no size ran in both phases: NCCL skipped: the communicator does not support it"
                + " in the processes"), md);
        assertTrue(md.contains("## ONE_SHOT\n\n### bf16, graph-captured\n\n| size | processes µs | threads µs"), md);
        assertTrue(md.contains("| 1 KiB | 10.00 | 10.00 | 1.000 | 0.100 | 0.000 |"), md);
        assertTrue(md.contains("| 4 KiB | 12.00 | 10.00 | **1.200** |"), md);
        assertTrue(md.contains("| 1 KiB | — | 30.00 | — |"), md);
        assertFalse(md.contains("ran only in"), "the NCCL note explains its sizes: " + md);

        Path csv = dir.resolve("raw.csv");
        ProcessAllReduceReport.writeRaw(csv, s, 2, "GPU", rows);
        List<String> lines = Files.readAllLines(csv);
        assertEquals(String.join(",", ProcessAllReduceReport.CSV_COLUMNS), lines.getFirst());
        assertEquals(7, lines.size());
        assertEquals("2,GPU,bfloat16,ONE_SHOT,graph-captured,4096,12.000,10.000,1.2000,0.0000,0.0000,12.000,10.000,15,2",
                lines.get(2));
        assertEquals("2,GPU,bfloat16,NCCL,graph-captured,1024,,30.000,,,0.0000,,30.000,15,2", lines.get(5));
    }

    @Test
    void aSizeThatRanInOnePhaseOnlyIsNamedInTheNotes() {
        Settings s = GpuProcessAllReduceBenchTest.settings("--max-bytes", "4096", "--dtypes", "fp32");
        List<Cell> proc = new ArrayList<>();
        List<Cell> thr = new ArrayList<>();
        for (Algorithm a : GpuProcessAllReduceBench.ALGORITHMS) {
            for (long bytes : s.sizes()) {
                proc.add(GpuProcessAllReduceBenchTest.cell(DType.FLOAT32, a, true, bytes, 10.0));
                boolean missing = a == Algorithm.ONE_SHOT && bytes == 4096;
                thr.add(missing ? GpuProcessAllReduceBenchTest.cell(DType.FLOAT32, a, true, bytes)
                        : GpuProcessAllReduceBenchTest.cell(DType.FLOAT32, a, true, bytes, 10.0));
            }
        }
        Phase processes = GpuProcessAllReduceBenchTest.phase(true, List.of(proc));
        Phase threads = GpuProcessAllReduceBenchTest.phase(true, List.of(thr));
        String md = ProcessAllReduceReport.report(new ReportHeader("d", 2, 2, "c", "v", List.of(), List.of("p, t")), s,
                processes, threads, ProcessAllReduceReport.compare(s, processes, threads));
        assertTrue(md.contains("\nNotes:\n\n- ONE_SHOT fp32 graph-captured 4 KiB ran only in the processes\n"), md);
        assertTrue(!md.contains("share GPUs"), "one GPU per rank: no sharing line");
        String shared = ProcessAllReduceReport.report(new ReportHeader("d", 2, 1, "c", "v", List.of(), List.of("p, t")), s,
                processes, threads, ProcessAllReduceReport.compare(s, processes, threads));
        assertTrue(shared.contains("- ranks share GPUs: 2 ranks on 1 GPU (--share-gpus)"), shared);
        assertTrue(md.contains("- ONE_SHOT: largest processes / threads 1.000 (fp32 graph-captured 1 KiB), median 1.000"
                + " over 1 cells: within 5 %"), md);
        assertTrue(md.contains("- NCCL: largest processes / threads 1.000"), md);
    }
}
