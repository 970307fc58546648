package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.memory.ReservedMemory;

/**
 * ZeRO stage 1 ({@link ZeroStage#OPTIMIZER_STATE}) or 2 ({@link ZeroStage#GRADIENTS}: the gradient reduce-scattered
 * here, {@link #step}) for one network among data-parallel replicas that each hold all of it: this replica keeps DL4J updater state (Adam moments, momentum, ...) only for its 1/N block of the flat parameter
 * vector ({@code ShardPartition} block {@code rank} of the communicator's group, as the wrapper's stage 1 cuts it),
 * runs DL4J's updater arithmetic on that block (the wrapper's {@link ShardedUpdater}), and all-gathers the update, so
 * every replica subtracts the same whole update. Used by the pipeline trainer for each stage's dp replicas
 * ({@code PipelineParallelTrainerBuilder.sharding}); the wrapper's own stage 1 does not go through this class.
 *
 * <p>While installed, the network's updater is the shard's ({@code getUpdater().getStateViewArray()} is the shard's
 * state, 1/N of DL4J's), and DL4J's full updater state is not held. {@link #materialize} gives the network DL4J's own
 * updater back, its state written from every shard, for a hand-over of the whole state (the model after fit);
 * {@link #shardAgain} takes it back into the shard. In group mode the caller gathers the whole state over the group
 * ({@link #sumOfBlocks} of every rank's {@link #exportBlock}) and gives it to {@link #materialize(INDArray)}.
 *
 * <p>Stage 3 ({@link ZeroStage#PARAMETERS}) for a network each replica runs whole during a step (a pipeline stage):
 * the same block, but the parameters too are this block's only between steps. {@link #step} reduce-scatters the
 * gradient, updates the block and subtracts the update from the block's parameters only (no all-gather of the
 * update), then gives the pages of the parameters and gradient view outside the block back to the operating system
 * ({@link ReservedMemory#giveBack}, {@link SymmetricMemory#decommit} for a view moved into shared memory): they read
 * zero until {@link #gatherParameters} (collective, before the next step's first forward) all-gathers the blocks into
 * the whole parameters again. Every element's update is the one stage 2 computes and all-gathers, subtracted from
 * the same parameter by its owner instead of by every replica: the same bits. {@link #materialize} also writes the
 * whole parameters from the blocks for a hand-over; {@link #shardAgain} releases the others' pages again.
 *
 * <p>Not thread-safe: {@link #step} runs on the replica's thread; {@link #materialize} and {@link #shardAgain} while
 * every replica is idle.
 */
public final class OptimizerStateShard implements AutoCloseable {

    private final MultiLayerNetwork network;
    private final ModelReplica replica;
    private final ShardedUpdater sharded;
    /** The gradient view registered over the group, for the update's in-place all-gather. */
    private final SymmetricMemory gradients;
    private final boolean miniBatch;
    /** OPTIMIZER_STATE (the caller sums the gradient) or GRADIENTS ({@link #step} reduce-scatters it). */
    private final ZeroStage stage;
    private boolean closed;
    /** Whether the network holds DL4J's full updater (between {@link #materialize} and {@link #shardAgain}). */
    private boolean materialized;
    /** The replicas' communicator: stage 3's reduce-scatter and parameter all-gather. */
    private final Communicator comm;
    /** Whether the gradient view was moved into {@link #gradients} (allocated, shared): released with decommit. */
    private final boolean moved;
    /** Stage 3: whether the parameters outside the block were given back (and read zero) since the last gather. */
    private boolean released;

    private OptimizerStateShard(MultiLayerNetwork network, ModelReplica replica, ShardedUpdater sharded,
                                SymmetricMemory gradients, ZeroStage stage, Communicator comm, boolean moved) {
        this.stage = stage;
        this.comm = comm;
        this.moved = moved;
        this.network = network;
        this.replica = replica;
        this.sharded = sharded;
        this.gradients = gradients;
        this.miniBatch = network.getLayerWiseConfigurations().getConf(0).isMiniBatch();
    }

