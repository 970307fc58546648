package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.BackoffIdleStrategy.Phase;
import org.symmem4j.parallel.sync.IdleStrategy;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedNetworks;
import org.symmem4j.serving.weights.SharedWeights;

/**
 * The worker-process path with its workers on threads (a group of ranks in one JVM, the same rings): a worker
 * whose request ring is full makes the router answer OVERLOADED, as a full queue does on the thread path, and the
 * batches the ring took are still answered; a version's configuration travels once per worker through hot swap,
 * rollback and undeploy.
 */
class ProcessWorkersRingTest {

    @Test
    void aFullRequestRingIsRefusedAsOverloadedAndTheBatchesItTookAreAnswered() throws Exception {
        InJvmWorld world = InJvmWorld.create(2);
        CountDownLatch gate = new CountDownLatch(1);
        CountDownLatch entered = new CountDownLatch(1);
        AtomicLong served = new AtomicLong();
        int ring = 1 << 16;
        Thread worker = Thread.ofPlatform().start(() -> {
            Group g = world.join(1);
            try (SharedWeights weights = SharedWeights.create(g, 0, 1 << 20, 8)) {
                served.set(WorkerProcess.serve(g, weights, 0, ring, (model, version, rows) -> {
                    entered.countDown();
                    try {
                        gate.await(60, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                }));
            }
        });
        Group g = world.join(0);
        INDArray inputs = Nets.features(3, 64, 8);
        MultiLayerNetwork owner = Nets.owning(Nets.mlp(4));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        // requests of 48 rows (1.6 KB on the ring) and 64 router threads: more bytes in flight than the ring holds
        RouterOptions options = RouterOptions.defaults().withWorkers(64).withBatching(48, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        try (SharedWeights weights = SharedWeights.create(g, 0, 1 << 20, 8);
             ProcessWorkers workers = ProcessWorkers.create(g, ring);
             ModelRouter router = new ModelRouter(weights, options, registry, workers)) {
            IllegalArgumentException custom = assertThrows(IllegalArgumentException.class, () -> router.deploy("c",
                    ModelSpec.of(p -> SharedNetworks.multiLayer(Nets.mlp(4), p)::output, DataType.FLOAT, 8),
                    owner.params()));
            assertTrue(custom.getMessage().contains("cannot run in worker processes"), custom.getMessage());
            router.deploy("m", owner, 8);
            List<CompletableFuture<Prediction>> answers = new ArrayList<>();
            answers.add(router.predict("m", rows(inputs, 0, 48)));
            assertTrue(entered.await(60, TimeUnit.SECONDS), "the worker took the first batch");
            ServingException overloaded = null;
            for (int i = 1; i < 400 && overloaded == null; i++) {
                CompletableFuture<Prediction> f = router.predict("m", rows(inputs, i % 16, 48));
                answers.add(f);
                for (CompletableFuture<Prediction> a : answers) {
                    if (a.isCompletedExceptionally()) {
                        ExecutionException e = assertThrows(ExecutionException.class, a::get);
                        overloaded = (ServingException) e.getCause();
                        break;
                    }
                }
                Thread.sleep(1);
            }
            assertTrue(overloaded != null, "a blocked worker's ring of " + ring + " bytes must fill within 400 batches");
            assertEquals(Kind.OVERLOADED, overloaded.kind(), overloaded.getMessage());
            assertTrue(overloaded.getMessage().contains("the request ring of every live worker process (ranks [1],"
                    + " ringCapacity=65536) is full"), overloaded.getMessage());
            gate.countDown();
            int answered = 0;
            for (int i = 0; i < answers.size(); i++) {
                try {
                    Prediction p = answers.get(i).get(60, TimeUnit.SECONDS);
                    INDArray x = rows(inputs, i % 16, 48);
                    assertEquals(owner.output(x), p.output(), "request " + i);
                    answered++;
                } catch (ExecutionException e) {
                    assertEquals(Kind.OVERLOADED, ((ServingException) e.getCause()).kind(), e.getCause().getMessage());
                }
            }
            assertTrue(answered > 1, "the batches the ring took are answered: " + answered);
            assertTrue(registry.find(ServingMeters.REQUESTS.meterName()).tag("outcome", "overloaded").counter()
                    .count() >= 1);
        }
        worker.join(60_000);
        assertTrue(served.get() > 1, "worker ran batches=" + served.get());
    }

    /** Records the phases of a back-off between resets, and whether it parks now (since its last reset). */
    private static final class RecordingIdle implements IdleStrategy {
        final BackoffIdleStrategy backoff = new BackoffIdleStrategy(4, 2, 1_000, 1_000_000);
        final List<Phase> run = new ArrayList<>();
        volatile boolean parking;
        volatile String badRun;
        volatile long resets;
        volatile long parks;

        @Override
        public void idle() {
            Phase phase = backoff.phase();
            run.add(phase);
            if (phase == Phase.PARK) {
                parks++;
                parking = true;
            }
            backoff.idle();
        }

        @Override
        public void reset() {
            int spins = (int) run.stream().filter(p -> p == Phase.SPIN).count();
            int yields = (int) run.stream().filter(p -> p == Phase.YIELD).count();
            // a run is a prefix of SPIN x4, YIELD x2, PARK...
            for (int i = 0; i < run.size(); i++) {
                Phase expected = i < 4 ? Phase.SPIN : i < 6 ? Phase.YIELD : Phase.PARK;
                if (run.get(i) != expected && badRun == null) {
                    badRun = "idle " + i + " was " + run.get(i) + ", expected " + expected + " (spins=" + spins
                            + ", yields=" + yields + ")";
                }
            }
            run.clear();
            parking = false;
            resets++;
            backoff.reset();
        }

        @Override
        public boolean isParking() {
            return backoff.isParking();
        }
    }

    @Test
    void aParkedWorkerAndReplyThreadSeeABatchSentWhileTheyParkAndSpinAgainAfterIt() throws Exception {
        InJvmWorld world = InJvmWorld.create(2);
        int ring = 1 << 16;
        RecordingIdle workerIdle = new RecordingIdle();
        RecordingIdle replyIdle = new RecordingIdle();
        AtomicLong served = new AtomicLong();
        Thread worker = Thread.ofPlatform().start(() -> {
            Group g = world.join(1);
            try (SharedWeights weights = SharedWeights.create(g, 0, 1 << 20, 8)) {
                served.set(WorkerProcess.serve(g, weights, 0, ring, workerIdle, (model, version, rows) -> { }));
            }
        });
        Group g = world.join(0);
        INDArray inputs = Nets.features(5, 16, 8);
        MultiLayerNetwork owner = Nets.owning(Nets.mlp(4));
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withRequestTimeout(Duration.ofSeconds(60));
        try (SharedWeights weights = SharedWeights.create(g, 0, 1 << 20, 8);
             ProcessWorkers workers = ProcessWorkers.create(g, ring, replyIdle);
             ModelRouter router = new ModelRouter(weights, options, new SimpleMeterRegistry(), workers)) {
            router.deploy("m", owner, 8);
            for (int i = 0; i < 3; i++) {
                // nothing flows: both sides back off to parking; nothing unparks them, they must poll again
                awaitTrue(() -> workerIdle.parking, "the idle worker parks");
                awaitTrue(() -> replyIdle.parking, "the idle reply thread parks");
                long workerResets = workerIdle.resets;
                long replyResets = replyIdle.resets;
                INDArray x = rows(inputs, i * 4, 4);
                assertEquals(owner.output(x), router.predict("m", x).get(60, TimeUnit.SECONDS).output(), "batch " + i);
                assertTrue(workerIdle.resets > workerResets, "the batch reset the worker's back-off");
                awaitTrue(() -> replyIdle.resets > replyResets, "the reply reset the reply thread's back-off");
            }
            assertTrue(workerIdle.parks > 0 && replyIdle.parks > 0);
        }
        worker.join(60_000);
        assertEquals(3, served.get(), "batches the worker ran");
        assertEquals(null, workerIdle.badRun, "the worker's phases");
        assertEquals(null, replyIdle.badRun, "the reply thread's phases");
        assertTrue(replyIdle.resets >= 3, "each reply reset the reply thread's back-off: " + replyIdle.resets);
    }

    @Test
    void aVersionsConfigurationTravelsOncePerWorkerThroughSwapRollbackAndUndeploy() throws Exception {
        int ranks = 3;
        InJvmWorld world = InJvmWorld.create(ranks);
        int ring = 1 << 18;
        Set<String> firstBatches = ConcurrentHashMap.newKeySet(); // (worker rank, model@version) that ran a batch
        List<Thread> threads = new ArrayList<>();
        for (int r = 1; r < ranks; r++) {
            int rank = r;
            threads.add(Thread.ofPlatform().start(() -> {
                Group g = world.join(rank);
                try (SharedWeights weights = SharedWeights.create(g, 0, 1 << 20, 8)) {
                    WorkerProcess.serve(g, weights, 0, ring, (model, version, rows) ->
                            firstBatches.add(rank + ":" + model + "@" + version));
                }
            }));
        }
        Group g = world.join(0);
        INDArray inputs = Nets.features(5, 12, 8);
        INDArray images = Nets.features(6, 12, 1, 8, 8);
        MultiLayerNetwork a1 = Nets.owning(Nets.mlp(1));
        MultiLayerNetwork a2 = Nets.owning(Nets.mlp(2));
        MultiLayerNetwork b1 = Nets.owning(Nets.cnn(3));
        RouterOptions options = RouterOptions.defaults().withWorkers(4).withBatching(4, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        try (SharedWeights weights = SharedWeights.create(g, 0, 1 << 20, 8);
             ProcessWorkers workers = ProcessWorkers.create(g, ring);
             ModelRouter router = new ModelRouter(weights, options, null, workers)) {
            router.deploy("a", a1, 8);
            router.deploy("b", b1, 1, 8, 8);
            expectAnswers(router, "a", 1, a1, inputs);
            expectAnswers(router, "b", 1, b1, images);
            router.deploy("a", a2, 8); // hot swap: version 2 is new to every worker
            expectAnswers(router, "a", 2, a2, inputs);
            assertEquals(1, router.rollback("a")); // version 1 again: the workers still hold its configuration
            expectAnswers(router, "a", 1, a1, inputs);
            router.undeploy("b").get(60, TimeUnit.SECONDS);
            router.deploy("b", b1, 1, 8, 8); // version 2 of b (the numbers go on), same network
            expectAnswers(router, "b", 2, b1, images);
            assertEquals(firstBatches.size(), workers.configurationsCarried(),
                    "one configuration per (worker, version) that ran a batch: " + firstBatches);
            assertTrue(firstBatches.size() >= 4, "every version ran: " + firstBatches);
            assertTrue(firstBatches.size() <= 2 * 4, "4 versions on 2 workers: " + firstBatches);
        }
        for (Thread t : threads) {
            t.join(60_000);
        }
    }

    /** Sends 24 one-row requests, 8 at a time (batched), and checks each answer against the owner's network. */
    private static void expectAnswers(ModelRouter router, String model, long version, MultiLayerNetwork owner,
                                      INDArray inputs) throws Exception {
        for (int round = 0; round < 3; round++) {
            List<CompletableFuture<Prediction>> answers = new ArrayList<>();
            for (int i = 0; i < 8; i++) {
                answers.add(router.predict(model, rows(inputs, i + round, 1)));
            }
            for (int i = 0; i < 8; i++) {
                Prediction p = answers.get(i).get(60, TimeUnit.SECONDS);
                assertEquals(version, p.version(), model + " request " + i);
                INDArray expected = owner.output(rows(inputs, i + round, 1));
                assertTrue(expected.equalsWithEps(p.output(), 1e-5), model + " request " + i + ": " + p.output()
                        + " expected " + expected);
            }
        }
    }

    /** {@return rows [from, from + n) of {@code a}, any rank, as a new array} */
    private static void awaitTrue(java.util.function.BooleanSupplier condition, String what)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, what + " within 60 s");
            Thread.sleep(1);
        }
    }

    private static INDArray rows(INDArray a, int from, int n) {
        INDArrayIndex[] at = new INDArrayIndex[a.rank()];
        java.util.Arrays.fill(at, NDArrayIndex.all());
        at[0] = NDArrayIndex.interval(from, from + n);
        return a.get(at).dup();
    }
}
