package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.lang.ref.Reference;
import java.time.Duration;
import java.util.Arrays;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;

import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.slf4j.LoggerFactory;
import org.symmem4j.serving.host.HostNetwork;
import org.symmem4j.serving.weights.SharedNetworks;

/**
 * What the router needs to serve a model version: how to build a network over shared parameters, and the shape of
 * one input example (the features of a request are {@code [rows, ...exampleShape]}).
 */
public final class ModelSpec {

    /** A network that maps a batch of features to a batch of outputs; used by one thread at a time. */
    @FunctionalInterface
    public interface Network {
        /**
         * @param features {@code [rows, ...exampleShape]}
         * @return {@code [rows, ...]}
         */
        INDArray output(INDArray features);
    }

    private final Function<MemorySegment, Network> factory;
    private final long[] exampleShape;
    private final DataType dataType;
    private final String kind;
    /** The configuration as JSON, for worker processes to build the same network; null for a custom network. */
    private final String configJson;

    private ModelSpec(Function<MemorySegment, Network> factory, long[] exampleShape, DataType dataType, String kind) {
        this(factory, exampleShape, dataType, kind, null);
    }

    private ModelSpec(Function<MemorySegment, Network> factory, long[] exampleShape, DataType dataType, String kind,
                      String configJson) {
        if (exampleShape.length == 0 || Arrays.stream(exampleShape).anyMatch(d -> d < 1)) {
            throw new IllegalArgumentException("example shape " + Arrays.toString(exampleShape) + " expected one or"
                    + " more positive dimensions (fix: pass the shape of one input row, without the batch dimension,"
                    + " e.g. 784 for MNIST)");
        }
        this.factory = factory;
        this.exampleShape = exampleShape.clone();
        this.dataType = dataType;
        this.kind = kind;
        this.configJson = configJson;
    }

    /**
     * A multi-layer network.
     *
     * @param conf         its configuration
     * @param exampleShape one example's shape, e.g. {@code 784} for an MLP or {@code 1, 28, 28} for a CNN
     * @return the spec
     */
    public static ModelSpec of(MultiLayerConfiguration conf, long... exampleShape) {
        Objects.requireNonNull(conf, "conf");
        MultiLayerConfiguration c = conf.clone();
        return new ModelSpec(params -> {
            MultiLayerNetwork net = SharedNetworks.multiLayer(c, params);
            return features -> net.output(features, false);
        }, exampleShape, conf.getDataType(), MULTI_LAYER, c.toJson());
    }

    /**
     * A multi-layer network run by the host path: {@link HostNetwork}, the forward pass in Java (the Vector API) over
     * the version's shared parameters, read in place, instead of DL4J's forward. For networks of 2-D convolutions,
     * max and average pooling, dense and output layers, batch normalization, dropout, activation and global pooling
     * layers (the LeNet-like CNN of the serving benchmark runs 7-11 times
     * faster per example than DL4J's forward on one thread: {@code bench/results/2026-11-30-host-inference-2core-loaded.md}).
     * Its answers agree with DL4J's to float rounding, not bitwise ({@code HostNetworkTest}: within 1e-4 relative,
     * measured 9e-8). Worker threads and worker processes both run it; a JVM without C2 (started with
     * {@code -XX:TieredStopAtLevel=1}, as {@code WorkerJvm}'s default worker flags are) serves it on DL4J's forward
     * instead, with a warning, since the host path's loops would run there about 150 times slower.
     *
     * @param conf         its configuration (FLOAT)
     * @param exampleShape one example's shape, e.g. {@code 784} for an MLP or {@code 1, 28, 28} for a CNN
     * @return the spec
     * @throws IllegalArgumentException when the configuration has a layer, activation, setting or data type the host
     *                                  path lacks (the message names the layer; fix: {@link #of(MultiLayerConfiguration,
     *                                  long...)}, DL4J's forward)
     */
    public static ModelSpec ofHostPath(MultiLayerConfiguration conf, long... exampleShape) {
        Objects.requireNonNull(conf, "conf");
        MultiLayerConfiguration c = conf.clone();
        long[] shape = exampleShape.clone();
        ModelSpec spec = new ModelSpec(params -> hostOrDl4j(c, params, shape, HostNetwork.withoutC2()), shape,
                conf.getDataType(), HOST_MULTI_LAYER, c.toJson());
        HostNetwork.check(c, shape); // refused here, at deploy, not in the first batch
        return spec;
    }

