package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Cell;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Flags;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Phase;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.RankRun;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Settings;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import picocli.CommandLine;

/**
 * {@link GpuProcessAllReduceBench} without a GPU: its options and the arguments of a child, the result file the
 * rank processes write, and the pooling of rounds. The child JVMs are {@link ChildJvmsTest}'s, the comparison and
 * report {@link ProcessAllReduceReportTest}'s.
 */
class GpuProcessAllReduceBenchTest {

    // settings, cell and phase are ProcessAllReduceReportTest's fixtures too

    @TempDir
    Path dir;

    static Settings settings(String... args) {
        Flags f = new Flags();
        new CommandLine(f).parseArgs(args);
        return Settings.of(f);
    }

    @Test
    void defaultsAreBf16AndFp32GraphCapturedOnEverySizeInTwoRounds() {
        Settings s = settings();
        assertEquals(List.of(DType.BFLOAT16, DType.FLOAT32), s.dtypes());
        assertEquals(List.of(true), s.modes());
        assertArrayEquals(Sizes.ALL, s.sizes());
        assertEquals(2, s.rounds());
        assertEquals(240, s.timeoutSeconds());
        assertEquals(Duration.ofSeconds(120), s.groupOptions().timeout());
        Settings small = settings("--max-bytes", "65536", "--dtypes", "fp32", "--modes", "graph,eager");
        assertArrayEquals(new long[] {1024, 4096, 16384, 65536}, small.sizes());
        assertEquals(List.of(false, true), small.modes(), "eager before graph, as GpuAllReduceBench measures");
    }

    @Test
    void badValuesAreRefusedNamingTheFlag() {
        assertTrue(assertThrows(IllegalArgumentException.class, () -> settings("--gpus", "1")).getMessage()
                .startsWith("--gpus=1 expected 0 (every GPU) or >= 2"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> settings("--dtypes", "fp16")).getMessage()
                .contains("'fp16' expected bf16 or fp32"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> settings("--modes", "replay")).getMessage()
                .contains("'replay' expected graph or eager"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> settings("--reps", "0")).getMessage()
                .startsWith("--reps=0"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> settings("--max-bytes", "512")).getMessage()
                .startsWith("--max-bytes=512"));
    }

    @Test
    void aChildMeasuresWhatTheParentWasAskedForInOneRound() {
        Settings parent = settings("--reps", "9", "--rounds", "3", "--max-bytes", "4194304", "--dtypes", "bf16",
                "--modes", "eager,graph", "--timeout", "100");
        List<String> args = parent.childArgs("rank", 4, dir.resolve("r.txt"));
        Flags f = new Flags();
        new CommandLine(f).parseArgs(args.toArray(String[]::new));
        assertEquals("rank", f.child);
        assertEquals(dir.resolve("r.txt"), f.result);
        assertEquals(4, f.gpus);
        assertEquals(new Settings(4, 9, 1, 4194304, List.of(DType.BFLOAT16), true, true, 100), Settings.of(f));
    }

    static Cell cell(DType dtype, Algorithm a, boolean graph, long bytes, double... reps) {
        return new Cell(dtype, a, graph, bytes, reps);
    }

    @Test
    void theResultFileCarriesEveryRanksRepetitionsExactly() {
        List<Cell> rank0 = List.of(cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 10.1, 0.1 + 0.2, 1e-7),
                cell(DType.BFLOAT16, Algorithm.NCCL, true, 1024));
        List<Cell> rank1 = List.of(cell(DType.FLOAT32, Algorithm.TWO_SHOT, false, 268435456, 812.5));
        String text = GpuProcessAllReduceBench.encodeResult(new RankRun("NVIDIA H100\t80GB HBM3", "PDL", false, rank0),
                List.of(GpuProcessAllReduceBench.encodeCells(0, rank0), GpuProcessAllReduceBench.encodeCells(1, rank1)));
        Phase p = GpuProcessAllReduceBench.parseResult(text, 12.5);
        assertEquals("NVIDIA H100 80GB HBM3", p.device());
        assertEquals("PDL", p.launch());
        assertFalse(p.nccl());
        assertEquals(12.5, p.wallSeconds());
        assertEquals(2, p.perRank().size());
        Cell one = p.perRank().get(0).get(0);
        assertArrayEquals(new double[] {10.1, 0.1 + 0.2, 1e-7}, one.repetitions(), 0.0);
        assertEquals(Algorithm.ONE_SHOT, one.algorithm());
        assertTrue(one.graph());
        assertFalse(p.perRank().get(0).get(1).ran());
        assertTrue(Double.isNaN(p.perRank().get(0).get(1).micros()));
        Cell other = p.perRank().get(1).getFirst();
        assertEquals(DType.FLOAT32, other.dtype());
        assertFalse(other.graph());
        assertEquals(268435456L, other.bytes());
        assertEquals(812.5, p.slowestRank(Cell.key(DType.FLOAT32, Algorithm.TWO_SHOT, false, 268435456)));

        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> GpuProcessAllReduceBench.parseResult(text + "cell\t2\tFLOAT32\tNCCL\tgraph\t1024\t1.0\n", 0));
        assertTrue(e.getMessage().contains("rank=2 outside [0, 2)"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> GpuProcessAllReduceBench.parseResult("hello\n", 0));
        assertTrue(e.getMessage().startsWith("result file: first line=hello"), e.getMessage());
    }

    static Phase phase(boolean nccl, List<List<Cell>> perRank) {
        return new Phase("GPU", "PDL", nccl, perRank, 1.0);
    }

    @Test
    void roundsPoolEachCellsRepetitionsInRoundOrder() {
        Phase a = phase(true, List.of(List.of(cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 1, 2)),
                List.of(cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 5))));
        Phase b = phase(false, List.of(List.of(cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 3)),
                List.of(cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 7))));
        Phase pooled = Phase.pool(List.of(a, b));
        assertArrayEquals(new double[] {1, 2, 3}, pooled.perRank().get(0).getFirst().repetitions(), 0.0);
        assertArrayEquals(new double[] {5, 7}, pooled.perRank().get(1).getFirst().repetitions(), 0.0);
        assertFalse(pooled.nccl(), "NCCL only where every round had it");
        assertEquals(2.0, pooled.wallSeconds());
    }

}
