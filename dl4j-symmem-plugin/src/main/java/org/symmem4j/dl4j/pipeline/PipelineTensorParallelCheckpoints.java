package org.symmem4j.dl4j.pipeline;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.zip.CRC32;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.ShardedCheckpoints;
import org.symmem4j.dl4j.tensor.TensorParallelReslice;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.Group;

/**
 * The checkpoints of a pipeline whose stages hold tensor-parallel blocks ({@link PipelineParallelTrainerBuilder#tensorParallel}),
 * on {@link ShardedCheckpoints} as {@link PipelineCheckpoints} (same directory layout, manifest, atomic writes and
 * checks): one file per stage shard, {@code shard-RRRRR-of-NNNNN.bin} with {@code R = s * tp + t} for tensor-parallel
 * shard {@code t} of stage {@code s} and {@code N = stages x tp}, holding that shard's parameters followed by its
 * updater state (the stage's own DL4J layouts in the shard configuration, {@link
 * org.symmem4j.dl4j.tensor.TensorParallel#shardConfiguration}), and {@code model.zip}, the whole unsharded network
 * with its full updater state joined from the shards, which plain DL4J loads with {@code ModelSerializer}.
 *
 * <p>The state space of the files is the shards one after the other: stage {@code s}'s {@code tp} shards, each
 * {@code len(s)} elements (every shard of a stage has the same layout), after those of the stages before it. A file's
 * header names what wrote it as {@code PIPELINE_TP<tp>}, so a checkpoint of a pipeline without tensor parallelism is
 * refused before anything is read, as are another split (each file's parameter range is its stage's range of the
 * whole network, checked against this trainer's) and another updater (each shard's layout fingerprint). A checkpoint
 * of another tensor-parallel degree {@code T} (same network, same stage split) is read as degree {@code T}'s trainer
 * reads it and re-sliced onto this degree per stage ({@link org.symmem4j.dl4j.tensor.TensorParallelReslice}, the
 * wrapper's re-slice), bit for bit the stages this degree cuts from {@code model.zip}.
 *
 * <p>Who writes what: thread mode writes every file; group mode each rank of replica 0 (world ranks {@code < pp x tp})
 * its shard of its stages, rank 0 also {@code model.zip} (every rank's model holds the whole network after the gather
 * that precedes a checkpoint) and the manifest. A restore reads every shard this process holds, of every replica, into
 * scratch arrays; only once every rank has read and checked all of its files do the stages take them (a refusal on any
 * rank changes no rank's stages); then the model takes the stages (joined, or gathered in group mode, collectively),
 * so it holds the checkpoint's whole network bitwise as {@code model.zip} holds it.
 */
final class PipelineTensorParallelCheckpoints {

    private static final Logger LOG = LoggerFactory.getLogger(PipelineTensorParallelCheckpoints.class);
    private static final ShardedCheckpoints.Words WORDS = new ShardedCheckpoints.Words("trainer", "stage shard");

    private PipelineTensorParallelCheckpoints() {
    }

    /** The header's name for what wrote the files: a pipeline's stage shards of tensor-parallel degree {@code tp}. */
    static String kind(int tp) {
        return "PIPELINE_TP" + tp;
    }

    /**
     * Saves the stage shards this process writes and the model (which holds the same, joined); collective in group
     * mode. {@code counters}' rank count is replaced by the file count, {@code stages x tp}.
     */
    static void save(Path dir, PipelineStageSplit split, PipelineModel model, StageReplicas replicas, Group group,
                     int pipelineRanks, CheckpointDirectory.Counters counters) throws IOException {
        Layout layout = Layout.of(replicas);
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>();
        // replica 0's shards: thread mode every one, group mode this rank's when it is one of replica 0's ranks
        for (Held h : held(replicas, group, pipelineRanks)) {
            if (h.replica() != 0) {
                continue;
            }
            for (int s = 0; s < h.stages().size(); s++) {
                Dl4jPipelineStage stage = h.stages().get(s);
                if (stage.held()) {
                    shards.add(layout.shard(split, model, s, h.shard(), stage.network(), contents(stage.network(),
                            layout.length(s))));
                }
            }
        }
        shards.sort(Comparator.comparingInt(ShardedCheckpoints.Shard::rank));
        CheckpointDirectory.Counters written = new CheckpointDirectory.Counters(counters.step(), counters.epoch(),
                counters.iteration(), counters.batchesInEpoch(), counters.examplesInEpoch(), layout.files());
        ShardedCheckpoints.save(dir, layout.files(), shards, group == null || group.rank() == 0, model.model(), written,
                ShardedCheckpoints.Agreement.over(group, "symmem4j-pipeline-"));
    }

