package org.symmem4j.dl4j;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.function.IntUnaryOperator;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.RankAgreement;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;

/**
 * The in-place shrink of a ZeRO-sharded wrapper ({@link WorkerFailure#SHRINK} with any {@link ZeroStage}; stage 3 on
 * an initialised model; hybrid sharding shrinks without a checkpoint: {@link HybridShrink}), with workers that are threads of one JVM or processes of a group
 * (the survivors' group is formed by {@link Group#shrink()} and the restore runs collectively over it; with stage 3
 * each survivor's new worker allocates its sparse parameter and gradient buffers on that group, the old group's freed
 * by {@link DataParallelWorkers#stop()}). Each worker holds the only copy of its shard of the
 * updater state (and with stage 3 of its parameter blocks), so a dead worker's shard is treated as lost with it (as it
 * is when the worker is a process): the survivors cannot go on from their own state as plain data parallelism does. They go back, in place, to the newest state that is whole:
 *
 * <ul>
 *   <li>the newest complete periodic checkpoint taken in this {@code fit} ({@code checkpointEvery}), read back from its
 *       directory and re-sliced onto the survivors by the N → M restore ({@link WrapperCheckpoints#restore}, the one a
 *       resume on another worker count uses: docs/resharding.md; stage 3's parameter shards too), checksums checked;</li>
 *   <li>or, when none was taken yet in this fit, the state at the fit's start, which the model holds whole (the
 *       wrapper gathers every shard into it after each fit, and keeps a copy to put back if the fit fails).</li>
 * </ul>
 *
 * <p>The batches the wrapper dealt since that point are kept (references: the iterator's batches must stay valid after
 * {@code next()}, as DL4J's iterators' do), and go back in front of the failed step's and those read ahead, so the
 * survivors redo every step since the point, dealt as a wrapper of the survivors' size deals them: the result equals a
 * run resumed from that checkpoint on the survivors (bitwise). At most the steps between two checkpoints are kept and
 * redone. docs/shrink.md#zero-sharding has the user's side.
 */
final class ShardedShrink {

    private final ModelReplica model;
    private final SyncMetrics metrics;
    private final IntUnaryOperator ndThreadsFor;

    /** The state at the current fit's start (the wrapper's copy), and the position there. */
    private ModelState fitStart;
    private long fitStartStep;
    private long fitStartBatches;
    private long fitStartExamples;
    /** The newest complete periodic checkpoint of this fit, or null before the fit's first. */
    private Path checkpoint;
    private long checkpointStep;
    /** The plain batches dealt since the rollback point, in the iterator's order. */
    private final List<Object> since = new ArrayList<>();

    /**
     * @param model        the wrapper's model
     * @param metrics      the wrapper's metrics, for the survivors' workers
     * @param ndThreadsFor ND4J's threads per worker for a number of workers
     */
    ShardedShrink(ModelReplica model, SyncMetrics metrics, IntUnaryOperator ndThreadsFor) {
        this.model = model;
        this.metrics = metrics;
        this.ndThreadsFor = ndThreadsFor;
    }

    /**
     * A fit starts: its start (after the batches a resume skips) is the rollback point until its first checkpoint.
     *
     * @param state    the model's state at the fit's start (the copy a failed fit puts back)
     * @param step     the steps done before the fit
     * @param batches  the batches of the epoch already trained (those a resume skipped)
     * @param examples their examples
     */
    void fitStarted(ModelState state, long step, long batches, long examples) {
        fitStart = state;
        fitStartStep = step;
        fitStartBatches = batches;
        fitStartExamples = examples;
        checkpoint = null;
        since.clear();
    }

    /** A step trained (its update done, or skipped for a non-finite gradient): its batches are kept until the next checkpoint. */
    void trained(List<Object> work) {
        since.addAll(DataParallelSteps.plainBatches(work));
    }

    /** A periodic checkpoint of everything trained so far is complete in {@code dir}: the new rollback point. */
    void checkpointTaken(Path dir, long step) {
        checkpoint = dir;
        checkpointStep = step;
        since.clear();
    }

