package org.symmem4j.dl4j.pipeline;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Consumer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.CheckpointLayout;
import org.symmem4j.dl4j.train.FitAgreement;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.dl4j.train.RankFailures;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.dl4j.train.ResumePosition;
import org.symmem4j.dl4j.train.TrainerOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.pipeline.channel.PipelineAbortedException;
import org.symmem4j.pipeline.exec.PipelineMetrics;
import org.symmem4j.pipeline.exec.RunTimeline;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * Pipeline-parallel training of a DL4J {@link MultiLayerNetwork} on threads of this JVM:
 *
 * <pre>{@code
 * PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(model)
 *         .ranks(2).microbatches(8)                  // 2 threads, each batch cut into 8 microbatches
 *         .schedule(PipelineSchedule.ONE_F_ONE_B)    // or GPIPE, or schedule(INTERLEAVED, 2)
 *         .build();
 * trainer.fit(trainIterator);                        // again and again; model holds the result after each fit
 * }</pre>
 *
 * <p>Data parallelism over pipelines ({@link PipelineParallelTrainerBuilder#dataParallel}): {@code .ranks(4).dataParallel(2)}
 * trains two replicas of a 4-stage pipeline on 8 threads laid out as a {@code dp x pp = 2 x 4}
 * {@link org.symmem4j.parallel.DeviceMesh}; each replica trains on its half of every batch, and each
 * stage's gradients are summed over its two replicas before the update, which is then the update of
 * the whole batch. With {@link PipelineParallelTrainerBuilder#tensorParallel} every pipeline rank becomes several
 * tensor-parallel ranks, a {@code dp x pp x tp} mesh whose stages hold Megatron blocks split over the {@code tp}
 * sub-group ({@link PipelineTensorParallel}). With {@link PipelineParallelTrainerBuilder#syncBatchNorm} a BatchNormalization layer normalizes
 * each microbatch with the statistics of every replica's microbatch together ({@link PipelineSyncBatchNorm}).
 *
 * <p>The network is cut into {@code ranks x stagesPerRank} stages of consecutive layers
 * ({@link PipelineStageSplit}: balanced by parameter count, by measured pass times with
 * {@link PipelineParallelTrainerBuilder#splitByMeasuredTimes}, or at {@link PipelineParallelTrainerBuilder#stageBoundaries}); stage {@code s} runs on
 * rank {@code s % ranks}. Layers: dense, convolution and subsampling (4-D activations), LSTM, simple RNN
 * and their wrappers (3-D activations, masks), batch normalization, dropout and more
 * ({@link PipelineStageSplit}). Each rank is a thread of one in-JVM group, created at
 * the first {@code fit} and kept until {@link #close()}; activations travel forward and gradients
 * backward through symmetric-memory links ({@link org.symmem4j.pipeline.exec.PipelineExecutor}), in the
 * order of the chosen schedule.
 *
 * <p>Every batch is one step: it is cut into {@code microbatches} equal parts, every stage accumulates
 * its gradient over them and then applies one update with the whole batch's example count. One step
 * therefore equals one {@code fit} of the unsplit network on the whole batch, to rounding (the order in
 * which gradient sums are added differs); see {@link Dl4jPipelineStage}. Batch normalization and
 * dropout see microbatches, not the batch: each microbatch is normalized with its own statistics and
 * the running statistics follow the microbatches in order ({@link BatchNormRunningStats}), and each
 * microbatch draws its own reproducible dropout mask ({@link MicrobatchDropout}). The loss of each step
 * is what {@code MultiLayerNetwork.score()} reports after such a fit ({@link PipelineStepReport#loss()}).
 *
 * <p>The trainer trains its own copies of the network's layers, taken at {@link PipelineParallelTrainerBuilder#build()}
 * (parameters, updater state, counters). After every {@code fit} the network (or graph) given to the builder
 * holds the trained parameters, updater state, iteration and epoch counters and, as after DL4J's {@code fit},
 * {@code score()} the last step's score; if it was changed between calls, the stages take its state at the start
 * of the next {@code fit}. {@link #copyParametersTo} writes the same into another network of that configuration.
 * In group mode each rank's trainer holds only its own stages (the others are hollow: layouts over reserved memory,
 * no values), and every rank's model gets the whole trained network: each stage's state is gathered from the rank
 * that trained it (a collective at the end of every {@code fit}, which every rank calls anyway). Built from a
 * configuration ({@link #builder(MultiLayerConfiguration)}, {@link #builder(ComputationGraphConfiguration)}) no rank
 * holds the whole network until {@link #copyParametersTo} is called.
 *
 * <p>The DL4J listeners attached to the model ({@code ScoreIterationListener}, the UI's {@code StatsListener}
 * with its router, ...) are called as DL4J's {@code fit} calls them for one model trained on each step's batch,
 * on the caller's thread after each step, with the model holding that step's state
 * ({@link org.symmem4j.dl4j.train.ModelListeners}); routing listeners get a router with
 * {@link PipelineParallelTrainerBuilder#listeners(org.deeplearning4j.core.storage.StatsStorageRouter,
 * org.deeplearning4j.optimize.api.TrainingListener...)}. The stages keep no whole-batch activations: a listener
 * that overrides {@code onForwardPass} gets the model's own forward pass on the batch, in inference mode, at the
 * parameters before the step (the training pass's activations where the network has no dropout or batch
 * normalization). With tensor parallelism the model shows the shards joined (the unsharded network), its gradient
 * the shards' joined. In group mode the listeners are called on every rank, once per step, with the loss every rank
 * agreed on and the model showing this rank's own stages after the step (no collective per step; the whole network
 * at {@code onEpochStart} and, gathered, at {@code onEpochEnd}); listeners that read the whole network during a step
 * ({@code onForwardPass}, DL4J's checkpoint and evaluative listeners) are refused ({@link PipelineGroupListeners}).
 *
 * Everything that can be checked is checked at {@code build()} (supported layers, stage count,
 * boundaries, widths, schedule, link slots) and at the start of each {@code fit} (batch size divisible
 * by the microbatch count, the features' shape through every layer by DL4J's input types, the labels'
 * shape against the output), before any rank computes.
 *
 * <p>If a rank fails during a step, every rank stops (the links are poisoned), {@code fit} throws a
 * {@link PipelineTrainingException} with that rank's exception, and the trainer is closed: stages may
 * or may not have applied that step's update. The model then holds what it held before that {@code fit} (with
 * listeners, the state of the last step they were shown; with
 * {@link PipelineParallelTrainerBuilder#checkpointEvery}, the state of the last checkpoint taken in it, if any,
 * which the model takes when it is written).
 *
 * <p>Checkpoints the trainer takes itself and resuming from the newest complete one:
 * {@code .checkpointEvery(100, dir).resumeFrom(dir)} on the builder ({@link #restoreLatest}, {@link #resumedFrom});
 * one step is one batch.
 *
 * <p>With {@link PipelineParallelTrainerBuilder#meterRegistry} every step feeds {@link PipelineMetrics} (bubble, hand-off and
 * step latency, each rank's compute time, examples, loss, failures).
 */
public final class PipelineParallelTrainer implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(PipelineParallelTrainer.class);

    /** Told about every step, on the thread that called {@code fit()}. */
    @FunctionalInterface
    public interface StepListener extends org.symmem4j.dl4j.train.StepListener<PipelineStepReport> {
        /**
         * Called once per completed step, after its update.
         *
         * @param report the step's number, examples, loss and per-rank timelines
         */
        @Override
        void onStep(PipelineStepReport report);
    }

    private final PipelineStageSplit split;
    /** The network (or graph) given to the builder: it holds the stages' state after every {@code fit}. */
    private final PipelineModel model;
    /** The stages this process trains, of every data-parallel replica and tensor-parallel shard it runs. */
    private final StageReplicas replicas;
    /** Replica 0's stages ({@link StageReplicas#first}). */
    private final List<Dl4jPipelineStage> stages;
    private final int dataParallel;
    /** Tensor-parallel ranks per pipeline rank; 1 without tensor parallelism. */
    private final int tensorParallel;
    private final boolean syncBatchNorm;
    private final PipelineSchedule scheduleKind;
    private final Schedule schedule;
    private final List<String> unsplitBackwardLayers;
    private final PipelineShape shape;
    private final int linkSlots;
    private final Duration timeout;
    private final int ompThreadsPerRank;
    private final List<StepListener> listeners;
    private final PipelineMetrics metrics;
    private final InputType inputType;
    private final StageProfile profile;
    private final RunTimeline runTimeline;
    /** Group mode: this process's rank of the user's group (the caller's to close); null in thread mode. */
    private final Group group;
    /** Group mode: this rank's stages, run on the caller's thread; opened at the first step. */
    private PipelineRank local;
    /** Group mode: the step's agreement, loss and the stages' gather at {@link #copyParametersTo}. */
    private GroupExchange exchange;
    /** Thread mode: the rank threads, started at the first step. */
    private PipelineRankThreads threads;
    private long step;
    /** Saves, restores and takes the periodic checkpoints, in the format of the stages' parallelism. */
    private final PipelineCheckpointing checkpoints;
    /** Where the next fit(iterator) starts: the checkpoint the last restore read, and the batches of its epoch it skips. */
    private final ResumePosition resume = new ResumePosition();
    private PipelineStepReport lastStep;
    private String failed;
    private boolean closed;

    PipelineParallelTrainer(PipelineParallelTrainerBuilder b, TrainerOptions<StepListener> o, PipelineModel model,
                            PipelineStageSplit split, Schedule schedule, PipelineShape shape, int linkSlots,
                            StageProfile profile) {
        this.split = split;
        this.inputType = b.inputType;
        this.profile = profile;
        this.runTimeline = o.timelineSteps() > 0 ? new RunTimeline(o.timelineSteps()) : null;
        this.scheduleKind = b.schedule;
        this.schedule = schedule;
        this.unsplitBackwardLayers = !b.schedule.splitsBackward() ? List.of()
                : b.network instanceof GraphLayerNetwork g ? g.wiring().unsplitLayers()
                : SplitBackward.unsplitLayers(b.network.getLayerWiseConfigurations(), b.tensorParallel,
                b.tensorParallelColumns);
        this.shape = shape;
        this.linkSlots = linkSlots;
        this.timeout = o.timeout();
        this.dataParallel = b.dataParallel;
        this.tensorParallel = b.tensorParallel;
        this.syncBatchNorm = b.syncBatchNorm;
        this.group = o.group();
        // in group mode this process runs one rank: ND4J's threads are the process's (the launcher sizes them)
        this.ompThreadsPerRank = o.ndThreadsPerRank(group != null ? 1 : shape.ranks() * b.dataParallel * tensorParallel);
        this.listeners = o.stepListeners();
        this.metrics = o.bind(new PipelineMetrics(b.schedule.tag(), o.transportName(), o.metricTags()));
        // group mode: this process holds its own stages of one replica (s % pp == its pipeline rank), the others hollow
        this.replicas = new StageReplicas(split, model, dataParallel, b.tensorShards, tensorParallel,
                b.tensorParallelColumns, shape.ranks(), group, b.sharding);
        this.stages = replicas.first();
        this.model = model;
        this.checkpoints = new PipelineCheckpointing(split, model, replicas, group, shape.ranks(), tensorParallel,
                o.checkpointSchedule());
    }

    /**
     * Starts a builder for {@code network} (initialized at {@code build()} if it is not yet).
     *
     * @param network the network to train; the trainer trains copies of its layers
     * @return a builder; {@code ranks} and {@code microbatches} must be set
     */
    public static PipelineParallelTrainerBuilder builder(MultiLayerNetwork network) {
        return new PipelineParallelTrainerBuilder(Objects.requireNonNull(network, "network"), null);
    }

    /**
     * Starts a builder for a network given by its configuration alone, so that no rank ever holds the whole network:
     * in group mode each rank initialises and trains only its own stages (their parameters bitwise those of
     * {@code new MultiLayerNetwork(conf).init()}, drawn layer by layer in DL4J's order), and the trainer's model is
     * hollow ({@link org.symmem4j.dl4j.HollowNetworks}). The trained network exists only when asked for:
     * {@link #copyParametersTo} gathers it stage by stage into a network the caller gives. Checkpoints, DL4J listeners
     * and a split by measured times need the whole network and are refused at {@code build()}.
     *
     * @param conf the network's configuration
     * @return a builder; {@code microbatches} must be set (and {@code ranks} or a group)
     */
    public static PipelineParallelTrainerBuilder builder(MultiLayerConfiguration conf) {
        MultiLayerNetwork hollow = new MultiLayerNetwork(Objects.requireNonNull(conf, "conf").clone());
        return new PipelineParallelTrainerBuilder(hollow, null, HollowNetworks.hollow(hollow));
    }

    /**
     * As {@link #builder(MultiLayerConfiguration)}, for a {@link ComputationGraph} (see
     * {@link #builder(ComputationGraph)}) given by its configuration: each rank initialises only its own stages, their
     * parameters bitwise those of {@code new ComputationGraph(conf).init()} (DL4J's draws in its vertex order), and
     * the trainer's graph is hollow; {@link #copyParametersTo(ComputationGraph)} gathers the trained graph on request.
     * A configuration the pipeline cannot train is refused at {@code build()}, naming the vertex.
     *
     * @param conf the graph's configuration
     * @return a builder; {@code microbatches} must be set (and {@code ranks} or a group)
     */
    public static PipelineParallelTrainerBuilder builder(ComputationGraphConfiguration conf) {
        ComputationGraph hollow = new ComputationGraph(Objects.requireNonNull(conf, "conf").clone());
        return new PipelineParallelTrainerBuilder(null, hollow, HollowNetworks.hollow(hollow));
    }

    /**
     * Starts a builder for {@code graph}, a {@link ComputationGraph} of one input and one output: a chain (every
     * vertex a layer fed by the one before) trains as the equivalent multi-layer network; a graph with residual
     * connections and merges with its stages starting at cut vertices, each stage running its vertices
     * ({@link GraphWiring}); {@code build()} refuses what cannot train, naming the vertex. After every {@code fit}
     * the graph holds the trained state.
     *
     * @param graph a graph to train; the trainer trains copies of its layers
     * @return a builder; {@code ranks} and {@code microbatches} must be set
     */
    public static PipelineParallelTrainerBuilder builder(ComputationGraph graph) {
        return new PipelineParallelTrainerBuilder(null, Objects.requireNonNull(graph, "graph"));
    }

    /**
     * One training step on {@code batch}: cut into the configured number of microbatches, run through
     * the pipeline, one update per stage. {@link #lastStep()} then holds the loss and timelines.
     *
     * @throws IllegalArgumentException before anything runs, when the batch size is not a multiple of
     *                                  the microbatch count or the widths do not fit the network (the
     *                                  trainer stays usable)
     * @throws PipelineTrainingException when a rank failed during the step (the trainer is closed)
     *
     * @param batch features and labels (and masks); its size a multiple of the microbatch count
     */
    public synchronized void fit(DataSet batch) {
        train(List.<Object>of(Objects.requireNonNull(batch, "batch")).iterator(), false, null, null);
    }

    /**
     * One step per batch of {@code iterator} (reset first if it is exhausted and resettable), then the
     * epoch counter advances, as DL4J's {@code fit(DataSetIterator)} does. A batch that fails the checks
     * of {@link #fit(DataSet)} stops the loop with that exception; the batches before it were trained. After a
     * resume the first call skips the batches of the epoch the checkpoint had trained, and refuses an iterator that
     * ends before them. In group mode the refusals that depend on what one rank was given (the model's listeners,
     * the resume position) are agreed before any data moves: every rank throws the same error, naming the refusing
     * ranks (one small exchange per call).
     *
     * @param iterator the batches
     * @throws IllegalArgumentException  when a batch fails the checks of {@link #fit(DataSet)}, or the iterator does
     *                                   not reach the resume position
     * @throws PipelineTrainingException when a rank failed during a step (the trainer is closed)
     */
    public synchronized void fit(DataSetIterator iterator) {
        Objects.requireNonNull(iterator, "iterator");
        train(iterator, true, iterator.resetSupported() ? iterator::reset : null, null);
    }

    /**
     * Trains a chain {@link ComputationGraph} on every batch of {@code iterator}, as
     * {@link #fit(DataSetIterator)} does; every batch has one features and one labels array (and their masks).
     *
     * @param iterator the batches
     * @throws IllegalArgumentException  when this trainer holds a {@link MultiLayerNetwork}, or a batch has more
     *                                   than one input or output, or fails the checks of {@link #fit(DataSet)}
     * @throws PipelineTrainingException when a rank failed during a step (the trainer is closed)
     */
    public synchronized void fit(MultiDataSetIterator iterator) {
        Objects.requireNonNull(iterator, "iterator");
        train(iterator, true, iterator.resetSupported() ? iterator::reset : null,
                model.model() instanceof ComputationGraph ? null : "fit(MultiDataSetIterator) needs a ComputationGraph;"
                        + " this trainer holds a " + model.model().getClass().getSimpleName()
                        + " (fix: use fit(DataSetIterator))");
    }

    /**
     * Trains on every batch of {@code batches} (DataSets or MultiDataSets); an epoch when {@code epoch}. The user's
     * model then holds the stages' state, also when a batch failed its checks (the batches before it were trained).
     * First the checks that depend on what this rank was given (the fit called, the model's listeners, the resume
     * position, which skips the batches a restored checkpoint had trained) are agreed by every rank in group mode
     * ({@link FitAgreement}), before any data moves.
     *
     * @param reset    resets the iterator, or null when it cannot be (or for one batch)
     * @param wrongFit the refusal of the fit called for this model, or null
     */
    private void train(Iterator<?> batches, boolean epoch, Runnable reset, String wrongFit) {
        requireUsable(); // this rank's own state: after a failed step every rank failed, and the group is aborted
        // the pipeline's checkpoints record batches, not their examples; fit(batch) skips none
        FitAgreement start = epoch ? resume.fitStart(group, CheckpointLayout.plain(), false)
                : new FitAgreement(group, CheckpointLayout.plain(), 0, -1, null);
        ModelListeners listeners = start.agree(() -> {
            if (wrongFit != null) {
                throw new IllegalArgumentException(wrongFit);
            }
            ModelListeners l = ModelListeners.of(model); // refuses what it cannot honour before anything changes
            PipelineGroupListeners.refuse(group, l, tensorParallel);
            PipelineZero.refuseListeners(replicas.sharding(), l, group != null);
            if (reset != null && !batches.hasNext()) {
                reset.run(); // as DL4J's fit: an exhausted iterator is reset first
            }
            start.skip(batches, b -> 0); // the pipeline's checkpoints record batches, not their examples
            return l;
        }, reset);
        withExchange(e -> replicas.takeModelIfChanged(model, e));
        if (!listeners.isEmpty()) {
            model.ensureGradientView();
            model.exposeGradientView();
        }
        if (epoch) {
            listeners.epochStart(model.model());
        }
        double score = Double.NaN;
        long batchesInEpoch = start.skipped(); // trained before the resumed checkpoint
        if (epoch) {
            resume.skipped();
        }
        try {
            while (batches.hasNext()) {
                Object batch = batches.next();
                score = runStep(batch, listeners);
                batchesInEpoch += epoch ? 1 : 0;
                if (checkpoints.due(step)) {
                    checkpoints.takePeriodic(step, batchesInEpoch, this::modelTakesStages, this::exchange);
                }
            }
        } catch (IllegalArgumentException refused) {
            modelTakesStages(); // a refused batch trained nothing: the steps before it count
            throw refused;
        } finally {
            model.setInputAndLabels(null); // DL4J's fit clears them too
        }
        modelTakesStages();
        if (!Double.isNaN(score)) {
            model.setScore(score); // as after DL4J's fit: the last iteration's score
        }
        if (epoch) {
            listeners.epochEnd(model.model());
            replicas.incrementEpochCount(); // the end of a fit(iterator) is an epoch, counted after onEpochEnd as DL4J does
            model.setEpochCount(model.epochCount() + 1);
        }
    }

    /**
     * The latest step's report, or null before the first step.
     *
     * @return the report of the latest step, or null
     */
    public synchronized PipelineStepReport lastStep() {
        return lastStep;
    }

    /**
     * Writes the trained parameters, updater state (so training can go on with plain {@code fit}) and
     * iteration and epoch counters into {@code target}, a network with the configuration of the one given
     * to the builder (which {@code fit} already updates). In group mode this is collective: every rank calls it, each stage's state
     * comes from the rank that trained it, and every rank's {@code target} gets the whole network.
     *
     * @throws IllegalArgumentException when {@code target}'s layers differ
     * @throws IllegalStateException    after a failed step (the stages may disagree on the step count)
     *
     * @param target the network given to the builder, or one with the same configuration
     */
    public synchronized void copyParametersTo(MultiLayerNetwork target) {
        requireCopyable();
        withExchange(e -> replicas.copyInto(target, e)); // thread mode: e == null
    }

    /**
     * As {@link #copyParametersTo(MultiLayerNetwork)}, into a graph: the one given to {@link #builder(ComputationGraph)}.
     *
     * @param target the graph given to the builder, or one with its configuration
     * @throws IllegalArgumentException when {@code target} is not that chain of layers
     * @throws IllegalStateException    after a failed step (the stages may disagree on the step count)
     */
    public synchronized void copyParametersTo(ComputationGraph target) {
        requireCopyable();
        MultiLayerNetwork chain = GraphChain.toNetwork(target);
        copyParametersTo(chain);
        GraphChain.copyInto(chain, target);
    }

    /**
     * The bytes of model state this process holds for training: parameters, gradient views, accumulated gradients and
     * updater state of the stages it trains. In group mode that is this rank's stages only (the others' are hollow and
     * hold nothing); in thread mode every stage of every replica. The network given to the builder is the caller's
     * and not counted.
     *
     * @return bytes of model state held by the trainer
     */
    public long modelBytesHeld() {
        return replicas.modelBytes();
    }

    /**
     * {@return the parameters of the stages this process trains (group mode: this rank's; thread mode: all, once; with
     * tensor parallelism every shard's, a replicated parameter once per shard)}
     */
    public long parametersHeld() {
        return replicas.parameters();
    }

    /**
     * A copy of the trained parameters of stage {@code stage}, one this process trains: its layers' flat parameter
     * vector in DL4J's order (the slice {@code [split().parameterOffset(stage), + split().parameterCount(stage))} of
     * the whole network's {@code params()}). In group mode that is one of this rank's stages ({@code stage % ranks}
     * equal to its pipeline rank), of its replica; in thread mode any stage, of replica 0. With tensor parallelism it is
     * the stage's shard, in the shard's layout: this rank's shard in group mode, shard 0 in thread mode. It reads no
     * other rank's memory and gathers nothing, so a rank started from a configuration can compare or record its stages without the
     * whole network ever being held ({@link #copyParametersTo} gathers all of it). With ZeRO stage 3
     * ({@code sharding(PARAMETERS)}) the replicas' blocks are joined in thread mode; in group mode it is refused (the
     * rank holds only its block between steps).
     *
     * @param stage the stage, {@code 0 .. split().stageCount() - 1}
     * @return a new array with the stage's parameters (empty for a stage without parameters)
     * @throws IllegalArgumentException when {@code stage} is out of range or another rank trains it
     * @throws IllegalStateException    after a failed step (the stage may or may not have applied it)
     */
    public synchronized INDArray stageParameters(int stage) {
        requireCopyable();
        return replicas.parametersOf(stage);
    }

    /** The resident bytes of the trainer's model started from a configuration (hollow), else -1. */
    long modelResidentBytes() {
        return model.hollow() == null ? -1 : model.hollow().residentBytes();
    }

    /** The model takes the stages' state: copied in thread mode, gathered from every rank in group mode (collective). */
    private void modelTakesStages() {
        withExchange(e -> replicas.giveTo(model, e)); // thread mode: e == null
    }

    /** Runs {@code action} with the group's exchange (opened once for it after close()), or null in thread mode. */
    private void withExchange(Consumer<GroupExchange> action) {
        if (group == null) {
            action.accept(null);
        } else if (exchange != null || !closed) {
            action.accept(exchange());
        } else {
            try (GroupExchange once = GroupExchange.open(group)) { // after close(): collective, every rank calls it
                action.accept(once);
            }
        }
    }

    private GroupExchange exchange() {
        if (exchange == null) {
            exchange = GroupExchange.open(group);
        }
        return exchange;
    }

    private void requireCopyable() {
        if (failed != null) {
            throw new IllegalStateException("the pipeline failed (" + failed + "): its stages may or may not have"
                    + " applied the failed step, so their parameters are not copied; fix: train again from a"
                    + " network you trust,"
                    + " e.g. one restored from a checkpoint");
        }
    }

    /**
     * Saves a checkpoint into {@code dir} (created when absent), of what the next {@code fit} would train from:
     * one shard file per stage with its updater state (per stage and dp replica, its block, with {@code sharding}),
     * {@code model.zip}, the whole network (or graph) with its
     * updater state, which plain DL4J loads with {@code ModelSerializer.restoreMultiLayerNetwork(file, true)}
     * ({@link PipelineCheckpoints}; with tensor parallelism a file per stage shard, its parameters and updater state,
     * and the shards joined in {@code model.zip}: {@link PipelineTensorParallelCheckpoints}), and last
     * {@code manifest.properties}, the step and counters and every file's size
     * and CRC-32C ({@link CheckpointDirectory}); every file is written to a temporary name, forced to disk and renamed.
     * Shard files of another stage count in {@code dir} are deleted. In group mode it is collective: every rank calls
     * it with the same directory (one machine, or a file system they share); each rank of the first replica writes its
     * own stages' files, rank 0 also {@code model.zip} and the manifest, and every rank returns once all files are
     * written.
     *
     * @param dir the checkpoint directory
     * @throws IOException           when a file cannot be written
     * @throws IllegalStateException after a failed step, or when the trainer is closed
     */
    public synchronized void saveCheckpoint(Path dir) throws IOException {
        requireUsable();
        model.requireWhole("saveCheckpoint");
        withExchange(e -> replicas.takeModelIfChanged(model, e));
        checkpoints.write(dir, step, 0, this::exchange);
    }

    /**
     * Restores a checkpoint {@link #saveCheckpoint} (or {@link PipelineParallelTrainerBuilder#checkpointEvery}) wrote
     * for the same stages (same network configuration, same split; the rank count, schedule and data parallelism may
     * differ): the stages read their shards, the model and every stage then hold the saved parameters, updater state
     * and counters, as after a {@code fit}. A directory with a manifest is verified against it first (a torn one is
     * refused with {@link CheckpointDirectory.TornCheckpointException}); one without, written before manifests, is
     * read as before. Everything is checked before anything changes (stage count, each stage's parameter range, data
     * type, updater layout, equal counters in every file), with key=value refusals. The trainer's step counter goes
     * on from the manifest's step, and when the checkpoint was taken inside a {@code fit(iterator)} the next one
     * skips the batches of that epoch already trained. In group mode it is collective: every rank reads every
     * stage's file, and a rank whose files fail any check makes every rank throw, each model left as it was.
     *
     * @param dir a directory {@link #saveCheckpoint} wrote
     * @throws IOException              when a file cannot be read, is truncated, fails its checksum or the manifest
     * @throws IllegalArgumentException when the checkpoint does not fit this trainer's stages
     * @throws IllegalStateException    after a failed step, or when the trainer is closed
     */
    public synchronized void restoreCheckpoint(Path dir) throws IOException {
        requireUsable();
        model.requireWhole("restoreCheckpoint");
        CheckpointDirectory.Counters c = checkpoints.restore(dir, this::exchange);
        if (c != null) {
            step = c.step();
            resume.restored(dir, c);
        }
    }

    /**
     * Restores the newest complete checkpoint under {@code root} ({@code step-<n>} directories written by
     * {@link PipelineParallelTrainerBuilder#checkpointEvery}; torn ones are skipped with a log line) with
     * {@link #restoreCheckpoint}, or does nothing when there is none. {@link PipelineParallelTrainerBuilder#resumeFrom}
     * calls it at {@code build()}. Collective in group mode, where every rank must find the same checkpoint.
     *
     * @param root the run's checkpoint directory; need not exist
     * @return the checkpoint restored (its directory, step, epoch, iteration, batches of its epoch already trained,
     *         which the next {@code fit(iterator)} skips), or empty when there was none
     * @throws IOException when the root cannot be listed or the checkpoint read
     */
    public synchronized Optional<CheckpointDirectory.Checkpoint> restoreLatest(Path root) throws IOException {
        model.requireWhole("restoreLatest");
        return ResumePosition.restoreLatest(checkpoints.latest(root), this::restoreCheckpoint);
    }

    /**
     * The checkpoint the last restore read ({@link #restoreLatest}, {@link #restoreCheckpoint} of a directory with a
     * manifest, or {@link PipelineParallelTrainerBuilder#resumeFrom} at {@code build()}).
     *
     * @return it, or null when none was restored (a fresh start)
     */
    public synchronized CheckpointDirectory.Checkpoint resumedFrom() {
        return resume.resumedFrom();
    }

    /**
     * How the network was cut into stages.
     *
     * @return the first layer of every stage
     */
    public PipelineStageSplit split() {
        return split;
    }

    /**
     * The measured layer times the split was made from ({@link PipelineParallelTrainerBuilder#splitByMeasuredTimes}), or null.
     *
     * @return the profile, or null when the split was not made from measured times
     */
    public StageProfile profile() {
        return profile;
    }

    /**
     * The stages' pass times the profile predicts for this split, in microseconds, for
     * {@code ScheduleSimulator.simulate(schedule(), shape(), ...)}: the bubble to expect before
     * training. Null without a profile.
     *
     * @return per stage, forward and backward microseconds, or null
     */
    public StageDurations predictedStageDurations() {
        return profile == null ? null : profile.stageDurationsMicros(split);
    }

    /**
     * Every recorded step's timelines as one Chrome trace ({@link PipelineParallelTrainerBuilder#recordTimeline}), or null
     * when not recording.
     *
     * @return the run's timeline, or null
     */
    public RunTimeline runTimeline() {
        return runTimeline;
    }

    /**
     * The schedule every step runs (one action list per rank).
     *
     * @return the schedule, as data
     */
    public Schedule schedule() {
        return schedule;
    }

    /**
     * Under {@link PipelineSchedule#ZERO_BUBBLE_H1}: the layers whose backward does not split, which run it whole
     * (weight gradient included) in the input-gradient action, each as {@code layer i (Kind "name"): why}. Their
     * results are exact; only the schedule's saving is smaller. Empty for the other schedules and when every layer
     * with parameters splits.
     *
     * @return the unsplit layers, in layer order
     */
    public List<String> unsplitBackwardLayers() {
        return unsplitBackwardLayers;
    }

    /**
     * The kind of schedule the trainer generated.
     *
     * @return GPipe, 1F1B or interleaved
     */
    public PipelineSchedule scheduleKind() {
        return scheduleKind;
    }

    /**
     * Ranks, microbatches per step and stages per rank.
     *
     * @return the pipeline's shape
     */
    public PipelineShape shape() {
        return shape;
    }

    /**
     * Data-parallel replicas of every stage ({@link PipelineParallelTrainerBuilder#dataParallel}).
     *
     * @return the number of replicas, 1 without data parallelism
     */
    public int dataParallel() {
        return dataParallel;
    }

    /** Replica {@code d}'s stages (tests compare the replicas bitwise); with tensor parallelism, its shard 0's. */
    List<Dl4jPipelineStage> replicaStages(int d) {
        return replicas.replica(d, 0);
    }

    /** Replica {@code d}'s stages of tensor-parallel shard {@code t}. */
    List<Dl4jPipelineStage> replicaStages(int d, int t) {
        return replicas.replica(d, t);
    }

    /**
     * Tensor-parallel ranks per pipeline rank ({@link PipelineParallelTrainerBuilder#tensorParallel}).
     *
     * @return the tensor-parallel degree, 1 without tensor parallelism
     */
    public int tensorParallel() {
        return tensorParallel;
    }

    /**
     * Messages each stage-to-stage link holds before its sender waits.
     *
     * @return slots per link
     */
    public int linkSlots() {
        return linkSlots;
    }

    /**
     * The metrics binder (already bound if a registry was given to the builder).
     *
     * @return the trainer's pipeline metrics; bind it to more registries with {@code bindTo}
     */
    public PipelineMetrics metrics() {
        return metrics;
    }

    /**
     * Stops the rank threads and frees the links (group mode: this rank's links and communicators, collective
     * with the other ranks' {@code close}; the group stays the caller's). Idempotent.
     */
    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            stopWorkers();
        }
    }

    private void requireUsable() {
        if (failed != null) {
            throw new IllegalStateException("the pipeline failed (" + failed + ") and was closed; expected an"
                    + " open trainer (fix: build a new one)");
        }
        if (closed) {
            throw new IllegalStateException("the trainer is closed: expected an open trainer, found one after"
                    + " close() (fix: build a new"
                    + " one with PipelineParallelTrainer.builder(network))");
        }
    }

    /** One step on {@code original} (as the caller gave it), then the listeners; the step's loss. */
    private double runStep(Object original, ModelListeners modelListeners) {
        Objects.requireNonNull(original, "batch");
        // group mode: collective, every rank, or none, goes on with this batch (a refused one refused by all)
        DataSet batch = group != null ? exchange().agreeOnBatch(original, step) : PipelineBatches.asDataSet(original);
        List<StepPlan> plans = replicas.plans(Objects.requireNonNull(batch, "batch"), shape.microbatches(), inputType);
        // every replica's share is the same size: its examples and its largest message
        long examples = plans.getFirst().batch().examples() * dataParallel;
        long slotBytes = plans.getFirst().largestMessageBytes(split.dataType().width());
        List<StepTimeline> timelines;
        double loss;
        if (group == null) {
            timelines = runOnThreads(plans, slotBytes);
            loss = replicas.score(); // DL4J's: data loss plus regularization, at the pre-update parameters
        } else {
            GroupExchange.StepOutcome outcome = exchange().afterStep(stages, shape.ranks(), tensorParallel,
                    runInGroup(plans.getFirst(), slotBytes));
            timelines = outcome.timelines(); // replica 0's pipeline ranks, as in thread mode
            loss = outcome.loss(); // the same sum, the same order, on every rank
        }
        PipelineStepReport report = new PipelineStepReport(step, examples, loss, timelines);
        metrics.record(report.timelineReport());
        metrics.recordTraining(examples, loss);
        if (runTimeline != null) {
            runTimeline.add(step, timelines, Map.of("loss", loss, "examples", (double) examples));
        }
        step++;
        lastStep = report;
        if (!modelListeners.isEmpty()) {
            modelListeners.step(model, replicas.listenerStep(model, original, loss));
        }
        for (StepListener listener : listeners) {
            listener.onStep(report);
        }
        return loss;
    }

    /** Thread mode: every rank's task, then every rank's timeline (replica 0's pipeline ranks). */
    private List<StepTimeline> runOnThreads(List<StepPlan> plans, long slotBytes) {
        ensureThreads();
        List<Throwable> failures = new ArrayList<>();
        List<Integer> failedRanks = new ArrayList<>();
        List<StepTimeline> timelines = threads.step(plans, slotBytes, step, timeout, failures, failedRanks);
        if (!failures.isEmpty()) {
            throw fail(failures, failedRanks);
        }
        // replica 0's pipeline ranks (tensor-parallel rank 0's): every replica runs the same schedule
        List<StepTimeline> pipeline = new ArrayList<>(shape.ranks());
        for (int p = 0; p < shape.ranks(); p++) {
            pipeline.add(timelines.get(p * tensorParallel));
        }
        return List.copyOf(pipeline);
    }

    /** Group mode: this process's rank runs the step on the caller's thread; its own timeline. */
    private StepTimeline runInGroup(StepPlan plan, long slotBytes) {
        if (local == null) {
            Nd4jThreadLimit.set(ompThreadsPerRank); // this process's rank: the process's cores unless set
            local = PipelineRank.open(group, specOfRank(stages, group.rank()));
            LOG.info("symmem4j pipeline: rank " + group.rank() + " of " + group.worldSize() + " (" + group.transport().name()
                    + "), " + shape + (dataParallel > 1 ? " x " + dataParallel + " data-parallel replicas" : "")
                    + (tensorParallel > 1 ? " x " + tensorParallel + " tensor-parallel ranks" : "")
                    + ", schedule " + scheduleKind + ", link slots " + linkSlots + ", " + split);
        }
        try {
            return local.step(plan, slotBytes);
        } catch (RuntimeException | Error e) {
            throw fail(List.of(e), List.of(group.rank()));
        }
    }

    /** What world rank {@code rank} runs, of its replica's stages {@code replica} ({@link PipelineRank.Spec#ofRank}). */
    private PipelineRank.Spec specOfRank(List<Dl4jPipelineStage> replica, int rank) {
        return PipelineRank.Spec.ofRank(rank, replica, dataParallel, tensorParallel, schedule, shape, linkSlots,
                syncBatchNorm);
    }

    /** Closes the trainer after a failed step; the exception carries the rank that caused the others to stop. */
    private PipelineTrainingException fail(List<Throwable> failures, List<Integer> failedRanks) {
        // ranks that only heard of another's failure (poisoned links, an aborted replica group) are not the origin
        int origin = RankFailures.origin(failures, f -> f instanceof PipelineAbortedException
                || f instanceof PeerTimeoutException t && t.reason() == PeerTimeoutException.Reason.PEER_ABORTED);
        Throwable cause = failures.get(origin);
        metrics.recordFailure(cause instanceof PeerTimeoutException t && t.reason() == PeerTimeoutException.Reason.DEADLINE_PASSED
                ? PipelineMetrics.FailureReason.TIMEOUT : PipelineMetrics.FailureReason.ERROR);
        failed = "rank " + failedRanks.get(origin) + " at step " + step + ": " + cause;
        PipelineTrainingException out = new PipelineTrainingException("pipeline step " + step + " failed on rank "
                + failedRanks.get(origin) + ": " + cause + " (fix: correct what the cause names and resume from the"
                + " newest complete checkpoint with checkpointEvery(k, dir).resumeFrom(dir))", failedRanks.get(origin),
                step, cause);
        RankFailures.suppressOthers(out, failures, origin);
        closed = true;
        stopWorkers();
        return out;
    }

    private void ensureThreads() {
        if (threads != null) {
            return;
        }
        // every rank runs ND4J ops at once: each gets its share of the cores (op and BLAS threads, process-wide)
        Nd4jThreadLimit.set(ompThreadsPerRank);
        int perReplica = shape.ranks() * tensorParallel;
        List<PipelineRank.Spec> specs = new ArrayList<>(dataParallel * perReplica);
        for (int rank = 0; rank < dataParallel * perReplica; rank++) {
            specs.add(specOfRank(replicas.ofWorldRank(rank), rank)); // row-major dp x pp x tp mesh
        }
        threads = PipelineRankThreads.start(specs, perReplica, timeout);
        LOG.info("symmem4j pipeline: " + shape + (dataParallel > 1 ? " x " + dataParallel + " data-parallel replicas" : "")
                + (tensorParallel > 1 ? " x " + tensorParallel + " tensor-parallel ranks" : "")
                + ", schedule " + scheduleKind + ", link slots "
                + linkSlots + ", ND4J threads per rank " + ompThreadsPerRank + ", " + split);
    }

    private void stopWorkers() {
        if (group != null) {
            // group mode: this rank's resources (collective with the other ranks' close), never the user's group
            if (local != null) {
                local.close();
                local = null;
            }
            RankRuntime.closeQuietly(exchange);
            exchange = null;
            return;
        }
        if (threads != null) {
            threads.stop();
            threads = null;
        }
    }
}
