package org.symmem4j.dl4j.pipeline;

import java.util.Map;
import java.util.function.IntConsumer;
import org.deeplearning4j.nn.api.Layer;
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
        int examples = (int) batch.getFeatures().size(0);
        int size = examples / microbatches;
        Map<String, INDArray> params = net.paramTable();
        INDArray sum = null;
        for (int k = 0; k < microbatches; k++) {
            beforeMicrobatch.accept(k);
            DataSet part = PipelineModels.rows(batch, k * size, size);
            net.setInput(part.getFeatures());
            net.setLabels(part.getLabels());
            net.setLayerMaskArrays(part.getFeaturesMaskArray(), part.getLabelsMaskArray());
            net.computeGradientAndScore();
            INDArray gradient = net.getGradientsViewArray();
            Map<String, INDArray> views = net.gradient().gradientForVariable();
            // running statistics: DL4J's own update for this microbatch, before the next one's pass
            for (Map.Entry<String, INDArray> p : params.entrySet()) {
                if (isRunningStatistic(net, p.getKey())) {
                    p.getValue().subi(views.get(p.getKey()));
                    views.get(p.getKey()).assign(0);
                }
            }
            sum = sum == null ? gradient.dup() : sum.addi(gradient);
            net.clearLayerMaskArrays();
        }
        // Sgd: update = gradient / examples * learning rate; parameters minus the update
        net.params().subi(sum.divi(examples).muli(learningRate).reshape(net.params().shape()));
        net.setIterationCount(net.getIterationCount() + 1);
    }

    /** Whether the parameter {@code key} ("layer_name") is a batch-normalization running statistic. */
    static boolean isRunningStatistic(MultiLayerNetwork net, String key) {
        int split = key.indexOf('_');
        Layer layer = net.getLayer(Integer.parseInt(key.substring(0, split)));
        String name = key.substring(split + 1);
        return layer instanceof BatchNormalization && (name.equals(BatchNormalizationParamInitializer.GLOBAL_MEAN)
                || name.equals(BatchNormalizationParamInitializer.GLOBAL_VAR)
                || name.equals(BatchNormalizationParamInitializer.GLOBAL_LOG_STD));
    }
}
