package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.updater.MultiLayerUpdater;
import org.deeplearning4j.nn.updater.graph.ComputationGraphUpdater;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.memory.ReservedMemory;

/**
 * DL4J networks whose arrays hold no memory: layers, flat parameter and gradient views and DL4J's updater, all over
 * reserved address space ({@link ReservedMemory}) that is never written. Such a network has everything DL4J derives
 * from a configuration (the layer objects, the flat parameter layout, the updater's blocks and state layout, mask
 * propagation, input types) without a single element: what ZeRO stage 3's wrapper model is
 * ({@link SymmemParallelWrapper#builder(org.deeplearning4j.nn.conf.MultiLayerConfiguration)}) and what a pipeline
 * rank holds of the stages another rank trains ({@code org.symmem4j.dl4j.pipeline.PipelineParallelTrainer} in group
 * mode). Reading an unwritten reserved page yields zeros; writing one makes it resident, so code that holds a hollow
 * network must never write its arrays (and {@link Reservation#residentBytes()} tells whether something did).
 */
public final class HollowNetworks {

    private HollowNetworks() {
    }

    /**
     * The reserved memory under a hollow network's arrays: DL4J's arrays do not keep it reachable, so whoever holds
     * the network holds this too (the reservations are unmapped once it is unreachable).
     */
    public static final class Reservation {
        private final MemorySegment[] segments;
        private final long parameters;

        private Reservation(MemorySegment[] segments, long parameters) {
            this.segments = segments;
            this.parameters = parameters;
        }

        /**
         * The pages of the reservations that hold memory now ({@code mincore}): 0 while nothing wrote them, at most
         * a page each where DL4J touched the first element.
         *
         * @return resident bytes
         */
        public long residentBytes() {
            long resident = 0;
            for (MemorySegment s : segments) {
                resident += ReservedMemory.residentBytes(s);
            }
            return resident;
        }

        /**
         * The parameter count the network's views cover.
         *
         * @return the parameters the network has, though it holds none of them
         */
        public long parameters() {
            return parameters;
        }
    }

    /**
     * The parameter count DL4J's {@code init()} allocates for {@code conf}: the layers' initialisers' counts, in order.
     *
     * @param conf a network configuration
     * @return its parameter count, computed without allocating anything
     */
    public static long parameterCount(MultiLayerConfiguration conf) {
        long n = 0;
        for (int i = 0; i < conf.getConfs().size(); i++) {
            NeuralNetConfiguration c = conf.getConf(i);
            n += c.getLayer().initializer().numParams(c);
        }
        return n;
    }

    /**
     * Makes {@code net}, not yet initialised, hollow: DL4J initialises it over reserved memory with
     * {@code initializeParams=false} (it only cuts the views), its gradient view and updater state are reserved too.
     * Reads none of it either.
     *
     * @param net a network of its configuration, not initialised
     * @return the reservation, to keep as long as the network
     * @throws IllegalStateException when {@code net} is initialised already, or DL4J wrote the reserved arrays (a
     *                               DL4J other than 1.0.0-M2.1)
     */
    public static Reservation hollow(MultiLayerNetwork net) {
        if (net.getLayers() != null) {
            throw new IllegalStateException("a hollow network must be made before init(): this one is initialised already"
                    + " (fix: pass new MultiLayerNetwork(conf) without calling init())");
        }
        MultiLayerConfiguration conf = net.getLayerWiseConfigurations();
        return hollow(conf.getDataType(), parameterCount(conf), params -> net.init(params, false), gradientView -> {
            net.setBackpropGradientsViewArray(gradientView);
            ModelReplica.setFlattenedGradients(net, MultiLayerNetwork.class, gradientView);
        }, net::getLayers, state -> net.setUpdater(new MultiLayerUpdater(net, state)));
    }

