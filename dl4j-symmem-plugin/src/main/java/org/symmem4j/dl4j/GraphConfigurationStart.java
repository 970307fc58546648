package org.symmem4j.dl4j;

import java.util.Map;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.parallel.Group;

/**
 * Training a {@link ComputationGraph} that starts from its configuration
 * ({@link SymmemParallelWrapper#builder(ComputationGraphConfiguration)}) with ZeRO stage 3, so that no process ever
 * holds the whole graph: what {@link ConfigurationStart} does for a {@code MultiLayerNetwork}.
 *
 * <p>At {@code build()} the stage-3 model state of each process is planned from the configuration alone
 * ({@link ModelStatePlan}) and checked against the process's caps before anything is allocated; the wrapper's graph is
 * then made hollow ({@link HollowNetworks#hollow(ComputationGraph)}). Each worker initialises its own blocks
 * ({@link #initialiseOwnBlocks}) as DL4J's {@code ComputationGraph.init()} initialises the whole vector: the flat
 * layout is the vertices in topological order, but DL4J instantiates (and so draws the random values of) the vertices
 * in their index order, the network inputs first and then the configuration's vertices in the order they were added,
 * from the one generator it seeds with the configuration's seed. Doing the same, vertex by vertex into the worker's
 * sparse parameter memory and giving back the pages outside its blocks after each, gives bitwise the parameters of
 * {@code new ComputationGraph(conf).init()} with at most the own blocks plus one layer resident.
 *
 * <p>What stage 3 cannot drive ({@link FullySharded#check}) is refused at {@code build()}. Only stage 3 starts a graph
 * from its configuration: the other stages hold a whole replica per worker anyway
 * (build the graph and use {@link SymmemParallelWrapper#builder(ComputationGraph)}).
 */
final class GraphConfigurationStart {

    private GraphConfigurationStart() {
    }

    /** The wrapper's model when a graph is built from its configuration: hollow once {@link #start} ran. */
    static final class Graph extends ComputationGraph {
        private static final long serialVersionUID = 1L;
        private transient boolean hollow;
        /** The reservations under the hollow arrays: kept reachable as long as the graph (DL4J's pointers do not). */
        private transient HollowNetworks.Reservation reserved;

        Graph(ComputationGraphConfiguration conf) {
            super(conf);
        }

        boolean hollow() {
            return hollow;
        }
    }

    /** Receives each vertex's values once DL4J drew them: its position (topological), its elements in the flat vector. */
    interface Drawn {
        void drawn(int position, long offset, long length);
    }

    /**
     * Refuses what a graph started from its configuration cannot do, before anything is allocated: a stage other than
     * stage 3, and a stage-3 model state over this process's caps; then makes {@code graph} hollow.
     */
    static void start(Graph graph, ZeroStage sharding, int workers, int shardGroupSize, Group group, boolean gpuMode) {
        if (sharding != ZeroStage.PARAMETERS) {
            throw new IllegalArgumentException("builder(ComputationGraphConfiguration) with sharding=" + sharding
                    + ": expected sharding(ZeroStage.PARAMETERS), the stage whose workers each initialise and hold only"
                    + " their shard; with " + (sharding == null ? "plain data parallelism" : "stage " + sharding)
                    + " every worker holds a whole replica anyway (fix: add .sharding(ZeroStage.PARAMETERS), or build the"
                    + " graph and start from it: ComputationGraph g = new ComputationGraph(conf); g.init();"
                    + " SymmemParallelWrapper.builder(g))");
        }
        if (gpuMode) {
            throw new IllegalArgumentException("builder(ComputationGraphConfiguration) in GPU mode (group(...) on transport="
                    + group.transport().name() + "): expected a host transport, where stage 3 runs (fix: train on a"
                    + " group on a host transport)");
        }
        int local = group == null ? workers : 1;
        int shardOver = shardGroupSize > 0 ? shardGroupSize : workers; // hybrid sharding: blocks cut over the shard group
        ModelStatePlan plan = ModelStatePlan.of(graph.getConfiguration(), sharding, shardOver, local, group != null);
        plan.check(ConfigurationStart.Caps.ofThisProcess(), null);
        graph.reserved = HollowNetworks.hollow(graph);
        graph.hollow = true;
        // what stage 3 cannot drive (a frozen vertex, a vertex with parameters but no layer, truncated BPTT), refused
        // at build() from the hollow graph's vertices rather than at the first fit: nothing is written either way
        FullySharded.check(ModelReplica.of(graph));
    }

    /**
     * Draws the parameters of {@code net}'s vertices as DL4J's {@code ComputationGraph.init()} does, into
     * {@code net}'s flat parameter view (a worker's sparse parameter memory), telling {@code drawn} after each vertex
     * so that it gives back what the worker does not keep before the next vertex draws (see the class comment).
     *
     * @param net a stage-3 replica of the graph: its views cut, nothing initialised
     */
    static void initialiseOwnBlocks(ComputationGraph net, Drawn drawn) {
        ComputationGraphConfiguration conf = net.getConfiguration();
        DataType type = conf.getDataType();
        long count = net.params().length();
        INDArray flat = net.params().reshape(count); // as DL4J's init cuts its flat vector: 1-D, a view per vertex
        GraphVertex[] vertices = net.getVertices();
        int[] topological = net.topologicalSortOrder();
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
        if (at != count) {
            throw org.symmem4j.parallel.Invariants.violated("the graph's vertices have " + at + " parameters; its flat"
                    + " vector " + count);
        }
        org.nd4j.linalg.factory.Nd4j.getRandom().setSeed(conf.getDefaultConfiguration().getSeed());
        int inputs = conf.getNetworkInputs().size();
        for (int v = inputs; v < vertices.length; v++) { // DL4J's instantiation order: vertex indices, not topological
            String name = vertices[v].getVertexName();
            long n = lengthOf[v];
            INDArray view = n == 0 ? null : flat.get(NDArrayIndex.interval(offsetOf[v], offsetOf[v] + n));
            confVertices.get(name).instantiate(net, name, v, view, true, type); // DL4J's own draws; the vertex is dropped
            if (n > 0) {
                drawn.drawn(positionOf[v], offsetOf[v], n);
            }
        }
    }

    /** DL4J's graph of {@code hollow}'s configuration over {@code full}, the gathered parameters (a consolidated save). */
    static ComputationGraph wholeOver(Graph hollow, INDArray full) {
        ComputationGraph net = new ComputationGraph(hollow.getConfiguration().clone());
        net.init(full, false);
        return net;
    }
}
