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
     * (the group's exchange runs on the caller's thread). A tensor-parallel network's ranks agree over their tp group
     * first, then over the data-parallel group: every tp rank of every replica learns of any rank's failure (a shard
     * torn under one tp rank's directory only) before any applies what it read, or goes on training with a checkpoint
     * the others failed to write; otherwise the ranks that passed would go on alone and wait for the others in the next
     * tensor-parallel collective until their timeout.
     */
    static ShardedCheckpoints.Agreement agreement(DataParallelSettings settings, ModelReplica model) {
        ShardedCheckpoints.Agreement dataParallel = ShardedCheckpoints.Agreement.over(settings.group(), "symmem4j-wrapper-");
        org.symmem4j.parallel.Group tp;
        try {
            org.symmem4j.dl4j.tensor.TensorParallel.Placement p = org.symmem4j.dl4j.tensor.TensorParallel.placement(
                    model.model());
            tp = p == null ? null : p.group();
        } catch (IllegalStateException notAttached) {
            tp = null; // refused at build(): a tensor-parallel network's trainer has its group
        }
        if (tp == null || tp.worldSize() < 2) {
            return dataParallel;
        }
        org.symmem4j.parallel.Group tpGroup = tp;
        return (tag, failure) -> {
            Throwable seen = failure;
            try {
                org.symmem4j.dl4j.train.RankAgreement.failTogether(tpGroup, "symmem4j-wrapper-tp-" + tag, failure,
                        (r, theirs) -> new TensorParallelPeerFailure(tag + " failed on tp rank " + r + " of this"
                                + " data-parallel replica: " + theirs + " (every rank left its model as it was; fix:"
                                + " correct what that rank's error names, then retry on every rank)"));
            } catch (TensorParallelPeerFailure peer) {
                seen = peer; // this rank's failure now: its data-parallel peers learn of it next
            }
            dataParallel.failTogether(tag, seen);
            if (failure == null && seen != null) {
                throw (TensorParallelPeerFailure) seen;
            }
        };
    }

    /** A tp peer's failure at an agreement point, thrown on the tp ranks that had none of their own. */
    private static final class TensorParallelPeerFailure extends IllegalStateException {
        TensorParallelPeerFailure(String message) {
            super(message);
        }
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
            try {
                CheckpointLayout.of(model.model()).begin(dir); // a tensor-parallel rank's marker, which the manifest lists
            } catch (IOException | RuntimeException e) {
                // the others learn of it at the save's first agreement point, rather than wait there until their timeout
                agreement(settings, model).failTogether("checkpoint-saved", e);
                throw e;
            }
        }
        CheckpointDirectory.Counters counters = new CheckpointDirectory.Counters(stepsDone, at.epochCount(),
                at.iterationCount(), batchesInEpoch, examplesInEpoch, settings.workers());
        if (stage3) {
            FullyShardedCheckpoints.save(dir, settings, workers.all(), counters, agreement(settings, model));
        } else if (settings.sharding() == null) {
            // every replica holds the same state: the model, written by rank 0, is the whole checkpoint
            ShardedCheckpoints.save(dir, 0, List.of(), leader, model.model(), counters, agreement(settings, model));
        } else {
            ShardedCheckpoints.save(dir, settings.workers(), workers.shards(), leader, model.model(), counters,
                    agreement(settings, model));
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
                    agreement(settings, model));
            model.copyStateFrom(ModelReplica.of(restored.model())); // the workers take it at the next fit
            return restored.counters();
        }
        if (settings.sharding() == ZeroStage.PARAMETERS) {
            CheckpointDirectory.Counters c = FullyShardedCheckpoints.restore(dir, workers.all(), model, WORDS,
                    agreement(settings, model));
            workers.pullModelFromReplicas();
            return c;
        }
        ShardedCheckpoints.Restored restored = ShardedCheckpoints.restore(dir, settings.workers(), workers.shards(),
                model.model(), WORDS, workers.checkpointReads(), agreement(settings, model));
        model.copyParamsAndCountersFrom(ModelReplica.of(restored.model()));
        for (ModelReplica replica : workers.replicas()) {
            replica.copyParamsAndCountersFrom(model);
        }
        workers.pullModelFromReplicas();
        return restored.counters();
    }
}
