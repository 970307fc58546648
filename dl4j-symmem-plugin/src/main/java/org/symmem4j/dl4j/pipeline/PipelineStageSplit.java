package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;
import java.util.function.IntPredicate;
import java.util.stream.IntStream;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.conf.CacheMode;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.RNNFormat;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.conf.layers.BaseRecurrentLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.Convolution1DLayer;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.FeedForwardLayer;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.conf.layers.LossLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.conf.layers.recurrent.Bidirectional;
import org.deeplearning4j.nn.conf.layers.wrapper.BaseWrapperLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.InitialisationReplay;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.StageSplitSearch;

/**
 * How a {@link MultiLayerNetwork} is cut into pipeline stages: {@code stageCount} contiguous,
 * non-empty layer ranges, stage {@code s} running layers {@code [firstLayer(s), endLayer(s))}.
 * {@link #buildStageNetworks()} turns each range into a {@code MultiLayerNetwork} of its own with the
 * original's layer configurations (updater, seed, data type, regularization, constraints, gradient
 * normalization: everything a layer configuration carries) and exactly the original's parameters and
 * updater state for those layers; {@link #copyStagesInto} writes them back into a full network.
 *
 * <p>Supported networks: the layers {@link LayerSupport} lists (dense, convolution and subsampling
 * with 4-D activations, 1-D convolution, LSTM, simple RNN, {@code LastTimeStep} and
 * {@code Bidirectional} with 3-D activations and masks, global pooling, batch normalization, activation
 * and dropout layers) with their input preprocessors anywhere, and one output layer last; FLOAT or
 * DOUBLE; standard backprop; dropout on any layer (one mask per microbatch, {@link MicrobatchDropout});
 * no weight noise. Everything is checked when the split is made, before any training: unsupported
 * layers, too many stages, bad boundaries, and dense widths that do not chain (layer {@code i}'s nIn
 * must equal layer {@code i-1}'s nOut where both have them and no preprocessor sits between; at a
 * stage boundary that is the size of what the two stages exchange). The shapes of the activations
 * crossing each boundary follow from each batch's features through DL4J's input types
 * ({@link #boundaryShapes}).
 *
 * <p>Splits: {@link #balanced} balances parameter counts, which suits layers whose compute grows with
 * their parameters (dense layers); {@link #byCost} balances any per-layer cost, such as measured pass
 * times ({@link StageProfile}), which suits everything else: a convolution has few parameters and much
 * compute, an output layer computes the loss; {@link #byProfile} starts from that split and takes the one near it
 * whose simulated step, for the schedule that will run it, is shortest (what a split by measured times uses).
 */
public final class PipelineStageSplit {

    private final MultiLayerNetwork network;
    /** {@code stageStart[s]} is stage s's first layer; {@code stageStart[stageCount]} is the layer count. */
    private final int[] stageStart;
    /** {@code paramOffset[i]}: offset of layer i's parameters in the network's flat parameters; one extra entry at the end. */
    private final long[] paramOffset;
    private final long[] nIn;
    private final long[] nOut;
    /** See {@link #parameterElementsAllocated()}. */
    private long parameterElementsAllocated;

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
     *
     * @param stages  the number of stages, 1..layers
     * @return the split
     */
    public static PipelineStageSplit balanced(MultiLayerNetwork network, int stages) {
        return balanced(network, stages, layer -> true);
    }

    /**
     * As {@link #balanced(MultiLayerNetwork, int)}, with stages starting only at layers {@code canStart} accepts (layer 0
     * always): the best balance among those splits. For layers that must stay in one stage (a tensor-parallel block).
     *
     * @throws IllegalArgumentException when no such split has {@code stages} non-empty stages
     */
    static PipelineStageSplit balanced(MultiLayerNetwork network, int stages, IntPredicate canStart) {
        Layout layout = Layout.of(network);
        requireStageCount(stages, layout.layers());
        return layout.split(network, balancedStarts(layout.layerParams, stages, canStart));
    }

    /**
     * Splits {@code network} into {@code stages} ranges balanced by {@code layerCost}: the split whose
     * most expensive stage costs least, every stage at least one layer, ties as {@link #balanced}.
     *
     * @param layerCost one non-negative cost per layer, e.g. its measured forward plus backward time
     *                  ({@link StageProfile#layerNanos()})
     * @throws IllegalArgumentException for an unsupported network, more stages than layers, or costs
     *                                  that are not one per layer and non-negative
     *
     * @param network initialized (or it is initialized here)
     * @param stages  the number of stages, 1..layers
     * @return the split
     */
    public static PipelineStageSplit byCost(MultiLayerNetwork network, int stages, long[] layerCost) {
        return byCost(network, stages, layerCost, layer -> true);
    }

