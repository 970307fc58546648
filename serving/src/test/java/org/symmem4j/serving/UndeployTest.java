package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedWeights;

/** Undeploy: new requests refused clearly, admitted ones answered, versions freed after their last reader, redeploy. */
class UndeployTest {

    private static List<Meter> metersOf(SimpleMeterRegistry registry, String model) {
        return registry.getMeters().stream().filter(m -> model.equals(m.getId().getTag("model"))).toList();
    }

    private static ServingException refusal(CompletableFuture<Prediction> f) {
        ExecutionException e = assertThrows(ExecutionException.class, f::get);
        return (ServingException) e.getCause();
    }

    @Test
    void admittedRequestsFinishOnTheirVersionNewOnesAreRefusedAndTheMemoryIsFreedAfterTheLastReader()
            throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        List<Long> entered = Collections.synchronizedList(new ArrayList<>());
        RouterOptions options = RouterOptions.defaults().withWorkers(1).withBatching(1, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        INDArray inputs = Nets.features(3, 4, 8);
        INDArray[] ref = new INDArray[4];
        for (int i = 0; i < 4; i++) {
            ref[i] = Nets.owning(Nets.mlp(1)).output(inputs.getRow(i, true));
        }
        try (SharedWeights weights = ModelRouterTest.weights();
             ModelRouter router = new ModelRouter(weights, options, registry)) {
            router.deploy("other", Nets.owning(Nets.mlp(9)), 8);
            assertEquals(1, router.deploy("m", ModelRouterTest.gated(gate, entered), Nets.owning(Nets.mlp(1)).params()));
            ModelRouter.Lease lease = router.lease("m", 1); // a reader outside the router: keeps version 1 alive
            List<CompletableFuture<Prediction>> admitted = new ArrayList<>();
            admitted.add(router.predict("m", inputs.getRow(0, true).dup()));
            while (entered.isEmpty()) {
                Thread.sleep(2); // the only worker is inside the network with the first request
            }
            for (int i = 1; i < 4; i++) {
                admitted.add(router.predict("m", inputs.getRow(i, true).dup())); // queued behind it
            }
            assertFalse(metersOf(registry, "m").isEmpty());

            CompletableFuture<Void> released = router.undeploy("m");
            ServingException refused = refusal(router.predict("m", inputs.getRow(0, true).dup()));
            assertEquals(Kind.UNKNOWN_MODEL, refused.kind());
            assertTrue(refused.getMessage().contains("model 'm' is not served (models: [other]; fix:"),
                    refused.getMessage());
            ServingException java = assertThrows(ServingException.class, () -> router.currentVersion("m"));
            assertEquals(Kind.UNKNOWN_MODEL, java.kind());
            assertEquals(Kind.UNKNOWN_MODEL, assertThrows(ServingException.class, () -> router.undeploy("m")).kind());
            assertEquals(Set.of("other"), router.models());
            assertEquals(List.of(), metersOf(registry, "m"), "the model's meters are removed at undeploy");
            assertFalse(released.isDone(), "four admitted requests are still waiting");
            assertNotNull(weights.open("m", 1));

            gate.countDown();
            for (int i = 0; i < 4; i++) {
                Prediction p = admitted.get(i).get(30, TimeUnit.SECONDS);
                assertEquals(1, p.version());
                assertEquals(ref[i], p.output(), "row " + i + " answered by version 1 after undeploy");
            }
            released.get(30, TimeUnit.SECONDS);
            assertNotNull(weights.open("m", 1), "the lease still reads version 1");
            assertEquals(0, router.freedVersions());
            lease.close();
            assertNull(weights.open("m", 1), "its last reader left: freed");
            assertEquals(1, router.freedVersions());
            assertEquals(List.of(), metersOf(registry, "m"), "answers after undeploy register no meter again");

            // the same name again: a new model, numbering on (version 1's answers never mix with the new one's)
            assertEquals(2, router.deploy("m", Nets.owning(Nets.mlp(2)), 8));
            Prediction p = router.predict("m", inputs.getRow(0, true).dup()).get(30, TimeUnit.SECONDS);
            assertEquals(2, p.version());
            assertEquals(Nets.owning(Nets.mlp(2)).output(inputs.getRow(0, true)), p.output());
            assertEquals(1.0, registry.find(ServingMeters.REQUESTS.meterName()).tag("model", "m")
                    .tag("outcome", "ok").counter().count(), "the redeployed model counts afresh");
        }
    }

