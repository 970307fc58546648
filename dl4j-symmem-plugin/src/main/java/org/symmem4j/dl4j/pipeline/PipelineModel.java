package org.symmem4j.dl4j.pipeline;

import java.util.Collection;
import java.util.List;
import java.util.function.Consumer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.InitialisationReplay;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.dl4j.train.ListenedModel;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.parallel.Invariants;

/**
 * The network (or graph) given to the builder, which the trainer keeps holding the training state: after
 * every {@code fit} it takes the stages' parameters, updater state and counters ({@link #takeFrom}); at the start of
 * every {@code fit}, and after a listener ran, the stages take its state if it changed ({@link #holds},
 * {@link #giveTo}). Its flat parameters are the stages' in stage order ({@link PipelineStageSplit}), for a graph
 * too (a graph flattens its layers as the network made from it, in topological order, checked at {@code build()}).
 */
final class PipelineModel implements ListenedModel {

    /** The user's network, or the chain network standing for the user's graph (a scratch copy for the copies). */
    private final MultiLayerNetwork network;
    /** The user's graph, or null. */
    private final ComputationGraph graph;
    private final PipelineStageSplit split;

    /** A model started from a configuration (hollow: it never holds the network), or null. */
    private final FromConfiguration hollow;

    /**
     * A model started from its configuration ({@code PipelineParallelTrainer.builder(conf)}): its arrays hold nothing,
     * the stages' state stays in the stages ({@code copyParametersTo} gathers it), and only its counters follow them.
     *
     * @param reserved the reservations under the hollow network (and graph): kept reachable as long as the model
     * @param draws    the replay of DL4J's {@code init()} of the model ({@link InitialisationReplay}), from which each
     *                 rank draws its stages' parameters
     */
    record FromConfiguration(List<HollowNetworks.Reservation> reserved, Consumer<InitialisationReplay.Target> draws) {

        /** The pages of the hollow arrays that hold memory now: 0 while nothing wrote them (a page per array at most). */
        long residentBytes() {
            return reserved.stream().mapToLong(HollowNetworks.Reservation::residentBytes).sum();
        }
    }

    PipelineModel(MultiLayerNetwork network, ComputationGraph graph, PipelineStageSplit split, FromConfiguration hollow) {
        this.network = network;
        this.graph = graph;
        this.split = split;
        this.hollow = hollow;
    }

    /**
     * The unsharded network the tensor-parallel shards are cut from and joined into: the user's network, or the chain
     * network standing for the user's graph ({@link #networkFromGraph}, {@link #graphFromNetwork} keep them equal).
     */
    MultiLayerNetwork network() {
        return network;
    }

    /** A graph given whole: its chain network takes the graph's state (the user may have changed the graph). */
    void networkFromGraph() {
        if (graph != null && hollow == null) {
            GraphChain.copyFrom(graph, network);
        }
    }

    /** A graph given whole: the graph takes its chain network's state, written by the trainer. */
    void graphFromNetwork() {
        if (graph != null && hollow == null) {
            GraphChain.copyInto(network, graph);
        }
    }

    /** The model started from its configuration (see {@link FromConfiguration}), or null for a model given whole. */
    FromConfiguration hollow() {
        return hollow;
    }

    /** How the stages draw their parameters: null to copy them from the model given whole (see {@link #hollow}). */
    Consumer<InitialisationReplay.Target> draws() {
        return hollow == null ? null : hollow.draws();
    }

    /**
     * Refuses what needs the whole network in the model (checkpoints, whose model.zip is the whole network) when the
     * model was started from a configuration.
     */
    void requireWhole(String call) {
        if (hollow != null) {
            throw new IllegalStateException(call + " on a pipeline trainer built from a configuration: checkpoints hold"
                    + " the whole network (model.zip), which such a trainer never holds, on any rank; expected a trainer"
                    + " built from a network (fix: PipelineParallelTrainer.builder(network), or copyParametersTo(network)"
                    + " and save that network yourself)");
        }
    }

    /**
     * The user's model takes the stages' state: parameters, updater state, iteration and epoch counters. Thread mode
     * copies them from the stages, which this process holds; in group mode {@code exchange} gathers every stage from
     * the rank that trains it (collective).
     */
    void takeFrom(List<Dl4jPipelineStage> stages, GroupExchange exchange, int pipelineRanks) {
        if (hollow != null) {
            // nothing to hold: the counters only, which every held stage has alike after a step
            MultiLayerNetwork held = stages.stream().filter(Dl4jPipelineStage::held).findFirst().orElseThrow().network();
            setIterationCount(held.getIterationCount());
            setEpochCount(held.getEpochCount());
            return;
        }
        if (exchange == null) {
            split.copyStagesInto(networks(stages), network);
        } else {
            exchange.gatherInto(split, stages, pipelineRanks, network);
        }
        if (graph != null) {
            GraphChain.copyInto(network, graph);
        }
    }

