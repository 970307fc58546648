package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Records every TrainingListener call with what a listener can read from the model at that
 * moment: counters, score, batch size, parameters, {@code model.gradient()}, activations. Two
 * recordings (one model under plain fit, one under the wrapper) are compared call by call.
 */
final class RecordingListener extends BaseTrainingListener {

    /** One call: its kind, the counters DL4J passed or the model held, and copies of what it read. */
    record Call(String kind, int iteration, int epoch, double score, long batchSize, INDArray params, INDArray gradient,
                Map<String, INDArray> activations) {
        String signature() {
            return kind + " iteration=" + iteration + " epoch=" + epoch + " batch=" + batchSize;
        }
    }

    final List<Call> calls = new ArrayList<>();

    private static int iterationCount(Model m) {
        return m instanceof MultiLayerNetwork n ? n.getIterationCount() : ((ComputationGraph) m).getIterationCount();
    }

    private static int epochCount(Model m) {
        return m instanceof MultiLayerNetwork n ? n.getEpochCount() : ((ComputationGraph) m).getEpochCount();
    }

    private void record(String kind, Model m, int iteration, int epoch, boolean withBatch, INDArray gradient,
                        Map<String, INDArray> activations) {
        try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
            calls.add(new Call(kind, iteration, epoch, m.score(), withBatch ? m.batchSize() : -1, m.params().dup(),
                    gradient == null ? null : gradient.dup(), activations));
        }
    }

    @Override
    public void onEpochStart(Model model) {
        record("epochStart", model, iterationCount(model), epochCount(model), false, null, null);
    }

    @Override
    public void onEpochEnd(Model model) {
        record("epochEnd", model, iterationCount(model), epochCount(model), false, null, null);
    }

    /** DL4J passes activations from inside its workspaces: copies must be made outside them. */
    @Override
    public void onForwardPass(Model model, List<INDArray> activations) {
        Map<String, INDArray> copies = new LinkedHashMap<>();
        try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
            for (int i = 0; i < activations.size(); i++) {
                copies.put(String.valueOf(i), activations.get(i).dup());
            }
        }
        record("forwardPass(List)", model, iterationCount(model), epochCount(model), true, null, copies);
    }

    @Override
    public void onForwardPass(Model model, Map<String, INDArray> activations) {
        Map<String, INDArray> copies = new LinkedHashMap<>();
        try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
            activations.forEach((k, v) -> copies.put(k, v.dup()));
        }
        record("forwardPass(Map)", model, iterationCount(model), epochCount(model), true, null, copies);
    }

    @Override
    public void onBackwardPass(Model model) {
        record("backwardPass", model, iterationCount(model), epochCount(model), true, null, null);
    }

    @Override
    public void onGradientCalculation(Model model) {
        record("gradientCalculation", model, iterationCount(model), epochCount(model), true, model.gradient().gradient(),
                null);
    }

    @Override
    public void iterationDone(Model model, int iteration, int epoch) {
        if (iteration != iterationCount(model) || epoch != epochCount(model)) {
            throw new AssertionError("iterationDone(" + iteration + ", " + epoch + ") but the model counts iteration="
                    + iterationCount(model) + " epoch=" + epochCount(model));
        }
        record("iterationDone", model, iteration, epoch, true, model.gradient().gradient(), null);
    }
}
