package org.symmem4j.dl4j;

import java.util.List;
import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.memory.ReservedMemory;

/**
 * Training that starts from a {@link MultiLayerConfiguration} ({@link SymmemParallelWrapper#builder(MultiLayerConfiguration)})
 * rather than from an initialised network, so that with ZeRO stage 3 no process ever holds the whole model.
 *
 * <p>The wrapper's model is a {@link Network} of the configuration. At {@code build()} the memory each worker's
 * stage would hold is planned from the configuration alone ({@link ModelStatePlan}) and checked against the
 * process's caps, before anything is allocated; then the model is initialised:
 * <ul>
 *   <li>plain data parallelism and stages 1 and 2: by DL4J's own {@code init()} (each replica is whole anyway);</li>
 *   <li>stage 3 ({@link ZeroStage#PARAMETERS}): <em>hollow</em>. Its parameter vector, gradient view and updater
 *       state are DL4J arrays over reserved memory ({@link ReservedMemory}) that nothing ever writes, so they hold no
 *       memory: DL4J gets the layer objects, the flat layout and its updater blocks (what the workers' layout is
 *       read from) without a single element. Each worker then initialises its shard layer by layer
 *       ({@link FullySharded#initialiseOwnBlocks}): DL4J's own initialiser of layer {@code i} writes the layer into
 *       the worker's sparse parameter memory (its working buffer), the worker keeps its block and gives the other
 *       pages back, and the next layer follows, from the one RNG that DL4J's {@code init()} seeds with the
 *       configuration's seed and draws from in layer order. So the parameters are bitwise those of
 *       {@code new MultiLayerNetwork(conf).init()}, and a worker holds at most its blocks plus one layer.</li>
 * </ul>
 * The hollow model's counters follow the replicas; its parameters stay in the workers' shards
 * ({@link SymmemParallelWrapper#gatherParameters()} gathers them on request).
 */
final class ConfigurationStart {

    private ConfigurationStart() {
    }

    /** The wrapper's model when built from a configuration; hollow for stage 3 (see the class comment). */
    static final class Network extends MultiLayerNetwork {
        private static final long serialVersionUID = 1L;
        private transient boolean hollow;
        /** The reservations under the hollow arrays: kept reachable as long as the network (DL4J's pointers do not). */
        private transient HollowNetworks.Reservation reserved;

        Network(MultiLayerConfiguration conf) {
            super(conf);
        }

        boolean hollow() {
            return hollow;
        }
    }

    /** Whether {@code model} is a stage-3 model started from a configuration: its arrays hold nothing. */
    static boolean isHollow(ModelReplica model) {
        return model.model() instanceof Network n && n.hollow()
                || model.model() instanceof GraphConfigurationStart.Graph g && g.hollow();
    }

    /**
     * A hollow model's whole parameter vector, gathered from the workers' stage-3 shards: in group mode by the
     * rank's one worker (collective), in thread mode from every worker's own blocks.
     */
    static INDArray gather(ModelReplica model, List<FullySharded> shards, boolean groupMode) {
        INDArray full = org.nd4j.linalg.factory.Nd4j.create(model.params().dataType(), model.params().length());
        if (groupMode) {
            shards.getFirst().gatherInto(full);
        } else {
            for (FullySharded fs : shards) {
                fs.copyOwnBlocksTo(full);
            }
        }
        return full;
    }

    /** The parameter count DL4J's {@code init()} allocates for {@code conf}: the layers' initialisers' counts, in order. */
    static long parameterCount(MultiLayerConfiguration conf) {
        return HollowNetworks.parameterCount(conf);
    }

    /**
     * Makes {@code net} (not initialised) a hollow network ({@link HollowNetworks#hollow}): layers, flat parameter and
     * gradient views and DL4J's updater, all over reserved memory that is never written. Reads none of it either.
     */
    static void makeHollow(Network net) {
        net.reserved = HollowNetworks.hollow(net);
        net.hollow = true;
    }

    /** The caps the process runs under, as a plan checks them. */
    record Caps(long nd4jAvailable, String nd4jSource, long symmetric, String symmetricSource) {

        /** The system property that caps a process's resident symmetric memory ({@link Configuration#MAX_SYMMETRIC_BYTES}). */
        static final String SYMMETRIC_PROPERTY = Configuration.MAX_SYMMETRIC_BYTES.property();

        /**
         * JavaCPP's {@code maxBytes} less what ND4J holds already, and {@link Configuration#MAX_SYMMETRIC_BYTES}
         * (unbounded when unset).
         *
         * @throws IllegalArgumentException when the symmetric cap is not a byte count
         */
        static Caps ofThisProcess() {
            // only when the user set it: JavaCPP's default (the heap's size) is no statement about ND4J's arrays, which
            // ND4J's CPU backend allocates without JavaCPP counting them (so JavaCPP would not enforce it either)
            boolean set = System.getProperty("org.bytedeco.javacpp.maxbytes") != null
                    || System.getProperty("org.bytedeco.javacpp.maxBytes") != null;
            long max = set ? Pointer.maxBytes() : 0;
            long nd4j = max <= 0 ? Long.MAX_VALUE : Math.max(0, max - Pointer.totalBytes());
            Long cap = Configuration.MAX_SYMMETRIC_BYTES.get();
            return new Caps(nd4j, set ? "-Dorg.bytedeco.javacpp.maxbytes=" + max + " less " + Pointer.totalBytes()
                    + " JavaCPP counts as held now" : "-Dorg.bytedeco.javacpp.maxbytes unset",
                    cap == null ? Long.MAX_VALUE : cap, SYMMETRIC_PROPERTY + (cap == null ? " unset" : "=" + cap));
        }
    }
}
