package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.TreeSet;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.parallel.Group;

/**
 * The in-place shrink of hybrid sharding ({@link WorkerFailure#SHRINK} with {@code sharding(PARAMETERS)} and
 * {@code shardGroupSize(S)}, HSDP: {@link HybridSharding}), as worker threads of one JVM ({@link #takeSurvivingReplica})
 * and in group mode, one worker per rank ({@link #inGroup}). A shard group (a row of the
 * {@code replicate × shard} mesh: S neighbouring workers) holds one whole copy of the model, sharded S ways; the D rows
 * are replicas of each other, bitwise. A dead worker takes its row out: the row's other workers cannot compute their
 * layers without its blocks, and leave with it. Every other row still holds a whole copy, so no checkpoint is needed:
 * the model takes the state of one surviving row (its S workers' parameter blocks and updater-state shards, bitwise
 * what every row holds), and the survivors' D − k rows start from it as HSDP of (D − k) × S workers, redoing the failed
 * step (or going on after it when every survivor completed it), as plain data parallelism's shrink does
 * (docs/shrink.md#hybrid-sharding-hsdp).
 *
 * <p>Why not the checkpoint path of the other ZeRO stages ({@link ShardedShrink}): it works for HSDP too (an HSDP
 * checkpoint restores onto any N'/S'), but redoes up to k steps and requires {@code checkpointEvery}; the survivors'
 * own rows hold the newest state whole, so taking it costs one copy of a row's blocks and redoes at most the failed
 * step.
 *
 * <p>The last step every survivor completed: in thread mode a row's workers are stopped by the abort in the same step;
 * a worker whose step got past its update (the dead one failed after its last collective) holds the step's end, the
 * others its start. The survivors go on from the smallest iteration count among them, taken from the first surviving
 * row: a worker of it that holds that count gives its blocks, one whose update ran gives its copy of the step's start
 * ({@link StepStart}, which every worker keeps under SHRINK with HSDP: a row split between the step's start and end
 * holds no whole copy of either, and no other row need hold the start whole). In
 * group mode each survivor holds only its own blocks, and writes them itself: the survivors agree on the smallest
 * iteration count and the failed step ({@link SurvivorSteps}, as plain data parallelism's shrink does), and a survivor
 * that went past its update while another did not goes back to its own copy of the step's start ({@link StepStart}).
 */
final class HybridShrink {

    private static final String RESTART = "recover by RESTART: onWorkerFailure(FAIL) with checkpointEvery(k, dir)"
            + ".resumeFrom(dir) under symmem4j-run --max-restarts N, which resumes from the newest complete checkpoint";

    private HybridShrink() {
    }

    /** What the survivors go on with: their worker count and the iteration count the model now holds. */
    record Survivors(int workers, int iteration) {
    }

    /**
     * Every worker idle after a step that {@code lost.dead()} failed: the model takes the state of a surviving row.
     * Nothing is stopped here (the caller stops the old workers once the model holds the state).
     *
     * @param model    the wrapper's model (not started from a configuration: it holds the whole state)
     * @param all      every worker of the old world, in rank order
     * @param settings the old settings (thread mode, {@code shardGroupSize} S &gt; 0)
     * @param lost     the failed step, with every worker's copy of its start ({@link StepStart})
     * @throws DataParallelTrainingException when no whole copy survives (every row lost a worker: with one row left,
     *                                       the only copy), or fewer than {@code minWorkers} would survive
     */
    static Survivors takeSurvivingReplica(ModelReplica model, List<DataParallelWorker> all, DataParallelSettings settings,
                                          DataParallelSteps.LostWorkers lost, Throwable cause) {
        int s = settings.shardGroupSize();
        int rows = all.size() / s;
        TreeSet<Integer> lostRows = new TreeSet<>();
        for (int d : lost.dead()) {
            lostRows.add(d / s);
        }
        if (lostRows.size() == rows) {
            throw noWholeCopy(lost, lost.dead(), lostRows, rows, s, all.size(), cause);
        }
        int survivors = all.size() - lostRows.size() * s;
        ShardedShrink.requireMinWorkers(lost, lost.dead(), survivors, all.size(), cause, settings.minWorkers());
        int iteration = Integer.MAX_VALUE;
        for (int w = 0; w < all.size(); w++) {
            if (!lostRows.contains(w / s)) {
                iteration = Math.min(iteration, all.get(w).replica().iterationCount());
            }
        }
        // the first surviving row: its workers at that count hold it; one whose update ran (one step ahead: a row split
        // between the step's start and end, as where the abort reached it decides) goes back to its copy of the start
        int from = 0;
        while (lostRows.contains(from)) {
            from++;
        }
        // the row's workers are idle (their tasks ended with the failed step, whose result's completion ordered their
        // writes before this thread's reads): their blocks and shards cover every element once, as every row's do
        INDArray full = model.updaterState();
        for (int w = from * s; w < (from + 1) * s; w++) {
            DataParallelWorker worker = all.get(w);
            if (worker.replica().iterationCount() != iteration) {
                lost.stepStarts().get(w).restoreShardInto(model, worker); // its counters too: the step's start
                continue;
            }
            MemorySegment kept = worker.ownBlocksAtFailure(); // a failed step's thread freed its memory at its end
            if (kept != null) {
                worker.fullySharded().unpackOwnBlocksTo(kept, model.params());
            } else {
                worker.fullySharded().copyOwnBlocksTo(model.params()); // its step completed: open until stop()
            }
            if (full != null) {
                worker.sharded().exportState(full);
            }
            model.setIterationCount(iteration);
            model.setEpochCount(worker.replica().epochCount());
        }
        return new Survivors(survivors, iteration);
    }