    /**
     * Reads every stage shard this process holds (every replica's) from {@code dir}, checked first on every rank; then
     * the stages take what was read and the checkpoint's counters, and the model takes the stages (collective in group
     * mode). A refusal on any rank makes every rank throw with its stages and model as they were. A checkpoint of
     * another tensor-parallel degree (its manifest names {@code stages x T} files) is re-sliced onto this degree
     * ({@link #restoreResliced}).
     *
     * @return the manifest's counters, or null for a directory without a manifest
     */
    static CheckpointDirectory.Counters restore(Path dir, PipelineStageSplit split, PipelineModel model,
                                                StageReplicas replicas, Group group, GroupExchange exchange,
                                                int pipelineRanks) throws IOException {
        int tp = replicas.tensorParallel();
        List<Held> held = held(replicas, group, pipelineRanks);
        List<Dl4jPipelineStage> any = held.getFirst().stages(); // every shard of a stage has this layout
        int saved = CheckpointDirectory.savedRanks(dir); // -1 without a readable manifest: the restore says what is wrong
        if (saved > 0 && saved != any.size() * tp && saved % any.size() == 0 && saved / any.size() > 1) {
            return restoreResliced(dir, saved / any.size(), split, model, replicas, held, group, exchange);
        }
        Layout layout = Layout.of(any, tp);
        // one scratch array per shard held, of its length: the stages take them once every rank has checked everything
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>();
        List<Runnable> take = new ArrayList<>();
        for (int s = 0; s < any.size(); s++) {
            for (int t = 0; t < tp; t++) {
                boolean read = false;
                for (Held h : held) {
                    Dl4jPipelineStage stage = h.stages().get(s);
                    if (h.shard() != t || !stage.held()) {
                        continue;
                    }
                    INDArray scratch = layout.length(s) == 0 ? null
                            : Nd4j.create(split.dataType(), layout.length(s));
                    shards.add(layout.shard(split, model, s, t, stage.network(), scratch));
                    take.add(() -> takeContents(stage.network(), scratch));
                    read = true;
                }
                if (!read) {
                    // another rank's shard: its file is checked against its layout, nothing is read from it here
                    shards.add(layout.shard(split, model, s, t, any.get(s).network(), null));
                }
            }
        }
        ShardedCheckpoints.Restored restored = ShardedCheckpoints.restore(dir, layout.files(), shards, model.model(),
                WORDS, reads(tp), ShardedCheckpoints.Agreement.over(group, "symmem4j-pipeline-"));
        // every rank read and checked everything: from here on the stages change
        take.forEach(Runnable::run);
        return finish(restored, held, replicas, model, exchange);
    }

    /**
     * A checkpoint of another tensor-parallel degree {@code from} (its {@code stages x from} files, this trainer's
     * stage split): the checkpoint's stage shards are built from the configuration ({@link PipelineTensorParallel#of},
     * cut at this trainer's boundaries) and read as the trainer that wrote them reads them (every file checked against
     * its layout: kind {@code PIPELINE_TP<from>}, parameter range, updater), every shard of each stage this process
     * holds; then each held stage takes its shard of degree {@code tp} of them ({@link TensorParallelReslice}, the
     * wrapper's re-slice: weights, biases and updater state joined along their split axis and cut anew). Every stage's
     * fit (layers, divisibility) is checked on every rank before anything is read, so every rank refuses alike and no
     * stage changes.
     */
    private static CheckpointDirectory.Counters restoreResliced(Path dir, int from, PipelineStageSplit split,
                                                                PipelineModel model, StageReplicas replicas,
                                                                List<Held> held, Group group, GroupExchange exchange)
            throws IOException {
        int tp = replicas.tensorParallel();
        List<Dl4jPipelineStage> any = held.getFirst().stages();
        PipelineTensorParallel saved;
        try {
            saved = PipelineTensorParallel.of(model.network(), from, replicas.tensorColumns(), split, true);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("checkpoint " + dir + " holds " + any.size() + " stages x tensor-parallel"
                    + " degree " + from + " (its manifest's " + any.size() * from + " files), which this trainer's network"
                    + " and stage split cannot hold (" + e.getMessage() + "); expected the network and stage split the"
                    + " checkpoint was saved from (fix: build the trainer on that network with its stageBoundaries, or"
                    + " load model.zip and build the trainer on it)", e);
        }
        List<List<Dl4jPipelineStage>> shardsOf = new ArrayList<>(from); // the checkpoint's shard t's stages
        for (int t = 0; t < from; t++) {
            shardsOf.add(saved.buildStages(t));
        }
        // the re-slice of every stage checked first: shapes only, the same on every rank
        for (int s = 0; s < any.size(); s++) {
            TensorParallelReslice.check(networks(shardsOf, s), any.get(s).network(), tp);
        }
        boolean[] needed = new boolean[any.size()];
        for (Held h : held) {
            for (int s = 0; s < needed.length; s++) {
                needed[s] |= h.stages().get(s).held();
            }
        }
        Layout layout = Layout.of(shardsOf.getFirst(), from);
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>();
        List<Runnable> take = new ArrayList<>();
        for (int s = 0; s < any.size(); s++) {
            for (int t = 0; t < from; t++) {
                MultiLayerNetwork shard = shardsOf.get(t).get(s).network();
                // every shard of a stage this process holds is read; another rank's stages are only checked
                INDArray scratch = !needed[s] || layout.length(s) == 0 ? null
                        : Nd4j.create(split.dataType(), layout.length(s));
                shards.add(layout.shard(split, model, s, t, shard, scratch));
                take.add(() -> takeContents(shard, scratch));
            }
        }
        ShardedCheckpoints.Restored restored = ShardedCheckpoints.restore(dir, layout.files(), shards, model.model(),
                WORDS, reads(from), ShardedCheckpoints.Agreement.over(group, "symmem4j-pipeline-"));
        take.forEach(Runnable::run); // the checkpoint's shards: the stages are as they were
        // every rank read and checked everything: from here on the stages change
        for (Held h : held) {
            for (int s = 0; s < any.size(); s++) {
                Dl4jPipelineStage stage = h.stages().get(s);
                if (stage.held()) {
                    TensorParallelReslice.reslice(networks(shardsOf, s), stage.network(), h.shard(), tp);
                }
            }
        }
        LOG.info("symmem4j checkpoint: re-sliced the pipeline's tensor-parallel degree {} checkpoint {} onto degree {}",
                from, dir, tp);
        return finish(restored, held, replicas, model, exchange);
    }

