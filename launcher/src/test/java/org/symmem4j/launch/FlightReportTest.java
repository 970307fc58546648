package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.FlightRecorder;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import picocli.CommandLine;

/** symmem4j-flight-report over dumps written by the runtime's own {@link FlightRecorder}. */
class FlightReportTest {

    /** Writes rank {@code rank}'s dump after it completed {@code completed} all-reduces and, if asked, failed the next. */
    private static void dump(Path dir, int rank, int completed, boolean failsNext, long countOfNext) throws Exception {
        FlightRecorder r = FlightRecorder.create(rank, 3, "host-m1", 16);
        Descriptor d = new Descriptor();
        for (long s = 0; s < completed + (failsNext ? 1 : 0); s++) {
            long count = s == completed ? countOfNext : 256;
            r.arrived(d.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                    Algorithm.TWO_SHOT.ordinal(), -1, count, 4 * count, -1, 0, 0, Problem.NONE), "all-reduce");
            if (s < completed) {
                r.started(s);
                r.completed(s);
            }
        }
        Files.writeString(dir.resolve("flight-job-g0-host-m1-n3-rank" + rank + "-pid1-t1.json"),
                r.toJson("rank=" + rank + " all-reduce#" + completed + " entry: timed out"));
    }

    private static String run(String... args) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int status = new CommandLine(new FlightReport(new PrintStream(bytes, true, StandardCharsets.UTF_8))).execute(args);
        String out = bytes.toString(StandardCharsets.UTF_8);
        assertEquals(0, status, out);
        return out;
    }

    @Test
    void aRankThatNeverEnteredTheNextCollectiveIsNamed(@TempDir Path dir) throws Exception {
        dump(dir, 0, 5, true, 256);
        dump(dir, 1, 5, true, 256);
        dump(dir, 2, 5, false, 256);
        String out = run(dir.toString());
        assertTrue(out.contains("ranks 0-1 entered all-reduce#5, rank 2 never did (rank 2's last: all-reduce#4 COMPLETED)"), out);
        assertTrue(out.contains("where the ranks are: ranks 0-1 at all-reduce#5 (SCHEDULED); rank 2 at all-reduce#4 (COMPLETED)"), out);
        assertTrue(out.contains("communicator host-m1 of 3 ranks"), out);
    }

    @Test
    void aRankThatCallsTheCollectiveOnlyAfterTheGroupFailedDidNotEnterIt(@TempDir Path dir) throws Exception {
        dump(dir, 0, 5, true, 256);
        dump(dir, 1, 5, true, 256);
        FlightRecorder late = FlightRecorder.create(2, 3, "host-m1", 16);
        Descriptor d = new Descriptor();
        for (long s = 0; s < 5; s++) {
            late.arrived(d.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                    Algorithm.TWO_SHOT.ordinal(), -1, 256, 1024, -1, 0, 0, Problem.NONE), "all-reduce");
            late.started(s);
            late.completed(s);
        }
        // #5 finds the group aborted: it throws before arriving, so its entry (written by the failure, which dumps
        // the ring into the directory the report reads) has no arguments
        String oldDir = System.getProperty("symmem4j.flight.recorder.dir");
        System.setProperty("symmem4j.flight.recorder.dir", dir.toString());
        try {
            assertNotNull(late.failed(5, "all-reduce", new IllegalStateException("group aborted")));
        } finally {
            if (oldDir == null) {
                System.clearProperty("symmem4j.flight.recorder.dir");
            } else {
                System.setProperty("symmem4j.flight.recorder.dir", oldDir);
            }
        }
        String out = run(dir.toString());
        assertTrue(out.contains("rank 2 at all-reduce#5 (FAILED before arriving)"), out);
        assertTrue(out.contains("ranks 0-1 entered all-reduce#5, rank 2 never did (rank 2's last: all-reduce#4 COMPLETED,"
                + " then called all-reduce#5 after the group had failed)"), out);
    }

    @Test
    void aRankWithoutADumpIsPointedAt(@TempDir Path dir) throws Exception {
        dump(dir, 0, 5, true, 256);
        dump(dir, 2, 5, true, 256);
        String out = run(dir.toString());
        assertTrue(out.contains("rank 1 left no dump"), out);
        assertTrue(out.contains("look at rank 1"), out);
    }

    @Test
    void differentArgumentsAtTheSameCollectiveAreShown(@TempDir Path dir) throws Exception {
        dump(dir, 0, 5, true, 256);
        dump(dir, 1, 5, true, 128);
        dump(dir, 2, 5, true, 256);
        String out = run(dir.toString());
        assertTrue(out.contains("#5 was called with different arguments: ranks 0, 2: all-reduce count=256"), out);
        assertTrue(out.contains("rank 1: all-reduce count=128"), out);
    }

    @Test
    void noDumpsAndForeignFilesAreClearErrors(@TempDir Path dir) throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int status = new CommandLine(new FlightReport(new PrintStream(bytes, true, StandardCharsets.UTF_8)))
                .execute(dir.toString());
        assertEquals(FlightReport.NO_DUMPS, status);
        assertTrue(bytes.toString(StandardCharsets.UTF_8).contains("ranks write them only when a collective fails"));
        Path foreign = dir.resolve("flight-other.json");
        Files.writeString(foreign, "{\"format\":\"something-else\"}");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> FlightReport.read(foreign));
        assertTrue(e.getMessage().contains("expected symmem4j-flight-recorder/1"), e.getMessage());
        Files.writeString(foreign, "{not json");
        assertThrows(UncheckedIOException.class, () -> FlightReport.read(foreign));
    }
}
