package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.pipeline.exec.TimelineReport;

/** The pipeline trainer reports {@code PipelineMetrics} into the registry its builder was given. */
class PipelineTrainerMetricsTest {

    @Test
    void everyStepFeedsTheRegistry() {
        MeterRegistry registry = new SimpleMeterRegistry();
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.FLOAT);
        List<DataSet> data = PipelineNets.batches(12, 3, 16, DataType.FLOAT);
        List<PipelineStepReport> reports = new ArrayList<>();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base).ranks(2).microbatches(4)
                .meterRegistry(registry, Tags.of("application", "unit")).stepListener(reports::add).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
        }
        var step = registry.get("symmem.pipeline.step.duration").tags("application", "unit", "schedule", "1f1b",
                "transport", "host-in-jvm").timer();
        assertEquals(3, step.count(), "one sample per step");
        long windows = reports.stream().mapToLong(r -> r.timelineReport().windowNanos()).sum();
        assertEquals(windows, step.totalTime(TimeUnit.NANOSECONDS), 1.0);
        assertEquals(3 * 16.0, registry.get("symmem.pipeline.examples").counter().count());
        assertEquals(reports.getLast().loss(), registry.get("symmem.pipeline.loss").gauge().value());
        TimelineReport last = reports.getLast().timelineReport();
        assertEquals(last.bubbleFraction(), registry.get("symmem.pipeline.bubble.ratio").gauge().value());
        assertEquals(3 * 4 * 2, registry.get("symmem.pipeline.handoff.duration").timer().count(),
                "4 microbatches cross the one rank boundary each way, every step");
        for (int rank = 0; rank < 2; rank++) {
            int r = rank;
            long compute = reports.stream().mapToLong(x -> x.timelineReport().computeNanos(r)).sum();
            assertEquals(compute, registry.get("symmem.pipeline.rank.compute").tag("rank", Integer.toString(rank)).timer()
                    .totalTime(TimeUnit.NANOSECONDS), 1.0, "rank " + rank);
        }
    }

    @Test
    void aFailedStepIsCountedAsAnError() {
        MeterRegistry registry = new SimpleMeterRegistry();
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.FLOAT).updater(new Sgd(0.1)).weightInit(WeightInit.XAVIER).list()
                .layer(new DenseLayer.Builder().nIn(16).nOut(8).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(new PipelineTrainerBehaviourTest.FailingLoss()).nIn(8).nOut(4)
                        .activation(Activation.SOFTMAX).build())
                .build());
        net.init();
        List<DataSet> data = PipelineNets.batches(5, 1, 8, DataType.FLOAT);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(2).microbatches(2)
                .timeout(Duration.ofSeconds(20)).meterRegistry(registry).schedule(PipelineSchedule.GPIPE).build()) {
            PipelineTrainerBehaviourTest.FailingLoss.failing = true;
            assertThrows(PipelineTrainingException.class, () -> trainer.fit(data.getFirst()));
        } finally {
            PipelineTrainerBehaviourTest.FailingLoss.failing = false;
        }
        assertEquals(1.0, registry.get("symmem.pipeline.failures").tags("reason", "error", "schedule", "gpipe").counter().count());
        assertEquals(0.0, registry.get("symmem.pipeline.failures").tag("reason", "timeout").counter().count());
        assertEquals(0.0, registry.get("symmem.pipeline.examples").counter().count());
    }
}