    /**
     * As {@link #byCost(MultiLayerNetwork, int, long[])}, with stages starting only at layers {@code canStart} accepts
     * (see {@link #balanced(MultiLayerNetwork, int, IntPredicate)}).
     */
    static PipelineStageSplit byCost(MultiLayerNetwork network, int stages, long[] layerCost, IntPredicate canStart) {
        Objects.requireNonNull(layerCost, "layerCost");
        Layout layout = Layout.of(network);
        requireStageCount(stages, layout.layers());
        if (layerCost.length != layout.layers()) {
            throw new IllegalArgumentException("layerCost has " + layerCost.length + " entries expected=" + layout.layers()
                    + " (fix: pass one cost per layer of the network)");
        }
        for (int i = 0; i < layerCost.length; i++) {
            if (layerCost[i] < 0) {
                throw new IllegalArgumentException("layerCost[" + i + "]=" + layerCost[i] + " expected >= 0"
                        + " (fix: pass each layer's relative cost, e.g. its measured time, as a number >= 0)");
            }
        }
        return layout.split(network, balancedStarts(layerCost, stages, canStart));
    }

    /**
     * Splits {@code network} by measured times for the schedule that will run it: the split balanced by forward plus
     * backward time ({@link #byCost} of {@link StageProfile#layerNanos()}), then the split near it whose step the
     * simulator, given the profile's per-stage times, finds shortest ({@link StageSplitSearch}). At layer granularity
     * the stages are rarely equal, and which of the nearly balanced splits runs fastest depends on the schedule and
     * the microbatch count (a fuller first stage fills the pipeline sooner; GPipe's output stage, which runs its
     * forward inside its backward, gains from fewer layers): never slower than the balanced split, by the simulator.
     *
     * @param network  initialized (or it is initialized here)
     * @param profile  the network's measured layer times
     * @param schedule the schedule the stages will run
     * @param shape    the pipeline it runs on: its stage count is the split's
     * @return the split
     * @throws IllegalArgumentException for an unsupported network, more stages than layers, or a profile of another
     *                                  layer count
     */
    public static PipelineStageSplit byProfile(MultiLayerNetwork network, StageProfile profile, Schedule schedule,
                                               PipelineShape shape) {
        return byProfile(network, profile, schedule, shape, layer -> true);
    }

    /**
     * As {@link #byProfile(MultiLayerNetwork, StageProfile, Schedule, PipelineShape)}, with stages starting only at
     * layers {@code canStart} accepts (see {@link #balanced(MultiLayerNetwork, int, IntPredicate)}).
     */
    static PipelineStageSplit byProfile(MultiLayerNetwork network, StageProfile profile, Schedule schedule,
                                        PipelineShape shape, IntPredicate canStart) {
        Objects.requireNonNull(profile, "profile");
        PipelineStageSplit balanced = byCost(network, shape.stageCount(), profile.layerNanos(), canStart);
        int[] starts = new int[balanced.stageCount() + 1];
        System.arraycopy(balanced.stageStart, 0, starts, 0, starts.length);
        int[] chosen = StageSplitSearch.search(starts, canStart, profile::stageDurationsMicros, schedule, shape);
        return Arrays.equals(chosen, starts) ? balanced
                : Layout.of(network).split(network, chosen);
    }

    /**
     * The most stages {@code network} can be cut into: one per layer.
     *
     * @param network the network
     * @return its layer count
     */
    public static int maxStages(MultiLayerNetwork network) {
        return Layout.of(network).layers();
    }

