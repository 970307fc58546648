package org.symmem4j.dl4j.pipeline;

import java.util.Objects;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;

/**
 * The network of a branched graph's layer vertices in topological order ({@link GraphWiring}): the graph's flat
 * parameter, gradient and updater layout, which the pipeline cuts into stages, copies and checkpoints as any network;
 * what it computes is the graph's, which the stages run from {@link #wiring()} ({@link GraphStagePasses}). Never
 * trained or evaluated on its own: its layers do not form a chain.
 */
final class GraphLayerNetwork extends MultiLayerNetwork {

    private final transient GraphWiring wiring;

    GraphLayerNetwork(MultiLayerConfiguration conf, GraphWiring wiring) {
        super(conf);
        this.wiring = Objects.requireNonNull(wiring, "wiring");
    }

    /** The graph's wiring: which vertex reads which, and where stages may start. */
    GraphWiring wiring() {
        return wiring;
    }

    /** The wiring of {@code network} when it stands for a branched graph, else null. */
    static GraphWiring wiringOf(MultiLayerNetwork network) {
        return network instanceof GraphLayerNetwork g ? g.wiring : null;
    }
}
