package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientBuckets;
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
 * mean one model computes over all those examples. {@link GradientAveraging} does that bucket by
 * bucket, in the hook or, with overlap, on a communication thread while backprop goes on.
 *
 * <p>Gradient accumulation: a task may hold {@link MicroBatches}; all but the last go through
 * forward and backward passes only ({@link ModelReplica#computeGradient}), their gradients summed
 * into a buffer, and the last one's fit adds that sum to its own before the one sync of the step.
 */
final class DataParallelWorker {

    /**
     * A step for this worker; {@code batch == null} means shut down. {@code stepExamples} is the
     * number of examples of the whole step, over all workers.
     */
    record Task(Object batch, boolean idle, long stepExamples, long step, CompletableFuture<Result> result) {
    }

    /**
     * What a step produced; {@code syncStart}/{@code syncEnd} are {@link System#nanoTime()} stamps
     * of the gradient hook (0 if it did not run), to see when the last worker arrived.
     */
    record Result(double loss, long stepNanos, long syncNanos, boolean skipped, long syncStart, long syncEnd) {
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
    private final BackpropProgress backpropProgress;
    private final BlockingQueue<Task> tasks = new LinkedBlockingQueue<>();
    private final CompletableFuture<Void> ready = new CompletableFuture<>();
    private final Thread thread;
    private final Reducer reducer = Reducer.forThisJvm();

    // Owned by the worker thread.
    private Communicator comm;
    private SymmetricMemory gradients;
    private GradientSynchronizer synchronizer;
    private GradientAveraging averaging;
    private SymmetricMemory transferMemory;
    private Arena accumulationArena;
    private MemorySegment accumulated;
    private MemorySegment gradientSegment;
    private DType dtype;
    private long count;
    private Task current;
    private long syncNanos;
    private long syncStart;
    private long syncEnd;
    /** Set once the worker started, when sharding is on; read by the wrapper's thread while the worker is idle. */
    private volatile ShardedUpdater sharded;

    /**
     * @param shardSource null for plain data parallelism; with sharding (settings.sharding() set),
     *                    where this worker's shard of the updater state comes from
     * @param backpropProgress where the replica's backprop reports written layers (a replica built
     *                    by {@link ModelReplica#newReplicaWithBackpropSignals}); null without overlap
     */
    DataParallelWorker(int rank, InJvmWorld world, ModelReplica replica, SymmemParallelWrapper.Settings settings,
                       SyncMetrics metrics, ShardSource shardSource, BackpropProgress backpropProgress) {
        if ((settings.sharding() == null) != (shardSource == null)) {
            throw new IllegalArgumentException("sharding=" + settings.sharding() + " needs a shard source exactly when set");
        }
        this.rank = rank;
        this.world = world;
        this.replica = replica;
        this.settings = settings;
        this.metrics = metrics;
        this.shardSource = shardSource;
        this.backpropProgress = backpropProgress;
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
            // buckets start at layer boundaries, so each can be reduced once its layers are written
            List<ModelReplica.LayerSlice> layers = replica.layerSlices();
            List<GradientBuckets.Bucket> buckets = GradientBuckets.splitAtBoundaries(count, dtype, settings.bucketBytes(),
                    settings.minBucketBytes(), layers.stream().mapToLong(ModelReplica.LayerSlice::start).toArray());
            synchronizer = new GradientSynchronizer(comm, gradients, 0, dtype, buckets, policy, metrics);
            if (shardSource == null) {
                averaging = startAveraging(group, buckets, layers);
            }
            if (shardSource != null) {
                ShardedUpdater s = new ShardedUpdater(settings.sharding(), shardSource.layout(), replica, comm, gradients,
                        synchronizer, shardSource.fullState());
                replica.installUpdater(s);
                sharded = s;
            }
            replica.addListener(new BaseTrainingListener() {
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
            // collective closes: every worker gets its shutdown task in the same round; the sync
            // thread ends first, so nothing uses the communicator while it closes
            closeQuietly(averaging);
            closeQuietly(transferMemory);
            closeQuietly(accumulationArena);
            closeQuietly(gradients);
            closeQuietly(comm);
            closeQuietly(group);
        }
    }

    /** Plain data parallelism's bucketed averaging; with bf16 transfer its buffer, with accumulation its sum. */
    private GradientAveraging startAveraging(Group group, List<GradientBuckets.Bucket> buckets,
                                             List<ModelReplica.LayerSlice> layers) {
        GradientAveraging.Bf16Transfer transfer = null;
        if (settings.gradientTransfer() == GradientTransfer.BFLOAT16) {
            transferMemory = SymmetricMemory.allocate(group, Math.max(64, (2 * count + 63) / 64 * 64));
            List<GradientBuckets.Bucket> bf16Buckets = buckets.stream()
                    .map(b -> new GradientBuckets.Bucket(b.firstElement(), b.count(), DType.BFLOAT16)).toList();
            transfer = new GradientAveraging.Bf16Transfer(transferMemory.local(), new GradientSynchronizer(comm,
                    transferMemory, 0, DType.BFLOAT16, bf16Buckets, settings.policy(), metrics));
        }
        if (settings.accumulation() > 1) {
            accumulationArena = Arena.ofShared(); // read by the sync thread with overlap
            accumulated = accumulationArena.allocate(count * dtype.byteSize(), 64);
        }
        GradientAveraging a = new GradientAveraging(rank, gradientSegment, dtype, synchronizer, transfer, layers,
                backpropProgress != null, GradientAveraging.BucketHook.NONE, settings.timeout());
        if (backpropProgress != null) {
            backpropProgress.listen(a::layerWritten);
        }
        return a;
    }

    /** Runs one step and completes its future; false if the step failed (the future then holds the cause). */
    private boolean step(Task task) {
        current = task;
        syncNanos = 0;
        syncStart = 0;
        syncEnd = 0;
        long start = System.nanoTime();
        boolean skipped = false;
        double earlierLoss = 0;
        try {
            Object batch = task.batch();
            MemorySegment earlierGradients = null;
            if (batch instanceof MicroBatches micro) {
                if (task.idle() || micro.batches().size() == 1) {
                    batch = micro.batches().getFirst(); // an idle worker contributes zeros: one pass is enough
                } else {
                    earlierLoss = accumulate(micro.batches().subList(0, micro.batches().size() - 1));
                    earlierGradients = accumulated;
                    batch = micro.batches().getLast();
                }
            }
            if (averaging != null) {
                averaging.beginStep(task.idle(), task.stepExamples(), earlierGradients);
            }
            if (batch instanceof DataSet ds) {
                replica.fit(ds);
            } else {
                replica.fit((MultiDataSet) batch);
            }
        } catch (SkipStep skip) {
            skipped = true;
        } catch (RuntimeException | Error e) {
            if (!(e instanceof PeerTimeoutException) && !(e instanceof NonFiniteGradientException)) {
                // Peers may be waiting for this worker inside the all-reduce: make them fail now.
                comm.abort("worker " + rank + " failed at step " + task.step() + ": " + e);
            }
            if (averaging != null) {
                averaging.abandonStep();
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
        // with minibatch division off, DL4J's score is the summed loss of this worker's batch
        task.result().complete(new Result(task.idle() ? 0 : replica.score() + earlierLoss, stepNanos, syncNanos, skipped,
                syncStart, syncEnd));
        return true;
    }

    /**
     * Forward and backward passes over {@code batches}, no update: their gradients summed into
     * {@link #accumulated}; returns their summed loss.
     */
    private double accumulate(List<Object> batches) {
        double loss = 0;
        for (int m = 0; m < batches.size(); m++) {
            replica.computeGradient(batches.get(m));
            loss += replica.score();
            if (m == 0) {
                MemorySegment.copy(gradientSegment, 0, accumulated, 0, count * dtype.byteSize());
            } else {
                reducer.reduce(new MemorySegment[] {accumulated, gradientSegment}, new long[] {0, 0},
                        new DType[] {dtype, dtype}, 2, accumulated, 0, dtype, count, ReduceOp.SUM, 0, false);
            }
        }
        return loss;
    }

    /** The hook: runs on this worker's thread, inside the replica's fit, before its updater. */
    private void syncGradients() {
        Task task = current;
        long start = System.nanoTime();
        syncStart = start;
        try {
            syncGradients(task, start);
        } finally {
            syncEnd = System.nanoTime();
        }
    }

    private void syncGradients(Task task, long start) {
        if (averaging != null) {
            // bucket by bucket: checked (zeroed when idle), summed, divided and checked again
            GradientAveraging.Outcome outcome = averaging.finishStep();
            syncNanos = System.nanoTime() - start;
            if (outcome.reducedBad() >= 0) {
                nonFinite(task, outcome.localBad(), outcome.reducedBad());
            }
            return;
        }
        long localBad = -1;
        if (task.idle()) {
            gradientSegment.fill((byte) 0); // contributes nothing; zero bits are 0.0 in every dtype
        } else {
            localBad = reducer.firstNonFinite(gradientSegment, 0, dtype, count);
        }
        if (sharded != null) {
            // this rank's shard reduced and divided; the verdict on non-finite values is global
            sharded.reduceGradients();
            long nonFiniteShards = sharded.finishReduction(task.stepExamples());
            syncNanos = System.nanoTime() - start;
            if (nonFiniteShards > 0) {
                nonFinite(task, localBad, sharded.firstNonFiniteIndex());
            }
            return;
        }
        throw new IllegalStateException("worker " + rank + " has neither a sharded updater nor averaging (a bug)");
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
                System.getLogger(DataParallelWorker.class.getName()).log(System.Logger.Level.WARNING,
                        message + "; step skipped on every worker (nonFiniteGradients=SKIP_STEP)");
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
