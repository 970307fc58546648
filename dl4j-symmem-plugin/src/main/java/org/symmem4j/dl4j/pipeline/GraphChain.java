package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.LayerVertex;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.graph.vertex.VertexIndices;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.parallel.Invariants;

/**
 * A {@link ComputationGraph} whose vertices form a chain, as the equivalent {@link MultiLayerNetwork},
 * and back: how the pipeline trains such graphs.
 *
 * <p>A chain: one network input, one output, and every other vertex a layer vertex whose only input
 * is the vertex before it in topological order, whose output only the vertex after it reads. Such a
 * graph computes exactly what a multi-layer network of the same layer configurations and input
 * preprocessors computes, and flattens its parameters (and so its gradient and updater state) in the
 * same order, layer by layer; the conversion checks that layout parameter by parameter and copies
 * parameters, updater state and counters both ways.
 *
 * <p>A graph with branches (residual connections, merges) and one input and one output becomes the network of its
 * layer vertices in topological order, the graph's own flat layout ({@link GraphLayerNetwork}); its stages run the
 * graph's wiring ({@link GraphWiring}). Several inputs or outputs are refused.
 */
final class GraphChain {

    private GraphChain() {
    }

    /**
     * The graph's layer vertices in topological order, after the input: the layers of the network that stands for
     * it. For a chain, its vertices in order; for a graph with branches, checked by {@link GraphWiring#of}.
     *
     * @throws IllegalArgumentException naming the vertex the pipeline cannot train, and why
     */
    static List<GraphVertex> layerVertices(ComputationGraph graph) {
        Objects.requireNonNull(graph, "graph");
        if (graph.getVertices() == null || graph.getLayers() == null) {
            graph.init();
        }
        ComputationGraphConfiguration conf = graph.getConfiguration();
        if (conf.getNetworkInputs().size() != 1 || conf.getNetworkOutputs().size() != 1) {
            throw new IllegalArgumentException("the graph has inputs=" + conf.getNetworkInputs() + " outputs="
                    + conf.getNetworkOutputs() + ": expected one input and one output (the pipeline trains graphs with"
                    + " one input and one output, chains or with residual blocks; fix: train this graph with"
                    + " SymmemParallelWrapper instead)");
        }
        if (whyNotChain(graph) != null) {
            GraphWiring.of(graph); // refuses what a graph stage cannot run, naming the vertex
        }
        GraphVertex[] vertices = graph.getVertices();
        List<GraphVertex> layers = new ArrayList<>();
        for (int index : graph.topologicalSortOrder()) {
            if (conf.getVertices().get(vertices[index].getVertexName()) instanceof LayerVertex) {
                layers.add(vertices[index]);
            }
        }
        return layers;
    }

    /**
     * Why {@code graph} (one input, one output) is not a chain, naming the first vertex that breaks it, or null when it
     * is one: then the network standing for it computes what it computes, else its stages run its wiring.
     */
    static String whyNotChain(ComputationGraph graph) {
        ComputationGraphConfiguration conf = graph.getConfiguration();
        GraphVertex[] vertices = graph.getVertices();
        int[] order = graph.topologicalSortOrder();
        for (int position = 0; position < order.length; position++) {
            GraphVertex v = vertices[order[position]];
            if (position == 0) {
                if (!v.isInputVertex()) {
                    throw Invariants.violated("the graph's first vertex in topological order is " + v.getVertexName()
                            + ", not its input");
                }
                continue;
            }
            GraphVertex previous = vertices[order[position - 1]];
            VertexIndices[] inputs = v.getInputVertices();
            String why = null;
            if (!(conf.getVertices().get(v.getVertexName()) instanceof LayerVertex)) {
                why = "it is a " + conf.getVertices().get(v.getVertexName()).getClass().getSimpleName()
                        + ", not a layer vertex";
            } else if (inputs == null || inputs.length != 1) {
                why = "it has " + (inputs == null ? 0 : inputs.length) + " inputs, expected 1";
            } else if (inputs[0].getVertexIndex() != previous.getVertexIndex()) {
                why = "its input is " + vertices[inputs[0].getVertexIndex()].getVertexName() + ", not the vertex before"
                        + " it (" + previous.getVertexName() + ")";
            } else if (previous.getOutputVertices() != null && previous.getOutputVertices().length != 1) {
                why = "its input " + previous.getVertexName() + " also feeds "
                        + (previous.getOutputVertices().length - 1) + " other vertices";
            }
            if (why != null) {
                return "graph vertex \"" + v.getVertexName() + "\" breaks the chain: " + why;
            }
        }
        return null;
    }

