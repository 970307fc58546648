package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Invariants;

/**
 * The forward and backward of one stage of a graph with branches ({@link GraphWiring}): its vertices in topological
 * order, as DL4J's {@code ComputationGraph} runs them in a training pass, on the stage network's own layers (whose
 * parameters and gradient views are the stage's, laid out as the graph's) and DL4J's own implementations of the other
 * vertices (element-wise add, merge, ...). {@link Dl4jPipelineStage} calls it in place of the chain's layer loop; it
 * keeps, per microbatch, each vertex's output from forward until backward.
 *
 * <p><b>Exactness.</b> Forward: a layer vertex's input through its preprocessor, then {@code activate}; the output
 * layer is not run forward (DL4J's graph excludes it from the training forward and computes it in its backward).
 * Backward in reverse topological order, each vertex's output gradient the sum of what its readers gave it, added in
 * the order the readers run (as {@code ComputationGraph.calcBackpropGradients} adds them): the same operations on the
 * same values as the whole graph, so each stage's gradient equals the graph's bitwise.
 */
final class GraphStagePasses {

    private final String[] names;
    /** By node: its inputs as node indices, -1 for the stage's input. */
    private final int[][] inputs;
    /** By node: its layer in the stage network, or -1. */
    private final int[] layer;
    /** By node: DL4J's implementation of a vertex without parameters, or null for a layer vertex. */
    private final GraphVertex[] vertices;
    /** By microbatch and node: the node's output, from forward until backward. */
    private INDArray[][] outputs = new INDArray[0][];

    /** Stage {@code [firstLayer, endLayer)} of {@code wiring}'s network. */
    GraphStagePasses(GraphWiring wiring, int firstLayer, int endLayer) {
        int[] positions = wiring.positions(firstLayer, endLayer);
        int n = positions.length;
        names = new String[n];
        inputs = new int[n][];
        layer = new int[n];
        vertices = new GraphVertex[n];
        for (int k = 0; k < n; k++) {
            int p = positions[k];
            names[k] = wiring.name(p);
            int[] from = wiring.inputs(p);
            inputs[k] = new int[from.length];
            for (int j = 0; j < from.length; j++) {
                inputs[k][j] = from[j] < positions[0] ? -1 : from[j] - positions[0];
                if (from[j] < positions[0] - 1) {
                    throw Invariants.violated("graph vertex \"" + names[k] + "\" reads vertex \"" + wiring.name(from[j])
                            + "\" of an earlier stage, across a boundary that is not at a cut vertex");
                }
            }
            layer[k] = wiring.layerAt(p) < 0 ? -1 : wiring.layerAt(p) - firstLayer;
            vertices[k] = layer[k] < 0 ? wiring.instantiate(p) : null;
        }
    }

    /** The names of the graph's vertices this stage runs, in topological order. */
    List<String> vertexNames() {
        return List.of(names);
    }

    /** Makes room for {@code count} microbatches. */
    void beginStep(int count) {
        if (outputs.length != count) {
            outputs = new INDArray[count][];
        }
    }

    /**
     * The training forward of microbatch {@code mb} from the stage input {@code x}: every layer's input (after its
     * preprocessor) into {@code layerInputs}; the stage's output, or null on the last stage (whose output layer runs in
     * backward).
     */
    INDArray forward(int mb, INDArray x, Layer[] layers, MultiLayerConfiguration conf, int miniBatch,
                     LayerWorkspaceMgr workspaces, INDArray[] layerInputs) {
        INDArray[] out = new INDArray[names.length];
        for (int k = 0; k < names.length; k++) {
            INDArray[] in = inputsOf(k, out, x);
            if (layer[k] >= 0) {
                INDArray input = in[0];
                InputPreProcessor preProcessor = conf.getInputPreProcess(layer[k]);
                if (preProcessor != null) {
                    input = preProcessor.preProcess(input, miniBatch, workspaces);
                }
                layerInputs[layer[k]] = input;
                Layer l = layers[layer[k]];
                if (l instanceof IOutputLayer) {
                    l.setInput(input, workspaces); // computed in backward, with the labels
                } else {
                    out[k] = l.activate(input, true, workspaces);
                }
            } else {
                vertices[k].setInputs(in);
                out[k] = vertices[k].doForward(true, workspaces);
            }
        }
        outputs[mb] = out;
        return out[names.length - 1];
    }