    /**
     * Splits {@code network} at user-given boundaries.
     *
     * @param stageStarts the first layer of stages 1, 2, ..., in increasing order: for 8 layers and 4
     *                    stages, {@code 2, 4, 6} gives layers {@code [0,2) [2,4) [4,6) [6,8)}. Stage 0
     *                    starts at layer 0, so there is one boundary fewer than stages.
     * @throws IllegalArgumentException for an unsupported network or boundaries that are not strictly
     *                                  increasing within {@code [1, layers - 1]}
     *
     * @param network initialized (or it is initialized here)
     * @return the split
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
                        + Arrays.toString(stageStarts) + " (fix: pass ascending boundaries in [1, " + (layers - 1)
                        + "], or let PipelineStageSplit.balanced(network, stages) pick them)");
            }
            if (s > 0 && start <= stageStarts[s - 1]) {
                throw new IllegalArgumentException("stage boundaries must be strictly increasing: boundary " + s + "="
                        + start + " expected > " + stageStarts[s - 1] + " (every stage needs at least one layer); found "
                        + Arrays.toString(stageStarts) + " (fix: list each stage's first layer once, in"
                        + " increasing order)");
            }
            starts[s + 1] = start;
        }
        starts[starts.length - 1] = layers;
        return layout.split(network, starts);
    }

    /** Checks a stage count against the layer count, with the fix. */
    static void requireStageCount(int stages, int layers) {
        if (stages < 1) {
            throw new IllegalArgumentException("stages=" + stages + " expected stages >= 1 (fix: pass the"
                    + " number of pipeline stages, e.g. 2)");
        }
        if (stages > layers) {
            throw new IllegalArgumentException("stages=" + stages + " but the network has " + layers
                    + " layers; fix: use at most " + layers + " stages (every stage needs at least one layer)");
        }
    }

    /**
     * The number of stages.
     *
     * @return stages, at least 1
     */
    public int stageCount() {
        return stageStart.length - 1;
    }

    /**
     * The number of layers over all stages.
     *
     * @return the network's layers
     */
    public int layerCount() {
        return stageStart[stageStart.length - 1];
    }

    /**
     * The first layer of {@code stage}.
     *
     * @param stage the stage, 0..stageCount-1
     * @return its first layer index
     * @throws IndexOutOfBoundsException when there is no such stage
     */
    public int firstLayer(int stage) {
        return stageStart[checkStage(stage)];
    }

    /**
     * One past the last layer of {@code stage}.
     *
     * @param stage the stage, 0..stageCount-1
     * @return its end layer index (exclusive)
     * @throws IndexOutOfBoundsException when there is no such stage
     */
    public int endLayer(int stage) {
        return stageStart[checkStage(stage) + 1];
    }

    /**
     * Parameters of {@code stage}'s layers.
     *
     * @param stage the stage, 0..stageCount-1
     * @return parameters (elements)
     */
    public long parameterCount(int stage) {
        return paramOffset[endLayer(stage)] - paramOffset[firstLayer(stage)];
    }

    /**
     * Offset of {@code stage}'s parameters in the full network's flat parameter vector.
     *
     * @param stage the stage, 0..stageCount-1
     * @return the offset, in elements
     */
    public long parameterOffset(int stage) {
        return paramOffset[firstLayer(stage)];
    }

    /** Layer {@code layer}'s configuration in the network the split was made from. */
    org.deeplearning4j.nn.conf.layers.Layer layerConf(int layer) {
        return network.getLayerWiseConfigurations().getConf(layer).getLayer();
    }

    /**
     * The sum of {@code layerCost} over {@code stage}'s layers.
     *
     * @param stage     the stage, 0..stageCount-1
     * @param layerCost one cost per layer of the network
     * @return the stage's cost
     */
    public long cost(int stage, long[] layerCost) {
        long sum = 0;
        for (int i = firstLayer(stage); i < endLayer(stage); i++) {
            sum += layerCost[i];
        }
        return sum;
    }

    /**
     * The boundaries as {@link #atBoundaries} takes them: the first layer of stages 1, 2, ....
     *
     * @return a copy of the boundaries
     */
    public int[] stageStarts() {
        return Arrays.copyOfRange(stageStart, 1, stageStart.length - 1);
    }

    /**
     * The network's data type: FLOAT or DOUBLE, also the element type of the messages between stages.
     *
     * @return FLOAT or DOUBLE
     */
    public DataType dataType() {
        return network.getLayerWiseConfigurations().getDataType();
    }

