package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.LayerVertex;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.learning.config.IUpdater;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.DType;

/**
 * The model state one process of a data-parallel run holds, planned from the configuration alone before anything is
 * allocated ({@link SymmemParallelWrapper#builder(MultiLayerConfiguration)}), per ZeRO stage: where each part lives
 * (ND4J's off-heap arrays, which JavaCPP counts and caps, or symmetric memory, which is mapped shared memory that
 * JavaCPP does not see) and how large it is.
 *
 * <ul>
 *   <li>plain, stages 1 and 2: the wrapper's model (parameters, gradient view, updater state: DL4J's {@code init()})
 *       and each local worker's replica (parameters; gradient view, in symmetric memory in group mode; updater state,
 *       1/N of it sharded);</li>
 *   <li>stage 3: per local worker its blocks (1/N of every layer; with hybrid sharding 1/S, S the shard group's
 *       size) of the parameters and the gradient (symmetric),
 *       its shard of the updater state (ND4J), and the working set: the two largest layers' parameters (the one
 *       computing and the one prefetched) and gradients (the one written and the one reduce-scattered), plus the
 *       pages two units' boundaries share; the wrapper's model is hollow (nothing).</li>
 * </ul>
 * Activations and DL4J's workspaces are not model state and are not counted.
 *
 * @param stage        the stage, null for plain data parallelism
 * @param workers      workers of the run (N)
 * @param shardGroupSize hybrid sharding's workers per shard group (S, the blocks cut over S), 0 for none
 * @param localWorkers workers in this process (all of them as threads, 1 in group mode)
 * @param groupMode    whether the gradient view lives in symmetric memory (one process per worker)
 * @param nd4jBytes    ND4J bytes this process holds for model state
 * @param symmetricBytes resident symmetric bytes this process holds for model state (at most)
 * @param parts        what makes up the two sums, for messages and reports
 */
