package org.symmem4j.benchmarks.dl4j;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.benchmarks.RawCsv;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.WorkerMemory;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.DataParallelExample;
import org.symmem4j.examples.SyntheticData;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * ZeRO-style sharding on the CPU: memory per worker and step time of plain data parallelism (the
 * baseline, measured in the same run) against ZeRO stage 1 ({@code OPTIMIZER_STATE}), stage 2
 * ({@code GRADIENTS}) and stage 3 ({@code PARAMETERS}: its parameter and gradient bytes per worker are
 * what is resident, measured with mincore, and its sync time includes the parameter gathers that
 * prefetching left exposed), for N workers, the same model, data and steps. Every (repetition, N, mode)
 * runs in a fresh JVM, so one run's freed native memory cannot hide the next one's peak; the runs
 * go round-robin over the modes, so slow stretches of a shared machine hit all modes alike.
 *
 * <p>What a child run measures:
 * <ul>
 *   <li>updater-state bytes per worker: from the workers' actual state arrays
 *       ({@link SymmemParallelWrapper#workerMemory()});</li>
 *   <li>peak off-heap bytes per worker: the process's resident set ({@code Pointer.physicalBytes()},
 *       JavaCPP's reading of {@code /proc/self/statm}) sampled every millisecond during
 *       {@code fit()}, minus its value just before the wrapper was built, divided by N. The heap is
 *       fixed and pre-touched ({@code -Xms = -Xmx}, {@code -XX:+AlwaysPreTouch}), so what grows is
 *       native memory: the replicas' ND4J arrays and workspaces, symmetric scratch memory, thread
 *       stacks, and code the JIT compiles during the run. (JavaCPP's {@code totalBytes()} and ND4J's
 *       {@code allocatedMemory()} stay near zero on the CPU backend: ND4J allocates its buffers
 *       without telling them; the resident set is the number that is real.)</li>
 *   <li>step time: the median over the run's steps (after the first three) of the slowest
 *       worker's step time (forward, backward, sync, update) from the wrapper's step reports.</li>
 * </ul>
 *
 * <pre>
 *   ZeroShardingBench [--workers 1,2,4] [--hidden H] [--batch B] [--steps S] [--warmup-steps W]
 *                     [--reps R] [--heap 768m] [--out report.md] [--raw runs.csv] [--commit C] [--command TEXT]
 * </pre>
 * {@code --raw} writes one CSV row per child run, as it ends: every number of the report's tables of
 * all runs (bench/plots.sh draws the memory per worker against N from it).
 */
public final class ZeroShardingBench {

    static final int FEATURES = DataParallelBench.FEATURES;
    static final int CLASSES = DataParallelBench.CLASSES;
    /** Steps at the start of a run left out of the median step time (workers starting, first calls). */
    static final int SKIPPED_STEPS = 3;

    /** The three ways to train, baseline first. */
    enum Mode {
        PLAIN("plain", "plain data parallelism", null),
        ZERO1("zero1", "ZeRO-1 (OPTIMIZER_STATE)", ZeroStage.OPTIMIZER_STATE),
        ZERO2("zero2", "ZeRO-2 (GRADIENTS)", ZeroStage.GRADIENTS),
        ZERO3("zero3", "ZeRO-3 (PARAMETERS)", ZeroStage.PARAMETERS);

        final String flag;
        final String label;
        final ZeroStage stage;

        Mode(String flag, String label, ZeroStage stage) {
            this.flag = flag;
            this.label = label;
            this.stage = stage;
        }

        static Mode ofFlag(String flag) {
            return Arrays.stream(values()).filter(m -> m.flag.equals(flag)).findFirst().orElseThrow(() ->
                    new IllegalArgumentException("mode=" + flag + " expected one of plain, zero1, zero2, zero3"));
        }
    }

    @Command(name = "ZeroShardingBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Updater-state bytes, peak off-heap bytes and step time per worker for plain data parallelism"
                    + " and ZeRO stages 1, 2 and 3, each run in a fresh JVM.")
    static final class Flags {
        @Option(names = "--workers", paramLabel = "N", split = ",", description = "worker counts")
        List<Integer> workers = new ArrayList<>(List.of(1, 2, 4));
        @Option(names = "--hidden", paramLabel = "H", description = "width of the MLP's hidden layers")
        int hidden = 1400;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 32;
        @Option(names = "--steps", paramLabel = "S", description = "steps per run (the first ones are left out of the median)")
        int steps = 60;
        @Option(names = "--warmup-steps", paramLabel = "W", description = "untimed steps first")
        int warmupSteps = 10;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions, each in fresh JVMs")
        int reps = 3;
        @Option(names = "--heap", paramLabel = "SIZE", description = "-Xmx of each child JVM")
        String heap = "768m";
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "write every child run as a CSV row to FILE (appended under the"
                + " same header; default: none)")
        Path raw;
        @Option(names = "--commit", paramLabel = "C", description = "commit named in the report")
        String commit = "unknown";
        @Option(names = "--command", paramLabel = "TEXT", description = "command line named in the report (default: this one)")
        String command;
    }

    record Options(List<Integer> workers, int hidden, int batch, int steps, int warmupSteps, int reps, String heap,
                   Path out, Path raw, String commit, String command) {

        static Options parse(String[] args) {
            return Cli.parse(new Flags(), args, f -> build(f, args));
        }

        private static Options build(Flags f, String[] args) {
            List<Integer> workers = List.copyOf(f.workers);
            int hidden = Cli.positive("--hidden", f.hidden);
            int batch = Cli.positive("--batch", f.batch);
            int steps = Cli.positive("--steps", f.steps);
            int warmup = Cli.positive("--warmup-steps", f.warmupSteps);
            int reps = Cli.positive("--reps", f.reps);
            String heap = f.heap;
            Path out = f.out;
            String commit = f.commit;
            String command = f.command;
            if (steps <= SKIPPED_STEPS) {
                throw new IllegalArgumentException("--steps=" + steps + " must be > " + SKIPPED_STEPS
                        + " (the first steps are left out of the median)");
            }
            for (int n : workers) {
                if (n < 1) {
                    throw new IllegalArgumentException("--workers: " + n + " must be >= 1");
                }
            }
            if (command == null) {
                command = "java " + ZeroShardingBench.class.getName() + (args.length == 0 ? "" : " " + String.join(" ", args));
            }
            return new Options(workers, hidden, batch, steps, warmup, reps, heap, out, f.raw, commit, command);
        }

    }

    /** One child run's measurements. */
    record Result(Mode mode, int workers, int rep, long params, long unshardedStateBytes, long maxStateBytes,
                  long sumStateBytes, long paramBytes, long gradientBytes, long baselineRss, long peakRss,
                  double medianStepMs, double medianSyncMs, double fitSeconds, double finalLoss) {

        /** (peak − baseline) ÷ N. */
        double offHeapPerWorker() {
            return (double) (peakRss - baselineRss) / workers;
        }

        /** The largest worker's state over 1/N of the unsharded state. */
        double stateRatio() {
            return maxStateBytes / (unshardedStateBytes / (double) workers);
        }
    }

    /**
     * The columns of {@code --raw}, one row per child run: the mode ({@code plain}, {@code zero1},
     * {@code zero2}), the configuration, and the run's measurements; bytes per worker are the largest
     * worker's (state) or every worker's (parameters, gradient: DL4J allocates both whole in every mode).
     */
    static final List<String> CSV_COLUMNS = List.of("rep", "workers", "mode", "cores", "hidden", "batch_per_worker",
            "steps", "params", "unsharded_state_bytes", "state_bytes_per_worker", "state_over_unsharded_per_worker",
            "state_bytes_all_workers", "param_bytes_per_worker", "gradient_bytes_per_worker", "baseline_rss_bytes",
            "peak_rss_bytes", "off_heap_bytes_per_worker", "median_step_ms", "median_sync_ms", "fit_s", "held_out_loss");

    private ZeroShardingBench() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--child")) {
            child(args);
            return;
        }
        Options o = Options.parse(args);
        log("ZeRO sharding bench: workers=%s hidden=%d batch=%d steps=%d warmup=%d reps=%d cores=%d", o.workers(), o.hidden(),
                o.batch(), o.steps(), o.warmupSteps(), o.reps(), Runtime.getRuntime().availableProcessors());
        List<Result> results = new ArrayList<>();
        RawCsv raw = o.raw() == null ? null : RawCsv.open(o.raw(), CSV_COLUMNS);
        int cores = Runtime.getRuntime().availableProcessors();
        for (int rep = 1; rep <= o.reps(); rep++) {
            for (int n : o.workers()) {
                for (Mode m : Mode.values()) {
                    Result r = spawn(o, m, n, rep);
                    results.add(r);
                    if (raw != null) {
                        raw.row(rep, n, m.flag, cores, o.hidden(), o.batch(), o.steps(), r.params(), r.unshardedStateBytes(),
                                r.maxStateBytes(), RawCsv.num("%.6f", r.stateRatio()), r.sumStateBytes(), r.paramBytes(),
                                r.gradientBytes(), r.baselineRss(), r.peakRss(), RawCsv.num("%.0f", r.offHeapPerWorker()),
                                RawCsv.num("%.4f", r.medianStepMs()), RawCsv.num("%.4f", r.medianSyncMs()),
                                RawCsv.num("%.4f", r.fitSeconds()), RawCsv.num("%.6f", r.finalLoss()));
                    }
                    log("rep %d N=%d %-26s step %8.2f ms (sync %6.2f)  state/worker %,12d B (%.4f of 1/N)  off-heap/worker %,14.0f B"
                                    + "  loss %.4f", rep, n, m.label, r.medianStepMs(), r.medianSyncMs(), r.maxStateBytes(), r.stateRatio(),
                            r.offHeapPerWorker(), r.finalLoss());
                }
            }
        }
        if (raw != null) {
            raw.close();
            log("wrote %s", o.raw());
        }
        String report = new ZeroShardingReport(o, results).render();
        if (o.out() != null) {
            Path parent = o.out().toAbsolutePath().getParent();
            if (parent != null) {
                Files.createDirectories(parent);
            }
            Files.writeString(o.out(), report, StandardCharsets.UTF_8);
            log("wrote %s", o.out());
        } else {
            System.out.print(report);
        }
    }

    /** Runs one child JVM with this JVM's flags and class path; parses its RESULT line. */
    private static Result spawn(Options o, Mode m, int n, int rep) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("--add-modules=jdk.incubator.vector");
        cmd.add("--sun-misc-unsafe-memory-access=allow");
        cmd.add("-Xms" + o.heap());
        cmd.add("-Xmx" + o.heap());
        cmd.add("-XX:+AlwaysPreTouch"); // the heap is resident from the start: growth during fit is native memory
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(ZeroShardingBench.class.getName());
        cmd.addAll(List.of("--child", m.flag, Integer.toString(n), Integer.toString(o.hidden()), Integer.toString(o.batch()),
                Integer.toString(o.steps()), Integer.toString(o.warmupSteps())));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String resultLine = null;
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                if (line.startsWith("RESULT ")) {
                    resultLine = line;
                }
            }
        }
        if (!p.waitFor(30, TimeUnit.MINUTES) || p.exitValue() != 0 || resultLine == null) {
            throw new IllegalStateException("child run mode=" + m.flag + " workers=" + n + " rep=" + rep + " failed: exit="
                    + (p.isAlive() ? "still running" : p.exitValue()) + " result=" + resultLine);
        }
        Map<String, String> kv = new LinkedHashMap<>();
        for (String part : resultLine.substring("RESULT ".length()).split(" ")) {
            int eq = part.indexOf('=');
            kv.put(part.substring(0, eq), part.substring(eq + 1));
        }
        return new Result(m, n, rep, Long.parseLong(kv.get("params")), Long.parseLong(kv.get("unshardedStateBytes")),
                Long.parseLong(kv.get("maxStateBytes")), Long.parseLong(kv.get("sumStateBytes")),
                Long.parseLong(kv.get("paramBytes")), Long.parseLong(kv.get("gradientBytes")),
                Long.parseLong(kv.get("baselineRss")), Long.parseLong(kv.get("peakRss")),
                Double.parseDouble(kv.get("medianStepMs")), Double.parseDouble(kv.get("medianSyncMs")),
                Double.parseDouble(kv.get("fitSeconds")),
                Double.parseDouble(kv.get("finalLoss")));
    }

    /** {@code --child MODE N HIDDEN BATCH STEPS WARMUP}: one measured run; prints one RESULT line. */
    private static void child(String[] args) throws InterruptedException {
        Mode mode = Mode.ofFlag(args[1]);
        int n = Integer.parseInt(args[2]);
        int hidden = Integer.parseInt(args[3]);
        int batch = Integer.parseInt(args[4]);
        int steps = Integer.parseInt(args[5]);
        int warmup = Integer.parseInt(args[6]);
        int cores = Runtime.getRuntime().availableProcessors();
        int threads = Math.max(1, cores / n);
        Nd4jThreadLimit.set(threads);

        MultiLayerNetwork net = DataParallelExample.mlp(FEATURES, hidden, CLASSES);
        SyntheticData gen = new SyntheticData(FEATURES, CLASSES, 1);
        List<DataSet> warm = gen.batches(5, warmup, batch * n, DataType.FLOAT);
        List<DataSet> train = gen.batches(6, steps * n, batch, DataType.FLOAT);
        DataSet heldOut = gen.batches(7, 1, 2048, DataType.FLOAT).getFirst();
        // The user's model trains a few steps itself first: DL4J's forward and backward code is
        // compiled, and the model's own workspaces, gradient view and full updater state exist
        // before the baseline, in every mode alike.
        for (DataSet d : warm) {
            net.fit(d);
        }
        net.getUpdater(true);
        System.gc();
        Thread.sleep(200);
        System.gc();
        Thread.sleep(200);
        long baseline = Long.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            baseline = Math.min(baseline, Pointer.physicalBytes());
            Thread.sleep(10);
        }
        AtomicLong peak = new AtomicLong(baseline);
        AtomicBoolean sampling = new AtomicBoolean(true);
        Thread sampler = Thread.ofPlatform().daemon().name("rss-sampler").start(() -> {
            while (sampling.get()) {
                long rss = Pointer.physicalBytes();
                peak.accumulateAndGet(rss, Math::max);
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        List<Long> stepNanos = new ArrayList<>();
        List<Long> syncNanos = new ArrayList<>();
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(net).workers(n).ompThreadsPerWorker(threads)
                .stepListener(r -> {
                    stepNanos.add(r.stepNanos());
                    syncNanos.add(r.syncNanos());
                });
        if (mode.stage != null) {
            b.sharding(mode.stage);
        }
        List<WorkerMemory> memory;
        long t0 = System.nanoTime();
        try (SymmemParallelWrapper w = b.build()) {
            w.fit(new NoPrefetchIterator(train));
            memory = w.workerMemory();
            sampling.set(false);
        }
        double fitSeconds = (System.nanoTime() - t0) / 1e9;
        sampler.join();
        peak.accumulateAndGet(Pointer.physicalBytes(), Math::max);
        if (net.getIterationCount() != warmup + steps || stepNanos.size() != steps) {
            throw new IllegalStateException("mode=" + mode.flag + " N=" + n + ": iterations=" + net.getIterationCount()
                    + " steps reported=" + stepNanos.size() + " expected " + (warmup + steps) + " / " + steps);
        }
        double medianMs = medianAfterStart(stepNanos) / 1e6;
        double medianSyncMs = medianAfterStart(syncNanos) / 1e6;
        long maxState = memory.stream().mapToLong(WorkerMemory::updaterStateBytes).max().orElseThrow();
        long sumState = memory.stream().mapToLong(WorkerMemory::updaterStateBytes).sum();
        long unsharded = net.getUpdater().getStateViewArray().length() * 4L;
        System.out.println(String.format(Locale.ROOT, "RESULT params=%d unshardedStateBytes=%d maxStateBytes=%d"
                        + " sumStateBytes=%d paramBytes=%d gradientBytes=%d baselineRss=%d peakRss=%d medianStepMs=%.4f"
                        + " medianSyncMs=%.4f fitSeconds=%.4f finalLoss=%.6f", net.numParams(), unsharded, maxState, sumState,
                memory.getFirst().paramBytes(), memory.getFirst().gradientBytes(), baseline, peak.get(), medianMs,
                medianSyncMs, fitSeconds, net.score(heldOut)));
        System.out.flush();
        System.exit(0); // ND4J leaves non-daemon threads behind
    }

    /** The median of a run's per-step values, leaving out the first {@link #SKIPPED_STEPS}. */
    private static long medianAfterStart(List<Long> perStep) {
        List<Long> v = new ArrayList<>(perStep.subList(SKIPPED_STEPS, perStep.size()));
        v.sort(null);
        return v.get(v.size() / 2);
    }

    static void log(String format, Object... args) {
        System.err.println(String.format(Locale.ROOT, format, args));
    }
}
