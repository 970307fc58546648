package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients;
import org.symmem4j.dl4j.train.CheckpointLayout;
import org.symmem4j.dl4j.train.TrainerBuilder;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Provider;

/**
 * The data-parallel trainer's own options, {@link SymmemParallelWrapper.Builder}'s, with their checks: each as it is
 * set, then against each other and the model before the wrapper is created ({@link #check()}). The options every
 * trainer takes (group, timeout, meters, step listeners, timeline) are {@link TrainerBuilder}'s; the wrapper reads
 * both. Not public: users see these methods on {@code SymmemParallelWrapper.Builder}, its one subclass.
 */
abstract sealed class DataParallelBuilder
        extends TrainerBuilder<SymmemParallelWrapper.Builder, SymmemParallelWrapper.StepListener>
        permits SymmemParallelWrapper.Builder {

    /**
     * Default smallest bucket: an all-reduce has a fixed cost (a few barriers: microseconds, more
     * with many workers), so layers smaller than this share a bucket with the layer below.
     */
    static final long DEFAULT_MIN_BUCKET_BYTES = 256L << 10;

    final ModelReplica model;
    /** The configuration the model was built from ({@link SymmemParallelWrapper#builder(org.deeplearning4j.nn.conf.MultiLayerConfiguration)}), or null. */
    final org.deeplearning4j.nn.conf.MultiLayerConfiguration configuration;
    int workers = Runtime.getRuntime().availableProcessors();
    boolean workersSet;
    long bucketBytes = 4L << 20;
    boolean bucketBytesSet;
    Algorithm algorithm;
    AlgorithmPolicy policy;
    NonFiniteGradients nonFiniteGradients = NonFiniteGradients.FAIL;
    ZeroStage sharding;
    /** Hybrid sharding's workers per shard group; 0: stage 3 over every worker. */
    int shardGroupSize;
    boolean overlap;
    int accumulation = 1;
    GradientTransfer gradientTransfer = GradientTransfer.NETWORK_DTYPE;
    long minBucketBytes = DEFAULT_MIN_BUCKET_BYTES;
    int prefetchBuffer;
    boolean reportScoreAfterAveraging;
    WorkspaceMode workspaceMode;
    boolean workspaceModeSet;
    WorkerFailure onWorkerFailure = WorkerFailure.FAIL;
    int minWorkers = 1;
    boolean minWorkersSet;
    boolean syncBatchNorm;
    /** {@link #group(org.symmem4j.parallel.DeviceMesh, String)}: the mesh and its data-parallel dimension, or null. */
    org.symmem4j.parallel.DeviceMesh mesh;
    String meshDataParallel;
    /** Checked at build(): SHRINK on the mesh, or null. */
    MeshShrink meshShrink;

    DataParallelBuilder(Model model) {
        this.model = ModelReplica.of(Objects.requireNonNull(model, "model"));
        this.configuration = model instanceof ConfigurationStart.Network n ? n.getLayerWiseConfigurations() : null;
    }

    /**
     * Worker threads, one replica each (default: the number of cores).
     *
     * @param workers the number of worker threads, at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code workers} is below 1
     */
    public SymmemParallelWrapper.Builder workers(int workers) {
        if (workers < 1) {
            throw new IllegalArgumentException("workers=" + workers + " must be >= 1 (default: the number of cores, "
                    + Runtime.getRuntime().availableProcessors() + "; fix: pass a positive count, or leave workers unset)");
        }
        this.workers = workers;
        this.workersSet = true;
        return self();
    }


    /**
     * Largest gradient bucket all-reduced at once (default 4 MiB); each bucket gets its own algorithm. Not in GPU
     * mode ({@link #group}), which all-reduces the whole gradient view in one call: refused at {@code build()}.
     *
     * @param bucketBytes the largest bucket in bytes, at least 64
     * @return this builder
     * @throws IllegalArgumentException when {@code bucketBytes} is below 64
     */
    public SymmemParallelWrapper.Builder bucketBytes(long bucketBytes) {
        if (bucketBytes < 64) {
            throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " must be >= 64 (default 4 MiB; fix: pass"
                    + " a size in bytes, e.g. 4L << 20, or leave it unset)");
        }
        this.bucketBytes = bucketBytes;
        this.bucketBytesSet = true;
        return self();
    }

    /**
     * Forces one all-reduce algorithm for every bucket (logged as forced); default: the calibrated policy.
     *
     * @param algorithm on host memory ONE_SHOT, TWO_SHOT or RING ({@code NCCL} is refused at {@code build()}); in GPU
     *                  mode ({@link #group}) ONE_SHOT, TWO_SHOT or NCCL
     * @return this builder
     */
    public SymmemParallelWrapper.Builder algorithm(Algorithm algorithm) {
        this.algorithm = Objects.requireNonNull(algorithm, "algorithm");
        return self();
    }

    /**
     * A custom algorithm policy (default {@link AlgorithmPolicy#calibrated()}).
     *
     * @param policy picks each bucket's algorithm from its size
     * @return this builder
     */
    public SymmemParallelWrapper.Builder policy(AlgorithmPolicy policy) {
        this.policy = Objects.requireNonNull(policy, "policy");
        return self();
    }

    /**
     * What to do when the averaged gradient is not finite (default {@link NonFiniteGradients#FAIL}).
     *
     * @param mode {@link NonFiniteGradients#FAIL} or {@link NonFiniteGradients#SKIP_STEP}
     * @return this builder
     */
    public SymmemParallelWrapper.Builder nonFiniteGradients(NonFiniteGradients mode) {
        this.nonFiniteGradients = Objects.requireNonNull(mode, "nonFiniteGradients");
        return self();
    }

    /**
     * ND4J (OpenMP) threads per worker (default: cores ÷ workers, at least 1).
     *
     * @param threads ND4J and BLAS threads each worker uses during {@code fit()}, at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code threads} is below 1
     */
    public SymmemParallelWrapper.Builder ompThreadsPerWorker(int threads) {
        return ndThreadsPerRank("ompThreadsPerWorker", threads);
    }

    /**
     * ZeRO-style sharding: each worker keeps updater state only for its 1/N shard of the flat
     * parameter vector (see {@link ZeroStage}); with stage 3 also only its block of every layer's
     * parameters and gradient (docs/zero-stage-3.md). Training gives the same parameters as plain
     * data parallelism. Default: off.
     *
     * @param stage {@link ZeroStage#OPTIMIZER_STATE} (stage 1), {@link ZeroStage#GRADIENTS} (stage 2) or
     *              {@link ZeroStage#PARAMETERS} (stage 3: a MultiLayerNetwork on a host transport)
     * @return this builder
     */
    public SymmemParallelWrapper.Builder sharding(ZeroStage stage) {
        this.sharding = Objects.requireNonNull(stage, "stage");
        return self();
    }

    /**
     * Hybrid sharding (PyTorch FSDP2's HSDP) with {@code sharding(ZeroStage.PARAMETERS)}: the N workers form N / S
     * replicas of S workers each (a {@code replicate × shard} mesh, neighbouring ranks in one shard group, e.g. the
     * workers of one machine); stage 3 shards every layer inside each group, so a worker keeps 1/S of the parameters,
     * gradient and updater state, and each layer's reduce-scattered block is then all-reduced over the N / S
     * replicas (docs/zero-stage-3.md, "Hybrid sharding"). The result equals plain data parallelism to rounding (the
     * gradient is summed in another order), bitwise the same in every run. Checkpoints are stage 3's, written by the
     * first replica's S workers (a stage-3 checkpoint of S workers, restorable onto any worker count and shard group
     * size). Default: every worker in one shard group (S = N, plain stage 3).
     *
     * @param shardGroupSize S: a divisor of the worker count, at least 2 (checked at {@code build()})
     * @return this builder
     * @throws IllegalArgumentException when {@code shardGroupSize} is below 1
     */
    public SymmemParallelWrapper.Builder shardGroupSize(int shardGroupSize) {
        if (shardGroupSize < 1) {
            throw new IllegalArgumentException("shardGroupSize=" + shardGroupSize + ": expected at least 2 workers per"
                    + " shard group (fix: a divisor of the worker count, e.g. the workers of one machine)");
        }
        this.shardGroupSize = shardGroupSize;
        return self();
    }

    /**
     * Synchronized BatchNorm (default off), as PyTorch's {@code SyncBatchNorm}: every {@code BatchNormalization}
     * layer normalizes with the mean and variance of the whole step's batch — every worker's examples — instead of
     * its worker's share, and backpropagates through those statistics, so a BatchNorm network trains like one model
     * fitted on the merged batch, running statistics included. The configuration stays DL4J's: each worker's replica
     * runs a synchronized implementation of the same layer over the same parameters ({@link SyncBatchNorm}). It costs
     * three small all-reduces per BatchNorm layer and step (two in the forward pass, one in the backward). Batches
     * of different sizes are fine (the counts are summed too). Dense (2-D) and convolution (4-D, NCHW or NHWC) input.
     * Refused at {@code build()}: a model without BatchNormalization, a frozen one, ZeRO stage 3, GPU mode.
     *
     * @param sync true to synchronize the BatchNorm layers over the workers
     * @return this builder
     */
    public SymmemParallelWrapper.Builder syncBatchNorm(boolean sync) {
        this.syncBatchNorm = sync;
        return self();
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
    public SymmemParallelWrapper.Builder overlapSyncWithBackprop(boolean overlap) {
        this.overlap = overlap;
        return self();
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
    public SymmemParallelWrapper.Builder gradientAccumulation(int microBatches) {
        if (microBatches < 1) {
            throw new IllegalArgumentException("gradientAccumulation=" + microBatches + " must be >= 1 (1: none; fix: pass"
                    + " the number of micro-batches per step, or leave it unset)");
        }
        this.accumulation = microBatches;
        return self();
    }

    /**
     * The format gradients are transferred in (default {@link GradientTransfer#NETWORK_DTYPE}); not with sharding.
     *
     * @param transfer the network's own data type, or BFLOAT16
     * @return this builder
     */
    public SymmemParallelWrapper.Builder gradientTransfer(GradientTransfer transfer) {
        this.gradientTransfer = Objects.requireNonNull(transfer, "gradientTransfer");
        return self();
    }

    /** Smallest bucket (default 256 KiB), see {@link org.symmem4j.gradsync.GradientBuckets#splitAtBoundaries}; tests use small ones. */
    SymmemParallelWrapper.Builder minBucketBytes(long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("minBucketBytes=" + bytes + " must be >= 0 (fix: pass a size in"
                    + " bytes, 0 for no minimum, or leave it unset)");
        }
        this.minBucketBytes = bytes;
        return self();
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
     * {@code build()}: {@code n >= 0}.
     *
     * @param n batches read ahead on a background thread; 0 reads on the calling thread
     * @return this builder
     */
    public SymmemParallelWrapper.Builder prefetchBuffer(int n) {
        this.prefetchBuffer = n;
        return self();
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
    public SymmemParallelWrapper.Builder reportScoreAfterAveraging(boolean report) {
        this.reportScoreAfterAveraging = report;
        return self();
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
     * training passes: the replicas run no inference. Checked at {@code build()}: not null, and
     * not DL4J's deprecated SINGLE or SEPARATE.
     *
     * @param mode ENABLED or NONE (checked at {@code build()})
     * @return this builder
     */
    public SymmemParallelWrapper.Builder workspaceMode(WorkspaceMode mode) {
        this.workspaceMode = mode;
        this.workspaceModeSet = true;
        return self();
    }

    /**
     * What a worker's failure during a step does (default {@link WorkerFailure#FAIL}: {@code fit()} throws, the model
     * left as before it).
     *
     * <p>{@link WorkerFailure#SHRINK}, in place, without a restart: the workers whose own step failed (an exception or
     * error on the worker's thread) are dead; the others abort the step's collective at once (the failing worker
     * aborts it, bounded by the timeout in any case), and the wrapper agrees on the membership from what each worker
     * did: which survivors completed the step and which were stopped before their update (their state is the step's
     * start). Every survivor takes the state of the last step that every survivor completed (a survivor's replica
     * that holds it; one that went further is replaced), the old group is stopped and its symmetric memory released,
     * a new in-JVM group of the survivors is formed (new threads, replicas and symmetric memory; the survivors keep
     * their order, renumbered densely from 0), and the same {@code fit()} goes on. The failed step is redone on the
     * survivors unless every survivor had completed it (the dead worker failed after the step's sync). Each shrink is
     * logged and kept as a {@link ShrinkReport} ({@link SymmemParallelWrapper#shrinks()}). When a failure would
     * leave fewer than {@link #minWorkers} workers, {@code fit()} throws {@link DataParallelTrainingException} saying
     * so, with the dead worker's failure as its cause, and the model is left as it was before that {@code fit()}.
     *
     * <p>The data order: nothing is skipped. The batches of the failed step go back in front of the batches not yet
     * trained, and from then on every step deals as many batches as there are survivors (times
     * {@link #gradientAccumulation}) from that one stream: after the shrink the wrapper trains exactly as a wrapper
     * with {@code workers(survivors)} would, started from the agreed state, on the batches from the failed step's
     * first batch on. So the survivors split the global stream, and a step after the shrink has fewer examples than
     * one before it (the per-worker batch size is unchanged). {@link #ompThreadsPerWorker}, when not set, is shared
     * anew among the survivors, as a wrapper built for that many workers would.
     *
     * <p>Group mode (one JVM per worker, {@link #group}): the group must be able to shrink
     * ({@link org.symmem4j.parallel.Group#canShrink()}): a process group on its host transport whose processes
     * {@code symmem4j-run --on-failure shrink} started, or the world group of rank threads of
     * {@code InJvmWorld.createShrinking} (a rank whose task throws is its dead). A rank whose step fails on its own (not on a peer's failure)
     * throws from {@code fit} as with FAIL, and its program should exit: the launcher then announces it dead and the
     * others shrink without it. The others' steps fail on the peer's death; each waits until the launcher names the
     * dead ranks, the survivors form a new process group (re-ranked densely in their old order, its store hosted by
     * the first survivor: whichever rank died, rank 0 included), agree over it on the iteration count they all
     * completed (each rank keeps a copy of its state at every step's start for this, a copy of the parameters and
     * updater state per step; not with {@link #sharding}, which goes back to a checkpoint instead), and go on. The
     * wrapper closes the group it formed; the group given to the builder stays the caller's to close (it is aborted: its close waits for nobody). GPU mode cannot shrink.
     *
     * <p>With {@link #sharding} (threads of one JVM or group mode, every stage; stage 3 not on a model started from its
     * configuration; {@link #shardGroupSize(int)} below) the dead worker's shard is lost
     * with it, so the survivors go back instead to the newest complete periodic checkpoint of the {@code fit} (required:
     * {@code checkpointEvery}, refused at {@code build()} without it), re-sliced onto them, or to the fit's start
     * before its first checkpoint, and redo the steps since it with the failed step's batches: the result equals a
     * run resumed from that checkpoint on the survivors, bitwise; listeners see the redone steps again (docs/shrink.md).
     * In group mode the survivors' group restores the checkpoint collectively (its directory must be one every rank
     * reads: one machine, or a shared file system).
     *
     * <p>With hybrid sharding ({@link #shardGroupSize(int)}: stage 3 in shard groups, replicated across them) no
     * checkpoint is needed: the dead worker's shard group leaves whole (in group mode its live ranks' {@code fit()}
     * throws {@link ReplicaLostException}), the other groups, each holding a whole copy, go on as hybrid sharding with
     * fewer replicas from the last step every survivor completed, redoing the failed step: bitwise as hybrid sharding
     * of the survivors' shape from that step. A death in the only shard group left fails the fit (recover by RESTART);
     * {@code shardGroupSize} equal to the worker count is refused at {@code build()} (docs/shrink.md).
     *
     * <p>Not with {@link #recordTimeline}, whose tracks are the
     * workers at build time. A worker that fails the same way on every batch (a bug, not a lost worker) shrinks the
     * group one worker at a time down to {@code minWorkers}: set it to the fewest workers worth training on.
     *
     * <p>On a {@code dp x tp} mesh (a tensor-parallel network), build with {@link #group(org.symmem4j.parallel.DeviceMesh,
     * String)}: a dead rank takes its whole replica with it (its tp peers' {@code fit()} throws
     * {@link ReplicaLostException}), and the other replicas go on as plain {@code dp x tp} on fewer replicas, as
     * processes of {@code symmem4j-run --on-failure shrink} or thread ranks of a shrinking world
     * ({@code InJvmWorld.createShrinking}); with ZeRO stages 1 to 3 the survivors go back to the newest checkpoint of
     * their tp shard. Refused at {@code build()}: a mesh whose world cannot shrink, and hybrid sharding
     * ({@link #shardGroupSize}) on a mesh.
     *
     * @param mode {@link WorkerFailure#FAIL} or {@link WorkerFailure#SHRINK}
     * @return this builder
     */
    public SymmemParallelWrapper.Builder onWorkerFailure(WorkerFailure mode) {
        this.onWorkerFailure = Objects.requireNonNull(mode, "onWorkerFailure");
        return self();
    }

    /**
     * Group mode on a {@code dp x tp} mesh: trains over {@code mesh.group(dataParallel)}, as
     * {@code group(mesh.group(dataParallel))} does, and with {@link WorkerFailure#SHRINK} shrinks the mesh in place when
     * a rank dies: its whole replica (the ranks of its tensor-parallel group) leaves (their {@code fit()} throws
     * {@link ReplicaLostException}), the survivors rebuild the dp and tp groups over the remaining replicas, attach the
     * network to a communicator over its new tp group, and go on as plain {@code dp x tp} on them from the failed step
     * (docs/shrink.md); with ZeRO stage 1, 2 or 3 (and {@code checkpointEvery}) the survivors go back to the newest
     * checkpoint of their tp shard, re-sliced onto the fewer dp ranks. Checked at {@code build()} with SHRINK: two
     * dimensions, the network attached to the other one's group, a mesh made from a process group of
     * {@code symmem4j-run --on-failure shrink} or from threads of {@code InJvmWorld.createShrinking}.
     *
     * @param mesh         the mesh the network's tensor-parallel group comes from
     * @param dataParallel its data-parallel dimension, e.g. {@code "dp"}
     * @return this builder
     * @throws IllegalArgumentException when the mesh has no such dimension
     */
    public SymmemParallelWrapper.Builder group(org.symmem4j.parallel.DeviceMesh mesh, String dataParallel) {
        org.symmem4j.parallel.Group dp = Objects.requireNonNull(mesh, "mesh").group(dataParallel);
        this.mesh = mesh;
        this.meshDataParallel = dataParallel;
        return group(dp);
    }

    /**
     * The fewest workers an {@link WorkerFailure#SHRINK} may leave (default 1): a failure that would leave fewer ends
     * {@code fit()} with {@link DataParallelTrainingException}. Checked at {@code build()}: only with SHRINK, and at
     * most {@link #workers}.
     *
     * @param minWorkers at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code minWorkers} is below 1
     */
    public SymmemParallelWrapper.Builder minWorkers(int minWorkers) {
        if (minWorkers < 1) {
            throw new IllegalArgumentException("minWorkers=" + minWorkers + ": expected >= 1 (the fewest workers a"
                    + " shrink may leave; fix: minWorkers(1), the default)");
        }
        this.minWorkers = minWorkers;
        this.minWorkersSet = true;
        return self();
    }

    /**
     * Checks the settings against each other and the model, then attaches the builder's listeners to the model:
     * what {@code build()} does before it creates the wrapper.
     *
     * <p>In group mode every rank's verdict is agreed before any rank goes on ({@link CheckpointLayout#agreeOnBuild},
     * over every tp rank of every data-parallel replica): each rank checks its own settings, model and checkpoint roots,
     * and when any rank refused, every rank throws the same error naming the ranks that refused and why, instead of
     * the others going on into the wrapper's first collective and waiting there for the refusing ones until their
     * timeout. In the same exchange every rank learns every other's settings ({@link WrapperSettingsAgreement}): when
     * they differ, every rank throws one error naming each setting that differs and each rank's value.
     *
     * @throws IllegalArgumentException when settings conflict or the model cannot be trained this way (on every rank,
     *                                  in group mode, when one rank's did or could not)
     */
    final void check() {
        Group group = options().group();
        RuntimeException refusal = null;
        // a tensor-parallel rank's: the agreement spans its tp group (one not attached, refused, leaves it by an abort)
        CheckpointLayout layout = CheckpointLayout.forBuild(model.model());
        boolean agreed = group != null || layout.isTensorParallel();
        String settings = null;
        try {
            checkAlone(group);
            settings = agreed ? WrapperSettingsAgreement.describe(this, options().checkpointSchedule(),
                    options().resumeRoot() != null) : null;
        } catch (IllegalArgumentException | IllegalStateException | java.io.UncheckedIOException e) {
            refusal = e;
        }
        if (agreed) {
            // every rank the same verdict and settings before any allocates or joins a collective: none waits for one
            WrapperSettingsAgreement.requireSame(layout.agreeOnBuild("build()", refusal, settings, group));
        } else if (refusal != null) {
            throw refusal;
        }
        // refused listeners are refused above (checkAlone); attaches the builder's
        attachListeners();
    }

    /**
     * The checkpoint layout of the model, for its checkpoint roots; a tensor-parallel network not attached to its group
     * is refused (it has no rank to find its directory by).
     */
    private static CheckpointLayout layoutOf(ModelReplica model) {
        try {
            return CheckpointLayout.of(model.model());
        } catch (IllegalStateException e) {
            throw new IllegalArgumentException("checkpointEvery/resumeFrom with a tensor-parallel network not attached to"
                    + " its group: expected the communicator whose rank says which tp-R-of-S directory is this rank's,"
                    + " found no layer attached (fix: call TensorParallel.attach(network, tpCommunicator) before"
                    + " build())", e);
        }
    }

    /**
     * A tensor-parallel network's layers run collectives over its tp group in every forward and backward pass: one not
     * attached to the group cannot train (and its tp peers would wait for it).
     */
    private void requireAttached() {
        try {
            org.symmem4j.dl4j.tensor.TensorParallel.placement(model.model());
        } catch (IllegalStateException e) {
            throw new IllegalArgumentException("a tensor-parallel network not attached to its group: expected its"
                    + " tensor-parallel layers bound to the tp group's communicator (their forward and backward passes"
                    + " run collectives over it), found no layer attached (fix: call TensorParallel.attach(network,"
                    + " tpCommunicator) on every rank before build())", e);
        }
    }

    /** {@link #check}'s checks on this rank alone: throws what this rank refuses, agreeing with no other. */
    private void checkAlone(Group group) {
        boolean gpuMode = DataParallelSettings.gpuMode(group);
        if (group != null) {
            checkGroupMode();
        }
        if (!gpuMode && algorithm != null && algorithm.provider() == Provider.NCCL) {
            throw new IllegalArgumentException("algorithm=" + algorithm + " needs a GPU transport; workers here share host memory"
                    + " (fix: use ONE_SHOT, TWO_SHOT or RING, or leave the choice to the calibrated policy)");
        }
        if (sharding != null && (overlap || accumulation > 1 || gradientTransfer != GradientTransfer.NETWORK_DTYPE)) {
            throw new IllegalArgumentException("sharding=" + sharding + " with overlapSyncWithBackprop=" + overlap
                    + " gradientAccumulation=" + accumulation + " gradientTransfer=" + gradientTransfer
                    + ": expected none of these with sharding (its reduce-scatter runs in the gradient hook);"
                    + " fix: drop sharding, or these options");
        }
        checkShardGroupSize();
        if (configuration != null) {
            startFromConfiguration(group, gpuMode);
        } else if (model.model() instanceof GraphConfigurationStart.Graph g) {
            GraphConfigurationStart.start(g, sharding, workers, shardGroupSize, group, gpuMode);
        }
        ModelReplica.ensureInitialized(model);
        if (gpuMode) {
            checkGpuMode();
        }
        boolean tensorParallel = model.model() instanceof MultiLayerNetwork m && org.symmem4j.dl4j.tensor.TensorParallel.isSharded(m)
                || model.model() instanceof ComputationGraph g && org.symmem4j.dl4j.tensor.TensorParallel.isSharded(g);
        checkCheckpointRoots();
        if (group == null && workers > 1 && tensorParallel) {
            throw new IllegalArgumentException("workers=" + workers + " threads with a tensor-parallel network: each"
                    + " worker would use this rank's tensor-parallel group at once; expected group mode, one worker per"
                    + " rank (fix: builder(model).group(dataParallelGroup), e.g. DeviceMesh.of(world, \"dp\", d, \"tp\", t)"
                    + ".group(\"dp\"))");
        }
        if (tensorParallel) {
            requireAttached();
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
        if (syncBatchNorm) {
            checkSyncBatchNorm(gpuMode);
        }
        refuseLayersWithReplicaState(model);
        checkWorkerFailure(group);
        checkParallelWrapperSettings();
        // refuses listeners it cannot call as fit() would (fit() checks again); check() attaches them once agreed
        listenerOptions().check(model, l -> SymmemParallelWrapper.refuseListenersThatNeedOnePass(accumulation, l));
    }

    /**
     * Periodic checkpoints and resumes: a tensor-parallel network's go to its rank's own {@code tp-R-of-S} directory
     * ({@link CheckpointLayout}), so it must be attached (its rank known); a root written by a plain run for a
     * tensor-parallel one (and the reverse) is refused before anything is written (another tensor-parallel degree's is
     * re-sliced at the resume).
     */
    private void checkCheckpointRoots() {
        java.nio.file.Path written = options().checkpointSchedule() == null ? null : options().checkpointSchedule().root();
        java.nio.file.Path read = options().resumeRoot();
        if (written == null && read == null) {
            return;
        }
        CheckpointLayout layout = layoutOf(model); // check() agrees what any rank refused here with every other
        try {
            for (java.nio.file.Path root : new java.nio.file.Path[] {written, read}) {
                if (root != null) {
                    layout.checkRoot(root);
                }
            }
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("checkpoint root " + (written != null ? written : read) + ": "
                    + e.getMessage() + " (expected a directory this rank can list; fix: make it readable, or give"
                    + " another root)", e);
        }
    }

    /** Hybrid sharding's shard group size against the stage and the worker count (group mode's: the group's size). */
    private void checkShardGroupSize() {
        if (shardGroupSize == 0) {
            return;
        }
        if (sharding != ZeroStage.PARAMETERS) {
            throw new IllegalArgumentException("shardGroupSize=" + shardGroupSize + " with sharding=" + sharding + ":"
                    + " expected sharding(ZeroStage.PARAMETERS), whose parameters, gradient and updater state are sharded"
                    + " inside each group (fix: add .sharding(ZeroStage.PARAMETERS), or drop shardGroupSize)");
        }
        HybridSharding.check(workers, shardGroupSize);
    }

    /**
     * A model built from a configuration ({@link ConfigurationStart}): the stage's model state is planned and checked
     * against this process's caps before anything is allocated, then the model is initialised, hollow for stage 3.
     */
    private void startFromConfiguration(Group group, boolean gpuMode) {
        int local = group == null ? workers : 1;
        boolean symmetricGradient = group != null && !gpuMode;
        // with hybrid sharding each worker holds 1/S, not 1/N (blocks cut over its shard group)
        ModelStatePlan plan = ModelStatePlan.of(configuration, sharding, workers, shardGroupSize, local,
                symmetricGradient);
        ModelStatePlan stage3 = sharding == ZeroStage.PARAMETERS ? null
                : ModelStatePlan.of(configuration, ZeroStage.PARAMETERS, workers, local, symmetricGradient);
        plan.check(ConfigurationStart.Caps.ofThisProcess(), stage3);
        ConfigurationStart.Network net = (ConfigurationStart.Network) model.model();
        if (sharding == ZeroStage.PARAMETERS) {
            ConfigurationStart.makeHollow(net);
        } else {
            net.init();
        }
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

    /** {@link #onWorkerFailure} and {@link #minWorkers}: what SHRINK cannot do yet is refused before anything starts. */
    private void checkWorkerFailure(Group group) {
        if (onWorkerFailure != WorkerFailure.SHRINK) {
            if (minWorkersSet) {
                throw new IllegalArgumentException("minWorkers=" + minWorkers + " with onWorkerFailure="
                        + onWorkerFailure + ": minWorkers bounds a shrink, which FAIL never does (fix:"
                        + " onWorkerFailure(WorkerFailure.SHRINK), or leave minWorkers unset)");
            }
            return;
        }
        if (mesh != null && group != mesh.group(meshDataParallel)) {
            throw new IllegalArgumentException("group(mesh, \"" + meshDataParallel + "\") then group(" + group + "):"
                    + " expected the mesh's data-parallel group (fix: call one of them)");
        }
        meshShrink = MeshShrink.checkBuild(mesh, meshDataParallel, group, model.model());
        if (sharding == ZeroStage.PARAMETERS && shardGroupSize > 0) { // HSDP: a surviving shard group's copy
            HybridShrink.checkBuild(workers, shardGroupSize, meshShrink != null, ConfigurationStart.isHollow(model));
        } else if (sharding != null) { // back to the newest checkpoint
            ShardedShrink.checkBuild(sharding, options().checkpointSchedule() != null, ConfigurationStart.isHollow(model));
        }
        if (group != null && group.transport() != group.hostTransport()) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with group(...) of " + group + " on transport "
                    + group.transport().name() + " (GPU mode): the wrapper rebuilds only host memory after a shrink;"
                    + " expected a process group on its host transport (fix: train on the host transport, recover GPU mode"
                    + " by RESTART: checkpointEvery(k, dir).resumeFrom(dir) under symmem4j-run --max-restarts N, or train"
                    + " without DL4J with org.symmem4j.parallel.tensor.ShrinkingMlp, which shrinks GPU groups)");
        }
        if (group != null && meshShrink == null && !group.canShrink()) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with group(...) of " + group + ", which cannot"
                    + " shrink in place: expected a process group on its host transport started by symmem4j-run"
                    + " --on-failure shrink (SYMMEM4J_MEMBERSHIP_FILE is " + (System.getenv("SYMMEM4J_MEMBERSHIP_FILE")
                    == null ? "unset" : "set") + "), whose launcher names the dead ranks (fix: start the job with"
                    + " symmem4j-run --on-failure shrink, train as workers(n) threads of one JVM or as ranks of"
                    + " InJvmWorld.createShrinking(n, options), or recover by RESTART:"
                    + " onWorkerFailure(FAIL) with checkpointEvery(k, dir).resumeFrom(dir) under symmem4j-run"
                    + " --max-restarts N)");
        }
        if (options().timelineSteps() > 0) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with recordTimeline: the timeline's tracks are"
                    + " the workers at build time and a shrink changes them; expected no timeline (fix: drop"
                    + " recordTimeline, or onWorkerFailure(FAIL))");
        }
        if (minWorkers > workers) {
            throw new IllegalArgumentException("minWorkers=" + minWorkers + " with workers=" + workers + ": expected"
                    + " minWorkers <= workers (fix: minWorkers(" + workers + ") or fewer)");
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
        listenerOptions().attachTo(model, l -> SymmemParallelWrapper.refuseListenersThatNeedOnePass(accumulation, l));
    }

    /** What synchronized BatchNorm cannot run with, and the model's layers it would synchronize. */
    private void checkSyncBatchNorm(boolean gpuMode) {
        if (gpuMode) {
            throw new IllegalArgumentException("syncBatchNorm(true) in GPU mode: expected host memory; the synchronized"
                    + " layers are not built for device arrays yet (fix: drop syncBatchNorm, or train on the host"
                    + " transport)");
        }
        if (sharding == ZeroStage.PARAMETERS) {
            throw new IllegalArgumentException("syncBatchNorm(true) with sharding=" + sharding + ": stage 3 builds its"
                    + " replicas over gathered layers the synchronized BatchNorm does not replace; expected no sharding"
                    + " or stage 1/2 (fix: sharding(ZeroStage.GRADIENTS), or drop syncBatchNorm)");
        }
        SyncBatchNorm.check(model);
    }

    /**
     * Refuses the one DL4J 1.0.0-M2.1 layer whose training state lives outside the parameters:
     * OCNNOutputLayer resets its radius r at each epoch to a quantile of a window of the outputs
     * that layer instance saw, so each replica would set its own r and the replicas would part.
     */
    private static void refuseLayersWithReplicaState(ModelReplica model) {
        for (org.deeplearning4j.nn.conf.layers.Layer layer : model.layerConfigurations()) {
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
