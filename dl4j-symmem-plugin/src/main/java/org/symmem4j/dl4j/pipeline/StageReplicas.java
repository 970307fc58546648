package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import java.util.function.IntPredicate;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.parallel.Group;

/**
 * The stages a {@link PipelineParallelTrainer} trains in this process, one list per data-parallel replica and
 * tensor-parallel shard of its {@code dp x pp x tp} mesh, and everything read or written across all of them: which
 * stages a world rank runs, each replica's step plan, the step's regularization score, the epoch counters, the model's
 * state given to them and taken from them (joined from the shards with tensor parallelism,
 * {@link PipelineTensorParallel}), and the parameters and bytes they hold.
 *
 * <p>Thread mode holds every replica and shard; group mode one replica (with tensor parallelism, this rank's shard of
 * it), whose stages of other pipeline ranks are hollow (layouts over reserved memory, no values). The rank threads, the group's exchange and the step's order stay with
 * the trainer.
 */
final class StageReplicas {

    private final PipelineStageSplit split;
    /** Replica 0's stages (shard 0's with tensor parallelism): the ones whose state the model takes. */
    private final List<Dl4jPipelineStage> first;
    /**
     * Every data-parallel replica's stages, replica 0's first; one list when {@code dataParallel == 1}. With tensor
     * parallelism, replica {@code d}'s shard {@code t} at {@code d * tensorParallel + t}.
     */
    private final List<List<Dl4jPipelineStage>> all;
    private final int dataParallel;
    /** Thread mode: the stages' tensor-parallel shards ({@link PipelineParallelTrainerBuilder#tensorParallel}), or null. */
    private final PipelineTensorParallel tensorShards;
    /** Group mode: this rank's tensor-parallel shard of its stages, or null. */
    private final PipelineTensorParallelRank tensorRank;
    /** Tensor-parallel ranks per pipeline rank; 1 without tensor parallelism. */
    private final int tensorParallel;
    /** The column-parallel layers of the tensor-parallel blocks, or null without tensor parallelism. */
    private final int[] tensorColumns;
    private final int pipelineRanks;
    /** Group mode: this process's rank of the user's group; null in thread mode. */
    private final Group group;
    /** ZeRO stage 1 or 2 on the dp axis ({@link PipelineZero}): the model's hand-overs gather the stages' updater state. */
    private final boolean shardedState;
    /** That ZeRO stage, or null. */
    private final ZeroStage sharding;
    /** The last step's batch cut into microbatches, whose arrays the next step's cut overwrites where they fit. */
    private Microbatches cut;

    /**
     * Builds the stages: every replica (thread mode) or this process's one (group mode, whose stages of other pipeline
     * ranks are hollow, carrying the layouts for mask propagation and for the gather of the model from their ranks),
     * each from the same copy of the network's parameters, updater state and counters. With tensor parallelism in
     * group mode ({@code tensorColumns} non-null there) this rank's shard of its stages only
     * ({@link PipelineTensorParallelRank}).
     */
    StageReplicas(PipelineStageSplit split, PipelineModel model, int dataParallel, PipelineTensorParallel tensorShards,
                  int tensorParallel, int[] tensorColumns, int pipelineRanks, Group group, ZeroStage sharding) {
        this.split = split;
        this.shardedState = sharding != null;
        this.sharding = sharding;
        this.dataParallel = dataParallel;
        this.tensorShards = tensorShards;
        this.tensorParallel = tensorParallel;
        this.tensorColumns = tensorShards != null ? tensorShards.columnLayers() : tensorColumns;
        this.pipelineRanks = pipelineRanks;
        this.group = group;
        int copies = group == null ? dataParallel : 1;
        // world rank (d * pp + p) * tp + t trains the stages s with s % pp == p
        IntPredicate held = group == null ? s -> true
                : s -> s % pipelineRanks == group.rank() / tensorParallel % pipelineRanks;
        if (group != null && tensorParallel > 1) {
            this.tensorRank = PipelineTensorParallelRank.of(model.network(), tensorParallel,
                    group.rank() % tensorParallel, tensorColumns, split, held, model.draws());
            this.all = List.of(tensorRank.stages());
            this.first = all.getFirst();
            return;
        }
        this.tensorRank = null;
        List<List<Dl4jPipelineStage>> replicas = new ArrayList<>(copies * tensorParallel);
        for (int d = 0; d < copies; d++) {
            for (int t = 0; t < tensorParallel; t++) {
                replicas.add(tensorShards == null ? split.buildStages(held, model.draws()) : tensorShards.buildStages(t));
            }
        }
        if (tensorShards != null && model.draws() != null) {
            // a model started from its configuration: every shard takes its block of the stages DL4J's init draws
            List<Dl4jPipelineStage> drawn = split.buildStages(s -> true, model.draws());
            for (int i = 0; i < replicas.size(); i++) {
                PipelineTensorParallel.takeDrawn(drawn, i % tensorParallel, replicas.get(i));
            }
        }
        this.all = List.copyOf(replicas);
        this.first = all.getFirst();
        if (shardedState) {
            all.forEach(r -> r.forEach(stage -> stage.shard(sharding)));
        }
    }

