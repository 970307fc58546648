package org.symmem4j.serving.weights;

import java.lang.foreign.MemorySegment;
import java.util.Objects;

import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.nd4j.SegmentArrays;

/**
 * DL4J networks whose flat parameters are a given segment (a {@link SharedWeights} view), not a copy: the network is
 * initialised with {@code init(params, false)} over an ND4J array that wraps the segment's address, as the plugin's
 * fully sharded training does. Any number of networks, on any threads, share one segment; each network object
 * (layers, workspaces) is used by one thread at a time. The networks only read their parameters: do not train
 * them.
 */
public final class SharedNetworks {

    private SharedNetworks() {
    }

    /**
     * A multi-layer network over {@code params}.
     *
     * @param conf   the configuration (cloned; its data type is the parameters' type)
     * @param params the flat parameters, {@code numParams x dataType.width()} bytes
     * @return the network, initialised, its {@code params()} a view of {@code params}
     * @throws IllegalArgumentException when the segment's size is not the configuration's parameter count
     */
    public static MultiLayerNetwork multiLayer(MultiLayerConfiguration conf, MemorySegment params) {
        Objects.requireNonNull(conf, "conf");
        MultiLayerNetwork net = new MultiLayerNetwork(conf.clone());
        INDArray view = viewOf(params, conf.getDataType(), "multi-layer network");
        try {
            net.init(view, false); // wraps the view: no copy, and no initialisation writes it
        } catch (IllegalArgumentException | IllegalStateException e) {
            throw new IllegalArgumentException("shared parameters of elements=" + view.length() + " (" + conf.getDataType()
                    + ") do not fit this multi-layer configuration: " + e.getMessage()
                    + " (fix: publish the parameters of a network built from the same configuration)", e);
        }
        return net;
    }

    /**
     * A computation graph over {@code params}.
     *
     * @param conf   the configuration (cloned; its data type is the parameters' type)
     * @param params the flat parameters
     * @return the graph, initialised, its {@code params()} a view of {@code params}
     * @throws IllegalArgumentException when the segment's size is not the configuration's parameter count
     */
    public static ComputationGraph graph(ComputationGraphConfiguration conf, MemorySegment params) {
        Objects.requireNonNull(conf, "conf");
        ComputationGraph net = new ComputationGraph(conf.clone());
        INDArray view = viewOf(params, conf.getDataType(), "computation graph");
        try {
            net.init(view, false);
        } catch (IllegalArgumentException | IllegalStateException e) {
            throw new IllegalArgumentException("shared parameters of elements=" + view.length() + " (" + conf.getDataType()
                    + ") do not fit this graph configuration: " + e.getMessage()
                    + " (fix: publish the parameters of a graph built from the same configuration)", e);
        }
        return net;
    }

    private static INDArray viewOf(MemorySegment params, DataType type, String what) {
        Objects.requireNonNull(params, "params");
        int width = type.width();
        if (params.byteSize() == 0 || params.byteSize() % width != 0) {
            throw new IllegalArgumentException("shared parameters for a " + what + " of bytes=" + params.byteSize()
                    + " expected a positive multiple of " + width + " (" + type + " elements; fix: pass the parameters"
                    + " SharedWeights published for this model, numParams x " + width + " bytes)");
        }
        return SegmentArrays.over(params, type, params.byteSize() / width);
    }
}
