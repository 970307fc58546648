package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.OptimizerStateShard;
import org.symmem4j.dl4j.ShardedCheckpoints;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.ModelListeners;

/**
 * ZeRO on the pipeline's data-parallel axis ({@link PipelineParallelTrainerBuilder#sharding}): stage 1
 * ({@link ZeroStage#OPTIMIZER_STATE}), each dp replica of a stage keeping the updater state of its 1/dp block of the
 * stage's parameters ({@link OptimizerStateShard}, installed by each stage at its first step), and stage 2
 * ({@link ZeroStage#GRADIENTS}), the same blocks with the stage's gradient reduce-scattered over the replicas instead
 * of all-reduced, so each replica sums only its block (the same bits: peers added in rank order), and stage 3
 * ({@link ZeroStage#PARAMETERS}), the same blocks of the parameters too between steps, gathered once per step before
 * the stage's first forward ({@link OptimizerStateShard#gatherParameters}). This class holds what
 * is refused at build() and the hand-over of the whole state: the model takes (and gives) the stages' whole updater
 * state, so around those copies each stage's shards are gathered into DL4J's updater of the replicas concerned
 * ({@link #withWholeState} in thread mode, from the shards in this process; {@link #withWholeStateInGroup} in group
 * mode, over the group) and taken back afterwards; and the cut of a stage's checkpoint shard into its replicas'
 * blocks ({@link #blocksOf}), a file each.
 */
final class PipelineZero {

    private PipelineZero() {
    }

    /**
     * Refuses at build() what pipeline sharding does not build: one replica, tensor parallelism, BatchNorm layers,
     * and with stage 3 weight constraints.
     */
    static void check(ZeroStage stage, int dataParallel, int tensorParallel, MultiLayerNetwork network) {
        if (stage == null) {
            return;
        }
        if (dataParallel < 2) {
            throw new IllegalArgumentException("sharding(" + stage + ") with dataParallel=" + dataParallel
                    + ": expected dataParallel >= 2 (the updater state is cut over a stage's dp replicas)"
                    + " (fix: dataParallel(2) or more, or drop sharding(...))");
        }
        if (tensorParallel > 1) {
            throw new IllegalArgumentException("sharding(" + stage + ") with tensorParallel(" + tensorParallel
                    + ", ...): not built yet; expected a pipeline without tensor parallelism"
                    + " (fix: drop sharding(...), or drop tensorParallel)");
        }
        List<Layer> layers = network.getLayerWiseConfigurations().getConfs().stream().map(c -> c.getLayer()).toList();
        for (int i = 0; i < layers.size(); i++) {
            if (stage == ZeroStage.PARAMETERS && layers.get(i) instanceof org.deeplearning4j.nn.conf.layers.BaseLayer b
                    && b.getConstraints() != null && !b.getConstraints().isEmpty()) {
                throw new IllegalArgumentException("sharding(PARAMETERS) with weight constraints " + b.getConstraints()
                        + " on layer " + i + ": DL4J applies them to whole rows or columns after the update, which no"
                        + " dp replica holds between steps (each updates its block of the stage's parameters only);"
                        + " expected layers without constraints (fix: sharding(ZeroStage.GRADIENTS), which keeps whole"
                        + " parameters, or drop the constraint)");
            }
            if (layers.get(i) instanceof BatchNormalization) {
                throw new IllegalArgumentException("sharding(" + stage + ") with a BatchNormalization layer (layer " + i
                        + "): not built yet (its running statistics are updates, not gradients, which DL4J's updater"
                        + " leaves undivided); expected a network without BatchNormalization"
                        + " (fix: drop sharding(...), or remove the layer)");
            }
        }
    }