    /** Replica 0's stages (shard 0's): the ones whose state the model takes (every replica's is the same). */
    List<Dl4jPipelineStage> first() {
        return first;
    }

    /** Replica {@code d}'s stages of tensor-parallel shard {@code t}. */
    List<Dl4jPipelineStage> replica(int d, int t) {
        return all.get(d * tensorParallel + t);
    }

    /** Every replica's stages, replica {@code d}'s shard {@code t} at {@code d * tensorParallel + t}. */
    List<List<Dl4jPipelineStage>> all() {
        return all;
    }

    int tensorParallel() {
        return tensorParallel;
    }

    /** {@return the column-parallel layers of the tensor-parallel blocks (a copy), or null without tensor parallelism} */
    int[] tensorColumns() {
        return tensorColumns == null ? null : tensorColumns.clone();
    }

    /**
     * Thread mode: the stages world rank {@code rank} runs in the row-major {@code dp x pp x tp} mesh, where world rank
     * {@code (d * pp + p) * tp + t} runs pipeline rank {@code p} of replica {@code d}, shard {@code t}.
     */
    List<Dl4jPipelineStage> ofWorldRank(int rank) {
        int perReplica = pipelineRanks * tensorParallel;
        return replica(rank / perReplica, rank % tensorParallel);
    }

    /**
     * The cut into microbatches, then the checks of features and labels against the network and the
     * step's plan, one per data-parallel replica this process runs, each on its share of the batch
     * ({@link Microbatches#replicaShares}).
     */
    List<StepPlan> plans(DataSet batch, int microbatches, InputType inputType) {
        // the step before ended (its stages read their microbatches only inside it): its arrays take this step's
        if (dataParallel == 1) {
            cut = Microbatches.split(batch, microbatches, split.dataType(), cut);
            return List.of(StepPlan.of(split, first, cut, inputType));
        }
        // group mode: this process's replica only
        int firstReplica = ownReplica();
        cut = Microbatches.splitForReplicas(batch, microbatches, dataParallel, split.dataType(), cut);
        List<Microbatches> shares = Microbatches.replicaShares(cut, microbatches, dataParallel, firstReplica,
                group == null ? dataParallel : firstReplica + 1);
        List<StepPlan> plans = new ArrayList<>(shares.size());
        for (int i = 0; i < shares.size(); i++) {
            // a replica's tensor-parallel ranks share its plan: their stages see the same (whole) activations
            plans.add(StepPlan.of(split, group == null ? replica(firstReplica + i, 0) : first, shares.get(i), inputType));
        }
        return plans;
    }

