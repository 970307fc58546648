package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import java.util.function.IntUnaryOperator;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.gradsync.SyncMetrics;

/**
 * One in-place shrink ({@link WorkerFailure#SHRINK}) that goes on from the survivors' own state: plain data
 * parallelism's, and hybrid sharding's, whose survivors take a surviving shard group's copy ({@link HybridShrink}); the
 * other ZeRO stages go back to a checkpoint instead ({@link ShardedShrink}). After a step that workers failed, with
 * every worker idle, the survivors agree on who died and on the last step all of them completed, which the model
 * takes; the old workers stop and the survivors' are created (a new world of threads, or over the group
 * {@link org.symmem4j.parallel.Group#shrink()} formed; a {@code dp x tp} mesh's through {@link MeshShrink}). It starts from the wrapper's settings, workers and the group an earlier shrink
 * formed, and replaces them as it goes: the wrapper takes them back afterwards ({@link #settings()},
 * {@link #workers()}, {@link #ownedGroup()}), also when the shrink failed (its workers stopped, the group it formed
 * closed). The wrapper deals the batches and reports the shrink (docs/shrink.md).
 */
final class WorkerShrink {

    private final ModelReplica model;
    private final SyncMetrics metrics;
    /** ND4J's threads per worker for a number of workers: the builder's setting, or the cores shared. */
    private final IntUnaryOperator ndThreadsFor;
    /** SHRINK on a dp x tp mesh: the mesh, and what its shrinks formed; null otherwise. */
    private final MeshShrink meshShrink;
    /** The settings: the survivors' count, or their group, once agreed. */
    private DataParallelSettings settings;
    /** This process's workers: stopped, then the survivors'. */
    private DataParallelWorkers workers;
    /** Group mode: the survivors' group the last shrink formed, which the wrapper closes; null before any. */
    private org.symmem4j.parallel.Group ownedGroup;

    WorkerShrink(ModelReplica model, SyncMetrics metrics, IntUnaryOperator ndThreadsFor, MeshShrink meshShrink,
                 DataParallelSettings settings, DataParallelWorkers workers, org.symmem4j.parallel.Group ownedGroup) {
        this.model = model;
        this.metrics = metrics;
        this.ndThreadsFor = ndThreadsFor;
        this.meshShrink = meshShrink;
        this.settings = settings;
        this.workers = workers;
        this.ownedGroup = ownedGroup;
    }

    /** {@return the settings now: the survivors' once agreed} */
    DataParallelSettings settings() {
        return settings;
    }

    /** {@return the workers now: the survivors' once agreed (not started), else the stopped or running old ones} */
    DataParallelWorkers workers() {
        return workers;
    }

    /** {@return the group this shrink (or an earlier one) formed, which the wrapper owns; null when none} */
    org.symmem4j.parallel.Group ownedGroup() {
        return ownedGroup;
    }

    /**
     * The survivors agree, in thread mode ({@link #agreeAmongThreads}) or in group mode ({@link #agreeInGroup}).
     *
     * @param cause the failure that killed the dead workers (reported, and the cause of a refusal)
     * @throws DataParallelTrainingException when fewer than {@code minWorkers} would survive, or the group could not
     *                                       shrink
     */
    Agreed agree(DataParallelSteps.LostWorkers lost, Throwable cause) {
        return settings.group() == null ? agreeAmongThreads(lost, cause) : agreeInGroup(lost, cause);
    }

    /**
     * What the survivors agreed on: the dead workers (old numbering), the iteration count they all go on from, and
     * the report's failed step and whether it is redone (the same on every survivor: {@link ShrinkReport#step()}).
     */
    record Agreed(List<Integer> dead, int iteration, long failedStep, boolean redone) {
    }

    /**
     * Thread mode: a survivor stopped by the abort (its collective, the gradient sync, runs before the update) holds
     * the step's start; one whose update ran, the step's end. Every survivor takes the state of the last step all of
     * them completed: the step's start if any was stopped (the step is redone), else its end. Then the old world is
     * stopped and the settings, workers count the survivors.
     */
    private Agreed agreeAmongThreads(DataParallelSteps.LostWorkers lost, Throwable cause) {
        List<DataParallelWorker> all = workers.all();
        int survivors;
        int iteration;
        if (settings.shardGroupSize() > 0) { // HSDP: the dead workers' shard groups leave; another group's copy goes on
            HybridShrink.Survivors h = HybridShrink.takeSurvivingReplica(model, all, settings, lost, cause);
            survivors = h.workers();
            iteration = h.iteration();
        } else {
            List<DataParallelWorker> alive = new ArrayList<>();
            for (int i = 0; i < all.size(); i++) {
                if (!lost.dead().contains(settings.firstLocalRank() + i)) {
                    alive.add(all.get(i));
                }
            }
            survivors = alive.size();
            ShardedShrink.requireMinWorkers(lost, lost.dead(), survivors, all.size(), cause, settings.minWorkers());
            DataParallelWorker agreed = alive.getFirst();
            for (DataParallelWorker w : alive) {
                if (w.replica().iterationCount() < agreed.replica().iterationCount()) {
                    agreed = w;
                }
            }
            iteration = agreed.replica().iterationCount();
            model.copyStateFrom(agreed.replica()); // the new replicas start from it; a failed fit puts the model back
        }
        SurvivorSteps.requireStartOrEnd(lost, iteration);
        workers.stop(); // every thread joined; the old world and its symmetric memory closed
        settings = settings.withWorkers(survivors, ndThreadsFor.applyAsInt(survivors));
        Nd4jThreadLimit.set(settings.ompThreadsPerWorker()); // until the fit's limit is restored at its end
        workers = new DataParallelWorkers(model, settings, metrics);
        // one wrapper hands every thread the same step: the step's end if every survivor's update ran (not redone)
        return new Agreed(lost.dead(), iteration, lost.step(), iteration == lost.iterationAtStart());
    }