    /**
     * Refuses listeners that override {@code onGradientCalculation} with ZeRO stage 2: each replica sums only its block
     * of a stage's gradient, so no replica holds the step's gradient the listener would be shown.
     *
     * @param stage     the trainer's sharding, or null
     * @param listeners the model's listeners
     */
    static void refuseListeners(ZeroStage stage, ModelListeners listeners, boolean groupMode) {
        if (stage == ZeroStage.PARAMETERS && groupMode && !listeners.isEmpty()) {
            throw new IllegalStateException("DL4J listeners with sharding(PARAMETERS) in group mode: between steps each"
                    + " rank holds only its block of its stages' parameters, and a group-mode listener reads the rank's"
                    + " stages after each step; expected no listeners on the model (fix: sharding(ZeroStage.GRADIENTS),"
                    + " or read the model after fit(), which gathers it)");
        }
        if (stage != null && stage != ZeroStage.OPTIMIZER_STATE && listeners.needsGradient()) {
            throw new IllegalStateException("a listener that overrides onGradientCalculation with sharding(" + stage + "):"
                    + " each dp replica sums only its block of a stage's gradient (reduce-scattered), so no replica"
                    + " holds the step's whole gradient to show it; expected listeners that read the score, counters,"
                    + " parameters or update (fix: sharding(ZeroStage.OPTIMIZER_STATE), which sums the whole gradient,"
                    + " or drop that listener)");
        }
    }

    /**
     * Runs {@code action} while the stages of {@code whole} hold DL4J's updater with the whole updater state, gathered
     * from every replica's shard of the same stage in {@code all}; afterwards each takes its block back (of the state
     * {@code action} may have replaced) and drops the whole state. Stages not sharded yet (before the first step) hold
     * DL4J's updater anyway. Thread mode; every replica idle.
     *
     * @param all    every replica's stages, in dp rank order
     * @param whole  the replicas whose stages {@code action} reads or writes whole
     * @param action the hand-over
     */
    static void withWholeState(List<List<Dl4jPipelineStage>> all, List<List<Dl4jPipelineStage>> whole,
                               Runnable action) {
        int stages = all.getFirst().size();
        List<OptimizerStateShard> gathered = new ArrayList<>();
        try {
            for (int s = 0; s < stages; s++) {
                int stage = s;
                List<OptimizerStateShard> shards = all.stream().map(r -> r.get(stage).optimizerShard()).toList();
                if (shards.contains(null)) {
                    continue; // not sharded yet: DL4J's updater holds the whole state
                }
                List<OptimizerStateShard> mine = whole.stream().map(r -> r.get(stage).optimizerShard()).toList();
                OptimizerStateShard.materialize(mine, shards);
                gathered.addAll(mine);
            }
            action.run();
        } finally {
            for (OptimizerStateShard s : gathered) {
                s.shardAgain();
            }
        }
    }

    /**
     * Group mode's {@link #withWholeState}: runs {@code action} while this rank's stages that hold a shard hold DL4J's
     * updater with the stage's whole state, gathered from every replica's block over the group ({@code exchange}, the
     * world: each stage's state is summed over every rank, its holders writing their blocks, every other element
     * -0.0, {@link OptimizerStateShard#sumOfBlocks}); afterwards each takes its block back. Before the first step (no
     * shard yet) replica 0's holders write the stage's whole state and nothing is materialized. Collective: every rank
     * calls it with its stages (held or hollow), in stage order, each stage's state the same length on every rank.
     *
     * @param stages      this rank's stages: those it holds, and the others hollow
     * @param replicaZero whether this rank belongs to replica 0
     */
    static void withWholeStateInGroup(List<Dl4jPipelineStage> stages, GroupExchange exchange, boolean replicaZero,
                                      boolean parameters, Runnable action) {
        List<OptimizerStateShard> gathered = new ArrayList<>();
        try {
            for (Dl4jPipelineStage stage : stages) {
                OptimizerStateShard shard = stage.held() ? stage.optimizerShard() : null;
                long paramCount = stage.network().numParams();
                if (parameters && paramCount > 0) {
                    // stage 3: the whole parameters from the replicas' blocks, as the state below (every rank, every
                    // stage: the same collectives everywhere)
                    INDArray whole = Nd4j.create(stage.network().params().dataType(), paramCount);
                    OptimizerStateShard.sumOfBlocks(whole, w -> {
                        if (shard != null) {
                            shard.exportParameterBlock(w);
                        } else if (stage.held() && replicaZero) {
                            w.assign(stage.network().params().reshape(paramCount)); // not sharded yet: whole
                        }
                    }, exchange::sumInPlace);
                    if (shard != null) {
                        shard.materializeParameters(whole);
                        gathered.add(shard);
                    }
                }
                INDArray dl4j = shard != null ? null : stateOf(stage.network().getUpdater(true));
                long length = shard != null ? shard.wholeStateLength() : dl4j == null ? 0 : dl4j.length();
                if (length == 0) {
                    continue; // the same on every rank: the stage's layout, held or hollow
                }
                INDArray whole = Nd4j.create(stage.network().params().dataType(), length);
                OptimizerStateShard.sumOfBlocks(whole, w -> {
                    if (shard != null) {
                        shard.exportBlock(w);
                    } else if (stage.held() && replicaZero) {
                        w.assign(dl4j); // not sharded yet: every replica holds it whole, replica 0's counts
                    }
                }, exchange::sumInPlace);
                if (shard != null) {
                    shard.materialize(whole);
                    if (!gathered.contains(shard)) {
                        gathered.add(shard);
                    }
                }
            }
            action.run();
        } finally {
            for (OptimizerStateShard s : gathered) {
                s.shardAgain();
            }
        }
    }

