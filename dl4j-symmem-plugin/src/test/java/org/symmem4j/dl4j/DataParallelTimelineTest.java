package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.parallel.trace.Json;

/**
 * The data-parallel timeline as Perfetto reads it: the Chrome trace parsed back, its tracks, the
 * slices of every worker and step, one all-reduce per bucket per worker per step, and how the
 * slices nest and follow each other (no durations are compared with numbers).
 */
class DataParallelTimelineTest {

    private static final int WORKERS = 3;

    /** One complete slice, times in nanoseconds from the trace's origin. */
    private record Slice(String name, int tid, long start, long end, Map<String, Object> args) {
        long step() {
            return Math.round((Double) args.get("step"));
        }
    }

    /** A parsed trace: track names by id, slices, metadata. */
    private record Trace(Map<Integer, String> tracks, List<Slice> slices, Map<String, Object> metadata) {
        int track(String name) {
            return tracks.entrySet().stream().filter(e -> e.getValue().equals(name)).findFirst().orElseThrow(
                    () -> new AssertionError("no track " + name + " in " + tracks.values())).getKey();
        }

        List<Slice> on(String track, String name) {
            int tid = track(track);
            return slices.stream().filter(s -> s.tid() == tid && s.name().equals(name)).toList();
        }

        List<Slice> on(String track) {
            int tid = track(track);
            return slices.stream().filter(s -> s.tid() == tid).toList();
        }
    }

    @SuppressWarnings("unchecked")
    private static Trace parse(String json) {
        Map<String, Object> root = (Map<String, Object>) Json.parse(json);
        Map<Integer, String> tracks = new TreeMap<>();
        List<Slice> slices = new ArrayList<>();
        for (Object o : (List<Object>) root.get("traceEvents")) {
            Map<String, Object> e = (Map<String, Object>) o;
            if (e.get("ph").equals("M") && e.get("name").equals("thread_name")) {
                tracks.put(((Double) e.get("tid")).intValue(), (String) ((Map<String, Object>) e.get("args")).get("name"));
            } else if (e.get("ph").equals("X")) {
                long start = Math.round((Double) e.get("ts") * 1000);
                long end = start + Math.round((Double) e.get("dur") * 1000);
                assertTrue(end >= start, "a slice ends after it starts: " + e);
                slices.add(new Slice((String) e.get("name"), ((Double) e.get("tid")).intValue(), start, end,
                        (Map<String, Object>) e.get("args")));
            }
        }
        return new Trace(tracks, slices, (Map<String, Object>) root.get("metadata"));
    }

    /** Slices on one track nest: none overlaps another partially. */
    private static void assertNested(Trace trace) {
        for (int tid : trace.tracks().keySet()) {
            List<Slice> sorted = trace.slices().stream().filter(s -> s.tid() == tid)
                    .sorted(Comparator.comparingLong(Slice::start).thenComparing(Comparator.comparingLong(Slice::end).reversed()))
                    .toList();
            Deque<Slice> open = new ArrayDeque<>();
            for (Slice s : sorted) {
                while (!open.isEmpty() && open.peek().end() <= s.start()) {
                    open.pop();
                }
                if (!open.isEmpty()) {
                    assertTrue(s.end() <= open.peek().end(), "track " + trace.tracks().get(tid) + ": " + s
                            + " overlaps " + open.peek() + " partially");
                }
                open.push(s);
            }
        }
    }

    private static Slice only(List<Slice> slices, long step, String what) {
        List<Slice> of = slices.stream().filter(s -> s.step() == step).toList();
        assertEquals(1, of.size(), what + " at step " + step + ": " + of);
        return of.getFirst();
    }

