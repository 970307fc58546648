package org.symmem4j.dl4j.pipeline;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.CnnLossLayer;
import org.deeplearning4j.nn.conf.layers.Convolution1D;
import org.deeplearning4j.nn.conf.layers.Convolution1DLayer;
import org.deeplearning4j.nn.conf.layers.Convolution2D;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.DropoutLayer;
import org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.conf.layers.LossLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.RnnLossLayer;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.conf.layers.Subsampling1DLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.conf.layers.recurrent.Bidirectional;
import org.deeplearning4j.nn.conf.layers.recurrent.LastTimeStep;
import org.deeplearning4j.nn.conf.layers.recurrent.SimpleRnn;
import org.deeplearning4j.nn.conf.layers.wrapper.BaseWrapperLayer;

/**
 * Which DL4J layers a pipeline stage runs, and how a stage replays a microbatch's backward pass.
 *
 * <p>A stage runs the forwards of several microbatches before their backwards, while a DL4J layer
 * remembers only its latest forward. Before a microbatch's backward the stage therefore gives every
 * layer that microbatch's input and masks again. That is enough for layers whose backward
 * recomputes what it needs from its input ({@link Kind#INPUT_ONLY}: dense, convolution, pooling,
 * LSTM and simple RNN layers recompute their pre-activations, gates or pooling indices). Layers that
 * keep other results of their forward for the backward ({@link Kind#REPLAY_FORWARD}: batch
 * normalization's normalized input and deviation, {@code LastTimeStep}'s time indices,
 * {@code Bidirectional}'s two directions' outputs) run their forward again on that input first:
 * deterministic, so they hold exactly what their forward held.
 *
 * <p>Every supported kind is checked against plain DL4J by the plugin's equivalence tests; any other
 * layer is refused when the split is made, naming it and the supported ones.
 */
final class LayerSupport {

    /** How a stage prepares a layer for a microbatch's backward pass. */
    enum Kind {
        /** Give the layer the microbatch's input (and masks): its backward recomputes the rest. */
        INPUT_ONLY,
        /** Run the layer's training forward on the microbatch's input again: its backward reads what the forward kept. */
        REPLAY_FORWARD
    }

    /** Hidden layers a stage runs, by exact configuration class (a subclass may change what its forward keeps). */
    private static final Map<Class<? extends Layer>, Kind> HIDDEN = new LinkedHashMap<>();
    /** Layers that end the network and compute the loss. */
    private static final Set<Class<? extends Layer>> OUTPUT = Set.of(OutputLayer.class, LossLayer.class,
            RnnOutputLayer.class, RnnLossLayer.class, CnnLossLayer.class);
    /** Recurrent layers the wrappers may hold. */
    private static final Set<Class<? extends Layer>> WRAPPABLE = Set.of(LSTM.class, SimpleRnn.class);