    /**
     * What the survivors go on with: their settings, workers, the step and epoch position they redo from, the report,
     * and in group mode the survivors' group (the wrapper owns it; null in thread mode).
     */
    record Rebuilt(DataParallelSettings settings, DataParallelWorkers workers, long step, long batchesInEpoch,
                   long examplesInEpoch, ShrinkReport report, Group formed) {
    }

    /**
     * Every worker idle after a step that workers failed: stops the old world, starts the survivors' workers on the
     * rollback point's state (re-sliced onto them), and puts the batches since that point, the failed step's and those
     * read ahead back in front of {@code redealt}. Thread mode: {@code lost.dead()} failed. Group mode: this rank's
     * worker stopped on a peer's death; the group names the dead and forms the survivors' group, over which the
     * survivors check that they go back to the same checkpoint and restore it collectively.
     *
     * @throws DataParallelTrainingException when fewer than {@code minWorkers} survive, the group cannot shrink, or the
     *                                       checkpoint cannot be read back (the wrapper then puts the model back as it
     *                                       was before the fit)
     * @throws ReplicaLostException on a rank of a {@code dp x tp} mesh ({@code mesh}, null without one) whose replica
     *                              was lost with a dead rank: it leaves
     */
    Rebuilt rollBack(DataParallelSteps.LostWorkers lost, List<Object> failed, List<Object> readAhead,
                     Deque<Object> redealt, DataParallelSettings settings, DataParallelWorkers workers, MeshShrink mesh) {
        if (fitStart == null) {
            throw Invariants.violated("sharded shrink at step " + lost.step() + " before the fit's start was recorded",
                    lost.failure());
        }
        Throwable cause = lost.failure() instanceof DataParallelTrainingException t ? t.getCause() : lost.failure();
        int before = settings.workers();
        List<Integer> dead;
        DataParallelSettings after;
        Group formed = null;
        long failedStep = lost.step(); // threads: one wrapper hands every worker the same step
        AutoCloseable owned = null; // what a failure here closes: the survivors' group, or what the mesh's shrink formed
        if (settings.group() == null) {
            dead = lost.dead();
            int survivors = before - dead.size();
            requireMinWorkers(lost, dead, survivors, before, cause, settings.minWorkers());
            workers.stop(); // every thread joined; the old world, its symmetric memory and the shards closed
            after = settings.withWorkers(survivors, ndThreadsFor.applyAsInt(survivors));
            Nd4jThreadLimit.set(after.ompThreadsPerWorker()); // until the fit's limit is restored at its end
        } else {
            int iteration = workers.all().getFirst().replica().iterationCount(); // one more when its update ran
            workers.stop(); // this rank's memories and shards of the old group freed (its worker ended with the step)
            Group agreeing; // a mesh's survivors agree over their whole world: every tp rank goes back alike
            if (mesh != null) { // the dead replicas leave whole (ReplicaLostException on their live ranks)
                MeshShrink.Formed f = mesh.shrink(model, lost, cause, settings.minWorkers());
                formed = f.dataParallelGroup();
                agreeing = f.world();
                dead = f.deadReplicas();
                owned = mesh;
            } else {
                Group.Survivors s = shrinkGroup(settings.group(), lost, cause);
                formed = s.group();
                agreeing = formed;
                dead = s.dead();
                owned = formed;
            }
            try {
                requireMinWorkers(lost, dead, formed.worldSize(), before, cause, settings.minWorkers());
                // the survivors may have failed different steps (a mesh's dp groups; a survivor the abort reached
                // still finishing the step before: SurvivorSteps): the tag names none (the survivors' world is new)
                failedStep = requireSameRollbackPoint(agreeing, "of-" + before, lost, iteration);
            } catch (RuntimeException e) {
                RankRuntime.closeQuietly(owned);
                throw e;
            }
            after = settings.withGroup(formed);
        }
        int survivors = after.workers();
        DataParallelWorkers rebuilt = new DataParallelWorkers(model, after, metrics);
        long step;
        long batches;
        long examples;
        try {
            if (checkpoint == null) {
                fitStart.restore(model); // whole: the new workers cut their shards from it
                rebuilt.ensureStarted();
                step = fitStartStep;
                batches = fitStartBatches;
                examples = fitStartExamples;
            } else {
                rebuilt.ensureStarted();
                CheckpointDirectory.Counters c = WrapperCheckpoints.restore(checkpoint, after, rebuilt, model);
                if (c == null || c.step() != checkpointStep) {
                    throw Invariants.violated("sharded shrink: the checkpoint " + checkpoint + " taken after step "
                            + checkpointStep + " reads back as " + c, lost.failure());
                }
                step = c.step();
                batches = c.batchesInEpoch();
                examples = c.examplesInEpoch();
            }
        } catch (IOException | RuntimeException e) {
            rebuilt.stop();
            RankRuntime.closeQuietly(owned); // null in thread mode
            DataParallelTrainingException t = new DataParallelTrainingException("data-parallel fit failed: worker(s) "
                    + dead + " failed at step " + lost.step() + " (" + cause + ") and the survivors could not go"
                    + " back to " + (checkpoint == null ? "the fit's start" : "the checkpoint " + checkpoint) + ": " + e
                    + "; the model is as it was before this fit (fix: restore a complete checkpoint with"
                    + " restoreLatest(root), or restart the run with resumeFrom(root))",
                    dead.isEmpty() ? -1 : dead.getFirst(), lost.step(), e);
            t.addSuppressed(lost.failure());
            throw t;
        }
        List<Object> pending = new ArrayList<>(since);
        pending.addAll(DataParallelSteps.plainBatches(failed));
        pending.addAll(DataParallelSteps.plainBatches(readAhead));
        for (int i = pending.size() - 1; i >= 0; i--) {
            redealt.addFirst(pending.get(i));
        }
        if (step > failedStep) {
            throw Invariants.violated("sharded shrink at step " + lost.step() + " back to the later step " + step,
                    lost.failure());
        }
        since.clear(); // the redo deals them again, and they are kept again as it trains them
        // group mode: the survivors' agreed failed step (SurvivorSteps), the same on every one
        ShrinkReport report = new ShrinkReport(failedStep, dead, before, survivors, true, String.valueOf(cause),
                lost.failedNanos(), System.nanoTime(), step, checkpoint);
        return new Rebuilt(after, rebuilt, step, batches, examples, report, mesh != null ? null : formed);
    }