    /**
     * Shards {@code network}'s updater state over {@code comm}'s group: takes this replica's block of DL4J's current
     * state, then replaces DL4J's updater (and its full state) by the shard's. Collective over the group (the network's
     * gradient view is registered as symmetric memory; on a transport that cannot register, as the processes of one
     * machine, it is moved into symmetric memory instead, zeroed: call it before the gradient view is written): every
     * replica calls it with its own network, all alike.
     *
     * @param network a replica of the network: the same configuration and updater state on every rank
     * @param comm    the replicas' communicator (not closed here)
     * @return the installed shard
     */
    public static OptimizerStateShard install(MultiLayerNetwork network, Communicator comm) {
        return install(network, comm, ZeroStage.OPTIMIZER_STATE);
    }

    /**
     * As {@link #install(MultiLayerNetwork, Communicator)}, for ZeRO stage 1 or 2: with {@link ZeroStage#GRADIENTS}
     * the caller writes this replica's own (unsummed) gradient into the gradient view, and {@link #step} first
     * reduce-scatters it in place, so this replica only ever sums its own block (peers added in rank order: bitwise
     * the block of the all-reduce stage 1's caller runs).
     *
     * @param network a replica of the network: the same configuration and updater state on every rank
     * @param comm    the replicas' communicator (not closed here)
     * @param stage   OPTIMIZER_STATE, GRADIENTS, or PARAMETERS (stage 3 of a network each replica runs whole during a
     *                step: the parameters outside the block given back between steps, see the class comment)
     * @return the installed shard
     */
    public static OptimizerStateShard install(MultiLayerNetwork network, Communicator comm, ZeroStage stage) {
        ModelReplica replica = ModelReplica.of(network);
        BaseMultiLayerUpdater<?> dl4j = replica.dl4jUpdater();
        INDArray initialState = dl4j.getStateViewArray();
        INDArray view = replica.gradientView();
        Group group = comm.group();
        SymmetricMemory gradients;
        boolean moved = false;
        if (group.transport().capabilities(group).supports(TransportCapabilities.Capability.REGISTER)) {
            gradients = SymmetricMemory.register(group, ModelReplica.segmentOf(view));
        } else {
            // processes (/dev/shm): no private buffer can be shared, so the gradient view moves into symmetric memory
            // (zeroed; the caller writes the step's gradient after install), as the wrapper's gradientHome; DL4J's
            // updater keeps views of the old one, so it is dropped first and rebuilt over the new view
            long bytes = view.length() * view.dataType().width();
            gradients = SymmetricMemory.allocate(group, Math.max(64, bytes));
            initialState = initialState == null ? null : initialState.dup();
            network.setUpdater(null);
            replica.placeGradientView(gradients.local().asSlice(0, bytes));
            dl4j = replica.dl4jUpdater();
            moved = true;
        }
        UpdaterLayout layout = UpdaterLayout.of(dl4j, network.numParams());
        // no synchronizer: stage 1's caller has summed the gradient over the replicas already, stage 2 reduce-scatters
        // it in step() (ShardedUpdater.reduceGradients)
        // stage 3 owns the same block (ShardPartition block rank of the whole vector), given as its one own range: the
        // updater then leaves the subtraction to step()
        long[] own = null;
        if (stage == ZeroStage.PARAMETERS) {
            ShardPartition partition = ShardPartition.of(network.numParams(), group.worldSize(),
                    ModelReplica.dtypeOf(view.dataType()));
            own = new long[] {partition.start(group.rank()), partition.end(group.rank())};
        }
        ShardedUpdater sharded = new ShardedUpdater(stage, layout, replica, comm, gradients, null, initialState, own);
        replica.installUpdater(sharded);
        return new OptimizerStateShard(network, replica, sharded, gradients, stage, comm, moved);
    }

