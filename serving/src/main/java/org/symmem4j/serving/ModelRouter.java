package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.serving.weights.SharedWeights;

/**
 * Serves named, versioned DL4J models from {@link SharedWeights}: requests for a model wait in its bounded queue, and
 * a free worker thread takes what is queued (up to {@code maxBatch} rows) as one batch and runs it on a network object
 * over the version's shared parameters (one copy of the weights however many workers run). Batches form on their own:
 * requests that arrive while the workers are busy queue up and leave together; with {@code maxWait > 0} a worker
 * that finds fewer than {@code maxBatch} rows also waits that long after the first request for more.
 *
 * <pre>{@code
 * try (SharedWeights weights = SharedWeights.create(group, 0, 256L << 20, 16);
 *      ModelRouter router = new ModelRouter(weights, RouterOptions.defaults(), registry)) {
 *     router.deploy("mnist", ModelSpec.of(conf, 784), trained.params());     // version 1
 *     Prediction p = router.predict("mnist", features).join();               // p.version() == 1
 *     router.deploy("mnist", ModelSpec.of(conf, 784), retrained.params());   // version 2, while requests flow
 *     router.rollback("mnist");                                              // back to version 1
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>One whole version per request</b>: a batch takes a reference to one version before it starts and
 *       computes every row with it; the answer names that version.</li>
 *   <li><b>Hot swap</b>: {@link #deploy} publishes the new version, then makes it current; batches formed after
 *       that use it, batches running finish on theirs. The version before stays kept for {@link #rollback}; the
 *       one before that is retired, and its shared memory is freed when its last batch (or {@link Lease}) ends.</li>
 *   <li><b>Back-pressure</b>: a full queue refuses a request at once ({@link Kind#OVERLOADED}); at most one batch per
 *       worker is in flight, so a slow network fills the queue instead of memory.</li>
 *   <li><b>Scheduling</b>: a model with queued requests is on the router's ready list at most once; the worker that
 *       takes it from there forms one batch, puts the model back if requests are left (so the next free worker
 *       forms the next batch at once, in parallel), then runs its batch. A request wakes a worker only when its
 *       model was not on the list already, not once per request.</li>
 *   <li><b>Undeploy</b>: {@link #undeploy} refuses the model's new requests at once ({@link Kind#UNKNOWN_MODEL}),
 *       lets the requests it admitted before finish on the versions they run on, then drops the router's references
 *       to the model's versions; each is freed when its last reader leaves, as a retired version is. A later
 *       {@link #deploy} of the same name starts a new model whose versions count on from the last one.</li>
 * </ul>
 *
 * The router runs on the weights' owner rank (it publishes and retires them).
 */
public final class ModelRouter implements AutoCloseable {

    /**
     * A reference to one version, for running code on it outside the router; the version's memory is not freed
     * while a lease is open.
     */
    public final class Lease implements AutoCloseable {
        private final ServedVersion served;
        private boolean closed;

        private Lease(ServedVersion served) {
            this.served = served;
        }

        /** {@return the version held} */
        public long version() {
            return served.version;
        }

        /** {@return the version's shared parameters (valid until close)} */
        public MemorySegment params() {
            return served.params;
        }

        /** Drops the reference. */
        @Override
        public synchronized void close() {
            if (!closed) {
                closed = true;
                served.release();
            }
        }
    }

    private record Request(INDArray features, long rows, long pinned, CompletableFuture<Prediction> answer,
                           long arrivedNanos) {
    }

    private final class Model {
        /** The sign bit of {@link #admitted}: set by {@link #undeploy}, after which no request is admitted. */
        static final long NO_ADMISSION = Long.MIN_VALUE;
        final String name;
        final ArrayBlockingQueue<Request> queue;
        volatile ServedVersion current;
        volatile ServedVersion previous;
        long lastVersion;
        final Timer duration;
        final Timer queued;
        final DistributionSummary batchSize;
        final Counter swaps;
        final Map<String, Counter> outcomes = new ConcurrentHashMap<>();
        /** True while the model is on the ready list or a worker forms its batch (the batching token). */
        final AtomicBoolean scheduled = new AtomicBoolean();
        /** A request that did not fit the last batch; starts the next one (read and written by the token holder). */
        Request carried;
        /**
         * Requests admitted and not yet answered (or refused, or timed out), plus {@link #NO_ADMISSION} once the model
         * is undeployed: whoever brings it to exactly {@code NO_ADMISSION} (the last request to leave, or undeploy
         * when none is in) drops the router's references to the versions.
         */
        final AtomicLong admitted = new AtomicLong();
        /** Set (under the model's monitor) by {@link #undeploy}; a deploy that finds it takes a new model object. */
        boolean undeployed;
        /** Completes when an undeployed model has let go of its versions. */
        final CompletableFuture<Void> released = new CompletableFuture<>();
        /** The meters registered for this model, removed from the registry by {@link #undeploy}. */
        final List<Meter> meters = new ArrayList<>();
        /** Guards {@link #metersRemoved} against a first-time outcome counter registering after the removal. */
        private final Object meterLock = new Object();
        private boolean metersRemoved;

