package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.impl.LossMCXENT;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.pipeline.channel.PipelineAbortedException;

/** State across fits, updater state in and out, schedule independence, link resizing, failures. */
class PipelineTrainerBehaviourTest {

    private static final double FP64_TOLERANCE = 1e-12;

    /** The schedule, rank count and stage boundaries only reorder work: with the same microbatches, not one bit changes. */
    @Test
    void scheduleRanksAndSplitDoNotChangeABit() {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.FLOAT);
        List<DataSet> data = PipelineNets.batches(11, 3, 16, DataType.FLOAT);
        List<PipelineParallelTrainerBuilder> configs = List.of(
                PipelineParallelTrainer.builder(base.clone()).ranks(1).microbatches(4),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4).schedule(PipelineSchedule.GPIPE),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4).schedule(PipelineSchedule.INTERLEAVED, 2),
                PipelineParallelTrainer.builder(base.clone()).ranks(4).microbatches(4),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4).stageBoundaries(6));
        INDArray first = null;
        List<Double> firstLosses = null;
        for (PipelineParallelTrainerBuilder config : configs) {
            MultiLayerNetwork result = base.clone();
            List<Double> losses = new ArrayList<>();
            try (PipelineParallelTrainer trainer = config.stepListener(r -> losses.add(r.loss())).build()) {
                for (DataSet batch : data) {
                    trainer.fit(batch);
                }
                trainer.copyParametersTo(result);
                if (first == null) {
                    first = result.params().dup();
                    firstLosses = losses;
                    continue;
                }
                assertTrue(PipelineNets.bitwiseEqual(first, result.params()), trainer.shape() + " " + trainer.scheduleKind()
                        + " " + trainer.split() + " differs from one rank in " + Nets.maxRelativeDifference(first, result.params()));
                for (int s = 0; s < losses.size(); s++) {
                    // regularization terms are summed per stage first: double rounding only
                    assertEquals(firstLosses.get(s), losses.get(s), 1e-12 * firstLosses.get(s), "loss of step " + s);
                }
            }
        }
    }

    /**
     * Adam's moments leave the pipeline with copyParametersTo (plain fit goes on exactly) and enter it
     * from a trained network (the pipeline goes on exactly); fit(iterator) counts an epoch.
     */
    @Test
    void updaterStateAndCountersTravelBothWays() {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
        MultiLayerNetwork reference = base.clone();
        List<DataSet> data = PipelineNets.batches(3, 5, 16, DataType.DOUBLE);
        MultiLayerNetwork target = base.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4).build()) {
            trainer.fit(new BatchListIterator(data.subList(0, 3)));
            trainer.copyParametersTo(target);
        }
        reference.fit(new BatchListIterator(data.subList(0, 3)));
        assertTrue(Nets.maxRelativeDifference(target.params(), reference.params()) <= FP64_TOLERANCE);
        assertEquals(3, target.getIterationCount());
        assertEquals(1, target.getEpochCount());
        assertEquals(reference.getEpochCount(), target.getEpochCount());
        MultiLayerNetwork freshMoments = target.clone();
        freshMoments.getUpdater().getStateViewArray().assign(0);

        // out: plain fit continues from the copied moments
        target.fit(data.get(3));
        reference.fit(data.get(3));
        assertTrue(Nets.maxRelativeDifference(target.params(), reference.params()) <= FP64_TOLERANCE,
                "plain fit after copyParametersTo must continue Adam exactly");
        freshMoments.fit(data.get(3));
        assertTrue(Nets.maxRelativeDifference(freshMoments.params(), reference.params()) > 1e4 * FP64_TOLERANCE,
                "the check must tell carried from reset Adam moments");

        // in: a pipeline built from the trained network continues from its moments and counters
        MultiLayerNetwork resumed = target.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(target).ranks(2).microbatches(2)
                .schedule(PipelineSchedule.INTERLEAVED, 2).build()) {
            trainer.fit(data.get(4));
            trainer.copyParametersTo(resumed);
        }
        reference.fit(data.get(4));
        assertTrue(Nets.maxRelativeDifference(resumed.params(), reference.params()) <= FP64_TOLERANCE,
                "a pipeline built from a trained network must continue Adam exactly");
        assertEquals(5, resumed.getIterationCount());
    }

    /** Links are sized for the microbatch: a larger batch later recreates them, a smaller one reuses them. */
    @Test
    void batchesOfDifferentSizesTrainCorrectly() {
        MultiLayerNetwork base = PipelineNets.mlp(new Sgd(0.1), 0, DataType.DOUBLE);
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork result = base.clone();
        List<DataSet> data = new ArrayList<>();
        int[] sizes = {8, 32, 16, 4};
        for (int i = 0; i < sizes.length; i++) {
            data.add(PipelineNets.batches(20 + i, 1, sizes[i], DataType.DOUBLE).getFirst());
        }
        List<Long> examples = new ArrayList<>();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4)
                .stepListener(r -> examples.add(r.examples())).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
                reference.fit(batch);
                assertEquals(reference.score(), trainer.lastStep().loss(), FP64_TOLERANCE * reference.score());
            }
            trainer.copyParametersTo(result);
        }
        assertEquals(List.of(8L, 32L, 16L, 4L), examples);
        assertTrue(Nets.maxRelativeDifference(result.params(), reference.params()) <= FP64_TOLERANCE);
    }

    /**
     * A rank that throws in the middle of a step stops the others (poisoned links, not the timeout);
     * fit reports that rank's exception and the trainer is closed.
     */
    @Test
    void aFailingStageStopsEveryRankAndClosesTheTrainer() {
        FailingLoss loss = new FailingLoss();
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.FLOAT).updater(new Sgd(0.1)).weightInit(WeightInit.XAVIER).list()
                .layer(new DenseLayer.Builder().nIn(16).nOut(8).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(8).nOut(8).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(loss).nIn(8).nOut(4).activation(Activation.SOFTMAX).build())
                .build());
        net.init();
        List<DataSet> data = PipelineNets.batches(5, 2, 8, DataType.FLOAT);
        PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(3).microbatches(4)
                .timeout(Duration.ofSeconds(20)).build();
        try {
            trainer.fit(data.get(0));
            FailingLoss.failing = true;
            PipelineTrainingException e = assertThrows(PipelineTrainingException.class, () -> trainer.fit(data.get(1)));
            // the other ranks stopped through the poisoned links, not the timeout: each reports the abort
            // (a rank that had waited out the timeout would report PeerTimeoutException); no elapsed-time
            // bound, which a loaded machine stretches
            assertEquals(2, e.getSuppressed().length, "ranks 0 and 1 fail too: " + java.util.Arrays.toString(e.getSuppressed()));
            for (Throwable other : e.getSuppressed()) {
                assertInstanceOf(PipelineAbortedException.class, other, "stopped by the poisoned links: " + other);
            }
            assertEquals(2, e.rank(), "the last stage (rank 2) threw");
            assertEquals(1, e.step());
            assertInstanceOf(IllegalStateException.class, e.getCause());
            assertTrue(e.getCause().getMessage().contains("injected"), e.getCause().getMessage());
            IllegalStateException again = assertThrows(IllegalStateException.class, () -> trainer.fit(data.get(0)));
            assertTrue(again.getMessage().contains("failed"), again.getMessage());
            assertThrows(IllegalStateException.class, () -> trainer.copyParametersTo(net.clone()));
        } finally {
            FailingLoss.failing = false;
            trainer.close();
        }
    }

    /** The whole run's trace holds every recorded step, its loss and examples, and says how many it left out. */
    @Test
    void recordsTheWholeRunAsOneTrace() {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("sgd"), 0, DataType.FLOAT);
        List<DataSet> data = PipelineNets.batches(2, 4, 16, DataType.FLOAT);
        List<Double> losses = new ArrayList<>();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4)
                .recordTimeline(3).stepListener(r -> losses.add(r.loss())).build()) {
            trainer.fit(new BatchListIterator(data));
            var run = trainer.runTimeline();
            assertEquals(3, run.steps().size());
            assertEquals(1, run.droppedSteps());
            for (int s = 0; s < 3; s++) {
                assertEquals(s, run.steps().get(s).step());
                assertEquals(losses.get(s), run.steps().get(s).values().get("loss"));
                assertEquals(16.0, run.steps().get(s).values().get("examples"));
            }
            String json = run.chromeTraceJson();
            assertEquals(3, json.split("\"cat\":\"step\"", -1).length - 1, "one slice per recorded step");
            assertTrue(json.contains("\"droppedSteps\":\"1\""), "metadata says one step was left out");
        }
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4).build()) {
            assertEquals(null, trainer.runTimeline(), "not recording unless asked");
        }
    }

    /** Cross-entropy that throws from its gradient while {@link #failing} is set. */
    static final class FailingLoss extends LossMCXENT {
        static volatile boolean failing;

        @Override
        public INDArray computeGradient(INDArray labels, INDArray preOutput, IActivation activationFn, INDArray mask) {
            if (failing) {
                throw new IllegalStateException("injected failure in the loss gradient");
            }
            return super.computeGradient(labels, preOutput, activationFn, mask);
        }
    }
}
