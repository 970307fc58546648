package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.params.DefaultParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.ILossFunction;

/**
 * The backward pass of DL4J layers split into its two products for the zero-bubble schedule
 * ({@link PipelineSchedule#ZERO_BUBBLE_H1}): the input gradient, which the previous stage waits for, and the weight
 * gradient, which no other stage needs and which the schedule runs later.
 *
 * <p>A split layer replaces DL4J's implementation in the stage network's layer array (as synchronized BatchNorm does)
 * and, while {@link Splittable#defer deferring}, runs exactly the operations of DL4J 1.0.0-M2.1's own
 * {@code backpropGradient} except the weight gradient's: for a {@link Dense} layer those of {@code BaseLayer}
 * (pre-activation with dropout on the input, the activation's backprop {@code dZ}, the mask, the input gradient
 * {@code W · dZᵀ}, dropout's backprop); for an {@link Output} layer those of {@code BaseOutputLayer} ({@code dZ} from
 * the loss function). It keeps what the weight gradient needs, the layer's input (after dropout) and {@code dZ}; the
 * {@linkplain Splittable#weightGradient weight half} later computes {@code db = sum(dZ, 0)} and
 * {@code dW = inputᵀ · dZ} with DL4J's own calls ({@code INDArray.sum} into the bias view, {@code Nd4j.gemm} into the
 * weight view) into the same gradient views. Same operations on the same arrays: the gradients are bitwise those of
 * the unsplit backward. Not deferring, the layers are DL4J's.
 *
 * <p>What splits: {@code DenseLayer} without layer normalization and {@code OutputLayer} (with or without bias).
 * Layers without parameters (activation, dropout, pooling, {@code LossLayer} and the other loss layers) have no weight
 * gradient: their whole backward is the input gradient. Every other layer with parameters (convolution, LSTM,
 * SimpleRnn, BatchNormalization, the recurrent wrappers, {@code RnnOutputLayer}, a dense layer with layer
 * normalization) runs its whole backward, weight gradient included, in the input-gradient action:
 * exact, without the saving for that layer ({@link #unsplitLayers} names them).
 */
final class SplitBackward {

    private SplitBackward() {
    }

    /** What the weight half of one layer's backward needs: the layer's input (after dropout) and {@code dZ}. */
    record Deferred(INDArray input, INDArray delta) {
    }

    /** Whether a split layer defers, and what its last deferred backward kept. */
    static final class DeferredSlot {
        private boolean deferring;
        private Deferred kept;
    }

    /** A layer whose backward splits: DL4J's, with its weight gradient deferred while {@link #defer} is on. */
    interface Splittable {

        /** The layer's deferring state. */
        DeferredSlot slot();

        /**
         * Turns deferring on or off: on, {@code backpropGradient} computes the input gradient only and keeps what the
         * weight gradient needs ({@link #takeDeferred}); off, it is DL4J's.
         */
        default void defer(boolean on) {
            slot().deferring = on;
        }

        /** Whether the next backward defers its weight gradient. */
        default boolean deferring() {
            return slot().deferring;
        }

        /** Keeps what the weight half needs, until {@link #takeDeferred}. */
        default void keep(Deferred deferred) {
            slot().kept = deferred;
        }

        /** What the last deferred backward kept, handed over once; null when none is held. */
        default Deferred takeDeferred() {
            Deferred d = slot().kept;
            slot().kept = null;
            return d;
        }

        /** The weight half of a deferred backward: {@code dW} and {@code db} into the layer's gradient views. */
        void weightGradient(Deferred deferred);
    }

