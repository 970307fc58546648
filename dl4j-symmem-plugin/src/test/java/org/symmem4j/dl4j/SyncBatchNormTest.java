package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Synchronized BatchNorm ({@code syncBatchNorm(true)}): N workers train a BatchNorm network like one model fitted on
 * the step's merged batch, in float64 to {@link #TOLERANCE} (largest |a − b| / (1 + |b|) over every parameter,
 * running statistics included), in thread mode and in group mode (each rank its own wrapper, as processes run it),
 * with batches of different sizes and a short last step that leaves workers idle. Without it the same runs land
 * far from that model (the control that shows the comparison can fail).
 */
class SyncBatchNormTest {

    /** Float64 rounding, accumulated over the steps (measured: at most ~1e-15). */
    static final double TOLERANCE = 1e-12;

    /** Dense → BatchNorm (variance) → dense → BatchNorm (log10 std) → softmax; Adam, so every weight moves. */
    static MultiLayerNetwork mlp() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(5).dataType(DataType.DOUBLE).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER)
                .list()
                // no bias before the first BatchNorm: the normalization cancels it, so its gradient is rounding noise,
                // which Adam would scale up to a step (a redundant bias, which BatchNorm networks leave out)
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.IDENTITY)
                        .hasBias(false).build())
                .layer(new BatchNormalization.Builder().nOut(Nets.HIDDEN).useLogStd(false).decay(0.8).build())
                .layer(new DenseLayer.Builder().nIn(Nets.HIDDEN).nOut(Nets.HIDDEN).activation(Activation.TANH).build())
                .layer(new BatchNormalization.Builder().nOut(Nets.HIDDEN).useLogStd(true).decay(0.7).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** Convolution → BatchNorm over channels (examples and positions) → convolution → BatchNorm → softmax; SGD. */
    static MultiLayerNetwork cnn() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(9).dataType(DataType.DOUBLE).updater(new Sgd(0.05)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new ConvolutionLayer.Builder(2, 2).nOut(4).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().useLogStd(true).decay(0.7).build())
                .layer(new ConvolutionLayer.Builder(2, 2).nOut(3).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().useLogStd(false).decay(0.9).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(StateNets.CNN_SIDE, StateNets.CNN_SIDE, StateNets.CNN_CHANNELS))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    static MultiLayerNetwork net(String kind) {
        return kind.equals("cnn") ? cnn() : mlp();
    }

    /**
     * Batches whose feature offsets and scales differ per batch (so per-worker statistics differ from the merged
     * batch's): {@code steps} full steps of {@code workers} batches, then one more batch alone when
     * {@code shortLastStep} (the other workers idle); sizes vary when {@code unequal}.
     */
    static List<DataSet> data(String kind, int workers, int steps, boolean unequal, boolean shortLastStep) {
        int[] sizes = new int[steps * workers + (shortLastStep ? 1 : 0)];
        for (int i = 0; i < sizes.length; i++) {
            sizes[i] = unequal ? 3 + (i * 5) % 7 : 6;
        }
        return kind.equals("cnn") ? StateNets.shiftedImageBatches(31, sizes, DataType.DOUBLE)
                : StateNets.shiftedBatches(29, sizes, DataType.DOUBLE);
    }

    /** One model fitted on each step's merged batch: the parameters after every step. */
    static List<INDArray> reference(MultiLayerNetwork initial, List<DataSet> data, int workers) {
        MultiLayerNetwork one = initial.clone();
        List<INDArray> perStep = new ArrayList<>();
        for (int s = 0; s * workers < data.size(); s++) {
            one.fit(Nets.merged(data.subList(s * workers, Math.min(data.size(), (s + 1) * workers))));
            perStep.add(one.params().dup());
        }
        return perStep;
    }

    static Stream<Arguments> cases() {
        return Stream.of(
                Arguments.of("mlp", 2, false, false),
                Arguments.of("mlp", 4, false, false),
                Arguments.of("mlp", 2, true, true),   // batches of different sizes, and a step with a worker idle
                Arguments.of("cnn", 2, false, false),
                Arguments.of("cnn", 4, false, true)); // three of four workers idle in the last step
    }

    @ParameterizedTest(name = "{0}, {1} worker threads, unequal={2}, short last step={3}")
    @MethodSource("cases")
    void workerThreadsTrainLikeOneModelOnTheMergedBatch(String kind, int workers, boolean unequal, boolean shortLast) {
        List<DataSet> data = data(kind, workers, 3, unequal, shortLast);
        MultiLayerNetwork initial = net(kind);
        List<INDArray> expected = reference(initial, data, workers);

        MultiLayerNetwork model = initial.clone();
        List<INDArray> synced = DataParallelEquivalenceTest.trainParallel(
                SymmemParallelWrapper.builder(model).workers(workers).ompThreadsPerWorker(1).syncBatchNorm(true), data);
        assertEquals(expected.size(), synced.size(), "steps");
        for (int s = 0; s < expected.size(); s++) {
            double diff = Nets.maxRelativeDifference(synced.get(s), expected.get(s));
            assertTrue(diff <= TOLERANCE, "step " + s + ": max relative difference " + diff + " > " + TOLERANCE);
        }
        double stateDiff = Nets.maxRelativeDifference(StateNets.stateParams(model), StateNets.stateParams(initialFitted(
                initial, expected.getLast())));
        assertTrue(stateDiff <= TOLERANCE, "running statistics: " + stateDiff);
        assertTrue(model.getLayer(1).getClass() == org.deeplearning4j.nn.layers.normalization.BatchNormalization.class,
                "the user's model keeps DL4J's layer: " + model.getLayer(1).getClass());

        // control: the same run without synchronization normalizes per worker and lands far away
        MultiLayerNetwork unsynced = initial.clone();
        List<INDArray> plain = DataParallelEquivalenceTest.trainParallel(
                SymmemParallelWrapper.builder(unsynced).workers(workers).ompThreadsPerWorker(1), data);
        double apart = Nets.maxRelativeDifference(plain.getLast(), expected.getLast());
        assertTrue(apart > 1e6 * TOLERANCE, "without syncBatchNorm the run should differ from one model: " + apart);
    }

    /** A network holding {@code params}, for {@link StateNets#stateParams}. */
    private static MultiLayerNetwork initialFitted(MultiLayerNetwork initial, INDArray params) {
        MultiLayerNetwork copy = initial.clone();
        copy.setParams(params.dup());
        return copy;
    }

    static Stream<Arguments> groupCases() {
        return Stream.of(
                Arguments.of("mlp", 2, true, true),
                Arguments.of("mlp", 4, false, false),
                Arguments.of("cnn", 2, false, false),
                Arguments.of("cnn", 4, true, true));
    }

    /**
     * Group mode: each rank its own wrapper with one worker on its rank of the group (threads of one JVM here, as the
     * launcher's processes run the same code); every rank equals one model on the merged batch, and equals thread
     * mode bitwise.
     */
    @ParameterizedTest(name = "{0}, {1} ranks, unequal={2}, short last step={3}")
    @MethodSource("groupCases")
    void ranksOfAGroupTrainLikeOneModelOnTheMergedBatch(String kind, int ranks, boolean unequal, boolean shortLast) {
        List<DataSet> data = data(kind, ranks, 3, unequal, shortLast);
        MultiLayerNetwork initial = net(kind);
        List<INDArray> expected = reference(initial, data, ranks);
        MultiLayerNetwork threadsModel = initial.clone();
        List<INDArray> threads = DataParallelEquivalenceTest.trainParallel(SymmemParallelWrapper.builder(threadsModel)
                .workers(ranks).ompThreadsPerWorker(1).syncBatchNorm(true), data);

        List<INDArray> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = initial.clone();
                    try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                            .syncBatchNorm(true).build()) {
                        w.fit(new BatchListIterator(data));
                    }
                    return mine.params().dup();
                });
        for (int r = 0; r < ranks; r++) {
            double diff = Nets.maxRelativeDifference(perRank.get(r), expected.getLast());
            assertTrue(diff <= TOLERANCE, "rank " + r + ": max relative difference " + diff + " > " + TOLERANCE);
            assertTrue(ModelReplica.bitwiseEqual(threads.getLast(), perRank.get(r)), "rank " + r
                    + ": differs bitwise from thread mode");
        }
        // control: group mode without synchronization
        List<INDArray> plain = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = initial.clone();
                    try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                            .build()) {
                        w.fit(new BatchListIterator(data));
                    }
                    return mine.params().dup();
                });
        double apart = Nets.maxRelativeDifference(plain.getFirst(), expected.getLast());
        assertTrue(apart > 1e6 * TOLERANCE, "without syncBatchNorm the run should differ from one model: " + apart);
    }

    /** A ComputationGraph: BatchNorm on the input and after a dense layer, merged for the output; Adam. */
    @Test
    void computationGraphTrainsLikeOneModelOnTheMergedBatch() {
        org.deeplearning4j.nn.conf.ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(13).dataType(DataType.DOUBLE).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER)
                .graphBuilder()
                .addInputs("in")
                .addLayer("bnIn", new BatchNormalization.Builder().nOut(Nets.IN).useLogStd(false).decay(0.8).build(), "in")
                .addLayer("dense", new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH)
                        .build(), "bnIn")
                .addLayer("bnHidden", new BatchNormalization.Builder().nOut(Nets.HIDDEN).build(), "dense")
                .addVertex("both", new org.deeplearning4j.nn.conf.graph.MergeVertex(), "bnIn", "bnHidden")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.IN + Nets.HIDDEN)
                        .nOut(Nets.OUT).activation(Activation.SOFTMAX).build(), "both")
                .setOutputs("out")
                .build();
        org.deeplearning4j.nn.graph.ComputationGraph initial = new org.deeplearning4j.nn.graph.ComputationGraph(conf);
        initial.init();
        List<DataSet> data = data("mlp", 2, 3, true, true);
        org.deeplearning4j.nn.graph.ComputationGraph one = initial.clone();
        org.deeplearning4j.nn.graph.ComputationGraph graph = initial.clone();
        List<INDArray> synced = DataParallelEquivalenceTest.trainParallel(SymmemParallelWrapper.builder(graph).workers(2)
                .ompThreadsPerWorker(1).syncBatchNorm(true), data);
        for (int s = 0; s < synced.size(); s++) {
            one.fit(Nets.merged(data.subList(2 * s, Math.min(data.size(), 2 * s + 2))));
            double diff = Nets.maxRelativeDifference(synced.get(s), one.params());
            assertTrue(diff <= TOLERANCE, "step " + s + ": max relative difference " + diff + " > " + TOLERANCE);
        }
        org.deeplearning4j.nn.graph.ComputationGraph unsynced = initial.clone();
        List<INDArray> plain = DataParallelEquivalenceTest.trainParallel(SymmemParallelWrapper.builder(unsynced).workers(2)
                .ompThreadsPerWorker(1), data);
        double apart = Nets.maxRelativeDifference(plain.getLast(), one.params());
        assertTrue(apart > 1e6 * TOLERANCE, "without syncBatchNorm the run should differ from one model: " + apart);
    }

    /**
     * With the gradient sync overlapped with backprop (a communication thread all-reduces buckets while the worker's
     * backward pass runs the BatchNorm layers' own all-reduces) and with ZeRO stage 2: bitwise what the plain sync
     * gives.
     */
    @Test
    void overlapAndShardingGiveTheSameBits() {
        List<DataSet> data = data("mlp", 2, 3, true, true);
        MultiLayerNetwork initial = mlp();
        MultiLayerNetwork plainModel = initial.clone();
        List<INDArray> plain = DataParallelEquivalenceTest.trainParallel(SymmemParallelWrapper.builder(plainModel)
                .workers(2).ompThreadsPerWorker(1).syncBatchNorm(true), data);
        MultiLayerNetwork overlapModel = initial.clone();
        List<INDArray> overlap = DataParallelEquivalenceTest.trainParallel(SymmemParallelWrapper.builder(overlapModel)
                .workers(2).ompThreadsPerWorker(1).syncBatchNorm(true).overlapSyncWithBackprop(true).bucketBytes(1024)
                .minBucketBytes(0), data);
        for (int s = 0; s < plain.size(); s++) {
            assertTrue(ModelReplica.bitwiseEqual(plain.get(s), overlap.get(s)), "overlap, step " + s);
        }
        MultiLayerNetwork shardedModel = initial.clone(); // (each replica holds its shard of the updater state)
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(shardedModel).workers(2).ompThreadsPerWorker(1)
                .syncBatchNorm(true).sharding(ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(data));
        }
        assertTrue(ModelReplica.bitwiseEqual(plainModel.params(), shardedModel.params()), "ZeRO stage 2");
    }

    @Test
    void whatItCannotSynchronizeIsRefusedAtBuild() {
        MultiLayerNetwork plain = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        IllegalArgumentException none = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(plain).workers(2).syncBatchNorm(true).build());
        assertTrue(none.getMessage().contains("found none") && none.getMessage().contains("fix:"), none.getMessage());

        IllegalArgumentException stage3 = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(mlp()).workers(2).sharding(ZeroStage.PARAMETERS).syncBatchNorm(true)
                        .build());
        assertTrue(stage3.getMessage().contains("sharding=PARAMETERS") && stage3.getMessage().contains("fix:"),
                stage3.getMessage());

        MultiLayerConfiguration frozenConf = new NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.DOUBLE).updater(new Sgd(0.1))
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).build())
                .layer(new FrozenLayer(new BatchNormalization.Builder().nOut(Nets.HIDDEN).build()))
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork frozen = new MultiLayerNetwork(frozenConf);
        frozen.init();
        IllegalArgumentException frozenBn = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(frozen).workers(2).syncBatchNorm(true).build());
        assertTrue(frozenBn.getMessage().contains("layer layer1") && frozenBn.getMessage().contains("frozen"),
                frozenBn.getMessage());
    }

    /**
     * A refusal only one rank of a group reaches: rank 0 asks for synchronized BatchNorm on a network without
     * BatchNormalization, rank 1 does not ask. Rank 1's own checks pass; without the agreement at {@code build()} it
     * built its wrapper, and its first {@code fit()} would wait in the first collective for rank 0 until the group's
     * timeout. Every rank refuses at {@code build()} instead, with the same message naming rank 0 and what it refused;
     * nothing is read into either model and no checkpoint is written.
     */
    @Test
    void aRefusalOnlyOneRankReachesIsRefusedOnEveryRankAtBuild(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) {
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        java.nio.file.Path root = tmp.resolve("checkpoints");
        List<String> refusals = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(5)),
                group -> {
                    MultiLayerNetwork mine = initial.clone();
                    double[] params = mine.params().dup().toDoubleVector();
                    SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(group)
                            .ompThreadsPerWorker(1).checkpointEvery(1, root).syncBatchNorm(group.rank() == 0);
                    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, b::build,
                            "rank " + group.rank());
                    org.junit.jupiter.api.Assertions.assertArrayEquals(params, mine.params().toDoubleVector(),
                            "rank " + group.rank() + ": nothing read into the model");
                    return e.getMessage();
                });
        for (String m : refusals) {
            assertEquals(refusals.getFirst(), m, "every rank the same refusal");
            assertTrue(m.startsWith("build() refused on every rank (2): rank(s) [0] refused it, expected every rank to"
                    + " accept it; nothing was read into or written from any rank's model. rank 0 refused:"
                    + " syncBatchNorm(true): expected BatchNormalization layers to synchronize, found none"), m);
            assertTrue(m.endsWith("(fix: what rank 0's message says, then retry on every rank)"), m);
        }
        assertTrue(!java.nio.file.Files.exists(root), "nothing written: " + root);
    }
}
