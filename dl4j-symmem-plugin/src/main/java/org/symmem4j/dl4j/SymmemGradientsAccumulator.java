package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.api.StepFunction;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.solvers.accumulation.GradientsAccumulator;
import org.deeplearning4j.optimize.solvers.accumulation.IndexedTail;
import org.deeplearning4j.optimize.solvers.accumulation.Registerable;
import org.deeplearning4j.parallelism.ParallelWrapper;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.dl4j.train.TrainerOptions;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * symmem4j's exact all-reduce inside DL4J's own {@link ParallelWrapper}: its {@code CUSTOM}
 * training mode with this accumulator. Existing ParallelWrapper code changes by two lines:
 *
 * <pre>{@code
 * ParallelWrapper wrapper = new ParallelWrapper.Builder<>(model)
 *         .workers(4)
 *         .trainingMode(ParallelWrapper.TrainingMode.CUSTOM)                 // + line 1
 *         .gradientsAccumulator(SymmemGradientsAccumulator.attach(model))    // + line 2
 *         .build();
 * wrapper.fit(iterator);
 * }</pre>
 *
 * <p>What it does. {@link #attach} puts a gradient hook (a {@link TrainingListener}) on the model;
 * {@code ParallelWrapper.Builder.build()} moves the model's listeners to the wrapper
 * (ParallelWrapper.java:957-968) and every trainer hands them to its replica
 * (DefaultTrainer.postInit, DefaultTrainer.java:272-282: one shared instance, as the hook is not a
 * {@code RoutingIterationListener}). DL4J calls the hook's {@code onGradientCalculation} on each
 * trainer's thread after backprop has filled the replica's flat gradient view and before its updater
 * runs (BaseOptimizer.gradientAndScore). There the hook all-reduces that view in place (registered as
 * symmetric memory: no copy) over the round's workers and divides the sum by the round's examples,
 * so every replica's own updater applies the gradient one model would compute on the round's merged
 * batch: replicas stay bitwise identical, and training equals plain {@code fit} on each round's
 * merged batch (to rounding). Replicas have DL4J's own division by their minibatch switched off for
 * that (each would divide by its own batch size); the user's model gets its setting back after
 * each {@code fit}.
 *
 * <p>The accumulator side: ParallelWrapper calls {@link #registerConsumers} on its own thread before
 * each round with the number of workers that got a batch (ParallelWrapper.java:569-571), so a short
 * last round gets a group of its own size (the idle trainers' replicas are discarded at the end of
 * {@code fit}; the user's model, trainer 0's replica, always takes part); {@link #reset()} at the end
 * of each {@code fit} (ParallelWrapper.close, line 184) drops the groups and restores the user's
 * model. DL4J's optimizer calls {@link #storeUpdate} and {@link #applyUpdate} after the updater
 * (StochasticGradientDescent.java:82-87): the update is already the same on every replica, so
 * {@code storeUpdate} only checks that the hook ran and {@code applyUpdate} applies the update as
 * DL4J does without an accumulator ({@code stepFunction.step(params, update)}). DL4J's threshold
 * encoding is never used.
 *
 * <p>Refused at {@link #attach}, with what was expected, what was found and the fix: layers whose
 * gradient view holds state updates (BatchNormalization's running statistics, center loss; use
 * {@link SymmemParallelWrapper}, which merges them), truncated BPTT, OCNNOutputLayer. Refused when
 * training starts: a ParallelWrapper in AVERAGING mode (it drops the accumulator), a replica whose
 * hook was removed ({@code model.setListeners} after {@link #attach}).
 *
 * <p>After {@code fit} the user's model keeps what ParallelWrapper leaves on it: this accumulator in
 * its optimizer and the wrapper's listeners (the hook among them). Outside a ParallelWrapper round
 * both do nothing beyond plain DL4J: a later {@code model.fit(...)} trains as without them.
 */
public final class SymmemGradientsAccumulator implements GradientsAccumulator, Registerable {

    private static final long serialVersionUID = 1L;
    private static final Logger log = LoggerFactory.getLogger(SymmemGradientsAccumulator.class);

    /**
     * How ParallelWrapper names its training threads (ParallelWrapper.init, ParallelWrapper.java:160):
     * the thread that runs trainer {@code i} (and replica {@code i}, fed batch {@code i} of each round)
     * is named with suffix {@code i}. The threads come from a fixed pool whose factory numbers them in
     * creation order, and trainer {@code i} is the {@code i}-th task submitted (line 666), so thread
     * {@code i} runs trainer {@code i}; the numbering restarts with each fit (init(), line 146).
     */
    static final String TRAINING_THREAD_PREFIX = "ParallelWrapper training thread ";

    /** One round's group: its world, the number of workers that got a batch, and a generation number. */
    private record Round(InJvmWorld world, int participants, long generation) {
    }

    private final transient Model userModel;
    private final transient GradientHook hook = new GradientHook();
    private final transient Reducer reducer = Reducer.forThisJvm();
    private final transient SyncMetrics metrics;
    private final transient AlgorithmPolicy policy;
    /** The bound of every wait of a round's all-reduce. */
    private final Duration timeout;
    /** The largest gradient bucket, in bytes. */
    private final long bucketBytes;
    /** The user's model's own setting: whether one model divides the summed gradient by its batch size. */
    private final boolean userDividesByMinibatch;
    /** The user's model's training workspace mode, which ParallelWrapper overwrites (DefaultTrainer.java:326-327, 357). */
    private final transient WorkspaceMode userTrainingWorkspaceMode;
    /**
     * The user's MultiLayerNetwork's updater (with its state: Adam's moments, momentum), taken in the
     * hook of trainer 0 during a fit, put back by {@link #reset()}: at the end of each fit
     * ParallelWrapper calls {@code clear()} on trainer 0's replica, the user's model
     * (DefaultTrainer.java:456), and MultiLayerNetwork.clear() drops its solver and with it the
     * updater (MultiLayerNetwork.java:2838-2846). Written by trainer 0's thread, read by
     * ParallelWrapper's thread after the trainers stopped (their shutdown handshake orders them).
     */
    private transient volatile org.deeplearning4j.nn.api.Updater userUpdater;

    /**
     * The current round, or null outside a ParallelWrapper fit. Written by ParallelWrapper's thread in
     * {@link #registerConsumers} and {@link #reset}, while no trainer is inside a round; read by the
     * trainers in the hook. Its volatile write publishes the world (release); the hook's volatile read
     * acquires it. ParallelWrapper's feed queue (a LinkedBlockingQueue put after registerConsumers,
     * polled by the trainer) orders them as well.
     */
    private transient volatile Round round;
    private transient long generations;
    /** Each replica's state, by model identity; entries are created and used by the replica's trainer thread. */
    private final transient Map<Model, WorkerState> workers = new IdentityHashMap<>();
    /** The worker state of the replica this thread trains, for {@link #storeUpdate}, which is not given the model. */
    private final transient ThreadLocal<WorkerState> current = new ThreadLocal<>();

    private SymmemGradientsAccumulator(Model model, Builder b) {
        this.userModel = model;
        this.timeout = b.timeout;
        this.bucketBytes = b.bucketBytes;
        this.policy = b.policy != null ? b.policy : AlgorithmPolicy.calibrated();
        this.metrics = new SyncMetrics(Transport.HOST_IN_JVM);
        this.userDividesByMinibatch = model.conf().isMiniBatch();
        this.userTrainingWorkspaceMode = ModelReplica.of(model).trainingWorkspaceMode();
    }

    /**
     * Checks {@code model}, puts the gradient hook on it, and returns the accumulator to pass to
     * {@code ParallelWrapper.Builder.gradientsAccumulator(...)} with {@code trainingMode(CUSTOM)}.
     * Call it after the model's own listeners are set ({@code setListeners} replaces the hook) and
     * before {@code build()}, which moves the model's listeners, the hook among them, to the wrapper.
     *
     * @param model the {@code MultiLayerNetwork} or {@code ComputationGraph} given to ParallelWrapper
     * @return the accumulator, with the defaults
     * @throws IllegalArgumentException when the model cannot be trained this way (BatchNormalization, center loss,
     *         truncated BPTT; the message says which and the fix)
     */
    public static SymmemGradientsAccumulator attach(Model model) {
        return builder(model).attach();
    }

    /**
     * Options (timeout, algorithm policy, bucket size); {@link Builder#attach()} ends it.
     *
     * @param model the model given to ParallelWrapper
     * @return a builder with the defaults
     */
    public static Builder builder(Model model) {
        return new Builder(model);
    }

    /**
     * A {@code ParallelWrapper.Builder} for {@code model} already in CUSTOM mode with an attached
     * accumulator and {@code workers} workers (ParallelWrapper's own default is the number of
     * devices: 1 on a CPU, ParallelWrapper.java:674).
     *
     * @param <T>     the model's type
     * @param model   the model
     * @param workers ParallelWrapper's workers, at least 2 (ParallelWrapper's own minimum)
     * @return the ParallelWrapper builder; add settings and {@code build()}
     */
    public static <T extends Model> ParallelWrapper.Builder<T> parallelWrapperBuilder(T model, int workers) {
        @SuppressWarnings("unchecked")
        ParallelWrapper.Builder<T> b = (ParallelWrapper.Builder<T>) new ParallelWrapper.Builder<>(model)
                .workers(workers)
                .trainingMode(ParallelWrapper.TrainingMode.CUSTOM)
                .gradientsAccumulator(attach(model));
        return b;
    }

    /**
     * The all-reduce meters ({@code symmem.allreduce.duration} and {@code .bytes}, per algorithm and size
     * class): bind them to a registry. No step meters: DL4J gives the hook no start of a step.
     *
     * @return the accumulator's all-reduce metrics
     */
    public SyncMetrics metrics() {
        return metrics;
    }

    /** Options for {@link SymmemGradientsAccumulator}. */
    public static final class Builder {
        private final Model model;
        private Duration timeout = TrainerOptions.defaultTimeout();
        private AlgorithmPolicy policy;
        private long bucketBytes = 4L << 20;

        private Builder(Model model) {
            this.model = Objects.requireNonNull(model, "model");
        }

        /**
         * How long a worker waits for its peers in an all-reduce before failing and naming them (default
         * {@link TrainerOptions#defaultTimeout()}: 60 s, or {@code -Dsymmem4j.timeout.ms}).
         *
         * @param timeout positive
         * @return this builder
         * @throws IllegalArgumentException when {@code timeout} is null, zero or negative
         */
        public Builder timeout(Duration timeout) {
            this.timeout = TrainerOptions.requirePositive(timeout);
            return this;
        }

        /**
         * The all-reduce algorithm policy (default: the calibrated thresholds, {@link AlgorithmPolicy#calibrated()}).
         *
         * @param policy picks each bucket's algorithm
         * @return this builder
         */
        public Builder policy(AlgorithmPolicy policy) {
            this.policy = Objects.requireNonNull(policy, "policy");
            return this;
        }

        /**
         * The gradient is all-reduced in buckets of at most this many bytes (default 4 MiB).
         *
         * @param bytes the largest bucket in bytes
         * @return this builder
         * @throws IllegalArgumentException when {@code bytes} is below 64
         */
        public Builder bucketBytes(long bytes) {
            if (bytes < 64) {
                throw new IllegalArgumentException("bucketBytes=" + bytes + " must be >= 64 (default 4 MiB;"
                        + " fix: pass a size in bytes, e.g. 4L << 20, or leave it unset)");
            }
            this.bucketBytes = bytes;
            return this;
        }

        /**
         * Checks the model, puts the gradient hook on it and returns the accumulator.
         *
         * @return the accumulator
         * @throws IllegalArgumentException when the model cannot be trained this way (the message says why and the fix)
         * @throws IllegalStateException    when a {@code SymmemGradientsAccumulator} is already attached to the
         *                                  model (its gradient hook is among the model's listeners)
         */
        public SymmemGradientsAccumulator attach() {
            ModelReplica replica = ModelReplica.of(model);
            ModelReplica.ensureInitialized(replica);
            refuseUnsupported(replica);
            for (TrainingListener l : replica.listeners()) {
                if (l instanceof GradientHook) {
                    throw new IllegalStateException("a SymmemGradientsAccumulator is already attached to this model;"
                            + " expected one per model (fix: reuse the accumulator attach() returned, or build the"
                            + " model's listeners afresh with setListeners before attaching again)");
                }
            }
            SymmemGradientsAccumulator accumulator = new SymmemGradientsAccumulator(model, this);
            replica.addListener(accumulator.hook);
            return accumulator;
        }
    }

    private static void refuseUnsupported(ModelReplica model) {
        List<String> stateful = new ArrayList<>();
        model.trainables().forEach((name, t) -> {
            for (String variable : t.paramTable(false).keySet()) {
                if (!t.updaterDivideByMinibatch(variable)) {
                    stateful.add(name + "." + variable);
                }
            }
        });
        if (!stateful.isEmpty()) {
            throw new IllegalArgumentException("SymmemGradientsAccumulator: layers " + stateful + " keep state updates"
                    + " (not gradients) in the gradient view, such as BatchNormalization's running statistics or center"
                    + " loss's centers, which averaging as gradients would get wrong; expected none (fix: train with"
                    + " SymmemParallelWrapper.builder(model), which merges them exactly)");
        }
        if (model.truncatedBptt()) {
            throw new IllegalArgumentException("SymmemGradientsAccumulator: backpropType=TruncatedBPTT updates once per"
                    + " time segment, and replicas with sequences of different lengths would meet in different numbers"
                    + " of all-reduces; expected backpropType=Standard (fix: train without truncated BPTT, or with"
                    + " plain fit())");
        }
        for (org.deeplearning4j.nn.conf.layers.Layer layer : model.layerConfigurations()) {
            if (layer instanceof org.deeplearning4j.nn.conf.ocnn.OCNNOutputLayer) {
                throw new IllegalArgumentException("SymmemGradientsAccumulator: layer=" + layer.getLayerName()
                        + " kind=OCNNOutputLayer resets its radius each epoch from outputs kept in the layer instance"
                        + " (state outside the parameters), so replicas would diverge; expected any other output layer"
                        + " (fix: train this model with plain fit())");
            }
        }
    }

    // ---- Registerable: ParallelWrapper's thread, between rounds ----

    /**
     * Before each round, on ParallelWrapper's thread: {@code numConsumers} trainers (0 ..
     * numConsumers-1) got a batch. The previous round's trainers have all finished (ParallelWrapper
     * waited for them), so when the count changes the old group can be closed here, by this thread.
     */
    @Override
    public synchronized void registerConsumers(int numConsumers) {
        if (numConsumers < 1) {
            throw new IllegalArgumentException("registerConsumers: numConsumers=" + numConsumers + " expected >= 1 (fix:"
                    + " leave registerConsumers to ParallelWrapper 1.0.0-M2.1, which passes its trainer count)");
        }
        Round r = round;
        if (r != null && r.participants() == numConsumers) {
            return;
        }
        if (r == null && numConsumers == 1) {
            log.warn("the first round of this ParallelWrapper fit has 1 worker: nothing is all-reduced. Either the"
                    + " iterator had one batch, or the wrapper has workers=1: ParallelWrapper.Builder defaults workers"
                    + " to the number of devices (1 on a CPU); fix: .workers(n)");
        }
        if (r != null) {
            log.debug("round of {} workers follows rounds of {}: new group (a short last round)", numConsumers,
                    r.participants());
            // aborts the old groups (the trainers are idle); each trainer frees its part as it joins the new one
            r.world().close();
        }
        InJvmWorld world = DataParallelWorkers.threadWorld(numConsumers, timeout);
        // release: publishes the new world to the trainers' acquire read of `round` in the hook
        round = new Round(world, numConsumers, ++generations);
    }

    /** Not called by ParallelWrapper 1.0.0-M2.1; every round is all-reduced among the workers that got a batch. */
    @Override
    public void fallbackToSingleConsumerMode(boolean reallyFallback) {
        log.debug("fallbackToSingleConsumerMode({}) ignored: rounds size themselves by registerConsumers", reallyFallback);
    }

    // ---- GradientsAccumulator: the trainers' threads, inside DL4J's optimizer ----

    /**
     * After the updater, with the update (StochasticGradientDescent.java:82): the hook already made it
     * the same on every replica. Checks that the hook did run for this step on this thread.
     */
    @Override
    public void storeUpdate(INDArray array, int iterationNumber, int epochNumber) {
        Round r = round; // acquire: pairs with registerConsumers' release
        if (r == null) {
            return; // a plain fit() of the user's model after ParallelWrapper left this accumulator on it
        }
        WorkerState state = current.get();
        if (state == null || !state.syncedThisStep) {
            throw new IllegalStateException("SymmemGradientsAccumulator: thread '" + Thread.currentThread().getName()
                    + "' reached storeUpdate at iteration=" + iterationNumber + " without the gradient hook having run"
                    + " for this step: expected the hook among the replica's listeners, found it missing, so this"
                    + " replica's update is its own, not the all-reduced one (fix: call attach(model) after"
                    + " model.setListeners(...), and do not replace the wrapper's listeners)");
        }
        state.syncedThisStep = false;
    }

    /** Applies the update as DL4J does without an accumulator (StochasticGradientDescent.java:92). */
    @Override
    public void applyUpdate(StepFunction function, INDArray params, INDArray updates, boolean isFinalStep) {
        function.step(params, updates);
    }

    /** Applies the update scaled by {@code alpha}, as DL4J's step functions do. */
    @Override
    public void applyUpdate(StepFunction function, INDArray params, INDArray updates, double alpha) {
        function.step(params, updates, alpha);
    }

    /** External update sources (DL4J's Spark/parameter-server path) are not supported. */
    @Override
    public void setExternalSource(IndexedTail source) {
        if (source != null) {
            throw new UnsupportedOperationException("SymmemGradientsAccumulator: expected no external update source,"
                    + " found " + source.getClass().getName() + " (external sources feed DL4J's encoded updates; this"
                    + " accumulator all-reduces raw gradients among the wrapper's threads; fix: use"
                    + " EncodedGradientsAccumulator for that setup)");
        }
    }

    @Override
    public IndexedTail getExternalSource() {
        return null;
    }

    @Override
    public void receiveUpdate(INDArray array) {
        throw new UnsupportedOperationException("SymmemGradientsAccumulator: receiveUpdate is for encoded updates from"
                + " outside the JVM; expected none (fix: use EncodedGradientsAccumulator for that setup)");
    }

    @Override
    public void markExternalUpdates(boolean updatesAvailable) {
        // no external updates: nothing to mark
    }

    /**
     * At the end of each fit (ParallelWrapper.close, ParallelWrapper.java:184), after the trainers
     * stopped: closes the group and gives the user's model back its minibatch division and training
     * workspace mode.
     */
    @Override
    public synchronized void reset() {
        Round r = round;
        // release: a later hook call (a plain fit) sees no round and does nothing
        round = null;
        if (r != null) {
            r.world().close(); // aborts the groups; each worker's close below frees its part
        }
        synchronized (workers) {
            for (WorkerState w : workers.values()) {
                w.close();
            }
            workers.clear();
        }
        userModel.conf().setMiniBatch(userDividesByMinibatch);
        ModelReplica.of(userModel).setTrainingWorkspaceMode(userTrainingWorkspaceMode);
        restoreUserUpdater();
    }

    /**
     * Gives the user's MultiLayerNetwork back the updater that ParallelWrapper's {@code clear()}
     * dropped (see {@link #userUpdater}). Without it the next {@code fit} would start from a fresh
     * updater (Adam's moments and momentum back to zero), and its trainers 1..n-1, which create that
     * updater on the user's model while trainer 0 holds the model's monitor inside {@code fit}
     * (DefaultTrainer.java:311 -> MultiLayerNetwork.getLayers(), synchronized), would deadlock with
     * trainer 0 waiting for them in the all-reduce.
     */
    private void restoreUserUpdater() {
        org.deeplearning4j.nn.api.Updater saved = userUpdater;
        if (saved != null && userModel instanceof MultiLayerNetwork net && net.getUpdater(false) != saved) {
            net.setUpdater(saved);
            log.debug("restored the updater (and its state) that MultiLayerNetwork.clear() dropped at the end of fit");
        }
        userUpdater = null;
    }

    /** Called by each SymmetricTrainer on its thread (for device workspaces); nothing to prepare on the host. */
    @Override
    public void touch() {
        // the hook prepares each replica at its first step
    }

    /** No update is ever pending outside the step that produced it. */
    @Override
    public boolean hasAnything() {
        return false;
    }

    // ---- the hook ----

    /** The replica's hook: DL4J calls it on the trainer's thread after backprop, before the updater. */
    private final class GradientHook extends BaseTrainingListener {
        @Override
        public void onGradientCalculation(Model model) {
            Round r = round; // acquire: pairs with registerConsumers' release
            String threadName = Thread.currentThread().getName();
            boolean onTrainer = threadName.startsWith(TRAINING_THREAD_PREFIX);
            if (r == null) {
                if (onTrainer) {
                    throw new IllegalStateException("SymmemGradientsAccumulator: its hook runs on ParallelWrapper thread '"
                            + threadName + "' but the wrapper never registered a round with it: expected"
                            + " trainingMode=CUSTOM with gradientsAccumulator(<this accumulator>), found a wrapper that"
                            + " does not use it (AVERAGING drops any accumulator, ParallelWrapper.java:914-918); fix:"
                            + " .trainingMode(ParallelWrapper.TrainingMode.CUSTOM).gradientsAccumulator(accumulator)");
                }
                return; // a plain fit() of the user's model outside ParallelWrapper
            }
            int rank = rankOf(threadName, model, r);
            WorkerState state = stateOf(model, rank);
            current.set(state);
            if (rank == 0 && model instanceof MultiLayerNetwork net) {
                userUpdater = net.getUpdater(false); // the solver's, created by this fit if clear() had dropped it
            }
            state.sync(r);
        }
    }

    private int rankOf(String threadName, Model model, Round r) {
        int rank;
        try {
            rank = Integer.parseInt(threadName.substring(TRAINING_THREAD_PREFIX.length()).trim());
        } catch (RuntimeException e) {
            throw new IllegalStateException("SymmemGradientsAccumulator: a replica trained on thread '" + threadName
                    + "' during a ParallelWrapper round: expected a thread named '" + TRAINING_THREAD_PREFIX
                    + "<n>' (DL4J 1.0.0-M2.1's naming, which gives each trainer's index); fix: while a wrapper"
                    + " trains, train the model through ParallelWrapper.fit only (with deeplearning4j-parallel-wrapper"
                    + " 1.0.0-M2.1); after a ParallelWrapper fit that failed, call wrapper.shutdown() before"
                    + " training the model otherwise");
        }
        if (rank >= r.participants()) {
            throw new IllegalStateException("SymmemGradientsAccumulator: trainer " + rank + " trained in a round that"
                    + " registered participants=" + r.participants() + " (trainers 0.." + (r.participants() - 1)
                    + "); expected ParallelWrapper to feed trainers in order (a changed ParallelWrapper?; fix: use"
                    + " deeplearning4j-parallel-wrapper 1.0.0-M2.1, the version symmem4j is tested against)");
        }
        if ((rank == 0) != (model == userModel)) {
            throw new IllegalStateException("SymmemGradientsAccumulator: trainer " + rank + " trains "
                    + (model == userModel ? "the model the accumulator was attached to" : "a replica")
                    + "; expected trainer 0 to train the user's model (DefaultTrainer.java:321-323) and the others"
                    + " replicas (fix: attach(model) with the model given to ParallelWrapper.Builder)");
        }
        return rank;
    }

    private WorkerState stateOf(Model model, int rank) {
        synchronized (workers) {
            WorkerState s = workers.get(model);
            if (s == null) {
                s = new WorkerState(ModelReplica.of(model), rank);
                workers.put(model, s);
            }
            return s;
        }
    }

    /** One replica's part: its group membership and registered gradient view; used by its trainer's thread only. */
    private final class WorkerState {
        private final ModelReplica replica;
        private final int rank;
        private final MemorySegment gradientSegment;
        private final DType dtype;
        private final long count;
        /** [examples, first non-finite element or -1] of this worker, then of every worker; doubles. */
        private final Arena exchangeArena = Arena.ofShared(); // closed by reset() on ParallelWrapper's thread
        private final MemorySegment mine;
        private long generation = -1;
        private int worldSize;
        private MemorySegment all;
        private Group group;
        private Communicator comm;
        private SymmetricMemory gradients;
        private GradientSynchronizer synchronizer;
        private long steps;
        /** Set by the hook, cleared by storeUpdate; both on this replica's trainer thread. */
        private boolean syncedThisStep;

        WorkerState(ModelReplica replica, int rank) {
            this.replica = replica;
            this.rank = rank;
            // DL4J's updater would divide by this replica's own batch size; the hook divides the sum by the
            // round's examples instead (restored on the user's model by reset())
            replica.disableMinibatchDivision();
            INDArray view = replica.gradientView();
            this.dtype = ModelReplica.dtypeOf(view.dataType());
            this.count = view.length();
            this.gradientSegment = ModelReplica.segmentOf(view);
            this.mine = exchangeArena.allocate(16, 64);
        }

        /** Joins the round's group on first use of a new group: the gradient view registered as symmetric memory. */
        private void joinIfNew(Round r) {
            if (generation == r.generation()) {
                return;
            }
            // the previous world, if any, was closed by registerConsumers on ParallelWrapper's thread
            leaveGroup();
            group = r.world().join(rank);
            comm = Communicator.create(group);
            gradients = SymmetricMemory.register(group, gradientSegment);
            synchronizer = new GradientSynchronizer(comm, gradients, 0, count, dtype, bucketBytes, policy, metrics);
            worldSize = r.participants();
            all = exchangeArena.allocate(16L * worldSize, 64);
            generation = r.generation();
        }

        void sync(Round r) {
            try {
                joinIfNew(r);
                long examples = replica.model().batchSize();
                long localBad = reducer.firstNonFinite(gradientSegment, 0, dtype, count);
                mine.set(ValueLayout.JAVA_DOUBLE, 0, examples);
                mine.set(ValueLayout.JAVA_DOUBLE, 8, localBad);
                comm.allGather(mine, all, 2, DType.FLOAT64);
                long roundExamples = 0;
                List<String> bad = new ArrayList<>();
                List<Integer> badWorkers = new ArrayList<>();
                for (int w = 0; w < worldSize; w++) {
                    roundExamples += (long) all.getAtIndex(ValueLayout.JAVA_DOUBLE, 2L * w);
                    long idx = (long) all.getAtIndex(ValueLayout.JAVA_DOUBLE, 2L * w + 1);
                    if (idx >= 0) {
                        badWorkers.add(w);
                        bad.add("worker " + w + " element " + idx);
                    }
                }
                if (!bad.isEmpty()) {
                    // every worker saw the same all-gather: all fail alike, before any updater runs
                    throw new NonFiniteGradientException("non-finite gradient at iteration=" + replica.iterationCount()
                            + " before averaging on " + String.join(", ", bad) + " (fix: lower the learning"
                            + " rate or clip"
                            + " gradients)", badWorkers, steps);
                }
                synchronizer.allReduce(ReduceOp.SUM);
                // one model divides its summed gradient by its batch size unless its configuration says not to
                long divisor = userDividesByMinibatch ? roundExamples : 1;
                long reducedBad = reducer.divideAndFindNonFinite(gradientSegment, 0, dtype, count, divisor);
                if (reducedBad >= 0) {
                    throw new NonFiniteGradientException("non-finite gradient at iteration=" + replica.iterationCount()
                            + ": no worker's gradient was, their sum overflowed (first element " + reducedBad + "; fix:"
                            + " lower the learning rate or clip gradients)",
                            List.of(), steps);
                }
                steps++;
                syncedThisStep = true;
            } catch (PeerTimeoutException | NonFiniteGradientException e) {
                throw e; // every peer sees these itself
            } catch (RuntimeException | Error e) {
                if (comm != null) {
                    // peers may be waiting for this worker inside the all-reduce: make them fail now
                    comm.abort("trainer " + rank + " failed in the gradient all-reduce: " + e);
                }
                throw e;
            }
        }

        /**
         * Frees this rank's part of its group: the pad of its registered gradient view and its communicator's scratch.
         * Called once the world's close aborted the group (InJvmWorld.close aborts a group whose ranks still hold
         * memory, and never frees memory under them), so nothing here waits for peers; on the trainer's thread, or on
         * ParallelWrapper's once the trainers stopped.
         */
        private void leaveGroup() {
            RankRuntime.closeQuietly(gradients);
            RankRuntime.closeQuietly(comm);
            RankRuntime.closeQuietly(group);
            gradients = null;
            comm = null;
            group = null;
            synchronizer = null;
        }

        /** ParallelWrapper's thread, after the world's close, the trainers stopped: frees what this worker holds. */
        void close() {
            leaveGroup();
            exchangeArena.close();
        }
    }
}
