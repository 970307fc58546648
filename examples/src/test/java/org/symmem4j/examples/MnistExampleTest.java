package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.dataset.DataSet;

/** The MNIST-shaped example learns its generated digits, with the wrapper as with one model; no timing. */
class MnistExampleTest {

    @Test
    void learnsTheGeneratedDigitsWithTheWrapperAsWithOneModel() {
        MnistExample.Flags flags = new MnistExample.Flags();
        flags.workers = 2;
        flags.epochs = 2;
        flags.batch = 32;
        flags.trainExamples = 1536;
        flags.testExamples = 512;
        MnistExample.Result r = MnistExample.run(flags, false);
        double single = r.singleAccuracy()[1];
        double wrapper = r.wrapperAccuracy()[1];
        // chance is 0.1; an untrained LeNet-5 sits near it
        assertTrue(wrapper > 0.7, "symmem4j wrapper's test accuracy " + wrapper + " expected > 0.7");
        assertTrue(single > 0.7, "one model's test accuracy " + single + " expected > 0.7");
        assertEquals(single, wrapper, 0.03, "the wrapper trains like one model on the merged batches");
        assertTrue(r.maxParameterDifference() < 1e-2, "parameters part by " + r.maxParameterDifference());
    }

    @Test
    void digitsAreMnistShapedBalancedAndReproducible() {
        List<DataSet> a = DigitGlyphs.batches(7, 3, 40);
        List<DataSet> b = DigitGlyphs.batches(7, 3, 40);
        int[] perClass = new int[DigitGlyphs.CLASSES];
        for (int i = 0; i < a.size(); i++) {
            DataSet d = a.get(i);
            assertArrayEquals(new long[] {40, 784}, d.getFeatures().shape());
            assertArrayEquals(new long[] {40, 10}, d.getLabels().shape());
            assertTrue(d.getFeatures().minNumber().doubleValue() >= 0 && d.getFeatures().maxNumber().doubleValue() <= 1);
            assertEquals(d.getFeatures(), b.get(i).getFeatures(), "same seed, same images");
            for (int row = 0; row < 40; row++) {
                perClass[d.getLabels().getRow(row).argMax().getInt(0)]++;
            }
        }
        assertArrayEquals(new int[] {12, 12, 12, 12, 12, 12, 12, 12, 12, 12}, perClass);
        assertTrue(!DigitGlyphs.batches(8, 1, 40).getFirst().getFeatures().equals(a.getFirst().getFeatures()));
        assertThrows(IllegalArgumentException.class, () -> DigitGlyphs.batches(1, 0, 40));
    }
}
