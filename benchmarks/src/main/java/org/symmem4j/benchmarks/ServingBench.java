package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.parallelism.ParallelInference;
import org.deeplearning4j.parallelism.inference.InferenceMode;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.serving.ModelRouter;
import org.symmem4j.serving.ModelSpec;
import org.symmem4j.serving.RouterOptions;
import org.symmem4j.serving.weights.SharedNetworks;
import org.symmem4j.serving.weights.SharedWeights;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Serving DL4J models: symmem4j's {@link ModelRouter} (dynamic batching, workers over one shared copy of the
 * weights) against DL4J's {@code ParallelInference} in {@code BATCHED} mode (worker threads, each with its own copy
 * of the model), same model, same clients, same run, for an MLP (784-256-256-10) and a small CNN (LeNet-like, 1 x 28
 * x 28). Closed-loop clients each send one-row requests for a fixed time; the report gives requests per second and
 * p50/p99 latency per worker count, and each side's best worker count. Then the memory phase: K JVMs serving M
 * MLPs, measured as the sum of their PSS ({@code /proc/self/smaps_rollup}) while all K are alive: with symmem4j,
 * rank 0 publishes the weights once and every JVM's workers run over that one copy; with ParallelInference, every
 * JVM loads every model, and each of its workers holds a copy.
 *
 * <pre>
 *   ServingBench [--clients C] [--seconds S] [--workers 1,2,4] [--max-batch B] [--max-wait-us U]
 *                [--models mlp,cnn] [--reps R] [--processes K] [--served-models M] [--skip-memory]
 * </pre>
 */
public final class ServingBench {

    @Command(name = "ServingBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "The symmem4j router against DL4J's ParallelInference (BATCHED):"
                    + " throughput, p50/p99 latency, and the PSS of K worker JVMs serving M models.")
    static final class Flags {
        @Option(names = "--clients", paramLabel = "C", description = "closed-loop client threads")
        int clients = 16;
        @Option(names = "--seconds", paramLabel = "S", description = "measured seconds per cell (after 1/4 of it as warm-up)")
        double seconds = 10;
        @Option(names = "--workers", split = ",", paramLabel = "W", description = "worker counts tried on both sides")
        List<Integer> workers = List.of(1, 2, 4);
        @Option(names = "--max-batch", paramLabel = "B", description = "most rows per batch (router maxBatch, PI batchLimit)")
        int maxBatch = 32;
        @Option(names = "--max-wait-us", paramLabel = "U", description = "the router's maxWait in microseconds (0: a free"
                + " worker takes what is queued at once, as ParallelInference's BATCHED mode does; it has no timer)")
        long maxWaitMicros = 0;
        @Option(names = "--models", split = ",", paramLabel = "NAME", description = "mlp and/or cnn")
        List<String> models = List.of("mlp", "cnn");
        @Option(names = "--reps", paramLabel = "R", description = "repetitions of each cell, round robin (median reported)")
        int reps = 3;
        @Option(names = "--processes", paramLabel = "K", description = "worker JVMs of the memory phase")
        int processes = 8;
        @Option(names = "--served-models", paramLabel = "M", description = "MLPs each JVM serves in the memory phase")
        int servedModels = 4;
        @Option(names = "--memory-workers", paramLabel = "W", description = "workers per model per JVM in the memory phase")
        int memoryWorkers = 2;
        @Option(names = "--host-path", description = "also run the router with the host path (ModelSpec.ofHostPath:"
                + " the forward pass in Java, not DL4J's), a side of its own beside the router with DL4J's forward")
        boolean hostPath;
        @Option(names = "--skip-memory", description = "skip the memory phase")
        boolean skipMemory;
        @Option(names = "--memory-rank", hidden = true, description = "internal: this JVM is a rank of the memory phase")
        String memoryRank;
        @Option(names = "--pss-dir", hidden = true, description = "internal: where the memory ranks write their PSS")
        Path pssDir;
    }

