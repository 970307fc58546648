package org.symmem4j.serving.host;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.DropoutLayer;
import org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.conf.preprocessor.CnnToFeedForwardPreProcessor;
import org.deeplearning4j.nn.conf.preprocessor.FeedForwardToCnnPreProcessor;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.api.buffer.DataType;

/**
 * What a {@link HostNetwork} runs, worked out from the configuration alone: per layer its kind, geometry, activation
 * and where its parameters start in the flat vector (DL4J's layout: layers in order; a convolution's bias
 * {@code [nOut]} first, then W {@code [nOut, nIn, kH, kW]} 'c'; a dense or output layer's W {@code [nIn, nOut]} 'f'
 * first, then b {@code [nOut]}; a batch normalization's gamma, beta (both absent with {@code lockGammaBeta}), mean,
 * then var or log10 stdev, {@code [nOut]} each). Layers that are the identity at inference (a {@code DropoutLayer},
 * any layer's dropout) add no step. Every refusal happens here, before any kernel or buffer exists.
 *
 * @param steps        per layer, the builder of its kernel over a parameter segment
 * @param exampleShape one input example's shape
 * @param outputShape  one output example's shape
 * @param numParams    the parameter count the layout accounts for
 */
record NetworkPlan(List<Step> steps, long[] exampleShape, long[] outputShape, long numParams) {

    /** Builds one layer's kernel over the network's parameters. */
    @FunctionalInterface
    interface Step {
        HostLayer over(MemorySegment params);
    }

    static final String FIX = "fix: serve it through DL4J's forward (ModelSpec.of)";

    /** The layer types the host path runs, for the refusal of any other. */
    static final String SUPPORTED = "ConvolutionLayer, SubsamplingLayer, DenseLayer, OutputLayer, BatchNormalization,"
            + " DropoutLayer, ActivationLayer, GlobalPoolingLayer";