    /**
     * Thread mode: DL4J's score of the step just run, the data loss plus every layer's regularization term at the
     * pre-update parameters (with tensor parallelism every shard's share: a replicated parameter's term counts on
     * shard 0 only).
     */
    double score() {
        double loss = first.getLast().dataLoss();
        for (List<Dl4jPipelineStage> shard : all.subList(0, tensorParallel)) {
            for (Dl4jPipelineStage stage : shard) {
                loss += stage.regularizationScore();
            }
        }
        return loss;
    }

    /** The end of an epoch: every stage's network counts it. */
    void incrementEpochCount() {
        for (List<Dl4jPipelineStage> replica : all) {
            for (Dl4jPipelineStage stage : replica) {
                stage.network().incrementEpochCount();
            }
        }
    }

    /**
     * If the model was changed since the last fit, the stages take its state (group mode: each rank compares and takes
     * its own stages; with sharded state a collective over {@code exchange}, null in thread mode).
     */
    void takeModelIfChanged(PipelineModel model, GroupExchange exchange) {
        if (model.hollow() != null) {
            return; // started from a configuration: the model holds nothing, the stages are the training state
        }
        if (tensorRank != null) {
            model.networkFromGraph();
            tensorRank.giveFrom(model.network()); // the same bits when unchanged: see giveFrom
        } else if (tensorShards != null) {
            model.networkFromGraph();
            tensorShards.giveIfChanged(model.network(), all);
        } else if (blocksInThisProcess()) {
            // compared where the blocks lie; only a changed model builds the stages' whole state, to be given it
            if (!model.holdsBlocks(all, sharding == ZeroStage.PARAMETERS)) {
                withWholeState(all, null, () -> all.forEach(model::giveTo));
            }
        } else if (shardedState && group != null && unchangedOnEveryRank(model, exchange)) {
            return; // no rank's model changed: the whole state is not gathered for a comparison
        } else {
            withWholeState(all, exchange, () -> {
                if (!model.holds(first)) {
                    all.forEach(model::giveTo);
                }
            });
        }
    }

    /**
     * The model takes the stages' state: copied in thread mode (joined from the shards with tensor parallelism),
     * gathered from every rank through {@code exchange} in group mode (collective).
     */
    void giveTo(PipelineModel model, GroupExchange exchange) {
        if (tensorParallel > 1 && model.hollow() != null) {
            model.takeFrom(first, exchange, pipelineRanks); // started from a configuration: the counters only
        } else if (tensorParallel > 1) {
            copyInto(model.network(), exchange); // joined, or gathered from every rank
            model.graphFromNetwork();
        } else if (blocksInThisProcess()) {
            model.takeBlocksFrom(all, sharding == ZeroStage.PARAMETERS); // straight from the blocks: ZeroHandover
        } else {
            withWholeState(List.of(first), exchange, () -> model.takeFrom(first, exchange, pipelineRanks));
        }
    }

    /** {@code target} takes the stages' state, as {@link #giveTo(PipelineModel, GroupExchange)}. */
    void copyInto(MultiLayerNetwork target, GroupExchange exchange) {
        if (tensorRank != null) {
            split.requireSameLayers(target);
            exchange.gatherShardsInto(tensorRank.split(), first, pipelineRanks, tensorParallel, target);
        } else if (tensorShards != null) {
            tensorShards.takeInto(all.subList(0, tensorParallel), target);
        } else if (exchange == null && blocksInThisProcess()) {
            split.requireSameLayers(target);
            ZeroHandover.copyInto(target.params(), target.getUpdater(true), split, all, sharding == ZeroStage.PARAMETERS);
            target.setIterationCount(first.getFirst().network().getIterationCount());
            target.setEpochCount(first.getFirst().network().getEpochCount());
        } else if (exchange == null) {
            withWholeState(List.of(first), null,
                    () -> split.copyStagesInto(first.stream().map(Dl4jPipelineStage::network).toList(), target));
        } else {
            withWholeState(List.of(first), exchange, () -> exchange.gatherInto(split, first, pipelineRanks, target));
        }
    }

