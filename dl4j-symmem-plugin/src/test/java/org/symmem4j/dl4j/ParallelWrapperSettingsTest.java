package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.listeners.CollectScoresIterationListener;
import org.deeplearning4j.ui.model.stats.StatsListener;
import org.deeplearning4j.ui.model.storage.InMemoryStatsStorage;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.adapter.MultiDataSetIteratorAdapter;
import org.slf4j.event.Level;

/**
 * The settings DL4J's ParallelWrapper users rely on, as the wrapper honours them: prefetchBuffer,
 * reportScoreAfterAveraging, workspaceMode and listeners (with a stats router).
 */
class ParallelWrapperSettingsTest {

    private static final String PREFETCH_THREAD = "symmem4j-prefetch";

    private static boolean prefetchThreadAlive() {
        return Thread.getAllStackTraces().keySet().stream()
                .anyMatch(t -> t.getName().equals(PREFETCH_THREAD) && t.isAlive());
    }

    /** Two fits (the second resets the exhausted iterator) of 3 workers over 7 batches; the final parameters. */
    private static INDArray trainTwice(MultiLayerNetwork net, int prefetch, List<DataSet> data, Set<String> readers,
                                       int[] resets) {
        BatchListIterator it = new BatchListIterator(data, () -> readers.add(Thread.currentThread().getName()), true);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(3).prefetchBuffer(prefetch).build()) {
            wrapper.fit(it);
            assertFalse(prefetchThreadAlive(), "the reader stops before fit returns");
            wrapper.fit(it);
        }
        resets[0] = it.resets();
        return net.params().dup();
    }

    @Test
    void prefetchingReadsOnABackgroundThreadAndTrainsBitwiseAsReadingOnTheCallersThread() {
        List<DataSet> data = Nets.batches(11, 7, 8, DataType.FLOAT); // steps of 3, 3 and 1 batches
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        MultiLayerNetwork copy = net.clone();
        Set<String> plainReaders = ConcurrentHashMap.newKeySet();
        Set<String> prefetchReaders = ConcurrentHashMap.newKeySet();
        int[] plainResets = new int[1];
        int[] prefetchResets = new int[1];
        INDArray plain = trainTwice(net, 0, data, plainReaders, plainResets);
        INDArray prefetched = trainTwice(copy, 2, data, prefetchReaders, prefetchResets);
        assertTrue(ModelReplica.bitwiseEqual(plain, prefetched), "the same batches in the same order: the same bits");
        assertEquals(Set.of(Thread.currentThread().getName()), plainReaders, "prefetchBuffer(0): the caller reads");
        assertEquals(Set.of(PREFETCH_THREAD), prefetchReaders, "prefetchBuffer(2): only the background thread reads");
        assertEquals(1, plainResets[0], "as DL4J: the second fit resets the exhausted iterator, nothing else does");
        assertEquals(1, prefetchResets[0], "as DL4J: the second fit resets the exhausted iterator, nothing else does");
        assertEquals(2, copy.getEpochCount());
        assertFalse(prefetchThreadAlive());
    }

    @Test
    void aComputationGraphPrefetchesFromAMultiDataSetIteratorTheSameBits() {
        List<DataSet> data = Nets.batches(17, 5, 8, DataType.FLOAT);
        List<INDArray> params = new ArrayList<>();
        for (int prefetch : new int[] {0, 3}) {
            ComputationGraph graph = Nets.graph(Nets.updater("adam"), DataType.FLOAT);
            Set<String> readers = ConcurrentHashMap.newKeySet();
            try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(graph).workers(2).prefetchBuffer(prefetch)
                    .build()) {
                wrapper.fit(new MultiDataSetIteratorAdapter(new BatchListIterator(data,
                        () -> readers.add(Thread.currentThread().getName()), true)));
            }
            assertEquals(Set.of(prefetch == 0 ? Thread.currentThread().getName() : PREFETCH_THREAD), readers);
            params.add(graph.params().dup());
        }
        assertTrue(ModelReplica.bitwiseEqual(params.get(0), params.get(1)));
        assertFalse(prefetchThreadAlive());
    }

    @Test
    void theReaderStaysWithinTheBufferAheadOfTheSteps() throws InterruptedException {
        int workers = 2;
        int buffer = 3;
        List<DataSet> data = Nets.batches(12, 12, 4, DataType.FLOAT);
        AtomicInteger read = new AtomicInteger();
        List<int[]> seen = Collections.synchronizedList(new ArrayList<>());
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(workers).prefetchBuffer(buffer)
                .stepListener(report -> {
                    // after step s the caller took step s+1's batches; the reader fills the buffer beyond
                    // them and holds at most one more while it waits for room
                    int taken = (int) Math.min(data.size(), workers * (report.step() + 2));
                    int full = Math.min(data.size(), taken + buffer);
                    long deadline = System.nanoTime() + 20_000_000_000L;
                    while (read.get() < full && System.nanoTime() < deadline) {
                        Thread.onSpinWait();
                    }
                    seen.add(new int[] {(int) report.step(), read.get(), full});
                }).build()) {
            wrapper.fit(new BatchListIterator(data, read::incrementAndGet, true));
        }
        assertEquals(6, seen.size());
        for (int[] s : seen) {
            assertTrue(s[1] >= s[2], "step " + s[0] + ": the reader reached " + s[1] + " batches, expected it to fill the"
                    + " buffer to " + s[2]);
            assertTrue(s[1] <= s[2] + 1, "step " + s[0] + ": read " + s[1] + " batches, more than buffer + 1 beyond the"
                    + " taken ones (" + s[2] + " + 1)");
        }
    }

    /** Thrown by the test iterator. */
    private static final class BrokenIteratorException extends RuntimeException {
        BrokenIteratorException(String message) {
            super(message);
        }
    }

    @Test
    void anIteratorFailureOnTheReaderSurfacesOnTheCallersThreadWhenFitReachesThatBatch() {
        List<DataSet> data = Nets.batches(13, 8, 8, DataType.FLOAT);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        INDArray before = net.params().dup();
        AtomicInteger read = new AtomicInteger();
        List<Long> steps = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).prefetchBuffer(2)
                .stepListener(r -> steps.add(r.step())).build()) {
            BatchListIterator broken = new BatchListIterator(data, () -> {
                if (read.incrementAndGet() == 6) {
                    throw new BrokenIteratorException("batch 5 is unreadable");
                }
            }, true);
            BrokenIteratorException e = assertThrows(BrokenIteratorException.class, () -> wrapper.fit(broken));
            assertEquals("batch 5 is unreadable", e.getMessage(), "the iterator's own exception");
            assertEquals(1, e.getSuppressed().length);
            assertTrue(e.getSuppressed()[0].getMessage().contains("reading batch 5"), e.getSuppressed()[0].getMessage());
            // batches 4 and 5 are step 2's, taken while step 1 computes: the failure ends fit there, as
            // it would reading on the caller's thread
            assertEquals(List.of(0L), steps, "step 0 ran; step 1 was under way when fit reached batch 5");
            assertFalse(prefetchThreadAlive(), "the reader stopped before fit threw");
            assertTrue(ModelReplica.bitwiseEqual(before, net.params()), "a failed fit leaves the model as it was");

            wrapper.fit(new BatchListIterator(data, () -> { }, true)); // the wrapper trains on afterwards
            assertEquals(5, steps.size(), "step 0, then the 4 steps of the good fit");
        }
    }

    @Test
    void prefetchRefusesAnIteratorThatMustBeReadFromOneThread() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).prefetchBuffer(4).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> wrapper.fit(new BatchListIterator(Nets.batches(1, 4, 4, DataType.FLOAT))));
            assertTrue(e.getMessage().contains("asyncSupported()=false") && e.getMessage().contains("fix: prefetchBuffer(0)"),
                    e.getMessage());
        }
    }

    @Test
    void reportScoreAfterAveragingLogsEveryStepsMergedBatchScore() {
        List<DataSet> data = Nets.batches(14, 5, 8, DataType.DOUBLE);
        for (boolean report : new boolean[] {true, false}) {
            List<StepReport> reports = new ArrayList<>();
            MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
            List<RecordingLogs.Line> lines = RecordingLogs.record(() -> {
                try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2)
                        .reportScoreAfterAveraging(report).stepListener(reports::add).build()) {
                    wrapper.fit(new BatchListIterator(data));
                }
            });
            List<String> scoreLines = lines.stream().filter(l -> l.message().contains("score after averaging"))
                    .map(RecordingLogs.Line::message).toList();
            if (!report) {
                assertEquals(List.of(), scoreLines, "reportScoreAfterAveraging(false) logs no scores");
                continue;
            }
            assertEquals(3, reports.size());
            assertEquals(3, scoreLines.size(), scoreLines.toString());
            for (int s = 0; s < 3; s++) {
                String line = scoreLines.get(s);
                assertTrue(line.contains("step=" + s + " score=" + reports.get(s).loss() + " examples="
                        + reports.get(s).examples()), line);
            }
            assertTrue(lines.stream().anyMatch(l -> l.level() == Level.INFO && l.message().contains("score after averaging")));
            assertEquals(reports.getLast().loss(), net.score(), 0.0, "the model's score is the last step's");
        }
    }

    @Test
    void workspaceModesTrainTheSameBitsAndReachTheReplicasOnly() {
        List<DataSet> data = Nets.batches(15, 9, 8, DataType.FLOAT);
        MultiLayerNetwork original = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        WorkspaceMode own = original.getLayerWiseConfigurations().getTrainingWorkspaceMode();
        INDArray reference = null;
        for (WorkspaceMode mode : new WorkspaceMode[] {null, WorkspaceMode.NONE, WorkspaceMode.ENABLED}) {
            for (boolean overlap : new boolean[] {false, true}) {
                MultiLayerNetwork net = original.clone();
                SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(net).workers(3).overlapSyncWithBackprop(overlap)
                        .minBucketBytes(0).bucketBytes(1024);
                if (mode != null) {
                    b.workspaceMode(mode);
                }
                try (SymmemParallelWrapper wrapper = b.build()) {
                    wrapper.fit(new BatchListIterator(data));
                    for (ModelReplica r : wrapper.replicas()) {
                        assertEquals(mode == null ? own : mode, r.trainingWorkspaceMode(), "replica's training workspaces");
                    }
                }
                assertEquals(own, net.getLayerWiseConfigurations().getTrainingWorkspaceMode(), "the model's own is kept");
                if (reference == null) {
                    reference = net.params().dup();
                } else {
                    assertTrue(ModelReplica.bitwiseEqual(reference, net.params()),
                            "workspaceMode=" + mode + " overlap=" + overlap + " trains the same bits as the default");
                }
            }
        }
    }

    @Test
    void listenersGivenToTheBuilderAreCalledAndStatsListenersGetTheRouter() {
        List<DataSet> data = Nets.batches(16, 6, 8, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        InMemoryStatsStorage storage = new InMemoryStatsStorage();
        InMemoryStatsStorage own = new InMemoryStatsStorage();
        StatsListener routed = new StatsListener(null, 1);
        StatsListener keepsItsOwn = new StatsListener(own, 1);
        CollectScoresIterationListener scores = new CollectScoresIterationListener(1);
        List<StepReport> reports = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2)
                .listeners(storage, routed, keepsItsOwn).listeners(scores, scores).stepListener(reports::add).build()) {
            assertEquals(List.of(routed, keepsItsOwn, scores), net.getListeners().stream().toList(),
                    "attached to the model once each, in order");
            assertSame(storage, routed.getStorageRouter(), "the router goes to a stats listener without one");
            assertSame(own, keepsItsOwn.getStorageRouter(), "a stats listener keeps its own router");
            wrapper.fit(new BatchListIterator(data));
        }
        assertEquals(3, reports.size());
        for (InMemoryStatsStorage s : List.of(storage, own)) {
            assertEquals(1, s.listSessionIDs().size());
            String session = s.listSessionIDs().getFirst();
            String worker = s.listWorkerIDsForSession(session).getFirst();
            assertNotNull(s.getStaticInfo(session, StatsListener.TYPE_ID, worker), "static info stored");
            assertEquals(3, s.getAllUpdatesAfter(session, StatsListener.TYPE_ID, worker, 0).size(), "one report per step");
        }
        double[] collected = scores.getScoreVsIter().getEffectiveScores();
        assertEquals(3, collected.length, "called once per step, though given twice");
        for (int s = 0; s < 3; s++) {
            assertEquals(reports.get(s).loss(), collected[s], 0.0, "step " + s + ": the merged batch's score");
        }
    }

    @Test
    void settingsThatCannotBeHonouredAreRefusedAtBuildSayingTheFix() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).prefetchBuffer(-1).build()).getMessage()
                .contains("prefetchBuffer=-1: expected >= 0"));
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).workspaceMode(null).build()).getMessage()
                .contains("workspaceMode=null: expected ENABLED or NONE"));
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).workspaceMode(WorkspaceMode.SINGLE).build()).getMessage()
                .contains("fix: workspaceMode(ENABLED)"));
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).listeners((TrainingListener) null).build()).getMessage()
                .contains("listeners(...) was given null"));
        // a stats listener with nowhere to send its reports: refused, and the model's listeners stay as they were
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).listeners(new CollectScoresIterationListener(1),
                        new StatsListener(null, 1)).build());
        assertTrue(e.getMessage().contains("[StatsListener] send reports to a StatsStorageRouter but have none")
                && e.getMessage().contains("fix: builder.listeners(statsStorage"), e.getMessage());
        assertEquals(0, net.getListeners().size(), "a refused build attaches nothing");
        TrainingListener readsTheGradient = new BaseTrainingListener() {
            @Override
            public void onGradientCalculation(Model model) {
            }
        };
        IllegalStateException accumulation = assertThrows(IllegalStateException.class,
                () -> SymmemParallelWrapper.builder(net).gradientAccumulation(2).listeners(readsTheGradient).build());
        assertTrue(accumulation.getMessage().contains("overrides onGradientCalculation"), accumulation.getMessage());
        assertEquals(0, net.getListeners().size(), "a refused build attaches nothing");
    }
}
