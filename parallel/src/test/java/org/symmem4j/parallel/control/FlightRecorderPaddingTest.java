package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.trace.Json;

/**
 * {@code symmem4j.flight.recorder.storage}, {@code symmem4j.flight.recorder.padded} and {@code
 * symmem4j.flight.recorder.compact} (read once per JVM) change where the recorder keeps its entries and counters, never
 * what it records: one call sequence (wrap-around, started-only, scheduled-only, a failure before arriving, a failure
 * after completing, a restart) gives the same dump and the same last collectives in a JVM with the heap array, with
 * the padding, with the compact entries (on the heap and off it), with runs ({@code symmem4j.flight.recorder.runs},
 * where this sequence reaches the runs through the failure path's copy at arrival), with the off-heap segment of
 * copied entries and with the default, the own-line segment (each entry the rank's own descriptor line); the padded JVM's arrays carry the padding, the compact one's entries are 4 longs with no name array, and
 * the off-heap ones keep no heap array at all and a page-aligned segment of {@link FlightRecorderLayout#bytes}.
 */
class FlightRecorderPaddingTest {

    @Test
    void thePaddedLayoutRecordsWhatTheUnpaddedOneRecords(@TempDir Path dir) throws Exception {
        String unpadded = child(dir, "plain", false, false, HEAP);
        String padded = child(dir, "padded", true, false); // padded implies the heap
        String compact = child(dir, "compact", false, true, HEAP);
        String offHeap = child(dir, "off-heap", false, false, OFF_HEAP);
        String ownLine = child(dir, "own-line", false, false); // the default storage
        String offHeapCompact = child(dir, "off-heap-compact", false, true); // compact with own-line: off-heap
        String runs = child(dir, "runs", false, false, "-D" + Configuration.FLIGHT_RECORDER_RUNS.property() + "=true");
        assertTrue(unpadded.contains("layout padded=false ring=32 what=4 storage=none"), unpadded);
        assertTrue(padded.contains("layout padded=true ring=64 what=68 storage=none"), padded);
        assertTrue(compact.contains("layout padded=false ring=16 what=none storage=none"), compact);
        // 4 entries of 64 bytes (32 compact) from the second page, then 128 bytes: two pages, page-aligned
        assertTrue(offHeap.contains("layout padded=false ring=none what=none storage=8192 aligned"), offHeap);
        // 4 entries of 128 bytes (the descriptor line and the recorder's words) from the second page: two pages
        assertTrue(ownLine.contains("layout padded=false ring=none what=none storage=8192 aligned"), ownLine);
        assertTrue(offHeapCompact.contains("layout padded=false ring=none what=none storage=8192 aligned"), offHeapCompact);
        assertEquals(records(unpadded), records(padded));
        assertEquals(records(unpadded), records(compact));
        assertEquals(records(unpadded), records(offHeap));
        assertEquals(records(unpadded), records(ownLine));
        assertEquals(records(unpadded), records(offHeapCompact));
        assertTrue(runs.contains("layout padded=false ring=none what=none"), runs);
        assertEquals(records(unpadded), records(runs));
        // #10-#13 are one run there, of which the ring of 4 shows #13, with its own times
        assertTrue(runs.contains("run 13 of 10-13"), runs);
        assertTrue(records(padded).contains("all-reduce#9 FAILED"), padded);
        // #10-#13 share one record of arguments, which the compact ring kept while #14-#16 appended theirs
        assertTrue(records(compact).contains("bytes=52.0, count=13.0, dtype=FLOAT32, endedMillis=true, kind=all_reduce,"
                + " memoryId=3.0, memoryOffset=24.0, op=all-reduce, reduceOp=SUM, seq=13.0"), compact);
    }

    /** The heap array's storage ({@code symmem4j.flight.recorder.storage=heap}): the layout before 2026-11-30. */
    private static final String HEAP = "-D" + Configuration.FLIGHT_RECORDER_STORAGE.property() + "=heap";
    /** The off-heap entries that copy the descriptor ({@code storage=off-heap}): the default before own-line. */
    private static final String OFF_HEAP = "-D" + Configuration.FLIGHT_RECORDER_STORAGE.property() + "=off-heap";

    private static String records(String out) {
        return out.lines().filter(l -> l.startsWith("record ")).reduce("", (a, b) -> a + b + "\n");
    }

    private static String child(Path dir, String name, boolean padded, boolean compact, String... more) throws Exception {
        return child(dir, name, FlightRecorderPaddingTest.class, padded, compact, more);
    }

