package org.symmem4j.dl4j;

import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Group;

/**
 * Training a {@link ComputationGraph} that starts from its configuration
 * ({@link SymmemParallelWrapper#builder(ComputationGraphConfiguration)}) with ZeRO stage 3, so that no process ever
 * holds the whole graph: what {@link ConfigurationStart} does for a {@code MultiLayerNetwork}.
 *
 * <p>At {@code build()} the stage-3 model state of each process is planned from the configuration alone
 * ({@link ModelStatePlan}) and checked against the process's caps before anything is allocated; the wrapper's graph is
 * then made hollow ({@link HollowNetworks#hollow(ComputationGraph)}). Each worker initialises its own blocks
 * ({@code FullySharded.initialiseOwnBlocks}) by replaying DL4J's {@code ComputationGraph.init()}
 * ({@link InitialisationReplay#replay(ComputationGraph, InitialisationReplay.Target)}: the vertices' draws in their
 * index order, each into its topological place) vertex by vertex into the worker's sparse parameter memory, giving
 * back the pages outside its blocks after each: bitwise the parameters of {@code new ComputationGraph(conf).init()}
 * with at most the own blocks plus one layer resident.
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

    /** DL4J's graph of {@code hollow}'s configuration over {@code full}, the gathered parameters (a consolidated save). */
    static ComputationGraph wholeOver(Graph hollow, INDArray full) {
        ComputationGraph net = new ComputationGraph(hollow.getConfiguration().clone());
        net.init(full, false);
        return net;
    }
}