    /**
     * The network's input type for {@code features} (one microbatch's, or a batch's): the user's
     * {@code declared} type with the time-series length taken from the features when it is not
     * fixed, or else inferred from the features' rank in the layout the first layer expects (NCHW or
     * NHWC images, NCW or NWC sequences).
     *
     * @throws IllegalArgumentException when the features do not have the declared type's shape
     */
    InputType inputTypeOf(INDArray features, InputType declared) {
        if (declared != null) {
            return declaredWithFeatures(declared, features);
        }
        MultiLayerConfiguration conf = network.getLayerWiseConfigurations();
        Layer first = conf.getConf(0).getLayer();
        Layer inner = first instanceof BaseWrapperLayer w ? w.getUnderlying()
                : first instanceof Bidirectional b ? b.getFwd() : first;
        return switch (features.rank()) {
            case 2 -> InputType.feedForward(features.size(1));
            case 3 -> {
                RNNFormat format = inner instanceof Convolution1DLayer c ? c.getRnnDataFormat()
                        : inner instanceof BaseRecurrentLayer r && r.getRnnDataFormat() != null ? r.getRnnDataFormat()
                        : RNNFormat.NCW;
                yield format == RNNFormat.NWC ? InputType.recurrent(features.size(2), features.size(1), RNNFormat.NWC)
                        : InputType.recurrent(features.size(1), features.size(2), RNNFormat.NCW);
            }
            case 4 -> {
                CNN2DFormat format = inner instanceof ConvolutionLayer c ? c.getCnn2dDataFormat()
                        : inner instanceof SubsamplingLayer p ? p.getCnn2dDataFormat()
                        : inner instanceof BatchNormalization b ? b.getCnn2DFormat() : CNN2DFormat.NCHW;
                yield format == CNN2DFormat.NHWC
                        ? InputType.convolutional(features.size(1), features.size(2), features.size(3), CNN2DFormat.NHWC)
                        : InputType.convolutional(features.size(2), features.size(3), features.size(1), CNN2DFormat.NCHW);
            }
            default -> throw new IllegalArgumentException("the batch's features have shape "
                    + Arrays.toString(features.shape()) + ": expected rank 2 (dense), 3 (sequences) or 4 (images)"
                    + " (fix: give the iterator features of shape [batch, n], [batch, n, time] or [batch, c, h, w])");
        };
    }

    private static InputType declaredWithFeatures(InputType declared, INDArray features) {
        long[] expected = declared.getShape(false);
        if (declared instanceof InputType.InputTypeRecurrent r && r.getTimeSeriesLength() <= 0 && features.rank() == 3) {
            long steps = features.size(r.getFormat() == RNNFormat.NWC ? 1 : 2);
            declared = InputType.recurrent(r.getSize(), steps, r.getFormat());
            expected = declared.getShape(false);
        }
        long[] found = Arrays.copyOfRange(features.shape(), 1, features.rank());
        if (!Arrays.equals(expected, found)) {
            throw new IllegalArgumentException("the batch's features have per-example shape " + Arrays.toString(found)
                    + " expected=" + Arrays.toString(expected) + " (the builder's inputType " + declared
                    + "); fix: give features of that shape, or the input type that matches them");
        }
        return declared;
    }

    /**
     * The per-example shape of every stage's output for a microbatch with {@code input} (stage
     * {@code s}'s output for {@code s < stageCount - 1}; the last entry is the network's output), from
     * DL4J's input types, checking on the way what DL4J would only fail on inside a training pass.
     *
     * @throws IllegalArgumentException when a layer does not accept what reaches it, naming the layer,
     *                                  the type and the fix
     */
    long[][] boundaryShapes(InputType input) {
        GraphWiring graph = GraphLayerNetwork.wiringOf(network);
        if (graph != null) {
            return graph.boundaryShapes(input, stageStart); // each stage's last vertex: a cut vertex, or the output
        }
        MultiLayerConfiguration conf = network.getLayerWiseConfigurations();
        long[][] shapes = new long[stageCount()][];
        InputType current = input;
        int stage = 0;
        for (int i = 0; i < layerCount(); i++) {
            Layer layer = conf.getConf(i).getLayer();
            try {
                InputPreProcessor pre = conf.getInputPreProcess(i);
                if (pre != null) {
                    current = pre.getOutputType(current);
                }
                requireAccepts(i, layer, current);
                InputType in = current;
                current = layer.getOutputType(i, current);
                if (layer instanceof LossLayer) {
                    current = in; // a loss layer outputs its input's shape; its getOutputType reports nOut, which it lacks
                } else if (current instanceof InputType.InputTypeRecurrent out && out.getTimeSeriesLength() <= 0
                        && in instanceof InputType.InputTypeRecurrent r && r.getTimeSeriesLength() > 0) {
                    // some recurrent layers (Bidirectional) drop the length they keep: a sequence stays as long
                    current = InputType.recurrent(out.getSize(), r.getTimeSeriesLength(), out.getFormat());
                }
            } catch (IllegalArgumentException | IllegalStateException | UnsupportedOperationException e) {
                throw new IllegalArgumentException("layer " + i + " (" + layer.getClass().getSimpleName() + ") does not"
                        + " accept input type " + current + " (the network's input: " + input + "): " + e.getMessage()
                        + " (fix: check the features' shape, or give"
                        + " PipelineParallelTrainerBuilder.inputType(...))", e);
            }
            if (i == endLayer(stage) - 1) {
                shapes[stage++] = current.getShape(false);
            }
        }
        return shapes;
    }

