package org.symmem4j.dl4j.tensor;

import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.nd4j.linalg.api.buffer.DataType;

/**
 * Megatron's column-parallel dense layer: {@code y = act(x W + b)} with {@code W}'s columns (the
 * output features) split over the tensor-parallel group. Rank {@code r} holds columns
 * {@code [r k, (r+1) k)} of {@code W} and of {@code b} ({@code k = nOut / size}; {@link #getNOut()}
 * is {@code k}) and outputs those {@code k} features of {@code y}: the forward needs no communication.
 * The backward sums the input gradient over the ranks (one all-reduce), since every rank's shard
 * contributes to it. Followed by a {@link RowParallelDenseLayer}, which takes exactly this shard as
 * its input, an MLP block costs one all-reduce forward and one backward.
 *
 * <p>The activation must be element-wise (each rank applies it to its own features): softmax is
 * refused by {@link TensorParallel#attach}.
 */
public class ColumnParallelDenseLayer extends TensorParallelDenseLayer {

    /** For DL4J's JSON deserialization and {@code clone()}; build with {@link TensorParallel#shard}. */
    public ColumnParallelDenseLayer() {
    }

    /** The shard of {@code dense} for a group of {@code size}: every setting, {@code nOut / size} outputs. */
    static ColumnParallelDenseLayer shardOf(DenseLayer dense, int size) {
        ColumnParallelDenseLayer layer = copySettings(dense, new ColumnParallelDenseLayer());
        layer.setTensorParallelSize(size);
        layer.setNOut(dense.getNOut() / size);
        return layer;
    }

    @Override
    TensorParallelDenseLayerImpl newLayer(NeuralNetConfiguration conf, DataType networkDataType) {
        return new ColumnParallelDenseLayerImpl(conf, networkDataType);
    }
}
