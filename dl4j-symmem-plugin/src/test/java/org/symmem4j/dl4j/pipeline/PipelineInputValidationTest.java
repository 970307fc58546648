package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.LocalResponseNormalization;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayerWithBackprop;
import org.deeplearning4j.nn.conf.weightnoise.DropConnect;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** Bad configurations and batches are rejected before any rank computes, saying expected, found and the fix. */
class PipelineInputValidationTest {

    /** A 4-layer MLP: 8 -> 16 -> 16 -> 16 -> 3. */
    private static MultiLayerNetwork fourLayers() {
        return PipelineNets.mlp(new Sgd(0.1), 0, DataType.FLOAT, 8, 16, 16, 16, 3);
    }

    private static void assertMessage(Class<? extends Throwable> type, Executable call, String... parts) {
        Throwable e = assertThrows(type, call);
        for (String part : parts) {
            assertTrue(e.getMessage().contains(part), "message lacks \"" + part + "\": " + e.getMessage());
        }
    }

    @Test
    void moreStagesThanLayers() {
        MultiLayerNetwork net = fourLayers();
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ranks(5).microbatches(5).build(),
                "stages=5", "ranks=5 x stagesPerRank=1", "the network has 4 layers", "use at most 4 stages");
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ranks(2).microbatches(4)
                        .schedule(PipelineSchedule.INTERLEAVED, 3).build(),
                "stages=6", "ranks=2 x stagesPerRank=3", "use at most 4 stages");
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(net, 5),
                "stages=5 but the network has 4 layers; fix: use at most 4 stages");
    }

    @Test
    void unsetRequiredSettingsNameTheCall() {
        MultiLayerNetwork net = fourLayers();
        assertMessage(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(net).microbatches(4).build(),
                "ranks not set (fix: call ranks(p)");
        assertMessage(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(net).ranks(2).build(),
                "microbatches not set (fix: call microbatches(m)");
    }

    @Test
    void badStageBoundaries() {
        MultiLayerNetwork net = fourLayers();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.atBoundaries(net, 2, 2),
                "strictly increasing", "boundary 1=2 expected > 2", "[2, 2]");
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.atBoundaries(net, 3, 1),
                "boundary 1=1 expected > 3");
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.atBoundaries(net, 0, 2),
                "stage boundary 0 is layer 0", "expected a layer in [1, 3]", "stage 0 starts at layer 0");
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.atBoundaries(net, 1, 4),
                "stage boundary 1 is layer 4", "expected a layer in [1, 3]");
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ranks(4).microbatches(4).stageBoundaries(1, 2).build(),
                "stageBoundaries has 2 boundaries [1, 2] expected 3", "stages=4", "first layer of stages 1..3");
        PipelineStageSplit ok = PipelineStageSplit.atBoundaries(net, 1, 3);
        assertEquals(3, ok.stageCount());
        assertEquals(0, ok.firstLayer(0));
        assertEquals(1, ok.endLayer(0));
        assertEquals(3, ok.firstLayer(2));
        assertEquals(4, ok.endLayer(2));
    }

    @Test
    void batchNotDivisibleByMicrobatchesIsRejectedBeforeTraining() {
        MultiLayerNetwork net = fourLayers();
        MultiLayerNetwork result = net.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(2).microbatches(4).build()) {
            DataSet thirty = PipelineNets.batches(1, 1, 30, 8, 3, DataType.FLOAT).getFirst();
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(thirty),
                    "batch size=30 is not divisible by microbatches=4", "expected a multiple of 4",
                    "use batch size 28 or 32", "a microbatch count that divides 30");
            DataSet three = PipelineNets.batches(1, 1, 3, 8, 3, DataType.FLOAT).getFirst();
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(three),
                    "batch size=3 is not divisible by microbatches=4", "use batch size 4");
            assertEquals(null, trainer.lastStep(), "nothing ran");
            // the trainer is still usable, and the rejected batches did not train anything
            trainer.fit(PipelineNets.batches(1, 1, 32, 8, 3, DataType.FLOAT).getFirst());
            trainer.copyParametersTo(result);
        }
        assertEquals(1, result.getIterationCount());
    }

    @Test
    void widthsThatDoNotChain() {
        // layer 2 takes 20 inputs but layer 1 gives 16: with overrideNinUponBuild(false) (or a hand-edited
        // configuration) DL4J builds and initializes this, and fails only inside the first forward pass
        MultiLayerNetwork net = PipelineNets.mlp(new Sgd(0.1), 0, DataType.FLOAT, 8, 16, 16, 16, 3);
        MultiLayerNetwork broken = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(16).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(16).nOut(16).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(20).nOut(16).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .overrideNinUponBuild(false)
                .build());
        broken.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.atBoundaries(broken, 2),
                "at the boundary between stage 0 (output width 16) and stage 1 (input width 20)",
                "layer 2 has nIn=20 expected nIn=16", "fix: set nIn/nOut");
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.atBoundaries(broken, 1),
                "inside stage 1", "layer 2 has nIn=20 expected nIn=16");
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(broken).ranks(2).microbatches(2).build(),
                "layer 2 has nIn=20 expected nIn=16");
        // batches whose widths do not fit the network are rejected at fit, before the ranks run
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(2).microbatches(2).build()) {
            DataSet wideFeatures = new DataSet(Nd4j.rand(DataType.FLOAT, 4, 10), Nd4j.rand(DataType.FLOAT, 4, 3));
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(wideFeatures),
                    "layer 0 (DenseLayer) does not accept input type InputTypeFeedForward(10)", "nIn=8 but gets size=10",
                    "check the features' shape");
            DataSet imageFeatures = new DataSet(Nd4j.rand(DataType.FLOAT, 4, 8, 2, 2), Nd4j.rand(DataType.FLOAT, 4, 3));
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(imageFeatures),
                    "layer 0 (DenseLayer) does not accept input type InputTypeConvolutional");
            DataSet wideLabels = new DataSet(Nd4j.rand(DataType.FLOAT, 4, 8), Nd4j.rand(DataType.FLOAT, 4, 5));
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(wideLabels),
                    "labels have shape [4, 5] expected [examples, 3]", "nOut=3");
            DataSet shortMask = new DataSet(Nd4j.rand(DataType.FLOAT, 4, 8), Nd4j.rand(DataType.FLOAT, 4, 3),
                    Nd4j.ones(DataType.FLOAT, 3, 1), null);
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(shortMask),
                    "the batch has 4 feature rows but 3 features mask rows", "expected the same example count");
        }
    }

    @Test
    void unsupportedLayersAreNamed() {
        MultiLayerNetwork localResponse = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(4).build())
                .layer(new LocalResponseNormalization.Builder().build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(8, 8, 1)).build());
        localResponse.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(localResponse, 2),
                "layer 1 (LocalResponseNormalization", "not supported in a pipeline stage", "expected one of DenseLayer",
                "BatchNormalization", "found org.deeplearning4j.nn.conf.layers.LocalResponseNormalization",
                "checked against plain DL4J");

        MultiLayerNetwork frozen = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new FrozenLayerWithBackprop(new DenseLayer.Builder().nIn(8).nOut(16).build()))
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build());
        frozen.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(frozen, 2),
                "layer 0 (FrozenLayerWithBackprop", "frozen layers stop DL4J's backward pass");

        MultiLayerNetwork weightNoise = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(16).weightNoise(new DropConnect(0.5)).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build());
        weightNoise.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(weightNoise, 2),
                "layer 0 (DenseLayer", "has weightNoise", "expected none", "remove weight noise");

        MultiLayerNetwork clippedBatchNorm = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1)
                .gradientNormalization(GradientNormalization.ClipL2PerLayer).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(16).build())
                .layer(new BatchNormalization.Builder().nIn(16).nOut(16).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build());
        clippedBatchNorm.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(clippedBatchNorm, 2),
                "layer 1 (BatchNormalization", "gradientNormalization=ClipL2PerLayer", "expected None",
                "per-microbatch meaning");

        MultiLayerNetwork noOutputLayer = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(16).build())
                .layer(new DenseLayer.Builder().nIn(16).nOut(3).build())
                .build());
        noOutputLayer.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(noOutputLayer, 2),
                "layer 1 (DenseLayer", "as the last layer", "found DenseLayer", "computes the loss");

        MultiLayerNetwork outputInTheMiddle = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MSE).nIn(8).nOut(16).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(16).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build());
        outputInTheMiddle.init();
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(outputInTheMiddle, 2),
                "layer 0 (OutputLayer", "computes a loss but is not the last layer");

        MultiLayerNetwork recurrentBatchNorm = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new LSTM.Builder().nOut(4).build())
                .layer(new BatchNormalization.Builder().build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(2, 5)).build());
        recurrentBatchNorm.init();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(recurrentBatchNorm).ranks(2).microbatches(2)
                .build()) {
            DataSet sequences = new DataSet(Nd4j.rand(DataType.FLOAT, 4, 2, 5), Nd4j.rand(DataType.FLOAT, 4, 3, 5));
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(sequences), "layer 1 (BatchNormalization)",
                    "backpropagates 2-D and 4-D activations only", "not sequences");
            assertEquals(null, trainer.lastStep(), "refused before any rank ran");
        }

        MultiLayerNetwork half = PipelineNets.mlp(new Sgd(0.1), 0, DataType.HALF, 8, 16, 3);
        assertMessage(IllegalArgumentException.class, () -> PipelineStageSplit.balanced(half, 2),
                "dataType=HALF", "expected FLOAT or DOUBLE");
    }

    /** Images whose labels do not match the network's output are refused at fit, before the ranks run. */
    @Test
    void labelsOfTheWrongShape() {
        MultiLayerNetwork cnn = PipelineModels.layerKinds(new Sgd(0.1)).getFirst().network();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(cnn).ranks(2).microbatches(2).build()) {
            DataSet perPixel = new DataSet(Nd4j.rand(DataType.DOUBLE, 4, 2, 10, 10), Nd4j.rand(DataType.DOUBLE, 4, 3, 10, 10));
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(perPixel),
                    "labels have shape [4, 3, 10, 10] expected [examples, 3]", "OutputLayer, nOut=3");
            DataSet wrongChannels = new DataSet(Nd4j.rand(DataType.DOUBLE, 4, 3, 10, 10), Nd4j.rand(DataType.DOUBLE, 4, 3));
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(wrongChannels),
                    "layer 0 (ConvolutionLayer) does not accept", "nIn=2 but gets size=3");
            assertEquals(null, trainer.lastStep());
        }
        // a declared input type: a sequence type without a length takes it from the batch; a wrong one is named
        MultiLayerNetwork lstm = PipelineModels.layerKinds(new Sgd(0.1)).get(3).network();
        DataSet sequences = PipelineModels.batches(PipelineModels.Data.SEQUENCES_TO_SEQUENCES, 1, 1, 4).getFirst();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(lstm).ranks(2).microbatches(2)
                .inputType(InputType.recurrent(4)).build()) {
            trainer.fit(sequences);
            assertEquals(4, trainer.lastStep().examples());
        }
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(lstm).ranks(2).microbatches(2)
                .inputType(InputType.recurrent(5, 7)).build()) {
            assertMessage(IllegalArgumentException.class, () -> trainer.fit(sequences),
                    "features have per-example shape [4, 7] expected=[5, 7]", "the builder's inputType");
        }
    }

    @Test
    void badScheduleSettings() {
        MultiLayerNetwork net = fourLayers();
        assertMessage(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(net).microbatches(4).build(),
                "ranks not set", "ranks(p)");
        assertMessage(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(net).ranks(2).build(),
                "microbatches not set", "microbatches(m)");
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ranks(2).microbatches(4).schedule(PipelineSchedule.INTERLEAVED).build(),
                "schedule=INTERLEAVED with stagesPerRank=1 expected stagesPerRank >= 2", "schedule(INTERLEAVED, 2)");
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ranks(2).microbatches(4).schedule(PipelineSchedule.GPIPE, 2).build(),
                "schedule=GPIPE with stagesPerRank=2 expected stagesPerRank=1", "use INTERLEAVED");
        // interleaving cycles microbatches through the ranks in groups of p: the generator says so
        assertMessage(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ranks(2).microbatches(3)
                        .schedule(PipelineSchedule.INTERLEAVED, 2).build(),
                "microbatches=3", "a multiple of ranks=2", "use microbatches=2 or 4");
        assertMessage(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(net).linkSlots(0),
                "linkSlots=0 expected linkSlots >= 1");
    }
}
