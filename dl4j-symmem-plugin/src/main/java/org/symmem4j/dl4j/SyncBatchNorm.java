package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayer;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayerWithBackprop;
import org.deeplearning4j.nn.graph.vertex.impl.LayerVertex;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * Synchronized BatchNorm for the data-parallel wrapper ({@code SymmemParallelWrapper.Builder.syncBatchNorm(true)})
 * and the pipeline trainer's data-parallel axis ({@code PipelineParallelTrainerBuilder.syncBatchNorm(true)}): one
 * worker's side. Public for the plugin's pipeline package only; users turn it on through those builders. The user's
 * configuration stays DL4J's {@code BatchNormalization}; each worker's replica gets {@link SyncBatchNormLayer} in
 * place of DL4J's layer implementation (as PyTorch's {@code convert_sync_batchnorm} swaps modules), over the same
 * parameter and gradient views, so the parameters, the updater and checkpoints are unchanged and the user's model
 * never holds the synchronized layer.
 *
 * <p>The layers' collectives go through a communicator of their own on the worker's group (threads of one JVM,
 * processes, or machines), summed with ONE_SHOT where it runs (else the group's engine of the same guarantee), so
 * every worker gets the same bits and the replicas stay identical. Per BatchNorm layer and step: two all-reduces in
 * the forward pass (C + 1 and C float64, C the channels) and one in the backward pass (2C).
 *
 * <p>Not thread-safe: one per worker, used by its thread.
 */
public final class SyncBatchNorm implements AutoCloseable {

    private final Communicator comm;
    private final SymmetricMemory memory;
    private final long capacity;
    private final Map<Integer, Algorithm> algorithms = new HashMap<>();
    private boolean idle;
    private long nanos;

    private SyncBatchNorm(Communicator comm, SymmetricMemory memory, long capacity) {
        this.comm = comm;
        this.memory = memory;
        this.capacity = capacity;
    }

    /**
     * At {@code build()}: checks that the model has BatchNormalization layers and that the replicas can synchronize
     * every one.
     *
     * @param model the user's model
     * @throws IllegalArgumentException when the model has none, or one that the wrapper cannot swap (a frozen
     *         BatchNormalization, a subclass of DL4J's configuration with its own implementation)
     */
    static void check(ModelReplica model) {
        check(model.layerConfigurations());
    }

    /**
     * At {@code build()}: checks that the layers have BatchNormalization layers and that every one can be
     * synchronized.
     *
     * @param confs the model's layer configurations, in order (a layer's name, or else its index, names it)
     * @throws IllegalArgumentException when there is none, or one that cannot be swapped (a frozen
     *         BatchNormalization, a subclass of DL4J's configuration with its own implementation)
     */
    public static void check(List<org.deeplearning4j.nn.conf.layers.Layer> confs) {
        List<String> names = new ArrayList<>();
        for (int i = 0; i < confs.size(); i++) {
            org.deeplearning4j.nn.conf.layers.Layer conf = confs.get(i);
            String name = conf.getLayerName() != null ? conf.getLayerName() : String.valueOf(i);
            org.deeplearning4j.nn.conf.layers.Layer inner = conf instanceof FrozenLayer f ? f.getLayer()
                    : conf instanceof FrozenLayerWithBackprop f ? f.getUnderlying() : null;
            if (inner instanceof BatchNormalization) {
                throw new IllegalArgumentException("syncBatchNorm(true) with layer " + name + ": a frozen"
                        + " BatchNormalization (" + conf.getClass().getSimpleName() + "); expected plain"
                        + " BatchNormalization layers, which the replicas synchronize (fix: unfreeze it, or drop"
                        + " syncBatchNorm: a frozen BatchNorm in training still normalizes with its batch statistics)");
            }
            if (conf instanceof BatchNormalization) {
                if (conf.getClass() != BatchNormalization.class) {
                    throw new IllegalArgumentException("syncBatchNorm(true) with layer " + name + " of kind "
                            + conf.getClass().getName() + ", a subclass of DL4J's BatchNormalization configuration:"
                            + " expected DL4J's own BatchNormalization, whose implementation the replicas replace"
                            + " (fix: use org.deeplearning4j.nn.conf.layers.BatchNormalization, or drop syncBatchNorm)");
                }
                names.add(name);
            }
        }
        if (names.isEmpty()) {
            throw new IllegalArgumentException("syncBatchNorm(true): expected BatchNormalization layers to synchronize,"
                    + " found none in the model (fix: drop syncBatchNorm, or check that this is the model you meant)");
        }
    }

    /**
     * On the worker's thread, collectively with the other workers: opens the layers' communicator and puts
     * {@link SyncBatchNormLayer} in place of every DL4J BatchNormalization layer of {@code replica}.
     *
     * @param replica the worker's replica (its gradient view placed, its updater built)
     * @param group   the worker's data-parallel group
     * @return the worker's side, to close when the worker stops
     */
    static SyncBatchNorm install(ModelReplica replica, Group group) {
        return installSwaps(swaps(replica), group);
    }

    /**
     * On the rank's thread, collectively with the group's other ranks (which hold the same networks' layers): opens
     * one communicator on {@code group} and puts {@link SyncBatchNormLayer} in place of every DL4J
     * BatchNormalization layer of {@code networks}. The pipeline trainer calls it with a rank's stage networks, in
     * stage order, and the stage's data-parallel sub-group; the layers then all-reduce over that group in the order
     * in which they run, which must be the same on every rank of it.
     *
     * @param networks the networks whose BatchNormalization layers to swap (initialized, their gradient views placed)
     * @param group    the ranks whose batches the statistics merge
     * @return the rank's side, to close (collectively) when the rank stops
     * @throws IllegalArgumentException when the networks have no DL4J BatchNormalization layer
     */
    public static SyncBatchNorm install(List<org.deeplearning4j.nn.multilayer.MultiLayerNetwork> networks, Group group) {
        List<Swap> swaps = new ArrayList<>();
        for (org.deeplearning4j.nn.multilayer.MultiLayerNetwork network : networks) {
            swaps.addAll(mlnSwaps(network.getLayers()));
        }
        if (swaps.isEmpty()) {
            throw new IllegalArgumentException("syncBatchNorm(true): expected BatchNormalization layers to synchronize,"
                    + " found none in " + networks.size() + " networks (fix: drop syncBatchNorm, or check that these"
                    + " are the networks you meant)");
        }
        return installSwaps(swaps, group);
    }

    private static SyncBatchNorm installSwaps(List<Swap> swaps, Group group) {
        long channels = 1;
        for (Swap s : swaps) {
            channels = Math.max(channels, s.layer().getParam(BatchNormalizationParamInitializer.GLOBAL_MEAN).length());
        }
        long capacity = 2 * channels + 1;
        // a communicator of its own (the gradient's may be busy on the overlap thread while backprop runs these); on a
        // group across machines, the group's hierarchical one
        Communicator comm = Communicator.create(group);
        SymmetricMemory memory;
        try {
            memory = SymmetricMemory.allocate(group, Math.max(64, (capacity * 8 + 63) / 64 * 64));
        } catch (RuntimeException | Error e) {
            comm.abort("synchronized BatchNorm failed to start: " + e);
            comm.close();
            throw e;
        }
        SyncBatchNorm sync = new SyncBatchNorm(comm, memory, capacity);
        for (Swap s : swaps) {
            s.install(new SyncBatchNormLayer(s.layer(), sync, s.name()));
        }
        return sync;
    }

    /** One DL4J BatchNormalization implementation of a replica, and how to put another in its place. */
    private record Swap(org.deeplearning4j.nn.layers.normalization.BatchNormalization layer, String name,
                        java.util.function.Consumer<Layer> installer) {
        void install(Layer replacement) {
            installer.accept(replacement);
        }
    }

    private static List<Swap> swaps(ModelReplica replica) {
        List<Swap> swaps = new ArrayList<>();
        switch (replica) {
            case ModelReplica.Mln m -> swaps.addAll(mlnSwaps(m.net().getLayers()));
            case ModelReplica.Graph g -> {
                Layer[] layers = g.net().getLayers();
                for (int i = 0; i < layers.length; i++) {
                    if (isDl4jBatchNorm(layers[i])) {
                        int index = i;
                        String name = layers[i].conf().getLayer().getLayerName();
                        LayerVertex vertex = (LayerVertex) g.net().getVertex(name);
                        swaps.add(new Swap((org.deeplearning4j.nn.layers.normalization.BatchNormalization) layers[i],
                                name, l -> {
                                    layers[index] = l;
                                    vertex.setLayer(l);
                                }));
                    }
                }
            }
            default -> throw new IllegalArgumentException("syncBatchNorm(true) with a " + replica.model().getClass()
                    .getName() + ": expected a MultiLayerNetwork or ComputationGraph (fix: drop syncBatchNorm)");
        }
        if (swaps.isEmpty()) {
            throw org.symmem4j.parallel.Invariants.violated("syncBatchNorm: the replica has no DL4J BatchNormalization"
                    + " layer although build() found some in the model");
        }
        return swaps;
    }

    /** A MultiLayerNetwork's swaps: its layer array, which the network and its users read, takes the replacement. */
    private static List<Swap> mlnSwaps(Layer[] layers) {
        List<Swap> swaps = new ArrayList<>();
        for (int i = 0; i < layers.length; i++) {
            if (isDl4jBatchNorm(layers[i])) {
                int index = i;
                swaps.add(new Swap((org.deeplearning4j.nn.layers.normalization.BatchNormalization) layers[i],
                        nameOf(layers[i], i), l -> layers[index] = l));
            }
        }
        return swaps;
    }

    private static boolean isDl4jBatchNorm(Layer layer) {
        return layer.getClass() == org.deeplearning4j.nn.layers.normalization.BatchNormalization.class;
    }

    private static String nameOf(Layer layer, int index) {
        String name = layer.conf().getLayer().getLayerName();
        return name != null ? name : String.valueOf(index);
    }

    /** The next step's role: an idle worker (a short last step) adds zeros to every sum. */
    void beginStep(boolean idle) {
        this.idle = idle;
    }

    /** {@return whether this worker is idle in the current step} */
    boolean idle() {
        return idle;
    }

    /** {@return the nanoseconds spent in the layers' all-reduces since the last call, and resets them} */
    long takeNanos() {
        long n = nanos;
        nanos = 0;
        return n;
    }

    /**
     * Collective: sums {@code values} over the workers in place (float64, rank order: the same bits on every
     * worker).
     *
     * @param values this worker's contributions, overwritten with the sums
     * @param what   the pass and layer, for the exception a failed collective throws
     */
    void allReduce(double[] values, String what) {
        if (values.length > capacity) {
            throw org.symmem4j.parallel.Invariants.violated("synchronized BatchNorm: " + what + " sums " + values.length
                    + " values, more than the " + capacity + " its memory was sized for");
        }
        long start = System.nanoTime();
        MemorySegment local = memory.local();
        MemorySegment.copy(values, 0, local, ValueLayout.JAVA_DOUBLE, 0, values.length);
        Algorithm algorithm = algorithms.computeIfAbsent(values.length,
                n -> AlgorithmPolicy.oneShotWhereItRuns(comm, n, DType.FLOAT64, ReduceOp.SUM));
        comm.allReduce(memory, 0, values.length, DType.FLOAT64, ReduceOp.SUM, algorithm);
        MemorySegment.copy(local, ValueLayout.JAVA_DOUBLE, 0, values, 0, values.length);
        nanos += System.nanoTime() - start;
    }

    /** The worker failed: peers waiting in a BatchNorm all-reduce fail now instead of at the timeout. */
    void abort(String reason) {
        comm.abort(reason);
    }

    /** Collective, when the worker stops. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            comm.close();
        }
    }
}
