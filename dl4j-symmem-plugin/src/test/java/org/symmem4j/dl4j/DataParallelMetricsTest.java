package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;

/** What a data-parallel fit records: steps, examples, bytes, loss, per-worker times, skipped steps and failures. */
class DataParallelMetricsTest {

    @Test
    void everyStepIsCountedOnceWithItsExamplesBytesAndLoss() {
        MeterRegistry registry = new SimpleMeterRegistry();
        List<DataSet> data = new ArrayList<>(Nets.batches(21, 5, 8, DataType.FLOAT));
        data.set(4, Nets.batches(22, 1, 5, DataType.FLOAT).getFirst()); // a short last round: one batch of 5
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        List<StepReport> reports = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2)
                .meterRegistry(registry, Tags.of("application", "unit")).stepListener(reports::add).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        assertEquals(3, reports.size(), "5 batches on 2 workers");
        assertEquals(3.0, counter(registry, "symmem.gradsync.steps"), "once per step, not per worker");
        assertEquals(8 + 8 + 8 + 8 + 5, counter(registry, "symmem.gradsync.examples"));
        assertEquals(0.0, counter(registry, "symmem.gradsync.skipped.steps"));
        var stepBytes = registry.get("symmem.gradsync.step.bytes").tag("application", "unit").summary();
        assertEquals(3, stepBytes.count());
        assertEquals(3.0 * net.numParams() * 4, stepBytes.totalAmount(), "params x float32 bytes, once per step");
        assertEquals(reports.getLast().loss(), registry.get("symmem.gradsync.loss").gauge().value());
        assertEquals(reports.getLast().examples() * 1e9 / reports.getLast().stepNanos(),
                registry.get("symmem.gradsync.throughput").gauge().value(), 1e-9);
        for (int worker = 0; worker < 2; worker++) {
            Timer compute = registry.get("symmem.gradsync.worker.compute").tag("worker", Integer.toString(worker)).timer();
            Timer sync = registry.get("symmem.gradsync.worker.sync").tag("worker", Integer.toString(worker)).timer();
            assertEquals(3, compute.count(), "worker " + worker + " ran every step (idle in the last one)");
            assertEquals(3, sync.count());
            assertTrue(compute.totalTime(TimeUnit.NANOSECONDS) > 0 && sync.totalTime(TimeUnit.NANOSECONDS) > 0);
        }
        assertEquals(6, registry.get("symmem.gradsync.step.duration").timer().count(), "per worker: 3 steps x 2");
        for (String reason : List.of("timeout", "non_finite", "error")) {
            assertEquals(0.0, registry.get("symmem.gradsync.failures").tag("reason", reason).counter().count(), reason);
        }
    }

    @Test
    void skippedNonFiniteStepsAndFailuresAreCountedByReason() {
        MeterRegistry registry = new SimpleMeterRegistry();
        List<DataSet> data = new ArrayList<>(Nets.batches(8, 8, 8, DataType.DOUBLE));
        DataSet bad = data.get(3).copy();
        bad.getFeatures().putScalar(0, 0, Double.NaN); // worker 1's batch of step 1
        data.set(3, bad);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE))
                .workers(2).meterRegistry(registry).nonFiniteGradients(NonFiniteGradients.SKIP_STEP).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        assertEquals(4.0, counter(registry, "symmem.gradsync.steps"), "skipped steps are steps");
        assertEquals(1.0, counter(registry, "symmem.gradsync.skipped.steps"));

        MeterRegistry failing = new SimpleMeterRegistry();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE))
                .workers(2).meterRegistry(failing).build()) {
            assertThrows(NonFiniteGradientException.class, () -> wrapper.fit(new BatchListIterator(data)));
            // worker 1's batch of step 0 has the wrong width: DL4J throws in its forward pass
            List<DataSet> wrongWidth = new ArrayList<>(Nets.batches(3, 2, 8, DataType.DOUBLE));
            wrongWidth.set(1, new DataSet(Nd4j.rand(DataType.DOUBLE, 8, Nets.IN + 5), wrongWidth.get(1).getLabels()));
            assertThrows(DataParallelTrainingException.class, () -> wrapper.fit(new BatchListIterator(wrongWidth)));
        }
        assertEquals(1.0, failing.get("symmem.gradsync.failures").tag("reason", "non_finite").counter().count());
        assertEquals(1.0, failing.get("symmem.gradsync.failures").tag("reason", "error").counter().count());
        assertEquals(0.0, failing.get("symmem.gradsync.failures").tag("reason", "timeout").counter().count());
        assertEquals(1.0, counter(failing, "symmem.gradsync.steps"), "the step before the non-finite one");
    }

    private static double counter(MeterRegistry registry, String name) {
        return registry.get(name).counter().count();
    }
}