    private ServingBench() {
    }

    static MultiLayerConfiguration mlp(long seed) {
        return ServingProcessBench.mlp(256, seed);
    }

    static MultiLayerConfiguration cnn(long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(20).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(50).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(500).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX)
                        .build())
                .setInputType(InputType.convolutional(28, 28, 1))
                .build();
    }

    /** One cell's result. */
    record Cell(String model, String side, int workers, double requestsPerSecond, double p50Micros, double p99Micros,
                long failures) {
    }

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args);
        Cli.positive("--clients", f.clients);
        Cli.positive("--reps", f.reps);
        Cli.positive("--processes", f.processes);
        Cli.positive("--served-models", f.servedModels);
        Cli.positive("--max-batch", f.maxBatch);
        if (f.memoryRank != null) {
            ChildJvms.exitAsRank(() -> memoryRank(f));
            return;
        }
        System.out.printf(Locale.ROOT, "# ServingBench%n%nmachine: %d cores; clients=%d seconds=%.1f maxBatch=%d"
                + " maxWait=%dus reps=%d workers=%s%n%n", Runtime.getRuntime().availableProcessors(), f.clients,
                f.seconds, f.maxBatch, f.maxWaitMicros, f.reps, f.workers);
        List<Cell> all = new ArrayList<>();
        for (String model : f.models) {
            MultiLayerConfiguration conf = switch (model) {
                case "mlp" -> mlp(1);
                case "cnn" -> cnn(1);
                default -> throw new IllegalArgumentException("--models entry '" + model + "', expected mlp or cnn"
                        + " (fix: pass e.g. --models mlp,cnn)");
            };
            long[] example = model.equals("mlp") ? new long[] {784} : new long[] {1, 28, 28};
            MultiLayerNetwork net = new MultiLayerNetwork(conf);
            net.init();
            List<List<Cell>> reps = new ArrayList<>();
            for (int w : f.workers) {
                List<Cell> symmem = new ArrayList<>();
                List<Cell> host = new ArrayList<>();
                List<Cell> pi = new ArrayList<>();
                for (int r = 0; r < f.reps; r++) { // round robin: every side sees the same machine state
                    symmem.add(runRouter(f, model, net, example, w, false));
                    if (f.hostPath) {
                        host.add(runRouter(f, model, net, example, w, true));
                    }
                    pi.add(runParallelInference(f, model, net, example, w));
                }
                reps.add(symmem);
                if (f.hostPath) {
                    reps.add(host);
                }
                reps.add(pi);
            }
            System.out.printf("## %s%n%n| side | workers | requests/s (median) | p50 us | p99 us | failed | all reps req/s |%n"
                    + "|---|---|---|---|---|---|---|%n", model);
            for (List<Cell> cells : reps) {
                Cell med = median(cells);
                all.add(med);
                System.out.printf(Locale.ROOT, "| %s | %d | %.0f | %.0f | %.0f | %d | %s |%n", med.side, med.workers,
                        med.requestsPerSecond, med.p50Micros, med.p99Micros, cells.stream().mapToLong(Cell::failures).sum(),
                        cells.stream().map(c -> String.format(Locale.ROOT, "%.0f", c.requestsPerSecond)).toList());
            }
            Cell bestP = best(all, model, "ParallelInference");
            for (String side : f.hostPath ? List.of(ROUTER, HOST_PATH) : List.of(ROUTER)) {
                Cell bestS = best(all, model, side);
                System.out.printf(Locale.ROOT, "%nbest: %s %.0f req/s (workers=%d, p99 %.0f us) vs ParallelInference"
                        + " %.0f req/s (workers=%d, p99 %.0f us): %.2fx%n", side, bestS.requestsPerSecond, bestS.workers,
                        bestS.p99Micros, bestP.requestsPerSecond, bestP.workers, bestP.p99Micros,
                        bestS.requestsPerSecond / bestP.requestsPerSecond);
            }
            System.out.println();
        }
        if (!f.skipMemory) {
            memoryPhase(f, args);
        }
    }

    private static Cell median(List<Cell> cells) {
        List<Cell> sorted = new ArrayList<>(cells);
        sorted.sort((a, b) -> Double.compare(a.requestsPerSecond, b.requestsPerSecond));
        return sorted.get(sorted.size() / 2);
    }

    private static Cell best(List<Cell> cells, String model, String side) {
        return cells.stream().filter(c -> c.model.equals(model) && c.side.equals(side))
                .max((a, b) -> Double.compare(a.requestsPerSecond, b.requestsPerSecond)).orElseThrow();
    }

    /** The router's side with DL4J's forward pass. */
    static final String ROUTER = "symmem4j";
    /** The router's side with the host path ({@code ModelSpec.ofHostPath}). */
    static final String HOST_PATH = "symmem4j host path";

    private static Cell runRouter(Flags f, String model, MultiLayerNetwork net, long[] example, int workers,
                                  boolean hostPath) {
        RouterOptions options = new RouterOptions(workers, f.maxBatch, Duration.ofNanos(f.maxWaitMicros * 1000),
                Math.max(1024, 4 * f.clients), Duration.ofSeconds(60));
        try (SharedWeights weights = SharedWeights.create(InJvmWorld.create(1).join(0), 0,
                2 * net.params().length() * 4 + (1 << 20), 4);
             ModelRouter router = new ModelRouter(weights, options, null)) {
            if (hostPath) {
                router.deploy(model, ModelSpec.ofHostPath(net.getLayerWiseConfigurations(), example), net.params());
            } else {
                router.deploy(model, net, example);
            }
            return closedLoop(f, model, hostPath ? HOST_PATH : ROUTER, workers,
                    x -> router.predict(model, x).join().output());
        }
    }

    private static Cell runParallelInference(Flags f, String model, MultiLayerNetwork net, long[] example, int workers) {
        ParallelInference pi = new ParallelInference.Builder(net).inferenceMode(InferenceMode.BATCHED)
                .batchLimit(f.maxBatch).queueLimit(Math.max(1024, 4 * f.clients)).workers(workers).build();
        try {
            return closedLoop(f, model, "ParallelInference", workers, pi::output);
        } finally {
            pi.shutdown();
        }
    }

    private static Cell closedLoop(Flags f, String model, String side, int workers, Function<INDArray, INDArray> call) {
        long[] example = model.equals("mlp") ? new long[] {1, 784} : new long[] {1, 1, 28, 28};
        return closedLoop(f.clients, f.seconds, example, model, side, workers, call);
    }

    /**
     * {@code clients} closed-loop threads, each sending one request of shape {@code request} at a time through
     * {@code call}, for a quarter of {@code seconds} (warm-up, not counted; at least until every client has had an
     * answer, so that a model's first, slow, requests are never measured) and then {@code seconds} (measured).
     */
    static Cell closedLoop(int clients, double seconds, long[] request, String model, String side, int workers,
                           Function<INDArray, INDArray> call) {
        long[] example = request;
        long warmupNanos = (long) (seconds * 0.25e9);
        long measureNanos = (long) (seconds * 1e9);
        AtomicBoolean stop = new AtomicBoolean();
        List<long[][]> latencies = new ArrayList<>(); // per client, grown as needed (its memory counts in PSS)
        long[] counts = new long[clients];
        long[] failures = new long[clients];
        List<Thread> threads = new ArrayList<>();
        CountDownLatch answered = new CountDownLatch(clients);
        AtomicLong measureFromHolder = new AtomicLong(Long.MAX_VALUE);
        for (int c = 0; c < clients; c++) {
            int client = c;
            long[][] mine = {new long[4096]};
            latencies.add(mine);
            threads.add(Thread.ofPlatform().daemon().start(() -> {
                INDArray x = Nd4j.rand(example);
                boolean hadAnswer = false;
                while (!stop.get()) {
                    long t0 = System.nanoTime();
                    try {
                        call.apply(x);
                    } catch (RuntimeException e) {
                        failures[client]++;
                        continue;
                    }
                    long t1 = System.nanoTime();
                    if (!hadAnswer) {
                        hadAnswer = true;
                        answered.countDown();
                    }
                    if (t0 >= measureFromHolder.get()) {
                        if (counts[client] == mine[0].length) {
                            mine[0] = Arrays.copyOf(mine[0], 2 * mine[0].length);
                        }
                        mine[0][(int) counts[client]++] = t1 - t0;
                    }
                }
            }));
        }
        sleepNanos(warmupNanos);
        try {
            answered.await(120, TimeUnit.SECONDS); // bounded: a side that never answers fails
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        measureFromHolder.set(System.nanoTime());
        sleepNanos(measureNanos);
        stop.set(true);
        // bounded: a request a side never answers (ParallelInference loses one now and then under heavy load: its
        // client waits forever) must not stop the benchmark; such a client counts as one failure
        long joinDeadline = System.nanoTime() + 30_000_000_000L;
        long stuck = 0;
        for (Thread t : threads) {
            try {
                t.join(Duration.ofNanos(Math.max(1_000_000, joinDeadline - System.nanoTime())));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (t.isAlive()) {
                stuck++;
            }
        }
        if (stuck > 0) {
            System.err.printf(Locale.ROOT, "%s %s workers=%d: %d clients still wait for an answer 30 s after the end"
                    + " (counted as failures)%n", model, side, workers, stuck);
        }
        long total = Arrays.stream(counts).sum();
        long[] merged = new long[(int) total];
        int at = 0;
        for (int c = 0; c < clients; c++) {
            System.arraycopy(latencies.get(c)[0], 0, merged, at, (int) counts[c]);
            at += (int) counts[c];
        }
        Arrays.sort(merged);
        double p50 = merged.length == 0 ? Double.NaN : merged[merged.length / 2] / 1e3;
        double p99 = merged.length == 0 ? Double.NaN : merged[Math.min(merged.length - 1, (int) (merged.length * 0.99))] / 1e3;
        Cell cell = new Cell(model, side, workers, total / seconds, p50, p99, Arrays.stream(failures).sum() + stuck);
        System.err.printf(Locale.ROOT, "%s %s workers=%d: %.0f req/s p50=%.0fus p99=%.0fus%n", model, side, workers,
                cell.requestsPerSecond, p50, p99);
        return cell;
    }

    private static void sleepNanos(long nanos) {
        try {
            Thread.sleep(Duration.ofNanos(nanos));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ------------------------------------------------------------------------------------------ memory phase

    private static void memoryPhase(Flags f, String[] args) throws IOException, InterruptedException {
        System.out.printf("## memory: %d worker JVMs serving %d MLPs (784-256-256-10, %d workers per model per JVM)%n%n"
                + "| side | JVMs | sum of PSS MiB | per JVM MiB |%n|---|---|---|---|%n", f.processes, f.servedModels,
                f.memoryWorkers);
        for (String side : List.of("one", "symmem4j", "ParallelInference")) {
            int jvms = side.equals("one") ? 1 : f.processes;
            Path dir = Files.createTempDirectory("symmem4j-serving-pss-");
            try {
                List<String> rankArgs = new ArrayList<>(List.of(args));
                rankArgs.addAll(List.of("--memory-rank", side.equals("one") ? "symmem4j" : side, "--pss-dir",
                        dir.toString()));
                List<String> command = ChildJvms.javaCommand(ChildJvms.childJvmFlags(
                        java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()),
                        ServingBench.class, rankArgs);
                Path secret = ChildJvms.writeSecret(dir.resolve("store.secret"));
                ChildJvms.runRanks(command, jvms, "serving-pss-" + ProcessHandle.current().pid() + "-" + System.nanoTime(),
                        secret, Duration.ofMinutes(10));
                long sumKb = 0;
                for (int r = 0; r < jvms; r++) {
                    sumKb += Long.parseLong(Files.readString(dir.resolve("pss-" + r)).trim());
                }
                System.out.printf(Locale.ROOT, "| %s | %d | %.1f | %.1f |%n", side.equals("one") ? "symmem4j, one JVM"
                        : side, jvms, sumKb / 1024.0, sumKb / 1024.0 / jvms);
            } finally {
                try (var files = Files.list(dir)) {
                    for (Path p : files.toList()) {
                        Files.deleteIfExists(p);
                    }
                }
                Files.deleteIfExists(dir);
            }
        }
        System.out.println();
    }

    /** One JVM of the memory phase: load, serve a little, wait for all, measure PSS, wait for all. */
    private static int memoryRank(Flags f) throws Exception {
        // closed at the end: rank 0 hosts the rendezvous store and must serve it until every rank has left
        try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
            return memoryRank(f, group);
        }
    }

    private static int memoryRank(Flags f, ProcessGroup group) throws Exception {
        INDArray x = Nd4j.rand(32, 784);
        List<Object> keep = new ArrayList<>();
        if (f.memoryRank.equals("symmem4j")) {
            SharedWeights weights = SharedWeights.create(group, 0, (long) f.servedModels * 1_000_000L * 4 + (1 << 20),
                    f.servedModels + 1);
            keep.add(weights);
            if (group.rank() == 0) {
                for (int m = 0; m < f.servedModels; m++) {
                    MultiLayerNetwork net = new MultiLayerNetwork(mlp(m));
                    net.init();
                    weights.publish("m" + m, 1, net.params());
                }
            }
            group.allGatherBytes("published", new byte[0]);
            for (int m = 0; m < f.servedModels; m++) {
                for (int w = 0; w < f.memoryWorkers; w++) {
                    MultiLayerNetwork net = SharedNetworks.multiLayer(mlp(m), weights.open("m" + m, 1));
                    net.output(x);
                    keep.add(net);
                }
            }
        } else {
            for (int m = 0; m < f.servedModels; m++) {
                MultiLayerNetwork net = new MultiLayerNetwork(mlp(m));
                net.init();
                ParallelInference pi = new ParallelInference.Builder(net).inferenceMode(InferenceMode.BATCHED)
                        .batchLimit(32).workers(f.memoryWorkers).build();
                List<CompletableFuture<INDArray>> warm = new ArrayList<>();
                for (int w = 0; w < 4 * f.memoryWorkers; w++) {
                    warm.add(CompletableFuture.supplyAsync(() -> pi.output(x)));
                }
                warm.forEach(CompletableFuture::join);
                keep.add(pi);
            }
        }
        System.gc();
        group.allGatherBytes("loaded", new byte[0]);
        long pss = pssKb();
        Files.writeString(f.pssDir.resolve("pss-" + group.rank()), Long.toString(pss));
        group.allGatherBytes("measured", new byte[0]);
        for (Object o : keep) {
            if (o instanceof ParallelInference pi) {
                pi.shutdown();
            } else if (o instanceof AutoCloseable c) {
                c.close(); // the shared weights, on every rank, before the group is closed
            }
        }
        return 0;
    }

    /** {@return this process's proportional set size in KiB, from /proc/self/smaps_rollup} */
    static long pssKb() throws IOException {
        return pssKb("self");
    }

    /** {@return the proportional set size in KiB of process {@code pid} ("self" for this one), from its smaps_rollup} */
    static long pssKb(String pid) throws IOException {
        Path rollup = Path.of("/proc", pid, "smaps_rollup");
        for (String line : Files.readAllLines(rollup)) {
            if (line.startsWith("Pss:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        throw new IOException(rollup + " has no Pss line, expected one (fix: run on Linux 4.14 or later)");
    }
}