    static {
        HIDDEN.put(DenseLayer.class, Kind.INPUT_ONLY);
        // tensor-parallel blocks (PipelineParallelTrainerBuilder.tensorParallel): the row-parallel layer's backward
        // recomputes its pre-activation's all-reduce unless its last forward was this microbatch's, on every tp rank alike
        HIDDEN.put(org.symmem4j.dl4j.tensor.ColumnParallelDenseLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(org.symmem4j.dl4j.tensor.RowParallelDenseLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(ActivationLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(DropoutLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(ConvolutionLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(Convolution2D.class, Kind.INPUT_ONLY);
        HIDDEN.put(Convolution1DLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(Convolution1D.class, Kind.INPUT_ONLY);
        HIDDEN.put(SubsamplingLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(Subsampling1DLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(GlobalPoolingLayer.class, Kind.INPUT_ONLY);
        HIDDEN.put(LSTM.class, Kind.INPUT_ONLY);
        HIDDEN.put(SimpleRnn.class, Kind.INPUT_ONLY);
        HIDDEN.put(BatchNormalization.class, Kind.REPLAY_FORWARD);
        HIDDEN.put(LastTimeStep.class, Kind.REPLAY_FORWARD);
        HIDDEN.put(Bidirectional.class, Kind.REPLAY_FORWARD);
    }

    private LayerSupport() {
    }

    /** The supported layers, for messages. */
    static String supportedNames() {
        return HIDDEN.keySet().stream().map(Class::getSimpleName).collect(Collectors.joining(", "))
                + " (LastTimeStep and Bidirectional around LSTM or SimpleRnn); last: "
                + OUTPUT.stream().map(Class::getSimpleName).sorted().collect(Collectors.joining(", "));
    }

    /** How a stage prepares {@code layer} (already {@link #check}ed) for a backward pass. */
    static Kind kindOf(Layer layer) {
        return OUTPUT.contains(layer.getClass()) ? Kind.INPUT_ONLY : HIDDEN.get(layer.getClass());
    }

    /**
     * Checks that a stage can run {@code layer} at position {@code index} ({@code last}: the network's
     * last layer, which must compute the loss).
     *
     * @throws IllegalArgumentException naming the layer, what was expected, what was found and the fix
     */
    static void check(int index, Layer layer, boolean last, GradientNormalization normalization) {
        String name = "layer " + index + " (" + layer.getClass().getSimpleName() + " \"" + layer.getLayerName() + "\")";
        if (last) {
            if (!OUTPUT.contains(layer.getClass())) {
                throw new IllegalArgumentException(name + " is not supported as the last layer of a pipelined network:"
                        + " expected one of " + OUTPUT.stream().map(Class::getSimpleName).sorted().toList() + " found "
                        + layer.getClass().getSimpleName() + " (the last stage computes the loss and its gradient;"
                    + " fix: end the network with one of those)");
            }
        } else if (OUTPUT.contains(layer.getClass())) {
            throw new IllegalArgumentException(name + " computes a loss but is not the last layer: expected an output"
                    + " layer only at the end of a pipelined network (stages pass activations on, not losses;"
                    + " fix: keep one output layer, the last)");
        } else if (!HIDDEN.containsKey(layer.getClass())) {
            String why = layer.getClass().getSimpleName().startsWith("Frozen")
                    ? " (frozen layers stop DL4J's backward pass, so the stages before them would get no gradient)"
                    : " (every supported layer is checked against plain DL4J training; this one is not)";
            throw new IllegalArgumentException(name + " is not supported in a pipeline stage: expected one of "
                    + supportedNames() + " found " + layer.getClass().getName() + why
                    + "; fix: train this network without the pipeline, or replace the layer");
        }
        if (layer instanceof BaseWrapperLayer wrapper) {
            Layer inner = wrapper.getUnderlying();
            if (!WRAPPABLE.contains(inner.getClass())) {
                throw new IllegalArgumentException(name + " wraps " + inner.getClass().getSimpleName()
                        + ": expected LSTM or SimpleRnn inside " + layer.getClass().getSimpleName()
                    + " (fix: wrap an LSTM or SimpleRnn, or train without the pipeline)");
            }
            checkNoiseFree(name + " (its inner " + inner.getClass().getSimpleName() + ")", inner, true);
        }
        if (layer instanceof Bidirectional bidirectional) {
            if (!WRAPPABLE.contains(bidirectional.getFwd().getClass())) {
                throw new IllegalArgumentException(name + " wraps " + bidirectional.getFwd().getClass().getSimpleName()
                        + ": expected LSTM or SimpleRnn inside Bidirectional"
                    + " (fix: wrap an LSTM or SimpleRnn, or train without the pipeline)");
            }
            checkNoiseFree(name + " (its forward layer)", bidirectional.getFwd(), true);
            checkNoiseFree(name + " (its backward layer)", bidirectional.getBwd(), true);
        }
        checkNoiseFree(name, layer, false);
        if (layer instanceof BatchNormalization && normalization != null && normalization != GradientNormalization.None) {
            throw new IllegalArgumentException(name + " has gradientNormalization=" + normalization + ": expected None"
                    + " for BatchNormalization in a pipeline (DL4J normalizes the running statistics' update together"
                    + " with the gradient, which has no per-microbatch meaning); fix: remove gradient"
                    + " normalization from"
                    + " this layer");
        }
    }

    /** Weight noise keeps one sample per layer between forward and backward; nested layers' dropout is not replayed. */
    private static void checkNoiseFree(String name, Layer layer, boolean nested) {
        if (nested && layer.getIDropout() != null) {
            throw new IllegalArgumentException(name + " has dropout=" + layer.getIDropout() + ": expected dropout only on"
                    + " the outer layer of a pipelined network (a stage gives each microbatch its own mask through the"
                    + " layers it holds, not through wrapped ones); fix: move the dropout to the wrapper layer");
        }
        if (layer instanceof BaseLayer base && base.getWeightNoise() != null) {
            throw new IllegalArgumentException(name + " has weightNoise=" + base.getWeightNoise() + ": not supported in"
                    + " pipeline stages, expected none (DL4J keeps one noise sample per layer, from its latest forward"
                    + " pass, and with several microbatches in flight a backward pass would use another microbatch's);"
                    + " fix: remove weight noise from the configuration");
        }
    }
}