    /**
     * The backward of microbatch {@code mb}: from {@code epsilon}, the gradient of the stage's output (null on the last
     * stage, whose output layer has its labels set) and the stage input {@code x}, to the gradient of the stage input; the layers' gradients in
     * their views, and as DL4J's {@code MultiLayerNetwork.backpropGradient} returns them (keys {@code layer_param}).
     * The layers' inputs must be in place (the caller sets them again, or forward just ran).
     */
    Pair<Gradient, INDArray> backward(int mb, INDArray x, INDArray epsilon, Layer[] layers, MultiLayerConfiguration conf,
                                      int miniBatch, LayerWorkspaceMgr workspaces, INDArray gradientView) {
        INDArray[] out = outputs[mb];
        if (out == null) {
            throw Invariants.violated("graph stage got the backward of microbatch " + mb + " before its forward");
        }
        outputs[mb] = null;
        INDArray[] eps = new INDArray[names.length];
        eps[names.length - 1] = epsilon;
        INDArray stageInputGradient = null;
        List<Map.Entry<String, INDArray>> gradients = new ArrayList<>();
        List<Character> orders = new ArrayList<>();
        for (int k = names.length - 1; k >= 0; k--) {
            INDArray[] toInputs;
            if (layer[k] >= 0) {
                Pair<Gradient, INDArray> pair = layers[layer[k]].backpropGradient(eps[k], workspaces);
                for (Map.Entry<String, INDArray> e : pair.getFirst().gradientForVariable().entrySet()) {
                    gradients.add(Map.entry(layer[k] + "_" + e.getKey(), e.getValue()));
                    orders.add(pair.getFirst().flatteningOrderForVariable(e.getKey()));
                }
                INDArray g = pair.getSecond();
                InputPreProcessor preProcessor = conf.getInputPreProcess(layer[k]);
                if (preProcessor != null && g != null) {
                    g = preProcessor.backprop(g, miniBatch, workspaces);
                }
                toInputs = new INDArray[] {g};
            } else {
                if (eps[k] == null) {
                    throw Invariants.violated("graph vertex \"" + names[k] + "\" got no gradient from its readers");
                }
                vertices[k].setInputs(inputsOf(k, out, x));
                vertices[k].setEpsilon(eps[k]);
                toInputs = vertices[k].doBackward(false, workspaces).getSecond();
            }
            // a vertex read by several gets the sum of their gradients, in the order they run backward (DL4J's)
            for (int j = 0; j < inputs[k].length; j++) {
                INDArray g = toInputs[j];
                int from = inputs[k][j];
                if (from < 0) {
                    stageInputGradient = stageInputGradient == null ? g : stageInputGradient.add(g);
                } else {
                    eps[from] = eps[from] == null ? g : eps[from].add(g);
                }
            }
            eps[k] = null;
        }
        Gradient gradient = new DefaultGradient(gradientView);
        for (int i = 0; i < gradients.size(); i++) {
            gradient.setGradientFor(gradients.get(i).getKey(), gradients.get(i).getValue(), orders.get(i));
        }
        return new Pair<>(gradient, stageInputGradient);
    }

    private INDArray[] inputsOf(int k, INDArray[] out, INDArray x) {
        INDArray[] in = new INDArray[inputs[k].length];
        for (int j = 0; j < in.length; j++) {
            in[j] = inputs[k][j] < 0 ? x : out[inputs[k][j]];
        }
        return in;
    }

    @Override
    public String toString() {
        return "GraphStagePasses" + java.util.Arrays.toString(names);
    }
}
