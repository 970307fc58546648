package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.OptimizationAlgorithm;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.graph.vertex.impl.FrozenVertex;
import org.deeplearning4j.nn.layers.FrozenLayer;
import org.deeplearning4j.nn.layers.FrozenLayerWithBackprop;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.ConvexOptimizer;
import org.deeplearning4j.optimize.api.StepFunction;
import org.deeplearning4j.optimize.solvers.BaseOptimizer;
import org.deeplearning4j.optimize.solvers.StochasticGradientDescent;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * ZeRO stage 3 ({@link ZeroStage#PARAMETERS}) for one worker of a MultiLayerNetwork or a
 * ComputationGraph: no worker holds a whole replica. {@link FullyShardedReplicas} builds the
 * worker's network and says where DL4J runs each layer: a <em>position</em> is a layer's index, or
 * a graph vertex's place in DL4J's topological order (backprop runs the positions in reverse).
 *
 * <p>Layout. The units are the layers with parameters; unit {@code i} is the {@code n_i} elements
 * of DL4J's flat parameter vector at {@code o_i}, cut by {@code ShardPartition.of(n_i, N, dtype)}
 * into N blocks, and this rank owns block {@code rank} of every unit (FSDP's layout: every
 * collective is balanced). DL4J's flat parameter view and flat gradient view both lie in symmetric
 * memory of the whole vector's size that is only reserved ({@link SymmetricMemory#decommit}): a page
 * holds memory only while it is written, so the views cost what is in use, not their size.
 * <pre>
 *   flat vector:  | layer 0 (n_0)          | layer 1 (n_1)                 | layer 2 ... |
 *   rank 0 owns:  |[b0]                    |[b0     ]                      |[b0]         |
 *   rank 1 owns:  |     [b1]               |         [b1     ]             |    [b1]     |
 *   resident:     own blocks, plus the one or two units gathered at a time
 * </pre>
 * With hybrid sharding ({@link HybridSharding}, HSDP) the group is the worker's shard group of S workers: the units
 * are cut into S blocks, gathered and reduce-scattered inside that group, and each reduce-scattered block is then
 * summed over the N / S replicas that own the same block.
 *
 * <p>A step, on the worker's thread, runs DL4J's own {@code computeGradientAndScore} unchanged
 * (which is what keeps it bitwise equal to plain data parallelism); {@link BackpropSignalPreProcessor}s
 * around every layer's input tell this class where DL4J is (a layer fed by a network input has none:
 * it is gathered when the step begins and, for backprop, by the hook above it; its gradient is
 * reduce-scattered by the next hook below it, or in the gradient hook):
 * <ul>
 *   <li>before layer i's forward: the units of earlier layers are released (all but the own block),
 *       unit i's all-gather (in place) is waited for, the next unit's started, and unit i's
 *       regularization term is computed on the gathered values (DL4J's own
 *       {@code calcRegularizationScore} of the layer, which reads them);</li>
 *   <li>after layer i's backprop: unit i's gradient is reduce-scattered in place (this rank's block
 *       summed over the ranks, in rank order as the all-reduce of plain data parallelism sums it), its
 *       non-own gradient and parameter pages released, and unit i-1's gather waited for (the one
 *       below it started). The
 *       output layers' parameters stay until the gradient hook: DL4J scores the batch after backprop
 *       (a graph runs its output layers' forward inside their backprop: their gather is awaited there);</li>
 *   <li>in the gradient hook ({@link #finishBackward}): what is left (layer 0 has no hook of its own)
 *       is reduce-scattered, everything but the own blocks released.</li>
 * </ul>
 * State updates in the gradient view (BatchNorm's running statistics) are copied before each unit's
 * reduce-scatter and merged in the gradient hook as in plain data parallelism ({@link StateUpdateReduction}),
 * over the own blocks. Then the {@link ShardedUpdater} runs on the own blocks, and this class's step function subtracts
 * the update from the own blocks only, in place of DL4J's, which would write the whole view.
 * The network's {@code calcRegularizationScore} returns the sum of the terms computed while each
 * layer was gathered, in DL4J's order, so the score is DL4J's to the bit.
 *
 * <p>Every collective of a step runs on one communication thread per worker, in the order the
 * hooks issue them (the same on every rank): the next layer's gather (forward: the layer after;
 * backprop: the layer below the next one) runs while the current layer computes, and a layer's
 * reduce-scatter while the layers below run their backprop. The worker waits only for a gather that
 * has not ended when its layer needs it: that wait is the step's exposed gather time.
 */
final class FullySharded implements AutoCloseable {

    /** One layer with parameters: elements [offset, offset + length); this rank owns [offset + ownFrom, offset + ownTo). */
    record Unit(int layer, long offset, long length, long ownFrom, long ownTo) {
    }

    private final ModelReplica replica;
    private final FullyShardedReplicas layout;
    private final Communicator comm;
    /** Hybrid sharding's replica axis (comm is then the shard group's); null for stage 3 over every worker. */
    private final HybridSharding hybrid;
    private final SymmetricMemory params;
    private final SymmetricMemory gradients;
    private final DType dtype;
    private final long count;
    /** Units by position (FullyShardedReplicas: layer index, or topological order); null where no parameters. */
    private final Unit[] unitOfLayer;
    /** Units by offset in the flat vector. */
    private final List<Unit> units;
    private final boolean[] gathered;
    private final boolean[] reduced;
    private final boolean[] termKnown;
    private final double[] terms;
    private final List<INDArray> ownParams;
    private final List<INDArray> ownGradients;
    private final Reducer reducer = Reducer.forThisJvm();
    /** Where the state updates (BatchNorm's running statistics) are copied before each reduce-scatter; null if none. */
    private StateUpdateReduction state;
    /** Every collective of a step, in issue order: gathers (prefetched) and reduce-scatters. */
    private final java.util.concurrent.ExecutorService commThread;
    /** A unit's gather under way on the communication thread, by position; null when none. */
    private final java.util.concurrent.Future<?>[] pending;
    // written by the worker before it submits, read by the communication thread (the submit orders them)
    private volatile boolean idle;
    // written by the communication thread, read by the worker once finishBackward drained it
    private volatile long localBad = -1;
    /** This step's collectives: counts, time on the communication thread, the waits prefetching left. */
    private final StageThreeClock clock;
    /** Whether to measure resident bytes at every gather and reduce-scatter (tests, benchmarks: one mincore each). */
    private volatile boolean measurePeaks;
    private volatile long peakParameterBytes;
    private volatile long peakGradientBytes;

    private FullySharded(FullyShardedReplicas layout, Communicator comm, HybridSharding hybrid, SymmetricMemory params,
                         SymmetricMemory gradients) {
        this.replica = layout.replica();
        this.layout = layout;
        this.comm = comm;
        this.hybrid = hybrid;
        this.params = params;
        this.gradients = gradients;
        this.dtype = ModelReplica.dtypeOf(replica.params().dataType());
        this.count = replica.params().length();
        Layer[] layers = layout.layerAt();
        this.unitOfLayer = new Unit[layers.length];
        int rank = comm.group().rank();
        int n = comm.group().worldSize();
        List<Unit> all = new ArrayList<>();
        for (int i = 0; i < layers.length; i++) {
            INDArray p = layers[i] != null && layers[i].numParams() > 0 ? layers[i].params() : null;
            if (p == null || p.length() == 0) {
                continue;
            }
            long offset = ModelReplica.elementOffset(replica.params(), p);
            ShardPartition part = ShardPartition.of(p.length(), n, dtype);
            Unit u = new Unit(i, offset, p.length(), part.start(rank), part.end(rank));
            unitOfLayer[i] = u;
            all.add(u);
        }
        all.sort(java.util.Comparator.comparingLong(Unit::offset));
        long next = 0;
        for (Unit u : all) {
            if (u.offset() != next) {
                throw Invariants.violated("the parameters of the layer at position " + u.layer() + " start at element "
                        + u.offset() + "; expected " + next + " (DL4J lays the layers out one after another in the flat vector)");
            }
            next = u.offset() + u.length();
        }
        if (next != count) {
            throw Invariants.violated("the layers' parameters cover " + next + " of " + count + " elements");
        }
        this.units = List.copyOf(all);
        this.gathered = new boolean[layers.length];
        this.reduced = new boolean[layers.length];
        this.termKnown = new boolean[layers.length];
        this.terms = new double[layers.length];
        this.pending = new java.util.concurrent.Future<?>[layers.length];
        this.clock = new StageThreeClock(layers.length);
        int r = rank;
        this.commThread = java.util.concurrent.Executors.newSingleThreadExecutor(task -> {
            Thread t = new Thread(task, "symmem4j-stage3-comm-" + r);
            t.setDaemon(true);
            return t;
        });
        INDArray flatParams = replica.params().reshape(count);
        INDArray flatGradients = replica.gradientView().reshape(count);
        List<INDArray> ps = new ArrayList<>();
        List<INDArray> gs = new ArrayList<>();
        for (Unit u : units) {
            if (u.ownTo() > u.ownFrom()) {
                ps.add(flatParams.get(NDArrayIndex.interval(u.offset() + u.ownFrom(), u.offset() + u.ownTo())));
                gs.add(flatGradients.get(NDArrayIndex.interval(u.offset() + u.ownFrom(), u.offset() + u.ownTo())));
            }
        }
        this.ownParams = List.copyOf(ps);
        this.ownGradients = List.copyOf(gs);
        layout.attach(this::regularizationScore);
    }

    // ------------------------------------------------------------------ checks before any step

    /**
     * Throws, naming what and the fix, when stage 3 cannot drive {@code model}: before any worker starts.
     * State updates in the gradient view (BatchNormalization's running statistics, center-loss centers)
     * are merged as in plain data parallelism ({@link #captureStateWith}).
     */
    static void check(ModelReplica model) {
        if (model.truncatedBptt()) {
            throw new IllegalArgumentException("sharding(PARAMETERS) with truncated backpropagation through time: several"
                    + " updates per batch, each of which would need every layer gathered again (fix: BackpropType.Standard,"
                    + " or sharding(GRADIENTS))");
        }
        Map<String, NeuralNetConfiguration> layers = new LinkedHashMap<>();
        switch (model) {
            case ModelReplica.Mln m -> {
                MultiLayerConfiguration conf = m.net().getLayerWiseConfigurations();
                for (int i = 0; i < conf.getConfs().size(); i++) {
                    layers.put("layer " + i, conf.getConf(i));
                }
            }
            case ModelReplica.Graph g -> {
                for (GraphVertex v : g.net().getVertices()) {
                    if (v.hasLayer()) {
                        Layer l = v.getLayer();
                        if (l instanceof FrozenLayer || l instanceof FrozenLayerWithBackprop) {
                            throw new IllegalArgumentException("sharding(PARAMETERS): vertex " + v.getVertexName() + " is a "
                                    + l.getClass().getSimpleName() + ", whose backprop DL4J skips or runs without its own"
                                    + " gradient, which stage 3's per-layer reduce-scatter does not follow (fix:"
                                    + " sharding(GRADIENTS), or unfreeze it with a zero learning rate: updater(new NoOp()))");
                        }
                        layers.put("vertex " + v.getVertexName(), l.conf());
                    } else if (v.numParams() > 0 || v instanceof FrozenVertex) {
                        throw new IllegalArgumentException("sharding(PARAMETERS): vertex " + v.getVertexName() + " ("
                                + v.getClass().getSimpleName() + ") has parameters but is not a layer vertex, which stage 3"
                                + " gathers before use (fix: a layer in its place, or sharding(GRADIENTS))");
                    }
                }
            }
        }
        for (Map.Entry<String, NeuralNetConfiguration> e : layers.entrySet()) {
            NeuralNetConfiguration c = e.getValue();
            org.deeplearning4j.nn.conf.layers.Layer layer = c.getLayer();
            if (c.getOptimizationAlgo() != OptimizationAlgorithm.STOCHASTIC_GRADIENT_DESCENT) {
                throw new IllegalArgumentException("sharding(PARAMETERS) with optimizationAlgo=" + c.getOptimizationAlgo()
                        + " (" + e.getKey() + "): stage 3 replaces the step of DL4J's StochasticGradientDescent only (fix:"
                        + " OptimizationAlgorithm.STOCHASTIC_GRADIENT_DESCENT, DL4J's default)");
            }
            if (layer != null && layer.getConstraints() != null && !layer.getConstraints().isEmpty()) {
                throw new IllegalArgumentException("sharding(PARAMETERS): " + e.getKey() + " (" + layer.getClass().getSimpleName()
                        + ") has weight constraints " + layer.getConstraints() + ": DL4J applies them to whole rows or"
                        + " columns of the full parameter array after each step, which no worker holds in stage 3 (fix:"
                        + " train it with sharding(GRADIENTS), which keeps whole parameters, or replace the constraint by"
                        + " an element-wise regularization: l2(...) or weightDecay(...))");
            }
        }
    }

    /**
     * On the worker's thread, collective: this rank's stage-3 replica of {@code source}: a network
     * over fresh sparse symmetric memory for its parameter and gradient views, holding the own
     * blocks of {@code source}'s parameters (the rest released), and its counters.
     *
     * @throws IllegalArgumentException when the group's transport cannot give pages back (named, with the fix)
     */
    static FullySharded open(ModelReplica source, Group group, Communicator comm) {
        return open(source, group, comm, null);
    }

    /**
     * As {@link #open(ModelReplica, Group, Communicator)}; with {@code hybrid} (HSDP), {@code group} and {@code comm}
     * are its shard group's, the blocks are cut over that group, and each unit's reduce-scattered block is summed over
     * the replicas ({@link HybridSharding#sumAcrossReplicas}).
     */
    static FullySharded open(ModelReplica source, Group group, Communicator comm, HybridSharding hybrid) {
        TransportCapabilities caps = group.transport().capabilities(group);
        if (!caps.supports(TransportCapabilities.Capability.DECOMMIT)) {
            throw new IllegalArgumentException("sharding(PARAMETERS) on transport " + group.transport().name() + ": "
                    + caps.get(TransportCapabilities.Capability.DECOMMIT).reason() + " (stage 3 keeps DL4J's views in sparse"
                    + " memory and gives each layer's pages back after use; fix: a thread world or a ProcessGroup on one"
                    + " machine, or sharding(GRADIENTS))");
        }
        INDArray sourceParams = source.params();
        DataType type = sourceParams.dataType();
        long count = sourceParams.length();
        long bytes = Math.max(64, count * type.width());
        SymmetricMemory params = SymmetricMemory.allocate(group, bytes);
        SymmetricMemory gradients = null;
        try {
            gradients = SymmetricMemory.allocate(group, bytes);
            BackpropProgress progress = new BackpropProgress();
            // DL4J's views over the sparse memory, wrapped without initializing (nothing written)
            FullyShardedReplicas layout = FullyShardedReplicas.build(source, progress,
                    ModelReplica.arrayOver(params.local(), type, count), ModelReplica.arrayOver(gradients.local(), type, count));
            ModelReplica replica = layout.replica();
            replica.setIterationCount(source.iterationCount());
            replica.setEpochCount(source.epochCount());
            replica.disableMinibatchDivision();
            FullySharded fs = new FullySharded(layout, comm, hybrid, params, gradients);
            if (ConfigurationStart.isHollow(source)) {
                fs.initialiseOwnBlocks(); // a model started from a configuration: nobody holds it whole
            } else {
                fs.copyOwnBlocksFrom(sourceParams);
            }
            progress.listenForward(key -> fs.clock.inHook(() -> fs.forwardStarting(layout.positionOfKey().get(key))));
            progress.listen(key -> fs.clock.inHook(() -> fs.backwardDone(layout.positionOfKey().get(key))));
            return fs;
        } catch (RuntimeException | Error e) {
            comm.abort("stage 3 set-up failed on rank " + group.rank() + ": " + e);
            closeQuietly(gradients);
            closeQuietly(params);
            throw e;
        }
    }

    /**
     * Initialises this rank's blocks as DL4J's {@code init()} initialises the whole vector, without ever holding it
     * ({@link InitialisationReplay}: DL4J's own draws, in DL4J's order). Each layer's (vertex's) view is its unit of
     * the sparse parameter memory, the working buffer: once it has drawn its values, the pages outside this rank's
     * block are given back before the next one draws. So the blocks are bitwise those of
     * {@code new MultiLayerNetwork(conf).init()} (or the graph's), and the peak is the own blocks plus one layer.
     */
    void initialiseOwnBlocks() {
        INDArray flat = replica.params().reshape(count); // as DL4J's init cuts its flat vector: 1-D, a view per layer
        InitialisationReplay.Target target = new InitialisationReplay.Target() {
            @Override
            public INDArray view(int position, long offset, long length) {
                return flat.get(NDArrayIndex.interval(offset, offset + length));
            }

            @Override
            public void drawn(int position, long offset, long length) {
                Unit u = unitOfLayer[position];
                if (u == null || u.offset() != offset || u.length() != length) {
                    throw Invariants.violated("the layer at position " + position + " initialises elements [" + offset
                            + ", " + (offset + length) + "); its unit is " + u);
                }
                releaseOutsideOwnBlock(params, u);
            }
        };
        switch (replica) {
            case ModelReplica.Graph(org.deeplearning4j.nn.graph.ComputationGraph graph) ->
                    InitialisationReplay.replay(graph, target);
            case ModelReplica.Mln(MultiLayerNetwork net) -> InitialisationReplay.replay(net, target);
        }
    }

    private static void closeQuietly(SymmetricMemory m) {
        if (m != null) {
            try {
                m.close();
            } catch (RuntimeException ignored) {
                // after an abort: frees this rank's part
            }
        }
    }

    /** Installs the sharded updater and the own-blocks step in DL4J's optimizer of the replica. */
    void install(ShardedUpdater updater) {
        replica.installUpdater(updater);
        ConvexOptimizer optimizer = replica.model().getOptimizer();
        if (!(optimizer instanceof StochasticGradientDescent sgd)) {
            throw Invariants.violated("expected DL4J's StochasticGradientDescent as the replica's optimizer (the"
                    + " configuration's optimizationAlgo was checked at the start); found "
                    + (optimizer == null ? "none" : optimizer.getClass().getName()));
        }
        try {
            java.lang.reflect.Field f = BaseOptimizer.class.getDeclaredField("stepFunction");
            f.setAccessible(true);
            f.set(sgd, new OwnBlocksStep(this));
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("cannot set the step function of DL4J's optimizer: expected the protected field"
                    + " BaseOptimizer.stepFunction of DL4J 1.0.0-M2.1, open to symmem4j; found " + e + " (fix: use DL4J"
                    + " 1.0.0-M2.1, and with DL4J on the module path add --add-opens"
                    + " org.deeplearning4j.nn/org.deeplearning4j.optimize.solvers=ALL-UNNAMED)", e);
        }
    }

    /**
     * Makes every unit's reduce-scatter first copy this worker's state updates into {@code reduction}
     * ({@link StateUpdateReduction#capture}), which the gradient hook then merges as plain data
     * parallelism does. Before the first step.
     */
    void captureStateWith(StateUpdateReduction reduction) {
        this.state = reduction;
    }

    // ------------------------------------------------------------------ the step

    /**
     * Before the step's forward pass: the units of layers without hooks (fed by a network input) are gathered and
     * the next one prefetched.
     */
    void beginStep(boolean idleStep) {
        idle = idleStep;
        localBad = -1;
        clock.beginStep();
        Arrays.fill(reduced, false);
        Arrays.fill(termKnown, false);
        for (Unit u : units) {
            if (gathered[u.layer()] || pending[u.layer()] != null) {
                throw Invariants.violated("unit of layer " + u.layer() + " still gathered at the start of a step");
            }
        }
        // the layers that report nothing (fed by a network input) are gathered now and stay until a later
        // layer's forward; then the first layer that reports is prefetched
        Unit firstHooked = null;
        for (int p = 0; p < unitOfLayer.length; p++) {
            Unit u = unitOfLayer[p];
            if (u != null && !layout.hooked()[p]) {
                awaitGather(u);
            } else if (u != null && firstHooked == null) {
                firstHooked = u;
            }
        }
        prefetch(firstHooked);
    }

    /** Forward hook: the layer at {@code position} runs its forward next. */
    void forwardStarting(int position) {
        Unit u = unitOfLayer[position];
        if (layout.forwardInBackprop()[position]) {
            // a graph's output layer: DL4J sets its input at the start of its backprop; its gather was prefetched
            if (u != null) {
                awaitGather(u);
            }
            return;
        }
        Unit above = unitAbove(position);
        // the last unit's forward keeps the unit below it gathered: that one's backprop runs right after this one's,
        // and gathering it again would be exposed, with no compute left to hide it (FSDP2 likewise keeps the last
        // layer unsharded after forward); still two units at a time, this one and that one
        Unit keptForBackprop = u != null && above == null ? unitBelow(position) : null;
        for (Unit done : units) {
            if (done.layer() < position && gathered[done.layer()] && done != keptForBackprop) {
                releaseParams(done);
            }
        }
        if (u != null) {
            awaitGather(u);
        }
        prefetch(above); // gathered on the communication thread while this layer computes
    }

    /**
     * Backprop hook: the layer at {@code position} has written its gradient. Backprop runs the
     * positions in reverse: every layer above has written its gradient too, so the ones that report
     * nothing are reduce-scattered here; then the layers that run before the next hook are gathered.
     */
    void backwardDone(int position) {
        int next = position - 1; // the next position that reports, or -1
        while (next >= 0 && (layout.layerAt()[next] == null || !layout.hooked()[next])) {
            next--;
        }
        for (int p = position - 1; p >= Math.max(next, 0); p--) {
            // the gathers the next layers' backprop waits for go first (the same order on every rank): queued behind
            // this layer's reduce-scatter on the one communication thread, that reduce-scatter would be exposed
            prefetch(unitOfLayer[p]);
        }
        for (int p = unitOfLayer.length - 1; p >= position; p--) {
            Unit u = unitOfLayer[p];
            if (u != null && !reduced[p] && (p == position || !layout.hooked()[p])) {
                startReduceScatter(u); // on the communication thread while the next layers run their backprop
                if (!layout.keep()[p]) { // DL4J scores the batch with the output layers after backprop
                    releaseParams(u);
                }
            }
        }
        for (int p = position - 1; p >= Math.max(next, 0); p--) {
            if (unitOfLayer[p] != null) {
                awaitGather(unitOfLayer[p]); // runs its backprop before the next hook
            }
        }
        if (next >= 0) {
            prefetch(unitBelow(next));
        }
    }

    /**
     * In the gradient hook, after DL4J's backprop and score: the units no hook reduced (those of layers fed by a
     * network input) are
     * reduce-scattered, last layer first as backprop runs; every collective of the step has ended when
     * it returns, and every unit is released to its own block. Collective.
     */
    void finishBackward() {
        for (int p = unitOfLayer.length - 1; p >= 0; p--) { // as backprop ran: last position first
            Unit u = unitOfLayer[p];
            if (u != null && !reduced[p]) {
                startReduceScatter(u);
            }
        }
        long t0 = System.nanoTime();
        await(commThread.submit(() -> { })); // the communication thread runs in order: everything before has ended
        clock.waitedForReduceScatters(t0, System.nanoTime()); // the gathers were awaited: what was left is reduce-scatters
        for (Unit u : units) {
            if (pending[u.layer()] != null) {
                throw Invariants.violated("unit of layer " + u.layer() + " prefetched but never used");
            }
            if (gathered[u.layer()]) {
                releaseParams(u);
            }
        }
    }

    /** The first element of the flat vector whose local gradient was not finite this step (before the reduction), or -1. */
    long localBad() {
        return localBad;
    }

    /** Nanoseconds this step waited for parameter all-gathers (the part prefetching did not hide). */
    long takeGatherNanos() {
        return clock.gatherWaitNanos();
    }

    /** This step's collectives (counts, time on the communication thread, exposed waits); after {@link #finishBackward}. */
    StepReport.Collectives stepCollectives() {
        return clock.step();
    }

    /** The unit of the nearest layer after {@code layer} that has parameters, or null. */
    private Unit unitAbove(int layer) {
        for (int i = layer + 1; i < unitOfLayer.length; i++) {
            if (unitOfLayer[i] != null) {
                return unitOfLayer[i];
            }
        }
        return null;
    }

    /** The unit of the nearest layer before {@code layer} that has parameters, or null. */
    private Unit unitBelow(int layer) {
        for (int i = layer - 1; i >= 0; i--) {
            if (unitOfLayer[i] != null) {
                return unitOfLayer[i];
            }
        }
        return null;
    }

    /**
     * Starts unit {@code u}'s all-gather on the communication thread unless it is gathered or under way.
     * Every collective of the step goes through that one thread, in the order this worker's hooks
     * issue them, which is the same on every rank (same network, same hooks).
     */
    private void prefetch(Unit u) {
        if (u == null || gathered[u.layer()] || pending[u.layer()] != null) {
            return;
        }
        long issued = clock.gatherIssued();
        pending[u.layer()] = commThread.submit(() -> {
            long t0 = clock.gatherBegins(u.layer(), issued);
            comm.allGather(params, u.offset() * dtype.byteSize(), u.length(), dtype);
            clock.gatherRan(t0);
            if (measurePeaks) {
                peakParameterBytes = Math.max(peakParameterBytes, residentParameterBytes());
            }
        });
    }

    /** Waits for unit {@code u}'s gather (starting it if needed); then its regularization term, on the gathered values. */
    private void awaitGather(Unit u) {
        if (gathered[u.layer()]) {
            return;
        }
        prefetch(u);
        long t0 = System.nanoTime();
        await(pending[u.layer()]);
        clock.waitedForGather(u.layer(), t0, System.nanoTime());
        pending[u.layer()] = null;
        gathered[u.layer()] = true;
        if (!termKnown[u.layer()]) {
            // DL4J's own term for the layer, on the gathered values: what its calcRegularizationScore adds
            terms[u.layer()] = layout.layerAt()[u.layer()].calcRegularizationScore(true);
            termKnown[u.layer()] = true;
        }
    }

    /**
     * On the communication thread: unit {@code u}'s local gradient checked (or zeroed on an idle worker),
     * reduce-scattered in place, its pages outside this rank's block released. Nobody writes the unit's
     * gradient after its backprop; the next layers write other pages.
     */
    private void startReduceScatter(Unit u) {
        reduced[u.layer()] = true;
        if (state != null) {
            // this worker's state updates (BatchNorm's running statistics) before the reduce-scatter sums them and
            // the release drops the pages outside the own block; the parameters are still gathered here
            state.capture(u.offset(), u.offset() + u.length());
        }
        long issued = clock.reduceScatterIssued();
        commThread.submit(() -> {
            long t0 = clock.reduceScatterBegins(issued);
            long ds = dtype.byteSize();
            MemorySegment local = gradients.local();
            if (idle) {
                local.asSlice(u.offset() * ds, u.length() * ds).fill((byte) 0); // contributes nothing
            } else {
                long bad = reducer.firstNonFinite(local, u.offset() * ds, dtype, u.length());
                if (bad >= 0 && (localBad < 0 || u.offset() + bad < localBad)) {
                    localBad = u.offset() + bad;
                }
            }
            if (measurePeaks) { // the unit's whole gradient is written now: the gradient's high-water mark
                peakGradientBytes = Math.max(peakGradientBytes, residentGradientBytes());
            }
            comm.reduceScatter(gradients, u.offset() * ds, u.length(), dtype, ReduceOp.SUM);
            if (hybrid != null) { // HSDP: the block summed over its shard group, then over the replicas
                hybrid.sumAcrossReplicas(local.asSlice((u.offset() + u.ownFrom()) * ds), u.ownTo() - u.ownFrom(), dtype);
            }
            releaseOutsideOwnBlock(gradients, u);
            clock.reduceScatterRan(t0);
        });
    }

    private static void await(java.util.concurrent.Future<?> f) {
        try {
            f.get();
        } catch (java.util.concurrent.ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            if (cause instanceof Error err) {
                throw err;
            }
            throw new IllegalStateException("stage 3 communication failed: expected every rank of the group to take"
                    + " part in the collective; found " + cause + " (fix: the cause names the rank or transport that"
                    + " failed; restart the run and resume with SymmemParallelWrapper.restoreLatest(checkpointRoot))", cause);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for a stage-3 collective: expected the worker"
                    + " thread to run until fit() returns; found it interrupted (fix: do not interrupt threads during fit();"
                    + " to stop training, let fit() return and call close())", e);
        }
    }

    private void releaseParams(Unit u) {
        releaseOutsideOwnBlock(params, u);
        gathered[u.layer()] = false;
    }

    /**
     * Gives back the pages of unit {@code u} outside this rank's block (pages it shares with the block,
     * or with other units, stay).
     */
    private void releaseOutsideOwnBlock(SymmetricMemory memory, Unit u) {
        long ds = dtype.byteSize();
        memory.decommit(u.offset() * ds, u.ownFrom() * ds);
        memory.decommit((u.offset() + u.ownTo()) * ds, (u.length() - u.ownTo()) * ds);
    }

    /** DL4J's step, on the own blocks only: params -= update, element by element as DL4J's {@code subi} does. */
    private void subtractOwnBlocks() {
        for (int i = 0; i < ownParams.size(); i++) {
            ownParams.get(i).subi(ownGradients.get(i));
        }
    }

    /** The regularization term DL4J's {@code MultiLayerNetwork.calcRegularizationScore} computes, from the kept terms. */
    private double regularizationScore(boolean backpropParamsOnly) {
        if (!backpropParamsOnly) {
            throw new UnsupportedOperationException("calcRegularizationScore(false) on a stage-3 replica: only the terms of"
                    + " backprop parameters are kept (DL4J's training score uses those); fix: call"
                    + " calcRegularizationScore(true), or train with sharding(ZeroStage.GRADIENTS) to keep every term");
        }
        double sum = 0.0;
        for (int i : layout.regularizationOrder()) { // DL4J's order, so the sum is DL4J's to the bit
            if (unitOfLayer[i] == null) {
                sum += layout.layerAt()[i].calcRegularizationScore(true);
            } else if (termKnown[i]) {
                sum += terms[i];
            } else {
                throw new IllegalStateException("the regularization score of a stage-3 replica is known during a step only"
                        + " (the parameters of the layer at position " + i + " were not gathered this step); fix: read"
                        + " the score in a TrainingListener's iterationDone, or score the network"
                        + " SymmemParallelWrapper.gatherParameters() returns");
            }
        }
        return sum;
    }

    // ------------------------------------------------------------------ the replica's state, between steps

    ModelReplica replica() {
        return replica;
    }

    SymmetricMemory gradientMemory() {
        return gradients;
    }

    /** The communicator the blocks are cut over: the whole group's, or with hybrid sharding the shard group's. */
    Communicator communicator() {
        return comm;
    }

    /** This rank's place among the ranks its blocks are cut over (with hybrid sharding, in its shard group). */
    int shardRank() {
        return comm.group().rank();
    }

    /** The ranks the blocks are cut over: every worker, or with hybrid sharding the shard group's S. */
    int shardCount() {
        return comm.group().worldSize();
    }

    /**
     * Whether this rank's blocks are the first replica's: always without hybrid sharding; with it, only in the mesh's
     * first row (the other rows hold the same blocks bit for bit, so one row is the whole model state).
     */
    boolean firstReplica() {
        return hybrid == null || hybrid.replica() == 0;
    }

    /** The elements this rank owns, [from, to) pairs in ascending order. */
    long[] ownRanges() {
        long[] r = new long[2 * units.size()];
        for (int i = 0; i < units.size(); i++) {
            Unit u = units.get(i);
            r[2 * i] = u.offset() + u.ownFrom();
            r[2 * i + 1] = u.offset() + u.ownTo();
        }
        return r;
    }

    List<Unit> units() {
        return units;
    }

    /** Copies this rank's blocks of {@code full} (a whole flat parameter vector) into its own blocks. */
    void copyOwnBlocksFrom(INDArray full) {
        copyOwnBlocks(ModelReplica.segmentOf(full), params.local());
    }

    /** Copies this rank's own blocks into the same elements of {@code full} (the others are left alone). */
    void copyOwnBlocksTo(INDArray full) {
        copyOwnBlocks(params.local(), ModelReplica.segmentOf(full));
    }

    /**
     * This rank's own blocks packed in unit order, into {@code into} when it is a packing of them (a hybrid-sharding
     * rank's copy at every step's start under SHRINK: {@link StepStart}), else ({@code null}) into a new heap copy:
     * what a hybrid-sharding shrink reads after this rank's failed step, whose close frees the parameter memory
     * ({@link #unpackOwnBlocksTo}).
     */
    MemorySegment packOwnBlocks(MemorySegment into) {
        long ds = dtype.byteSize();
        long bytes = 0;
        for (Unit u : units) {
            bytes += (u.ownTo() - u.ownFrom()) * ds;
        }
        MemorySegment packed = into != null && into.byteSize() == Math.max(bytes, 1) ? into
                : Arena.ofAuto().allocate(Math.max(bytes, 1), ds);
        long at = 0;
        for (Unit u : units) {
            long n = (u.ownTo() - u.ownFrom()) * ds;
            MemorySegment.copy(params.local(), (u.offset() + u.ownFrom()) * ds, packed, at, n);
            at += n;
        }
        return packed;
    }

    /** Writes blocks {@link #packOwnBlocks} packed into their elements of {@code full}; reads no memory of this rank's. */
    void unpackOwnBlocksTo(MemorySegment packed, INDArray full) {
        checkLength(full);
        long ds = dtype.byteSize();
        MemorySegment to = ModelReplica.segmentOf(full);
        long at = 0;
        for (Unit u : units) {
            long n = (u.ownTo() - u.ownFrom()) * ds;
            MemorySegment.copy(packed, at, to, (u.offset() + u.ownFrom()) * ds, n);
            at += n;
        }
    }

    /** Whether {@code full}'s elements in this rank's blocks are bitwise this rank's own blocks. */
    boolean ownBlocksMatch(INDArray full) {
        MemorySegment a = ModelReplica.segmentOf(full);
        MemorySegment b = params.local();
        long ds = dtype.byteSize();
        checkLength(full);
        for (Unit u : units) {
            long from = (u.offset() + u.ownFrom()) * ds;
            long to = (u.offset() + u.ownTo()) * ds;
            if (from < to && MemorySegment.mismatch(a, from, to, b, from, to) != -1) {
                return false;
            }
        }
        return true;
    }

    private void copyOwnBlocks(MemorySegment from, MemorySegment to) {
        long ds = dtype.byteSize();
        for (Unit u : units) {
            long at = (u.offset() + u.ownFrom()) * ds;
            MemorySegment.copy(from, at, to, at, (u.ownTo() - u.ownFrom()) * ds);
        }
    }

    private void checkLength(INDArray full) {
        if (full.length() != count || ModelReplica.dtypeOf(full.dataType()) != dtype) {
            throw Invariants.violated("parameters: expected " + count + " x " + dtype + "; found " + full.length()
                    + " x " + full.dataType());
        }
    }

    /**
     * Collective (every rank of the group, e.g. group mode's one worker per process, on the wrapper's
     * thread while the worker is idle): every unit all-gathered in turn, copied into {@code full}, and
     * released again, so {@code full} ends with the whole parameter vector while this rank holds at
     * most one unit more than its blocks.
     */
    void gatherInto(INDArray full) {
        checkLength(full);
        MemorySegment target = ModelReplica.segmentOf(full);
        long ds = dtype.byteSize();
        for (Unit u : units) {
            comm.allGather(params, u.offset() * ds, u.length(), dtype);
            MemorySegment.copy(params.local(), u.offset() * ds, target, u.offset() * ds, u.length() * ds);
            releaseOutsideOwnBlock(params, u);
        }
    }

    /** Resident bytes of this rank's parameter memory now ({@code mincore}). */
    long residentParameterBytes() {
        return params.residentBytes(0, count * dtype.byteSize());
    }

    /** Resident bytes of this rank's gradient memory now. */
    long residentGradientBytes() {
        return gradients.residentBytes(0, count * dtype.byteSize());
    }

    /** Measures, from now on, the resident bytes at every gather and reduce-scatter ({@link #peakParameterBytes}). */
    void measurePeaks() {
        measurePeaks = true;
    }

    /** The most resident parameter bytes seen at a gather since {@link #measurePeaks()}; read while the worker is idle. */
    long peakParameterBytes() {
        return peakParameterBytes;
    }

    /** The most resident gradient bytes seen at a reduce-scatter since {@link #measurePeaks()}. */
    long peakGradientBytes() {
        return peakGradientBytes;
    }

    /** The largest unit's bytes. */
    long largestUnitBytes() {
        long m = 0;
        for (Unit u : units) {
            m = Math.max(m, u.length());
        }
        return m * dtype.byteSize();
    }

    /** Bytes of this rank's own blocks (parameters, or gradient: the same). */
    long ownBytes() {
        long n = 0;
        for (Unit u : units) {
            n += u.ownTo() - u.ownFrom();
        }
        return n * dtype.byteSize();
    }

    /** Stops the communication thread and closes the parameter memory (collective); the gradient memory is the worker's. */
    @Override
    public void close() {
        commThread.shutdownNow(); // after a failure a collective may still wait there: the worker aborted the communicator
        try {
            commThread.awaitTermination(10, java.util.concurrent.TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        params.close();
    }

    /** DL4J's negative-gradient step on the own blocks: the rest of the views is not this rank's, nor resident. */
    private static final class OwnBlocksStep implements StepFunction {
        private static final long serialVersionUID = 1L;
        private final transient FullySharded owner;

        OwnBlocksStep(FullySharded owner) {
            this.owner = owner;
        }

        @Override
        public void step(INDArray x, INDArray line, double step) {
            step(x, line);
        }

        @Override
        public void step(INDArray x, INDArray line) {
            owner.subtractOwnBlocks();
        }

        @Override
        public void step() {
        }
    }
}