    /**
     * One update, where DL4J's updater would run, once the gradient view holds the gradient summed over every replica's
     * examples (stage 1), or this replica's own gradient, which stage 2 reduce-scatters first (collective, in place: this
     * block then holds the sum): this block divided by {@code examples} (minibatch training, as DL4J's updater divides), gradient
     * normalization with norms agreed over the group, regularization and the updater on this block, then the in-place
     * all-gather, after which the gradient view holds the whole update (the caller subtracts it from the parameters).
     * Collective over the group.
     *
     * @param examples  the step's examples over every replica
     * @param iteration the network's iteration count
     * @param epoch     the network's epoch count
     */
    public void step(long examples, int iteration, int epoch) {
        if (closed) {
            throw Invariants.violated("a sharded step after close(): the trainer's ranks were stopped");
        }
        if (materialized) {
            throw Invariants.violated("a sharded step while the network holds DL4J's full updater (shardAgain first)");
        }
        if (released) {
            throw Invariants.violated("a stage-3 step on parameters given back (gatherParameters before the forward)");
        }
        if (stage == ZeroStage.GRADIENTS) {
            sharded.reduceGradients(); // this block summed over the replicas, in rank order
        } else if (stage == ZeroStage.PARAMETERS) {
            // as stage 2's (ShardedUpdater.reduceGradients does nothing for FullySharded's per-layer stage 3)
            comm.reduceScatter(gradients, 0, sharded.layout().paramCount(), dtype(), ReduceOp.SUM);
        }
        if (miniBatch) {
            sharded.divideShard(examples);
        }
        sharded.agree(); // the norms gradient normalization needs; non-finite values go on as DL4J's updater lets them
        sharded.update(null, iteration, epoch);
        if (stage == ZeroStage.PARAMETERS) {
            // the block's parameters minus the block's update, the subtraction stage 2's every replica does for every
            // element; the others' blocks are theirs to update, so this replica's copy of them is given back
            long[] block = sharded.ranges();
            INDArray params = replica.params().reshape(replica.params().length());
            INDArray update = replica.gradientView().reshape(replica.gradientView().length());
            if (block[0] < block[1]) {
                params.get(NDArrayIndex.interval(block[0], block[1])).subi(
                        update.get(NDArrayIndex.interval(block[0], block[1])));
            }
            releaseOthers();
        }
    }

    /**
     * Stage 3, before a step's first forward: all-gathers the replicas' blocks into the whole parameters, in place
     * (each replica's block copied into its block of the gradient view, which is symmetric memory and free until the
     * backward writes it, the all-gather there, the whole vector copied into the parameters). Collective over the
     * replicas; does nothing (on every replica alike) unless the parameters outside the block were given back.
     */
    public void gatherParameters() {
        if (!released) {
            return;
        }
        long count = sharded.layout().paramCount();
        long width = replica.params().dataType().width();
        long[] block = sharded.ranges();
        MemorySegment params = ModelReplica.segmentOf(replica.params());
        MemorySegment view = gradients.local();
        MemorySegment.copy(params, block[0] * width, view, block[0] * width, (block[1] - block[0]) * width);
        comm.allGather(gradients, 0, count, dtype());
        MemorySegment.copy(view, 0, params, 0, count * width); // every block as its owner wrote it: the same bits
        released = false;
    }

    /** Stage 3: gives back the pages of the parameters and gradient view outside this replica's block. */
    private void releaseOthers() {
        long count = sharded.layout().paramCount();
        long width = replica.params().dataType().width();
        long[] block = sharded.ranges();
        MemorySegment params = ModelReplica.segmentOf(replica.params());
        ReservedMemory.giveBack(params, 0, block[0] * width);
        ReservedMemory.giveBack(params, block[1] * width, (count - block[1]) * width);
        if (moved) {
            gradients.decommit(0, block[0] * width);
            gradients.decommit(block[1] * width, (count - block[1]) * width);
        } else {
            MemorySegment view = ModelReplica.segmentOf(replica.gradientView());
            ReservedMemory.giveBack(view, 0, block[0] * width);
            ReservedMemory.giveBack(view, block[1] * width, (count - block[1]) * width);
        }
        released = true;
    }

