package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;

/**
 * A trainer cuts every step's batch into the microbatch arrays of the step before ({@code Microbatches.split} with
 * {@code reuse}; {@code StageReplicas} keeps the last cut): a step whose batch has the shapes of the one before makes
 * no new microbatch array, and the arrays hold, bitwise, what a fresh cut holds — features and labels converted to the
 * network's type or copied as they are, and masks. A batch of other shapes gets new arrays; a refused batch writes
 * nothing. The trainer over several steps against fresh trainers per step, bitwise: PipelineHandoffReuseTest.
 */
class MicrobatchesReuseTest {

    /** A batch of {@code examples} recurrent examples [examples, 3, 5] with masks, values from {@code seed}. */
    private static DataSet batch(int examples, long seed, DataType type) {
        Nd4j.getRandom().setSeed(seed);
        INDArray features = Nd4j.rand(DataType.DOUBLE, examples, 3, 5).castTo(type);
        INDArray labels = Nd4j.rand(DataType.DOUBLE, examples, 2, 5).castTo(type);
        INDArray featuresMask = Nd4j.rand(DataType.DOUBLE, examples, 5).gt(0.3).castTo(DataType.FLOAT);
        INDArray labelsMask = Nd4j.rand(DataType.DOUBLE, examples, 5).gt(0.3).castTo(DataType.FLOAT);
        return new DataSet(features, labels, featuresMask, labelsMask);
    }

    /** Every array of a cut, microbatch by microbatch: features, labels, features mask, labels mask. */
    private static List<INDArray> arrays(Microbatches m) {
        List<INDArray> out = new ArrayList<>();
        for (int mb = 0; mb < m.count(); mb++) {
            out.add(m.features().get(mb));
            out.add(m.labels().get(mb));
            out.add(m.featuresMask(mb));
            out.add(m.labelsMask(mb));
        }
        return out;
    }

    private static void assertBitwise(Microbatches expected, Microbatches found) {
        List<INDArray> e = arrays(expected);
        List<INDArray> f = arrays(found);
        assertEquals(e.size(), f.size());
        for (int i = 0; i < e.size(); i++) {
            assertEquals(e.get(i).dataType(), f.get(i).dataType(), "array " + i);
            assertArrayEquals(e.get(i).shape(), f.get(i).shape(), "array " + i);
            assertArrayEquals(e.get(i).dup('c').data().asBytes(), f.get(i).dup('c').data().asBytes(), "array " + i
                    + " bitwise");
        }
    }

    @Test
    void aStepOfTheSameShapesWritesIntoTheArraysOfTheStepBefore() {
        for (DataType given : new DataType[] {DataType.FLOAT, DataType.DOUBLE}) { // copied as is, or converted
            Microbatches first = Microbatches.split(batch(12, 1, given), 4, DataType.FLOAT, null);
            List<INDArray> firstArrays = arrays(first);
            for (long seed = 2; seed < 5; seed++) {
                DataSet next = batch(12, seed, given);
                Microbatches reused = Microbatches.split(next, 4, DataType.FLOAT, first);
                List<INDArray> reusedArrays = arrays(reused);
                for (int i = 0; i < firstArrays.size(); i++) {
                    assertSame(firstArrays.get(i), reusedArrays.get(i), given + " step " + seed + " array " + i
                            + ": no new array");
                }
                assertBitwise(Microbatches.split(next, 4, DataType.FLOAT), reused);
                first = reused;
            }
        }
    }

    @Test
    void replicaPiecesAreReusedToo() {
        Microbatches first = Microbatches.splitForReplicas(batch(16, 1, DataType.FLOAT), 2, 2, DataType.FLOAT, null);
        Microbatches second = Microbatches.splitForReplicas(batch(16, 2, DataType.FLOAT), 2, 2, DataType.FLOAT, first);
        assertSame(first.features().get(3), second.features().get(3));
        assertBitwise(Microbatches.split(batch(16, 2, DataType.FLOAT), 4, DataType.FLOAT), second);
        List<Microbatches> shares = Microbatches.replicaShares(second, 2, 2, 0, 2);
        assertSame(second.features().get(1), shares.get(1).features().get(0), "replica 1's microbatch 0 is piece 1");
        assertSame(second.labelsMask(2), shares.get(0).labelsMask(1), "replica 0's microbatch 1 is piece 2");
    }

    @Test
    void otherShapesOrTypesGetNewArraysAndARefusedBatchWritesNothing() {
        Microbatches first = Microbatches.split(batch(12, 1, DataType.FLOAT), 4, DataType.FLOAT, null);
        byte[] before = first.features().get(0).data().asBytes();
        Microbatches smaller = Microbatches.split(batch(8, 2, DataType.FLOAT), 4, DataType.FLOAT, first);
        assertNotSame(first.features().get(0), smaller.features().get(0), "2 rows, not 3: a new array");
        assertBitwise(Microbatches.split(batch(8, 2, DataType.FLOAT), 4, DataType.FLOAT), smaller);
        Microbatches doubles = Microbatches.split(batch(12, 2, DataType.FLOAT), 4, DataType.DOUBLE, first);
        assertNotSame(first.features().get(0), doubles.features().get(0), "another type: a new array");
        assertSame(first.featuresMask(0), doubles.featuresMask(0), "the masks keep their type: reused");
        first = Microbatches.split(batch(12, 1, DataType.FLOAT), 4, DataType.FLOAT, null);
        before = first.features().get(0).data().asBytes();
        Microbatches kept = first;
        assertThrows(IllegalArgumentException.class,
                () -> Microbatches.split(batch(10, 3, DataType.FLOAT), 4, DataType.FLOAT, kept));
        assertArrayEquals(before, first.features().get(0).data().asBytes(), "a refused batch overwrote nothing");
    }
}