    /**
     * Runs {@code action} with the whole updater state in {@code whole}'s stages when it is sharded ({@link PipelineZero}):
     * gathered from the replicas in this process (thread mode), or over {@code exchange} (group mode, collective; this
     * rank's stages, whatever {@code whole} says).
     */
    void withWholeState(List<List<Dl4jPipelineStage>> whole, GroupExchange exchange, Runnable action) {
        if (!shardedState) {
            action.run();
        } else if (group == null) {
            PipelineZero.withWholeState(all, whole, action);
        } else {
            PipelineZero.withWholeStateInGroup(first, exchange, group.rank() < pipelineRanks * tensorParallel,
                    sharding == ZeroStage.PARAMETERS, action);
        }
    }

    /**
     * Group mode with ZeRO on the dp axis: whether every rank's held stages hold their blocks and those hold its model
     * bitwise ({@link ZeroHandover#holds}, each rank its own), agreed over the group in one number, so that the whole
     * state is gathered over the group (collective: every rank or none) only when some rank's model changed or a stage
     * is not sharded yet. Collective.
     */
    private boolean unchangedOnEveryRank(PipelineModel model, GroupExchange exchange) {
        boolean mine = ZeroHandover.applies(List.of(first))
                && model.holdsBlocks(List.of(first), sharding == ZeroStage.PARAMETERS);
        INDArray changed = Nd4j.create(split.dataType(), 1);
        changed.putScalar(0, mine ? 0 : 1);
        exchange.sumInPlace(changed);
        return changed.getDouble(0) == 0;
    }

    /**
     * Thread mode with ZeRO on the dp axis once every stage holds its blocks (from the first step on): the model's
     * hand-overs read and write the replicas' blocks where they lie ({@link ZeroHandover}) instead of building each
     * stage's whole updater state around them ({@link #withWholeState}).
     */
    private boolean blocksInThisProcess() {
        return shardedState && group == null && ZeroHandover.applies(all);
    }

    /** Whether the stages' updater state is cut over the replicas (ZeRO stage 1 or 2, {@link PipelineZero}). */
    boolean shardedState() {
        return shardedState;
    }

    /** {@return the ZeRO stage on the dp axis, or null} */
    ZeroStage sharding() {
        return sharding;
    }

    int dataParallel() {
        return dataParallel;
    }

    /** This process's replica in group mode (its rank's row of the {@code dp x pp x tp} mesh); 0 in thread mode. */
    int ownReplica() {
        return group == null ? 0 : group.rank() / (pipelineRanks * tensorParallel);
    }

    /** The bytes of model state of every stage held ({@link PipelineParallelTrainer#modelBytesHeld}). */
    long modelBytes() {
        long bytes = 0;
        for (List<Dl4jPipelineStage> replica : all) {
            for (Dl4jPipelineStage stage : replica) {
                bytes += stage.modelBytes();
            }
        }
        return bytes;
    }

    /** The parameters of the stages held ({@link PipelineParallelTrainer#parametersHeld}). */
    long parameters() {
        // every tensor-parallel shard of one replica: the whole network's parameters, once, in thread mode; group mode:
        // this rank's shard of its stages
        return all.subList(0, group == null ? tensorParallel : 1).stream().flatMap(List::stream).filter(Dl4jPipelineStage::held)
                .mapToLong(s -> s.network().numParams()).sum();
    }

