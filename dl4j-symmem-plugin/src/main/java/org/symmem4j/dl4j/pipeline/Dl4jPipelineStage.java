package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.layers.FeedForwardLayer;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.pipeline.exec.StageCompute;

/**
 * One pipeline stage backed by a DL4J {@link MultiLayerNetwork} holding a contiguous range of the full
 * network's layers (from {@link PipelineStageSplit#buildStageNetworks()}), computing with DL4J's own
 * layers: forward with {@code Layer.activate}, backward with {@link MultiLayerNetwork#backpropGradient}
 * (the last stage: {@link MultiLayerNetwork#calculateGradients}, which also gives the loss's gradient
 * with respect to the stage input), and the update with the network's own updater.
 *
 * <p><b>Exactness.</b> DL4J's gradient is a sum over examples, divided by the minibatch size inside
 * the updater. A stage adds up its microbatches' gradients and, in {@link #step()}, runs its updater
 * once on that sum with the <em>whole batch's</em> example count, then subtracts the update from the
 * parameters as DL4J's {@code StochasticGradientDescent} does, advances the iteration counter and
 * applies constraints. Every stage of a split network thus does what one {@code fit} of the whole
 * network on the whole batch does to those layers, up to the order in which fp32 sums are added.
 *
 * <p><b>Memory.</b> Forward keeps each microbatch's layer inputs until that microbatch's backward
 * (DL4J layers backpropagate from their stored input); the last stage keeps only its input and runs
 * its forward pass inside backward, where DL4J computes the loss. Messages are row-major
 * {@code [microbatch x width]} matrices of the network's data type.
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
    private final long inputWidth;
    private final long outputWidth;
    /** Arrays outside any DL4J workspace: kept across calls (the network trains with WorkspaceMode.NONE too). */
    private final LayerWorkspaceMgr workspaces = LayerWorkspaceMgr.noWorkspaces();
    /** Sum of this step's microbatch gradients, laid out like the network's flat gradient view. */
    private final INDArray accumulatedGradient;

    private Microbatches batch;
    /** By microbatch: the stage's input, from forward until backward. */
    private INDArray[] stageInputs = new INDArray[0];
    /** By microbatch and layer: each layer's input (after its preprocessor), from forward until backward. */
    private INDArray[][] layerInputs = new INDArray[0][];
    private int backwardsThisStep;
    /** The gradient DL4J's backprop returned: per-parameter views of the flat gradient view, which the updater expects. */
    private Gradient gradientViews;
    /** The last array handed out as a message: keeps its memory alive until the next call. */
    private INDArray message;
    private double lossSum;
    private double dataLoss = Double.NaN;
    private double regularizationScore = Double.NaN;

    /**
     * @param stage      this stage's index
     * @param stageCount the number of stages (the last one computes the loss)
     * @param network    the stage's network: an {@code OutputLayer} last exactly when this is the last stage
     */
    public Dl4jPipelineStage(int stage, int stageCount, MultiLayerNetwork network) {
        if (stage < 0 || stage >= stageCount) {
            throw new IllegalArgumentException("stage=" + stage + " expected in [0, stageCount=" + stageCount + ")");
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
                    + " (build the stages with PipelineStageSplit.buildStageNetworks())");
        }
        this.inputWidth = ((FeedForwardLayer) conf.getConf(0).getLayer()).getNIn();
        this.outputWidth = ((FeedForwardLayer) conf.getConf(layers.length - 1).getLayer()).getNOut();
        network.initGradientsView();
        INDArray view = network.getGradientsViewArray();
        this.accumulatedGradient = Nd4j.zeros(view.dataType(), view.shape());
        // the updater and its state exist from the start, so copying state out before any step copies the initial state
        network.getUpdater(true);
    }

    /** Hands the stage the next step's data (stage 0 reads features, the last stage labels) and resets its step state. */
    public void beginStep(Microbatches batch) {
        this.batch = Objects.requireNonNull(batch, "batch");
        int count = batch.count();
        if (stageInputs.length != count) {
            stageInputs = new INDArray[count];
            layerInputs = new INDArray[count][];
        }
        backwardsThisStep = 0;
        lossSum = 0;
        dataLoss = Double.NaN;
        regularizationScore = Double.NaN;
    }

    @Override
    public MemorySegment forward(int microbatch, MemorySegment input) {
        requireStep(microbatch, "forward");
        INDArray x = first ? batch.features().get(microbatch)
                : Messages.read(input, inputWidth, dataType, "the activation of microbatch " + microbatch + " into stage " + stage);
        stageInputs[microbatch] = x;
        if (last) {
            return EMPTY; // the forward pass runs in backward, where DL4J computes the loss and its gradient
        }
        network.setInput(x); // sets every layer's minibatch size, which preprocessors read
        int miniBatchSize = network.getInputMiniBatchSize();
        INDArray[] inputs = new INDArray[layers.length];
        INDArray activation = x;
        // what MultiLayerNetwork's training forward pass does (ffToLayerActivationsInWs), keeping each layer's input
        for (int i = 0; i < layers.length; i++) {
            InputPreProcessor preProcessor = conf.getInputPreProcess(i);
            if (preProcessor != null) {
                activation = preProcessor.preProcess(activation, miniBatchSize, workspaces);
            }
            inputs[i] = activation;
            activation = layers[i].activate(activation, true, workspaces);
        }
        layerInputs[microbatch] = inputs;
        return publish(activation);
    }

    @Override
    public MemorySegment backward(int microbatch, MemorySegment outputGradient) {
        requireStep(microbatch, "backward");
        INDArray x = stageInputs[microbatch];
        if (x == null) {
            throw new IllegalStateException("stage " + stage + " got the backward of microbatch " + microbatch
                    + " before its forward (or twice): the schedule must run F before B for every microbatch");
        }
        Pair<Gradient, INDArray> result;
        if (last) {
            result = network.calculateGradients(x, batch.labels().get(microbatch), null, null);
            // DL4J's score of this microbatch, without regularization (added once per batch by the trainer)
            IOutputLayer output = (IOutputLayer) network.getOutputLayer();
            double score = output.computeScore(0.0, true, workspaces);
            lossSum += output.conf().isMiniBatch() ? score * x.size(0) : score;
        } else {
            INDArray epsilon = Messages.read(outputGradient, outputWidth, dataType,
                    "the gradient of microbatch " + microbatch + " into stage " + stage);
            // re-establish this microbatch's inputs: other microbatches' forwards ran since
            network.setInput(x);
            INDArray[] inputs = layerInputs[microbatch];
            for (int i = 0; i < layers.length; i++) {
                layers[i].setInput(inputs[i], workspaces);
            }
            result = network.backpropGradient(epsilon, workspaces);
        }
        INDArray gradient = network.getGradientsViewArray();
        if (backwardsThisStep == 0) {
            accumulatedGradient.assign(gradient);
        } else {
            accumulatedGradient.addi(gradient);
        }
        backwardsThisStep++;
        gradientViews = result.getFirst();
        stageInputs[microbatch] = null;
        layerInputs[microbatch] = null;
        return first ? EMPTY : publish(result.getSecond());
    }

    /**
     * One update from the accumulated gradient, as {@code fit} of the whole network on the whole batch
     * would apply it to this stage's layers: the network's updater (division by the batch's example
     * count, gradient normalization, regularization, the optimizer), then parameters minus the update,
     * the iteration counter, and constraints.
     */
    @Override
    public void step() {
        if (batch == null || backwardsThisStep != batch.count()) {
            throw new IllegalStateException("stage " + stage + " stepped after " + backwardsThisStep + " backward passes"
                    + " expected=" + (batch == null ? "beginStep() first" : batch.count() + " (one per microbatch)"));
        }
        // DL4J's score counts regularization at the parameters the gradient was computed at
        regularizationScore = network.calcRegularizationScore(true);
        if (last) {
            dataLoss = lossSum / (((IOutputLayer) network.getOutputLayer()).conf().isMiniBatch() ? batch.examples() : 1);
        }
        INDArray gradient = network.getGradientsViewArray();
        gradient.assign(accumulatedGradient);
        int iteration = network.getIterationCount();
        int epoch = network.getEpochCount();
        network.getUpdater(true).update(network, gradientViews, iteration, epoch, Math.toIntExact(batch.examples()),
                workspaces);
        // StochasticGradientDescent's step: parameters minus the update the updater left in the gradient view
        network.params().subi(gradient.reshape(gradient.length()));
        network.setIterationCount(iteration + 1);
        network.applyConstraints(iteration + 1, epoch);
        backwardsThisStep = 0;
        message = null;
    }

    /** This stage's index. */
    public int stage() {
        return stage;
    }

    /** The stage's network: its parameters, updater state and counters are the training state. */
    public MultiLayerNetwork network() {
        return network;
    }

    /** Width of the activations this stage receives and of the gradient it sends back. */
    public long inputWidth() {
        return inputWidth;
    }

    /** Width of the activations this stage sends and of the gradient it receives. */
    public long outputWidth() {
        return outputWidth;
    }

    /**
     * The last stage, after {@link #step()}: the step's loss without regularization, as DL4J's output
     * layer scores the whole batch (the per-example losses summed and, for minibatch training, divided
     * by the batch's example count). NaN on other stages and before the step.
     */
    public double dataLoss() {
        return dataLoss;
    }

    /**
     * After {@link #step()}: the regularization part of DL4J's score for this stage's layers (L1, L2,
     * weight decay), at the parameters before the update, as {@code fit} reports it.
     */
    public double regularizationScore() {
        return regularizationScore;
    }

    private void requireStep(int microbatch, String pass) {
        if (batch == null) {
            throw new IllegalStateException("stage " + stage + " got a " + pass + " pass before beginStep()");
        }
        if (microbatch < 0 || microbatch >= batch.count()) {
            throw new IllegalArgumentException("stage " + stage + " got a " + pass + " pass for microbatch=" + microbatch
                    + " expected in [0, " + batch.count() + ")");
        }
    }

    private MemorySegment publish(INDArray array) {
        message = Messages.rowMajor(array, dataType);
        return Messages.segmentOf(message);
    }

    @Override
    public String toString() {
        return "Dl4jPipelineStage[stage=" + stage + ", layers=" + layers.length + ", params=" + network.numParams() + "]";
    }
}
