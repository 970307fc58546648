package org.symmem4j.dl4j.layers;

import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.feedforward.dense.DenseLayer;
import org.deeplearning4j.nn.params.DefaultParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * DL4J's dense layer with a {@linkplain Splittable split backward}: deferring, {@code BaseLayer.backpropGradient} of
 * DL4J 1.0.0-M2.1 in its order without the weight gradient (pre-activation with dropout on the input, the activation's
 * backprop {@code dZ}, the mask, the input gradient {@code W · dZᵀ}, dropout's backprop), keeping the input and
 * {@code dZ}; {@link #weightGradient} then runs {@code db = sum(dZ)} and {@code dW = inputᵀ · dZ} with DL4J's calls.
 *
 * <p>The pre-activation is {@link #preOutputWithPreNorm}'s, so a subclass that computes it otherwise splits too: the
 * tensor-parallel dense layers extend this class, the row-parallel one summing its pre-activation over the group (in
 * the forward, or in the input half when it recomputes it), the column-parallel one summing the input gradient that
 * {@code backpropGradient} returns, deferring or not. Their weight halves are local products, as here.
 */
public class SplitDenseLayer extends DenseLayer implements Splittable {

    private final Slot slot = new Slot();

    /**
     * DL4J's layer constructor.
     *
     * @param conf     the layer's configuration
     * @param dataType the network's data type
     */
    public SplitDenseLayer(NeuralNetConfiguration conf, DataType dataType) {
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
        INDArray epsilonNext = inputGradient(
                getParamWithNoise(DefaultParamInitializer.WEIGHT_KEY, true, workspaceMgr), delta, workspaceMgr);
        ret.gradientForVariable().put(DefaultParamInitializer.WEIGHT_KEY,
                gradientViews.get(DefaultParamInitializer.WEIGHT_KEY));
        weightNoiseParams.clear();
        epsilonNext = backpropDropOutIfPresent(epsilonNext);
        keep(new Deferred(input, delta));
        return new Pair<>(ret, epsilonNext);
    }

    @Override
    public void weightGradient(Deferred d) {
        weightHalf(d, gradientViews.get(DefaultParamInitializer.WEIGHT_KEY),
                hasBias() ? gradientViews.get(DefaultParamInitializer.BIAS_KEY) : null);
    }

    /**
     * The input gradient of a dense or output layer, as DL4J's {@code BaseLayer} and {@code BaseOutputLayer} compute
     * it: {@code (W · dZᵀ)ᵀ}, the product into an uninitialized activation-gradient array.
     *
     * @param w            the weights {@code [nIn, nOut]}
     * @param delta        {@code dZ}, {@code [examples, nOut]}
     * @param workspaceMgr the workspaces of the pass
     * @return the input gradient {@code [examples, nIn]}
     */
    public static INDArray inputGradient(INDArray w, INDArray delta, LayerWorkspaceMgr workspaceMgr) {
        INDArray epsilonNext = workspaceMgr.createUninitialized(ArrayType.ACTIVATION_GRAD, delta.dataType(),
                new long[]{w.size(0), delta.size(0)}, 'f');
        return w.mmuli(delta.transpose(), epsilonNext).transpose();
    }

    /**
     * The weight half of a dense or output layer, with DL4J's calls: {@code db = sum(dZ)} into the bias view (when
     * there is one) and {@code dW = inputᵀ · dZ} into the weight view. The two write disjoint views from the same
     * operands, so their order does not change a bit.
     *
     * @param d              what the input half kept
     * @param weightGrad     the weight gradient view
     * @param biasGradOrNull the bias gradient view, or null for a layer without bias
     */
    public static void weightHalf(Deferred d, INDArray weightGrad, INDArray biasGradOrNull) {
        if (biasGradOrNull != null) {
            d.delta().sum(biasGradOrNull, 0);
        }
        Nd4j.gemm(d.input().castTo(weightGrad.dataType()), d.delta(), weightGrad, true, false, 1.0, 0.0);
    }
}