    /** A copy of stage {@code stage}'s parameters ({@link PipelineParallelTrainer#stageParameters}). */
    INDArray parametersOf(int stage) {
        if (stage < 0 || stage >= first.size()) {
            throw new IllegalArgumentException("stageParameters: stage=" + stage + " expected a stage in [0, "
                    + first.size() + ") (fix: a stage index of split(), which has " + first.size() + " stages)");
        }
        Dl4jPipelineStage s = first.get(stage);
        if (!s.held()) {
            int mine = group.rank() / tensorParallel % pipelineRanks;
            throw new IllegalArgumentException("stageParameters: stage=" + stage + " is trained by pipeline rank "
                    + stage % pipelineRanks + ", expected one of this rank's stages (pipeline rank=" + mine
                    + ", stages s with s % " + pipelineRanks + " == " + mine
                    + "; fix: ask the rank that trains it, or copyParametersTo(network) on every rank for all of them)");
        }
        if (sharding == ZeroStage.PARAMETERS && s.optimizerShard() != null) {
            // stage 3 between steps: each replica holds its block of the stage's parameters only
            if (group != null) {
                throw new IllegalStateException("stageParameters: stage=" + stage + " with sharding(PARAMETERS) in group"
                        + " mode: this rank holds only its block of the stage's parameters between steps, and"
                        + " stageParameters reads no other rank's memory; expected a trainer whose stages hold their"
                        + " whole parameters (fix: copyParametersTo(network) on every rank, which gathers them, or"
                        + " sharding(ZeroStage.GRADIENTS))");
            }
            INDArray[] copy = new INDArray[1];
            withWholeState(List.of(first), null, () -> copy[0] = s.network().params().dup()); // the replicas' blocks
            return copy[0];
        }
        INDArray params = s.network().params();
        return params == null ? Nd4j.create(split.dataType(), 0) : params.dup();
    }

    /**
     * A finished step as the model's DL4J listeners see it: in thread mode the model shows replica 0's stages, joined
     * from the shards with tensor parallelism ({@link PipelineTensorParallel#listenerStep}); in group mode this rank's
     * own stages, with no collective ({@link PipelineGroupListeners#step}).
     */
    ModelListeners.Step listenerStep(PipelineModel model, Object batch, double score) {
        if (group != null) {
            return PipelineGroupListeners.step(model, batch, score, first, !shardedState);
        }
        if (tensorShards != null) {
            return tensorShards.listenerStep(model, batch, score, all);
        }
        ModelListeners.Step step = model.step(batch, score, all);
        return shardedState ? withWholeStateAround(step, model) : step;
    }

    /**
     * Thread mode with ZeRO on the dp axis: {@code step}'s hand-overs to the model's listeners read the replicas' blocks
     * where they lie once every stage holds them ({@link ZeroHandover}: the state, and the update from the gradient
     * views), else run while the stages hold the state whole ({@link #withWholeState}); a change a listener made goes to
     * every replica's blocks through the whole state. Without either the copy would read a sharded updater, whose
     * layout is not DL4J's.
     */
    private ModelListeners.Step withWholeStateAround(ModelListeners.Step step, PipelineModel model) {
        return new ModelListeners.Step() {
            @Override
            public List<Object> batches() {
                return step.batches();
            }

            @Override
            public List<Object> activations() {
                return step.activations();
            }

            @Override
            public double score() {
                return step.score();
            }

            @Override
            public void assembleGradient(INDArray target) {
                step.assembleGradient(target);
            }

            @Override
            public void syncModel() {
                if (blocksInThisProcess()) {
                    // as the step's own syncModel, from the blocks where they lie (ZeroHandover): no whole state built
                    model.takeBlocksFrom(all, sharding == ZeroStage.PARAMETERS);
                    ZeroHandover.copyUpdatesInto(model.gradientView(), split, all, sharding == ZeroStage.PARAMETERS);
                } else {
                    withWholeState(List.of(first), null, step::syncModel);
                }
            }

            @Override
            public void syncReplicasIfChanged() {
                if (!blocksInThisProcess()) {
                    withWholeState(all, null, step::syncReplicasIfChanged);
                } else if (!model.holdsBlocks(all, sharding == ZeroStage.PARAMETERS)) {
                    withWholeState(all, null, () -> all.forEach(model::giveTo)); // a listener changed the model
                }
            }
        };
    }
}