    /**
     * Group mode: the group names the dead and forms the survivors' group ({@link Group#shrink()}); every shrink, plain
     * and sharded.
     *
     * @throws DataParallelTrainingException when the group cannot shrink (a death during the rebuild, a timeout)
     */
    static Group.Survivors shrinkGroup(Group old, DataParallelSteps.LostWorkers lost, Throwable cause) {
        return shrinkGroup(old, dead -> new int[] {dead}, lost, cause);
    }

    /**
     * As {@link #shrinkGroup(Group, DataParallelSteps.LostWorkers, Throwable)}, each dead rank taking out the ranks
     * {@code lostWith} names ({@link Group#shrink(java.util.function.IntFunction)}: hybrid sharding's shard group).
     */
    static Group.Survivors shrinkGroup(Group old, java.util.function.IntFunction<int[]> lostWith,
                                       DataParallelSteps.LostWorkers lost, Throwable cause) {
        try {
            return old.shrink(lostWith);
        } catch (RuntimeException e) {
            DataParallelTrainingException t = new DataParallelTrainingException("data-parallel fit failed: step "
                    + lost.step() + " failed (" + cause + ") and the group could not shrink in place: " + e.getMessage()
                    + "; the model is as it was before this fit (fix: restart the run, building with"
                    + " checkpointEvery(k, dir).resumeFrom(dir) under symmem4j-run --max-restarts N so it resumes"
                    + " from the newest complete checkpoint)", old.rank(), lost.step(), e);
            t.addSuppressed(lost.failure());
            throw t;
        }
    }

