package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.updater.graph.ComputationGraphUpdater;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.ops.CustomOp;
import org.nd4j.linalg.api.ops.DynamicCustomOp;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.nd4j.linalg.learning.GradientUpdater;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.learning.regularization.Regularization;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * One worker's ZeRO-style sharded updater: this rank owns elements [start, end) of the flat
 * parameter vector ({@link ShardPartition} block {@code rank}, 64-byte aligned) and keeps DL4J
 * updater state for those elements only. With stage 3 ({@link ZeroStage#PARAMETERS}) the rank owns
 * several ranges instead, block {@code rank} of each layer's parameters ({@link FullySharded}); the
 * updater works on their union alike, and leaves the subtraction to {@link FullySharded}'s step.
 *
 * <p>A step, on the worker's thread:
 * <ol>
 *   <li>In the gradient hook ({@link #reduceGradients}, {@link #divideShard}, {@link #agree}): stage 1
 *       all-reduces the whole gradient view as plain data parallelism does, stage 2
 *       reduce-scatters it so only this rank's shard is reduced; the shard is divided by the
 *       step's examples; one small all-reduce agrees on non-finite elements and on the squared
 *       norms that gradient normalization needs (partial sums per layer or per parameter array, so
 *       the norm is the global one).</li>
 *   <li>Where DL4J's updater would run ({@link #update}): gradient normalization on the shard with
 *       the global norms; then, for each intersection of the shard with a DL4J updater block, what
 *       DL4J's {@code UpdaterBlock} does — L1/L2 before the updater, the block's
 *       {@code GradientUpdater} (created by {@code IUpdater.instantiate} over a state view sized for
 *       the intersection), weight decay after — leaving the update in the shard of the gradient
 *       view; then the update is all-gathered in place, so every replica's gradient view holds the
 *       whole update and DL4J's own step ({@code params -= update}) applies it on every replica.</li>
 * </ol>
 * DL4J's updaters and regularizations are element-wise, so each element gets the same operations
 * with the same operands as in the unsharded updater: the same bits. All-gathering the update
 * rather than the parameters moves the same bytes and leaves the subtraction to DL4J's step
 * function (which runs regardless and would otherwise subtract a zeroed gradient).
 *
 * <p>Not thread-safe: used by its worker's thread, and by the wrapper's thread only while the
 * worker is idle (state import and export).
 */
final class ShardedUpdater {

    /** L1/L2 and weight decay of one parameter array, on its intersection with the shard. */
    private record VariablePiece(List<Regularization> regularizations, INDArray params, INDArray gradient) {
    }

    /** The intersection of the shard with one DL4J updater block. */
    private record Piece(UpdaterLayout.Block block, long start, long end, long stateOffset, IUpdater config,
                         GradientUpdater updater, INDArray gradient, List<VariablePiece> variables) {
        long length() {
            return end - start;
        }
    }

    /**
     * One gradient normalization on the shard: the norm slot it reads ({@code -1} for element-wise
     * clipping, which needs none) and the gradient slices it scales.
     */
    private record NormTerm(GradientNormalization kind, double threshold, int slot, long[] ranges, List<INDArray> gradients) {
    }

    private final ZeroStage stage;
    private final UpdaterLayout layout;
    private final Communicator comm;
    private final SymmetricMemory gradients;
    private final GradientSynchronizer synchronizer;
    private final DType dtype;
    private final long count;
    private final long start;
    private final long end;
    /** The elements this rank owns: [from, to) pairs, ascending; {@code {start, end}} for stages 1 and 2. */
    private final long[] ranges;
    private final MemorySegment gradientSegment;
    private final INDArray flatGradient;
    /** The gradient of every owned range, or empty. */
    private final List<INDArray> shardGradients;
    private final INDArray state;
    private final List<Piece> pieces;
    private final List<NormTerm> normTerms;
    private final int normSlots;
    /** Every step's agreement all-reduce: ONE_SHOT where it runs, else the group's engine (chosen once: its size is fixed). */
    private final Algorithm agreementAlgorithm;
    private final double[] norms;
    /** [non-finite ranks, squared norm per slot...] as FLOAT64, all-reduced once per step. */
    private final MemorySegment agreement;
    private final Reducer reducer = Reducer.forThisJvm();
    private long gatherNanos;

    /**
     * @param gradients    the replica's flat gradient view registered as symmetric memory
     * @param synchronizer stage 1's bucketed all-reduce over {@code gradients}
     * @param initialState DL4J's full updater-state view to take this shard's state from (null when no block keeps state)
     */
    ShardedUpdater(ZeroStage stage, UpdaterLayout layout, ModelReplica replica, Communicator comm, SymmetricMemory gradients,
                   GradientSynchronizer synchronizer, INDArray initialState) {
        this(stage, layout, replica, comm, gradients, synchronizer, initialState, null);
    }

    /**
     * @param ownRanges the elements this rank owns, [from, to) pairs in ascending order (stage 3:
     *                  {@link FullySharded#ownRanges()}); null for ShardPartition block {@code rank} of the whole vector
     */
    ShardedUpdater(ZeroStage stage, UpdaterLayout layout, ModelReplica replica, Communicator comm, SymmetricMemory gradients,
                   GradientSynchronizer synchronizer, INDArray initialState, long[] ownRanges) {
        this.stage = stage;
        this.layout = layout;
        this.comm = comm;
        this.gradients = gradients;
        this.synchronizer = synchronizer;
        INDArray view = replica.gradientView();
        this.dtype = ModelReplica.dtypeOf(view.dataType());
        this.count = view.length();
        if (count != layout.paramCount()) {
            throw Invariants.violated("replica has " + count + " parameters; the updater layout " + layout.paramCount());
        }
        int rank = comm.group().rank();
        if ((stage == ZeroStage.PARAMETERS) != (ownRanges != null)) {
            throw Invariants.violated("stage " + stage + ": own ranges are given exactly for PARAMETERS");
        }
        if (ownRanges == null) {
            ShardPartition partition = ShardPartition.of(count, comm.group().worldSize(), dtype);
            this.ranges = new long[] {partition.start(rank), partition.end(rank)};
        } else {
            this.ranges = ownRanges.clone();
            for (int i = 0; i < ranges.length; i += 2) {
                if (ranges[i] > ranges[i + 1] || ranges[i] < (i == 0 ? 0 : ranges[i - 1]) || ranges[i + 1] > count) {
                    throw Invariants.violated("own ranges " + java.util.Arrays.toString(ownRanges)
                            + ": expected ascending [from, to) pairs within [0, " + count + ")");
                }
            }
        }
        this.start = ranges.length == 0 ? 0 : ranges[0];
        this.end = ranges.length == 0 ? 0 : ranges[ranges.length - 1];
        this.gradientSegment = ModelReplica.segmentOf(view);
        this.flatGradient = flatView(view, "gradient");
        INDArray flatParams = flatView(replica.params(), "parameter");
        List<INDArray> slices = new ArrayList<>();
        for (int i = 0; i < ranges.length; i += 2) {
            if (ranges[i] < ranges[i + 1]) {
                slices.add(slice(flatGradient, ranges[i], ranges[i + 1]));
            }
        }
        this.shardGradients = List.copyOf(slices);

        Map<String, Trainable> trainables = replica.trainables();
        List<Piece> built = new ArrayList<>();
        long stateElements = 0;
        for (UpdaterLayout.Block block : layout.blocks()) {
            for (int ri = 0; ri < ranges.length; ri += 2) {
                long a = Math.max(block.start(), ranges[ri]);
                long b = Math.min(block.end(), ranges[ri + 1]);
                if (a >= b) {
                    continue;
                }
                UpdaterLayout.Variable first = block.variables().getFirst();
                IUpdater config = trainable(trainables, first.layer()).getConfig().getUpdaterByParam(first.param());
                List<VariablePiece> vars = new ArrayList<>();
                for (UpdaterLayout.Variable v : block.variables()) {
                    long va = Math.max(v.start(), a);
                    long vb = Math.min(v.end(), b);
                    List<Regularization> regs = trainable(trainables, v.layer()).getConfig().getRegularizationByParam(v.param());
                    if (va < vb && regs != null && !regs.isEmpty()) {
                        vars.add(new VariablePiece(List.copyOf(regs), slice(flatParams, va, vb), slice(flatGradient, va, vb)));
                    }
                }
                built.add(new Piece(block, a, b, stateElements, config, null, slice(flatGradient, a, b), vars));
                stateElements += (long) block.statesPerParam() * (b - a);
            }
        }
        // zeros, then DL4J's values: the state DL4J initialized (or trained) for these elements
        this.state = stateElements == 0 ? null : Nd4j.create(view.dataType(), stateElements);
        List<Piece> withUpdaters = new ArrayList<>(built.size());
        for (Piece p : built) {
            INDArray stateView = p.block().statesPerParam() == 0 ? null
                    : state.get(NDArrayIndex.interval(p.stateOffset(), p.stateOffset() + p.block().statesPerParam() * p.length()));
            // with an initial state, its values come from DL4J's own initialized state (importState); without one
            // (stage 3 started from a configuration) DL4J's updater initialises the shard as it would the whole state
            GradientUpdater u = p.config().instantiate(stateView, initialState == null);
            withUpdaters.add(new Piece(p.block(), p.start(), p.end(), p.stateOffset(), p.config(), u, p.gradient(), p.variables()));
        }
        this.pieces = List.copyOf(withUpdaters);
        if (initialState != null) {
            importState(initialState);
        }

        // Norm slots are numbered the same on every rank (from the layout), intersecting or not:
        // the small all-reduce needs the same count everywhere.
        List<NormTerm> terms = new ArrayList<>();
        int slots = 0;
        for (UpdaterLayout.LayerNormalization ln : layout.normalizations()) {
            switch (ln.kind()) {
                case RenormalizeL2PerLayer, ClipL2PerLayer -> terms.add(term(ln.kind(), ln.threshold(), slots++, ln.variables()));
                case RenormalizeL2PerParamType, ClipL2PerParamType -> {
                    for (UpdaterLayout.Variable v : ln.variables()) {
                        terms.add(term(ln.kind(), ln.threshold(), slots++, List.of(v)));
                    }
                }
                case ClipElementWiseAbsoluteValue -> terms.add(term(ln.kind(), ln.threshold(), -1, ln.variables()));
                default -> throw new IllegalArgumentException("gradient normalization " + ln.kind() + " of layer "
                        + ln.layer() + " is not supported by sharding: expected one of DL4J 1.0.0-M2.1's five kinds"
                        + " (fix: use DL4J 1.0.0-M2.1 and one of RenormalizeL2PerLayer, RenormalizeL2PerParamType,"
                        + " ClipL2PerLayer, ClipL2PerParamType, ClipElementWiseAbsoluteValue, or train without sharding(...))");
            }
        }
        this.normTerms = List.copyOf(terms);
        this.normSlots = slots;
        this.agreementAlgorithm = AlgorithmPolicy.oneShotWhereItRuns(comm, 1 + slots, DType.FLOAT64, ReduceOp.SUM);
        this.norms = new double[slots];
        this.agreement = Arena.ofAuto().allocate(8L * (1 + slots), 64);
    }

    private NormTerm term(GradientNormalization kind, double threshold, int slot, List<UpdaterLayout.Variable> vars) {
        List<Long> ranges = new ArrayList<>();
        List<INDArray> slices = new ArrayList<>();
        for (UpdaterLayout.Variable v : vars) {
            for (int ri = 0; ri < this.ranges.length; ri += 2) {
                long a = Math.max(v.start(), this.ranges[ri]);
                long b = Math.min(v.end(), this.ranges[ri + 1]);
                if (a < b) {
                    ranges.add(a);
                    ranges.add(b);
                    slices.add(slice(flatGradient, a, b));
                }
            }
        }
        return new NormTerm(kind, threshold, slot, ranges.stream().mapToLong(Long::longValue).toArray(), List.copyOf(slices));
    }

    private static Trainable trainable(Map<String, Trainable> trainables, String layer) {
        Trainable t = trainables.get(layer);
        if (t == null) {
            throw Invariants.violated("layer " + layer + " of the updater layout is not in the replica (layers: "
                    + trainables.keySet() + ")");
        }
        return t;
    }

    /** A 1-D view of a flat DL4J array; fails if reshaping would copy (writes would then be lost). */
    private static INDArray flatView(INDArray array, String what) {
        INDArray flat = array.reshape(array.length());
        if (ModelReplica.segmentOf(flat).address() != ModelReplica.segmentOf(array).address()) {
            throw Invariants.violated("the flat " + what + " view could not be reshaped without a copy");
        }
        return flat;
    }

    private static INDArray slice(INDArray flat, long from, long to) {
        return flat.get(NDArrayIndex.interval(from, to));
    }

    // ------------------------------------------------------------------ the step

    /** Collective, in the gradient hook: reduces the summed gradient so that at least this rank's shard holds the sum. */
    void reduceGradients() {
        switch (stage) {
            case OPTIMIZER_STATE -> synchronizer.allReduce(ReduceOp.SUM);
            case GRADIENTS -> comm.reduceScatter(gradients, 0, count, dtype, ReduceOp.SUM);
            case PARAMETERS -> {
                // reduce-scattered layer by layer during backprop (FullySharded)
            }
        }
    }

    /**
     * In the gradient hook after {@link #reduceGradients}: divides the shard by the step's
     * examples, the same division plain data parallelism applies to the whole view (not
     * collective).
     */
    void divideShard(long stepExamples) {
        for (INDArray g : shardGradients) {
            g.divi(stepExamples);
        }
    }

    /**
     * Collective, in the gradient hook once the shard holds what DL4J's updater is to receive
     * ({@link #divideShard}, then any merged state updates written over it): agrees with the other
     * ranks, in one small all-reduce, on whether any shard holds NaN or an infinity and on the
     * squared norms gradient normalization needs. Returns the number of ranks whose shard is not
     * finite: the same on every rank.
     */
    long agree() {
        long dsize = dtype.byteSize();
        boolean bad = firstNonFiniteOwned() >= 0;
        agreement.set(ValueLayout.JAVA_DOUBLE, 0, bad ? 1 : 0);
        for (NormTerm t : normTerms) {
            if (t.slot() >= 0) {
                agreement.set(ValueLayout.JAVA_DOUBLE, 8L * (1 + t.slot()), sumOfSquares(t.ranges()));
            }
        }
        // ONE_SHOT adds ranks in rank order and every rank computes every element: identical norms everywhere
        comm.allReduce(agreement, 1 + normSlots, DType.FLOAT64, ReduceOp.SUM, agreementAlgorithm);
        for (int s = 0; s < normSlots; s++) {
            double l2 = Math.sqrt(agreement.get(ValueLayout.JAVA_DOUBLE, 8L * (1 + s)));
            // DL4J's norm2Number() is a number of the gradient's type: round ours to it too
            norms[s] = dtype == DType.FLOAT64 ? l2 : (float) l2;
        }
        return (long) agreement.get(ValueLayout.JAVA_DOUBLE, 0);
    }

    /** Collective, only after {@link #agree} found a non-finite shard: the smallest such element index over all shards. */
    long firstNonFiniteIndex() {
        long local = firstNonFiniteOwned();
        agreement.set(ValueLayout.JAVA_DOUBLE, 0, local >= 0 ? local : Double.MAX_VALUE);
        comm.allReduce(agreement, 1, DType.FLOAT64, ReduceOp.MIN,
                AlgorithmPolicy.oneShotWhereItRuns(comm, 1, DType.FLOAT64, ReduceOp.MIN));
        return (long) agreement.get(ValueLayout.JAVA_DOUBLE, 0);
    }

    /** The first non-finite element this rank owns (its index in the flat vector), or -1. */
    private long firstNonFiniteOwned() {
        for (int i = 0; i < ranges.length; i += 2) {
            if (ranges[i] < ranges[i + 1]) {
                long bad = reducer.firstNonFinite(gradientSegment, ranges[i] * dtype.byteSize(), dtype, ranges[i + 1] - ranges[i]);
                if (bad >= 0) {
                    return ranges[i] + bad;
                }
            }
        }
        return -1;
    }

    private double sumOfSquares(long[] ranges) {
        double sum = 0;
        for (int i = 0; i < ranges.length; i += 2) {
            for (long e = ranges[i]; e < ranges[i + 1]; e++) {
                double g = switch (dtype) {
                    case FLOAT64 -> gradientSegment.get(ValueLayout.JAVA_DOUBLE_UNALIGNED, e * 8);
                    case FLOAT32 -> gradientSegment.get(ValueLayout.JAVA_FLOAT_UNALIGNED, e * 4);
                    case BFLOAT16 -> BFloat16.toFloat(gradientSegment.get(ValueLayout.JAVA_SHORT_UNALIGNED, e * 2));
                };
                sum += g * g;
            }
        }
        return sum;
    }

    /**
     * Collective, where DL4J's updater runs: normalization, regularization and the updaters on the
     * shard, then the in-place all-gather that gives every replica the whole update.
     */
    void update(Gradient gradient, int iteration, int epoch) {
        if (gradient != null && gradient.gradient() != null
                && ModelReplica.segmentOf(gradient.gradient()).address() != gradientSegment.address()) {
            throw new IllegalStateException("DL4J passed a gradient other than the network's flat gradient view"
                    + " (an external gradient, as RL4J uses); sharded updates need the view the workers registered"
                    + " (fix: train through SymmemParallelWrapper.fit(...), or train this model without sharding(...))");
        }
        normalize();
        for (Piece p : pieces) {
            if (p.block().pretrain()) {
                continue; // DL4J's supervised update skips pretrain-only blocks too
            }
            // as UpdaterBlock: the block's learning rate for regularizations that scale with it
            double lr = p.config().hasLearningRate() ? p.config().getLearningRate(iteration, epoch) : 1.0;
            regularize(p, Regularization.ApplyStep.BEFORE_UPDATER, lr, iteration, epoch);
            p.updater().applyUpdater(p.gradient(), iteration, epoch);
            regularize(p, Regularization.ApplyStep.POST_UPDATER, lr, iteration, epoch);
        }
        if (stage == ZeroStage.PARAMETERS) {
            return; // every rank subtracts its own blocks' update from its own blocks (FullySharded's step)
        }
        long t0 = System.nanoTime();
        comm.allGather(gradients, 0, count, dtype);
        gatherNanos += System.nanoTime() - t0;
    }

    private static void regularize(Piece p, Regularization.ApplyStep step, double lr, int iteration, int epoch) {
        for (VariablePiece v : p.variables()) {
            for (Regularization r : v.regularizations()) {
                if (r.applyStep() == step) {
                    r.apply(v.params(), v.gradient(), lr, iteration, epoch);
                }
            }
        }
    }

    /** DL4J's {@code BaseMultiLayerUpdater.preApply}, with norms over the whole layer or parameter array, not the shard. */
    private void normalize() {
        for (NormTerm t : normTerms) {
            switch (t.kind()) {
                case RenormalizeL2PerLayer, RenormalizeL2PerParamType -> {
                    double l2 = norms[t.slot()];
                    if (l2 == 0.0) {
                        l2 = 1e-5; // DL4J's guard against 0/0
                    }
                    for (INDArray g : t.gradients()) {
                        g.divi(l2);
                    }
                }
                case ClipElementWiseAbsoluteValue -> {
                    for (INDArray g : t.gradients()) {
                        CustomOp op = DynamicCustomOp.builder("clipbyvalue").addInputs(g).callInplace(true)
                                .addFloatingPointArguments(-t.threshold(), t.threshold()).build();
                        Nd4j.getExecutioner().exec(op);
                    }
                }
                case ClipL2PerLayer -> {
                    double l2 = norms[t.slot()];
                    if (l2 > t.threshold()) {
                        double scale = t.threshold() / l2;
                        for (INDArray g : t.gradients()) {
                            g.muli(scale);
                        }
                    }
                }
                case ClipL2PerParamType -> {
                    double l2 = norms[t.slot()];
                    if (l2 > t.threshold()) {
                        double scale = l2 / t.threshold();
                        for (INDArray g : t.gradients()) {
                            g.divi(scale);
                        }
                    }
                }
                default -> throw Invariants.violated("unreachable: rejected at construction: " + t.kind());
            }
        }
    }

    /** Nanoseconds spent in the all-gather since the last call. */
    long takeGatherNanos() {
        long n = gatherNanos;
        gatherNanos = 0;
        return n;
    }

    // ------------------------------------------------------------------ state

    /** This rank's updater state (null when no block in the shard keeps state). */
    INDArray state() {
        return state;
    }

    long stateBytes() {
        return state == null ? 0 : state.length() * state.dataType().width();
    }

    /** The first owned element (stages 1 and 2: the shard is [start(), end())). */
    long start() {
        return start;
    }

    /** The owned elements, [from, to) pairs in ascending order. */
    long[] ranges() {
        return ranges.clone();
    }

    long end() {
        return end;
    }

    ZeroStage stage() {
        return stage;
    }

    UpdaterLayout layout() {
        return layout;
    }

    /** Copies this shard's state out of DL4J's full updater-state layout. */
    void importState(INDArray fullState) {
        copyState(fullState, true);
    }

    /** Writes this shard's state into DL4J's full updater-state layout (the other shards' elements are left alone). */
    void exportState(INDArray fullState) {
        copyState(fullState, false);
    }

    /**
     * Writes every rank's shard into {@code fullState}, on every rank: for a group whose ranks do not
     * share this JVM (group mode), where the wrapper cannot read the other shards itself. Each rank
     * writes its shard into symmetric memory of the full state's size filled with -0.0, and the group
     * sums it: every element has one owner, and the others add -0.0, which leaves every value — -0.0
     * and NaN included — bitwise as the owner wrote it (x + -0.0 == x, exactly, in IEEE arithmetic). So
     * every rank ends with what {@link #exportState} of every worker writes in thread mode. Collective;
     * on the wrapper's thread while the worker is idle.
     *
     * @param fullState DL4J's full updater-state view of the model, overwritten with every shard
     */
    void gatherFullState(INDArray fullState) {
        long n = fullState.length();
        DType type = ModelReplica.dtypeOf(fullState.dataType());
        try (SymmetricMemory all = SymmetricMemory.allocate(comm.group(), Math.max(64, type.bytes(n)))) {
            MemorySegment mine = all.local().asSlice(0, type.bytes(n));
            fillNegativeZero(mine, type, n);
            exportState(ModelReplica.arrayOver(mine, fullState.dataType(), n).reshape(fullState.shape()));
            comm.allReduce(all, 0, n, type, ReduceOp.SUM, AlgorithmPolicy.oneShotWhereItRuns(comm, n, type, ReduceOp.SUM));
            MemorySegment.copy(mine, 0, ModelReplica.segmentOf(fullState), 0, type.bytes(n));
        }
    }

    /**
     * Fills {@code n} elements of {@code segment} with -0.0, bit for bit (a sign bit alone): the start of a sum over
     * ranks in which every element has one owner ({@link #gatherFullState}), since x + -0.0 == x exactly.
     */
    static void fillNegativeZero(MemorySegment segment, DType type, long n) {
        for (long i = 0; i < n; i++) {
            switch (type) {
                case FLOAT64 -> segment.setAtIndex(ValueLayout.JAVA_LONG, i, Long.MIN_VALUE);
                case FLOAT32 -> segment.setAtIndex(ValueLayout.JAVA_INT, i, Integer.MIN_VALUE);
                case BFLOAT16 -> segment.setAtIndex(ValueLayout.JAVA_SHORT, i, Short.MIN_VALUE);
            }
        }
    }

    /**
     * Where the state of parameters {@code [from, to)} lies in DL4J's full updater state of {@code layout}, in the
     * order a shard of that range keeps it contiguously (block by block, per block one run per state array: Adam's m,
     * then v): {@code {start, length}} pairs, as {@link #forEachStateRun} walks a shard's pieces.
     */
    static List<long[]> stateRuns(UpdaterLayout layout, long from, long to) {
        List<long[]> runs = new ArrayList<>();
        for (UpdaterLayout.Block block : layout.blocks()) {
            long a = Math.max(block.start(), from);
            long b = Math.min(block.end(), to);
            for (int j = 0; a < b && j < block.statesPerParam(); j++) {
                runs.add(new long[] {block.stateStart() + j * block.length() + (a - block.start()), b - a});
            }
        }
        return runs;
    }

    /**
     * This rank's state by the parameters it belongs to, in the order {@link #forEachStateRun} walks it:
     * {@code {paramStart, paramEnd, section, offset}}, the state section {@code section} (Adam: 0 the first moments, 1
     * the second) of parameters {@code [paramStart, paramEnd)} of the flat vector, at element {@code offset} of
     * {@link #state()}. For hand-overs into a network whose updater blocks differ from this one's (a pipeline stage's
     * state into the whole model's), which map parameters, not state offsets.
     */
    List<long[]> stateRunsByParameter() {
        List<long[]> runs = new ArrayList<>();
        for (Piece p : pieces) {
            for (int j = 0; j < p.block().statesPerParam(); j++) {
                runs.add(new long[] {p.start(), p.end(), j, p.stateOffset() + j * p.length()});
            }
        }
        return runs;
    }

    /** Whether DL4J's full state holds exactly this shard's state, bitwise. */
    boolean stateMatches(INDArray fullState) {
        return forEachStateRun(fullState, (full, fullAt, mine, mineAt, bytes) ->
                MemorySegment.mismatch(full, fullAt, fullAt + bytes, mine, mineAt, mineAt + bytes) == -1);
    }

    private void copyState(INDArray fullState, boolean intoShard) {
        forEachStateRun(fullState, (full, fullAt, mine, mineAt, bytes) -> {
            if (intoShard) {
                MemorySegment.copy(full, fullAt, mine, mineAt, bytes);
            } else {
                MemorySegment.copy(mine, mineAt, full, fullAt, bytes);
            }
            return true;
        });
    }

    /** One contiguous run of state that this shard keeps: where it lies in DL4J's full state and in the shard. */
    private interface StateRun {
        /** Returns false to stop the walk. */
        boolean visit(MemorySegment full, long fullAt, MemorySegment mine, long mineAt, long bytes);
    }

    /**
     * Walks the runs of DL4J's full updater state that this shard holds (per piece, one run per state
     * element kind: Adam's m, then v), byte offsets in both arrays. Returns false if the visitor
     * stopped the walk; true when the walk finished or there is no state.
     */
    private boolean forEachStateRun(INDArray fullState, StateRun visitor) {
        if (state == null) {
            return true;
        }
        checkFullState(fullState);
        MemorySegment full = ModelReplica.segmentOf(fullState);
        MemorySegment mine = ModelReplica.segmentOf(state);
        long w = state.dataType().width();
        for (Piece p : pieces) {
            long n = p.block().length();
            for (int j = 0; j < p.block().statesPerParam(); j++) {
                long fullAt = (p.block().stateStart() + j * n + (p.start() - p.block().start())) * w;
                long mineAt = (p.stateOffset() + j * p.length()) * w;
                if (!visitor.visit(full, fullAt, mine, mineAt, p.length() * w)) {
                    return false;
                }
            }
        }
        return true;
    }

    private void checkFullState(INDArray fullState) {
        if (fullState == null || fullState.length() != layout.stateCount() || fullState.dataType() != state.dataType()) {
            throw Invariants.violated("full updater state: expected " + layout.stateCount() + " x "
                    + state.dataType() + " (DL4J's state view of this network); found "
                    + (fullState == null ? "null" : fullState.length() + " x " + fullState.dataType()));
        }
    }

    // ------------------------------------------------------------------ DL4J adapters

    /** Takes the place of DL4J's {@code MultiLayerUpdater} in a replica; holds no state of its own. */
    static final class ForMultiLayer implements Updater {
        private static final long serialVersionUID = 1L;
        private final transient ShardedUpdater sharded;

        ForMultiLayer(ShardedUpdater sharded) {
            this.sharded = sharded;
        }

        @Override
        public void setStateViewArray(Trainable layer, INDArray viewArray, boolean initialize) {
            throw new UnsupportedOperationException("a sharded replica's updater state is set per shard by the wrapper"
                    + " (fix: set it on the wrapper's model; SymmemParallelWrapper copies the model's state"
                    + " into the shards at the next fit)");
        }

        @Override
        public INDArray getStateViewArray() {
            return sharded.state();
        }

        @Override
        public void update(Trainable layer, Gradient gradient, int iteration, int epoch, int batchSize,
                           LayerWorkspaceMgr workspaceMgr) {
            sharded.update(gradient, iteration, epoch);
        }
    }

    /**
     * Takes the place of DL4J's {@code ComputationGraphUpdater} in a graph replica (DL4J's optimizer
     * only accepts that type). It reports no layers to its DL4J superclass, so DL4J builds no
     * updater blocks and allocates no full-size state.
     */
    static final class ForGraph extends ComputationGraphUpdater {
        private static final Trainable[] NO_LAYERS = new Trainable[0];
        private final transient ShardedUpdater sharded;

        ForGraph(ComputationGraph graph, ShardedUpdater sharded) {
            super(graph, null);
            this.sharded = sharded;
        }

        @Override
        protected Trainable[] getOrderedLayers() {
            return NO_LAYERS; // called by DL4J's constructor, before this class's fields are set
        }

        @Override
        public synchronized void update(Gradient gradient, int iteration, int epoch, int batchSize,
                                        LayerWorkspaceMgr workspaceMgr) {
            sharded.update(gradient, iteration, epoch);
        }

        @Override
        public INDArray getStateViewArray() {
            return sharded.state();
        }

        @Override
        public void setStateViewArray(INDArray viewArray) {
            throw new UnsupportedOperationException("a sharded replica's updater state is set per shard by the wrapper"
                    + " (fix: set it on the wrapper's model; SymmemParallelWrapper copies the model's state"
                    + " into the shards at the next fit)");
        }
    }
}
