package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.graph.MergeVertex;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * ZeRO stage 3 on what needs more than a chain of layers: BatchNormalization's running statistics
 * and center-loss centers (merged from each worker's batch as plain data parallelism merges them) and
 * ComputationGraphs.
 * Threads of one JVM; against plain data parallelism and stages 1 and 2, bitwise: every step's
 * loss, the parameters (running statistics included) and the updater state after the fit.
 */
class FullyShardedStateAndGraphTest {

    /** The step losses, the parameters after the fit and the final updater state of a clone of the model. */
    record Run(List<Double> losses, INDArray params, INDArray updaterState) {
    }

    static Run train(Model original, int workers, ZeroStage stage, List<DataSet> data) {
        Model copy = original instanceof MultiLayerNetwork m ? m.clone() : ((ComputationGraph) original).clone();
        SymmemParallelWrapper.Builder builder = copy instanceof MultiLayerNetwork m
                ? SymmemParallelWrapper.builder(m) : SymmemParallelWrapper.builder((ComputationGraph) copy);
        builder.workers(workers);
        if (stage != null) {
            builder.sharding(stage);
        }
        List<Double> losses = new ArrayList<>();
        builder.stepListener(report -> losses.add(report.loss()));
        try (SymmemParallelWrapper wrapper = builder.build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        INDArray state = copy instanceof MultiLayerNetwork m ? m.getUpdater().getStateViewArray()
                : ((ComputationGraph) copy).getUpdater().getStateViewArray();
        return new Run(losses, copy.params().dup(), state == null ? null : state.dup()); // SGD keeps no state
    }

    /** Stage 3 and stages 1 and 2 against plain data parallelism, bitwise; and a run one step shorter differs. */
    static void assertStage3EqualsTheOthers(Model net, int workers, List<DataSet> data) {
        Run plain = train(net, workers, null, data);
        Run stage3 = train(net, workers, ZeroStage.PARAMETERS, data);
        assertEquals(plain.losses().size(), stage3.losses().size());
        for (int s = 0; s < plain.losses().size(); s++) {
            assertEquals(Double.doubleToRawLongBits(plain.losses().get(s)), Double.doubleToRawLongBits(stage3.losses().get(s)),
                    "step " + s + " loss: plain " + plain.losses().get(s) + ", stage 3 " + stage3.losses().get(s));
        }
        assertTrue(ModelReplica.bitwiseEqual(plain.params(), stage3.params()), "parameters differ from plain data"
                + " parallelism; max relative difference " + Nets.maxRelativeDifference(stage3.params(), plain.params()));
        assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), stage3.updaterState()), "updater state");
        for (ZeroStage stage : new ZeroStage[] {ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS}) {
            Run other = train(net, workers, stage, data);
            assertTrue(ModelReplica.bitwiseEqual(other.params(), stage3.params()), stage + " vs stage 3");
            assertTrue(ModelReplica.bitwiseEqual(other.updaterState(), stage3.updaterState()), stage + " vs stage 3 state");
        }
        // the comparison can fail: one step less lands elsewhere
        Run shorter = train(net, workers, ZeroStage.PARAMETERS, data.subList(0, data.size() - workers));
        assertFalse(ModelReplica.bitwiseEqual(plain.params(), shorter.params()));
    }

    /**
     * Convolution, BatchNorm over channels (variance), pooling, dense, BatchNorm (log10 std), output;
     * Adam and L2, so weights and running statistics both move.
     */
    static MultiLayerNetwork batchNormCnn(DataType dtype, boolean logStd) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(23).dataType(dtype).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).l2(1e-3)
                .list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(6).activation(Activation.IDENTITY).build())
                .layer(new BatchNormalization.Builder().decay(0.7).useLogStd(false).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(24).activation(Activation.TANH).build())
                .layer(new BatchNormalization.Builder().decay(0.8).useLogStd(logStd).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutionalFlat(10, 10, 1))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    @ParameterizedTest(name = "workers={0} {1} logStd={2}")
    @CsvSource({"2, FLOAT, true", "3, DOUBLE, false"})
    void aCnnWithBatchNormEqualsPlainDataParallelismAndStagesOneAndTwoBitwise(int workers, DataType dtype, boolean logStd) {
        // the last step leaves workers idle: they contribute nothing to the statistics
        List<DataSet> data = FullyShardedBehaviourTest.images(29, 3 * workers + 1, dtype);
        MultiLayerNetwork net = batchNormCnn(dtype, logStd);
        assertStage3EqualsTheOthers(net, workers, data);
        Run plain = train(net, workers, null, data);
        assertFalse(ModelReplica.bitwiseEqual(StateNets.stateParams(net), StateNets.stateParams(trained(net, plain))),
                "the running statistics must move for this test to mean something");
    }

    private static Model trained(Model original, Run run) {
        Model copy = original instanceof MultiLayerNetwork m ? m.clone() : ((ComputationGraph) original).clone();
        copy.setParams(run.params());
        return copy;
    }

    /**
     * Two layers on the input (neither reports to stage 3's hooks: DL4J feeds them the caller's
     * array), a skip connection added element-wise to a deeper layer, a merge, a BatchNorm, and the
     * output layer, which DL4J's graph runs only in backprop; L2, so every layer's term counts.
     */
    static ComputationGraph skipGraph(DataType dtype) {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(31).dataType(dtype).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).l2(1e-3)
                .graphBuilder()
                .addInputs("in")
                .addLayer("a", new DenseLayer.Builder().nIn(Nets.IN).nOut(20).activation(Activation.TANH).build(), "in")
                .addLayer("skip", new DenseLayer.Builder().nIn(Nets.IN).nOut(20).activation(Activation.IDENTITY).build(), "in")
                .addLayer("b", new DenseLayer.Builder().nIn(20).nOut(20).activation(Activation.RELU).build(), "a")
                .addVertex("sum", new ElementWiseVertex(ElementWiseVertex.Op.Add), "b", "skip")
                .addVertex("both", new MergeVertex(), "sum", "a")
                .addLayer("c", new DenseLayer.Builder().nIn(40).nOut(16).activation(Activation.TANH).build(), "both")
                .addLayer("bn", new BatchNormalization.Builder().nIn(16).nOut(16).decay(0.8).build(), "c")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build(), "bn")
                .setOutputs("out")
                .build();
        ComputationGraph g = new ComputationGraph(conf);
        g.init();
        return g;
    }

    @ParameterizedTest(name = "workers={0} {1}")
    @CsvSource({"2, FLOAT", "3, DOUBLE"})
    void aGraphWithSkipAndMergeEqualsPlainDataParallelismAndStagesOneAndTwoBitwise(int workers, DataType dtype) {
        List<DataSet> data = Nets.batches(37, 3 * workers + 1, 8, dtype); // the last step leaves workers idle
        assertStage3EqualsTheOthers(skipGraph(dtype), workers, data);
    }

    /** One rank per group member (group mode), against stage 3 in threads, which equals plain data parallelism. */
    @ParameterizedTest(name = "ranks={0}")
    @CsvSource({"3"})
    void aGraphInGroupModeEqualsThreadsBitwise(int ranks) {
        List<DataSet> data = Nets.batches(41, 2 * ranks + 1, 8, DataType.FLOAT);
        ComputationGraph initial = skipGraph(DataType.FLOAT);
        Run threads = train(initial, ranks, ZeroStage.PARAMETERS, data);
        List<Run> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    ComputationGraph mine = initial.clone();
                    List<Double> losses = new ArrayList<>();
                    try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                            .sharding(ZeroStage.PARAMETERS).stepListener(r -> losses.add(r.loss())).build()) {
                        w.fit(new BatchListIterator(data));
                    }
                    return new Run(losses, mine.params().dup(), mine.getUpdater().getStateViewArray().dup());
                });
        for (int r = 0; r < ranks; r++) {
            Run o = perRank.get(r);
            assertTrue(ModelReplica.bitwiseEqual(threads.params(), o.params()), "rank " + r + ": parameters");
            assertTrue(ModelReplica.bitwiseEqual(threads.updaterState(), o.updaterState()), "rank " + r + ": updater state");
            assertEquals(threads.losses(), o.losses(), "rank " + r + ": every step's loss");
        }
    }

    /** Center-loss centers (a state update DL4J divides by the batch size) in a graph whose output layer holds them. */
    @org.junit.jupiter.api.Test
    void centerLossCentersInAGraphEqualPlainDataParallelismBitwise() {
        List<DataSet> data = StateNets.shiftedBatches(43, new int[] {8, 6, 7, 5, 8}, DataType.DOUBLE);
        assertStage3EqualsTheOthers(StateNets.centerLossGraph(DataType.DOUBLE), 2, data);
    }
}