    /** What DL4J itself fails on only inside a pass, named before anything runs. */
    private void requireAccepts(int index, Layer layer, InputType in) {
        long size = switch (in) {
            case InputType.InputTypeFeedForward f -> f.getSize();
            case InputType.InputTypeRecurrent r -> r.getSize();
            case InputType.InputTypeConvolutional c -> c.getChannels();
            default -> -1;
        };
        if (layer instanceof FeedForwardLayer ff && !(layer instanceof BatchNormalization) && ff.getNIn() > 0 && size >= 0
                && size != ff.getNIn()) {
            throw new IllegalArgumentException("layer " + index + " has nIn=" + ff.getNIn() + " but gets size=" + size
                    + " (" + in + "); fix: set layer " + index + "'s nIn(" + size + "), or setInputType(...) on the"
                    + " configuration so DL4J sets every nIn");
        }
        if (layer instanceof BatchNormalization && in instanceof InputType.InputTypeRecurrent) {
            throw new IllegalArgumentException("DL4J's BatchNormalization backpropagates 2-D and 4-D activations only,"
                    + " not sequences (" + in + "); fix: move the BatchNormalization to 2-D or 4-D activations (after"
                    + " the recurrent part, e.g. behind a LastTimeStep), or remove it");
        }
    }

    /**
     * Builds one network per stage from the original's layer configurations (cloned), with the
     * original's parameters for those layers, its updater state (Adam moments, momentum...) if it has
     * any, and its iteration and epoch counts. Stage networks train without DL4J workspaces: a stage
     * keeps several microbatches' layer inputs alive between forward and backward, which workspace
     * memory (recycled every pass) would overwrite.
     *
     * @return one network per stage, in stage order
     * @throws IllegalStateException when a stage's network, built on its own from the original's layer
     *                               configurations, does not have the parameter count of those layers in
     *                               the original (a DL4J layer that initializes differently alone), or its
     *                               updater state cannot be laid over the original's (the updaters' blocks
     *                               or state sizes differ, or one has state and the other none)
     */
    public List<MultiLayerNetwork> buildStageNetworks() {
        List<MultiLayerNetwork> stages = new ArrayList<>(stageCount());
        for (int s = 0; s < stageCount(); s++) {
            stages.add(buildHeldStage(s, true));
        }
        return stages;
    }

    /**
     * The pipeline stages one rank builds: those {@code held} selects as {@link #buildStageNetworks()} builds them
     * (parameters, updater state, gradient views: the memory of their layers), every other one hollow
     * ({@link HollowNetworks}): its layers, flat layout, updater blocks and mask propagation without a single element,
     * so the rank holds only its own stages' share of the model.
     *
     * @param held  which stages this rank trains
     * @param draws null to copy the held stages' state from the split's network; for a model started from its
     *              configuration, the replay of DL4J's initialisation of that model
     *              ({@link InitialisationReplay}), which draws the held stages' parameters as DL4J's {@code init()}
     *              of the whole model would: fresh updater state, the network's counters
     * @return every stage, in stage order
     */
    List<Dl4jPipelineStage> buildStages(IntPredicate held, Consumer<InitialisationReplay.Target> draws) {
        List<Dl4jPipelineStage> stages = new ArrayList<>(stageCount());
        MultiLayerNetwork[] initialised = new MultiLayerNetwork[stageCount()];
        for (int s = 0; s < stageCount(); s++) {
            if (held.test(s)) {
                initialised[s] = buildHeldStage(s, draws == null);
                parameterElementsAllocated += initialised[s].numParams();
                Dl4jPipelineStage stage = new Dl4jPipelineStage(s, stageCount(), initialised[s]);
                if (network instanceof GraphLayerNetwork g) {
                    stage.graph(new GraphStagePasses(g.wiring(), firstLayer(s), endLayer(s)));
                }
                stages.add(stage);
            } else {
                MultiLayerNetwork hollow = new MultiLayerNetwork(stageConfiguration(s));
                HollowNetworks.Reservation reservation = HollowNetworks.hollow(hollow);
                requireParameterCount(s, hollow);
                hollow.setIterationCount(network.getIterationCount());
                hollow.setEpochCount(network.getEpochCount());
                stages.add(Dl4jPipelineStage.hollow(s, stageCount(), hollow, reservation));
            }
        }
        if (draws != null) {
            initialiseAsDl4j(initialised, draws);
        }
        return List.copyOf(stages);
    }

