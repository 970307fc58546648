package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientBuckets;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * One data-parallel worker: a thread that owns a model replica and one rank of the data-parallel
 * group — a thread's rank of the wrapper's own in-JVM world, or, in group mode, this process's (or
 * thread's) rank of a group the user gave ({@link GroupSource}).
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
 * bucket, in the hook or, with overlap, on a communication thread while backprop goes on. Entries
 * that hold state updates rather than gradients (BatchNorm's running statistics, center-loss
 * centers) are not such sums: a {@link StateUpdateReduction} merges them separately and writes them
 * over the divided sum, bucket by bucket ({@link StateHook}).
 *
 * <p>Gradient accumulation: a task may hold {@link MicroBatches}; all but the last go through
 * forward and backward passes only ({@link ModelReplica#computeGradient}), their gradients summed
 * into a buffer, and the last one's fit adds that sum to its own before the one sync of the step.
 *
 * <p>GPU mode (a group on a transport whose memory is a GPU's, {@link DataParallelSettings#gpuMode()}): the
 * replica's gradient view is ND4J's device memory, summed and divided on the device by {@link GpuGradientAveraging}
 * on ND4J's stream; the step's scalars (the loss, the non-finite verdicts) go over a host communicator of the group's
 * host transport, as in host group mode.
 */
final class DataParallelWorker extends RankRuntime<DataParallelWorker.Task> {

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
     * regularization term: see {@link ModelReplica#disableMinibatchDivision}; with gradient
     * accumulation the mean over its micro-batches, weighted by their examples), the regularization
     * term (worker 0 only, NaN on the others: the parameters, so the term, are the same on every
     * worker), timings, the activations DL4J passed to onForwardPass (a List for a
     * MultiLayerNetwork, a Map for a graph; null unless kept), and {@code syncStart}/{@code syncEnd},
     * {@link System#nanoTime()} stamps of the gradient hook (0 if it did not run), to see when the
     * last worker arrived, and {@code startNanos}/{@code endNanos}, when the worker began and
     * finished the step (forward, backward, sync and update in between).
     */
    record Result(double score, double regularization, long stepNanos, long syncNanos, boolean skipped,
                  Object activations, long syncStart, long syncEnd, long startNanos, long endNanos, double mergedMeanLoss,
                  StepReport.Collectives collectives) {
    }

    /**
     * Where a worker's rank comes from, opened on the worker's thread, and what becomes of it when the
     * worker stops: a thread joins the wrapper's world and leaves it; a group member uses the group
     * the user gave and leaves it open (the user closes it).
     */
    interface GroupSource {
        /** This worker's rank, on the worker's thread. */
        Group open();

        /** Called once the worker stopped using {@code group}. */
        void release(Group group);

        /** Rank {@code rank} of the wrapper's own in-JVM world: joined by the worker thread, closed when it stops. */
        static GroupSource threadOf(InJvmWorld world, int rank) {
            return new GroupSource() {
                @Override
                public Group open() {
                    return world.join(rank);
                }

                @Override
                public void release(Group group) {
                    group.close();
                }
            };
        }

        /** A rank of a group the user gave (a process group, say): used as it is, never closed here. */
        static GroupSource member(Group group) {
            return new GroupSource() {
                @Override
                public Group open() {
                    return group;
                }

                @Override
                public void release(Group g) {
                }
            };
        }
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

    /**
     * What a sharded worker starts from: DL4J's updater layout and full state of the user's model, and
     * for stage 3 the model itself (its replica is built on the worker's thread, over symmetric memory
     * allocated collectively there: {@link FullySharded#open}); null otherwise.
     */
    record ShardSource(UpdaterLayout layout, INDArray fullState, ModelReplica model) {
    }

    private final int rank;
    private final GroupSource groupSource;
    /**
     * Whether this worker is the wrapper's only one on a group of several ranks (group mode): then it
     * computes what the wrapper reports for the whole step (the regularization term, the kept
     * gradient, which rank 0 computes among threads) and merges the step's loss over the ranks.
     */
    private final boolean alone;
    private int worldSize;
    private SymmetricMemory lossMemory;
    /** How {@link #lossMemory} is summed: ONE_SHOT where it runs (rank order, the same bits everywhere), else the group's engine. */
    private Algorithm lossAlgorithm;
    /**
     * Symmetric memory the replica's gradient view was placed in ({@link ModelReplica#placeGradientView}),
     * for groups whose transport cannot register the view where DL4J put it (processes cannot map
     * another process's heap); null to register the view in place. Closed by this worker.
     */
    private final SymmetricMemory gradientHome;
    /** Given, or with stage 3 built in {@link #open()} (whose completion of {@link #ready()} publishes it). */
    private ModelReplica replica;
    /** Stage 3's layer-by-layer gathers and reduce-scatters (null otherwise); set in {@link #open()}. */
    private FullySharded fullySharded;
    /** Stage 3's replicate × shard mesh when it shards inside groups (HSDP); null otherwise. Set in {@link #open()}. */
    private HybridSharding hybrid;
    /**
     * HSDP under SHRINK: this worker's own parameter blocks as its failed step left them, packed
     * ({@link FullySharded#packOwnBlocks}), since its close frees their memory; null otherwise. Written on the worker's
     * thread before the step's result completes exceptionally, which publishes it to the wrapper's thread.
     */
    private MemorySegment ownBlocksAtFailure;
    private final DataParallelSettings settings;
    private final SyncMetrics metrics;
    private final ShardSource shardSource;
    private final List<StateUpdateReduction.Entry> stateEntries;
    private final BackpropProgress backpropProgress;
    private final Reducer reducer = Reducer.forThisJvm();
    private final StateHook stateHook = new StateHook();

    // Owned by the worker thread.
    private Group group;
    private Communicator comm;
    /**
     * Sums and gathers of the step's host scalars (the loss, the non-finite verdicts): {@link #comm} itself on host
     * memory, in GPU mode a host communicator of the group's host transport (the GPU one takes device buffers).
     */
    private Communicator scalars;
    /** The synchronized BatchNorm layers' collectives ({@link DataParallelSettings#syncBatchNorm()}); null otherwise. */
    private SyncBatchNorm batchNorm;
    /** GPU mode's sync (null otherwise): the gradient view summed and divided on the device. */
    private GpuGradientAveraging gpuAveraging;
    private SymmetricMemory gradients;
    private GradientSynchronizer synchronizer;
    /** Set before {@link #ready} completes (its completion publishes it to the wrapper's thread). */
    private GradientAveraging averaging;
    private SymmetricMemory transferMemory;
    private Arena accumulationArena;
    private MemorySegment accumulated;
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
    private long syncStart;
    private long syncEnd;
    /** Set once the worker started, when sharding is on; read by the wrapper's thread while the worker is idle. */
    private volatile ShardedUpdater sharded;

    /**
     * @param shardSource      null for plain data parallelism; with sharding (settings.sharding() set),
     *                         where this worker's shard of the updater state comes from
     * @param stateEntries     the gradient-view entries that hold state updates, not gradients
     *                         ({@link StateUpdateReduction#find}); merged on their own each step
     * @param backpropProgress where the replica's backprop reports written layers (a replica built
     *                         by {@link ModelReplica#newReplicaWithBackpropSignals}); null without overlap
     */
    DataParallelWorker(int rank, GroupSource groupSource, ModelReplica replica, SymmetricMemory gradientHome,
                       DataParallelSettings settings, SyncMetrics metrics, ShardSource shardSource,
                       List<StateUpdateReduction.Entry> stateEntries, BackpropProgress backpropProgress) {
        // the wrapper rebuilds its workers after a failed step: the thread stops at the first one
        super("symmem4j-worker-" + rank, task -> task.batch() == null, AfterFailure.STOP);
        if ((settings.sharding() == null) != (shardSource == null)) {
            throw Invariants.violated("sharding=" + settings.sharding() + " needs a shard source exactly when set");
        }
        this.rank = rank;
        this.groupSource = groupSource;
        this.alone = settings.group() != null;
        this.gradientHome = gradientHome;
        this.replica = replica;
        this.settings = settings;
        this.metrics = metrics;
        this.shardSource = shardSource;
        this.stateEntries = List.copyOf(stateEntries);
        this.backpropProgress = backpropProgress;
    }

    ModelReplica replica() {
        return replica;
    }

    /** Stage 3's side of this worker (null otherwise); valid once {@link #ready()} completed. */
    FullySharded fullySharded() {
        return fullySharded;
    }

    /** This worker's sharded updater (null without sharding); valid once {@link #ready()} completed. */
    ShardedUpdater sharded() {
        return sharded;
    }

    /**
     * On the worker's thread: joins the group, opens the communicators, registers the gradient view, hooks the
     * replica; {@link #ready()} completes after it.
     */
    @Override
    protected void open() {
        group = groupSource.open();
        worldSize = group.worldSize();
        comm = Communicator.create(group);
        scalars = settings.gpuMode() ? group.hostTransport().communicator(group, CommunicatorOptions.defaults()) : comm;
        if (alone) {
            // one float64 per rank: the step's loss terms, summed in rank order (see mergeLoss)
            lossMemory = settings.gpuMode() ? group.hostTransport().allocate(group, 64) : SymmetricMemory.allocate(group, 64);
            lossAlgorithm = AlgorithmPolicy.oneShotWhereItRuns(scalars, 1, DType.FLOAT64, ReduceOp.SUM);
        }
        if (settings.sharding() == ZeroStage.PARAMETERS) {
            if (settings.hybrid()) { // HSDP: the blocks cut over this worker's shard group, summed over the replicas
                hybrid = HybridSharding.open(group, settings.shardGroupSize(), settings.policy());
                fullySharded = FullySharded.open(shardSource.model(), hybrid.shardGroup(), hybrid.shard(), hybrid);
            } else {
                fullySharded = FullySharded.open(shardSource.model(), group, comm);
            }
            replica = fullySharded.replica();
            if (settings.workspaceMode() != null) {
                replica.setTrainingWorkspaceMode(settings.workspaceMode());
            }
        }
        INDArray view = replica.gradientView();
        dtype = ModelReplica.dtypeOf(view.dataType());
        count = view.length();
        if (settings.gpuMode()) {
            gpuAveraging = GpuGradientAveraging.forNd4j(comm, settings.policy(), view, metrics);
        } else {
            startHostSync(group, view);
        }
        if (settings.syncBatchNorm()) {
            batchNorm = SyncBatchNorm.install(replica, group); // collective: every worker opens it here
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
    }

    /** {@link #open()} failed: the peers are told, and what it opened is freed. */
    @Override
    protected void openFailed(Throwable cause) {
        if (comm != null) {
            comm.abort("worker " + rank + " failed to start: " + cause);
        }
        RankRuntime.closeQuietly(lossMemory);
        RankRuntime.closeQuietly(batchNorm);
        RankRuntime.closeQuietly(fullySharded); // stage 3's parameter memory (its gradient memory is gradients, if set)
        RankRuntime.closeQuietly(gradients != null ? gradients
                : fullySharded != null ? fullySharded.gradientMemory() : gradientHome);
        RankRuntime.closeQuietly(hybrid); // after the shard group's memories
        RankRuntime.closeQuietly(scalars != comm ? scalars : null);
        // after the abort a close fails fast instead of meeting the peers; it still frees this rank's scratch
        RankRuntime.closeQuietly(comm);
        releaseQuietly(group);
    }

    /**
     * After the shutdown task, or this worker's failed step (the wrapper then rebuilds its workers). Collective
     * closes: every worker gets its shutdown task in the same round; the sync thread ends first, so nothing uses
     * the communicator while it closes.
     */
    @Override
    protected void close() {
        RankRuntime.closeQuietly(averaging);
        RankRuntime.closeQuietly(transferMemory);
        RankRuntime.closeQuietly(accumulationArena);
        RankRuntime.closeQuietly(fullySharded); // its parameter memory; the gradient memory is gradients
        RankRuntime.closeQuietly(gradients);
        RankRuntime.closeQuietly(hybrid); // after the shard group's memories
        RankRuntime.closeQuietly(lossMemory);
        RankRuntime.closeQuietly(batchNorm);
        RankRuntime.closeQuietly(scalars != comm ? scalars : null);
        RankRuntime.closeQuietly(comm);
        releaseQuietly(group);
    }

    /**
     * Host memory's sync (every mode but GPU mode): the gradient view registered as symmetric memory, or already
     * placed in it; its buckets at layer boundaries; the state reduction; plain averaging or the sharded updater.
     */
    private void startHostSync(Group group, INDArray view) {
        gradientSegment = ModelReplica.segmentOf(view);
        if (fullySharded != null) {
            gradients = fullySharded.gradientMemory(); // backprop writes each layer's gradient where the peers read it
        } else if (gradientHome == null) {
            gradients = SymmetricMemory.register(group, gradientSegment);
        } else {
            if (gradientHome.local().address() != gradientSegment.address()) {
                throw Invariants.violated("the replica's gradient view is not in its symmetric memory"
                        + " (ModelReplica.placeGradientView was not applied)");
            }
            gradients = gradientHome; // backprop writes the gradient where the peers read it
        }
        MemorySegment home = gradients.local();
        if (home.address() == gradientSegment.address() && home.byteSize() >= gradientSegment.byteSize()) {
            // Java reads the view through the memory's own segment, not ND4J's address reinterpreted to the global
            // scope: should the memory be freed while a thread of this rank still reads it (the sync thread outliving
            // its bounded join, say), the read fails with IllegalStateException instead of crashing the JVM (SIGSEGV)
            gradientSegment = home.asSlice(0, gradientSegment.byteSize());
        }
        AlgorithmPolicy policy = settings.policy();
        // buckets start at layer boundaries, so each can be reduced once its layers are written
        List<ModelReplica.LayerSlice> layers = replica.layerSlices();
        List<GradientBuckets.Bucket> buckets = GradientBuckets.splitAtBoundaries(count, dtype, settings.bucketBytes(),
                settings.minBucketBytes(), layers.stream().mapToLong(ModelReplica.LayerSlice::start).toArray());
        // stage 3 reduce-scatters layer by layer (FullySharded): no buckets
        synchronizer = fullySharded != null ? null
                : new GradientSynchronizer(comm, gradients, 0, dtype, buckets, policy, metrics);
        if (!stateEntries.isEmpty()) {
            // stage 3 gives a layer's pages back once its gradient is reduce-scattered: the rules read copies
            stateReduction = new StateUpdateReduction(stateEntries, replica, comm, fullySharded != null);
            if (fullySharded != null) {
                fullySharded.captureStateWith(stateReduction);
            }
        }
        if (shardSource == null) {
            averaging = startAveraging(group, buckets, layers);
        }
        if (shardSource != null) {
            // stage 3's verdicts and norms over the communicator its blocks are cut over (with HSDP, the shard group's:
            // each element once; the replicas hold the same bits, so every shard group agrees)
            ShardedUpdater s = new ShardedUpdater(settings.sharding(), shardSource.layout(), replica,
                    fullySharded != null ? fullySharded.communicator() : comm, gradients,
                    synchronizer, shardSource.fullState(), fullySharded == null ? null : fullySharded.ownRanges());
            if (fullySharded != null) {
                fullySharded.install(s); // the updater, and the step that subtracts the own blocks only
            } else {
                replica.installUpdater(s);
            }
            sharded = s;
        }
    }

    private void releaseQuietly(Group group) {
        if (group == null) {
            return;
        }
        try {
            groupSource.release(group);
        } catch (RuntimeException ignored) {
            // shutting down after a failure: peers may be gone
        }
    }

    /**
     * This worker's bucket averaging (plain data parallelism; null with sharding): its buckets and,
     * with a timeline, their stamps of the last step, read by the wrapper's thread once that step's
     * result future completed (see {@link GradientAveraging#bucketStartNanos()} for publication).
     * Valid once {@link #ready()} completed.
     */
    GradientAveraging averaging() {
        return averaging;
    }

    /** The reduced gradient this worker kept in its last step with {@code keepGradient}; null before. */
    GradientSnapshot gradientSnapshot() {
        return gradientSnapshot;
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
                backpropProgress != null, stateHook, settings.timeout(), settings.timelineSteps() > 0);
        if (backpropProgress != null) {
            backpropProgress.listen(a::layerWritten);
        }
        return a;
    }

    /** Runs one step and completes its future; false if the step failed (the future then holds the cause). */
    @Override
    protected boolean step(Task task) {
        current = task;
        syncNanos = 0;
        regularization = Double.NaN;
        keptActivations = null;
        syncStart = 0;
        syncEnd = 0;
        long start = System.nanoTime();
        boolean skipped = false;
        double earlierWeightedScore = 0;
        long earlierExamples = 0;
        try {
            Object batch = task.batch();
            MemorySegment earlierGradients = null;
            if (batch instanceof MicroBatches micro) {
                if (task.idle() || micro.batches().size() == 1) {
                    batch = micro.batches().getFirst(); // an idle worker contributes zeros: one pass is enough
                } else {
                    double[] earlier = accumulate(micro.batches().subList(0, micro.batches().size() - 1));
                    earlierWeightedScore = earlier[0];
                    earlierExamples = (long) earlier[1];
                    earlierGradients = accumulated;
                    batch = micro.batches().getLast();
                }
            }
            if (task.keepGradient() && (sharded != null || rank == 0 || alone)) {
                // plain: worker 0 (or the only local one) keeps the whole sum (the same on every rank); sharded: each its shard
                ensureGradientSnapshot(sharded == null ? 0 : sharded.start(), sharded == null ? count : sharded.end());
            }
            if (averaging != null) {
                stateHook.arm(task); // before beginStep, whose volatile write publishes it to the sync thread
                averaging.beginStep(task.idle(), task.stepExamples(), earlierGradients);
            }
            if (fullySharded != null) {
                fullySharded.beginStep(task.idle()); // gathers the first layer, which has no hook of its own
            }
            if (batchNorm != null) {
                batchNorm.beginStep(task.idle()); // an idle worker adds zeros to the BatchNorm sums
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
                if (batchNorm != null) {
                    batchNorm.abort("worker " + rank + " failed at step " + task.step() + ": " + e);
                }
            }
            if (averaging != null) {
                averaging.abandonStep();
            }
            keepOwnBlocksForShrink(e);
            task.result().completeExceptionally(e);
            return false;
        } finally {
            current = null;
        }
        long end = System.nanoTime();
        long stepNanos = end - start;
        if (sharded != null) {
            syncNanos += sharded.takeGatherNanos(); // the update's all-gather ran inside DL4J's updater call
        }
        if (fullySharded != null) {
            syncNanos += fullySharded.takeGatherNanos(); // stage 3's parameter gathers, inside forward and backprop
        }
        if (batchNorm != null) {
            syncNanos += batchNorm.takeNanos(); // the BatchNorm statistics' all-reduces, inside forward and backprop
        }
        metrics.recordWorkerStep(rank, stepNanos, syncNanos);
        double score = task.idle() ? 0 : score(earlierWeightedScore, earlierExamples, task);
        double mergedMeanLoss = Double.NaN;
        if (alone) { // every rank merges, also when the step was skipped (the verdict is the same on every rank)
            try {
                mergedMeanLoss = mergeLoss(task, score);
            } catch (RuntimeException e) {
                keepOwnBlocksForShrink(e); // the update ran: the blocks hold the step's end
                task.result().completeExceptionally(e);
                return false;
            }
        }
        task.result().complete(new Result(score, regularization, stepNanos, syncNanos, skipped, keptActivations, syncStart,
                syncEnd, start, end, mergedMeanLoss,
                fullySharded == null ? StepReport.Collectives.NONE : fullySharded.stepCollectives()));
        return true;
    }

    /**
     * HSDP under SHRINK: keeps this worker's own blocks past its close (the thread ends after a failed step), for
     * {@link HybridShrink} to take a surviving shard group's copy from (thread mode), or this survivor's own part of it
     * (group mode). A failed step never ran its local update
     * half-way: the update has no collective inside or after it that an abort could stop.
     */
    private void keepOwnBlocksForShrink(Throwable failure) {
        if (fullySharded == null || !settings.shrinks() || settings.shardGroupSize() == 0) {
            return;
        }
        try {
            ownBlocksAtFailure = fullySharded.packOwnBlocks(null);
        } catch (RuntimeException | Error e) {
            failure.addSuppressed(e); // the shrink then finds no copy of this worker's blocks and fails the fit
        }
    }

    /** This worker's own blocks as its failed step left them (HSDP under SHRINK), or null. */
    MemorySegment ownBlocksAtFailure() {
        return ownBlocksAtFailure;
    }

    /**
     * The step's mean loss over every rank's examples: each rank's term, its examples times its mean
     * loss (score less the regularization term) over the step's examples, summed over the ranks in rank
     * order — the sum the wrapper computes over its threads' results, term for term, so group mode
     * reports the bits thread mode does (an idle rank adds an exact 0).
     */
    private double mergeLoss(Task task, double score) {
        double term = task.idle() ? 0 : task.examples() * (score - regularization) / task.stepExamples();
        MemorySegment slot = lossMemory.local();
        slot.set(ValueLayout.JAVA_DOUBLE, 0, term);
        scalars.allReduce(lossMemory, 0, 1, DType.FLOAT64, ReduceOp.SUM, lossAlgorithm);
        return slot.get(ValueLayout.JAVA_DOUBLE, 0);
    }

    /**
     * This worker's score: DL4J's for its batch; with gradient accumulation the mean over its
     * micro-batches weighted by their examples (each a mean loss plus the same regularization term,
     * as the parameters do not change within a step).
     */
    private double score(double earlierWeightedScore, long earlierExamples, Task task) {
        if (earlierExamples == 0) {
            return replica.score();
        }
        long last = task.examples() - earlierExamples;
        return (earlierWeightedScore + last * replica.score()) / task.examples();
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
        long width = dtype.byteSize();
        MemorySegment.copy(gradientSegment, from * width, ModelReplica.segmentOf(snapshot.values()),
                (from - snapshot.start()) * width, (to - from) * width);
    }

    /** Allocates the gradient snapshot for elements [from, to) on the worker's thread (ND4J arrays outside workspaces). */
    private void ensureGradientSnapshot(long from, long to) {
        if (gradientSnapshot == null) {
            try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
                gradientSnapshot = new GradientSnapshot(Nd4j.create(replica.gradientView().dataType(),
                        Math.max(1, to - from)), from);
            }
        }
    }

    /**
     * Forward and backward passes over {@code batches}, no update: their gradients summed into
     * {@link #accumulated}; returns [Σ examples × score, Σ examples] over them.
     */
    private double[] accumulate(List<Object> batches) {
        double weightedScore = 0;
        long examples = 0;
        for (int m = 0; m < batches.size(); m++) {
            Object batch = batches.get(m);
            replica.computeGradient(batch);
            long n = MicroBatches.examples(batch);
            weightedScore += n * replica.score();
            examples += n;
            if (m == 0) {
                MemorySegment.copy(gradientSegment, 0, accumulated, 0, count * dtype.byteSize());
            } else {
                reducer.reduce(new MemorySegment[] {accumulated, gradientSegment}, new long[] {0, 0},
                        new DType[] {dtype, dtype}, 2, accumulated, 0, dtype, count, ReduceOp.SUM, 0, false);
            }
        }
        return new double[] {weightedScore, examples};
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
        if (rank == 0 || alone) {
            // the term DL4J's score added, for the parameters the score was computed with (before the update)
            regularization = replica.regularizationScore();
        }
        if (averaging != null) {
            // bucket by bucket: checked (zeroed when idle), summed, divided and checked again; the
            // state hook merges state updates and keeps the listeners' copy (see StateHook)
            GradientAveraging.Outcome outcome = averaging.finishStep();
            syncNanos = System.nanoTime() - start;
            if (outcome.reducedBad() >= 0) {
                nonFinite(task, outcome.localBad(), outcome.reducedBad());
            }
            return;
        }
        if (gpuAveraging != null) {
            // on the device, in ND4J's stream order: zeroed when idle, checked, summed, divided, checked again; the
            // listeners' copy of the sum taken between (alone is always true in GPU mode: one worker per rank)
            GradientAveraging.Outcome outcome = gpuAveraging.average(task.idle(), task.stepExamples(),
                    task.keepGradient() ? gradientSnapshot.values() : null);
            syncNanos = System.nanoTime() - start;
            if (outcome.reducedBad() >= 0) {
                nonFinite(task, outcome.localBad(), outcome.reducedBad());
            }
            return;
        }
        if (fullySharded != null) {
            // stage 3: the layers' gradients were reduce-scattered during backprop; what is left, then the shard
            fullySharded.finishBackward();
            if (stateReduction != null) {
                // from the copies taken before each layer's reduce-scatter; collective, the communication thread is idle
                stateReduction.reduce(task.examples(), task.stepExamples(), task.batch());
            }
            sharded.divideShard(task.stepExamples());
            if (stateReduction != null) {
                // the merged state updates replace the summed-and-divided entries in the own blocks, as stage 2 does
                long[] own = fullySharded.ownRanges();
                for (int i = 0; i < own.length; i += 2) {
                    stateReduction.write(own[i], own[i + 1]);
                }
            }
            long nonFiniteShards = sharded.agree();
            syncNanos = System.nanoTime() - start;
            if (nonFiniteShards > 0) {
                nonFinite(task, fullySharded.localBad(), sharded.firstNonFiniteIndex());
            }
            return;
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
                writeMergedState(sharded.start(), sharded.end(), keep);
            }
            long nonFiniteShards = sharded.agree();
            syncNanos = System.nanoTime() - start;
            if (nonFiniteShards > 0) {
                nonFinite(task, localBad, sharded.firstNonFiniteIndex());
            }
            return;
        }
        throw Invariants.violated("worker " + rank + " has neither a sharded updater nor averaging");
    }

    /**
     * What plain data parallelism does per bucket besides summing and dividing: state updates
     * merged before the first bucket that holds any is reduced (all of them at once, a collective:
     * every worker runs the same buckets in the same order) and written over the divided sum after
     * each such bucket; the listeners' undivided copy of the sum. Runs on the thread that syncs the
     * buckets: with overlap the communication thread, which reads {@link #hookTask}, written by the
     * worker before {@link GradientAveraging#beginStep} publishes the step (its volatile write).
     */
    private final class StateHook implements GradientAveraging.BucketHook {
        private Task hookTask;
        private boolean keep;
        private boolean reducedThisStep;

        /** Worker thread, before {@link GradientAveraging#beginStep}. */
        void arm(Task task) {
            hookTask = task;
            keep = task.keepGradient() && (rank == 0 || alone); // every rank holds the same sum: one copy serves
            reducedThisStep = false;
        }

        @Override
        public boolean waitsForWholeBackprop(long firstElement, long count) {
            // a state reduction reads every layer's state entries: their buckets wait for all of backprop
            return stateReduction != null && stateReduction.overlaps(firstElement, firstElement + count);
        }

        @Override
        public void beforeReduce(long firstElement, long count) {
            if (stateReduction != null && !reducedThisStep && stateReduction.overlaps(firstElement, firstElement + count)) {
                // from this worker's own values, so before the gradient reduction overwrites any of them
                stateReduction.reduce(hookTask.examples(), hookTask.stepExamples(), hookTask.batch());
                reducedThisStep = true;
            }
        }

        @Override
        public boolean wantsUndividedSum() {
            return keep;
        }

        @Override
        public void afterSum(long firstElement, long count) {
            if (keep) {
                keepGradient(firstElement, firstElement + count);
            }
        }

        @Override
        public long afterReduce(long firstElement, long count) {
            if (stateReduction == null || !stateReduction.overlaps(firstElement, firstElement + count)) {
                return -1;
            }
            writeMergedState(firstElement, firstElement + count, keep); // over the summed-and-divided state entries
            // the merged values replaced what the bucket's check saw: check them as well
            long bad = reducer.firstNonFinite(gradientSegment, firstElement * dtype.byteSize(), dtype, count);
            return bad < 0 ? -1 : firstElement + bad;
        }
    }

    /**
     * The merged state updates over their entries in [from, to) of the gradient view (summed and
     * divided there), and with {@code keep} over the listeners' undivided copy as well.
     */
    private void writeMergedState(long from, long to, boolean keep) {
        stateReduction.write(from, to);
        if (keep) {
            stateReduction.writeUndivided(gradientSnapshot.values(), gradientSnapshot.start(), from, to);
        }
    }

    private void nonFinite(Task task, long localBad, long reducedBad) {
        List<Integer> culprits = new ArrayList<>();
        List<String> details = new ArrayList<>();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mine = arena.allocate(8);
            MemorySegment all = arena.allocate(8L * worldSize);
            mine.set(ValueLayout.JAVA_DOUBLE, 0, localBad);
            scalars.allGather(mine, all, 1, DType.FLOAT64);
            for (int r = 0; r < worldSize; r++) {
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
        throw new NonFiniteGradientException(message + " (fix: set nonFiniteGradients(SKIP_STEP) to skip such steps"
                + " instead, or lower the learning rate / clip gradients)", culprits, task.step());
    }
}
