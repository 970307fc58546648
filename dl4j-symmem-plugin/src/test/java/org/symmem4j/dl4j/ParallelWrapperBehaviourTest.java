package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.parallelism.ParallelWrapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.adapter.MultiDataSetIteratorAdapter;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;

/**
 * ParallelWrapper's own behaviours around {@link SymmemGradientsAccumulator}: a second {@code fit},
 * its asynchronous prefetch, fp32 networks.
 */
class ParallelWrapperBehaviourTest {

    /** {@link BatchListIterator} that allows ParallelWrapper's asynchronous prefetch (AsyncDataSetIterator). */
    static final class PrefetchableIterator implements DataSetIterator {
        private final BatchListIterator batches;

        PrefetchableIterator(List<org.nd4j.linalg.dataset.DataSet> data) {
            this.batches = new BatchListIterator(data);
        }

        @Override
        public boolean asyncSupported() {
            return true;
        }

        @Override
        public org.nd4j.linalg.dataset.DataSet next(int num) {
            return batches.next(num);
        }

        @Override
        public int inputColumns() {
            return batches.inputColumns();
        }

        @Override
        public int totalOutcomes() {
            return batches.totalOutcomes();
        }

        @Override
        public boolean resetSupported() {
            return true;
        }

        @Override
        public void reset() {
            batches.reset();
        }

        @Override
        public int batch() {
            return batches.batch();
        }

        @Override
        public void setPreProcessor(DataSetPreProcessor preProcessor) {
            batches.setPreProcessor(preProcessor);
        }

        @Override
        public DataSetPreProcessor getPreProcessor() {
            return null;
        }

        @Override
        public List<String> getLabels() {
            return null;
        }

        @Override
        public boolean hasNext() {
            return batches.hasNext();
        }

        @Override
        public org.nd4j.linalg.dataset.DataSet next() {
            return batches.next();
        }
    }