    /**
     * Thread mode with ZeRO on the dp axis, every stage holding its blocks ({@link ZeroHandover#applies}): the model
     * takes the stages' state from every replica's blocks ({@link ZeroHandover#copyInto}), as {@link #takeFrom} does
     * from whole stages.
     *
     * @param parameters whether the parameters are cut too (stage 3)
     */
    void takeBlocksFrom(List<List<Dl4jPipelineStage>> all, boolean parameters) {
        if (hollow != null) {
            takeFrom(all.getFirst(), null, 0); // the counters only
            return;
        }
        ZeroHandover.copyInto(network.params(), network.getUpdater(true), split, all, parameters);
        MultiLayerNetwork counters = all.getFirst().getFirst().network();
        network.setIterationCount(counters.getIterationCount());
        network.setEpochCount(counters.getEpochCount());
        if (graph != null) {
            GraphChain.copyInto(network, graph);
        }
    }

    /**
     * As {@link #holds(List)}, from every replica's blocks ({@link #takeBlocksFrom}); in group mode {@code all} is this
     * rank's replica, its held stages' blocks compared.
     */
    boolean holdsBlocks(List<List<Dl4jPipelineStage>> all, boolean parameters) {
        if (hollow != null) {
            return true; // the model holds no state of its own: the stages are the training state
        }
        MultiLayerNetwork counters = all.getFirst().stream().filter(Dl4jPipelineStage::held).findFirst().orElseThrow()
                .network();
        return counters.getIterationCount() == iterationCount() && counters.getEpochCount() == epochCount()
                && ZeroHandover.holds(model().params(), updater(), split, all, parameters);
    }

    /**
     * Whether the stages this process holds hold the user's model's state bitwise (it was not changed since
     * {@link #takeFrom}); in group mode each rank compares its own stages.
     */
    boolean holds(List<Dl4jPipelineStage> stages) {
        return holds(stages, true);
    }

    /** As {@link #holds(List)}; without {@code withUpdaterState} the parameters and counters alone are compared. */
    boolean holds(List<Dl4jPipelineStage> stages, boolean withUpdaterState) {
        if (hollow != null) {
            return true; // the model holds no state of its own: the stages are the training state
        }
        return stagesHold(model().params(), withUpdaterState ? updater() : null, iterationCount(), epochCount(), split,
                stages);
    }

    /** As {@link #holds}, for {@code source} (a network cut by {@code split}) instead of the user's model. */
    static boolean stagesHold(MultiLayerNetwork source, PipelineStageSplit split, List<Dl4jPipelineStage> stages) {
        return stagesHold(source.params(), source.getUpdater(true), source.getIterationCount(), source.getEpochCount(),
                split, stages);
    }

    /** Whether the held stages hold {@code params}' slices (and {@code updater}'s state, unless it is null) and the counters. */
    private static boolean stagesHold(INDArray params, Updater updater, int iterations, int epochs,
                                      PipelineStageSplit split, List<Dl4jPipelineStage> stages) {
        MultiLayerNetwork first = stages.stream().filter(Dl4jPipelineStage::held).findFirst().orElseThrow().network();
        if (first.getIterationCount() != iterations || first.getEpochCount() != epochs) {
            return false;
        }
        for (int s = 0; s < stages.size(); s++) {
            if (!stages.get(s).held()) {
                continue; // another rank's: it compares its own
            }
            long from = split.parameterOffset(s);
            long count = split.parameterCount(s);
            MultiLayerNetwork stage = stages.get(s).network();
            if (count > 0 && (ArrayCollectives.segmentOf(PipelineStageSplit.slice(params, from, from + count))
                    .mismatch(ArrayCollectives.segmentOf(stage.params())) != -1
                    || updater != null && !UpdaterStateCopy.same(updater, stage.getUpdater(true), from, 0, count))) {
                return false;
            }
        }
        return true;
    }

    /** The stages this process holds take the user's model's state (parameters, updater state); every stage its counters. */
    void giveTo(List<Dl4jPipelineStage> stages) {
        giveTo(stages, true);
    }

