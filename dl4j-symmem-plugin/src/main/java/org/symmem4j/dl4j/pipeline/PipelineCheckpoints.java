package org.symmem4j.dl4j.pipeline;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.IntPredicate;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.ShardedCheckpoints;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.Group;

/**
 * The pipeline's checkpoints, on {@link ShardedCheckpoints} (the data-parallel wrapper's format and checks): one
 * shard file per stage, {@code shard-SSSSS-of-NNNNN.bin} for stage {@code S} of {@code N}, with the stage's updater
 * state (its parameter range of the whole network, its updater layout and counters in the header), and
 * {@code model.zip}, the whole network (or chain graph) with its full updater state, which plain DL4J loads with
 * {@code ModelSerializer}. A checkpoint belongs to a split, not to a rank layout: it restores into any trainer whose
 * stages are the same layers of the same network (the rank count, schedule and data parallelism may differ); another
 * split or stage count is refused, naming the stage and its expected and found bounds. With ZeRO stage 1 on the dp
 * axis ({@link PipelineZero}) each stage's shard is cut into its replicas' blocks, a file each ({@code stages x dp}
 * files); a restore reads a checkpoint in the cut the manifest names, so either kind restores into a trainer with or
 * without sharding.
 *
 * <p>Who writes what: in thread mode this process writes every file; in group mode each rank of replica 0 writes its
 * own stages' files (the model, which rank 0 writes as {@code model.zip}, gathered the stages after {@code fit}), the
 * other replicas' ranks only join the agreement (with ZeRO every rank writes its own blocks of its stages). On restore each rank reads the shards of the stages it holds (the
 * files must be where every rank sees them), then every rank's model gathers each stage from the rank that read it,
 * so every rank's model holds the whole restored network and no rank more than its own stages.
 */
final class PipelineCheckpoints {

    private static final ShardedCheckpoints.Words WORDS = new ShardedCheckpoints.Words("trainer", "stage");
    /** The header's informational stage name: the state is a pipeline stage's. */
    private static final String KIND = "PIPELINE";

    private PipelineCheckpoints() {
    }

    /**
     * Saves the stages' state and the model (which holds the same); collective in group mode. With ZeRO on the dp axis
     * ({@link PipelineZero}) each replica's block of each stage is a shard file of its own ({@link PipelineZero#blocksOf}:
     * {@code stages x dp} files, stage {@code s}'s block {@code d} the file {@code s * dp + d}), which the rank that
     * keeps it writes; {@code model.zip} holds the whole state, gathered.
     */
    static void save(Path dir, PipelineStageSplit split, PipelineModel model, StageReplicas replicas, Group group,
                     GroupExchange exchange, int pipelineRanks, CheckpointDirectory.Counters counters)
            throws IOException {
        List<Dl4jPipelineStage> stages = replicas.first();
        int blocks = files(replicas) / stages.size();
        // replica 0's pipeline rank p writes its stages p, p + pp, ... (with blocks every replica its own); thread mode
        // writes them all
        IntPredicate writes = group == null ? s -> true
                : s -> (blocks > 1 || group.rank() < pipelineRanks) && s % pipelineRanks == group.rank() % pipelineRanks;
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>();
        replicas.withWholeState(List.of(stages), exchange, () -> {
            for (ShardedCheckpoints.Shard stage : shards(split, model, stages, writes)) {
                shards.addAll(blocks == 1 ? List.of(stage) : PipelineZero.blocksOf(stage,
                        stages.get(stage.rank()).network(), blocks, group == null ? -1 : replicas.ownReplica()));
            }
        });
        // another replica's rank writes nothing but its blocks: replica 0's ranks write the (bitwise equal) stages
        ShardedCheckpoints.save(dir, stages.size() * blocks, shards, group == null || group.rank() == 0, model.model(),
                counters, agreement(group));
    }

    /** {@return the shard files a checkpoint of {@code replicas} has: one per stage, or per stage and replica with ZeRO} */
    static int files(StageReplicas replicas) {
        return replicas.first().size() * (replicas.shardedState() ? replicas.dataParallel() : 1);
    }

    /**
     * Reads every stage's shard into replica 0's stages, checked first; then the model takes the saved parameters and
     * counters with the stages' restored updater state, and every replica takes the model's state. Collective in
     * group mode: a failure on any rank makes every rank throw. With ZeRO on the dp axis the stages' whole state is
     * read from their replicas' block files, and each replica then takes its block.
     */
    static CheckpointDirectory.Counters restore(Path dir, PipelineStageSplit split, PipelineModel model,
                                                StageReplicas replicas, Group group, GroupExchange exchange,
                                                int pipelineRanks) throws IOException {
        CheckpointDirectory.Counters[] counters = new CheckpointDirectory.Counters[1];
        IOException[] failed = new IOException[1];
        replicas.withWholeState(replicas.all(), exchange, () -> {
            try {
                counters[0] = restoreWhole(dir, split, model, replicas, group, exchange, pipelineRanks);
            } catch (IOException e) {
                failed[0] = e;
            }
        });
        if (failed[0] != null) {
            throw failed[0];
        }
        return counters[0];
    }

