package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.dl4j.Nets;

/**
 * Batch normalization in the pipeline, defined per microbatch ({@link BatchNormRunningStats}): each
 * microbatch normalized with its own statistics, gamma and beta's gradients summed, the running mean
 * and variance updated after each microbatch in order. Checked against exactly that computed with plain
 * DL4J passes ({@link MicrobatchReference}) — parameters, running statistics, and inference-mode
 * outputs — for dense (2-D) and convolutional (4-D, per channel) batch normalization, both variance
 * parameterizations, with stage boundaries right before and after the batch-normalization layers.
 */
class PipelineBatchNormTest {

    static final double LEARNING_RATE = 0.1;
    static final int MICROBATCHES = 4;
    static final int BATCH = 16;
    static final double TOLERANCE = 1e-11;

    static Stream<Arguments> networks() {
        return Stream.of(
                Arguments.of("dense, log10 std", PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), true),
                        PipelineModels.Data.DENSE, new int[] {1, 2}),
                Arguments.of("dense, variance", PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), false),
                        PipelineModels.Data.DENSE, new int[] {2, 3}),
                Arguments.of("conv, log10 std", PipelineModels.convBatchNorm(new Sgd(LEARNING_RATE), true),
                        PipelineModels.Data.IMAGES, new int[] {1, 4}),
                Arguments.of("conv, variance", PipelineModels.convBatchNorm(new Sgd(LEARNING_RATE), false),
                        PipelineModels.Data.IMAGES, new int[] {2, 5}));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("networks")
    void runningStatisticsFollowTheMicrobatchesInOrder(String name, MultiLayerNetwork base, PipelineModels.Data data,
                                                       int[] boundaries) {
        List<DataSet> batches = PipelineModels.batches(data, 9, 3, BATCH);
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork trained = base.clone();
        MultiLayerNetwork wholeBatch = base.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base).ranks(3).microbatches(MICROBATCHES)
                .stageBoundaries(boundaries).build()) {
            for (int step = 0; step < batches.size(); step++) {
                trainer.fit(batches.get(step));
                MicrobatchReference.sgdStep(reference, batches.get(step), MICROBATCHES, LEARNING_RATE, k -> { });
                wholeBatch.fit(batches.get(step));
                trainer.copyParametersTo(trained);
                double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                assertTrue(diff <= TOLERANCE, name + " step " + step + ": parameters and running statistics differ from"
                        + " the per-microbatch definition by " + diff);
            }
        }
        INDArray test = PipelineModels.batches(data, 10, 1, 32).getFirst().getFeatures();
        INDArray a = trained.output(test, false);
        double outputs = Nets.maxRelativeDifference(a.reshape(a.length()), reference.output(test, false).reshape(a.length()));
        assertTrue(outputs <= TOLERANCE, name + ": inference outputs (running statistics) differ by " + outputs);
        // and the definition is not one fit on the whole batch: its running statistics move otherwise
        double runningApart = runningStatisticsDifference(trained, wholeBatch);
        System.out.printf("%s: running statistics vs one fit per batch differ by %.3g%n", name, runningApart);
        assertTrue(runningApart > 1e-4, name + ": expected running statistics unlike whole-batch fit, apart by " + runningApart);
    }

    /** With one microbatch per batch the definition is DL4J's own: the pipeline equals plain fit. */
    @Test
    void oneMicrobatchEqualsPlainFit() {
        MultiLayerNetwork base = PipelineModels.convBatchNorm(new Sgd(LEARNING_RATE), true);
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork trained = base.clone();
        List<DataSet> batches = PipelineModels.batches(PipelineModels.Data.IMAGES, 3, 3, 8);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base).ranks(2).microbatches(1)
                .stageBoundaries(2).build()) {
            for (DataSet batch : batches) {
                trainer.fit(batch);
                reference.fit(batch);
            }
            trainer.copyParametersTo(trained);
        }
        double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
        assertTrue(diff <= TOLERANCE, "one microbatch: " + diff);
    }

    private static double runningStatisticsDifference(MultiLayerNetwork a, MultiLayerNetwork b) {
        double worst = 0;
        for (Map.Entry<String, INDArray> p : a.paramTable().entrySet()) {
            if (MicrobatchReference.isRunningStatistic(a, p.getKey())) {
                INDArray x = p.getValue();
                worst = Math.max(worst, Nets.maxRelativeDifference(x.reshape(x.length()), b.getParam(p.getKey()).reshape(x.length())));
            }
        }
        return worst;
    }
}