    /** A network of {@code conf}, the layers of {@code graph}: a {@link GraphLayerNetwork} for a graph with branches. */
    private static MultiLayerNetwork newNetwork(ComputationGraph graph, MultiLayerConfiguration conf) {
        return whyNotChain(graph) == null ? new MultiLayerNetwork(conf) : new GraphLayerNetwork(conf, GraphWiring.of(graph));
    }

    /**
     * The multi-layer network equivalent to {@code graph}: the same layer configurations (cloned) and
     * input preprocessors, and a copy of the graph's parameters, updater state and counters.
     */
    static MultiLayerNetwork toNetwork(ComputationGraph graph) {
        List<GraphVertex> chain = layerVertices(graph);
        MultiLayerNetwork network = newNetwork(graph, networkConfiguration(graph, chain));
        network.init();
        requireSameLayout(graph, chain, network);
        if (network.numParams() > 0) {
            network.params().assign(graph.params());
            UpdaterStateCopy.copy(graph.getUpdater(false), network.getUpdater(true), 0, 0, network.numParams());
        }
        ComputationGraphConfiguration conf = graph.getConfiguration();
        network.setIterationCount(conf.getIterationCount());
        network.setEpochCount(conf.getEpochCount());
        return network;
    }

    /** The equivalent network of a hollow chain graph, hollow too: its layout, no values. */
    record Hollow(MultiLayerNetwork network, HollowNetworks.Reservation reservation) {
    }

    /**
     * The multi-layer network equivalent to {@code graph}, a hollow graph started from its configuration
     * ({@link HollowNetworks#hollow(ComputationGraph)}): hollow as well, so that neither ever holds a value; checked
     * as {@link #toNetwork} checks (a chain, the same flat layout).
     *
     * @throws IllegalArgumentException naming the vertex that breaks the chain, and why
     */
    static Hollow hollowNetwork(ComputationGraph graph) {
        List<GraphVertex> chain = layerVertices(graph);
        MultiLayerNetwork network = newNetwork(graph, networkConfiguration(graph, chain));
        HollowNetworks.Reservation reservation = HollowNetworks.hollow(network);
        requireSameLayout(graph, chain, network);
        return new Hollow(network, reservation);
    }

