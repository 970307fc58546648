package org.symmem4j.dl4j;

import java.util.List;
import org.symmem4j.dl4j.train.RankAgreement;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;

/**
 * Group mode's agreement on the failed step of a shrink ({@link WorkerFailure#SHRINK}), plain and sharded: each
 * survivor was handed out its own step when the abort reached it, and they need not be the same one. A survivor that
 * the abort reaches while it still finishes the step before (past its update, in the step's loss merge, the collective
 * after the update) fails that step, while the others, already in the next one, fail the next. Every survivor knows
 * the first step it had not completed: its failed step, or the one after when its update ran. The survivors gather
 * that position with their iteration counts; the smallest is the first step that not every survivor completed, the
 * one they go on from, and every survivor reports it as the failed step, redone ({@link ShrinkReport#step()}).
 *
 * <p>A survivor whose update ran while another's did not goes back to the step's start, which it kept
 * ({@link StepStart}): plain data parallelism its replica's state, hybrid sharding its own blocks and updater-state
 * shard ({@link HybridShrink}).
 *
 * <p>The step counters and the iteration counters move together on every rank (one update per step), so a rank's
 * step minus its iteration count is the same on every survivor; a difference is a bug.
 */
final class SurvivorSteps {

    private SurvivorSteps() {
    }

    /**
     * This rank's position, to gather over the survivors: its iteration count now and the first step it had not
     * completed.
     *
     * @param lost      this rank's failed step
     * @param iteration its replica's iteration count now (one more than at the step's start when its update ran)
     */
    static String position(DataParallelSteps.LostWorkers lost, int iteration) {
        return iteration + " " + (lost.step() + iteration - lost.iterationAtStart());
    }

    /**
     * What the survivors agree on, the same on every one of them.
     *
     * @param iteration  the iteration count of the last step every survivor completed (the smallest)
     * @param failedStep the first step not every survivor completed: the failed step, which they redo
     */
    record Agreed(int iteration, long failedStep) {
    }

    /**
     * The agreement from every survivor's {@link #position}.
     *
     * @param positions every survivor's position, by new rank
     * @param lost      this rank's failed step (for the consistency check and the error's cause)
     * @return the agreed iteration count and failed step
     */
    static Agreed agree(List<String> positions, DataParallelSteps.LostWorkers lost) {
        int iteration = Integer.MAX_VALUE;
        long failedStep = Long.MAX_VALUE;
        for (String p : positions) {
            String[] f = p.split(" ");
            int it = Integer.parseInt(f[0]);
            long step = Long.parseLong(f[1]);
            if (step - it != lost.step() - lost.iterationAtStart()) {
                throw Invariants.violated("shrink after step " + lost.step() + ": a survivor's first step not done and"
                        + " iteration count (" + p + ") are " + (step - it) + " apart, this rank's "
                        + (lost.step() - lost.iterationAtStart()) + " (positions by new rank: " + positions + ")",
                        lost.failure());
            }
            iteration = Math.min(iteration, it);
            failedStep = Math.min(failedStep, step);
        }
        return new Agreed(iteration, failedStep);
    }

    /**
     * Gathers every survivor's {@link #position} over {@code survivors} and agrees ({@link #agree}): collective over
     * the survivors' new group (its tag names no step: the survivors may have failed different steps, and the group
     * is new).
     *
     * @param survivors the group every survivor agrees over (a mesh's whole world: every tp rank alike)
     * @param iteration this rank's replica's iteration count now
     */
    static Agreed agreeOver(Group survivors, DataParallelSteps.LostWorkers lost, int iteration) {
        return agree(RankAgreement.allGather(survivors, "symmem4j-wrapper-shrink", position(lost, iteration)), lost);
    }

    /** The agreed iteration count is the failed step's start or end; anything else is a bug. */
    static void requireStartOrEnd(DataParallelSteps.LostWorkers lost, int iteration) {
        if (iteration != lost.iterationAtStart() && iteration != lost.iterationAtStart() + 1) {
            throw Invariants.violated("shrink after step " + lost.step() + ": the survivors' agreed iteration count"
                    + " is " + iteration + ", expected " + lost.iterationAtStart() + " (step not done) or "
                    + (lost.iterationAtStart() + 1) + " (done)", lost.failure());
        }
    }
}
