package org.symmem4j.dl4j;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import java.util.Optional;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.CheckpointLayout;
import org.symmem4j.dl4j.train.CheckpointSchedule;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.dl4j.train.ResumePosition;
import org.symmem4j.dl4j.train.TrainerBuilder;
import org.symmem4j.dl4j.train.TrainerOptions;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.SyncMetrics;

/**
 * Exact synchronous data parallelism for DL4J, as a drop-in for {@code ParallelWrapper}:
 *
 * <pre>{@code
 * SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(model).workers(4).build();
 * wrapper.fit(trainIterator);   // again and again; model holds the result after each fit
 * }</pre>
 *
 * <p>Each worker thread trains its own replica of the model on its own batch. After backprop, each
 * replica's raw gradient (DL4J's flat gradient view) is averaged across workers by an all-reduce
 * over symmetric memory, in place, before that replica's updater runs. So every replica applies the
 * same averaged gradient and stays bitwise identical to the others, and N workers with batch B
 * train like one model with batch N·B (to floating-point rounding). Batches of different sizes, and
 * a last round with fewer batches than workers, are weighted by their example counts; idle workers
 * contribute nothing but apply the same update.
 *
 * <p>Layer state that DL4J keeps in the parameter vector and updates through the gradient view —
 * BatchNormalization's running mean and variance (or log10 std), CenterLossOutputLayer's class
 * centers — is not a gradient and is merged on its own ({@link StateUpdateReduction}): the running
 * statistics equal those of one model trained on the merged batch, to rounding, with plain data
 * parallelism and with sharding. Training-mode normalization uses each worker's own batch statistics,
 * as PyTorch's DistributedDataParallel without SyncBatchNorm does.
 * OCNNOutputLayer, whose radius is reset from state outside the parameters, is refused at
 * {@code build()}.
 *
 * <p>The listeners attached to the model are called as DL4J's {@code fit} calls them for one model
 * trained on each step's merged batch, on the caller's thread after each step, with the model
 * holding that step's state and merged-batch score ({@link ModelListeners}); after {@code fit()}
 * {@code model.score()} is the last step's score. A network trained with truncated BPTT refuses
 * listeners at {@code build()}.
 *
 * <p>GPU mode ({@code builder(model).group(group)} on a GPU transport, one process per GPU, DL4J's CUDA backend
 * on Ampere or Ada): the gradient view is summed over the group in place on ND4J's stream ({@link
 * Nd4jDeviceGradients}); it has not run on a GPU in this project (docs/gpu.md says why and what it refuses).
 *
 * <p>Unlike DL4J's {@code ParallelWrapper}: {@code fit()} can be called repeatedly; updater state
 * (Adam moments, momentum) survives between calls, because the replicas live as long as the
 * wrapper; workers default to the number of cores; a worker failure ends {@code fit()} on the
 * caller's thread with that worker's exception instead of hanging.
 *
 * <p>Coming from {@code ParallelWrapper}: the builder takes its {@code prefetchBuffer},
 * {@code reportScoreAfterAveraging}, {@code workspaceMode} and listeners (with a stats router), each
 * with the behaviour its javadoc describes; {@link Builder#recordTimeline} records the run as a
 * Chrome trace ({@link DataParallelTimeline}).
 *
 * <p>After each successful {@code fit()}, the model passed to {@link #builder} holds the trained
 * parameters, updater state and counters. If it was changed between calls, the replicas take its
 * state at the start of the next {@code fit()}. A failed {@code fit()} leaves it as it was before
 * that call. {@link #close()} stops the workers.
 *
 * <p>Checkpoints: {@link #saveCheckpoint}/{@link #restoreCheckpoint} on demand, or taken inside {@code fit}
 * ({@link Builder#checkpointEvery}, atomic, manifest last) and resumed from at {@code build()}
 * ({@link Builder#resumeFrom}), also on another worker count: a program that {@code symmem4j-run --max-restarts}
 * restarts builds with {@code .checkpointEvery(100, dir).resumeFrom(dir)} (docs/checkpoints.md).
 */
public final class SymmemParallelWrapper implements AutoCloseable {

    /** Told about every step (round), on the thread that called {@code fit()}. */
    @FunctionalInterface
    public interface StepListener extends org.symmem4j.dl4j.train.StepListener<StepReport> {
        /**
         * Called once per completed step, after its update.
         *
         * @param report the step's number, examples, loss and timings (nanoseconds)
         */
        @Override
        void onStep(StepReport report);
    }

    private static final Logger LOG = LoggerFactory.getLogger(SymmemParallelWrapper.class);

