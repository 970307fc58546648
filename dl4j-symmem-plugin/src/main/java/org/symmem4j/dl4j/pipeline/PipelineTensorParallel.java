package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.IntPredicate;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.ModelListeners;

/**
 * The tensor-parallel side of a pipeline on a {@code dp x pp x tp} mesh
 * ({@link PipelineParallelTrainerBuilder#tensorParallel}): the user's unsharded network cut into {@code tp} shards by
 * {@link TensorParallel#shard} (Megatron's column- then row-parallel dense blocks), every shard cut into stages at the
 * same boundaries, which never fall inside a block. Tensor-parallel rank {@code t} of every pipeline rank trains shard
 * {@code t}'s stages; the activations and gradients crossing a stage boundary are whole (a block's output is summed over
 * the {@code tp} ranks inside its row-parallel layer), so every tp rank's pipeline sends the same messages over its own
 * {@code pp} sub-group, and the blocks' two all-reduces per microbatch run over the {@code tp} sub-group. Gradients of a
 * shard are summed over its {@code dp} sub-group only (the ranks holding that shard of that stage); replicated
 * parameters get the same gradient on every tp rank, bit for bit, and need no sum over {@code tp}.
 *
 * <p>The user's model is joined from the shards after every {@code fit} ({@link #takeInto}); a model changed between
 * fits is cut into the shards again and given to every replica ({@link #giveIfChanged}). Thread mode: every shard
 * of every stage is in this process; in group mode each rank holds only its shard of its stages
 * ({@link PipelineTensorParallelRank}).
 */
final class PipelineTensorParallel {

    private final int size;
    private final int[] columnLayers;
    /** Shard {@code t} of the whole network: the stages' state joined per shard, before the shards are joined. */
    private final List<MultiLayerNetwork> shards;
    /** Shard {@code t} cut into the trainer's stages. */
    private final List<PipelineStageSplit> splits;
    /** DL4J listeners: scratch networks of each shard's and of the unsharded layout, for gradients; made when first used. */
    private List<MultiLayerNetwork> gradientShards;
    private MultiLayerNetwork gradientWhole;

    private PipelineTensorParallel(int size, int[] columnLayers, List<MultiLayerNetwork> shards,
                                   List<PipelineStageSplit> splits) {
        this.size = size;
        this.columnLayers = columnLayers;
        this.shards = shards;
        this.splits = splits;
    }

    /**
     * The layers a stage may start at: any but the row-parallel layer of a block ({@code c + 1} for every column-parallel
     * layer {@code c}), so that a block stays in one stage.
     */
    static IntPredicate canStartStage(int[] columnLayers) {
        return layer -> Arrays.stream(columnLayers).noneMatch(c -> layer == c + 1);
    }

    /**
     * Checks the blocks ({@link TensorParallel#shardConfiguration}: dense pairs, not overlapping, widths divisible by
     * {@code size}; {@link TensorParallel#requireSplittable}: settings that split exactly, on a hollow shard that holds no
     * value) and that no stage of {@code split} starts inside one. What {@code build()} refuses on one rank alone, before
     * the ranks of a group agree and anything is built.
     *
     * @throws IllegalArgumentException naming the layer or boundary that does not fit, and the fix
     */
    static void check(MultiLayerNetwork network, int size, int[] columnLayers, PipelineStageSplit split) {
        for (int s = 1; s < split.stageCount(); s++) {
            int first = split.firstLayer(s);
            for (int c : columnLayers) {
                if (first == c + 1) {
                    throw new IllegalArgumentException("stage " + s + " starts at layer " + first + ", inside the"
                            + " tensor-parallel block of layers " + c + "-" + (c + 1) + " (column-parallel " + c
                            + ", row-parallel " + (c + 1) + "): expected every block inside one stage, since only its"
                            + " row-parallel layer's all-reduce makes the activation whole; found stage boundaries "
                            + Arrays.toString(split.stageStarts()) + " (fix: start the stage at layer " + c + " or "
                            + (c + 2) + ", or leave stageBoundaries unset: the trainer's own splits keep blocks whole)");
                }
            }
        }
        MultiLayerNetwork hollow = new MultiLayerNetwork(TensorParallel.shardConfiguration(
                network.getLayerWiseConfigurations(), size, columnLayers));
        HollowNetworks.Reservation reserved = HollowNetworks.hollow(hollow);
        TensorParallel.requireSplittable(hollow, size); // dropout, weight noise, ... refused before any rank runs
        java.lang.ref.Reference.reachabilityFence(reserved);
    }

