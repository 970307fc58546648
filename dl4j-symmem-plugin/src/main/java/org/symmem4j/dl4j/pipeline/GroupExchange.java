package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32C;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.shape.Shape;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.RankAgreement;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.exec.TimelineEvent;

/**
 * What the ranks of a group-mode pipeline ({@link PipelineParallelTrainerBuilder#group}, one process
 * per rank) agree on besides the pipeline's own messages, over one host communicator of the group:
 *
 * <ul>
 *   <li>at {@code build()}: the network (layer count, parameter count and a CRC-32C of the initial
 *       parameters), the schedule, the shape, the link slots and the split; with a split by measured
 *       times, rank 0's split is every rank's (each rank measured its own);</li>
 *   <li>before every step: the batch (example count and CRC-32C of features, labels and masks), so
 *       ranks fed different data fail on every rank before anything trains, instead of the first stage
 *       training on one batch and the last on another's labels;</li>
 *   <li>after every step: each rank's part of the loss, added in the order thread mode adds them, so
 *       every rank reports the same bits as the trainer on threads, and replica 0's timelines, so every
 *       rank's report, metrics and trace show the whole pipeline as in thread mode;</li>
 *   <li>after {@code fit} and at {@code copyParametersTo}: each stage's parameters (batch normalization's running
 *       statistics among them), updater state and counters, broadcast from the rank that trained it into the
 *       whole network the user gave ({@link #gatherInto}); with tensor parallelism every shard of each stage,
 *       joined ({@link #gatherShardsInto}).</li>
 * </ul>
 *
 * <p>The per-step exchanges are three all-gathers of a few hundred words at most on the group's symmetric memory
 * (microseconds on a host transport); nothing goes through the rendezvous store after {@code build()}.
 */
final class GroupExchange implements AutoCloseable {

    /** Per group object (one per rank, also when ranks are threads of one JVM): build() calls so far, for unique tags. */
    private static final Map<Group, AtomicInteger> BUILDS = new WeakHashMap<>();

    private final Group group;
    private final Communicator communicator;

    private GroupExchange(Group group, Communicator communicator) {
        this.group = group;
        this.communicator = communicator;
    }

    /** A host communicator on {@code group}: collective, every rank opens it at the same point. */
    static GroupExchange open(Group group) {
        return new GroupExchange(group, Communicator.create(group));
    }

    /**
     * Collective at {@code build()}: every rank's {@code description} must equal rank 0's, else every
     * rank throws naming the first rank that differs and both descriptions. Returns rank 0's
     * {@code boundaries} (the split every rank then uses). A rank whose own checks refused the build passes its
     * {@code refusal} instead (boundaries and description null): then every rank throws the same error, naming the
     * ranks that refused and what each refused, so that none goes on to wait for them in the pipeline's first
     * collective until its timeout (an {@link IllegalArgumentException} when every refusal was one, else an
     * {@link IllegalStateException}; when every rank refused alike, its own error as it is).
     */
    static String agreeOnBuild(Group group, String boundaries, String description, RuntimeException refusal) {
        int build;
        synchronized (BUILDS) {
            build = BUILDS.computeIfAbsent(group, g -> new AtomicInteger()).getAndIncrement();
        }
        String mine = refusal == null ? ACCEPTED + boundaries + "\n" + description
                : (refusal instanceof IllegalArgumentException ? REFUSED : FAILED) + refusal.getMessage();
        List<String> all = RankAgreement.allGather(group, "symmem4j-pipeline-build-" + build, mine);
        refuseTogether(all, refusal);
        String[] rank0 = all.getFirst().substring(ACCEPTED.length()).split("\n", 2);
        for (int r = 1; r < all.size(); r++) {
            String[] theirs = all.get(r).substring(ACCEPTED.length()).split("\n", 2);
            if (!theirs[1].equals(rank0[1])) {
                throw new IllegalArgumentException("group mode: rank " + r + " built a different pipeline than rank 0:"
                        + " rank 0 has " + rank0[1] + ", rank " + r + " has " + theirs[1] + " (fix: every rank"
                        + " must build the same"
                        + " network, from the same seed or the same file, with the same builder settings)");
            }
        }
        return rank0[0];
    }

    /** What a rank contributes to {@link #agreeOnBuild}: its pipeline, or its refusal. */
    private static final String ACCEPTED = "accepted\n";
    private static final String REFUSED = "refused\n";
    private static final String FAILED = "failed\n";

