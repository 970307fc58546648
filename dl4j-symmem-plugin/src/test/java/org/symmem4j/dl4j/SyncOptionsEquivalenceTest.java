package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * Overlapping sync with backprop changes when buckets are reduced, not what: replicas are bitwise
 * equal to the non-overlapped sync's after every step (MultiLayerNetwork, ComputationGraph, a
 * convolutional network whose layers already have preprocessors; with bf16 transfer and with
 * accumulation too). Gradient accumulation matches one model trained on the merged micro-batches.
 * bf16 transfer keeps replicas identical and stays close to fp32.
 */
class SyncOptionsEquivalenceTest {

    /** Buckets of 64 bytes at least: every layer its own bucket, so overlap has buckets to start early. */
    private static final long SMALL_BUCKETS = 64;

    static MultiLayerNetwork cnn() {
        // Nets.IN = 12 features read as a 3x4 one-channel image: DL4J puts its own preprocessors on
        // layer 0 (flat -> CNN) and layer 1 (CNN -> dense), which the backprop signals must wrap.
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(11).dataType(DataType.FLOAT).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new ConvolutionLayer.Builder(2, 2).nOut(4).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nOut(16).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutionalFlat(3, 4, 1))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** Trains {@code model} through a wrapper from {@code configure}; replica 0's params after each step (replicas checked bitwise). */
    static List<INDArray> train(Model model, List<DataSet> data, int workers,
                                java.util.function.UnaryOperator<SymmemParallelWrapper.Builder> configure) {
        SymmemParallelWrapper.Builder b = model instanceof MultiLayerNetwork m ? SymmemParallelWrapper.builder(m)
                : SymmemParallelWrapper.builder((ComputationGraph) model);
        return DataParallelEquivalenceTest.trainParallel(configure.apply(b.workers(workers).minBucketBytes(SMALL_BUCKETS)), data);
    }

    static void assertBitwiseEqualPerStep(List<INDArray> expected, List<INDArray> actual, String what) {
        assertEquals(expected.size(), actual.size(), what + ": steps");
        for (int s = 0; s < expected.size(); s++) {
            assertTrue(ModelReplica.bitwiseEqual(expected.get(s), actual.get(s)), what + ": parameters differ at step " + s
                    + " (max relative difference " + Nets.maxRelativeDifference(actual.get(s), expected.get(s)) + ")");
        }
    }

    @ParameterizedTest(name = "workers={0}")
    @ValueSource(ints = {2, 4})
    void overlappedSyncIsBitwiseEqualToSyncAfterBackprop(int workers) {
        int steps = 5;
        List<DataSet> data = Nets.batches(21, steps * workers, 7, DataType.FLOAT);
        List<Supplier<Model>> models = List.of(
                () -> Nets.mlp(Nets.updater("adam"), DataType.FLOAT),
                () -> Nets.mlp("adam", DataType.FLOAT, 40, 0),
                SyncOptionsEquivalenceTest::cnn,
                () -> Nets.graph(Nets.updater("adam"), DataType.FLOAT));
        for (Supplier<Model> m : models) {
            List<INDArray> after = train(m.get(), data, workers, b -> b);
            List<INDArray> overlapped = train(m.get(), data, workers, b -> b.overlapSyncWithBackprop(true));
            assertBitwiseEqualPerStep(after, overlapped, m.get().getClass().getSimpleName() + " " + m.get().numParams()
                    + " params, overlapped vs after backprop");
        }
    }

    @Test
    void overlapIsBitwiseEqualWithBf16TransferAndWithAccumulationToo() {
        int workers = 2;
        List<DataSet> data = Nets.batches(5, 4 * workers * 2, 6, DataType.FLOAT);
        assertBitwiseEqualPerStep(
                train(cnn(), data, workers, b -> b.gradientTransfer(GradientTransfer.BFLOAT16)),
                train(cnn(), data, workers, b -> b.gradientTransfer(GradientTransfer.BFLOAT16).overlapSyncWithBackprop(true)),
                "bf16 transfer, overlapped vs not");
        assertBitwiseEqualPerStep(
                train(cnn(), data, workers, b -> b.gradientAccumulation(2)),
                train(cnn(), data, workers, b -> b.gradientAccumulation(2).overlapSyncWithBackprop(true)),
                "accumulation of 2, overlapped vs not");
    }

    /**
     * BatchNorm's running statistics merge on their own (a collective over every state entry):
     * with overlap the buckets that hold them wait for the whole backward pass, and the result is
     * bitwise what the sync after backprop gives, with uneven batches and an idle worker too.
     */
    @Test
    void overlapWithBatchNormIsBitwiseEqualToSyncAfterBackprop() {
        int[] sizes = {5, 11, 8, 7, 3, 9, 6, 10};
        List<DataSet> data = StateNets.shiftedBatches(35, sizes, DataType.FLOAT);
        for (boolean logStd : new boolean[] {false, true}) {
            List<INDArray> after = train(StateNets.batchNormMlp(DataType.FLOAT, logStd, new Adam(0.01)), data, 3, b -> b);
            List<INDArray> overlapped = train(StateNets.batchNormMlp(DataType.FLOAT, logStd, new Adam(0.01)), data, 3,
                    b -> b.overlapSyncWithBackprop(true));
            assertBitwiseEqualPerStep(after, overlapped, "BatchNorm MLP useLogStd=" + logStd + ", overlapped vs not");
        }
    }

