package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * A worker's state at the start of a step (under {@link WorkerFailure#SHRINK}: group mode's one worker, plain or
 * hybrid; with hybrid sharding also every worker thread): the survivors of a peer's death may have got past their
 * update when others had not, and then every survivor goes back to the step's start ({@link SurvivorSteps}; as
 * threads, {@link HybridShrink#takeSurvivingReplica}), which only this copy still holds. Plain data parallelism's
 * threads keep none: each holds a whole replica, and the one stopped at the start gives it. Plain data parallelism keeps the replica's parameters
 * and updater state; hybrid sharding (HSDP, {@link HybridShrink}) this rank's own parameter blocks and its shard of
 * the updater state: 1/S of the model, all a survivor writes into the model at the shrink. Allocated once,
 * overwritten at each step's start (a copy: memory bandwidth, no allocation). ZeRO stages without hybrid sharding
 * keep none: their shrink goes back to a checkpoint ({@link ShardedShrink}).
 *
 * <p>Why under HSDP a rank keeps its own copy rather than taking the step's start from a surviving peer replica of its
 * shard (the rank at the same place of another shard group): where the abort reached each survivor decides who still
 * holds the start, not its place. Each shard (column) is summed over the groups by its own all-reduce, and a collective
 * that an abort cuts short can complete on some of its ranks and not on others, so no surviving replica of a shard need
 * still hold its start (thread mode meets this as shard groups split between the step's start and end). The own copy
 * is there whatever happened, needs no transfer over the survivors' new group (a peer's would be a point-to-point of
 * 1/S of the state per rank that went ahead, and a fallback when no peer holds it), and is the plain shrink's mechanism
 * reused; it costs one local copy of 1/S of the parameters and updater state per step, and that much memory.
 *
 * <p>Touched on the wrapper's thread only, while the worker is idle: the completion of the worker's previous step's
 * result orders its writes before {@link #take} reads them, and the next step's submission (the worker's task queue)
 * orders the copy before the worker writes again.
 */
final class StepStart {
    /** Plain: the replica's parameters; null under HSDP. */
    private INDArray params;
    /** Plain: the replica's updater state; HSDP: this rank's shard of it; null when there is none. */
    private INDArray updaterState;
    /** HSDP: this rank's own parameter blocks, packed ({@link FullySharded#packOwnBlocks(MemorySegment)}). */
    private MemorySegment ownBlocks;
    private int iteration;
    private int epoch;

    /** Takes the state of {@code worker} (idle), at its step's start. */
    void take(DataParallelWorker worker) {
        ModelReplica replica = worker.replica();
        FullySharded blocks = worker.fullySharded();
        if (blocks != null) { // HSDP: the replica holds no whole copy; the own blocks and state shard are this rank's
            ownBlocks = blocks.packOwnBlocks(ownBlocks);
            updaterState = keep(updaterState, worker.sharded().state());
        } else {
            params = keep(params, replica.params());
            updaterState = keep(updaterState, replica.updaterState());
        }
        iteration = replica.iterationCount();
        epoch = replica.epochCount();
    }

    /** {@code copy} overwritten with {@code from}; the first time a copy outside any workspace. */
    private static INDArray keep(INDArray copy, INDArray from) {
        if (from == null) {
            return null;
        }
        if (copy == null) {
            try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
                return from.dup();
            }
        }
        return copy.assign(from);
    }

    int iteration() {
        return iteration;
    }

    /** Plain data parallelism: {@code target} takes this state: parameters, updater state, counters. */
    void restoreInto(ModelReplica target) {
        target.params().assign(params);
        if (updaterState != null && target.updaterState() != null) {
            target.updaterState().assign(updaterState);
        }
        target.setIterationCount(iteration);
        target.setEpochCount(epoch);
    }

    /**
     * Hybrid sharding: {@code target} (the wrapper's model) takes this rank's blocks and updater-state shard of the
     * step's start into their elements (the others are left alone), and its counters.
     *
     * @param worker this rank's worker, stopped: its shard's state is overwritten with the copy, then exported
     */
    void restoreShardInto(ModelReplica target, DataParallelWorker worker) {
        worker.fullySharded().unpackOwnBlocksTo(ownBlocks, target.params());
        INDArray full = target.updaterState();
        if (updaterState != null && full != null) {
            worker.sharded().state().assign(updaterState);
            worker.sharded().exportState(full);
        }
        target.setIterationCount(iteration);
        target.setEpochCount(epoch);
    }
}
