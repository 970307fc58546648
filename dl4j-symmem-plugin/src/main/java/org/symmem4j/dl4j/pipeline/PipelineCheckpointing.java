package org.symmem4j.dl4j.pipeline;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Optional;
import java.util.function.Supplier;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.CheckpointLayout;
import org.symmem4j.dl4j.train.CheckpointSchedule;
import org.symmem4j.parallel.Group;

/**
 * The checkpoints of one {@link PipelineParallelTrainer}: which format its stages are written in and read from
 * ({@link PipelineCheckpoints}, or {@link PipelineTensorParallelCheckpoints} with a file per stage shard when the
 * stages are tensor-parallel), the periodic ones {@code fit} takes itself
 * ({@link PipelineParallelTrainerBuilder#checkpointEvery}: a {@code step-<n>} directory after the step, then the old
 * ones pruned) and the newest complete one under a root. The trainer keeps what a checkpoint means for training (the
 * step counter, the batches to skip, the checkpoint resumed from) and the group's exchange, which it lends to each
 * call ({@code exchange} is asked only in group mode, and only where the format exchanges).
 */
final class PipelineCheckpointing {

    /** The prefix that makes the keys of the checkpoints' collective agreements the pipeline trainer's. */
    private static final String TAG = "symmem4j-pipeline-";

    private final PipelineStageSplit split;
    private final PipelineModel model;
    private final StageReplicas replicas;
    /** Group mode: this process's rank of the user's group; null in thread mode. */
    private final Group group;
    /** Pipeline ranks, of one replica. */
    private final int ranks;
    private final int tensorParallel;
    /** The checkpoints the trainer takes itself inside fit, or null. */
    private final CheckpointSchedule schedule;

    PipelineCheckpointing(PipelineStageSplit split, PipelineModel model, StageReplicas replicas, Group group, int ranks,
                          int tensorParallel, CheckpointSchedule schedule) {
        this.split = split;
        this.model = model;
        this.replicas = replicas;
        this.group = group;
        this.ranks = ranks;
        this.tensorParallel = tensorParallel;
        this.schedule = schedule;
    }

    /** {@return whether a periodic checkpoint is due after step {@code step} (collective in group mode)} */
    boolean due(long step) {
        return schedule != null && schedule.due(step, group, TAG);
    }

    /**
     * A periodic checkpoint after step {@code step}: the model takes the stages' state ({@code modelTakesStages}),
     * then it is written as {@link #write} writes it, and the checkpoints beyond the schedule's {@code keep} pruned.
     *
     * @throws java.io.UncheckedIOException when it cannot be written (the checkpoints before it are kept)
     */
    void takePeriodic(long step, long batchesInEpoch, Runnable modelTakesStages, Supplier<GroupExchange> exchange) {
        schedule.take(step, CheckpointLayout.plain(), group, dir -> {
            modelTakesStages.run();
            write(dir, step, batchesInEpoch, exchange);
        });
    }

    /** Writes the model's and the stages' state into {@code dir}, with the step and counters given. */
    void write(Path dir, long step, long batchesInEpoch, Supplier<GroupExchange> exchange) throws IOException {
        CheckpointDirectory.Counters counters = new CheckpointDirectory.Counters(step, model.epochCount(),
                model.iterationCount(), batchesInEpoch, PipelineCheckpoints.files(replicas));
        if (tensorParallel > 1) { // a file per stage shard
            PipelineTensorParallelCheckpoints.save(dir, split, model, replicas, group, ranks, counters);
        } else {
            PipelineCheckpoints.save(dir, split, model, replicas, group, group == null ? null : exchange.get(),
                    ranks, counters);
        }
    }

    /**
     * Reads {@code dir} into the model and the stages.
     *
     * @return the checkpoint's counters, or null when it restored none
     */
    CheckpointDirectory.Counters restore(Path dir, Supplier<GroupExchange> exchange) throws IOException {
        return tensorParallel > 1 // stage shards: PipelineTensorParallelCheckpoints
                ? PipelineTensorParallelCheckpoints.restore(dir, split, model, replicas, group,
                        group == null ? null : exchange.get(), ranks)
                : PipelineCheckpoints.restore(dir, split, model, replicas, group,
                        group == null ? null : exchange.get(), ranks);
    }

    /** {@return the newest complete checkpoint under {@code root}, or empty (collective in group mode)} */
    Optional<CheckpointDirectory.Checkpoint> latest(Path root) throws IOException {
        return CheckpointDirectory.latestComplete(root, group, TAG);
    }
}
