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
 * The vocabulary-parallel output ({@link TensorParallel#shardWithVocabularyParallelOutput}): the softmax cross-entropy
 * output layer split by columns over 2 and 4 ranks, with the two tensor-parallel blocks before it, trains as the
 * unsharded network — parameters after every Adam step, the score, and {@code output()} (the whole vocabulary's
 * probabilities on every rank) — and what it cannot split is refused, named.
 */
class VocabParallelOutputTest {

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
                    MultiLayerNetwork mine = TensorParallel.shardWithVocabularyParallelOutput(initial, group.rank(), tp, 0, 2);
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
        MultiLayerNetwork mine = TensorParallel.shardWithVocabularyParallelOutput(TensorParallelTest.unsharded(DataType.FLOAT, 0),
                1, 2);
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
                () -> TensorParallel.shardWithVocabularyParallelOutput(regression, 0, 2));
        assertTrue(e.getMessage().contains("softmax with LossMCXENT"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shardWithVocabularyParallelOutput(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 3));
        assertTrue(e.getMessage().contains("nOut=4, not divisible by the tensor-parallel size 3"), e.getMessage());
        MultiLayerNetwork mine = TensorParallel.shardWithVocabularyParallelOutput(TensorParallelTest.unsharded(DataType.FLOAT, 0),
                0, 2);
        IllegalStateException unattached = assertThrows(IllegalStateException.class,
                () -> mine.fit(TensorParallelTest.batches(DataType.FLOAT, 1, 4).getFirst()));
        assertTrue(unattached.getMessage().contains("TensorParallel.attach"), unattached.getMessage());
    }
}
