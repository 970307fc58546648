package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Vocabulary parallelism at a network's ends ({@link TensorParallel#shard(MultiLayerNetwork, int, int, java.util.Set, int...)}):
 * the softmax cross-entropy output layer split by columns and the embedding layer split by rows over 2 and 4 ranks, with
 * tensor-parallel blocks between them, train as the unsharded network — parameters after every Adam step, the score,
 * and {@code output()} (the whole vocabulary's probabilities on every rank) — and what cannot be split is refused, named.
 */
class VocabularyParallelTest {

    private static final java.util.Set<TensorParallel.VocabularyParallel> OUTPUT = java.util.EnumSet.of(TensorParallel.VocabularyParallel.OUTPUT);
    private static final java.util.Set<TensorParallel.VocabularyParallel> BOTH = java.util.EnumSet.allOf(TensorParallel.VocabularyParallel.class);

    /** An embedding of a vocabulary of 8, a tensor-parallel block (layers 1-2), a dense layer and a 4-class softmax output. */
    static MultiLayerNetwork embedded(DataType type, Activation embeddingActivation) {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(5).dataType(type)
                .updater(new Adam(0.01)).weightInit(org.deeplearning4j.nn.weights.WeightInit.XAVIER).list()
                .layer(new org.deeplearning4j.nn.conf.layers.EmbeddingLayer.Builder().nIn(8).nOut(12)
                        .activation(embeddingActivation).build())
                .layer(new DenseLayer.Builder().nIn(12).nOut(16).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(16).nOut(12).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(12).nOut(10).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(10).nOut(4).activation(Activation.SOFTMAX).build())
                .build());
        net.init();
        return net;
    }

    /** Batches of token indices (every one of the 8 used) and labels from them. */
    static List<DataSet> tokens(DataType type, int count, int size) {
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(9);
        List<DataSet> out = new ArrayList<>();
        for (int b = 0; b < count; b++) {
            double[][] x = new double[size][1];
            double[][] y = new double[size][4];
            for (int i = 0; i < size; i++) {
                int token = rnd.nextInt(8);
                x[i][0] = token;
                y[i][(token + (rnd.nextInt(4) == 0 ? 1 : 0)) % 4] = 1;
            }
            out.add(new DataSet(org.nd4j.linalg.factory.Nd4j.create(x).castTo(type), org.nd4j.linalg.factory.Nd4j.create(y).castTo(type)));
        }
        return out;
    }

    @ParameterizedTest(name = "tp={0} embedding {1}")
    @CsvSource({"2, IDENTITY", "4, IDENTITY", "2, TANH"})
    void aSplitEmbeddingAndOutputTrainAsTheUnshardedNetwork(int tp, Activation embeddingActivation) {
        MultiLayerNetwork initial = embedded(DataType.DOUBLE, embeddingActivation);
        List<DataSet> data = tokens(DataType.DOUBLE, TensorParallelTest.STEPS, 16);
        INDArray probe = tokens(DataType.DOUBLE, 1, 32).getFirst().getFeatures();
        MultiLayerNetwork plain = initial.clone();
        List<INDArray> reference = new ArrayList<>();
        for (DataSet batch : data) {
            plain.fit(batch);
            reference.add(plain.params().dup());
        }
        INDArray referenceOutput = plain.output(probe);
        List<double[]> results = InJvmWorld.runOnEveryRank(tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, group.rank(), tp, BOTH, 1);
                    assertEquals(8 / tp, ((org.deeplearning4j.nn.conf.layers.EmbeddingLayer) mine.getLayer(0).conf().getLayer()).getNIn(),
                            "this rank's vocabulary rows");
                    MultiLayerNetwork gathered = initial.clone();
                    double worst = 0;
                    try (Communicator c = Communicator.create(group)) {
                        TensorParallel.attach(mine, c);
                        for (int s = 0; s < TensorParallelTest.STEPS; s++) {
                            mine.fit(data.get(s));
                            TensorParallel.gather(mine, c, gathered);
                            worst = Math.max(worst, TensorParallelTest.maxRelDiff(gathered.params(), reference.get(s)));
                        }
                        return new double[] {worst, TensorParallelTest.maxRelDiff(mine.output(probe), referenceOutput)};
                    }
                });
        for (int r = 0; r < tp; r++) {
            System.out.printf("vocabulary-parallel embedding + output tp=%d %s rank %d: parameters %.3g, output %.3g%n", tp,
                    embeddingActivation, r, results.get(r)[0], results.get(r)[1]);
            assertTrue(results.get(r)[0] <= 1e-10, "rank " + r + ": gathered parameters differ from plain fit by " + results.get(r)[0]);
            assertTrue(results.get(r)[1] <= 1e-9, "rank " + r + ": output differs by " + results.get(r)[1]);
        }
    }

    /** A graph: token embedding, a tensor-parallel block beside a skip path, merged, a 4-class softmax output. */
    static org.deeplearning4j.nn.graph.ComputationGraph embeddedGraph() {
        org.deeplearning4j.nn.graph.ComputationGraph g = new org.deeplearning4j.nn.graph.ComputationGraph(
                new NeuralNetConfiguration.Builder().seed(13).dataType(DataType.DOUBLE).updater(new Adam(0.01))
                        .weightInit(org.deeplearning4j.nn.weights.WeightInit.XAVIER).graphBuilder()
                        .addInputs("tokens")
                        .addLayer("embed", new org.deeplearning4j.nn.conf.layers.EmbeddingLayer.Builder().nIn(8).nOut(12)
                                .activation(Activation.IDENTITY).build(), "tokens")
                        .addLayer("up", new DenseLayer.Builder().nIn(12).nOut(16).activation(Activation.TANH).build(), "embed")
                        .addLayer("down", new DenseLayer.Builder().nIn(16).nOut(12).activation(Activation.TANH).build(), "up")
                        .addLayer("skip", new DenseLayer.Builder().nIn(12).nOut(6).activation(Activation.RELU).build(), "embed")
                        .addVertex("merge", new org.deeplearning4j.nn.conf.graph.MergeVertex(), "down", "skip")
                        .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(18).nOut(4)
                                .activation(Activation.SOFTMAX).build(), "merge")
                        .setOutputs("out").build());
        g.init();
        return g;
    }

    @Test
    void aGraphsEndsSplitTrainAsTheUnshardedGraph() {
        org.deeplearning4j.nn.graph.ComputationGraph initial = embeddedGraph();
        List<DataSet> data = tokens(DataType.DOUBLE, 10, 16);
        INDArray probe = tokens(DataType.DOUBLE, 1, 32).getFirst().getFeatures();
        org.deeplearning4j.nn.graph.ComputationGraph plain = initial.clone();
        List<INDArray> reference = new ArrayList<>();
        for (DataSet batch : data) {
            plain.fit(batch);
            reference.add(plain.params().dup());
        }
        INDArray referenceOutput = plain.outputSingle(probe);
        List<double[]> results = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            org.deeplearning4j.nn.graph.ComputationGraph mine = TensorParallel.shard(initial, group.rank(), 2, BOTH, "up");
            assertTrue(TensorParallel.isSharded(mine));
            org.deeplearning4j.nn.graph.ComputationGraph gathered = initial.clone();
            double worst = 0;
            try (Communicator c = Communicator.create(group)) {
                TensorParallel.attach(mine, c);
                for (int s = 0; s < data.size(); s++) {
                    mine.fit(data.get(s));
                    TensorParallel.gather(mine, c, gathered);
                    worst = Math.max(worst, TensorParallelTest.maxRelDiff(gathered.params(), reference.get(s)));
                }
                return new double[] {worst, TensorParallelTest.maxRelDiff(mine.outputSingle(probe), referenceOutput)};
            }
        });
        for (int r = 0; r < 2; r++) {
            assertTrue(results.get(r)[0] <= 1e-10, "rank " + r + ": gathered graph differs from plain fit by " + results.get(r)[0]);
            assertTrue(results.get(r)[1] <= 1e-9, "rank " + r + ": output differs by " + results.get(r)[1]);
        }
    }

    @Test
    void anEmbeddingThatCannotBeSplitIsRefusedNamingIt() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 2,
                        java.util.EnumSet.of(TensorParallel.VocabularyParallel.EMBEDDING)));
        assertTrue(e.getMessage().contains("layer 0 is a DenseLayer"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> TensorParallel.shard(embedded(DataType.FLOAT, Activation.IDENTITY),
                0, 3, java.util.EnumSet.of(TensorParallel.VocabularyParallel.EMBEDDING)));
        assertTrue(e.getMessage().contains("nIn=8 (its vocabulary), not divisible by the tensor-parallel size 3"), e.getMessage());
        MultiLayerNetwork mine = TensorParallel.shard(embedded(DataType.DOUBLE, Activation.IDENTITY), 0, 2,
                java.util.EnumSet.of(TensorParallel.VocabularyParallel.EMBEDDING));
        MultiLayerConfiguration back = MultiLayerConfiguration.fromJson(mine.getLayerWiseConfigurations().toJson());
        assertEquals(mine.getLayerWiseConfigurations(), back, "the sharded embedding round-trips through DL4J's JSON");
    }

    record RankResult(List<Double> worstPerStep, List<Double> scoreDiffs, double worstOutput) {
    }

    @ParameterizedTest(name = "tp={0} {1}")
    @CsvSource({"2, DOUBLE", "4, DOUBLE", "2, FLOAT"})
    void theSplitOutputTrainsAsTheUnshardedNetwork(int tp, DataType type) {
        double tolerance = type == DataType.DOUBLE ? 1e-10 : 2e-4;
        // no L2: DL4J's score adds each rank's share of the regularization terms only (a documented limit of every
        // tensor-parallel layer), and the score is compared here
        MultiLayerNetwork initial = TensorParallelTest.unsharded(type, 0);
        List<DataSet> data = TensorParallelTest.batches(type, TensorParallelTest.STEPS, 16);
        INDArray probe = TensorParallelTest.batches(type, 1, 32).getFirst().getFeatures();
        MultiLayerNetwork plain = initial.clone();
        List<INDArray> reference = new ArrayList<>();
        List<Double> scores = new ArrayList<>();
        for (DataSet batch : data) {
            plain.fit(batch);
            reference.add(plain.params().dup());
            scores.add(plain.score());
        }
        INDArray referenceOutput = plain.output(probe);

        List<RankResult> results = InJvmWorld.runOnEveryRank(tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, group.rank(), tp, OUTPUT, 0, 2);
                    assertEquals(4 / tp, ((OutputLayer) mine.getLayer(4).conf().getLayer()).getNOut(), "this rank's vocabulary columns");
                    MultiLayerNetwork gathered = initial.clone();
                    List<Double> worst = new ArrayList<>();
                    List<Double> scoreDiffs = new ArrayList<>();
                    try (Communicator c = Communicator.create(group)) {
                        TensorParallel.attach(mine, c);
                        for (int s = 0; s < TensorParallelTest.STEPS; s++) {
                            mine.fit(data.get(s));
                            scoreDiffs.add(Math.abs(mine.score() - scores.get(s)) / Math.abs(scores.get(s)));
                            TensorParallel.gather(mine, c, gathered);
                            worst.add(TensorParallelTest.maxRelDiff(gathered.params(), reference.get(s)));
                        }
                        return new RankResult(worst, scoreDiffs, TensorParallelTest.maxRelDiff(mine.output(probe), referenceOutput));
                    }
                });
        for (int r = 0; r < tp; r++) {
            RankResult result = results.get(r);
            System.out.printf("vocabulary-parallel tp=%d %s rank %d: worst parameter difference %.3g, score %.3g, output %.3g%n", tp,
                    type, r, result.worstPerStep().stream().mapToDouble(d -> d).max().orElseThrow(),
                    result.scoreDiffs().stream().mapToDouble(d -> d).max().orElseThrow(), result.worstOutput());
            for (int s = 0; s < TensorParallelTest.STEPS; s++) {
                assertTrue(result.worstPerStep().get(s) <= tolerance, "rank " + r + " step " + s + ": gathered parameters differ"
                        + " from plain fit by " + result.worstPerStep().get(s));
                assertTrue(result.scoreDiffs().get(s) <= tolerance, "rank " + r + " step " + s + ": score differs by "
                        + result.scoreDiffs().get(s));
            }
            assertTrue(result.worstOutput() <= tolerance * 10, "rank " + r + ": output differs by " + result.worstOutput());
        }
    }

    @Test
    void theShardedConfigurationRoundTripsThroughJson() {
        MultiLayerNetwork mine = TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 1, 2,
                OUTPUT);
        MultiLayerConfiguration back = MultiLayerConfiguration.fromJson(mine.getLayerWiseConfigurations().toJson());
        VocabParallelOutputLayer output = (VocabParallelOutputLayer) back.getConf(4).getLayer();
        assertEquals(2, output.getTensorParallelSize());
        assertEquals(2, output.getNOut());
        assertTrue(output.getLossFn() instanceof VocabParallelCrossEntropy, output.getLossFn().toString());
        assertEquals(mine.getLayerWiseConfigurations(), back);
    }

    @Test
    void whatCannotBeSplitIsRefusedNamingIt() {
        MultiLayerNetwork regression = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).updater(new Adam(0.01))
                .list()
                .layer(new DenseLayer.Builder().nIn(4).nOut(8).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nIn(8).nOut(4).activation(Activation.IDENTITY).build())
                .build());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shard(regression, 0, 2, OUTPUT));
        assertTrue(e.getMessage().contains("softmax with LossMCXENT"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 3, OUTPUT));
        assertTrue(e.getMessage().contains("nOut=4, not divisible by the tensor-parallel size 3"), e.getMessage());
        MultiLayerNetwork mine = TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 2, OUTPUT);
        IllegalStateException unattached = assertThrows(IllegalStateException.class,
                () -> mine.fit(TensorParallelTest.batches(DataType.FLOAT, 1, 4).getFirst()));
        assertTrue(unattached.getMessage().contains("TensorParallel.attach"), unattached.getMessage());
    }
}
