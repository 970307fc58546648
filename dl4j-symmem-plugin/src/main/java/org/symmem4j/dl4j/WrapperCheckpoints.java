package org.symmem4j.dl4j;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.CheckpointLayout;

/**
 * What {@link SymmemParallelWrapper}'s checkpoints write and read, by stage: plain data parallelism's model-only
 * checkpoint ({@code model.zip}, every replica's equal state), stages 1 and 2's updater-state shards with the
 * consolidated model, and stage 3's parameter and updater-state shards without one ({@link FullyShardedCheckpoints}),
 * hybrid sharding's too (its first replica's shards, a stage-3 checkpoint of the shard group's size).
 * The wrapper keeps the schedule, the step count and the resume position; this class the files.
 */
final class WrapperCheckpoints {

    /** The refusals of a restore call the wrapper a wrapper and its ranks workers. */
    static final ShardedCheckpoints.Words WORDS = new ShardedCheckpoints.Words("wrapper", "worker");

    private WrapperCheckpoints() {
    }

    /**
     * Group mode: every rank learns whether every rank got here without a failure; a rank that did not makes the
     * others throw naming it. In thread mode, where one process did it all, nothing to agree on. Workers must be idle
     * (the group's exchange runs on the caller's thread).
     */
    static ShardedCheckpoints.Agreement agreement(DataParallelSettings settings) {
        return ShardedCheckpoints.Agreement.over(settings.group(), "symmem4j-wrapper-");
    }

    /** Writes what the next step would train from; workers started and idle. Collective in group mode. */
    static void write(Path dir, long stepsDone, long batchesInEpoch, long examplesInEpoch, DataParallelSettings settings,
                      DataParallelWorkers workers, ModelReplica model) throws IOException {
        boolean stage3 = settings.sharding() == ZeroStage.PARAMETERS;
        if (!stage3) { // stage 3: each rank writes its own blocks, nobody gathers the model
            workers.pullModelFromReplicas();
        }
        ModelReplica at = workers.replicas().getFirst(); // the model's counters (every replica has them)
        boolean leader = settings.group() == null || settings.group().rank() == 0;
        if (leader) {
            CheckpointLayout.of(model.model()).begin(dir); // a tensor-parallel rank's marker, which the manifest lists
        }
        CheckpointDirectory.Counters counters = new CheckpointDirectory.Counters(stepsDone, at.epochCount(),
                at.iterationCount(), batchesInEpoch, examplesInEpoch, settings.workers());
        if (stage3) {
            FullyShardedCheckpoints.save(dir, settings, workers.all(), counters, agreement(settings));
        } else if (settings.sharding() == null) {
            // every replica holds the same state: the model, written by rank 0, is the whole checkpoint
            ShardedCheckpoints.save(dir, 0, List.of(), leader, model.model(), counters, agreement(settings));
        } else {
            ShardedCheckpoints.save(dir, settings.workers(), workers.shards(), leader, model.model(), counters,
                    agreement(settings));
        }
    }

    /**
     * Restores {@code dir} into the model and the workers' replicas and shards; workers started and idle. Collective
     * in group mode.
     *
     * @return the checkpoint's counters, or null for one without a manifest
     */
    static CheckpointDirectory.Counters restore(Path dir, DataParallelSettings settings, DataParallelWorkers workers,
                                                ModelReplica model) throws IOException {
        if (settings.sharding() == null) {
            ShardedCheckpoints.Restored restored = ShardedCheckpoints.restoreModel(dir, model.model(), WORDS,
                    agreement(settings));
            model.copyStateFrom(ModelReplica.of(restored.model())); // the workers take it at the next fit
            return restored.counters();
        }
        if (settings.sharding() == ZeroStage.PARAMETERS) {
            CheckpointDirectory.Counters c = FullyShardedCheckpoints.restore(dir, workers.all(), model, WORDS,
                    agreement(settings));
            workers.pullModelFromReplicas();
            return c;
        }
        ShardedCheckpoints.Restored restored = ShardedCheckpoints.restore(dir, settings.workers(), workers.shards(),
                model.model(), WORDS, workers.checkpointReads(), agreement(settings));
        model.copyParamsAndCountersFrom(ModelReplica.of(restored.model()));
        for (ModelReplica replica : workers.replicas()) {
            replica.copyParamsAndCountersFrom(model);
        }
        workers.pullModelFromReplicas();
        return restored.counters();
    }
}
