package org.symmem4j.dl4j;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import org.deeplearning4j.core.storage.StatsStorageRouter;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.concurrency.AffinityManager;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.nd4j.linalg.factory.Nd4j;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.train.RankFailures;
import org.symmem4j.dl4j.train.TrainerBuilder;
import org.symmem4j.dl4j.train.TrainerOptions;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;

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
 * parallelism and with sharding. Training-mode normalization still uses each worker's own batch
 * statistics, as PyTorch's DistributedDataParallel without SyncBatchNorm does: in the forward pass
 * a BatchNorm normalizes with the mean and variance of the worker's batch, so gradients through it,
 * and the statistics a BatchNorm behind another one sees, are those of per-worker batches.
 * OCNNOutputLayer, whose radius is reset from state outside the parameters, is refused at
 * {@code build()}.
 *
 * <p>The listeners attached to the model are called as DL4J's {@code fit} calls them for one model
 * trained on each step's merged batch, on the caller's thread after each step, with the model
 * holding that step's state and merged-batch score ({@link ModelListeners}); after {@code fit()}
 * {@code model.score()} is the last step's score. A network trained with truncated BPTT refuses
 * listeners at {@code build()}.
 *
 * <p>GPU mode, for DL4J's CUDA backend: {@code builder(model).group(group)} with a group on a GPU transport (one
 * process per GPU) keeps the model in ND4J's GPU memory, sums each step's gradient view over the group in place on
 * the device, on ND4J's own stream, by our kernels or NCCL ({@link Nd4jDeviceGradients}), and divides it by the step's
 * examples there: the same mean and the same non-finite checks as on the host. It needs {@code nd4j-cuda-11.6}
 * 1.0.0-M2.1 on an Ampere or Ada GPU (it has no code for Hopper) and does not take sharding, overlap, bf16 transfer,
 * gradient accumulation or layers with state in the gradient view ({@link Builder} says what and why). It has
 * not run on a GPU in this project: its GPU machines are H100/H200s, which cannot run ND4J's CUDA backend.
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
 */
