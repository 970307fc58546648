package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;

/** The ParallelWrapper faults symmem4j does not inherit, short rounds, and failures. */
class DataParallelBehaviourTest {

    private static final double FP64_TOLERANCE = 1e-10;

    @Test
    void secondFitWorksAndAdamStateSurvivesBetweenFits() {
        int workers = 2;
        List<DataSet> first = Nets.batches(1, 8, 8, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(2, 8, 8, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        MultiLayerNetwork resetEachFit = net.clone();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(workers).build()) {
            wrapper.fit(new BatchListIterator(first));
            wrapper.fit(new BatchListIterator(second)); // ParallelWrapper deadlocks here in SHARED_GRADIENTS mode
        }
        for (List<DataSet> data : List.of(first, second)) {
            for (int s = 0; s < data.size() / workers; s++) {
                reference.fit(Nets.merged(data.subList(s * workers, (s + 1) * workers)));
            }
        }
        assertTrue(Nets.maxRelativeDifference(net.params(), reference.params()) <= FP64_TOLERANCE,
                "two fits must equal one model's uninterrupted training");
        assertEquals(2, net.getEpochCount());
        // what ParallelWrapper does (fresh Adam state each fit) lands measurably elsewhere
        for (int s = 0; s < first.size() / workers; s++) {
            resetEachFit.fit(Nets.merged(first.subList(s * workers, (s + 1) * workers)));
        }
        resetEachFit.getUpdater().getStateViewArray().assign(0);
        for (int s = 0; s < second.size() / workers; s++) {
            resetEachFit.fit(Nets.merged(second.subList(s * workers, (s + 1) * workers)));
        }
        assertTrue(Nets.maxRelativeDifference(net.params(), resetEachFit.params()) > 1e4 * FP64_TOLERANCE,
                "the test must be able to tell kept from reset updater state");
    }

    @Test
    void shortLastRoundAndUnequalBatchesAreWeightedByExamples() {
        int workers = 4;
        SplittableRandom rnd = new SplittableRandom(5);
        List<DataSet> data = new ArrayList<>();
        int[] sizes = {8, 8, 8, 8, 5, 11, 8, 3, 7};   // step 2 has one batch for four workers
        for (int size : sizes) {
            data.add(Nets.batch(rnd, size, DataType.DOUBLE));
        }
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        List<INDArray> perStep = DataParallelEquivalenceTest.trainParallel(
                SymmemParallelWrapper.builder(net).workers(workers), data);
        assertEquals(3, perStep.size());
        int[][] steps = {{0, 4}, {4, 8}, {8, 9}};
        for (int s = 0; s < steps.length; s++) {
            reference.fit(Nets.merged(data.subList(steps[s][0], steps[s][1])));
            double diff = Nets.maxRelativeDifference(perStep.get(s), reference.params());
            assertTrue(diff <= FP64_TOLERANCE, "step " + s + ": " + diff);
        }
    }

    @Test
    void aWorkerThatThrowsEndsFitOnTheCallersThreadPromptly() {
        List<DataSet> data = new ArrayList<>(Nets.batches(3, 8, 8, DataType.FLOAT));
        // worker 1's batch of step 2 has the wrong number of features: DL4J throws in its forward pass
        data.set(5, new DataSet(Nd4j.rand(DataType.FLOAT, 8, Nets.IN + 5), data.get(5).getLabels()));
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        INDArray before = net.params().dup();
        Duration timeout = Duration.ofSeconds(30);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).timeout(timeout).build()) {
            long start = System.nanoTime();
            DataParallelTrainingException e = assertThrows(DataParallelTrainingException.class,
                    () -> wrapper.fit(new BatchListIterator(data)));
            Duration took = Duration.ofNanos(System.nanoTime() - start);
            assertEquals(1, e.worker());
            assertEquals(2, e.step());
            assertTrue(e.getMessage().contains("worker 1 at step 2"), e.getMessage());
            assertTrue(took.compareTo(timeout) < 0, "the other worker must not wait out the timeout: " + took);
            assertTrue(ModelReplica.bitwiseEqual(before, net.params()), "a failed fit leaves the model unchanged");
            // the wrapper recovers: a good iterator trains again from the model's state
            wrapper.fit(new BatchListIterator(Nets.batches(4, 4, 8, DataType.FLOAT)));
            assertTrue(!ModelReplica.bitwiseEqual(before, net.params()));
        }
    }

    @Test
    void nonFiniteGradientFailsNamingWorkerAndStep() {
        List<DataSet> data = poisoned(3, 1);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).build()) {
            NonFiniteGradientException e = assertThrows(NonFiniteGradientException.class,
                    () -> wrapper.fit(new BatchListIterator(data)));
            assertEquals(List.of(1), e.workers());
            assertEquals(3, e.step());
            assertTrue(e.getMessage().contains("step=3") && e.getMessage().contains("worker 1"), e.getMessage());
        }
    }

    @Test
    void nonFiniteGradientStepIsSkippedWhenConfigured() {
        int workers = 2;
        List<DataSet> data = poisoned(3, 1);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        List<Boolean> skipped = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(workers)
                .nonFiniteGradients(NonFiniteGradients.SKIP_STEP).stepListener(r -> skipped.add(r.skipped())).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        assertEquals(List.of(false, false, false, true, false, false), skipped);
        for (int s = 0; s < data.size() / workers; s++) {
            if (s != 3) {
                reference.fit(Nets.merged(data.subList(s * workers, (s + 1) * workers)));
            }
        }
        assertTrue(Nets.maxRelativeDifference(net.params(), reference.params()) <= FP64_TOLERANCE,
                "a skipped step must leave parameters and Adam state untouched");
        assertEquals(reference.getIterationCount(), net.getIterationCount());
    }

    /** 6 steps of 2 workers, with a NaN feature in {@code worker}'s batch of {@code step}. */
    private static List<DataSet> poisoned(int step, int worker) {
        List<DataSet> data = new ArrayList<>(Nets.batches(8, 12, 8, DataType.DOUBLE));
        DataSet bad = data.get(step * 2 + worker).copy();
        bad.getFeatures().putScalar(0, 0, Double.NaN);
        data.set(step * 2 + worker, bad);
        return data;
    }

    @Test
    void invalidSettingsAreRejectedWithTheFix() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        var builder = SymmemParallelWrapper.builder(net);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> builder.workers(0)).getMessage()
                .contains("workers=0 must be >= 1"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> builder.bucketBytes(8)).getMessage()
                .contains("bucketBytes=8 must be >= 64"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> builder.timeout(Duration.ZERO)).getMessage()
                .contains("must be positive"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> builder.ompThreadsPerWorker(0)).getMessage()
                .contains("ompThreadsPerWorker=0"));
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).build()) {
            assertEquals(Runtime.getRuntime().availableProcessors(), wrapper.workers(),
                    "workers default to the number of cores (ParallelWrapper defaults to the GPU count, 1 on CPU)");
        }
        var nccl = SymmemParallelWrapper.builder(net).workers(2).algorithm(org.symmem4j.parallel.Algorithm.NCCL);
        assertTrue(assertThrows(IllegalArgumentException.class, nccl::build).getMessage().contains("needs a GPU transport"));
    }
}