    private final ModelReplica model;
    /** The settings; a shrink ({@link WorkerFailure#SHRINK}) replaces them with the survivors' count (volatile: read by {@link #workers()} during a fit). */
    private volatile DataParallelSettings settings;
    private final SyncMetrics metrics;
    private final DataParallelTimeline timeline;
    private final List<StepListener> stepListeners;
    /** ND4J's threads per worker for a number of workers: the builder's setting, or the cores shared. */
    private final java.util.function.IntUnaryOperator ndThreadsFor;
    /** This process's workers and their replicas' sync with the model; a shrink replaces them. */
    private DataParallelWorkers workers;
    /** Runs the steps on the caller's thread, and counts them; a shrink replaces it (the count goes on). */
    private DataParallelSteps steps;
    /** The shrinks so far, in order. */
    private final List<ShrinkReport> shrinks = new ArrayList<>();
    /** Group mode: the survivors' group the last shrink formed, which the wrapper closes; null before any. */
    private org.symmem4j.parallel.Group ownedGroup;
    /** The checkpoints the wrapper takes itself inside fit, or null. */
    private final CheckpointSchedule schedule;
    /** ZeRO sharding with SHRINK: the rollback point and the batches since it; null otherwise. */
    private final ShardedShrink sharded;
    /** SHRINK on a dp x tp mesh ({@code group(mesh, "dp")}): the mesh, and what its shrinks formed; null otherwise. */
    private final MeshShrink meshShrink;
    /** Where the next fit starts: the checkpoint the last restore read, and the batches of its epoch it skips. */
    private final ResumePosition resume = new ResumePosition();
    /** fit() calls so far, successful or not: the timeline draws "between steps" only within one. */
    private long fits;
    private boolean closed;

    private SymmemParallelWrapper(Builder b, TrainerOptions<StepListener> o) {
        this.model = b.model;
        this.settings = new DataParallelSettings(b.workers, b.bucketBytes,
                b.algorithm != null ? AlgorithmPolicy.forced(b.algorithm) : b.policy != null ? b.policy : AlgorithmPolicy.calibrated(),
                b.nonFiniteGradients, o.timeout(), o.ndThreadsPerRank(o.group() == null ? b.workers : 1), b.sharding,
                b.overlap, b.accumulation, b.gradientTransfer, b.minBucketBytes, b.prefetchBuffer,
                b.reportScoreAfterAveraging, b.workspaceMode, o.timelineSteps(), o.group(), b.onWorkerFailure,
                b.minWorkers, b.shardGroupSize, b.syncBatchNorm);
        this.metrics = o.bind(new SyncMetrics(o.transportName(), o.metricTags()));
        this.timeline = o.timelineSteps() == 0 ? null : new DataParallelTimeline(o.timelineSteps(), b.workers, b.overlap,
                b.sharding == null ? (b.gradientTransfer == GradientTransfer.BFLOAT16 ? "all-reduce bf16" : "all-reduce")
                        : "sharded " + b.sharding);
        this.stepListeners = List.copyOf(o.stepListeners());
        this.ndThreadsFor = o::ndThreadsPerRank;
        this.workers = new DataParallelWorkers(model, settings, metrics);
        this.steps = newSteps();
        this.schedule = o.checkpointSchedule();
        // hybrid sharding shrinks as plain data parallelism does, from a surviving shard group's copy (HybridShrink)
        this.sharded = settings.shrinks() && settings.sharding() != null && settings.shardGroupSize() == 0
                ? new ShardedShrink(model, metrics, ndThreadsFor) : null;
        this.meshShrink = settings.shrinks() ? b.meshShrink : null;
    }

    /**
     * Starts a builder for a {@link MultiLayerNetwork}.
     *
     * @param model an initialized network; after each {@code fit()} it holds the trained state
     * @return a builder with the defaults
     * @throws NullPointerException when {@code model} is null
     */
    public static Builder builder(MultiLayerNetwork model) {
        return new Builder(model);
    }

    /**
     * Starts a builder from a configuration, for a model that a worker may not be able to hold whole. At
     * {@code build()} the model state each process would hold for the chosen stage is planned from {@code conf} and
     * checked against the caps ({@code -Dorg.bytedeco.javacpp.maxbytes}, {@code -Dsymmem4j.max.symmetric.bytes}) before
     * anything is allocated, a model that does not fit refused with the fix. With {@code sharding(PARAMETERS)} no
     * process builds it whole: each worker initialises its shard layer by layer, bitwise equal to
     * {@code new MultiLayerNetwork(conf).init()}, and {@link #gatherParameters()} gathers it on request; other stages
     * initialise it with DL4J's {@code init()}. docs/zero-stage-3.md has the details.
     *
     * @param conf the network's configuration (copied)
     * @return a builder with the defaults
     * @throws NullPointerException when {@code conf} is null
     */
    public static Builder builder(org.deeplearning4j.nn.conf.MultiLayerConfiguration conf) {
        return new Builder(new ConfigurationStart.Network(Objects.requireNonNull(conf, "conf").clone()));
    }

