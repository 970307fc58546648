package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.FeedForwardLayer;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * How a {@link MultiLayerNetwork} is cut into pipeline stages: {@code stageCount} contiguous,
 * non-empty layer ranges, stage {@code s} running layers {@code [firstLayer(s), endLayer(s))}.
 * {@link #buildStageNetworks()} turns each range into a {@code MultiLayerNetwork} of its own with the
 * original's layer configurations (updater, seed, data type, regularization, constraints, gradient
 * normalization: everything a layer configuration carries) and exactly the original's parameters and
 * updater state for those layers; {@link #copyStagesInto} writes them back into a full network.
 *
 * <p>Supported networks: {@link DenseLayer}s and one {@link OutputLayer} last, FLOAT or DOUBLE, standard
 * backprop, no dropout or weight noise, and an input preprocessor on the first layer at most.
 * Everything is checked when the split is made, before any training: unsupported layers, too many
 * stages, bad boundaries, and layer widths that do not chain (layer {@code i}'s nIn must equal layer
 * {@code i-1}'s nOut; at a stage boundary that is the width of the activations and gradients the two
 * stages exchange).
 *
 * <p>Why those limits: stages exchange 2-D {@code [microbatch x width]} activations, so only
 * feed-forward layers fit between stages; DL4J keeps one dropout mask (and one weight-noise sample) per
 * layer, from its latest forward pass, and with several microbatches in flight a backward pass would
 * use another microbatch's; batch normalization would compute its statistics per microbatch instead of
 * per batch, so the result would not equal training the whole network.
 */
public final class PipelineStageSplit {

    private final MultiLayerNetwork network;
    /** {@code stageStart[s]} is stage s's first layer; {@code stageStart[stageCount]} is the layer count. */
    private final int[] stageStart;
    /** {@code paramOffset[i]}: offset of layer i's parameters in the network's flat parameters; one extra entry at the end. */
    private final long[] paramOffset;
    private final long[] nIn;
    private final long[] nOut;

    private PipelineStageSplit(MultiLayerNetwork network, int[] stageStart, long[] paramOffset, long[] nIn, long[] nOut) {
        this.network = network;
        this.stageStart = stageStart;
        this.paramOffset = paramOffset;
        this.nIn = nIn;
        this.nOut = nOut;
    }

    /**
     * Splits {@code network} into {@code stages} ranges balanced by parameter count: the split whose
     * largest stage has the fewest parameters (a dense layer's compute grows with its parameters), every
     * stage at least one layer. Deterministic: among equally balanced splits, each stage ends as late
     * as possible, counting from the last stage.
     *
     * @param network initialized (or it is initialized here, as {@code fit} would)
     * @throws IllegalArgumentException for an unsupported network or more stages than layers
     */
    public static PipelineStageSplit balanced(MultiLayerNetwork network, int stages) {
        Layout layout = Layout.of(network);
        requireStageCount(stages, layout.layers());
        return layout.split(network, balancedStarts(layout.layerParams, stages));
    }

    /**
     * Splits {@code network} at user-given boundaries.
     *
     * @param stageStarts the first layer of stages 1, 2, ..., in increasing order: for 8 layers and 4
     *                    stages, {@code 2, 4, 6} gives layers {@code [0,2) [2,4) [4,6) [6,8)}. Stage 0
     *                    starts at layer 0, so there is one boundary fewer than stages.
     * @throws IllegalArgumentException for an unsupported network or boundaries that are not strictly
     *                                  increasing within {@code [1, layers - 1]}
     */
    public static PipelineStageSplit atBoundaries(MultiLayerNetwork network, int... stageStarts) {
        Objects.requireNonNull(stageStarts, "stageStarts");
        Layout layout = Layout.of(network);
        int layers = layout.layers();
        requireStageCount(stageStarts.length + 1, layers);
        int[] starts = new int[stageStarts.length + 2];
        for (int s = 0; s < stageStarts.length; s++) {
            int start = stageStarts[s];
            if (start < 1 || start > layers - 1) {
                throw new IllegalArgumentException("stage boundary " + s + " is layer " + start + ": expected a layer in [1, "
                        + (layers - 1) + "] (boundaries are the first layers of stages 1.." + stageStarts.length
                        + "; stage 0 starts at layer 0 and the network has " + layers + " layers); found boundaries "
                        + Arrays.toString(stageStarts));
            }
            if (s > 0 && start <= stageStarts[s - 1]) {
                throw new IllegalArgumentException("stage boundaries must be strictly increasing: boundary " + s + "="
                        + start + " expected > " + stageStarts[s - 1] + " (every stage needs at least one layer); found "
                        + Arrays.toString(stageStarts));
            }
            starts[s + 1] = start;
        }
        starts[starts.length - 1] = layers;
        return layout.split(network, starts);
    }

    /** Checks a stage count against the layer count, with the fix. */
    static void requireStageCount(int stages, int layers) {
        if (stages < 1) {
            throw new IllegalArgumentException("stages=" + stages + " expected stages >= 1");
        }
        if (stages > layers) {
            throw new IllegalArgumentException("stages=" + stages + " but the network has " + layers
                    + " layers: use at most " + layers + " stages (every stage needs at least one layer)");
        }
    }

    public int stageCount() {
        return stageStart.length - 1;
    }

    public int layerCount() {
        return stageStart[stageStart.length - 1];
    }

    /** The first layer of {@code stage}. */
    public int firstLayer(int stage) {
        return stageStart[checkStage(stage)];
    }

    /** One past the last layer of {@code stage}. */
    public int endLayer(int stage) {
        return stageStart[checkStage(stage) + 1];
    }

    /** Parameters of {@code stage}'s layers. */
    public long parameterCount(int stage) {
        return paramOffset[endLayer(stage)] - paramOffset[firstLayer(stage)];
    }

    /** Offset of {@code stage}'s parameters in the full network's flat parameter vector. */
    public long parameterOffset(int stage) {
        return paramOffset[firstLayer(stage)];
    }

    /** Width of {@code stage}'s input (its first layer's nIn): the activations it receives and the gradient it sends back. */
    public long inputWidth(int stage) {
        return nIn[firstLayer(stage)];
    }

    /** Width of {@code stage}'s output (its last layer's nOut). */
    public long outputWidth(int stage) {
        return nOut[endLayer(stage) - 1];
    }

    /** The network's data type: FLOAT or DOUBLE, also the element type of the messages between stages. */
    public DataType dataType() {
        return network.getLayerWiseConfigurations().getDataType();
    }

    /** Whether layer 0 has an input preprocessor (then stage 0's features need not be 2-D of width nIn). */
    boolean firstLayerHasPreProcessor() {
        return network.getLayerWiseConfigurations().getInputPreProcess(0) != null;
    }

    /**
     * Builds one network per stage from the original's layer configurations (cloned), with the
     * original's parameters for those layers, its updater state (Adam moments, momentum...) if it has
     * any, and its iteration and epoch counts. Stage networks train without DL4J workspaces: a stage
     * keeps several microbatches' layer inputs alive between forward and backward, which workspace
     * memory (recycled every pass) would overwrite.
     */
    public List<MultiLayerNetwork> buildStageNetworks() {
        MultiLayerConfiguration original = network.getLayerWiseConfigurations();
        List<MultiLayerNetwork> stages = new ArrayList<>(stageCount());
        for (int s = 0; s < stageCount(); s++) {
            int first = firstLayer(s);
            int end = endLayer(s);
            MultiLayerConfiguration conf = original.clone();
            conf.setConfs(new ArrayList<>(conf.getConfs().subList(first, end)));
            Map<Integer, InputPreProcessor> preProcessors = new HashMap<>();
            conf.getInputPreProcessors().forEach((layer, p) -> {
                if (layer >= first && layer < end) {
                    preProcessors.put(layer - first, p);
                }
            });
            conf.setInputPreProcessors(preProcessors);
            conf.setTrainingWorkspaceMode(WorkspaceMode.NONE);
            conf.setInferenceWorkspaceMode(WorkspaceMode.NONE);
            MultiLayerNetwork stage = new MultiLayerNetwork(conf);
            stage.init();
            stage.initGradientsView();
            if (stage.numParams() != parameterCount(s)) {
                throw new IllegalStateException("stage " + s + " network has numParams=" + stage.numParams() + " expected="
                        + parameterCount(s) + " (layers [" + first + ", " + end + ") of the original): a DL4J layer"
                        + " initialized differently on its own");
            }
            stage.params().assign(slice(network.params(), paramOffset[first], paramOffset[end]));
            UpdaterStateCopy.copy(network, paramOffset[first], stage, 0, parameterCount(s));
            stage.setIterationCount(network.getIterationCount());
            stage.setEpochCount(network.getEpochCount());
            stages.add(stage);
        }
        return stages;
    }

    /**
     * Writes the stage networks' parameters, updater state and counters into {@code target}, a network
     * with the same configuration as the one this split was made from (its own network included).
     *
     * @throws IllegalArgumentException when {@code target}'s layers or parameter counts differ
     */
    public void copyStagesInto(List<MultiLayerNetwork> stageNetworks, MultiLayerNetwork target) {
        Objects.requireNonNull(stageNetworks, "stageNetworks");
        Objects.requireNonNull(target, "target");
        if (stageNetworks.size() != stageCount()) {
            throw new IllegalArgumentException("got " + stageNetworks.size() + " stage networks expected=" + stageCount()
                    + " (one per stage, from buildStageNetworks())");
        }
        if (target.getLayers() == null) {
            target.init();
        }
        Layout theirs = Layout.of(target);
        if (theirs.layers() != layerCount()) {
            throw new IllegalArgumentException("target network has " + theirs.layers() + " layers expected=" + layerCount()
                    + " (copy into a network with the configuration the pipeline was built from)");
        }
        for (int i = 0; i < layerCount(); i++) {
            long expected = paramOffset[i + 1] - paramOffset[i];
            if (theirs.layerParams[i] != expected || theirs.nIn[i] != nIn[i] || theirs.nOut[i] != nOut[i]) {
                throw new IllegalArgumentException("target layer " + i + " has nIn=" + theirs.nIn[i] + " nOut="
                        + theirs.nOut[i] + " numParams=" + theirs.layerParams[i] + " expected nIn=" + nIn[i] + " nOut="
                        + nOut[i] + " numParams=" + expected
                        + " (copy into a network with the configuration the pipeline was built from)");
            }
        }
        for (int s = 0; s < stageCount(); s++) {
            MultiLayerNetwork stage = stageNetworks.get(s);
            if (stage.numParams() != parameterCount(s)) {
                throw new IllegalArgumentException("stage network " + s + " has numParams=" + stage.numParams()
                        + " expected=" + parameterCount(s) + " (pass the networks buildStageNetworks() returned, in order)");
            }
            slice(target.params(), parameterOffset(s), parameterOffset(s) + parameterCount(s)).assign(stage.params());
            UpdaterStateCopy.copy(stage, 0, target, parameterOffset(s), parameterCount(s));
        }
        target.setIterationCount(stageNetworks.getFirst().getIterationCount());
        target.setEpochCount(stageNetworks.getFirst().getEpochCount());
    }

    @Override
    public String toString() {
        StringBuilder text = new StringBuilder("PipelineStageSplit[");
        for (int s = 0; s < stageCount(); s++) {
            text.append(s == 0 ? "" : ", ").append("stage ").append(s).append(": layers [").append(firstLayer(s))
                    .append(", ").append(endLayer(s)).append(") params=").append(parameterCount(s));
        }
        return text.append(']').toString();
    }

    private int checkStage(int stage) {
        if (stage < 0 || stage >= stageCount()) {
            throw new IndexOutOfBoundsException("stage=" + stage + " expected in [0, " + stageCount() + ")");
        }
        return stage;
    }

    private static INDArray slice(INDArray flat, long from, long to) {
        return flat.reshape(flat.length()).get(NDArrayIndex.interval(from, to));
    }

    /**
     * Linear partition by minimax: {@code best[s][i]} is the smallest possible largest-stage parameter
     * count when the first {@code i} layers form {@code s} stages. Reconstructing from the end picks,
     * for each stage, the latest start that is still optimal (a fixed tie rule: deterministic, and the
     * later stages, which also hold the loss, get the fewer layers).
     */
    static int[] balancedStarts(long[] layerParams, int stages) {
        int layers = layerParams.length;
        long[] prefix = new long[layers + 1];
        for (int i = 0; i < layers; i++) {
            prefix[i + 1] = prefix[i] + layerParams[i];
        }
        long[][] best = new long[stages + 1][layers + 1];
        for (long[] row : best) {
            Arrays.fill(row, Long.MAX_VALUE);
        }
        best[0][0] = 0;
        for (int s = 1; s <= stages; s++) {
            for (int i = s; i <= layers; i++) {
                for (int j = s - 1; j < i; j++) {
                    if (best[s - 1][j] != Long.MAX_VALUE) {
                        best[s][i] = Math.min(best[s][i], Math.max(best[s - 1][j], prefix[i] - prefix[j]));
                    }
                }
            }
        }
        int[] starts = new int[stages + 1];
        starts[stages] = layers;
        int end = layers;
        for (int s = stages; s >= 1; s--) {
            long target = best[s][end];
            int chosen = -1;
            for (int j = end - 1; j >= s - 1; j--) {
                if (best[s - 1][j] != Long.MAX_VALUE && Math.max(best[s - 1][j], prefix[end] - prefix[j]) == target) {
                    chosen = j;
                    break;
                }
            }
            starts[s - 1] = chosen;
            end = chosen;
        }
        return starts;
    }

    /** Per-layer facts of a network, checked for what the pipeline supports. */
    private record Layout(long[] layerParams, long[] nIn, long[] nOut) {

        int layers() {
            return layerParams.length;
        }

        static Layout of(MultiLayerNetwork network) {
            Objects.requireNonNull(network, "network");
            if (network.getLayers() == null) {
                network.init();
            }
            MultiLayerConfiguration conf = network.getLayerWiseConfigurations();
            DataType type = conf.getDataType();
            if (type != DataType.FLOAT && type != DataType.DOUBLE) {
                throw new IllegalArgumentException("network dataType=" + type + " is not supported by pipeline stages:"
                        + " expected FLOAT or DOUBLE (build the network with .dataType(DataType.FLOAT))");
            }
            if (conf.getBackpropType() != BackpropType.Standard) {
                throw new IllegalArgumentException("network backpropType=" + conf.getBackpropType()
                        + " is not supported by pipeline stages: expected Standard (truncated BPTT is for recurrent layers)");
            }
            int layers = conf.getConfs().size();
            long[] params = new long[layers];
            long[] in = new long[layers];
            long[] out = new long[layers];
            for (int i = 0; i < layers; i++) {
                Layer layer = conf.getConf(i).getLayer();
                String name = "layer " + i + " (" + layer.getClass().getSimpleName() + " \"" + layer.getLayerName() + "\")";
                boolean last = i == layers - 1;
                Class<?> expected = last ? OutputLayer.class : DenseLayer.class;
                if (layer.getClass() != expected) {
                    throw new IllegalArgumentException(name + " is not supported " + (last ? "as the last layer" : "before the"
                            + " last layer") + " of a pipelined network: expected " + expected.getSimpleName() + " found "
                            + layer.getClass().getSimpleName() + " (pipeline stages support DenseLayer layers and one"
                            + " OutputLayer last, because stages exchange 2-D [microbatch x width] activations and the"
                            + " last stage computes the loss)");
                }
                if (layer.getIDropout() != null) {
                    throw new IllegalArgumentException(name + " has dropout=" + layer.getIDropout() + ": not supported in"
                            + " pipeline stages, expected none (DL4J keeps one dropout mask per layer, from its latest"
                            + " forward pass, and with several microbatches in flight a backward pass would use another"
                            + " microbatch's mask); remove dropout from the configuration");
                }
                if (((BaseLayer) layer).getWeightNoise() != null) {
                    throw new IllegalArgumentException(name + " has weightNoise=" + ((BaseLayer) layer).getWeightNoise()
                            + ": not supported in pipeline stages, expected none (DL4J keeps one noise sample per layer,"
                            + " from its latest forward pass); remove weight noise from the configuration");
                }
                if (i > 0 && conf.getInputPreProcess(i) != null) {
                    throw new IllegalArgumentException(name + " has an input preprocessor ("
                            + conf.getInputPreProcess(i).getClass().getSimpleName() + "): only layer 0 may have one in a"
                            + " pipelined network (between dense layers there is nothing to convert, and stages exchange"
                            + " 2-D [microbatch x width] activations)");
                }
                FeedForwardLayer ff = (FeedForwardLayer) layer;
                in[i] = ff.getNIn();
                out[i] = ff.getNOut();
                params[i] = network.getLayer(i).numParams();
            }
            return new Layout(params, in, out);
        }

        /** Checks that widths chain, naming the stages where a mismatch sits on a boundary, and makes the split. */
        PipelineStageSplit split(MultiLayerNetwork network, int[] starts) {
            for (int i = 1; i < layers(); i++) {
                if (nIn[i] != nOut[i - 1]) {
                    int stage = stageOf(starts, i);
                    String where = starts[stage] == i
                            ? " at the boundary between stage " + (stage - 1) + " (output width " + nOut[i - 1]
                            + ") and stage " + stage + " (input width " + nIn[i] + ")"
                            : " inside stage " + stage;
                    throw new IllegalArgumentException("layer widths do not chain" + where + ": layer " + i + " has nIn="
                            + nIn[i] + " expected nIn=" + nOut[i - 1] + " (layer " + (i - 1) + "'s nOut); fix nIn/nOut"
                            + " in the network configuration (setInputType(InputType.feedForward(n)) sets every nIn)");
                }
            }
            long[] offsets = new long[layers() + 1];
            for (int i = 0; i < layers(); i++) {
                offsets[i + 1] = offsets[i] + layerParams[i];
            }
            return new PipelineStageSplit(network, starts, offsets, nIn, nOut);
        }

        private static int stageOf(int[] starts, int layer) {
            int stage = 0;
            while (starts[stage + 1] <= layer) {
                stage++;
            }
            return stage;
        }
    }
}
