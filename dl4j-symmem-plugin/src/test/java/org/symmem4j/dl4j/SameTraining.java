package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;

/**
 * The bitwise "same training" assertions the sharded checkpoint tests share (stage 3 and HSDP): a restored or resumed
 * model against its reference, and a run's losses against the reference run's, step by step.
 */
final class SameTraining {

    private SameTraining() {
    }

    /** Parameters and updater state bitwise equal, and the same iteration and epoch counts. */
    static void assertSameModel(MultiLayerNetwork expected, MultiLayerNetwork actual, String what) {
        assertTrue(ModelReplica.bitwiseEqual(expected.params(), actual.params()), what + ": parameters; max relative"
                + " difference " + Nets.maxRelativeDifference(actual.params(), expected.params()));
        assertTrue(ModelReplica.bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), what + ": updater state");
        assertEquals(expected.getIterationCount(), actual.getIterationCount(), what + ": iterations");
        assertEquals(expected.getEpochCount(), actual.getEpochCount(), what + ": epochs");
    }

    /** The same number of steps, and every step's loss bitwise equal to the reference run's. */
    static void assertSameLosses(List<Double> expected, List<Double> actual, String what) {
        assertEquals(expected.size(), actual.size(), what + ": steps");
        for (int s = 0; s < expected.size(); s++) {
            assertEquals(Double.doubleToRawLongBits(expected.get(s)), Double.doubleToRawLongBits(actual.get(s)),
                    what + ": step " + s + " loss " + actual.get(s) + ", the reference run's " + expected.get(s));
        }
    }
}
