package org.symmem4j.examples;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.ModelRouter;
import org.symmem4j.serving.RouterOptions;
import org.symmem4j.serving.ServingMeters;
import org.symmem4j.serving.http.Npy;
import org.symmem4j.serving.http.ServingHttpServer;
import org.symmem4j.serving.weights.SharedWeights;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Serving a DL4J model over HTTP from shared weights, with a hot swap and a rollback while a client keeps asking:
 * trains an MLP briefly on generated data (version 1), serves it on Javalin, trains it further and deploys version 2
 * under load, rolls back to version 1, and prints how many answers each version gave and how accurate they were,
 * plus the router's meters. No request fails across the swaps.
 *
 * <pre>
 *   bin/serving-example [--port P] [--seconds S] [--serve]
 *   curl -s -XPOST -H 'Content-Type: application/json' -d '{"instances": [[0.1, ...16 numbers]]}' \
 *        http://127.0.0.1:8501/v1/models/blobs:predict
 * </pre>
 */
public final class ServingExample {

    private ServingExample() {
    }

    @Command(name = "ServingExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Serve a DL4J MLP over HTTP from shared weights; hot-swap to a"
            + " better-trained version and roll back while a client keeps asking.")
    static final class Flags {
        @Option(names = "--port", paramLabel = "P", description = "HTTP port on 127.0.0.1 (0: any free one)")
        int port = 8501;
        @Option(names = "--seconds", paramLabel = "S", description = "seconds of client load per phase")
        double seconds = 2;
        @Option(names = "--serve", description = "keep serving after the demo until Ctrl-C (try curl)")
        boolean serve;
    }