    /**
     * Plans a configuration.
     *
     * @param conf         the configuration
     * @param exampleShape one input example: {@code [n]} for a flat input, {@code [c, h, w]} for an NCHW image
     * @return the plan
     * @throws IllegalArgumentException naming the layer, its type or setting, and the fix, for anything unsupported
     */
    static NetworkPlan of(MultiLayerConfiguration conf, long... exampleShape) {
        if (conf.getDataType() != DataType.FLOAT) {
            throw new IllegalArgumentException("network dataType=" + conf.getDataType() + ", the host inference path"
                    + " runs FLOAT only (" + FIX + ", or build the network with dataType(DataType.FLOAT))");
        }
        if (exampleShape.length != 1 && exampleShape.length != 3
                || Arrays.stream(exampleShape).anyMatch(d -> d < 1 || d > Integer.MAX_VALUE)) {
            throw new IllegalArgumentException("example shape " + Arrays.toString(exampleShape) + " expected [n] (flat)"
                    + " or [channels, height, width] (NCHW) of positive sizes (fix: pass one example's shape without"
                    + " the batch dimension, e.g. 784 or 1, 28, 28)");
        }
        int[] shape = Arrays.stream(exampleShape).mapToInt(d -> (int) d).toArray();
        List<Step> steps = new ArrayList<>();
        long offset = 0;
        for (int i = 0; i < conf.getConfs().size(); i++) {
            shape = preprocess(i, conf.getInputPreProcess(i), shape);
            Layer layer = conf.getConf(i).getLayer();
            long count = layer.initializer().numParams(layer);
            long planned;
            switch (layer) {
                case ConvolutionLayer c when c.getClass() == ConvolutionLayer.class -> {
                    int[] in = image(i, "ConvolutionLayer", shape);
                    check(i, "ConvolutionLayer", "cnn2dDataFormat=" + c.getCnn2dDataFormat(),
                            c.getCnn2dDataFormat() == CNN2DFormat.NCHW);
                    check(i, "ConvolutionLayer", "dilation=" + Arrays.toString(c.getDilation()),
                            c.getDilation()[0] == 1 && c.getDilation()[1] == 1);
                    check(i, "ConvolutionLayer", "nIn=" + c.getNIn() + " for an input of channels=" + in[0],
                            c.getNIn() == in[0]);
                    ConvolutionMode mode = mode(i, "ConvolutionLayer", c.getConvolutionMode());
                    noWeightNoise(i, "ConvolutionLayer", c);
                    HostActivation act = activation(i, "ConvolutionLayer", c.getActivationFn(), false);
                    Window2d g = Window2d.of(i, "ConvolutionLayer", mode, c.getKernelSize(), c.getStride(),
                            c.getPadding(), in[0], in[1], in[2]);
                    int outC = (int) c.getNOut();
                    long biasOff = c.hasBias() ? offset * Float.BYTES : -1;
                    long weightsOff = (offset + (c.hasBias() ? outC : 0)) * Float.BYTES;
                    planned = (c.hasBias() ? outC : 0) + (long) outC * g.channels() * g.kH() * g.kW();
                    steps.add(p -> new ConvKernel(g, outC, p, weightsOff, biasOff, act));
                    shape = new int[] {outC, g.outH(), g.outW()};
                }
                case SubsamplingLayer s when s.getClass() == SubsamplingLayer.class -> {
                    int[] in = image(i, "SubsamplingLayer", shape);
                    check(i, "SubsamplingLayer", "cnn2dDataFormat=" + s.getCnn2dDataFormat(),
                            s.getCnn2dDataFormat() == CNN2DFormat.NCHW);
                    check(i, "SubsamplingLayer", "dilation=" + Arrays.toString(s.getDilation()),
                            s.getDilation()[0] == 1 && s.getDilation()[1] == 1);
                    check(i, "SubsamplingLayer", "poolingType=" + s.getPoolingType(),
                            s.getPoolingType() == PoolingType.MAX || s.getPoolingType() == PoolingType.AVG);
                    ConvolutionMode mode = mode(i, "SubsamplingLayer", s.getConvolutionMode());
                    Window2d g = Window2d.of(i, "SubsamplingLayer", mode, s.getKernelSize(), s.getStride(),
                            s.getPadding(), in[0], in[1], in[2]);
                    boolean max = s.getPoolingType() == PoolingType.MAX;
                    boolean includePad = s.isAvgPoolIncludePadInDivisor();
                    planned = 0;
                    steps.add(p -> new PoolKernel(g, max, includePad));
                    shape = new int[] {g.channels(), g.outH(), g.outW()};
                }
                case DenseLayer d when d.getClass() == DenseLayer.class -> {
                    check(i, "DenseLayer", "hasLayerNorm=true", !d.hasLayerNorm());
                    noWeightNoise(i, "DenseLayer", d);
                    planned = dense(i, "DenseLayer", d.getNIn(), d.getNOut(), d.hasBias(), activation(i, "DenseLayer",
                            d.getActivationFn(), true), shape, offset, steps);
                    shape = new int[] {(int) d.getNOut()};
                }
                case OutputLayer o when o.getClass() == OutputLayer.class -> {
                    noWeightNoise(i, "OutputLayer", o);
                    planned = dense(i, "OutputLayer", o.getNIn(), o.getNOut(), o.hasBias(), activation(i, "OutputLayer",
                            o.getActivationFn(), true), shape, offset, steps);
                    shape = new int[] {(int) o.getNOut()};
                }
                case BatchNormalization b when b.getClass() == BatchNormalization.class ->
                        planned = batchNorm(i, b, shape, offset, steps);
                // DL4J's DropoutLayer returns its input unchanged when not training (its activation is not applied)
                case DropoutLayer d when d.getClass() == DropoutLayer.class -> planned = 0;
                case ActivationLayer a when a.getClass() == ActivationLayer.class -> {
                    HostActivation act = activation(i, "ActivationLayer", a.getActivationFn(), shape.length == 1);
                    int size = Arrays.stream(shape).reduce(1, (x, y) -> x * y);
                    planned = 0;
                    steps.add(p -> new ActivationKernel(size, act));
                }
                case GlobalPoolingLayer gp when gp.getClass() == GlobalPoolingLayer.class -> {
                    planned = 0;
                    shape = globalPooling(i, gp, shape, steps);
                }
                default -> throw new IllegalArgumentException("layer=" + i + " type=" + layer.getClass().getSimpleName()
                        + " is not supported by the host inference path (supported: " + SUPPORTED + "; " + FIX + ")");
            }
            if (planned != count) {
                throw new IllegalArgumentException("layer=" + i + " type=" + layer.getClass().getSimpleName()
                        + " has params=" + count + " where the host layout expects " + planned + " (" + FIX + ")");
            }
            offset += count;
        }
        long[] out = Arrays.stream(shape).asLongStream().toArray();
        return new NetworkPlan(List.copyOf(steps), exampleShape.clone(), out, offset);
    }

