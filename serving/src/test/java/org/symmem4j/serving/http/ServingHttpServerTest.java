package org.symmem4j.serving.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.shade.jackson.databind.JsonNode;
import org.nd4j.shade.jackson.databind.ObjectMapper;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.ModelRouter;
import org.symmem4j.serving.RouterOptions;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedWeights;

/** The HTTP front through a real client: JSON and .npy predictions, versions, health, and every 4xx. */
class ServingHttpServerTest {

    private static final ObjectMapper JSON = new ObjectMapper();

    private SharedWeights weights;
    private ModelRouter router;
    private ServingHttpServer server;
    private final HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    private MultiLayerNetwork v1;
    private MultiLayerNetwork v2;

    @BeforeEach
    void start() {
        weights = SharedWeights.create(InJvmWorld.create(1).join(0), 0, 1 << 20, 8);
        router = new ModelRouter(weights, RouterOptions.defaults().withBatching(8, Duration.ofMillis(1)), null);
        server = ServingHttpServer.start(router, ServingHttpServer.Options.defaults().withMaxRequestBytes(4096));
        v1 = Nets.owning(Nets.mlp(1));
        v2 = Nets.owning(Nets.mlp(2));
    }

    @AfterEach
    void stop() {
        server.close();
        router.close();
        weights.close();
    }

