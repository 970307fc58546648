package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Tensor-parallel blocks (column-parallel dense, then row-parallel dense) on 2 and 4 ranks train as
 * the unsharded network: after every one of many Adam steps the gathered parameters equal plain
 * {@code fit}'s (fp64: to rounding; fp32: bounded), every rank's output equals the unsharded
 * network's, the replicated layers stay bitwise equal across ranks, and a step costs one all-reduce
 * forward and one backward per block. Ranks are threads of one JVM here, each with its own network.
 */
class TensorParallelTest {

    static final int STEPS = 12;

    /** Two blocks (layers 0-1 and 2-3) and a softmax output: 12 -> 16 -> 12 -> 16 -> 10 -> 4. */
    static MultiLayerNetwork unsharded(DataType type, double l2) {
        return unsharded(type, l2, 16);
    }

    /** The two blocks {@code width} wide: 12 -> width -> 12 -> width -> 10 -> 4. */
    static MultiLayerNetwork unsharded(DataType type, double l2, int width) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(7).dataType(type)
                .updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).l2(l2).list()
                .layer(new DenseLayer.Builder().nIn(12).nOut(width).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(width).nOut(12).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(12).nOut(width).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nIn(width).nOut(10).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(10).nOut(4)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    static List<DataSet> batches(DataType type, int count, int size) {
        SplittableRandom rnd = new SplittableRandom(3);
        List<DataSet> out = new ArrayList<>();
        for (int b = 0; b < count; b++) {
            double[][] x = new double[size][12];
            double[][] y = new double[size][4];
            for (int i = 0; i < size; i++) {
                double s = 0;
                for (int j = 0; j < 12; j++) {
                    x[i][j] = rnd.nextDouble(-1, 1);
                    s += x[i][j] * (j % 3 - 1);
                }
                y[i][s > 0.5 ? 0 : s > 0 ? 1 : s > -0.5 ? 2 : 3] = 1;
            }
            out.add(new DataSet(Nd4j.create(x).castTo(type), Nd4j.create(y).castTo(type)));
        }
        return out;
    }

    static double maxRelDiff(INDArray a, INDArray b) {
        double[] x = a.castTo(DataType.DOUBLE).dup('c').reshape(a.length()).toDoubleVector();
        double[] y = b.castTo(DataType.DOUBLE).dup('c').reshape(b.length()).toDoubleVector();
        double worst = 0;
        for (int i = 0; i < x.length; i++) {
            worst = Math.max(worst, Math.abs(x[i] - y[i]) / (1e-3 + Math.abs(y[i])));
        }
        return worst;
    }

    record RankResult(List<Double> worstPerStep, double worstOutput, INDArray outputLayerParams, long allReducesPerStep) {
    }

    @ParameterizedTest(name = "tp={0} {1}")
    @CsvSource({"2, DOUBLE", "4, DOUBLE", "2, FLOAT", "4, FLOAT"})
    void blocksOnRanksTrainAsTheUnshardedNetwork(int tp, DataType type) {
        double tolerance = type == DataType.DOUBLE ? 1e-10 : 2e-4;
        MultiLayerNetwork initial = unsharded(type, 1e-4);
        List<DataSet> data = batches(type, STEPS, 16);
        INDArray probe = batches(type, 1, 32).getFirst().getFeatures();
        List<INDArray> reference = new ArrayList<>();
        MultiLayerNetwork plain = initial.clone();
        for (DataSet batch : data) {
            plain.fit(batch);
            reference.add(plain.params().dup());
        }
        INDArray referenceOutput = plain.output(probe);

        List<RankResult> results = InJvmWorld.runOnEveryRank(tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, group.rank(), tp, 0, 2);
                    MultiLayerNetwork gathered = initial.clone();
                    List<Double> worst = new ArrayList<>();
                    long perStep;
                    try (Communicator c = Communicator.create(group)) {
                        TensorParallel.attach(mine, c);
                        ArrayCollectives comm = ((TensorParallelDenseLayerImpl) mine.getLayer(0)).comm();
                        long before = comm.sums();
                        mine.fit(data.get(0));
                        perStep = comm.sums() - before;
                        for (int s = 0; s < STEPS; s++) {
                            if (s > 0) {
                                mine.fit(data.get(s));
                            }
                            TensorParallel.gather(mine, c, gathered);
                            worst.add(maxRelDiff(gathered.params(), reference.get(s)));
                        }
                        INDArray output = mine.output(probe);
                        return new RankResult(worst, maxRelDiff(output, referenceOutput), mine.getLayer(4).params().dup(),
                                perStep);
                    }
                });
        double worstOfRun = results.stream().flatMap(r -> r.worstPerStep().stream()).mapToDouble(d -> d).max().orElseThrow();
        System.out.printf("tensor parallel tp=%d %s: worst relative parameter difference over %d steps %.3g%n", tp, type,
                STEPS, worstOfRun);
        for (int r = 0; r < tp; r++) {
            RankResult result = results.get(r);
            for (int s = 0; s < STEPS; s++) {
                assertTrue(result.worstPerStep().get(s) <= tolerance, "rank " + r + " step " + s + ": gathered parameters"
                        + " differ from plain fit by " + result.worstPerStep().get(s) + " > " + tolerance);
            }
            assertTrue(result.worstOutput() <= tolerance * 10, "rank " + r + ": output differs by " + result.worstOutput());
            assertEquals(4, result.allReducesPerStep(), "rank " + r + ": one all-reduce forward (row-parallel) and one"
                    + " backward (column-parallel) per block, two blocks");
            assertTrue(results.get(0).outputLayerParams().equals(result.outputLayerParams()), "rank " + r + ": the"
                    + " replicated output layer is bitwise equal on every rank");
        }
    }

    /**
     * Adam's moments travel with the parameters: a network sharded after 6 steps of plain training, trained 3 steps
     * sharded, gathered, saved with its updater and loaded as a plain DL4J network, then trained 3 more steps, follows
     * plain training of the same 12 batches to rounding (a fresh updater at either hand-over would not: its moments
     * start from zero).
     */
    @ParameterizedTest(name = "tp={0}")
    @CsvSource({"2", "4"})
    void shardingMidTrainingAndGatheringCarryTheUpdaterState(int tp, @org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) {
        DataType type = DataType.DOUBLE;
        List<DataSet> data = batches(type, 12, 16);
        MultiLayerNetwork plain = unsharded(type, 1e-4);
        for (int s = 0; s < 6; s++) {
            plain.fit(data.get(s));
        }
        MultiLayerNetwork mid = plain.clone();
        List<INDArray> reference = new ArrayList<>();
        INDArray stateAt9 = null;
        for (int s = 6; s < 12; s++) {
            plain.fit(data.get(s));
            reference.add(plain.params().dup());
            if (s == 8) {
                stateAt9 = plain.getUpdater().getStateViewArray().dup();
            }
        }
        INDArray expectedState = stateAt9;
        List<double[]> results = InJvmWorld.runOnEveryRank(tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(mid, group.rank(), tp, 0, 2);
                    MultiLayerNetwork gathered = unsharded(type, 1e-4);
                    try (Communicator c = Communicator.create(group)) {
                        TensorParallel.attach(mine, c);
                        for (int s = 6; s < 9; s++) {
                            mine.fit(data.get(s));
                        }
                        TensorParallel.gather(mine, c, gathered);
                    }
                    double afterSharded = maxRelDiff(gathered.params(), reference.get(2));
                    double state = maxRelDiff(gathered.getUpdater().getStateViewArray(), expectedState);
                    java.nio.file.Path file = dir.resolve("tp" + tp + "-rank" + group.rank() + ".zip");
                    ModelSerializer.writeModel(gathered, file.toFile(), true);
                    MultiLayerNetwork resumed = ModelSerializer.restoreMultiLayerNetwork(file.toFile(), true);
                    for (int s = 9; s < 12; s++) {
                        resumed.fit(data.get(s));
                    }
                    return new double[] {afterSharded, state, maxRelDiff(resumed.params(), reference.get(5))};
                });
        for (int r = 0; r < tp; r++) {
            double[] d = results.get(r);
            System.out.printf("tp=%d rank %d: parameters after 3 sharded steps %.3g, Adam state %.3g, after 3 resumed steps %.3g%n",
                    tp, r, d[0], d[1], d[2]);
            assertTrue(d[0] <= 1e-10, "rank " + r + ": gathered parameters after sharded training differ by " + d[0]);
            assertTrue(d[1] <= 1e-10, "rank " + r + ": gathered Adam state differs from plain training's by " + d[1]);
            assertTrue(d[2] <= 1e-10, "rank " + r + ": the saved, loaded and resumed network differs by " + d[2]);
        }
    }

    @Test
    void shardThenGatherIsTheUnshardedNetworkBitForBitAndSavesAsOne(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) {
        MultiLayerNetwork initial = unsharded(DataType.FLOAT, 0);
        List<String> saved = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, group.rank(), 2, 0, 2);
                    assertEquals(8, ((DenseLayer) mine.getLayer(0).conf().getLayer()).getNOut(), "this rank's 8 of 16 outputs");
                    assertEquals(8, ((DenseLayer) mine.getLayer(1).conf().getLayer()).getNIn(), "this rank's 8 of 16 inputs");
                    MultiLayerNetwork back = unsharded(DataType.FLOAT, 0);
                    try (Communicator c = Communicator.create(group)) {
                        TensorParallel.attach(mine, c);
                        TensorParallel.gather(mine, c, back);
                    }
                    assertTrue(initial.params().equals(back.params()), "rank " + group.rank() + ": bit for bit");
                    java.nio.file.Path file = dir.resolve("rank" + group.rank() + ".zip");
                    ModelSerializer.writeModel(back, file.toFile(), false);
                    MultiLayerNetwork loaded = ModelSerializer.restoreMultiLayerNetwork(file.toFile());
                    assertTrue(initial.params().equals(loaded.params()), "a plain DL4J model file");
                    return mine.getLayerWiseConfigurations().toJson();
                });
        // the sharded configuration round-trips through DL4J's JSON with its tensor-parallel layers
        MultiLayerConfiguration back = MultiLayerConfiguration.fromJson(saved.getFirst());
        assertTrue(back.getConf(0).getLayer() instanceof ColumnParallelDenseLayer, back.getConf(0).getLayer().toString());
        assertEquals(2, ((TensorParallelDenseLayer) back.getConf(1).getLayer()).getTensorParallelSize());
    }

    @Test
    void whatCannotBeSplitExactlyIsRefusedNamingTheLayer() {
        MultiLayerNetwork net = unsharded(DataType.FLOAT, 0);
        IllegalArgumentException outputLayer = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shard(net, 0, 2, 3));
        assertTrue(outputLayer.getMessage().contains("layer 4 is a OutputLayer: a tensor-parallel block is two DenseLayers"),
                outputLayer.getMessage());
        IllegalArgumentException odd = assertThrows(IllegalArgumentException.class, () -> TensorParallel.shard(net, 0, 3, 0));
        assertTrue(odd.getMessage().contains("layer 0 has nOut=16, not divisible by the tensor-parallel size 3"), odd.getMessage());
        IllegalArgumentException overlap = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shard(net, 0, 2, 0, 1));
        assertTrue(overlap.getMessage().contains("overlap at 1"), overlap.getMessage());

        MultiLayerNetwork dropout = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new DenseLayer.Builder().nIn(4).nOut(4).activation(Activation.SOFTMAX).build())
                .layer(new DenseLayer.Builder().nIn(4).nOut(4).dropOut(0.5).build())
                .layer(new OutputLayer.Builder().nIn(4).nOut(2).activation(Activation.SOFTMAX).build())
                .build());
        dropout.init();
        List<String> errors = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = TensorParallel.shard(dropout, group.rank(), 2, 0);
                    try (Communicator c = Communicator.create(group)) {
                        return assertThrows(IllegalArgumentException.class, () -> TensorParallel.attach(mine, c)).getMessage();
                    }
                });
        for (String m : errors) {
            assertTrue(m.contains("ColumnParallelDenseLayer 'layer0' has activation softmax"), m);
            assertTrue(m.contains("RowParallelDenseLayer 'layer1' has dropout on its input"), m);
        }
        MultiLayerNetwork unattached = TensorParallel.shard(net, 0, 2, 0);
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> unattached.output(Nd4j.zeros(DataType.FLOAT, 1, 12)));
        assertTrue(e.getMessage().contains("call TensorParallel.attach(network, communicator)"), e.getMessage());
    }
}
