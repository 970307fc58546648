package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.MaskState;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.normalization.BatchNormalization;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.dl4j.HollowNetworks;
import org.symmem4j.dl4j.OptimizerStateShard;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.layers.Splittable;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.pipeline.exec.StageCompute;

/**
 * One pipeline stage backed by a DL4J {@link MultiLayerNetwork} holding a contiguous range of the full
 * network's layers (from {@link PipelineStageSplit#buildStageNetworks()}), computing with DL4J's own
 * layers: forward with {@code Layer.activate} after each layer's input preprocessor, as DL4J's training
 * forward does; backward with {@link MultiLayerNetwork#backpropGradient} (the last stage:
 * {@link MultiLayerNetwork#calculateGradients}, which also gives the loss's gradient with respect to
 * the stage input), and the update with the network's own updater.
 *
 * <p><b>Exactness.</b> DL4J's gradient is a sum over examples, divided by the minibatch size inside
 * the updater. A stage adds up its microbatches' gradients and, in {@link #step()}, runs its updater
 * once on that sum with the <em>whole batch's</em> example count, then subtracts the update from the
 * parameters as DL4J's {@code StochasticGradientDescent} does, advances the iteration counter and
 * applies constraints. Every stage of a split network thus does what one {@code fit} of the whole
 * network on the whole batch does to those layers, up to the order in which sums are added — for
 * every layer whose examples do not interact. Two kinds do, and are defined per microbatch:
 * batch normalization ({@link BatchNormRunningStats}) and dropout ({@link MicrobatchDropout}).
 *
 * <p><b>Several microbatches in flight.</b> Forward keeps each microbatch's layer inputs until that
 * microbatch's backward; before the backward the stage gives every layer its input and masks again,
 * and runs the forward of layers that keep more than their input for the backward again
 * ({@link LayerSupport}). The last stage keeps only its input and runs its forward inside backward,
 * where DL4J computes the loss. Masks reach the stage as {@link StepPlan#inputMasks()}; messages are
 * row-major arrays whose shapes the plan gives ({@link Messages}).
 *
 * <p><b>Split backward (ZB-H1).</b> {@link #backwardInput} and {@link #backwardWeight} split the backward for
 * {@link PipelineSchedule#ZERO_BUBBLE_H1}: the stage's dense, output and 2-D convolution layers become
 * {@link SplitBackward}'s, which leave {@code dW} and {@code db} to the weight pass; each layer's gradient joins the
 * step's sum when it is computed, in microbatch order, so the step equals 1F1B's bitwise.
 *
 * <p>Call {@link #beginStep} before every step; then the executor calls forward and backward for every
 * microbatch and {@link #step()} once, all on one thread.
 */
public final class Dl4jPipelineStage implements StageCompute {

