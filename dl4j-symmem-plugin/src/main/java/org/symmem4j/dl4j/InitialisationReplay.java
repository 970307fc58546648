package org.symmem4j.dl4j;

import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.Invariants;

/**
 * DL4J's parameter initialisation, replayed piece by piece into memory the caller chooses: how a process initialises
 * only its share of a model started from its configuration, yet bitwise as {@code new MultiLayerNetwork(conf).init()}
 * (or {@code new ComputationGraph(conf).init()}) initialises the whole vector, without ever holding it.
 *
 * <p>DL4J seeds ND4J's random generator (this thread's) with the configuration's seed and then instantiates every
 * layer (vertex) with {@code initializeParams=true}, each drawing its values from that one generator into its view
 * of the flat parameter vector. A network's layers draw in layer order, which is also their flat layout. A graph's
 * flat layout is its vertices in topological order, but DL4J instantiates (and so draws) them in their index order:
 * the network inputs first, then the configuration's vertices in the order they were added. The replay makes the
 * same draws in the same order, each into the view the {@link Target} gives for the piece's place in the flat
 * vector: a view of memory the caller keeps (its shard, its pipeline stages) or a scratch buffer for pieces it does
 * not keep. Users: ZeRO stage 3 ({@code FullySharded}: each worker's blocks, the other pages given back after each
 * piece) and the pipeline trainer ({@code org.symmem4j.dl4j.pipeline}: each rank's stages).
 */
public final class InitialisationReplay {

    private InitialisationReplay() {
    }

    /** Where each piece (a layer, or a vertex with parameters) of the flat parameter vector is drawn. */
    public interface Target {
        /**
         * The 1-D array of {@code length} elements the piece at {@code position} (layer index, or topological
         * position of a graph's vertex) draws into: elements {@code [offset, offset + length)} of the flat vector.
         * Called in DL4J's draw order, only for pieces with parameters.
         *
         * @param position the piece's place in the flat layout
         * @param offset   its first element in the flat vector
         * @param length   its element count, at least 1
         * @return a view of {@code length} elements, written by DL4J's initialiser
         */
        INDArray view(int position, long offset, long length);

        /**
         * Told once the piece drew its values into the view {@link #view} gave (before the next piece draws).
         *
         * @param position the piece's place in the flat layout
         * @param offset   its first element in the flat vector
         * @param length   its element count
         */
        default void drawn(int position, long offset, long length) {
        }
    }

    /**
     * Replays {@code net}'s {@code init()}: its layers' draws in layer order, from the generator seeded as DL4J seeds it.
     *
     * @param net    a network of the configuration (initialised or hollow, or not: only its configuration is read)
     * @param target where each layer draws
     */
    public static void replay(MultiLayerNetwork net, Target target) {
        MultiLayerConfiguration conf = net.getLayerWiseConfigurations();
        DataType type = conf.getDataType();
        Nd4j.getRandom().setSeed(net.getDefaultConfiguration().getSeed());
        long at = 0;
        for (int i = 0; i < conf.getConfs().size(); i++) {
            NeuralNetConfiguration c = conf.getConf(i);
            long n = c.getLayer().initializer().numParams(c);
            INDArray view = n == 0 ? null : target.view(i, at, n);
            c.getLayer().instantiate(c, List.of(), i, view, true, type); // DL4J's own draws; the layer object is dropped
            if (n > 0) {
                target.drawn(i, at, n);
            }
            at += n;
        }
    }

    /**
     * Replays {@code graph}'s {@code init()}: its vertices' draws in their index order, each into its topological place.
     *
     * @param graph  a graph whose vertices are cut (hollow, or a replica over memory nothing initialised): its vertex
     *               indices and topological order are read, and each vertex's configuration instantiated against it
     * @param target where each vertex with parameters draws
     */
    public static void replay(ComputationGraph graph, Target target) {
        ComputationGraphConfiguration conf = graph.getConfiguration();
        DataType type = conf.getDataType();
        GraphVertex[] vertices = graph.getVertices();
        int[] topological = graph.topologicalSortOrder();
        Map<String, org.deeplearning4j.nn.conf.graph.GraphVertex> confVertices = conf.getVertices();
        long[] offsetOf = new long[vertices.length];
        long[] lengthOf = new long[vertices.length];
        int[] positionOf = new int[vertices.length];
        long at = 0;
        for (int p = 0; p < topological.length; p++) {
            int v = topological[p];
            org.deeplearning4j.nn.conf.graph.GraphVertex c = confVertices.get(vertices[v].getVertexName());
            long n = c == null ? 0 : c.numParams(true); // network inputs have no configuration vertex
            offsetOf[v] = at;
            lengthOf[v] = n;
            positionOf[v] = p;
            at += n;
        }
        if (at != graph.numParams()) {
            throw Invariants.violated("the graph's vertices have " + at + " parameters; its flat vector "
                    + graph.numParams());
        }
        Nd4j.getRandom().setSeed(conf.getDefaultConfiguration().getSeed());
        int inputs = conf.getNetworkInputs().size();
        for (int v = inputs; v < vertices.length; v++) { // DL4J's instantiation order: vertex indices, not topological
            String name = vertices[v].getVertexName();
            long n = lengthOf[v];
            INDArray view = n == 0 ? null : target.view(positionOf[v], offsetOf[v], n);
            confVertices.get(name).instantiate(graph, name, v, view, true, type); // DL4J's own draws; the vertex is dropped
            if (n > 0) {
                target.drawn(positionOf[v], offsetOf[v], n);
            }
        }
    }
}