    /**
     * What a group-mode survivor goes on with: the survivors' group (the wrapper owns it), the dead, the iteration
     * count every survivor goes on from and the failed step they agreed on, which all of them redo ({@link SurvivorSteps}).
     */
    record Formed(Group group, List<Integer> dead, int iteration, long failedStep) {
    }

    /**
     * Group mode (one worker per rank: processes under {@code symmem4j-run --on-failure shrink}, or thread ranks of
     * {@code InJvmWorld.createShrinking}): this rank's worker stopped (its memories of the old group freed) after a
     * step that failed on a peer's death. The group forms the survivors' group without every dead rank's shard group
     * ({@link Group#shrink(java.util.function.IntFunction)}: a dead rank takes its row out); over it the survivors agree
     * on the last step all of them completed and the failed step ({@link SurvivorSteps}, as plain data parallelism's
     * shrink): a survivor whose update ran while another's did not (the step's sums over the groups completed on some
     * ranks and not on others) goes back to the step's start, which it kept ({@link StepStart}). Each writes that
     * state's own blocks and updater-state shard into the model: a
     * survivor's new rank has the same place in its row ({@code r % S}: whole rows left), so its new worker cuts
     * exactly those elements from the model. The model's other elements are stale until the fit's end gathers them.
     *
     * @param mine this rank's worker, stopped
     * @throws ReplicaLostException on a live rank of a lost row: it leaves (the model as before the fit)
     * @throws DataParallelTrainingException when every row lost a worker, fewer than {@code minWorkers} survive, or
     *                                       the group cannot shrink
     */
    static Formed inGroup(ModelReplica model, DataParallelWorker mine, DataParallelSettings settings,
                          DataParallelSteps.LostWorkers lost, Throwable cause) {
        Group old = settings.group();
        int s = settings.shardGroupSize();
        int rows = old.worldSize() / s;
        // a dead rank takes its whole shard group (row) out with it
        Group.Survivors survivors = ShardedShrink.shrinkGroup(old,
                dead -> java.util.stream.IntStream.range(dead / s * s, dead / s * s + s).toArray(), lost, cause);
        List<Integer> dead = survivors.dead();
        TreeSet<Integer> lostRows = new TreeSet<>();
        for (int d : dead) {
            lostRows.add(d / s);
        }
        if (lostRows.size() == rows) {
            throw noWholeCopy(lost, dead, lostRows, rows, s, old.worldSize(), cause);
        }
        if (survivors.left()) {
            ReplicaLostException e = new ReplicaLostException("data-parallel fit: rank " + old.rank() + " (shard group "
                    + old.rank() / s + " of " + rows + ", hybrid sharding with shardGroupSize=" + s + ") leaves at step "
                    + lost.step() + ": rank(s) " + dead + " of its shard group died, and its blocks cannot be computed"
                    + " without theirs; the other " + (rows - lostRows.size()) + " shard group(s) go on from their own"
                    + " copy; the model is as it was before this fit (fix: nothing to fix here; end this process, with"
                    + " status 0, so the launcher's job ends when the survivors finish)", old.rank() / s, lost.step(),
                    dead, cause);
            e.addSuppressed(lost.failure());
            throw e;
        }
        Group group = survivors.group();
        try {
            ShardedShrink.requireMinWorkers(lost, dead, group.worldSize(), old.worldSize(), cause, settings.minWorkers());
            int count = mine.replica().iterationCount();
            SurvivorSteps.Agreed steps = SurvivorSteps.agreeOver(group, lost, count);
            SurvivorSteps.requireStartOrEnd(lost, steps.iteration());
            if (count != steps.iteration()) {
                // this rank's update ran and another survivor's did not (the abort cut its shard's sum over the
                // groups short): back to the step's start, which this rank kept (StepStart says why not a peer's)
                lost.stepStart().restoreShardInto(model, mine);
                return new Formed(group, dead, steps.iteration(), steps.failedStep());
            }
            MemorySegment kept = mine.ownBlocksAtFailure();
            if (kept == null) {
                throw new DataParallelTrainingException("data-parallel fit failed: rank(s) " + dead + " died at step "
                        + lost.step() + " (" + cause + ") and this survivor kept no copy of its own blocks (see the"
                        + " suppressed failure); the model is as it was before this fit (fix: " + RESTART + ")",
                        old.rank(), lost.step(), cause);
            }
            mine.fullySharded().unpackOwnBlocksTo(kept, model.params());
            INDArray full = model.updaterState();
            if (full != null) {
                mine.sharded().exportState(full); // this rank's range: the new worker's, at the same place r % S
            }
            model.setIterationCount(count);
            model.setEpochCount(mine.replica().epochCount());
            return new Formed(group, dead, count, steps.failedStep());
        } catch (RuntimeException e) {
            RankRuntime.closeQuietly(group);
            if (e instanceof DataParallelTrainingException t && t != lost.failure()) {
                t.addSuppressed(lost.failure());
            }
            throw e;
        }
    }

