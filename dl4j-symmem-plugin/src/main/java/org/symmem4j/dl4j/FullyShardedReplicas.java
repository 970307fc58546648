package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.parallel.Invariants;

/**
 * The network a {@link FullySharded} worker trains, built over its sparse parameter and gradient
 * views, and where DL4J runs each part of it in a step: the one place that knows whether the model
 * is a {@link MultiLayerNetwork} or a {@link ComputationGraph}.
 *
 * <p>Positions are the order DL4J runs forward: a MultiLayerNetwork's layer indices, a graph's
 * topological order ({@code topologicalSortOrder}, inputs and parameterless vertices included).
 * Backprop runs them in reverse. Each layer position with a {@link BackpropSignalPreProcessor}
 * ({@code hooked}) reports before its forward and after its backprop; the others (a layer fed by a
 * network input) report nothing and are gathered by {@link FullySharded} on their neighbours' hooks.
 * A graph's output layers are the exception DL4J makes: its training forward pass skips them and
 * their input is set (their forward hook runs) at the start of their backprop ({@code
 * LayerVertex.doBackward}); after backprop DL4J scores the batch with them, so their parameters
 * stay gathered until the gradient hook ({@code keep}).
 *
 * @param replica           the replica over the sparse views
 * @param layerAt           by position: the layer there, or null (an input, a merge or other vertex)
 * @param hooked            by position: whether the layer there reports forward and backprop
 * @param keep              by position: an output layer, used by DL4J's score after backprop
 * @param forwardInBackprop by position: a graph output layer, whose forward hook runs at its backprop
 * @param regularizationOrder positions in the order DL4J sums the layers' regularization terms
 * @param positionOfKey     a hook's key (layer index, or vertex name) to its position
 */