    /**
     * Stage 3: the resident bytes of this replica's parameters and gradient view ({@code mincore}): its block's, plus at
     * most the pages its block's ends share with the others', between steps; the whole of both during a step.
     */
    public long residentParameterAndGradientBytes() {
        long bytes = sharded.layout().paramCount() * replica.params().dataType().width();
        MemorySegment view = moved ? gradients.local() : ModelReplica.segmentOf(replica.gradientView());
        return ReservedMemory.residentBytes(ModelReplica.segmentOf(replica.params()), 0, bytes)
                + (moved ? gradients.residentBytes(0, bytes) : ReservedMemory.residentBytes(view, 0, bytes));
    }

    /** {@return the ZeRO stage this shard runs} */
    public ZeroStage stage() {
        return stage;
    }

    /** {@return this replica's block of the flat parameter vector, {from, to}} */
    public long[] block() {
        return sharded.ranges();
    }

    /**
     * Stage 3, between steps: the bytes this replica holds of the parameters and gradient view (its block of each) and
     * of the updater state; other stages hold the whole parameters and gradient view.
     */
    public long heldBytes() {
        long width = replica.params().dataType().width();
        long[] block = sharded.ranges();
        long paramElements = stage == ZeroStage.PARAMETERS ? block[1] - block[0] : sharded.layout().paramCount();
        return 2 * paramElements * width + stateBytes();
    }

    private DType dtype() {
        return ModelReplica.dtypeOf(replica.params().dataType());
    }

