package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.TrainingConfig;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayer;
import org.deeplearning4j.nn.conf.ocnn.OCNNOutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * Which gradient-view entries the wrapper merges as state updates, found from DL4J's own
 * {@code updaterDivideByMinibatch}, and the layer it refuses because its state lives outside the
 * parameters.
 */
class StateEntriesTest {

    @Test
    void entriesAreFoundFromDl4jsFlagAndLayerKinds() {
        MultiLayerNetwork net = StateNets.batchNormMlp(DataType.DOUBLE, true);
        ModelReplica model = ModelReplica.of(net);
        List<StateUpdateReduction.Entry> found = StateUpdateReduction.find(UpdaterLayout.variablesOf(model.dl4jUpdater()),
                model.trainables());
        // dense 12x24 + 24 = 312, then BatchNorm gamma, beta, mean, log10std of 24 each
        assertEquals(List.of(new StateUpdateReduction.Entry("layer1", "mean", 360, 384, StateUpdateReduction.Merge.BATCH_NORM_MEAN),
                new StateUpdateReduction.Entry("layer1", "log10stdev", 384, 408, StateUpdateReduction.Merge.BATCH_NORM_LOG10_STD)),
                found);

        ModelReplica centers = ModelReplica.of(StateNets.centerLossMlp(DataType.DOUBLE, false));
        List<StateUpdateReduction.Entry> centerEntries = StateUpdateReduction.find(
                UpdaterLayout.variablesOf(centers.dl4jUpdater()), centers.trainables());
        assertEquals(1, centerEntries.size());
        assertEquals(StateUpdateReduction.Merge.CENTER_LOSS_CENTERS, centerEntries.getFirst().merge());
        assertEquals((long) Nets.OUT * Nets.HIDDEN, centerEntries.getFirst().length());

        assertEquals(List.of(), StateUpdateReduction.find(UpdaterLayout.variablesOf(ModelReplica.of(
                Nets.mlp(Nets.updater("adam"), DataType.DOUBLE)).dl4jUpdater()), ModelReplica.of(
                Nets.mlp(Nets.updater("adam"), DataType.DOUBLE)).trainables()), "a plain MLP keeps no state updates");
    }

    /** A layer DL4J does not ship that writes a state update (updaterDivideByMinibatch false) gets the generic merge. */
    @Test
    void anUnknownLayerThatKeepsStateGetsTheExampleWeightedAverage() {
        TrainingConfig dense = new DenseLayer.Builder().nIn(2).nOut(2).name("custom").build();
        Trainable custom = new Trainable() {
            @Override
            public TrainingConfig getConfig() {
                return dense;
            }

            @Override
            public long numParams() {
                return 6;
            }

            @Override
            public INDArray params() {
                return null;
            }

            @Override
            public Map<String, INDArray> paramTable(boolean backpropOnly) {
                return Map.of();
            }

            @Override
            public boolean updaterDivideByMinibatch(String paramName) {
                return !paramName.equals("running");
            }

            @Override
            public INDArray getGradientsViewArray() {
                return null;
            }
        };
        Map<String, Trainable> trainables = new LinkedHashMap<>();
        trainables.put("custom", custom);
        List<StateUpdateReduction.Entry> found = StateUpdateReduction.find(List.of(
                new UpdaterLayout.Variable("custom", "W", 0, 4), new UpdaterLayout.Variable("custom", "running", 4, 6)),
                trainables);
        assertEquals(List.of(new StateUpdateReduction.Entry("custom", "running", 4, 6,
                StateUpdateReduction.Merge.EXAMPLE_WEIGHTED_AVERAGE)), found);
    }

    /**
     * A frozen BatchNorm (DL4J's FrozenLayer) passes DL4J's flag through, so its entries are found;
     * DL4J leaves its update zero, and the merge of zero updates is exactly zero: the running
     * statistics stay bitwise as they were, as in one model. (FrozenLayerWithBackprop around a
     * BatchNorm fails in DL4J's own fit(): its backprop reads a closed workspace.)
     */
    @Test
    void frozenBatchNormStatisticsStayBitwiseUnchanged() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(5).dataType(DataType.DOUBLE).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new FrozenLayer(new BatchNormalization.Builder().nIn(Nets.IN).nOut(Nets.IN).build()))
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(Nets.HIDDEN).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(Nets.HIDDEN).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        net.getLayer(0).getParam("mean").assign(0.25);
        net.getLayer(0).getParam("log10stdev").assign(-0.3);
        ModelReplica model = ModelReplica.of(net);
        List<StateUpdateReduction.Entry> found = StateUpdateReduction.find(UpdaterLayout.variablesOf(model.dl4jUpdater()),
                model.trainables());
        assertEquals(2, found.size(), "the frozen BatchNorm's running statistics: " + found);
        INDArray before = StateNets.stateParams(net);
        List<DataSet> data = StateNets.shiftedBatches(61, new int[] {5, 11, 8, 7, 3, 9, 6, 10}, DataType.DOUBLE);
        for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS}) {
            MultiLayerNetwork trained = (MultiLayerNetwork) StateNets.trainWrapped(net, 3, stage, data);
            assertTrue(ModelReplica.bitwiseEqual(before, StateNets.stateParams(trained)), stage + ": frozen statistics moved");
            assertTrue(!ModelReplica.bitwiseEqual(net.getLayer(1).params(), trained.getLayer(1).params()),
                    "the rest of the network must train for this test to mean something");
        }
    }

    @Test
    void aLayerWhoseStateLivesOutsideItsParametersIsRefusedAtBuild() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(5).dataType(DataType.FLOAT).updater(new Adam(0.01))
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(8).activation(Activation.RELU).build())
                .layer(new OCNNOutputLayer.Builder().nIn(8).hiddenLayerSize(4).nu(0.1).activation(Activation.SIGMOID).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(net).workers(2).build());
        assertTrue(e.getMessage().contains("kind=OCNNOutputLayer") && e.getMessage().contains("radius r")
                && e.getMessage().contains("fix: train this model with plain fit()"), e.getMessage());
    }
}