    /** Stage {@code s}'s network of every shard, in shard order. */
    private static List<MultiLayerNetwork> networks(List<List<Dl4jPipelineStage>> shards, int s) {
        return shards.stream().map(stages -> stages.get(s).network()).toList();
    }

    /** What a restore reads: files of {@code PIPELINE_TP<tp>}, each with its state ranges. */
    private static ShardedCheckpoints.Reads reads(int tp) {
        return new ShardedCheckpoints.Reads(Set.of(kind(tp)), "the stage shards of a"
                + " pipeline trainer with tensorParallel=" + tp + " (" + kind(tp) + ")", range -> {
                    throw new IllegalArgumentException("a shard file without state ranges (format 1) holds parameters "
                            + range + ": expected " + kind(tp) + " files, which always carry them (fix: restore it into"
                            + " the trainer that wrote it)");
                }, false, true);
    }

    /**
     * After the stages took the checkpoint: the counters of {@code model.zip} into every stage, then the model takes the
     * stages (joined, or gathered from every rank: collective).
     */
    private static CheckpointDirectory.Counters finish(ShardedCheckpoints.Restored saved, List<Held> held,
                                                       StageReplicas replicas, PipelineModel model,
                                                       GroupExchange exchange) {
        // model.zip's counters (checked equal to every file's): of a network, or of the chain graph given to the builder
        int iteration = saved.model() instanceof MultiLayerNetwork n ? n.getIterationCount()
                : ((ComputationGraph) saved.model()).getConfiguration().getIterationCount();
        int epoch = saved.model() instanceof MultiLayerNetwork n ? n.getEpochCount()
                : ((ComputationGraph) saved.model()).getConfiguration().getEpochCount();
        for (Held h : held) {
            for (Dl4jPipelineStage stage : h.stages()) {
                stage.network().setIterationCount(iteration);
                stage.network().setEpochCount(epoch);
            }
        }
        replicas.giveTo(model, exchange); // joined from the shards, or gathered from every rank: collective
        return saved.counters();
    }

    /** A list of stages this process holds: of data-parallel replica {@code replica}, tensor-parallel shard {@code shard}. */
    private record Held(int replica, int shard, List<Dl4jPipelineStage> stages) {
    }

    /** Every stage list this process holds, with its replica and shard ({@link StageReplicas#all}'s order). */
    private static List<Held> held(StageReplicas replicas, Group group, int pipelineRanks) {
        int tp = replicas.tensorParallel();
        List<List<Dl4jPipelineStage>> all = replicas.all();
        List<Held> held = new ArrayList<>(all.size());
        for (int i = 0; i < all.size(); i++) {
            // thread mode: replica d's shard t at d * tp + t; group mode: world rank (d * pp + p) * tp + t's one list
            held.add(group == null ? new Held(i / tp, i % tp, all.get(i))
                    : new Held(group.rank() / (pipelineRanks * tp), group.rank() % tp, all.get(i)));
        }
        return held;
    }

