package org.symmem4j.dl4j.tensor;

import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.nd4j.linalg.api.buffer.DataType;

/**
 * Megatron's row-parallel dense layer: {@code y = act(x W + b)} with {@code W}'s rows (the input
 * features) split over the tensor-parallel group. Rank {@code r} holds rows {@code [r k, (r+1) k)}
 * of {@code W} ({@code k = nIn / size}; {@link #getNIn()} is {@code k}) and takes those {@code k}
 * features of {@code x} as input — what a {@link ColumnParallelDenseLayer} before it outputs. The
 * forward sums the partial products {@code x_r W_r} over the ranks (one all-reduce), then adds the
 * bias (whole on every rank) and applies the activation: every rank holds the whole output. The
 * backward needs no communication: each rank's weight gradient and input gradient are its own
 * shard's, and the bias gradient is the same on every rank.
 */
public class RowParallelDenseLayer extends TensorParallelDenseLayer {

    /** For DL4J's JSON deserialization and {@code clone()}; build with {@link TensorParallel#shard}. */
    public RowParallelDenseLayer() {
    }

    /** The shard of {@code dense} for a group of {@code size}: every setting, {@code nIn / size} inputs. */
    static RowParallelDenseLayer shardOf(DenseLayer dense, int size) {
        RowParallelDenseLayer layer = copySettings(dense, new RowParallelDenseLayer());
        layer.setTensorParallelSize(size);
        layer.setNIn(dense.getNIn() / size);
        return layer;
    }

    @Override
    TensorParallelDenseLayerImpl newLayer(NeuralNetConfiguration conf, DataType networkDataType) {
        return new RowParallelDenseLayerImpl(conf, networkDataType);
    }
}
