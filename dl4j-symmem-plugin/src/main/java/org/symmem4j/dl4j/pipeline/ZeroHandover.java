package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import java.util.List;
import org.deeplearning4j.nn.api.Updater;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.OptimizerStateShard;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * Thread mode's hand-over between the user's model and stages whose state is cut over their dp replicas (ZeRO on the
 * dp axis, {@link PipelineZero}), straight between the replicas' blocks and the model: each replica's block of updater
 * state (with stage 3 of the parameters too) is copied into, or compared with, the runs of the model's state that hold
 * the same parameters' state ({@link OptimizerStateShard#stateRuns}, {@link UpdaterStateCopy#sectionRuns}).
 *
 * <p>The other way, {@link PipelineZero#withWholeState}, gives every stage concerned DL4J's whole updater (a new
 * updater with its whole state allocated and zeroed), writes every replica's block into it, runs the copy and takes
 * the blocks back: at every {@code fit}'s start for every replica (is the model unchanged?) and at its end for replica
 * 0 (the model takes the stages): {@code dp + 1} whole updaters built, filled and dropped per {@code fit}, serially on
 * the caller's thread while every rank waits, once per step with {@code fit(batch)}
 * ({@code bench/results/2026-11-30-pipeline-zero-speed.md}). Here every element is read once, from its one owner, so
 * the bits are that path's; it stays for what changes the stages (a model changed between fits or by a listener,
 * checkpoints) and for group mode's hand-over at the end of {@code fit}, which gathers over the group.
 */
final class ZeroHandover {

    private ZeroHandover() {
    }

    /** A run of a stage's memory and the run of the model's that holds the same elements; false stops the walk. */
    @FunctionalInterface
    private interface RunAction {
        boolean apply(MemorySegment stage, long stageAt, MemorySegment model, long modelAt, long bytes);
    }

    /**
     * Whether every stage with parameters holds its block on every replica (from the first step on; before it each
     * replica holds DL4J's whole updater, and {@link PipelineZero#withWholeState} has nothing to gather).
     */
    static boolean applies(List<List<Dl4jPipelineStage>> all) {
        for (List<Dl4jPipelineStage> replica : all) {
            for (Dl4jPipelineStage stage : replica) {
                if (stage.held() && stage.network().numParams() > 0 && stage.optimizerShard() == null) {
                    return false;
                }
            }
        }
        return true;
    }

    /**
     * Whether the replicas' blocks hold {@code params}' and {@code updater}'s state bitwise (the counters are the
     * caller's): stages 1 and 2 replica 0's whole parameters, stage 3 every replica's block of them; every replica's
     * block of the updater state. In group mode {@code all} is this rank's replica, whose held stages are compared.
     *
     * @param parameters whether the parameters are cut too (stage 3)
     */
    static boolean holds(INDArray params, Updater updater, PipelineStageSplit split, List<List<Dl4jPipelineStage>> all,
                         boolean parameters) {
        return walk(params, updater, split, all, parameters, (stage, stageAt, model, modelAt, bytes) ->
                MemorySegment.mismatch(stage, stageAt, stageAt + bytes, model, modelAt, modelAt + bytes) == -1);
    }

    /** Writes the replicas' blocks into {@code params} and {@code updater}'s state, as {@link #holds} compares them. */
    static void copyInto(INDArray params, Updater updater, PipelineStageSplit split, List<List<Dl4jPipelineStage>> all,
                         boolean parameters) {
        walk(params, updater, split, all, parameters, (stage, stageAt, model, modelAt, bytes) -> {
            MemorySegment.copy(stage, stageAt, model, modelAt, bytes); // the bits as the block's owner holds them
            return true;
        });
    }

    /**
     * The stages' last update into {@code target} (the model's gradient view, as DL4J's listeners read it after a step):
     * what each stage's gradient view holds after its step, with stage 3 each replica's block of it (the rest of its view
     * given back), with stages 1 and 2 replica 0's whole view (the update all-gathered).
     */
    static void copyUpdatesInto(INDArray target, PipelineStageSplit split, List<List<Dl4jPipelineStage>> all,
                                boolean parameters) {
        long width = target.dataType().width();
        MemorySegment to = ArrayCollectives.segmentOf(target);
        for (int s = 0; s < split.stageCount(); s++) {
            long from = split.parameterOffset(s);
            long count = split.parameterCount(s);
            for (int d = 0; count > 0 && d < all.size(); d++) {
                Dl4jPipelineStage stage = all.get(d).get(s);
                long[] own = owned(stage.optimizerShard(), parameters, d, count);
                if (own[0] < own[1]) {
                    MemorySegment.copy(ArrayCollectives.segmentOf(stage.network().getGradientsViewArray()),
                            own[0] * width, to, (from + own[0]) * width, (own[1] - own[0]) * width);
                }
            }
        }
    }

    /**
     * The parameters {@code [from, to)} of a stage whose copy replica {@code d} contributes: its block with stage 3; with
     * stages 1 and 2 every replica holds the whole stage (the same bits), so replica 0's whole and nothing of the others.
     */
    private static long[] owned(OptimizerStateShard shard, boolean parameters, int d, long count) {
        return parameters ? shard.block() : d == 0 ? new long[] {0, count} : new long[] {count, count};
    }

    private static boolean walk(INDArray params, Updater updater, PipelineStageSplit split,
                                List<List<Dl4jPipelineStage>> all, boolean parameters, RunAction action) {
        long width = params.dataType().width();
        MemorySegment model = ArrayCollectives.segmentOf(params);
        INDArray stateView = UpdaterStateCopy.stateView(updater);
        MemorySegment modelState = stateView == null ? null : ArrayCollectives.segmentOf(stateView);
        for (int s = 0; s < split.stageCount(); s++) {
            long from = split.parameterOffset(s);
            long count = split.parameterCount(s);
            for (int d = 0; count > 0 && d < all.size(); d++) {
                Dl4jPipelineStage stage = all.get(d).get(s);
                if (!stage.held()) {
                    continue; // group mode: another rank's stage
                }
                OptimizerStateShard shard = stage.optimizerShard();
                long[] own = owned(shard, parameters, d, count);
                long pa = own[0];
                long pb = own[1];
                if (pa < pb && !action.apply(ArrayCollectives.segmentOf(stage.network().params()), pa * width, model,
                        (from + pa) * width, (pb - pa) * width)) {
                    return false;
                }
                INDArray state = shard.state();
                if (state == null || modelState == null) {
                    continue; // no state kept (SGD), or a model that never trained: nothing to copy, as DL4J's copy
                }
                MemorySegment mine = ArrayCollectives.segmentOf(state);
                for (OptimizerStateShard.StateRun run : shard.stateRuns()) {
                    for (long[] m : UpdaterStateCopy.sectionRuns(updater, from + run.paramStart(),
                            from + run.paramEnd(), run.section())) {
                        long stageAt = (run.offset() + m[1] - from - run.paramStart()) * width;
                        if (!action.apply(mine, stageAt, modelState, m[0] * width, m[2] * width)) {
                            return false;
                        }
                    }
                }
            }
        }
        return true;
    }
}
