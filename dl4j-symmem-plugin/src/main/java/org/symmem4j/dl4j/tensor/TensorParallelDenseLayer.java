package org.symmem4j.dl4j.tensor;

import java.util.Collection;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LayerValidation;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * What the two tensor-parallel dense layer configurations share: they are DL4J {@link DenseLayer}s
 * whose {@code nIn} / {@code nOut} are this rank's shard (the full width divided by
 * {@link #getTensorParallelSize()}), so parameters, updaters, regularization and serialization are
 * DL4J's own; only the layer implementations add the group's communication.
 */
public abstract class TensorParallelDenseLayer extends DenseLayer {

    /** The number of ranks the layer's weights are split over (part of the configuration's JSON). */
    private int tensorParallelSize = 1;

    /** For DL4J's JSON deserialization and {@code clone()}. */
    protected TensorParallelDenseLayer() {
    }

    /**
     * The number of ranks the layer's weights are split over.
     *
     * @return the tensor-parallel group's size this layer was sharded for
     */
    public int getTensorParallelSize() {
        return tensorParallelSize;
    }

    /**
     * Sets the number of ranks the layer's weights are split over (for JSON; use {@link TensorParallel#shard}).
     *
     * @param tensorParallelSize at least 1
     * @throws IllegalArgumentException when below 1
     */
    public void setTensorParallelSize(int tensorParallelSize) {
        this.tensorParallelSize = ShardedLayerConfig.requireSize(tensorParallelSize);
    }

    /**
     * Copies every setting of {@code dense} (activation, initialization, updater, regularization,
     * constraints, dropout, names...) into {@code into}: all fields DL4J's layer configuration classes
     * declare, from {@code DenseLayer} up. Reflection keeps this complete as DL4J's classes change.
     */
    static <T extends TensorParallelDenseLayer> T copySettings(DenseLayer dense, T into) {
        return ShardedLayerConfig.copySettings(DenseLayer.class, dense, into);
    }

    /** This configuration's layer implementation (DL4J's dense layer plus the group's sums). */
    abstract TensorParallelDenseLayerImpl newLayer(NeuralNetConfiguration conf, DataType networkDataType);

    /** As DL4J's {@code DenseLayer.instantiate}, with this configuration's implementation. */
    @Override
    public Layer instantiate(NeuralNetConfiguration conf, Collection<TrainingListener> listeners, int layerIndex,
                             INDArray layerParamsView, boolean initializeParams, DataType networkDataType) {
        LayerValidation.assertNInNOutSet(getClass().getSimpleName(), getLayerName(), layerIndex, getNIn(), getNOut());
        return ShardedLayerConfig.wire(newLayer(conf, networkDataType), conf, listeners, layerIndex, layerParamsView,
                initializeParams, initializer());
    }

    @Override
    public TensorParallelDenseLayer clone() {
        return (TensorParallelDenseLayer) super.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TensorParallelDenseLayer t && o.getClass() == getClass()
                && t.tensorParallelSize == tensorParallelSize && super.equals(o);
    }

    @Override
    public int hashCode() {
        return 31 * super.hashCode() + tensorParallelSize;
    }
}
