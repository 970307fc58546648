package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.layers.Splittable;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.exec.TimelineEvent;

/**
 * ZB-H1 on DL4J stages ({@link PipelineSchedule#ZERO_BUBBLE_H1}, {@link SplitBackward}): bitwise the 1F1B pipeline
 * on the same data (parameters, updater state, every step's loss), within fp64 rounding of one plain {@code fit};
 * the split layers really leave their weight gradient to the W action; layers that do not split are named and stay
 * exact.
 */
class ZeroBubblePipelineTest {

    private static final int STEPS = 4;
    private static final int BATCH = 32;

    /** What one training run left: the network's state and every step's loss. */
    private record Run(MultiLayerNetwork network, List<Double> losses, List<String> unsplit, long weightPasses,
                       List<StepTimeline> lastTimelines) {
    }

    private static Run train(MultiLayerNetwork network, PipelineSchedule schedule, int ranks, int microbatches,
                             List<DataSet> data) {
        return train(network, schedule, ranks, 1, microbatches, data);
    }

    private static Run train(MultiLayerNetwork network, PipelineSchedule schedule, int ranks, int dataParallel,
                             int microbatches, List<DataSet> data) {
        List<Double> losses = new ArrayList<>();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(network).ranks(ranks)
                .dataParallel(dataParallel).microbatches(microbatches).schedule(schedule).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                losses.add(trainer.lastStep().loss());
            }
            long weightPasses = 0;
            for (Dl4jPipelineStage stage : trainer.replicaStages(0)) {
                weightPasses += stage.weightPasses();
            }
            return new Run(network, losses, trainer.unsplitBackwardLayers(), weightPasses,
                    trainer.lastStep().timelines());
        }
    }

    @ParameterizedTest(name = "ranks={0} microbatches={1}")
    @CsvSource({"2, 4", "4, 8"})
    void equalsOneFOneBBitwiseAndPlainFit(int ranks, int microbatches) {
        MultiLayerNetwork base = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE);
        MultiLayerNetwork reference = base.clone();
        List<DataSet> data = PipelineNets.batches(11, STEPS, BATCH, DataType.DOUBLE);
        Run zb = train(base.clone(), PipelineSchedule.ZERO_BUBBLE_H1, ranks, microbatches, data);
        Run oneFOneB = train(base.clone(), PipelineSchedule.ONE_F_ONE_B, ranks, microbatches, data);
        PipelineNets.assertSameState(oneFOneB.network(), zb.network(), "ZB-H1 against 1F1B");
        assertEquals(oneFOneB.losses(), zb.losses(), "every step's loss, bitwise (as doubles)");
        for (DataSet batch : data) {
            reference.fit(batch);
        }
        double diff = Nets.maxRelativeDifference(zb.network().params(), reference.params());
        assertTrue(diff <= 1e-12, "ZB-H1 differs from one plain fit by " + diff);
        assertTrue(zb.unsplit().isEmpty(), "an MLP of dense and output layers splits every layer: " + zb.unsplit());
        // every stage computed every microbatch's weight gradients in W actions of their own
        assertEquals((long) STEPS * microbatches * ranks, zb.weightPasses(), "W passes over all stages");
        assertEquals(0, oneFOneB.weightPasses(), "1F1B runs whole backwards");
        for (StepTimeline t : zb.lastTimelines()) {
            long inputs = t.events().stream().filter(e -> e.kind() == TimelineEvent.Kind.INPUT_GRADIENT).count();
            long weights = t.events().stream().filter(e -> e.kind() == TimelineEvent.Kind.WEIGHT_GRADIENT).count();
            long whole = t.events().stream().filter(e -> e.kind() == TimelineEvent.Kind.BACKWARD).count();
            assertEquals(microbatches, inputs, "rank " + t.rank() + " I actions");
            assertEquals(microbatches, weights, "rank " + t.rank() + " W actions");
            assertEquals(0, whole, "rank " + t.rank() + " whole backwards");
        }
    }

    /**
     * The split itself: with deferring on, DL4J's backward of the swapped network leaves the dense and output layers'
     * gradient views untouched (NaN stays NaN) and gives the same input-side results; the weight halves then write
     * exactly the unsplit backward's gradient. Fails if the input-gradient pass computed any weight gradient.
     */
    @Test
    void inputPassLeavesWeightGradientsToTheWeightPass() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(0.01), 0.0, DataType.DOUBLE);
        // as in a stage (Dl4jPipelineStage): what the weight pass keeps must outlive the backward's workspaces
        net.getLayerWiseConfigurations().setTrainingWorkspaceMode(WorkspaceMode.NONE);
        DataSet batch = PipelineNets.batches(3, 1, 8, DataType.DOUBLE).getFirst();
        net.setInput(batch.getFeatures());
        net.setLabels(batch.getLabels());
        net.computeGradientAndScore();
        INDArray expected = net.getGradientsViewArray().dup();
        double expectedScore = net.score();

        Layer[] layers = net.getLayers();
        List<Splittable> splits = new ArrayList<>();
        for (int i = 0; i < layers.length; i++) {
            Layer split = SplitBackward.splitOf(layers[i]);
            assertNotNull(split, "layer " + i + " (" + layers[i].getClass().getSimpleName() + ") splits");
            layers[i] = split;
            splits.add((Splittable) split);
            ((Splittable) split).defer(true);
        }
        net.getGradientsViewArray().assign(Double.NaN);
        net.setInput(batch.getFeatures());
        net.setLabels(batch.getLabels());
        net.computeGradientAndScore();
        assertEquals(Double.doubleToRawLongBits(expectedScore), Double.doubleToRawLongBits(net.score()), "score");
        double[] untouched = net.getGradientsViewArray().toDoubleVector();
        for (double v : untouched) {
            assertTrue(Double.isNaN(v), "the input-gradient pass wrote a weight gradient: " + v);
        }
        for (Splittable s : splits) {
            Splittable.Deferred d = s.takeDeferred();
            assertNotNull(d, "kept for the weight pass");
            assertNull(s.takeDeferred(), "handed over once");
            s.weightGradient(d);
        }
        assertTrue(PipelineNets.bitwiseEqual(expected, net.getGradientsViewArray()), "weight pass gradient vs unsplit");
    }

    /** DP x PP: two replicas of a 2-rank ZB-H1 pipeline, their gradients summed at the step, bitwise 1F1B's. */
    @Test
    void dataParallelReplicasEqualOneFOneBBitwise() {
        MultiLayerNetwork base = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE);
        List<DataSet> data = PipelineNets.batches(13, 3, BATCH, DataType.DOUBLE);
        Run zb = train(base.clone(), PipelineSchedule.ZERO_BUBBLE_H1, 2, 2, 4, data);
        Run oneFOneB = train(base.clone(), PipelineSchedule.ONE_F_ONE_B, 2, 2, 4, data);
        PipelineNets.assertSameState(oneFOneB.network(), zb.network(), "dp=2 ZB-H1 against dp=2 1F1B");
        assertEquals(oneFOneB.losses(), zb.losses(), "losses");
    }

    /** Dropout on dense inputs, a DropoutLayer and noise on the output layer's input: each microbatch's masks reused. */
    @Test
    void dropoutNetworkEqualsOneFOneBBitwise() {
        MultiLayerNetwork base = PipelineModels.denseDropout(new Adam(0.01));
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 5, 3, 16);
        Run zb = train(base.clone(), PipelineSchedule.ZERO_BUBBLE_H1, 2, 4, data);
        Run oneFOneB = train(base.clone(), PipelineSchedule.ONE_F_ONE_B, 2, 4, data);
        PipelineNets.assertSameState(oneFOneB.network(), zb.network(), "ZB-H1 with dropout against 1F1B");
        assertEquals(oneFOneB.losses(), zb.losses(), "losses");
        assertTrue(zb.unsplit().isEmpty(), zb.unsplit().toString());
    }

    /** BatchNormalization does not split: it runs its whole backward in I, is named, and the result stays exact. */
    @Test
    void unsplitLayersFallBackExactlyAndAreNamed() {
        MultiLayerNetwork base = PipelineModels.denseBatchNorm(new Adam(0.01), false);
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 6, 3, 16);
        Run zb = train(base.clone(), PipelineSchedule.ZERO_BUBBLE_H1, 2, 4, data);
        Run oneFOneB = train(base.clone(), PipelineSchedule.ONE_F_ONE_B, 2, 4, data);
        PipelineNets.assertSameState(oneFOneB.network(), zb.network(), "ZB-H1 with BatchNorm against 1F1B");
        assertEquals(oneFOneB.losses(), zb.losses(), "losses");
        assertEquals(1, zb.unsplit().size(), zb.unsplit().toString());
        assertTrue(zb.unsplit().getFirst().startsWith("layer 1 (BatchNormalization"), zb.unsplit().toString());
        assertTrue(zb.weightPasses() > 0, "the dense and output layers still split");
    }

    /** A dense layer with layer normalization is not split (named), and trains exactly. */
    @Test
    void layerNormDenseRunsUnsplit() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(5).dataType(DataType.DOUBLE)
                .updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(10).activation(Activation.TANH).hasLayerNorm(true).build())
                .layer(new DenseLayer.Builder().nOut(6).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.feedForward(8)).build();
        MultiLayerNetwork base = new MultiLayerNetwork(conf);
        base.init();
        assertNull(SplitBackward.splitOf(base.getLayer(0)), "layer norm is not split");
        assertNotNull(SplitBackward.splitOf(base.getLayer(1)));
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 7, 3, 16);
        Run zb = train(base.clone(), PipelineSchedule.ZERO_BUBBLE_H1, 2, 4, data);
        Run oneFOneB = train(base.clone(), PipelineSchedule.ONE_F_ONE_B, 2, 4, data);
        PipelineNets.assertSameState(oneFOneB.network(), zb.network(), "ZB-H1 with layer norm against 1F1B");
        assertEquals(List.of("layer 0 (DenseLayer \"" + conf.getConf(0).getLayer().getLayerName() + "\"): layer"
                + " normalization's backward rewrites dZ in place with its own gradient, not split yet"), zb.unsplit());
    }

    @Test
    void refusesWhatItDoesNotRun() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(0.01), 0.0, DataType.DOUBLE);
        IllegalArgumentException twoStages = assertThrows(IllegalArgumentException.class, () ->
                PipelineParallelTrainer.builder(net).ranks(2).microbatches(4)
                        .schedule(PipelineSchedule.ZERO_BUBBLE_H1, 2).build());
        assertTrue(twoStages.getMessage().contains("expected stagesPerRank=1"), twoStages.getMessage());
        assertFalse(PipelineSchedule.ONE_F_ONE_B.splitsBackward());
        assertEquals("zb-h1", PipelineSchedule.ZERO_BUBBLE_H1.tag());
    }
}