record ModelStatePlan(ZeroStage stage, int workers, int shardGroupSize, int localWorkers, boolean groupMode,
                      long nd4jBytes, long symmetricBytes, String parts) {

    private static final long PAGE = 4096;

    /** The plan of {@code conf} trained with {@code stage} by {@code workers} workers, {@code localWorkers} here. */
    static ModelStatePlan of(MultiLayerConfiguration conf, ZeroStage stage, int workers, int localWorkers,
                             boolean groupMode) {
        return of(conf, stage, workers, 0, localWorkers, groupMode);
    }

    /**
     * {@link #of(MultiLayerConfiguration, ZeroStage, int, int, boolean)} with hybrid sharding: stage 3's blocks cut
     * over shard groups of {@code shardGroupSize} workers (0, or {@code workers}: over every worker).
     */
    static ModelStatePlan of(MultiLayerConfiguration conf, ZeroStage stage, int workers, int shardGroupSize,
                             int localWorkers, boolean groupMode) {
        return of(conf.getConfs(), conf.getDataType(), stage, workers, shardGroupSize, localWorkers, groupMode);
    }

    /** The plan of graph {@code conf}: its layer vertices' parameters, as {@link #of(MultiLayerConfiguration, ZeroStage, int, int, boolean)}. */
    static ModelStatePlan of(ComputationGraphConfiguration conf, ZeroStage stage, int workers, int localWorkers,
                             boolean groupMode) {
        List<NeuralNetConfiguration> layers = new ArrayList<>();
        for (org.deeplearning4j.nn.conf.graph.GraphVertex v : conf.getVertices().values()) {
            if (v instanceof LayerVertex l) {
                layers.add(l.getLayerConf());
            }
        }
        return of(layers, conf.getDataType(), stage, workers, 0, localWorkers, groupMode);
    }

    private static ModelStatePlan of(List<NeuralNetConfiguration> confs, DataType type, ZeroStage stage, int workers,
                                     int shardGroupSize, int localWorkers, boolean groupMode) {
        int hybrid = stage == ZeroStage.PARAMETERS && shardGroupSize > 0 && shardGroupSize < workers ? shardGroupSize : 0;
        int cut = hybrid > 0 ? hybrid : workers; // the ranks stage 3's blocks (and the state shards) are cut over
        int width = type.width();
        DType dtype = ModelReplica.dtypeOf(type);
        long params = 0;
        long state = 0;
        long stateShard = 0;
        long ownParams = 0;
        long largest = 0;
        long second = 0;
        int units = 0;
        List<Long> sizes = new ArrayList<>();
        for (NeuralNetConfiguration c : confs) {
            long n = c.getLayer().initializer().numParams(c);
            sizes.add(n);
            if (n == 0) {
                continue;
            }
            units++;
            params += n;
            long k = statesPerParam(c);
            state += k * n;
            ShardPartition part = ShardPartition.of(n, cut, dtype);
            long most = 0;
            for (int r = 0; r < cut; r++) {
                most = Math.max(most, part.end(r) - part.start(r));
            }
            ownParams += most;
            stateShard += k * most;
            if (n > largest) {
                second = largest;
                largest = n;
            } else if (n > second) {
                second = n;
            }
        }
        long p = params * width;
        long s = state * width;
        if (stage == ZeroStage.PARAMETERS) {
            long own = ownParams * width;
            long working = 2 * (largest + second) * width + 4L * units * PAGE;
            long sym = localWorkers * (2 * own + working);
            long nd = localWorkers * stateShard * width;
            return new ModelStatePlan(stage, workers, hybrid, localWorkers, groupMode, nd, sym, localWorkers
                    + " x (parameter blocks " + own + " + gradient blocks " + own + " + updater shard " + stateShard * width
                    + " + working set of the two largest layers " + working + ") bytes; the model itself: nothing");
        }
        long replicaState = stage == null ? s : ceilDiv(state, workers) * width;
        long nd = (2 * p + s) + localWorkers * (p + (groupMode ? 0 : p) + replicaState);
        long sym = groupMode ? localWorkers * p : 0;
        return new ModelStatePlan(stage, workers, 0, localWorkers, groupMode, nd, sym, "the model (parameters " + p
                + " + gradient " + p + " + updater state " + s + ") + " + localWorkers + " x replica (parameters " + p
                + " + gradient " + p + (groupMode ? " in symmetric memory" : "") + " + updater state " + replicaState
                + (stage == null ? "" : ", its shard") + ") bytes");
    }

    /** DL4J's updaters keep k state elements per parameter ({@link UpdaterLayout}); k of the layer's first parameter's. */
    private static long statesPerParam(NeuralNetConfiguration c) {
        if (!(c.getLayer() instanceof BaseLayer layer)) {
            return 0;
        }
        long most = 0;
        for (String key : c.getLayer().initializer().paramKeys(c.getLayer())) {
            IUpdater u = layer.getUpdaterByParam(key);
            most = Math.max(most, u == null ? 0 : u.stateSize(1));
        }
        return most;
    }

    private static long ceilDiv(long a, long b) {
        return (a + b - 1) / b;
    }

    /**
     * Throws, before anything is allocated, when this plan does not fit {@code caps}: what the stage needs, what the
     * cap leaves, and the fix (ZeRO stage 3 when a replica does not fit, a larger cap otherwise).
     *
     * @param stage3 the plan of the same run with stage 3, for the message; null when this is it
     */
    void check(ConfigurationStart.Caps caps, ModelStatePlan stage3) {
        String what = stage == null ? "plain data parallelism" : "sharding(" + stage + ")" + (shardGroupSize == 0 ? ""
                : " with shardGroupSize=" + shardGroupSize + " of workers=" + workers + " (each worker keeps 1/"
                + shardGroupSize + " of the model state)");
        String fix = shardGroupSize > 0 ? "fix: a larger shardGroupSize (up to workers=" + workers + ", where each"
                + " worker keeps 1/" + workers + "), a larger cap, or a smaller model"
                : stage3 == null ? "fix: a larger cap, more workers, or a smaller model"
                : "fix: sharding(ZeroStage.PARAMETERS), where each worker keeps 1/" + workers + " of the model state: this"
                + " process would need " + stage3.nd4jBytes() + " ND4J bytes and " + stage3.symmetricBytes()
                + " symmetric bytes";
        if (nd4jBytes > caps.nd4jAvailable()) {
            // error-message: the text ends with fix, built above for both refusals
            throw new IllegalStateException(what + " does not fit this process's memory cap: expected model state of at"
                    + " most " + caps.nd4jAvailable() + " ND4J bytes (" + caps.nd4jSource() + "); found it needs "
                    + nd4jBytes + " (" + parts + ") before any activation (" + fix + ")");
        }
        if (symmetricBytes > caps.symmetric()) {
            // error-message: the text ends with fix, built above for both refusals
            throw new IllegalStateException(what + " does not fit this process's symmetric-memory cap: expected at most "
                    + caps.symmetric() + " resident symmetric bytes (" + caps.symmetricSource() + "); found it needs "
                    + symmetricBytes + " (" + parts + ") (" + fix + ")");
        }
    }
}