    /** The configuration of the network equivalent to {@code graph}, whose layer vertices are {@code chain}. */
    private static MultiLayerConfiguration networkConfiguration(ComputationGraph graph, List<GraphVertex> chain) {
        ComputationGraphConfiguration conf = graph.getConfiguration();
        List<NeuralNetConfiguration> confs = new ArrayList<>();
        Map<Integer, InputPreProcessor> preProcessors = new HashMap<>();
        for (int i = 0; i < chain.size(); i++) {
            LayerVertex vertex = (LayerVertex) conf.getVertices().get(chain.get(i).getVertexName());
            confs.add(vertex.getLayerConf().clone());
            if (vertex.getPreProcessor() != null) {
                preProcessors.put(i, vertex.getPreProcessor().clone());
            }
        }
        MultiLayerConfiguration networkConf = new MultiLayerConfiguration.Builder().confs(confs)
                .inputPreProcessors(preProcessors).dataType(conf.getDataType()).validateOutputLayerConfig(false).build();
        // set on the result: the builder's setters for these carry lombok annotations javac cannot resolve here
        networkConf.setBackpropType(conf.getBackpropType());
        networkConf.setTrainingWorkspaceMode(conf.getTrainingWorkspaceMode());
        networkConf.setInferenceWorkspaceMode(conf.getInferenceWorkspaceMode());
        networkConf.setIterationCount(conf.getIterationCount());
        networkConf.setEpochCount(conf.getEpochCount());
        if (whyNotChain(graph) != null) {
            // the builder infers each layer's nIn from the layer before it, which a graph's layer does not read: the
            // graph's own layer configurations and preprocessors instead
            for (int i = 0; i < chain.size(); i++) {
                LayerVertex vertex = (LayerVertex) conf.getVertices().get(chain.get(i).getVertexName());
                networkConf.getConfs().set(i, vertex.getLayerConf().clone());
                networkConf.getConfs().get(i).setDataType(conf.getDataType());
            }
            Map<Integer, InputPreProcessor> graphPreProcessors = new HashMap<>();
            preProcessors.forEach((i, p) -> graphPreProcessors.put(i, p.clone()));
            networkConf.setInputPreProcessors(graphPreProcessors);
        }
        return networkConf;
    }

    /** Writes {@code network}'s parameters, updater state and counters into {@code graph}, the chain it stands for. */
    static void copyInto(MultiLayerNetwork network, ComputationGraph graph) {
        List<GraphVertex> chain = layerVertices(graph);
        requireSameLayout(graph, chain, network);
        if (network.numParams() > 0) {
            graph.params().assign(network.params());
            UpdaterStateCopy.copy(network.getUpdater(false), graph.getUpdater(true), 0, 0, network.numParams());
        }
        graph.getConfiguration().setIterationCount(network.getIterationCount());
        graph.getConfiguration().setEpochCount(network.getEpochCount());
    }

    /** Writes {@code graph}'s parameters, updater state and counters into {@code network}, the chain standing for it. */
    static void copyFrom(ComputationGraph graph, MultiLayerNetwork network) {
        requireSameLayout(graph, layerVertices(graph), network);
        if (network.numParams() > 0) {
            network.params().assign(graph.params());
            UpdaterStateCopy.copy(graph.getUpdater(false), network.getUpdater(true), 0, 0, network.numParams());
        }
        network.setIterationCount(graph.getConfiguration().getIterationCount());
        network.setEpochCount(graph.getConfiguration().getEpochCount());
    }

    /** Both flatten the same parameters in the same order: layer by layer, each layer's parameters in one order. */
    private static void requireSameLayout(ComputationGraph graph, List<GraphVertex> chain, MultiLayerNetwork network) {
        if (network.getnLayers() != chain.size() || network.numParams() != graph.numParams()) {
            throw new IllegalArgumentException("the graph has " + chain.size() + " layers and " + graph.numParams()
                    + " parameters but the network " + network.getnLayers() + " and " + network.numParams()
                    + ": expected the same (fix: copy between a graph and the network made from its configuration)");
        }
        for (int i = 0; i < chain.size(); i++) {
            Map<String, INDArray> theirs = chain.get(i).getLayer().paramTable();
            Map<String, INDArray> mine = network.getLayer(i).paramTable();
            List<String> theirKeys = new ArrayList<>(theirs.keySet());
            List<String> myKeys = new ArrayList<>(mine.keySet());
            boolean same = theirKeys.equals(myKeys);
            for (int k = 0; same && k < theirKeys.size(); k++) {
                same = theirs.get(theirKeys.get(k)).length() == mine.get(myKeys.get(k)).length();
            }
            if (!same) {
                throw Invariants.violated("graph vertex \"" + chain.get(i).getVertexName() + "\" flattens its"
                        + " parameters " + theirKeys + " but the equivalent network layer " + i + " " + myKeys
                        + ": expected the same layout (a DL4J layer initialized differently in a network and a graph)");
            }
        }
    }
}
