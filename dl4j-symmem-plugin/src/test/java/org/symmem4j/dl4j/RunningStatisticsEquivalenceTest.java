package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;

/**
 * BatchNormalization's running statistics under the wrapper equal those of one model trained on
 * the merged batch of every step (all workers' examples), in inference mode: the running mean,
 * variance and log10(std) parameters, and the model's output on held-out data. Weights are frozen
 * (SGD, learning rate 0), so the running statistics are all that moves. Plain data parallelism and
 * both ZeRO stages; MultiLayerNetwork and ComputationGraph; the variance and the log10(std)
 * parameterizations; dense and convolutional inputs; 2 workers × 16 examples, and 3 workers with
 * batches of 5 to 11 examples and a last round that leaves one worker idle.
 */
class RunningStatisticsEquivalenceTest {

    /** Per step: one batch per worker; a last round with fewer batches than workers leaves workers idle. */
    enum Batches {
        EQUAL(2, new int[] {16, 16, 16, 16, 16, 16}),
        UNEQUAL_WITH_IDLE_WORKER(3, new int[] {5, 11, 8, 7, 3, 9, 6, 10});

        final int workers;
        final int[] sizes;

        Batches(int workers, int[] sizes) {
            this.workers = workers;
            this.sizes = sizes;
        }
    }

    static double tolerance(DataType dtype) {
        // measured: ≤ 3e-16 in fp64 (rounding: a few ulps of each step's update) and ≤ 1.4e-7 in
        // fp32 (one model's batch statistics are themselves fp32 sums of up to 32 rows)
        return dtype == DataType.DOUBLE ? 1e-14 : 1e-6;
    }

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (String kind : new String[] {"MultiLayerNetwork variance", "MultiLayerNetwork log10std",
                "ComputationGraph variance+log10std"}) {
            for (Batches batches : Batches.values()) {
                for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
                    out.add(Arguments.of(kind, batches, dtype));
                }
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1} {2}")
    @MethodSource("cases")
    void runningStatisticsEqualOneModelOnTheMergedBatch(String kind, Batches batches, DataType dtype) {
        Model net = switch (kind) {
            case "MultiLayerNetwork variance" -> StateNets.batchNormMlp(dtype, false);
            case "MultiLayerNetwork log10std" -> StateNets.batchNormMlp(dtype, true);
            default -> StateNets.batchNormGraph(dtype);
        };
        List<DataSet> data = StateNets.shiftedBatches(31, batches.sizes, dtype);
        INDArray heldOut = StateNets.shiftedBatches(32, new int[] {40}, dtype).getFirst().getFeatures();
        betweenWorkerVarianceMatters(data.subList(0, batches.workers), tolerance(dtype));
        assertMatchesMergedBatch(net, batches.workers, data, heldOut, tolerance(dtype));
    }

    /** DL4J's 4-D path: statistics per channel over examples and positions. */
    @ParameterizedTest(name = "useLogStd={0}")
    @ValueSource(booleans = {false, true})
    void convolutionalBatchNormEqualsOneModelOnTheMergedBatch(boolean useLogStd) {
        int[] sizes = {4, 7, 5, 6, 3, 8, 2};
        List<DataSet> data = StateNets.shiftedImageBatches(41, sizes, DataType.DOUBLE);
        INDArray heldOut = StateNets.shiftedImageBatches(42, new int[] {10}, DataType.DOUBLE).getFirst().getFeatures();
        assertMatchesMergedBatch(StateNets.batchNormCnn(DataType.DOUBLE, useLogStd), 3, data, heldOut, 1e-14);
    }