    /** {@link #restore} while every stage holds DL4J's updater with its whole state. */
    private static CheckpointDirectory.Counters restoreWhole(Path dir, PipelineStageSplit split, PipelineModel model,
                                                             StageReplicas replicas, Group group,
                                                             GroupExchange exchange, int pipelineRanks)
            throws IOException {
        List<Dl4jPipelineStage> stages = replicas.first();
        // read in the cut it was saved in (a file per stage, or per stage and replica: any dp, sharded or not), into
        // the stages' whole state, which each replica's block takes afterwards (withWholeState)
        int saved = CheckpointDirectory.savedRanks(dir);
        int blocks = saved > 0 && saved % stages.size() == 0 ? saved / stages.size() : files(replicas) / stages.size();
        List<ShardedCheckpoints.Shard> shards = shards(split, model, stages, s -> true);
        // a rank reads the shards of the stages it holds; the others' arrive from their ranks in restoreFrom's gather:
        // their files are still checked against their layouts, and nothing is read into their hollow state
        List<ShardedCheckpoints.Shard> held = shards.stream().map(x -> stages.get(x.rank()).held() ? x
                : new ShardedCheckpoints.Shard(x.rank(), x.stage(), x.dataType(), x.paramCount(), x.paramRanges(),
                        x.stateCount(), List.of(), x.layoutHash(), x.iterationCount(), x.epochCount(), null)).toList();
        List<List<ShardedCheckpoints.Shard>> byStage = held.stream().map(x -> blocks == 1 ? List.of(x)
                : PipelineZero.blocksOf(x, stages.get(x.rank()).network(), blocks, -1)).toList();
        List<ShardedCheckpoints.Shard> read = byStage.stream().flatMap(List::stream).toList();
        ShardedCheckpoints.Restored restored = ShardedCheckpoints.restore(dir, stages.size() * blocks, read,
                model.model(), WORDS, reads(read), agreement(group));
        if (blocks > 1) {
            for (int s = 0; s < stages.size(); s++) {
                MultiLayerNetwork stage = stages.get(s).network();
                Updater updater = stage.getUpdater(true);
                if (stages.get(s).held() && updater != null && updater.getStateViewArray() != null) {
                    PipelineZero.blocksInto(byStage.get(s), stage, blocks, updater.getStateViewArray());
                }
            }
        }
        model.restoreFrom(restored.model(), replicas.all(), exchange, pipelineRanks);
        return restored.counters();
    }

    /**
     * The stages' shards. The pipeline's state space is the stages' updater states one after the other, in stage
     * order (each stage's own DL4J layout): stage {@code s} holds one parameter range, its layers', and one state range,
     * its whole state, after the states of the stages before it.
     */
    private static List<ShardedCheckpoints.Shard> shards(PipelineStageSplit split, PipelineModel model,
                                                         List<Dl4jPipelineStage> stages, IntPredicate mine) {
        long[] stateStart = new long[stages.size() + 1];
        for (int s = 0; s < stages.size(); s++) {
            Updater updater = stages.get(s).network().getUpdater(true);
            INDArray state = updater == null ? null : updater.getStateViewArray();
            stateStart[s + 1] = stateStart[s] + (state == null ? 0 : state.length());
        }
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>();
        for (int s = 0; s < stages.size(); s++) {
            if (!mine.test(s)) {
                continue;
            }
            MultiLayerNetwork stage = stages.get(s).network();
            Updater updater = stage.getUpdater(true);
            long start = split.parameterOffset(s);
            shards.add(new ShardedCheckpoints.Shard(s, KIND, split.dataType(), model.model().numParams(),
                    List.of(new ShardedCheckpoints.Range(start, start + split.parameterCount(s))), stateStart[stages.size()],
                    stateStart[s + 1] > stateStart[s] ? List.of(new ShardedCheckpoints.Range(stateStart[s], stateStart[s + 1]))
                            : List.of(), UpdaterStateCopy.fingerprint(updater), stage.getIterationCount(),
                    stage.getEpochCount(), updater == null ? null : updater.getStateViewArray()));
        }
        return shards;
    }

    /**
     * A pipeline reads pipeline shards of its own split only (a format-1 file's state is its stage's whole state, so
     * its one parameter range must be a stage's); no model-only checkpoint: its stages' layouts are not the model's.
     */
    private static ShardedCheckpoints.Reads reads(List<ShardedCheckpoints.Shard> shards) {
        return new ShardedCheckpoints.Reads(Set.of(KIND), "the shards of a pipeline trainer's stages (" + KIND + ")",
                range -> shards.stream().filter(s -> s.paramRanges().getFirst().equals(range)).findFirst()
                        .map(ShardedCheckpoints.Shard::stateRanges).orElseThrow(() -> new IllegalArgumentException(
                                "a shard file holds parameters " + range + ", which are no stage's of this trainer's split"
                                        + " (fix: restore into a trainer with the split the checkpoint was"
                                        + " saved with)")),
                false, true);
    }

    private static ShardedCheckpoints.Agreement agreement(Group group) {
        return ShardedCheckpoints.Agreement.over(group, "symmem4j-pipeline-");
    }
}