    /**
     * The split implementation to put in place of {@code layer}, sharing its configuration, parameters and gradient
     * views; null when the layer does not split ({@link #whyUnsplit}).
     */
    static Layer splitOf(Layer layer) {
        if (layer.getClass() == org.deeplearning4j.nn.layers.feedforward.dense.DenseLayer.class
                && whyUnsplit(layer.conf().getLayer()) == null) {
            return copyState(layer, new Dense(layer.conf(), ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).getDataType()));
        }
        if (layer.getClass() == org.deeplearning4j.nn.layers.OutputLayer.class
                && whyUnsplit(layer.conf().getLayer()) == null) {
            return copyState(layer, new Output(layer.conf(), ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).getDataType()));
        }
        return null;
    }

    /**
     * Why a layer with parameters runs its whole backward in the input-gradient action, or null when it splits or has
     * no parameters (no weight gradient to defer).
     */
    static String whyUnsplit(org.deeplearning4j.nn.conf.layers.Layer layer) {
        boolean dense = layer.getClass() == org.deeplearning4j.nn.conf.layers.DenseLayer.class;
        boolean output = layer.getClass() == org.deeplearning4j.nn.conf.layers.OutputLayer.class;
        if (dense || output) {
            BaseLayer base = (BaseLayer) layer;
            if (base.getWeightNoise() != null) {
                return "weight noise keeps one sample per layer between forward and backward";
            }
            if (dense && ((org.deeplearning4j.nn.conf.layers.DenseLayer) layer).hasLayerNorm()) {
                return "layer normalization's backward rewrites dZ in place with its own gradient, not split yet";
            }
            return null;
        }
        if (layer.initializer().numParams(layer) == 0) {
            return null;
        }
        return "the split is built for DenseLayer and OutputLayer only";
    }

    /**
     * The layers of {@code conf} whose whole backward runs in the input-gradient action under ZB-H1, each as
     * {@code layer i (Kind "name"): why}; empty when every layer with parameters splits.
     */
    static List<String> unsplitLayers(MultiLayerConfiguration conf) {
        List<String> unsplit = new ArrayList<>();
        List<NeuralNetConfiguration> confs = conf.getConfs();
        for (int i = 0; i < confs.size(); i++) {
            org.deeplearning4j.nn.conf.layers.Layer layer = confs.get(i).getLayer();
            String why = whyUnsplit(layer);
            if (why != null) {
                unsplit.add("layer " + i + " (" + layer.getClass().getSimpleName() + " \"" + layer.getLayerName()
                        + "\"): " + why);
            }
        }
        return List.copyOf(unsplit);
    }

    private static Layer copyState(Layer original, Layer replacement) {
        replacement.setIndex(original.getIndex());
        replacement.setListeners(original.getListeners());
        replacement.setParamsViewArray(original.params());
        replacement.setParamTable(original.paramTable(false));
        if (original.getGradientsViewArray() != null) {
            replacement.setBackpropGradientsViewArray(original.getGradientsViewArray());
        }
        replacement.setIterationCount(original.getIterationCount());
        replacement.setEpochCount(original.getEpochCount());
        // a stage keeps every layer's input until the microbatch's backward (Dl4jPipelineStage)
        replacement.allowInputModification(false);
        return replacement;
    }

    /** DL4J's dense layer; deferring, {@code BaseLayer.backpropGradient} without its weight gradient. */
    static final class Dense extends org.deeplearning4j.nn.layers.feedforward.dense.DenseLayer implements Splittable {

        private final DeferredSlot slot = new DeferredSlot();

        Dense(NeuralNetConfiguration conf, org.nd4j.linalg.api.buffer.DataType dataType) {
            super(conf, dataType);
        }

        @Override
        public DeferredSlot slot() {
            return slot;
        }

        @Override
        public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
            if (!deferring()) {
                return super.backpropGradient(epsilon, workspaceMgr);
            }
            // BaseLayer.backpropGradient of DL4J 1.0.0-M2.1, in its order, the weight gradient left out
            assertInputSet(true);
            INDArray z = preOutputWithPreNorm(true, true, workspaceMgr).getFirst();
            INDArray delta = layerConf().getActivationFn().backprop(z, epsilon).getFirst();
            if (maskArray != null) {
                applyMask(delta);
            }
            Gradient ret = new DefaultGradient();
            if (hasBias()) {
                ret.gradientForVariable().put(DefaultParamInitializer.BIAS_KEY, gradientViews.get(DefaultParamInitializer.BIAS_KEY));
            }
            INDArray w = getParamWithNoise(DefaultParamInitializer.WEIGHT_KEY, true, workspaceMgr);
            INDArray epsilonNext = workspaceMgr.createUninitialized(ArrayType.ACTIVATION_GRAD, delta.dataType(),
                    new long[]{w.size(0), delta.size(0)}, 'f');
            epsilonNext = w.mmuli(delta.transpose(), epsilonNext).transpose();
            ret.gradientForVariable().put(DefaultParamInitializer.WEIGHT_KEY,
                    gradientViews.get(DefaultParamInitializer.WEIGHT_KEY));
            weightNoiseParams.clear();
            epsilonNext = backpropDropOutIfPresent(epsilonNext);
            keep(new Deferred(input, delta));
            return new Pair<>(ret, epsilonNext);
        }

        @Override
        public void weightGradient(Deferred d) {
            if (hasBias()) {
                d.delta().sum(gradientViews.get(DefaultParamInitializer.BIAS_KEY), 0);
            }
            INDArray weightGrad = gradientViews.get(DefaultParamInitializer.WEIGHT_KEY);
            Nd4j.gemm(d.input().castTo(weightGrad.dataType()), d.delta(), weightGrad, true, false, 1.0, 0.0);
        }
    }

    /** DL4J's output layer; deferring, {@code BaseOutputLayer.backpropGradient} without its weight gradient. */
    static final class Output extends org.deeplearning4j.nn.layers.OutputLayer implements Splittable {

        private final DeferredSlot slot = new DeferredSlot();

        Output(NeuralNetConfiguration conf, org.nd4j.linalg.api.buffer.DataType dataType) {
            super(conf, dataType);
        }

        @Override
        public DeferredSlot slot() {
            return slot;
        }

        @Override
        public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
            if (!deferring()) {
                return super.backpropGradient(epsilon, workspaceMgr);
            }
            // BaseOutputLayer.backpropGradient and getGradientsAndDelta of DL4J 1.0.0-M2.1, the weight gradient left out
            assertInputSet(true);
            INDArray preOut = preOutput2d(true, workspaceMgr);
            ILossFunction lossFunction = layerConf().getLossFn();
            INDArray labels2d = getLabels2d(workspaceMgr, ArrayType.BP_WORKING_MEM);
            INDArray delta = lossFunction.computeGradient(labels2d, preOut, layerConf().getActivationFn(), maskArray);
            Gradient gradient = new DefaultGradient();
            gradient.gradientForVariable().put(DefaultParamInitializer.WEIGHT_KEY,
                    gradientViews.get(DefaultParamInitializer.WEIGHT_KEY));
            if (hasBias()) {
                gradient.gradientForVariable().put(DefaultParamInitializer.BIAS_KEY,
                        gradientViews.get(DefaultParamInitializer.BIAS_KEY));
            }
            delta = workspaceMgr.leverageTo(ArrayType.ACTIVATION_GRAD, delta);
            INDArray w = getParamWithNoise(DefaultParamInitializer.WEIGHT_KEY, true, workspaceMgr);
            INDArray epsilonNext = workspaceMgr.createUninitialized(ArrayType.ACTIVATION_GRAD, delta.dataType(),
                    new long[]{w.size(0), delta.size(0)}, 'f');
            epsilonNext = w.mmuli(delta.transpose(), epsilonNext).transpose();
            epsilonNext = backpropDropOutIfPresent(epsilonNext);
            keep(new Deferred(input, delta));
            return new Pair<>(gradient, epsilonNext);
        }

        @Override
        public void weightGradient(Deferred d) {
            INDArray weightGrad = gradientViews.get(DefaultParamInitializer.WEIGHT_KEY);
            Nd4j.gemm(d.input().castTo(weightGrad.dataType()), d.delta(), weightGrad, true, false, 1.0, 0.0);
            if (hasBias()) {
                d.delta().sum(gradientViews.get(DefaultParamInitializer.BIAS_KEY), 0);
            }
        }
    }
}
