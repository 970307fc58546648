package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
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
 * The router runs on the weights' owner rank (it publishes and retires them). This class keeps the model table,
 * the versions, admission and scheduling; each model's queue, meters and admission count are a {@code ServedModel},
 * and running a formed batch (on worker threads or in worker processes, with the workers' batch buffers) is the
 * {@code BatchRunner}'s.
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

    private final SharedWeights weights;
    private final RouterOptions options;
    private final MeterRegistry registry;
    private final Map<String, ServedModel> models = new ConcurrentHashMap<>();
    /** The last version number given per model name, kept across undeploy so that a redeploy counts on. */
    private final Map<String, Long> lastVersions = new ConcurrentHashMap<>();
    /** Undeployed models whose admitted requests are still being answered. */
    private final Set<ServedModel> draining = ConcurrentHashMap.newKeySet();
    /** Models with queued requests, each at most once; {@link #STOP} tells a worker to leave. */
    private final LinkedBlockingQueue<Object> ready = new LinkedBlockingQueue<>();
    private final List<Thread> workers = new ArrayList<>();
    /** Runs the batches the workers form, on worker threads or in worker processes, and keeps their buffers. */
    private final BatchRunner batches;
    private final long maxWaitNanos;
    private final AtomicInteger freedVersions = new AtomicInteger();
    /** The host-path configurations (kind, example shape, JSON) this router warmed up; one entry per network served. */
    private final Set<String> warmedConfigs = ConcurrentHashMap.newKeySet();
    private static final Object STOP = new Object();
    private volatile boolean closed;

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
        this.weights = Objects.requireNonNull(weights, "weights");
        this.options = Objects.requireNonNull(options, "options");
        this.registry = registry != null ? registry : new SimpleMeterRegistry();
        this.maxWaitNanos = options.maxWait().toNanos();
        this.batches = new BatchRunner(options, processes, this::acquire, this::liveShapes);
        for (int i = 0; i < options.workers(); i++) {
            BatchRunner.WorkerBuffers mine = batches.buffers(i);
            workers.add(Thread.ofPlatform().daemon().name("symmem4j-serving-worker-" + i).start(() -> workLoop(mine)));
        }
    }

    // ------------------------------------------------------------------------------------------ versions

    /**
     * Publishes a new version of {@code model} (its first, or the next) and makes it current; the version that was
     * current is kept for {@link #rollback}, the one kept before is retired (freed once its last reader leaves). A
     * {@link ModelSpec#ofHostPath} spec is first warmed up on this thread (bounded, a few hundred milliseconds, once per
     * configuration in a router with worker threads), so that its first requests do not wait for the JIT.
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
        if (batches.inProcesses() && spec.configJson() == null) {
            throw new IllegalArgumentException("model '" + model + "': a " + spec.kind() + " cannot run in worker"
                    + " processes, which build each version's network from its configuration (fix: deploy a"
                    + " MultiLayerConfiguration or ComputationGraphConfiguration spec, or serve custom networks from a"
                    + " router with worker threads)");
        }
        warmUp(model, spec, params);
        while (true) {
            ServedModel m = models.computeIfAbsent(model, this::startModel);
            synchronized (m) {
                if (m.undeployed) {
                    continue; // undeployed since the lookup: the name now takes a new model object
                }
                return deploy(m, spec, params);
            }
        }
    }

    /**
     * Runs a host-path spec's warm-up ({@link ModelSpec#warmUp}) once per configuration and example shape in this
     * router, on the deploying thread, before the version is published: its first requests then find the loops
     * compiled or queued for compiling. Outside the model's monitor, so a redeploy does not hold up the batches of the
     * version being replaced. Worker processes are other JVMs, which this JVM's JIT does not warm: skipped there.
     */
    private void warmUp(String model, ModelSpec spec, INDArray params) {
        if (batches.inProcesses()) {
            return;
        }
        String key = spec.kind() + " " + Arrays.toString(spec.exampleShape()) + " " + spec.configJson();
        if (!warmedConfigs.contains(key) && spec.warmUp(model, params, options.maxBatch()) > 0) {
            warmedConfigs.add(key); // a later version of the same network (a hot swap) runs the same compiled loops
        }
    }

    /** Publishes and swaps in the next version of {@code m}; the caller holds its monitor. */
    private long deploy(ServedModel m, ModelSpec spec, INDArray params) {
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
        ServedModel m = model(model);
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
        ServedModel m = model(model);
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
    private void letGo(ServedModel m) {
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
        ServedModel m = model(model);
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
        ServedModel m;
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
        AtomicBoolean claimed = new AtomicBoolean();
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
            if (!m.queue.offer(new QueuedRequest(input, rows, version, answer, arrived, claimed))) {
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
            m.count(ServedModel.outcome(e.kind()));
            return CompletableFuture.failedFuture(e);
        } finally {
            if (!queued) {
                m.leave();
            }
        }
        // The timeout settles the request like a worker does (claim, count, complete), so no answer is counted
        // twice or seen before it is counted; the timer is a future of its own, cancelled when the answer comes.
        CompletableFuture<Void> timer = new CompletableFuture<>();
        answer.whenComplete((p, t) -> timer.complete(null));
        timer.orTimeout(options.requestTimeout().toNanos(), TimeUnit.NANOSECONDS).whenComplete((v, t) -> {
            if (t instanceof TimeoutException && claimed.compareAndSet(false, true)) {
                m.count("timeout");
                answer.completeExceptionally(new ServingException(Kind.TIMEOUT, "model '" + model
                        + "': no answer within requestTimeout=" + options.requestTimeout() + " (the workers are"
                        + " behind; fix: raise RouterOptions.workers, or RouterOptions.requestTimeout)", t));
            }
        });
        return answer.copy(); // the caller's own future: cancelling it does not settle the queued request
    }

    /** Puts {@code m} on the ready list unless it is there already or a worker is forming its batch. */
    private void schedule(ServedModel m) {
        if (m.scheduled.compareAndSet(false, true)) {
            ready.offer(m);
        }
    }

    /**
     * Gives back the batching token after a batch was formed: the model goes back on the ready list when requests
     * are left, so another worker can form the next batch while this one runs its own.
     */
    private void unschedule(ServedModel m) {
        if (m.carried != null || !m.queue.isEmpty()) {
            ready.offer(m); // still scheduled: the token passes to the next worker that takes it
            return;
        }
        m.scheduled.set(false);
        if (!m.queue.isEmpty()) { // a request arrived after the check and saw the token held: take it again
            schedule(m);
        }
    }

    private void workLoop(BatchRunner.WorkerBuffers assembler) {
        while (true) {
            Object next;
            try {
                next = ready.take();
            } catch (InterruptedException e) {
                continue; // workers leave on STOP only (close sends one per worker): requests never lose a worker
            }
            if (next == STOP) {
                assembler.close(); // the router is closing: free this worker's buffers now
                return;
            }
            ServedModel m = (ServedModel) next;
            List<QueuedRequest> batch;
            try {
                batch = formBatch(m);
            } finally {
                unschedule(m);
            }
            if (batch.isEmpty()) {
                continue;
            }
            if (closed) {
                batch.forEach(r -> m.fail(r, closedFailure(m)));
                continue;
            }
            batches.runBatch(m, batch, assembler);
        }
    }

    /**
     * Takes up to {@code maxBatch} rows of queued requests (the carried one first), waiting for more until the
     * first request's {@code maxWait} has passed; called by the worker holding the model's batching token.
     */
    private List<QueuedRequest> formBatch(ServedModel m) {
        List<QueuedRequest> batch = new ArrayList<>();
        QueuedRequest first = m.carried != null ? m.carried : m.queue.poll();
        m.carried = null;
        if (first == null) {
            return batch;
        }
        batch.add(first);
        long rows = first.rows();
        long deadline = first.arrivedNanos() + maxWaitNanos;
        while (rows < options.maxBatch()) {
            QueuedRequest next = m.queue.poll();
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
            if (rows + next.rows() > options.maxBatch()) {
                m.carried = next; // starts the next batch
                break;
            }
            batch.add(next);
            rows += next.rows();
        }
        return batch;
    }


    private ServedVersion acquire(ServedModel m, long version) {
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

    private ServedVersion checkServed(ServedModel m, long version) {
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

    private ServedModel model(String name) {
        ServedModel m = name == null ? null : models.get(name);
        if (m == null || m.current == null) {
            throw unknownModel(name);
        }
        return m;
    }

    private ServingException unknownModel(String name) {
        return new ServingException(Kind.UNKNOWN_MODEL, "model '" + name + "' is not served (models: " + models()
                + "; fix: use one of those names, or deploy it first)");
    }

    private ServedModel startModel(String name) {
        return new ServedModel(name, lastVersions.getOrDefault(name, 0L), options.queueCapacity(), registry,
                this::letGo);
    }

    private void free(String model, long version) {
        weights.retire(model, version);
        freedVersions.incrementAndGet();
        batches.versionFreed();
    }


    /**
     * The (data type, example shape) of every version a model serves now (current or kept for rollback); read
     * without the models' monitors, since a free may run inside one model's deploy. A version retired a moment ago
     * may still be running a batch: that worker holds its lock, so its buffer is not swept under it, and a buffer
     * swept too early is only made again.
     */
    private Set<BatchAssembler.Shape> liveShapes() {
        Set<BatchAssembler.Shape> live = new java.util.HashSet<>();
        for (ServedModel m : models.values()) {
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
        return batches.batchBufferShapes();
    }

    private void checkOpen() {
        if (closed) {
            throw new ServingException(Kind.CLOSED, "the router is closed (fix: use the router before close(), or"
                    + " create a new one)");
        }
    }

    private ServingException closedFailure(ServedModel m) {
        return new ServingException(Kind.CLOSED, "model '" + m.name + "': the router closed before this request was"
                + " answered (fix: close the router only after the answers you wait for arrived)");
    }

    /** Fails every request queued for {@code m} (after close). */
    private void failQueued(ServedModel m) {
        List<QueuedRequest> left = new ArrayList<>();
        m.queue.drainTo(left);
        for (QueuedRequest r : left) {
            m.fail(r, closedFailure(m));
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
        List<ServedModel> all = new ArrayList<>(models.values());
        all.addAll(draining);
        for (ServedModel m : all) {
            if (m.carried != null) { // the workers have left: nobody holds the token
                m.fail(m.carried, closedFailure(m));
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
