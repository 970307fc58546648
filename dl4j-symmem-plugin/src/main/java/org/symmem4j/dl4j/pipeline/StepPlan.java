package org.symmem4j.dl4j.pipeline;

import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.deeplearning4j.nn.api.MaskState;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BaseOutputLayer;
import org.deeplearning4j.nn.conf.layers.FeedForwardLayer;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.lossfunctions.impl.LossSparseMCXENT;

/**
 * Everything the stages of one step read besides the messages, worked out by the trainer before the
 * ranks start (on the caller's thread, while every rank waits for its task; the task queue orders
 * these writes before the ranks' reads):
 *
 * @param batch           the microbatches (stage 0 reads features, the last stage labels and labels masks)
 * @param boundaryShapes  {@code boundaryShapes[s]}: the per-example shape of stage {@code s}'s output
 *                        (stage {@code s + 1}'s input), from DL4J's input types for this batch's features
 * @param inputMasks      {@code inputMasks[s][mb]}: the features mask as it reaches stage {@code s} for
 *                        microbatch {@code mb} (null without one), propagated through the earlier
 *                        stages' layers as DL4J propagates it ({@code feedForwardMaskArray})
 * @param inputMaskStates the matching mask states
 */
record StepPlan(Microbatches batch, long[][] boundaryShapes, INDArray[][] inputMasks, MaskState[][] inputMaskStates) {

    StepPlan {
        Objects.requireNonNull(batch, "batch");
        Objects.requireNonNull(boundaryShapes, "boundaryShapes");
        Objects.requireNonNull(inputMasks, "inputMasks");
        Objects.requireNonNull(inputMaskStates, "inputMaskStates");
    }

    /**
     * The plan of a step on {@code batch}: the boundary shapes from DL4J's input types for its
     * features, the labels checked against the network's output, and the features mask propagated to
     * every stage. Call on the trainer's thread while no rank runs (it sets the stage networks' layer
     * masks, which each stage sets again per microbatch).
     *
     * @param declared the builder's input type, or null to infer it from the features
     * @throws IllegalArgumentException when features or labels do not fit the network
     */
    static StepPlan of(PipelineStageSplit split, List<Dl4jPipelineStage> stages, Microbatches batch, InputType declared) {
        INDArray features = batch.features().getFirst();
        long[][] shapes = split.boundaryShapes(split.inputTypeOf(features, declared));
        long[] output = shapes[shapes.length - 1];
        INDArray labels = batch.labels().getFirst();
        long[] labelShape = Arrays.copyOfRange(labels.shape(), 1, labels.rank());
        org.deeplearning4j.nn.conf.layers.Layer outputLayer = split.layerConf(split.layerCount() - 1);
        boolean sparseLabels = outputLayer instanceof BaseOutputLayer o && o.getLossFn() instanceof LossSparseMCXENT;
        if (labelShape.length != output.length || !sparseLabels && !Arrays.equals(labelShape, output)) {
            long[] found = labels.shape().clone();
            found[0] = batch.examples();
            StringBuilder expected = new StringBuilder("[examples");
            for (long d : output) {
                expected.append(", ").append(d);
            }
            String nOut = outputLayer instanceof FeedForwardLayer f ? ", nOut=" + f.getNOut() : "";
            throw new IllegalArgumentException("the batch's labels have shape " + Arrays.toString(found) + " expected "
                    + expected + "] (the network's output for these features: layer " + (split.layerCount() - 1) + ", "
                    + outputLayer.getClass().getSimpleName() + nOut + "); fix: give labels of the output's shape");
        }
        int stageCount = split.stageCount();
        int count = batch.count();
        INDArray[][] masks = new INDArray[stageCount][count];
        MaskState[][] states = new MaskState[stageCount][count];
        for (int mb = 0; mb < count; mb++) {
            INDArray mask = batch.featuresMask(mb);
            MaskState state = mask == null ? null : MaskState.Active;
            for (int s = 0; s < stageCount; s++) {
                masks[s][mb] = mask;
                states[s][mb] = state;
                if (mask != null && s + 1 < stageCount) {
                    Pair<INDArray, MaskState> next = stages.get(s).network().feedForwardMaskArray(mask, state,
                            Math.toIntExact(batch.size(mb)));
                    mask = next == null ? null : next.getFirst();
                    state = next == null ? null : next.getSecond();
                }
            }
        }
        return new StepPlan(batch, Arrays.copyOf(shapes, shapes.length - 1), masks, states);
    }

    /** The full shape {@code [rows, ...]} of the message crossing boundary {@code s} for microbatch {@code mb}. */
    long[] messageShape(int boundary, int mb) {
        long[] perExample = boundaryShapes[boundary];
        long[] shape = new long[perExample.length + 1];
        shape[0] = batch.size(mb);
        System.arraycopy(perExample, 0, shape, 1, perExample.length);
        return shape;
    }

    /** The largest message of the step, in bytes of {@code elementBytes} each: the links' slot size. */
    long largestMessageBytes(int elementBytes) {
        long largest = 1;
        for (int mb = 0; mb < batch.count(); mb++) {
            for (int b = 0; b < boundaryShapes.length; b++) {
                long elements = 1;
                for (long d : messageShape(b, mb)) {
                    elements = Math.multiplyExact(elements, d);
                }
                largest = Math.max(largest, Math.multiplyExact(elements, elementBytes));
            }
        }
        return largest;
    }

    @Override
    public String toString() {
        return "StepPlan[" + batch + ", boundaries=" + Arrays.deepToString(boundaryShapes) + "]";
    }
}
