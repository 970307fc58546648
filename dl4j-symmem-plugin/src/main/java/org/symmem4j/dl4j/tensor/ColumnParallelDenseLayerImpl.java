package org.symmem4j.dl4j.tensor;

import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * The layer of a {@link ColumnParallelDenseLayer}: DL4J's dense layer on this rank's output columns;
 * the backward's input gradient {@code delta W_r^T} is this rank's part of the whole input gradient,
 * so it is summed over the ranks before it goes to the layer below. Deferring ({@link
 * org.symmem4j.dl4j.layers.SplitDenseLayer}), the sum is the input half's, and the weight half is local.
 */
public class ColumnParallelDenseLayerImpl extends TensorParallelDenseLayerImpl {


    /**
     * DL4J's layer constructor ({@code instantiate} and {@code clone} call it).
     *
     * @param conf     the layer's configuration
     * @param dataType the network's data type
     */
    public ColumnParallelDenseLayerImpl(NeuralNetConfiguration conf, DataType dataType) {
        super(conf, dataType);
    }


    /** DL4J's backward, or its input half while deferring, then the input gradient summed over the group. */
    @Override
    public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
        Pair<Gradient, INDArray> result = super.backpropGradient(epsilon, workspaceMgr);
        requireComm().sumInPlace(result.getSecond());
        return result;
    }
}
