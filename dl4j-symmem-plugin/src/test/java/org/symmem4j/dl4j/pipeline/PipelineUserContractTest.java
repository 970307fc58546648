package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.core.storage.StatsStorageRouter;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.listeners.ScoreIterationListener;
import org.deeplearning4j.ui.model.stats.StatsListener;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.MultiDataSet;
import org.nd4j.linalg.dataset.adapter.MultiDataSetIteratorAdapter;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.RecordingStatsRouter;

/**
 * The pipeline trainer's user contract, the data-parallel wrapper's: the network given to the builder holds the
 * trained state after every {@code fit} (bitwise what {@code copyParametersTo} writes) and its changes between fits
 * are taken; the model's DL4J listeners are called per step with the step's state and score, and per epoch; a chain
 * graph trains from a {@code MultiDataSetIterator} as from the equivalent {@code DataSetIterator}.
 */
class PipelineUserContractTest {

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    private static List<DataSet> data() {
        return PipelineNets.batches(5, 4, 8, DataType.DOUBLE);
    }

    private static PipelineParallelTrainerBuilder pipeline(MultiLayerNetwork net) {
        return PipelineParallelTrainer.builder(net).ranks(2).microbatches(4).dataParallel(2);
    }

    @Test
    void theModelHoldsWhatCopyParametersToWritesAfterEveryFit() {
        MultiLayerNetwork model = mlp();
        MultiLayerNetwork copied = model.clone();
        List<DataSet> data = data();
        try (PipelineParallelTrainer trainer = pipeline(model).build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.copyParametersTo(copied);
            PipelineNets.assertSameState(copied, model, "after fit(iterator)");
            assertEquals(4, model.getIterationCount());
            assertEquals(1, model.getEpochCount());
            assertEquals(trainer.lastStep().loss(), model.score(), "score() is the last step's, as after DL4J's fit");
            trainer.fit(data.getFirst());
            trainer.copyParametersTo(copied);
            PipelineNets.assertSameState(copied, model, "after fit(DataSet)");
            assertEquals(5, model.getIterationCount());
        }
    }

    @Test
    void changesToTheModelBetweenFitsAreTaken() {
        MultiLayerNetwork model = mlp();
        List<DataSet> data = data();
        try (PipelineParallelTrainer trainer = pipeline(model).build()) {
            trainer.fit(data.get(0));
            model.params().muli(0.5);
            model.getUpdater().getStateViewArray().muli(0.25);
            model.setIterationCount(7);
            MultiLayerNetwork changed = model.clone();
            trainer.fit(data.get(1));
            try (PipelineParallelTrainer reference = pipeline(changed).build()) {
                reference.fit(data.get(1));
            }
            PipelineNets.assertSameState(changed, model, "a trainer built from the changed model, one step on");
            assertEquals(8, model.getIterationCount());
        }
    }

    /** Counts the calls and keeps what iterationDone saw. */
    private static final class Recording extends BaseTrainingListener {
        final List<String> calls = new ArrayList<>();
        final List<Double> scores = new ArrayList<>();
        final List<INDArray> params = new ArrayList<>();

        @Override
        public void iterationDone(Model model, int iteration, int epoch) {
            calls.add("iteration " + iteration + " epoch " + epoch);
            scores.add(model.score());
            params.add(model.params().dup());
        }

        @Override
        public void onEpochStart(Model model) {
            calls.add("epochStart");
        }

        @Override
        public void onEpochEnd(Model model) {
            calls.add("epochEnd");
        }
    }

