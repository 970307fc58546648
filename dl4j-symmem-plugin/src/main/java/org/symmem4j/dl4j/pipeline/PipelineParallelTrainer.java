package org.symmem4j.dl4j.pipeline;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.train.RankFailures;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.dl4j.train.TrainerBuilder;
import org.symmem4j.dl4j.train.TrainerOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.channel.LinkPlan;
import org.symmem4j.pipeline.channel.PipelineAbortedException;
import org.symmem4j.pipeline.exec.PipelineMetrics;
import org.symmem4j.pipeline.exec.RunTimeline;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * Pipeline-parallel training of a DL4J {@link MultiLayerNetwork} on threads of this JVM:
 *
 * <pre>{@code
 * PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(model)
 *         .ranks(2).microbatches(8)                  // 2 threads, each batch cut into 8 microbatches
 *         .schedule(PipelineSchedule.ONE_F_ONE_B)    // or GPIPE, or schedule(INTERLEAVED, 2)
 *         .build();
 * trainer.fit(trainIterator);                        // again and again: state is kept
 * trainer.copyParametersTo(model);                   // parameters, updater state, counters
 * }</pre>
 *
 * <p>Data parallelism over pipelines ({@link Builder#dataParallel}): {@code .ranks(4).dataParallel(2)}
 * trains two replicas of a 4-stage pipeline on 8 threads laid out as a {@code dp x pp = 2 x 4}
 * {@link org.symmem4j.parallel.DeviceMesh}; each replica trains on its half of every batch, and each
 * stage's gradients are summed over its two replicas before the update, which is then the update of
 * the whole batch.
 *
 * <p>The network is cut into {@code ranks x stagesPerRank} stages of consecutive layers
 * ({@link PipelineStageSplit}: balanced by parameter count, by measured pass times with
 * {@link Builder#splitByMeasuredTimes}, or at {@link Builder#stageBoundaries}); stage {@code s} runs on
 * rank {@code s % ranks}. Layers: dense, convolution and subsampling (4-D activations), LSTM, simple RNN
 * and their wrappers (3-D activations, masks), batch normalization, dropout and more
 * ({@link PipelineStageSplit}). Each rank is a thread of one in-JVM group, created at
 * the first {@code fit} and kept until {@link #close()}; activations travel forward and gradients
 * backward through symmetric-memory links ({@link org.symmem4j.pipeline.exec.PipelineExecutor}), in the
 * order of the chosen schedule.
 *
 * <p>Every batch is one step: it is cut into {@code microbatches} equal parts, every stage accumulates
 * its gradient over them and then applies one update with the whole batch's example count. One step
 * therefore equals one {@code fit} of the unsplit network on the whole batch, to rounding (the order in
 * which gradient sums are added differs); see {@link Dl4jPipelineStage}. Batch normalization and
 * dropout see microbatches, not the batch: each microbatch is normalized with its own statistics and
 * the running statistics follow the microbatches in order ({@link BatchNormRunningStats}), and each
 * microbatch draws its own reproducible dropout mask ({@link MicrobatchDropout}). The loss of each step
 * is what {@code MultiLayerNetwork.score()} reports after such a fit ({@link PipelineStepReport#loss()}).
 *
 * <p>The trainer trains its own copies of the network's layers, taken at {@link Builder#build()}
 * (parameters, updater state, counters); the network given to the builder is left as it was until
 * {@link #copyParametersTo} writes the result into it, or into any network of the same configuration.
 * Everything that can be checked is checked at {@code build()} (supported layers, stage count,
 * boundaries, widths, schedule, link slots) and at the start of each {@code fit} (batch size divisible
 * by the microbatch count, the features' shape through every layer by DL4J's input types, the labels'
 * shape against the output), before any rank computes.
 *
 * <p>If a rank fails during a step, every rank stops (the links are poisoned), {@code fit} throws a
 * {@link PipelineTrainingException} with that rank's exception, and the trainer is closed: stages may
 * or may not have applied that step's update.
 *
 * <p>With {@link Builder#meterRegistry} every step feeds {@link PipelineMetrics} (bubble, hand-off and
 * step latency, each rank's compute time, examples, loss, failures).
 */
public final class PipelineParallelTrainer implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(PipelineParallelTrainer.class);

    /** Told about every step, on the thread that called {@code fit()}. */
    @FunctionalInterface
    public interface StepListener extends org.symmem4j.dl4j.train.StepListener<PipelineStepReport> {
        /**
         * Called once per completed step, after its update.
         *
         * @param report the step's number, examples, loss and per-rank timelines
         */
        @Override
        void onStep(PipelineStepReport report);
    }

    private final PipelineStageSplit split;
    /** Replica 0's stages: the ones whose state {@link #copyParametersTo} writes out (every replica's is the same). */
    private final List<Dl4jPipelineStage> stages;
    /** Every data-parallel replica's stages, replica 0's first; one list when {@code dataParallel == 1}. */
    private final List<List<Dl4jPipelineStage>> replicaStages;
    private final int dataParallel;
    private final PipelineSchedule scheduleKind;
    private final Schedule schedule;
    private final PipelineShape shape;
    private final int linkSlots;
    private final Duration timeout;
    private final int ompThreadsPerRank;
    private final List<StepListener> listeners;
    private final PipelineMetrics metrics;
    private final InputType inputType;
    private final StageProfile profile;
    private final RunTimeline runTimeline;
    /** Group mode: this process's rank of the user's group (the caller's to close); null in thread mode. */
    private final Group group;
    /** Group mode: this rank's stages, run on the caller's thread; opened at the first step. */
    private PipelineRank local;
    /** Group mode: the step's agreement, loss and the stages' gather at {@link #copyParametersTo}. */
    private GroupExchange exchange;
    private InJvmWorld world;
    private List<PipelineRankWorker> workers;
    private long step;
    private PipelineStepReport lastStep;
    private String failed;
    private boolean closed;

    private PipelineParallelTrainer(Builder b, TrainerOptions<StepListener> o, PipelineStageSplit split,
                                    Schedule schedule, PipelineShape shape, int linkSlots, StageProfile profile) {
        this.split = split;
        this.inputType = b.inputType;
        this.profile = profile;
        this.runTimeline = o.timelineSteps() > 0 ? new RunTimeline(o.timelineSteps()) : null;
        this.scheduleKind = b.schedule;
        this.schedule = schedule;
        this.shape = shape;
        this.linkSlots = linkSlots;
        this.timeout = o.timeout();
        this.dataParallel = b.dataParallel;
        this.group = o.group();
        // in group mode this process runs one rank: ND4J's threads are the process's (the launcher sizes them)
        this.ompThreadsPerRank = o.ndThreadsPerRank(group != null ? 1 : shape.ranks() * b.dataParallel);
        this.listeners = o.stepListeners();
        this.metrics = o.bind(new PipelineMetrics(b.schedule.tag(), o.transportName(), o.metricTags()));
        // group mode: this process holds one replica's stage copies (it trains those of its rank; the others
        // carry the configuration for mask propagation and receive the owners' state at copyParametersTo)
        int copies = group == null ? dataParallel : 1;
        List<List<Dl4jPipelineStage>> replicas = new ArrayList<>(copies);
        for (int d = 0; d < copies; d++) {
            // every replica starts from the same copy of the network's parameters, updater state and counters
            List<MultiLayerNetwork> networks = split.buildStageNetworks();
            List<Dl4jPipelineStage> built = new ArrayList<>(networks.size());
            for (int s = 0; s < networks.size(); s++) {
                built.add(new Dl4jPipelineStage(s, networks.size(), networks.get(s)));
            }
            replicas.add(List.copyOf(built));
        }
        this.replicaStages = List.copyOf(replicas);
        this.stages = replicaStages.getFirst();
    }

    /**
     * Starts a builder for {@code network} (initialized at {@code build()} if it is not yet).
     *
     * @param network the network to train; the trainer trains copies of its layers
     * @return a builder; {@code ranks} and {@code microbatches} must be set
     */
    public static Builder builder(MultiLayerNetwork network) {
        return new Builder(Objects.requireNonNull(network, "network"), null);
    }

    /**
     * Starts a builder for {@code graph}, a {@link ComputationGraph} whose vertices form a chain (one
     * input, one output, every vertex a layer fed by the one before: a linear stage order). It trains as
     * the equivalent multi-layer network; {@code build()} refuses graphs with branches, naming the
     * vertex. Copy the result back with {@link #copyParametersTo(ComputationGraph)}.
     *
     * @param graph a chain graph to train; the trainer trains copies of its layers
     * @return a builder; {@code ranks} and {@code microbatches} must be set
     */
    public static Builder builder(ComputationGraph graph) {
        return new Builder(null, Objects.requireNonNull(graph, "graph"));
    }

    /**
     * One training step on {@code batch}: cut into the configured number of microbatches, run through
     * the pipeline, one update per stage. {@link #lastStep()} then holds the loss and timelines.
     *
     * @throws IllegalArgumentException before anything runs, when the batch size is not a multiple of
     *                                  the microbatch count or the widths do not fit the network (the
     *                                  trainer stays usable)
     * @throws PipelineTrainingException when a rank failed during the step (the trainer is closed)
     *
     * @param batch features and labels (and masks); its size a multiple of the microbatch count
     */
    public synchronized void fit(DataSet batch) {
        requireUsable();
        runStep(batch);
    }

    /**
     * One step per batch of {@code iterator} (reset first if it is exhausted and resettable), then the
     * epoch counter advances, as DL4J's {@code fit(DataSetIterator)} does. A batch that fails the checks
     * of {@link #fit(DataSet)} stops the loop with that exception; the batches before it were trained.
     *
     * @param iterator the batches
     * @throws IllegalArgumentException  when a batch fails the checks of {@link #fit(DataSet)}
     * @throws PipelineTrainingException when a rank failed during a step (the trainer is closed)
     */
    public synchronized void fit(DataSetIterator iterator) {
        Objects.requireNonNull(iterator, "iterator");
        requireUsable();
        if (!iterator.hasNext() && iterator.resetSupported()) {
            iterator.reset();
        }
        while (iterator.hasNext()) {
            runStep(iterator.next());
        }
        for (List<Dl4jPipelineStage> replica : replicaStages) {
            for (Dl4jPipelineStage stage : replica) {
                stage.network().incrementEpochCount();
            }
        }
    }

    /**
     * The latest step's report, or null before the first step.
     *
     * @return the report of the latest step, or null
     */
    public synchronized PipelineStepReport lastStep() {
        return lastStep;
    }

    /**
     * Writes the trained parameters, updater state (so training can go on with plain {@code fit}) and
     * iteration and epoch counters into {@code target}: the network given to the builder, or one with
     * the same configuration. In group mode this is collective: every rank calls it, each stage's state
     * comes from the rank that trained it, and every rank's {@code target} gets the whole network.
     *
     * @throws IllegalArgumentException when {@code target}'s layers differ
     * @throws IllegalStateException    after a failed step (the stages may disagree on the step count)
     *
     * @param target the network given to the builder, or one with the same configuration
     */
    public synchronized void copyParametersTo(MultiLayerNetwork target) {
        requireCopyable();
        gatherStagesInGroup();
        split.copyStagesInto(stages.stream().map(Dl4jPipelineStage::network).toList(), target);
    }

    /**
     * As {@link #copyParametersTo(MultiLayerNetwork)}, into a graph: the one given to
     * {@link #builder(ComputationGraph)}, or one with its configuration.
     *
     * @throws IllegalArgumentException when {@code target} is not that chain of layers
     *
     * @param target the graph given to the builder, or one with its configuration
     * @throws IllegalStateException    after a failed step (the stages may disagree on the step count)
     */
    public synchronized void copyParametersTo(ComputationGraph target) {
        requireCopyable();
        gatherStagesInGroup();
        MultiLayerNetwork chain = GraphChain.toNetwork(target);
        split.copyStagesInto(stages.stream().map(Dl4jPipelineStage::network).toList(), chain);
        GraphChain.copyInto(chain, target);
    }

    /** Group mode: every stage copy of this process gets the state of the rank that trained it (collective). */
    private void gatherStagesInGroup() {
        if (group == null) {
            return;
        }
        if (exchange != null) {
            exchange.gatherStages(stages, shape.ranks());
        } else {
            try (GroupExchange once = GroupExchange.open(group)) { // after close(), or before the first step
                once.gatherStages(stages, shape.ranks());
            }
        }
    }

    private GroupExchange exchange() {
        if (exchange == null) {
            exchange = GroupExchange.open(group);
        }
        return exchange;
    }

    private void requireCopyable() {
        if (failed != null) {
            throw new IllegalStateException("the pipeline failed (" + failed + "): its stages may or may not have"
                    + " applied the failed step, so their parameters are not copied; train again from a network you trust");
        }
    }

    /**
     * How the network was cut into stages.
     *
     * @return the first layer of every stage
     */
    public PipelineStageSplit split() {
        return split;
    }

    /**
     * The measured layer times the split was made from ({@link Builder#splitByMeasuredTimes}), or null.
     *
     * @return the profile, or null when the split was not made from measured times
     */
    public StageProfile profile() {
        return profile;
    }

    /**
     * The stages' pass times the profile predicts for this split, in microseconds, for
     * {@code ScheduleSimulator.simulate(schedule(), shape(), ...)}: the bubble to expect before
     * training. Null without a profile.
     *
     * @return per stage, forward and backward microseconds, or null
     */
    public StageDurations predictedStageDurations() {
        return profile == null ? null : profile.stageDurationsMicros(split);
    }

    /**
     * Every recorded step's timelines as one Chrome trace ({@link Builder#recordTimeline}), or null
     * when not recording.
     *
     * @return the run's timeline, or null
     */
    public RunTimeline runTimeline() {
        return runTimeline;
    }

    /**
     * The schedule every step runs (one action list per rank).
     *
     * @return the schedule, as data
     */
    public Schedule schedule() {
        return schedule;
    }

    /**
     * The kind of schedule the trainer generated.
     *
     * @return GPipe, 1F1B or interleaved
     */
    public PipelineSchedule scheduleKind() {
        return scheduleKind;
    }

    /**
     * Ranks, microbatches per step and stages per rank.
     *
     * @return the pipeline's shape
     */
    public PipelineShape shape() {
        return shape;
    }

    /**
     * Data-parallel replicas of every stage ({@link Builder#dataParallel}).
     *
     * @return the number of replicas, 1 without data parallelism
     */
    public int dataParallel() {
        return dataParallel;
    }

    /** Replica {@code d}'s stages (tests compare the replicas bitwise). */
    List<Dl4jPipelineStage> replicaStages(int d) {
        return replicaStages.get(d);
    }

    /**
     * Messages each stage-to-stage link holds before its sender waits.
     *
     * @return slots per link
     */
    public int linkSlots() {
        return linkSlots;
    }

    /**
     * The metrics binder (already bound if a registry was given to the builder).
     *
     * @return the trainer's pipeline metrics; bind it to more registries with {@code bindTo}
     */
    public PipelineMetrics metrics() {
        return metrics;
    }

    /**
     * Stops the rank threads and frees the links (group mode: this rank's links and communicators, collective
     * with the other ranks' {@code close}; the group stays the caller's). Idempotent.
     */
    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            stopWorkers();
        }
    }

    private void requireUsable() {
        if (failed != null) {
            throw new IllegalStateException("the pipeline failed (" + failed + ") and was closed; build a new trainer");
        }
        if (closed) {
            throw new IllegalStateException("the trainer is closed; build a new one");
        }
    }

    /**
     * The cut into microbatches, then the checks of features and labels against the network and the
     * step's plan, one per data-parallel replica: the batch is cut into {@code microbatches x dp}
     * equal pieces and replica {@code d}'s microbatch {@code k} is piece {@code k * dp + d}, so the
     * replicas' microbatch {@code k} together are the batch's {@code k}-th {@code 1/microbatches}.
     */
    private List<StepPlan> prepare(DataSet batch) {
        Objects.requireNonNull(batch, "batch");
        int m = shape.microbatches();
        if (dataParallel == 1) {
            return List.of(StepPlan.of(split, stages, Microbatches.split(batch, m, split.dataType()), inputType));
        }
        int pieces = m * dataParallel;
        if (batch.getFeatures() == null || batch.getLabels() == null) {
            throw new IllegalArgumentException("the batch has features=" + (batch.getFeatures() == null ? "null" : "set")
                    + " labels=" + (batch.getLabels() == null ? "null" : "set") + ": pipeline training needs both");
        }
        long examples = batch.getFeatures().size(0);
        if (examples < pieces || examples % pieces != 0) {
            long lower = examples / pieces * pieces;
            throw new IllegalArgumentException("batch size=" + examples + " is not divisible by microbatches=" + m
                    + " x dataParallel=" + dataParallel + ": expected a multiple of " + pieces + " (every replica trains on"
                    + " an equal share cut into equal microbatches; use batch size "
                    + (lower == 0 ? String.valueOf(pieces) : lower + " or " + (lower + pieces)) + ")");
        }
        Microbatches all = Microbatches.split(batch, pieces, split.dataType());
        List<StepPlan> plans = new ArrayList<>(dataParallel);
        // group mode: this process's replica only
        int firstReplica = group == null ? 0 : group.rank() / shape.ranks();
        int endReplica = group == null ? dataParallel : firstReplica + 1;
        for (int d = firstReplica; d < endReplica; d++) {
            List<INDArray> features = new ArrayList<>(m);
            List<INDArray> labels = new ArrayList<>(m);
            List<INDArray> featuresMasks = batch.getFeaturesMaskArray() == null ? null : new ArrayList<>(m);
            List<INDArray> labelsMasks = batch.getLabelsMaskArray() == null ? null : new ArrayList<>(m);
            for (int k = 0; k < m; k++) {
                int piece = k * dataParallel + d;
                features.add(all.features().get(piece));
                labels.add(all.labels().get(piece));
                if (featuresMasks != null) {
                    featuresMasks.add(all.featuresMask(piece));
                }
                if (labelsMasks != null) {
                    labelsMasks.add(all.labelsMask(piece));
                }
            }
            plans.add(StepPlan.of(split, group == null ? replicaStages.get(d) : stages, new Microbatches(features, labels, featuresMasks, labelsMasks),
                    inputType));
        }
        return plans;
    }

    private void runStep(DataSet batch) {
        if (group != null) {
            Objects.requireNonNull(batch, "batch");
            exchange().agreeOnBatch(batch, step); // collective: every rank, or none, goes on with this batch
        }
        List<StepPlan> plans = prepare(batch);
        // every replica's share is the same size: its examples and its largest message
        long examples = plans.getFirst().batch().examples() * dataParallel;
        long slotBytes = plans.getFirst().largestMessageBytes(split.dataType().width());
        List<StepTimeline> timelines;
        double loss;
        if (group == null) {
            timelines = runOnThreads(plans, slotBytes);
            // DL4J's score: the data loss plus every layer's regularization term, at the pre-update parameters
            loss = stages.getLast().dataLoss();
            for (Dl4jPipelineStage stage : stages) {
                loss += stage.regularizationScore();
            }
        } else {
            GroupExchange.StepOutcome outcome = exchange().afterStep(stages, shape.ranks(),
                    runInGroup(plans.getFirst(), slotBytes));
            timelines = outcome.timelines(); // replica 0's pipeline ranks, as in thread mode
            loss = outcome.loss(); // the same sum, the same order, on every rank
        }
        PipelineStepReport report = new PipelineStepReport(step, examples, loss, timelines);
        metrics.record(report.timelineReport());
        metrics.recordTraining(examples, loss);
        if (runTimeline != null) {
            runTimeline.add(step, timelines, Map.of("loss", loss, "examples", (double) examples));
        }
        step++;
        lastStep = report;
        for (StepListener listener : listeners) {
            listener.onStep(report);
        }
    }

    /** Thread mode: every rank's task, then every rank's timeline (replica 0's pipeline ranks). */
    private List<StepTimeline> runOnThreads(List<StepPlan> plans, long slotBytes) {
        ensureWorkers();
        List<CompletableFuture<StepTimeline>> results = new ArrayList<>(workers.size());
        for (int w = 0; w < workers.size(); w++) {
            CompletableFuture<StepTimeline> result = new CompletableFuture<>();
            results.add(result);
            // world rank w is pipeline rank w % pp of replica w / pp
            workers.get(w).submit(new PipelineRankWorker.Task(plans.get(w / shape.ranks()), slotBytes, result));
        }
        List<StepTimeline> timelines = new ArrayList<>(workers.size());
        List<Throwable> failures = new ArrayList<>();
        List<Integer> failedRanks = new ArrayList<>();
        // every wait inside a step is bounded by the group timeout; this bound only turns a bug into an error
        long waitMillis = timeout.multipliedBy(3).plusSeconds(30).toMillis();
        for (int rank = 0; rank < results.size(); rank++) {
            try {
                timelines.add(results.get(rank).get(waitMillis, TimeUnit.MILLISECONDS));
            } catch (ExecutionException e) {
                failures.add(e.getCause());
                failedRanks.add(rank);
            } catch (TimeoutException e) {
                failures.add(new SymmemException("rank " + rank + " did not finish step " + step + " within "
                        + Duration.ofMillis(waitMillis) + " (a wait that ignores the timeout: this is a bug)"));
                failedRanks.add(rank);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                failures.add(new SymmemException("interrupted while waiting for rank " + rank + " at step " + step, e));
                failedRanks.add(rank);
                break;
            }
        }
        if (!failures.isEmpty()) {
            throw fail(failures, failedRanks);
        }
        // replica 0's pipeline ranks: every replica runs the same schedule
        return List.copyOf(timelines.subList(0, shape.ranks()));
    }

    /** Group mode: this process's rank runs the step on the caller's thread; its own timeline. */
    private StepTimeline runInGroup(StepPlan plan, long slotBytes) {
        if (local == null) {
            Nd4jThreadLimit.set(ompThreadsPerRank); // this process's rank: the process's cores unless set
            local = PipelineRank.open(group, dataParallel, schedule, shape, linkSlots, stagesOfRank(stages, group.rank()));
            LOG.info("symmem4j pipeline: rank " + group.rank() + " of " + group.worldSize() + " (" + group.transport().name()
                    + "), " + shape + (dataParallel > 1 ? " x " + dataParallel + " data-parallel replicas" : "")
                    + ", schedule " + scheduleKind + ", link slots " + linkSlots + ", " + split);
        }
        try {
            return local.step(plan, slotBytes);
        } catch (RuntimeException | Error e) {
            throw fail(List.of(e), List.of(group.rank()));
        }
    }

    /**
     * The stages world rank {@code rank} runs, of its replica's {@code replica}: pipeline rank
     * {@code rank % pp} runs stages {@code rank % pp}, {@code rank % pp + pp}, ... (stage index to stage).
     */
    private Map<Integer, Dl4jPipelineStage> stagesOfRank(List<Dl4jPipelineStage> replica, int rank) {
        int pp = shape.ranks();
        Map<Integer, Dl4jPipelineStage> mine = new HashMap<>();
        for (int s = rank % pp; s < replica.size(); s += pp) {
            mine.put(s, replica.get(s));
        }
        return mine;
    }

    /** Closes the trainer after a failed step; the exception carries the rank that caused the others to stop. */
    private PipelineTrainingException fail(List<Throwable> failures, List<Integer> failedRanks) {
        // ranks that only heard of another's failure (poisoned links, an aborted replica group) are not the origin
        int origin = RankFailures.origin(failures, f -> f instanceof PipelineAbortedException
                || f instanceof PeerTimeoutException t && t.reason() == PeerTimeoutException.Reason.PEER_ABORTED);
        Throwable cause = failures.get(origin);
        metrics.recordFailure(cause instanceof PeerTimeoutException t && t.reason() == PeerTimeoutException.Reason.DEADLINE_PASSED
                ? PipelineMetrics.FailureReason.TIMEOUT : PipelineMetrics.FailureReason.ERROR);
        failed = "rank " + failedRanks.get(origin) + " at step " + step + ": " + cause;
        PipelineTrainingException out = new PipelineTrainingException("pipeline step " + step + " failed on rank "
                + failedRanks.get(origin) + ": " + cause, failedRanks.get(origin), step, cause);
        RankFailures.suppressOthers(out, failures, origin);
        closed = true;
        stopWorkers();
        return out;
    }

    private void ensureWorkers() {
        if (workers != null) {
            return;
        }
        // every rank runs ND4J ops at once: each gets its share of the cores (op and BLAS threads, process-wide)
        Nd4jThreadLimit.set(ompThreadsPerRank);
        int pp = shape.ranks();
        world = InJvmWorld.create(dataParallel * pp, GroupOptions.defaults().withTimeout(timeout));
        List<PipelineRankWorker> started = new ArrayList<>(dataParallel * pp);
        for (int rank = 0; rank < dataParallel * pp; rank++) {
            // row-major dp x pp mesh: world rank d * pp + p runs pipeline rank p of replica d
            started.add(new PipelineRankWorker(rank, dataParallel, world, schedule, shape, linkSlots,
                    stagesOfRank(replicaStages.get(rank / pp), rank)));
        }
        workers = started;
        for (PipelineRankWorker worker : workers) {
            worker.start();
        }
        try {
            CompletableFuture.allOf(workers.stream().map(PipelineRankWorker::ready).toArray(CompletableFuture[]::new))
                    .get(timeout.toMillis() + 10_000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException | TimeoutException e) {
            stopWorkers();
            throw new SymmemException("pipeline ranks failed to start: " + e.getMessage(),
                    e instanceof ExecutionException ? e.getCause() : e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stopWorkers();
            throw new SymmemException("interrupted while starting pipeline ranks", e);
        }
        LOG.info("symmem4j pipeline: " + shape + (dataParallel > 1 ? " x " + dataParallel + " data-parallel replicas" : "")
                + ", schedule " + scheduleKind + ", link slots "
                + linkSlots + ", ND4J threads per rank " + ompThreadsPerRank + ", " + split);
    }

    private void stopWorkers() {
        if (group != null) {
            // group mode: this rank's resources (collective with the other ranks' close), never the user's group
            if (local != null) {
                local.close();
                local = null;
            }
            RankRuntime.closeQuietly(exchange);
            exchange = null;
            return;
        }
        if (workers == null) {
            return;
        }
        for (PipelineRankWorker worker : workers) {
            worker.submit(new PipelineRankWorker.Task(null, 0, null));
        }
        for (PipelineRankWorker worker : workers) {
            try {
                worker.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        world.close();
        workers = null;
        world = null;
    }

    /** Profiling passes of {@link Builder#splitByMeasuredTimes}: the first warms up. */
    static final int PROFILE_STEPS = 4;

    /**
     * Builder: {@code PipelineParallelTrainer.builder(model).ranks(2).microbatches(8).build()}. The options every
     * trainer takes (group, timeout, meters, step listeners, timeline) are {@link TrainerBuilder}'s.
     *
     * <p>Group mode ({@link #group}): this process (or thread) is one rank of {@code group}, which runs
     * {@code dataParallel x ranks} ranks laid out as in thread mode (world rank {@code d * pp + p} is
     * pipeline rank {@code p} of replica {@code d}); {@code ranks} defaults to the group's size divided
     * by {@code dataParallel}. Every rank runs the same program: it builds the same network (same seed
     * or file; checked at {@code build()}, with the other settings), and passes the same batches to
     * {@code fit} in the same order (checked before every step by a CRC-32C of each batch: a mismatch
     * fails on every rank before anything trains). Each rank trains only its own stages, on the
     * caller's thread; every rank's {@link PipelineParallelTrainer#lastStep()} holds the same loss and
     * replica 0's timelines, gathered after each step, as in thread mode; {@code copyParametersTo} is collective and leaves the whole
     * trained network in every rank's target. The result equals thread mode's bitwise. With a split by
     * measured times every rank measures, and rank 0's split is used. For one JVM per rank started by
     * {@code symmem4j-run} (or torchrun or mpirun): {@code group(ProcessGroup.fromEnvironment())}. The
     * group must live on a host transport (DL4J's CPU activations are host memory) and stays the
     * caller's to close, after the trainer. {@link #timeout} does not apply (the group's own does).
     */
    public static final class Builder extends TrainerBuilder<Builder, StepListener> {
        /** The network to train; for a graph, the chain network made from it at build(). */
        private MultiLayerNetwork network;
        private final ComputationGraph graph;
        private int ranks;
        private int dataParallel = 1;
        private int microbatches;
        private PipelineSchedule schedule = PipelineSchedule.ONE_F_ONE_B;
        private int stagesPerRank = 1;
        private int[] stageBoundaries;
        private int linkSlots;
        private InputType inputType;
        private DataSet profileSample;
        private StageProfile profile;

        private Builder(MultiLayerNetwork network, ComputationGraph graph) {
            this.network = network;
            this.graph = graph;
        }

        /**
         * Pipeline ranks p: threads, each running {@code stagesPerRank} stages (required).
         *
         * @param ranks pipeline ranks (threads), at least 1
         * @return this builder
         * @throws IllegalArgumentException when {@code ranks} is below 1
         */
        public Builder ranks(int ranks) {
            if (ranks < 1) {
                throw new IllegalArgumentException("ranks=" + ranks + " expected ranks >= 1");
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
        public Builder dataParallel(int replicas) {
            if (replicas < 1) {
                throw new IllegalArgumentException("dataParallel=" + replicas + " expected dataParallel >= 1 (1: no"
                        + " data parallelism)");
            }
            this.dataParallel = replicas;
            return this;
        }

        /**
         * Microbatches m per batch (required); every batch size must be a multiple of m.
         *
         * @param microbatches microbatches per batch, at least 1
         * @return this builder
         * @throws IllegalArgumentException when {@code microbatches} is below 1
         */
        public Builder microbatches(int microbatches) {
            if (microbatches < 1) {
                throw new IllegalArgumentException("microbatches=" + microbatches + " expected microbatches >= 1");
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
        public Builder schedule(PipelineSchedule schedule) {
            return schedule(schedule, 1);
        }

        /**
         * A schedule with {@code stagesPerRank} stages per rank: at least 2 for INTERLEAVED, 1 for the others.
         *
         * @param schedule      the schedule kind
         * @param stagesPerRank stages each rank runs (checked at {@link #build()})
         * @return this builder
         */
        public Builder schedule(PipelineSchedule schedule, int stagesPerRank) {
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
        public Builder stageBoundaries(int... firstLayerOfStages) {
            this.stageBoundaries = Objects.requireNonNull(firstLayerOfStages, "firstLayerOfStages").clone();
            return this;
        }

        /**
         * Messages per stage-to-stage link before the sender waits. Default: enough that no sender
         * waits for room when a backward takes twice a forward
         * ({@code LinkPlan.stallFreeSlots(ActionDurations.of(1, 2))}: 2 for GPipe and 1F1B, 2 to 4
         * interleaved); fewer than {@code LinkPlan.minimumSlots()} deadlock and are refused.
         *
         * @param slots messages per link, at least 1 (too few for the schedule are refused at {@link #build()})
         * @return this builder
         * @throws IllegalArgumentException when {@code slots} is below 1
         */
        public Builder linkSlots(int slots) {
            if (slots < 1) {
                throw new IllegalArgumentException("linkSlots=" + slots + " expected linkSlots >= 1");
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
        public Builder ompThreadsPerRank(int threads) {
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
        public Builder inputType(InputType inputType) {
            this.inputType = Objects.requireNonNull(inputType, "inputType");
            return this;
        }

        /**
         * Splits the network by measured compute time instead of parameter count: at {@code build()},
         * {@link StageProfile#measure} times every layer's forward and backward on {@code sample}'s
         * microbatches (a few passes, no update, with the ND4J threads each rank gets), and the split
         * balances forward plus backward time ({@link PipelineStageSplit#byCost}).
         *
         * @param sample a batch like those of training, cut into the builder's microbatches
         * @return this builder
         */
        public Builder splitByMeasuredTimes(DataSet sample) {
            this.profileSample = Objects.requireNonNull(sample, "sample");
            this.profile = null;
            return this;
        }

        /**
         * Splits by the layer times of a profile measured before ({@link StageProfile#measure}).
         *
         * @param profile per-layer forward and backward times
         * @return this builder
         */
        public Builder splitBy(StageProfile profile) {
            this.profile = Objects.requireNonNull(profile, "profile");
            this.profileSample = null;
            return this;
        }

        /**
         * Checks everything, splits the network and builds the stages (copies of the network's layers,
         * parameters, updater state and counters). Threads start at the first {@code fit}.
         *
         * @throws IllegalArgumentException naming what does not fit, expected and found, and the fix
         *
         * @return the trainer; close it to stop its threads and free its memory
         */
        public PipelineParallelTrainer build() {
            Group group = options().group();
            if (group != null) {
                checkGroup();
            }
            if (ranks == 0) {
                throw new IllegalArgumentException("ranks not set: call ranks(p) with the number of pipeline ranks"
                        + " (threads), e.g. ranks(2)");
            }
            if (microbatches == 0) {
                throw new IllegalArgumentException("microbatches not set: call microbatches(m); every batch is cut into m"
                        + " equal microbatches, and ranks idle for about (ranks - 1) / (m + ranks - 1) of a step, so"
                        + " take m several times ranks");
            }
            if (schedule == PipelineSchedule.INTERLEAVED && stagesPerRank < 2) {
                throw new IllegalArgumentException("schedule=INTERLEAVED with stagesPerRank=" + stagesPerRank
                        + " expected stagesPerRank >= 2 (use schedule(INTERLEAVED, 2), or ONE_F_ONE_B for one stage per rank)");
            }
            if (schedule != PipelineSchedule.INTERLEAVED && stagesPerRank != 1) {
                throw new IllegalArgumentException("schedule=" + schedule + " with stagesPerRank=" + stagesPerRank
                        + " expected stagesPerRank=1 (" + schedule + " runs one stage per rank; use INTERLEAVED for more)");
            }
            if (graph != null) {
                network = GraphChain.toNetwork(graph); // refuses graphs that are not a chain, naming the vertex
            }
            int stageCount = Math.multiplyExact(ranks, stagesPerRank);
            int layers = network.getLayerWiseConfigurations().getConfs().size();
            if (stageCount > layers) {
                throw new IllegalArgumentException("stages=" + stageCount + " (ranks=" + ranks + " x stagesPerRank="
                        + stagesPerRank + ") but the network has " + layers + " layers: use at most " + layers
                        + " stages (every stage needs at least one layer)");
            }
            if (stageBoundaries != null && stageBoundaries.length != stageCount - 1) {
                throw new IllegalArgumentException("stageBoundaries has " + stageBoundaries.length + " boundaries "
                        + Arrays.toString(stageBoundaries) + " expected " + (stageCount - 1) + " for stages=" + stageCount
                        + " (ranks=" + ranks + " x stagesPerRank=" + stagesPerRank + "): give the first layer of stages 1.."
                        + (stageCount - 1));
            }
            Schedule generated = schedule.generate(ranks, microbatches, stagesPerRank);
            PipelineShape shape = new PipelineShape(ranks, microbatches, stagesPerRank);
            LinkPlan plan = LinkPlan.of(generated, shape);
            int slots;
            if (linkSlots > 0) {
                plan.requireSlots(linkSlots);
                slots = linkSlots;
            } else {
                slots = plan.stallFreeSlots(ActionDurations.of(1, 2));
            }
            if (stageBoundaries != null && (profile != null || profileSample != null)) {
                throw new IllegalArgumentException("stageBoundaries and a split by measured times were both given:"
                        + " expected one (boundaries fix the split; measured times choose it)");
            }
            StageProfile measured = profile;
            if (profileSample != null) {
                // a replica's microbatch is 1/(microbatches x replicas) of the batch
                measured = StageProfile.measure(network, profileSample, microbatches * dataParallel, PROFILE_STEPS,
                        options().ndThreadsPerRank(ranks * dataParallel), inputType);
            }
            PipelineStageSplit split;
            if (stageBoundaries != null) {
                split = PipelineStageSplit.atBoundaries(network, stageBoundaries);
            } else if (measured != null) {
                split = PipelineStageSplit.byCost(network, stageCount, measured.layerNanos());
            } else {
                split = PipelineStageSplit.balanced(network, stageCount);
            }
            if (group != null) {
                split = agreeAcrossRanks(split, measured != null, slots);
            }
            return new PipelineParallelTrainer(this, options(), split, generated, shape, slots, measured);
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
            if (ranks == 0) {
                if (size % dataParallel != 0) {
                    throw new IllegalArgumentException("group(...) of worldSize=" + size + " with dataParallel=" + dataParallel
                            + ": expected a world size divisible by dataParallel (each replica has ranks = worldSize /"
                            + " dataParallel pipeline ranks)");
                }
                ranks = size / dataParallel;
            } else if (ranks * dataParallel != size) {
                throw new IllegalArgumentException("ranks=" + ranks + " x dataParallel=" + dataParallel + " = "
                        + ranks * dataParallel + " with group(...) of worldSize=" + size + ": in group mode every rank of"
                        + " the group is one pipeline rank of one replica (fix: leave ranks unset, or start "
                        + ranks * dataParallel + " processes)");
            }
        }

        /**
         * Group mode, collective: every rank must have built the same pipeline; a split by measured times
         * is rank 0's on every rank.
         */
        private PipelineStageSplit agreeAcrossRanks(PipelineStageSplit split, boolean measured, int slots) {
            StringBuilder boundaries = new StringBuilder();
            for (int s = 1; s < split.stageCount(); s++) {
                boundaries.append(s == 1 ? "" : ",").append(split.firstLayer(s));
            }
            String description = GroupExchange.describe(network) + ", dataType=" + split.dataType() + ", schedule="
                    + schedule + ", stagesPerRank=" + stagesPerRank + ", ranks=" + ranks + ", dataParallel=" + dataParallel
                    + ", microbatches=" + microbatches + ", linkSlots=" + slots
                    + (measured ? ", split by measured times" : ", stage boundaries " + boundaries);
            String rank0 = GroupExchange.agreeOnBuild(options().group(), boundaries.toString(), description);
            if (!measured || rank0.contentEquals(boundaries)) {
                return split;
            }
            int[] first = rank0.isEmpty() ? new int[0] : Arrays.stream(rank0.split(",")).mapToInt(Integer::parseInt).toArray();
            return PipelineStageSplit.atBoundaries(network, first);
        }
    }
}