record FullyShardedReplicas(ModelReplica replica, Layer[] layerAt, boolean[] hooked, boolean[] keep,
                            boolean[] forwardInBackprop, int[] regularizationOrder, Map<String, Integer> positionOfKey) {

    /** What the stage-3 networks ask of their {@link FullySharded}: DL4J's regularization term, from the kept terms. */
    interface Terms {
        double regularizationScore(boolean backpropParamsOnly);
    }

    /**
     * A network of {@code source}'s configuration with the backprop signals of {@code progress}, over
     * {@code params} and {@code gradients} (wrapped, nothing written), and its layout.
     */
    static FullyShardedReplicas build(ModelReplica source, BackpropProgress progress, INDArray params, INDArray gradients) {
        return switch (source) {
            case ModelReplica.Mln m -> multiLayer(m, progress, params, gradients);
            case ModelReplica.Graph g -> graph(g, progress, params, gradients);
        };
    }

    private static FullyShardedReplicas multiLayer(ModelReplica.Mln source, BackpropProgress progress, INDArray params,
                                                   INDArray gradients) {
        MultiLayerConfiguration conf = source.net().getLayerWiseConfigurations().clone();
        Set<String> hookedKeys = ModelReplica.Mln.installBackpropSignals(conf, progress);
        Network net = new Network(conf);
        // DL4J's views over the sparse memory: init(params, false) wraps it without initializing (nothing written)
        net.init(params, false);
        net.setBackpropGradientsViewArray(gradients);
        ModelReplica.setFlattenedGradients(net, MultiLayerNetwork.class, gradients);
        // a tensor-parallel rank's stage-3 network runs its layers' collectives over the source's tp group
        TensorParallel.copyAttachments(source.net(), net);
        Layer[] layers = net.getLayers();
        int n = layers.length;
        boolean[] hooked = new boolean[n];
        boolean[] keep = new boolean[n];
        int[] order = new int[n];
        Map<String, Integer> positions = new HashMap<>();
        for (int i = 0; i < n; i++) {
            hooked[i] = hookedKeys.contains(Integer.toString(i));
            positions.put(Integer.toString(i), i);
            order[i] = i; // MultiLayerNetwork.calcRegularizationScore: layer by layer
        }
        keep[n - 1] = true; // DL4J scores the batch with the output layer after backprop
        return new FullyShardedReplicas(new ModelReplica.Mln(net), layers.clone(), hooked, keep, new boolean[n], order,
                Map.copyOf(positions));
    }

    private static FullyShardedReplicas graph(ModelReplica.Graph source, BackpropProgress progress, INDArray params,
                                              INDArray gradients) {
        ComputationGraphConfiguration conf = source.net().getConfiguration().clone();
        Set<String> hookedKeys = ModelReplica.Graph.installBackpropSignals(conf, progress);
        GraphNetwork net = new GraphNetwork(conf);
        net.init(params, false);
        net.setBackpropGradientsViewArray(gradients);
        ModelReplica.setFlattenedGradients(net, ComputationGraph.class, gradients);
        // a tensor-parallel rank's stage-3 network runs its layers' collectives over the source's tp group
        TensorParallel.copyAttachments(source.net(), net);
        int[] topological = net.topologicalSortOrder();
        GraphVertex[] vertices = net.getVertices();
        int n = topological.length;
        Layer[] layerAt = new Layer[n];
        boolean[] hooked = new boolean[n];
        boolean[] keep = new boolean[n];
        boolean[] forwardInBackprop = new boolean[n];
        Map<String, Integer> positions = new HashMap<>();
        Map<Layer, Integer> positionOfLayer = new IdentityHashMap<>();
        List<String> outputs = conf.getNetworkOutputs();
        for (int i = 0; i < n; i++) {
            GraphVertex v = vertices[topological[i]];
            positions.put(v.getVertexName(), i);
            if (v.hasLayer()) {
                layerAt[i] = v.getLayer();
                positionOfLayer.put(v.getLayer(), i);
                hooked[i] = hookedKeys.contains(v.getVertexName());
                // ComputationGraph.computeGradientAndScore: the forward pass skips the outputs, backprop sets their
                // input, the score reads them after backprop
                keep[i] = outputs.contains(v.getVertexName());
                forwardInBackprop[i] = keep[i];
            }
        }
        List<Integer> order = new ArrayList<>();
        for (Layer l : net.getLayers()) { // ComputationGraph.calcRegularizationScore: in its layers array's order
            Integer at = positionOfLayer.get(l);
            if (at == null) {
                throw Invariants.violated("layer " + l.conf().getLayer().getLayerName() + " belongs to no vertex");
            }
            order.add(at);
        }
        return new FullyShardedReplicas(new ModelReplica.Graph(net), layerAt, hooked, keep, forwardInBackprop,
                order.stream().mapToInt(Integer::intValue).toArray(), Map.copyOf(positions));
    }

    /** Sets the stage-3 owner whose kept terms the network's {@code calcRegularizationScore} returns. */
    void attach(Terms owner) {
        switch (replica) {
            case ModelReplica.Mln m -> ((Network) m.net()).owner = owner;
            case ModelReplica.Graph g -> ((GraphNetwork) g.net()).owner = owner;
        }
    }

    /** A stage-3 MultiLayerNetwork: DL4J's, with the regularization term read from the terms kept during the step. */
    static final class Network extends MultiLayerNetwork {
        private static final long serialVersionUID = 1L;
        private transient Terms owner;

        Network(MultiLayerConfiguration conf) {
            super(conf);
        }

        @Override
        public double calcRegularizationScore(boolean backpropParamsOnly) {
            return owner == null ? super.calcRegularizationScore(backpropParamsOnly)
                    : owner.regularizationScore(backpropParamsOnly);
        }
    }

    /** A stage-3 ComputationGraph: DL4J's, with the regularization term read from the terms kept during the step. */
    static final class GraphNetwork extends ComputationGraph {
        private static final long serialVersionUID = 1L;
        private transient Terms owner;

        GraphNetwork(ComputationGraphConfiguration conf) {
            super(conf);
        }

        @Override
        public double calcRegularizationScore(boolean backpropParamsOnly) {
            return owner == null ? super.calcRegularizationScore(backpropParamsOnly)
                    : owner.regularizationScore(backpropParamsOnly);
        }
    }
}
