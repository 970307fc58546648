package org.symmem4j.dl4j.pipeline;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntPredicate;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
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
 * own stages' files (every rank's copies of the stages are current after {@code fit}), rank 0 also {@code model.zip},
 * the other replicas' ranks only join the agreement. On restore every process reads every stage's shard (the files
 * must be where every rank sees them), so every rank's stages and model hold the whole restored network.
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
                                                List<List<Dl4jPipelineStage>> replicas, Group group) throws IOException {
        List<Dl4jPipelineStage> stages = replicas.getFirst();
        ShardedCheckpoints.Restored saved = ShardedCheckpoints.restore(dir, stages.size(),
                shards(split, model, stages, s -> true), model.model(), WORDS, agreement(group));
        model.restoreFrom(saved.model(), replicas);
        return saved.counters();
    }

    private static List<ShardedCheckpoints.Shard> shards(PipelineStageSplit split, PipelineModel model,
                                                         List<Dl4jPipelineStage> stages, IntPredicate mine) {
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>();
        for (int s = 0; s < stages.size(); s++) {
            if (!mine.test(s)) {
                continue;
            }
            MultiLayerNetwork stage = stages.get(s).network();
            Updater updater = stage.getUpdater(true);
            shards.add(new ShardedCheckpoints.Shard(s, KIND, split.dataType(), model.model().numParams(),
                    split.parameterOffset(s), split.parameterOffset(s) + split.parameterCount(s),
                    UpdaterStateCopy.fingerprint(updater), stage.getIterationCount(), stage.getEpochCount(),
                    updater == null ? null : updater.getStateViewArray()));
        }
        return shards;
    }

    private static ShardedCheckpoints.Agreement agreement(Group group) {
        return ShardedCheckpoints.Agreement.over(group, "symmem4j-pipeline-");
    }
}
