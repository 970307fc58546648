package org.symmem4j.dl4j.pipeline;

import java.util.List;
import java.util.function.Consumer;
import java.util.function.IntPredicate;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.InitialisationReplay;
import org.symmem4j.dl4j.tensor.TensorParallel;

/**
 * The tensor-parallel side of a group-mode pipeline (one process per rank of a {@code dp x pp x tp} mesh,
 * {@link PipelineParallelTrainerBuilder#tensorParallel} with {@link PipelineParallelTrainerBuilder#group}): this rank's
 * shard {@code t} of its own stages, and nothing else of the training state. The shard's configuration is every tp
 * rank's ({@link TensorParallel#shardConfiguration}); the whole shard network exists only hollow (layouts over reserved
 * memory, no values: {@link HollowNetworks}), cut at the trainer's stage boundaries, so the stages of other pipeline
 * ranks are hollow too and this rank's own are built alone and filled with its block of the user's unsharded network
 * ({@link TensorParallel#reshardInto(MultiLayerNetwork, int, MultiLayerNetwork, int)}). Thread mode, where every shard
 * of every stage is in one process, is {@link PipelineTensorParallel}'s.
 *
 * <p>The user's model (whole on every rank, as in group mode without tensor parallelism) gives this rank its blocks at
 * the start of every {@code fit} ({@link #giveFrom}) and takes every rank's stages joined at its end
 * ({@link GroupExchange#gatherShardsInto}, collective).
 */
final class PipelineTensorParallelRank {

    private final int size;
    private final int rank;
    /** The shard's split: of the hollow shard network, at the trainer's stage boundaries. */
    private final PipelineStageSplit split;
    /** Every stage of shard {@code rank}: this rank's held, the others hollow. */
    private final List<Dl4jPipelineStage> stages;
    /** Keeps the hollow shard network's reserved memory as long as the split that reads its layout. */
    @SuppressWarnings({"unused", "FieldCanBeLocal"})
    private final HollowNetworks.Reservation reservation;

    private PipelineTensorParallelRank(int size, int rank, PipelineStageSplit split, List<Dl4jPipelineStage> stages,
                                       HollowNetworks.Reservation reservation) {
        this.size = size;
        this.rank = rank;
        this.split = split;
        this.stages = stages;
        this.reservation = reservation;
    }

    /**
     * Builds tensor-parallel rank {@code rank}'s stages of {@code network} cut at {@code unsharded}'s boundaries: those
     * {@code held} selects with this rank's block of the network's parameters, updater state and counters, the others
     * hollow. The blocks and the boundaries were checked by {@link PipelineTensorParallel#check} at {@code build()}.
     * With {@code draws} (a model started from its configuration, {@code network} hollow) the held stages take their
     * block of the stages as DL4J's {@code init()} draws them ({@link PipelineTensorParallel#takeDrawn}).
     */
    static PipelineTensorParallelRank of(MultiLayerNetwork network, int size, int rank, int[] columnLayers,
                                         PipelineStageSplit unsharded, IntPredicate held,
                                         Consumer<InitialisationReplay.Target> draws) {
        MultiLayerConfiguration conf = TensorParallel.shardConfiguration(network.getLayerWiseConfigurations(), size,
                columnLayers);
        MultiLayerNetwork hollow = new MultiLayerNetwork(conf);
        HollowNetworks.Reservation reservation = HollowNetworks.hollow(hollow);
        hollow.setIterationCount(network.getIterationCount());
        hollow.setEpochCount(network.getEpochCount());
        PipelineStageSplit split = PipelineStageSplit.atBoundaries(hollow, unsharded.stageStarts());
        // held stages are built fresh (no copy from the hollow network) and take their blocks of the network below
        List<Dl4jPipelineStage> stages = split.buildStages(held, target -> { });
        for (Dl4jPipelineStage stage : stages) {
            stage.tensorParallelRank(rank);
        }
        PipelineTensorParallelRank built = new PipelineTensorParallelRank(size, rank, split, stages, reservation);
        if (draws == null) {
            built.giveFrom(network);
        } else {
            // a model started from its configuration (hollow): this rank's unsharded stages drawn as DL4J's init, cut
            PipelineTensorParallel.takeDrawn(unsharded.buildStages(held, draws), rank, stages);
        }
        return built;
    }

    /** The tensor-parallel degree. */
    int size() {
        return size;
    }

    /** This rank's place in its {@code tp} sub-group: the shard it holds. */
    int rank() {
        return rank;
    }

    /** The shard's split (its stages' layer ranges are the unsharded split's). */
    PipelineStageSplit split() {
        return split;
    }

    /** Every stage of this rank's shard, its own held, the others hollow. */
    List<Dl4jPipelineStage> stages() {
        return stages;
    }

    /**
     * The held stages take this rank's block of {@code network}'s parameters and updater state (where it has an
     * updater), every stage its counters. Taking the state the stages gave the model after the last {@code fit} writes
     * the same bits back (a block is copied out and in; a replicated parameter is bitwise the same on every tp rank), so
     * it is done at the start of every {@code fit}, and a model changed in between reaches every rank's stages.
     */
    void giveFrom(MultiLayerNetwork network) {
        for (int s = 0; s < stages.size(); s++) {
            MultiLayerNetwork stage = stages.get(s).network();
            if (stages.get(s).held()) {
                TensorParallel.reshardInto(network, rank, stage, split.firstLayer(s));
            }
            stage.setIterationCount(network.getIterationCount());
            stage.setEpochCount(network.getEpochCount());
        }
    }
}
