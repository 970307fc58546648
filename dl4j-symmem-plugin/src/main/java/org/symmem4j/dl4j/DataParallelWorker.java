package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.slf4j.LoggerFactory;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.InJvmWorld;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.host.Reducer;

/**
 * One data-parallel worker: a thread that owns a model replica and one rank of the in-JVM group.
 * The replica's {@code onGradientCalculation} hook — after backprop filled the flat gradient view,
 * before the updater — all-reduces that view in place over symmetric memory, so every replica's
 * own updater applies the same averaged gradient and the replicas stay bitwise identical.
 *
 * <p>Averaging: DL4J's gradient view holds the <em>sum</em> over the batch's examples, and its
 * updater divides by the replica's own batch size. With batches of different sizes that division
 * would differ per replica, so replicas have it switched off
 * ({@link ModelReplica#disableMinibatchDivision()}) and the hook divides the all-reduced sum by the
 * examples of the whole step — the same number on every rank, so the same bits, and the same
 * mean one model computes over all those examples. Entries that hold state updates rather than
 * gradients (BatchNorm's running statistics, center-loss centers) are not such sums: a
 * {@link StateUpdateReduction} merges them separately and writes them over the divided sum.
 */
final class DataParallelWorker {

    /**
     * A step for this worker; {@code batch == null} means shut down. {@code examples} is this
     * worker's share of the step (0 when idle), {@code stepExamples} the examples of the whole
     * step, over all workers. For the user's listeners: {@code keepActivations} keeps a copy of
     * what DL4J passes to onForwardPass, {@code keepGradient} a copy of the reduced gradient
     * before the division ({@link #gradientSnapshot}).
     */
    record Task(Object batch, boolean idle, long examples, long stepExamples, long step, boolean keepActivations,
                boolean keepGradient, CompletableFuture<Result> result) {
    }

    /**
     * What a step produced: DL4J's score of the worker's batch (its mean loss per example plus the
     * regularization term: see {@link ModelReplica#disableMinibatchDivision}), the regularization
     * term (worker 0 only, NaN on the others: the parameters, so the term, are the same on every
     * worker), timings, and the activations DL4J passed to onForwardPass (a List for a
     * MultiLayerNetwork, a Map for a graph; null unless kept).
     */
    record Result(double score, double regularization, long stepNanos, long syncNanos, boolean skipped,
                  Object activations) {
    }

    /** A copy of elements [start, start + length) of the reduced gradient, as one model's onGradientCalculation sees them. */
    record GradientSnapshot(INDArray values, long start) {
    }

    /** Thrown from the hook to abandon a step on every worker before the updater runs. */
    private static final class SkipStep extends RuntimeException {
        SkipStep() {
            super("step skipped: non-finite gradient", null, false, false);
        }
    }

    /** What a sharded worker starts from: DL4J's updater layout and full state of the user's model. */
    record ShardSource(UpdaterLayout layout, INDArray fullState) {
    }

    private final int rank;
    private final InJvmWorld world;
    private final ModelReplica replica;
    private final SymmemParallelWrapper.Settings settings;
    private final SyncMetrics metrics;
    private final ShardSource shardSource;
    private final List<StateUpdateReduction.Entry> stateEntries;
    private final BlockingQueue<Task> tasks = new LinkedBlockingQueue<>();
    private final CompletableFuture<Void> ready = new CompletableFuture<>();
    private final Thread thread;
    private final Reducer reducer = Reducer.forThisJvm();

    // Owned by the worker thread.
    private Communicator comm;
    private SymmetricMemory gradients;
    private GradientSynchronizer synchronizer;
    private MemorySegment gradientSegment;
    private DType dtype;
    private long count;
    private StateUpdateReduction stateReduction;
    private Task current;
    private long syncNanos;
    private double regularization;
    private Object keptActivations;
    /** Allocated on first use; read by the wrapper's thread while the worker is idle. */
    private volatile GradientSnapshot gradientSnapshot;
    /** Set once the worker started, when sharding is on; read by the wrapper's thread while the worker is idle. */
    private volatile ShardedUpdater sharded;

    /**
     * @param shardSource  null for plain data parallelism; with sharding (settings.sharding() set),
     *                     where this worker's shard of the updater state comes from
     * @param stateEntries the gradient-view entries that hold state updates, not gradients
     *                     ({@link StateUpdateReduction#find}); merged on their own each step
     */
    DataParallelWorker(int rank, InJvmWorld world, ModelReplica replica, SymmemParallelWrapper.Settings settings,
                       SyncMetrics metrics, ShardSource shardSource, List<StateUpdateReduction.Entry> stateEntries) {
        if ((settings.sharding() == null) != (shardSource == null)) {
            throw new IllegalArgumentException("sharding=" + settings.sharding() + " needs a shard source exactly when set");
        }
        this.rank = rank;
        this.world = world;
        this.replica = replica;
        this.settings = settings;
        this.metrics = metrics;
        this.shardSource = shardSource;
        this.stateEntries = List.copyOf(stateEntries);
        this.thread = Thread.ofPlatform().daemon().name("symmem4j-worker-" + rank).unstarted(this::run);
    }

