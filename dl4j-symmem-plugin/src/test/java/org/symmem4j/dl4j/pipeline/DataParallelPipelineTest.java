package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.impl.LossMCXENT;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.pipeline.channel.PipelineAbortedException;

/**
 * Data parallelism over pipelines (DP x PP, {@link PipelineParallelTrainerBuilder#dataParallel}):
 * equal to plain {@code fit} of the unsplit network on the whole batch (what plain data parallelism
 * computes), step by step, with the same tolerances as {@link PipelineEquivalenceTest}; the replicas
 * bitwise equal; batch normalization and dropout as one pipeline with {@code microbatches x dp}
 * microbatches defines them.
 */
class DataParallelPipelineTest {

    static final int STEPS = 4;
    static final int BATCH = 32;

    static Stream<Arguments> cases() {
        return Stream.of(
                // dp, pp, schedule, stagesPerRank, microbatches, updater, l2, dtype
                Arguments.of(2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 4, "sgd", 0.0, DataType.FLOAT),
                Arguments.of(2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 4, "adam", 1e-3, DataType.FLOAT),
                Arguments.of(2, 4, PipelineSchedule.ONE_F_ONE_B, 1, 4, "adam", 0.0, DataType.FLOAT),
                Arguments.of(4, 2, PipelineSchedule.GPIPE, 1, 2, "sgd", 0.0, DataType.FLOAT),
                Arguments.of(2, 2, PipelineSchedule.INTERLEAVED, 2, 4, "adam", 0.0, DataType.FLOAT),
                Arguments.of(2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 2, "adam", 1e-3, DataType.DOUBLE));
    }