    /**
     * A new network of stage {@code s} with its own parameters, updater state and gradient view (values as DL4J
     * initialises them, not the split's network's): scratch for a stage's state received from the rank that trains it.
     */
    MultiLayerNetwork newStageNetwork(int s) {
        return buildHeldStage(s, false);
    }

    /**
     * The parameter elements {@link #buildStages} allocated so far: the held stages' parameter vectors and the
     * replay's scratch buffer (one layer: the largest of those not held), never the whole model's vector. What a rank
     * of a model started from its configuration ever holds of the model's parameters.
     */
    long parameterElementsAllocated() {
        return parameterElementsAllocated;
    }

    /**
     * The held stages' parameters as DL4J's {@code init()} of the whole model draws them, without holding the whole
     * model: {@code draws} replays DL4J's draws in DL4J's order ({@link InitialisationReplay}); a held stage's layer
     * draws into its view of the stage's parameters, any other layer into a scratch buffer of one layer. The peak is
     * the held stages plus the largest other layer.
     */
    private void initialiseAsDl4j(MultiLayerNetwork[] held, Consumer<InitialisationReplay.Target> draws) {
        DataType type = network.getLayerWiseConfigurations().getDataType();
        INDArray[] scratch = new INDArray[1];
        try {
            draws.accept(new InitialisationReplay.Target() {
                @Override
                public INDArray view(int position, long offset, long length) {
                    int i = layerAt(offset, length);
                    int s = Layout.stageOf(stageStart, i);
                    if (held[s] != null) {
                        long at = offset - paramOffset[firstLayer(s)];
                        return slice(held[s].params(), at, at + length);
                    }
                    if (scratch[0] == null || scratch[0].length() < length) {
                        parameterElementsAllocated += length - (scratch[0] == null ? 0 : scratch[0].length());
                        release(scratch[0]);
                        scratch[0] = org.nd4j.linalg.factory.Nd4j.create(type, length);
                    }
                    return scratch[0].get(NDArrayIndex.interval(0, length));
                }
            });
        } finally {
            // the scratch is garbage now; freed here, not when a garbage collection happens to find it (a 128 MB heap
            // of few objects may not collect for many steps), so a rank's resident set holds its stages only
            release(scratch[0]);
        }
    }

    /** Frees {@code array}'s memory now (ND4J would free it only once the garbage collector finds it unreachable). */
    private static void release(INDArray array) {
        if (array != null && array.closeable()) {
            array.close();
        }
    }

    /** The layer whose parameters are elements {@code [offset, offset + length)} of the flat vector ({@code length > 0}). */
    private int layerAt(long offset, long length) {
        for (int i = 0; i < layerCount(); i++) {
            if (paramOffset[i] == offset && paramOffset[i + 1] - paramOffset[i] == length) {
                return i;
            }
        }
        throw Invariants.violated("DL4J's initialisation drew elements [" + offset + ", " + (offset + length) + "),"
                + " which are no layer's parameters in the split's layout " + Arrays.toString(paramOffset));
    }

    /**
     * Stage {@code s}'s network with its own parameters, updater state and gradient view, and the network's counters;
     * its state copied from the network when {@code copied}, else as drawn here (drawn again by
     * {@link #initialiseAsDl4j}, in the whole model's order) with a fresh updater.
     */
    private MultiLayerNetwork buildHeldStage(int s, boolean copied) {
        MultiLayerNetwork stage = new MultiLayerNetwork(stageConfiguration(s));
        stage.init();
        requireParameterCount(s, stage);
        if (parameterCount(s) > 0) {
            stage.initGradientsView();
            if (copied) {
                stage.params().assign(slice(network.params(), paramOffset[firstLayer(s)], paramOffset[endLayer(s)]));
                UpdaterStateCopy.copy(network, paramOffset[firstLayer(s)], stage, 0, parameterCount(s));
            }
        }
        stage.setIterationCount(network.getIterationCount());
        stage.setEpochCount(network.getEpochCount());
        return stage;
    }

    private void requireParameterCount(int s, MultiLayerNetwork stage) {
        if (stage.numParams() != parameterCount(s)) {
            throw Invariants.violated("stage " + s + " network has numParams=" + stage.numParams() + " expected="
                    + parameterCount(s) + " (layers [" + firstLayer(s) + ", " + endLayer(s) + ") of the original): a DL4J"
                    + " layer initialized differently on its own");
        }
    }