    /**
     * Plans a batch normalization over a flat input (per feature) or an NCHW one (per channel); the shape stays.
     *
     * @return the parameters it takes
     */
    private static long batchNorm(int i, BatchNormalization b, int[] shape, long offset, List<Step> steps) {
        String type = "BatchNormalization";
        check(i, type, "input of shape " + Arrays.toString(shape) + " (expected [features] or [channels, height,"
                + " width])", shape.length == 1 || shape.length == 3);
        if (shape.length == 3) {
            check(i, type, "cnn2DFormat=" + b.getCnn2DFormat(), b.getCnn2DFormat() == CNN2DFormat.NCHW);
        }
        int channels = shape[0];
        int plane = shape.length == 3 ? shape[1] * shape[2] : 1;
        check(i, type, "nOut=" + b.getNOut() + " for an input of channels=" + channels, b.getNOut() == channels);
        noWeightNoise(i, type, b);
        boolean locked = b.isLockGammaBeta();
        long gammaOff = locked ? -1 : offset * Float.BYTES;
        long meanOff = (offset + (locked ? 0 : 2L * channels)) * Float.BYTES;
        double gamma = b.getGamma(), beta = b.getBeta(), eps = b.getEps();
        boolean logStd = b.isUseLogStd();
        steps.add(p -> new BatchNormKernel(channels, plane, p, gammaOff, gamma, beta, meanOff, logStd, eps));
        return (locked ? 2L : 4L) * channels;
    }

    /** Plans a global pooling over an NCHW input; {@return the output shape, [c] or, kept, [c, 1, 1]} */
    private static int[] globalPooling(int i, GlobalPoolingLayer gp, int[] shape, List<Step> steps) {
        String type = "GlobalPoolingLayer";
        int[] in = image(i, type, shape);
        GlobalPoolKernel.Reduction reduction = switch (gp.getPoolingType()) {
            case MAX -> GlobalPoolKernel.Reduction.MAX;
            case AVG -> GlobalPoolKernel.Reduction.AVG;
            case SUM -> GlobalPoolKernel.Reduction.SUM;
            case null, default -> null;
        };
        check(i, type, "poolingType=" + gp.getPoolingType() + " (supported: MAX, AVG, SUM)", reduction != null);
        int[] dims = gp.getPoolingDimensions();
        check(i, type, "poolingDimensions=" + Arrays.toString(dims) + " (supported: 2, 3, DL4J's default for NCHW)",
                dims == null || Arrays.equals(dims, new int[] {2, 3}));
        steps.add(p -> new GlobalPoolKernel(in[0], in[1] * in[2], reduction));
        return gp.isCollapseDimensions() ? new int[] {in[0]} : new int[] {in[0], 1, 1};
    }