    /**
     * Group mode: every survivor must go back to the same point (the same checkpoint, or each the fit's start), since
     * the restore is collective. They took the same checkpoints (a periodic checkpoint completes on every rank or fails
     * the fit), so a difference is a bug. In the same exchange the survivors agree on the failed step they report.
     *
     * @param iteration this rank's replica's iteration count when its worker stopped
     * @return the agreed failed step ({@link SurvivorSteps})
     */
    private long requireSameRollbackPoint(Group survivors, String tag, DataParallelSteps.LostWorkers lost,
                                          int iteration) {
        String mine = checkpoint == null ? "fit-start" : Long.toString(checkpointStep);
        List<String> all = RankAgreement.allGather(survivors, "symmem4j-wrapper-zero-shrink-" + tag,
                mine + "/" + SurvivorSteps.position(lost, iteration));
        List<String> points = all.stream().map(p -> p.substring(0, p.indexOf('/'))).toList();
        if (points.stream().anyMatch(p -> !p.equals(mine))) {
            throw Invariants.violated("sharded shrink at step " + lost.step() + ": the survivors' rollback points differ"
                    + " (newest checkpoint's step, by new rank: " + points + ")", lost.failure());
        }
        return SurvivorSteps.agree(all.stream().map(p -> p.substring(p.indexOf('/') + 1)).toList(), lost).failedStep();
    }

    /**
     * {@code build()}'s refusals of SHRINK with {@code sharding}: what the sharded shrink cannot do is refused before
     * anything starts, each with the fix. Hybrid sharding's are {@link HybridShrink#checkBuild}'s (it shrinks without a checkpoint).
     *
     * @param sharding    the ZeRO stage (not null)
     * @param checkpoints whether periodic checkpoints are configured ({@code checkpointEvery})
     * @param hollow      whether the model was started from a configuration (stage 3: no process holds it whole)
     */
    static void checkBuild(ZeroStage sharding, boolean checkpoints, boolean hollow) {
        String restart = "recover by RESTART: onWorkerFailure(FAIL) with checkpointEvery(k, dir).resumeFrom(dir) under"
                + " symmem4j-run --max-restarts N, which resumes from the newest complete checkpoint";
        if (sharding == ZeroStage.PARAMETERS && hollow) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with sharding=PARAMETERS on a model started from"
                    + " its configuration (builder(conf)): before a fit's first checkpoint the survivors go back to the"
                    + " fit's start, which only the model holds whole, and this one holds no parameters; expected"
                    + " builder(model) with an initialised model (fix: build on new MultiLayerNetwork(conf).init(), use"
                    + " sharding(GRADIENTS), or " + restart + ")");
        }
        if (!checkpoints) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with sharding=" + sharding + " and no periodic"
                    + " checkpoints: each worker holds the only copy of its shard of the updater state, so the survivors"
                    + " go back to the newest complete checkpoint, re-sliced onto them, and redo the steps since it;"
                    + " expected checkpointEvery(k, dir) or checkpointEvery(interval, dir) (fix: configure one, which"
                    + " bounds the steps redone to k; or drop sharding(...) to shrink plain data parallelism, which goes"
                    + " on from the survivors' own state; or " + restart + ")");
        }
    }

    /**
     * Fails the fit when a shrink would leave fewer than {@code minWorkers} (every shrink: plain and sharded, threads
     * and processes).
     */
    static void requireMinWorkers(DataParallelSteps.LostWorkers lost, List<Integer> dead, int survivors, int before,
                                  Throwable cause, int minWorkers) {
        if (survivors >= minWorkers) {
            return;
        }
        DataParallelTrainingException e = new DataParallelTrainingException("data-parallel fit failed: worker(s) " + dead
                + " failed at step " + lost.step() + " (" + cause + "), leaving " + survivors + " of " + before
                + " workers; expected at least minWorkers=" + minWorkers + " to shrink in place"
                + " (onWorkerFailure=SHRINK); the model is as it was before this fit (fix: find why the workers fail,"
                + " lower minWorkers, or restart from a checkpoint)", dead.isEmpty() ? -1 : dead.getFirst(), lost.step(),
                cause);
        e.addSuppressed(lost.failure());
        throw e;
    }
}