    private HttpResponse<byte[]> post(String path, String type, byte[] body) throws Exception {
        return client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.port() + path))
                .timeout(Duration.ofSeconds(30)).header("Content-Type", type)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    private HttpResponse<String> get(String path) throws Exception {
        return client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.port() + path))
                .timeout(Duration.ofSeconds(30)).GET().build(), HttpResponse.BodyHandlers.ofString());
    }

    private static String json(INDArray x) {
        StringBuilder s = new StringBuilder("{\"instances\": [");
        for (int r = 0; r < x.rows(); r++) {
            s.append(r == 0 ? "[" : ", [");
            for (int c = 0; c < x.columns(); c++) {
                s.append(c == 0 ? "" : ", ").append(x.getFloat(r, c));
            }
            s.append(']');
        }
        return s.append("]}").toString();
    }

    @Test
    void predictsWithJsonAndNpyForTheCurrentAndAPinnedVersion() throws Exception {
        assertEquals(503, get("/ready").statusCode(), "no model yet");
        assertEquals(200, get("/health").statusCode());
        router.deploy("mlp", v1, 8);
        assertEquals(200, get("/ready").statusCode());
        INDArray x = Nets.features(4, 3, 8);

        HttpResponse<byte[]> r = post("/v1/models/mlp:predict", "application/json", json(x).getBytes());
        assertEquals(200, r.statusCode(), new String(r.body()));
        JsonNode body = JSON.readTree(r.body());
        assertEquals(1, body.get("version").asLong());
        INDArray expected = v1.output(x);
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 4; j++) {
                assertEquals(expected.getDouble(i, j), body.get("predictions").get(i).get(j).asDouble(), 1e-6);
            }
        }

        router.deploy("mlp", v2, 8);
        HttpResponse<byte[]> npy = post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, Npy.write(x));
        assertEquals(200, npy.statusCode(), new String(npy.body()));
        assertEquals("2", npy.headers().firstValue("X-Model-Version").orElseThrow());
        assertTrue(Npy.read(npy.body()).equalsWithEps(v2.output(x), 1e-6));

        HttpResponse<byte[]> pinned = post("/v1/models/mlp/versions/1:predict", Npy.MEDIA_TYPE, Npy.write(x));
        assertEquals(200, pinned.statusCode(), new String(pinned.body()));
        assertEquals("1", pinned.headers().firstValue("X-Model-Version").orElseThrow());
        assertTrue(Npy.read(pinned.body()).equalsWithEps(expected, 1e-6));

        JsonNode models = JSON.readTree(get("/v1/models").body());
        assertEquals("[2,1]", models.get("mlp").toString());
    }

    @Test
    void answersClear4xxForUnknownModelsShapesPayloadsAndSizes() throws Exception {
        router.deploy("mlp", v1, 8);
        assertError(post("/v1/models/nope:predict", "application/json", json(Nets.features(1, 1, 8)).getBytes()),
                404, "UNKNOWN_MODEL", "model 'nope' is not served");
        assertError(post("/v1/models/mlp/versions/9:predict", Npy.MEDIA_TYPE, Npy.write(Nets.features(1, 1, 8))),
                404, "UNKNOWN_MODEL", "version=9 is not served");
        assertError(post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, Npy.write(Nets.features(1, 2, 5))),
                400, "BAD_INPUT", "shape=[2, 5] expected [rows, 8]");
        assertError(post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, "not numpy".getBytes()),
                400, "BAD_INPUT", "does not start with the magic");
        assertError(post("/v1/models/mlp:predict", "application/json", "{\"instances\": [[1, 2], [3]]}".getBytes()),
                400, "BAD_INPUT", "rectangular");
        assertError(post("/v1/models/mlp:predict", "application/json", "{\"rows\": 1}".getBytes()),
                400, "BAD_INPUT", "expected {\"instances\"");
        assertError(post("/v1/models/mlp:predict", "application/json", "{\"instances\": [[1, \"a\"]]}".getBytes()),
                400, "BAD_INPUT", "instances[0][1] is string");
        assertError(post("/v1/models/mlp:predict", "text/plain", "1,2".getBytes()),
                415, "UNSUPPORTED_MEDIA_TYPE", "expected application/json");
        assertError(post("/v1/models/mlp/versions/x:predict", Npy.MEDIA_TYPE, Npy.write(Nets.features(1, 1, 8))),
                400, "BAD_INPUT", "version 'x' expected a positive integer");
        byte[] big = Npy.write(Nd4j.zeros(200, 8));
        assertError(post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, big), 413, "TOO_LARGE", "maxRequestBytes=4096");
        // the server still answers after every refusal
        assertEquals(200, post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, Npy.write(Nets.features(1, 1, 8))).statusCode());
    }

    @Test
    void anUndeployedModelIsA404AndLeavesTheListingUntilItIsDeployedAgain() throws Exception {
        router.deploy("mlp", v1, 8);
        router.deploy("other", v2, 8);
        byte[] x = Npy.write(Nets.features(1, 1, 8));
        assertEquals(200, post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, x).statusCode());
        router.undeploy("mlp").get();
        assertError(post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, x), 404, "UNKNOWN_MODEL",
                "model 'mlp' is not served (models: [other]");
        assertError(post("/v1/models/mlp/versions/1:predict", Npy.MEDIA_TYPE, x), 404, "UNKNOWN_MODEL",
                "model 'mlp' is not served");
        assertEquals("{\"other\":[1]}", get("/v1/models").body());
        assertEquals(200, get("/ready").statusCode(), "the other model is still served");
        router.deploy("mlp", v2, 8);
        HttpResponse<byte[]> again = post("/v1/models/mlp:predict", Npy.MEDIA_TYPE, x);
        assertEquals(200, again.statusCode(), new String(again.body()));
        assertEquals("2", again.headers().firstValue("X-Model-Version").orElseThrow(), "versions number on");
    }

    private static void assertError(HttpResponse<byte[]> r, int status, String kind, String message) throws Exception {
        String text = new String(r.body());
        assertEquals(status, r.statusCode(), text);
        JsonNode body = JSON.readTree(text);
        assertEquals(kind, body.get("error").asText(), text);
        assertTrue(body.get("message").asText().contains(message), text);
    }

    @Test
    void npyRoundTripsAndRefusesWhatItCannotRead() {
        INDArray x = Nets.features(9, 2, 3);
        assertTrue(Npy.read(Npy.write(x)).equals(x));
        byte[] good = Npy.write(x);
        byte[] truncated = java.util.Arrays.copyOf(good, good.length - 4);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Npy.read(truncated));
        assertTrue(e.getMessage().contains("expected 24"), e.getMessage());
        byte[] ints = new String(good, java.nio.charset.StandardCharsets.ISO_8859_1).replace("<f4", "<i4")
                .getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
        e = assertThrows(IllegalArgumentException.class, () -> Npy.read(ints));
        assertTrue(e.getMessage().contains("descr='<i4' expected '<f4' or '<f8'"), e.getMessage());
    }
}
