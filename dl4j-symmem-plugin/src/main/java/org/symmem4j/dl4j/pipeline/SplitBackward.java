package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.params.ConvolutionParamInitializer;
import org.deeplearning4j.nn.params.DefaultParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.deeplearning4j.util.ConvolutionUtils;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.shape.Shape;
import org.nd4j.linalg.convolution.Convolution;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.ILossFunction;
import org.symmem4j.dl4j.layers.SplitDenseLayer;
import org.symmem4j.dl4j.layers.Splittable;
import org.symmem4j.dl4j.layers.Splittable.Deferred;
import org.symmem4j.parallel.Invariants;

/**
 * The backward pass of DL4J layers split into its two products for the zero-bubble schedule
 * ({@link PipelineSchedule#ZERO_BUBBLE_H1}): the input gradient, which the previous stage waits for, and the weight
 * gradient, which no other stage needs and which the schedule runs later.
 *
 * <p>A split layer replaces DL4J's implementation in the stage network's layer array (as synchronized BatchNorm does)
 * and, while {@link Splittable#defer deferring}, runs exactly the operations of DL4J 1.0.0-M2.1's own
 * {@code backpropGradient} except the weight gradient's: for a dense layer ({@link SplitDenseLayer}) those of {@code BaseLayer}
 * (pre-activation with dropout on the input, the activation's backprop {@code dZ}, the mask, the input gradient
 * {@code W · dZᵀ}, dropout's backprop); for an {@link Output} layer those of {@code BaseOutputLayer} ({@code dZ} from
 * the loss function); for a {@link Conv2d} layer those of {@code ConvolutionLayer} (im2col, {@code dZ}, the input
 * gradient by col2im). It keeps what the weight gradient needs, the two operands of its product: the layer's input
 * (after dropout; a convolution's im2col patches) and {@code dZ}; the {@linkplain Splittable#weightGradient weight
 * half} later computes {@code db = sum(dZ)} and {@code dW} with DL4J's own calls ({@code INDArray.sum} into the bias
 * view, {@code Nd4j.gemm} into the weight view, with DL4J's operand order and transposes) into the same gradient views.
 * Same operations on the same arrays: the gradients are bitwise those of the unsplit backward. Not deferring, the
 * layers are DL4J's.
 *
 * <p>The tensor-parallel dense layers of a Megatron block are {@link SplitDenseLayer}s from the start (they stay in
 * place): their group's sums are where DL4J's backward has them, outside the weight half. A column-parallel layer's
 * input gradient is all-reduced over the tp group in the input half, as its whole backward does; a row-parallel
 * layer's pre-activation sum is the forward's (or, for a microbatch whose forward was not the layer's last, recomputed
 * with its all-reduce in the input half). The weight half is the local {@code dW}, {@code db} of the rank's shard: no
 * collective. So the tp collectives are in F and I actions only, and every tp rank of a stage runs the same schedule
 * (a function of the pipeline rank, the stage and the microbatch count, never of the tp rank) in the same order: they
 * meet in the same order on every rank, however the schedule interleaves the W actions of other microbatches.
 *
 * <p>What splits: {@code DenseLayer} without layer normalization (the column- and row-parallel ones too),
 * {@code OutputLayer} and the 2-D
 * {@code ConvolutionLayer} (with or without bias; without weight noise, and without DL4J's cuDNN/oneDNN helpers, which
 * are off unless {@code org.eclipse.deeplearning4j.helpers.disable=false}). Layers without parameters (activation,
 * dropout, pooling and subsampling, {@code LossLayer} and the other loss layers) have no weight gradient: their whole
 * backward is the input gradient. Every other layer with parameters ({@code Convolution1DLayer} and the other
 * convolution kinds, LSTM, SimpleRnn, BatchNormalization, the recurrent wrappers, {@code RnnOutputLayer}, a dense
 * layer with layer normalization) runs its whole backward, weight gradient included, in the input-gradient action:
 * exact, without the saving for that layer ({@link #unsplitLayers} names them).
 */
final class SplitBackward {

    /** DL4J's switch for its cuDNN and oneDNN layer helpers (true, the default: no helpers). */
    private static final String HELPERS_DISABLED = "org.eclipse.deeplearning4j.helpers.disable";

    private SplitBackward() {
    }

