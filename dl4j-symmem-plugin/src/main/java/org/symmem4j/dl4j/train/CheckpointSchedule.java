package org.symmem4j.dl4j.train;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Group;

/**
 * When a trainer takes its own checkpoints ({@link TrainerBuilder#checkpointEvery(int, Path)},
 * {@link TrainerBuilder#checkpointEvery(Duration, Path)}): every {@code steps} steps, or at the first step boundary
 * {@code interval} after the last checkpoint (or the start), under {@code root}, keeping the newest {@code keep}
 * complete ones. In group mode every rank decides at the same step: by steps every rank counts the same; by time rank
 * 0's clock decides, told to every rank over the group's all-gather at each step boundary. At every step boundary the
 * leader (rank 0, or the one process in thread mode) also records the steps done under the root
 * ({@link CheckpointDirectory#recordProgress}), so that a restarted run says how many steps it redoes.
 */
public final class CheckpointSchedule {

    private final int everySteps;
    private final Duration interval;
    private final Path root;
    private final int keep;
    private long lastNanos = System.nanoTime();
    private long exchanges;
    private boolean progressWarned;
    private static final Logger LOG = LoggerFactory.getLogger(CheckpointSchedule.class);

    CheckpointSchedule(int everySteps, Duration interval, Path root, int keep) {
        this.everySteps = everySteps;
        this.interval = interval;
        this.root = root;
        this.keep = keep;
    }

    /** {@return the run's checkpoint root: one {@code step-<n>} directory per checkpoint} */
    public Path root() {
        return root;
    }

    /** {@return how many complete checkpoints are kept} */
    public int keep() {
        return keep;
    }

    /**
     * {@return when checkpoints are taken and how many are kept, without the root (a path each rank may mount
     * elsewhere): what every rank of a trainer in group mode must have alike, or their checkpoints' collectives part}
     */
    public String describe() {
        return (everySteps > 0 ? "every " + everySteps + " steps" : "") + (everySteps > 0 && interval != null ? " or " : "")
                + (interval != null ? "every " + interval : "") + ", keep " + keep;
    }

    /**
     * Whether a checkpoint is due after a step; collective in group mode when by time (every rank calls it at every
     * step boundary). The leader also records the steps done ({@link CheckpointDirectory#recordProgress}).
     *
     * @param stepsDone the trainer's steps done, the one just finished included
     * @param group     the trainer's group, or null in thread mode
     * @param tagPrefix makes the exchange's key unique to the trainer
     * @return true when the trainer takes one now
     */
    public boolean due(long stepsDone, Group group, String tagPrefix) {
        return due(stepsDone, group, null, tagPrefix);
    }

    /**
     * {@link #due(long, Group, String)} for a tensor-parallel rank: by time, the verdict of the data-parallel group's
     * rank 0 is then agreed over {@code tensorParallel} too (every rank takes tp rank 0's), so every tp rank of every
     * replica takes its checkpoint at the same step, by one clock, rather than each data-parallel group by its own.
     *
     * @param stepsDone      the trainer's steps done, the one just finished included
     * @param group          the trainer's (data-parallel) group, or null in thread mode
     * @param tensorParallel the tensor-parallel group, or null when not tensor-parallel
     * @param tagPrefix      makes the exchange's key unique to the trainer
     * @return true when the trainer takes one now
     */
    public boolean due(long stepsDone, Group group, Group tensorParallel, String tagPrefix) {
        if (group == null || group.rank() == 0) {
            try {
                CheckpointDirectory.recordProgress(root, stepsDone);
            } catch (IOException e) {
                if (!progressWarned) {
                    progressWarned = true;
                    LOG.warn("symmem4j checkpoint: cannot record progress under {} ({}); training goes on, a restart"
                            + " will not say how many steps it redoes", root, e.toString());
                }
            }
        }
        boolean due = everySteps > 0 && stepsDone % everySteps == 0;
        if (interval != null) {
            boolean late = System.nanoTime() - lastNanos >= interval.toNanos();
            if (group != null) {
                late = RankAgreement.allGather(group, tagPrefix + "checkpoint-due-" + exchanges, late ? "1" : "0")
                        .getFirst().equals("1");
            }
            if (tensorParallel != null && tensorParallel.worldSize() > 1) {
                late = RankAgreement.allGather(tensorParallel, tagPrefix + "tp-checkpoint-due-" + exchanges,
                        late ? "1" : "0").getFirst().equals("1");
            }
            exchanges++;
            due |= late;
        }
        return due;
    }

    /** Writes one checkpoint, in a trainer's format, into its directory (collective in group mode where it is). */
    @FunctionalInterface
    public interface Writer {
        /**
         * Writes the checkpoint.
         *
         * @param dir the checkpoint's directory
         * @throws IOException when a file cannot be written
         */
        void write(Path dir) throws IOException;
    }

    /**
     * Takes the periodic checkpoint after step {@code step}, once {@link #due} said so: {@code writer} writes it into
     * {@code layout.stepDir(root, step)}, then the leader (rank 0 of {@code group}, or the one process in thread mode)
     * prunes the checkpoints beyond {@code keep} ({@link CheckpointLayout#prune}), and the interval starts again
     * ({@link #taken}).
     *
     * @param step   the trainer's steps done, the one just finished included
     * @param layout where this rank's checkpoints go under the root ({@link CheckpointLayout#plain()} but for a
     *               tensor-parallel rank)
     * @param group  the trainer's group, or null in thread mode
     * @param writer writes the checkpoint in the trainer's format
     * @throws UncheckedIOException when it cannot be written (the checkpoints before it are kept): it fails the fit
     */
    public void take(long step, CheckpointLayout layout, Group group, Writer writer) {
        Path dir = layout.stepDir(root, step);
        try {
            writer.write(dir);
            if (group == null || group.rank() == 0) {
                layout.prune(root, keep);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("periodic checkpoint step=" + step + " dir=" + dir + " failed: "
                    + e.getMessage() + " (the checkpoints before it are kept; fix: make the root writable with"
                    + " room for a checkpoint,"
                    + " then fit again)", e);
        }
        taken();
    }

    /** The checkpoint was taken: the interval starts again. */
    public void taken() {
        lastNanos = System.nanoTime();
    }
}