    /**
     * The parameter count DL4J's {@code ComputationGraph.init()} allocates for {@code conf}: its vertices' counts.
     *
     * @param conf a graph configuration
     * @return its parameter count, computed without allocating anything
     */
    public static long parameterCount(ComputationGraphConfiguration conf) {
        long n = 0;
        for (org.deeplearning4j.nn.conf.graph.GraphVertex v : conf.getVertices().values()) {
            v.setDataType(conf.getDataType()); // as ComputationGraph.init() does before it counts
            n += v.numParams(true);
        }
        return n;
    }

    /**
     * Makes {@code graph}, not yet initialised, hollow, as {@link #hollow(MultiLayerNetwork)} does a network: DL4J
     * cuts its vertices' views over reserved memory ({@code init(params, false)}), the gradient view and the updater
     * state are reserved too. Reads none of it either.
     *
     * @param graph a graph of its configuration, not initialised
     * @return the reservation, to keep as long as the graph
     * @throws IllegalStateException when {@code graph} is initialised already, or DL4J wrote the reserved arrays (a
     *                               DL4J other than 1.0.0-M2.1)
     */
    public static Reservation hollow(ComputationGraph graph) {
        if (graph.getVertices() != null) {
            throw new IllegalStateException("a hollow graph must be made before init(): this one is initialised already"
                    + " (fix: pass new ComputationGraph(conf) without calling init())");
        }
        ComputationGraphConfiguration conf = graph.getConfiguration();
        return hollow(conf.getDataType(), parameterCount(conf), params -> graph.init(params, false), gradientView -> {
            graph.setBackpropGradientsViewArray(gradientView);
            ModelReplica.setFlattenedGradients(graph, ComputationGraph.class, gradientView);
        }, graph::getLayers, state -> graph.setUpdater(new ComputationGraphUpdater(graph, state)));
    }

    /**
     * A network of {@code count} parameters made hollow: {@code init} cuts the views over reserved parameter memory
     * ({@code initializeParams=false}: DL4J writes nothing, what FullySharded.open does over symmetric memory),
     * {@code gradients} takes the reserved gradient view, and {@code updater} DL4J's updater over a reserved state view,
     * sized from the layers' parameters as {@code getUpdater()} sizes it (DL4J then only cuts its blocks' views).
     */
    private static Reservation hollow(DataType type, long count, Consumer<INDArray> init, Consumer<INDArray> gradients,
                                      Supplier<Layer[]> layers, Consumer<INDArray> updater) {
        Arena arena = Arena.ofAuto();
        MemorySegment params = ReservedMemory.reserve(Math.max(64, count * type.width()), arena);
        MemorySegment gradientMemory = ReservedMemory.reserve(Math.max(64, count * type.width()), arena);
        init.accept(ModelReplica.arrayOver(params, type, count));
        gradients.accept(ModelReplica.arrayOver(gradientMemory, type, count));
        long state = stateCount(layers.get());
        MemorySegment stateMemory = ReservedMemory.reserve(Math.max(64, state * type.width()), arena);
        if (state > 0) {
            updater.accept(ModelReplica.arrayOver(stateMemory, type, state).reshape(state));
        }
        return checked(new Reservation(new MemorySegment[] {params, gradientMemory, stateMemory}, count));
    }

    /** The updater state elements DL4J's updater keeps for {@code layers}, as {@code getUpdater()} sizes its view. */
    private static long stateCount(Layer[] layers) {
        long state = 0;
        for (Layer layer : layers) {
            for (Map.Entry<String, INDArray> e : layer.paramTable(false).entrySet()) {
                state += layer.getConfig().getUpdaterByParam(e.getKey()).stateSize(e.getValue().length());
            }
        }
        return state;
    }

    /** {@code reservation}, after checking that DL4J wrote none of it (a page each where it touched a first element). */
    private static Reservation checked(Reservation reservation) {
        long resident = reservation.residentBytes();
        if (resident > 3 * 4096L) {
            throw new IllegalStateException("the hollow network holds " + resident + " bytes: DL4J wrote its reserved"
                    + " arrays (a DL4J other than 1.0.0-M2.1?); expected none (fix: use DL4J 1.0.0-M2.1, the version symmem4j is"
                    + " built against)");
        }
        return reservation;
    }
}