    /**
     * With the weights training (Adam) as well, both ZeRO stages stay bitwise equal to plain data
     * parallelism: parameters, running statistics and the updater state gathered from the shards.
     */
    @ParameterizedTest(name = "{0}")
    @EnumSource(value = ZeroStage.class, names = {"OPTIMIZER_STATE", "GRADIENTS"}) // stage 3: FullyShardedEquivalenceTest
    void shardedTrainingWithBatchNormEqualsPlainDataParallelismBitwise(ZeroStage stage) {
        Batches batches = Batches.UNEQUAL_WITH_IDLE_WORKER;
        for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
            MultiLayerNetwork net = StateNets.batchNormMlp(dtype, true, new Adam(0.01));
            List<DataSet> data = StateNets.shiftedBatches(35, batches.sizes, dtype);
            ShardedEquivalenceTest.Run plain = ShardedEquivalenceTest.train(net, batches.workers, null, data);
            ShardedEquivalenceTest.Run sharded = ShardedEquivalenceTest.train(net, batches.workers, stage, data);
            assertTrue(ModelReplica.bitwiseEqual(plain.params(), sharded.params()), stage + " " + dtype + ": parameters");
            assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), sharded.updaterState()), stage + " " + dtype
                    + ": updater state");
            assertTrue(Nets.maxRelativeDifference(plain.params(), net.params()) > 1e-3, "the weights must train");
        }
    }

    /**
     * Plain data parallelism and both ZeRO stages against one model on the merged batches: state
     * parameters and inference output within {@code tol}; the stages bitwise equal to plain.
     */
    static void assertMatchesMergedBatch(Model net, int workers, List<DataSet> data, INDArray heldOut, double tol) {
        INDArray initial = StateNets.stateParams(net);
        Model reference = StateNets.trainMerged(net, workers, data);
        INDArray expectedState = StateNets.stateParams(reference);
        INDArray expectedOutput = StateNets.inferenceOutput(reference, heldOut);
        double moved = Nets.maxRelativeDifference(expectedState, initial);
        assertTrue(moved > 1e3 * tol, "the state must move well beyond the tolerance for the test to mean something: " + moved);

        Model plain = StateNets.trainWrapped(net, workers, null, data);
        for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS}) {
            Model run = stage == null ? plain : StateNets.trainWrapped(net, workers, stage, data);
            String mode = stage == null ? "plain data parallelism" : "ZeRO " + stage;
            double stateDiff = Nets.maxRelativeDifference(StateNets.stateParams(run), expectedState);
            assertTrue(stateDiff <= tol, mode + ": state parameters (running statistics, centers) differ from one model on the merged batch: max"
                    + " relative difference " + stateDiff + " > " + tol);
            double outputDiff = Nets.maxRelativeDifference(StateNets.inferenceOutput(run, heldOut), expectedOutput);
            assertTrue(outputDiff <= tol, mode + ": inference output differs from one model on the merged batch: max"
                    + " relative difference " + outputDiff + " > " + tol);
            if (stage != null) {
                assertTrue(ModelReplica.bitwiseEqual(params(run), params(plain)), mode + ": parameters differ bitwise from"
                        + " plain data parallelism");
            }
        }
    }

    private static INDArray params(Model m) {
        return m instanceof MultiLayerNetwork n ? n.params() : ((ComputationGraph) m).params();
    }

    /**
     * The merged batch's (biased) variance is the workers' variances averaged plus the spread of
     * their means, Σ n_w (m_w − m)² / N; on this data that term must exceed the tolerance by far,
     * or averaging per-worker variances would pass.
     */
    private static void betweenWorkerVarianceMatters(List<DataSet> firstStep, double tol) {
        int features = (int) firstStep.getFirst().getFeatures().size(1);
        long total = 0;
        double[] sum = new double[features];
        for (DataSet ds : firstStep) {
            total += ds.numExamples();
        }
        double[][] means = new double[firstStep.size()][features];
        for (int w = 0; w < firstStep.size(); w++) {
            double[][] x = firstStep.get(w).getFeatures().castTo(DataType.DOUBLE).toDoubleMatrix();
            for (double[] row : x) {
                for (int j = 0; j < features; j++) {
                    means[w][j] += row[j] / x.length;
                }
            }
            for (int j = 0; j < features; j++) {
                sum[j] += means[w][j] * x.length;
            }
        }
        double largest = 0;
        for (int j = 0; j < features; j++) {
            double between = 0;
            for (int w = 0; w < firstStep.size(); w++) {
                double d = means[w][j] - sum[j] / total;
                between += firstStep.get(w).numExamples() * d * d / total;
            }
            largest = Math.max(largest, between);
        }
        assertTrue(largest > 1e3 * tol, "the workers' batches must differ in mean for the variance merge to be tested: " + largest);
    }
}