    /** As {@link #giveTo(List)}; without {@code withUpdaterState} the parameters and counters alone. */
    void giveTo(List<Dl4jPipelineStage> stages, boolean withUpdaterState) {
        giveStages(model().params(), updater(), iterationCount(), epochCount(), split, stages, withUpdaterState);
    }

    /** As {@link #giveTo}, from {@code source} (a network cut by {@code split}) instead of the user's model. */
    static void giveStages(MultiLayerNetwork source, PipelineStageSplit split, List<Dl4jPipelineStage> stages,
                           boolean withUpdaterState) {
        giveStages(source.params(), source.getUpdater(true), source.getIterationCount(), source.getEpochCount(), split,
                stages, withUpdaterState);
    }

    private static void giveStages(INDArray params, Updater updater, int iterations, int epochs, PipelineStageSplit split,
                                   List<Dl4jPipelineStage> stages, boolean withUpdaterState) {
        for (int s = 0; s < stages.size(); s++) {
            long from = split.parameterOffset(s);
            long count = split.parameterCount(s);
            MultiLayerNetwork stage = stages.get(s).network();
            if (count > 0 && stages.get(s).held()) {
                stage.params().assign(PipelineStageSplit.slice(params, from, from + count));
                if (withUpdaterState) {
                    UpdaterStateCopy.copy(updater, stage.getUpdater(true), from, 0, count);
                }
            }
            stage.setIterationCount(iterations);
            stage.setEpochCount(epochs);
        }
    }

    /**
     * A checkpoint's restore: the model takes {@code saved}'s parameters and counters and the updater state that
     * {@code replicas}' first stages read from the shards; then every replica takes the model's whole state.
     */
    void restoreFrom(Model saved, List<List<Dl4jPipelineStage>> replicas, GroupExchange exchange, int pipelineRanks) {
        model().params().assign(saved.params());
        boolean graphSaved = saved instanceof ComputationGraph;
        setIterationCount(graphSaved ? ((ComputationGraph) saved).getConfiguration().getIterationCount()
                : ((MultiLayerNetwork) saved).getIterationCount());
        setEpochCount(graphSaved ? ((ComputationGraph) saved).getConfiguration().getEpochCount()
                : ((MultiLayerNetwork) saved).getEpochCount());
        giveTo(replicas.getFirst(), false); // parameters and counters beside the restored updater state
        takeFrom(replicas.getFirst(), exchange, pipelineRanks);
        replicas.forEach(this::giveTo);
    }

    /**
     * The model's gradient view takes every held stage's {@code part} (the gradient before the step, or the update); a
     * stage another rank holds (group mode) leaves zeros in its slice.
     */
    void gatherGradients(List<Dl4jPipelineStage> stages, boolean beforeUpdate, INDArray target) {
        for (int s = 0; s < stages.size(); s++) {
            long from = split.parameterOffset(s);
            long count = split.parameterCount(s);
            if (count == 0) {
                continue;
            }
            INDArray slice = PipelineStageSplit.slice(target, from, from + count);
            if (!stages.get(s).held()) {
                slice.assign(0); // another rank's stage: its gradient is not in this process
                continue;
            }
            INDArray part = beforeUpdate ? stages.get(s).gradientBeforeUpdate()
                    : stages.get(s).network().getGradientsViewArray();
            if (part != null) {
                slice.assign(part.reshape(part.length()));
            }
        }
    }

    /**
     * Group mode's hand-over to the listeners after a step, with no collective: the model's parameters (and, with
     * {@code withUpdaterState}, updater state) of the stages this rank holds take theirs, the counters the stages';
     * the other stages' slices keep what the model held (the state gathered at the end of the last {@code fit}, or
     * given). Written into the user's model itself (a graph's flat parameters are the stages' in stage order).
     */
    void takeHeldFrom(List<Dl4jPipelineStage> stages, boolean withUpdaterState) {
        INDArray params = model().params();
        Updater updater = withUpdaterState ? updater() : null;
        MultiLayerNetwork counters = null;
        for (int s = 0; s < stages.size(); s++) {
            Dl4jPipelineStage stage = stages.get(s);
            if (!stage.held()) {
                continue;
            }
            counters = stage.network();
            long from = split.parameterOffset(s);
            long count = split.parameterCount(s);
            if (count > 0) {
                PipelineStageSplit.slice(params, from, from + count).assign(stage.network().params());
                if (updater != null && stage.network().getUpdater(false) != null) {
                    UpdaterStateCopy.copy(stage.network().getUpdater(false), updater, 0, from, count);
                }
            }
        }
        if (counters == null) {
            throw Invariants.violated("takeHeldFrom: this rank holds none of the " + stages.size() + " stages");
        }
        setIterationCount(counters.getIterationCount());
        setEpochCount(counters.getEpochCount());
    }