    /** Whether this JVM said already that it serves host-path models on DL4J's forward. */
    private static final AtomicBoolean FALLBACK_WARNED = new AtomicBoolean();

    /**
     * A host-path network over {@code params}, or, in a JVM without C2 ({@code noC2} names its flag), DL4J's network
     * over them: there the host path's loops would run about 150 times slower, slower than DL4J, so the JVM serves the
     * same answers (to float rounding) on DL4J's forward, with a warning.
     */
    static Network hostOrDl4j(MultiLayerConfiguration c, MemorySegment params, long[] shape, String noC2) {
        if (noC2 == null) {
            return HostNetwork.of(c, params, shape)::output;
        }
        warnHostPathFallback(noC2);
        MultiLayerNetwork net = SharedNetworks.multiLayer(c, params);
        return features -> net.output(features, false);
    }

    /**
     * The longest a host-path warm-up runs at deploy ({@link #warmUp}). Deploy waits for it, so it is kept to a few
     * hundred milliseconds; measured on the 2-core VM under load (load average 5-8), a cold JVM's first pass of the
     * serving CNN alone takes 0.2-0.6 s and its first 32-row pass 0.7-1.3 s, so 300 ms covers the first passes and
     * the class initialisation, and sets the JIT's counters past the thresholds that queue the loops' first
     * compilations (which then finish on the compiler threads), not the whole warm-up of a loaded machine.
     */
    static final Duration HOST_PATH_WARM_UP = Duration.ofMillis(300);

    /**
     * Warms the host path's loops for this spec before its first request: for a host-path spec in a JVM with C2,
     * builds a {@link HostNetwork} over {@code params} (the deployed parameters, read in place, never written) and
     * runs {@link HostNetwork#warmUp} with up to {@code maxRows} rows for at most {@link #HOST_PATH_WARM_UP}. Any other
     * spec: nothing. The JIT's work is the JVM's, so the networks the worker threads build later run compiled code.
     *
     * @param model   the model's name, for the log
     * @param params  the parameters being deployed (FLOAT)
     * @param maxRows the router's largest batch
     * @return the forward passes run (0 when nothing was to warm)
     * @throws IllegalArgumentException when the parameters do not fit the configuration
     */
    int warmUp(String model, INDArray params, int maxRows) {
        if (!HOST_MULTI_LAYER.equals(kind) || HostNetwork.withoutC2() != null) {
            return 0;
        }
        INDArray flat = params;
        if (flat.isView() || flat.data().length() != flat.length()) {
            flat = flat.dup('c'); // a vector of its own, from its buffer's first float
        }
        long bytes = flat.length() * Float.BYTES;
        MemorySegment segment = MemorySegment.ofAddress(flat.data().address()).reinterpret(bytes);
        long start = System.nanoTime();
        int passes = HostNetwork.of(MultiLayerConfiguration.fromJson(configJson), segment, exampleShape)
                .warmUp(maxRows, HOST_PATH_WARM_UP);
        Reference.reachabilityFence(flat); // ND4J frees an array's memory once it is unreachable: not while read
        LoggerFactory.getLogger(ModelSpec.class).debug("model '{}': host path warmed up in {} forward passes of 1 and"
                + " {} rows, {} ms", model, passes, maxRows, (System.nanoTime() - start) / 1_000_000);
        return passes;
    }

    private static void warnHostPathFallback(String noC2) {
        if (FALLBACK_WARNED.compareAndSet(false, true)) {
            LoggerFactory.getLogger(ModelSpec.class).warn("models deployed on the host path run DL4J's"
                    + " forward in this JVM: it was started with " + noC2 + ", and the host path's Vector API loops"
                    + " need C2 (without it about 150 times slower) (fix: start this JVM without that flag; worker"
                    + " JVMs of WorkerJvm's defaults: set SYMMEM4J_WORKER_JVM_FLAGS to them without"
                    + " -XX:TieredStopAtLevel=1)");
        }
    }

