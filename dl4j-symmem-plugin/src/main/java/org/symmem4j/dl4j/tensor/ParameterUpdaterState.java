package org.symmem4j.dl4j.tensor;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.deeplearning4j.nn.updater.UpdaterBlock;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * A model's updater state (Adam's moments, momentum, AdaGrad's history...) as views shaped like each parameter, so a
 * parameter's state can be cut and joined along the same axis as the parameter itself.
 *
 * <p>DL4J keeps one flat state vector per model, cut into updater blocks (runs of consecutive parameters with equal
 * updater configuration). A block of {@code n} parameters whose updater keeps {@code k} values per parameter holds
 * {@code k} sections of {@code n} values (Adam: every first moment, then every second moment), each section laid out
 * as the block's flat parameters. A parameter's slice of a section, reshaped in DL4J's parameter order ({@code 'f'},
 * as {@code DefaultParamInitializer} views a dense layer's flat {@code W}), is that parameter's state for one section:
 * <pre>
 *   state vector: [ block 0: section 0 (W b W' b' …) | section 1 (W b W' b' …) ][ block 1: … ]
 *   parameter W of layer L, section s  →  view of n_W values, reshaped 'f' to W's shape (nIn × nOut)
 * </pre>
 * Writing the views writes the updater's state.
 */
final class ParameterUpdaterState {

    /** Per parameter ("layer key/param name"), its {@code k} state views shaped like the parameter, in block order. */
    private final Map<String, List<INDArray>> views;

    private ParameterUpdaterState(Map<String, List<INDArray>> views) {
        this.views = views;
    }

    /**
     * The state of {@code updater}'s parameters, each keyed by {@code layerKeys}' key for its layer.
     *
     * @param updater   a network's or graph's updater (DL4J's own: its block layout is known)
     * @param layerKeys the key of each of the model's layers (index or vertex name), by identity; a layer the updater
     *                  holds but the model no longer does is looked up by its configuration object
     * @return the views; empty where the updater keeps no state (SGD)
     * @throws IllegalStateException for an updater of another kind, or a block whose state is not per-parameter
     */
    static ParameterUpdaterState of(Updater updater, IdentityHashMap<Object, String> layerKeys) {
        if (!(updater instanceof BaseMultiLayerUpdater<?> base)) {
            throw new IllegalStateException("expected DL4J's MultiLayerUpdater or ComputationGraphUpdater, found "
                    + (updater == null ? "none" : updater.getClass().getName())
                    + " (a custom updater's state layout is unknown, so it cannot be split between ranks; fix: leave the"
                    + " updater to DL4J: set it with the configuration's .updater(...), not model.setUpdater)");
        }
        Map<String, List<INDArray>> views = new LinkedHashMap<>();
        INDArray state = base.getStateViewArray();
        if (state == null) {
            return new ParameterUpdaterState(views);
        }
        INDArray flat = state.reshape(state.length());
        for (UpdaterBlock block : base.getUpdaterBlocks()) {
            long params = block.getParamOffsetEnd() - block.getParamOffsetStart();
            long values = block.getUpdaterViewOffsetEnd() - block.getUpdaterViewOffsetStart();
            if (values == 0 || params == 0) {
                continue;
            }
            if (values % params != 0) {
                throw new IllegalStateException("updater block " + block + " has state=" + values + " values for params="
                        + params + ": expected a whole number of values per parameter (an updater whose state is not"
                        + " per-parameter cannot be split between ranks; fix: use one of DL4J's per-parameter updaters,"
                        + " e.g. Sgd, Nesterovs, Adam, AdamW, RmsProp or AdaGrad)");
            }
            int sections = Math.toIntExact(values / params);
            for (UpdaterBlock.ParamState param : block.getLayersAndVariablesInBlock()) {
                long length = param.getParamOffsetEnd() - param.getParamOffsetStart();
                if (length == 0) {
                    continue;
                }
                Trainable layer = param.getLayer();
                String layerKey = layerKeys.get(layer);
                if (layerKey == null && layer instanceof Layer swapped) {
                    // a layer put in the model's layer array in place of the one DL4J built the updater for (the
                    // pipeline's ZB-H1 split layers): it shares that layer's configuration object, parameters and
                    // gradient views, so the configuration, keyed too (byIndex), names the same layer
                    layerKey = layerKeys.get(swapped.conf());
                }
                if (layerKey == null) {
                    throw new IllegalStateException("updater block " + block + " holds parameter " + param.getParamName()
                            + " of " + layer + ", which is none of the model's layers: the updater does not belong to it"
                            + " (fix: keep the updater DL4J built for this model; do not setUpdater another model's)");
                }
                String key = layerKey + "/" + param.getParamName();
                long[] shape = layer.paramTable(false).get(param.getParamName()).shape();
                long within = param.getParamOffsetStart() - block.getParamOffsetStart();
                List<INDArray> perSection = new ArrayList<>(sections);
                for (int k = 0; k < sections; k++) {
                    long from = block.getUpdaterViewOffsetStart() + k * params + within;
                    INDArray section = flat.get(NDArrayIndex.interval(from, from + length));
                    perSection.add(shape.length == 1 ? section : section.reshape('f', shape));
                }
                views.put(key, perSection);
            }
        }
        return new ParameterUpdaterState(views);
    }

    /** A network's state (its updater made if it has none), keyed by layer index. */
    static ParameterUpdaterState of(MultiLayerNetwork network) {
        return of(network.getUpdater(true), byIndex(network.getLayers()));
    }

    /** A graph's state (its updater made if it has none), keyed by vertex name. */
    static ParameterUpdaterState of(ComputationGraph graph) {
        return of(graph.getUpdater(true), byName(graph));
    }

    /**
     * Keys of a network's layers: their indices, by layer and by the layer's configuration object (which a layer put in
     * the layer array in place of DL4J's shares, while the updater's blocks still name the one it replaced).
     */
    private static IdentityHashMap<Object, String> byIndex(Layer[] layers) {
        IdentityHashMap<Object, String> keys = new IdentityHashMap<>();
        for (int l = 0; l < layers.length; l++) {
            keys.put(layers[l], String.valueOf(l));
            keys.put(layers[l].conf(), String.valueOf(l)); // each layer's own configuration object
        }
        return keys;
    }

    /**
     * Keys of a graph's layers: their vertex names (a graph's updater names its layer vertices, which are
     * {@link Trainable}s themselves, rather than the layers inside them: both are keyed).
     */
    private static IdentityHashMap<Object, String> byName(ComputationGraph graph) {
        IdentityHashMap<Object, String> keys = new IdentityHashMap<>();
        for (Layer layer : graph.getLayers()) {
            keys.put(layer, layer.conf().getLayer().getLayerName());
        }
        for (GraphVertex vertex : graph.getVertices()) {
            if (vertex instanceof Trainable trainable && vertex.hasLayer()) {
                keys.put(trainable, vertex.getLayer().conf().getLayer().getLayerName());
            }
        }
        return keys;
    }

    /** Whether the updater keeps any state. */
    boolean isEmpty() {
        return views.isEmpty();
    }

    /**
     * The state views of parameter {@code param} of the layer keyed {@code layerKey} (empty when it keeps none).
     *
     * @param layerKey the layer's key (index or vertex name)
     * @param param    the parameter's name ({@code W}, {@code b})
     * @return one view per section, shaped like the parameter
     */
    List<INDArray> of(String layerKey, String param) {
        return views.getOrDefault(layerKey + "/" + param, List.of());
    }
}
