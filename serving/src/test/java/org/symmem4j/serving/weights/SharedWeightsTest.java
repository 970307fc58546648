package org.symmem4j.serving.weights;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;

/** Networks over shared weights: no copy, and outputs bitwise equal to the same network owning its parameters. */
class SharedWeightsTest {

    static Group oneRank() {
        return InJvmWorld.create(1).join(0);
    }

    @Test
    void networksOnManyThreadsShareOneCopyAndAnswerBitwiseAsTheOwningNetwork() throws Exception {
        try (SharedWeights weights = SharedWeights.create(oneRank(), 0, 1 << 20, 8)) {
            MultiLayerNetwork mlp = Nets.owning(Nets.mlp(11));
            MultiLayerNetwork cnn = Nets.owning(Nets.cnn(12));
            ComputationGraph graph = Nets.owning(Nets.graph(13));
            weights.publish("mlp", 1, mlp.params());
            weights.publish("cnn", 1, cnn.params());
            weights.publish("graph", 1, graph.params());
            MemorySegment mlpParams = weights.open("mlp", 1);
            MemorySegment cnnParams = weights.open("cnn", 1);
            MemorySegment graphParams = weights.open("graph", 1);
            assertEquals(mlp.params().length() * 4, mlpParams.byteSize());

            INDArray x = Nets.features(1, 5, 8);
            INDArray img = Nets.features(2, 5, 1, 8, 8);
            INDArray expectMlp = mlp.output(x);
            INDArray expectCnn = cnn.output(img);
            INDArray expectGraph = graph.outputSingle(x);
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                done.add(pool.submit(() -> {
                    MultiLayerNetwork a = SharedNetworks.multiLayer(Nets.mlp(99), mlpParams); // the seed is unused: no init
                    MultiLayerNetwork b = SharedNetworks.multiLayer(Nets.cnn(99), cnnParams);
                    ComputationGraph c = SharedNetworks.graph(Nets.graph(99), graphParams);
                    // no copy: the networks' flat parameters are the cache's memory
                    assertEquals(mlpParams.address(), a.params().data().address());
                    assertEquals(cnnParams.address(), b.params().data().address());
                    assertEquals(graphParams.address(), c.params().data().address());
                    for (int i = 0; i < 20; i++) {
                        assertEquals(expectMlp, a.output(x), "MLP over shared weights");
                        assertTrue(bitwiseEqual(expectMlp, a.output(x)));
                        assertTrue(bitwiseEqual(expectCnn, b.output(img)));
                        assertTrue(bitwiseEqual(expectGraph, c.outputSingle(x)));
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get();
            }
            pool.shutdown();
            // the weights did not change under the readers
            assertTrue(bitwiseEqual(mlp.params(), SharedNetworks.multiLayer(Nets.mlp(1), mlpParams).params()));
        }
    }

    static boolean bitwiseEqual(INDArray a, INDArray b) {
        if (!java.util.Arrays.equals(a.shape(), b.shape()) || a.dataType() != b.dataType()) {
            return false;
        }
        float[] x = a.dup().data().asFloat();
        float[] y = b.dup().data().asFloat();
        for (int i = 0; i < x.length; i++) {
            if (Float.floatToRawIntBits(x[i]) != Float.floatToRawIntBits(y[i])) {
                return false;
            }
        }
        return true;
    }

    @Test
    void versionsAreImmutableSeparateEntriesAndRetireFreesThem() {
        try (SharedWeights weights = SharedWeights.create(oneRank(), 0, 1 << 20, 8)) {
            MultiLayerNetwork v1 = Nets.owning(Nets.mlp(1));
            MultiLayerNetwork v2 = Nets.owning(Nets.mlp(2));
            weights.publish("m", 1, v1.params());
            weights.publish("m", 2, v2.params());
            assertEquals(2, weights.publishedVersions(), "v2 does not replace v1: both are served until v1 is retired");
            IllegalStateException again = assertThrows(IllegalStateException.class, () -> weights.publish("m", 1,
                    v2.params()));
            assertTrue(again.getMessage().contains("published already"), again.getMessage());
            assertTrue(weights.retire("m", 1));
            assertNull(weights.open("m", 1));
            assertNotNull(weights.open("m", 2));
            assertEquals(1, weights.publishedVersions());
        }
    }

    @Test
    void refusesParametersThatDoNotFitTheConfigurationAndBadNames() {
        try (SharedWeights weights = SharedWeights.create(oneRank(), 0, 1 << 20, 8)) {
            weights.publish("small", 1, Nets.owning(Nets.mlp(1)).params());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> SharedNetworks.multiLayer(Nets.cnn(1), weights.open("small", 1)));
            assertTrue(e.getMessage().contains("do not fit"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> SharedWeights.key("a/b", 1));
            assertThrows(IllegalArgumentException.class, () -> SharedWeights.key("ok", 0));
            assertThrows(IllegalArgumentException.class, () -> SharedWeights.key("x".repeat(70), 1));
        }
    }
}