    private static long dense(int i, String type, long nIn, long nOut, boolean hasBias, HostActivation act,
                              int[] shape, long offset, List<Step> steps) {
        check(i, type, "input of shape " + Arrays.toString(shape) + " (expected a flat input; an image needs the"
                + " CnnToFeedForwardPreProcessor that setInputType adds)", shape.length == 1);
        check(i, type, "nIn=" + nIn + " for an input of size=" + shape[0], nIn == shape[0]);
        long weightsOff = offset * Float.BYTES;
        long biasOff = hasBias ? (offset + nIn * nOut) * Float.BYTES : -1;
        int in = (int) nIn, out = (int) nOut;
        steps.add(p -> new DenseKernel(in, out, p, weightsOff, biasOff, act));
        return nIn * nOut + (hasBias ? nOut : 0);
    }

    private static int[] preprocess(int i, InputPreProcessor pre, int[] shape) {
        return switch (pre) {
            case null -> shape;
            case CnnToFeedForwardPreProcessor c when c.getClass() == CnnToFeedForwardPreProcessor.class -> {
                // DL4J reshapes [n, c, h, w] to [n, c * h * w] in 'c' order: the NCHW example as it lies
                check(i, "CnnToFeedForwardPreProcessor", "format=" + c.getFormat(), c.getFormat() == CNN2DFormat.NCHW);
                check(i, "CnnToFeedForwardPreProcessor", "input of shape " + Arrays.toString(shape), shape.length == 3);
                yield new int[] {shape[0] * shape[1] * shape[2]};
            }
            case FeedForwardToCnnPreProcessor f when f.getClass() == FeedForwardToCnnPreProcessor.class -> {
                // DL4J reshapes [n, c * h * w] to [n, c, h, w] in 'c' order
                int[] image = {(int) f.getNumChannels(), (int) f.getInputHeight(), (int) f.getInputWidth()};
                check(i, "FeedForwardToCnnPreProcessor", "image " + Arrays.toString(image) + " for an input of shape "
                        + Arrays.toString(shape), Arrays.stream(shape).reduce(1, (a, b) -> a * b)
                        == image[0] * image[1] * image[2]);
                yield image;
            }
            default -> throw new IllegalArgumentException("layer=" + i + " input preprocessor="
                    + pre.getClass().getSimpleName() + " is not supported by the host inference path (supported:"
                    + " CnnToFeedForwardPreProcessor, FeedForwardToCnnPreProcessor; " + FIX + ")");
        };
    }

    private static int[] image(int i, String type, int[] shape) {
        check(i, type, "input of shape " + Arrays.toString(shape) + " (expected [channels, height, width])",
                shape.length == 3);
        return shape;
    }

    private static ConvolutionMode mode(int i, String type, ConvolutionMode mode) {
        check(i, type, "convolutionMode=" + mode + " (supported: Truncate, Same)",
                mode == ConvolutionMode.Truncate || mode == ConvolutionMode.Same);
        return mode;
    }

    private static HostActivation activation(int i, String type, IActivation fn, boolean flat) {
        HostActivation a = HostActivation.of(fn);
        check(i, type, "activation=" + fn + " (supported: identity, relu, tanh, sigmoid" + (flat ? ", softmax" : "")
                + ")", a != null && (flat || a != HostActivation.SOFTMAX));
        return a;
    }

    /**
     * Refuses weight noise ({@code WeightNoise}, {@code DropConnect}): DL4J applies it to the biases even at
     * inference when it is set to, which the host path does not do.
     */
    private static void noWeightNoise(int i, String type, BaseLayer layer) {
        check(i, type, "weightNoise=" + layer.getWeightNoise(), layer.getWeightNoise() == null);
    }

    private static void check(int i, String type, String setting, boolean ok) {
        if (!ok) {
            throw new IllegalArgumentException("layer=" + i + " type=" + type + " " + setting + " is not supported by"
                    + " the host inference path (" + FIX + ")");
        }
    }
}