    /**
     * A stage's checkpoint shard (its whole state, {@link PipelineCheckpoints}) cut into its replicas' blocks, as ZeRO
     * stage 1 over {@code replicas} keeps them: shard {@code stage * replicas + d} is replica {@code d}'s block, its
     * parameter range and state runs in the checkpoint's flat spaces, its state copied out of the stage's ({@code null}
     * state: the ranges only, for a stage another rank holds). So each replica's block is a file of its own, and a
     * restore reads each block from its own file.
     *
     * @param stageShard the stage's shard, its rank the stage's index
     * @param network    the stage's network, holding DL4J's updater (its layout; not sharded now, or materialized)
     * @param replicas   the replicas the state is cut over
     * @param only       the one replica whose block to return (a group-mode rank's own), or -1 for every replica's
     */
    static List<ShardedCheckpoints.Shard> blocksOf(ShardedCheckpoints.Shard stageShard, MultiLayerNetwork network,
                                                   int replicas, int only) {
        List<ShardedCheckpoints.Shard> blocks = new ArrayList<>(replicas);
        long paramStart = stageShard.paramRanges().getFirst().start();
        long stateStart = stageShard.stateRanges().isEmpty() ? 0 : stageShard.stateRanges().getFirst().start();
        for (int d = 0; d < replicas; d++) {
            if (only >= 0 && d != only) {
                continue;
            }
            OptimizerStateShard.Block block = network.numParams() == 0 ? null
                    : OptimizerStateShard.blockOf(network, replicas, d);
            List<ShardedCheckpoints.Range> stateRanges = new ArrayList<>();
            INDArray state = null;
            if (block != null && !stageShard.stateRanges().isEmpty()) {
                for (long[] run : block.stateRuns()) {
                    stateRanges.add(new ShardedCheckpoints.Range(stateStart + run[0], stateStart + run[0] + run[1]));
                }
                if (stageShard.state() != null && block.stateElements() > 0) {
                    state = Nd4j.create(stageShard.dataType(), block.stateElements());
                    block.copyOut(stageShard.state(), state);
                }
            }
            if (state == null) {
                stateRanges.clear(); // nothing kept (SGD), or another rank's stage: its ranges are read by that rank
            }
            ShardedCheckpoints.Range params = block == null ? stageShard.paramRanges().getFirst()
                    : new ShardedCheckpoints.Range(paramStart + block.paramStart(), paramStart + block.paramEnd());
            blocks.add(new ShardedCheckpoints.Shard(stageShard.rank() * replicas + d, stageShard.stage(),
                    stageShard.dataType(), stageShard.paramCount(), List.of(params), stageShard.stateCount(), stateRanges,
                    stageShard.layoutHash(), stageShard.iterationCount(), stageShard.epochCount(), state));
        }
        return blocks;
    }

    /** After a restore read {@code blocks} ({@link #blocksOf} of a stage): their states into the stage's whole state. */
    static void blocksInto(List<ShardedCheckpoints.Shard> blocks, MultiLayerNetwork network, int replicas,
                           INDArray whole) {
        for (ShardedCheckpoints.Shard b : blocks) {
            if (b.state() != null) {
                OptimizerStateShard.blockOf(network, replicas, b.rank() % replicas).copyIn(b.state(), whole);
            }
        }
    }

    private static INDArray stateOf(Updater updater) {
        return updater == null ? null : updater.getStateViewArray();
    }
}
