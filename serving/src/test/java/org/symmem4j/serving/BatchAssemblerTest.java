package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedWeights;

/** The workers' batch assembly: bitwise what {@code Nd4j.concat} builds, and answers that never alias its buffer. */
class BatchAssemblerTest {

    /** Requests of mixed row counts and layouts: a fresh array, a row-range view, an f-order copy, one row. */
    static List<INDArray> requests(long seed, long... exampleShape) {
        INDArray big = Nets.features(seed, 9, exampleShape);
        List<INDArray> r = new ArrayList<>();
        r.add(Nets.features(seed + 1, 3, exampleShape));
        r.add(big.get(NDArrayIndex.interval(4, 9))); // a view at an offset: contiguous, bulk copied
        r.add(Nets.features(seed + 2, 2, exampleShape).dup('f')); // not c-order: copied by assign
        r.add(Nets.features(seed + 3, 1, exampleShape));
        return r;
    }

    static long rows(List<INDArray> requests) {
        return requests.stream().mapToLong(a -> a.size(0)).sum();
    }

    static void assertBitwise(INDArray expected, INDArray actual, String what) {
        assertArrayEquals(expected.shape(), actual.shape(), what + ": shape");
        assertArrayEquals(expected.dup('c').data().asFloat(), actual.dup('c').data().asFloat(), what);
    }

    @Test
    void mlpBatchesAreBitwiseTheConcatenationAndGiveItsAnswers() {
        checkNetwork(Nets.owning(Nets.mlp(7)), 8);
    }

    @Test
    void cnnBatchesOfFourDimensionsAreBitwiseTheConcatenationAndGiveItsAnswers() {
        checkNetwork(Nets.owning(Nets.cnn(7)), 1, 8, 8);
    }

    private static void checkNetwork(MultiLayerNetwork net, long... exampleShape) {
        BatchAssembler assembler = new BatchAssembler(16);
        for (int round = 0; round < 3; round++) { // the buffer is reused: later rounds overwrite earlier ones
            List<INDArray> requests = requests(11 + round, exampleShape);
            INDArray concat = Nd4j.concat(0, requests.toArray(INDArray[]::new));
            INDArray batch = assembler.assemble(requests, rows(requests));
            assertBitwise(concat, batch, "round " + round + " features");
            INDArray expected = net.output(concat);
            INDArray out = assembler.detach(net.output(batch));
            assertBitwise(expected, out, "round " + round + " outputs");
            long row = 0;
            for (INDArray r : requests) { // each request's rows: what it would get alone, up to the GEMM's
                // blocking (batched and single-row products differ in the last bit, with concat as without it)
                INDArray alone = net.output(r.dup('c'));
                INDArray mine = out.get(NDArrayIndex.interval(row, row + r.size(0)));
                assertTrue(alone.equalsWithEps(mine, 1e-5), "round " + round + " request at row " + row);
                row += r.size(0);
            }
        }
    }

    @Test
    void aSingleRequestRunsAsItIsAndAFullBatchIsTheWholeBuffer() {
        BatchAssembler assembler = new BatchAssembler(4);
        INDArray one = Nets.features(1, 3, 8);
        assertSame(one, assembler.assemble(List.of(one), 3));
        List<INDArray> full = List.of(Nets.features(2, 1, 8), Nets.features(3, 3, 8));
        INDArray batch = assembler.assemble(full, 4);
        assertBitwise(Nd4j.concat(0, full.toArray(INDArray[]::new)), batch, "full batch");
        assertEquals(4, batch.size(0));
    }

    @Test
    void moreRowsThanTheBufferHoldsFallBackToConcat() {
        BatchAssembler assembler = new BatchAssembler(4);
        List<INDArray> tooMany = List.of(Nets.features(1, 2, 8), Nets.features(2, 3, 8));
        INDArray batch = assembler.assemble(tooMany, 5);
        assertBitwise(Nd4j.concat(0, tooMany.toArray(INDArray[]::new)), batch, "five rows, maxBatch=4");
        assertSame(batch, assembler.detach(batch), "a concatenation is the batch's own array: nothing to detach");
    }

    @Test
    void anOutputThatAliasesTheBufferIsCopiedBeforeTheNextBatchOverwritesIt() {
        BatchAssembler assembler = new BatchAssembler(8);
        List<INDArray> first = List.of(Nets.features(1, 2, 8), Nets.features(2, 3, 8));
        INDArray firstOut = assembler.detach(assembler.assemble(first, 5)); // an identity network
        INDArray firstCopy = firstOut.dup();
        List<INDArray> second = List.of(Nets.features(3, 4, 8), Nets.features(4, 4, 8));
        INDArray secondBatch = assembler.assemble(second, 8);
        assertNotSame(firstOut, secondBatch);
        assertBitwise(firstCopy, firstOut, "the first batch's outputs after the second was assembled");
        INDArray fresh = Nd4j.create(DataType.FLOAT, 8, 8);
        assertSame(fresh, assembler.detach(fresh), "a fresh output is not copied");
    }

