package org.symmem4j.dl4j;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.TrainingConfig;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.deeplearning4j.nn.updater.UpdaterBlock;
import org.symmem4j.parallel.Invariants;

/**
 * DL4J's updater layout of one network as plain data: the updater blocks of
 * {@link BaseMultiLayerUpdater} (contiguous ranges of the flat parameter vector that share one
 * {@code IUpdater} configuration), where each block's state lives in the flat updater-state view,
 * and per layer the gradient normalization DL4J runs before the updaters. Read from the network's
 * own DL4J updater, so the blocks are DL4J's, not a re-derivation.
 *
 * <p>DL4J's updaters are element-wise and keep k state arrays of the block's length one after the
 * other ([m | v] for Adam, [v] for Nesterov momentum, none for SGD): in a block of n parameters
 * starting at {@code start}, the j-th state of parameter p lives at
 * {@code stateStart + j*n + (p - start)}. Sharding relies on this, so a block whose state is not a
 * multiple of its length is rejected.
 */
final class UpdaterLayout {

    /** One parameter array of one layer: elements [start, end) of the flat vector. */
    record Variable(String layer, String param, long start, long end) {
    }

    /**
     * One DL4J updater block.
     *
     * @param statesPerParam k: state elements per parameter (0 for SGD)
     * @param pretrain       DL4J skips such blocks in supervised training (e.g. a VAE's decoder)
     */
    record Block(int index, long start, long end, long stateStart, int statesPerParam, boolean pretrain,
                 List<Variable> variables) {
        long length() {
            return end - start;
        }
    }

    /** A layer's gradient normalization, over its variables. */
    record LayerNormalization(String layer, GradientNormalization kind, double threshold, List<Variable> variables) {
    }

    private final long paramCount;
    private final long stateCount;
    private final List<Block> blocks;
    private final List<LayerNormalization> normalizations;
    private final String description;

    private UpdaterLayout(long paramCount, long stateCount, List<Block> blocks, List<LayerNormalization> normalizations) {
        this.paramCount = paramCount;
        this.stateCount = stateCount;
        this.blocks = List.copyOf(blocks);
        this.normalizations = List.copyOf(normalizations);
        StringBuilder b = new StringBuilder("params=").append(paramCount).append(" state=").append(stateCount);
        for (Block block : blocks) {
            b.append(" [").append(block.start()).append(',').append(block.end()).append(")k=").append(block.statesPerParam())
                    .append("@").append(block.stateStart());
        }
        this.description = b.toString();
    }

    /**
     * Every parameter array of the network {@code updater} belongs to, in the order of the flat
     * parameter vector, as DL4J's updater blocks list them (layer names as the updater knows them).
     */
    static List<Variable> variablesOf(BaseMultiLayerUpdater<?> updater) {
        List<Variable> out = new ArrayList<>();
        for (UpdaterBlock ub : updater.getUpdaterBlocks()) {
            for (UpdaterBlock.ParamState ps : ub.getLayersAndVariablesInBlock()) {
                out.add(new Variable(ps.getLayer().getConfig().getLayerName(), ps.getParamName(), ps.getParamOffsetStart(),
                        ps.getParamOffsetEnd()));
            }
        }
        return out;
    }

