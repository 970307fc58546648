package org.symmem4j.dl4j.pipeline;

import java.util.Map;
import java.util.function.Consumer;
import java.util.function.IntConsumer;
import java.util.function.Predicate;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.layers.normalization.BatchNormalization;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * The per-microbatch definitions of batch normalization and dropout, computed with plain DL4J: for each
 * microbatch in order, DL4J's own forward and backward pass of the unsplit network on that microbatch
 * alone ({@code computeGradientAndScore}), its gradients summed, batch normalization's running
 * statistics updated right after the microbatch as DL4J's own update (the gradient entries DL4J
 * computes for them, subtracted), then one SGD step with the whole batch's example count.
 */
final class MicrobatchReference {

    private MicrobatchReference() {
    }

    /**
     * One step of that definition on {@code net} (fp64, {@code Sgd(learningRate)}, no regularization).
     *
     * @param beforeMicrobatch told the microbatch index before its pass (to seed test dropouts)
     */
    static void sgdStep(MultiLayerNetwork net, DataSet batch, int microbatches, double learningRate,
                        IntConsumer beforeMicrobatch) {
        sgdStep(net, batch, microbatches, learningRate, beforeMicrobatch, part -> {
            net.setInput(part.getFeatures());
            net.setLabels(part.getLabels());
            net.setLayerMaskArrays(part.getFeaturesMaskArray(), part.getLabelsMaskArray());
        }, net::computeGradientAndScore, key -> isRunningStatistic(net, key), net::clearLayerMaskArrays);
        net.setIterationCount(net.getIterationCount() + 1);
    }

    /**
     * The same step on a graph of one input and one output (its parameters keyed {@code vertex_param}), with DL4J's
     * graph passes on each microbatch alone.
     */
    static void sgdStep(ComputationGraph graph, DataSet batch, int microbatches, double learningRate) {
        sgdStep(graph, batch, microbatches, learningRate, k -> { }, part -> {
            graph.setInputs(part.getFeatures());
            graph.setLabels(part.getLabels());
        }, graph::computeGradientAndScore, key -> {
            int split = key.lastIndexOf('_');
            return graph.getLayer(key.substring(0, split)) instanceof BatchNormalization
                    && isRunningStatisticName(key.substring(split + 1));
        }, () -> { });
        graph.getConfiguration().setIterationCount(graph.getConfiguration().getIterationCount() + 1);
    }

    private static void sgdStep(Model net, DataSet batch, int microbatches, double learningRate,
                                IntConsumer beforeMicrobatch, Consumer<DataSet> setInputs, Runnable pass,
                                Predicate<String> runningStatistic, Runnable afterMicrobatch) {
        int examples = (int) batch.getFeatures().size(0);
        int size = examples / microbatches;
        Map<String, INDArray> params = net.paramTable();
        INDArray sum = null;
        for (int k = 0; k < microbatches; k++) {
            beforeMicrobatch.accept(k);
            DataSet part = PipelineModels.rows(batch, k * size, size);
            setInputs.accept(part);
            pass.run();
            INDArray gradient = net.getGradientsViewArray();
            Map<String, INDArray> views = net.gradient().gradientForVariable();
            // running statistics: DL4J's own update for this microbatch, before the next one's pass
            for (Map.Entry<String, INDArray> p : params.entrySet()) {
                if (runningStatistic.test(p.getKey())) {
                    p.getValue().subi(views.get(p.getKey()));
                    views.get(p.getKey()).assign(0);
                }
            }
            sum = sum == null ? gradient.dup() : sum.addi(gradient);
            afterMicrobatch.run();
        }
        // Sgd: update = gradient / examples * learning rate; parameters minus the update
        net.params().subi(sum.divi(examples).muli(learningRate).reshape(net.params().shape()));
    }

    /** Whether the parameter {@code key} ("layer_name") is a batch-normalization running statistic. */
    static boolean isRunningStatistic(MultiLayerNetwork net, String key) {
        int split = key.indexOf('_');
        Layer layer = net.getLayer(Integer.parseInt(key.substring(0, split)));
        String name = key.substring(split + 1);
        return layer instanceof BatchNormalization && isRunningStatisticName(name);
    }

    private static boolean isRunningStatisticName(String name) {
        return name.equals(BatchNormalizationParamInitializer.GLOBAL_MEAN)
                || name.equals(BatchNormalizationParamInitializer.GLOBAL_VAR)
                || name.equals(BatchNormalizationParamInitializer.GLOBAL_LOG_STD);
    }
}