    /**
     * Starts a builder from a graph's configuration, as {@link #builder(org.deeplearning4j.nn.conf.MultiLayerConfiguration)}
     * does for a network, with {@code sharding(ZeroStage.PARAMETERS)} only (other stages refused at {@code build()}):
     * each worker initialises its shard vertex by vertex, bitwise equal to {@code new ComputationGraph(conf).init()}.
     *
     * @param conf the graph's configuration (copied)
     * @return a builder with the defaults
     * @throws NullPointerException when {@code conf} is null
     */
    public static Builder builder(org.deeplearning4j.nn.conf.ComputationGraphConfiguration conf) {
        return new Builder(new GraphConfigurationStart.Graph(Objects.requireNonNull(conf, "conf").clone()));
    }

    /**
     * Starts a builder for a {@link ComputationGraph}.
     *
     * @param model an initialized graph; after each {@code fit()} it holds the trained state
     * @return a builder with the defaults
     * @throws NullPointerException when {@code model} is null
     */
    public static Builder builder(ComputationGraph model) {
        return new Builder(model);
    }

    /** {@return the number of workers, one replica each: as built, or fewer after a shrink ({@link WorkerFailure#SHRINK})} */
    public int workers() {
        return settings.workers();
    }

    /**
     * The in-place shrinks so far ({@link WorkerFailure#SHRINK}), oldest first: the failed step, the dead workers,
     * the workers before and after, whether the step was redone, and the time from the failure to the survivors'
     * next step.
     *
     * @return a copy of the list; empty without shrinks
     */
    public synchronized List<ShrinkReport> shrinks() {
        return List.copyOf(shrinks);
    }

    /** {@return the ZeRO stage this wrapper shards with, or null for plain data parallelism} */
    public ZeroStage sharding() {
        return settings.sharding();
    }

    /**
     * What each worker's replica holds, from its actual arrays (empty before the first
     * {@code fit()}): with sharding, the updater state is the worker's shard only.
     *
     * @return one entry per worker, in worker order; sizes in bytes
     */
    public synchronized List<WorkerMemory> workerMemory() {
        return workers.memory();
    }

