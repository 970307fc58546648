package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.parallelism.ParallelWrapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * DL4J's own ParallelWrapper in CUSTOM mode with {@link SymmemGradientsAccumulator}: after each round
 * every replica holds the same parameters bitwise, and the user's model equals one model trained
 * with plain {@code fit} on each round's merged batch (fp64, 1e-10 relative), short last rounds and
 * a second {@code fit} included.
 */
class ParallelWrapperAccumulatorTest {

    private static final double TOLERANCE = 1e-10;

    /**
     * Records every replica's parameters after each of its iterations (iterationDone runs after the
     * update), keyed by iteration; ParallelWrapper hands this one instance to every replica.
     */
    static final class ParamsPerIteration extends BaseTrainingListener {
        final Map<Integer, List<INDArray>> byIteration = new TreeMap<>();

        @Override
        public void iterationDone(Model model, int iteration, int epoch) {
            INDArray copy = model.params().dup();
            synchronized (this) {
                byIteration.computeIfAbsent(iteration, k -> new ArrayList<>()).add(copy);
            }
        }
    }

    /** Rounds of {@code workers} consecutive batches, the last one short when they do not divide evenly. */
    static List<List<DataSet>> rounds(List<DataSet> data, int workers) {
        List<List<DataSet>> out = new ArrayList<>();
        for (int i = 0; i < data.size(); i += workers) {
            out.add(data.subList(i, Math.min(data.size(), i + workers)));
        }
        return out;
    }

    /** Asserts per round: every replica that took part bitwise equal, all equal to the reference. */
    static void assertRoundsMatch(ParamsPerIteration recorded, List<List<DataSet>> rounds, Model reference,
                                  int firstIteration) {
        for (int i = 0; i < rounds.size(); i++) {
            List<DataSet> round = rounds.get(i);
            fitOne(reference, Nets.merged(round));
            List<INDArray> replicas = recorded.byIteration.get(firstIteration + i);
            assertNotNull(replicas, "no replica reported iteration " + (firstIteration + i));
            assertEquals(round.size(), replicas.size(), "replicas that trained in round " + i);
            for (int r = 1; r < replicas.size(); r++) {
                assertTrue(ModelReplica.bitwiseEqual(replicas.getFirst(), replicas.get(r)),
                        "round " + i + ": a replica differs bitwise from another");
            }
            double diff = Nets.maxRelativeDifference(replicas.getFirst(), reference.params());
            assertTrue(diff <= TOLERANCE, "round " + i + ": max relative difference to one model on the merged batch "
                    + diff + " > " + TOLERANCE);
        }
    }

    static void fitOne(Model model, DataSet batch) {
        if (model instanceof MultiLayerNetwork m) {
            m.fit(batch);
        } else {
            ((ComputationGraph) model).fit(batch);
        }
    }

    static ParallelWrapper customWrapper(Model model, int workers, ParamsPerIteration recorder) {
        if (recorder != null) {
            model.addListeners(recorder);
        }
        return new ParallelWrapper.Builder<>(model)
                .workers(workers)
                .prefetchBuffer(0)
                .trainingMode(ParallelWrapper.TrainingMode.CUSTOM)
                .gradientsAccumulator(SymmemGradientsAccumulator.attach(model))
                .build();
    }