    /** Throws on every rank when any rank refused its build ({@link #agreeOnBuild}). */
    private static void refuseTogether(List<String> all, RuntimeException mine) {
        List<Integer> refusing = new ArrayList<>();
        StringBuilder what = new StringBuilder();
        boolean argumentsOnly = true;
        for (int r = 0; r < all.size(); r++) {
            String text = all.get(r);
            if (text.startsWith(ACCEPTED)) {
                continue;
            }
            boolean refused = text.startsWith(REFUSED);
            argumentsOnly &= refused;
            refusing.add(r);
            what.append(what.isEmpty() ? "" : "; ").append("rank ").append(r).append(refused ? " refused: " : " failed: ")
                    .append(text.substring(refused ? REFUSED.length() : FAILED.length()));
        }
        if (refusing.isEmpty()) {
            return;
        }
        if (mine != null && refusing.size() == all.size() && all.stream().distinct().count() == 1) {
            throw mine; // every rank refused alike: its own message says it for all
        }
        String message = "group mode: build() refused on every rank (" + all.size() + "): rank(s) " + refusing
                + (argumentsOnly ? " refused it" : " failed") + ", expected every rank to accept the same pipeline;"
                + " nothing was built or linked on any rank. " + what + " (fix: what rank " + refusing.getFirst()
                + "'s message says; every rank must build the same pipeline with the same builder settings)";
        throw argumentsOnly ? new IllegalArgumentException(message, mine) : new IllegalStateException(message, mine);
    }

    /**
     * Collective before a step: every rank must have been given the same batch, one the stages take
     * ({@link PipelineBatches#asDataSet}). Throws an {@link IllegalArgumentException} on every rank otherwise
     * (nothing has trained; the trainer stays usable), also when one rank alone was given a batch it refuses.
     *
     * @param given the batch as the caller gave it: a DataSet or a MultiDataSet
     * @return it as a DataSet
     */
    DataSet agreeOnBatch(Object given, long step) {
        org.nd4j.linalg.dataset.api.MultiDataSet refused = given instanceof org.nd4j.linalg.dataset.api.MultiDataSet m
                && (m.numFeatureArrays() != 1 || m.numLabelsArrays() != 1) ? m : null;
        DataSet batch = refused == null ? PipelineBatches.asDataSet(given) : null;
        double[] mine = refused != null
                ? new double[] {REFUSED_BATCH, refused.numFeatureArrays(), refused.numLabelsArrays(), 0, 0}
                : new double[] {
                    batch.getFeatures() == null ? -1 : batch.getFeatures().size(0),
                    crc(batch.getFeatures()), crc(batch.getLabels()), crc(batch.getFeaturesMaskArray()),
                    crc(batch.getLabelsMaskArray())
                };
        double[][] all = allGather(mine);
        refuseTogether(all, step);
        String[] parts = {"example count", "features", "labels", "features mask", "labels mask"};
        for (int r = 1; r < all.length; r++) {
            for (int i = 0; i < mine.length; i++) {
                if (Double.compare(all[r][i], all[0][i]) != 0) {
                    throw new IllegalArgumentException("group mode, step " + step + ": rank " + r + " was given a different"
                            + " batch than rank 0 (its " + parts[i] + " differ" + (i == 0 ? ": " + (long) all[r][0] + " vs "
                            + (long) all[0][0] + " examples" : " by CRC-32C") + "); every rank must pass the same batches in"
                            + " the same order (the same iterator, the same shuffling seed): the first stage reads the"
                            + " features and the last the labels. Nothing was trained in this step (fix: build every"
                            + " rank's iterator alike, with the same data, batch size and shuffling seed).");
                }
            }
        }
        return batch;
    }

    /** What a rank given a batch it refuses contributes to {@link #agreeOnBatch} for its example count. */
    private static final double REFUSED_BATCH = -2;

