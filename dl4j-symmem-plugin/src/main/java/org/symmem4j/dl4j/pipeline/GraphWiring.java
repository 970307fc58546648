package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.graph.LayerVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.graph.vertex.VertexIndices;
import org.nd4j.linalg.api.buffer.DataType;
import org.symmem4j.parallel.Invariants;

/**
 * The wiring of a {@link ComputationGraph} with branches (residual connections, merges) that the pipeline trains: its
 * vertices in DL4J's topological order, which vertex reads which, and where a stage boundary may fall.
 *
 * <p>The pipeline trains such a graph as the multi-layer network of its layer vertices in topological order
 * ({@link GraphLayerNetwork}, from {@link GraphChain#toNetwork}): DL4J flattens a graph's parameters (and so its gradient
 * and updater state) layer vertex by layer vertex in topological order, so that network has the graph's flat layout,
 * and every piece of the pipeline that cuts, copies, gathers or checkpoints parameters works on it unchanged. It
 * does not compute what the graph computes; each stage runs its part of the graph instead
 * ({@link GraphStagePasses}).
 *
 * <p><b>Cut vertices.</b> A boundary after topological position {@code p} is valid when the only tensor crossing it
 * is vertex {@code p}'s output: no vertex at or before {@code p - 1} (the network input included) feeds a vertex after
 * {@code p}. A residual block thus lies inside one stage. A stage starts at a layer of the network ({@link #canStart});
 * a boundary is placed after the latest cut vertex before that layer, so vertices without parameters between a cut
 * and the next layer (a residual add) belong to the earlier stage.
 */
final class GraphWiring {

    /** Vertex names in topological order; position 0 is the network input. */
    private final String[] names;
    /** By position: the positions of the vertex's inputs, in DL4J's input order. */
    private final int[][] inputs;
    /** By position: the layer index in the network of layer vertices, or -1 for the input and other vertices. */
    private final int[] layerAt;
    /** By layer: its position. */
    private final int[] positionOf;
    /** By layer: the position its stage starts at when a stage starts there, or -1 when no stage may start there. */
    private final int[] stageStartPosition;
    /** By position: the last position that reads the vertex's output. */
    private final int[] lastReader;
    private final ComputationGraphConfiguration conf;
    private final DataType dataType;
    private final Map<InputType, Map<String, InputType>> activationTypes = new HashMap<>();

    private GraphWiring(ComputationGraph graph) {
        GraphVertex[] vertices = graph.getVertices();
        int[] order = graph.topologicalSortOrder();
        this.conf = graph.getConfiguration();
        this.dataType = conf.getDataType();
        int n = order.length;
        int[] positionOfIndex = new int[vertices.length];
        for (int p = 0; p < n; p++) {
            positionOfIndex[order[p]] = p;
        }
        names = new String[n];
        inputs = new int[n][];
        layerAt = new int[n];
        lastReader = new int[n];
        List<Integer> layerPositions = new ArrayList<>();
        for (int p = 0; p < n; p++) {
            GraphVertex v = vertices[order[p]];
            names[p] = v.getVertexName();
            VertexIndices[] in = v.getInputVertices();
            inputs[p] = in == null ? new int[0]
                    : Arrays.stream(in).mapToInt(i -> positionOfIndex[i.getVertexIndex()]).toArray();
            for (int from : inputs[p]) {
                lastReader[from] = Math.max(lastReader[from], p);
            }
            boolean layer = conf.getVertices().get(names[p]) instanceof LayerVertex;
            layerAt[p] = layer ? layerPositions.size() : -1;
            if (layer) {
                layerPositions.add(p);
            }
        }
        positionOf = layerPositions.stream().mapToInt(Integer::intValue).toArray();
        stageStartPosition = new int[positionOf.length];
        Arrays.fill(stageStartPosition, -1);
        // reach: the last position read by a vertex before p (the network input included)
        int reach = 0;
        boolean[] cutAfter = new boolean[n];
        for (int p = 0; p < n - 1; p++) {
            cutAfter[p] = p > 0 && reach <= p;
            reach = Math.max(reach, lastReader[p]);
        }
        for (int j = 1; j < positionOf.length; j++) {
            for (int p = positionOf[j] - 1; p >= positionOf[j - 1]; p--) {
                if (cutAfter[p]) {
                    stageStartPosition[j] = p + 1;
                    break;
                }
            }
        }
    }