    /**
     * Shards {@code network} {@code size} ways and cuts every shard at {@code split}'s boundaries (checked by
     * {@link #check} first); a {@code hollow} network (started from its configuration) is not read: the shards are
     * initialised networks of the shard configuration, whose stages then take the draws ({@link #takeDrawn}).
     *
     * @throws IllegalArgumentException naming the layer or boundary that does not fit, and the fix
     */
    static PipelineTensorParallel of(MultiLayerNetwork network, int size, int[] columnLayers, PipelineStageSplit split,
                                     boolean hollow) {
        check(network, size, columnLayers, split);
        List<MultiLayerNetwork> shards = new ArrayList<>(size);
        List<PipelineStageSplit> splits = new ArrayList<>(size);
        for (int t = 0; t < size; t++) {
            // a hollow network (started from its configuration) is never read: its shards' values come from the draws
            MultiLayerNetwork shard = hollow ? new MultiLayerNetwork(TensorParallel.shardConfiguration(
                    network.getLayerWiseConfigurations(), size, columnLayers)) : TensorParallel.shard(network, t, size,
                    columnLayers);
            if (hollow) {
                shard.init();
            }
            shards.add(shard);
            splits.add(PipelineStageSplit.atBoundaries(shard, split.stageStarts()));
        }
        return new PipelineTensorParallel(size, columnLayers.clone(), List.copyOf(shards), List.copyOf(splits));
    }

    /** The tensor-parallel degree. */
    int size() {
        return size;
    }

    /** The column-parallel layers of the blocks. */
    int[] columnLayers() {
        return columnLayers.clone();
    }

    /** Shard {@code t}'s stages, with shard {@code t}'s parameters and updater state; bound to a group when a rank opens. */
    List<Dl4jPipelineStage> buildStages(int t) {
        List<Dl4jPipelineStage> stages = splits.get(t).buildStages(s -> true, null);
        for (Dl4jPipelineStage stage : stages) {
            stage.tensorParallelRank(t);
        }
        return stages;
    }

    /**
     * A model started from its configuration ({@link PipelineParallelTrainer#builder(org.deeplearning4j.nn.conf.MultiLayerConfiguration)}):
     * the held stages of {@code shardStages}, shard {@code t}'s, take their block of {@code drawn}, the same stages of
     * the unsharded network initialised as DL4J's {@code init()} of the whole network draws them
     * ({@link PipelineStageSplit#buildStages} with the model's draws), held where {@code shardStages}' are. So every
     * shard holds its block of {@code new MultiLayerNetwork(conf).init()}'s parameters, bitwise, and the whole network is
     * never built: a rank holds its stages unsharded only while they are cut.
     */
    static void takeDrawn(List<Dl4jPipelineStage> drawn, int t, List<Dl4jPipelineStage> shardStages) {
        for (int s = 0; s < shardStages.size(); s++) {
            if (shardStages.get(s).held()) {
                TensorParallel.reshardInto(drawn.get(s).network(), t, shardStages.get(s).network(), 0);
            }
        }
    }

    /**
     * {@code target} (the unsharded configuration) takes the state of {@code byRank}: one replica's stages of every
     * tensor-parallel rank, in rank order: each shard joined from its stages, then the shards joined
     * ({@link TensorParallel#join}).
     */
    void takeInto(List<List<Dl4jPipelineStage>> byRank, MultiLayerNetwork target) {
        for (int t = 0; t < size; t++) {
            splits.get(t).copyStagesInto(byRank.get(t).stream().map(Dl4jPipelineStage::network).toList(), shards.get(t));
        }
        TensorParallel.join(shards, target);
    }