    @ParameterizedTest(name = "overlap={0}")
    @ValueSource(booleans = {false, true})
    void threeWorkersTwoFitsEveryTrackAndSliceInOrder(boolean overlap) {
        List<DataSet> data = Nets.batches(21, 9, 8, DataType.FLOAT); // 3 steps per fit
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        List<StepReport> reports = new ArrayList<>();
        String json;
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(WORKERS)
                .overlapSyncWithBackprop(overlap).bucketBytes(1024).minBucketBytes(0).recordTimeline(100)
                .stepListener(reports::add).build()) {
            wrapper.fit(new BatchListIterator(data));
            wrapper.fit(new BatchListIterator(data));
            assertEquals(6, wrapper.runTimeline().recordedSteps());
            json = wrapper.runTimeline().chromeTraceJson();
        }
        Trace trace = parse(json);
        Set<String> expectedTracks = new HashSet<>(List.of("steps", "caller (fit thread)"));
        for (int w = 0; w < WORKERS; w++) {
            expectedTracks.add("worker " + w);
            expectedTracks.add("worker " + w + " all-reduce");
        }
        assertEquals(expectedTracks, new HashSet<>(trace.tracks().values()));
        assertEquals("3", trace.metadata().get("workers"));
        assertEquals("6", trace.metadata().get("steps"));
        assertEquals("0", trace.metadata().get("droppedSteps"));
        assertEquals(Boolean.toString(overlap), trace.metadata().get("overlap"));
        int buckets = Integer.parseInt((String) trace.metadata().get("buckets"));
        assertTrue(buckets > 2, "1 KiB buckets split the MLP's gradient: buckets=" + buckets);
        assertNested(trace);

        List<Slice> steps = trace.on("steps");
        assertEquals(6, steps.size());
        for (int s = 0; s < 6; s++) {
            final long stepNumber = s;
            Slice step = only(steps, s, "steps track");
            assertEquals("step " + s, step.name());
            assertEquals(24.0, step.args().get("examples"));
            assertEquals(reports.get(s).loss(), (Double) step.args().get("loss"), 1e-6 * Math.abs(reports.get(s).loss()));

            // the caller: reading the next batches, then waiting, spanning the step exactly
            Slice read = only(trace.on("caller (fit thread)", "read batches"), s, "read batches");
            Slice wait = only(trace.on("caller (fit thread)", "wait for workers"), s, "wait for workers");
            Slice listeners = only(trace.on("caller (fit thread)", "listeners"), s, "listeners");
            assertEquals(step.start(), read.start());
            assertEquals(read.end(), wait.start());
            assertEquals(wait.end(), step.end());
            assertTrue(listeners.start() >= step.end(), "the step listeners run after the step");

            long lastArrival = 0;
            int waiting = 0;
            for (int w = 0; w < WORKERS; w++) {
                String worker = "worker " + w;
                Slice ws = only(trace.on(worker, "step " + s), s, worker + " step");
                Slice compute = only(trace.on(worker, "compute"), s, worker + " compute");
                Slice sync = only(trace.on(worker, "sync"), s, worker + " sync");
                Slice update = only(trace.on(worker, "update"), s, worker + " update");
                assertTrue(step.start() <= ws.start() && ws.end() <= step.end(), "worker " + w + "'s step inside the step");
                assertEquals(ws.start(), compute.start());
                assertEquals(compute.end(), sync.start(), "sync starts where compute ends");
                assertEquals(sync.end(), update.start(), "update starts where sync ends");
                assertEquals(update.end(), ws.end());
                lastArrival = Math.max(lastArrival, sync.start());
                List<Slice> waits = trace.on(worker, "wait for peers").stream().filter(x -> x.step() == stepNumber).toList();
                assertTrue(waits.size() <= 1);
                for (Slice peerWait : waits) {
                    waiting++;
                    assertEquals(sync.start(), peerWait.start(), "waiting starts at this worker's arrival");
                    assertTrue(peerWait.end() <= sync.end());
                }

                // one all-reduce per bucket, run from the last bucket to the first, one after another
                List<Slice> reduces = trace.on(worker + " all-reduce").stream().filter(x -> x.step() == stepNumber)
                        .sorted(Comparator.comparingLong(Slice::start)).toList();
                assertEquals(buckets, reduces.size(), worker + " step " + s + ": one all-reduce per bucket");
                for (int i = 0; i < buckets; i++) {
                    Slice r = reduces.get(i);
                    assertEquals(buckets - 1 - i, ((Double) r.args().get("bucket")).intValue(), "bucket order");
                    assertEquals("all-reduce b" + (buckets - 1 - i), r.name());
                    if (i > 0) {
                        assertTrue(reduces.get(i - 1).end() <= r.start(), "buckets run one after another");
                    }
                    assertTrue(r.end() <= sync.end(), "every bucket is done when the hook returns");
                    assertTrue(r.start() >= (overlap ? compute.start() : sync.start()),
                            overlap ? "overlapped buckets start after the step" : "without overlap buckets run in the hook");
                }
            }
            for (int w = 0; w < WORKERS; w++) {
                Slice sync = only(trace.on("worker " + w, "sync"), s, "sync");
                for (Slice peerWait : trace.on("worker " + w, "wait for peers")) {
                    if (peerWait.step() == s) {
                        assertEquals(Math.min(lastArrival, sync.end()), peerWait.end(), "waiting ends when the last peer arrived");
                    }
                }
            }
            assertTrue(waiting <= WORKERS - 1, "the last worker to arrive waits for no one");
        }

