package org.symmem4j.dl4j.pipeline;

import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.InitialisationReplay;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.api.DataSet;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.TrainerBuilder;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.pipeline.channel.LinkPlan;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * The builder of a {@link PipelineParallelTrainer}:
 * {@code PipelineParallelTrainer.builder(model).ranks(2).microbatches(8).build()}. The options every
 * trainer takes (group, timeout, meters, step listeners, DL4J listeners, timeline) are {@link TrainerBuilder}'s.
 *
 * <p>Group mode ({@link #group}): this process (or thread) is one rank of {@code group}, which runs
 * {@code dataParallel x ranks} ranks laid out as in thread mode (world rank {@code d * pp + p} is
 * pipeline rank {@code p} of replica {@code d}; with {@link #tensorParallel} {@code dataParallel x ranks x size} ranks,
 * world rank {@code (d * pp + p) * tp + t}); {@code ranks} defaults to the group's size divided
 * by {@code dataParallel} (and the tensor-parallel size). Every rank runs the same program: it builds the same network (same seed
 * or file; checked at {@code build()}, with the other settings), and passes the same batches to
 * {@code fit} in the same order (checked before every step by a CRC-32C of each batch: a mismatch
 * fails on every rank before anything trains). Each rank trains and holds only its own stages, on the
 * caller's thread; every rank's {@link PipelineParallelTrainer#lastStep()} holds the same loss and
 * replica 0's timelines, gathered after each step, as in thread mode; at the end of every {@code fit} every
 * rank's model gets the whole trained network (a collective gather from the stages' owners). The result equals
 * thread mode's bitwise. With a split by
 * measured times every rank measures, and rank 0's split is used. For one JVM per rank started by
 * {@code symmem4j-run} (or torchrun or mpirun): {@code group(ProcessGroup.fromEnvironment())}. The
 * group must live on a host transport (DL4J's CPU activations are host memory) and stays the
 * caller's to close, after the trainer. {@link #timeout} does not apply (the group's own does).
 * In group mode DL4J listeners are called on every rank with the step's agreed loss and the rank's own stages
 * ({@link PipelineGroupListeners}), those that read the whole network during a step refused.
 */
public final class PipelineParallelTrainerBuilder
        extends TrainerBuilder<PipelineParallelTrainerBuilder, PipelineParallelTrainer.StepListener> {

    /** Profiling passes of {@link #splitByMeasuredTimes}: the first warms up. */
    static final int PROFILE_STEPS = 4;

    /** The network to train; for a graph, the chain network made from it at build(). */
    MultiLayerNetwork network;
    private final ComputationGraph graph;
    private int ranks;
    int dataParallel = 1;
    /** The tensor-parallel degree; 1 without tensor parallelism. */
    int tensorParallel = 1;
    int[] tensorParallelColumns = new int[0];
    /**
     * Made at build() when tensorParallel > 1 in thread mode: the shards and their splits, read by the trainer's
     * constructor (group mode: each rank builds its own shard of its stages there, {@link PipelineTensorParallelRank}).
     */
    PipelineTensorParallel tensorShards;
    boolean syncBatchNorm;
    /** ZeRO on the data-parallel axis ({@link #sharding}), or null. */
    ZeroStage sharding;
    private int microbatches;
    PipelineSchedule schedule = PipelineSchedule.ONE_F_ONE_B;
    private int stagesPerRank = 1;
    private int[] stageBoundaries;
    private int linkSlots;
    InputType inputType;
    private DataSet profileSample;
    private StageProfile profile;
    private InPipelineProfile inPipeline;

    /**
     * A network (or graph) started from a configuration: the reservation under it, hollow ({@link HollowNetworks}),
     * never holding its values; or null.
     */
    private final HollowNetworks.Reservation fromConfiguration;

    PipelineParallelTrainerBuilder(MultiLayerNetwork network, ComputationGraph graph) {
        this(network, graph, null);
    }

    PipelineParallelTrainerBuilder(MultiLayerNetwork network, ComputationGraph graph,
                                   HollowNetworks.Reservation fromConfiguration) {
        this.network = network;
        this.graph = graph;
        this.fromConfiguration = fromConfiguration;
    }

    /**
     * Pipeline ranks p: threads, each running {@code stagesPerRank} stages (required).
     *
     * @param ranks pipeline ranks (threads), at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code ranks} is below 1
     */
    public PipelineParallelTrainerBuilder ranks(int ranks) {
        if (ranks < 1) {
            throw new IllegalArgumentException("ranks=" + ranks + " expected ranks >= 1 (fix: pass the number of pipeline"
                    + " ranks, e.g. ranks(2))");
        }
        this.ranks = ranks;
        return this;
    }

    /**
     * Data-parallel replicas of the whole pipeline (default 1): {@code replicas x ranks} threads, a
     * {@code dp x pp} {@link org.symmem4j.parallel.DeviceMesh}. Each batch is cut into
     * {@code microbatches x replicas} equal pieces; replica {@code d} trains on pieces
     * {@code k * replicas + d} for {@code k = 0 .. microbatches-1} (its share, as its microbatches), and
     * before the update every stage's gradient sum, the loss, and batch normalization's statistics are
     * shared over that stage's replicas (its {@code dp} sub-group). One step then equals one step of a
     * single pipeline with {@code microbatches x replicas} microbatches on the whole batch, and so one
     * {@code fit} of the unsplit network on it (for networks without batch normalization or dropout;
     * with them, as the single pipeline defines them per microbatch); the replicas stay bitwise equal.
     *
     * @param replicas data-parallel replicas, at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code replicas} is below 1
     */
    public PipelineParallelTrainerBuilder dataParallel(int replicas) {
        if (replicas < 1) {
            throw new IllegalArgumentException("dataParallel=" + replicas + " expected dataParallel >= 1 (1: no"
                    + " data parallelism; fix: pass the number of pipeline replicas, or leave it unset)");
        }
        this.dataParallel = replicas;
        return this;
    }

    /**
     * Tensor parallelism inside the stages (default 1: none): every pipeline rank becomes {@code size} ranks, a
     * {@code dp x pp x tp} {@link org.symmem4j.parallel.DeviceMesh} of {@code dataParallel x ranks x size} threads (world
     * rank {@code (d * pp + p) * tp + t}), and each layer {@code c} of {@code columnLayers} with the layer after it
     * becomes a Megatron block split over the {@code tp} sub-group, as {@link org.symmem4j.dl4j.tensor.TensorParallel#shard}
     * makes it: {@code c} column-parallel, {@code c + 1} row-parallel, one all-reduce forward and one backward per block
     * and microbatch. Tensor-parallel rank {@code t} trains shard {@code t} of every stage of its pipeline rank; the
     * activations crossing a stage boundary are whole (the same on every tp rank), gradients of a shard are summed over
     * its {@code dp} sub-group only, and replicated parameters stay bitwise equal over {@code tp} without a sum. One step
     * equals one {@code fit} of the unsharded network on the whole batch, to rounding. The model given to the builder
     * stays unsharded: after every {@code fit} it holds the shards joined.
     *
     * <p>In group mode ({@link #group}, one process per rank) the group's {@code worldSize} must be
     * {@code dataParallel x ranks x size}, and world rank {@code (d * pp + p) * tp + t} builds and trains only shard
     * {@code t} of pipeline rank {@code p}'s stages: their parameters, gradients and updater state; the other stages and
     * the other shards are never built on it (the whole shard exists only as a hollow layout). The blocks' all-reduces
     * run over the rank's {@code tp} sub-group, the stages' messages over its {@code pp} sub-group, the gradient sums
     * over its {@code dp} sub-group; at the end of every {@code fit} every rank's model gets the whole network, each
     * stage's shards gathered from replica 0's ranks and joined (collective). The result is thread mode's, bitwise.
     *
     * <p>Refused at {@link #build()}, with the fix: a layer of a block that is not a {@code DenseLayer}, overlapping
     * blocks, a column-parallel width not divisible by {@code size}, settings a block cannot split exactly (dropout,
     * weight noise, layer normalization, gradient normalization by norm, softmax on the column-parallel layer), a stage
     * boundary inside a block ({@link #stageBoundaries}; the trainer's own splits keep blocks in one stage), a network
     * that is already sharded. A chain graph trains as its network (its layer indices name the blocks). Started from
     * a configuration ({@link PipelineParallelTrainer#builder(org.deeplearning4j.nn.conf.MultiLayerConfiguration)})
     * each shard takes its block of its stages as DL4J's {@code init()} of the whole network draws them, and no rank
     * holds the whole network.
     *
     * <p>The model's DL4J listeners (thread mode) are called as without tensor parallelism: they see the unsharded
     * model holding the shards joined after each step, {@code model.gradient()} the shards' gradients joined
     * ({@link PipelineTensorParallel#listenerStep}); a model a listener changes is cut into the shards again.
     *
     * <p>Checkpoints ({@link #checkpointEvery}, {@link #resumeFrom}, {@code saveCheckpoint}) hold one file per stage
     * shard, each shard's parameters and updater state, and {@code model.zip}, the whole unsharded network joined from
     * the shards ({@link PipelineTensorParallelCheckpoints}); a resumed run equals the uninterrupted one bitwise.
     *
     * @param size         tensor-parallel ranks per pipeline rank, at least 1 (1: none, {@code columnLayers} ignored)
     * @param columnLayers the column-parallel layer of every block, each followed by its row-parallel layer
     * @return this builder
     * @throws IllegalArgumentException when {@code size} is below 1, or above 1 without a block
     */
    public PipelineParallelTrainerBuilder tensorParallel(int size, int... columnLayers) {
        Objects.requireNonNull(columnLayers, "columnLayers");
        if (size < 1) {
            throw new IllegalArgumentException("tensorParallel size=" + size + " expected size >= 1 (1: no tensor"
                    + " parallelism; fix: pass the tensor-parallel ranks per pipeline rank, e.g. tensorParallel(2, 0))");
        }
        if (size > 1 && columnLayers.length == 0) {
            throw new IllegalArgumentException("tensorParallel size=" + size + " without blocks: expected at least one"
                    + " column-parallel layer (fix: name the first layer of each dense pair to split, e.g."
                    + " tensorParallel(" + size + ", 0, 2) for blocks 0-1 and 2-3)");
        }
        this.tensorParallel = size;
        this.tensorParallelColumns = size > 1 ? columnLayers.clone() : new int[0];
        return this;
    }

    /**
     * Synchronized BatchNorm on the data-parallel axis (default off), as PyTorch's {@code SyncBatchNorm}: every
     * {@code BatchNormalization} layer normalizes replica {@code d}'s microbatch {@code k} with the mean and variance of
     * every replica's microbatch {@code k} together, all-reduced over the stage's {@code dp} sub-group in the forward
     * pass, and all-reduces the two sums its input gradient needs in the backward pass; the running statistics take
     * one update per merged microbatch. One step then equals one pipeline step with {@code microbatches} microbatches
     * on the whole batch, the replicas' microbatch {@code k} together making microbatch {@code k}. The model keeps
     * DL4J's layers: the stages run the plugin's synchronized implementation over the same parameters
     * ({@link PipelineSyncBatchNorm}). It costs three small all-reduces per BatchNormalization layer and microbatch,
     * plus two for the forward a stage's backward re-runs. Refused at {@link #build()}: {@code dataParallel} below 2,
     * a network without BatchNormalization, a frozen one or a subclass of DL4J's configuration, and
     * {@link #tensorParallel} stages. Under ZB-H1 a BatchNormalization's backward runs whole in the input-gradient
     * action (it does not split), with its all-reduce.
     *
     * @param sync whether BatchNormalization synchronizes over the data-parallel replicas
     * @return this builder
     */
    public PipelineParallelTrainerBuilder syncBatchNorm(boolean sync) {
        this.syncBatchNorm = sync;
        return this;
    }

    /**
     * ZeRO on the data-parallel axis (default none): with {@link ZeroStage#OPTIMIZER_STATE} (stage 1) each of a
     * stage's {@code dataParallel} replicas keeps the updater state (Adam's moments, momentum...) of its 1/dp block of
     * the stage's parameters only, applies DL4J's updater to that block after the replicas' gradient sum, and the
     * update is all-gathered, so every replica subtracts the same whole update: bitwise the unsharded pipeline's
     * training. The blocks are cut at the first step; {@link PipelineParallelTrainer#modelBytesHeld()} counts each
     * replica's block from then on. The model given to the builder still gets the whole updater state after each
     * {@code fit} (gathered from the blocks for the copy). In group mode too, and with checkpoints (a shard file per
     * stage and replica). With {@link ZeroStage#GRADIENTS} (stage 2) the same blocks, and each stage's gradient is
     * reduce-scattered over its replicas instead of all-reduced: each replica sums only its block (peers added in rank
     * order, the same bits), then updates it and the update is all-gathered as in stage 1; bitwise the unsharded
     * pipeline too. It moves one all-gather less per step; each replica still accumulates its microbatches' gradient
     * over the whole stage (DL4J's backprop fills the whole gradient view), so it holds no less gradient memory, and a
     * listener overriding {@code onGradientCalculation} is refused (no replica holds the whole summed gradient).
     * With {@link ZeroStage#PARAMETERS} (stage 3) the same blocks of the parameters and gradients too: between steps
     * each replica holds its block of the stage's parameters, gradient view and updater state (the other pages given
     * back to the operating system); before a step's first forward the blocks are all-gathered into the whole
     * parameters (once per step per stage, not per microbatch: see docs/pipeline.md), after the last backward the
     * gradient is reduce-scattered and each replica subtracts its block's update from its block only. Bitwise the
     * unsharded pipeline, also under ZB-H1. Refused with it: weight constraints, and DL4J listeners in group mode.
     * Refused at {@link #build()}: {@code dataParallel} below 2, tensor parallelism and BatchNormalization layers (not
     * built yet).
     *
     * @param stage {@link ZeroStage#OPTIMIZER_STATE}, {@link ZeroStage#GRADIENTS} or {@link ZeroStage#PARAMETERS}, or
     *              null for none
     * @return this builder
     */
    public PipelineParallelTrainerBuilder sharding(ZeroStage stage) {
        this.sharding = stage;
        return this;
    }

    /**
     * Microbatches m per batch (required); every batch size must be a multiple of m.
     *
     * @param microbatches microbatches per batch, at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code microbatches} is below 1
     */
    public PipelineParallelTrainerBuilder microbatches(int microbatches) {
        if (microbatches < 1) {
            throw new IllegalArgumentException("microbatches=" + microbatches + " expected microbatches >= 1"
                    + " (fix: pass how many microbatches a batch splits into, e.g. microbatches(8))");
        }
        this.microbatches = microbatches;
        return this;
    }

    /**
     * GPIPE or ONE_F_ONE_B (default), one stage per rank; INTERLEAVED needs {@link #schedule(PipelineSchedule, int)}.
     *
     * @param schedule the schedule kind
     * @return this builder
     */
    public PipelineParallelTrainerBuilder schedule(PipelineSchedule schedule) {
        return schedule(schedule, 1);
    }

    /**
     * A schedule with {@code stagesPerRank} stages per rank: at least 2 for INTERLEAVED, 1 for the others.
     *
     * @param schedule      the schedule kind
     * @param stagesPerRank stages each rank runs (checked at {@link #build()})
     * @return this builder
     */
    public PipelineParallelTrainerBuilder schedule(PipelineSchedule schedule, int stagesPerRank) {
        this.schedule = Objects.requireNonNull(schedule, "schedule");
        this.stagesPerRank = stagesPerRank;
        return this;
    }

    /**
     * Cuts the network at these layers instead of balancing by parameter count: the first layer of
     * stages 1, 2, ..., strictly increasing, one fewer than {@code ranks x stagesPerRank}.
     *
     * @param firstLayerOfStages the first layer index of each stage after the first
     * @return this builder
     */
    public PipelineParallelTrainerBuilder stageBoundaries(int... firstLayerOfStages) {
        this.stageBoundaries = Objects.requireNonNull(firstLayerOfStages, "firstLayerOfStages").clone();
        return this;
    }

    /**
     * Messages per stage-to-stage link before the sender waits. Default: enough that no sender
     * waits for room when a backward takes twice a forward
     * ({@code LinkPlan.stallFreeSlots(ActionDurations.of(1, 2))}: 2 for GPipe and 1F1B, 2 to 4
     * interleaved) and, split by measured times, when every stage takes its profiled time (uneven
     * stages need more); fewer than {@code LinkPlan.minimumSlots()} deadlock and are refused.
     *
     * @param slots messages per link, at least 1 (too few for the schedule are refused at {@link #build()})
     * @return this builder
     * @throws IllegalArgumentException when {@code slots} is below 1
     */
    public PipelineParallelTrainerBuilder linkSlots(int slots) {
        if (slots < 1) {
            throw new IllegalArgumentException("linkSlots=" + slots + " expected linkSlots >= 1 (fix: pass a positive"
                    + " count, or leave it unset)");
        }
        this.linkSlots = slots;
        return this;
    }

    /**
     * ND4J (OpenMP and BLAS) threads per rank (default: cores ÷ (ranks x dataParallel), at least 1).
     *
     * @param threads ND4J and BLAS threads per rank during {@code fit}, at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code threads} is below 1
     */
    public PipelineParallelTrainerBuilder ompThreadsPerRank(int threads) {
        return ndThreadsPerRank("ompThreadsPerRank", threads);
    }

    /**
     * The network's input type, where inferring it from the features' rank would be wrong or
     * ambiguous (by default rank 2 is dense, rank 3 a sequence and rank 4 an image, laid out as
     * the first layer expects). A recurrent type without a time-series length takes it from each
     * batch.
     *
     * @param inputType DL4J's type of the network's input
     * @return this builder
     */
    public PipelineParallelTrainerBuilder inputType(InputType inputType) {
        this.inputType = Objects.requireNonNull(inputType, "inputType");
        return this;
    }

    /**
     * Splits the network by measured compute time instead of parameter count: at {@code build()},
     * {@link StageProfile#measure} times every layer's forward and backward on {@code sample}'s
     * microbatches (a few passes, no update, with the ND4J threads each rank gets), and the split
     * balances forward plus backward time ({@link PipelineStageSplit#byCost}), then takes the split near it whose
     * simulated step for this schedule and microbatch count is shortest ({@link PipelineStageSplit#byProfile}).
     *
     * @param sample a batch like those of training, cut into the builder's microbatches
     * @return this builder
     */
    public PipelineParallelTrainerBuilder splitByMeasuredTimes(DataSet sample) {
        this.profileSample = Objects.requireNonNull(sample, "sample");
        this.profile = null;
        this.inPipeline = null;
        return this;
    }

    /**
     * Splits by the layer times of a profile measured before ({@link StageProfile#measure}).
     *
     * @param profile per-layer forward and backward times
     * @return this builder
     */
    public PipelineParallelTrainerBuilder splitBy(StageProfile profile) {
        this.profile = Objects.requireNonNull(profile, "profile");
        this.profileSample = null;
        this.inPipeline = null;
        return this;
    }

    /**
     * Splits by stage times measured inside the pipeline ({@link InPipelineProfile}): a few warm steps of a trainer split
     * by measured times, each stage's in-pipeline time related to its layers' alone times, and the split chosen for
     * those times ({@link InPipelineProfile#split}) with this builder's rules (tensor-parallel and residual blocks stay
     * in one stage). The times are per stage position: the ranks and stages per rank must be those they were measured
     * with. {@link PipelineParallelTrainer#profile()} is then the alone profile the times relate to
     * ({@link InPipelineProfile#aloneProfile()}), so that a second profiling run relates its times to it again; the
     * links are sized for the stages' in-pipeline times.
     *
     * @param times the stage times of the profiling run
     * @return this builder
     */
    public PipelineParallelTrainerBuilder splitBy(InPipelineProfile times) {
        this.inPipeline = Objects.requireNonNull(times, "times");
        this.profile = null;
        this.profileSample = null;
        return this;
    }

    /**
     * Checks everything, splits the network and builds the stages (copies of the network's layers,
     * parameters, updater state and counters). Threads start at the first {@code fit}.
     *
     * @throws IllegalArgumentException naming what does not fit, expected and found, and the fix
     * @throws UncheckedIOException     with {@link #resumeFrom}, when the newest complete checkpoint cannot be read
     *                                  (the trainer is closed)
     *
     * @return the trainer; close it to stop its threads and free its memory
     */
    public PipelineParallelTrainer build() {
        Group group = options().group();
        Plan plan = null;
        RuntimeException refusal = null;
        try {
            plan = plan(group);
        } catch (IllegalArgumentException | IllegalStateException e) {
            if (group == null) {
                throw e;
            }
            refusal = e; // agreed below: the other ranks would otherwise wait for this one in the agreement
        }
        PipelineStageSplit split = plan == null ? null : plan.split();
        if (group != null) {
            // every rank's verdict and pipeline agreed before any rank allocates or links: a refusal on one is on all
            split = agreeAcrossRanks(plan, refusal);
        }
        tensorShards = tensorParallel > 1 && group == null
                ? PipelineTensorParallel.of(network, tensorParallel, tensorParallelColumns, split,
                fromConfiguration != null) : null;
        PipelineModel model = new PipelineModel(network, graph, split, plan.start());
        // checked in plan(): attaches the builder's listeners (the same verdict as there, on every rank)
        listenerOptions().attachTo(model, l -> refuseListeners(group, l));
        return resumed(new PipelineParallelTrainer(this, options(), model, split, plan.generated(), plan.shape(),
                plan.slots(), plan.measured()), PipelineParallelTrainer::restoreLatest);
    }

    /** What {@link #plan} decided on this rank: how the network starts, the schedule, the links and the split. */
    private record Plan(PipelineModel.FromConfiguration start, Schedule generated, PipelineShape shape, int slots,
                        StageProfile measured, PipelineStageSplit split) {
    }

    /**
     * {@link #build}'s checks and split on this rank alone, agreeing with no other: throws what this rank refuses
     * (group mode: {@link #build} agrees it with every rank before any goes on).
     */
    private Plan plan(Group group) {
        if (group != null) {
            options().timeout(); // refuses, before any exchange, a trainer's timeout that the group would not honour
            checkGroup();
        }
        if (ranks == 0) {
            throw new IllegalArgumentException("ranks not set (fix: call ranks(p) with the number of pipeline ranks"
                    + " (threads), e.g. ranks(2))");
        }
        if (microbatches == 0) {
            throw new IllegalArgumentException("microbatches not set (fix: call microbatches(m), e.g."
                    + " microbatches(8)); every batch is cut into m"
                    + " equal microbatches, and ranks idle for about (ranks - 1) / (m + ranks - 1) of a step, so"
                    + " take m several times ranks");
        }
        if (schedule == PipelineSchedule.INTERLEAVED && stagesPerRank < 2) {
            throw new IllegalArgumentException("schedule=INTERLEAVED with stagesPerRank=" + stagesPerRank
                    + " expected stagesPerRank >= 2 (fix: use schedule(INTERLEAVED, 2), or ONE_F_ONE_B for one"
                    + " stage per rank)");
        }
        if (schedule != PipelineSchedule.INTERLEAVED && stagesPerRank != 1) {
            throw new IllegalArgumentException("schedule=" + schedule + " with stagesPerRank=" + stagesPerRank
                    + " expected stagesPerRank=1 (" + schedule + " runs one stage per rank; fix: use"
                    + " INTERLEAVED for more)");
        }
        PipelineModel.FromConfiguration start = null;
        if (graph != null && fromConfiguration != null) {
            // refuses graphs that are not a chain, naming the vertex; neither the graph nor its chain holds a value
            GraphChain.Hollow chain = GraphChain.hollowNetwork(graph);
            network = chain.network();
            start = new PipelineModel.FromConfiguration(List.of(fromConfiguration, chain.reservation()),
                    target -> InitialisationReplay.replay(graph, target)); // DL4J's graph draws: vertex index order
        } else if (graph != null) {
            network = GraphChain.toNetwork(graph); // refuses graphs that are not a chain, naming the vertex
        } else if (fromConfiguration != null) {
            MultiLayerNetwork hollow = network;
            start = new PipelineModel.FromConfiguration(List.of(fromConfiguration),
                    target -> InitialisationReplay.replay(hollow, target));
        }
        if (TensorParallel.isSharded(network)) {
            throw new IllegalArgumentException("the network already holds tensor-parallel layers (made by"
                    + " TensorParallel.shard): expected the unsharded network, which the pipeline shards itself (fix:"
                    + " pass the network before sharding and tensorParallel(size, columnLayers...))");
        }
        PipelineZero.check(sharding, dataParallel, tensorParallel, network);
        int stageCount = Math.multiplyExact(ranks, stagesPerRank);
        int layers = network.getLayerWiseConfigurations().getConfs().size();
        if (stageCount > layers) {
            throw new IllegalArgumentException("stages=" + stageCount + " (ranks=" + ranks + " x stagesPerRank="
                    + stagesPerRank + ") but the network has " + layers + " layers; fix: use at most " + layers
                    + " stages (every stage needs at least one layer)");
        }
        if (stageBoundaries != null && stageBoundaries.length != stageCount - 1) {
            throw new IllegalArgumentException("stageBoundaries has " + stageBoundaries.length + " boundaries "
                    + Arrays.toString(stageBoundaries) + " expected " + (stageCount - 1) + " for stages=" + stageCount
                    + " (ranks=" + ranks + " x stagesPerRank=" + stagesPerRank + "); fix: give the first layer"
                    + " of stages 1.."
                    + (stageCount - 1));
        }
        Schedule generated = schedule.generate(ranks, microbatches, stagesPerRank);
        PipelineShape shape = new PipelineShape(ranks, microbatches, stagesPerRank);
        if (syncBatchNorm) {
            PipelineSyncBatchNorm.check(network, dataParallel, tensorParallel, generated, shape);
        }
        LinkPlan plan = LinkPlan.of(generated, shape);
        if (linkSlots > 0) {
            plan.requireSlots(linkSlots);
        }
        if (stageBoundaries != null && (profile != null || profileSample != null || inPipeline != null)) {
            throw new IllegalArgumentException("stageBoundaries and a split by measured times were both given:"
                    + " expected one (boundaries fix the split; measured times choose it); fix: drop stageBoundaries(...)"
                    + " or drop splitByMeasuredTimes(...)/splitBy(...)");
        }
        if (fromConfiguration != null) {
            refuseWithoutWholeNetwork();
        }
        GraphWiring wiring = GraphLayerNetwork.wiringOf(network);
        if (wiring != null) {
            refuseForBranchedGraph(wiring, stageCount);
        }
        // the alone profile stays the trainer's: a second in-pipeline run relates its stage times to it again
        StageProfile measured = inPipeline != null ? inPipeline.aloneProfile() : profile;
        if (profileSample != null) {
            // a replica's microbatch is 1/(microbatches x replicas) of the batch
            measured = StageProfile.measure(network, profileSample, microbatches * dataParallel, PROFILE_STEPS,
                    options().ndThreadsPerRank(ranks * dataParallel), inputType);
        }
        // a tensor-parallel block stays in one stage: only its row-parallel layer's all-reduce makes its output whole
        java.util.function.IntPredicate canStart = PipelineTensorParallel.canStartStage(tensorParallelColumns);
        if (wiring != null) {
            canStart = canStart.and(wiring::canStart); // a residual block stays in one stage: stages start at cut vertices
        }
        PipelineStageSplit split;
        if (stageBoundaries != null) {
            split = PipelineStageSplit.atBoundaries(network, stageBoundaries);
        } else if (inPipeline != null) {
            split = inPipeline.split(network, generated, shape, canStart);
        } else if (measured != null) {
            split = PipelineStageSplit.byProfile(network, measured, generated, shape, canStart);
        } else {
            split = PipelineStageSplit.balanced(network, stageCount, canStart);
        }
        if (tensorParallel > 1) {
            // blocks, widths, settings and boundaries: refused here, so that a group's ranks agree on the refusal
            PipelineTensorParallel.check(network, tensorParallel, tensorParallelColumns, split);
        }
        // refuses what the trainer cannot call as fit() would; attached in build() once every rank accepted
        listenerOptions().check(new PipelineModel(network, graph, split, start), l -> refuseListeners(group, l));
        // group mode: each rank measured its own profile, and the ranks must agree on the slots (the build agreement
        // compares them), so there the equal-stage default alone
        StageDurations expected = group != null || measured == null ? null
                : inPipeline != null ? inPipeline.stageDurationsMicros(split) : measured.stageDurationsMicros(split);
        int slots = linkSlots > 0 ? linkSlots : defaultSlots(plan, expected);
        return new Plan(start, generated, shape, slots, measured, split);
    }

    /** What a graph with branches cannot do yet, refused at build() with the fix. */
    private void refuseForBranchedGraph(GraphWiring wiring, int stageCount) {
        String refused = profileSample != null || profile != null ? "splitByMeasuredTimes (it times the layers as a chain)"
                : tensorParallel > 1 ? "tensorParallel(" + tensorParallel + ")" : null;
        if (refused != null) {
            throw new IllegalArgumentException("a ComputationGraph with branches (residual connections, merges) with "
                    + refused + ": expected neither (fix: the automatic split or stageBoundaries(...) at cut vertices,"
                    + " one of " + wiring.validStarts() + ")");
        }
        long starts = java.util.stream.IntStream.range(1, wiring.layers()).filter(wiring::canStart).count();
        if (stageCount - 1 > starts) {
            throw new IllegalArgumentException("stages=" + stageCount + " but the graph has " + (starts + 1) + " places a"
                    + " stage may start (layer 0 and the layers after cut vertices " + wiring.validStarts() + "; a residual"
                    + " block stays in one stage); fix: use at most " + (starts + 1) + " stages");
        }
    }

    /**
     * Enough slots that no sender waits for room when a backward takes twice a forward, and, for a split by measured
     * times, when each stage takes what the profile measured for it: uneven stages (a cheap first layer, an output
     * stage that computes the loss) let a sender run further ahead of its receiver than the schedule's equal-stage
     * model allows, and a full link then makes the sender wait where the schedule does not (in 1F1B at 4 ranks a fast
     * first stage needs 4 slots, not 2).
     */
    private static int defaultSlots(LinkPlan plan, StageDurations expected) {
        int slots = plan.stallFreeSlots(ActionDurations.of(1, 2));
        if (expected != null) {
            slots = Math.max(slots, plan.stallFreeSlots(expected));
        }
        return slots;
    }

    /**
     * The listeners the trainer cannot call: in group mode those that read the whole network during a step
     * ({@link PipelineGroupListeners#refuse}), DL4J's on a model started from a configuration.
     */
    private void refuseListeners(Group group, ModelListeners l) {
        PipelineGroupListeners.refuse(group, l, tensorParallel);
        PipelineZero.refuseListeners(sharding, l, group != null);
        if (fromConfiguration != null && !l.isEmpty()) {
            throw new IllegalArgumentException(startedFrom() + " with DL4J listeners: they are shown the"
                    + " whole network after each step, which a trainer built from a configuration never holds; expected"
                    + " none (fix: stepListener(...), or builder(network))");
        }
    }

    /** A trainer built from a configuration has no whole network to time, listen to or checkpoint: refused at build(). */
    private void refuseWithoutWholeNetwork() {
        String needs = profileSample != null || profile != null ? "splitByMeasuredTimes (it times the whole network's layers)"
                : options().checkpointSchedule() != null ? "checkpointEvery (checkpoints hold the whole network, model.zip)"
                : null;
        if (needs != null) {
            throw new IllegalArgumentException(startedFrom() + " with " + needs + ": a trainer built from a"
                    + " configuration never holds the whole network, on any rank; expected none of these (fix:"
                    + " stageBoundaries(...) or the parameter-balanced split, stepListener(...), copyParametersTo(network)"
                    + " to save; or builder(network))");
        }
    }

    /** The builder call of a model started from its configuration, as errors name it. */
    private String startedFrom() {
        return graph != null ? "builder(ComputationGraphConfiguration)" : "builder(MultiLayerConfiguration)";
    }

    /** Group mode: a host transport, and ranks x dataParallel = the group's size (ranks defaulting to it). */
    private void checkGroup() {
        Group group = options().group();
        if (!group.transport().name().equals(group.hostTransport().name())) {
            throw new IllegalArgumentException("group(...) on transport " + group.transport().name() + ": expected a host"
                    + " transport (" + group.hostTransport().name() + "): the stages' activations are DL4J CPU arrays in"
                    + " host memory (fix: ProcessGroup.fromEnvironment(), or the group's host transport)");
        }
        int size = group.worldSize();
        // the dp x pp x tp mesh must factor the world: every rank of the group is one rank of the mesh
        int others = dataParallel * tensorParallel;
        String mesh = "dataParallel=" + dataParallel + (tensorParallel > 1 ? " x tensorParallel=" + tensorParallel : "");
        if (ranks == 0) {
            if (size % others != 0) {
                throw new IllegalArgumentException("group(...) of worldSize=" + size + " with " + mesh + ": expected a"
                        + " world size divisible by " + others + " (each replica has ranks = worldSize / " + others
                        + " pipeline ranks; fix: start worldSize = ranks x " + others + " processes)");
            }
            ranks = size / others;
        } else if (ranks * others != size) {
            throw new IllegalArgumentException("ranks=" + ranks + " x " + mesh + " = " + ranks * others + " with group(...)"
                    + " of worldSize=" + size + ": expected the dp x pp x tp mesh to factor the group, every rank of"
                    + " the group one rank of the mesh (fix: leave ranks unset, or start " + ranks * others
                    + " processes)");
        }
    }

    /**
     * Group mode, collective: every rank must have built the same pipeline; a split by measured times
     * is rank 0's on every rank. When this rank refused its build ({@code refusal}), or another did, every rank throws
     * the same error naming the refusing ranks ({@link GroupExchange#agreeOnBuild}).
     */
    private PipelineStageSplit agreeAcrossRanks(Plan plan, RuntimeException refusal) {
        if (refusal != null) {
            GroupExchange.agreeOnBuild(options().group(), null, null, refusal); // throws on every rank
            throw Invariants.violated("the build agreement returned after this rank's refusal " + refusal);
        }
        PipelineStageSplit split = plan.split();
        boolean measured = plan.measured() != null;
        int slots = plan.slots();
        StringBuilder boundaries = new StringBuilder();
        for (int s = 1; s < split.stageCount(); s++) {
            boundaries.append(s == 1 ? "" : ",").append(split.firstLayer(s));
        }
        String description = (fromConfiguration != null ? GroupExchange.describe(network.getLayerWiseConfigurations())
                : GroupExchange.describe(network)) + ", dataType=" + split.dataType() + ", schedule="
                + schedule + ", stagesPerRank=" + stagesPerRank + ", ranks=" + ranks + ", dataParallel=" + dataParallel
                + ", syncBatchNorm=" + syncBatchNorm + ", tensorParallel=" + tensorParallel
                + (tensorParallel > 1 ? ", columnLayers=" + Arrays.toString(tensorParallelColumns) : "")
                + ", microbatches=" + microbatches + ", linkSlots=" + slots
                + (measured ? ", split by measured times" : ", stage boundaries " + boundaries);
        String rank0 = GroupExchange.agreeOnBuild(options().group(), boundaries.toString(), description, null);
        if (!measured || rank0.contentEquals(boundaries)) {
            return split;
        }
        int[] first = rank0.isEmpty() ? new int[0] : Arrays.stream(rank0.split(",")).mapToInt(Integer::parseInt).toArray();
        return PipelineStageSplit.atBoundaries(network, first);
    }
}