    /**
     * Releases the gradient view's registration over the group; collective (every replica, when its rank stops).
     * The block of state stays readable: {@link #materialize} still gathers it.
     */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            gradients.close();
        }
    }

    /** {@return the bytes of updater state this replica holds: its block's} */
    public long stateBytes() {
        return sharded.stateBytes();
    }

    /**
     * Gives each shard's network DL4J's own updater again, its whole state written from every shard of
     * {@code replicas} (all in this process: thread mode). Not collective; every replica idle.
     *
     * @param toMaterialize the shards whose networks get the whole state
     * @param replicas      every replica's shard of the same network, in rank order
     */
    public static void materialize(List<OptimizerStateShard> toMaterialize, List<OptimizerStateShard> replicas) {
        for (OptimizerStateShard s : toMaterialize) {
            if (s.released) {
                // stage 3: every replica's block of the parameters, and of the last update in the gradient view (what
                // a listener reads as the model's gradient after a step), as its owner holds it
                long width = s.replica.params().dataType().width();
                MemorySegment to = ModelReplica.segmentOf(s.replica.params());
                MemorySegment updateTo = ModelReplica.segmentOf(s.replica.gradientView());
                for (OptimizerStateShard r : replicas) {
                    long[] b = r.sharded.ranges();
                    MemorySegment.copy(ModelReplica.segmentOf(r.replica.params()), b[0] * width, to, b[0] * width,
                            (b[1] - b[0]) * width);
                    MemorySegment.copy(ModelReplica.segmentOf(r.replica.gradientView()), b[0] * width, updateTo,
                            b[0] * width, (b[1] - b[0]) * width);
                }
                s.released = false;
            }
            if (s.materialized) {
                continue;
            }
            s.network.setUpdater(null);
            Updater fresh = s.network.getUpdater(true); // DL4J's updater with its full state view
            INDArray full = fresh.getStateViewArray();
            if (full != null) {
                for (OptimizerStateShard r : replicas) {
                    r.sharded.exportState(full); // every element is one shard's: together they write all of it
                }
            }
            s.materialized = true;
        }
    }

    /**
     * One run of this replica's block of updater state, by the parameters it belongs to: state section {@code section}
     * (Adam: 0 the first moments, 1 the second) of the network's flat parameters {@code [paramStart, paramEnd)}, at
     * element {@code offset} of {@link #state()}.
     */
    public record StateRun(long paramStart, long paramEnd, int section, long offset) {
    }

    /**
     * {@return this replica's block of updater state as runs by parameter, for a hand-over straight into another
     * network's updater (a pipeline model whose updater blocks are not this stage's), without {@link #materialize}}
     */
    public List<StateRun> stateRuns() {
        List<StateRun> runs = new ArrayList<>();
        for (long[] r : sharded.stateRunsByParameter()) {
            runs.add(new StateRun(r[0], r[1], (int) r[2], r[3]));
        }
        return runs;
    }

    /**
     * {@return this replica's block of updater state (its runs: {@link #stateRuns}), null when the updater keeps none;
     * not valid while materialized}
     */
    public INDArray state() {
        if (materialized) {
            throw Invariants.violated("the shard's state read while the network holds DL4J's full updater");
        }
        return sharded.state();
    }

    /** {@return the elements of DL4J's whole updater state of the network: every replica's blocks together} */
    public long wholeStateLength() {
        return sharded.layout().stateCount();
    }

    /**
     * Writes this replica's block of the state into {@code whole}, DL4J's whole updater-state layout of the network
     * (the other replicas' elements are left alone). Not collective.
     *
     * @param whole an array of {@link #wholeStateLength()} elements of the network's type
     */
    public void exportBlock(INDArray whole) {
        sharded.exportState(whole);
    }

    /**
     * Writes this replica's block of the parameters into {@code whole} (the network's flat layout; the others' elements
     * left alone), for a group-mode gather ({@link #sumOfBlocks}). Not collective.
     *
     * @param whole an array of the network's parameter count, of its type
     */
    public void exportParameterBlock(INDArray whole) {
        long width = whole.dataType().width();
        long[] b = sharded.ranges();
        MemorySegment.copy(ModelReplica.segmentOf(replica.params()), b[0] * width, ModelReplica.segmentOf(whole),
                b[0] * width, (b[1] - b[0]) * width);
    }

    /**
     * Stage 3, group mode: the network's whole parameters from {@code whole}, which the caller gathered from every
     * replica's {@link #exportParameterBlock} ({@link #sumOfBlocks}), until {@link #shardAgain}. Not collective.
     *
     * @param whole the whole parameters, the network's parameter count
     */
    public void materializeParameters(INDArray whole) {
        if (whole.length() != replica.params().length() || whole.dataType() != replica.params().dataType()) {
            throw Invariants.violated("whole parameters: expected " + replica.params().length() + " x "
                    + replica.params().dataType() + ", found " + whole.length() + " x " + whole.dataType());
        }
        MemorySegment.copy(ModelReplica.segmentOf(whole), 0, ModelReplica.segmentOf(replica.params()), 0,
                whole.length() * whole.dataType().width()); // the bits as gathered
        released = false;
    }

    /**
     * As {@link #materialize(List, List)} for a group whose replicas are not all in this process (group mode): the
     * network gets DL4J's own updater again, its state {@code whole}, which the caller gathered from every replica
     * ({@link #sumOfBlocks}). Not collective; {@link #shardAgain} takes the block back.
     *
     * @param whole DL4J's whole updater state of the network, {@link #wholeStateLength()} elements
     */
    public void materialize(INDArray whole) {
        if (materialized) {
            throw Invariants.violated("materialize while the network already holds DL4J's updater (shardAgain first)");
        }
        network.setUpdater(null);
        INDArray full = network.getUpdater(true).getStateViewArray(); // DL4J's updater with its whole state view
        if (full != null) {
            if (full.length() != whole.length() || full.dataType() != whole.dataType()) {
                throw Invariants.violated("whole updater state: expected " + full.length() + " x " + full.dataType()
                        + ", found " + whole.length() + " x " + whole.dataType());
            }
            MemorySegment.copy(ModelReplica.segmentOf(whole), 0, ModelReplica.segmentOf(full), 0,
                    full.length() * full.dataType().width()); // the bits as gathered, NaN payloads and -0.0 included
        }
        materialized = true;
    }

    /**
     * The sum over ranks of arrays in which every element has one owner, bitwise as the owner wrote it: {@code whole}
     * (contiguous) is filled with -0.0, {@code writeOwn} writes this rank's elements (its blocks, or nothing), and
     * {@code sum} adds every rank's array in place; x + -0.0 == x exactly, -0.0 and NaN included (as
     * {@code gatherFullState} of the wrapper's group mode). Collective as {@code sum} is.
     *
     * @param whole    a contiguous array, overwritten with the gathered elements
     * @param writeOwn writes this rank's elements into the array it is given
     * @param sum      the in-place sum over the ranks, in rank order, of the array it is given
     */
    public static void sumOfBlocks(INDArray whole, Consumer<INDArray> writeOwn, Consumer<INDArray> sum) {
        ShardedUpdater.fillNegativeZero(ModelReplica.segmentOf(whole), ModelReplica.dtypeOf(whole.dataType()),
                whole.length());
        writeOwn.accept(whole);
        sum.accept(whole);
    }

    /**
     * Replica {@code replica}'s block of {@code network}'s state as ZeRO stage 1 over {@code replicas} cuts it (the
     * block {@link #install} keeps on that rank): its parameter range and where its state lies in DL4J's whole
     * updater state, for checkpoints that save and read each replica's block on its own.
     *
     * @param paramStart the block's first parameter
     * @param paramEnd   one past its last parameter
     * @param stateRuns  {@code {start, length}} runs of DL4J's whole state, in the order the block keeps them
     */
    public record Block(long paramStart, long paramEnd, List<long[]> stateRuns) {
        public Block {
            stateRuns = List.copyOf(stateRuns);
        }

        /** {@return the block's state elements} */
        public long stateElements() {
            long n = 0;
            for (long[] r : stateRuns) {
                n += r[1];
            }
            return n;
        }

        /** Copies the block's state out of DL4J's whole state {@code whole} into {@code block}, contiguous. */
        public void copyOut(INDArray whole, INDArray block) {
            copy(whole, block, true);
        }

        /** Copies {@code block} (contiguous) into its runs of DL4J's whole state {@code whole}. */
        public void copyIn(INDArray block, INDArray whole) {
            copy(whole, block, false);
        }

        private void copy(INDArray whole, INDArray block, boolean out) {
            MemorySegment w = ModelReplica.segmentOf(whole);
            MemorySegment b = ModelReplica.segmentOf(block);
            long width = whole.dataType().width();
            long at = 0;
            for (long[] r : stateRuns) {
                if (out) {
                    MemorySegment.copy(w, r[0] * width, b, at * width, r[1] * width);
                } else {
                    MemorySegment.copy(b, at * width, w, r[0] * width, r[1] * width);
                }
                at += r[1];
            }
        }
    }

    /**
     * Replica {@code replica}'s block of ZeRO stage 1 over {@code replicas} (see {@link Block}).
     *
     * @param network  the network, holding DL4J's own updater (not sharded now, or materialized)
     * @param replicas the replicas the state is cut over
     * @param replica  the replica, {@code 0 .. replicas - 1}
     * @return the block
     */
    public static Block blockOf(MultiLayerNetwork network, int replicas, int replica) {
        ModelReplica r = ModelReplica.of(network);
        UpdaterLayout layout = UpdaterLayout.of(r.dl4jUpdater(), network.numParams());
        ShardPartition partition = ShardPartition.of(network.numParams(), replicas,
                ModelReplica.dtypeOf(network.params().dataType()));
        long from = partition.start(replica);
        long to = partition.end(replica);
        return new Block(from, to, new ArrayList<>(ShardedUpdater.stateRuns(layout, from, to)));
    }

    /**
     * After {@link #materialize}: takes this replica's block of the (possibly changed) whole state back into the shard
     * and drops DL4J's updater with its full state. Not collective.
     */
    public void shardAgain() {
        if (stage == ZeroStage.PARAMETERS && !released && !closed) {
            releaseOthers(); // the hand-over may have written the parameters: this block keeps what it wrote
        }
        if (!materialized) {
            return;
        }
        INDArray full = replica.dl4jUpdater().getStateViewArray();
        if (full != null) {
            sharded.importState(full);
        }
        replica.installUpdater(sharded);
        materialized = false;
    }
}