        Model(String name) {
            this.name = name;
            this.lastVersion = lastVersions.getOrDefault(name, 0L);
            this.queue = new ArrayBlockingQueue<>(options.queueCapacity());
            this.duration = Timer.builder(ServingMeters.REQUEST_DURATION.meterName()).tag("model", name)
                    .description("request arrival to answer").publishPercentileHistogram().register(registry);
            this.queued = Timer.builder(ServingMeters.QUEUE_DURATION.meterName()).tag("model", name)
                    .description("request arrival to its batch's start").publishPercentileHistogram().register(registry);
            this.batchSize = DistributionSummary.builder(ServingMeters.BATCH_SIZE.meterName()).tag("model", name)
                    .description("rows per batch").publishPercentileHistogram().register(registry);
            this.swaps = Counter.builder(ServingMeters.SWAPS.meterName()).tag("model", name)
                    .description("versions made current").register(registry);
            meters.addAll(List.of(duration, queued, batchSize, swaps));
            meters.add(Gauge.builder(ServingMeters.QUEUE_DEPTH.meterName(), queue, ArrayBlockingQueue::size)
                    .tag("model", name).description("requests waiting").register(registry));
            meters.add(Gauge.builder(ServingMeters.CURRENT_VERSION.meterName(), this,
                    m -> m.current == null ? 0 : m.current.version)
                    .tag("model", name).description("the version new requests go to").register(registry));
        }

        void count(String outcome) {
            Counter c = outcomes.get(outcome);
            if (c == null) {
                synchronized (meterLock) {
                    if (metersRemoved) {
                        return; // undeployed: its answers still complete, but nothing registers again
                    }
                    c = outcomes.computeIfAbsent(outcome, o -> Counter.builder(ServingMeters.REQUESTS.meterName())
                            .tag("model", name).tag("outcome", o).description("requests by outcome")
                            .register(registry));
                }
            }
            c.increment(); // after removal this counts into a meter no registry reports: harmless
        }

        /** Takes the registry's meters of this model away (a redeploy of the name registers new ones). */
        void removeMeters() {
            synchronized (meterLock) {
                metersRemoved = true;
                meters.forEach(registry::remove);
                outcomes.values().forEach(registry::remove);
            }
        }

        /** {@return true when a request may enter (the model is not undeployed); pair it with {@link #leave}} */
        boolean admit() {
            while (true) {
                long c = admitted.get();
                if (c < 0) {
                    return false;
                }
                if (admitted.compareAndSet(c, c + 1)) {
                    return true;
                }
            }
        }

        /** An admitted request has its answer (or refusal); the last one out of an undeployed model lets go. */
        void leave() {
            if (admitted.decrementAndGet() == NO_ADMISSION) {
                letGo(this);
            }
        }

        /** Admits nobody from now on; lets go of the versions at once when no admitted request is left. */
        void stopAdmitting() {
            long before = admitted.getAndUpdate(c -> c | NO_ADMISSION);
            if (before == 0) {
                letGo(this);
            }
        }
    }

    private final SharedWeights weights;
    private final RouterOptions options;
    private final MeterRegistry registry;
    private final Map<String, Model> models = new ConcurrentHashMap<>();
    /** The last version number given per model name, kept across undeploy so that a redeploy counts on. */
    private final Map<String, Long> lastVersions = new ConcurrentHashMap<>();
    /** Undeployed models whose admitted requests are still being answered. */
    private final Set<Model> draining = ConcurrentHashMap.newKeySet();
    /** Models with queued requests, each at most once; {@link #STOP} tells a worker to leave. */
    private final LinkedBlockingQueue<Object> ready = new LinkedBlockingQueue<>();
    private final List<Thread> workers = new ArrayList<>();
    /** Each worker's batch buffers, by worker index. */
    private final List<WorkerBuffers> workerBuffers = new ArrayList<>();
    private final long maxWaitNanos;
    private final AtomicInteger freedVersions = new AtomicInteger();
    private static final Object STOP = new Object();
    private volatile boolean closed;
    /** Where batches run when not on this JVM's threads; null for worker threads. */
    private final ProcessWorkers processes;

