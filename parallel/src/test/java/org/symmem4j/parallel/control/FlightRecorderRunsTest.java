package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * The run-length layout ({@code symmem4j.flight.recorder.runs}) expands to what the entry-per-collective layout
 * records: one call sequence, made in the order the control plane makes its calls (the run-length JVM writes nothing
 * at arrival; the other writes its entry there), gives the same collectives, arguments and states in both, across
 * runs that open, grow past the ring's capacity, break on a changed argument, a barrier, a gap in the numbering and a
 * failure in the middle of a run, and a collective that times out at its entry barrier (copied in from its published
 * descriptor by the failure path). Only the times differ: inside a run they are not kept (JSON null), and the test
 * checks which collectives keep theirs.
 */
class FlightRecorderRunsTest {

    @Test
    void runsExpandToTheCollectivesTheEntryLayoutRecords(@TempDir Path dir) throws Exception {
        String plain = FlightRecorderPaddingTest.child(dir, "plain", FlightRecorderRunsTest.class, false, false);
        String runs = FlightRecorderPaddingTest.child(dir, "runs", FlightRecorderRunsTest.class, false, false,
                "-D" + Configuration.FLIGHT_RECORDER_RUNS.property() + "=true");
        assertTrue(plain.contains("layout runs=false"), plain);
        assertTrue(runs.contains("layout runs=true"), runs);
        List<String> p = records(plain);
        List<String> r = records(runs);
        assertEquals(p.size(), r.size(), plain + "\n" + runs);
        for (int i = 0; i < p.size(); i++) {
            // the same record, except that a collective inside a run keeps no times
            String expected = p.get(i);
            if (r.get(i).contains("begunMillis=unknown")) {
                expected = expected.replace("begunMillis=true", "begunMillis=unknown");
            }
            if (r.get(i).contains("endedMillis=unknown")) {
                expected = expected.replace("endedMillis=true", "endedMillis=unknown");
            }
            assertEquals(expected, r.get(i), "record " + i + "\nplain:\n" + plain + "\nruns:\n" + runs);
        }
        // which ones are inside a run (no times) is the expansion's, checked here, not by the comparison above
        List<String> expectedRuns = new java.util.ArrayList<>();
        long[][] multi = {{5, 18}, {19, 20}, {23, 24}, {25, 27}, {29, 33}, {34, 36}};
        for (long from : new long[] {5, 6}) { // the two dumps' windows: the newest 32 numbers
            for (long[] run : multi) {
                for (long q = Math.max(from, run[0]); q <= run[1]; q++) {
                    expectedRuns.add("run " + q + " of " + run[0] + "-" + run[1]);
                }
            }
        }
        assertEquals(expectedRuns, lines(runs, "run "));
        // the first and the last of a run keep their times, the ones inside none; #27's begin went to #28, split off
        assertEquals("begunMillis=true endedMillis=true", times(runs, 5));
        assertEquals("begunMillis=unknown endedMillis=unknown", times(runs, 6));
        assertEquals("begunMillis=true endedMillis=true", times(runs, 18));
        assertEquals("begunMillis=unknown endedMillis=true", times(runs, 27));
        assertEquals("begunMillis=true endedMillis=true", times(runs, 28));
        assertEquals("begunMillis=true endedMillis=false", times(runs, 36));
        assertTrue(runs.contains("record [algorithm=ONE_SHOT, begunMillis=unknown, bytes=1024.0, count=256.0, dtype=FLOAT32,"
                + " endedMillis=unknown, kind=all_reduce, memoryId=-1.0, memoryOffset=0.0, op=all-reduce, reduceOp=SUM,"
                + " seq=6.0, state=COMPLETED]"), runs);
        // the failed one split off its run keeps its arguments and the run's begin time
        assertTrue(lines(runs, "record ").stream().anyMatch(l -> l.contains("seq=28.0, state=FAILED") && l.contains("count=64.0")
                && l.contains("begunMillis=true")), runs);
        assertTrue(runs.contains("record lastOps all-reduce#36 STARTED, all-reduce#37 SCHEDULED recorded=38"), runs);
        assertTrue(runs.contains("record lastOps all-reduce#36 STARTED, all-reduce#37 FAILED recorded=38"), runs);
    }

