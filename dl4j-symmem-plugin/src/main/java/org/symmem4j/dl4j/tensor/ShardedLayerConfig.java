package org.symmem4j.dl4j.tensor;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.Collection;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.ParamInitializer;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.ndarray.INDArray;

/** What the sharded layer configurations (dense and output) share: copying DL4J's settings and DL4J's instantiate wiring. */
final class ShardedLayerConfig {

    private ShardedLayerConfig() {
    }

    /**
     * Copies every setting of {@code from} into {@code into}: all fields DL4J's layer configuration classes declare, from
     * {@code top} up. Reflection keeps this complete as DL4J's classes change.
     */
    static <T> T copySettings(Class<?> top, Object from, T into) {
        for (Class<?> c = top; c != null && c != Object.class; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers())) {
                    continue;
                }
                try {
                    f.setAccessible(true);
                    f.set(into, f.get(from));
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException("cannot copy DL4J layer setting " + c.getSimpleName() + "." + f.getName()
                            + ": " + e.getMessage() + " (fix: put DL4J on the class path, or add --add-opens "
                            + c.getPackageName() + "=ALL-UNNAMED)", e);
                }
            }
        }
        return into;
    }

    /** A tensor-parallel size as the configurations store it. */
    static int requireSize(int tensorParallelSize) {
        if (tensorParallelSize < 1) {
            throw new IllegalArgumentException("tensorParallelSize=" + tensorParallelSize + " expected >= 1"
                    + " (fix: pass the tensor-parallel group's size)");
        }
        return tensorParallelSize;
    }

    /** As DL4J's layer configurations' {@code instantiate}: listeners, index, parameter views and configuration. */
    static <L extends Layer> L wire(L layer, NeuralNetConfiguration conf, Collection<TrainingListener> listeners, int layerIndex,
                                    INDArray layerParamsView, boolean initializeParams, ParamInitializer initializer) {
        layer.setListeners(listeners);
        layer.setIndex(layerIndex);
        layer.setParamsViewArray(layerParamsView);
        layer.setParamTable(initializer.init(conf, layerParamsView, initializeParams));
        layer.setConf(conf);
        return layer;
    }
}
