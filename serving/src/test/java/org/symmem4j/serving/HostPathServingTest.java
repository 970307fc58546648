package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.serving.host.HostNetwork;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedWeights;

/**
 * A model deployed with {@link ModelSpec#ofHostPath}: the router's workers run {@code HostNetwork} over the shared
 * parameters, answering as DL4J's forward does to float rounding; a worker process rebuilds the same spec from what
 * the router sends; a network the host path lacks is refused at deploy.
 */
class HostPathServingTest {

    private static final int ROWS = 12;

    @Test
    void theRouterServesACnnOnTheHostPathWithDl4jsAnswers() throws Exception {
        MultiLayerNetwork own = Nets.owning(Nets.cnn(3));
        INDArray[] rows = new INDArray[ROWS];
        for (int i = 0; i < ROWS; i++) {
            rows[i] = Nets.features(10 + i, 1, 1, 8, 8);
        }
        RouterOptions options = RouterOptions.defaults().withWorkers(2).withBatching(8, Duration.ZERO);
        try (SharedWeights weights = ModelRouterTest.weights(); ModelRouter router = new ModelRouter(weights, options, null)) {
            long version = router.deploy("cnn", ModelSpec.ofHostPath(Nets.cnn(3), 1, 8, 8), own.params());
            List<CompletableFuture<Prediction>> answers = new ArrayList<>();
            for (int i = 0; i < ROWS; i++) {
                answers.add(router.predict("cnn", rows[i]));
            }
            for (int i = 0; i < ROWS; i++) {
                Prediction p = answers.get(i).get();
                assertEquals(version, p.version());
                INDArray ref = own.output(rows[i], false);
                assertTrue(p.output().equalsWithEps(ref, 1e-5), "row " + i + ": " + p.output() + " against DL4J's " + ref);
            }
        }
    }

    @Test
    void aWorkerProcessRebuildsTheHostPathFromTheConfigurationItIsSent() {
        MultiLayerNetwork own = Nets.owning(Nets.cnn(5));
        ModelSpec sent = ModelSpec.ofHostPath(Nets.cnn(5), 1, 8, 8);
        ModelSpec rebuilt = ModelSpec.fromJson(sent.kind(), sent.configJson(), 1, 8, 8);
        assertEquals(ModelSpec.HOST_MULTI_LAYER, rebuilt.kind());
        float[] p = own.params().toFloatVector();
        MemorySegment params = Arena.ofAuto().allocate((long) p.length * Float.BYTES, 64);
        MemorySegment.copy(p, 0, params, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, p.length);
        INDArray features = Nets.features(6, 5, 1, 8, 8);
        INDArray got = rebuilt.networkOver(params).output(features);
        assertTrue(got.equalsWithEps(own.output(features, false), 1e-5), got.toString());
    }

    @Test
    void aNetworkTheHostPathLacksIsRefusedAtDeployNamingTheLayer() {
        MultiLayerConfiguration lstm = new NeuralNetConfiguration.Builder().seed(1).list()
                .layer(new LSTM.Builder().nIn(4).nOut(8).activation(Activation.TANH).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ModelSpec.ofHostPath(lstm, 4));
        assertTrue(e.getMessage().contains("LSTM"), e.getMessage());
        assertTrue(e.getMessage().contains("fix: serve it through DL4J's forward (ModelSpec.of)"), e.getMessage());
    }

    @Test
    void aJvmWithoutC2ServesTheHostPathOnDl4jsForward() {
        MultiLayerNetwork own = Nets.owning(Nets.cnn(7));
        float[] p = own.params().toFloatVector();
        MemorySegment params = Arena.ofAuto().allocate((long) p.length * Float.BYTES, 64);
        MemorySegment.copy(p, 0, params, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, p.length);
        INDArray features = Nets.features(8, 5, 1, 8, 8);
        ModelSpec.Network onDl4j = ModelSpec.hostOrDl4j(Nets.cnn(7), params, new long[] {1, 8, 8},
                "-XX:TieredStopAtLevel=1 (no C2)");
        assertEquals(own.output(features, false), onDl4j.output(features), "DL4J's forward: DL4J's answers, bitwise");
        ModelSpec.Network onHost = ModelSpec.hostOrDl4j(Nets.cnn(7), params, new long[] {1, 8, 8}, null);
        assertTrue(onHost.output(features).equalsWithEps(own.output(features, false), 1e-5));
    }

    @Test
    void theDeployWarmsTheHostPathUpWithoutChangingItsAnswers() throws Exception {
        MultiLayerNetwork own = Nets.owning(Nets.cnn(9));
        INDArray before = own.params().dup();
        ModelSpec host = ModelSpec.ofHostPath(Nets.cnn(9), 1, 8, 8);
        int passes = host.warmUp("cnn", own.params(), 8);
        assertTrue(passes >= 1 && passes <= HostNetwork.WARM_UP_PASSES, "passes=" + passes);
        assertEquals(before, own.params(), "the warm-up only reads the parameters");
        assertEquals(0, ModelSpec.of(Nets.cnn(9), 1, 8, 8).warmUp("cnn", own.params(), 8), "DL4J's forward: none");
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(8, Duration.ZERO);
        try (SharedWeights weights = ModelRouterTest.weights(); ModelRouter router = new ModelRouter(weights, options, null)) {
            router.deploy("cnn", host, own.params()); // warms up again (this router's first), then serves
            INDArray x = Nets.features(4, 3, 1, 8, 8);
            INDArray got = router.predict("cnn", x).get().output();
            assertTrue(got.equalsWithEps(own.output(x, false), 1e-5), got + " against DL4J's " + own.output(x, false));
        }
    }
}
