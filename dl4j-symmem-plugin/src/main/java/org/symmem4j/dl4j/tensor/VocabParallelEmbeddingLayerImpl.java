package org.symmem4j.dl4j.tensor;

import org.deeplearning4j.exception.DL4JInvalidInputException;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.feedforward.embedding.EmbeddingLayer;
import org.deeplearning4j.nn.params.DefaultParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.activations.impl.ActivationIdentity;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * The layer of a {@link VocabParallelEmbeddingLayer}: DL4J's embedding layer on this rank's vocabulary rows
 * {@code [rank k, (rank+1) k)}. Forward: each example's row where this rank holds its index, zeros elsewhere, summed over
 * the ranks (one all-reduce of {@code examples × nOut}), then the bias and the activation as DL4J's layer adds them.
 * Backward: the rows this rank holds get their examples' gradients (no communication: the gradient coming in is the same
 * on every rank); the bias, replicated, the same gradient everywhere. With an activation other than identity the backward
 * recomputes the forward, one more all-reduce.
 */
public class VocabParallelEmbeddingLayerImpl extends EmbeddingLayer implements TensorParallelLayer {

    /** The rank's tensor-parallel communicator: bound at run time by TensorParallel.attach, never serialized. */
    private transient ArrayCollectives comm;

    /**
     * DL4J's layer constructor ({@code instantiate} and {@code clone} call it).
     *
     * @param conf     the layer's configuration
     * @param dataType the network's data type
     */
    public VocabParallelEmbeddingLayerImpl(NeuralNetConfiguration conf, DataType dataType) {
        super(conf, dataType);
    }

    @Override
    public void attach(ArrayCollectives comm) {
        this.comm = comm;
    }

    @Override
    public ArrayCollectives comm() {
        return comm;
    }

    /** Each example's index, checked against the whole vocabulary. */
    private long[] indices() {
        if (input.columns() != 1 && !input.isRowVector()) {
            throw new DL4JInvalidInputException("vocabulary-parallel embedding " + layerId() + ": input of shape "
                    + java.util.Arrays.toString(input.shape()) + ", expected [examples, 1] of integer indices (fix: give"
                    + " the layer one vocabulary index per example, as a column)");
        }
        long vocabulary = (long) layerConf().getNIn() * requireComm(layerId()).size();
        long[] indices = new long[Math.toIntExact(input.length())];
        for (int i = 0; i < indices.length; i++) {
            indices[i] = input.getLong(i);
            if (indices[i] < 0 || indices[i] >= vocabulary) {
                throw new DL4JInvalidInputException("vocabulary-parallel embedding " + layerId() + ": index " + indices[i]
                        + " for example " + i + ", expected 0 <= index < " + vocabulary + " (the whole vocabulary; fix:"
                        + " map the index into the vocabulary, or build the layer with a larger nIn)");
            }
        }
        return indices;
    }

    @Override
    protected INDArray preOutput(boolean training, LayerWorkspaceMgr workspaceMgr) {
        assertInputSet(false);
        ArrayCollectives c = requireComm(layerId());
        long[] indices = indices();
        INDArray weights = getParam(DefaultParamInitializer.WEIGHT_KEY);
        long first = (long) c.rank() * weights.size(0);
        INDArray rows = workspaceMgr.create(ArrayType.ACTIVATIONS, weights.dataType(), indices.length, weights.size(1));
        for (int i = 0; i < indices.length; i++) {
            long local = indices[i] - first;
            if (local >= 0 && local < weights.size(0)) {
                rows.getRow(i).assign(weights.getRow(local));
            }
        }
        // every rank's rows: each example's row comes from the one rank holding its index, the others add zeros
        c.sumInPlace(rows);
        if (hasBias()) {
            rows.addiRowVector(getParam(DefaultParamInitializer.BIAS_KEY));
        }
        return rows;
    }

    @Override
    public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
        assertInputSet(true);
        INDArray delta = layerConf().getActivationFn() instanceof ActivationIdentity ? epsilon.dup()
                : layerConf().getActivationFn().backprop(preOutput(true, workspaceMgr), epsilon).getFirst();
        if (maskArray != null) {
            delta.muliColumnVector(maskArray.castTo(delta.dataType()));
        }
        long[] indices = indices();
        INDArray weightGradients = gradientViews.get(DefaultParamInitializer.WEIGHT_KEY);
        weightGradients.assign(0);
        long first = (long) requireComm(layerId()).rank() * weightGradients.size(0);
        // examples in order, as DL4J's scatter-add accumulates them
        for (int i = 0; i < indices.length; i++) {
            long local = indices[i] - first;
            if (local >= 0 && local < weightGradients.size(0)) {
                weightGradients.getRow(local).addi(delta.getRow(i));
            }
        }
        Gradient gradient = new DefaultGradient();
        gradient.gradientForVariable().put(DefaultParamInitializer.WEIGHT_KEY, weightGradients);
        if (hasBias()) {
            INDArray biasGradients = gradientViews.get(DefaultParamInitializer.BIAS_KEY);
            delta.sum(biasGradients, 0);
            gradient.gradientForVariable().put(DefaultParamInitializer.BIAS_KEY, biasGradients);
        }
        return new Pair<>(gradient, null);
    }
}