    static final int FEATURES = 16;
    static final int CLASSES = 4;

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args);
        INDArray teacher = Nd4j.rand(Nd4j.getRandomFactory().getNewRandomInstance(3), FEATURES, CLASSES).subi(0.5);
        DataSet train = data(teacher, 2048, 1);
        DataSet test = data(teacher, 512, 2);
        MultiLayerNetwork net = new MultiLayerNetwork(conf());
        net.init();
        net.fit(train); // one step: version 1 is barely trained
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (SharedWeights weights = SharedWeights.create(InJvmWorld.create(1).join(0), 0, 16L << 20, 8);
             ModelRouter router = new ModelRouter(weights, RouterOptions.defaults().withWorkers(2), registry);
             ServingHttpServer server = ServingHttpServer.start(router,
                     ServingHttpServer.Options.defaults().withPort(f.port))) {
            router.deploy("blobs", net, FEATURES);
            String url = "http://127.0.0.1:" + server.port() + "/v1/models/blobs:predict";
            System.out.println("serving model 'blobs' version 1 at " + url);

            Map<Long, long[]> perVersion = new TreeMap<>(); // version -> {answers, correct}
            long[] failed = {0};
            AtomicBoolean stop = new AtomicBoolean();
            Thread client = Thread.ofPlatform().start(() -> load(url, test, perVersion, failed, stop));

            sleep(f.seconds);
            for (int i = 0; i < 30; i++) {
                net.fit(train);
            }
            long v2 = router.deploy("blobs", net, FEATURES);
            System.out.println("deployed version " + v2 + " while requests flow");
            sleep(f.seconds);
            awaitAnswers(perVersion, v2, 64);
            long back = router.rollback("blobs");
            System.out.println("rolled back to version " + back);
            sleep(f.seconds);
            awaitAnswers(perVersion, back, answers(perVersion, back) + 64);
            stop.set(true);
            client.join();

            synchronized (perVersion) {
                perVersion.forEach((v, c) -> System.out.printf(Locale.ROOT, "version %d: %d answers, accuracy %.3f%n",
                        v, c[0], c[1] / (double) c[0]));
            }
            System.out.println("failed requests: " + failed[0]);
            var batches = registry.find(ServingMeters.BATCH_SIZE.meterName()).summary();
            var latency = registry.find(ServingMeters.REQUEST_DURATION.meterName()).timer();
            System.out.printf(Locale.ROOT, "router: %d batches, mean %.1f rows; mean latency %.2f ms%n", batches.count(),
                    batches.mean(), latency.mean(java.util.concurrent.TimeUnit.MILLISECONDS));
            if (failed[0] != 0) {
                throw new IllegalStateException(failed[0] + " requests failed across the swaps");
            }
            if (f.serve) {
                System.out.println("serving until Ctrl-C: POST JSON {\"instances\": [[" + FEATURES + " numbers]]} or a"
                        + " .npy array (Content-Type: " + Npy.MEDIA_TYPE + ") to " + url);
                Thread.currentThread().join();
            }
        }
    }

    /** Four clients, each posting 8 test rows as .npy again and again, tallying answers per version. */
    private static void load(String url, DataSet test, Map<Long, long[]> perVersion, long[] failed, AtomicBoolean stop) {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        java.util.concurrent.atomic.AtomicInteger next = new java.util.concurrent.atomic.AtomicInteger();
        Thread[] clients = new Thread[4];
        for (int c = 0; c < clients.length; c++) {
            clients[c] = Thread.ofPlatform().start(() -> {
                while (!stop.get()) {
                    int from = (next.getAndAdd(8) % (test.numExamples() - 8));
                    INDArray x = test.getFeatures().get(org.nd4j.linalg.indexing.NDArrayIndex.interval(from, from + 8),
                            org.nd4j.linalg.indexing.NDArrayIndex.all());
                    INDArray labels = test.getLabels().get(org.nd4j.linalg.indexing.NDArrayIndex.interval(from, from + 8),
                            org.nd4j.linalg.indexing.NDArrayIndex.all());
                    try {
                        HttpResponse<byte[]> r = http.send(HttpRequest.newBuilder(URI.create(url))
                                .header("Content-Type", Npy.MEDIA_TYPE).timeout(Duration.ofSeconds(30))
                                .POST(HttpRequest.BodyPublishers.ofByteArray(Npy.write(x))).build(),
                                HttpResponse.BodyHandlers.ofByteArray());
                        if (r.statusCode() != 200) {
                            throw new IllegalStateException("HTTP " + r.statusCode() + ": " + new String(r.body()));
                        }
                        long version = Long.parseLong(r.headers().firstValue("X-Model-Version").orElseThrow());
                        INDArray out = Npy.read(r.body());
                        long correct = 0;
                        for (int i = 0; i < 8; i++) {
                            correct += out.getRow(i).argMax().getInt(0) == labels.getRow(i).argMax().getInt(0) ? 1 : 0;
                        }
                        synchronized (perVersion) {
                            long[] c2 = perVersion.computeIfAbsent(version, v -> new long[2]);
                            c2[0] += 8;
                            c2[1] += correct;
                        }
                    } catch (Exception e) {
                        synchronized (perVersion) {
                            failed[0]++;
                        }
                        System.err.println("request failed: " + e.getMessage());
                    }
                }
            });
        }
        for (Thread t : clients) {
            try {
                t.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static long answers(Map<Long, long[]> perVersion, long version) {
        synchronized (perVersion) {
            long[] c = perVersion.get(version);
            return c == null ? 0 : c[0];
        }
    }

    /** Waits (at most a minute: a loaded machine answers slowly) until {@code version} has given {@code rows} answers. */
    private static void awaitAnswers(Map<Long, long[]> perVersion, long version, long rows) throws InterruptedException {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (answers(perVersion, version) < rows && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
    }

    static MultiLayerConfiguration conf() {
        return new NeuralNetConfiguration.Builder().seed(7).updater(new Adam(0.01)).list()
                .layer(new DenseLayer.Builder().nIn(FEATURES).nOut(32).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(32).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .build();
    }

    /** Rows of random features labelled by the class a fixed random linear map scores highest. */
    static DataSet data(INDArray teacher, int rows, long seed) {
        INDArray x = Nd4j.rand(Nd4j.getRandomFactory().getNewRandomInstance(seed), rows, FEATURES).subi(0.5);
        INDArray scores = x.mmul(teacher);
        INDArray labels = Nd4j.zeros(rows, CLASSES);
        for (int i = 0; i < rows; i++) {
            labels.putScalar(i, scores.getRow(i).argMax().getInt(0), 1.0);
        }
        return new DataSet(x, labels);
    }

    private static void sleep(double seconds) throws InterruptedException {
        Thread.sleep((long) (seconds * 1000));
    }
}