    /**
     * @param weights  where versions' parameters live; this rank must own them
     * @param options  batching, queue and worker settings
     * @param registry where the per-model meters go ({@link ServingMeters}); null for a private one
     */
    public ModelRouter(SharedWeights weights, RouterOptions options, MeterRegistry registry) {
        this(weights, options, registry, null);
    }

    /**
     * A router whose batches run in worker processes: its {@code options.workers()} threads form batches as ever,
     * and each hands its batch to a worker process through {@code processes}' rings and waits for the reply.
     *
     * @param weights   where versions' parameters live; this rank must own them
     * @param options   batching, queue and worker settings ({@code workers}: batches in flight at once)
     * @param registry  where the per-model meters go; null for a private one
     * @param processes the worker processes (the caller closes them, after the router); null for worker threads
     */
    public ModelRouter(SharedWeights weights, RouterOptions options, MeterRegistry registry,
                       ProcessWorkers processes) {
        this.processes = processes;
        this.weights = Objects.requireNonNull(weights, "weights");
        this.options = Objects.requireNonNull(options, "options");
        this.registry = registry != null ? registry : new SimpleMeterRegistry();
        this.maxWaitNanos = options.maxWait().toNanos();
        for (int i = 0; i < options.workers(); i++) {
            workerBuffers.add(new WorkerBuffers(new BatchAssembler(options.maxBatch())));
        }
        for (int i = 0; i < options.workers(); i++) {
            WorkerBuffers mine = workerBuffers.get(i);
            workers.add(Thread.ofPlatform().daemon().name("symmem4j-serving-worker-" + i).start(() -> workLoop(mine)));
        }
    }

    // ------------------------------------------------------------------------------------------ versions

    /**
     * Publishes a new version of {@code model} (its first, or the next) and makes it current; the version that was
     * current is kept for {@link #rollback}, the one kept before is retired (freed once its last reader leaves).
     *
     * @param model  the model's name ({@code [A-Za-z0-9._-]+})
     * @param spec   how to build the network and the shape of one example
     * @param params the flat parameters (copied once, into the shared weights)
     * @return the new version
     * @throws IllegalArgumentException when the parameters do not fit the configuration (nothing is served then)
     */
    public long deploy(String model, ModelSpec spec, INDArray params) {
        SharedWeights.checkName(model);
        Objects.requireNonNull(spec, "spec");
        Objects.requireNonNull(params, "params");
        if (params.dataType() != spec.dataType()) {
            throw new IllegalArgumentException("model '" + model + "' parameters of dataType=" + params.dataType()
                    + " expected " + spec.dataType() + " (the configuration's data type; fix: cast them first,"
                    + " params.castTo(DataType." + spec.dataType() + "))");
        }
        checkOpen();
        if (processes != null && spec.configJson() == null) {
            throw new IllegalArgumentException("model '" + model + "': a " + spec.kind() + " cannot run in worker"
                    + " processes, which build each version's network from its configuration (fix: deploy a"
                    + " MultiLayerConfiguration or ComputationGraphConfiguration spec, or serve custom networks from a"
                    + " router with worker threads)");
        }
        while (true) {
            Model m = models.computeIfAbsent(model, this::startModel);
            synchronized (m) {
                if (m.undeployed) {
                    continue; // undeployed since the lookup: the name now takes a new model object
                }
                return deploy(m, spec, params);
            }
        }
    }

    /** Publishes and swaps in the next version of {@code m}; the caller holds its monitor. */
    private long deploy(Model m, ModelSpec spec, INDArray params) {
        String model = m.name;
        long version = m.lastVersion + 1;
        weights.publish(model, version, params);
        MemorySegment shared = weights.open(model, version);
        ServedVersion served = new ServedVersion(model, version, spec, shared, () -> free(model, version));
        try {
            served.giveBack(served.borrow()); // builds one network now: a bad configuration fails here
        } catch (RuntimeException e) {
            weights.retire(model, version);
            throw e;
        }
        m.lastVersion = version;
        lastVersions.put(model, version);
        ServedVersion retired = m.previous;
        m.previous = m.current;
        m.current = served; // the swap: batches formed from here on take this version
        m.swaps.increment();
        if (retired != null) {
            retired.release(); // the router's reference; readers still on it keep it alive
        }
        return version;
    }

    /**
     * Deploys a network's configuration and parameters as the next version of {@code model}.
     *
     * @param model        the model's name
     * @param network      the network (its parameters are copied once into the shared weights)
     * @param exampleShape one example's shape
     * @return the new version
     */
    public long deploy(String model, MultiLayerNetwork network, long... exampleShape) {
        return deploy(model, ModelSpec.of(network.getLayerWiseConfigurations(), exampleShape), network.params());
    }