    void start() {
        thread.start();
    }

    /** Completes when the worker joined the group and registered its gradient view. */
    CompletableFuture<Void> ready() {
        return ready;
    }

    ModelReplica replica() {
        return replica;
    }

    /** This worker's sharded updater (null without sharding); valid once {@link #ready()} completed. */
    ShardedUpdater sharded() {
        return sharded;
    }

    void submit(Task task) {
        tasks.add(task);
    }

    void join() throws InterruptedException {
        thread.join();
    }

    private void run() {
        Group group = null;
        try {
            group = world.join(rank);
            comm = Communicator.create(group);
            INDArray view = replica.gradientView();
            dtype = ModelReplica.dtypeOf(view.dataType());
            count = view.length();
            gradientSegment = ModelReplica.segmentOf(view);
            gradients = SymmetricMemory.register(group, gradientSegment);
            AlgorithmPolicy policy = settings.policy();
            synchronizer = new GradientSynchronizer(comm, gradients, 0, count, dtype, settings.bucketBytes(), policy, metrics);
            if (!stateEntries.isEmpty()) {
                stateReduction = new StateUpdateReduction(stateEntries, replica, comm);
            }
            if (shardSource != null) {
                ShardedUpdater s = new ShardedUpdater(settings.sharding(), shardSource.layout(), replica, comm, gradients,
                        synchronizer, shardSource.fullState());
                replica.installUpdater(s);
                sharded = s;
            }
            replica.addListener(new BaseTrainingListener() {
                @Override
                public void onForwardPass(Model model, List<INDArray> activations) {
                    keepActivations(activations);
                }

                @Override
                public void onForwardPass(Model model, Map<String, INDArray> activations) {
                    keepActivations(activations);
                }

                @Override
                public void onGradientCalculation(Model model) {
                    syncGradients();
                }
            });
            ready.complete(null);
        } catch (Throwable t) {
            ready.completeExceptionally(t);
            if (comm != null) {
                comm.abort("worker " + rank + " failed to start: " + t);
            }
            closeQuietly(group);
            return;
        }
        try {
            while (true) {
                Task task = tasks.take();
                if (task.batch() == null || !step(task)) {
                    break; // shut down, or this worker failed: the wrapper rebuilds its workers
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            // collective closes: every worker gets its shutdown task in the same round
            closeQuietly(gradients);
            closeQuietly(comm);
            closeQuietly(group);
        }
    }

    /** The reduced gradient this worker kept in its last step with {@code keepGradient}; null before. */
    GradientSnapshot gradientSnapshot() {
        return gradientSnapshot;
    }

    /** Runs one step and completes its future; false if the step failed (the future then holds the cause). */
    private boolean step(Task task) {
        current = task;
        syncNanos = 0;
        regularization = Double.NaN;
        keptActivations = null;
        long start = System.nanoTime();
        boolean skipped = false;
        try {
            if (task.batch() instanceof DataSet ds) {
                replica.fit(ds);
            } else {
                replica.fit((MultiDataSet) task.batch());
            }
        } catch (SkipStep skip) {
            skipped = true;
        } catch (RuntimeException | Error e) {
            if (!(e instanceof PeerTimeoutException) && !(e instanceof NonFiniteGradientException)) {
                // Peers may be waiting for this worker inside the all-reduce: make them fail now.
                comm.abort("worker " + rank + " failed at step " + task.step() + ": " + e);
            }
            task.result().completeExceptionally(e);
            return false;
        } finally {
            current = null;
        }
        long stepNanos = System.nanoTime() - start;
        if (sharded != null) {
            syncNanos += sharded.takeGatherNanos(); // the update's all-gather ran inside DL4J's updater call
        }
        metrics.recordWorkerStep(rank, stepNanos, syncNanos);
        task.result().complete(new Result(replica.score(), regularization, stepNanos, syncNanos, skipped, keptActivations));
        return true;
    }

    /** In DL4J's forward pass: copies of the activations, out of DL4J's workspaces, when the user's listeners read them. */
    private void keepActivations(Object activations) {
        Task task = current;
        if (task == null || !task.keepActivations() || task.idle()) {
            return;
        }
        try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
            if (activations instanceof List<?> list) {
                List<INDArray> copies = new ArrayList<>(list.size());
                for (Object a : list) {
                    copies.add(((INDArray) a).dup());
                }
                keptActivations = copies;
            } else {
                Map<String, INDArray> copies = new LinkedHashMap<>();
                ((Map<?, ?>) activations).forEach((k, v) -> copies.put((String) k, ((INDArray) v).dup()));
                keptActivations = copies;
            }
        }
    }

    /** Keeps a copy of gradient elements [from, to), reduced but not yet divided by the step's examples. */
    private void keepGradient(long from, long to) {
        GradientSnapshot snapshot = gradientSnapshot;
        if (snapshot == null) {
            snapshot = new GradientSnapshot(Nd4j.create(replica.gradientView().dataType(), Math.max(1, to - from)), from);
            gradientSnapshot = snapshot;
        }
        long width = dtype.byteSize();
        MemorySegment.copy(gradientSegment, from * width, ModelReplica.segmentOf(snapshot.values()), 0, (to - from) * width);
    }

    /** The hook: runs on this worker's thread, inside the replica's fit, before its updater. */
    private void syncGradients() {
        Task task = current;
        long start = System.nanoTime();
        if (rank == 0) {
            // the term DL4J's score added, for the parameters the score was computed with (before the update)
            regularization = replica.regularizationScore();
        }
        long localBad = -1;
        if (task.idle()) {
            gradientSegment.fill((byte) 0); // contributes nothing; zero bits are 0.0 in every dtype
        } else {
            localBad = reducer.firstNonFinite(gradientSegment, 0, dtype, count);
        }
        if (stateReduction != null) {
            // state updates (BatchNorm's running statistics, ...) merge on their own, from this
            // worker's values, so before the gradient reduction overwrites them
            stateReduction.reduce(task.examples(), task.stepExamples(), task.batch());
        }
        if (sharded != null) {
            // this rank's shard reduced and divided; the verdict on non-finite values is global
            sharded.reduceGradients();
            boolean keep = task.keepGradient();
            if (keep) {
                keepGradient(sharded.start(), sharded.end());
            }
            sharded.divideShard(task.stepExamples());
            if (stateReduction != null) {
                // the merged state updates replace the summed-and-divided entries, in this shard only
                // (the all-gather of the update carries them to the others), before norms and checks
                stateReduction.write(sharded.start(), sharded.end());
                if (keep) {
                    stateReduction.writeUndivided(gradientSnapshot.values(), gradientSnapshot.start(), sharded.start(),
                            sharded.end());
                }
            }
            long nonFiniteShards = sharded.agree();
            syncNanos = System.nanoTime() - start;
            if (nonFiniteShards > 0) {
                nonFinite(task, localBad, sharded.firstNonFiniteIndex());
            }
            return;
        }
        synchronizer.allReduce(ReduceOp.SUM);
        boolean keep = task.keepGradient() && rank == 0; // every rank holds the same sum: one copy serves
        if (keep) {
            keepGradient(0, count);
        }
        // what DL4J's updater would have done for one model seeing every example of the step
        replica.gradientView().divi(task.stepExamples());
        if (stateReduction != null) {
            stateReduction.write(0, count); // over the summed-and-divided state entries
            if (keep) {
                stateReduction.writeUndivided(gradientSnapshot.values(), 0, 0, count);
            }
        }
        // NaN and infinities survive the sum, so every rank sees the same verdict here.
        long bad = reducer.firstNonFinite(gradientSegment, 0, dtype, count);
        syncNanos = System.nanoTime() - start;
        if (bad >= 0) {
            nonFinite(task, localBad, bad);
        }
    }

    private void nonFinite(Task task, long localBad, long reducedBad) {
        List<Integer> culprits = new ArrayList<>();
        List<String> details = new ArrayList<>();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mine = arena.allocate(8);
            MemorySegment all = arena.allocate(8L * world.worldSize());
            mine.set(ValueLayout.JAVA_DOUBLE, 0, localBad);
            comm.allGather(mine, all, 1, DType.FLOAT64);
            for (int r = 0; r < world.worldSize(); r++) {
                long idx = (long) all.getAtIndex(ValueLayout.JAVA_DOUBLE, r);
                if (idx >= 0) {
                    culprits.add(r);
                    details.add("worker " + r + " element " + idx);
                }
            }
        }
        String who = culprits.isEmpty()
                ? "no single worker's gradient was non-finite; the sum overflowed (first element " + reducedBad + ")"
                : "non-finite before averaging on " + String.join(", ", details);
        String message = "non-finite gradient at step=" + task.step() + " (iteration " + replica.iterationCount()
                + ", epoch " + replica.epochCount() + "): " + who;
        if (settings.nonFiniteGradients() == NonFiniteGradients.SKIP_STEP) {
            if (rank == 0) {
                LoggerFactory.getLogger(DataParallelWorker.class).warn(message + "; step skipped on every worker (nonFiniteGradients=SKIP_STEP)");
            }
            throw new SkipStep();
        }
        throw new NonFiniteGradientException(message + " (set nonFiniteGradients(SKIP_STEP) to skip such steps"
                + " instead, or lower the learning rate / clip gradients)", culprits, task.step());
    }

    private static void closeQuietly(AutoCloseable c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (Exception ignored) {
            // shutting down after a failure: peers may be gone
        }
    }
}
