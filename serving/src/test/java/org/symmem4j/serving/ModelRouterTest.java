package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedNetworks;
import org.symmem4j.serving.weights.SharedWeights;

/** The router: batching, one whole version per answer under repeated hot swaps, back-pressure, refusals, release. */
class ModelRouterTest {

    static SharedWeights weights() {
        return SharedWeights.create(InJvmWorld.create(1).join(0), 0, 4 << 20, 32);
    }

    /** Inputs every client draws from, and each version's reference outputs for them (one row at a time). */
    static final int INPUTS = 12;

    static INDArray[] references(long seed, INDArray inputs) {
        MultiLayerNetwork own = Nets.owning(Nets.mlp(seed));
        INDArray[] rows = new INDArray[INPUTS];
        for (int i = 0; i < INPUTS; i++) {
            rows[i] = own.output(inputs.getRow(i, true));
        }
        return rows;
    }

    @Test
    void repeatedHotSwapsAndRollbacksUnderLoadAnswerEveryRequestWithOneWholeVersion() throws Exception {
        INDArray inputs = Nets.features(7, INPUTS, 8);
        Map<Long, INDArray[]> expected = new ConcurrentHashMap<>();
        Map<Long, Long> seedOf = new ConcurrentHashMap<>();
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        RouterOptions options = RouterOptions.defaults().withWorkers(3).withBatching(16, Duration.ofMillis(1))
                .withQueueCapacity(1024).withRequestTimeout(Duration.ofSeconds(60));
        try (SharedWeights weights = weights(); ModelRouter router = new ModelRouter(weights, options, registry)) {
            long v1 = router.deploy("mlp", Nets.owning(Nets.mlp(100)), 8);
            seedOf.put(v1, 100L);
            expected.put(v1, references(100, inputs));
            AtomicBoolean swapping = new AtomicBoolean(true);
            AtomicInteger answered = new AtomicInteger();
            List<String> failures = java.util.Collections.synchronizedList(new ArrayList<>());
            Map<Long, AtomicInteger> perVersion = new ConcurrentHashMap<>();
            List<Thread> clients = new ArrayList<>();
            for (int c = 0; c < 4; c++) {
                int client = c;
                clients.add(Thread.ofPlatform().start(() -> {
                    Random random = new Random(client);
                    while (swapping.get() || answered.get() < 400) {
                        int rows = 1 + random.nextInt(3);
                        int[] picks = random.ints(rows, 0, INPUTS).toArray();
                        INDArray features = Nd4j.create(DataType.FLOAT, rows, 8);
                        for (int r = 0; r < rows; r++) {
                            features.putRow(r, inputs.getRow(picks[r]));
                        }
                        try {
                            Prediction p = router.predict("mlp", features).get();
                            INDArray[] ref = expected.get(p.version());
                            if (ref == null) {
                                failures.add("answer names version=" + p.version() + ", never deployed");
                                continue;
                            }
                            for (int r = 0; r < rows; r++) {
                                INDArray got = p.output().getRow(r, true);
                                if (!got.equalsWithEps(ref[picks[r]], 1e-5)) {
                                    failures.add("version=" + p.version() + " row " + r + " got " + got + " expected "
                                            + ref[picks[r]]);
                                }
                            }
                            perVersion.computeIfAbsent(p.version(), v -> new AtomicInteger()).incrementAndGet();
                            answered.incrementAndGet();
                        } catch (Exception e) {
                            failures.add("request failed: " + e);
                        }
                    }
                }));
            }
            int deploys = 1;
            Random random = new Random(42);
            for (int i = 0; i < 24; i++) {
                if (i % 5 == 4) {
                    router.rollback("mlp");
                } else {
                    long seed = 100 + i + 1;
                    INDArray[] ref = references(seed, inputs);
                    MultiLayerNetwork next = Nets.owning(Nets.mlp(seed));
                    // the reference must exist before any answer can name the version: versions count up from 1
                    expected.put(deploys + 1L, ref);
                    long version = router.deploy("mlp", ModelSpec.of(Nets.mlp(seed), 8), next.params().dup());
                    assertEquals(deploys + 1L, version);
                    seedOf.put(version, seed);
                    deploys++;
                }
                Thread.sleep(random.nextInt(20));
            }
            swapping.set(false);
            for (Thread t : clients) {
                t.join();
            }
            assertEquals(List.of(), failures.subList(0, Math.min(5, failures.size())), failures.size() + " failures");
            assertTrue(perVersion.size() >= 2, "answers came from more than one version: " + perVersion);
            // every retired version was freed once its readers left: all but the current one and the one kept
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (router.freedVersions() < deploys - 2 && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            assertEquals(deploys - 2, router.freedVersions());
            assertEquals(2, weights.publishedVersions());
            // the router counts an answer right after completing it: a client can see the answer first
            var okCounter = registry.find(ServingMeters.REQUESTS.meterName()).tag("outcome", "ok").counter();
            deadline = System.nanoTime() + 10_000_000_000L;
            while ((long) okCounter.count() < answered.get() && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            assertEquals(answered.get(), (long) okCounter.count());
        }
    }

    @Test
    void batchesJoinConcurrentRequestsAndSplitTheAnswersBack() throws Exception {
        INDArray inputs = Nets.features(3, INPUTS, 8);
        INDArray[] ref = references(5, inputs);
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(64, Duration.ofMillis(200));
        try (SharedWeights weights = weights(); ModelRouter router = new ModelRouter(weights, options, registry)) {
            router.deploy("m", Nets.owning(Nets.mlp(5)), 8);
            List<CompletableFuture<Prediction>> answers = new ArrayList<>();
            for (int i = 0; i < INPUTS; i++) {
                answers.add(router.predict("m", inputs.getRow(i, true).dup()));
            }
            for (int i = 0; i < INPUTS; i++) {
                Prediction p = answers.get(i).get();
                assertEquals(1, p.version());
                assertTrue(p.output().equalsWithEps(ref[i], 1e-5), "row " + i);
            }
            var batch = registry.find(ServingMeters.BATCH_SIZE.meterName()).tag("model", "m").summary();
            assertEquals(INPUTS, (long) batch.totalAmount(), "every row ran in exactly one batch");
            assertTrue(batch.count() < INPUTS, "requests queued together were batched: batches=" + batch.count());
            assertNotNull(registry.find(ServingMeters.REQUEST_DURATION.meterName()).tag("model", "m").timer());
        }
    }

    /** A network over shared weights that records batch sizes and waits at a gate before computing. */
    static ModelSpec gated(CountDownLatch gate, List<Long> entered) {
        return ModelSpec.of(params -> {
            MultiLayerNetwork net = SharedNetworks.multiLayer(Nets.mlp(1), params);
            return features -> {
                entered.add(features.size(0));
                try {
                    if (!gate.await(60, java.util.concurrent.TimeUnit.SECONDS)) {
                        throw new IllegalStateException("gate never opened");
                    }
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
                return net.output(features);
            };
        }, DataType.FLOAT, 8);
    }

    @Test
    void requestsThatQueueWhileTheWorkerIsBusyLeaveAsOneBatchWithoutAnyWait() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        List<Long> entered = java.util.Collections.synchronizedList(new ArrayList<>());
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(32, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (SharedWeights weights = weights(); ModelRouter router = new ModelRouter(weights, options, registry)) {
            router.deploy("m", gated(gate, entered), Nets.owning(Nets.mlp(1)).params());
            INDArray inputs = Nets.features(3, 6, 8);
            INDArray[] ref = new INDArray[6];
            MultiLayerNetwork own = Nets.owning(Nets.mlp(1));
            for (int i = 0; i < 6; i++) {
                ref[i] = own.output(inputs.getRow(i, true));
            }
            List<CompletableFuture<Prediction>> answers = new ArrayList<>();
            answers.add(router.predict("m", inputs.getRow(0, true).dup()));
            awaitSize(entered, 1); // the only worker is inside the network with the first request
            for (int i = 1; i < 6; i++) {
                answers.add(router.predict("m", inputs.getRow(i, true).dup()));
            }
            gate.countDown();
            for (int i = 0; i < 6; i++) {
                assertTrue(answers.get(i).get().output().equalsWithEps(ref[i], 1e-5), "row " + i);
            }
            assertEquals(List.of(1L, 5L), entered, "the five that queued meanwhile ran as one batch");
            var batch = registry.find(ServingMeters.BATCH_SIZE.meterName()).tag("model", "m").summary();
            assertEquals(2, batch.count());
        }
    }

    @Test
    void aSecondWorkerRunsTheNextBatchWhileTheFirstIsStillRunning() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        List<Long> entered = java.util.Collections.synchronizedList(new ArrayList<>());
        RouterOptions options = RouterOptions.defaults().withWorkers(2).withBatching(32, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        try (SharedWeights weights = weights(); ModelRouter router = new ModelRouter(weights, options, null)) {
            router.deploy("m", gated(gate, entered), Nets.owning(Nets.mlp(1)).params());
            CompletableFuture<Prediction> first = router.predict("m", Nets.features(1, 2, 8));
            awaitSize(entered, 1);
            CompletableFuture<Prediction> second = router.predict("m", Nets.features(2, 3, 8));
            awaitSize(entered, 2); // fails (times out) if the model's next batch waits for the running one
            assertEquals(List.of(2L, 3L), entered);
            gate.countDown();
            assertEquals(2, first.get().output().size(0));
            assertEquals(3, second.get().output().size(0));
        }
    }

    private static void awaitSize(List<?> list, int size) throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (list.size() < size) {
            if (System.nanoTime() > deadline) {
                fail("expected " + size + " batches inside the network within 30 s, found " + list.size() + ": "
                        + list);
            }
            Thread.sleep(2);
        }
    }

    @Test
    void aTimedOutRequestIsCountedOnceAsATimeoutBeforeItsCallerSeesItAndTheLateAnswerIsDropped() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        List<Long> entered = java.util.Collections.synchronizedList(new ArrayList<>());
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(1, Duration.ZERO)
                .withRequestTimeout(Duration.ofMillis(200));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (SharedWeights weights = weights()) {
            ModelRouter router = new ModelRouter(weights, options, registry);
            try {
                router.deploy("m", gated(gate, entered), Nets.owning(Nets.mlp(1)).params());
                CompletableFuture<Prediction> running = router.predict("m", Nets.features(1, 1, 8));
                awaitSize(entered, 1); // the only worker waits at the gate with it
                CompletableFuture<Prediction> queued = router.predict("m", Nets.features(2, 1, 8));
                for (CompletableFuture<Prediction> f : List.of(running, queued)) {
                    ServingException e = (ServingException) assertThrows(ExecutionException.class, f::get).getCause();
                    assertEquals(Kind.TIMEOUT, e.kind());
                    assertTrue(e.getMessage().contains("no answer within requestTimeout=PT0.2S"), e.getMessage());
                }
                assertEquals(2.0, registry.find(ServingMeters.REQUESTS.meterName()).tag("outcome", "timeout").counter()
                        .count(), "counted before the callers saw their failures");
            } finally {
                gate.countDown();
                router.close(); // the late answer (and the queued request's batch or refusal) settles nothing
            }
            assertNull(registry.find(ServingMeters.REQUESTS.meterName()).tag("outcome", "ok").counter(),
                    "a late answer is not counted");
            assertEquals(2.0, registry.find(ServingMeters.REQUESTS.meterName()).counter().count(),
                    "each request counted once");
        }
    }

    @Test
    void aFullQueueRefusesAtOnceAsOverloadedAndTheAcceptedRequestsAreStillAnswered() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        ModelSpec slow = ModelSpec.of(params -> {
            MultiLayerNetwork net = SharedNetworks.multiLayer(Nets.mlp(1), params);
            return features -> {
                try {
                    gate.await();
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
                return net.output(features);
            };
        }, DataType.FLOAT, 8);
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(1, Duration.ZERO)
                .withQueueCapacity(4).withRequestTimeout(Duration.ofSeconds(60));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (SharedWeights weights = weights(); ModelRouter router = new ModelRouter(weights, options, registry)) {
            router.deploy("slow", slow, Nets.owning(Nets.mlp(1)).params());
            List<CompletableFuture<Prediction>> accepted = new ArrayList<>();
            ServingException refused = null;
            for (int i = 0; i < 100 && refused == null; i++) {
                CompletableFuture<Prediction> f = router.predict("slow", Nets.features(i, 1, 8));
                if (f.isCompletedExceptionally()) {
                    ExecutionException e = assertThrows(ExecutionException.class, f::get);
                    refused = (ServingException) e.getCause();
                } else {
                    accepted.add(f);
                }
            }
            assertNotNull(refused, "a blocked worker, two batches in flight and a queue of 4 must refuse within 100");
            assertEquals(Kind.OVERLOADED, refused.kind());
            assertTrue(refused.getMessage().contains("capacity=4"), refused.getMessage());
            assertTrue(accepted.size() <= 4 + 3, "accepted=" + accepted.size());
            gate.countDown();
            for (CompletableFuture<Prediction> f : accepted) {
                assertEquals(1, f.get().version());
            }
            assertEquals(1.0, registry.find(ServingMeters.REQUESTS.meterName()).tag("outcome", "overloaded").counter()
                    .count());
        }
    }

    @Test
    void unknownModelsVersionsAndWrongShapesAreRefusedClearly() {
        try (SharedWeights weights = weights();
             ModelRouter router = new ModelRouter(weights, RouterOptions.defaults().withBatching(4, Duration.ZERO), null)) {
            router.deploy("m", Nets.owning(Nets.mlp(1)), 8);
            assertEquals(Kind.UNKNOWN_MODEL, refusal(router.predict("nope", Nets.features(1, 1, 8))).kind());
            ServingException v = refusal(router.predict("m", 7, Nets.features(1, 1, 8)));
            assertEquals(Kind.UNKNOWN_MODEL, v.kind());
            assertTrue(v.getMessage().contains("version=7 is not served (served: [1]; fix: ask for one of those"), v.getMessage());
            ServingException shape = refusal(router.predict("m", Nets.features(1, 2, 9)));
            assertEquals(Kind.BAD_INPUT, shape.kind());
            assertTrue(shape.getMessage().contains("shape=[2, 9] expected [rows, 8]"), shape.getMessage());
            ServingException rows = refusal(router.predict("m", Nets.features(1, 5, 8)));
            assertTrue(rows.getMessage().contains("rows=5 expected at most maxBatch=4 (fix: split it into requests of at most 4 rows"), rows.getMessage());
            IllegalArgumentException type = assertThrows(IllegalArgumentException.class, () -> router.deploy("m",
                    ModelSpec.of(Nets.mlp(1), 8), Nd4j.zeros(DataType.DOUBLE, 1, 212)));
            assertTrue(type.getMessage().contains("dataType=DOUBLE expected FLOAT"), type.getMessage());
            assertThrows(IllegalArgumentException.class, () -> router.deploy("m", ModelSpec.of(Nets.cnn(1), 1, 8, 8),
                    Nd4j.zeros(DataType.FLOAT, 1, 212)));
            assertEquals(1, router.currentVersion("m"), "a failed deploy serves nothing new");
            assertThrows(IllegalStateException.class, () -> router.rollback("m"));
        }
    }

    @Test
    void aRetiredVersionIsFreedWhenItsLastReaderLeaves() {
        try (SharedWeights weights = weights(); ModelRouter router = new ModelRouter(weights, RouterOptions.defaults(),
                null)) {
            router.deploy("m", Nets.owning(Nets.mlp(1)), 8);
            ModelRouter.Lease reader = router.lease("m", 1);
            router.deploy("m", Nets.owning(Nets.mlp(2)), 8);
            router.deploy("m", Nets.owning(Nets.mlp(3)), 8); // retires version 1 (2 is kept for rollback)
            assertEquals(List.of(3L, 2L), router.servedVersions("m"));
            assertNotNull(weights.open("m", 1), "version 1 is still read");
            assertEquals(0, router.freedVersions());
            reader.close();
            assertNull(weights.open("m", 1), "its last reader left: freed");
            assertEquals(1, router.freedVersions());
            assertEquals(2, router.rollback("m"));
            assertEquals(3, router.rollback("m"), "a second rollback rolls forward");
        }
    }

    private static ServingException refusal(CompletableFuture<Prediction> f) {
        try {
            f.get();
        } catch (ExecutionException e) {
            return (ServingException) e.getCause();
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
        return fail("expected a refusal, got " + f.join());
    }
}