    /**
     * Deploys a graph's configuration and parameters as the next version of {@code model}.
     *
     * @param model        the model's name
     * @param network      the graph (one input, one output)
     * @param exampleShape one example's shape
     * @return the new version
     */
    public long deploy(String model, ComputationGraph network, long... exampleShape) {
        return deploy(model, ModelSpec.of(network.getConfiguration(), exampleShape), network.params());
    }

    /**
     * Makes the version kept for rollback current again, and keeps the one it replaces for a roll forward (another
     * rollback). Requests in flight finish on the version they took.
     *
     * @param model the model's name
     * @return the version now current
     * @throws ServingException of kind UNKNOWN_MODEL for an unknown model, IllegalStateException when no version is kept
     */
    public long rollback(String model) {
        Model m = model(model);
        synchronized (m) {
            if (m.current == null) {
                throw unknownModel(model); // undeployed since the lookup
            }
            if (m.previous == null) {
                throw new IllegalStateException("model '" + model + "' has no version kept for rollback (current="
                        + m.current.version + " is its only one; fix: deploy another version first)");
            }
            ServedVersion back = m.previous;
            m.previous = m.current;
            m.current = back;
            m.swaps.increment();
            return back.version;
        }
    }

    /**
     * Stops serving {@code model}: requests that arrive from now on are refused as {@link Kind#UNKNOWN_MODEL} (HTTP
     * 404), those admitted before are answered on the version they run on, and then the router lets go of the
     * model's versions (current and kept for rollback): each one's shared memory is freed when its last reader (a
     * running batch, a {@link Lease}) leaves, as a retired version's is. The model's meters are removed from the
     * registry now. Deploying the same name again starts a new model, whose first version numbers on from the last
     * one (an answer's version always names one set of parameters).
     *
     * @param model the model's name
     * @return completes once every request admitted before this call has its answer and the router has let go of
     *         the versions (a version a lease still holds is freed when the lease closes)
     * @throws ServingException UNKNOWN_MODEL when the model is not served, CLOSED after {@link #close}
     */
    public CompletableFuture<Void> undeploy(String model) {
        checkOpen();
        Model m = model(model);
        synchronized (m) {
            if (m.undeployed) { // a concurrent undeploy won
                throw unknownModel(model);
            }
            m.undeployed = true;
            draining.add(m);
            models.remove(model, m); // from here on, model(name) refuses new requests
            m.removeMeters();
        }
        m.stopAdmitting();
        return m.released.copy();
    }

    /**
     * The last admitted request of an undeployed model has left (or none was in): drop the router's references to
     * its versions and fail what a timed-out request left in the queue (its answer is complete already).
     */
    private void letGo(Model m) {
        ServedVersion current;
        ServedVersion previous;
        synchronized (m) {
            current = m.current;
            previous = m.previous;
            m.current = null; // a batch formed from leftovers finds no version and fails (its answers are complete)
            m.previous = null;
        }
        failQueued(m);
        draining.remove(m);
        if (previous != null) {
            previous.release();
        }
        if (current != null) {
            current.release();
        }
        m.released.complete(null);
    }

    /**
     * @param model the model's name
     * @return the version new requests go to
     */
    public long currentVersion(String model) {
        return current(model).version;
    }

    /**
     * @param model the model's name
     * @return the versions served (current first, then the one kept for rollback)
     */
    public List<Long> servedVersions(String model) {
        Model m = model(model);
        synchronized (m) {
            if (m.current == null) {
                throw unknownModel(model); // undeployed since the lookup
            }
            return m.previous == null ? List.of(m.current.version) : List.of(m.current.version, m.previous.version);
        }
    }

    /** {@return the models served, by name} */
    public Set<String> models() {
        return new TreeSet<>(models.keySet());
    }

    /** @param model the model's name @return its spec (of the current version) */
    public ModelSpec spec(String model) {
        return current(model).spec;
    }

    private ServedVersion current(String model) {
        ServedVersion v = model(model).current;
        if (v == null) {
            throw unknownModel(model); // undeployed since the lookup
        }
        return v;
    }

    /** {@return versions whose shared memory was freed (retired and left by their last reader)} */
    public int freedVersions() {
        return freedVersions.get();
    }

    /**
     * Holds a served version (current or kept for rollback) until the lease is closed.
     *
     * @param model   the model's name
     * @param version the version, or 0 for the current one
     * @return the lease
     */
    public Lease lease(String model, long version) {
        return new Lease(acquire(model(model), version));
    }

