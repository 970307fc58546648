package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.dl4j.Nets;

/**
 * Every layer kind the pipeline supports without batch interaction (convolution and subsampling with
 * 4-D activations in both layouts, a per-pixel loss, LSTM, simple RNN, their wrappers and 1-D
 * convolution with 3-D activations and masks, global pooling, activation and loss layers) trains in
 * the pipeline exactly as plain DL4J {@code fit} of the whole network on the whole batch: fp64
 * parameters after every step and the reported loss against {@code score()}, to rounding. Stage
 * boundaries are placed where the activations are 3-D or 4-D, so those cross the links.
 */
class PipelineLayerKindsTest {

    static final int STEPS = 3;
    static final int BATCH = 8;
    /** fp64: the pipeline adds per-microbatch gradient sums where DL4J sums the whole batch at once. */
    static final double TOLERANCE = 1e-11;

    static Stream<Arguments> models() {
        List<Arguments> cases = new ArrayList<>();
        for (PipelineModels.Model sgd : PipelineModels.layerKinds(new Sgd(0.05))) {
            cases.add(Arguments.of(sgd, PipelineSchedule.ONE_F_ONE_B, "sgd"));
        }
        // Adam on two of them, the second interleaved: moments travel with the split too
        List<PipelineModels.Model> adam = PipelineModels.layerKinds(new Adam(0.01));
        cases.add(Arguments.of(adam.get(0), PipelineSchedule.ONE_F_ONE_B, "adam"));
        cases.add(Arguments.of(adam.get(3), PipelineSchedule.GPIPE, "adam"));
        return cases.stream();
    }

    @ParameterizedTest(name = "{0} {1} {2}")
    @MethodSource("models")
    void trainsLikePlainFit(PipelineModels.Model model, PipelineSchedule schedule, String updater) {
        MultiLayerNetwork base = model.network();
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork trained = base.clone();
        List<DataSet> data = PipelineModels.batches(model.data(), 5, STEPS, BATCH);
        double worst = 0;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base).ranks(3).microbatches(4)
                .schedule(schedule).stageBoundaries(model.boundaries()).build()) {
            for (int s = 0; s < STEPS; s++) {
                trainer.fit(data.get(s));
                reference.fit(data.get(s));
                trainer.copyParametersTo(trained);
                double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                worst = Math.max(worst, diff);
                assertTrue(diff <= TOLERANCE, model + " step " + s + ": parameters differ from plain fit by " + diff);
                assertEquals(reference.score(), trainer.lastStep().loss(), TOLERANCE * Math.abs(reference.score()),
                        model + " step " + s + ": loss");
            }
        }
        System.out.printf("%s %s %s: worst parameter difference %.3g%n", model, schedule, updater, worst);
        // the check can fail: one update per microbatch lands far from one per batch
        MultiLayerNetwork perMicrobatch = base.clone();
        for (int mb = 0; mb < 4; mb++) {
            perMicrobatch.fit(PipelineModels.rows(data.getFirst(), mb * 2, 2));
        }
        MultiLayerNetwork oneStep = base.clone();
        oneStep.fit(data.getFirst());
        double apart = Nets.maxRelativeDifference(perMicrobatch.params(), oneStep.params());
        assertTrue(apart > 1e4 * TOLERANCE, model + ": the tolerance cannot tell one update per microbatch apart: " + apart);
    }
}