        // between steps: within a fit only (3 steps each: 2 gaps), from one step's end to the next's start
        List<Slice> between = trace.on("caller (fit thread)", "between steps");
        assertEquals(Set.of(0L, 1L, 3L, 4L), between.stream().map(Slice::step).collect(Collectors.toSet()));
        Map<Long, Slice> stepByNumber = new HashMap<>();
        steps.forEach(x -> stepByNumber.put(x.step(), x));
        for (Slice b : between) {
            assertEquals(stepByNumber.get(b.step()).end(), b.start());
            assertEquals(stepByNumber.get(b.step() + 1).start(), b.end());
            Slice listeners = only(trace.on("caller (fit thread)", "listeners"), b.step(), "listeners");
            assertTrue(b.start() <= listeners.start() && listeners.end() <= b.end(), "listeners run between the steps");
        }
    }

    @Test
    void theTraceKeepsAtMostMaxStepsAndSaysHowManyItLeftOut(@TempDir Path dir) throws Exception {
        List<DataSet> data = Nets.batches(22, 10, 8, DataType.FLOAT); // 5 steps of 2 workers
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        Path file = dir.resolve("run.trace.json");
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).recordTimeline(2).build()) {
            wrapper.fit(new BatchListIterator(data));
            assertEquals(2, wrapper.runTimeline().recordedSteps());
            assertEquals(3, wrapper.runTimeline().droppedSteps());
            wrapper.runTimeline().writeChromeTrace(file);
        }
        Trace trace = parse(Files.readString(file));
        assertEquals(List.of("step 0", "step 1"), trace.on("steps").stream().map(Slice::name).toList());
        assertEquals("3", trace.metadata().get("droppedSteps"));
        assertEquals("2", trace.metadata().get("maxSteps"));
        assertTrue(((String) trace.metadata().get("note")).contains("recording stopped after maxSteps=2"));
        assertTrue(trace.slices().stream().allMatch(s -> s.step() <= 1), "nothing of the steps left out");
    }

    @Test
    void withShardingTheWorkerSlicesAreThereAndNoBucketIsStamped() {
        List<DataSet> data = Nets.batches(23, 4, 8, DataType.FLOAT);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        String json;
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2)
                .sharding(ZeroStage.OPTIMIZER_STATE).recordTimeline(10).build()) {
            wrapper.fit(new BatchListIterator(data));
            json = wrapper.runTimeline().chromeTraceJson();
        }
        Trace trace = parse(json);
        assertEquals("sharded OPTIMIZER_STATE", trace.metadata().get("sync"));
        assertEquals(2, trace.on("worker 1", "update").size());
        assertEquals(List.of(), trace.on("worker 0 all-reduce"));
        assertNested(trace);
    }

    @Test
    void noTimelineUnlessAskedAndAMaxOfAtLeastOne() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).build()) {
            assertNull(wrapper.runTimeline());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).recordTimeline(0).build());
        assertTrue(e.getMessage().contains("recordTimeline maxSteps=0: expected >= 1"), e.getMessage());
    }
}