    /** {@return true while the router is open and every model has a current version} */
    public boolean isReady() {
        return !closed && models.values().stream().allMatch(m -> m.current != null);
    }

    // ------------------------------------------------------------------------------------------ requests

    /**
     * Queues a request for the current version of {@code model}.
     *
     * @param model    the model's name
     * @param features {@code [rows, ...exampleShape]}, at most {@code maxBatch} rows
     * @return the answer; fails with a {@link ServingException}
     */
    public CompletableFuture<Prediction> predict(String model, INDArray features) {
        return predict(model, 0, features);
    }

    /**
     * Queues a request for one version of {@code model} (0: the current one).
     *
     * @param model    the model's name
     * @param version  a served version, or 0 for the current one
     * @param features {@code [rows, ...exampleShape]}, at most {@code maxBatch} rows
     * @return the answer; fails with a {@link ServingException} (unknown model or version, bad input, overloaded,
     *         timeout, closed, failed)
     */
    public CompletableFuture<Prediction> predict(String model, long version, INDArray features) {
        long arrived = System.nanoTime();
        Model m;
        try {
            m = model(model);
            checkOpen();
            if (version != 0) {
                checkServed(m, version);
            }
        } catch (ServingException e) {
            return CompletableFuture.failedFuture(e);
        }
        if (!m.admit()) {
            return CompletableFuture.failedFuture(unknownModel(model)); // undeployed since the lookup
        }
        CompletableFuture<Prediction> answer = new CompletableFuture<>();
        boolean queued = false;
        try {
            Objects.requireNonNull(features, "features");
            ServedVersion current = m.current;
            if (current == null) {
                throw unknownModel(model); // undeployed and let go since the lookup
            }
            ModelSpec spec = current.spec;
            long rows = spec.rowsOf(model, features);
            if (rows > options.maxBatch()) {
                throw new ServingException(Kind.BAD_INPUT, "model '" + model + "' request of rows=" + rows
                        + " expected at most maxBatch=" + options.maxBatch() + " (fix: split it into requests of at most"
                        + " " + options.maxBatch() + " rows, or raise RouterOptions.maxBatch)");
            }
            INDArray input = features.dataType() == spec.dataType() ? features : features.castTo(spec.dataType());
            if (!m.queue.offer(new Request(input, rows, version, answer, arrived))) {
                throw new ServingException(Kind.OVERLOADED, "model '" + model + "' is overloaded: queue of capacity="
                        + options.queueCapacity() + " is full (fix: retry later, or raise RouterOptions.workers or"
                        + " queueCapacity)");
            }
            queued = true;
            answer.whenComplete((p, t) -> m.leave()); // answered, failed or timed out: the request has left
            schedule(m);
            if (closed) { // raced with close(): fail what close's last drain may have missed
                failQueued(m);
            }
        } catch (ServingException e) {
            m.count(outcome(e.kind()));
            return CompletableFuture.failedFuture(e);
        } finally {
            if (!queued) {
                m.leave();
            }
        }
        return answer.orTimeout(options.requestTimeout().toNanos(), TimeUnit.NANOSECONDS).exceptionallyCompose(t -> {
            if (t instanceof TimeoutException) {
                m.count("timeout");
                return CompletableFuture.failedFuture(new ServingException(Kind.TIMEOUT, "model '" + model
                        + "': no answer within requestTimeout=" + options.requestTimeout() + " (the workers are"
                        + " behind; fix: raise RouterOptions.workers, or RouterOptions.requestTimeout)", t));
            }
            return CompletableFuture.failedFuture(t);
        });
    }

    /** Puts {@code m} on the ready list unless it is there already or a worker is forming its batch. */
    private void schedule(Model m) {
        if (m.scheduled.compareAndSet(false, true)) {
            ready.offer(m);
        }
    }

    /**
     * Gives back the batching token after a batch was formed: the model goes back on the ready list when requests
     * are left, so another worker can form the next batch while this one runs its own.
     */
    private void unschedule(Model m) {
        if (m.carried != null || !m.queue.isEmpty()) {
            ready.offer(m); // still scheduled: the token passes to the next worker that takes it
            return;
        }
        m.scheduled.set(false);
        if (!m.queue.isEmpty()) { // a request arrived after the check and saw the token held: take it again
            schedule(m);
        }
    }