public final class SymmemParallelWrapper implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(SymmemParallelWrapper.class);

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

    /**
     * Validated settings, shared with the workers. {@code accumulation}: micro-batches per worker per
     * step; {@code minBucketBytes}: see {@link org.symmem4j.gradsync.GradientBuckets#splitAtBoundaries};
     * {@code prefetchBuffer}: batches read ahead on a background thread (0: on the caller's thread);
     * {@code workspaceMode}: the replicas' training workspace mode, null for the model's own;
     * {@code timelineSteps}: steps a {@link DataParallelTimeline} keeps, 0 for no timeline (nothing stamped).
     */
    record Settings(int workers, long bucketBytes, AlgorithmPolicy policy, NonFiniteGradients nonFiniteGradients,
                    Duration timeout, int ompThreadsPerWorker, ZeroStage sharding, boolean overlap, int accumulation,
                    GradientTransfer gradientTransfer, long minBucketBytes, int prefetchBuffer,
                    boolean reportScoreAfterAveraging, WorkspaceMode workspaceMode, int timelineSteps, Group group) {

        /** The ranks this wrapper trains itself: every worker's in thread mode, the group's own rank in group mode. */
        int firstLocalRank() {
            return group == null ? 0 : group.rank();
        }

        int localWorkers() {
            return group == null ? workers : 1;
        }

        /**
         * GPU mode: group mode on a transport whose memory is a GPU's, so the rank's gradient view is ND4J's device
         * memory, summed and divided on the device ({@link GpuGradientAveraging}).
         */
        boolean gpuMode() {
            return gpuMode(group);
        }

        static boolean gpuMode(Group group) {
            return group != null && group.transport().deviceMemory();
        }
    }

    /**
     * Default smallest bucket: an all-reduce has a fixed cost (a few barriers: microseconds, more
     * with many workers), so layers smaller than this share a bucket with the layer below.
     */
    static final long DEFAULT_MIN_BUCKET_BYTES = 256L << 10;

    /**
     * Longest park of a worker waiting for its peers inside a collective. Workers arrive at the
     * sync milliseconds apart (the slowest computes longest); the group's default back-off parks up
     * to 1 ms at a time, so a waiter could wake up to 1 ms after the last peer arrived, at each
     * barrier of each bucket. With one worker per core nothing else needs those cores, so waking
     * every 50 us costs nothing and bounds that lateness.
     */
    static final long MAX_PARK_NANOS = 50_000;

    /** The refusals of a restore call the wrapper a wrapper and its ranks workers. */
    private static final ShardedCheckpoints.Words CHECKPOINT_WORDS = new ShardedCheckpoints.Words("wrapper", "worker");

    private final ModelReplica model;
    private final Settings settings;
    private final SyncMetrics metrics;
    private final List<StepListener> stepListeners;
    private final DataParallelTimeline timeline;
    private InJvmWorld world;
    /** fit() calls so far, successful or not: the timeline draws "between steps" only within one. */
    private long fits;
    private List<DataParallelWorker> workers;
    private long step;
    private boolean closed;

    private SymmemParallelWrapper(Builder b, TrainerOptions<StepListener> o) {
        this.model = b.model;
        this.settings = new Settings(b.workers, b.bucketBytes,
                b.algorithm != null ? AlgorithmPolicy.forced(b.algorithm) : b.policy != null ? b.policy : AlgorithmPolicy.calibrated(),
                b.nonFiniteGradients, o.timeout(), o.ndThreadsPerRank(o.group() == null ? b.workers : 1), b.sharding,
                b.overlap, b.accumulation, b.gradientTransfer, b.minBucketBytes, b.prefetchBuffer,
                b.reportScoreAfterAveraging, b.workspaceMode, o.timelineSteps(), o.group());
        this.metrics = o.bind(new SyncMetrics(o.transportName(), o.metricTags()));
        this.stepListeners = o.stepListeners();
        this.timeline = o.timelineSteps() == 0 ? null : new DataParallelTimeline(o.timelineSteps(), b.workers, b.overlap,
                b.sharding == null ? (b.gradientTransfer == GradientTransfer.BFLOAT16 ? "all-reduce bf16" : "all-reduce")
                        : "sharded " + b.sharding);
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
     * Starts a builder for a {@link ComputationGraph}.
     *
     * @param model an initialized graph; after each {@code fit()} it holds the trained state
     * @return a builder with the defaults
     * @throws NullPointerException when {@code model} is null
     */
    public static Builder builder(ComputationGraph model) {
        return new Builder(model);
    }

    /**
     * The number of workers.
     *
     * @return worker threads, one replica each
     */
    public int workers() {
        return settings.workers();
    }

    /**
     * The ZeRO stage this wrapper shards with.
     *
     * @return the stage, or null for plain data parallelism
     */
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
        if (workers == null) {
            return List.of();
        }
        List<WorkerMemory> out = new ArrayList<>();
        for (int i = 0; i < workers.size(); i++) {
            DataParallelWorker w = workers.get(i);
            ModelReplica r = w.replica();
            long width = r.params().dataType().width();
            long count = r.params().length();
            ShardedUpdater s = w.sharded();
            INDArray state = s == null ? r.updaterState() : null;
            out.add(new WorkerMemory(settings.firstLocalRank() + i, s == null ? 0 : s.start(), s == null ? count : s.end(), count * width,
                    r.gradientView().length() * width,
                    s != null ? s.stateBytes() : state == null ? 0 : state.length() * state.dataType().width()));
        }
        return out;
    }

    /** The replicas, worker order (tests compare them after each step, while workers are idle). */
    List<ModelReplica> replicas() {
        return workers == null ? List.of() : workers.stream().map(DataParallelWorker::replica).toList();
    }

    /**
     * The run's timeline ({@link Builder#recordTimeline}): every recorded step of every
     * {@code fit()} so far, as one Chrome trace; null when not recording.
     *
     * @return the timeline, or null
     */
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
     * @param iterator the batches, dealt to the workers in order
     * @throws IllegalArgumentException     when the iterator cannot be read ahead ({@code prefetchBuffer} with
     *                                      {@code asyncSupported() == false})
     * @throws NonFiniteGradientException   when a step's gradient has a NaN or infinity (unless
     *                                      {@code nonFiniteGradients(SKIP_STEP)})
     * @throws DataParallelTrainingException when a worker fails; the cause is its exception
     */
    public synchronized void fit(DataSetIterator iterator) {
        Objects.requireNonNull(iterator, "iterator");
        requirePrefetchable(iterator.asyncSupported(), iterator);
        if (!iterator.hasNext() && iterator.resetSupported()) {
            iterator.reset();
        }
        train(() -> iterator.hasNext() ? iterator.next() : null);
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
        Objects.requireNonNull(iterator, "iterator");
        if (!(model instanceof ModelReplica.Graph)) {
            throw new IllegalArgumentException("fit(MultiDataSetIterator) needs a ComputationGraph; this wrapper holds a "
                    + model.model().getClass().getSimpleName() + " (use fit(DataSetIterator))");
        }
        requirePrefetchable(iterator.asyncSupported(), iterator);
        if (!iterator.hasNext() && iterator.resetSupported()) {
            iterator.reset();
        }
        train(() -> iterator.hasNext() ? iterator.next() : null);
    }

    /**
     * Refuses to prefetch from an iterator that says it must not be read from another thread
     * ({@code asyncSupported() == false}: it is asynchronous itself, like DL4J's
     * {@code AsyncDataSetIterator}, or shielded from it, like {@code AsyncShieldDataSetIterator}).
     * ParallelWrapper silently reads such an iterator on the caller's thread instead.
     */
    private void requirePrefetchable(boolean asyncSupported, Object iterator) {
        if (settings.prefetchBuffer() > 0 && !asyncSupported) {
            throw new IllegalArgumentException("prefetchBuffer=" + settings.prefetchBuffer() + " reads the iterator on a"
                    + " background thread, but iterator=" + iterator.getClass().getSimpleName() + " has asyncSupported()=false"
                    + " (it is asynchronous already or must be read from one thread); expected an iterator that supports"
                    + " asynchronous reading (fix: prefetchBuffer(0), which reads the next step's batches on the calling"
                    + " thread while the workers compute, or pass the iterator it wraps)");
        }
    }

    private interface BatchSource {
        Object next();
    }

    /**
     * The next step's work, one entry per worker that gets any: up to workers × accumulation
     * batches, dealt round-robin (worker i takes batches i, i + workers, ...), so a short last step
     * keeps the workers' shares within one batch of each other; with accumulation each entry is
     * a {@link MicroBatches}. Empty when the source is exhausted.
     */
    private List<Object> takeStep(BatchSource source) {
        int n = settings.workers();
        int k = settings.accumulation();
        List<Object> taken = new ArrayList<>(n * k);
        Object b;
        while (taken.size() < n * k && (b = source.next()) != null) {
            taken.add(b);
        }
        if (k == 1) {
            return taken;
        }
        List<Object> perWorker = new ArrayList<>(n);
        for (int w = 0; w < n && w < taken.size(); w++) {
            List<Object> mine = new ArrayList<>(k);
            for (int j = w; j < taken.size(); j += n) {
                mine.add(taken.get(j));
            }
            perWorker.add(new MicroBatches(mine));
        }
        return perWorker;
    }

    private void train(BatchSource iteratorSource) {
        if (closed) {
            throw new IllegalStateException("wrapper is closed; build a new one");
        }
        ModelListeners listeners = ModelListeners.of(model); // refuses what it cannot honour before anything changes
        refuseListenersThatNeedOnePass(settings.accumulation(), listeners);
        if (settings.group() != null && settings.sharding() != null && !listeners.isEmpty()) {
            throw new IllegalStateException("listeners with sharding=" + settings.sharding() + " in group mode: before"
                    + " each call the model must gather every rank's updater-state shard, a collective that every rank"
                    + " would have to run at every step, listeners or not; expected no listeners (fix: drop them, use a"
                    + " stepListener, which sees the step's report on every rank, or train as threads of one JVM)");
        }
        if (settings.group() != null && listeners.needsActivations()) {
            throw new IllegalStateException("a listener that overrides onForwardPass in group mode: each rank holds only"
                    + " its own batch's activations, not the step's merged batch's; expected listeners that read the score,"
                    + " gradient, parameters and counters (fix: drop that listener, or train as threads of one JVM)");
        }
        fits++;
        boolean completed = false;
        ModelState before = null;
        // With a prefetch buffer the iterator is read on a background thread from here until the
        // prefetcher closes, with the try's resources (before its finally: before fit returns or throws)
        BatchPrefetcher prefetcher = settings.prefetchBuffer() == 0 ? null
                : new BatchPrefetcher(iteratorSource::next, settings.prefetchBuffer(), settings.timeout());
        BatchSource source = prefetcher == null ? iteratorSource : prefetcher::next;
        try (prefetcher; Nd4jThreadLimit threads = Nd4jThreadLimit.of(settings.ompThreadsPerWorker())) {
            ensureWorkers();
            // listeners see the model change step by step: a failed fit must still leave it as it was
            before = listeners.isEmpty() ? null : ModelState.of(model);
            if (!listeners.isEmpty()) {
                model.exposeGradientView();
                listeners.epochStart(model.model());
            }
            double score = Double.NaN;
            // The next step's batches are taken while the workers compute this one: read on the
            // caller's thread (the iterator used by one thread only, as DL4J's fit does), or with a
            // prefetch buffer taken from the background reader.
            List<Object> batches = takeStep(source);
            while (!batches.isEmpty()) {
                StepOutcome outcome = runStep(batches, listeners, () -> takeStep(source));
                if (outcome.report() != null) {
                    score = outcome.report().loss();
                }
                batches = outcome.following();
            }
            // workers are idle, so the caller's thread may touch the replicas (the task queues
            // ordered their last writes)
            pullModelFromReplicas();
            if (!Double.isNaN(score)) {
                model.setScore(score); // as after DL4J's fit: the last iteration's score
            }
            listeners.epochEnd(model.model());
            completed = true;
        } finally {
            model.setInputAndLabels(null); // DL4J's fit clears them too
            if (!completed) {
                stopWorkers();
                if (before != null) {
                    before.restore(model);
                }
            }
        }
        // The end of a fit is an epoch, as in DL4J's fit(iterator), counted after onEpochEnd as DL4J does
        for (DataParallelWorker w : workers) {
            w.replica().setEpochCount(w.replica().epochCount() + 1);
        }
        model.setEpochCount(model.epochCount() + 1);
    }

    /** Parameters, updater state, counters and score of the model, to put back after a failed fit. */
    private record ModelState(INDArray params, INDArray updaterState, int iterations, int epochs, double score) {
        static ModelState of(ModelReplica model) {
            INDArray state = model.updaterState();
            return new ModelState(model.params().dup(), state == null ? null : state.dup(), model.iterationCount(),
                    model.epochCount(), model.score());
        }

        void restore(ModelReplica model) {
            model.params().assign(params);
            if (updaterState != null) {
                model.updaterState().assign(updaterState);
            }
            model.setIterationCount(iterations);
            model.setEpochCount(epochs);
            model.setScore(score);
        }
    }

    /**
     * The model takes the replicas' state: parameters and counters from replica 0 (all are
     * bitwise equal), the updater state from replica 0, or with sharding gathered from every
     * worker's shard into the model's full DL4J state view. Workers must be idle.
     */
    private void pullModelFromReplicas() {
        ModelReplica first = workers.getFirst().replica();
        if (settings.sharding() == null) {
            model.copyStateFrom(first);
            return;
        }
        model.copyParamsAndCountersFrom(first);
        INDArray full = model.updaterState();
        if (full != null) {
            if (settings.group() != null) {
                // group mode: the other shards live in the other ranks' processes; every rank gathers them (collective)
                workers.getFirst().sharded().gatherFullState(full);
            } else {
                for (DataParallelWorker w : workers) {
                    w.sharded().exportState(full);
                }
            }
        }
    }

    /** Whether the replicas hold the model's state (it may have been changed between fits). Workers must be idle. */
    private boolean replicasMatchModel() {
        ModelReplica first = workers.getFirst().replica();
        if (settings.sharding() == null) {
            return first.sameStateAs(model);
        }
        if (!first.sameParamsAndCountersAs(model)) {
            return false;
        }
        INDArray full = model.updaterState();
        for (DataParallelWorker w : workers) {
            if (full != null && !w.sharded().stateMatches(full)) {
                return false;
            }
        }
        return true;
    }

    /** Every replica (and shard) takes the model's state. Workers must be idle. */
    private void pushModelToReplicas() {
        INDArray full = settings.sharding() == null ? null : model.updaterState();
        for (DataParallelWorker w : workers) {
            if (settings.sharding() == null) {
                w.replica().copyStateFrom(model);
            } else {
                w.replica().copyParamsAndCountersFrom(model);
                if (full != null) {
                    w.sharded().importState(full);
                }
            }
        }
    }

    /** What {@link #runStep} did (null if the batches were empty) and the next step's batches, read meanwhile. */
    private record StepOutcome(StepReport report, List<Object> following) {
    }

    /**
     * Runs one step on {@code batches} (one per worker, or fewer), then the user's listeners;
     * reads the next step's batches from {@code next} while the workers compute.
     */
    private StepOutcome runStep(List<Object> batches, ModelListeners listeners, Supplier<List<Object>> next) {
        int k = batches.size();
        long total = 0;
        long[] examples = new long[k];
        for (int i = 0; i < k; i++) {
            examples[i] = examples(batches.get(i));
            total += examples[i];
        }
        if (total == 0) {
            return new StepOutcome(null, next.get()); // nothing to learn from empty batches
        }
        // Workers past the last batch run the first batch but contribute zeros; every worker
        // divides the summed gradient by the examples of the whole step (see DataParallelWorker).
        boolean stamping = timeline != null && timeline.wantsStep();
        long handedOut = stamping ? System.nanoTime() : 0;
        // this wrapper's ranks: every worker's (threads), or its own rank of the group (group mode)
        int first = settings.firstLocalRank();
        int local = workers.size();
        List<CompletableFuture<DataParallelWorker.Result>> results = new ArrayList<>(local);
        for (int j = 0; j < local; j++) {
            int i = first + j;
            boolean idle = i >= k;
            CompletableFuture<DataParallelWorker.Result> f = new CompletableFuture<>();
            results.add(f);
            workers.get(j).submit(new DataParallelWorker.Task(batches.get(idle ? 0 : i), idle, idle ? 0 : examples[i], total,
                    step, listeners.needsActivations(), listeners.needsGradient(), f));
        }
        List<Object> following = next.get(); // while the workers compute
        long batchesRead = stamping ? System.nanoTime() : 0;
        List<DataParallelWorker.Result> finished = stamping ? new ArrayList<>(local) : null;
        double[] scores = new double[k];
        double mergedMeanLoss = Double.NaN;
        double regularization = 0;
        long lastSyncStart = 0;
        long lastSyncEnd = 0;
        long stepNanos = 0;
        long syncNanos = 0;
        boolean skipped = false;
        List<Object> activations = new ArrayList<>(k);
        List<Throwable> failures = new ArrayList<>();
        List<Integer> failedWorkers = new ArrayList<>();
        long waitMillis = settings.timeout().multipliedBy(3).plusSeconds(30).toMillis();
        for (int j = 0; j < local; j++) {
            int i = first + j;
            try {
                DataParallelWorker.Result r = results.get(j).get(waitMillis, TimeUnit.MILLISECONDS);
                if (finished != null) {
                    finished.add(r);
                }
                if (i < k) {
                    scores[i] = r.score();
                    activations.add(r.activations());
                }
                if (j == 0) {
                    regularization = r.regularization(); // the same parameters, so the same term, on every worker
                    mergedMeanLoss = r.mergedMeanLoss();
                }
                stepNanos = Math.max(stepNanos, r.stepNanos());
                syncNanos = Math.max(syncNanos, r.syncNanos());
                lastSyncStart = Math.max(lastSyncStart, r.syncStart());
                lastSyncEnd = Math.max(lastSyncEnd, r.syncEnd());
                skipped |= r.skipped();
            } catch (ExecutionException e) {
                failures.add(e.getCause());
                failedWorkers.add(i);
            } catch (TimeoutException e) {
                failures.add(new SymmemException("worker " + i + " did not finish step " + step + " within "
                        + Duration.ofMillis(waitMillis) + " (a wait that ignores the timeout: this is a bug)"));
                failedWorkers.add(i);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new SymmemException("interrupted while waiting for workers at step " + step, e);
            }
        }
        long collected = stamping ? System.nanoTime() : 0;
        if (!failures.isEmpty()) {
            RuntimeException failure = failure(failures, failedWorkers);
            metrics.recordFailure(failureReason(failure));
            throw failure;
        }
        // DL4J's score of one model on the merged batch: each worker's mean loss (its score less the
        // regularization term) weighted by its examples, plus the term once
        double meanLoss = 0;
        if (settings.group() != null) {
            meanLoss = mergedMeanLoss; // the same sum, over every rank's term, which the worker took across the group
        } else {
            for (int i = 0; i < k; i++) {
                meanLoss += examples[i] * (scores[i] - regularization) / total;
            }
        }
        double score = meanLoss + regularization;
        // from the last worker's arrival at the sync to the last worker's finish: sync nothing hid
        long exposedSyncNanos = lastSyncStart == 0 ? 0 : Math.max(0, lastSyncEnd - lastSyncStart);
        StepReport report = new StepReport(step, total, score, stepNanos, syncNanos, skipped, exposedSyncNanos);
        if (settings.reportScoreAfterAveraging()) {
            // ParallelWrapper logs "Averaged score" (the workers' unweighted mean) after each averaging;
            // here the step's exact merged-batch score, which the model reports after fit
            LOG.info("symmem4j: score after averaging: step={} score={} examples={} skipped={} syncMillis={}", step, score,
                    total, skipped, String.format(java.util.Locale.ROOT, "%.3f", syncNanos / 1e6));
        }
        metrics.recordStep(total, model.params().length() * model.params().dataType().width(), stepNanos, score, skipped);
        step++;
        long listenersStart = stamping ? System.nanoTime() : 0;
        if (!listeners.isEmpty() && !skipped) {
            listeners.step(model, new FinishedStep(batches, activations, score));
        }
        for (StepListener l : stepListeners) {
            l.onStep(report);
        }
        if (stamping) {
            // every worker's result future completed (publishing its stamps) and the next step is not
            // handed out yet (the workers overwrite them then)
            boolean anyListener = (!listeners.isEmpty() && !skipped) || !stepListeners.isEmpty();
            timeline.record(report.step(), fits, report, new DataParallelTimeline.CallerStamps(handedOut, batchesRead, collected,
                    anyListener ? listenersStart : 0, anyListener ? System.nanoTime() : 0), finished, workers);
        } else if (timeline != null) {
            timeline.dropStep();
        }
        return new StepOutcome(report, following);
    }

    /** The batches one model would see merged: with gradient accumulation, every micro-batch of every worker. */
    private static List<Object> plainBatches(List<Object> batches) {
        List<Object> out = new ArrayList<>();
        for (Object b : batches) {
            if (b instanceof MicroBatches micro) {
                out.addAll(micro.batches());
            } else {
                out.add(b);
            }
        }
        return out;
    }

    /**
     * With gradient accumulation a step has no single forward pass and no single gradient before
     * the sum: listeners that read those are refused rather than given the last micro-batch's.
     */
    private static void refuseListenersThatNeedOnePass(int accumulation, ModelListeners listeners) {
        if (accumulation > 1 && (listeners.needsActivations() || listeners.needsGradient())) {
            throw new IllegalStateException("gradientAccumulation=" + accumulation + " with a listener that"
                    + " overrides " + (listeners.needsActivations() ? "onForwardPass" : "onGradientCalculation")
                    + ": expected listeners that read only the score, parameters and counters (a step of "
                    + accumulation + " micro-batches has no single forward pass or gradient to show);"
                    + " fix: gradientAccumulation(1), or drop that listener while training with accumulation");
        }
    }

    /** A finished step as the user's listeners see it; used only while the workers are idle. */
    private final class FinishedStep implements ModelListeners.Step {
        private final List<Object> batches;
        private final List<Object> activations;
        private final double score;

        FinishedStep(List<Object> batches, List<Object> activations, double score) {
            this.batches = plainBatches(batches);
            this.activations = activations;
            this.score = score;
        }

        @Override
        public List<Object> batches() {
            return batches;
        }

        @Override
        public List<Object> activations() {
            return activations;
        }

        @Override
        public double score() {
            return score;
        }

        @Override
        public void assembleGradient(INDArray target) {
            // plain data parallelism: worker 0 kept the whole sum; sharded: every worker its shard
            for (DataParallelWorker w : workers) {
                DataParallelWorker.GradientSnapshot g = w.gradientSnapshot();
                if (g == null) {
                    continue;
                }
                long length = settings.sharding() == null ? target.length() : w.sharded().end() - w.sharded().start();
                long width = target.dataType().width();
                // copied through host memory: on a GPU backend (GPU mode) the kept sum is written on the device
                Nd4j.getAffinityManager().ensureLocation(g.values(), AffinityManager.Location.HOST);
                java.lang.foreign.MemorySegment.copy(ModelReplica.segmentOf(g.values()), 0, ModelReplica.segmentOf(target),
                        g.start() * width, length * width);
            }
            Nd4j.getAffinityManager().tagLocation(target, AffinityManager.Location.HOST);
        }

        @Override
        public void syncModel() {
            pullModelFromReplicas();
            // after DL4J's step the gradient view holds the update it subtracted
            model.gradientView().assign(workers.getFirst().replica().gradientView());
        }

        @Override
        public void syncReplicasIfChanged() {
            if (!replicasMatchModel()) {
                pushModelToReplicas();
            }
        }
    }

    /** The exception that caused the others: a worker's own error before the peers' timeouts it triggered. */
    private RuntimeException failure(List<Throwable> failures, List<Integer> failedWorkers) {
        int origin = RankFailures.origin(failures, f -> f instanceof PeerTimeoutException);
        Throwable cause = failures.get(origin);
        RuntimeException out = cause instanceof NonFiniteGradientException nf ? nf
                : new DataParallelTrainingException("data-parallel fit failed: worker " + failedWorkers.get(origin)
                        + " at step " + step + ": " + cause, failedWorkers.get(origin), step, cause);
        return RankFailures.suppressOthers(out, failures, origin);
    }

    /** The {@code reason} tag of a failed step: what its first worker failure was. */
    private static SyncMetrics.FailureReason failureReason(RuntimeException failure) {
        if (failure instanceof NonFiniteGradientException) {
            return SyncMetrics.FailureReason.NON_FINITE;
        }
        return failure.getCause() instanceof PeerTimeoutException t && t.reason() == PeerTimeoutException.Reason.DEADLINE_PASSED
                ? SyncMetrics.FailureReason.TIMEOUT : SyncMetrics.FailureReason.ERROR;
    }

    static long examples(Object batch) {
        if (batch instanceof MicroBatches micro) {
            return micro.batches().stream().mapToLong(SymmemParallelWrapper::examples).sum();
        }
        if (batch instanceof DataSet ds) {
            return ds.numExamples();
        }
        MultiDataSet mds = (MultiDataSet) batch;
        return mds.getFeatures(0).size(0);
    }

    /** Starts the workers if needed, and gives the replicas the model's state if it changed since the last fit. */
    private void ensureWorkers() {
        ModelReplica.ensureInitialized(model);
        if (workers == null) {
            // (every worker runs ND4J ops at once: train() limits ND4J's threads to each one's share)
            DataParallelWorker.ShardSource shardSource = null;
            if (settings.sharding() != null) {
                // DL4J's own updater of the user's model: its blocks are the layout, its full state
                // view is where shards start from (and are gathered into after each fit)
                UpdaterLayout layout = UpdaterLayout.of(model.dl4jUpdater(), model.params().length());
                shardSource = new DataParallelWorker.ShardSource(layout, model.updaterState());
            }
            List<StateUpdateReduction.Entry> stateEntries = StateUpdateReduction.find(
                    UpdaterLayout.variablesOf(model.dl4jUpdater()), model.trainables());
            logStateEntries(stateEntries);
            if (settings.group() == null) {
                world = InJvmWorld.create(settings.workers(), GroupOptions.defaults().withTimeout(settings.timeout())
                        .withIdleStrategy(() -> new BackoffIdleStrategy(BackoffIdleStrategy.DEFAULT_MAX_SPINS,
                                BackoffIdleStrategy.DEFAULT_MAX_YIELDS, BackoffIdleStrategy.DEFAULT_MIN_PARK_NANOS,
                                MAX_PARK_NANOS)));
            }
            List<DataParallelWorker> started = new ArrayList<>();
            for (int r = settings.firstLocalRank(); r < settings.firstLocalRank() + settings.localWorkers(); r++) {
                BackpropProgress progress = settings.overlap() ? new BackpropProgress() : null;
                // in group mode the gradient lives in symmetric memory of the group, where the peers (other
                // processes, which cannot map this one's heap) read it: allocated collectively, here, on every rank;
                // in GPU mode it stays in ND4J's device memory, which the collectives take as it is
                SymmetricMemory gradientHome = settings.group() == null || settings.gpuMode() ? null
                        : SymmetricMemory.allocate(settings.group(), model.params().length() * model.params().dataType().width());
                ModelReplica replica = model.newReplica(progress, settings.sharding() != null,
                        gradientHome == null ? null : gradientHome.local());
                if (settings.workspaceMode() != null) {
                    // as ParallelWrapper's trainers set it on their replicas' configurations; DL4J reads it at every fit
                    replica.setTrainingWorkspaceMode(settings.workspaceMode());
                }
                DataParallelWorker.GroupSource source = settings.group() == null ? DataParallelWorker.GroupSource.threadOf(world, r)
                        : DataParallelWorker.GroupSource.member(settings.group());
                started.add(new DataParallelWorker(r, source, replica, gradientHome,
                        settings, metrics, shardSource, stateEntries, progress));
            }
            workers = started;
            for (DataParallelWorker w : workers) {
                w.start();
            }
            try {
                CompletableFuture.allOf(workers.stream().map(DataParallelWorker::ready).toArray(CompletableFuture[]::new))
                        .get(settings.timeout().toMillis() + 10_000, TimeUnit.MILLISECONDS);
            } catch (ExecutionException | TimeoutException e) {
                stopWorkers();
                throw new SymmemException("data-parallel workers failed to start: " + e.getMessage(),
                        e instanceof ExecutionException ? e.getCause() : e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                stopWorkers();
                throw new SymmemException("interrupted while starting workers", e);
            }
            LOG.info("symmem4j data parallelism: " + settings.workers() + " workers"
                    + (settings.group() == null ? "" : " (rank " + settings.group().rank() + " of the group here, transport "
                    + settings.group().transport().name() + ")") + (settings.gpuMode()
                    ? ", GPU mode (the gradient summed and divided on the device, on ND4J's stream)" : "") + ", policy "
                    + settings.policy() + ", ND4J threads per worker " + settings.ompThreadsPerWorker()
                    + (settings.sharding() == null ? "" : ", ZeRO sharding " + settings.sharding())
                    + (settings.overlap() ? ", sync overlapped with backprop" : "")
                    + (settings.accumulation() > 1 ? ", " + settings.accumulation() + " micro-batches per worker per step" : "")
                    + (settings.gradientTransfer() == GradientTransfer.BFLOAT16 ? ", bf16 gradient transfer" : "")
                    + (settings.prefetchBuffer() > 0 ? ", " + settings.prefetchBuffer() + " batches prefetched" : "")
                    + (settings.workspaceMode() != null ? ", training workspaces " + settings.workspaceMode() : ""));
        } else if (!replicasMatchModel()) {
            pushModelToReplicas();
        }
    }

    /** Says which gradient-view entries merge as state updates, and warns about those merged by the generic rule. */
    private static void logStateEntries(List<StateUpdateReduction.Entry> entries) {
        if (entries.isEmpty()) {
            return;
        }
        List<StateUpdateReduction.Entry> generic = entries.stream()
                .filter(e -> e.merge() == StateUpdateReduction.Merge.EXAMPLE_WEIGHTED_AVERAGE).toList();
        LOG.info("symmem4j: state updates merged as one model on the merged batch computes them: "
                + entries);
        if (!generic.isEmpty()) {
            LOG.warn("symmem4j: layers=" + generic + " write state updates into the gradient"
                    + " view (updaterDivideByMinibatch=false) but are not a layer kind symmem4j knows; they are merged as"
                    + " the example-weighted average of the workers' updates, exact only if the update is a mean over the"
                    + " batch's examples (check the layer's backprop, or train it with plain fit())");
        }
    }

    // ------------------------------------------------------------------ sharded checkpoints

    /**
     * Saves a sharded run into {@code dir}: one file per worker with its updater-state shard and
     * metadata ({@code shard-RRRRR-of-NNNNN.bin}: worker count, shard bounds, iteration and epoch
     * counters, DL4J's updater layout, format version, checksum), plus {@code model.zip}, written by
     * DL4J's {@code ModelSerializer} with the full updater state gathered from the shards, which a
     * plain DL4J user loads with {@code ModelSerializer.restoreMultiLayerNetwork(file, true)}.
     * Shard files of another worker count in {@code dir} are deleted. Saves what the next
     * {@code fit()} would train from. In group mode it is collective: every rank calls it with the same
     * directory (on one machine, or a file system they share), writes its own shard file, rank 0 writes
     * {@code model.zip} and deletes stale shard files, and every rank returns once all files are written.
     *
     * @param dir the checkpoint directory; created when absent
     * @throws IOException           when a file cannot be written
     * @throws IllegalStateException when the wrapper is closed
     */
    public synchronized void saveCheckpoint(Path dir) throws IOException {
        requireSharding("saveCheckpoint");
        if (closed) {
            throw new IllegalStateException("wrapper is closed; build a new one");
        }
        ensureWorkers();
        pullModelFromReplicas();
        ShardedCheckpoints.save(dir, settings.workers(), shards(), model.model(), checkpointAgreement());
    }

    /**
     * Restores a checkpoint written by {@link #saveCheckpoint} with the same worker count: each
     * worker reads its own shard file; parameters and counters come from {@code model.zip} (its
     * updater state is not read: the shards hold it); then the model holds the restored state as
     * after a {@code fit()}. Everything is checked before anything changes (worker count, shard
     * bounds, data type, DL4J's updater layout, equal counters in every file); a shard that fails
     * its checksum leaves the model as it was, and the next {@code fit()} re-syncs the workers
     * from the model. In group mode it is collective: every rank reads its own shard, and a rank
     * whose files fail any check makes every rank throw, each model left as it was. For a different
     * worker count, load {@code model.zip} with {@code ModelSerializer} (updater state included) and
     * build a wrapper on that model: it shards the model's full state for any worker count.
     *
     * @param dir a directory {@link #saveCheckpoint} wrote
     * @throws IOException              when a file cannot be read, is truncated or fails its checksum
     * @throws IllegalArgumentException when the checkpoint does not fit this wrapper (worker count, shard
     *                                  bounds, data type, updater layout, mixed steps)
     * @throws IllegalStateException    when the wrapper is closed
     */
    public synchronized void restoreCheckpoint(Path dir) throws IOException {
        requireSharding("restoreCheckpoint");
        if (closed) {
            throw new IllegalStateException("wrapper is closed; build a new one");
        }
        ensureWorkers();
        ModelReplica saved = ModelReplica.of(ShardedCheckpoints.restore(dir, settings.workers(), shards(), model.model(),
                CHECKPOINT_WORDS, checkpointAgreement()));
        model.copyParamsAndCountersFrom(saved);
        for (DataParallelWorker w : workers) {
            w.replica().copyParamsAndCountersFrom(model);
        }
        pullModelFromReplicas();
    }

    /** This process's workers' updater-state shards, in rank order, as checkpoints save and restore them. */
    private List<ShardedCheckpoints.Shard> shards() {
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>(workers.size());
        for (int j = 0; j < workers.size(); j++) {
            ShardedUpdater s = workers.get(j).sharded();
            ModelReplica replica = workers.get(j).replica();
            shards.add(new ShardedCheckpoints.Shard(settings.firstLocalRank() + j, s.stage().name(),
                    replica.params().dataType(), s.layout().paramCount(), s.start(), s.end(), s.layout().fingerprint(),
                    replica.iterationCount(), replica.epochCount(), s.state()));
        }
        return shards;
    }

    /**
     * Group mode: every rank learns whether every rank got here without a failure; a rank that did not makes the
     * others throw naming it. In thread mode, where one process did it all, nothing to agree on. Workers must be idle
     * (the group's exchange runs on the caller's thread).
     */
    private ShardedCheckpoints.Agreement checkpointAgreement() {
        return ShardedCheckpoints.Agreement.over(settings.group(), "symmem4j-wrapper-");
    }

    private void requireSharding(String what) {
        if (settings.sharding() == null) {
            throw new IllegalStateException(what + " writes per-worker updater-state shards and needs sharding(...) on the"
                    + " builder; without sharding the model holds the whole state after fit(): save it with"
                    + " ModelSerializer.writeModel(model, file, true)");
        }
    }

    private void stopWorkers() {
        if (workers == null) {
            return;
        }
        for (DataParallelWorker w : workers) {
            w.submit(new DataParallelWorker.Task(null, false, 0, 0, -1, false, false, null));
        }
        for (DataParallelWorker w : workers) {
            try {
                w.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (world != null) {
            world.close(); // the wrapper's own world; a group the user gave stays open
        }
        workers = null;
        world = null;
    }

    /** Stops the workers. The model keeps the state of the last successful {@code fit()}. */
    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            stopWorkers();
        }
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
    public static final class Builder extends TrainerBuilder<Builder, StepListener> {
        private final ModelReplica model;
        private int workers = Runtime.getRuntime().availableProcessors();
        private boolean workersSet;
        private long bucketBytes = 4L << 20;
        private boolean bucketBytesSet;
        private Algorithm algorithm;
        private AlgorithmPolicy policy;
        private NonFiniteGradients nonFiniteGradients = NonFiniteGradients.FAIL;
        private ZeroStage sharding;
        private boolean overlap;
        private int accumulation = 1;
        private GradientTransfer gradientTransfer = GradientTransfer.NETWORK_DTYPE;
        private long minBucketBytes = DEFAULT_MIN_BUCKET_BYTES;
        private int prefetchBuffer;
        private boolean reportScoreAfterAveraging;
        private WorkspaceMode workspaceMode;
        private boolean workspaceModeSet;
        private final List<TrainingListener> listeners = new ArrayList<>();
        private StatsStorageRouter statsRouter;
        private boolean listenersHadNull;

        private Builder(Model model) {
            this.model = ModelReplica.of(Objects.requireNonNull(model, "model"));
        }

        /**
         * Worker threads, one replica each (default: the number of cores).
         *
         * @param workers the number of worker threads, at least 1
         * @return this builder
         * @throws IllegalArgumentException when {@code workers} is below 1
         */
        public Builder workers(int workers) {
            if (workers < 1) {
                throw new IllegalArgumentException("workers=" + workers + " must be >= 1 (default: the number of cores, "
                        + Runtime.getRuntime().availableProcessors() + ")");
            }
            this.workers = workers;
            this.workersSet = true;
            return this;
        }


        /**
         * Largest gradient bucket all-reduced at once (default 4 MiB); each bucket gets its own algorithm. Not in GPU
         * mode ({@link #group}), which all-reduces the whole gradient view in one call: refused at {@link #build()}.
         *
         * @param bucketBytes the largest bucket in bytes, at least 64
         * @return this builder
         * @throws IllegalArgumentException when {@code bucketBytes} is below 64
         */
        public Builder bucketBytes(long bucketBytes) {
            if (bucketBytes < 64) {
                throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " must be >= 64 (default 4 MiB)");
            }
            this.bucketBytes = bucketBytes;
            this.bucketBytesSet = true;
            return this;
        }

        /**
         * Forces one all-reduce algorithm for every bucket (logged as forced); default: the calibrated policy.
         *
         * @param algorithm on host memory ONE_SHOT, TWO_SHOT or RING ({@code NCCL} is refused at {@link #build()}); in GPU
         *                  mode ({@link #group}) ONE_SHOT, TWO_SHOT or NCCL
         * @return this builder
         */
        public Builder algorithm(Algorithm algorithm) {
            this.algorithm = Objects.requireNonNull(algorithm, "algorithm");
            return this;
        }

        /**
         * A custom algorithm policy (default {@link AlgorithmPolicy#calibrated()}).
         *
         * @param policy picks each bucket's algorithm from its size
         * @return this builder
         */
        public Builder policy(AlgorithmPolicy policy) {
            this.policy = Objects.requireNonNull(policy, "policy");
            return this;
        }

        /**
         * What to do when the averaged gradient is not finite (default {@link NonFiniteGradients#FAIL}).
         *
         * @param mode {@link NonFiniteGradients#FAIL} or {@link NonFiniteGradients#SKIP_STEP}
         * @return this builder
         */
        public Builder nonFiniteGradients(NonFiniteGradients mode) {
            this.nonFiniteGradients = Objects.requireNonNull(mode, "nonFiniteGradients");
            return this;
        }

        /**
         * ND4J (OpenMP) threads per worker (default: cores ÷ workers, at least 1).
         *
         * @param threads ND4J and BLAS threads each worker uses during {@code fit()}, at least 1
         * @return this builder
         * @throws IllegalArgumentException when {@code threads} is below 1
         */
        public Builder ompThreadsPerWorker(int threads) {
            return ndThreadsPerRank("ompThreadsPerWorker", threads);
        }

        /**
         * ZeRO-style sharding: each worker keeps updater state only for its 1/N shard of the flat
         * parameter vector (see {@link ZeroStage}); training gives the same parameters as plain
         * data parallelism. Default: off.
         *
         * @param stage {@link ZeroStage#OPTIMIZER_STATE} (stage 1) or {@link ZeroStage#GRADIENTS} (stage 2)
         * @return this builder
         */
        public Builder sharding(ZeroStage stage) {
            this.sharding = Objects.requireNonNull(stage, "stage");
            return this;
        }

        /**
         * Overlaps gradient sync with backprop (default off): each replica's layers report when
         * backprop has written their gradient, and a communication thread per worker all-reduces
         * each bucket (buckets start at layer boundaries) as soon as its layers are done, while
         * backprop goes on with the layers below. Results are bitwise equal to the sync after the
         * whole backward pass. It hides sync where layers near the input take long to backprop
         * while most parameters sit near the output (convolutions under dense layers); the sync of
         * the first layers' bucket can never hide. Not with sharding.
         *
         * @param overlap true to all-reduce each bucket while backprop goes on
         * @return this builder
         */
        public Builder overlapSyncWithBackprop(boolean overlap) {
            this.overlap = overlap;
            return this;
        }

        /**
         * Gradient accumulation: each worker takes {@code microBatches} batches per optimizer step,
         * sums their gradients (forward and backward passes only) and syncs once; the step averages
         * over all its examples, like one model on the merged batches (to rounding). Default 1.
         * Not with sharding, nor with layers that keep state in the gradient view (BatchNormalization).
         *
         * @param microBatches batches per worker per optimizer step, at least 1 (1: no accumulation)
         * @return this builder
         * @throws IllegalArgumentException when {@code microBatches} is below 1
         */
        public Builder gradientAccumulation(int microBatches) {
            if (microBatches < 1) {
                throw new IllegalArgumentException("gradientAccumulation=" + microBatches + " must be >= 1 (1: none)");
            }
            this.accumulation = microBatches;
            return this;
        }

        /**
         * The format gradients are transferred in (default {@link GradientTransfer#NETWORK_DTYPE}); not with sharding.
         *
         * @param transfer the network's own data type, or BFLOAT16
         * @return this builder
         */
        public Builder gradientTransfer(GradientTransfer transfer) {
            this.gradientTransfer = Objects.requireNonNull(transfer, "gradientTransfer");
            return this;
        }

        /** Smallest bucket (default 256 KiB), see {@link org.symmem4j.gradsync.GradientBuckets#splitAtBoundaries}; tests use small ones. */
        Builder minBucketBytes(long bytes) {
            if (bytes < 0) {
                throw new IllegalArgumentException("minBucketBytes=" + bytes + " must be >= 0");
            }
            this.minBucketBytes = bytes;
            return this;
        }

        /**
         * Batches read ahead on a background thread (ParallelWrapper's {@code prefetchBuffer}):
         * with {@code n > 0} a reader thread takes batches from the iterator up to {@code n} ahead
         * of the step that needs them, so a slow iterator (parsing, augmentation) runs beside the
         * workers and the caller's per-step work. Default 0: the caller's thread reads the next
         * step's batches while the workers compute (one step ahead), which suffices when reading
         * is faster than a step. The iterator must support asynchronous reading
         * ({@code asyncSupported()}); {@code fit} refuses one that does not. The reader stops
         * before {@code fit} returns; an exception the iterator throws on it is thrown by
         * {@code fit} on the caller's thread when training reaches that batch, as if read there. As in
         * DL4J, {@code fit} resets an exhausted iterator at its start, not at its end. Checked at
         * {@link #build()}: {@code n >= 0}.
         *
         * @param n batches read ahead on a background thread; 0 reads on the calling thread
         * @return this builder
         */
        public Builder prefetchBuffer(int n) {
            this.prefetchBuffer = n;
            return this;
        }

        /**
         * Logs each step's score at INFO (ParallelWrapper's {@code reportScoreAfterAveraging}, which
         * logs the workers' unweighted mean score and the averaging time after each averaging).
         * Here every step is an averaging, and its score is exact: DL4J's score of one model on the
         * step's merged batch (mean loss over all its examples plus the regularization term), with
         * the step's examples and sync time. The model's {@code score()} holds the last step's
         * score after {@code fit} either way, as ParallelWrapper's does. Default false.
         *
         * @param report true to log each step's score at INFO
         * @return this builder
         */
        public Builder reportScoreAfterAveraging(boolean report) {
            this.reportScoreAfterAveraging = report;
            return this;
        }

        /**
         * The workspace mode of the replicas' training passes (ParallelWrapper's
         * {@code workspaceMode}, which its trainers set on their replicas' configurations):
         * {@link WorkspaceMode#ENABLED} reuses ND4J workspace memory between iterations,
         * {@link WorkspaceMode#NONE} allocates every array afresh (slower; for debugging or layers
         * that misbehave in workspaces). Results are the same either way. Default: the model's own
         * training workspace mode (ParallelWrapper's default is ENABLED). The user's model is not
         * changed: it does not train under the wrapper (the replicas do), and its configuration is
         * what {@code ModelSerializer} saves; ParallelWrapper sets the mode on it for good. Only
         * training passes: the replicas run no inference. Checked at {@link #build()}: not null, and
         * not DL4J's deprecated SINGLE or SEPARATE.
         *
         * @param mode ENABLED or NONE (checked at {@link #build()})
         * @return this builder
         */
        public Builder workspaceMode(WorkspaceMode mode) {
            this.workspaceMode = mode;
            this.workspaceModeSet = true;
            return this;
        }

        /**
         * Attaches {@code listeners} to the model at {@link #build()} (ParallelWrapper's
         * {@code setListeners}, which adds them to those it took from the model): the wrapper calls
         * them, with the model's own, as DL4J's {@code fit} calls them for one model trained on each
         * step's merged batch (see the class comment). A listener already attached is not added
         * twice; calls add up. Listeners that report to a StatsStorageRouter (the UI's
         * {@code StatsListener}) need one: give it here with {@link #listeners(StatsStorageRouter,
         * TrainingListener...)}, or build them with their storage.
         *
         * @param listeners DL4J listeners, called as {@code fit()} calls them
         * @return this builder
         */
        public Builder listeners(TrainingListener... listeners) {
            if (listeners == null) {
                listenersHadNull = true;
                return this;
            }
            for (TrainingListener l : listeners) {
                if (l == null) {
                    listenersHadNull = true;
                } else if (this.listeners.stream().noneMatch(x -> x == l)) {
                    this.listeners.add(l);
                }
            }
            return this;
        }

        /**
         * {@link #listeners(TrainingListener...)} with a router for the listeners that send reports
         * ({@code RoutingIterationListener}s such as {@code StatsListener}), as
         * {@code ParallelWrapper.setListeners(StatsStorageRouter, ...)}: at {@link #build()} every
         * such listener on the model or given here that has no router of its own gets
         * {@code router} (e.g. an {@code InMemoryStatsStorage} the UI reads); one with its own keeps
         * it. Reports come from the caller's thread, one per step, as from one model (no worker ids:
         * the replicas are not separate models to the UI).
         *
         * @param router    where {@code RoutingIterationListener}s without a router of their own report
         * @param listeners DL4J listeners, called as {@code fit()} calls them
         * @return this builder
         */
        public Builder listeners(StatsStorageRouter router, TrainingListener... listeners) {
            this.statsRouter = Objects.requireNonNull(router, "router (use listeners(TrainingListener...) for none)");
            return listeners(listeners);
        }

        /**
         * Checks the settings against each other and the model, and creates the wrapper. Worker
         * threads, replicas and symmetric memory are created by the first {@code fit()}.
         *
         * @return the wrapper; {@link SymmemParallelWrapper#close()} frees what {@code fit()} created
         * @throws IllegalArgumentException when settings conflict or the model cannot be trained this
         *         way (the message names the setting or layer, what was found and the fix)
         */
        public SymmemParallelWrapper build() {
            Group group = options().group();
            boolean gpuMode = Settings.gpuMode(group);
            if (group != null) {
                checkGroupMode();
            }
            if (!gpuMode && (algorithm == Algorithm.NCCL || algorithm == Algorithm.NCCL_SYMMETRIC)) {
                throw new IllegalArgumentException("algorithm=" + algorithm + " needs a GPU transport; workers here share host memory"
                        + " (use ONE_SHOT, TWO_SHOT or RING, or leave the choice to the calibrated policy)");
            }
            if (sharding != null && (overlap || accumulation > 1 || gradientTransfer != GradientTransfer.NETWORK_DTYPE)) {
                throw new IllegalArgumentException("sharding=" + sharding + " with overlapSyncWithBackprop=" + overlap
                        + " gradientAccumulation=" + accumulation + " gradientTransfer=" + gradientTransfer
                        + ": expected none of these with sharding (its reduce-scatter runs in the gradient hook);"
                        + " fix: drop sharding, or these options");
            }
            ModelReplica.ensureInitialized(model);
            if (gpuMode) {
                checkGpuMode();
            }
            if (group == null && workers > 1 && (model.model() instanceof MultiLayerNetwork m
                    && org.symmem4j.dl4j.tensor.TensorParallel.isSharded(m)
                    || model.model() instanceof ComputationGraph g && org.symmem4j.dl4j.tensor.TensorParallel.isSharded(g))) {
                throw new IllegalArgumentException("workers=" + workers + " threads with a tensor-parallel network: each"
                        + " worker would use this rank's tensor-parallel group at once; expected group mode, one worker per"
                        + " rank (fix: builder(model).group(dataParallelGroup), e.g. DeviceMesh.of(world, \"dp\", d, \"tp\", t)"
                        + ".group(\"dp\"))");
            }
            if (gradientTransfer == GradientTransfer.BFLOAT16 && model.params().dataType() != DataType.FLOAT) {
                throw new IllegalArgumentException("gradientTransfer=BFLOAT16 expected a FLOAT network, found dataType="
                        + model.params().dataType() + " (bf16 transfer is for fp32 training; fix: train in FLOAT, or"
                        + " keep gradientTransfer=NETWORK_DTYPE)");
            }
            if (accumulation > 1) {
                List<String> stateful = stateEntriesInTheGradient(model);
                if (!stateful.isEmpty()) {
                    throw new IllegalArgumentException("gradientAccumulation=" + accumulation + " with layers " + stateful
                            + " that keep state updates (not gradients) in the gradient view, such as BatchNormalization's"
                            + " running statistics or CenterLossOutputLayer's centers: summing those over micro-batches is"
                            + " wrong; expected no such layers"
                            + " (fix: gradientAccumulation(1) with larger batches)");
                }
            }
            refuseLayersWithReplicaState(model);
            checkParallelWrapperSettings();
            // refuses listeners it cannot call as fit() would (fit() checks again), then attaches the builder's
            attachListeners();
            return new SymmemParallelWrapper(this, options());
        }

        /** Group mode's worker count is the group's size; what it cannot do yet is refused here, before anything starts. */
        private void checkGroupMode() {
            Group group = options().group();
            if (workersSet && workers != group.worldSize()) {
                throw new IllegalArgumentException("workers=" + workers + " with group(...) of worldSize=" + group.worldSize()
                        + ": in group mode the group's ranks are the workers, one per rank (fix: leave workers unset)");
            }
            workers = group.worldSize();
            if (options().timelineSteps() > 0) {
                throw new IllegalArgumentException("group(...) with recordTimeline: not available in group mode yet (each"
                        + " rank would hold only its own worker's track); expected no timeline (fix: train without it, or"
                        + " as threads of one JVM with workers(n))");
            }
        }

        /**
         * GPU mode ({@code group(...)} on a transport whose memory is a GPU's): what it does not implement, each refused
         * with its setting and fix, then DL4J's backend, which must keep the model in GPU memory. The settings come
         * first so that a machine without a GPU backend is told about them too.
         */
        private void checkGpuMode() {
            String mode = "GPU mode (group(...) on transport=" + options().group().transport().name() + ")";
            if (sharding != null) {
                throw new IllegalArgumentException("sharding=" + sharding + " in " + mode + ": expected no sharding; GPU"
                        + " mode all-reduces the whole gradient view in place on the device, while the sharded updater's"
                        + " reduce-scatter, shard update and all-gather run on host memory (fix: drop sharding(...), or train"
                        + " on a group on a host transport)");
            }
            if (overlap) {
                throw new IllegalArgumentException("overlapSyncWithBackprop=true in " + mode + ": expected false; GPU mode"
                        + " enqueues one all-reduce after the whole backward pass on ND4J's stream, and the overlap's"
                        + " per-layer buckets run on a host communication thread (fix: overlapSyncWithBackprop(false))");
            }
            if (gradientTransfer != GradientTransfer.NETWORK_DTYPE) {
                throw new IllegalArgumentException("gradientTransfer=" + gradientTransfer + " in " + mode + ": expected"
                        + " NETWORK_DTYPE; GPU mode all-reduces the gradient view in place in the network's own type (fix:"
                        + " gradientTransfer(GradientTransfer.NETWORK_DTYPE), or build the network in BFLOAT16)");
            }
            if (accumulation > 1) {
                throw new IllegalArgumentException("gradientAccumulation=" + accumulation + " in " + mode + ": expected 1;"
                        + " the micro-batches' gradients are summed in host memory, which GPU mode does not do (fix:"
                        + " gradientAccumulation(1) with larger batches, or train on a group on a host transport)");
            }
            // the entries the host path merges on their own: what the workers would find (the model's updater is made now)
            List<String> stateful = stateEntriesInTheGradient(model);
            if (!stateful.isEmpty()) {
                throw new IllegalArgumentException("layers " + stateful + " keep state updates (not gradients) in the"
                        + " gradient view, such as BatchNormalization's running statistics or CenterLossOutputLayer's centers,"
                        + " in " + mode + ": expected none; those entries are merged on host memory (StateUpdateReduction),"
                        + " which GPU mode does not do, and summing them as gradients would be wrong (fix: a model without"
                        + " such layers, or train on a group on a host transport)");
            }
            if (bucketBytesSet) {
                throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " in " + mode + ": expected it unset; GPU"
                        + " mode all-reduces the whole gradient view in one call, its algorithm picked by the policy for"
                        + " its size (fix: leave bucketBytes unset)");
            }
            if (Nd4jDeviceGradients.onCpuBackend()) {
                throw new IllegalArgumentException(Nd4jDeviceGradients.cpuBackendRefusal(mode));
            }
        }

        /** The settings ParallelWrapper users bring (prefetch buffer, workspace mode). */
        private void checkParallelWrapperSettings() {
            if (prefetchBuffer < 0) {
                throw new IllegalArgumentException("prefetchBuffer=" + prefetchBuffer + ": expected >= 0 (0: the calling"
                        + " thread reads the next step's batches while the workers compute; n > 0: a background thread"
                        + " reads up to n batches ahead); ParallelWrapper treats negatives as 0 (fix: prefetchBuffer(0))");
            }
            if (workspaceModeSet && workspaceMode == null) {
                throw new IllegalArgumentException("workspaceMode=null: expected ENABLED or NONE (fix: leave"
                        + " workspaceMode unset to keep the model's own, " + model.trainingWorkspaceMode() + ")");
            }
            if (workspaceMode == WorkspaceMode.SINGLE || workspaceMode == WorkspaceMode.SEPARATE) {
                throw new IllegalArgumentException("workspaceMode=" + workspaceMode + ": expected ENABLED or NONE (DL4J"
                        + " deprecated SINGLE and SEPARATE and runs them as ENABLED; fix: workspaceMode(ENABLED))");
            }
        }

        /**
         * Attaches the builder's listeners to the model and routes the reporting ones, after
         * checking everything, so a refusal leaves the model's listeners as they were.
         */
        private void attachListeners() {
            if (listenersHadNull) {
                throw new IllegalArgumentException("listeners(...) was given null: expected TrainingListener instances"
                        + " (fix: leave the null out)");
            }
            List<TrainingListener> all = new ArrayList<>(model.listeners());
            List<TrainingListener> adding = listeners.stream().filter(l -> all.stream().noneMatch(x -> x == l)).toList();
            all.addAll(adding);
            refuseListenersThatNeedOnePass(accumulation, ModelListeners.of(model, all)); // and truncated BPTT any
            StatsRouting.route(statsRouter, all);
            for (TrainingListener l : adding) {
                model.addListener(l);
            }
        }

        /**
         * Refuses the one DL4J 1.0.0-M2.1 layer whose training state lives outside the parameters:
         * OCNNOutputLayer resets its radius r at each epoch to a quantile of a window of the outputs
         * that layer instance saw, so each replica would set its own r and the replicas would part.
         */
        private static void refuseLayersWithReplicaState(ModelReplica model) {
            List<org.deeplearning4j.nn.conf.layers.Layer> layers = new ArrayList<>();
            switch (model) {
                case ModelReplica.Mln m -> m.net().getLayerWiseConfigurations().getConfs().forEach(c -> layers.add(c.getLayer()));
                case ModelReplica.Graph g -> g.net().getConfiguration().getVertices().values().forEach(v -> {
                    if (v instanceof org.deeplearning4j.nn.conf.graph.LayerVertex lv && lv.getLayerConf() != null) {
                        layers.add(lv.getLayerConf().getLayer());
                    }
                });
            }
            for (org.deeplearning4j.nn.conf.layers.Layer layer : layers) {
                if (layer instanceof org.deeplearning4j.nn.conf.ocnn.OCNNOutputLayer) {
                    throw new IllegalArgumentException("layer=" + layer.getLayerName() + " kind=OCNNOutputLayer cannot be"
                            + " trained by data-parallel replicas: DL4J resets its radius r each epoch from a window of the"
                            + " outputs that one layer instance saw (state outside the parameters, which the wrapper cannot"
                            + " merge), so replicas would diverge; expected=any other output layer (fix: train this model"
                            + " with plain fit())");
                }
            }
        }

        /**
         * The entries of the gradient view that hold state updates rather than gradients ("layer.param"): those
         * {@link StateUpdateReduction} merges on their own — BatchNormalization's running statistics, which DL4J's updater
         * does not divide by the batch size, and CenterLossOutputLayer's centers, which it does. Makes the model's DL4J
         * updater if it has none yet (its variables say which entries the updater handles).
         */
        private static List<String> stateEntriesInTheGradient(ModelReplica model) {
            return StateUpdateReduction.find(UpdaterLayout.variablesOf(model.dl4jUpdater()), model.trainables()).stream()
                    .map(e -> e.layer() + "." + e.param()).toList();
        }
    }
}