    /**
     * The model's whole parameter vector, a new array: the model's own parameters, or with ZeRO stage 3 gathered from
     * the workers' shards, unit by unit (in group mode collective: every rank calls it). With stage 3 started from a
     * configuration this is the one call that makes a process hold every parameter (saving the model, evaluating
     * it); call it between fits.
     *
     * @return a copy of the parameters, DL4J's flat layout
     * @throws IllegalStateException when the wrapper is closed
     */
    public synchronized INDArray gatherParameters() {
        requireOpen();
        if (!ConfigurationStart.isHollow(model)) {
            return model.params().dup(); // the model holds the trained parameters after each fit
        }
        workers.ensureStarted();
        return ConfigurationStart.gather(model, fullySharded(), settings.group() != null);
    }

    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("wrapper is closed: expected an open wrapper, found one after close()"
                    + " (fix: build a new one with SymmemParallelWrapper.builder(model))");
        }
    }

    /** Stage 3's side of each worker, worker order (empty before the first fit, or without stage 3); tests and benchmarks. */
    List<FullySharded> fullySharded() {
        return workers.running() ? workers.all().stream().map(DataParallelWorker::fullySharded)
                .filter(java.util.Objects::nonNull).toList() : List.of();
    }

    /** The replicas, worker order (tests compare them after each step, while workers are idle). */
    List<ModelReplica> replicas() {
        return workers.replicas();
    }

    /** {@return the run's timeline ({@link Builder#recordTimeline}): every recorded step of every fit() as one Chrome trace; null when not recording} */
    public DataParallelTimeline runTimeline() {
        return timeline;
    }

    /**
     * The metrics binder (already bound if a registry was given to the builder).
     *
     * @return the wrapper's sync metrics; bind it to more registries with {@code bindTo}
     */
    public SyncMetrics metrics() {
        return metrics;
    }

    /**
     * Trains on every batch of {@code iterator}, {@link #workers()} batches per step. As DL4J's
     * {@code fit}, an iterator that has no next batch is reset first (when it supports reset), and
     * it is not reset at the end. With {@code prefetchBuffer(n)} a background thread reads it, up to
     * n batches ahead; it stops before this method returns, and an exception the iterator throws
     * there is thrown here when training reaches that batch, as if it had been read here (then, as
     * after any failed fit, the model is as it was before this call).
     *
     * In group mode the refusals that depend on what one rank was given (this iterator, the model's listeners, the
     * resume position) are agreed before any data moves: every rank throws the same error, naming the refusing ranks
     * ({@link DataParallelFitStart}; one small exchange per call).
     *
     * @param iterator the batches, dealt to the workers in order
     * @throws IllegalArgumentException     when the iterator cannot be read ahead ({@code prefetchBuffer} with
     *                                      {@code asyncSupported() == false}), or does not reach the resume position
     * @throws NonFiniteGradientException   when a step's gradient has a NaN or infinity (unless
     *                                      {@code nonFiniteGradients(SKIP_STEP)})
     * @throws DataParallelTrainingException when a worker fails; the cause is its exception
     */
    public synchronized void fit(DataSetIterator iterator) {
        train(DataParallelFitStart.Given.of(Objects.requireNonNull(iterator, "iterator")));
    }

    /**
     * Trains a {@link ComputationGraph} on every batch of {@code iterator}, as
     * {@link #fit(DataSetIterator)} does.
     *
     * @param iterator the batches, dealt to the workers in order
     * @throws IllegalArgumentException      when this wrapper holds a {@link MultiLayerNetwork}, or the
     *                                       iterator cannot be read ahead
     * @throws NonFiniteGradientException    when a step's gradient has a NaN or infinity (unless
     *                                       {@code nonFiniteGradients(SKIP_STEP)})
     * @throws DataParallelTrainingException when a worker fails; the cause is its exception
     */
    public synchronized void fit(MultiDataSetIterator iterator) {
        train(DataParallelFitStart.Given.of(Objects.requireNonNull(iterator, "iterator"), model));
    }

    /**
     * Trains on {@code given}'s batches once every rank agreed on its start ({@link DataParallelFitStart}: the checks
     * that depend on what this rank was given, and the batches a restored checkpoint had trained, skipped).
     */
    private void train(DataParallelFitStart.Given given) {
        requireOpen(); // this rank's own state, not what it was given: a closed wrapper's group may be closed too
        DataParallelFitStart.Agreed agreed = DataParallelFitStart.agree(given, settings, model, resume);
        ModelListeners listeners = agreed.listeners();
        resume.skipped(); // the iterator stands after them
        fits++;
        boolean completed = false;
        ModelState before = null;
        // With a prefetch buffer the iterator is read on a background thread from here until the
        // source closes, with the try's resources (before its finally: before fit returns or throws)
        StepBatches source = new StepBatches(given.batches(), () -> settings);
        try (source; Nd4jThreadLimit threads = Nd4jThreadLimit.of(settings.ompThreadsPerWorker())) {
            workers.ensureStarted();
            // listeners see the model change step by step: a failed fit must still leave it as it was
            // (and so must the periodic checkpoints, which pull the replicas' state into the model mid-fit)
            // (and so must a shrink, which gives the model the survivors' agreed state mid-fit)
            before = listeners.isEmpty() && schedule == null && !settings.shrinks() ? null : ModelState.of(model);
            if (!listeners.isEmpty()) {
                model.exposeGradientView();
                listeners.epochStart(model.model());
            }
            double score = Double.NaN;
            // The next step's batches are taken while the workers compute this one: read on the
            // caller's thread (the iterator used by one thread only, as DL4J's fit does), or with a
            // prefetch buffer taken from the background reader.
            long batchesInEpoch = agreed.batchesSkipped(); // trained before the checkpoint this wrapper resumed from
            long examplesInEpoch = agreed.examplesSkipped();
            if (sharded != null) {
                sharded.fitStarted(before, steps.stepsDone(), batchesInEpoch, examplesInEpoch);
            }
            List<Object> batches = source.take();
            while (!batches.isEmpty()) {
                DataParallelSteps.StepOutcome outcome = steps.run(batches, listeners, () -> source.take(), fits);
                if (outcome.lost() != null && sharded != null) { // back to the newest whole state (docs/shrink.md)
                    ShardedShrink.Rebuilt r = rollBack(outcome.lost(), batches, outcome.following(), source.redealt());
                    batchesInEpoch = r.batchesInEpoch();
                    examplesInEpoch = r.examplesInEpoch();
                    batches = source.take();
                    continue;
                }
                if (outcome.lost() != null) {
                    List<Object> failed = batches;
                    Shrunk shrunk = shrink(outcome.lost(), failed, outcome.following(), source);
                    if (shrunk.failedTrained()) { // every survivor had completed this rank's failed step
                        batchesInEpoch += StepBatches.rawBatches(failed);
                        examplesInEpoch += StepBatches.rawExamples(failed);
                    }
                    batches = shrunk.next();
                    continue;
                }
                batchesInEpoch += StepBatches.rawBatches(batches);
                examplesInEpoch += StepBatches.rawExamples(batches);
                if (sharded != null) {
                    sharded.trained(batches);
                }
                if (outcome.report() != null) {
                    score = outcome.report().loss();
                    if (schedule != null && schedule.due(steps.stepsDone(), settings.group(), TensorParallel.groupOrNull(model.model()),
                            "symmem4j-wrapper-")) {
                        // workers are idle: the model takes their state, as between fits
                        takePeriodicCheckpoint(batchesInEpoch, examplesInEpoch);
                    }
                }
                batches = outcome.following();
            }
            // workers are idle, so the caller's thread may touch the replicas (the task queues
            // ordered their last writes)
            workers.pullModelFromReplicas();
            if (!Double.isNaN(score)) {
                model.setScore(score); // as after DL4J's fit: the last iteration's score
            }
            listeners.epochEnd(model.model());
            completed = true;
        } finally {
            model.setInputAndLabels(null); // DL4J's fit clears them too
            if (!completed) {
                workers.stop();
                if (before != null) {
                    before.restore(model);
                }
            }
        }
        // The end of a fit is an epoch, as in DL4J's fit(iterator), counted after onEpochEnd as DL4J does
        workers.countEpoch();
        model.setEpochCount(model.epochCount() + 1);
    }

    /**
     * The in-place shrink ({@link WorkerFailure#SHRINK}) after a step that workers failed, with every worker idle:
     * the survivors agree on the last step all of them completed, which the model takes ({@link WorkerShrink}); the
     * old workers stop, the survivors' start from the model (a new world, or the group
     * {@link org.symmem4j.parallel.Group#shrink()} formed), and the failed step's batches (when redone) and those read
     * ahead go back in front (docs/shrink.md).
     *
     * @return the next step's batches, dealt to the survivors, and whether the survivors had all trained the batches
     *         of this rank's failed step (then not redealt)
     * @throws DataParallelTrainingException when fewer than {@code minWorkers} would survive, or the group could not
     *                                       shrink
     */
    private Shrunk shrink(DataParallelSteps.LostWorkers lost, List<Object> failed, List<Object> readAhead,
                          StepBatches source) {
        int before = settings.workers();
        Throwable cause = lost.failure() instanceof DataParallelTrainingException t ? t.getCause() : lost.failure();
        WorkerShrink survivors = new WorkerShrink(model, metrics, ndThreadsFor, meshShrink, settings, workers, ownedGroup);
        WorkerShrink.Agreed agreed;
        try {
            agreed = survivors.agree(lost, cause);
        } finally { // what the shrink replaced, also when it failed: its workers stopped, the group it formed owned
            settings = survivors.settings();
            workers = survivors.workers();
            ownedGroup = survivors.ownedGroup();
        }
        // this rank's failed step: redone (its batches dealt again) unless every survivor completed it
        boolean redone = agreed.iteration() == lost.iterationAtStart();
        DataParallelSteps survivorsSteps = newSteps();
        survivorsSteps.resumeAt(redone ? lost.step() : lost.step() + 1);
        steps = survivorsSteps;
        workers.ensureStarted();
        List<Object> pending = new ArrayList<>();
        if (redone) {
            pending.addAll(DataParallelSteps.plainBatches(failed));
        }
        pending.addAll(DataParallelSteps.plainBatches(readAhead));
        source.putBack(pending);
        List<Object> next = source.take();
        // the report is the survivors' agreed one (group mode: each rank may have been handed out another step)
        ShrinkReport report = new ShrinkReport(agreed.failedStep(), agreed.dead(), before, settings.workers(),
                agreed.redone(), String.valueOf(cause), lost.failedNanos(), System.nanoTime(),
                agreed.redone() ? agreed.failedStep() : agreed.failedStep() + 1, null);
        shrinks.add(report);
        LOG.warn(report.logLine(settings.minWorkers(), settings.group() == null ? -1 : settings.group().rank()));
        return new Shrunk(next, !redone);
    }

    /** A plain shrink's outcome on this rank: the next step's batches, and whether its failed step's were trained. */
    private record Shrunk(List<Object> next, boolean failedTrained) {
    }

    /** ZeRO sharding's shrink ({@link ShardedShrink}): the survivors' workers go on from the rollback point. */
    private ShardedShrink.Rebuilt rollBack(DataParallelSteps.LostWorkers lost, List<Object> failed, List<Object> readAhead,
                                           java.util.Deque<Object> redealt) {
        ShardedShrink.Rebuilt r = sharded.rollBack(lost, failed, readAhead, redealt, settings, workers, meshShrink);
        settings = r.settings();
        workers = r.workers();
        steps = newSteps();
        steps.resumeAt(r.step());
        if (r.formed() != null) { // group mode: the wrapper owns the survivors' group
            org.symmem4j.dl4j.train.RankRuntime.closeQuietly(ownedGroup); // a group an earlier shrink formed
            ownedGroup = r.formed();
        }
        shrinks.add(r.report());
        LOG.warn(r.report().logLine(settings.minWorkers(), settings.group() == null ? -1 : settings.group().rank()));
        return r;
    }

    /**
     * With gradient accumulation a step has no single forward pass and no single gradient before
     * the sum: listeners that read those are refused rather than given the last micro-batch's.
     */
    static void refuseListenersThatNeedOnePass(int accumulation, ModelListeners listeners) {
        if (accumulation > 1 && (listeners.needsActivations() || listeners.needsGradient())) {
            throw new IllegalStateException("gradientAccumulation=" + accumulation + " with a listener that"
                    + " overrides " + (listeners.needsActivations() ? "onForwardPass" : "onGradientCalculation")
                    + ": expected listeners that read only the score, parameters and counters (a step of "
                    + accumulation + " micro-batches has no single forward pass or gradient to show);"
                    + " fix: gradientAccumulation(1), or drop that listener while training with accumulation");
        }
    }

    // ------------------------------------------------------------------ checkpoints

    /** A periodic checkpoint after the step just done; a failure fails the fit (the model left as before it). */
    private void takePeriodicCheckpoint(long batchesInEpoch, long examplesInEpoch) {
        // a tensor-parallel rank's layout: root/tp-R-of-S
        schedule.take(steps.stepsDone(), CheckpointLayout.of(model.model()), settings.group(), dir -> {
            writeCheckpoint(dir, batchesInEpoch, examplesInEpoch);
            if (sharded != null) {
                sharded.checkpointTaken(dir, steps.stepsDone());
            }
        });
    }

    /** Writes what the next step would train from; workers started and idle. Collective in group mode. */
    private void writeCheckpoint(Path dir, long batchesInEpoch, long examplesInEpoch) throws IOException {
        WrapperCheckpoints.write(dir, steps.stepsDone(), batchesInEpoch, examplesInEpoch, settings, workers, model);
    }

    /**
     * Saves a checkpoint into {@code dir}, of what the next {@code fit()} would train from: {@code model.zip}
     * (DL4J's {@code ModelSerializer}, full updater state, loadable by plain DL4J), with sharding one shard file per
     * worker (stage 3: no {@code model.zip}, each worker's parameter and updater-state blocks, nothing gathered; a
     * consolidated file on request: {@link #saveModel}), and last {@code manifest.properties} with the counters and every file's size and CRC-32C; each file is
     * written to a temporary name, forced and renamed, and until the manifest is written the directory is torn (a
     * restore refuses it). In group mode it is collective: every rank calls it with the same directory (one machine,
     * or a shared file system). A tensor-parallel network's rank writes its shard into {@code dir/tp-R-of-S}
     * ({@link CheckpointLayout}). docs/checkpoints.md has the format.
     *
     * @param dir the checkpoint directory; created when absent
     * @throws IOException           when a file cannot be written
     * @throws IllegalStateException when the wrapper is closed
     */
    public synchronized void saveCheckpoint(Path dir) throws IOException {
        requireOpen();
        workers.ensureStarted(); // (the replicas take the model's state if it was changed since the last fit)
        writeCheckpoint(CheckpointLayout.of(model.model()).ownRoot(dir), 0, 0);
    }

    /**
     * Restores a checkpoint written by {@link #saveCheckpoint} (or by {@link Builder#checkpointEvery}) of any number
     * of workers: N workers' checkpoint restores onto this wrapper's M, the ZeRO shards re-sliced element for element
     * from the global ranges each shard file lists, parameters and counters from {@code model.zip}; a plain or either
     * ZeRO stage's checkpoint fits either. Stage 3 reads its parameters from the parameter shard files as well (each
     * worker only the byte ranges of its blocks), or a plain or stage 1/2 checkpoint's {@code model.zip}; a stage-3
     * checkpoint (no {@code model.zip}) is refused by the other stages with the fix ({@link #saveModel}). The next {@code fit()} skips the batches of the epoch the checkpoint had
     * trained (refusing, before any step, an iterator whose skipped batches differ), so training on equals an
     * uninterrupted M-worker run from the checkpoint, bitwise. Everything is checked before anything changes (the
     * manifest's sizes and CRC-32C, or each shard file's own checksum; stage, data type, parameter count, DL4J's
     * updater layout, counters, coverage): a refused restore leaves the model as it was. In group mode it is
     * collective, every rank must see every shard file, and one rank's failed check makes every rank throw. A
     * tensor-parallel rank reads its own {@code tp-R-of-S} (another rank's shard or degree refused, before anything).
     * docs/checkpoints.md and docs/resharding.md have the details.
     *
     * @param dir a directory {@link #saveCheckpoint} wrote
     * @throws IOException              when a file cannot be read, is truncated, fails its checksum or the manifest
     *                                  ({@link CheckpointDirectory.TornCheckpointException} for a torn one)
     * @throws IllegalArgumentException when the checkpoint does not fit this wrapper (another stage's shards, data
     *                                  type, parameter count, updater layout, mixed steps, missing shard files)
     * @throws IllegalStateException    when the wrapper is closed
     */
    public synchronized void restoreCheckpoint(Path dir) throws IOException {
        requireOpen();
        workers.ensureStarted();
        CheckpointLayout layout = CheckpointLayout.of(model.model());
        List<Path> otherDegree = layout.otherDegreeDirs(dir, settings.group()); // agreed: another tp degree's shards
        CheckpointDirectory.Counters c;
        if (!otherDegree.isEmpty()) {
            c = TensorParallelResume.restore(otherDegree, layout, settings, workers, model); // re-sliced onto this one
        } else {
            // every rank (each tp rank of each replica) refuses if one's shard does not fit, before any reads
            dir = layout.checkedRestoreDir(dir, settings.group());
            c = WrapperCheckpoints.restore(dir, settings, workers, model);
        }
        if (c != null) {
            steps.resumeAt(c.step());
            resume.restored(dir, c);
        }
    }

    /**
     * Writes the whole model, parameters and full updater state, as a {@code ModelSerializer} file that plain DL4J
     * loads ({@code ModelSerializer.restoreMultiLayerNetwork(file, true)}), atomically (temporary file, forced,
     * renamed), from rank 0's process. With stage 3 it is the one call that gathers the model whole, unit by unit:
     * checkpoints of stage 3 hold only each rank's shards, and a wrapper of another stage is built on this file. In
     * group mode collective: every rank calls it with the same file.
     *
     * @param file the file to write; its directory is created when absent
     * @throws IOException           when the file cannot be written
     * @throws IllegalStateException when the wrapper is closed
     */
    public synchronized void saveModel(Path file) throws IOException {
        requireOpen();
        workers.ensureStarted();
        FullyShardedCheckpoints.saveModel(file, settings, workers, model, WrapperCheckpoints.agreement(settings, model));
    }

    /**
     * Restores the newest complete checkpoint under {@code root} ({@code step-<n>} directories written by
     * {@link Builder#checkpointEvery}; torn ones are skipped with a log line) with {@link #restoreCheckpoint}, or
     * does nothing when there is none. {@link Builder#resumeFrom} calls it at {@code build()}. Collective in group
     * mode, where every rank must find the same checkpoint.
     *
     * @param root the run's checkpoint directory; need not exist
     * @return the checkpoint restored (its directory, step, epoch, iteration, batches of its epoch already trained,
     *         which the next {@code fit()} skips), or empty when there was none
     * @throws IOException when the root cannot be listed or the checkpoint read
     */
    public synchronized Optional<CheckpointDirectory.Checkpoint> restoreLatest(Path root) throws IOException {
        Optional<CheckpointDirectory.Checkpoint> latest = ResumePosition.restoreLatest(CheckpointLayout.of(model.model())
                .latestComplete(root, settings.group(), "symmem4j-wrapper-"), // tp: the newest step complete on every rank
                this::restoreCheckpoint);
        if (latest.isPresent()) {
            LOG.info("symmem4j: resumed from checkpoint " + latest.get().dir() + " at step=" + latest.get().counters().step()
                    + " epoch=" + latest.get().counters().epoch() + " (the next fit skips "
                    + latest.get().counters().batchesInEpoch() + " batches of that epoch, trained before it)");
        }
        return latest;
    }

    /**
     * The checkpoint the last restore read ({@link #restoreLatest}, {@link #restoreCheckpoint} of a directory with a
     * manifest, or {@link Builder#resumeFrom} at {@code build()}).
     *
     * @return it, or null when none was restored (a fresh start)
     */
    public synchronized CheckpointDirectory.Checkpoint resumedFrom() {
        return resume.resumedFrom();
    }

    /** The steps of the current workers and settings: at build, and after a shrink replaced them. */
    private DataParallelSteps newSteps() {
        return new DataParallelSteps(model, settings, metrics, stepListeners, timeline, workers);
    }

    /** Stops the workers. The model keeps the state of the last successful {@code fit()}. */
    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            workers.stop();
            org.symmem4j.dl4j.train.RankRuntime.closeQuietly(ownedGroup); // after its memories, which the workers freed
            org.symmem4j.dl4j.train.RankRuntime.closeQuietly(meshShrink); // the survivors' tp communicator and mesh
        }
    }

    /**
     * The {@code dp x tp} mesh this wrapper trains on ({@code group(mesh, "dp")} with {@link WorkerFailure#SHRINK}):
     * the builder's, or after a shrink the survivors' (the wrapper's until {@link #close()}; gather the network over
     * its tp group before closing the wrapper).
     *
     * @return the mesh, or null without one
     */
    public synchronized org.symmem4j.parallel.DeviceMesh mesh() {
        return meshShrink == null ? null : meshShrink.mesh();
    }

    /**
     * Builder, in DL4J's style: {@code SymmemParallelWrapper.builder(model).workers(4).build()}. The options every
     * trainer takes (group, timeout, meters, step listeners, timeline) are {@link TrainerBuilder}'s.
     *
     * <p>Group mode ({@link #group}): this process (or thread) is one rank of {@code group} and trains as that rank's
     * worker; every other rank of the group runs the same program on the same model configuration
     * and initial parameters, and passes the same iterator to {@code fit} (the same data in the same
     * order: each rank reads every batch and trains on its share of each step, dealt as thread mode
     * deals them to its workers, so N processes train bitwise like N worker threads). Gradients are
     * all-reduced over the group's symmetric memory; after each {@code fit()} every rank's model —
     * rank 0's among them — holds the result. For one JVM per worker started by {@code symmem4j-run}
     * (or torchrun or mpirun): {@code group(ProcessGroup.fromEnvironment())}. The group lives on a host
     * transport for DL4J's CPU backend (its gradients are host memory), or on a GPU transport in GPU mode
     * (below), and stays the caller's to close, after the wrapper. With {@link #sharding} each rank keeps its
     * own shard, checkpoints are collective (each rank writes its shard file, rank 0 the model), and after
     * {@code fit()} every rank's model holds the full updater state, gathered. Not yet with
     * {@link #recordTimeline}, listeners that read the forward pass's activations (each rank holds only its own
     * batch's), or listeners with sharding.
     *
     * <p>GPU mode: a group on a transport whose memory is a GPU's ({@code Transport.deviceMemory()}: one process per
     * GPU, {@code ProcessGroup.fromEnvironment(options, cudaTransport)} under {@code symmem4j-run}) trains with the
     * model in DL4J's GPU memory. After backprop the rank's flat gradient view — on the device, the sum over its
     * examples — is summed over the group in place on ND4J's own stream ({@link Nd4jDeviceGradients}; our kernels or
     * NCCL, as the policy picks for its size), then divided by the step's examples by ND4J on that stream, and checked
     * for NaN and infinity as on the host: the same mean, the same verdicts, every rank the same bits. The step's loss
     * and the non-finite verdicts are merged over the group's host memory. It needs DL4J's CUDA backend,
     * {@code nd4j-cuda-11.6} 1.0.0-M2.1, on a GPU it has code for (sm_80/sm_86: A100, RTX 30xx and 40xx; it has none
     * for Hopper, H100/H200), and the model built on the rank's GPU: CudaTransport puts a rank on GPU
     * {@code group.localRank() % gpus}, and ND4J allocates on the current thread's device, so before building the
     * model call {@code Nd4j.getAffinityManager().unsafeSetDevice(group.localRank() %
     * Nd4j.getAffinityManager().getNumberOfDevices())} on the thread that builds it and calls {@code fit} (the
     * worker refuses a model on another GPU). {@link #build()} refuses, each with its setting and fix: ND4J's CPU
     * backend, {@link #sharding}, {@link #overlapSyncWithBackprop}, {@link #gradientTransfer} BFLOAT16,
     * {@link #gradientAccumulation} above 1, layers that keep state updates in the gradient view (BatchNormalization,
     * CenterLossOutputLayer: merged on host memory) and {@link #bucketBytes} (one all-reduce of the whole view);
     * {@link #algorithm} may be NCCL there. GPU mode has not run on a GPU in this project: its GPU machines are
     * H100/H200s, which ND4J's CUDA backend cannot run; its device all-reduce, on device buffers of our own, has.
     */
    public static final class Builder extends DataParallelBuilder {

        private Builder(Model model) {
            super(model);
        }

        /**
         * Checks the settings against each other and the model, and creates the wrapper. Worker
         * threads, replicas and symmetric memory are created by the first {@code fit()}.
         *
         * @return the wrapper; {@link SymmemParallelWrapper#close()} frees what {@code fit()} created
         * @throws IllegalArgumentException when settings conflict or the model cannot be trained this
         *         way (the message names the setting or layer, what was found and the fix)
         * @throws UncheckedIOException     with {@link #resumeFrom}, when the newest complete checkpoint cannot be read
         *         (the wrapper is closed)
         */
        public SymmemParallelWrapper build() {
            check();
            return resumed(new SymmemParallelWrapper(this, options()), SymmemParallelWrapper::restoreLatest);
        }
    }
}