    @Test
    void listenersSeeEveryStepWithItsStateAndScore() {
        MultiLayerNetwork model = mlp();
        MultiLayerNetwork reference = model.clone();
        List<DataSet> data = data();
        Recording recording = new Recording();
        List<Double> losses = new ArrayList<>();
        List<INDArray> expectedParams = new ArrayList<>();
        try (PipelineParallelTrainer trainer = pipeline(model).listeners(recording, new ScoreIterationListener(1))
                .stepListener(r -> losses.add(r.loss())).build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.fit(data.getFirst());
        }
        try (PipelineParallelTrainer trainer = pipeline(reference).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                expectedParams.add(reference.params().dup());
            }
        }
        assertEquals(List.of("epochStart", "iteration 0 epoch 0", "iteration 1 epoch 0", "iteration 2 epoch 0",
                "iteration 3 epoch 0", "epochEnd", "iteration 4 epoch 1"), recording.calls);
        assertEquals(losses, recording.scores, "iterationDone's model.score() is the step's loss");
        for (int s = 0; s < data.size(); s++) {
            assertTrue(PipelineNets.bitwiseEqual(expectedParams.get(s), recording.params.get(s)), "step " + s
                    + ": iterationDone's parameters are the step's (listeners change no bit of training)");
        }
    }

    @Test
    void statsListenerReportsEveryStepThroughTheBuildersRouter() {
        MultiLayerNetwork model = mlp();
        RecordingStatsRouter router = new RecordingStatsRouter();
        StatsListener stats = new StatsListener((StatsStorageRouter) null, 1);
        try (PipelineParallelTrainer trainer = pipeline(model).listeners(router, stats).build()) {
            trainer.fit(new BatchListIterator(data()));
        }
        String session = router.storage.listSessionIDs().getFirst();
        String worker = router.storage.listWorkerIDsForSession(session).getFirst();
        assertNotNull(router.storage.getStaticInfo(session, StatsListener.TYPE_ID, worker), "static info (model, hardware)");
        assertEquals(4, router.updates.size(), "one update per step");
        assertTrue(stats.getStorageRouter() == router, "the builder's router was given to the listener");
    }

    @Test
    void aRoutingListenerWithoutARouterIsRefusedAtBuild() {
        MultiLayerNetwork model = mlp();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> pipeline(model).listeners(new StatsListener((StatsStorageRouter) null, 1)).build());
        assertTrue(e.getMessage().contains("[StatsListener] send reports to a StatsStorageRouter but have none"), e.getMessage());
        assertTrue(model.getListeners() == null || model.getListeners().isEmpty(), "nothing attached after a refusal");
    }

    static ComputationGraph chainGraph() {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder().seed(3).dataType(DataType.DOUBLE)
                .updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).graphBuilder().addInputs("in")
                .addLayer("a", new DenseLayer.Builder().nIn(PipelineNets.WIDTHS[0]).nOut(12).activation(Activation.TANH)
                        .build(), "in")
                .addLayer("b", new DenseLayer.Builder().nIn(12).nOut(10).activation(Activation.TANH).build(), "a")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(10)
                        .nOut(PipelineNets.WIDTHS[PipelineNets.WIDTHS.length - 1]).activation(Activation.SOFTMAX).build(), "b")
                .setOutputs("out").build();
        ComputationGraph graph = new ComputationGraph(conf);
        graph.init();
        return graph;
    }

    @Test
    void aChainGraphTrainsFromAMultiDataSetIteratorAsFromADataSetIterator() {
        ComputationGraph fromDataSets = chainGraph();
        ComputationGraph fromMultiDataSets = fromDataSets.clone();
        List<DataSet> data = data();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(fromDataSets).ranks(3).microbatches(2).build()) {
            trainer.fit(new BatchListIterator(data));
        }
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(fromMultiDataSets).ranks(3).microbatches(2)
                .build()) {
            trainer.fit(new MultiDataSetIteratorAdapter(new BatchListIterator(data)));
            assertTrue(PipelineNets.bitwiseEqual(fromDataSets.params(), fromMultiDataSets.params()), "the graph's parameters");
            assertEquals(fromDataSets.getConfiguration().getIterationCount(),
                    fromMultiDataSets.getConfiguration().getIterationCount());
            assertEquals(1, fromMultiDataSets.getConfiguration().getEpochCount());

            DataSet b = data.getFirst();
            MultiDataSetIterator twoInputs = new MultiDataSetIteratorAdapter(new BatchListIterator(data)) {
                @Override
                public org.nd4j.linalg.dataset.api.MultiDataSet next() {
                    return new MultiDataSet(new INDArray[] {b.getFeatures(), b.getFeatures()}, new INDArray[] {b.getLabels()});
                }
            };
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.fit(twoInputs));
            assertTrue(e.getMessage().contains("features=2 labels=1 arrays: expected features=1 labels=1"), e.getMessage());
        }
        try (PipelineParallelTrainer trainer = pipeline(mlp()).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> trainer.fit(new MultiDataSetIteratorAdapter(new BatchListIterator(data))));
            assertTrue(e.getMessage().contains("fit(MultiDataSetIterator) needs a ComputationGraph"), e.getMessage());
        }
    }
}