    @Test
    void undeployUnderLoadFailsNoAdmittedRequestRefusesLaterOnesAndRedeployServesAgain() throws Exception {
        INDArray inputs = Nets.features(7, ModelRouterTest.INPUTS, 8);
        INDArray[][] ref = {null, ModelRouterTest.references(1, inputs), ModelRouterTest.references(2, inputs),
            ModelRouterTest.references(3, inputs)};
        RouterOptions options = RouterOptions.defaults().withWorkers(2).withBatching(8, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (SharedWeights weights = ModelRouterTest.weights();
             ModelRouter router = new ModelRouter(weights, options, registry)) {
            router.deploy("m", Nets.owning(Nets.mlp(1)), 8);
            router.deploy("m", Nets.owning(Nets.mlp(2)), 8); // version 1 kept for rollback
            AtomicBoolean run = new AtomicBoolean(true);
            AtomicBoolean undeployed = new AtomicBoolean();
            List<String> failures = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger answered = new AtomicInteger();
            AtomicInteger refusedLater = new AtomicInteger();
            AtomicInteger answeredByV3 = new AtomicInteger();
            List<Thread> clients = new ArrayList<>();
            for (int c = 0; c < 3; c++) {
                int client = c;
                clients.add(Thread.ofPlatform().start(() -> {
                    Random random = new Random(client);
                    while (run.get()) {
                        int pick = random.nextInt(ModelRouterTest.INPUTS);
                        boolean after = undeployed.get(); // read before the request: it must be refused (or v3)
                        try {
                            Prediction p = router.predict("m", inputs.getRow(pick, true).dup()).get();
                            if (!p.output().equalsWithEps(ref[(int) p.version()][pick], 1e-5)) {
                                failures.add("version=" + p.version() + " input " + pick + " got " + p.output());
                            }
                            if (after && p.version() != 3) {
                                failures.add("answered by version=" + p.version() + " after undeploy returned");
                            }
                            if (p.version() == 3) {
                                answeredByV3.incrementAndGet();
                            }
                            answered.incrementAndGet();
                        } catch (ExecutionException e) {
                            if (e.getCause() instanceof ServingException se && se.kind() == Kind.UNKNOWN_MODEL
                                    && se.getMessage().contains("model 'm' is not served")) {
                                refusedLater.incrementAndGet(); // refused at admission: never admitted
                            } else {
                                failures.add("request failed: " + e.getCause());
                            }
                        } catch (InterruptedException e) {
                            failures.add("interrupted");
                            return;
                        }
                    }
                }));
            }
            while (answered.get() < 200) {
                Thread.sleep(1);
            }
            CompletableFuture<Void> released = router.undeploy("m");
            undeployed.set(true);
            released.get(30, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (router.freedVersions() < 2 && System.nanoTime() < deadline) {
                Thread.sleep(2); // a batch that took a version just before the release frees it as it leaves
            }
            assertEquals(2, router.freedVersions(), "both versions freed");
            assertEquals(0, weights.publishedVersions());
            while (refusedLater.get() < 50) {
                Thread.sleep(1);
            }
            assertEquals(3, router.deploy("m", Nets.owning(Nets.mlp(3)), 8));
            while (answeredByV3.get() < 50) {
                Thread.sleep(1);
            }
            run.set(false);
            for (Thread t : clients) {
                t.join();
            }
            assertEquals(List.of(), failures.subList(0, Math.min(5, failures.size())), failures.size() + " failures");
            assertEquals(1, weights.publishedVersions(), "only version 3 is left");
        }
    }
}
