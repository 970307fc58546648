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
 * split or stage count is refused, naming the stage and its expected and found bounds.
 *
 * <p>Who writes what: in thread mode this process writes every file; in group mode each rank of replica 0 writes its
 * own stages' files (the model, which rank 0 writes as {@code model.zip}, gathered the stages after {@code fit}), the
 * other replicas' ranks only join the agreement. On restore each rank reads the shards of the stages it holds (the
 * files must be where every rank sees them), then every rank's model gathers each stage from the rank that read it,
 * so every rank's model holds the whole restored network and no rank more than its own stages.
 */
final class PipelineCheckpoints {

    private static final ShardedCheckpoints.Words WORDS = new ShardedCheckpoints.Words("trainer", "stage");
    /** The header's informational stage name: the state is a pipeline stage's. */
    private static final String KIND = "PIPELINE";

    private PipelineCheckpoints() {
    }

    /** Saves the stages' state and the model (which holds the same); collective in group mode. */
    static void save(Path dir, PipelineStageSplit split, PipelineModel model, List<Dl4jPipelineStage> stages,
                     Group group, int pipelineRanks, CheckpointDirectory.Counters counters) throws IOException {
        // replica 0's pipeline rank p writes its stages p, p + pp, ...; thread mode writes them all
        IntPredicate writes = group == null ? s -> true
                : s -> group.rank() < pipelineRanks && s % pipelineRanks == group.rank();
        List<ShardedCheckpoints.Shard> shards = shards(split, model, stages, writes);
        // another replica's rank writes nothing: replica 0's ranks write the (bitwise equal) stages; it only agrees
        ShardedCheckpoints.save(dir, stages.size(), shards, group == null || group.rank() == 0, model.model(), counters,
                agreement(group));
    }

    /**
     * Reads every stage's shard into replica 0's stages, checked first; then the model takes the saved parameters and
     * counters with the stages' restored updater state, and every replica takes the model's state. Collective in
     * group mode: a failure on any rank makes every rank throw.
     */
    static CheckpointDirectory.Counters restore(Path dir, PipelineStageSplit split, PipelineModel model,
                                                List<List<Dl4jPipelineStage>> replicas, Group group,
                                                GroupExchange exchange, int pipelineRanks) throws IOException {
        List<Dl4jPipelineStage> stages = replicas.getFirst();
        List<ShardedCheckpoints.Shard> shards = shards(split, model, stages, s -> true);
        // a rank reads the shards of the stages it holds; the others' arrive from their ranks in restoreFrom's gather:
        // their files are still checked against their layouts, and nothing is read into their hollow state
        List<ShardedCheckpoints.Shard> held = shards.stream().map(x -> stages.get(x.rank()).held() ? x
                : new ShardedCheckpoints.Shard(x.rank(), x.stage(), x.dataType(), x.paramCount(), x.paramRanges(),
                        x.stateCount(), List.of(), x.layoutHash(), x.iterationCount(), x.epochCount(), null)).toList();
        ShardedCheckpoints.Restored saved = ShardedCheckpoints.restore(dir, stages.size(), held, model.model(), WORDS,
                reads(shards), agreement(group));
        model.restoreFrom(saved.model(), replicas, exchange, pipelineRanks);
        return saved.counters();
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
