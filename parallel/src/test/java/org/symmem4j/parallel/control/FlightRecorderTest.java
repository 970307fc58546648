package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.trace.Json;

/**
 * The flight recorder: its ring and JSON, the dump every failing rank writes, the timeout message that
 * says where the ranks diverged, and the JFR events read back with {@code jdk.jfr.consumer}.
 */
class FlightRecorderTest {

    @Test
    void theRingKeepsTheLastCollectivesOldestFirstWithTheirArgumentsAndStates() {
        FlightRecorder r = FlightRecorder.create(1, 3, "host", 3); // rounded up to 4
        assertEquals(4, r.capacity());
        Descriptor d = new Descriptor();
        for (long s = 0; s < 10; s++) {
            r.arrived(d.set(s, s % 2 == 0 ? Kind.ALL_REDUCE : Kind.BARRIER, DType.BFLOAT16.ordinal(),
                    ReduceOp.SUM.ordinal(), Algorithm.TWO_SHOT.ordinal(), -1, 100 + s, 2 * (100 + s), 7, 64, 0,
                    Problem.NONE), s % 2 == 0 ? "all-reduce" : "barrier");
            if (s < 9) {
                r.started(s);
            }
            if (s < 8) {
                r.completed(s);
            }
        }
        assertEquals(10, r.recorded());
        @SuppressWarnings("unchecked")
        Map<String, Object> json = (Map<String, Object>) Json.parse(r.toJson("why \"quoted\""));
        assertEquals(1.0, json.get("rank"));
        assertEquals(3.0, json.get("worldSize"));
        assertEquals("why \"quoted\"", json.get("reason"));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> ops = (List<Map<String, Object>>) json.get("ops");
        assertEquals(List.of(6.0, 7.0, 8.0, 9.0), ops.stream().map(o -> o.get("seq")).toList());
        assertEquals(List.of("COMPLETED", "COMPLETED", "STARTED", "SCHEDULED"), ops.stream().map(o -> o.get("state")).toList());
        Map<String, Object> six = ops.getFirst();
        assertEquals("all-reduce", six.get("op"));
        assertEquals("all_reduce", six.get("kind"));
        assertEquals("BFLOAT16", six.get("dtype"));
        assertEquals("SUM", six.get("reduceOp"));
        assertEquals("TWO_SHOT", six.get("algorithm"));
        assertEquals(106.0, six.get("count"));
        assertEquals(212.0, six.get("bytes"));
        assertEquals(7.0, six.get("memoryId"));
        Map<String, Object> nine = ops.getLast();
        assertEquals("barrier", nine.get("kind"), "arrived: its arguments are recorded before the verdict");
        assertEquals(0.0, nine.get("endedMillis"));
        assertTrue((Double) six.get("endedMillis") >= (Double) six.get("begunMillis"), six.toString());
        assertEquals("barrier#7 COMPLETED, all-reduce#8 STARTED, barrier#9 SCHEDULED", r.lastOps(3));
    }

    /**
     * A collective that fails before this rank arrives (its own checks threw, or the group was aborted) is written by
     * the failure itself, without arguments; one that fails after arriving keeps its arguments; a completion after a
     * failure does not turn it back; each failed collective is dumped once.
     */
    @Test
    void aFailureBeforeArrivingIsRecordedWithoutArgumentsAndAfterWithThem(@TempDir Path dir) throws Exception {
        String oldDir = System.getProperty("symmem4j.flight.recorder.dir");
        System.setProperty("symmem4j.flight.recorder.dir", dir.toString());
        try {
            FlightRecorder r = FlightRecorder.create(0, 2, "host", 8);
            Descriptor d = new Descriptor();
            r.arrived(d.set(0, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                    Algorithm.ONE_SHOT.ordinal(), -1, 64, 256, -1, 0, 0, Problem.NONE), "all-reduce");
            r.started(0);
            assertNotNull(r.failed(0, "all-reduce", new IllegalStateException("peer 1 died")));
            r.completed(0); // the communicator's finally: stays failed
            assertNull(r.failed(0, "all-reduce", new IllegalStateException("again")), "dumped once per collective");
            assertNotNull(r.failed(1, "barrier", new IllegalStateException("group aborted")));
            assertEquals(2, r.recorded());
            assertEquals("all-reduce#0 FAILED, barrier#1 FAILED", r.lastOps(4));
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> ops = (List<Map<String, Object>>) ((Map<String, Object>) Json.parse(r.toJson("x")))
                    .get("ops");
            assertEquals("all_reduce", ops.get(0).get("kind"));
            assertEquals(64.0, ops.get(0).get("count"));
            assertNull(ops.get(1).get("kind"), "never arrived: no arguments recorded");
            assertEquals(-1.0, ops.get(1).get("count"));
            assertTrue((Double) ops.get(1).get("endedMillis") > 0, ops.get(1).toString());
            try (Stream<Path> files = Files.list(dir)) {
                assertEquals(2, files.filter(f -> f.toString().endsWith(".json")).count());
            }
        } finally {
            if (oldDir == null) {
                System.clearProperty("symmem4j.flight.recorder.dir");
            } else {
                System.setProperty("symmem4j.flight.recorder.dir", oldDir);
            }
        }
    }

