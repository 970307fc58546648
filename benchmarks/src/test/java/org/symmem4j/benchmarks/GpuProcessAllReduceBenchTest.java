package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Cell;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Comparison;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Flags;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Phase;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.RankFailure;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.RankRun;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.ReportHeader;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Settings;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Summary;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.group.ProcessGroupConfig;
import picocli.CommandLine;

/**
 * {@link GpuProcessAllReduceBench} without a GPU: its options, the child JVMs' flags and environment (read back
 * through {@link ProcessGroupConfig}, as a rank reads them), the result file the rank processes write, the
 * pooling of rounds, the summary's ratios and the report's tables from made-up cells, and the supervision of
 * child processes (plain shell commands standing in for the rank JVMs).
 */
class GpuProcessAllReduceBenchTest {

    @TempDir
    Path dir;

    private static Settings settings(String... args) {
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

    @Test
    void childJvmFlagsAreThisJvmsWithoutDebuggerOrClassPathAndWithTheRequiredOnes() {
        List<String> flags = GpuProcessAllReduceBench.childJvmFlags(List.of("-Xmx24g",
                "-agentlib:jdwp=transport=dt_socket,server=y,address=5005", "-Djava.class.path=/x.jar",
                "-Dsymmem4j.cuda.pdl=false", "--add-modules=jdk.incubator.vector"));
        assertEquals(List.of("--enable-native-access=ALL-UNNAMED", "-Xmx24g", "-Dsymmem4j.cuda.pdl=false",
                "--add-modules=jdk.incubator.vector"), flags);
        assertEquals(List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector"),
                GpuProcessAllReduceBench.childJvmFlags(List.of()));
    }

    @Test
    void aRankProcessReadsItsPlaceTheRunAndTheSecretFileNotAnOuterJobs() {
        Map<String, String> env = new HashMap<>(Map.of("SYMMEM4J_SECRET", "an-outer-jobs-secret-0123456789",
                "SYMMEM4J_RUN_ID", "outer", "TORCHELASTIC_RUN_ID", "torch", "PATH", "/bin"));
        Path secret = dir.resolve("store.secret");
        GpuProcessAllReduceBench.childEnvironment(env, 1, 2, 29500, "run-7", secret);
        assertFalse(env.containsKey("SYMMEM4J_SECRET"), "the secret variable would win over the file");
        assertFalse(env.containsKey("TORCHELASTIC_RUN_ID"));
        assertEquals(secret.toString(), env.get("SYMMEM4J_SECRET_FILE"));
        assertEquals("/bin", env.get("PATH"));
        ProcessGroupConfig c = ProcessGroupConfig.fromEnvironment(env);
        assertEquals(new ProcessGroupConfig(1, 2, 1, 2, "127.0.0.1", 29500, "run-7"), c);
    }

    private static Cell cell(DType dtype, Algorithm a, boolean graph, long bytes, double... reps) {
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

    private static Phase phase(boolean nccl, List<List<Cell>> perRank) {
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

    private static Comparison row(Algorithm a, DType d, boolean graph, long bytes, double proc, double threads) {
        Cell p = Double.isNaN(proc) ? cell(d, a, graph, bytes) : cell(d, a, graph, bytes, proc);
        Cell t = Double.isNaN(threads) ? cell(d, a, graph, bytes) : cell(d, a, graph, bytes, threads);
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
        Settings s = settings("--max-bytes", "4096", "--dtypes", "bf16");
        Phase processes = phase(false, List.of(List.of(
                cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 10.0, 10.5, 9.5),
                cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 4096, 12.0),
                cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 1024, 20.0),
                cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 4096, 20.0),
                cell(DType.BFLOAT16, Algorithm.NCCL, true, 1024),
                cell(DType.BFLOAT16, Algorithm.NCCL, true, 4096))));
        Phase threads = phase(true, List.of(List.of(
                cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 1024, 10.0),
                cell(DType.BFLOAT16, Algorithm.ONE_SHOT, true, 4096, 10.0),
                cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 1024, 20.0),
                cell(DType.BFLOAT16, Algorithm.TWO_SHOT, true, 4096, 19.5),
                cell(DType.BFLOAT16, Algorithm.NCCL, true, 1024, 30.0),
                cell(DType.BFLOAT16, Algorithm.NCCL, true, 4096, 30.0))));
        List<Comparison> rows = GpuProcessAllReduceBench.compare(s, processes, threads);
        assertEquals(6, rows.size());
        String md = GpuProcessAllReduceBench.report(new ReportHeader("2026-11-26T00:00:00Z", 2, 2,
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
        GpuProcessAllReduceBench.writeRaw(csv, s, 2, "GPU", rows);
        List<String> lines = Files.readAllLines(csv);
        assertEquals(String.join(",", GpuProcessAllReduceBench.CSV_COLUMNS), lines.getFirst());
        assertEquals(7, lines.size());
        assertEquals("2,GPU,bfloat16,ONE_SHOT,graph-captured,4096,12.000,10.000,1.2000,0.0000,0.0000,12.000,10.000,15,2",
                lines.get(2));
        assertEquals("2,GPU,bfloat16,NCCL,graph-captured,1024,,30.000,,,0.0000,,30.000,15,2", lines.get(5));
    }

    @Test
    void aSizeThatRanInOnePhaseOnlyIsNamedInTheNotes() {
        Settings s = settings("--max-bytes", "4096", "--dtypes", "fp32");
        List<Cell> proc = new ArrayList<>();
        List<Cell> thr = new ArrayList<>();
        for (Algorithm a : GpuProcessAllReduceBench.ALGORITHMS) {
            for (long bytes : s.sizes()) {
                proc.add(cell(DType.FLOAT32, a, true, bytes, 10.0));
                boolean missing = a == Algorithm.ONE_SHOT && bytes == 4096;
                thr.add(missing ? cell(DType.FLOAT32, a, true, bytes) : cell(DType.FLOAT32, a, true, bytes, 10.0));
            }
        }
        Phase processes = phase(true, List.of(proc));
        Phase threads = phase(true, List.of(thr));
        String md = GpuProcessAllReduceBench.report(new ReportHeader("d", 2, 2, "c", "v", List.of(), List.of("p, t")), s,
                processes, threads, GpuProcessAllReduceBench.compare(s, processes, threads));
        assertTrue(md.contains("\nNotes:\n\n- ONE_SHOT fp32 graph-captured 4 KiB ran only in the processes\n"), md);
        assertTrue(md.contains("- ONE_SHOT: largest processes / threads 1.000 (fp32 graph-captured 1 KiB), median 1.000"
                + " over 1 cells: within 5 %"), md);
        assertTrue(md.contains("- NCCL: largest processes / threads 1.000"), md);
    }

    private static List<Process> start(String... scripts) throws IOException {
        List<Process> ps = new ArrayList<>();
        for (String s : scripts) {
            ps.add(new ProcessBuilder("sh", "-c", s).redirectErrorStream(true).start());
        }
        return ps;
    }

    @Test
    void everyChildsOutputArrivesPrefixedWithItsName() throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        GpuProcessAllReduceBench.supervise(start("echo hello; echo world >&2", "echo there"), List.of("rank 0", "rank 1"),
                Duration.ofSeconds(60), out);
        String text = bytes.toString(StandardCharsets.UTF_8);
        assertTrue(text.contains("[rank 0] hello\n"), text);
        assertTrue(text.contains("[rank 0] world\n"), text);
        assertTrue(text.contains("[rank 1] there\n"), text);
    }

    @Test
    void aFailingChildStopsTheOthersAndIsNamedWithItsExitStatus() throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        List<Process> ps = start("echo waiting; exec sleep 60", "echo FAILED boom; exit 3");
        RankFailure e = assertThrows(RankFailure.class, () -> GpuProcessAllReduceBench.supervise(ps,
                List.of("rank 0", "rank 1"), Duration.ofSeconds(60), out));
        assertTrue(e.getMessage().startsWith("rank 1 exited with status=3 (expected 0"), e.getMessage());
        assertFalse(ps.getFirst().isAlive(), "rank 0 was stopped");
        assertTrue(bytes.toString(StandardCharsets.UTF_8).contains("[rank 1] FAILED boom"));
    }

    @Test
    void aChildStillRunningAtTheLimitIsNamedAndStopped() throws Exception {
        PrintStream out = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        List<Process> ps = start("exec sleep 60", "exit 0");
        RankFailure e = assertThrows(RankFailure.class, () -> GpuProcessAllReduceBench.supervise(ps,
                List.of("rank 0", "rank 1"), Duration.ofSeconds(1), out));
        assertTrue(e.getMessage().startsWith("[rank 0] still running after --timeout=1 s"), e.getMessage());
        assertFalse(ps.getFirst().isAlive(), "rank 0 was stopped");
    }
}
