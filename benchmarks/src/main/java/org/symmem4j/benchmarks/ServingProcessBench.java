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
import java.util.concurrent.Callable;

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
import org.symmem4j.serving.WorkerJvm;
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
 * loaded and served, and after an idle window ({@code --idle-seconds}), each side's resident memory: the PSS summed
 * over its JVMs (the router's and its workers' for the processes side), split by what it holds ({@link ProcFootprint}),
 * and each JVM's CPU time under load and over the idle window. With {@code --compare-workers 1,8} every side runs at
 * each worker count, and the report sets the memory at the largest against the smallest. Worker JVMs start with
 * {@link WorkerJvm}'s flags and environment ({@code --worker-jvm bare}: the router's flags only). Sides run round
 * robin per repetition; the report ({@link ServingProcessReport}) gives the median of the repetitions, the ratios to
 * {@code ParallelInference}, the machine's load average before and after, and every repetition's raw numbers.
 *
 * <pre>
 *   ServingProcessBench [--workers K] [--models M] [--clients C] [--seconds S] [--reps R] [--max-batch B]
 *                       [--mlp-hidden H] [--sides threads,processes,pi] [--inflight-per-worker N]
 *                       [--compare-workers 1,8] [--idle-seconds S] [--worker-jvm default|bare]
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
        @Option(names = "--compare-workers", split = ",", paramLabel = "K", description = "run every side at each"
                + " of these worker counts instead of --workers (e.g. 1,8) and report the memory at the largest"
                + " against the smallest (the target: 8 workers within 1.2x one worker's)")
        List<Integer> compareWorkers;
        @Option(names = "--idle-seconds", paramLabel = "S", description = "after serving, the idle window (no"
                + " requests) over which each JVM's CPU time is measured")
        double idleSeconds = 10;
        @Option(names = "--worker-jvm", paramLabel = "default|bare", description = "default: worker JVMs start with"
                + " WorkerJvm's flags and environment (SYMMEM4J_WORKER_JVM_FLAGS overrides the flags); bare: with the"
                + " router's flags only")
        String workerJvm = "default";
        @Option(names = "--side", hidden = true, description = "internal: this JVM runs one side")
        String side;
        @Option(names = "--side-workers", hidden = true, description = "internal: the side's worker count")
        Integer sideWorkers;
        @Option(names = "--out", hidden = true, description = "internal: where a side writes its results")
        Path out;
    }

    private ServingProcessBench() {
    }

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args);
        check(f);
        if (f.side != null) {
            if (f.sideWorkers != null) {
                f.workers = f.sideWorkers;
            }
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
        if (!(f.idleSeconds >= 0)) {
            throw new IllegalArgumentException("--idle-seconds " + f.idleSeconds + ", expected >= 0 (fix: pass e.g."
                    + " --idle-seconds 10)");
        }
        if (!List.of("default", "bare").contains(f.workerJvm)) {
            throw new IllegalArgumentException("--worker-jvm " + f.workerJvm + ", expected default or bare (fix: pass"
                    + " --worker-jvm bare to start worker JVMs with the router's flags only)");
        }
        if (f.compareWorkers != null && (f.compareWorkers.isEmpty()
                || f.compareWorkers.stream().anyMatch(k -> k == null || k < 1))) {
            throw new IllegalArgumentException("--compare-workers " + f.compareWorkers + ", expected worker counts >= 1"
                    + " (fix: pass e.g. --compare-workers 1,8)");
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

    /**
     * One side's result in one repetition at one worker count: a cell per model, and per JVM ({@code router},
     * {@code worker1}...; {@code jvm} for ParallelInference) its memory after serving and idling, and the CPU ticks it
     * used while serving ({@code loadSeconds}: every model's warm-up and measured window) and while idle.
     */
    record SideRun(String side, int workers, List<ServingBench.Cell> cells, Map<String, ProcFootprint.Memory> memory,
                   Map<String, long[]> cpuTicks, double loadSeconds, double idleSeconds) {

        /** {@return each JVM's PSS in KiB} */
        Map<String, Long> pssKb() {
            Map<String, Long> out = new LinkedHashMap<>();
            memory.forEach((jvm, m) -> out.put(jvm, m.pssKb()));
            return out;
        }

        /** {@return the memory of all the side's JVMs together} */
        ProcFootprint.Memory total() {
            return ProcFootprint.Memory.sum(List.copyOf(memory.values()));
        }
    }

    /** {@return the worker counts every side runs at: --compare-workers, else --workers} */
    static List<Integer> workerCounts(Flags f) {
        return f.compareWorkers == null ? List.of(f.workers) : List.copyOf(f.compareWorkers);
    }

    /** {@return every side's run, each repetition and worker count; prints the report} */
    static List<SideRun> run(Flags f, String[] args) throws IOException, InterruptedException {
        System.out.printf(Locale.ROOT, "# ServingProcessBench%n%ndate: %s%nmachine: %d cores; load average before: %s"
                + "%nOMP_NUM_THREADS=%s%nK=%s workers, M=%d models, clients=%d, seconds=%.1f per model (+%.1f warm-up),"
                + " idle window=%.1f s, maxBatch=%d, reps=%d, MLP hidden=%d, router threads per worker process=%d%n"
                + "worker JVMs: %s%n", Instant.now(), Runtime.getRuntime().availableProcessors(), loadAverage(),
                System.getenv("OMP_NUM_THREADS"), workerCounts(f), f.models, f.clients, f.seconds, f.seconds / 4,
                f.idleSeconds, f.maxBatch, f.reps, f.mlpHidden, f.inflightPerWorker, f.workerJvm.equals("bare")
                        ? "bare (the router's flags)" : "flags " + workerFlags(f, 1) + (workerFlags(f, 1).equals(
                        workerFlags(f, 2)) ? "" : " (worker 1; the others without -XX:+AutoCreateSharedArchive)")
                        + ", environment " + workerEnvironment(f));
        long paramBytes = 0;
        for (int i = 0; i < f.models; i++) {
            long n = network(f, i).numParams();
            paramBytes += 4 * n;
            System.out.printf(Locale.ROOT, "model %s: %,d parameters (%.1f MiB)%n", name(i), n, 4 * n / 1048576.0);
        }
        System.out.printf(Locale.ROOT, "weights of all models: %.1f MiB; ParallelInference holds K x M copies"
                + " (plus each model's original), the router one%n%n", paramBytes / 1048576.0);
        if (f.sides.contains("processes") && !workerFlags(f, 1).equals(workerFlags(f, 2))
                && !Files.exists(WorkerJvm.sharedArchive(System.getProperty("java.class.path")))) {
            // worker 1 writes the CDS archive when it exits if it is missing: let an unreported run do it, so that every
            // measured worker JVM maps the same archive, whatever its worker count
            System.out.println("(an unreported processes run at K=1 first, so that the worker JVMs' CDS archive is"
                    + " there: " + WorkerJvm.sharedArchive(System.getProperty("java.class.path")) + ")");
            runSide(f, args, "processes", 1);
        }
        List<SideRun> runs = new ArrayList<>();
        for (int r = 0; r < f.reps; r++) {
            for (int k : workerCounts(f)) {
                for (String side : f.sides) { // round robin: every side sees the same machine state
                    runs.add(runSide(f, args, side, k));
                }
            }
        }
        ServingProcessReport.report(f, runs, paramBytes);
        System.out.printf("%nload average after: %s%n", loadAverage());
        return runs;
    }

    /** {@return the JVM flags worker JVM {@code worker} (from 1) starts with, besides the router's own} */
    static List<String> workerFlags(Flags f, int worker) {
        return f.workerJvm.equals("bare") ? List.of()
                : WorkerJvm.flags(System.getenv(), System.getProperty("java.class.path"), worker);
    }

    /** {@return the environment variables the worker JVMs get besides this JVM's} */
    static Map<String, String> workerEnvironment(Flags f) {
        Map<String, String> extra = new LinkedHashMap<>();
        if (f.workerJvm.equals("default")) {
            WorkerJvm.DEFAULT_ENVIRONMENT.forEach((k, v) -> {
                if (System.getenv(k) == null) {
                    extra.put(k, v);
                }
            });
        }
        return extra;
    }

    static SideRun runSide(Flags f, String[] args, String side, int workers) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("symmem4j-serving-processes-"); // mode 0700
        try {
            List<String> childArgs = new ArrayList<>(List.of(args));
            childArgs.addAll(List.of("--side", side, "--side-workers", Integer.toString(workers), "--out",
                    dir.toString()));
            List<String> jvmFlags = new ArrayList<>(ChildJvms.childJvmFlags(
                    ManagementFactory.getRuntimeMXBean().getInputArguments()));
            jvmFlags.add(ProcFootprint.heapLogFlag(dir)); // the heap's range, for its share of the PSS
            // JVM starts and warm-ups, slow on a loaded machine (K worker JVMs load ND4J at once), then the windows
            Duration limit = Duration.ofSeconds(120 + 20L * workers + (long) (f.models * f.seconds * 1.25 * 3
                    + f.idleSeconds));
            if (side.equals("processes")) {
                Path secret = ChildJvms.writeSecret(dir.resolve("store.secret"));
                Map<String, String> workerEnv = workerEnvironment(f);
                ChildJvms.runRanks(rank -> {
                    List<String> flags = new ArrayList<>(jvmFlags);
                    if (rank > 0) {
                        flags.addAll(workerFlags(f, rank));
                    }
                    return ChildJvms.javaCommand(flags, ServingProcessBench.class, childArgs);
                }, rank -> rank == 0 ? Map.of() : workerEnv, workers + 1, "serving-processes-"
                        + ProcessHandle.current().pid() + "-" + System.nanoTime(), secret, limit);
            } else {
                ChildJvms.runOne(ChildJvms.javaCommand(jvmFlags, ServingProcessBench.class, childArgs), side, limit);
            }
            return readSide(side, workers, dir.resolve("result"));
        } finally {
            ChildJvms.deleteTree(dir);
        }
    }

    /**
     * The result file: {@code cell model side workers req/s p50 p99 failures}, {@code mem jvm pss shm heap file other
     * rss} (KiB), {@code cpu jvm loadTicks idleTicks} and {@code window loadSeconds idleSeconds} lines.
     */
    static SideRun readSide(String side, int workers, Path file) throws IOException {
        List<ServingBench.Cell> cells = new ArrayList<>();
        Map<String, ProcFootprint.Memory> memory = new LinkedHashMap<>();
        Map<String, long[]> cpu = new LinkedHashMap<>();
        double[] window = {0, 0};
        for (String line : Files.readAllLines(file)) {
            String[] p = line.split(" ");
            switch (p[0]) {
                case "cell" -> cells.add(new ServingBench.Cell(p[1], p[2], Integer.parseInt(p[3]),
                        Double.parseDouble(p[4]), Double.parseDouble(p[5]), Double.parseDouble(p[6]),
                        Long.parseLong(p[7])));
                case "mem" -> memory.put(p[1], ProcFootprint.Memory.parse(p, 2));
                case "cpu" -> cpu.put(p[1], new long[] {Long.parseLong(p[2]), Long.parseLong(p[3])});
                case "window" -> window = new double[] {Double.parseDouble(p[1]), Double.parseDouble(p[2])};
                default -> throw new IOException(file + ": line '" + line + "', expected cell, mem, cpu or window"
                        + " (fix: the side JVM and this one run the same build)");
            }
        }
        return new SideRun(side, workers, cells, memory, cpu, window[0], window[1]);
    }

    static String label(String side) {
        return switch (side) {
            case "threads" -> "router, worker threads";
            case "processes" -> "router, worker processes";
            case "pi" -> "ParallelInference BATCHED";
            default -> throw org.symmem4j.parallel.Invariants.violated("side " + side);
        };
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

    private static int threads(Flags f) throws Exception {
        try (SharedWeights weights = SharedWeights.create(InJvmWorld.create(1).join(0), 0, weightBudget(f),
                2 * f.models + 2);
             ModelRouter router = new ModelRouter(weights, options(f, f.workers), null)) {
            deployAll(f, router);
            serveAndMeasure(f, Map.of("router", ProcessHandle.current().pid()), () -> serveAll(f, "threads", router));
        }
        return 0;
    }

    private static int parallelInference(Flags f) throws Exception {
        List<ParallelInference> pis = new ArrayList<>();
        try {
            for (int i = 0; i < f.models; i++) {
                pis.add(new ParallelInference.Builder(network(f, i)).inferenceMode(InferenceMode.BATCHED)
                        .batchLimit(f.maxBatch).queueLimit(Math.max(1024, 4 * f.clients)).workers(f.workers).build());
            }
            serveAndMeasure(f, Map.of("jvm", ProcessHandle.current().pid()), () -> {
                List<ServingBench.Cell> cells = new ArrayList<>();
                for (int i = 0; i < f.models; i++) {
                    ParallelInference pi = pis.get(i);
                    cells.add(ServingBench.closedLoop(f.clients, f.seconds, request(i), name(i), "pi", f.workers,
                            pi::output));
                }
                return cells;
            });
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
                // the workers wrote their pids before their part of this collective
                try (ProcessWorkers workers = ProcessWorkers.create(group, ring);
                     ModelRouter router = new ModelRouter(weights, options(f, f.workers * f.inflightPerWorker), null,
                             workers)) {
                    Map<String, Long> pids = new LinkedHashMap<>();
                    pids.put("router", ProcessHandle.current().pid());
                    for (int r = 1; r <= f.workers; r++) { // alive: they stop when the router closes its workers
                        pids.put("worker" + r, Long.parseLong(Files.readString(f.out.resolve("pid-" + r)).trim()));
                    }
                    deployAll(f, router);
                    serveAndMeasure(f, pids, () -> serveAll(f, "processes", router));
                }
            }
        }
        return 0;
    }

    /**
     * Serves (every model in turn: the load window), collects this JVM's garbage, waits {@code --idle-seconds} without
     * requests (the idle window), then takes the memory of each of the side's JVMs; writes the result file with the
     * CPU ticks each JVM used in each window.
     */
    private static void serveAndMeasure(Flags f, Map<String, Long> pids, Callable<List<ServingBench.Cell>> serve)
            throws Exception {
        long[] t0 = cpuTicks(pids);
        long start = System.nanoTime();
        List<ServingBench.Cell> cells = serve.call();
        long[] t1 = cpuTicks(pids);
        double loadSeconds = (System.nanoTime() - start) / 1e9;
        System.gc();
        long[] t2 = cpuTicks(pids);
        long idleStart = System.nanoTime();
        Thread.sleep(Duration.ofNanos((long) (f.idleSeconds * 1e9)));
        long[] t3 = cpuTicks(pids);
        double idleSeconds = (System.nanoTime() - idleStart) / 1e9;
        StringBuilder out = new StringBuilder();
        for (ServingBench.Cell c : cells) {
            out.append(String.format(Locale.ROOT, "cell %s %s %d %.3f %.3f %.3f %d%n", c.model(), c.side(),
                    c.workers(), c.requestsPerSecond(), c.p50Micros(), c.p99Micros(), c.failures()));
        }
        int i = 0;
        for (Map.Entry<String, Long> e : pids.entrySet()) {
            out.append("mem ").append(e.getKey()).append(' ').append(ProcFootprint.memory(e.getValue(), f.out)
                    .format()).append('\n');
            out.append("cpu ").append(e.getKey()).append(' ').append(t1[i] - t0[i]).append(' ').append(t3[i] - t2[i])
                    .append('\n');
            i++;
        }
        out.append(String.format(Locale.ROOT, "window %.3f %.3f%n", loadSeconds, idleSeconds));
        Files.writeString(f.out.resolve("result"), out);
    }

    private static long[] cpuTicks(Map<String, Long> pids) throws IOException {
        long[] ticks = new long[pids.size()];
        int i = 0;
        for (long pid : pids.values()) {
            ticks[i++] = ProcFootprint.cpuTicks(pid);
        }
        return ticks;
    }
}