    /**
     * Stage {@code s}'s configuration: the original's layer configurations (cloned) of its range, the preprocessors
     * in front of them, no workspaces, no cache, and a per-microbatch dropout where a layer has dropout.
     */
    private MultiLayerConfiguration stageConfiguration(int s) {
        int first = firstLayer(s);
        int end = endLayer(s);
        MultiLayerConfiguration conf = network.getLayerWiseConfigurations().clone();
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
        // no layer may keep a forward's results for the backward beyond what LayerSupport replays
        conf.setCacheMode(CacheMode.NONE);
        for (int i = 0; i < conf.getConfs().size(); i++) {
            conf.getConf(i).setCacheMode(CacheMode.NONE);
            Layer layer = conf.getConf(i).getLayer();
            if (layer.getIDropout() != null) {
                layer.setIDropout(new MicrobatchDropout(layer.getIDropout(), conf.getConf(i).getSeed(), first + i));
            }
        }
        return conf;
    }

    /**
     * Writes the stage networks' parameters, updater state and counters into {@code target}, a network
     * with the same configuration as the one this split was made from (its own network included).
     *
     * @throws IllegalArgumentException when {@code target}'s layers or parameter counts differ
     *
     * @param stageNetworks the stage networks, in stage order, as {@link #buildStageNetworks()} made them
     * @param target        the network to write into
     */
    public void copyStagesInto(List<MultiLayerNetwork> stageNetworks, MultiLayerNetwork target) {
        Objects.requireNonNull(stageNetworks, "stageNetworks");
        Objects.requireNonNull(target, "target");
        if (stageNetworks.size() != stageCount()) {
            throw new IllegalArgumentException("got " + stageNetworks.size() + " stage networks expected=" + stageCount()
                    + " (fix: pass one per stage, from buildStageNetworks())");
        }
        requireSameLayers(target);
        for (int s = 0; s < stageCount(); s++) {
            MultiLayerNetwork stage = stageNetworks.get(s);
            if (stage.numParams() != parameterCount(s)) {
                throw new IllegalArgumentException("stage network " + s + " has numParams=" + stage.numParams()
                        + " expected=" + parameterCount(s) + " (fix: pass the networks buildStageNetworks() returned, in order)");
            }
            if (parameterCount(s) == 0) {
                continue;
            }
            slice(target.params(), parameterOffset(s), parameterOffset(s) + parameterCount(s)).assign(stage.params());
            UpdaterStateCopy.copy(stage, 0, target, parameterOffset(s), parameterCount(s));
        }
        target.setIterationCount(stageNetworks.getFirst().getIterationCount());
        target.setEpochCount(stageNetworks.getFirst().getEpochCount());
    }