    /**
     * Two consecutive batches on one worker: the first batch's answers (views of its output) are unchanged after the
     * second batch ran in the same reused buffer, for a DL4J network and for a network that returns its input.
     */
    @Test
    void answersOfOneBatchSurviveTheWorkersNextBatch() throws Exception {
        INDArray params = Nets.owning(Nets.mlp(3)).params();
        ModelSpec identity = ModelSpec.of(p -> features -> features, DataType.FLOAT, 8);
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(64, Duration.ofMillis(200));
        try (SharedWeights weights = ModelRouterTest.weights();
                ModelRouter router = new ModelRouter(weights, options, new SimpleMeterRegistry())) {
            router.deploy("mlp", ModelSpec.of(Nets.mlp(3), 8), params);
            router.deploy("same", identity, params);
            for (String model : List.of("mlp", "same")) {
                List<INDArray> firstInputs = requests(21, 8);
                List<Prediction> first = answers(router, model, firstInputs);
                List<INDArray> kept = first.stream().map(p -> p.output().dup()).toList();
                answers(router, model, requests(31, 8));
                for (int i = 0; i < first.size(); i++) {
                    assertBitwise(kept.get(i), first.get(i).output(), model + " first batch's answer " + i);
                    if (model.equals("same")) {
                        assertBitwise(firstInputs.get(i), first.get(i).output(), "identity answer " + i);
                    }
                }
            }
        }
    }

    @Test
    void retainOnlyFreesTheOtherShapesBuffersAtOnceAndAFreedShapeGetsANewBuffer() {
        BatchAssembler assembler = new BatchAssembler(16);
        List<INDArray> flat = requests(41, 8);
        List<INDArray> images = requests(42, 1, 4, 4);
        INDArray flatBatch = assembler.assemble(flat, rows(flat));
        INDArray imageBatch = assembler.assemble(images, rows(images));
        BatchAssembler.Shape flatShape = BatchAssembler.Shape.of(DataType.FLOAT, 8);
        BatchAssembler.Shape imageShape = BatchAssembler.Shape.of(DataType.FLOAT, 1, 4, 4);
        assertEquals(Set.of(flatShape, imageShape), assembler.shapes());
        assertEquals(16L * (8 + 16) * 4, assembler.bufferBytes());

        assertEquals(1, assembler.retainOnly(Set.of(flatShape)));
        assertEquals(Set.of(flatShape), assembler.shapes());
        assertEquals(16L * 8 * 4, assembler.bufferBytes());
        assertTrue(imageBatch.wasClosed(), "the dropped buffer's memory is freed, not left to the garbage collector");
        assertFalse(flatBatch.wasClosed(), "a kept shape's buffer stays");

        INDArray again = assembler.assemble(images, rows(images)); // the freed shape comes back: a new buffer
        assertBitwise(Nd4j.concat(0, images.toArray(INDArray[]::new)), again, "after the free");
        assertEquals(Set.of(flatShape, imageShape), assembler.shapes());
        assembler.close();
        assertEquals(Set.of(), assembler.shapes());
        assertTrue(again.wasClosed() && flatBatch.wasClosed(), "close frees every buffer");
    }

    /**
     * A worker's buffer for a shape lives while a served version (current or kept for rollback) has that shape, and
     * is freed when the last such version is freed: not while a lease still reads it, at once when the lease closes.
     */
    @Test
    void theRoutersBatchBufferOfAShapeIsFreedWithTheLastVersionOfThatShape() {
        INDArray params = Nd4j.ones(DataType.FLOAT, 4);
        ModelSpec images = ModelSpec.of(p -> features -> features.mul(2), DataType.FLOAT, 1, 4, 4);
        ModelSpec flat = ModelSpec.of(p -> features -> features.mul(3), DataType.FLOAT, 8);
        BatchAssembler.Shape imageShape = BatchAssembler.Shape.of(DataType.FLOAT, 1, 4, 4);
        BatchAssembler.Shape flatShape = BatchAssembler.Shape.of(DataType.FLOAT, 8);
        // requests(...) sends 11 rows: a batch of maxBatch=11 leaves as soon as they are all queued, one per call
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(11, Duration.ofSeconds(30));
        ModelRouter router;
        try (SharedWeights weights = ModelRouterTest.weights()) {
            router = new ModelRouter(weights, options, new SimpleMeterRegistry());
            try (router) {
                router.deploy("m", images, params); // v1
                answers(router, "m", requests(51, 1, 4, 4));
                router.deploy("other", flat, params);
                answers(router, "other", requests(52, 8));
                assertEquals(Set.of(imageShape, flatShape), router.batchBufferShapes());

                router.deploy("m", flat, params); // v2: a new input shape; v1 is kept for rollback
                answers(router, "m", requests(53, 8));
                assertEquals(Set.of(imageShape, flatShape), router.batchBufferShapes(), "v1 can be rolled back to");
                ModelRouter.Lease reader = router.lease("m", 1);
                router.deploy("m", flat, params); // v3 retires v1, which the lease still reads
                assertEquals(Set.of(imageShape, flatShape), router.batchBufferShapes(), "v1 is not freed yet");
                reader.close(); // v1 freed: no served version has its shape any more
                assertEquals(1, router.freedVersions());
                assertEquals(Set.of(flatShape), router.batchBufferShapes(), "v1's shape's buffer went with it");

                router.deploy("m", flat, params); // v4 retires v2: "other" and v3, v4 still have its shape
                assertEquals(2, router.freedVersions());
                assertEquals(Set.of(flatShape), router.batchBufferShapes(), "a shape still served keeps its buffer");
                List<INDArray> in = requests(54, 8);
                List<Prediction> out = answers(router, "m", in);
                for (int i = 0; i < in.size(); i++) {
                    assertBitwise(in.get(i).mul(3), out.get(i).output(), "answer " + i + " after the frees");
                }
            }
        }
        assertEquals(Set.of(), router.batchBufferShapes(), "close frees the workers' buffers");
    }

    private static List<Prediction> answers(ModelRouter router, String model, List<INDArray> inputs) {
        List<CompletableFuture<Prediction>> futures = new ArrayList<>();
        for (INDArray in : inputs) {
            futures.add(router.predict(model, in));
        }
        return futures.stream().map(CompletableFuture::join).toList();
    }
}