    /**
     * ParallelWrapper clear()s the user's model at the end of fit, and MultiLayerNetwork.clear()
     * drops its updater: without the accumulator putting it back, the second fit deadlocks (and
     * would restart Adam from zero).
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"MultiLayerNetwork", "ComputationGraph"})
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void secondFitContinuesExactly(String kind) {
        int workers = 2;
        List<DataSet> first = Nets.batches(3, 6, 6, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(4, 5, 6, DataType.DOUBLE);
        Model net = kind.equals("MultiLayerNetwork") ? Nets.mlp(Nets.updater("adam"), DataType.DOUBLE)
                : Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        Model reference = net instanceof MultiLayerNetwork m ? m.clone() : ((ComputationGraph) net).clone();
        ParallelWrapperAccumulatorTest.ParamsPerIteration recorder = new ParallelWrapperAccumulatorTest.ParamsPerIteration();
        ParallelWrapper wrapper = ParallelWrapperAccumulatorTest.customWrapper(net, workers, recorder);
        try {
            wrapper.fit(new BatchListIterator(first));
            wrapper.fit(new BatchListIterator(second));
        } finally {
            wrapper.shutdown();
        }
        List<List<DataSet>> rounds = new ArrayList<>(ParallelWrapperAccumulatorTest.rounds(first, workers));
        rounds.addAll(ParallelWrapperAccumulatorTest.rounds(second, workers));
        ParallelWrapperAccumulatorTest.assertRoundsMatch(recorder, rounds, reference, 0);
        assertTrue(ModelReplica.bitwiseEqual(ModelReplica.of(reference).updaterState(), ModelReplica.of(net).updaterState())
                || Nets.maxRelativeDifference(ModelReplica.of(net).updaterState(),
                        ModelReplica.of(reference).updaterState()) <= 1e-8, "the user's model keeps Adam's state");
        assertEquals(ModelReplica.of(reference).iterationCount(), ModelReplica.of(net).iterationCount());
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void prefetchKeepsTheOrderOfBatches() {
        int workers = 3;
        List<DataSet> data = Nets.batches(8, 10, 4, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        ParallelWrapperAccumulatorTest.ParamsPerIteration recorder = new ParallelWrapperAccumulatorTest.ParamsPerIteration();
        net.addListeners(recorder);
        ParallelWrapper wrapper = new ParallelWrapper.Builder<>(net)
                .workers(workers)
                .prefetchBuffer(4)
                .trainingMode(ParallelWrapper.TrainingMode.CUSTOM)
                .gradientsAccumulator(SymmemGradientsAccumulator.attach(net))
                .build();
        try {
            wrapper.fit(new PrefetchableIterator(data));
        } finally {
            wrapper.shutdown();
        }
        ParallelWrapperAccumulatorTest.assertRoundsMatch(recorder, ParallelWrapperAccumulatorTest.rounds(data, workers),
                reference, 0);
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void floatNetworkStaysBitwiseEqualAcrossReplicas() {
        int workers = 2;
        List<DataSet> data = Nets.batches(21, 7, 8, DataType.FLOAT);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        MultiLayerNetwork reference = net.clone();
        ParallelWrapperAccumulatorTest.ParamsPerIteration recorder = new ParallelWrapperAccumulatorTest.ParamsPerIteration();
        ParallelWrapper wrapper = ParallelWrapperAccumulatorTest.customWrapper(net, workers, recorder);
        try {
            wrapper.fit(new BatchListIterator(data));
        } finally {
            wrapper.shutdown();
        }
        List<List<DataSet>> rounds = ParallelWrapperAccumulatorTest.rounds(data, workers);
        for (int i = 0; i < rounds.size(); i++) {
            reference.fit(Nets.merged(rounds.get(i)));
            List<INDArray> replicas = recorder.byIteration.get(i);
            for (int r = 1; r < replicas.size(); r++) {
                assertTrue(ModelReplica.bitwiseEqual(replicas.getFirst(), replicas.get(r)), "round " + i);
            }
            double diff = Nets.maxRelativeDifference(replicas.getFirst(), reference.params());
            assertTrue(diff <= DataParallelEquivalenceTest.tolerance(DataType.FLOAT, "adam"), "round " + i + ": " + diff);
        }
    }

    /**
     * After fit the user's model is a plain model again: its own minibatch division and training
     * workspace mode (ParallelWrapper overwrote the latter with its own), its updater state, and a
     * plain fit that trains exactly as the reference's.
     */
    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void afterFitTheModelTrainsPlainlyAgain() {
        int workers = 2;
        List<DataSet> data = Nets.batches(13, 4, 6, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        net.getLayerWiseConfigurations().setTrainingWorkspaceMode(WorkspaceMode.NONE);
        MultiLayerNetwork reference = net.clone();
        ParallelWrapper wrapper = new ParallelWrapper.Builder<>(net)
                .workers(workers)
                .prefetchBuffer(0)
                .workspaceMode(WorkspaceMode.ENABLED)
                .trainingMode(ParallelWrapper.TrainingMode.CUSTOM)
                .gradientsAccumulator(SymmemGradientsAccumulator.attach(net))
                .build();
        try {
            wrapper.fit(new BatchListIterator(data));
        } finally {
            wrapper.shutdown();
        }
        assertEquals(WorkspaceMode.NONE, net.getLayerWiseConfigurations().getTrainingWorkspaceMode());
        assertTrue(net.conf().isMiniBatch());
        for (List<DataSet> round : ParallelWrapperAccumulatorTest.rounds(data, workers)) {
            reference.fit(Nets.merged(round));
        }
        DataSet more = Nets.batches(14, 1, 9, DataType.DOUBLE).getFirst();
        net.fit(more);
        reference.fit(more);
        double diff = Nets.maxRelativeDifference(net.params(), reference.params());
        assertTrue(diff <= 1e-10, "a plain fit after ParallelWrapper differs by " + diff);
    }

    /** ParallelWrapper's MultiDataSet path (fit(MultiDataSetIterator), ComputationGraph) is exact as well. */
    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void multiDataSetIteratorOfAGraph() {
        int workers = 3;
        List<DataSet> data = Nets.batches(17, 8, 5, DataType.DOUBLE);
        ComputationGraph graph = Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        ComputationGraph reference = graph.clone();
        ParallelWrapperAccumulatorTest.ParamsPerIteration recorder = new ParallelWrapperAccumulatorTest.ParamsPerIteration();
        ParallelWrapper wrapper = ParallelWrapperAccumulatorTest.customWrapper(graph, workers, recorder);
        try {
            wrapper.fit(new MultiDataSetIteratorAdapter(new BatchListIterator(data)));
        } finally {
            wrapper.shutdown();
        }
        ParallelWrapperAccumulatorTest.assertRoundsMatch(recorder, ParallelWrapperAccumulatorTest.rounds(data, workers),
                reference, 0);
    }
}
