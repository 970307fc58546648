package org.symmem4j.dl4j;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.InJvmWorld;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.host.InJvmTransport;

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
 * <p>Unlike DL4J's {@code ParallelWrapper}: {@code fit()} can be called repeatedly; updater state
 * (Adam moments, momentum) survives between calls, because the replicas live as long as the
 * wrapper; workers default to the number of cores; a worker failure ends {@code fit()} on the
 * caller's thread with that worker's exception instead of hanging.
 *
 * <p>After each successful {@code fit()}, the model passed to {@link #builder} holds the trained
 * parameters, updater state and counters. If it was changed between calls, the replicas take its
 * state at the start of the next {@code fit()}. A failed {@code fit()} leaves it as it was before
 * that call. {@link #close()} stops the workers.
 */
public final class SymmemParallelWrapper implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger(SymmemParallelWrapper.class.getName());

    /** Told about every step (round), on the thread that called {@code fit()}. */
    @FunctionalInterface
    public interface StepListener {
        void onStep(StepReport report);
    }

    /** Validated settings, shared with the workers. */
    record Settings(int workers, long bucketBytes, AlgorithmPolicy policy, NonFiniteGradients nonFiniteGradients,
                    Duration timeout, int ompThreadsPerWorker) {
    }

    private final ModelReplica model;
    private final Settings settings;
    private final SyncMetrics metrics;
    private final List<StepListener> stepListeners;
    private InJvmWorld world;
    private List<DataParallelWorker> workers;
    private long step;
    private boolean closed;

    private SymmemParallelWrapper(Builder b) {
        this.model = b.model;
        this.settings = new Settings(b.workers, b.bucketBytes,
                b.algorithm != null ? AlgorithmPolicy.forced(b.algorithm) : b.policy != null ? b.policy : AlgorithmPolicy.calibrated(),
                b.nonFiniteGradients, b.timeout, b.ompThreadsPerWorker > 0 ? b.ompThreadsPerWorker
                : Math.max(1, Runtime.getRuntime().availableProcessors() / b.workers));
        this.metrics = new SyncMetrics(InJvmTransport.NAME, b.metricTags);
        if (b.registry != null) {
            metrics.bindTo(b.registry);
        }
        this.stepListeners = List.copyOf(b.stepListeners);
    }

    /** Starts a builder for a {@link MultiLayerNetwork}. */
    public static Builder builder(MultiLayerNetwork model) {
        return new Builder(model);
    }

    /** Starts a builder for a {@link ComputationGraph}. */
    public static Builder builder(ComputationGraph model) {
        return new Builder(model);
    }

    /** The number of workers. */
    public int workers() {
        return settings.workers();
    }

    /** The replicas, worker order (tests compare them after each step, while workers are idle). */
    List<ModelReplica> replicas() {
        return workers == null ? List.of() : workers.stream().map(DataParallelWorker::replica).toList();
    }

    /** The metrics binder (already bound if a registry was given to the builder). */
    public SyncMetrics metrics() {
        return metrics;
    }

    /** Trains on every batch of {@code iterator}, {@link #workers()} batches per step. */
    public synchronized void fit(DataSetIterator iterator) {
        Objects.requireNonNull(iterator, "iterator");
        if (!iterator.hasNext() && iterator.resetSupported()) {
            iterator.reset();
        }
        train(() -> iterator.hasNext() ? iterator.next() : null);
    }

    /** Trains a {@link ComputationGraph} on every batch of {@code iterator}. */
    public synchronized void fit(MultiDataSetIterator iterator) {
        Objects.requireNonNull(iterator, "iterator");
        if (!(model instanceof ModelReplica.Graph)) {
            throw new IllegalArgumentException("fit(MultiDataSetIterator) needs a ComputationGraph; this wrapper holds a "
                    + model.model().getClass().getSimpleName() + " (use fit(DataSetIterator))");
        }
        if (!iterator.hasNext() && iterator.resetSupported()) {
            iterator.reset();
        }
        train(() -> iterator.hasNext() ? iterator.next() : null);
    }

    private interface BatchSource {
        Object next();
    }

    private void train(BatchSource source) {
        if (closed) {
            throw new IllegalStateException("wrapper is closed; build a new one");
        }
        ensureWorkers();
        boolean completed = false;
        try {
            int n = settings.workers();
            while (true) {
                List<Object> batches = new ArrayList<>(n);
                Object b;
                while (batches.size() < n && (b = source.next()) != null) {
                    batches.add(b);
                }
                if (batches.isEmpty()) {
                    break;
                }
                runStep(batches);
            }
            completed = true;
        } finally {
            if (!completed) {
                stopWorkers();
            }
        }
        // The end of a fit is an epoch, as in DL4J's fit(iterator); workers are idle, so the
        // caller's thread may touch the replicas (the task queues ordered their last writes).
        for (DataParallelWorker w : workers) {
            w.replica().setEpochCount(w.replica().epochCount() + 1);
        }
        model.copyStateFrom(workers.getFirst().replica());
    }

    private void runStep(List<Object> batches) {
        int n = settings.workers();
        int k = batches.size();
        long total = 0;
        for (Object b : batches) {
            total += examples(b);
        }
        if (total == 0) {
            return; // nothing to learn from empty batches
        }
        // Workers past the last batch run the first batch but contribute zeros; every worker
        // divides the summed gradient by the examples of the whole step (see DataParallelWorker).
        List<CompletableFuture<DataParallelWorker.Result>> results = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            boolean idle = i >= k;
            CompletableFuture<DataParallelWorker.Result> f = new CompletableFuture<>();
            results.add(f);
            workers.get(i).submit(new DataParallelWorker.Task(batches.get(idle ? 0 : i), idle, total, step, f));
        }
        double loss = 0;
        long stepNanos = 0;
        long syncNanos = 0;
        boolean skipped = false;
        List<Throwable> failures = new ArrayList<>();
        List<Integer> failedWorkers = new ArrayList<>();
        long waitMillis = settings.timeout().multipliedBy(3).plusSeconds(30).toMillis();
        for (int i = 0; i < n; i++) {
            try {
                DataParallelWorker.Result r = results.get(i).get(waitMillis, TimeUnit.MILLISECONDS);
                if (i < k) {
                    loss += r.loss() / total; // summed losses: the step's mean example loss
                }
                stepNanos = Math.max(stepNanos, r.stepNanos());
                syncNanos = Math.max(syncNanos, r.syncNanos());
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
        if (!failures.isEmpty()) {
            throw failure(failures, failedWorkers);
        }
        StepReport report = new StepReport(step, total, loss, stepNanos, syncNanos, skipped);
        step++;
        for (StepListener l : stepListeners) {
            l.onStep(report);
        }
    }

    /** The exception that caused the others: a worker's own error before the peers' timeouts it triggered. */
    private RuntimeException failure(List<Throwable> failures, List<Integer> failedWorkers) {
        int origin = 0;
        for (int i = 0; i < failures.size(); i++) {
            if (!(failures.get(i) instanceof PeerTimeoutException)) {
                origin = i;
                break;
            }
        }
        Throwable cause = failures.get(origin);
        RuntimeException out = cause instanceof NonFiniteGradientException nf ? nf
                : new DataParallelTrainingException("data-parallel fit failed: worker " + failedWorkers.get(origin)
                        + " at step " + step + ": " + cause, failedWorkers.get(origin), step, cause);
        for (int i = 0; i < failures.size(); i++) {
            if (i != origin && failures.get(i) != out) {
                out.addSuppressed(failures.get(i));
            }
        }
        return out;
    }

    private static long examples(Object batch) {
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
            // Every worker runs ND4J ops at once: give each its share of the cores, for OpenMP and BLAS both.
            Nd4j.getEnvironment().setMaxThreads(settings.ompThreadsPerWorker());
            Nd4j.factory().blas().setMaxThreads(settings.ompThreadsPerWorker());
            world = InJvmWorld.create(settings.workers(), GroupOptions.defaults().withTimeout(settings.timeout()));
            List<DataParallelWorker> started = new ArrayList<>();
            for (int r = 0; r < settings.workers(); r++) {
                ModelReplica replica = model.newReplica();
                started.add(new DataParallelWorker(r, world, replica, settings, metrics));
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
            LOG.log(System.Logger.Level.INFO, "symmem4j data parallelism: " + settings.workers() + " workers, policy "
                    + settings.policy() + ", ND4J threads per worker " + settings.ompThreadsPerWorker());
        } else if (!workers.getFirst().replica().sameStateAs(model)) {
            for (DataParallelWorker w : workers) {
                w.replica().copyStateFrom(model);
            }
        }
    }

    private void stopWorkers() {
        if (workers == null) {
            return;
        }
        for (DataParallelWorker w : workers) {
            w.submit(new DataParallelWorker.Task(null, false, 0, -1, null));
        }
        for (DataParallelWorker w : workers) {
            try {
                w.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        world.close();
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

    /** Builder, in DL4J's style: {@code SymmemParallelWrapper.builder(model).workers(4).build()}. */
    public static final class Builder {
        private final ModelReplica model;
        private int workers = Runtime.getRuntime().availableProcessors();
        private long bucketBytes = 4L << 20;
        private Algorithm algorithm;
        private AlgorithmPolicy policy;
        private NonFiniteGradients nonFiniteGradients = NonFiniteGradients.FAIL;
        private Duration timeout = GroupOptions.DEFAULT_TIMEOUT;
        private int ompThreadsPerWorker;
        private MeterRegistry registry;
        private Iterable<Tag> metricTags = Tags.empty();
        private final List<StepListener> stepListeners = new ArrayList<>();

        private Builder(Model model) {
            this.model = ModelReplica.of(Objects.requireNonNull(model, "model"));
        }

        /** Worker threads, one replica each (default: the number of cores). */
        public Builder workers(int workers) {
            if (workers < 1) {
                throw new IllegalArgumentException("workers=" + workers + " must be >= 1 (default: the number of cores, "
                        + Runtime.getRuntime().availableProcessors() + ")");
            }
            this.workers = workers;
            return this;
        }

        /** Largest gradient bucket all-reduced at once (default 4 MiB); each bucket gets its own algorithm. */
        public Builder bucketBytes(long bucketBytes) {
            if (bucketBytes < 64) {
                throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " must be >= 64 (default 4 MiB)");
            }
            this.bucketBytes = bucketBytes;
            return this;
        }

        /** Forces one all-reduce algorithm for every bucket (logged as forced); default: the calibrated policy. */
        public Builder algorithm(Algorithm algorithm) {
            this.algorithm = Objects.requireNonNull(algorithm, "algorithm");
            return this;
        }

        /** A custom algorithm policy (default {@link AlgorithmPolicy#calibrated()}). */
        public Builder policy(AlgorithmPolicy policy) {
            this.policy = Objects.requireNonNull(policy, "policy");
            return this;
        }

        /** What to do when the averaged gradient is not finite (default {@link NonFiniteGradients#FAIL}). */
        public Builder nonFiniteGradients(NonFiniteGradients mode) {
            this.nonFiniteGradients = Objects.requireNonNull(mode, "nonFiniteGradients");
            return this;
        }

        /** How long a worker waits for the others before failing (default 60 s). */
        public Builder timeout(Duration timeout) {
            if (timeout == null || timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("timeout=" + timeout + " must be positive (default 60 s)");
            }
            this.timeout = timeout;
            return this;
        }

        /** ND4J (OpenMP) threads per worker (default: cores ÷ workers, at least 1). */
        public Builder ompThreadsPerWorker(int threads) {
            if (threads < 1) {
                throw new IllegalArgumentException("ompThreadsPerWorker=" + threads + " must be >= 1");
            }
            this.ompThreadsPerWorker = threads;
            return this;
        }

        /** Records sync metrics into {@code registry} (names in {@link SyncMetrics}); {@code tags} go on every meter. */
        public Builder meterRegistry(MeterRegistry registry, Iterable<Tag> tags) {
            this.registry = Objects.requireNonNull(registry, "registry");
            this.metricTags = Objects.requireNonNull(tags, "tags");
            return this;
        }

        public Builder meterRegistry(MeterRegistry registry) {
            return meterRegistry(registry, Tags.empty());
        }

        /** Called after every step with its loss and timings. */
        public Builder stepListener(StepListener listener) {
            stepListeners.add(Objects.requireNonNull(listener, "listener"));
            return this;
        }

        public SymmemParallelWrapper build() {
            if (algorithm == Algorithm.NCCL) {
                throw new IllegalArgumentException("algorithm=NCCL needs a GPU transport; workers here share host memory"
                        + " (use ONE_SHOT, TWO_SHOT or RING, or leave the choice to the calibrated policy)");
            }
            return new SymmemParallelWrapper(this);
        }
    }
}
