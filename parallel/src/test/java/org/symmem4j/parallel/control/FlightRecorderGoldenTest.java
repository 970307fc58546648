package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.trace.Json;

/**
 * One call sequence (wrap-around of a ring of 4, started-only, scheduled-only, a failure after starting, a failure
 * before arriving, a completion after a failure, arguments repeated across the wrap, a restart) gives the last
 * collectives and the dump's records in {@code golden/flight-recorder-sequence.txt}. The golden file is what the heap
 * array of 64-byte entries, the plainest of the recorder's earlier layouts, recorded for this sequence (captured on
 * 2026-11-30, before that layout was removed; the own-line layout recorded the same then, in
 * FlightRecorderPaddingTest): the own-line entries must keep recording it. One record changed since, with the ticks
 * (2026-11-30: a collective's return is a completion count, not a stamp in its entry, FlightRecorderTicks): all-reduce#8,
 * which arrived and never returned before #9 began and returned, now reads COMPLETED with an end, since a later
 * collective's return counts every earlier one returned (in a real run #8 returns before #9 begins).
 */
class FlightRecorderGoldenTest {

    private static final String GOLDEN = "/golden/flight-recorder-sequence.txt";

    @Test
    void theSequenceRecordsWhatTheHeapLayoutRecorded(@TempDir Path dir) throws IOException {
        String old = System.getProperty("symmem4j.flight.recorder.dir");
        System.setProperty("symmem4j.flight.recorder.dir", dir.toString()); // the two failures' dumps
        String expected;
        try (InputStream in = FlightRecorderGoldenTest.class.getResourceAsStream(GOLDEN)) {
            assertNotNull(in, GOLDEN);
            expected = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8)) {
            replay(out);
        } finally {
            if (old == null) {
                System.clearProperty("symmem4j.flight.recorder.dir");
            } else {
                System.setProperty("symmem4j.flight.recorder.dir", old);
            }
        }
        assertEquals(expected, bytes.toString(StandardCharsets.UTF_8));
    }

    /** Replays the sequence and prints the records, with the clock's values reduced to whether they are set. */
    private static void replay(PrintStream out) {
        FlightRecorder r = FlightRecorder.create(0, 2, "host-m1", 4);
        Descriptor d = new Descriptor();
        for (long s = 0; s < 9; s++) {
            r.arrived(d.set(s, s % 3 == 0 ? Kind.BARRIER : Kind.ALL_REDUCE, DType.FLOAT32.ordinal(),
                    ReduceOp.SUM.ordinal(), Algorithm.ONE_SHOT.ordinal(), -1, 10 + s, 40 + 4 * s, s, 8 * s, 0,
                    Problem.NONE), s % 3 == 0 ? "barrier" : "all-reduce");
            if (s != 8) {
                r.started(s);
            }
            if (s < 7) {
                r.completed(s);
            }
        }
        r.failed(7, "all-reduce", new IllegalStateException("after starting"));
        r.failed(9, "all-reduce", new IllegalStateException("before arriving"));
        r.completed(9); // a failed one stays failed
        print(r, out);
        // arguments repeated across the ring's wrap, then new ones
        for (long s = 10; s < 17; s++) {
            long k = s < 14 ? 3 : s;
            r.arrived(d.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                    Algorithm.ONE_SHOT.ordinal(), -1, 10 + k, 40 + 4 * k, k, 8 * k, 0, Problem.NONE), "all-reduce");
            r.started(s);
            r.completed(s);
        }
        print(r, out);
        r.restartAt(20);
        r.arrived(d.set(20, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.TWO_SHOT.ordinal(), -1, 5, 20, -1, 0, 0, Problem.NONE), "all-reduce");
        r.started(20);
        print(r, out);
    }

    /** Prints {@code r}'s last collectives and its dump's records, the clock's values reduced to whether they are set. */
    private static void print(FlightRecorder r, PrintStream out) {
        out.print("record lastOps " + r.lastOps(8) + " recorded=" + r.recorded() + "\n");
        @SuppressWarnings("unchecked")
        Map<String, Object> json = (Map<String, Object>) Json.parse(r.toJson("x"));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> ops = (List<Map<String, Object>>) json.get("ops");
        for (Map<String, Object> op : ops) {
            List<String> fields = new ArrayList<>();
            for (Map.Entry<String, Object> e : new TreeMap<>(op).entrySet()) {
                Object v = e.getValue();
                if (e.getKey().endsWith("Millis")) {
                    v = ((Double) v) != 0; // the clock: only whether it was stamped
                }
                fields.add(e.getKey() + "=" + v);
            }
            out.print("record " + fields + "\n");
        }
    }
}