    /**
     * The wiring of {@code graph}, checked for what its stages can run: one input, one output that is a layer vertex,
     * every other vertex a layer vertex with one input or a vertex without parameters that DL4J can run on its own.
     *
     * @throws IllegalArgumentException naming the vertex, what was expected, and the fix
     */
    static GraphWiring of(ComputationGraph graph) {
        GraphWiring wiring = new GraphWiring(graph);
        ComputationGraphConfiguration conf = wiring.conf;
        String last = wiring.names[wiring.names.length - 1];
        if (!conf.getNetworkOutputs().getFirst().equals(last) || wiring.layerAt[wiring.names.length - 1] < 0) {
            throw new IllegalArgumentException("the graph's output is vertex \"" + conf.getNetworkOutputs().getFirst()
                    + "\" (" + conf.getVertices().get(conf.getNetworkOutputs().getFirst()).getClass().getSimpleName()
                    + "), last in topological order \"" + last + "\": expected an output layer vertex that every other"
                    + " vertex feeds (fix: end the graph with one output layer)");
        }
        for (int p = 1; p < wiring.names.length; p++) {
            org.deeplearning4j.nn.conf.graph.GraphVertex v = conf.getVertices().get(wiring.names[p]);
            if (p < wiring.names.length - 1 && wiring.lastReader[p] == 0) {
                throw new IllegalArgumentException("graph vertex \"" + wiring.names[p] + "\" feeds no other vertex and"
                        + " is not the output: expected every vertex to lead to the output (fix: remove it, or train"
                        + " this graph with SymmemParallelWrapper)");
            }
            if (v instanceof LayerVertex) {
                if (wiring.inputs[p].length != 1) {
                    throw new IllegalArgumentException("graph vertex \"" + wiring.names[p] + "\" is a layer with "
                            + wiring.inputs[p].length + " inputs: expected 1 (fix: merge its inputs with a MergeVertex or"
                            + " an ElementWiseVertex in front of it)");
                }
                continue;
            }
            if (v.numParams(false) != 0) {
                throw new IllegalArgumentException("graph vertex \"" + wiring.names[p] + "\" (" + v.getClass().getSimpleName()
                        + ") has " + v.numParams(false) + " parameters: expected parameters in layer vertices only"
                        + " (fix: train this graph with SymmemParallelWrapper instead)");
            }
            wiring.instantiate(p); // refuses a vertex DL4J cannot run outside a graph, now rather than in a pass
        }
        return wiring;
    }

    /** DL4J's implementation of the vertex at {@code p} (no parameters), on its own: a stage runs it. */
    GraphVertex instantiate(int p) {
        org.deeplearning4j.nn.conf.graph.GraphVertex v = conf.getVertices().get(names[p]);
        try {
            return v.instantiate(null, names[p], p, null, false, dataType);
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("graph vertex \"" + names[p] + "\" (" + v.getClass().getSimpleName()
                    + ") cannot run in a pipeline stage: " + e + "; expected layer vertices and vertices such as"
                    + " ElementWiseVertex or MergeVertex (fix: train this graph with SymmemParallelWrapper instead)", e);
        }
    }

    /** The number of layer vertices: the network's layers. */
    int layers() {
        return positionOf.length;
    }

    /** Whether a stage may start at {@code layer} (layer 0 always): a cut vertex lies between it and the layer before. */
    boolean canStart(int layer) {
        return layer == 0 || layer > 0 && layer < positionOf.length && stageStartPosition[layer] > 0;
    }

    /** The layers a stage may start at, after layer 0, each as {@code layer (vertex "name")}: for error messages. */
    String validStarts() {
        return Arrays.toString(IntStream.range(1, layers()).filter(this::canStart)
                .mapToObj(j -> j + " (vertex \"" + names[positionOf[j]] + "\")").toArray());
    }

