package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * In-place shrink ({@link WorkerFailure#SHRINK}) in thread mode: a worker that fails mid-fit is dropped, the survivors
 * redo the failed step, and the result is bitwise that of plain data parallelism on the survivors from that step on
 * (the reference: a wrapper of the old size up to the failed step, then one of the survivors' size on the rest of the
 * batches, which is the data order SHRINK documents).
 */
class ShrinkTest {

    /**
     * A batch that fails the first time a worker thread reads its features (as a worker whose step throws, or whose
     * thread dies of an Error), and reads normally afterwards: the fault belongs to the worker that met it, not to the
     * data, so the survivor that redoes the batch trains on it.
     */
    static final class FailsOnceOnAWorker extends DataSet {
        private final AtomicBoolean armed = new AtomicBoolean(true);
        private final Supplier<? extends Throwable> fault;
        volatile long failedNanos;

        FailsOnceOnAWorker(DataSet data, Supplier<? extends Throwable> fault) {
            super(data.getFeatures(), data.getLabels());
            this.fault = fault;
        }

        @Override
        public INDArray getFeatures() {
            if (Thread.currentThread().getName().startsWith("symmem4j-worker-") && armed.compareAndSet(true, false)) {
                failedNanos = System.nanoTime();
                Throwable t = fault.get();
                if (t instanceof Error e) {
                    throw e;
                }
                throw (RuntimeException) t;
            }
            return super.getFeatures();
        }
    }

    /** The same network trained by a wrapper of {@code before} workers for {@code steps} steps, then of {@code after}. */
    private static MultiLayerNetwork reference(MultiLayerNetwork start, List<DataSet> data, int before, int steps,
                                               int after) {
        MultiLayerNetwork ref = start.clone();
        if (steps > 0) {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(ref).workers(before).ompThreadsPerWorker(1).build()) {
                w.fit(new BatchListIterator(data.subList(0, before * steps)));
            }
            ref.setEpochCount(0); // one fit in the shrinking run: the counter is not part of the arithmetic
        }
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(ref).workers(after).ompThreadsPerWorker(1).build()) {
            w.fit(new BatchListIterator(data.subList(before * steps, data.size())));
        }
        return ref;
    }

    private static void assertSameState(MultiLayerNetwork expected, MultiLayerNetwork actual) {
        assertTrue(ModelReplica.bitwiseEqual(expected.params(), actual.params()),
                "parameters differ by " + Nets.maxRelativeDifference(actual.params(), expected.params()));
        assertTrue(ModelReplica.bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), "updater state differs");
        assertEquals(expected.getIterationCount(), actual.getIterationCount());
        assertEquals(expected.getEpochCount(), actual.getEpochCount());
    }

    @Test
    void aWorkerThatThrowsIsDroppedAndTheSurvivorsEqualPlainDataParallelismFromTheFailedStep() {
        List<DataSet> data = Nets.batches(11, 21, 8, DataType.FLOAT);
        List<DataSet> faulty = new ArrayList<>(data);
        // step 2 of three workers deals batches 6, 7, 8: worker 1 fails on batch 7
        FailsOnceOnAWorker fault = new FailsOnceOnAWorker(data.get(7), () -> new IllegalStateException("injected fault"));
        faulty.set(7, fault);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        MultiLayerNetwork start = net.clone();
        List<Long> reported = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(3).ompThreadsPerWorker(1)
                .onWorkerFailure(WorkerFailure.SHRINK).stepListener(r -> reported.add(r.step())).build()) {
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(2, wrapper.workers());
            List<ShrinkReport> shrinks = wrapper.shrinks();
            assertEquals(1, shrinks.size());
            ShrinkReport s = shrinks.getFirst();
            assertEquals(2, s.step());
            assertEquals(List.of(1), s.dead());
            assertEquals(3, s.workersBefore());
            assertEquals(2, s.workersAfter());
            assertTrue(s.redone(), "the survivors were stopped before their update: the step is redone");
            assertTrue(s.failure().contains("injected fault"), s.failure());
            System.out.printf(Locale.ROOT, "shrink 3->2: survivors' next step %.1f ms after the worker failed"
                    + " (rebuild %.1f ms)%n", (s.resumedNanos() - fault.failedNanos) / 1e6, s.rebuildMillis());
        }
        // steps 0, 1 on three workers; 2 failed and redone on two: 21 - 6 = 15 batches, 8 steps (the last one short)
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L), reported);
        assertSameState(reference(start, data, 3, 2, 2), net);
        // and the shrink mattered: an uninterrupted three-worker run ends elsewhere
        MultiLayerNetwork uninterrupted = reference(start, data, 3, 0, 3);
        assertFalse(ModelReplica.bitwiseEqual(uninterrupted.params(), net.params()));
    }

    @Test
    void aWorkerThreadDyingOfAnErrorAndASecondDeathInTheRedoneStepShrinkTwice() {
        List<DataSet> data = Nets.batches(12, 20, 8, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        // three workers, step 1 deals 3, 4, 5: worker 2 dies on batch 5 (an Error ends its step) ...
        faulty.set(5, new FailsOnceOnAWorker(data.get(5), () -> new OutOfMemoryError("injected: worker thread dies")));
        // ... and when the two survivors redo step 1 with batches 3, 4, the new worker 0 fails on batch 3
        faulty.set(3, new FailsOnAnotherThread(data.get(3)));
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork start = net.clone();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(3).ompThreadsPerWorker(1)
                .onWorkerFailure(WorkerFailure.SHRINK).build()) {
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(1, wrapper.workers());
            List<ShrinkReport> shrinks = wrapper.shrinks();
            assertEquals(2, shrinks.size(), shrinks.toString());
            assertEquals(List.of(2), shrinks.get(0).dead());
            assertEquals(1, shrinks.get(0).step());
            assertTrue(shrinks.get(0).failure().contains("OutOfMemoryError"), shrinks.get(0).failure());
            assertEquals(List.of(0), shrinks.get(1).dead());
            assertEquals(1, shrinks.get(1).step());
            assertEquals(2, shrinks.get(1).workersBefore());
            assertTrue(shrinks.get(1).redone());
        }
        assertSameState(reference(start, data, 3, 1, 1), net);
    }

    /**
     * A batch read normally by the first worker thread that reads it, and failing once when another worker thread
     * reads it: the survivor that redoes it after a shrink (a new thread) fails, the one after the next shrink not.
     */
    static final class FailsOnAnotherThread extends DataSet {
        private volatile Thread firstReader;
        private final AtomicBoolean armed = new AtomicBoolean(true);

        FailsOnAnotherThread(DataSet data) {
            super(data.getFeatures(), data.getLabels());
        }

        @Override
        public INDArray getFeatures() {
            Thread me = Thread.currentThread();
            if (me.getName().startsWith("symmem4j-worker-")) {
                if (firstReader == null) {
                    firstReader = me;
                } else if (firstReader != me && armed.compareAndSet(true, false)) {
                    throw new IllegalStateException("second fault, in the redone step");
                }
            }
            return super.getFeatures();
        }
    }

    /**
     * Group mode with ranks that are threads of a world made by {@code InJvmWorld.createShrinking}: rank 1's worker fails
     * in step 1, its task ends with the failure and the world names it dead; ranks 0 and 2 shrink and end bitwise as
     * plain data parallelism on them from the failed step (the same reference as thread mode's).
     */
    @Test
    void groupModeOnThreadRanksOfAShrinkingWorldDropsTheRankWhoseTaskFailed() {
        List<DataSet> data = Nets.batches(15, 15, 8, DataType.FLOAT);
        List<DataSet> faulty = new ArrayList<>(data);
        // step 1 of three ranks deals batches 3, 4, 5: rank 1's worker fails on batch 4
        faulty.set(4, new FailsOnceOnAWorker(data.get(4), () -> new IllegalStateException("injected fault")));
        MultiLayerNetwork start = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        org.symmem4j.parallel.group.RankOutcomes<MultiLayerNetwork> ends;
        try (org.symmem4j.parallel.group.InJvmWorld world = org.symmem4j.parallel.group.InJvmWorld.createShrinking(3,
                org.symmem4j.parallel.GroupOptions.defaults().withTimeout(java.time.Duration.ofSeconds(60)))) {
            ends = org.symmem4j.parallel.group.InJvmWorld.runOnEveryRankSurviving(world, group -> {
                MultiLayerNetwork mine = start.clone();
                try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(mine).group(group)
                        .ompThreadsPerWorker(1).onWorkerFailure(WorkerFailure.SHRINK).build()) {
                    wrapper.fit(new BatchListIterator(faulty));
                    assertEquals(2, wrapper.workers());
                    ShrinkReport s = wrapper.shrinks().getFirst();
                    // step 1 redone on every survivor, also on one the abort reached still finishing step 0
                    // (past its update, in the loss merge): the survivors agree on it (SurvivorSteps)
                    assertEquals(1, s.step(), "rank " + group.rank() + ": the agreed failed step");
                    assertTrue(s.redone(), "rank " + group.rank() + ": redone");
                    assertEquals(1, s.resumedAt(), "rank " + group.rank());
                    assertEquals(List.of(1), s.dead());
                }
                return mine;
            });
        }
        assertEquals(List.of(1), ends.dead(), "rank 1's task failed, no other's");
        assertTrue(String.valueOf(ends.failure(1)).contains("injected fault"), String.valueOf(ends.failure(1)));
        MultiLayerNetwork expected = reference(start, data, 3, 1, 2);
        assertSameState(expected, ends.result(0));
        assertSameState(expected, ends.result(2));
    }

    @Test
    void aFailureLeavingFewerThanMinWorkersEndsFitWithAClearErrorAndTheModelAsBefore() {
        List<DataSet> data = new ArrayList<>(Nets.batches(13, 12, 8, DataType.FLOAT));
        data.set(4, new FailsOnceOnAWorker(data.get(4), () -> new IllegalStateException("injected fault")));
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        INDArray before = net.params().dup();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(3).ompThreadsPerWorker(1)
                .onWorkerFailure(WorkerFailure.SHRINK).minWorkers(3).build()) {
            DataParallelTrainingException e = assertThrows(DataParallelTrainingException.class,
                    () -> wrapper.fit(new BatchListIterator(data)));
            assertTrue(e.getMessage().contains("minWorkers=3") && e.getMessage().contains("leaving 2 of 3"), e.getMessage());
            assertEquals(1, e.worker());
            assertEquals(1, e.step());
            assertTrue(e.getCause().getMessage().contains("injected fault"), String.valueOf(e.getCause()));
            assertTrue(ModelReplica.bitwiseEqual(before, net.params()), "a failed fit leaves the model unchanged");
            assertEquals(0, wrapper.shrinks().size());
            assertEquals(3, wrapper.workers());
        }
    }

    @Test
    void aShrinkThatLaterFailsLeavesTheModelAsBeforeTheFit() {
        List<DataSet> data = new ArrayList<>(Nets.batches(14, 12, 8, DataType.FLOAT));
        data.set(1, new FailsOnceOnAWorker(data.get(1), () -> new IllegalStateException("first fault")));
        // after the shrink to two workers (redoing batches 0, 1), step 3 deals 6, 7: worker 1 fails on batch 7
        data.set(7, new FailsOnceOnAWorker(data.get(7), () -> new IllegalStateException("second fault")));
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        INDArray before = net.params().dup();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(3).ompThreadsPerWorker(1)
                .onWorkerFailure(WorkerFailure.SHRINK).minWorkers(2).build()) {
            DataParallelTrainingException e = assertThrows(DataParallelTrainingException.class,
                    () -> wrapper.fit(new BatchListIterator(data)));
            assertTrue(e.getMessage().contains("minWorkers=2") && e.getMessage().contains("leaving 1 of 2"), e.getMessage());
            assertEquals(3, e.step());
            assertEquals(1, wrapper.shrinks().size());
            assertTrue(ModelReplica.bitwiseEqual(before, net.params()), "a failed fit leaves the model unchanged");
            assertEquals(0, net.getIterationCount());
        }
    }

    @Test
    void buildRefusesWhatShrinkCannotDo() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        IllegalArgumentException sharded = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net).workers(2).sharding(ZeroStage.OPTIMIZER_STATE).onWorkerFailure(WorkerFailure.SHRINK).build());
        assertTrue(sharded.getMessage().contains("sharding=OPTIMIZER_STATE") && sharded.getMessage().contains("RESTART")
                && sharded.getMessage().contains("--max-restarts"), sharded.getMessage());
        IllegalArgumentException tooMany = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net).workers(2).onWorkerFailure(WorkerFailure.SHRINK).minWorkers(3).build());
        assertTrue(tooMany.getMessage().contains("minWorkers=3 with workers=2"), tooMany.getMessage());
        IllegalArgumentException withoutShrink = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net).workers(2).minWorkers(1).build());
        assertTrue(withoutShrink.getMessage().contains("onWorkerFailure=FAIL"), withoutShrink.getMessage());
        IllegalArgumentException timeline = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net).workers(2).onWorkerFailure(WorkerFailure.SHRINK).recordTimeline(10).build());
        assertTrue(timeline.getMessage().contains("recordTimeline"), timeline.getMessage());
        assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net).minWorkers(0));
        // a group that cannot shrink (no membership authority: not started by symmem4j-run --on-failure shrink)
        List<String> refusals = org.symmem4j.parallel.group.InJvmWorld.runOnEveryRank(2,
                org.symmem4j.parallel.GroupOptions.defaults(), group -> {
                    assertFalse(group.canShrink());
                    assertThrows(UnsupportedOperationException.class, group::shrink);
                    return assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                            .builder(Nets.mlp(Nets.updater("adam"), DataType.FLOAT)).group(group)
                            .onWorkerFailure(WorkerFailure.SHRINK).build()).getMessage();
                });
        for (String m : refusals) {
            assertTrue(m.contains("cannot shrink in place") && m.contains("--on-failure shrink")
                    && m.contains("RESTART"), m);
        }
    }
}
