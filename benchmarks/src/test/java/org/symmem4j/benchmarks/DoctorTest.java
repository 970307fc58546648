package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.gradsync.ThresholdTable;
import org.symmem4j.parallel.BuildInfo;
import org.symmem4j.parallel.Transport;
import picocli.CommandLine;

/** The doctor's output structure (sections, flags, tables, one benchmark row per size), never its timings. */
class DoctorTest {

    private record Run(int status, String out, String err) {
    }

    private static Run run(String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        CommandLine cli = new CommandLine(new Doctor(new PrintStream(out, true, StandardCharsets.UTF_8)));
        cli.setErr(new java.io.PrintWriter(err, true, StandardCharsets.UTF_8));
        int status = cli.execute(args);
        return new Run(status, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void printsEverySectionAndOneBenchmarkRowPerSize() {
        Run r = run("--ranks", "2", "--sizes", "4096,1024");
        assertEquals(0, r.status(), r.err());
        List<String> sections = r.out().lines().filter(l -> l.startsWith("== ")).toList();
        List<String> names = new ArrayList<>();
        for (String s : sections) {
            names.add(s.substring(3).split("[ (]")[0]);
        }
        boolean gpus = org.symmem4j.parallel.cuda.ffi.CudaDriver.available()
                && org.symmem4j.parallel.cuda.ffi.CudaDriver.get().deviceCount() >= 2;
        List<String> expected = new ArrayList<>(List.of("build", "jvm", "machine", "native", "gpus", "transports", "algorithm",
                "all-reduce", "host", "host"));
        if (gpus) {
            expected.addAll(List.of("gpu", "gpu"));
        }
        expected.add("not");
        assertEquals(expected, names, r.out());
        // the jvm section names the unknown symmem4j.* / SYMMEM4J_* names set (this JVM's are the build's, all known)
        List<String> settings = r.out().lines().filter(l -> l.startsWith("settings: ")).toList();
        assertEquals(1, settings.size(), r.out());
        assertTrue(settings.getFirst().equals("settings: no unknown symmem4j.* property or SYMMEM4J_* variable")
                || settings.getFirst().startsWith("settings: UNKNOWN "), settings::toString);
        // Open MPI's anchor: a row per size with both times when mpirun runs here (CI installs it), else the reason
        int mpiHeader = r.out().lines().toList().indexOf(r.out().lines().filter(l -> l.startsWith("== host all-reduce against Open MPI"))
                .findFirst().orElseThrow());
        List<String> mpiLines = r.out().lines().skip(mpiHeader + 1).limit(3).toList();
        if (System.getenv("SYMMEM4J_REQUIRE_MPI") != null || !mpiLines.getFirst().startsWith("not measured")) {
            for (int i = 0; i < 2; i++) {
                String[] cells = mpiLines.get(1 + i).trim().split("\\s+");
                assertEquals(i == 0 ? 1024 : 4096, Long.parseLong(cells[0]), mpiLines.toString());
                assertTrue(Double.parseDouble(cells[1]) > 0 && Double.parseDouble(cells[2]) > 0, mpiLines.toString());
            }
        }
        // the host patterns: a row per pattern and size, ours always timed, Open MPI's where it ran
        List<String> all = r.out().lines().toList();
        int patterns = all.indexOf(all.stream().filter(l -> l.startsWith("== host patterns")).findFirst().orElseThrow());
        assertTrue(all.get(patterns + 1).startsWith("all-gather: ") && all.get(patterns + 2).startsWith("pipeline hand-off: "),
                r.out());
        List<String> rows = all.subList(patterns + 4, patterns + 8);
        int row = 0;
        for (String pattern : List.of("all-gather", "hand-off")) {
            for (long bytes : List.of(1024L, 4096L)) {
                String[] cells = rows.get(row++).trim().split("\\s+");
                assertEquals(pattern, cells[0], rows.toString());
                assertEquals(bytes, Long.parseLong(cells[1]), rows.toString());
                assertTrue(Double.parseDouble(cells[2]) > 0, "symmem4j's time: " + rows);
                if (!mpiLines.getFirst().startsWith("not measured")) {
                    assertTrue(Double.parseDouble(cells[3]) > 0 && Double.parseDouble(cells[4]) > 0, "Open MPI's: " + rows);
                }
            }
        }
        if (!org.symmem4j.parallel.cuda.ffi.CudaDriver.available()) {
            assertTrue(r.out().contains("== gpus\nnone ("), r.out());
            assertTrue(r.out().contains("GPU all-reduce against NCCL: needs 2 GPUs or more, this machine has 0"), r.out());
        }
        BuildInfo b = BuildInfo.current();
        assertTrue(r.out().contains("version=" + b.version() + " commit=" + b.commit()), r.out());
        for (String flag : List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
                "--sun-misc-unsafe-memory-access=allow")) {
            assertTrue(r.out().lines().anyMatch(l -> l.startsWith("flag " + flag + ": present")
                    || l.startsWith("flag " + flag + ": MISSING (") && l.endsWith("fix: add " + flag + ")")), flag + "\n" + r.out());
        }
        assertTrue(r.out().contains("transport host-in-jvm\n") && r.out().contains("transport host-shm\n"), r.out());
        for (String lib : List.of("libcuda.so.1: ", "libnccl.so.2: ", "libnvshmem_host.so.3: ", "libmpi.so.40 (Open MPI): ")) {
            assertTrue(r.out().lines().anyMatch(l -> l.startsWith(lib) && (l.contains("available") || l.contains("absent"))), lib);
        }
        ThresholdTable table = ThresholdTable.load();
        List<String> lines = r.out().lines().toList();
        int header = lines.indexOf(lines.stream().filter(l -> l.startsWith("== all-reduce")).findFirst().orElseThrow());
        // the column header, then one row per size, ascending
        for (int i = 0; i < 2; i++) {
            long bytes = i == 0 ? 1024 : 4096;
            String[] cells = lines.get(header + 2 + i).trim().split("\\s+");
            assertEquals(6, cells.length, lines.get(header + 2 + i));
            assertEquals(bytes, Long.parseLong(cells[0]));
            int measured = 0;
            for (int a = 1; a <= 3; a++) {
                if (!cells[a].equals("-")) {
                    assertTrue(Double.parseDouble(cells[a]) > 0, cells[a]);
                    measured++;
                }
            }
            assertTrue(measured >= 1, "at least one algorithm runs on host-in-jvm: " + lines.get(header + 2 + i));
            assertEquals(table.lookup(Transport.HOST_IN_JVM, 2, bytes).name(), cells[4], "the table's choice");
        }
    }

    @Test
    void noBenchmarkMeasuresNothingAndBadInputIsRefusedBeforeAnything() {
        Run quick = run("--no-benchmark");
        assertEquals(0, quick.status(), quick.err());
        assertFalse(quick.out().contains("== all-reduce"), quick.out());
        assertTrue(quick.out().contains("== algorithm table"), quick.out());
        Run bad = run("--ranks", "1", "--sizes", "1000,6");
        assertEquals(2, bad.status());
        assertEquals("", bad.out(), "nothing printed before the refusal");
        assertTrue(bad.err().contains("--ranks=1") && bad.err().contains("multiples of 4"), bad.err());
        Run badGpu = run("--gpu-sizes", "6", "--no-benchmark");
        assertEquals(2, badGpu.status());
        assertEquals("", badGpu.out(), "nothing printed before the refusal");
        assertTrue(badGpu.err().contains("--gpu-sizes=[6]") && badGpu.err().contains("fix:"), badGpu.err());
        Run both = run("--no-benchmark", "--write-thresholds", "/nonexistent/rows.properties");
        assertEquals(2, both.status());
        assertTrue(both.err().contains("--write-thresholds") && both.err().contains("fix: drop one"), both.err());
    }

    @Test
    void mpiLinesAreParsedInOrderAndOthersIgnored() {
        var micros = DoctorMpi.parse("noise\ndoctor-mpi all-reduce 1024 3.5\nWARNING x\ndoctor-mpi all-reduce 4096 7.25\n"
                + "doctor-mpi hand-off 1024 1.5\n");
        assertEquals(List.of("all-reduce", "hand-off"), List.copyOf(micros.keySet()));
        assertEquals(List.of(1024L, 4096L), List.copyOf(micros.get("all-reduce").keySet()));
        assertEquals(7.25, micros.get("all-reduce").get(4096L));
        DoctorMpi.Result result = new DoctorMpi.Result(micros, null);
        assertEquals(1.5, result.of("hand-off", 1024));
        assertTrue(Double.isNaN(result.of("all-gather", 1024)), "a pattern not timed reads as NaN");
    }

    @Test
    void ncclVersionCodesReadAsNcclPrintsThem() {
        assertEquals("2.28.3", DoctorGpu.ncclVersion(22803));
        assertEquals("2.19.3", DoctorGpu.ncclVersion(21903));
        assertEquals("2.8.4", DoctorGpu.ncclVersion(2804));
    }
}
