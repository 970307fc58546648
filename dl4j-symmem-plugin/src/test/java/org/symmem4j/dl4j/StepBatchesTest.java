package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;

/**
 * {@link StepBatches}, how the wrapper deals a fit's batches into steps: workers × accumulation batches a step,
 * round-robin (worker i takes batches i, i + workers, ...), the same through the prefetch reader, a shrink's batches
 * put back first in their order, and the worker count read at every step. Batches are told apart by identity; batch
 * i has i + 1 examples, so the example counts say which batches a step holds.
 */
class StepBatchesTest {

    private static List<Object> batches(int n) {
        List<Object> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(new DataSet(Nd4j.zeros(i + 1, 2), Nd4j.zeros(i + 1, 1)));
        }
        return out;
    }

    private static DataParallelSettings settings(int workers, int accumulation, int prefetchBuffer) {
        return new DataParallelSettings(workers, 0, null, null, Duration.ofSeconds(30), 1, null, false, accumulation,
                null, 0, prefetchBuffer, false, null, 0, null, WorkerFailure.FAIL, 1, 0, false);
    }

    /** Each entry of a step as the indexes of its batches in {@code all}: [i] for a batch, [i, j, ...] for micro-batches. */
    private static List<List<Integer>> indexes(List<Object> step, List<Object> all) {
        List<List<Integer>> out = new ArrayList<>();
        for (Object entry : step) {
            List<Object> parts = entry instanceof MicroBatches m ? m.batches() : List.of(entry);
            List<Integer> ids = new ArrayList<>();
            for (Object p : parts) {
                int id = -1;
                for (int i = 0; i < all.size(); i++) {
                    if (all.get(i) == p) {
                        id = i;
                    }
                }
                ids.add(id);
            }
            out.add(ids);
        }
        return out;
    }

    @Test
    void stepsTakeOneBatchPerWorkerAndTheLastStepWhatIsLeft() {
        List<Object> all = batches(7);
        try (StepBatches source = new StepBatches(all.iterator(), () -> settings(3, 1, 0))) {
            List<Object> first = source.take();
            assertEquals(List.of(List.of(0), List.of(1), List.of(2)), indexes(first, all));
            assertEquals(List.of(List.of(3), List.of(4), List.of(5)), indexes(source.take(), all));
            List<Object> last = source.take();
            assertEquals(List.of(List.of(6)), indexes(last, all));
            assertTrue(source.take().isEmpty());
            assertEquals(3, StepBatches.rawBatches(first));
            assertEquals(1 + 2 + 3, StepBatches.rawExamples(first));
            assertEquals(7, StepBatches.rawExamples(last));
        }
    }

    @Test
    void accumulationDealsMicroBatchesRoundRobin() {
        List<Object> all = batches(7);
        try (StepBatches source = new StepBatches(all.iterator(), () -> settings(2, 2, 0))) {
            List<Object> first = source.take();
            assertEquals(List.of(List.of(0, 2), List.of(1, 3)), indexes(first, all));
            List<Object> second = source.take();
            assertEquals(List.of(List.of(4, 6), List.of(5)), indexes(second, all));
            assertTrue(source.take().isEmpty());
            assertEquals(4, StepBatches.rawBatches(first));
            assertEquals(3, StepBatches.rawBatches(second));
            assertEquals(5 + 6 + 7, StepBatches.rawExamples(second));
        }
    }

    @Test
    void theReaderAheadDealsTheSameSteps() {
        List<Object> all = batches(7);
        List<List<List<Integer>>> steps = new ArrayList<>();
        try (StepBatches source = new StepBatches(all.iterator(), () -> settings(2, 2, 3))) {
            for (List<Object> step = source.take(); !step.isEmpty(); step = source.take()) {
                steps.add(indexes(step, all));
            }
        }
        assertEquals(List.of(List.of(List.of(0, 2), List.of(1, 3)), List.of(List.of(4, 6), List.of(5))), steps);
    }

    @Test
    void batchesPutBackComeFirstInTheirOrderDealtToTheWorkersNow() {
        List<Object> all = batches(9);
        AtomicReference<DataParallelSettings> now = new AtomicReference<>(settings(3, 1, 0));
        try (StepBatches source = new StepBatches(all.iterator(), now::get)) {
            List<Object> failed = source.take(); // 0 1 2
            List<Object> readAhead = source.take(); // 3 4 5
            now.set(now.get().withWorkers(2, 1)); // a shrink: 2 survivors
            List<Object> pending = new ArrayList<>(failed);
            pending.addAll(readAhead);
            source.putBack(pending);
            assertEquals(List.of(List.of(0), List.of(1)), indexes(source.take(), all));
            assertEquals(List.of(List.of(2), List.of(3)), indexes(source.take(), all));
            assertEquals(List.of(List.of(4), List.of(5)), indexes(source.take(), all));
            assertEquals(List.of(List.of(6), List.of(7)), indexes(source.take(), all));
            assertEquals(List.of(List.of(8)), indexes(source.take(), all));
            assertTrue(source.take().isEmpty());
        }
    }
}
