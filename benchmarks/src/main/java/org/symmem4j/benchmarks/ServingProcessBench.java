package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.parallelism.ParallelInference;
import org.deeplearning4j.parallelism.inference.InferenceMode;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.serving.ModelRouter;
import org.symmem4j.serving.ProcessWorkers;
import org.symmem4j.serving.RouterOptions;
import org.symmem4j.serving.WorkerProcess;
import org.symmem4j.serving.weights.SharedWeights;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Serving M models with K workers, three ways, on the same machine in the same run: symmem4j's {@link ModelRouter}
 * with K worker threads, the router with K worker processes ({@link ProcessWorkers}: K worker JVMs fed through ring
 * buffers, running the networks over the router's one copy of the weights), and DL4J's {@code ParallelInference}
 * ({@code BATCHED}, K workers, {@code batchLimit} = the router's {@code maxBatch}, one per model, each worker holding
 * its own copy of the model). Models alternate between an MLP (784-H-H-10) and a LeNet-like CNN (1 x 28 x 28).
 *
 * <p>Every side runs in fresh JVMs (the processes side: a router JVM and K worker JVMs), which load all M models,
 * then serve each model in turn to closed-loop clients sending one-row requests (a quarter of {@code --seconds}
 * warm-up, then {@code --seconds} measured): requests/s and p50/p99 latency per model. Right after, with every model
 * loaded and served, each side's resident memory: the PSS ({@code /proc/<pid>/smaps_rollup}) summed over its JVMs,
 * the router's and its workers' for the processes side. Sides run round robin per repetition; the report gives the
 * median of the repetitions, the ratios to {@code ParallelInference}, the machine's load average before and after,
 * and every repetition's raw numbers.
 *
 * <pre>
 *   ServingProcessBench [--workers K] [--models M] [--clients C] [--seconds S] [--reps R] [--max-batch B]
 *                       [--mlp-hidden H] [--sides threads,processes,pi] [--inflight-per-worker N]
 * </pre>
 */
public final class ServingProcessBench {

    static final List<String> SIDES = List.of("threads", "processes", "pi");

    @Command(name = "ServingProcessBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Serving M models with K workers: the router's worker threads,"
                    + " its worker processes (ProcessWorkers) and DL4J's ParallelInference (BATCHED): requests/s,"
                    + " p50/p99 latency per model, and the summed PSS of each side's JVMs.")
    static final class Flags {
        @Option(names = "--workers", paramLabel = "K", description = "workers on every side: router threads, worker"
                + " JVMs, ParallelInference workers per model")
        int workers = 2;
        @Option(names = "--models", paramLabel = "M", description = "models served at once (even: MLP, odd: CNN)")
        int models = 2;
        @Option(names = "--clients", paramLabel = "C", description = "closed-loop client threads")
        int clients = 8;
        @Option(names = "--seconds", paramLabel = "S", description = "measured seconds per model (after S/4 warm-up)")
        double seconds = 6;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions, sides round robin (median reported)")
        int reps = 1;
        @Option(names = "--max-batch", paramLabel = "B", description = "most rows per batch (router maxBatch, PI"
                + " batchLimit)")
        int maxBatch = 32;
        @Option(names = "--mlp-hidden", paramLabel = "H", description = "hidden width of the MLPs (4096 makes each MLP"
                + " 20 M parameters, so that the weights, not the JVMs, dominate the memory)")
        int mlpHidden = 256;
        @Option(names = "--sides", split = ",", paramLabel = "SIDE", description = "threads, processes and/or pi")
        List<String> sides = SIDES;
        @Option(names = "--inflight-per-worker", paramLabel = "N", description = "router threads per worker process"
                + " (each waits for its batch's reply, so N batches per worker are in flight)")
        int inflightPerWorker = 2;
        @Option(names = "--ring-mib", paramLabel = "MIB", description = "each worker ring's capacity in MiB (a power"
                + " of two)")
        int ringMib = 4;
        @Option(names = "--side", hidden = true, description = "internal: this JVM runs one side")
        String side;
        @Option(names = "--out", hidden = true, description = "internal: where a side writes its results")
        Path out;
    }

    private ServingProcessBench() {
    }

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args);
        check(f);
        if (f.side != null) {
            ChildJvms.exitAsRank(() -> side(f));
            return;
        }
        run(f, args);
    }

    static void check(Flags f) {
        Cli.positive("--workers", f.workers);
        Cli.positive("--models", f.models);
        Cli.positive("--clients", f.clients);
        Cli.positive("--reps", f.reps);
        Cli.positive("--max-batch", f.maxBatch);
        Cli.positive("--mlp-hidden", f.mlpHidden);
        Cli.positive("--inflight-per-worker", f.inflightPerWorker);
        Cli.positive("--ring-mib", f.ringMib);
        if (Integer.bitCount(f.ringMib) != 1 || f.ringMib > 512) {
            throw new IllegalArgumentException("--ring-mib " + f.ringMib + ", expected a power of two up to 512 (fix:"
                    + " pass e.g. --ring-mib 4)");
        }
        if (!(f.seconds > 0)) {
            throw new IllegalArgumentException("--seconds " + f.seconds + ", expected > 0 (fix: pass e.g. --seconds 6)");
        }
        if (f.sides.isEmpty() || !SIDES.containsAll(f.sides)) {
            throw new IllegalArgumentException("--sides " + f.sides + ", expected some of " + SIDES + " (fix: pass e.g."
                    + " --sides threads,processes,pi)");
        }
    }

    // ------------------------------------------------------------------------------------------ models

    /** {@return model {@code i}'s name: mlp0, cnn1, mlp2, ...} */
    static String name(int i) {
        return (i % 2 == 0 ? "mlp" : "cnn") + i;
    }

    static MultiLayerConfiguration conf(Flags f, int i) {
        return i % 2 == 0 ? mlp(f.mlpHidden, i + 1) : ServingBench.cnn(i + 1);
    }

    static MultiLayerConfiguration mlp(int hidden, long seed) {
        return new NeuralNetConfiguration.Builder().seed(seed).list()
                .layer(new DenseLayer.Builder().nIn(784).nOut(hidden).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(10)
                        .activation(Activation.SOFTMAX).build())
                .build();
    }

    /** {@return the example shape model {@code i} is deployed with} */
    static long[] example(int i) {
        return i % 2 == 0 ? new long[] {784} : new long[] {1, 28, 28};
    }

    /** {@return the shape of one one-row request to model {@code i}} */
    static long[] request(int i) {
        return i % 2 == 0 ? new long[] {1, 784} : new long[] {1, 1, 28, 28};
    }

    static MultiLayerNetwork network(Flags f, int i) {
        MultiLayerNetwork net = new MultiLayerNetwork(conf(f, i));
        net.init();
        return net;
    }

    // ------------------------------------------------------------------------------------------ the parent

    /** One side's result in one repetition: a cell per model and the PSS of each of its JVMs. */
    record SideRun(String side, List<ServingBench.Cell> cells, Map<String, Long> pssKb) {
        long pssSumKb() {
            return pssKb.values().stream().mapToLong(Long::longValue).sum();
        }
    }

    /** {@return every side's run, each repetition; prints the report} */
    static List<SideRun> run(Flags f, String[] args) throws IOException, InterruptedException {
        System.out.printf(Locale.ROOT, "# ServingProcessBench%n%ndate: %s%nmachine: %d cores; load average before: %s"
                + "%nOMP_NUM_THREADS=%s%nK=%d workers, M=%d models, clients=%d, seconds=%.1f per model (+%.1f warm-up),"
                + " maxBatch=%d, reps=%d, MLP hidden=%d, router threads per worker process=%d%n", Instant.now(),
                Runtime.getRuntime().availableProcessors(), loadAverage(), System.getenv("OMP_NUM_THREADS"),
                f.workers, f.models, f.clients, f.seconds, f.seconds / 4, f.maxBatch, f.reps, f.mlpHidden,
                f.inflightPerWorker);
        long paramBytes = 0;
        for (int i = 0; i < f.models; i++) {
            long n = network(f, i).numParams();
            paramBytes += 4 * n;
            System.out.printf(Locale.ROOT, "model %s: %,d parameters (%.1f MiB)%n", name(i), n, 4 * n / 1048576.0);
        }
        System.out.printf(Locale.ROOT, "weights of all models: %.1f MiB; ParallelInference holds K x M = %d copies"
                + " (plus each model's original), the router one%n%n", paramBytes / 1048576.0, f.workers * f.models);
        List<SideRun> runs = new ArrayList<>();
        for (int r = 0; r < f.reps; r++) {
            for (String side : f.sides) { // round robin: every side sees the same machine state
                runs.add(runSide(f, args, side));
            }
        }
        report(f, runs);
        System.out.printf("%nload average after: %s%n", loadAverage());
        return runs;
    }

    static SideRun runSide(Flags f, String[] args, String side) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("symmem4j-serving-processes-"); // mode 0700
        try {
            List<String> childArgs = new ArrayList<>(List.of(args));
            childArgs.addAll(List.of("--side", side, "--out", dir.toString()));
            List<String> command = ChildJvms.javaCommand(ChildJvms.childJvmFlags(
                    ManagementFactory.getRuntimeMXBean().getInputArguments()), ServingProcessBench.class, childArgs);
            Duration limit = Duration.ofSeconds(120 + (long) (f.models * f.seconds * 1.25 * 3));
            if (side.equals("processes")) {
                Path secret = ChildJvms.writeSecret(dir.resolve("store.secret"));
                ChildJvms.runRanks(command, f.workers + 1, "serving-processes-" + ProcessHandle.current().pid() + "-"
                        + System.nanoTime(), secret, limit);
            } else {
                ChildJvms.runOne(command, side, limit);
            }
            return readSide(side, dir.resolve("result"));
        } finally {
            ChildJvms.deleteTree(dir);
        }
    }

    /** The result file: {@code cell model side workers req/s p50 p99 failures} and {@code pss jvm kb} lines. */
    static SideRun readSide(String side, Path file) throws IOException {
        List<ServingBench.Cell> cells = new ArrayList<>();
        Map<String, Long> pss = new LinkedHashMap<>();
        for (String line : Files.readAllLines(file)) {
            String[] p = line.split(" ");
            if (p[0].equals("cell")) {
                cells.add(new ServingBench.Cell(p[1], p[2], Integer.parseInt(p[3]), Double.parseDouble(p[4]),
                        Double.parseDouble(p[5]), Double.parseDouble(p[6]), Long.parseLong(p[7])));
            } else if (p[0].equals("pss")) {
                pss.put(p[1], Long.parseLong(p[2]));
            }
        }
        return new SideRun(side, cells, pss);
    }

    static void report(Flags f, List<SideRun> runs) {
        System.out.printf("## Throughput and latency (one-row requests, %d clients, median of %d reps)%n%n"
                + "| model | side | workers | requests/s | p50 us | p99 us | failed | req/s vs ParallelInference |"
                + " all reps req/s |%n|---|---|---|---|---|---|---|---|---|%n", f.clients, f.reps);
        for (int i = 0; i < f.models; i++) {
            String model = name(i);
            Map<String, ServingBench.Cell> medians = new LinkedHashMap<>();
            for (String side : f.sides) {
                medians.put(side, median(cellsOf(runs, side, model)));
            }
            ServingBench.Cell pi = medians.get("pi");
            for (String side : f.sides) {
                List<ServingBench.Cell> all = cellsOf(runs, side, model);
                ServingBench.Cell m = medians.get(side);
                System.out.printf(Locale.ROOT, "| %s | %s | %d | %.0f | %.0f | %.0f | %d | %s | %s |%n", model,
                        label(side), m.workers(), m.requestsPerSecond(), m.p50Micros(), m.p99Micros(),
                        all.stream().mapToLong(ServingBench.Cell::failures).sum(),
                        pi == null ? "-" : String.format(Locale.ROOT, "%.2fx", m.requestsPerSecond()
                                / pi.requestsPerSecond()),
                        all.stream().map(c -> String.format(Locale.ROOT, "%.0f", c.requestsPerSecond())).toList());
            }
        }
        System.out.printf("%n## Resident memory after serving (PSS, summed over each side's JVMs, median of %d reps)"
                + "%n%n| side | JVMs | PSS MiB | vs ParallelInference | each JVM MiB (last rep) |%n|---|---|---|---|---|%n",
                f.reps);
        Double piPss = null;
        if (f.sides.contains("pi")) {
            piPss = medianPss(runs, "pi");
        }
        for (String side : f.sides) {
            double pss = medianPss(runs, side);
            SideRun last = runs.stream().filter(r -> r.side.equals(side)).reduce((a, b) -> b).orElseThrow();
            System.out.printf(Locale.ROOT, "| %s | %d | %.1f | %s | %s |%n", label(side), last.pssKb.size(),
                    pss / 1024, piPss == null ? "-" : String.format(Locale.ROOT, "%.2fx", pss / piPss),
                    last.pssKb.entrySet().stream().map(e -> String.format(Locale.ROOT, "%s %.1f", e.getKey(),
                            e.getValue() / 1024.0)).toList());
        }
        System.out.printf("%n## Raw (every rep)%n%n");
        for (SideRun r : runs) {
            for (ServingBench.Cell c : r.cells) {
                System.out.printf(Locale.ROOT, "raw %s %s workers=%d req/s=%.1f p50us=%.1f p99us=%.1f failed=%d%n",
                        r.side, c.model(), c.workers(), c.requestsPerSecond(), c.p50Micros(), c.p99Micros(),
                        c.failures());
            }
            System.out.printf("raw %s pssKb=%s%n", r.side, r.pssKb);
        }
    }

    static String label(String side) {
        return switch (side) {
            case "threads" -> "router, worker threads";
            case "processes" -> "router, worker processes";
            case "pi" -> "ParallelInference BATCHED";
            default -> throw org.symmem4j.parallel.Invariants.violated("side " + side);
        };
    }

    private static List<ServingBench.Cell> cellsOf(List<SideRun> runs, String side, String model) {
        return runs.stream().filter(r -> r.side.equals(side)).flatMap(r -> r.cells.stream())
                .filter(c -> c.model().equals(model)).toList();
    }

    private static ServingBench.Cell median(List<ServingBench.Cell> cells) {
        List<ServingBench.Cell> sorted = new ArrayList<>(cells);
        sorted.sort((a, b) -> Double.compare(a.requestsPerSecond(), b.requestsPerSecond()));
        return sorted.get(sorted.size() / 2);
    }

    private static double medianPss(List<SideRun> runs, String side) {
        double[] v = runs.stream().filter(r -> r.side.equals(side)).mapToDouble(SideRun::pssSumKb).sorted().toArray();
        return v[v.length / 2];
    }

    static String loadAverage() {
        try {
            String[] p = Files.readString(Path.of("/proc/loadavg")).trim().split(" ");
            return p[0] + " " + p[1] + " " + p[2] + " (1, 5, 15 min)";
        } catch (IOException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    // ------------------------------------------------------------------------------------------ a side's JVMs

    private static int side(Flags f) throws Exception {
        return switch (f.side) {
            case "threads" -> threads(f);
            case "processes" -> processes(f);
            case "pi" -> parallelInference(f);
            default -> throw new IllegalArgumentException("--side " + f.side + ", expected one of " + SIDES
                    + " (fix: leave --side out; the benchmark passes it to the JVMs it starts)");
        };
    }

    private static long weightBudget(Flags f) {
        long bytes = 0;
        for (int i = 0; i < f.models; i++) {
            bytes += 4 * network(f, i).numParams();
        }
        return 2 * bytes + (4 << 20);
    }

    private static RouterOptions options(Flags f, int routerThreads) {
        return new RouterOptions(routerThreads, f.maxBatch, Duration.ZERO, Math.max(1024, 4 * f.clients),
                Duration.ofSeconds(60));
    }

    private static void deployAll(Flags f, ModelRouter router) {
        for (int i = 0; i < f.models; i++) {
            router.deploy(name(i), network(f, i), example(i));
        }
    }

    private static List<ServingBench.Cell> serveAll(Flags f, String side, ModelRouter router) {
        List<ServingBench.Cell> cells = new ArrayList<>();
        for (int i = 0; i < f.models; i++) {
            String model = name(i);
            cells.add(ServingBench.closedLoop(f.clients, f.seconds, request(i), model, side, f.workers,
                    x -> router.predict(model, x).join().output()));
        }
        return cells;
    }

    private static int threads(Flags f) throws IOException {
        try (SharedWeights weights = SharedWeights.create(InJvmWorld.create(1).join(0), 0, weightBudget(f),
                2 * f.models + 2);
             ModelRouter router = new ModelRouter(weights, options(f, f.workers), null)) {
            deployAll(f, router);
            List<ServingBench.Cell> cells = serveAll(f, "threads", router);
            System.gc();
            write(f, cells, Map.of("router", ServingBench.pssKb()));
        }
        return 0;
    }

    private static int parallelInference(Flags f) throws IOException {
        List<ParallelInference> pis = new ArrayList<>();
        try {
            for (int i = 0; i < f.models; i++) {
                pis.add(new ParallelInference.Builder(network(f, i)).inferenceMode(InferenceMode.BATCHED)
                        .batchLimit(f.maxBatch).queueLimit(Math.max(1024, 4 * f.clients)).workers(f.workers).build());
            }
            List<ServingBench.Cell> cells = new ArrayList<>();
            for (int i = 0; i < f.models; i++) {
                ParallelInference pi = pis.get(i);
                cells.add(ServingBench.closedLoop(f.clients, f.seconds, request(i), name(i), "pi", f.workers,
                        pi::output));
            }
            System.gc();
            write(f, cells, Map.of("jvm", ServingBench.pssKb()));
        } finally {
            pis.forEach(ParallelInference::shutdown);
        }
        return 0;
    }

    /** Rank 0: the router (and the clients); ranks 1..K: worker processes, which write their pid for the PSS. */
    private static int processes(Flags f) throws Exception {
        int ring = f.ringMib << 20;
        try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
            if (group.worldSize() != f.workers + 1) {
                throw new IllegalStateException("processes side: world size " + group.worldSize() + ", expected K + 1 = "
                        + (f.workers + 1) + " (fix: let ServingProcessBench start its ranks)");
            }
            try (SharedWeights weights = SharedWeights.create(group, 0, weightBudget(f), 2 * f.models + 2)) {
                if (group.rank() != 0) {
                    Files.writeString(f.out.resolve("pid-" + group.rank()), Long.toString(ProcessHandle.current().pid()));
                    WorkerProcess.serve(group, weights, 0, ring);
                    return 0;
                }
                try (ProcessWorkers workers = ProcessWorkers.create(group, ring)) {
                    List<ServingBench.Cell> cells;
                    try (ModelRouter router = new ModelRouter(weights, options(f, f.workers * f.inflightPerWorker),
                            null, workers)) {
                        deployAll(f, router);
                        cells = serveAll(f, "processes", router);
                        System.gc();
                        Map<String, Long> pss = new LinkedHashMap<>();
                        pss.put("router", ServingBench.pssKb());
                        for (int r = 1; r <= f.workers; r++) { // alive: they stop when the router closes its workers
                            String pid = Files.readString(f.out.resolve("pid-" + r)).trim();
                            pss.put("worker" + r, ServingBench.pssKb(pid));
                        }
                        write(f, cells, pss);
                    }
                }
            }
        }
        return 0;
    }

    private static void write(Flags f, List<ServingBench.Cell> cells, Map<String, Long> pssKb) throws IOException {
        StringBuilder out = new StringBuilder();
        for (ServingBench.Cell c : cells) {
            out.append(String.format(Locale.ROOT, "cell %s %s %d %.3f %.3f %.3f %d%n", c.model(), c.side(),
                    c.workers(), c.requestsPerSecond(), c.p50Micros(), c.p99Micros(), c.failures()));
        }
        pssKb.forEach((jvm, kb) -> out.append("pss ").append(jvm).append(' ').append(kb).append('\n'));
        Files.writeString(f.out.resolve("result"), out);
    }
}