    @ParameterizedTest(name = "dp={0} pp={1} {2} v={3} m={4} {5} l2={6} {7}")
    @MethodSource("cases")
    void matchesPlainFitOnTheWholeBatch(int dp, int pp, PipelineSchedule schedule, int stagesPerRank, int microbatches,
                                        String updater, double l2, DataType dtype) {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater(updater), l2, dtype);
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork trained = base.clone();
        List<DataSet> data = PipelineNets.batches(11, STEPS, BATCH, dtype);
        double tol = PipelineEquivalenceTest.tolerance(dtype, updater);
        double worst = 0;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(pp).dataParallel(dp)
                .microbatches(microbatches).schedule(schedule, stagesPerRank).build()) {
            assertEquals(dp, trainer.dataParallel());
            for (int s = 0; s < STEPS; s++) {
                trainer.fit(data.get(s));
                reference.fit(data.get(s));
                trainer.copyParametersTo(trained);
                double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                worst = Math.max(worst, diff);
                assertTrue(diff <= tol, "step " + s + ": parameters differ from plain fit on the whole batch by " + diff
                        + " > " + tol);
                double loss = trainer.lastStep().loss();
                assertTrue(Math.abs(loss - reference.score()) / (1 + Math.abs(reference.score()))
                        <= PipelineEquivalenceTest.lossTolerance(dtype), "step " + s + ": loss " + loss + " vs score "
                        + reference.score());
                assertEquals(BATCH, trainer.lastStep().examples());
                assertReplicasBitwiseEqual(trainer, dp);
            }
            assertEquals(STEPS, trained.getIterationCount());
            assertEquals(pp, trainer.lastStep().timelines().size(), "one timeline per pipeline rank (replica 0's)");
        }
        System.out.printf("dp=%d pp=%d %s v=%d m=%d %s l2=%s %s: params %.3g%n", dp, pp, schedule, stagesPerRank,
                microbatches, updater, l2, dtype, worst);
        // the check can fail: replicas that skipped the gradient sum would each step on half the batch
        MultiLayerNetwork halfBatch = base.clone();
        halfBatch.fit(PipelineNets.rows(data.getFirst(), 0, BATCH / dp));
        MultiLayerNetwork afterOne = base.clone();
        afterOne.fit(data.getFirst());
        assertTrue(Nets.maxRelativeDifference(halfBatch.params(), afterOne.params()) > 100 * tol,
                "the tolerance cannot tell one replica's share from the whole batch");
    }

    /**
     * Every replica's stages hold the same parameters, updater state and counters, bit for bit (with tensor parallelism,
     * every replica's shard {@code t} as replica 0's).
     */
    static void assertReplicasBitwiseEqual(PipelineParallelTrainer trainer, int dp) {
        for (int t = 0; t < trainer.tensorParallel(); t++) {
            assertReplicasBitwiseEqual(trainer, dp, t);
        }
    }

    private static void assertReplicasBitwiseEqual(PipelineParallelTrainer trainer, int dp, int t) {
        List<Dl4jPipelineStage> first = trainer.replicaStages(0, t);
        for (int d = 1; d < dp; d++) {
            List<Dl4jPipelineStage> other = trainer.replicaStages(d, t);
            for (int s = 0; s < first.size(); s++) {
                MultiLayerNetwork a = first.get(s).network();
                MultiLayerNetwork b = other.get(s).network();
                assertTrue(PipelineNets.bitwiseEqual(a.params(), b.params()), "replica " + d + " stage " + s + " parameters");
                INDArray stateA = a.getUpdater().getStateViewArray();
                if (stateA != null) {
                    assertTrue(PipelineNets.bitwiseEqual(stateA, b.getUpdater().getStateViewArray()),
                            "replica " + d + " stage " + s + " updater state");
                }
                assertEquals(a.getIterationCount(), b.getIterationCount());
            }
        }
    }

    /**
     * Batch normalization: each replica normalizes its own microbatches, and the running statistics
     * follow every replica's pieces in the global order: one pipeline with microbatches x dp
     * microbatches, checked against its definition with plain DL4J passes ({@link MicrobatchReference}).
     */
    @Test
    void batchNormalizationIsThePipelineWithMicrobatchesTimesReplicas() {
        int dp = 2;
        int microbatches = 2;
        for (boolean logStd : new boolean[] {true, false}) {
            MultiLayerNetwork base = PipelineModels.convBatchNorm(new Sgd(PipelineBatchNormTest.LEARNING_RATE), logStd);
            List<DataSet> batches = PipelineModels.batches(PipelineModels.Data.IMAGES, 9, 3, PipelineBatchNormTest.BATCH);
            MultiLayerNetwork reference = base.clone();
            MultiLayerNetwork trained = base.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(3).dataParallel(dp)
                    .microbatches(microbatches).stageBoundaries(1, 4).build()) {
                for (int step = 0; step < batches.size(); step++) {
                    trainer.fit(batches.get(step));
                    MicrobatchReference.sgdStep(reference, batches.get(step), microbatches * dp,
                            PipelineBatchNormTest.LEARNING_RATE, k -> { });
                    trainer.copyParametersTo(trained);
                    double diff = Nets.maxRelativeDifference(trained.params(), reference.params());
                    assertTrue(diff <= PipelineBatchNormTest.TOLERANCE, "logStd=" + logStd + " step " + step
                            + ": parameters and running statistics differ from " + (microbatches * dp)
                            + " microbatches in order by " + diff);
                    assertReplicasBitwiseEqual(trainer, dp);
                }
            }
        }
    }

    /** Dropout: replica d's microbatch k draws the mask of piece k * dp + d, as the single pipeline does. */
    @Test
    void dropoutMasksAreThoseOfTheSinglePipeline() {
        MultiLayerNetwork base = PipelineModels.denseDropout(new Sgd(0.1));
        List<DataSet> batches = PipelineModels.batches(PipelineModels.Data.DENSE, 4, 3, 16);
        List<INDArray> results = new ArrayList<>();
        for (PipelineParallelTrainerBuilder builder : List.of(
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(4),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(2).dataParallel(2))) {
            MultiLayerNetwork trained = base.clone();
            try (PipelineParallelTrainer trainer = builder.build()) {
                for (DataSet batch : batches) {
                    trainer.fit(batch);
                }
                trainer.copyParametersTo(trained);
            }
            results.add(trained.params().dup());
        }
        double diff = Nets.maxRelativeDifference(results.get(0), results.get(1));
        assertTrue(diff <= PipelineDropoutTest.TOLERANCE, "dp=2 x m=2 vs one pipeline with m=4: " + diff);
    }

    /**
     * A failure in one replica stops the other replica too: it waits for the failed one in its
     * gradient all-reduce, and hears of the abort there through the dp sub-groups, not by its timeout.
     */
    @Test
    void aFailureInOneReplicaStopsEveryReplica() {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.FLOAT).updater(new Sgd(0.1)).weightInit(WeightInit.XAVIER).list()
                .layer(new DenseLayer.Builder().nIn(16).nOut(8).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(new SecondReplicaFailingLoss()).nIn(8).nOut(4)
                        .activation(Activation.SOFTMAX).build())
                .build());
        net.init();
        List<DataSet> data = PipelineNets.batches(5, 2, 8, DataType.FLOAT);
        PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(2).dataParallel(2).microbatches(2)
                .timeout(Duration.ofSeconds(60)).build();
        try {
            trainer.fit(data.get(0));
            SecondReplicaFailingLoss.failing = true;
            PipelineTrainingException e = assertThrows(PipelineTrainingException.class, () -> trainer.fit(data.get(1)));
            assertEquals(3, e.rank(), "world rank 3 (replica 1's last stage) threw: " + e);
            assertInstanceOf(IllegalStateException.class, e.getCause());
            assertEquals(3, e.getSuppressed().length, "every other rank fails too");
            for (Throwable other : e.getSuppressed()) {
                // heard of, not waited out (no elapsed-time bound, which a loaded machine stretches)
                boolean heard = other instanceof PipelineAbortedException || other instanceof PeerTimeoutException t
                        && t.reason() == PeerTimeoutException.Reason.PEER_ABORTED;
                assertTrue(heard, "stopped by the abort, not by its deadline: " + other);
            }
        } finally {
            SecondReplicaFailingLoss.failing = false;
            trainer.close();
        }
    }

    /** Cross-entropy that throws from its gradient on replica 1's threads while {@link #failing} is set. */
    static final class SecondReplicaFailingLoss extends LossMCXENT {
        static volatile boolean failing;

        @Override
        public INDArray computeGradient(INDArray labels, INDArray preOutput, IActivation activationFn, INDArray mask) {
            if (failing && Thread.currentThread().getName().contains("-dp1-")) {
                throw new IllegalStateException("injected failure in replica 1's loss gradient");
            }
            return super.computeGradient(labels, preOutput, activationFn, mask);
        }
    }

    @Test
    void badSettingsAndBatchesAreRefusedClearly() {
        MultiLayerNetwork base = PipelineNets.mlp(PipelineNets.updater("sgd"), 0.0, DataType.FLOAT);
        IllegalArgumentException zero = assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(base.clone()).dataParallel(0));
        assertTrue(zero.getMessage().contains("dataParallel=0 expected dataParallel >= 1"), zero.getMessage());
        MultiLayerNetwork trained = base.clone();
        MultiLayerNetwork reference = base.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).dataParallel(2)
                .microbatches(4).build()) {
            DataSet batch = PipelineNets.batches(3, 1, BATCH, DataType.FLOAT).getFirst();
            IllegalArgumentException odd = assertThrows(IllegalArgumentException.class,
                    () -> trainer.fit(PipelineNets.rows(batch, 0, 12)));
            assertTrue(odd.getMessage().contains("batch size=12 is not divisible by microbatches=4 x dataParallel=2:"
                    + " expected a multiple of 8"), odd.getMessage());
            assertTrue(odd.getMessage().contains("use batch size 8 or 16"), odd.getMessage());
            // refused before anything ran: the trainer still trains, and exactly
            trainer.fit(batch);
            reference.fit(batch);
            trainer.copyParametersTo(trained);
            assertTrue(Nets.maxRelativeDifference(trained.params(), reference.params()) <= 1e-5);
        }
    }
}
