package org.symmem4j.dl4j.tensor;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import org.deeplearning4j.nn.conf.layers.DenseLayer;

/**
 * What the two tensor-parallel dense layer configurations share: they are DL4J {@link DenseLayer}s
 * whose {@code nIn} / {@code nOut} are this rank's shard (the full width divided by
 * {@link #getTensorParallelSize()}), so parameters, updaters, regularization and serialization are
 * DL4J's own; only the layer implementations add the group's communication.
 */
public abstract class TensorParallelDenseLayer extends DenseLayer {

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
        if (tensorParallelSize < 1) {
            throw new IllegalArgumentException("tensorParallelSize=" + tensorParallelSize + " expected >= 1");
        }
        this.tensorParallelSize = tensorParallelSize;
    }

    /**
     * Copies every setting of {@code dense} (activation, initialization, updater, regularization,
     * constraints, dropout, names...) into {@code into}: all fields DL4J's layer configuration classes
     * declare, from {@code DenseLayer} up. Reflection keeps this complete as DL4J's classes change.
     */
    static <T extends TensorParallelDenseLayer> T copySettings(DenseLayer dense, T into) {
        for (Class<?> c = DenseLayer.class; c != null && c != Object.class; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers())) {
                    continue;
                }
                try {
                    f.setAccessible(true);
                    f.set(into, f.get(dense));
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException("cannot copy DL4J layer setting " + c.getSimpleName() + "." + f.getName()
                            + ": " + e.getMessage(), e);
                }
            }
        }
        return into;
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
