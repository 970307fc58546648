package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.LossLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.listeners.CheckpointListener;
import org.deeplearning4j.optimize.listeners.CollectScoresIterationListener;
import org.deeplearning4j.optimize.listeners.PerformanceListener;
import org.deeplearning4j.optimize.listeners.ScoreIterationListener;
import org.deeplearning4j.ui.model.stats.StatsListener;
import org.deeplearning4j.ui.model.stats.api.StatsInitializationReport;
import org.deeplearning4j.ui.model.stats.api.StatsReport;
import org.deeplearning4j.ui.model.stats.api.StatsType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * The listeners attached to the user's model are called under the wrapper as DL4J's own fit calls
 * them for one model trained on the merged batch of every step: the same calls in the same order
 * with the same counters, and the same scores, batch sizes, parameters, gradients, updates and
 * activations (to rounding) — compared call by call with one model trained by plain fit() on the
 * merged batches. Also DL4J's ScoreIterationListener, PerformanceListener,
 * CollectScoresIterationListener, CheckpointListener and StatsListener with its UI storage, score() after fit, the
 * refusal of what cannot be honoured, and a failure inside a listener.
 */
class UserListenersTest {

    private static final double TOLERANCE = 1e-10;
    /** 3 workers: steps of 5+11+8, 7+3+9, then 6+10 with one worker idle. */
    private static final int WORKERS = 3;
    private static final int[] SIZES = {5, 11, 8, 7, 3, 9, 6, 10};