    /**
     * Group mode: this rank's worker stopped on a peer's failure. The group names the dead and forms the survivors'
     * group ({@link org.symmem4j.parallel.Group#shrink()}); over it the survivors gather their iteration counts and
     * first steps not done ({@link SurvivorSteps}), and each goes on from the smallest count: its replica's state, or
     * the copy of the step's start it took (a survivor whose update ran while another's did not); every survivor
     * reports the smallest first step not done as the failed step, redone. The wrapper owns the new group (closed with
     * it, or at the next shrink).
     */
    private Agreed agreeInGroup(DataParallelSteps.LostWorkers lost, Throwable cause) {
        org.symmem4j.parallel.Group old = settings.group();
        DataParallelWorker worker = workers.all().getFirst();
        ModelReplica mine = worker.replica();
        workers.stop(); // this rank's memories of the old group freed (its worker ended with the failed step)
        if (settings.shardGroupSize() > 0) { // HSDP: dead ranks' shard groups leave; each survivor writes its blocks
            HybridShrink.Formed f = HybridShrink.inGroup(model, worker, settings, lost, cause);
            org.symmem4j.dl4j.train.RankRuntime.closeQuietly(ownedGroup); // a group an earlier shrink formed
            ownedGroup = f.group();
            settings = settings.withGroup(f.group());
            workers = new DataParallelWorkers(model, settings, metrics);
            return new Agreed(f.dead(), f.iteration(), f.failedStep(), true); // the survivors' agreed step, redone
        }
        org.symmem4j.parallel.Group group;
        org.symmem4j.parallel.Group agreeing; // a mesh's survivors agree over the whole world: every tp rank alike
        List<Integer> dead;
        long failedStep;
        if (meshShrink != null) { // the dead replicas leave whole; the network attached to its new tp group
            MeshShrink.Formed formed = meshShrink.shrink(model, lost, cause, settings.minWorkers());
            group = formed.dataParallelGroup();
            agreeing = formed.world();
            dead = formed.deadReplicas();
        } else {
            org.symmem4j.parallel.Group.Survivors survivors = ShardedShrink.shrinkGroup(old, lost, cause);
            group = survivors.group();
            agreeing = group;
            dead = survivors.dead();
        }
        try {
            ShardedShrink.requireMinWorkers(lost, dead, group.worldSize(), old.worldSize(), cause,
                    settings.minWorkers());
            // the survivors may have failed different steps (a mesh's dp groups; a survivor the abort reached still
            // finishing the step before: SurvivorSteps)
            SurvivorSteps.Agreed steps = SurvivorSteps.agreeOver(agreeing, lost, mine.iterationCount());
            int iteration = steps.iteration();
            failedStep = steps.failedStep();
            if (meshShrink != null) {
                MeshShrink.requireOneStepApart(lost, iteration, cause);
            }
            SurvivorSteps.requireStartOrEnd(lost, iteration);
            if (mine.iterationCount() == iteration) {
                model.copyStateFrom(mine);
            } else {
                lost.stepStart().restoreInto(model); // this rank's update ran, a survivor's did not: back to the start
            }
        } catch (RuntimeException e) {
            org.symmem4j.dl4j.train.RankRuntime.closeQuietly(meshShrink != null ? meshShrink : group);
            throw e;
        }
        if (meshShrink == null) { // a mesh's groups are the MeshShrink's
            org.symmem4j.dl4j.train.RankRuntime.closeQuietly(ownedGroup); // a group an earlier shrink formed
            ownedGroup = group;
        }
        settings = settings.withGroup(group);
        workers = new DataParallelWorkers(model, settings, metrics);
        // every survivor reports the agreed failed step, which all of them redo
        return new Agreed(dead, model.iterationCount(), failedStep, true);
    }
}