    private static DataParallelTrainingException noWholeCopy(DataParallelSteps.LostWorkers lost, List<Integer> dead,
                                                             TreeSet<Integer> lostRows, int rows, int s, int workers,
                                                             Throwable cause) {
        DataParallelTrainingException e = new DataParallelTrainingException("data-parallel fit failed: worker(s) "
                + dead + " failed at step " + lost.step() + " (" + cause + ") in shard group(s) " + lostRows
                + " of " + rows + " (shardGroupSize=" + s + ", workers=" + workers + "): hybrid sharding shrinks"
                + " by dropping the dead worker's shard group and going on from another group's whole copy, and "
                + (rows == 1 ? "only one replica group was left" : "every replica group lost a worker")
                + ", so no whole copy of the model survives; expected at least one shard group without a dead worker;"
                + " the model is as it was before this fit (fix: " + RESTART + "; or keep more replica groups: a"
                + " smaller shardGroupSize, or a higher minWorkers so the fit stops before one group is left)",
                dead.getFirst(), lost.step(), cause);
        e.addSuppressed(lost.failure());
        return e;
    }

    /**
     * {@code build()}'s refusals of SHRINK with hybrid sharding, each with the fix.
     *
     * @param workers        the worker count (N)
     * @param shardGroupSize S (&gt; 0)
     * @param onMesh         whether the wrapper is on a dp x tp mesh ({@code group(mesh, "dp")})
     * @param hollow         whether the model was started from a configuration
     */
    static void checkBuild(int workers, int shardGroupSize, boolean onMesh, boolean hollow) {
        if (onMesh) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with sharding=PARAMETERS and shardGroupSize="
                    + shardGroupSize + " (hybrid sharding) on a dp x tp mesh: a shrink would drop a tensor-parallel"
                    + " replica and a shard group at once, which the wrapper does not do yet; expected hybrid sharding"
                    + " without a mesh, or a mesh without shardGroupSize (fix: drop shardGroupSize for stage 3 over the"
                    + " dp axis with checkpointEvery(k, dir), whose shrink goes back to the newest checkpoint, or "
                    + RESTART + ")");
        }
        if (hollow) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with sharding=PARAMETERS and shardGroupSize="
                    + shardGroupSize + " (hybrid sharding) on a model started from its configuration (builder(conf)): the"
                    + " survivors write their shard group's copy into the model, and this one holds no parameters;"
                    + " expected builder(model) with an initialised model (fix: build on new"
                    + " MultiLayerNetwork(conf).init(), or " + RESTART + ")");
        }
        if (shardGroupSize == workers) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with sharding=PARAMETERS and shardGroupSize="
                    + shardGroupSize + " (hybrid sharding) of workers=" + workers + ": one replica group, whose dead"
                    + " worker would leave no whole copy of the model to go on from; expected at least two replica groups"
                    + " (fix: shardGroupSize(s) with s a divisor of " + workers + " below it, or drop shardGroupSize for"
                    + " stage 3 over every worker with checkpointEvery(k, dir), whose shrink goes back to the newest"
                    + " checkpoint, or " + RESTART + ")");
        }
    }
}
