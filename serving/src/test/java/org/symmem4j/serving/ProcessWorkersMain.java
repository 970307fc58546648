package org.symmem4j.serving;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.serving.weights.Nets;
import org.symmem4j.serving.weights.SharedWeights;

/**
 * One rank of {@link ProcessWorkersTest}. Rank 0 is the router and owns the weights; ranks 1 and 2 are worker
 * processes ({@link WorkerProcess#serve}). Rank 0 checks, in order:
 * <ol>
 *   <li>requests sent one at a time (each its own batch) are answered bitwise as the owner's own network answers the
 *       same features, and both workers answered some;</li>
 *   <li>under 3 concurrent clients, 4 deploys and 2 rollbacks: every answer is its named version's output, none
 *       fails, every retired version is freed (its readers in the workers gone);</li>
 *   <li>rank 2 kills itself (SIGKILL) when it takes a batch after the file {@code args[0]} exists: the requests of
 *       that batch fail as FAILED naming rank 2, no other request fails, and the router goes on with rank 1 alone,
 *       bitwise.</li>
 * </ol>
 */
public final class ProcessWorkersMain {

    private static final int RING = 1 << 20;
    private static final int INPUTS = 12;

    private ProcessWorkersMain() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            ProcessGroup group = ProcessGroup.fromEnvironment();
            Path killFile = Path.of(args[0]);
            try (SharedWeights weights = SharedWeights.create(group, 0, 4 << 20, 16)) {
                if (group.rank() == 0) {
                    router(group, weights, killFile);
                } else {
                    long batches = WorkerProcess.serve(group, weights, 0, RING, (model, version, rows) -> {
                        if (group.rank() == 2 && Files.exists(killFile)) {
                            System.out.println("rank 2 took a batch of rows=" + rows + " after the kill file: kill -9");
                            System.out.flush();
                            throw WorkerProcesses.killSelf();
                        }
                    });
                    if (batches == 0) {
                        throw new AssertionError("worker rank " + group.rank() + " ran no batch");
                    }
                    System.out.println("worker rank " + group.rank() + " ran batches=" + batches);
                }
            }
            group.close();
            return "SERVING OK rank=" + group.rank();
        });
    }

    private static void router(ProcessGroup group, SharedWeights weights, Path killFile) throws Exception {
        INDArray inputs = Nets.features(7, INPUTS, 8);
        Map<Long, MultiLayerNetwork> owners = new ConcurrentHashMap<>();
        Map<Long, INDArray[]> refs = new ConcurrentHashMap<>(); // read by the clients (a network is one thread's)
        RouterOptions options = RouterOptions.defaults().withWorkers(4).withBatching(8, Duration.ZERO)
                .withRequestTimeout(Duration.ofSeconds(60));
        try (ProcessWorkers workers = ProcessWorkers.create(group, RING);
             ModelRouter router = new ModelRouter(weights, options, null, workers)) {
            owners.put(1L, Nets.owning(Nets.mlp(21)));
            refs.put(1L, references(owners.get(1L), inputs));
            check(router.deploy("mlp", owners.get(1L), 8) == 1, "first version is 1");

            // 1. one request at a time: each is a batch of its own, bitwise the owner's network on the same features
            for (int i = 0; i < 24; i++) {
                INDArray x = i % 3 == 0 ? inputs.getRows(i % INPUTS, (i + 1) % INPUTS, (i + 2) % INPUTS)
                        : inputs.getRow(i % INPUTS, true).dup();
                Prediction p = router.predict("mlp", x).get(60, TimeUnit.SECONDS);
                check(p.version() == 1 && bitwise(owners.get(1L).output(x), p.output()),
                        "request " + i + ": answer " + p.output() + " differs from the owner's network's");
            }
            check(workers.batchesAnswered(1) > 0 && workers.batchesAnswered(2) > 0, "both workers answered: rank 1="
                    + workers.batchesAnswered(1) + " rank 2=" + workers.batchesAnswered(2));
            System.out.println("bitwise: rank 1 batches=" + workers.batchesAnswered(1) + ", rank 2 batches="
                    + workers.batchesAnswered(2));

            // 2. hot swaps and rollbacks while 3 clients send
            AtomicBoolean run = new AtomicBoolean(true);
            List<String> failures = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger answered = new AtomicInteger();
            List<Thread> clients = startClients(router, inputs, refs, run, failures, answered, null);
            long version = 1;
            for (int i = 0; i < 6; i++) {
                int target = answered.get() + 30;
                while (answered.get() < target && failures.isEmpty()) {
                    Thread.sleep(1);
                }
                if (i % 3 == 2) {
                    router.rollback("mlp");
                } else {
                    MultiLayerNetwork next = Nets.owning(Nets.mlp(21 + version));
                    owners.put(version + 1, next);
                    refs.put(version + 1, references(next, inputs)); // before any answer can name it
                    version = router.deploy("mlp", next, 8);
                }
            }
            int target = answered.get() + 30;
            while (answered.get() < target && failures.isEmpty()) {
                Thread.sleep(1);
            }
            run.set(false);
            for (Thread t : clients) {
                t.join();
            }
            check(failures.isEmpty(), "hot swap: " + failures.size() + " failures, first: "
                    + failures.subList(0, Math.min(3, failures.size())));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (router.freedVersions() < version - 2 && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            check(router.freedVersions() == version - 2, "freed versions=" + router.freedVersions() + " expected "
                    + (version - 2));
            check(weights.publishedVersions() == 2, "published versions=" + weights.publishedVersions());
            System.out.println("hot swap: answered=" + answered.get() + " versions=" + version + " freed="
                    + router.freedVersions());

            // 3. rank 2 dies with a batch in flight
            Files.createFile(killFile);
            run.set(true);
            answered.set(0);
            List<String> lost = Collections.synchronizedList(new ArrayList<>());
            clients = startClients(router, inputs, refs, run, failures, answered, lost);
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (lost.isEmpty() && failures.isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(2);
            }
            check(!lost.isEmpty(), "no request failed for rank 2's death within 60 s");
            target = answered.get() + 60;
            while (answered.get() < target && failures.isEmpty()) {
                Thread.sleep(1);
            }
            run.set(false);
            for (Thread t : clients) {
                t.join();
            }
            check(failures.isEmpty(), "after the kill: " + failures.size() + " failures, first: "
                    + failures.subList(0, Math.min(3, failures.size())));
            check(workers.liveWorkers().equals(List.of(1)), "live workers " + workers.liveWorkers());
            long current = router.currentVersion("mlp");
            for (int i = 0; i < 6; i++) {
                INDArray x = inputs.getRow(i, true).dup();
                Prediction p = router.predict("mlp", x).get(60, TimeUnit.SECONDS);
                check(p.version() == current && bitwise(owners.get(current).output(x),
                        p.output()), "after the kill, request " + i + " differs from the owner's network's");
            }
            System.out.println("kill: lost=" + lost.size() + " (" + lost.get(0) + "), answered after=" + answered.get());
        }
    }

    /**
     * Clients sending one-row requests until {@code run} is cleared; an answer not equal (within batching's
     * rounding) to its named version's owner network is a failure; with {@code lost} non-null, a FAILED naming
     * rank 2 goes there instead of {@code failures}.
     */
    private static List<Thread> startClients(ModelRouter router, INDArray inputs, Map<Long, INDArray[]> refs,
                                             AtomicBoolean run, List<String> failures, AtomicInteger answered,
                                             List<String> lost) {
        List<Thread> clients = new ArrayList<>();
        for (int c = 0; c < 3; c++) {
            int client = c;
            clients.add(Thread.ofPlatform().start(() -> {
                Random random = new Random(client);
                while (run.get()) {
                    int pick = random.nextInt(INPUTS);
                    INDArray x = inputs.getRow(pick, true).dup();
                    try {
                        Prediction p = router.predict("mlp", x).get();
                        INDArray[] ref = refs.get(p.version());
                        if (ref == null || !ref[pick].equalsWithEps(p.output(), 1e-5)) {
                            failures.add("version=" + p.version() + " input " + pick + " got " + p.output());
                        }
                        answered.incrementAndGet();
                    } catch (ExecutionException e) {
                        if (lost != null && e.getCause() instanceof ServingException se && se.kind() == Kind.FAILED
                                && se.getMessage().contains("worker process rank 2")) {
                            lost.add(se.getMessage());
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
        return clients;
    }

    /** {@return true when both arrays have the same shape, type and bits} */
    private static boolean bitwise(INDArray a, INDArray b) {
        if (!java.util.Arrays.equals(a.shape(), b.shape()) || a.dataType() != b.dataType()) {
            return false;
        }
        INDArray x = a.dup('c');
        INDArray y = b.dup('c');
        long bytes = x.length() * x.dataType().width();
        return java.lang.foreign.MemorySegment.ofAddress(x.data().address()).reinterpret(bytes).mismatch(
                java.lang.foreign.MemorySegment.ofAddress(y.data().address()).reinterpret(bytes)) == -1;
    }

    /** {@return the owner network's output for each input row, one row at a time} */
    private static INDArray[] references(MultiLayerNetwork owner, INDArray inputs) {
        INDArray[] out = new INDArray[INPUTS];
        for (int i = 0; i < INPUTS; i++) {
            out[i] = owner.output(inputs.getRow(i, true).dup());
        }
        return out;
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