    /** Throws on every rank, the same error, when any rank was given a batch it refuses ({@link #agreeOnBatch}). */
    private static void refuseTogether(double[][] all, long step) {
        List<Integer> refusing = new ArrayList<>();
        for (int r = 0; r < all.length; r++) {
            if (all[r][0] == REFUSED_BATCH) {
                refusing.add(r);
            }
        }
        if (!refusing.isEmpty()) {
            int first = refusing.getFirst();
            // error-message: the text ends with notOneInputOneOutput's, which says what was expected and the fix
            throw new IllegalArgumentException("group mode, step " + step + ": rank(s) " + refusing + " refused the"
                    + " batch they were given, so no rank trains it; rank " + first + " was given "
                    + PipelineBatches.notOneInputOneOutput((long) all[first][1], (long) all[first][2]));
        }
    }

    /** The loss every rank reports for a step, and replica 0's pipeline ranks' timelines in rank order. */
    record StepOutcome(double loss, List<StepTimeline> timelines) {
    }

    /**
     * Collective after a step: the step's loss as thread mode computes it from replica 0's stages (the
     * last stage's data loss plus every stage's regularization term, in stage order; with {@code tensorParallel > 1}
     * shard 0's data loss plus every shard's regularization share, shard by shard, as thread mode adds them), and the
     * timelines of replica 0's pipeline ranks (their tensor-parallel rank 0's), as thread mode reports them. World rank
     * {@code (d * pp + p) * tp + t} is pipeline rank {@code p} of replica {@code d}, shard {@code t}. The ranks' clocks
     * are comparable: {@code System.nanoTime} is the machine's monotonic clock in every process of one machine.
     */
    StepOutcome afterStep(List<Dl4jPipelineStage> stages, int pipelineRanks, int tensorParallel, StepTimeline mine) {
        int stageCount = stages.size();
        int rank = group.rank();
        int pipelineRank = rank / tensorParallel % pipelineRanks;
        double[] parts = new double[stageCount + 2];
        if (rank < pipelineRanks * tensorParallel) { // replica 0
            for (int s = pipelineRank; s < stageCount; s += pipelineRanks) {
                parts[s] = stages.get(s).regularizationScore();
            }
            if ((stageCount - 1) % pipelineRanks == pipelineRank && rank % tensorParallel == 0) {
                parts[stageCount] = stages.getLast().dataLoss();
            }
        }
        parts[stageCount + 1] = mine.events().size();
        double[][] all = allGather(parts);
        double loss = all[(stageCount - 1) % pipelineRanks * tensorParallel][stageCount];
        for (int t = 0; t < tensorParallel; t++) {
            for (int s = 0; s < stageCount; s++) {
                loss += all[s % pipelineRanks * tensorParallel + t][s];
            }
        }
        int most = 0;
        for (double[] theirs : all) {
            most = Math.max(most, (int) theirs[stageCount + 1]);
        }
        long[] events = new long[Math.max(1, most * EVENT_WORDS)];
        for (int i = 0; i < mine.events().size(); i++) {
            TimelineEvent e = mine.events().get(i);
            int at = i * EVENT_WORDS;
            events[at] = e.kind().ordinal();
            events[at + 1] = e.stage();
            events[at + 2] = e.peerStage();
            events[at + 3] = e.microbatch();
            events[at + 4] = e.startNanos();
            events[at + 5] = e.endNanos();
        }
        long[][] gathered = allGatherWords(events);
        List<StepTimeline> timelines = new ArrayList<>(pipelineRanks);
        TimelineEvent.Kind[] kinds = TimelineEvent.Kind.values();
        for (int r = 0; r < pipelineRanks; r++) {
            int from = r * tensorParallel; // pipeline rank r of replica 0, shard 0
            int count = (int) all[from][stageCount + 1];
            List<TimelineEvent> list = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                long[] w = gathered[from];
                int at = i * EVENT_WORDS;
                list.add(new TimelineEvent(r, kinds[(int) w[at]], (int) w[at + 1], (int) w[at + 2], (int) w[at + 3],
                        w[at + 4], w[at + 5]));
            }
            timelines.add(new StepTimeline(r, list));
        }
        return new StepOutcome(loss, timelines);
    }

    /** Words per timeline event in {@link #afterStep}: kind, stage, peer stage, microbatch, start, end. */
    private static final int EVENT_WORDS = 6;

    /**
     * Collective: {@code target} (a whole network of the split's configuration) gets every stage's parameters
     * (batch normalization's running statistics among them), updater state and counters, broadcast stage by stage from
     * replica 0's rank {@code s % pipelineRanks}, which trains stage {@code s}. A rank holds only its own stages: the
     * others' state arrives straight into {@code target}'s parameters, and through one stage-sized buffer at a time into
     * its updater state (the stage's updater layout differs from the whole network's where blocks meet at a boundary).
     */
    void gatherInto(PipelineStageSplit split, List<Dl4jPipelineStage> stages, int pipelineRanks, MultiLayerNetwork target) {
        split.requireSameLayers(target);
        INDArray targetParams = target.params();
        for (int s = 0; s < stages.size(); s++) {
            long count = split.parameterCount(s);
            if (count == 0) {
                continue;
            }
            int root = s % pipelineRanks;
            Dl4jPipelineStage stage = stages.get(s);
            boolean sends = group.rank() == root;
            if (sends && !stage.held()) {
                throw Invariants.violated("rank " + root + " gathers stage " + s + " from itself but does not hold it");
            }
            long from = split.parameterOffset(s);
            INDArray slice = PipelineStageSplit.slice(targetParams, from, from + count);
            MultiLayerNetwork network = stage.network();
            if (sends) {
                broadcast(network.params(), root);
                slice.assign(network.params());
            } else {
                broadcast(slice, root);
            }
            // the updater's state layout exists on every rank alike (same configuration), hollow where it is not held
            Updater layout = network.getUpdater(true);
            INDArray state = layout.getStateViewArray();
            if (state != null && state.length() > 0) {
                INDArray received = sends ? state : Nd4j.create(state.dataType(), state.length());
                broadcast(received, root);
                UpdaterStateCopy.copy(layout, received, target.getUpdater(true), 0, from, count);
            }
        }
        broadcastCounters(stages.getFirst(), target);
    }

    /**
     * Collective, the group-mode gather of a tensor-parallel pipeline: {@code target} (a whole network of the unsharded
     * configuration) gets every stage's shards joined ({@link TensorParallel#joinInto}): parameters and updater state,
     * broadcast shard by shard from replica 0's rank {@code (s % pp) * tp + t}, which trains shard {@code t} of stage
     * {@code s}, into a scratch network of one stage's shard (this rank's own stage where it is that rank), then the
     * counters. A rank holds one stage's shards at a time besides its own stages; {@code stages} is this rank's shard
     * (its own stages held, the others hollow), {@code split} the shard's.
     */
    void gatherShardsInto(PipelineStageSplit split, List<Dl4jPipelineStage> stages, int pipelineRanks,
                          int tensorParallel, MultiLayerNetwork target) {
        for (int s = 0; s < stages.size(); s++) {
            if (split.parameterCount(s) == 0) {
                continue;
            }
            List<MultiLayerNetwork> shards = new ArrayList<>(tensorParallel);
            for (int t = 0; t < tensorParallel; t++) {
                int root = s % pipelineRanks * tensorParallel + t;
                boolean sends = group.rank() == root;
                if (sends && !stages.get(s).held()) {
                    throw Invariants.violated("rank " + root + " gathers shard " + t + " of stage " + s + " from itself"
                            + " but does not hold it");
                }
                MultiLayerNetwork shard = sends ? stages.get(s).network() : split.newStageNetwork(s);
                broadcast(shard.params(), root);
                INDArray state = shard.getUpdater(true).getStateViewArray();
                if (state != null && state.length() > 0) {
                    broadcast(state, root);
                }
                shards.add(shard);
            }
            TensorParallel.joinInto(shards, target, split.firstLayer(s));
        }
        broadcastCounters(stages.getFirst(), target);
    }

    /** Every stage's counters are the step's: those of stage 0, which world rank 0 (replica 0's) trains. */
    private void broadcastCounters(Dl4jPipelineStage first, MultiLayerNetwork target) {
        MemorySegment counters = Arena.ofAuto().allocate(2 * Long.BYTES, Long.BYTES);
        counters.setAtIndex(ValueLayout.JAVA_LONG, 0, first.network().getIterationCount());
        counters.setAtIndex(ValueLayout.JAVA_LONG, 1, first.network().getEpochCount());
        communicator.broadcast(counters, 2, DType.FLOAT64, 0); // 64-bit words, copied as they are
        target.setIterationCount(Math.toIntExact(counters.getAtIndex(ValueLayout.JAVA_LONG, 0)));
        target.setEpochCount(Math.toIntExact(counters.getAtIndex(ValueLayout.JAVA_LONG, 1)));
    }

    /** Broadcasts {@code array}'s bytes from {@code root} into every rank's {@code array} (copies through a row-major dup if needed). */
    private void broadcast(INDArray array, int root) {
        boolean contiguous = array.ordering() == 'c' && Shape.hasDefaultStridesForShape(array);
        INDArray buffer = contiguous ? array : array.dup('c');
        MemorySegment bytes = ArrayCollectives.segmentOf(buffer);
        int width = buffer.dataType().width();
        DType words = switch (width) {
            case 8 -> DType.FLOAT64;
            case 4 -> DType.FLOAT32;
            case 2 -> DType.BFLOAT16;
            default -> throw Invariants.violated("a " + buffer.dataType() + " array: expected 2, 4 or 8 bytes per element");
        };
        communicator.broadcast(bytes, buffer.length(), words, root); // a copy: the bits arrive as they are
        if (!contiguous) {
            array.assign(buffer);
        }
    }

    /**
     * Collective: {@code array} (the same shape on every rank) becomes its sum over the group's ranks, added in rank
     * order, the same bits on every rank (ZeRO's gather of a stage's updater state from its replicas' blocks,
     * {@link PipelineZero}).
     */
    void sumInPlace(INDArray array) {
        new ArrayCollectives(communicator).sumInPlace(array);
    }

    private double[][] allGather(double[] mine) {
        long[] words = new long[mine.length];
        for (int i = 0; i < mine.length; i++) {
            words[i] = Double.doubleToRawLongBits(mine[i]);
        }
        long[][] all = allGatherWords(words);
        double[][] out = new double[all.length][mine.length];
        for (int r = 0; r < all.length; r++) {
            for (int i = 0; i < mine.length; i++) {
                out[r][i] = Double.longBitsToDouble(all[r][i]);
            }
        }
        return out;
    }

    /** All-gather of 64-bit words, copied as they are (the collective's FLOAT64 type only sets their width). */
    private long[][] allGatherWords(long[] mine) {
        int n = mine.length;
        int ranks = group.worldSize();
        Arena arena = Arena.ofAuto();
        MemorySegment send = arena.allocate((long) n * Long.BYTES, Long.BYTES);
        MemorySegment recv = arena.allocate((long) n * ranks * Long.BYTES, Long.BYTES);
        MemorySegment.copy(mine, 0, send, ValueLayout.JAVA_LONG, 0, n);
        communicator.allGather(send, recv, n, DType.FLOAT64);
        long[][] all = new long[ranks][n];
        for (int r = 0; r < ranks; r++) {
            MemorySegment.copy(recv, ValueLayout.JAVA_LONG, (long) r * n * Long.BYTES, all[r], 0, n);
        }
        return all;
    }

    /** CRC-32C of an array's shape, type and values (row-major), or -1 for none. */
    static double crc(INDArray array) {
        if (array == null) {
            return -1;
        }
        INDArray rowMajor = array.ordering() == 'c' && Shape.hasDefaultStridesForShape(array) ? array : array.dup('c');
        CRC32C crc = new CRC32C();
        crc.update(Arrays.toString(rowMajor.shape()).getBytes(StandardCharsets.UTF_8));
        crc.update(rowMajor.dataType().ordinal());
        crc.update(ArrayCollectives.segmentOf(rowMajor).asByteBuffer());
        return crc.getValue();
    }

    /** A description of a configuration for {@link #agreeOnBuild}: layers, parameters and the CRC-32C of its JSON. */
    static String describe(org.deeplearning4j.nn.conf.MultiLayerConfiguration conf) {
        CRC32C crc = new CRC32C();
        crc.update(conf.toJson().getBytes(StandardCharsets.UTF_8));
        return "layers=" + conf.getConfs().size() + ", parameters=" + org.symmem4j.dl4j.HollowNetworks.parameterCount(conf)
                + ", configurationCrc=" + Long.toHexString(crc.getValue());
    }

    /** A description of {@code network} for {@link #agreeOnBuild}: layers, parameters and their CRC-32C. */
    static String describe(MultiLayerNetwork network) {
        List<String> parts = new ArrayList<>();
        parts.add("layers=" + network.getnLayers());
        parts.add("parameters=" + network.numParams());
        parts.add("parameterCrc=" + Long.toHexString((long) crc(network.params())));
        return String.join(", ", parts);
    }

    @Override
    public void close() {
        communicator.close();
    }
}
