package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Model;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * CenterLossOutputLayer's class centers under the wrapper equal those of one model trained on the
 * merged batch. DL4J moves center j by α Σ_{i in j} (c_j − x_i) / (1 + n_j) over the batch (n_j:
 * the batch's examples of class j), written into the gradient view for a NoOp updater, then divides
 * by the batch size: the per-class denominator makes the merged update differ from the sum of the
 * workers' updates whenever workers see different class counts. Weights are frozen (SGD, learning
 * rate 0), so the centers are all that moves. Plain data parallelism and both ZeRO stages.
 */
class CenterLossEquivalenceTest {

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (String kind : new String[] {"MultiLayerNetwork", "ComputationGraph"}) {
            for (RunningStatisticsEquivalenceTest.Batches batches : RunningStatisticsEquivalenceTest.Batches.values()) {
                for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
                    out.add(Arguments.of(kind, batches, dtype));
                }
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1} {2}")
    @MethodSource("cases")
    void centersEqualOneModelOnTheMergedBatch(String kind, RunningStatisticsEquivalenceTest.Batches batches, DataType dtype) {
        Model net = kind.equals("MultiLayerNetwork") ? StateNets.centerLossMlp(dtype, false) : StateNets.centerLossGraph(dtype);
        List<DataSet> data = StateNets.shiftedBatches(51, batches.sizes, dtype);
        INDArray heldOut = StateNets.shiftedBatches(52, new int[] {40}, dtype).getFirst().getFeatures();
        RunningStatisticsEquivalenceTest.assertMatchesMergedBatch(net, batches.workers, data, heldOut,
                RunningStatisticsEquivalenceTest.tolerance(dtype));
    }

    /** With DL4J's gradientCheck flag the centers' update has no per-class denominator: a plain sum. */
    @Test
    void gradientCheckModeCentersEqualOneModelOnTheMergedBatch() {
        RunningStatisticsEquivalenceTest.Batches batches = RunningStatisticsEquivalenceTest.Batches.UNEQUAL_WITH_IDLE_WORKER;
        List<DataSet> data = StateNets.shiftedBatches(53, batches.sizes, DataType.DOUBLE);
        INDArray heldOut = StateNets.shiftedBatches(54, new int[] {40}, DataType.DOUBLE).getFirst().getFeatures();
        RunningStatisticsEquivalenceTest.assertMatchesMergedBatch(StateNets.centerLossMlp(DataType.DOUBLE, true),
                batches.workers, data, heldOut, 1e-14);
    }
}