    /** An MLP with L2, so the score carries DL4J's regularization term. */
    static MultiLayerNetwork mlp() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(42).dataType(DataType.DOUBLE).updater(new Adam(0.01)).l2(1e-3).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    static ComputationGraph graph() {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(7).dataType(DataType.DOUBLE).updater(new Adam(0.01)).l2(1e-3).weightInit(WeightInit.XAVIER)
                .graphBuilder()
                .addInputs("in")
                .addLayer("dense", new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build(),
                        "in")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build(), "dense")
                .setOutputs("out")
                .build();
        ComputationGraph g = new ComputationGraph(conf);
        g.init();
        return g;
    }

    private static Model copy(Model m) {
        return m instanceof MultiLayerNetwork n ? n.clone() : ((ComputationGraph) m).clone();
    }

    private static void setListeners(Model m, TrainingListener... listeners) {
        m.setListeners(listeners);
    }

    private static List<DataSet> merged(List<DataSet> data) {
        List<DataSet> out = new ArrayList<>();
        for (int s = 0; s < data.size(); s += WORKERS) {
            out.add(Nets.merged(data.subList(s, Math.min(data.size(), s + WORKERS))));
        }
        return out;
    }

    /** Plain fit of one model on the merged batches, {@code epochs} times. */
    private static void fitMerged(Model m, List<DataSet> data, int epochs) {
        for (int e = 0; e < epochs; e++) {
            if (m instanceof MultiLayerNetwork n) {
                n.fit(new BatchListIterator(merged(data)));
            } else {
                ((ComputationGraph) m).fit(new BatchListIterator(merged(data)));
            }
        }
    }

    private static SymmemParallelWrapper.Builder builder(Model m, ZeroStage stage) {
        SymmemParallelWrapper.Builder b = m instanceof MultiLayerNetwork n ? SymmemParallelWrapper.builder(n)
                : SymmemParallelWrapper.builder((ComputationGraph) m);
        b.workers(WORKERS);
        if (stage != null) {
            b.sharding(stage);
        }
        return b;
    }

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (String kind : new String[] {"MultiLayerNetwork", "ComputationGraph"}) {
            for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS}) {
                out.add(Arguments.of(kind, stage == null ? "plain" : stage.name()));
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("cases")
    void listenersSeeWhatPlainFitShowsForTheMergedBatch(String kind, String mode) {
        ZeroStage stage = mode.equals("plain") ? null : ZeroStage.valueOf(mode);
        Model net = kind.equals("MultiLayerNetwork") ? mlp() : graph();
        List<DataSet> data = StateNets.shiftedBatches(71, SIZES, DataType.DOUBLE);

        Model reference = copy(net);
        RecordingListener expected = new RecordingListener();
        setListeners(reference, expected);
        fitMerged(reference, data, 2);

        Model wrapped = copy(net);
        RecordingListener actual = new RecordingListener();
        setListeners(wrapped, actual);
        List<Double> stepLosses = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = builder(wrapped, stage).stepListener(r -> stepLosses.add(r.loss())).build()) {
            wrapper.fit(new BatchListIterator(data));
            wrapper.fit(new BatchListIterator(data));
        }

        assertEquals(expected.calls.stream().map(RecordingListener.Call::signature).toList(),
                actual.calls.stream().map(RecordingListener.Call::signature).toList(), "the calls and their counters");
        List<Double> expectedScores = new ArrayList<>();
        for (int i = 0; i < expected.calls.size(); i++) {
            RecordingListener.Call e = expected.calls.get(i);
            RecordingListener.Call a = actual.calls.get(i);
            String where = "call " + i + " " + e.signature();
            assertEquals(e.score(), a.score(), TOLERANCE * Math.max(1, Math.abs(e.score())), where + ": score");
            assertClose(e.params(), a.params(), where + ": parameters");
            assertClose(e.gradient(), a.gradient(), where + ": model.gradient()");
            if (e.activations() != null) {
                assertEquals(e.activations().keySet(), a.activations().keySet(), where + ": activation keys");
                for (String k : e.activations().keySet()) {
                    assertClose(e.activations().get(k), a.activations().get(k), where + ": activations of " + k);
                }
            }
            if (e.kind().equals("iterationDone")) {
                expectedScores.add(e.score());
            }
        }
        assertEquals(expectedScores.size(), stepLosses.size());
        for (int s = 0; s < stepLosses.size(); s++) {
            assertEquals(expectedScores.get(s), stepLosses.get(s), TOLERANCE, "StepReport.loss of step " + s);
        }
        assertEquals(reference.score(), wrapped.score(), TOLERANCE, "score() after fit");
        // the comparison can fail: the calls carry moving values
        assertTrue(Nets.maxRelativeDifference(expected.calls.getFirst().params(), expected.calls.getLast().params()) > 1e-3);
    }

    private static void assertClose(INDArray expected, INDArray actual, String what) {
        if (expected == null) {
            assertEquals(null, actual, what);
            return;
        }
        assertNotNull(actual, what);
        assertEquals(expected.length(), actual.length(), what + ": length");
        double diff = Nets.maxRelativeDifference(actual.reshape(actual.length()), expected.reshape(expected.length()));
        assertTrue(diff <= TOLERANCE, what + ": max relative difference " + diff + " > " + TOLERANCE);
    }

    /** The centers' gradient before the update is undivided, as DL4J shows it; the score uses the layer's own division. */
    @Test
    void centerLossGradientAndScoreAsPlainFit() {
        MultiLayerNetwork net = StateNets.centerLossMlp(DataType.DOUBLE, false);
        List<DataSet> data = StateNets.shiftedBatches(73, SIZES, DataType.DOUBLE);
        for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.GRADIENTS}) {
            MultiLayerNetwork reference = net.clone();
            RecordingListener expected = new RecordingListener();
            reference.setListeners(expected);
            fitMerged(reference, data, 1);
            MultiLayerNetwork wrapped = net.clone();
            RecordingListener actual = new RecordingListener();
            wrapped.setListeners(actual);
            try (SymmemParallelWrapper wrapper = builder(wrapped, stage).build()) {
                wrapper.fit(new BatchListIterator(data));
            }
            assertEquals(expected.calls.size(), actual.calls.size());
            for (int i = 0; i < expected.calls.size(); i++) {
                RecordingListener.Call e = expected.calls.get(i);
                RecordingListener.Call a = actual.calls.get(i);
                assertEquals(e.score(), a.score(), TOLERANCE, stage + " " + e.signature() + ": score");
                assertClose(e.gradient(), a.gradient(), stage + " " + e.signature() + ": model.gradient()");
            }
        }
    }

    @Test
    void scoreIsSetAfterFitForEveryKindOfOutputLayer() {
        MultiLayerConfiguration lossLayer = new NeuralNetConfiguration.Builder()
                .seed(3).dataType(DataType.DOUBLE).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.OUT).activation(Activation.IDENTITY).build())
                .layer(new LossLayer.Builder(LossFunctions.LossFunction.MCXENT).activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork withLossLayer = new MultiLayerNetwork(lossLayer);
        withLossLayer.init();
        List<DataSet> data = StateNets.shiftedBatches(75, SIZES, DataType.DOUBLE);
        // OutputLayer divides its score by the batch size only in minibatch mode; LossLayer and
        // CenterLossOutputLayer always do
        for (MultiLayerNetwork net : List.of(mlp(), withLossLayer, StateNets.centerLossMlp(DataType.DOUBLE, false))) {
            MultiLayerNetwork reference = net.clone();
            fitMerged(reference, data, 1);
            MultiLayerNetwork wrapped = net.clone();
            try (SymmemParallelWrapper wrapper = builder(wrapped, null).build()) {
                wrapper.fit(new BatchListIterator(data));
            }
            assertTrue(reference.score() > 0.1, "a score worth comparing: " + reference.score());
            assertEquals(reference.score(), wrapped.score(), TOLERANCE, net.getLayer(1).getClass().getSimpleName());
        }
    }

    /** PerformanceListener reads the input's batch size; a subclass counts that its iterationDone ran through. */
    private static final class CountingPerformanceListener extends PerformanceListener {
        int iterations;

        CountingPerformanceListener() {
            super(1, true);
        }

        @Override
        public void iterationDone(Model model, int iteration, int epoch) {
            super.iterationDone(model, iteration, epoch);
            iterations++;
        }
    }

    @Test
    void dl4jsOwnListenersRun() {
        MultiLayerNetwork net = mlp();
        List<DataSet> data = StateNets.shiftedBatches(77, SIZES, DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        CollectScoresIterationListener expectedScores = new CollectScoresIterationListener(1);
        reference.setListeners(expectedScores);
        fitMerged(reference, data, 1);

        MultiLayerNetwork wrapped = net.clone();
        CollectScoresIterationListener scores = new CollectScoresIterationListener(1);
        CountingPerformanceListener performance = new CountingPerformanceListener();
        wrapped.setListeners(new ScoreIterationListener(1), performance, scores);
        try (SymmemParallelWrapper wrapper = builder(wrapped, ZeroStage.GRADIENTS).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        assertEquals(3, performance.iterations);
        long[] expectedIterations = expectedScores.getScoreVsIter().getEffectiveIndexes();
        assertEquals(3, expectedIterations.length);
        assertEquals(java.util.Arrays.toString(expectedIterations),
                java.util.Arrays.toString(scores.getScoreVsIter().getEffectiveIndexes()));
        double[] expected = expectedScores.getScoreVsIter().getEffectiveScores();
        double[] actual = scores.getScoreVsIter().getEffectiveScores();
        for (int i = 0; i < 3; i++) {
            assertEquals(expected[i], actual[i], TOLERANCE, "score of iteration " + i);
        }
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("cases")
    void statsListenerFeedsDl4jsUiStorage(String kind, String mode) {
        ZeroStage stage = mode.equals("plain") ? null : ZeroStage.valueOf(mode);
        Model net = kind.equals("MultiLayerNetwork") ? mlp() : graph();
        List<DataSet> data = StateNets.shiftedBatches(79, SIZES, DataType.DOUBLE);
        Model reference = copy(net);
        RecordingStatsRouter expected = new RecordingStatsRouter();
        setListeners(reference, new StatsListener(expected, 1)); // report every iteration (default: every 10th)
        fitMerged(reference, data, 1);

        Model wrapped = copy(net);
        RecordingStatsRouter actual = new RecordingStatsRouter();
        setListeners(wrapped, new StatsListener(actual, 1));
        try (SymmemParallelWrapper wrapper = builder(wrapped, stage).build()) {
            wrapper.fit(new BatchListIterator(data));
        }

        // read the storage back as DL4J's UI does: one session, its static info, its updates
        assertEquals(1, actual.storage.listSessionIDs().size());
        String session = actual.storage.listSessionIDs().getFirst();
        List<String> workerIds = actual.storage.listWorkerIDsForSession(session);
        assertEquals(1, workerIds.size(), "one model, one worker id in the UI: " + workerIds);
        StatsInitializationReport init = (StatsInitializationReport) actual.storage.getStaticInfo(session,
                StatsListener.TYPE_ID, workerIds.getFirst());
        assertNotNull(init, "static info (model and hardware) is stored");
        assertEquals(wrapped.numParams(), init.getModelNumParams());
        StatsReport latest = (StatsReport) actual.storage.getLatestUpdate(session, StatsListener.TYPE_ID, workerIds.getFirst());
        assertSame(actual.updates.getLast(), latest, "the storage's latest update is the last one the listener sent");

        assertEquals(3, expected.updates.size());
        assertEquals(expected.updates.size(), actual.updates.size(), "one update per step");
        for (int i = 0; i < expected.updates.size(); i++) {
            StatsReport e = (StatsReport) expected.updates.get(i);
            StatsReport a = (StatsReport) actual.updates.get(i);
            assertEquals(e.getIterationCount(), a.getIterationCount());
            assertEquals(e.getScore(), a.getScore(), TOLERANCE, "update " + i + ": score");
            assertEquals(e.getTotalExamples(), a.getTotalExamples(), "update " + i + ": examples so far");
            for (StatsType type : new StatsType[] {StatsType.Parameters, StatsType.Gradients, StatsType.Updates,
                    StatsType.Activations}) {
                assertEquals(e.getMean(type).keySet(), a.getMean(type).keySet(), "update " + i + " " + type);
                for (String k : e.getMean(type).keySet()) {
                    double x = e.getMean(type).get(k);
                    assertEquals(x, a.getMean(type).get(k), 1e-8 * Math.max(1, Math.abs(x)), "update " + i + " mean " + type
                            + " " + k);
                }
                assertEquals(e.getHistograms(type).keySet(), a.getHistograms(type).keySet(), "update " + i + " histograms "
                        + type);
            }
        }
    }

    /**
     * DL4J's CheckpointListener saves the model with its updater state at every iteration: each
     * checkpoint equals one model's state after that many steps on the merged batches, so the
     * updater state gathered from the shards is current at every iterationDone.
     */
    @Test
    void checkpointListenerSavesEachStepsFullState(@TempDir Path dir) {
        MultiLayerNetwork net = mlp();
        List<DataSet> data = StateNets.shiftedBatches(85, SIZES, DataType.DOUBLE);
        MultiLayerNetwork wrapped = net.clone();
        wrapped.setListeners(new CheckpointListener.Builder(dir.toFile()).saveEveryNIterations(1).keepAll()
                .logSaving(false).build());
        try (SymmemParallelWrapper wrapper = builder(wrapped, ZeroStage.GRADIENTS).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        List<DataSet> steps = merged(data);
        // DL4J's CheckpointListener starts its count at the first iteration and saves from the second
        assertEquals(steps.size() - 1, CheckpointListener.availableCheckpoints(dir.toFile()).size());
        MultiLayerNetwork reference = net.clone();
        reference.fit(steps.getFirst());
        for (int c = 0; c < steps.size() - 1; c++) {
            reference.fit(steps.get(c + 1));
            MultiLayerNetwork saved = CheckpointListener.loadCheckpointMLN(dir.toFile(), c);
            assertEquals(reference.getIterationCount(), saved.getIterationCount() + 1, "saved in iterationDone, before DL4J"
                    + " counts the iteration");
            assertClose(reference.params(), saved.params(), "checkpoint " + c + ": parameters");
            assertClose(reference.getUpdater().getStateViewArray(), saved.getUpdater().getStateViewArray(),
                    "checkpoint " + c + ": updater state");
        }
    }

    @Test
    void aNetworkTrainedWithTruncatedBpttRefusesListenersAtBuild() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.FLOAT).updater(new Adam(0.01))
                .list()
                .layer(new LSTM.Builder().nIn(4).nOut(6).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(6).nOut(2)
                        .activation(Activation.SOFTMAX).build())
                .backpropType(BackpropType.TruncatedBPTT).tBPTTLength(5)
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        net.setListeners(new ScoreIterationListener(1));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).workers(2).build());
        assertTrue(e.getMessage().contains("listeners=[ScoreIterationListener]") && e.getMessage().contains("truncated BPTT")
                && e.getMessage().contains("fix:"), e.getMessage());
        net.setListeners();
        SymmemParallelWrapper.builder(net).workers(2).build().close(); // without listeners it builds
    }

    @Test
    void aFailingListenerEndsFitAndLeavesTheModelAsItWas() {
        MultiLayerNetwork net = mlp();
        List<DataSet> data = StateNets.shiftedBatches(81, SIZES, DataType.DOUBLE);
        MultiLayerNetwork wrapped = net.clone();
        try (SymmemParallelWrapper wrapper = builder(wrapped, ZeroStage.OPTIMIZER_STATE).build()) {
            wrapper.fit(new BatchListIterator(data)); // a first fit, so the model has updater state worth keeping
            INDArray params = wrapped.params().dup();
            INDArray state = wrapped.getUpdater().getStateViewArray().dup();
            int iterations = wrapped.getIterationCount();
            double score = wrapped.score();
            IllegalStateException boom = new IllegalStateException("listener failed");
            wrapped.setListeners(new BaseTrainingListener() {
                @Override
                public void iterationDone(Model model, int iteration, int epoch) {
                    if (iteration == iterations + 1) {
                        throw boom;
                    }
                }
            });
            assertSame(boom, assertThrows(IllegalStateException.class, () -> wrapper.fit(new BatchListIterator(data))));
            assertTrue(ModelReplica.bitwiseEqual(params, wrapped.params()), "parameters as before the failed fit");
            assertTrue(ModelReplica.bitwiseEqual(state, wrapped.getUpdater().getStateViewArray()), "updater state");
            assertEquals(iterations, wrapped.getIterationCount());
            assertEquals(1, wrapped.getEpochCount());
            assertEquals(score, wrapped.score());
            // and training goes on from there
            wrapped.setListeners();
            wrapper.fit(new BatchListIterator(data));
            assertEquals(iterations + 3, wrapped.getIterationCount());
        }
    }

    /** A listener that changes the model's parameters in iterationDone: the next step starts from them, as in plain fit. */
    @Test
    void aListenerThatChangesParametersIsHonoured() {
        MultiLayerNetwork net = mlp();
        List<DataSet> data = StateNets.shiftedBatches(83, SIZES, DataType.DOUBLE);
        TrainingListener shrink = new BaseTrainingListener() {
            @Override
            public void iterationDone(Model model, int iteration, int epoch) {
                if (iteration == 0) {
                    model.params().muli(0.5);
                }
            }
        };
        MultiLayerNetwork reference = net.clone();
        reference.setListeners(shrink);
        fitMerged(reference, data, 1);
        for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.GRADIENTS}) {
            MultiLayerNetwork wrapped = net.clone();
            wrapped.setListeners(shrink);
            try (SymmemParallelWrapper wrapper = builder(wrapped, stage).build()) {
                wrapper.fit(new BatchListIterator(data));
            }
            double diff = Nets.maxRelativeDifference(wrapped.params(), reference.params());
            assertTrue(diff <= TOLERANCE, stage + ": " + diff);
        }
    }
}