    /**
     * A computation graph with one input and one output.
     *
     * @param conf         its configuration
     * @param exampleShape one example's shape
     * @return the spec
     */
    public static ModelSpec of(ComputationGraphConfiguration conf, long... exampleShape) {
        Objects.requireNonNull(conf, "conf");
        if (conf.getNetworkInputs().size() != 1 || conf.getNetworkOutputs().size() != 1) {
            throw new IllegalArgumentException("computation graph with inputs=" + conf.getNetworkInputs() + " outputs="
                    + conf.getNetworkOutputs() + ": the router serves graphs of one input and one output (fix: serve a"
                    + " graph with one input and one output, e.g. one that concatenates its inputs)");
        }
        ComputationGraphConfiguration c = conf.clone();
        return new ModelSpec(params -> {
            ComputationGraph net = SharedNetworks.graph(c, params);
            return features -> net.outputSingle(false, features);
        }, exampleShape, conf.getDataType(), GRAPH, c.toJson());
    }

    /**
     * Any network over shared parameters, e.g. a SameDiff graph, or a wrapper that adds pre- or post-processing.
     *
     * @param factory      builds a new network object over a version's parameters (called once per worker thread
     *                     that runs the version, and once at deploy to check it)
     * @param dataType     the parameters' and features' data type
     * @param exampleShape one example's shape
     * @return the spec
     */
    public static ModelSpec of(Function<MemorySegment, Network> factory, DataType dataType, long... exampleShape) {
        return new ModelSpec(Objects.requireNonNull(factory, "factory"), exampleShape,
                Objects.requireNonNull(dataType, "dataType"), "custom network");
    }

    static final String MULTI_LAYER = "MultiLayerNetwork";
    static final String HOST_MULTI_LAYER = "MultiLayerNetwork on the host path";
    static final String GRAPH = "ComputationGraph";

    /** {@return the configuration's JSON, or null for a custom network (which only worker threads can build)} */
    String configJson() {
        return configJson;
    }

    /** {@return "MultiLayerNetwork", "MultiLayerNetwork on the host path", "ComputationGraph" or "custom network"} */
    String kind() {
        return kind;
    }

    /**
     * The spec a worker process builds from what the router sent: the same configuration, from its JSON.
     *
     * @param kind         {@link #MULTI_LAYER}, {@link #HOST_MULTI_LAYER} or {@link #GRAPH}
     * @param configJson   the configuration's JSON
     * @param exampleShape one example's shape
     * @return the spec
     */
    static ModelSpec fromJson(String kind, String configJson, long... exampleShape) {
        return switch (kind) {
            case MULTI_LAYER -> of(MultiLayerConfiguration.fromJson(configJson), exampleShape);
            case HOST_MULTI_LAYER -> ofHostPath(MultiLayerConfiguration.fromJson(configJson), exampleShape);
            case GRAPH -> of(ComputationGraphConfiguration.fromJson(configJson), exampleShape);
            default -> throw org.symmem4j.parallel.Invariants.violated("a batch for a worker process names network"
                    + " kind='" + kind + "', expected " + MULTI_LAYER + ", " + HOST_MULTI_LAYER + " or " + GRAPH);
        };
    }

    /**
     * A network over {@code params}.
     *
     * @param params the version's shared parameters
     * @return a new network object sharing them
     */
    Network networkOver(MemorySegment params) {
        return factory.apply(params);
    }

    /** {@return one example's shape (a copy)} */
    public long[] exampleShape() {
        return exampleShape.clone();
    }

    /** {@return the parameters' and features' data type} */
    public DataType dataType() {
        return dataType;
    }

    /**
     * Checks a request's features.
     *
     * @param model    the model's name, for the message
     * @param features the features
     * @return the number of rows
     * @throws ServingException of kind BAD_INPUT when the shape is not {@code [rows, ...exampleShape]}
     */
    long rowsOf(String model, INDArray features) {
        long[] s = features.shape();
        boolean ok = s.length == exampleShape.length + 1 && s[0] >= 1;
        for (int i = 0; ok && i < exampleShape.length; i++) {
            ok = s[i + 1] == exampleShape[i];
        }
        if (!ok) {
            throw new ServingException(ServingException.Kind.BAD_INPUT, "model '" + model + "' features shape="
                    + Arrays.toString(s) + " expected [rows, " + Arrays.toString(exampleShape).replaceAll("[\\[\\]]", "")
                    + "] with rows >= 1 (fix: send rows of this model's input shape)");
        }
        return s[0];
    }

    @Override
    public String toString() {
        return kind + " exampleShape=" + Arrays.toString(exampleShape) + " dataType=" + dataType;
    }
}
