package org.symmem4j.serving.host;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.slf4j.LoggerFactory;

/**
 * The forward pass of a DL4J {@code MultiLayerConfiguration} of common layers, run in Java with
 * {@code jdk.incubator.vector} over the network's flat FP32 parameters, read in place (zero-copy) from the segment
 * {@code SharedNetworks} would put a DL4J network over. Inference only, one thread per instance.
 *
 * <p>Supported: {@code ConvolutionLayer} (2-D NCHW, any kernel, stride and padding, Truncate or Same, bias on or off,
 * dilation 1), {@code SubsamplingLayer} MAX and AVG (Truncate or Same, dilation 1), {@code DenseLayer} (no layer
 * norm), {@code OutputLayer} (its activation; the loss is ignored), {@code BatchNormalization} (per feature or per
 * NCHW channel, with its global mean and variance, {@code lockGammaBeta} and {@code useLogStd} either way),
 * {@code DropoutLayer} and any layer's dropout (the identity at inference), {@code ActivationLayer},
 * {@code GlobalPoolingLayer} MAX, AVG and SUM over an NCHW input (collapsing its dimensions or not), activations
 * identity, ReLU, tanh, sigmoid and (on flat layers) softmax, and the {@code CnnToFeedForwardPreProcessor} /
 * {@code FeedForwardToCnnPreProcessor} that {@code setInputType} adds; no weight noise. Anything else is refused by {@link #of} before anything is built, with an error naming
 * the layer, its type or setting, and the fix (serve it through DL4J's forward, {@code ModelSpec.of}).
 *
 * <p>Scratch: two activation buffers sized for the largest batch seen so far (grown, never shrunk), plus one
 * example's im2col matrix per convolution; nothing is allocated per call but the returned array.
 */
public final class HostNetwork {

    private final NetworkPlan plan;
    private final List<HostLayer> layers;
    private final int inSize;
    private final int outSize;
    private final int maxSize;
    private float[] ping = new float[0];
    private float[] pong = new float[0];

    private HostNetwork(NetworkPlan plan, MemorySegment params) {
        this.plan = plan;
        this.layers = plan.steps().stream().map(s -> s.over(params)).toList();
        // from the shapes, not the first and last steps: layers that are the identity at inference add no step
        this.inSize = Math.toIntExact(Arrays.stream(plan.exampleShape()).reduce(1, Math::multiplyExact));
        this.outSize = Math.toIntExact(Arrays.stream(plan.outputShape()).reduce(1, Math::multiplyExact));
        this.maxSize = layers.stream().mapToInt(l -> Math.max(l.inSize(), l.outSize())).reduce(inSize, Math::max);
    }

    /**
     * A host network over {@code params}.
     *
     * @param conf         the configuration (FLOAT, of the supported layers)
     * @param params       the flat parameters, {@code numParams x 4} bytes, in DL4J's layout (a network's
     *                     {@code params()}); read in place for the network's life, never written
     * @param exampleShape one input example: {@code [n]} flat, or {@code [channels, height, width]}
     * @return the network
     * @throws IllegalArgumentException for an unsupported layer, activation, setting or data type, or a segment of
     *                                  the wrong size, before anything is built
     */
    public static HostNetwork of(MultiLayerConfiguration conf, MemorySegment params, long... exampleShape) {
        Objects.requireNonNull(conf, "conf");
        Objects.requireNonNull(params, "params");
        NetworkPlan plan = NetworkPlan.of(conf, exampleShape);
        if (params.byteSize() != plan.numParams() * Float.BYTES) {
            throw new IllegalArgumentException("host network parameters of bytes=" + params.byteSize() + " expected "
                    + plan.numParams() * Float.BYTES + " (" + plan.numParams() + " FLOAT params of this configuration;"
                    + " fix: pass the parameters of a network built from the same configuration)");
        }
        warnIfNotCompiled();
        return new HostNetwork(plan, params);
    }