    private void workLoop(WorkerBuffers assembler) {
        while (true) {
            Object next;
            try {
                next = ready.take();
            } catch (InterruptedException e) {
                continue; // workers leave on STOP only (close sends one per worker): requests never lose a worker
            }
            if (next == STOP) {
                assembler.lock.lock();
                try {
                    assembler.assembler.close(); // the router is closing: free this worker's buffers now
                } finally {
                    assembler.lock.unlock();
                }
                return;
            }
            Model m = (Model) next;
            List<Request> batch;
            try {
                batch = formBatch(m);
            } finally {
                unschedule(m);
            }
            if (batch.isEmpty()) {
                continue;
            }
            if (closed) {
                batch.forEach(r -> fail(m, r, closedFailure(m)));
                continue;
            }
            runBatch(m, batch, assembler);
            sweep(assembler); // a sweep asked for while the batch held the buffers
        }
    }

    /**
     * Takes up to {@code maxBatch} rows of queued requests (the carried one first), waiting for more until the
     * first request's {@code maxWait} has passed; called by the worker holding the model's batching token.
     */
    private List<Request> formBatch(Model m) {
        List<Request> batch = new ArrayList<>();
        Request first = m.carried != null ? m.carried : m.queue.poll();
        m.carried = null;
        if (first == null) {
            return batch;
        }
        batch.add(first);
        long rows = first.rows;
        long deadline = first.arrivedNanos + maxWaitNanos;
        while (rows < options.maxBatch()) {
            Request next = m.queue.poll();
            if (next == null) {
                long wait = deadline - System.nanoTime();
                if (wait <= 0 || closed) {
                    break;
                }
                try {
                    next = m.queue.poll(wait, TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    break; // run what was formed
                }
                if (next == null) {
                    break;
                }
            }
            if (rows + next.rows > options.maxBatch()) {
                m.carried = next; // starts the next batch
                break;
            }
            batch.add(next);
            rows += next.rows;
        }
        return batch;
    }

    /** Runs a batch, one version group after another (requests pinned to a version run on that version). */
    private void runBatch(Model m, List<Request> batch, WorkerBuffers assembler) {
        long pinned = batch.get(0).pinned;
        boolean oneVersion = true;
        for (Request r : batch) {
            oneVersion &= r.pinned == pinned;
        }
        if (oneVersion) {
            runOn(m, pinned, batch, assembler);
            return;
        }
        Map<Long, List<Request>> byVersion = new LinkedHashMap<>();
        for (Request r : batch) {
            byVersion.computeIfAbsent(r.pinned, v -> new ArrayList<>()).add(r);
        }
        byVersion.forEach((version, requests) -> runOn(m, version, requests, assembler));
    }

    private void runOn(Model m, long version, List<Request> requests, WorkerBuffers assembler) {
        ServedVersion served;
        try {
            served = acquire(m, version);
        } catch (ServingException e) {
            requests.forEach(r -> fail(m, r, e));
            return;
        }
        if (processes != null) {
            runInProcess(m, served, requests, assembler);
            return;
        }
        INDArray out = null;
        try {
            out = run(m, served, requests, assembler);
        } catch (RuntimeException | Error e) { // a worker never dies with requests unanswered
            ServingException failure = new ServingException(Kind.FAILED, "model '" + m.name + "' version="
                    + served.version + ": " + e + " (fix: act on this cause, the model's own failure; when only this"
                    + " version fails, rollback(\"" + m.name + "\") serves the previous one)", e);
            requests.forEach(r -> fail(m, r, failure));
        } finally {
            // before any answer completes: a client that has its answer knows this worker has left the version (a
            // retired version is freed by then unless another reader holds it); the outputs are the batch's own
            served.release();
        }
        if (out != null) {
            answer(m, served.version, requests, out);
        }
    }

    /**
     * Sends the batch to a worker process and answers from its reply; the dispatch takes over {@code served}'s
     * reference (dropped when the worker has answered or exited), or this method drops it when nothing was sent.
     */
    private void runInProcess(Model m, ServedVersion served, List<Request> requests, WorkerBuffers buffers) {
        ProcessWorkers.Dispatch sent;
        buffers.lock.lock(); // no sweep frees the buffer while the batch is encoded from it
        try {
            INDArray features = assemble(m, requests, buffers.assembler);
            sent = processes.submit(m.name, served, features); // copies the features into the message
            m.batchSize.record(features.size(0));
        } catch (ServingException e) {
            served.release();
            requests.forEach(r -> fail(m, r, e));
            return;
        } catch (RuntimeException e) {
            served.release();
            ServingException failure = new ServingException(Kind.FAILED, "model '" + m.name + "' version="
                    + served.version + ": the batch could not be sent to a worker process: " + e + " (fix: act on"
                    + " this cause)", e);
            requests.forEach(r -> fail(m, r, failure));
            return;
        } finally {
            buffers.lock.unlock();
            sweep(buffers);
        }
        INDArray out;
        try {
            out = sent.await(m.name, options.requestTimeout());
        } catch (ServingException e) {
            requests.forEach(r -> fail(m, r, e));
            return;
        }
        answer(m, served.version, requests, out); // the reply thread released the version before completing
    }

    /** The batch's outputs (the model's own array, no view of the weights), or null when it failed the requests. */
    private INDArray run(Model m, ServedVersion served, List<Request> requests, WorkerBuffers buffers) {
        INDArray out;
        ModelSpec.Network net = null;
        BatchAssembler assembler = buffers.assembler;
        buffers.lock.lock(); // no sweep frees the buffer while the batch uses it
        try {
            INDArray features = assemble(m, requests, assembler); // this thread's reused buffer: no concat
            net = served.borrow();
            out = assembler.detach(net.output(features)); // answers outlive the buffer's next batch
            m.batchSize.record(features.size(0));
        } catch (RuntimeException e) {
            ServingException failure = new ServingException(Kind.FAILED, "model '" + m.name + "' version="
                    + served.version + " failed on a batch of requests=" + requests.size() + ": " + e + " (fix: act on"
                    + " this cause, the model's own failure; when only this version fails, rollback(\"" + m.name
                    + "\") serves the previous one)", e);
            requests.forEach(r -> fail(m, r, failure));
            return null;
        } finally {
            buffers.lock.unlock();
            if (net != null) {
                served.giveBack(net);
            }
        }
        return out;
    }

    /** Records the requests' time in the queue and assembles their features; the caller holds the buffers' lock. */
    private static INDArray assemble(Model m, List<Request> requests, BatchAssembler assembler) {
        long start = System.nanoTime();
        long rows = 0;
        List<INDArray> all = new ArrayList<>(requests.size());
        for (Request r : requests) {
            m.queued.record(start - r.arrivedNanos, TimeUnit.NANOSECONDS);
            all.add(r.features);
            rows += r.rows;
        }
        return assembler.assemble(all, rows);
    }

    /** Completes each request's answer with its rows of the batch's outputs, computed by {@code version}. */
    private void answer(Model m, long version, List<Request> requests, INDArray out) {
        long row = 0;
        for (Request r : requests) {
            INDArray mine;
            if (requests.size() == 1) {
                mine = out;
            } else {
                INDArrayIndex[] idx = new INDArrayIndex[out.rank()];
                idx[0] = NDArrayIndex.interval(row, row + r.rows);
                for (int i = 1; i < idx.length; i++) {
                    idx[i] = NDArrayIndex.all();
                }
                mine = out.get(idx); // a view: the batch's output array is this batch's alone
            }
            row += r.rows;
            m.duration.record(System.nanoTime() - r.arrivedNanos, TimeUnit.NANOSECONDS);
            if (r.answer.complete(new Prediction(m.name, version, mine))) {
                m.count("ok");
            }
        }
    }

    private void fail(Model m, Request r, ServingException e) {
        if (r.answer.completeExceptionally(e)) {
            m.count(outcome(e.kind()));
        }
    }

    private static String outcome(Kind kind) {
        return kind.name().toLowerCase(java.util.Locale.ROOT);
    }

    private ServedVersion acquire(Model m, long version) {
        while (true) {
            ServedVersion v;
            synchronized (m) {
                v = version == 0 ? m.current : checkServed(m, version);
            }
            if (v == null) {
                throw unknownModel(m.name); // undeployed, and let go of its versions
            }
            if (v.tryAcquire()) {
                return v;
            }
            // retired and freed between the read and the acquire (only a pinned version can be): look again
        }
    }

    private ServedVersion checkServed(Model m, long version) {
        synchronized (m) {
            if (m.current == null) {
                throw unknownModel(m.name);
            }
            if (m.current != null && m.current.version == version) {
                return m.current;
            }
            if (m.previous != null && m.previous.version == version) {
                return m.previous;
            }
            throw new ServingException(Kind.UNKNOWN_MODEL, "model '" + m.name + "' version=" + version
                    + " is not served (served: " + (m.previous == null ? List.of(m.current.version)
                    : List.of(m.current.version, m.previous.version)) + "; fix: ask for one of those, or for no"
                    + " version to get the current one)");
        }
    }

    private Model model(String name) {
        Model m = name == null ? null : models.get(name);
        if (m == null || m.current == null) {
            throw unknownModel(name);
        }
        return m;
    }

    private ServingException unknownModel(String name) {
        return new ServingException(Kind.UNKNOWN_MODEL, "model '" + name + "' is not served (models: " + models()
                + "; fix: use one of those names, or deploy it first)");
    }

    private Model startModel(String name) {
        return new Model(name);
    }

    private void free(String model, long version) {
        weights.retire(model, version);
        freedVersions.incrementAndGet();
        for (WorkerBuffers w : workerBuffers) {
            w.sweep = true; // before the try: a worker that holds the lock sees it when it lets go
            sweep(w);
        }
    }

    /**
     * One worker's batch buffers. A batch holds {@link #lock} while it assembles and runs; a sweep (after a version
     * was freed) takes it only with {@code tryLock}, so freeing never waits for a batch: a busy worker's sweep is left
     * in {@link #sweep} and done by whoever lets go of the lock next (the worker after its batch, or the sweeper).
     */
    private static final class WorkerBuffers {
        final BatchAssembler assembler;
        final java.util.concurrent.locks.ReentrantLock lock = new java.util.concurrent.locks.ReentrantLock();
        volatile boolean sweep;

        WorkerBuffers(BatchAssembler assembler) {
            this.assembler = assembler;
        }
    }

    /**
     * Frees the worker's buffers of shapes no served version has, if it is asked to and its buffers are not in use;
     * every holder of the lock calls this after letting go, so no request is left behind while the lock is free.
     */
    private void sweep(WorkerBuffers w) {
        while (w.sweep && w.lock.tryLock()) {
            try {
                if (w.sweep) {
                    w.sweep = false;
                    w.assembler.retainOnly(liveShapes());
                }
            } finally {
                w.lock.unlock();
            }
        }
    }

    /**
     * The (data type, example shape) of every version a model serves now (current or kept for rollback); read
     * without the models' monitors, since a free may run inside one model's deploy. A version retired a moment ago
     * may still be running a batch: that worker holds its lock, so its buffer is not swept under it, and a buffer
     * swept too early is only made again.
     */
    private Set<BatchAssembler.Shape> liveShapes() {
        Set<BatchAssembler.Shape> live = new java.util.HashSet<>();
        for (Model m : models.values()) {
            for (ServedVersion v : new ServedVersion[] {m.current, m.previous}) {
                if (v != null) {
                    live.add(BatchAssembler.Shape.of(v.spec.dataType(), v.spec.exampleShape()));
                }
            }
        }
        return live;
    }

    /** {@return the shapes the workers hold batch buffers for (waits for running batches)} */
    Set<BatchAssembler.Shape> batchBufferShapes() {
        Set<BatchAssembler.Shape> all = new java.util.HashSet<>();
        for (WorkerBuffers w : workerBuffers) {
            w.lock.lock();
            try {
                all.addAll(w.assembler.shapes());
            } finally {
                w.lock.unlock();
            }
        }
        return all;
    }

    private void checkOpen() {
        if (closed) {
            throw new ServingException(Kind.CLOSED, "the router is closed (fix: use the router before close(), or"
                    + " create a new one)");
        }
    }

    private ServingException closedFailure(Model m) {
        return new ServingException(Kind.CLOSED, "model '" + m.name + "': the router closed before this request was"
                + " answered (fix: close the router only after the answers you wait for arrived)");
    }

    /** Fails every request queued for {@code m} (after close). */
    private void failQueued(Model m) {
        List<Request> left = new ArrayList<>();
        m.queue.drainTo(left);
        for (Request r : left) {
            fail(m, r, closedFailure(m));
        }
    }

    /** Stops taking requests, fails those still queued, lets running batches finish, then frees every version. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (int i = 0; i < workers.size(); i++) {
            ready.offer(STOP); // after the models already on the list: their queued requests fail as CLOSED
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        for (Thread w : workers) {
            try {
                w.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
            if (w.isAlive()) {
                throw new IllegalStateException("model router: batches still running 30 s after close, expected"
                        + " them done (fix: find the model call that hangs, e.g. with jstack, or lower"
                        + " RouterOptions.maxBatch so that one batch takes less)");
            }
        }
        List<Model> all = new ArrayList<>(models.values());
        all.addAll(draining);
        for (Model m : all) {
            if (m.carried != null) { // the workers have left: nobody holds the token
                fail(m, m.carried, closedFailure(m));
                m.carried = null;
            }
            failQueued(m); // an undeployed model's last request to leave lets go of its versions
            synchronized (m) {
                if (m.undeployed) {
                    continue;
                }
                if (m.previous != null) {
                    m.previous.release();
                }
                if (m.current != null) {
                    m.current.release();
                }
            }
        }
    }
}