    /** The layout of the network {@code updater} belongs to. */
    static UpdaterLayout of(BaseMultiLayerUpdater<?> updater, long paramCount) {
        List<Block> blocks = new ArrayList<>();
        // a layer's variables, by the layer object: DL4J's updater keys its layers by index for a
        // MultiLayerNetwork and by name for a graph, so identity is what ties them to the blocks
        Map<Trainable, List<Variable>> variablesOf = new IdentityHashMap<>();
        long state = 0;
        long expectedStart = 0;
        for (UpdaterBlock ub : updater.getUpdaterBlocks()) {
            long start = ub.getParamOffsetStart();
            long end = ub.getParamOffsetEnd();
            long stateStart = ub.getUpdaterViewOffsetStart();
            long stateLength = ub.getUpdaterViewOffsetEnd() - stateStart;
            long n = end - start;
            if (start != expectedStart || stateStart != state) {
                throw Invariants.violated("DL4J updater blocks are not contiguous: block " + blocks.size()
                        + " starts at param " + start + " / state " + stateStart + ", expected " + expectedStart + " / " + state);
            }
            if (n > 0 && stateLength % n != 0) {
                String updaterName = ub.getLayersAndVariablesInBlock().getFirst().getLayer().getConfig()
                        .getUpdaterByParam(ub.getLayersAndVariablesInBlock().getFirst().getParamName()).getClass().getSimpleName();
                throw new IllegalArgumentException("updater " + updaterName + " keeps " + stateLength + " state elements for "
                        + n + " parameters (block " + blocks.size() + "); sharding needs element-wise state, a multiple of the"
                        + " parameter count (every DL4J 1.0.0-M2.1 updater has it; fix: use one of DL4J's updaters, e.g."
                        + " Sgd, Nesterovs, Adam, AdamW, RmsProp or AdaGrad, or train without sharding(...))");
            }
            List<Variable> vars = new ArrayList<>();
            for (UpdaterBlock.ParamState ps : ub.getLayersAndVariablesInBlock()) {
                Variable v = new Variable(ps.getLayer().getConfig().getLayerName(), ps.getParamName(), ps.getParamOffsetStart(),
                        ps.getParamOffsetEnd());
                vars.add(v);
                variablesOf.computeIfAbsent(ps.getLayer(), k -> new ArrayList<>()).add(v);
            }
            blocks.add(new Block(blocks.size(), start, end, stateStart, n == 0 ? 0 : (int) (stateLength / n),
                    ub.isPretrainUpdaterBlock(), vars));
            state += stateLength;
            expectedStart = end;
        }
        if (expectedStart != paramCount) {
            throw Invariants.violated("DL4J updater blocks cover " + expectedStart + " parameters; the network has "
                    + paramCount);
        }
        List<LayerNormalization> norms = new ArrayList<>();
        for (Trainable layer : updater.getLayersByName().values()) {
            TrainingConfig config = layer.getConfig();
            if (config == null || layer.numParams() == 0) {
                continue; // DL4J's preApply skips these too
            }
            GradientNormalization kind = config.getGradientNormalization();
            if (kind == null || kind == GradientNormalization.None) {
                continue;
            }
            List<Variable> vars = new ArrayList<>(variablesOf.getOrDefault(layer, List.of()));
            vars.sort(Comparator.comparingLong(Variable::start));
            norms.add(new LayerNormalization(config.getLayerName(), kind, config.getGradientNormalizationThreshold(), vars));
        }
        norms.sort(Comparator.comparingLong(n -> n.variables().isEmpty() ? -1 : n.variables().getFirst().start()));
        return new UpdaterLayout(paramCount, state, blocks, norms);
    }

    long paramCount() {
        return paramCount;
    }

    /** Elements of DL4J's full updater-state view. */
    long stateCount() {
        return stateCount;
    }

    List<Block> blocks() {
        return blocks;
    }

    List<LayerNormalization> normalizations() {
        return normalizations;
    }

    /**
     * Where the updater state of parameters {@code [start, end)} lies in DL4J's full updater-state view, in the order a
     * shard of those parameters keeps it ({@code ShardedUpdater}): per block the range meets, in block order, one run
     * per state array (Adam's m, then v), each {@code min(end, blockEnd) - max(start, blockStart)} elements; runs that
     * follow each other in the view are merged. The ranges of a sharded checkpoint's files ({@code ShardCheckpoint}).
     *
     * @param start the first parameter
     * @param end   one past the last
     * @return the state ranges, in the shard's order; empty when no block there keeps state
     */
    List<ShardedCheckpoints.Range> stateRanges(long start, long end) {
        return stateRanges(new long[] {start, end});
    }

    /**
     * Where the state of several owned ranges lies in the flat state space, in the order a stage-3
     * {@code ShardedUpdater} keeps it: block by block, within a block range by range, within a range one run per state
     * array (Adam's m, then v); adjacent runs merged.
     *
     * @param ranges the owned elements, [from, to) pairs in ascending order
     * @return the state ranges, in the order of the shard's state elements
     */
    List<ShardedCheckpoints.Range> stateRanges(long[] ranges) {
        List<ShardedCheckpoints.Range> out = new ArrayList<>();
        for (Block block : blocks) {
            for (int i = 0; i < ranges.length; i += 2) {
                long a = Math.max(block.start(), ranges[i]);
                long b = Math.min(block.end(), ranges[i + 1]);
                for (int j = 0; a < b && j < block.statesPerParam(); j++) {
                    long from = block.stateStart() + j * block.length() + (a - block.start());
                    if (!out.isEmpty() && out.getLast().end() == from) {
                        out.set(out.size() - 1, new ShardedCheckpoints.Range(out.getLast().start(), from + (b - a)));
                    } else {
                        out.add(new ShardedCheckpoints.Range(from, from + (b - a)));
                    }
                }
            }
        }
        return out;
    }

    /** Identifies the block structure (ranges and state sizes), for checkpoints. */
    long fingerprint() {
        CRC32 crc = new CRC32();
        crc.update(description.getBytes(StandardCharsets.UTF_8));
        return crc.getValue();
    }

    @Override
    public String toString() {
        return "UpdaterLayout[" + description + "]";
    }
}