    /** Whether this JVM was warned already that it cannot compile the host path's loops. */
    private static final AtomicBoolean WARNED = new AtomicBoolean();

    /**
     * Warns once per JVM when it runs without C2 (C1 only, as {@code WorkerJvm}'s default worker flags have it, or the
     * interpreter): the Vector API's loops are then not compiled to vector instructions and the host path runs many
     * times slower than DL4J's forward, correct but slow.
     */
    private static void warnIfNotCompiled() {
        if (WARNED.get()) {
            return;
        }
        String reason = withoutC2();
        if (reason != null && WARNED.compareAndSet(false, true)) {
            LoggerFactory.getLogger(HostNetwork.class).warn("the host inference path runs in a JVM started with "
                    + reason + ": the Vector API's loops are not compiled to vector instructions without C2 and run"
                    + " many times slower than DL4J's forward (fix: start this JVM without it; for worker JVMs started"
                    + " with WorkerJvm's defaults, set SYMMEM4J_WORKER_JVM_FLAGS to those flags without"
                    + " -XX:TieredStopAtLevel=1, or serve the model with ModelSpec.of)");
        }
    }

    /**
     * {@return the flag this JVM was started with that leaves C2 out ({@code -XX:TieredStopAtLevel=1}, {@code -Xint}),
     * or null when C2 compiles the host path's loops here}: without C2 the host path is correct but about 150 times
     * slower (measured: the serving CNN at batch 8, 22 ms per example against 0.15 ms), slower than DL4J's forward
     */
    public static String withoutC2() {
        return withoutC2(ManagementFactory.getRuntimeMXBean().getInputArguments());
    }

    /**
     * {@return the JVM flag that leaves C2 out, as this JVM's arguments give it (the last one of a repeated flag wins),
     * or null when C2 is there}
     *
     * @param jvmArguments the JVM's input arguments
     */
    static String withoutC2(List<String> jvmArguments) {
        String reason = null;
        for (String a : jvmArguments) {
            if (a.equals("-Xint")) {
                reason = "-Xint (the interpreter only)";
            } else if (a.startsWith("-XX:TieredStopAtLevel=")) {
                try {
                    reason = Integer.parseInt(a.substring("-XX:TieredStopAtLevel=".length()).trim()) < 4
                            ? a + " (no C2)" : null;
                } catch (NumberFormatException notANumber) {
                    // the JVM would not have started with it
                }
            }
        }
        return reason;
    }

    /**
     * Checks that the host path supports a configuration, without parameters.
     *
     * @param conf         the configuration
     * @param exampleShape one input example's shape
     * @throws IllegalArgumentException as {@link #of} would
     */
    public static void check(MultiLayerConfiguration conf, long... exampleShape) {
        NetworkPlan.of(Objects.requireNonNull(conf, "conf"), exampleShape);
    }

    /**
     * {@return the floating-point operations of one example's forward pass (2 per multiply-add; pooling counted once
     * per cell)}
     */
    public long flopsPerExample() {
        return layers.stream().mapToLong(HostLayer::flopsPerExample).sum();
    }

    /**
     * Runs the forward pass.
     *
     * @param features {@code [rows, ...exampleShape]}, any data type and order (FLOAT 'c' is read without a copy
     *                 into a temporary)
     * @return {@code [rows, ...outputShape]} FLOAT
     */
    public INDArray output(INDArray features) {
        long[] s = features.shape();
        if (s.length != plan.exampleShape().length + 1 || s[0] < 1 || s[0] > Integer.MAX_VALUE / maxSize
                || !Arrays.equals(s, 1, s.length, plan.exampleShape(), 0, plan.exampleShape().length)) {
            throw new IllegalArgumentException("host network features shape=" + Arrays.toString(s) + " expected [rows, "
                    + Arrays.toString(plan.exampleShape()).replaceAll("[\\[\\]]", "") + "] (fix: send rows of this"
                    + " network's input shape)");
        }
        int rows = (int) s[0];
        ensure(rows);
        read(features, ping, rows * inSize);
        float[] in = forward(rows);
        long[] shape = new long[plan.outputShape().length + 1];
        shape[0] = rows;
        System.arraycopy(plan.outputShape(), 0, shape, 1, plan.outputShape().length);
        return Nd4j.create(Arrays.copyOf(in, rows * outSize), shape, 'c');
    }

