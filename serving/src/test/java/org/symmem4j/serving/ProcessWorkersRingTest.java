package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
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
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedNetworks;
import org.symmem4j.serving.weights.SharedWeights;

/**
 * The worker-process path with its worker on a thread (a group of 2 ranks in one JVM, the same rings): a worker
 * whose request ring is full makes the router answer OVERLOADED, as a full queue does on the thread path, and the
 * batches the ring took are still answered.
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
        INDArray inputs = Nets.features(3, 12, 8);
        MultiLayerNetwork owner = Nets.owning(Nets.mlp(4));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        RouterOptions options = RouterOptions.defaults().withWorkers(32).withBatching(1, Duration.ZERO)
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
            answers.add(router.predict("m", inputs.getRow(0, true).dup()));
            assertTrue(entered.await(60, TimeUnit.SECONDS), "the worker took the first batch");
            ServingException overloaded = null;
            for (int i = 1; i < 400 && overloaded == null; i++) {
                CompletableFuture<Prediction> f = router.predict("m", inputs.getRow(i % 12, true).dup());
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
                    INDArray x = inputs.getRow(i % 12, true).dup();
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
}