    /**
     * Runs {@code main}'s class in a child JVM with these layout settings and returns what it printed.
     *
     * @param dir     where its dumps go (a folder per name)
     * @param name    the child's name
     * @param main    the class whose main runs
     * @param padded  {@code symmem4j.flight.recorder.padded}
     * @param compact {@code symmem4j.flight.recorder.compact}
     * @param more    further JVM flags
     * @return its output
     * @throws Exception when it cannot be run
     */
    static String child(Path dir, String name, Class<?> main, boolean padded, boolean compact, String... more)
            throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> command = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED",
                "-D" + Configuration.FLIGHT_RECORDER_PADDED.property() + "=" + padded,
                "-D" + Configuration.FLIGHT_RECORDER_COMPACT.property() + "=" + compact,
                "-D" + Configuration.FLIGHT_RECORDER_DIR.property() + "=" + dir.resolve("dumps-" + name),
                "-D" + Configuration.FLIGHT_RECORDER_RUNS.property() + "=false")); // the entry layouts, unless more says
        command.addAll(List.of(more)); // a later -D wins
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), main.getName()));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), out);
        assertEquals(0, p.exitValue(), out);
        return out;
    }

    /**
     * The child: replays the sequence and prints the layout and the records with the clock's values reduced to
     * whether they are set.
     *
     * @param args none
     * @throws Exception on a reflection failure
     */
    public static void main(String[] args) throws Exception {
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
        r.failed(7, "all-reduce", new IllegalStateException("after completing? no: while started"));
        r.failed(9, "all-reduce", new IllegalStateException("before arriving"));
        r.completed(9); // a failed one stays failed
        print(r);
        // arguments repeated across the ring's wrap (the compact layout shares one record between them), then new ones
        for (long s = 10; s < 17; s++) {
            long k = s < 14 ? 3 : s;
            r.arrived(d.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                    Algorithm.ONE_SHOT.ordinal(), -1, 10 + k, 40 + 4 * k, k, 8 * k, 0, Problem.NONE), "all-reduce");
            r.started(s);
            r.completed(s);
        }
        print(r);
        r.restartAt(20);
        r.arrived(d.set(20, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.TWO_SHOT.ordinal(), -1, 5, 20, -1, 0, 0, Problem.NONE), "all-reduce");
        r.started(20);
        print(r);
        java.lang.foreign.MemorySegment storage = (java.lang.foreign.MemorySegment) field("storage").get(r);
        System.out.println("layout padded=" + Configuration.FLIGHT_RECORDER_PADDED.get() + " ring="
                + (field("ring").get(r) == null ? "none" : ((long[]) field("ring").get(r)).length) + " what="
                + (field("what").get(r) == null ? "none" : ((String[]) field("what").get(r)).length) + " storage="
                + (storage == null ? "none" : storage.byteSize() + (storage.address() % 4096 == 0 ? " aligned" : " unaligned")));
    }

    private static Field field(String name) throws NoSuchFieldException {
        Field f = FlightRecorderFields.Hot.class.getDeclaredField(name); // the hot fields, between the pads
        f.setAccessible(true);
        return f;
    }

    /**
     * Prints {@code r}'s last collectives and its dump's records, with the clock's values reduced to whether they are
     * set ("unknown": not kept, inside a run), each record's run printed on a line of its own.
     *
     * @param r the recorder
     */
    static void print(FlightRecorder r) {
        System.out.println("record lastOps " + r.lastOps(8) + " recorded=" + r.recorded());
        @SuppressWarnings("unchecked")
        Map<String, Object> json = (Map<String, Object>) Json.parse(r.toJson("x"));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> ops = (List<Map<String, Object>>) json.get("ops");
        for (Map<String, Object> op : ops) {
            List<String> fields = new ArrayList<>();
            for (Map.Entry<String, Object> e : new java.util.TreeMap<>(op).entrySet()) {
                Object v = e.getValue();
                if (e.getKey().equals("run")) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> run = (Map<String, Object>) v;
                    System.out.println("run " + Math.round((Double) op.get("seq")) + " of "
                            + Math.round((Double) run.get("firstSeq")) + "-" + Math.round((Double) run.get("lastSeq")));
                    continue;
                }
                if (e.getKey().endsWith("Millis")) {
                    v = v == null ? "unknown" : (Object) (((Double) v) != 0); // the clock: only whether it was stamped
                }
                fields.add(e.getKey() + "=" + v);
            }
            System.out.println("record " + fields);
        }
    }
}