    /** The begin and end of collective {@code q}'s first record in {@code out}. */
    private static String times(String out, long q) {
        String line = records(out).stream().filter(l -> l.contains(" seq=" + q + ".0,")).findFirst().orElseThrow();
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("(begunMillis=\\w+).*(endedMillis=\\w+)").matcher(line);
        assertTrue(m.find(), line);
        return m.group(1) + " " + m.group(2);
    }

    private static List<String> records(String out) {
        return lines(out, "record ");
    }

    private static List<String> lines(String out, String prefix) {
        return out.lines().filter(l -> l.startsWith(prefix)).toList();
    }

    /** What the control plane calls for one collective that passes its entry barrier. */
    private static void passes(FlightRecorder r, Descriptor d, String name, boolean completes) {
        r.begun();
        if (!FlightRecorder.RUNS) {
            r.arrived(d, name); // the entry layout's write at arrival (in the barrier's shadow)
        }
        r.started(d, name);
        if (completes) {
            r.completed(d.seq());
        }
    }

    private static Descriptor allReduce(Descriptor d, long s, long count) {
        return d.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(), Algorithm.ONE_SHOT.ordinal(), -1,
                count, 4 * count, -1, 0, 0, Problem.NONE);
    }

    /**
     * The child: replays the sequence and prints the records at three points.
     *
     * @param args none
     */
    public static void main(String[] args) {
        FlightRecorder r = FlightRecorder.create(0, 2, "host-m1", 32);
        Descriptor d = new Descriptor();
        for (long s = 0; s < 4; s++) {
            passes(r, allReduce(d, s, 128), "all-reduce", true); // run 0-3
        }
        passes(r, d.set(4, Kind.BARRIER, -1, -1, -1, -1, 0, 0, -1, 0, 0, Problem.NONE), "barrier", true);
        for (long s = 5; s < 19; s++) {
            passes(r, allReduce(d, s, 256), "all-reduce", true); // run 5-18
        }
        for (long s = 19; s < 21; s++) {
            passes(r, allReduce(d, s, 512), "all-reduce", true); // a changed count: run 19-20
        }
        // 21 and 22 ran while recording was off elsewhere: a gap, then the same arguments again
        for (long s = 23; s < 25; s++) {
            passes(r, allReduce(d, s, 512), "all-reduce", s < 24); // run 23-24, 24 left started
        }
        r.completed(24);
        for (long s = 25; s < 29; s++) {
            passes(r, allReduce(d, s, 64), "all-reduce", s < 28);
        }
        r.failed(28, "all-reduce", new IllegalStateException("peer died during #28")); // split off run 25-28
        r.completed(28); // a failed one stays failed
        passes(r, allReduce(d, 29, 64), "all-reduce", true); // after a failure: a new run
        for (long s = 30; s < 34; s++) {
            passes(r, allReduce(d, s, 64), "all-reduce", true); // joins 29: run 29-33
        }
        for (long s = 34; s < 37; s++) {
            passes(r, allReduce(d, s, 32), "all-reduce", s < 36); // 36 started, in flight
        }
        FlightRecorderPaddingTest.print(r);
        // 37 published its descriptor and waits at the entry barrier: the timeout message copies it in, then it fails
        r.begun();
        allReduce(d, 37, 32);
        if (r.lacksEntry(37)) {
            r.arrived(d, "all-reduce");
        }
        System.out.println("record lastOps " + r.lastOps(2) + " recorded=" + r.recorded());
        r.failed(37, "all-reduce", new IllegalStateException("timed out waiting for rank 1"));
        System.out.println("record lastOps " + r.lastOps(2) + " recorded=" + r.recorded());
        FlightRecorderPaddingTest.print(r);
        System.out.println("layout runs=" + FlightRecorder.RUNS);
    }
}
