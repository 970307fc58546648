package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
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

/**
 * ZeRO stage 3 on what needs more than a chain of layers: BatchNormalization's running statistics
 * (merged from each worker's batch as plain data parallelism merges them) and ComputationGraphs.
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
        return new Run(losses, copy.params().dup(), state.dup());
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
}