    private static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);

    private final int stage;
    private final boolean first;
    private final boolean last;
    private final MultiLayerNetwork network;
    private final Layer[] layers;
    private final MultiLayerConfiguration conf;
    private final DataType dataType;
    private final LayerSupport.Kind[] kinds;
    /** The reserved memory under a stage that another rank trains ({@link #held()} false), or null. */
    private final HollowNetworks.Reservation hollow;
    private final List<MicrobatchDropout> dropouts = new ArrayList<>();
    private final List<BatchNormRunningStats> batchNorms = new ArrayList<>();
    /** Arrays outside any DL4J workspace: kept across calls (the network trains with WorkspaceMode.NONE too). */
    private final LayerWorkspaceMgr workspaces = LayerWorkspaceMgr.noWorkspaces();
    /** Sum of this step's microbatch gradients, laid out like the network's flat gradient view; null without parameters. */
    private final INDArray accumulatedGradient;

    /** The other replicas of this stage (data parallelism), or null when this stage has none. */
    private ArrayCollectives dataParallel;
    /** ZeRO stage 1 or 2 over the replicas ({@link #shard}), or null: installed at the first step, then kept. */
    private ZeroStage sharding;
    /** This replica's block of the stage's updater state once {@link #shard} installed it, or null. */
    private OptimizerStateShard optimizerShard;
    /** This stage's rank in its tensor-parallel group (a shard's stage), or -1 for a stage of the whole network. */
    private int tensorParallelRank = -1;
    private StepPlan plan;
    /** The stage's part of a graph with branches, which runs in place of the layer chain ({@link #graph}), or null. */
    private GraphStagePasses graph;
    /** By microbatch: the stage's input, from forward until backward. */
    private INDArray[] stageInputs = new INDArray[0];
    /** By microbatch and layer: each layer's input (after its preprocessor), from forward until backward. */
    private INDArray[][] layerInputs = new INDArray[0][];
    private int backwardsThisStep;
    /** By layer: how many microbatches' gradients of the layer the step's gradient holds. */
    private int[] layerSums = new int[0];
    /** By layer, once the stage ran an input-gradient pass: the split implementation in DL4J's place, or null. */
    private Splittable[] splits;
    /** By microbatch and layer: what the weight-gradient pass needs, from the input-gradient pass until it runs. */
    private Splittable.Deferred[][] deferred = new Splittable.Deferred[0][];
    private long weightPasses;
    /** The gradient DL4J's backprop returned: per-parameter views of the flat gradient view, which the updater expects. */
    private Gradient gradientViews;
    /** The last array handed out as a message: keeps its memory alive until the next call. */
    private INDArray message;
    /**
     * By microbatch: the array its received activation was copied into (the link slot is given back after the call,
     * and the stage keeps its input until the microbatch's backward), until the microbatch's backward ends (ZB-H1:
     * its weight pass, which reads the layers' kept inputs). Null on stage 0, whose input is the batch's features.
     */
    private INDArray[] heldActivations = new INDArray[0];
    /**
     * By microbatch: the array its received gradient was copied into, held likewise: a split backward's weight pass may
     * keep a layer's {@code dZ}, which for an identity activation is this array itself, until the microbatch's W.
     */
    private INDArray[] heldGradients = new INDArray[0];
    /**
     * Received-message arrays no microbatch holds, for the next message of their shape: as many as were held at once
     * at most (the microbatches in flight), reused step after step. DL4J keeps no reference to one that it reads
     * after the microbatch's passes (layers' input fields are set again before every pass), so nothing reads an
     * array after it is overwritten.
     */
    private final List<INDArray> spareHandoffs = new ArrayList<>();
    /**
     * By direction (0 forward, 1 backward): the stage's own row-major copy of an output that DL4J left in another
     * order, reused for the next such output of the same shape (the executor has sent the last one by then). Only
     * arrays this stage made go here, never DL4J's own: those may be kept as a later layer's or microbatch's input.
     */
    private final INDArray[] sendCopies = new INDArray[2];
    /** Arrays made for hand-offs (received messages, row-major copies to send) since the stage was made. */
    private long handoffArrays;
    private double lossSum;
    private double dataLoss = Double.NaN;
    private double regularizationScore = Double.NaN;

    /**
     * One stage of a DL4J network for the pipeline executor.
     *
     * @param stage      this stage's index
     * @param stageCount the number of stages (the last one computes the loss)
     * @param network    the stage's network: an output layer last exactly when this is the last stage
     */
    public Dl4jPipelineStage(int stage, int stageCount, MultiLayerNetwork network) {
        this(stage, stageCount, network, null);
    }

    /**
     * A stage that another rank trains, over a hollow network ({@link HollowNetworks}): it has the stage's layers,
     * parameter layout, updater layout and mask propagation, and holds none of its memory. It cannot compute; the
     * trainer reads its layouts (to gather the stage from the rank that trains it) and propagates masks through it.
     */
    static Dl4jPipelineStage hollow(int stage, int stageCount, MultiLayerNetwork network,
                                    HollowNetworks.Reservation reservation) {
        return new Dl4jPipelineStage(stage, stageCount, network, Objects.requireNonNull(reservation, "reservation"));
    }

    private Dl4jPipelineStage(int stage, int stageCount, MultiLayerNetwork network, HollowNetworks.Reservation hollow) {
        this.hollow = hollow;
        if (stage < 0 || stage >= stageCount) {
            throw new IllegalArgumentException("stage=" + stage + " expected in [0, stageCount=" + stageCount + "); fix:"
                    + " pass a stage from 0 to stageCount-1");
        }
        this.stage = stage;
        this.first = stage == 0;
        this.last = stage == stageCount - 1;
        this.network = Objects.requireNonNull(network, "network");
        if (network.getLayers() == null) {
            network.init();
        }
        this.conf = network.getLayerWiseConfigurations();
        // forward keeps layer inputs across calls: they must not live in workspace memory that DL4J recycles
        conf.setTrainingWorkspaceMode(WorkspaceMode.NONE);
        conf.setInferenceWorkspaceMode(WorkspaceMode.NONE);
        this.layers = network.getLayers();
        this.dataType = conf.getDataType();
        boolean endsWithOutputLayer = network.getOutputLayer() instanceof IOutputLayer;
        if (endsWithOutputLayer != last) {
            throw new IllegalArgumentException("stage " + stage + " of " + stageCount + ": its network "
                    + (endsWithOutputLayer ? "ends with an output layer but it is not the last stage"
                    : "has no output layer but it is the last stage, which computes the loss")
                    + " (fix: build the stages with PipelineStageSplit.buildStageNetworks())");
        }
        this.kinds = new LayerSupport.Kind[layers.length];
        for (int i = 0; i < layers.length; i++) {
            // DL4J's init lets layers 1.. overwrite their input in place (dropout does): a stage keeps
            // every layer's input until the microbatch's backward, which must find it unchanged
            layers[i].allowInputModification(false);
            org.deeplearning4j.nn.conf.layers.Layer layerConf = conf.getConf(i).getLayer();
            kinds[i] = LayerSupport.kindOf(layerConf);
            if (kinds[i] == null) {
                throw new IllegalArgumentException("stage " + stage + " layer " + i + " ("
                        + layerConf.getClass().getSimpleName() + ") is not supported in a pipeline stage: expected one of "
                        + LayerSupport.supportedNames()
                        + " (fix: build the stages with PipelineStageSplit.buildStageNetworks(), which refuses"
                        + " such layers)");
            }
            if (layerConf.getIDropout() instanceof MicrobatchDropout d) {
                dropouts.add(d);
            } else if (layerConf.getIDropout() != null) {
                throw new IllegalArgumentException("stage " + stage + " layer " + i + " has dropout="
                        + layerConf.getIDropout() + " expected a MicrobatchDropout (fix: build the stages with"
                        + " PipelineStageSplit.buildStageNetworks(), which gives each microbatch its own mask)");
            }
            if (layers[i] instanceof BatchNormalization bn && hollow == null) {
                batchNorms.add(new BatchNormRunningStats(i, bn, dataType));
            }
        }
        if (network.numParams() > 0 && hollow == null) {
            if (network.getGradientsViewArray() == null) {
                // DL4J's initGradientsView allocates a new view each call: a network that has one (a split's stage
                // network has) keeps it, else the old one would stay resident as garbage until a collection
                network.initGradientsView();
            }
            INDArray view = network.getGradientsViewArray();
            this.accumulatedGradient = Nd4j.zeros(view.dataType(), view.shape());
        } else {
            this.accumulatedGradient = null;
        }
        // the updater and its state exist from the start, so copying state out before any step copies the initial state
        network.getUpdater(true);
    }

    /**
     * Makes this stage one of {@code dp.size()} data-parallel replicas ({@code dp} over the stage's
     * {@code dp} sub-group, rank = replica): its microbatch {@code k} is piece {@code k * replicas + replica}
     * of the global batch (dropout masks are drawn for that piece), and {@link #step()} sums the gradient
     * and the loss over the replicas and updates batch normalization's running statistics with every
     * replica's pieces in order, before one update with the global batch's example count. Every replica
     * then does what one pipeline with {@code microbatches x replicas} microbatches does with the batch,
     * with the same operations, so the replicas stay bitwise identical. Set before the first step, on the
     * thread that runs the stage.
     */
    void dataParallel(ArrayCollectives dp) {
        this.dataParallel = Objects.requireNonNull(dp, "dp");
    }

    /**
     * Makes this a stage of tensor-parallel shard {@code rank} ({@link PipelineTensorParallel}): its
     * {@link #regularizationScore()} is then this rank's share of the unsharded stage's
     * ({@link TensorParallel#regularizationShare}), so the shares of every rank add up to it. Set before the first step.
     */
    void tensorParallelRank(int rank) {
        this.tensorParallelRank = rank;
    }

    /**
     * After {@link PipelineSyncBatchNorm#install} put synchronized layers in place of this stage's BatchNormalization
     * layers (in the network's layer array, which this stage shares): their running statistics follow the merged
     * microbatches ({@link BatchNormRunningStats}), and like every layer they keep their input unchanged.
     */
    void batchNormLayersSwapped() {
        batchNorms.clear();
        for (int i = 0; i < layers.length; i++) {
            if (layers[i] instanceof BatchNormalization bn) {
                bn.allowInputModification(false);
                batchNorms.add(new BatchNormRunningStats(i, bn, dataType));
            }
        }
    }

    /**
     * Makes this a stage of a graph with branches ({@link GraphWiring}): forward and backward run {@code passes}, the
     * stage's vertices in topological order, on this network's layers. Under ZB-H1 its backward runs whole in the
     * input-gradient action. Set before the first step.
     */
    void graph(GraphStagePasses passes) {
        this.graph = Objects.requireNonNull(passes, "passes");
    }

    /** The stage's part of a graph with branches ({@link #graph(GraphStagePasses)}), or null: a chain, or not held. */
    GraphStagePasses graphPasses() {
        return graph;
    }

    /** Hands the stage the next step's plan (stage 0 reads features, the last stage labels) and resets its step state. */
    void beginStep(StepPlan plan) {
        this.plan = Objects.requireNonNull(plan, "plan");
        int count = plan.batch().count();
        if (stageInputs.length != count) {
            stageInputs = new INDArray[count];
            heldActivations = new INDArray[count];
            heldGradients = new INDArray[count];
            layerInputs = new INDArray[count][];
            deferred = new Splittable.Deferred[count][];
        }
        layerSums = new int[layers.length];
        for (BatchNormRunningStats bn : batchNorms) {
            bn.beginStep(count);
        }
        if (graph != null) {
            graph.beginStep(count);
        }
        if (optimizerShard != null) {
            // ZeRO stage 3: the replicas' blocks all-gathered into the whole parameters, once per step, before the
            // first forward (collective over the replicas, which begin their steps' stages in the same order)
            optimizerShard.gatherParameters();
        }
        // layers keep their own counters, which dropout seeds and schedules read: DL4J's fit
        // synchronizes them with the network's before every pass, and so does a stage before every step
        for (Layer layer : layers) {
            layer.setIterationCount(network.getIterationCount());
            layer.setEpochCount(network.getEpochCount());
        }
        backwardsThisStep = 0;
        lossSum = 0;
        dataLoss = Double.NaN;
        regularizationScore = Double.NaN;
    }

    @Override
    public MemorySegment forward(int microbatch, MemorySegment input) {
        requireStep(microbatch, "forward");
        INDArray x = first ? plan.batch().features().get(microbatch)
                : received(heldActivations, microbatch, input, plan.messageShape(stage - 1, microbatch),
                        "the activation of microbatch " + microbatch + " into stage " + stage);
        stageInputs[microbatch] = x;
        if (last) {
            return EMPTY; // the forward pass runs in backward, where DL4J computes the loss and its gradient
        }
        selectMicrobatch(microbatch);
        network.setInput(x); // sets every layer's minibatch size, which preprocessors read
        applyMasks(microbatch);
        int miniBatchSize = network.getInputMiniBatchSize();
        INDArray[] inputs = new INDArray[layers.length];
        INDArray activation = x;
        // what MultiLayerNetwork's training forward pass does (ffToLayerActivationsInWs), keeping each layer's input
        if (graph != null) {
            activation = graph.forward(microbatch, x, layers, conf, miniBatchSize, workspaces, inputs);
        }
        for (int i = 0; graph == null && i < layers.length; i++) {
            InputPreProcessor preProcessor = conf.getInputPreProcess(i);
            if (preProcessor != null) {
                activation = preProcessor.preProcess(activation, miniBatchSize, workspaces);
            }
            inputs[i] = activation;
            activation = layers[i].activate(activation, true, workspaces);
        }
        layerInputs[microbatch] = inputs;
        requireShape(activation, plan.messageShape(stage, microbatch), "output", microbatch);
        return publish(activation, 0);
    }

    @Override
    public MemorySegment backward(int microbatch, MemorySegment outputGradient) {
        requireStep(microbatch, "backward");
        Pair<Gradient, INDArray> result = backprop(microbatch, outputGradient);
        accumulate(null);
        MemorySegment inputGradient = finishBackward(microbatch, result);
        // the microbatch is done here; an input gradient that is the received array itself is sent before this
        // stage's next call, the first that may take the array again
        releaseHandoffs(microbatch);
        return inputGradient;
    }

    /**
     * The input-gradient half of the backward ({@link PipelineSchedule#ZERO_BUBBLE_H1}): DL4J's backward with the
     * weight gradients of the layers that split ({@link SplitBackward}) left for {@link #backwardWeight}, which
     * gets what they need (each one's input or im2col patches, and {@code dZ}). Layers that do not split run their
     * whole backward here; their gradients are accumulated now.
     */
    @Override
    public MemorySegment backwardInput(int microbatch, MemorySegment outputGradient) {
        requireStep(microbatch, "input-gradient");
        if (splits == null) {
            installSplit();
        }
        if (deferred[microbatch] != null) {
            throw Invariants.violated("stage " + stage + " got the input gradient of microbatch " + microbatch
                    + " twice before its weight gradient");
        }
        Pair<Gradient, INDArray> result;
        setDeferring(true);
        try {
            result = backprop(microbatch, outputGradient);
        } finally {
            setDeferring(false);
        }
        Splittable.Deferred[] kept = new Splittable.Deferred[layers.length];
        boolean[] now = new boolean[layers.length];
        for (int i = 0; i < layers.length; i++) {
            if (splits[i] == null) {
                now[i] = true;
            } else if ((kept[i] = splits[i].takeDeferred()) == null) {
                throw Invariants.violated("stage " + stage + " layer " + i + " kept nothing for its weight gradient"
                        + " in the input-gradient pass of microbatch " + microbatch);
            }
        }
        deferred[microbatch] = kept;
        accumulate(now);
        return finishBackward(microbatch, result);
    }

    /**
     * The weight-gradient half ({@link PipelineSchedule#ZERO_BUBBLE_H1}): {@code dW = inputᵀ · dZ} (a
     * convolution's input as im2col patches) and {@code db = sum(dZ)} of every split layer from what
     * {@link #backwardInput} kept, into the gradient views DL4J's backward writes, then added to the step's gradient.
     */
    @Override
    public void backwardWeight(int microbatch) {
        requireStep(microbatch, "weight-gradient");
        Splittable.Deferred[] kept = deferred[microbatch];
        if (kept == null) {
            throw Invariants.violated("stage " + stage + " got the weight gradient of microbatch " + microbatch
                    + " before its input gradient (or twice): the schedule must run I before W");
        }
        deferred[microbatch] = null;
        boolean[] now = new boolean[layers.length];
        for (int i = 0; i < layers.length; i++) {
            if (kept[i] != null) {
                splits[i].weightGradient(kept[i]);
                now[i] = true;
            }
        }
        accumulate(now);
        weightPasses++;
        releaseHandoffs(microbatch); // the weight pass has read what the input-gradient pass kept
    }

    /**
     * How many weight-gradient passes ({@link #backwardWeight}) this stage has run since it was made: each computed its
     * split layers' weight gradients apart from the input gradient.
     */
    long weightPasses() {
        return weightPasses;
    }

    /** Puts the split layers in place of DL4J's (in the network's layer array, which this stage shares). */
    private void installSplit() {
        splits = new Splittable[layers.length];
        if (graph != null) {
            return; // a graph stage's backward runs whole in the input-gradient action (GraphWiring#unsplitLayers)
        }
        for (int i = 0; i < layers.length; i++) {
            Layer split = SplitBackward.splitOf(layers[i]);
            if (split != null) {
                layers[i] = split;
                splits[i] = (Splittable) split;
            }
        }
    }

    private void setDeferring(boolean on) {
        for (Splittable s : splits) {
            if (s != null) {
                s.defer(on);
            }
        }
    }

    /** DL4J's backward of the microbatch (each split layer's as {@link SplitBackward} sets it), with the gradient views filled. */
    private Pair<Gradient, INDArray> backprop(int microbatch, MemorySegment outputGradient) {
        INDArray x = stageInputs[microbatch];
        if (x == null) {
            throw Invariants.violated("stage " + stage + " got the backward of microbatch " + microbatch
                    + " before its forward (or twice): the schedule must run F before B for every microbatch");
        }
        selectMicrobatch(microbatch);
        Pair<Gradient, INDArray> result;
        if (last) {
            network.setInput(x);
            applyMasks(microbatch);
            INDArray labelsMask = plan.batch().labelsMask(microbatch);
            if (labelsMask != null) {
                network.getOutputLayer().setMaskArray(labelsMask); // as setLayerMaskArrays: the labels mask wins
            }
            // masks are set above: calculateGradients' own mask arguments would set the labels mask to the
            // features mask (DL4J 1.0.0-M2.1 passes fMask as the labels mask to its forward pass)
            if (graph != null) {
                graph.forward(microbatch, x, layers, conf, network.getInputMiniBatchSize(), workspaces,
                        new INDArray[layers.length]);
                ((IOutputLayer) network.getOutputLayer()).setLabels(plan.batch().labels().get(microbatch));
                result = graph.backward(microbatch, x, null, layers, conf, network.getInputMiniBatchSize(), workspaces,
                        network.getGradientsViewArray());
            } else {
                result = network.calculateGradients(x, plan.batch().labels().get(microbatch), null, null);
            }
            // DL4J's score of this microbatch, without regularization (added once per batch by the trainer)
            IOutputLayer output = (IOutputLayer) network.getOutputLayer();
            double score = output.computeScore(0.0, true, workspaces);
            lossSum += output.conf().isMiniBatch() ? score * x.size(0) : score;
        } else {
            INDArray epsilon = received(heldGradients, microbatch, outputGradient, plan.messageShape(stage, microbatch),
                    "the gradient of microbatch " + microbatch + " into stage " + stage);
            // re-establish this microbatch's inputs and masks: other microbatches' forwards ran since
            network.setInput(x);
            applyMasks(microbatch);
            INDArray[] inputs = layerInputs[microbatch];
            for (int i = 0; i < layers.length; i++) {
                if (kinds[i] == LayerSupport.Kind.REPLAY_FORWARD) {
                    layers[i].activate(inputs[i], true, workspaces);
                } else {
                    layers[i].setInput(inputs[i], workspaces);
                }
            }
            result = graph != null ? graph.backward(microbatch, x, epsilon, layers, conf, network.getInputMiniBatchSize(),
                    workspaces, network.getGradientsViewArray()) : network.backpropGradient(epsilon, workspaces);
        }
        for (BatchNormRunningStats bn : batchNorms) {
            bn.record(microbatch);
        }
        return result;
    }

    /**
     * Adds the gradient views of the layers {@code which} marks (every layer: null) to the step's gradient: the
     * first microbatch's assigned, the later ones added, element by element, as one backward's whole view would be.
     */
    private void accumulate(boolean[] which) {
        if (accumulatedGradient == null) {
            return;
        }
        INDArray gradient = network.getGradientsViewArray();
        boolean aligned = which == null;
        for (int i = 1; aligned && i < layerSums.length; i++) {
            aligned = layerSums[i] == layerSums[0];
        }
        if (aligned) {
            // every layer has the same microbatches summed: the whole view at once
            if (layerSums[0] == 0) {
                accumulatedGradient.assign(gradient);
            } else {
                accumulatedGradient.addi(gradient);
            }
            for (int i = 0; i < layerSums.length; i++) {
                layerSums[i]++;
            }
            return;
        }
        long offset = 0;
        for (int i = 0; i < layers.length; i++) {
            long n = layers[i].numParams();
            if ((which == null || which[i]) && n > 0) {
                INDArray sum = accumulatedGradient.get(NDArrayIndex.all(), NDArrayIndex.interval(offset, offset + n));
                INDArray g = gradient.get(NDArrayIndex.all(), NDArrayIndex.interval(offset, offset + n));
                if (layerSums[i] == 0) {
                    sum.assign(g);
                } else {
                    sum.addi(g);
                }
            }
            if (which == null || which[i]) {
                layerSums[i]++;
            }
            offset += n;
        }
    }

    private MemorySegment finishBackward(int microbatch, Pair<Gradient, INDArray> result) {
        backwardsThisStep++;
        gradientViews = result.getFirst();
        stageInputs[microbatch] = null;
        layerInputs[microbatch] = null;
        if (first) {
            return EMPTY;
        }
        requireShape(result.getSecond(), plan.messageShape(stage - 1, microbatch), "input gradient", microbatch);
        return publish(result.getSecond(), 1);
    }

    /**
     * One update from the accumulated gradient, as {@code fit} of the whole network on the whole batch
     * would apply it to this stage's layers: the network's updater (division by the batch's example
     * count, gradient normalization, regularization, the optimizer), then parameters minus the update,
     * the iteration counter, and constraints. Batch normalization's running statistics follow the
     * microbatches in order instead ({@link BatchNormRunningStats}).
     */
    @Override
    public void step() {
        requireHeld("step");
        if (plan == null || backwardsThisStep != plan.batch().count()) {
            throw Invariants.violated("stage " + stage + " stepped after " + backwardsThisStep + " backward passes"
                    + " expected=" + (plan == null ? "beginStep() first" : plan.batch().count() + " (one per microbatch)"));
        }
        for (int k = 0; k < deferred.length; k++) {
            if (deferred[k] != null) {
                throw Invariants.violated("stage " + stage + " stepped before the weight gradient of microbatch " + k
                        + " (its input gradient ran): the schedule must run every W before the step");
            }
        }
        // DL4J's score counts regularization at the parameters the gradient was computed at
        regularizationScore = tensorParallelRank < 0 ? network.calcRegularizationScore(true)
                : TensorParallel.regularizationShare(network, tensorParallelRank);
        long examples = plan.batch().examples();
        if (dataParallel != null) {
            // every replica holds an equal share: the global batch is the replicas' examples together
            examples *= dataParallel.size();
            if (accumulatedGradient != null && sharding != ZeroStage.GRADIENTS && sharding != ZeroStage.PARAMETERS) {
                dataParallel.sumInPlace(accumulatedGradient); // stages 2, 3: reduce-scattered in the shard's step instead
            }
            for (BatchNormRunningStats bn : batchNorms) {
                bn.gatherAcross(dataParallel);
            }
            if (last) {
                lossSum = dataParallel.sum(lossSum);
            }
        }
        if (last) {
            dataLoss = lossSum / (((IOutputLayer) network.getOutputLayer()).conf().isMiniBatch() ? examples : 1);
        }
        int iteration = network.getIterationCount();
        int epoch = network.getEpochCount();
        if (accumulatedGradient != null) {
            if (sharding != null && dataParallel != null && optimizerShard == null) {
                // collective over the replicas, which all reach their first step here; before the gradient view is
                // written: on processes it moves into symmetric memory
                optimizerShard = OptimizerStateShard.install(network, dataParallel.communicator(), sharding);
            }
            INDArray gradient = network.getGradientsViewArray();
            gradient.assign(accumulatedGradient);
            for (BatchNormRunningStats bn : batchNorms) {
                bn.applyInOrder(gradientViews);
            }
            if (optimizerShard != null) {
                // stage 2: the gradient reduce-scattered first; this replica's block, then the update all-gathered
                optimizerShard.step(examples, iteration, epoch);
            } else {
                network.getUpdater(true).update(network, gradientViews, iteration, epoch, Math.toIntExact(examples),
                        workspaces);
            }
            if (sharding == ZeroStage.PARAMETERS && optimizerShard != null) {
                // stage 3: the shard's step subtracted its block's update and gave the rest back; the accumulated
                // gradient is given back too (the next step's first microbatch assigns it whole)
                org.symmem4j.parallel.memory.ReservedMemory.giveBack(
                        ArrayCollectives.segmentOf(accumulatedGradient), 0,
                        accumulatedGradient.length() * dataType.width());
            } else {
                // StochasticGradientDescent's step: parameters minus the update the updater left in the gradient view
                network.params().subi(gradient.reshape(gradient.length()));
            }
        }
        network.setIterationCount(iteration + 1);
        network.applyConstraints(iteration + 1, epoch);
        backwardsThisStep = 0;
        layerSums = new int[layers.length];
        message = null;
    }

    /**
     * ZeRO over this stage's data-parallel replicas (the pipeline trainer's {@code sharding(...)}): from the first step
     * on, this replica keeps the updater state of its 1/N block of the stage's parameters only
     * ({@link OptimizerStateShard}); with {@link ZeroStage#GRADIENTS} the accumulated gradient is reduce-scattered
     * rather than all-reduced, so this replica sums only its block ({@link #gradientBeforeUpdate} then stays its own
     * examples' sum). Set before the first step.
     *
     * @param stage OPTIMIZER_STATE or GRADIENTS
     */
    void shard(ZeroStage stage) {
        this.sharding = stage;
    }

    /** Collective over the replicas, when the rank stops: releases the shard's registration (its state stays). */
    void closeOptimizerShard() {
        if (optimizerShard != null) {
            optimizerShard.close();
        }
    }

    /** This replica's block of the updater state ({@link #shard}), or null before the first step. */
    OptimizerStateShard optimizerShard() {
        return optimizerShard;
    }

    /**
     * This stage's index.
     *
     * @return the index, from 0
     */
    public int stage() {
        return stage;
    }

    /**
     * The stage's network: its parameters, updater state and counters are the training state.
     *
     * @return the stage's network
     */
    public MultiLayerNetwork network() {
        return network;
    }

    /**
     * After {@link #step()}: the step's gradient before the update, summed over the batch's examples (over every
     * replica's with data parallelism, except with ZeRO stage 2, which sums only this replica's block, in the gradient
     * view: then this replica's examples), laid out like the flat gradient view; null for a stage without parameters.
     */
    INDArray gradientBeforeUpdate() {
        return accumulatedGradient;
    }

    /**
     * The last stage, after {@link #step()}: the step's loss without regularization, as DL4J's output
     * layer scores the whole batch (the per-example losses summed and, for minibatch training, divided
     * by the batch's example count). NaN on other stages and before the step.
     *
     * @return the loss, or NaN
     */
    public double dataLoss() {
        return dataLoss;
    }

    /**
     * After {@link #step()}: the regularization part of DL4J's score for this stage's layers (L1, L2,
     * weight decay), at the parameters before the update, as {@code fit} reports it.
     *
     * @return the regularization score, or NaN before the first step
     */
    public double regularizationScore() {
        return regularizationScore;
    }

    /**
     * Whether this process holds the stage's memory and trains it; false for a stage another rank trains
     * (group mode), whose network is hollow.
     *
     * @return true when this stage computes here
     */
    public boolean held() {
        return hollow == null;
    }

    /**
     * The bytes of parameters, gradient view, accumulated gradient and updater state this stage holds: 0 for a stage
     * that is not {@link #held()} (its reserved memory's resident pages: none while nothing wrote them).
     *
     * @return bytes of model state
     */
    public long modelBytes() {
        if (hollow != null) {
            return hollow.residentBytes();
        }
        if (optimizerShard != null && sharding == ZeroStage.PARAMETERS) {
            // ZeRO stage 3 between steps: the block of the parameters and gradient view, the block's updater state; the
            // accumulated gradient given back
            return optimizerShard.heldBytes();
        }
        long elements = 2L * network.numParams() + (accumulatedGradient == null ? 0 : accumulatedGradient.length());
        INDArray state = network.getUpdater(true) == null ? null : network.getUpdater(true).getStateViewArray();
        elements += state == null ? 0 : state.length();
        return elements * dataType.width();
    }

    private void requireHeld(String pass) {
        if (hollow != null) {
            throw Invariants.violated("stage " + stage + " got a " + pass + " but this process does not hold it: another"
                    + " rank trains it (group mode holds only a rank's own stages; the schedule must give this rank"
                    + " only stages s with s % ranks == its pipeline rank)");
        }
    }

    private void requireStep(int microbatch, String pass) {
        requireHeld(pass);
        if (plan == null) {
            throw Invariants.violated("stage " + stage + " got a " + pass + " pass before beginStep()");
        }
        if (microbatch < 0 || microbatch >= plan.batch().count()) {
            throw Invariants.violated("stage " + stage + " got a " + pass + " pass for microbatch=" + microbatch
                    + " expected in [0, " + plan.batch().count() + ")");
        }
    }

    /** Every layer's dropout draws and uses {@code microbatch}'s mask from now on. */
    private void selectMicrobatch(int microbatch) {
        // a replica's microbatch k is piece k * replicas + replica of the global batch: its own mask
        int piece = dataParallel == null ? microbatch : microbatch * dataParallel.size() + dataParallel.rank();
        for (MicrobatchDropout d : dropouts) {
            d.microbatch(piece);
        }
    }

    /**
     * The features mask as it reaches this stage, propagated through the stage's layers as DL4J's
     * {@code setLayerMaskArrays} does (every layer's mask is set, or cleared when there is none).
     */
    private void applyMasks(int microbatch) {
        INDArray mask = plan.inputMasks()[stage][microbatch];
        MaskState state = plan.inputMaskStates()[stage][microbatch];
        if (graph != null && mask != null) {
            throw new IllegalArgumentException("stage " + stage + " of a graph with branches got a features mask: expected"
                    + " none (masks are propagated through chains of layers only; fix: train without features masks,"
                    + " or train this graph with SymmemParallelWrapper)");
        }
        network.feedForwardMaskArray(mask, mask == null ? null : state, Math.toIntExact(plan.batch().size(microbatch)));
    }

    /** A pass's output must have the shape the next stage (or the previous, for gradients) reads. */
    private void requireShape(INDArray array, long[] expected, String what, int microbatch) {
        if (!Arrays.equals(array.shape(), expected)) {
            throw new IllegalStateException("stage " + stage + "'s " + what + " for microbatch " + microbatch + " has shape "
                    + Arrays.toString(array.shape()) + " expected=" + Arrays.toString(expected) + " (from DL4J's input"
                    + " types for this batch's features; when they infer the wrong type, e.g. NHWC images or NWC"
                    + " sequences; fix: give PipelineParallelTrainerBuilder.inputType(...))");
        }
    }

    /** The message copied into a spare array of its shape (a new one only when none is spare), held by the microbatch. */
    private INDArray received(INDArray[] held, int microbatch, MemorySegment message, long[] shape, String what) {
        INDArray spare = null;
        for (int i = 0; i < spareHandoffs.size(); i++) {
            if (Arrays.equals(spareHandoffs.get(i).shape(), shape)) {
                spare = spareHandoffs.remove(i);
                break;
            }
        }
        INDArray array = Messages.read(message, spare, shape, dataType, what);
        if (array != spare) {
            handoffArrays++;
        }
        held[microbatch] = array;
        return array;
    }

    /** The microbatch's passes are over: its received arrays are spare again. */
    private void releaseHandoffs(int microbatch) {
        if (heldActivations[microbatch] != null) {
            spareHandoffs.add(heldActivations[microbatch]);
            heldActivations[microbatch] = null;
        }
        if (heldGradients[microbatch] != null) {
            spareHandoffs.add(heldGradients[microbatch]);
            heldGradients[microbatch] = null;
        }
    }

    private MemorySegment publish(INDArray array, int direction) {
        message = Messages.rowMajor(array, sendCopies[direction], dataType);
        if (message != array && message != sendCopies[direction]) {
            sendCopies[direction] = message; // a copy (or cast) this stage made: its own to reuse
            handoffArrays++;
        }
        return ArrayCollectives.segmentOf(message);
    }

    /**
     * How many arrays this stage has made for hand-offs since it was made: for received messages, as many of each shape
     * as were held at once (the microbatches in flight, per direction), then reused every step; and one per direction
     * whose outputs DL4J leaves in another order than row-major. Steps of the same batch size add none.
     */
    long handoffArrays() {
        return handoffArrays;
    }

    @Override
    public String toString() {
        return "Dl4jPipelineStage[stage=" + stage + ", layers=" + layers.length + ", params=" + network.numParams()
                + (hollow == null ? "" : ", hollow") + "]";
    }
}