    /** Makes sure the model has a gradient view (DL4J creates it at the first fit). */
    void ensureGradientView() {
        if (gradientView() == null) {
            if (graph != null) {
                graph.initGradientsView();
            } else {
                network.initGradientsView();
            }
        }
    }

    void setEpochCount(int count) {
        if (graph != null) {
            graph.getConfiguration().setEpochCount(count);
        } else {
            network.setEpochCount(count);
        }
    }

    /** The model's activations on {@code batch}, as its listeners' onForwardPass takes them (see the trainer's javadoc). */
    Object activations(Object batch) {
        if (graph != null) {
            INDArray[] features = batch instanceof DataSet ds ? new INDArray[] {ds.getFeatures()}
                    : ((MultiDataSet) batch).getFeatures();
            return graph.feedForward(features, false, false);
        }
        return network.feedForward(((DataSet) batch).getFeatures(), false);
    }

    /**
     * A finished step as the listeners see it (thread mode: every stage is in this process): {@code replicas}' first
     * holds the state to show; every replica takes the model's state if a listener changed it.
     */
    ModelListeners.Step step(Object batch, double score, List<List<Dl4jPipelineStage>> replicas) {
        List<Dl4jPipelineStage> stages = replicas.getFirst();
        return new ModelListeners.Step() {
            @Override
            public List<Object> batches() {
                return List.of(batch);
            }

            @Override
            public List<Object> activations() {
                return List.of(PipelineModel.this.activations(batch)); // the model still holds the state before the step
            }

            @Override
            public double score() {
                return score;
            }

            @Override
            public void assembleGradient(INDArray target) {
                gatherGradients(stages, true, target);
            }

            @Override
            public void syncModel() {
                takeFrom(stages, null, 0);
                gatherGradients(stages, false, gradientView()); // after DL4J's step the gradient view holds the update
            }

            @Override
            public void syncReplicasIfChanged() {
                if (!holds(stages)) {
                    replicas.forEach(PipelineModel.this::giveTo);
                }
            }
        };
    }

    private Updater updater() {
        return graph != null ? graph.getUpdater(true) : network.getUpdater(true);
    }

    private static List<MultiLayerNetwork> networks(List<Dl4jPipelineStage> stages) {
        return stages.stream().map(Dl4jPipelineStage::network).toList();
    }

    @Override
    public Model model() {
        return graph != null ? graph : network;
    }

    @Override
    public List<TrainingListener> listeners() {
        Collection<TrainingListener> attached = graph != null ? graph.getListeners() : network.getListeners();
        return attached == null ? List.of() : List.copyOf(attached);
    }

    @Override
    public boolean truncatedBptt() {
        BackpropType type = graph != null ? graph.getConfiguration().getBackpropType()
                : network.getLayerWiseConfigurations().getBackpropType();
        return type == BackpropType.TruncatedBPTT;
    }

    @Override
    public void setInputAndLabels(Object batch) {
        if (graph != null) {
            MultiDataSet set = batch instanceof DataSet ds ? ds.toMultiDataSet() : (MultiDataSet) batch;
            graph.setInputs(set == null ? null : set.getFeatures());
            graph.setLabels(set == null ? null : set.getLabels());
        } else {
            DataSet set = (DataSet) batch;
            network.setInput(set == null ? null : set.getFeatures());
            network.setLabels(set == null ? null : set.getLabels());
        }
    }

    @Override
    public void setScore(double score) {
        if (graph != null) {
            graph.setScore(score);
        } else {
            network.setScore(score);
        }
    }

    @Override
    public INDArray gradientView() {
        return model().getGradientsViewArray();
    }

    @Override
    public int iterationCount() {
        return graph != null ? graph.getConfiguration().getIterationCount() : network.getIterationCount();
    }

    @Override
    public void setIterationCount(int count) {
        if (graph != null) {
            graph.getConfiguration().setIterationCount(count);
        } else {
            network.setIterationCount(count);
        }
    }

    @Override
    public int epochCount() {
        return graph != null ? graph.getConfiguration().getEpochCount() : network.getEpochCount();
    }
}