    /**
     * Checks that {@code target} (initialised here if it is not) has this split's layers with their widths and
     * parameter counts: a network of the configuration the split was made from.
     *
     * @throws IllegalArgumentException when its layers or parameter counts differ
     */
    void requireSameLayers(MultiLayerNetwork target) {
        if (target.getLayers() == null) {
            target.init();
        }
        Layout theirs = Layout.of(target);
        if (theirs.layers() != layerCount()) {
            throw new IllegalArgumentException("target network has " + theirs.layers() + " layers expected=" + layerCount()
                    + " (fix: copy into a network with the configuration the pipeline was built from)");
        }
        for (int i = 0; i < layerCount(); i++) {
            long expected = paramOffset[i + 1] - paramOffset[i];
            if (theirs.layerParams[i] != expected || theirs.nIn[i] != nIn[i] || theirs.nOut[i] != nOut[i]) {
                throw new IllegalArgumentException("target layer " + i + " has nIn=" + theirs.nIn[i] + " nOut="
                        + theirs.nOut[i] + " numParams=" + theirs.layerParams[i] + " expected nIn=" + nIn[i] + " nOut="
                        + nOut[i] + " numParams=" + expected
                        + " (fix: copy into a network with the configuration the pipeline was built from)");
            }
        }
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
            throw new IndexOutOfBoundsException("stage=" + stage + " expected in [0, " + stageCount() + "); fix: pass a"
                    + " stage from 0 to stageCount()-1=" + (stageCount() - 1));
        }
        return stage;
    }

    static INDArray slice(INDArray flat, long from, long to) {
        return flat.reshape(flat.length()).get(NDArrayIndex.interval(from, to));
    }

    /**
     * Linear partition by minimax: {@code best[s][i]} is the smallest possible largest-stage parameter
     * count when the first {@code i} layers form {@code s} stages. Reconstructing from the end picks,
     * for each stage, the latest start that is still optimal (a fixed tie rule: deterministic, and the
     * later stages, which also hold the loss, get the fewer layers).
     */
    static int[] balancedStarts(long[] layerParams, int stages) {
        return balancedStarts(layerParams, stages, layer -> true);
    }

    /**
     * As {@link #balancedStarts(long[], int)}, every stage after the first starting at a layer {@code canStart} accepts.
     *
     * @throws IllegalArgumentException when too few layers may start a stage
     */
    static int[] balancedStarts(long[] layerParams, int stages, IntPredicate canStart) {
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
                    if (best[s - 1][j] != Long.MAX_VALUE && (j == 0 || canStart.test(j))) {
                        best[s][i] = Math.min(best[s][i], Math.max(best[s - 1][j], prefix[i] - prefix[j]));
                    }
                }
            }
        }
        if (best[stages][layers] == Long.MAX_VALUE) {
            throw new IllegalArgumentException("stages=" + stages + " expected at most " + (1 + IntStream.range(1, layers)
                    .filter(canStart).count()) + ": only that many of the network's " + layers + " layers may start a"
                    + " stage (the others are inside a tensor-parallel block, which stays in one stage); fix: use at most " + (1 + IntStream.range(1, layers)
                    .filter(canStart).count()) + " stages");
        }
        int[] starts = new int[stages + 1];
        starts[stages] = layers;
        int end = layers;
        for (int s = stages; s >= 1; s--) {
            long target = best[s][end];
            int chosen = -1;
            for (int j = end - 1; j >= s - 1; j--) {
                if (best[s - 1][j] != Long.MAX_VALUE && (j == 0 || canStart.test(j))
                        && Math.max(best[s - 1][j], prefix[end] - prefix[j]) == target) {
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
                        + " expected FLOAT or DOUBLE (fix: build the network with .dataType(DataType.FLOAT))");
            }
            if (conf.getBackpropType() != BackpropType.Standard) {
                throw new IllegalArgumentException("network backpropType=" + conf.getBackpropType()
                        + " is not supported by pipeline stages: expected Standard (truncated BPTT is for"
                        + " recurrent layers; fix: remove"
                    + " backpropType(TruncatedBPTT) from the configuration)");
            }
            int layers = conf.getConfs().size();
            long[] params = new long[layers];
            long[] in = new long[layers];
            long[] out = new long[layers];
            for (int i = 0; i < layers; i++) {
                Layer layer = conf.getConf(i).getLayer();
                GradientNormalization normalization = layer instanceof BaseLayer b ? b.getGradientNormalization() : null;
                LayerSupport.check(i, layer, i == layers - 1, normalization);
                // widths chain only between layers that both have them and nothing converts in between
                // (a graph's layers in topological order do not chain: its wiring says what each reads)
                boolean hasWidths = layer instanceof FeedForwardLayer && !(layer instanceof BatchNormalization)
                        && !(network instanceof GraphLayerNetwork);
                in[i] = hasWidths && conf.getInputPreProcess(i) == null ? ((FeedForwardLayer) layer).getNIn() : -1;
                out[i] = hasWidths ? ((FeedForwardLayer) layer).getNOut() : -1;
                params[i] = network.getLayer(i).numParams();
            }
            return new Layout(params, in, out);
        }

        /** Checks that widths chain, naming the stages where a mismatch sits on a boundary, and makes the split. */
        PipelineStageSplit split(MultiLayerNetwork network, int[] starts) {
            if (network instanceof GraphLayerNetwork g) {
                g.wiring().requireStarts(Arrays.copyOfRange(starts, 1, starts.length - 1)); // stages start at cut vertices
            }
            for (int i = 1; i < layers(); i++) {
                if (nIn[i] > 0 && nOut[i - 1] > 0 && nIn[i] != nOut[i - 1]) {
                    int stage = stageOf(starts, i);
                    String where = starts[stage] == i
                            ? " at the boundary between stage " + (stage - 1) + " (output width " + nOut[i - 1]
                            + ") and stage " + stage + " (input width " + nIn[i] + ")"
                            : " inside stage " + stage;
                    throw new IllegalArgumentException("layer widths do not chain" + where + ": layer " + i + " has nIn="
                            + nIn[i] + " expected nIn=" + nOut[i - 1] + " (layer " + (i - 1) + "'s nOut); fix: set nIn/nOut"
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