    @ParameterizedTest(name = "workers={0} batches={1} updater={2}")
    @CsvSource({"2, 8, adam", "3, 8, adam", "3, 7, sgd", "4, 5, adam", "3, 2, adam"})
    void multiLayerNetworkMatchesOneModelOnEachRoundsMergedBatch(int workers, int batches, String updater) {
        List<DataSet> data = Nets.batches(31 + workers, batches, 6, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater(updater), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        MultiLayerNetwork workerZeroOnly = net.clone();
        ParamsPerIteration recorder = new ParamsPerIteration();
        ParallelWrapper wrapper = customWrapper(net, workers, recorder);
        try {
            wrapper.fit(new BatchListIterator(data));
        } finally {
            wrapper.shutdown();
        }
        List<List<DataSet>> rounds = rounds(data, workers);
        assertRoundsMatch(recorder, rounds, reference, 0);
        // the user's model (trainer 0's replica) holds the result
        assertTrue(ModelReplica.bitwiseEqual(recorder.byIteration.get(rounds.size() - 1).getFirst(), net.params()));
        assertEquals(rounds.size(), net.getIterationCount());
        // the check can fail: one worker's batches alone land far away
        for (List<DataSet> round : rounds) {
            workerZeroOnly.fit(round.getFirst());
        }
        assertTrue(Nets.maxRelativeDifference(net.params(), workerZeroOnly.params()) > 1e4 * TOLERANCE);
        // the model divides by its minibatch again, as before fit
        assertTrue(net.conf().isMiniBatch());
    }

    /**
     * Batches of different sizes in one round (an epoch's short last batch): one model divides by all
     * the round's examples, which per-replica division and averaging would not give.
     */
    @Test
    void batchesOfDifferentSizesInOneRound() {
        int workers = 3;
        SplittableRandom rnd = new SplittableRandom(99);
        List<DataSet> data = new ArrayList<>();
        for (int size : new int[] {7, 7, 7, 7, 7, 2, 5, 1}) {
            data.add(Nets.batch(rnd, size, DataType.DOUBLE));
        }
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        ParamsPerIteration recorder = new ParamsPerIteration();
        ParallelWrapper wrapper = customWrapper(net, workers, recorder);
        try {
            wrapper.fit(new BatchListIterator(data));
        } finally {
            wrapper.shutdown();
        }
        assertRoundsMatch(recorder, rounds(data, workers), reference, 0);
    }

    @Test
    void computationGraphMatchesToo() {
        int workers = 2;
        List<DataSet> data = Nets.batches(77, 7, 5, DataType.DOUBLE);
        ComputationGraph graph = Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        ComputationGraph reference = graph.clone();
        ParamsPerIteration recorder = new ParamsPerIteration();
        ParallelWrapper wrapper = customWrapper(graph, workers, recorder);
        try {
            wrapper.fit(new BatchListIterator(data));
        } finally {
            wrapper.shutdown();
        }
        assertRoundsMatch(recorder, rounds(data, workers), reference, 0);
        assertTrue(ModelReplica.bitwiseEqual(reference.params(), graph.params())
                || Nets.maxRelativeDifference(graph.params(), reference.params()) <= TOLERANCE);
    }

    @Test
    void refusesStateUpdatesInTheGradientView() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(1).dataType(DataType.DOUBLE).list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(8).activation(Activation.TANH).build())
                .layer(new BatchNormalization.Builder().nOut(8).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemGradientsAccumulator.attach(net));
        assertTrue(e.getMessage().contains("1.mean") && e.getMessage().contains("expected none")
                && e.getMessage().contains("fix: train with SymmemParallelWrapper"), e.getMessage());
        assertTrue(net.getListeners().isEmpty(), "a refused attach must leave the model as it was");
    }

    @Test
    void refusesAWrapperThatDropsTheAccumulator() {
        List<DataSet> data = Nets.batches(5, 4, 6, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        INDArray before = net.params().dup();
        ParallelWrapper wrapper = new ParallelWrapper.Builder<>(net)
                .workers(2)
                .prefetchBuffer(0)
                .gradientsAccumulator(SymmemGradientsAccumulator.attach(net)) // AVERAGING (the default) drops it
                .build();
        RuntimeException e;
        try {
            e = assertThrows(RuntimeException.class, () -> wrapper.fit(new BatchListIterator(data)));
        } finally {
            wrapper.shutdown();
        }
        Throwable cause = e;
        while (cause.getCause() != null && !(cause instanceof IllegalStateException)) {
            cause = cause.getCause();
        }
        assertTrue(cause.getMessage().contains("expected trainingMode=CUSTOM"), String.valueOf(cause.getMessage()));
        assertTrue(ModelReplica.bitwiseEqual(before, net.params()), "no update may run unsynchronized");
    }

    @Test
    void refusesAReplicaWhoseHookWasRemoved() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        SymmemGradientsAccumulator accumulator = SymmemGradientsAccumulator.attach(net);
        net.setListeners(new ParamsPerIteration()); // replaces the hook
        ParallelWrapper wrapper = new ParallelWrapper.Builder<>(net).workers(2).prefetchBuffer(0)
                .trainingMode(ParallelWrapper.TrainingMode.CUSTOM).gradientsAccumulator(accumulator).build();
        RuntimeException e;
        try {
            e = assertThrows(RuntimeException.class,
                    () -> wrapper.fit(new BatchListIterator(Nets.batches(5, 4, 6, DataType.DOUBLE))));
        } finally {
            wrapper.shutdown();
        }
        Throwable cause = e;
        while (cause.getCause() != null && !(cause instanceof IllegalStateException)) {
            cause = cause.getCause();
        }
        assertTrue(cause.getMessage().contains("without the gradient hook") && cause.getMessage().contains("fix:"),
                String.valueOf(cause.getMessage()));
    }

    @Test
    void averagingModeIsNotExactWithAdam() {
        // Why the accumulator: ParallelWrapper's own AVERAGING mode averages parameters (and Adam's
        // state) after each replica's own Adam step, which is not Adam on the averaged gradient.
        int workers = 2;
        List<DataSet> data = Nets.batches(11, 8, 6, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        ParallelWrapper wrapper = new ParallelWrapper.Builder<>(net).workers(workers).prefetchBuffer(0)
                .averagingFrequency(1).build();
        try {
            wrapper.fit(new BatchListIterator(data));
        } finally {
            wrapper.shutdown();
        }
        for (List<DataSet> round : rounds(data, workers)) {
            reference.fit(Nets.merged(round));
        }
        double diff = Nets.maxRelativeDifference(net.params(), reference.params());
        assertFalse(diff <= 1e4 * TOLERANCE, "AVERAGING came within " + diff + " of one model on the merged batches");
    }

    @Test
    void refusesTruncatedBptt() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(1).dataType(DataType.DOUBLE).list()
                .layer(new LSTM.Builder().nIn(4).nOut(6).activation(Activation.TANH).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(6).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .backpropType(BackpropType.TruncatedBPTT).tBPTTLength(3)
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemGradientsAccumulator.attach(net));
        assertTrue(e.getMessage().contains("expected backpropType=Standard") && e.getMessage().contains("fix:"),
                e.getMessage());
    }

    /**
     * A NaN in one worker's batch: every trainer fails in the all-reduce before its updater (none
     * waits for the timeout), fit ends with the error naming the worker, and the user's model holds
     * the parameters of the rounds before.
     */
    @Test
    void nonFiniteGradientFailsEveryTrainerBeforeTheUpdate() {
        int workers = 2;
        List<DataSet> data = new ArrayList<>(Nets.batches(41, 4, 6, DataType.DOUBLE));
        DataSet poisoned = data.get(3).copy();
        poisoned.getFeatures().putScalar(2, 5, Double.NaN);
        data.set(3, poisoned); // round 1, worker 1
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        ParallelWrapper wrapper = customWrapper(net, workers, null);
        RuntimeException e;
        try {
            e = assertThrows(RuntimeException.class, () -> wrapper.fit(new BatchListIterator(data)));
        } finally {
            wrapper.shutdown();
        }
        Throwable cause = e;
        while (cause != null && !(cause instanceof NonFiniteGradientException)) {
            cause = cause.getCause();
        }
        assertNotNull(cause, "expected a NonFiniteGradientException in the cause chain of " + e);
        assertEquals(List.of(1), ((NonFiniteGradientException) cause).workers());
        reference.fit(Nets.merged(data.subList(0, 2)));
        assertTrue(Nets.maxRelativeDifference(net.params(), reference.params()) <= TOLERANCE,
                "the failed round must not have updated the user's model");
    }
}