    /**
     * The split implementation to put in place of {@code layer}, sharing its configuration, parameters and gradient
     * views; {@code layer} itself when it is split already (a tensor-parallel dense layer); null when the layer does
     * not split ({@link #whyUnsplit}).
     */
    static Layer splitOf(Layer layer) {
        if (layer instanceof Splittable && whyUnsplit(layer.conf().getLayer()) == null) {
            // a tensor-parallel dense layer: split already, its group's sums in DL4J's backward (SplitDenseLayer)
            layer.allowInputModification(false); // as copyState: the stage keeps every layer's input
            return layer;
        }
        if (layer.getClass() == org.deeplearning4j.nn.layers.feedforward.dense.DenseLayer.class
                && whyUnsplit(layer.conf().getLayer()) == null) {
            return copyState(layer, new SplitDenseLayer(layer.conf(), ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).getDataType()));
        }
        if (layer.getClass() == org.deeplearning4j.nn.layers.OutputLayer.class
                && whyUnsplit(layer.conf().getLayer()) == null) {
            return copyState(layer, new Output(layer.conf(), ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).getDataType()));
        }
        if (layer.getClass() == org.deeplearning4j.nn.layers.convolution.ConvolutionLayer.class
                && whyUnsplit(layer.conf().getLayer()) == null
                && ((org.deeplearning4j.nn.layers.convolution.ConvolutionLayer) layer).getHelper() == null) {
            return copyState(layer, new Conv2d(layer.conf(), ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).getDataType()));
        }
        return null;
    }

    /**
     * Why a layer with parameters runs its whole backward in the input-gradient action, or null when it splits or has
     * no parameters (no weight gradient to defer).
     */
    static String whyUnsplit(org.deeplearning4j.nn.conf.layers.Layer layer) {
        if (layer instanceof org.symmem4j.dl4j.tensor.VocabParallelOutputLayer
                || layer instanceof org.symmem4j.dl4j.tensor.VocabParallelEmbeddingLayer) {
            return "a vocabulary-parallel layer's split is not built (the pipeline trainer shards Megatron blocks only,"
                    + " so none reaches a stage)";
        }
        // a block's column- and row-parallel layers are SplitDenseLayers: their tp sums stay in F and B, W is local
        boolean dense = layer.getClass() == org.deeplearning4j.nn.conf.layers.DenseLayer.class
                || layer instanceof org.symmem4j.dl4j.tensor.TensorParallelDenseLayer;
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
        if (layer.getClass() == org.deeplearning4j.nn.conf.layers.ConvolutionLayer.class) {
            if (((BaseLayer) layer).getWeightNoise() != null) {
                return "weight noise keeps one sample per layer between forward and backward";
            }
            if (!Boolean.parseBoolean(System.getProperty(HELPERS_DISABLED, "true"))) {
                return "DL4J's cuDNN/oneDNN helpers are enabled (" + HELPERS_DISABLED + "=false): a helper's"
                        + " backward computes the input and weight gradients in one call";
            }
            return null;
        }
        if (layer.initializer().numParams(layer) == 0) {
            return null;
        }
        return "the split is built for DenseLayer, OutputLayer and ConvolutionLayer only";
    }

    /**
     * Whether {@code layer} is one that {@link #splitOf} put in place of DL4J's (it stands for the DL4J class it
     * extends), rather than a layer that was split from the start (a tensor-parallel dense layer).
     */
    static boolean replaced(Layer layer) {
        return layer.getClass() == SplitDenseLayer.class || layer.getClass() == Output.class
                || layer.getClass() == Conv2d.class;
    }

    /**
     * {@link #unsplitLayers(MultiLayerConfiguration)} of the stages' layers: with {@code tensorParallel > 1}, those of
     * the shard configuration ({@code TensorParallel.shardConfiguration}), whose blocks' column- and row-parallel
     * layers split as dense layers do.
     */
    static List<String> unsplitLayers(MultiLayerConfiguration conf, int tensorParallel, int[] columnLayers) {
        return unsplitLayers(tensorParallel > 1
                ? org.symmem4j.dl4j.tensor.TensorParallel.shardConfiguration(conf, tensorParallel, columnLayers) : conf);
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

    /** DL4J's output layer; deferring, {@code BaseOutputLayer.backpropGradient} without its weight gradient. */
    static final class Output extends org.deeplearning4j.nn.layers.OutputLayer implements Splittable {

        private final Slot slot = new Slot();

        Output(NeuralNetConfiguration conf, org.nd4j.linalg.api.buffer.DataType dataType) {
            super(conf, dataType);
        }

        @Override
        public Slot slot() {
            return slot;
        }

        @Override
        public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
            return deferring() ? inputHalf(epsilon, workspaceMgr) : super.backpropGradient(epsilon, workspaceMgr);
        }

        @Override
        public Pair<Gradient, INDArray> inputHalf(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
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
            INDArray epsilonNext = SplitDenseLayer.inputGradient(
                    getParamWithNoise(DefaultParamInitializer.WEIGHT_KEY, true, workspaceMgr), delta, workspaceMgr);
            epsilonNext = backpropDropOutIfPresent(epsilonNext);
            keep(new Deferred(input, delta));
            return new Pair<>(gradient, epsilonNext);
        }

        @Override
        public void weightGradient(Deferred d) {
            SplitDenseLayer.weightHalf(d, gradientViews.get(DefaultParamInitializer.WEIGHT_KEY),
                    hasBias() ? gradientViews.get(DefaultParamInitializer.BIAS_KEY) : null);
        }
    }

    /**
     * DL4J's 2-D convolution layer; deferring, {@code ConvolutionLayer.backpropGradient} of DL4J 1.0.0-M2.1 without
     * its weight gradient. DL4J computes that backward with im2col and two matrix products (no helper on the CPU
     * backend: {@code org.eclipse.deeplearning4j.helpers.disable} defaults to true, and a layer with a cuDNN or oneDNN
     * helper is not split): {@code dW = gemm(im2col2d, delta2d)} into the weight view and {@code db = sum(delta2d, 1)}
     * into the bias view are the weight half, whose operands the input half keeps ({@link Deferred#input} the
     * forward's im2col patches {@code [miniBatch·outH·outW, inDepth·kH·kW]}, {@link Deferred#delta} {@code dZ} as
     * {@code [outDepth, miniBatch·outH·outW]}); the input gradient {@code col2im(w2d · delta2d)} is computed here as
     * DL4J does. NCHW and NHWC (DL4J permutes NHWC to NCHW around the same arithmetic), Truncate, Same and Strict
     * modes, any stride, padding and dilation, with or without bias.
     */
    static final class Conv2d extends org.deeplearning4j.nn.layers.convolution.ConvolutionLayer
            implements Splittable {

        private final Slot slot = new Slot();

        Conv2d(NeuralNetConfiguration conf, org.nd4j.linalg.api.buffer.DataType dataType) {
            super(conf, dataType);
        }

        @Override
        public Slot slot() {
            return slot;
        }

        @Override
        public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
            return deferring() ? inputHalf(epsilon, workspaceMgr) : super.backpropGradient(epsilon, workspaceMgr);
        }

        @Override
        public Pair<Gradient, INDArray> inputHalf(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
            if (helper != null) {
                throw Invariants.violated("layer " + index + " has DL4J's " + helper.getClass().getSimpleName()
                        + ", whose backward computes both gradients in one call: it must not have been split");
            }
            // ConvolutionLayer.backpropGradient of DL4J 1.0.0-M2.1 without a helper, in its order, the weight
            // gradient (gemm into the weight view, sum into the bias view) left out
            assertInputSet(true);
            INDArray weights = getParamWithNoise(ConvolutionParamInitializer.WEIGHT_KEY, true, workspaceMgr);
            getParamWithNoise(ConvolutionParamInitializer.BIAS_KEY, true, workspaceMgr);
            INDArray in = this.input.castTo(dataType);
            if (epsilon.dataType() != dataType) {
                epsilon = epsilon.castTo(dataType);
            }
            CNN2DFormat format = layerConf().getCnn2dDataFormat();
            if (format != CNN2DFormat.NCHW) {
                in = in.permute(0, 3, 1, 2);
                epsilon = epsilon.permute(0, 3, 1, 2);
            }
            long miniBatch = in.size(0);
            int inH = (int) in.size(2);
            int inW = (int) in.size(3);
            long outDepth = weights.size(0);
            long inDepth = weights.size(1);
            int kH = (int) weights.size(2);
            int kW = (int) weights.size(3);
            int[] dilation = layerConf().getDilation();
            int[] kernel = layerConf().getKernelSize();
            int[] strides = layerConf().getStride();
            int[] pad;
            int[] outSize;
            if (convolutionMode == ConvolutionMode.Same) {
                outSize = ConvolutionUtils.getOutputSize(in, kernel, strides, null, convolutionMode, dilation,
                        CNN2DFormat.NCHW);
                pad = ConvolutionUtils.getSameModeTopLeftPadding(outSize, new int[]{inH, inW}, kernel, strides,
                        dilation);
            } else {
                pad = layerConf().getPadding();
                outSize = ConvolutionUtils.getOutputSize(in, kernel, strides, pad, convolutionMode, dilation,
                        CNN2DFormat.NCHW);
            }
            int outH = outSize[0];
            int outW = outSize[1];
            INDArray biasGradView = gradientViews.get(ConvolutionParamInitializer.BIAS_KEY);
            INDArray weightGradView = gradientViews.get(ConvolutionParamInitializer.WEIGHT_KEY);
            IActivation afn = layerConf().getActivationFn();
            Pair<INDArray, INDArray> p = preOutput4d(true, true, workspaceMgr);
            INDArray z = p.getFirst();
            if (format != CNN2DFormat.NCHW) {
                z = z.permute(0, 3, 1, 2);
            }
            INDArray delta = afn.backprop(z, epsilon).getFirst();
            delta = delta.permute(1, 0, 2, 3);
            INDArray delta2d = delta.reshape('c', outDepth, miniBatch * outH * outW);
            INDArray im2col2d = p.getSecond();
            if (im2col2d == null) {
                INDArray col = Nd4j.createUninitialized(dataType, new long[]{miniBatch, outH, outW, inDepth, kH, kW}, 'c');
                INDArray col2 = col.permute(0, 3, 4, 5, 1, 2);
                Convolution.im2col(in, kH, kW, strides[0], strides[1], pad[0], pad[1], dilation[0], dilation[1],
                        convolutionMode == ConvolutionMode.Same, col2);
                im2col2d = col.reshape('c', miniBatch * outH * outW, inDepth * kH * kW);
            }
            // here DL4J runs Nd4j.gemm(im2col2d, delta2d, weightGradView2df, true, true, 1.0, 0.0): the weight half
            INDArray w2d = weights.permute(3, 2, 1, 0).reshape('f', inDepth * kH * kW, outDepth);
            INDArray epsNext2d = w2d.mmul(delta2d);
            INDArray eps6d = Shape.newShapeNoCopy(epsNext2d, new long[]{kW, kH, inDepth, outW, outH, miniBatch}, true);
            eps6d = eps6d.permute(5, 2, 1, 0, 4, 3);
            INDArray epsNextOrig = workspaceMgr.createUninitialized(ArrayType.ACTIVATION_GRAD, eps6d.dataType(),
                    new long[]{inDepth, miniBatch, inH, inW}, 'c');
            INDArray epsNext = epsNextOrig.permute(1, 0, 2, 3);
            Convolution.col2im(eps6d, epsNext, strides[0], strides[1], pad[0], pad[1], inH, inW, dilation[0],
                    dilation[1]);
            Gradient ret = new DefaultGradient();
            if (layerConf().hasBias()) {
                // here DL4J runs delta2d.sum(biasGradView, 1): the weight half
                ret.setGradientFor(ConvolutionParamInitializer.BIAS_KEY, biasGradView);
            }
            ret.setGradientFor(ConvolutionParamInitializer.WEIGHT_KEY, weightGradView, 'c');
            weightNoiseParams.clear();
            epsNext = backpropDropOutIfPresent(epsNext);
            if (format != CNN2DFormat.NCHW) {
                epsNext = epsNext.permute(0, 2, 3, 1);
            }
            keep(new Deferred(im2col2d, delta2d));
            return new Pair<>(ret, epsNext);
        }

        @Override
        public void weightGradient(Deferred d) {
            INDArray weightGradView = gradientViews.get(ConvolutionParamInitializer.WEIGHT_KEY);
            long[] shape = weightGradView.shape(); // [outDepth, inDepth, kH, kW], c order
            INDArray weightGradView2df = Shape.newShapeNoCopy(weightGradView,
                    new long[]{shape[0], shape[1] * shape[2] * shape[3]}, false).transpose();
            Nd4j.gemm(d.input(), d.delta(), weightGradView2df, true, true, 1.0, 0.0);
            if (layerConf().hasBias()) {
                d.delta().sum(gradientViews.get(ConvolutionParamInitializer.BIAS_KEY), 1);
            }
        }
    }
}
