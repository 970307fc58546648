package org.symmem4j.dl4j.pipeline;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.deeplearning4j.nn.updater.UpdaterBlock;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * Copies updater state (Adam's moments, momentum, AdaGrad's history...) parameter by parameter between
 * two networks that hold the same layers, such as a full network and one of its pipeline stages.
 *
 * <p>DL4J keeps one flat state vector per network, cut into <i>updater blocks</i>: runs of consecutive
 * parameters with equal updater configuration. A block of {@code n} parameters whose updater keeps
 * {@code k} values per parameter holds {@code k} sections of {@code n} values each (Adam: all first
 * moments, then all second moments). Splitting a network changes the blocks (a stage's block ends at
 * the stage's last layer), so the state cannot be copied as one slice: each parameter's {@code k}
 * runs are copied from their section in the source block to the same section in the target block.
 */
final class UpdaterStateCopy {

    private UpdaterStateCopy() {
    }

    /**
     * Copies the state of {@code from}'s parameters {@code [fromOffset, fromOffset + count)} into
     * {@code to}'s parameters starting at {@code toOffset}. A source that never trained (no updater
     * yet) leaves {@code to} as it is: both would start from the updater's initial state.
     */
    static void copy(MultiLayerNetwork from, long fromOffset, MultiLayerNetwork to, long toOffset, long count) {
        if (count == 0 || from.getUpdater(false) == null) {
            return;
        }
        copy(from.getUpdater(false), to.getUpdater(true), fromOffset, toOffset, count);
    }

    /**
     * As {@link #copy(MultiLayerNetwork, long, MultiLayerNetwork, long, long)}, between the updaters of
     * any two models (networks or graphs) whose parameters at those offsets are the same layers'.
     */
    static void copy(Updater from, Updater to, long fromOffset, long toOffset, long count) {
        copy(from, null, to, fromOffset, toOffset, count);
    }

    /**
     * As {@link #copy(Updater, Updater, long, long, long)}, reading the source's state from {@code fromState} (laid
     * out as {@code from}'s state view, which may be hollow) instead of {@code from}'s own view; null reads the view.
     */
    static void copy(Updater from, INDArray fromState, Updater to, long fromOffset, long toOffset, long count) {
        walk(from, fromState, to, fromOffset, toOffset, count, (source, target) -> {
            target.assign(source);
            return true;
        });
    }

    /**
     * Whether {@code to}'s state of its parameters from {@code toOffset} is bitwise what {@link #copy} would
     * write there from {@code from}'s parameters {@code [fromOffset, fromOffset + count)}. A source that never
     * trained (no updater yet) matches anything, as {@code copy} then leaves the target as it is.
     */
    static boolean same(Updater from, Updater to, long fromOffset, long toOffset, long count) {
        return walk(from, null, to, fromOffset, toOffset, count, (source, target) -> ArrayCollectives.segmentOf(source)
                .mismatch(ArrayCollectives.segmentOf(target)) == -1);
    }

    /** Two runs of the same parameters' state, one per network; false stops the walk. */
    @FunctionalInterface
    private interface RunAction {
        boolean apply(INDArray source, INDArray target);
    }

    /** Applies {@code action} to every run of state of the range's parameters; false when an action returned false. */
    private static boolean walk(Updater from, INDArray fromState, Updater to, long fromOffset, long toOffset, long count,
                                RunAction action) {
        BaseMultiLayerUpdater<?> source = blocks(from);
        if (source == null || source.getStateViewArray() == null || count == 0) {
            return true;
        }
        BaseMultiLayerUpdater<?> target = blocks(to);
        if (target.getStateViewArray() == null) {
            throw new IllegalStateException("the source network has updater state but the target has none: their"
                    + " updater configurations differ (fix: copy between networks with the same configuration)");
        }
        INDArray sourceState = flat(fromState != null ? fromState : source.getStateViewArray());
        INDArray targetState = flat(target.getStateViewArray());
        for (UpdaterBlock sourceBlock : source.getUpdaterBlocks()) {
            int sections = sections(sourceBlock);
            if (sections == 0) {
                continue;
            }
            for (UpdaterBlock.ParamState param : sourceBlock.getLayersAndVariablesInBlock()) {
                long start = param.getParamOffsetStart();
                long length = param.getParamOffsetEnd() - start;
                if (length == 0 || start < fromOffset || start + length > fromOffset + count) {
                    continue; // outside the range; ranges are whole layers, so no parameter straddles one
                }
                long targetStart = start - fromOffset + toOffset;
                UpdaterBlock targetBlock = blockHolding(target, targetStart, length);
                if (sections(targetBlock) != sections) {
                    throw new IllegalStateException("parameter " + param.getParamName() + " at offset " + start
                            + " keeps " + sections + " updater values per parameter in the source but "
                            + sections(targetBlock) + " in the target: their updater configurations differ (fix: build"
                            + " the target from the same configuration as the stage networks, same updater per layer)");
                }
                long sourceIn = start - sourceBlock.getParamOffsetStart();
                long targetIn = targetStart - targetBlock.getParamOffsetStart();
                long sourceN = sourceBlock.getParamOffsetEnd() - sourceBlock.getParamOffsetStart();
                long targetN = targetBlock.getParamOffsetEnd() - targetBlock.getParamOffsetStart();
                for (int k = 0; k < sections; k++) {
                    long s = sourceBlock.getUpdaterViewOffsetStart() + k * sourceN + sourceIn;
                    long t = targetBlock.getUpdaterViewOffsetStart() + k * targetN + targetIn;
                    if (!action.apply(sourceState.get(NDArrayIndex.interval(s, s + length)),
                            targetState.get(NDArrayIndex.interval(t, t + length)))) {
                        return false;
                    }
                }
            }
        }
        return true;
    }

    /**
     * Where state section {@code section} (Adam: 0 the first moments, 1 the second) of parameters {@code [from, to)}
     * lies in {@code updater}'s flat state view: {@code {stateOffset, paramStart, length}} runs in parameter order, one
     * per updater block the range crosses. For copies from a state laid out by another network's blocks (a pipeline
     * stage's block of sharded state, {@code ZeroHandover}), which know their runs by parameter.
     *
     * @throws IllegalStateException when a block the range crosses keeps no such section (the layouts differ)
     */
    static List<long[]> sectionRuns(Updater updater, long from, long to, int section) {
        List<long[]> runs = new ArrayList<>();
        for (UpdaterBlock block : blocks(updater).getUpdaterBlocks()) {
            long a = Math.max(from, block.getParamOffsetStart());
            long b = Math.min(to, block.getParamOffsetEnd());
            if (a >= b) {
                continue;
            }
            if (section >= sections(block)) {
                throw new IllegalStateException("parameters [" + a + ", " + b + ") keep " + sections(block)
                        + " updater values per parameter in the target, expected more than " + section + ": their"
                        + " updater configurations differ (fix: build the target from the same configuration as the"
                        + " stage networks, same updater per layer)");
            }
            long n = block.getParamOffsetEnd() - block.getParamOffsetStart();
            runs.add(new long[] {block.getUpdaterViewOffsetStart() + section * n + (a - block.getParamOffsetStart()), a,
                    b - a});
        }
        return runs;
    }

    /** {@code updater}'s flat state view (DL4J's multi-layer or graph updater), or null when it keeps none. */
    static INDArray stateView(Updater updater) {
        BaseMultiLayerUpdater<?> base = blocks(updater);
        return base == null || base.getStateViewArray() == null ? null : flat(base.getStateViewArray());
    }

    /**
     * Identifies an updater's state layout (its blocks' parameter and state ranges, and the parameters in each), so a
     * checkpoint's state is only read into the layout it was saved from; 0 for a network without an updater.
     */
    static long fingerprint(Updater updater) {
        BaseMultiLayerUpdater<?> base = blocks(updater);
        if (base == null) {
            return 0;
        }
        StringBuilder description = new StringBuilder();
        for (UpdaterBlock block : base.getUpdaterBlocks()) {
            description.append(block.getParamOffsetStart()).append('-').append(block.getParamOffsetEnd()).append(':')
                    .append(block.getUpdaterViewOffsetStart()).append('-').append(block.getUpdaterViewOffsetEnd());
            for (UpdaterBlock.ParamState param : block.getLayersAndVariablesInBlock()) {
                description.append(',').append(param.getParamName());
            }
            description.append(';');
        }
        CRC32 crc = new CRC32();
        crc.update(description.toString().getBytes(StandardCharsets.UTF_8));
        return crc.getValue();
    }

    private static BaseMultiLayerUpdater<?> blocks(Updater updater) {
        if (updater == null) {
            return null;
        }
        if (!(updater instanceof BaseMultiLayerUpdater<?> base)) {
            throw new IllegalStateException("expected DL4J's MultiLayerUpdater or ComputationGraphUpdater found "
                    + updater.getClass().getName()
                    + " (a custom updater's state layout is unknown, so it cannot be split between stages; fix: leave"
                    + " the updater to DL4J: set it with the configuration's .updater(...), not model.setUpdater)");
        }
        return base;
    }

    /** Values per parameter the block's updater keeps: its state size over its parameter count. */
    private static int sections(UpdaterBlock block) {
        long params = block.getParamOffsetEnd() - block.getParamOffsetStart();
        long state = block.getUpdaterViewOffsetEnd() - block.getUpdaterViewOffsetStart();
        if (state == 0 || params == 0) {
            return 0;
        }
        if (state % params != 0) {
            throw new IllegalStateException("updater block " + block + " has state=" + state + " values for params="
                    + params + ": expected a whole number of values per parameter (an updater whose state is not"
                    + " per-parameter cannot be split between stages; fix: use one of DL4J's per-parameter updaters,"
                    + " e.g. Sgd, Nesterovs, Adam, AdamW, RmsProp or AdaGrad)");
        }
        return Math.toIntExact(state / params);
    }

    private static UpdaterBlock blockHolding(BaseMultiLayerUpdater<?> updater, long start, long length) {
        for (UpdaterBlock block : updater.getUpdaterBlocks()) {
            if (block.getParamOffsetStart() <= start && start + length <= block.getParamOffsetEnd()) {
                return block;
            }
        }
        throw new IllegalStateException("no updater block of the target holds parameters [" + start + ", "
                + (start + length) + "): the networks' parameter layouts differ (fix: pass a target built from the"
                + " same configuration as the network that was split)");
    }

    private static INDArray flat(INDArray array) {
        return array.reshape(array.length());
    }
}