    @Test
    void offWhenNoEntriesAndNegativeEntriesAreRefused() {
        assertNull(FlightRecorder.create(0, 2, "host", 0));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> FlightRecorder.create(0, 2, "host", -1));
        assertTrue(e.getMessage().contains("0 turns it off"), e.getMessage());
    }

    @Test
    void restartingDropsTheEntriesBeforeThePause() {
        FlightRecorder r = FlightRecorder.create(0, 2, "host", 4);
        Descriptor d = new Descriptor();
        for (long s = 0; s < 3; s++) {
            arrive(r, d, s, "all-reduce");
            r.completed(s);
        }
        r.restartAt(5); // 3 and 4 ran unrecorded
        assertEquals(0, r.recorded());
        assertEquals("none", r.lastOps(4));
        for (long s = 5; s < 7; s++) {
            arrive(r, d, s, "barrier");
            r.completed(s);
        }
        assertEquals("barrier#5 COMPLETED, barrier#6 COMPLETED", r.lastOps(4));
        for (long s = 7; s < 11; s++) { // wraps: slot of 5 is reused by 9
            arrive(r, d, s, "all-reduce");
        }
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> ops = (List<Map<String, Object>>) ((Map<String, Object>) Json.parse(r.toJson("x"))).get("ops");
        assertEquals(List.of(7.0, 8.0, 9.0, 10.0), ops.stream().map(o -> o.get("seq")).toList());
        assertEquals(6, r.recorded());
    }

    private static void arrive(FlightRecorder r, Descriptor d, long s, String operation) {
        r.arrived(d.set(s, Kind.BARRIER, -1, -1, -1, -1, 0, 0, -1, 0, 0, Problem.NONE), operation);
    }

    /**
     * The switch a benchmark turns the recorder off and on with: while off a failing collective dumps nothing; back
     * on, the dump holds only what came after, numbered as the control plane numbers it; a communicator made without
     * a recorder has no switch.
     */
    @Test
    void theSwitchPausesRecordingOnOneCommunicator(@TempDir Path dir) throws Exception {
        String oldDir = System.getProperty("symmem4j.flight.recorder.dir");
        System.setProperty("symmem4j.flight.recorder.dir", dir.toString());
        try {
            List<String> perRank = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
                try (Communicator comm = Communicator.create(group)) {
                    FlightRecording recording = comm.unwrap(FlightRecording.class).orElseThrow();
                    assertTrue(recording.isRecording());
                    MemorySegment buf = Arena.ofAuto().allocate(4L * 64, 64);
                    comm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT); // #0
                    recording.setRecording(false);
                    assertTrue(!recording.isRecording());
                    comm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT); // #1
                    // #2: the ranks disagree on the count; unrecorded, so no dump
                    assertThrows(CollectiveMismatchException.class, () -> comm.allReduce(buf, 32 + 32 * group.rank(),
                            DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT));
                    try (Stream<Path> files = Files.list(dir)) {
                        assertEquals(0, files.count(), "no dump while the recorder is off");
                    }
                    comm.barrier(); // #3: both ranks have looked
                    recording.setRecording(true);
                    comm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT); // #4
                    assertThrows(CollectiveMismatchException.class, () -> comm.allReduce(buf, 32 + 32 * group.rank(),
                            DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT)); // #5
                }
                return "";
            });
            assertEquals(List.of("", ""), perRank);
            List<Path> dumps;
            try (Stream<Path> files = Files.list(dir)) {
                dumps = files.filter(f -> f.getFileName().toString().endsWith(".json")).toList();
            }
            assertEquals(2, dumps.size(), "one dump per rank, of #5: " + dumps);
            for (Path f : dumps) {
                @SuppressWarnings("unchecked")
                List<Map<String, Object>> ops = (List<Map<String, Object>>) ((Map<String, Object>) Json.parse(
                        Files.readString(f))).get("ops");
                assertEquals(List.of(4.0, 5.0), ops.stream().map(o -> o.get("seq")).toList(), f.toString());
                assertEquals(List.of("COMPLETED", "FAILED"), ops.stream().map(o -> o.get("state")).toList(), f.toString());
            }
        } finally {
            restore("symmem4j.flight.recorder.dir", oldDir);
        }
        String oldEntries = System.getProperty("symmem4j.flight.recorder.entries");
        System.setProperty("symmem4j.flight.recorder.entries", "0");
        try {
            List<Boolean> present = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
                try (Communicator comm = Communicator.create(group)) {
                    return comm.unwrap(FlightRecording.class).isPresent();
                }
            });
            assertEquals(List.of(false, false), present, "made without a recorder: no switch");
        } finally {
            restore("symmem4j.flight.recorder.entries", oldEntries);
        }
    }

    private static void restore(String property, String old) {
        if (old == null) {
            System.clearProperty(property);
        } else {
            System.setProperty(property, old);
        }
    }

    /**
     * Rank 2 skips the second all-reduce: its peers time out at its entry, their message says that rank 2
     * last entered all-reduce#0 while they are at all-reduce#1, and each failing rank dumps its ring.
     */
    @Test
    void aRankThatSkipsACollectiveIsNamedWithWhereEachRankIsAndEveryFailingRankDumps(@TempDir Path dir)
            throws Exception {
        String old = System.getProperty("symmem4j.flight.recorder.dir");
        System.setProperty("symmem4j.flight.recorder.dir", dir.toString());
        try {
            int n = 3;
            Throwable[] thrown = new Throwable[n];
            CountDownLatch peersFailed = new CountDownLatch(n - 1);
            // 1.5 s: only the waited-out deadline costs time; ranks 0 and 1 enter all-reduce#1 milliseconds after #0
            try (InJvmWorld world = InJvmWorld.create(n, GroupOptions.defaults().withTimeout(Duration.ofMillis(1500)))) {
                CountDownLatch done = new CountDownLatch(n);
                for (int r = 0; r < n; r++) {
                    int rank = r;
                    Thread.ofPlatform().name("flight-rank-" + r).start(() -> {
                        try (Group group = world.join(rank); Communicator comm = Communicator.create(group)) {
                            MemorySegment buf = Arena.ofAuto().allocate(4L * 256, 64);
                            comm.allReduce(buf, 256, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                            if (rank == 2) {
                                // skips all-reduce#1; calls it only after its peers gave up on it
                                assertTrue(peersFailed.await(60, TimeUnit.SECONDS));
                            }
                            try {
                                comm.allReduce(buf, 256, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                            } finally {
                                if (rank != 2) {
                                    peersFailed.countDown();
                                }
                            }
                        } catch (Throwable t) {
                            thrown[rank] = t;
                        } finally {
                            done.countDown();
                        }
                    });
                }
                if (!done.await(60, TimeUnit.SECONDS)) {
                    fail("ranks still running after 60 s: a wait is unbounded");
                }
            }
            for (int r = 0; r < 2; r++) {
                PeerTimeoutException e = assertInstanceOf(PeerTimeoutException.class, thrown[r], "rank " + r);
                assertTrue(e.getMessage().contains("rank 2 last entered all-reduce#0"), e.getMessage());
                assertTrue(e.getMessage().contains("ranks 0-1 at all-reduce#1"), e.getMessage());
                // its entry is written after the entry barrier's wait; a message built inside the wait writes it first
                assertTrue(e.getMessage().contains("this rank's last collectives: all-reduce#0 COMPLETED, all-reduce#1"
                        + " SCHEDULED"), e.getMessage());
            }
            assertInstanceOf(PeerTimeoutException.class, thrown[2], "rank 2 finds the group aborted");
            List<Path> dumps;
            try (Stream<Path> files = Files.list(dir)) {
                dumps = files.filter(f -> f.getFileName().toString().endsWith(".json")).sorted().toList();
            }
            assertEquals(3, dumps.size(), "one dump per failing rank: " + dumps);
            List<Double> ranks = new ArrayList<>();
            for (Path f : dumps) {
                @SuppressWarnings("unchecked")
                Map<String, Object> json = (Map<String, Object>) Json.parse(Files.readString(f));
                ranks.add((Double) json.get("rank"));
                @SuppressWarnings("unchecked")
                List<Map<String, Object>> ops = (List<Map<String, Object>>) json.get("ops");
                Map<String, Object> last = ops.getLast();
                assertEquals(1.0, last.get("seq"), f + ": the failed collective is all-reduce#1");
                assertEquals("FAILED", last.get("state"), f.toString());
                assertEquals("COMPLETED", ops.get(ops.size() - 2).get("state"), f.toString());
                if ((Double) json.get("rank") < 2) {
                    // arrived and waited: the failure path wrote the entry from the descriptor it published
                    assertEquals("all_reduce", last.get("kind"), f + ": " + last);
                    assertEquals(256.0, last.get("count"), f + ": " + last);
                    assertEquals("TWO_SHOT", last.get("algorithm"), f + ": " + last);
                } else {
                    assertNull(last.get("kind"), f + ": rank 2 never arrived at #1: " + last);
                }
            }
            assertEquals(List.of(0.0, 1.0, 2.0), ranks.stream().sorted().toList());
        } finally {
            if (old == null) {
                System.clearProperty("symmem4j.flight.recorder.dir");
            } else {
                System.setProperty("symmem4j.flight.recorder.dir", old);
            }
        }
    }

    @Test
    void everyCollectiveIsAJfrEventWhileARecordingEnablesIt(@TempDir Path dir) throws Exception {
        int n = 2;
        int calls = 5;
        Path file = dir.resolve("collectives.jfr");
        try (Recording recording = new Recording()) {
            recording.enable("symmem4j.Collective").withThreshold(Duration.ZERO);
            recording.start();
            try (InJvmWorld world = InJvmWorld.create(n, GroupOptions.defaults())) {
                Throwable[] thrown = new Throwable[n];
                Thread[] threads = new Thread[n];
                for (int r = 0; r < n; r++) {
                    int rank = r;
                    threads[r] = Thread.ofPlatform().start(() -> {
                        try (Group group = world.join(rank); Communicator comm = Communicator.create(group)) {
                            MemorySegment buf = Arena.ofAuto().allocate(4L * 64, 64);
                            for (int i = 0; i < calls; i++) {
                                comm.allReduce(buf, 64, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                            }
                        } catch (Throwable t) {
                            thrown[rank] = t;
                        }
                    });
                }
                for (Thread t : threads) {
                    t.join();
                }
                for (Throwable t : thrown) {
                    assertNull(t);
                }
            }
            recording.stop();
            recording.dump(file);
        }
        List<RecordedEvent> events = RecordingFile.readAllEvents(file).stream()
                .filter(e -> e.getEventType().getName().equals("symmem4j.Collective"))
                .filter(e -> "all-reduce".equals(e.getString("operation")))
                .toList();
        assertEquals(n * calls, events.size(), events.toString());
        for (RecordedEvent e : events) {
            assertEquals(64, e.getLong("count"));
            assertEquals("FLOAT32", e.getString("dtype"));
            assertEquals("ONE_SHOT", e.getString("algorithm"));
            assertEquals("COMPLETED", e.getString("outcome"));
            assertEquals(n, e.getInt("worldSize"));
            assertNotNull(e.getDuration());
        }
        for (int r = 0; r < n; r++) {
            int rank = r;
            assertEquals(List.of(0L, 1L, 2L, 3L, 4L), events.stream().filter(e -> e.getInt("rank") == rank)
                    .map(e -> e.getLong("sequence")).sorted().toList(), "rank " + r);
        }
    }
}