    /**
     * Refuses stage starts that are not at cut vertices, naming the vertex whose output crosses the boundary.
     *
     * @throws IllegalArgumentException with the valid starts
     */
    void requireStarts(int[] stageStarts) {
        for (int start : stageStarts) {
            if (start >= 1 && start < layers() && !canStart(start)) {
                int at = positionOf[start];
                int crossing = IntStream.range(0, at - 1).filter(u -> lastReader[u] >= at).findFirst().orElse(at - 1);
                throw new IllegalArgumentException("stage boundary at layer " + start + " (vertex \"" + names[at]
                        + "\") is not at a cut vertex: the output of vertex \"" + names[crossing] + "\" is read by vertex \""
                        + names[lastReader[crossing]] + "\" across it (a branch such as a residual connection would cross"
                        + " stages); expected a layer a stage may start at, one of " + validStarts()
                        + " (fix: pass boundaries from that list, or let the trainer split the graph)");
            }
        }
    }

    /** The positions stage {@code [firstLayer, endLayer)} runs: from its start position to the next stage's. */
    int[] positions(int firstLayer, int endLayer) {
        int from = firstLayer == 0 ? 1 : stageStartPosition[firstLayer];
        int to = endLayer == layers() ? names.length : stageStartPosition[endLayer];
        if (from <= 0 || to <= 0 || to <= from) {
            throw Invariants.violated("stage of layers [" + firstLayer + ", " + endLayer + ") does not start and end at"
                    + " cut vertices (valid starts: " + validStarts() + ")");
        }
        return IntStream.range(from, to).toArray();
    }

    String name(int position) {
        return names[position];
    }

    int[] inputs(int position) {
        return inputs[position];
    }

    int layerAt(int position) {
        return layerAt[position];
    }

    /**
     * The per-example shape of every stage's output for the network input {@code input} (the last entry is the
     * network's output): the output type of each stage's last vertex, from DL4J's graph input types.
     *
     * @throws IllegalArgumentException when the graph does not accept the input type
     */
    long[][] boundaryShapes(InputType input, int[] stageStart) {
        Map<String, InputType> types = activationTypes.computeIfAbsent(input, in -> {
            try {
                return conf.clone().getLayerActivationTypes(true, false, in); // on a copy: it may add preprocessors
            } catch (IllegalArgumentException | IllegalStateException | UnsupportedOperationException e) {
                throw new IllegalArgumentException("the graph does not accept input type " + in + ": " + e.getMessage()
                        + " (fix: check the features' shape, or give PipelineParallelTrainerBuilder.inputType(...))", e);
            }
        });
        long[][] shapes = new long[stageStart.length - 1][];
        for (int s = 0; s < shapes.length; s++) {
            int[] positions = positions(stageStart[s], stageStart[s + 1]);
            String last = names[positions[positions.length - 1]];
            InputType type = types.get(last);
            Layer layer = layerAt[positions[positions.length - 1]] >= 0
                    ? ((LayerVertex) conf.getVertices().get(last)).getLayerConf().getLayer() : null;
            if (layer instanceof org.deeplearning4j.nn.conf.layers.LossLayer) {
                type = types.get(names[inputs[positions[positions.length - 1]][0]]); // a loss layer outputs its input
            }
            shapes[s] = type.getShape(false);
        }
        return shapes;
    }

    /**
     * Under ZB-H1: a graph's stages run their whole backward in the input-gradient action; each layer with parameters,
     * as the plan reports it.
     */
    List<String> unsplitLayers() {
        List<String> unsplit = new ArrayList<>();
        for (int j = 0; j < layers(); j++) {
            LayerVertex v = (LayerVertex) conf.getVertices().get(names[positionOf[j]]);
            if (v.numParams(false) > 0) {
                unsplit.add("layer " + j + " (" + v.getLayerConf().getLayer().getClass().getSimpleName() + " \""
                        + names[positionOf[j]] + "\"): a stage of a graph with branches runs its whole backward");
            }
        }
        return List.copyOf(unsplit);
    }
}