    /** The shard's parameters followed by its updater state, in a new contiguous array of {@code length} (null when 0). */
    private static INDArray contents(MultiLayerNetwork stage, long length) {
        if (length == 0) {
            return null;
        }
        INDArray out = Nd4j.create(stage.params().dataType(), length);
        long params = stage.numParams();
        PipelineStageSplit.slice(out, 0, params).assign(stage.params().reshape(params));
        INDArray state = stateOf(stage);
        if (state != null && state.length() > 0) {
            PipelineStageSplit.slice(out, params, length).assign(state.reshape(state.length()));
        }
        return out;
    }

    /** The stage takes {@code contents} (parameters, then updater state), as {@link #contents} laid them out. */
    private static void takeContents(MultiLayerNetwork stage, INDArray contents) {
        if (contents == null) {
            return;
        }
        long params = stage.numParams();
        stage.params().assign(PipelineStageSplit.slice(contents, 0, params).reshape(stage.params().shape()));
        INDArray state = stateOf(stage);
        if (state != null && state.length() > 0) {
            state.assign(PipelineStageSplit.slice(contents, params, contents.length()).reshape(state.shape()));
        }
    }

    private static INDArray stateOf(MultiLayerNetwork stage) {
        Updater updater = stage.getUpdater(true);
        return updater == null ? null : updater.getStateViewArray();
    }

    /**
     * The files' state space: per stage its shard length (parameters and updater state of one shard, the same for every
     * shard) and layout fingerprint, {@code tp} shards per stage.
     */
    private record Layout(int tp, long[] lengths, long[] fingerprints) {

        static Layout of(StageReplicas replicas) {
            return of(replicas.all().getFirst(), replicas.tensorParallel()); // hollow or held: the layouts are there
        }

        /** The layout of {@code stages} (one shard's, every shard's alike) at tensor-parallel degree {@code tp}. */
        static Layout of(List<Dl4jPipelineStage> stages, int tp) {
            long[] lengths = new long[stages.size()];
            long[] fingerprints = new long[stages.size()];
            for (int s = 0; s < stages.size(); s++) {
                MultiLayerNetwork stage = stages.get(s).network();
                INDArray state = stateOf(stage);
                lengths[s] = stage.numParams() + (state == null ? 0 : state.length());
                fingerprints[s] = fingerprint(stage);
            }
            return new Layout(tp, lengths, fingerprints);
        }

        int files() {
            return lengths.length * tp;
        }

        long length(int stage) {
            return lengths[stage];
        }

        /** Shard {@code t} of stage {@code s} as its file describes it, over {@code contents} (or null: not read here). */
        ShardedCheckpoints.Shard shard(PipelineStageSplit split, PipelineModel model, int s, int t,
                                       MultiLayerNetwork stage, INDArray contents) {
            long before = 0;
            for (int i = 0; i < s; i++) {
                before += lengths[i] * tp;
            }
            long start = before + t * lengths[s];
            long total = Arrays.stream(lengths).sum() * tp;
            long params = split.parameterOffset(s);
            List<ShardedCheckpoints.Range> state = contents == null || lengths[s] == 0 ? List.of()
                    : List.of(new ShardedCheckpoints.Range(start, start + lengths[s]));
            return new ShardedCheckpoints.Shard(s * tp + t, kind(tp), split.dataType(), model.model().numParams(),
                    List.of(new ShardedCheckpoints.Range(params, params + split.parameterCount(s))), total, state,
                    fingerprints[s], stage.getIterationCount(), stage.getEpochCount(), contents);
        }
    }

    /**
     * The stage shard's layout: its updater's blocks ({@link UpdaterStateCopy#fingerprint}) and every layer's kind and
     * parameter shapes, so that a file of another configuration, block split or updater is refused; the same whether or
     * not the schedule's split layers are in place.
     */
    private static long fingerprint(MultiLayerNetwork stage) {
        StringBuilder b = new StringBuilder("updater=").append(UpdaterStateCopy.fingerprint(stage.getUpdater(true)));
        for (Layer layer : stage.getLayers()) {
            // a ZB-H1 split layer put in place of DL4J's (SplitBackward) stands for the DL4J layer it extends: a file
            // saved after the split was put in place restores into stages that have not split yet, and the reverse
            Class<?> kind = SplitBackward.replaced(layer) ? layer.getClass().getSuperclass() : layer.getClass();
            b.append(';').append(kind.getSimpleName());
            for (Map.Entry<String, INDArray> p : layer.paramTable(false).entrySet()) {
                b.append(',').append(p.getKey()).append(Arrays.toString(p.getValue().shape()));
            }
        }
        CRC32 crc = new CRC32();
        crc.update(b.toString().getBytes(StandardCharsets.UTF_8));
        return crc.getValue();
    }
}