    /**
     * Forward passes a warm-up runs at most. C2 compiles a loop once its back-edge counter passes
     * {@code -XX:Tier4BackEdgeThreshold} (40,000 by default; on-stack replacement first, the whole method later): a
     * pass runs each inner loop hundreds to thousands of times, so a few dozen passes reach it; 200 leaves room for
     * the per-layer methods, called once a pass, and the time budget ends the warm-up first on a large network.
     */
    public static final int WARM_UP_PASSES = 200;

    /**
     * Runs the forward pass on zeros, of one row and, every fourth pass, of {@code maxRows} rows (the smallest and
     * largest batches a router forms: their loops take different paths), until {@link #WARM_UP_PASSES} passes ran or {@code budget}
     * is spent, whichever comes first; then the scratch holds {@code maxRows} rows. The JIT compiles the host path's
     * loops during these passes instead of during the first requests. It changes nothing that later answers depend
     * on: the parameters are only read, and the scratch is overwritten by every pass.
     *
     * @param maxRows the largest batch this network will be given, at least 1
     * @param budget  the longest the warm-up runs (one pass may end past it)
     * @return the passes run
     * @throws IllegalArgumentException when {@code maxRows} is below 1 or too large for one batch, or the budget is
     *                                  negative
     */
    public int warmUp(int maxRows, Duration budget) {
        Objects.requireNonNull(budget, "budget");
        if (maxRows < 1 || maxRows > Integer.MAX_VALUE / maxSize || budget.isNegative()) {
            throw new IllegalArgumentException("host network warm-up maxRows=" + maxRows + " budget=" + budget
                    + " expected maxRows in [1, " + Integer.MAX_VALUE / maxSize + "] and a budget >= 0 (fix: pass"
                    + " the router's maxBatch and a short budget, e.g. 200 ms)");
        }
        long deadline = System.nanoTime() + budget.toNanos();
        ensure(maxRows);
        int passes = 0;
        while (passes < WARM_UP_PASSES && System.nanoTime() - deadline < 0) {
            // mostly one row: the loops' counters grow with the work, and one row is the least work per pass (a
            // cold pass of 32 CNN rows takes over a second interpreted); every fourth pass the largest batch, whose
            // blocked paths (four rows at a time) one row never takes
            int rows = passes % 4 == 3 ? maxRows : 1;
            Arrays.fill(ping, 0, rows * inSize, 0f);
            forward(rows);
            passes++;
        }
        return passes;
    }

    /** Runs the layers over the {@code rows} examples in {@link #ping}; {@return the buffer holding the output} */
    private float[] forward(int rows) {
        float[] in = ping, out = pong;
        for (HostLayer layer : layers) {
            layer.forward(in, out, rows);
            float[] t = in;
            in = out;
            out = t;
        }
        return in;
    }

    private void ensure(int rows) {
        int n = rows * maxSize;
        if (ping.length < n) {
            ping = new float[n];
            pong = new float[n];
        }
    }

    private static void read(INDArray features, float[] dst, int n) {
        INDArray f = features;
        if (f.dataType() != DataType.FLOAT || f.ordering() != 'c' || f.isView() || f.data().length() != n) {
            f = f.castTo(DataType.FLOAT).dup('c');
        }
        MemorySegment src = MemorySegment.ofAddress(f.data().address()).reinterpret((long) n * Float.BYTES);
        MemorySegment.copy(src, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, dst, 0, n);
    }
}