    /**
     * A listener that reads the gradient makes each bucket keep its undivided sum: with bf16
     * transfer that splits the widening from the division, which must not change a bit; and with
     * overlap the copy is taken on the communication thread.
     */
    @Test
    void aGradientListenerChangesNoBitWithBf16TransferOrOverlap() {
        int workers = 2;
        List<DataSet> data = Nets.batches(9, 3 * workers, 6, DataType.FLOAT);
        for (boolean overlap : new boolean[] {false, true}) {
            List<INDArray> without = train(cnn(), data, workers,
                    b -> b.gradientTransfer(GradientTransfer.BFLOAT16).overlapSyncWithBackprop(overlap));
            MultiLayerNetwork listened = cnn();
            RecordingListener recorder = new RecordingListener();
            listened.setListeners(recorder);
            List<INDArray> with = train(listened, data, workers,
                    b -> b.gradientTransfer(GradientTransfer.BFLOAT16).overlapSyncWithBackprop(overlap));
            assertBitwiseEqualPerStep(without, with, "bf16 transfer overlap=" + overlap + ", gradient listener vs none");
            long gradients = recorder.calls.stream().filter(c -> c.kind().equals("gradientCalculation")).count();
            assertEquals(3, gradients, "onGradientCalculation once per step");
            for (RecordingListener.Call c : recorder.calls) {
                if (c.gradient() != null) {
                    assertTrue(c.gradient().sumNumber().doubleValue() != 0, "the listener saw a gradient: " + c.signature());
                }
            }
        }
    }

    @Test
    void accumulationRefusesListenersThatReadOnePass() {
        MultiLayerNetwork net = cnn();
        net.setListeners(new RecordingListener());
        IllegalStateException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalStateException.class, () -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(2).gradientAccumulation(2).build()) {
                w.fit(new BatchListIterator(Nets.batches(3, 4, 6, DataType.FLOAT)));
            }
        });
        assertTrue(e.getMessage().contains("gradientAccumulation=2") && e.getMessage().contains("onForwardPass")
                && e.getMessage().contains("fix:"), e.getMessage());
    }

    @ParameterizedTest(name = "micro-batches={0}")
    @ValueSource(ints = {2, 3})
    void accumulationMatchesOneModelOnTheMergedMicroBatches(int k) {
        int workers = 2;
        int steps = 4;
        List<DataSet> data = new ArrayList<>(Nets.batches(31, steps * workers * k - 1, 5, DataType.DOUBLE)); // a short last step
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        MultiLayerNetwork oneMicroBatchPerWorker = net.clone();
        List<Double> losses = new ArrayList<>();
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(net).workers(workers).gradientAccumulation(k)
                .stepListener(r -> losses.add(r.loss()));
        List<INDArray> parallel = DataParallelEquivalenceTest.trainParallel(b, data);
        assertEquals(steps, parallel.size());
        for (int s = 0; s < steps; s++) {
            List<DataSet> step = data.subList(s * workers * k, Math.min(data.size(), (s + 1) * workers * k));
            DataSet merged = Nets.merged(step);
            reference.fit(merged);
            double diff = Nets.maxRelativeDifference(parallel.get(s), reference.params());
            assertTrue(diff <= 1e-10, "step " + s + ": max relative difference " + diff + " to one model on the merged batch");
            oneMicroBatchPerWorker.fit(Nets.merged(step.subList(0, Math.min(workers, step.size()))));
        }
        // the check can tell accumulation from syncing one micro-batch per worker
        double wrong = Nets.maxRelativeDifference(parallel.getLast(), oneMicroBatchPerWorker.params());
        assertTrue(wrong > 1e-6, "accumulated training equals training on one micro-batch per worker: " + wrong);
        // the step's loss is the mean over all its micro-batches' examples
        double firstStepMeanLoss = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE).score(Nets.merged(data.subList(0, workers * k)));
        assertEquals(firstStepMeanLoss, losses.getFirst(), 1e-9, "first step's loss");
    }

    @Test
    void accumulationOnAComputationGraphMatchesToo() {
        int workers = 2;
        int k = 2;
        int steps = 3;
        List<DataSet> data = Nets.batches(41, steps * workers * k, 4, DataType.DOUBLE);
        ComputationGraph graph = Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        ComputationGraph reference = graph.clone();
        List<INDArray> parallel = DataParallelEquivalenceTest.trainParallel(
                SymmemParallelWrapper.builder(graph).workers(workers).gradientAccumulation(k), data);
        for (int s = 0; s < steps; s++) {
            reference.fit(Nets.merged(data.subList(s * workers * k, (s + 1) * workers * k)));
            double diff = Nets.maxRelativeDifference(parallel.get(s), reference.params());
            assertTrue(diff <= 1e-10, "step " + s + ": " + diff);
        }
    }

    @Test
    void bf16TransferKeepsReplicasIdenticalAndStaysCloseToFp32() {
        int workers = 2;
        int steps = 6;
        List<DataSet> data = Nets.batches(8, steps * workers, 8, DataType.FLOAT);
        List<INDArray> fp32 = train(Nets.mlp(Nets.updater("sgd"), DataType.FLOAT), data, workers, b -> b);
        // trainParallel checks the replicas bitwise after every step
        List<INDArray> bf16 = train(Nets.mlp(Nets.updater("sgd"), DataType.FLOAT), data, workers,
                b -> b.gradientTransfer(GradientTransfer.BFLOAT16));
        double diff = Nets.maxRelativeDifference(bf16.getLast(), fp32.getLast());
        // SGD(0.1), 6 steps: each averaged gradient element is off by at most ~2^-8 relative
        assertTrue(diff > 0, "bf16 transfer changed nothing: the option is not in effect");
        assertTrue(diff < 1e-2, "bf16 transfer drifted from fp32: max relative parameter difference " + diff);
    }
}
