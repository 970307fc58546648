package org.symmem4j.dl4j.train;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Optional;
import org.symmem4j.parallel.Group;

/**
 * Where a trainer's next {@code fit} starts after a restore: the checkpoint the last restore read, and the batches
 * (and, when the checkpoint recorded them, their examples) of its epoch that it had trained, which the next fit reads
 * and does not train ({@link FitAgreement#skip}). One per trainer, for {@code SymmemParallelWrapper} and
 * {@code PipelineParallelTrainer} alike; not thread-safe: the trainer's own lock guards it (their restore and fit
 * methods are synchronized).
 */
public final class ResumePosition {

    /** Batches the next fit reads and does not train: those of the epoch a restored checkpoint had trained. */
    private long batchesToSkip;
    /** The examples of those batches, as the checkpoint recorded them; -1 when it did not. */
    private long examplesToSkip = -1;
    /** The checkpoint the last restore read, or null. */
    private CheckpointDirectory.Checkpoint resumedFrom;

    /**
     * Records a restore: the next fit skips the batches of the epoch {@code counters} say were trained.
     *
     * @param dir      the checkpoint directory read
     * @param counters its counters
     */
    public void restored(Path dir, CheckpointDirectory.Counters counters) {
        batchesToSkip = counters.batchesInEpoch();
        examplesToSkip = counters.examplesInEpoch();
        resumedFrom = new CheckpointDirectory.Checkpoint(dir, counters);
    }

    /**
     * The start of the next fit, skipping this position.
     *
     * @param trainer        the trainer's (data-parallel) group, or null in thread mode
     * @param layout         the model's checkpoint layout
     * @param checksExamples whether the fit checks the skipped batches' examples against the checkpoint's (the
     *                       trainers whose checkpoints record them)
     * @return the agreement, whose {@link FitAgreement#skip} reads and drops the batches to skip
     */
    public FitAgreement fitStart(Group trainer, CheckpointLayout layout, boolean checksExamples) {
        return new FitAgreement(trainer, layout, batchesToSkip, checksExamples ? examplesToSkip : -1,
                resumedFrom == null ? null : resumedFrom.dir());
    }

    /** The batches to skip were read: the fit's iterator stands after them, and the next fit skips none. */
    public void skipped() {
        batchesToSkip = 0;
        examplesToSkip = -1;
    }

    /** {@return the checkpoint the last restore read, or null when none was restored (a fresh start)} */
    public CheckpointDirectory.Checkpoint resumedFrom() {
        return resumedFrom;
    }

    /** A trainer's restore of one checkpoint directory ({@code restoreCheckpoint}). */
    @FunctionalInterface
    public interface Restore {

        /**
         * Restores the checkpoint in {@code dir}.
         *
         * @param dir the checkpoint directory
         * @throws IOException when it cannot be read
         */
        void restore(Path dir) throws IOException;
    }

    /**
     * A trainer's {@code restoreLatest}: restores the newest complete checkpoint found, when there is one.
     *
     * @param latest  the newest complete checkpoint under the run's root, or empty
     * @param restore the trainer's {@code restoreCheckpoint}
     * @return {@code latest}
     * @throws IOException when the checkpoint cannot be read
     */
    public static Optional<CheckpointDirectory.Checkpoint> restoreLatest(
            Optional<CheckpointDirectory.Checkpoint> latest, Restore restore) throws IOException {
        if (latest.isPresent()) {
            restore.restore(latest.get().dir());
        }
        return latest;
    }
}
