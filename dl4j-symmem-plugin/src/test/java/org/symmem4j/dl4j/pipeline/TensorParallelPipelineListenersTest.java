package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.listeners.ScoreIterationListener;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.Nets;

/**
 * The model's DL4J listeners with DP x PP x TP ({@link PipelineTensorParallel#listenerStep}): called as the pipeline
 * without tensor parallelism calls them (the same calls, counters and batch sizes; the unsharded model's parameters,
 * gradient before the update, update, score and activations equal to fp64 rounding), without changing a bit of
 * training, and a model a listener changes is taken by every shard of every replica.
 */
class TensorParallelPipelineListenersTest {

    private static final int[] BLOCKS = TensorParallelPipelineTest.BLOCKS;

    /** Every call with what a listener reads from the model then. */
    private static final class Recording extends BaseTrainingListener {
        record Call(String kind, int iteration, int epoch, double score, long batchSize, INDArray params,
                    INDArray gradient, List<INDArray> activations) {
            String signature() {
                return kind + " iteration=" + iteration + " epoch=" + epoch + " batch=" + batchSize;
            }
        }

        final List<Call> calls = new ArrayList<>();

        private void record(String kind, Model m, int iteration, int epoch, INDArray gradient, List<INDArray> activations) {
            MultiLayerNetwork n = (MultiLayerNetwork) m;
            try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
                calls.add(new Call(kind, iteration < 0 ? n.getIterationCount() : iteration,
                        epoch < 0 ? n.getEpochCount() : epoch, m.score(), n.getInput() == null ? -1 : m.batchSize(),
                        m.params().dup(), gradient == null ? null : gradient.dup(),
                        activations == null ? null : activations.stream().map(INDArray::dup).toList()));
            }
        }

        @Override
        public void onEpochStart(Model model) {
            record("epochStart", model, -1, -1, null, null);
        }

        @Override
        public void onEpochEnd(Model model) {
            record("epochEnd", model, -1, -1, null, null);
        }

        @Override
        public void onForwardPass(Model model, List<INDArray> activations) {
            record("forwardPass", model, -1, -1, null, activations);
        }

        @Override
        public void onBackwardPass(Model model) {
            record("backwardPass", model, -1, -1, null, null);
        }

        @Override
        public void onGradientCalculation(Model model) {
            record("gradientCalculation", model, -1, -1, model.gradient().gradient(), null);
        }

        @Override
        public void iterationDone(Model model, int iteration, int epoch) {
            record("iterationDone", model, iteration, epoch, model.gradient().gradient(), null);
        }
    }

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    private static PipelineParallelTrainerBuilder tensorParallel(MultiLayerNetwork model) {
        return PipelineParallelTrainer.builder(model).ranks(2).dataParallel(2).tensorParallel(2, BLOCKS).microbatches(2)
                .ompThreadsPerRank(1);
    }

    @Test
    void listenersSeeWhatThePipelineWithoutTensorParallelismShowsThem() {
        List<DataSet> data = PipelineNets.batches(17, 4, 8, DataType.DOUBLE);
        MultiLayerNetwork model = mlp();
        Recording actual = new Recording();
        List<INDArray> afterEachStep = new ArrayList<>();
        try (PipelineParallelTrainer trainer = tensorParallel(model).listeners(actual, new ScoreIterationListener(1))
                .build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.fit(data.getFirst());
        }
        MultiLayerNetwork plain = mlp();
        Recording expected = new Recording();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(plain).ranks(2).dataParallel(2)
                .microbatches(2).ompThreadsPerRank(1).listeners(expected).build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.fit(data.getFirst());
        }
        MultiLayerNetwork unlistened = mlp();
        try (PipelineParallelTrainer trainer = tensorParallel(unlistened).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                afterEachStep.add(unlistened.params().dup());
            }
        }

        assertEquals(expected.calls.stream().map(Recording.Call::signature).toList(),
                actual.calls.stream().map(Recording.Call::signature).toList(), "the calls, their counters and batches");
        double tol = PipelineEquivalenceTest.tolerance(DataType.DOUBLE, "adam");
        double worst = 0;
        int step = 0;
        for (int i = 0; i < expected.calls.size(); i++) {
            Recording.Call e = expected.calls.get(i);
            Recording.Call a = actual.calls.get(i);
            String where = "call " + i + " (" + a.signature() + ")";
            double params = Nets.maxRelativeDifference(e.params(), a.params());
            assertTrue(params <= tol, where + ": parameters differ by " + params);
            worst = Math.max(worst, params);
            if (e.gradient() != null) {
                double gradient = Nets.maxRelativeDifference(e.gradient(), a.gradient());
                assertTrue(gradient <= tol, where + ": model.gradient() differs by " + gradient);
                worst = Math.max(worst, gradient);
            }
            if (e.activations() != null) {
                assertEquals(e.activations().size(), a.activations().size(), where + ": activations");
                for (int l = 0; l < e.activations().size(); l++) {
                    double act = Nets.maxRelativeDifference(e.activations().get(l).ravel(),
                            a.activations().get(l).ravel());
                    assertTrue(act <= tol, where + ": layer " + l + " activations differ by " + act);
                }
            }
            if (a.kind().equals("iterationDone") || a.kind().equals("backwardPass")) {
                assertTrue(Math.abs(e.score() - a.score()) / (1 + Math.abs(e.score()))
                        <= PipelineEquivalenceTest.lossTolerance(DataType.DOUBLE), where + ": score " + a.score()
                        + " vs " + e.score());
            }
            if (a.kind().equals("iterationDone") && step < afterEachStep.size()) {
                assertTrue(PipelineNets.bitwiseEqual(afterEachStep.get(step), a.params()), where + ": the step's"
                        + " parameters, bitwise those of the trainer without listeners");
                step++;
            }
        }
        assertEquals(data.size(), step);
        System.out.printf("tp listeners vs pipeline listeners: %.3g%n", worst);
    }

    @Test
    void aModelChangedByAListenerIsTakenByEveryShardOfEveryReplica() {
        List<DataSet> data = PipelineNets.batches(19, 4, 8, DataType.DOUBLE);
        MultiLayerNetwork listened = mlp();
        BaseTrainingListener halves = new BaseTrainingListener() {
            @Override
            public void iterationDone(Model model, int iteration, int epoch) {
                if (iteration == 1) {
                    model.params().muli(0.5);
                }
            }
        };
        try (PipelineParallelTrainer trainer = tensorParallel(listened).listeners(halves).build()) {
            data.forEach(trainer::fit);
            DataParallelPipelineTest.assertReplicasBitwiseEqual(trainer, 2);
        }
        MultiLayerNetwork changed = mlp();
        try (PipelineParallelTrainer trainer = tensorParallel(changed).build()) {
            for (int s = 0; s < data.size(); s++) {
                trainer.fit(data.get(s));
                if (s == 1) {
                    changed.params().muli(0.5); // between fits, as the listener did after step 1
                }
            }
        }
        PipelineNets.assertSameState(changed, listened, "listener's change vs a change between fits");
    }
}