    /**
     * If {@code model} no longer holds what the stages hold (the user changed it between fits), every replica's stages
     * take its state, cut into the shards again. {@code replicaStages} is indexed {@code d * size + t}.
     */
    void giveIfChanged(MultiLayerNetwork model, List<List<Dl4jPipelineStage>> replicaStages) {
        boolean holds = true;
        for (int t = 0; t < size; t++) {
            TensorParallel.reshardInto(model, t, shards.get(t));
            holds &= PipelineModel.stagesHold(shards.get(t), splits.get(t), replicaStages.get(t));
        }
        if (holds) {
            return;
        }
        for (int r = 0; r < replicaStages.size(); r++) {
            PipelineModel.giveStages(shards.get(r % size), splits.get(r % size), replicaStages.get(r), true);
        }
    }

    /**
     * A finished step as the model's DL4J listeners see it ({@link ModelListeners}, thread mode; group mode refuses
     * them with tensor parallelism, {@link PipelineGroupListeners}): the model, already holding the state before the
     * step, gives {@code onForwardPass} its own forward pass on the batch; {@code onGradientCalculation} sees replica 0's stages' gradients before the update joined from
     * the shards into the unsharded layout (a replicated parameter's from shard 0: every shard holds it bitwise alike),
     * and {@code iterationDone} the model holding the shards' state joined after the step, its gradient view the update
     * the step applied, joined likewise. A model a listener changed is cut into the shards and given to every replica
     * before the next step ({@link #giveIfChanged}).
     *
     * @param replicaStages every replica's stages, indexed {@code d * size + t}
     */
    ModelListeners.Step listenerStep(PipelineModel model, Object batch, double score,
                                     List<List<Dl4jPipelineStage>> replicaStages) {
        List<List<Dl4jPipelineStage>> byRank = replicaStages.subList(0, size);
        MultiLayerNetwork network = model.network(); // a graph's chain network, which the graph then takes
        return new ModelListeners.Step() {
            @Override
            public List<Object> batches() {
                return List.of(batch);
            }

            @Override
            public List<Object> activations() {
                return List.of(model.activations(batch)); // the model still holds the state before the step
            }

            @Override
            public double score() {
                return score;
            }

            @Override
            public void assembleGradient(INDArray target) {
                joinGradients(byRank, true, network, target);
            }

            @Override
            public void syncModel() {
                takeInto(byRank, network);
                model.graphFromNetwork();
                joinGradients(byRank, false, network, model.gradientView()); // after DL4J's step: the update
            }

            @Override
            public void syncReplicasIfChanged() {
                model.networkFromGraph();
                giveIfChanged(network, replicaStages);
            }
        };
    }

    /**
     * Writes {@code byRank}'s gradients (one replica's stages of every shard, in rank order), before the update or the
     * update itself, into {@code target}, a gradient view of the unsharded network {@code model}: each shard's stages'
     * gradients laid into a scratch network of the shard's layout, these joined as {@link TensorParallel#join} joins
     * parameters (a gradient view mirrors its parameters' layout), into a scratch unsharded network. The scratch networks
     * are made at the first call.
     */
    private void joinGradients(List<List<Dl4jPipelineStage>> byRank, boolean beforeUpdate, MultiLayerNetwork model,
                               INDArray target) {
        if (gradientShards == null) {
            gradientShards = new ArrayList<>(size);
            for (MultiLayerNetwork shard : shards) {
                MultiLayerNetwork scratch = new MultiLayerNetwork(shard.getLayerWiseConfigurations().clone());
                scratch.init();
                gradientShards.add(scratch);
            }
            gradientWhole = new MultiLayerNetwork(model.getLayerWiseConfigurations().clone());
            gradientWhole.init();
        }
        for (int t = 0; t < size; t++) {
            PipelineStageSplit split = splits.get(t);
            INDArray flat = gradientShards.get(t).params();
            for (int s = 0; s < split.stageCount(); s++) {
                Dl4jPipelineStage stage = byRank.get(t).get(s);
                INDArray part = beforeUpdate ? stage.gradientBeforeUpdate() : stage.network().getGradientsViewArray();
                if (part != null && split.parameterCount(s) > 0) {
                    long from = split.parameterOffset(s);
                    PipelineStageSplit.slice(flat, from, from + split.parameterCount(s)).assign(part.reshape(part.length()));
                }
            }
        }
        TensorParallel.join(gradientShards, gradientWhole);
        target.assign(gradientWhole.params().reshape(target.shape()));
    }
}
