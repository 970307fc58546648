package org.symmem4j.benchmarks.dl4j;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
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
import java.util.function.LongBinaryOperator;
import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.benchmarks.RawCsv;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.StepReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.WorkerMemory;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.DataParallelExample;
import org.symmem4j.examples.SyntheticData;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * ZeRO-style sharding on the CPU: memory per rank and step time of plain data parallelism (the baseline, measured in
 * the same run) against ZeRO stage 1 ({@code OPTIMIZER_STATE}), stage 2 ({@code GRADIENTS}), stage 3
 * ({@code PARAMETERS}: its parameter and gradient bytes per rank are what is resident, measured with mincore, and its
 * sync time includes the parameter gathers that prefetching left exposed) and hybrid sharding (HSDP: stage 3 with
 * {@code shardGroupSize(S)}, shards inside groups of S ranks, replicas across the N ÷ S groups), for N ranks, the same
 * model, data and steps; an MLP and a small CNN; ranks as threads of one JVM or as one JVM per rank started by the
 * launcher ({@code symmem4j-run}'s {@link Launcher}, {@code builder(model).group(ProcessGroup.fromEnvironment())}).
 * Every (repetition, model, placement, N, mode) runs in fresh JVMs, so one run's freed native memory cannot hide the
 * next one's peak; the runs go round-robin over the modes, so slow stretches of a shared machine hit all modes alike.
 *
 * <p>What a run measures:
 * <ul>
 *   <li>parameter, gradient and optimizer-state bytes per rank, from each rank's actual arrays
 *       ({@link SymmemParallelWrapper#workerMemory()}: the replica's parameter and gradient views, whose
 *       resident pages stage 3 and HSDP count with mincore, and the updater state or its shard); the largest
 *       rank's, and the largest rank's sum of the three;</li>
 *   <li>peak off-heap bytes per rank: the process's resident set ({@code Pointer.physicalBytes()},
 *       JavaCPP's reading of {@code /proc/self/statm}) sampled every millisecond during {@code fit()}, minus its
 *       value just before the wrapper was built; divided by N for threads, each process's own for processes (the
 *       largest). The heap is fixed and pre-touched ({@code -Xms = -Xmx}, {@code -XX:+AlwaysPreTouch}), so what
 *       grows is native memory;</li>
 *   <li>step time: per step, the slowest rank's step (forward, backward, sync, update) from the wrapper's step
 *       reports (for processes: each rank's reports, the slowest per step); the median and the 90th percentile over
 *       the run's steps after the first three.</li>
 * </ul>
 *
 * <pre>
 *   ZeroShardingBench [--workers 1,2,4] [--shard-groups 2] [--models mlp] [--placements threads]
 *                     [--hidden H] [--batch B] [--steps S] [--warmup-steps W] [--reps R] [--heap 768m]
 *                     [--cpu-bind auto|none] [--comm-cpu] [--out report.md] [--raw runs.csv] [--commit C] [--command TEXT]
 * </pre>
 * {@code --raw} writes one CSV row per run, as it ends: every number of the report's tables of all runs
 * (bench/plots.sh draws the memory per worker against N from it).
 */
public final class ZeroShardingBench {

    static final int FEATURES = DataParallelBench.FEATURES;
    static final int CLASSES = DataParallelBench.CLASSES;
    /** Steps at the start of a run left out of the step-time statistics (workers starting, first calls). */
    static final int SKIPPED_STEPS = 3;

    /** The ways to train, baseline first. */
    enum Mode {
        PLAIN("plain", "plain data parallelism", null),
        ZERO1("zero1", "ZeRO-1 (OPTIMIZER_STATE)", ZeroStage.OPTIMIZER_STATE),
        ZERO2("zero2", "ZeRO-2 (GRADIENTS)", ZeroStage.GRADIENTS),
        ZERO3("zero3", "ZeRO-3 (PARAMETERS)", ZeroStage.PARAMETERS),
        HSDP("hsdp", "HSDP (PARAMETERS, shardGroupSize)", ZeroStage.PARAMETERS);

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
                    new IllegalArgumentException("mode=" + flag + " expected one of plain, zero1, zero2, zero3, hsdp;"
                            + " fix: pass one of them"));
        }
    }

    /** The models: the MLP of {@code --hidden} and ScalingBench's LeNet-style CNN. */
    enum Model {
        MLP("mlp"), CNN("cnn");

        final String flag;

        Model(String flag) {
            this.flag = flag;
        }

        static Model ofFlag(String flag) {
            return Arrays.stream(values()).filter(m -> m.flag.equals(flag)).findFirst().orElseThrow(() ->
                    new IllegalArgumentException("--models: found " + flag + ", expected mlp or cnn;"
                            + " fix: pass --models mlp,cnn or one of them"));
        }

        MultiLayerNetwork build(int hidden) {
            return this == MLP ? DataParallelExample.mlp(FEATURES, hidden, CLASSES) : ScalingBench.lenet();
        }

        int features() {
            return this == MLP ? FEATURES : ScalingBench.IMAGE * ScalingBench.IMAGE;
        }

        String describe(int hidden) {
            return this == MLP
                    ? String.format(Locale.ROOT, "MLP %d-%d-%d-%d (ReLU, ReLU, softmax; MCXENT)", FEATURES, hidden, hidden, CLASSES)
                    : "CNN 28x28x1: conv5x5x20-maxpool-conv5x5x50-maxpool-dense500-10 (ScalingBench's)";
        }
    }

    /** Where the ranks run. */
    enum Placement {
        THREADS("threads"), PROCESSES("processes");

        final String flag;

        Placement(String flag) {
            this.flag = flag;
        }

        static Placement ofFlag(String flag) {
            return Arrays.stream(values()).filter(p -> p.flag.equals(flag)).findFirst().orElseThrow(() ->
                    new IllegalArgumentException("--placements: found " + flag + ", expected threads or processes;"
                            + " fix: pass --placements threads,processes or one of them"));
        }
    }

    @Command(name = "ZeroShardingBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Parameter, gradient and optimizer-state bytes, peak off-heap bytes and step time per rank for plain"
                    + " data parallelism, ZeRO stages 1, 2 and 3 and hybrid sharding (HSDP), threads or one JVM per rank,"
                    + " each run in fresh JVMs.")
    static final class Flags {
        @Option(names = "--workers", paramLabel = "N", split = ",", description = "rank counts")
        List<Integer> workers = new ArrayList<>(List.of(1, 2, 4));
        @Option(names = "--shard-groups", paramLabel = "S", split = ",", description = "HSDP shard group sizes: for every N"
                + " that S divides with 1 < S < N, an HSDP run of N ÷ S replicas × S shards (0: none)")
        List<Integer> shardGroups = new ArrayList<>(List.of(2));
        @Option(names = "--models", paramLabel = "MODEL", split = ",", description = "mlp, cnn")
        List<String> models = new ArrayList<>(List.of("mlp"));
        @Option(names = "--placements", paramLabel = "P", split = ",", description = "threads (one JVM), processes (one JVM per"
                + " rank, through the launcher)")
        List<String> placements = new ArrayList<>(List.of("threads"));
        @Option(names = "--hidden", paramLabel = "H", description = "width of the MLP's hidden layers")
        int hidden = 1400;
        @Option(names = "--batch", paramLabel = "B", description = "examples per rank per step")
        int batch = 32;
        @Option(names = "--steps", paramLabel = "S", description = "steps per run (the first ones are left out of the statistics)")
        int steps = 60;
        @Option(names = "--warmup-steps", paramLabel = "W", description = "untimed steps first")
        int warmupSteps = 10;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions, each in fresh JVMs")
        int reps = 3;
        @Option(names = "--heap", paramLabel = "SIZE", description = "-Xmx of each child JVM")
        String heap = "768m";
        @Option(names = "--cpu-bind", paramLabel = "auto|none", description = "the launcher's --cpu-bind for processes")
        String cpuBind = "auto";
        @Option(names = "--comm-cpu", description = "stage 3 and HSDP: one ND4J thread less per rank where a rank has two"
                + " or more CPUs (cores ÷ N), so that its communication thread has a CPU of its own; the other modes keep"
                + " cores ÷ N")
        boolean commCpu;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "write every run as a CSV row to FILE (appended under the"
                + " same header; default: none)")
        Path raw;
        @Option(names = "--commit", paramLabel = "C", description = "commit named in the report")
        String commit = "unknown";
        @Option(names = "--command", paramLabel = "TEXT", description = "command line named in the report (default: this one)")
        String command;
    }

    record Options(List<Integer> workers, List<Integer> shardGroups, List<Model> models, List<Placement> placements,
                   int hidden, int batch, int steps, int warmupSteps, int reps, String heap, String cpuBind, boolean commCpu,
                   Path out,
                   Path raw, String commit, String command) {

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
            if (steps <= SKIPPED_STEPS) {
                throw new IllegalArgumentException("--steps=" + steps + " must be > " + SKIPPED_STEPS
                        + " (the first steps are left out of the median); fix: pass --steps " + (SKIPPED_STEPS + 10) + " or more");
            }
            for (int n : workers) {
                if (n < 1) {
                    throw new IllegalArgumentException("--workers: found " + n + ", expected counts >= 1; fix: e.g. --workers 1,2,4");
                }
            }
            List<Integer> groups = f.shardGroups.stream().filter(s -> s != 0).toList();
            for (int s : groups) {
                if (s < 2) {
                    throw new IllegalArgumentException("--shard-groups: found " + s + ", expected sizes >= 2 (or 0: no HSDP);"
                            + " fix: e.g. --shard-groups 2,4");
                }
            }
            if (!f.cpuBind.equals("auto") && !f.cpuBind.equals("none")) {
                throw new IllegalArgumentException("--cpu-bind: found " + f.cpuBind + ", expected auto or none; fix: pass one of them");
            }
            List<Model> models = f.models.stream().map(Model::ofFlag).distinct().toList();
            List<Placement> placements = f.placements.stream().map(Placement::ofFlag).distinct().toList();
            String command = f.command;
            if (command == null) {
                command = "java " + ZeroShardingBench.class.getName() + (args.length == 0 ? "" : " " + String.join(" ", args));
            }
            return new Options(workers, groups, models, placements, hidden, batch, steps, warmup, reps, f.heap, f.cpuBind,
                    f.commCpu, f.out, f.raw, f.commit, command);
        }

        /** The runs of one repetition, in order: per model, placement and N, the modes, then HSDP per shard group. */
        List<Run> runs() {
            List<Run> runs = new ArrayList<>();
            for (Model model : models) {
                for (Placement placement : placements) {
                    for (int n : workers) {
                        for (Mode m : Mode.values()) {
                            if (m != Mode.HSDP) {
                                runs.add(new Run(model, placement, n, m, 0));
                            }
                        }
                        for (int s : shardGroups) {
                            if (s < n && n % s == 0) {
                                runs.add(new Run(model, placement, n, Mode.HSDP, s));
                            }
                        }
                    }
                }
            }
            return runs;
        }
    }

    /** One configuration: {@code shardGroup} is S for HSDP, 0 otherwise. */
    record Run(Model model, Placement placement, int workers, Mode mode, int shardGroup) {

        /** The mode's label; HSDP with its mesh, replicas × shards. */
        String label() {
            return mode == Mode.HSDP ? String.format(Locale.ROOT, "HSDP %d×%d (replicas × shards)", workers / shardGroup,
                    shardGroup) : mode.label;
        }

        /** Over how many ranks the sharded modes divide the state: S for HSDP, N otherwise. */
        int shards() {
            return mode == Mode.HSDP ? shardGroup : workers;
        }
    }

    /**
     * One run's measurements; bytes per rank are the largest rank's ({@code maxModelStateBytes}: the largest sum of
     * one rank's parameter, gradient and optimizer-state bytes), {@code offHeapPerWorker} as described in the class.
     */
    record Result(Run run, int rep, long params, long unshardedStateBytes, long maxStateBytes, long sumStateBytes,
                  long maxParamBytes, long maxGradientBytes, long maxModelStateBytes, long baselineRss, long peakRss,
                  double offHeapPerWorker, double medianStepMs, double p90StepMs, double medianSyncMs, double fitSeconds,
                  double finalLoss, Waits waits) {

        /** The largest rank's state over 1/shards of the unsharded state. */
        double stateRatio() {
            return maxStateBytes / (unshardedStateBytes / (double) run.shards());
        }

        /** A run without the per-step breakdown (earlier versions' rows). */
        Result(Run run, int rep, long params, long unshardedStateBytes, long maxStateBytes, long sumStateBytes,
               long maxParamBytes, long maxGradientBytes, long maxModelStateBytes, long baselineRss, long peakRss,
               double offHeapPerWorker, double medianStepMs, double p90StepMs, double medianSyncMs, double fitSeconds,
               double finalLoss) {
            this(run, rep, params, unshardedStateBytes, maxStateBytes, sumStateBytes, maxParamBytes, maxGradientBytes,
                    maxModelStateBytes, baselineRss, peakRss, offHeapPerWorker, medianStepMs, p90StepMs, medianSyncMs,
                    fitSeconds, finalLoss, Waits.UNKNOWN);
        }

        /** A whole replica's parameters, gradient and optimizer state (fp32). */
        long replicaBytes() {
            return 2 * params * 4 + unshardedStateBytes;
        }
    }

    /**
     * Where a run's sync time goes, medians over the measured steps of the slowest rank per step (each value the
     * largest over the ranks): {@code exposedSyncMs} as ScalingBench's {@code exposed_sync_ms} (the wrapper's
     * {@code StepReport.exposedSyncNanos}: from the last rank's arrival at the gradient sync to the last rank's end of
     * it); for stage 3 and HSDP the per-layer collectives ({@code StepReport.Collectives}): all-gathers and
     * reduce-scatters per step, the time the rank waited for each (exposed: what prefetching and overlap left) and the
     * time each kind ran on the rank's communication thread; and the minor page faults per rank and step during
     * {@code fit()} (stage 3 gives each layer's pages back after use and faults them in again at the next gather).
     * What separates waiting for other ranks from a collective's own cost: {@code leastGatherMs} and
     * {@code leastReduceScatterMs}, the same ran times of the rank with the least per step (processes; threads report
     * the slowest worker only, so there they equal the ran columns): the last rank to arrive at a collective does not
     * wait at its entry, so the least is close to the collectives' own cost and ran − least to the wait for the
     * slowest rank (skew); {@code commDelayMs}, the communication thread's wake-up delay, and {@code commCpuMs}, its CPU
     * time inside the collectives (ran − CPU: it slept), the slowest rank's; and
     * {@code hookWorkMs}, the worker's own stage-3 work inside the layer hooks, the slowest rank's.
     */
    record Waits(double exposedSyncMs, double gathersPerStep, double exposedGatherMs, double gatherMs,
                 double reduceScattersPerStep, double exposedReduceScatterMs, double reduceScatterMs,
                 double minorFaultsPerStep, double leastGatherMs, double leastReduceScatterMs, double commDelayMs,
                 double commCpuMs, double hookWorkMs) {
        static final Waits UNKNOWN = new Waits(Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN,
                Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN);
    }

    /**
     * The columns of {@code --raw}, one row per run: the mode ({@code plain}, {@code zero1}, {@code zero2},
     * {@code zero3}, {@code hsdp}), the configuration, and the run's measurements; bytes per rank are the largest
     * rank's. The first columns are those of earlier versions, in their order.
     */
    static final List<String> CSV_COLUMNS = List.of("rep", "workers", "mode", "cores", "hidden", "batch_per_worker",
            "steps", "params", "unsharded_state_bytes", "state_bytes_per_worker", "state_over_unsharded_per_worker",
            "state_bytes_all_workers", "param_bytes_per_worker", "gradient_bytes_per_worker", "baseline_rss_bytes",
            "peak_rss_bytes", "off_heap_bytes_per_worker", "median_step_ms", "median_sync_ms", "fit_s", "held_out_loss",
            "model", "placement", "shard_group", "model_state_bytes_per_worker", "p90_step_ms", "exposed_sync_ms",
            "gathers_per_step", "exposed_gather_ms", "gather_ms", "reduce_scatters_per_step", "exposed_reduce_scatter_ms",
            "reduce_scatter_ms", "minor_faults_per_step", "least_gather_ms", "least_reduce_scatter_ms", "comm_delay_ms",
            "hook_work_ms", "nd4j_threads", "comm_cpu_ms");

    private ZeroShardingBench() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--child")) {
            child(args);
            return;
        }
        Options o = Options.parse(args);
        int cores = Runtime.getRuntime().availableProcessors();
        log("ZeRO sharding bench: workers=%s shard groups=%s models=%s placements=%s hidden=%d batch=%d steps=%d warmup=%d"
                        + " reps=%d cores=%d", o.workers(), o.shardGroups(), o.models(), o.placements(), o.hidden(), o.batch(),
                o.steps(), o.warmupSteps(), o.reps(), cores);
        List<Result> results = new ArrayList<>();
        RawCsv raw = o.raw() == null ? null : RawCsv.open(o.raw(), CSV_COLUMNS);
        for (int rep = 1; rep <= o.reps(); rep++) {
            for (Run run : o.runs()) {
                Result r = spawn(o, run, rep, cores);
                results.add(r);
                if (raw != null) {
                    raw.row(rep, run.workers(), run.mode().flag, cores, o.hidden(), o.batch(), o.steps(), r.params(),
                            r.unshardedStateBytes(), r.maxStateBytes(), RawCsv.num("%.6f", r.stateRatio()), r.sumStateBytes(),
                            r.maxParamBytes(), r.maxGradientBytes(), r.baselineRss(), r.peakRss(),
                            RawCsv.num("%.0f", r.offHeapPerWorker()), RawCsv.num("%.4f", r.medianStepMs()),
                            RawCsv.num("%.4f", r.medianSyncMs()), RawCsv.num("%.4f", r.fitSeconds()),
                            RawCsv.num("%.6f", r.finalLoss()), run.model().flag, run.placement().flag, run.shardGroup(),
                            r.maxModelStateBytes(), RawCsv.num("%.4f", r.p90StepMs()),
                            RawCsv.num("%.4f", r.waits().exposedSyncMs()), RawCsv.num("%.1f", r.waits().gathersPerStep()),
                            RawCsv.num("%.4f", r.waits().exposedGatherMs()), RawCsv.num("%.4f", r.waits().gatherMs()),
                            RawCsv.num("%.1f", r.waits().reduceScattersPerStep()),
                            RawCsv.num("%.4f", r.waits().exposedReduceScatterMs()),
                            RawCsv.num("%.4f", r.waits().reduceScatterMs()), RawCsv.num("%.1f", r.waits().minorFaultsPerStep()),
                            RawCsv.num("%.4f", r.waits().leastGatherMs()), RawCsv.num("%.4f", r.waits().leastReduceScatterMs()),
                            RawCsv.num("%.4f", r.waits().commDelayMs()), RawCsv.num("%.4f", r.waits().hookWorkMs()),
                            ndThreads(o, run, cores), RawCsv.num("%.4f", r.waits().commCpuMs()));
                }
                log("rep %d %s %s N=%d %-34s step %8.2f ms (p90 %8.2f, sync %6.2f)  model state/rank %,12d B  off-heap/rank"
                                + " %,14.0f B  loss %.4f", rep, run.model().flag, run.placement().flag, run.workers(), run.label(),
                        r.medianStepMs(), r.p90StepMs(), r.medianSyncMs(), r.maxModelStateBytes(), r.offHeapPerWorker(),
                        r.finalLoss());
                Waits w = r.waits();
                log("    exposed sync %.2f ms; gathers %.0f/step exposed %.2f ms (ran %.2f, least rank %.2f); reduce-scatters"
                                + " %.0f/step exposed %.2f ms (ran %.2f, least rank %.2f); comm wake-up %.2f ms; comm CPU %.2f ms;"
                                + " hook work %.2f ms; minor faults %.0f/step/rank", w.exposedSyncMs(), w.gathersPerStep(), w.exposedGatherMs(),
                        w.gatherMs(), w.leastGatherMs(), w.reduceScattersPerStep(), w.exposedReduceScatterMs(),
                        w.reduceScatterMs(), w.leastReduceScatterMs(), w.commDelayMs(), w.commCpuMs(), w.hookWorkMs(),
                        w.minorFaultsPerStep());
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

    /**
     * ND4J threads per rank: cores ÷ N, at least 1; with {@code --comm-cpu}, stage 3 and HSDP ranks that have two CPUs
     * or more leave one of them to their communication thread.
     */
    static int ndThreads(Options o, Run run, int cores) {
        int share = Math.max(1, cores / run.workers());
        boolean perLayerCollectives = run.mode() == Mode.ZERO3 || run.mode() == Mode.HSDP;
        return o.commCpu() && perLayerCollectives && share >= 2 ? share - 1 : share;
    }

    /** Runs one configuration in a fresh JVM, or one per rank through the launcher; parses the RESULT lines. */
    private static Result spawn(Options o, Run run, int rep, int cores) throws IOException, InterruptedException {
        int threads = ndThreads(o, run, cores);
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
        cmd.addAll(List.of("--child", run.model().flag, run.placement().flag, run.mode().flag,
                Integer.toString(run.workers()), Integer.toString(run.shardGroup()), Integer.toString(threads),
                Integer.toString(o.hidden()), Integer.toString(o.batch()), Integer.toString(o.steps()),
                Integer.toString(o.warmupSteps())));
        List<String> resultLines = new ArrayList<>();
        String failure;
        if (run.placement() == Placement.PROCESSES) {
            List<String> args = new ArrayList<>(List.of("-n", Integer.toString(run.workers()), "--cpu-bind", o.cpuBind(),
                    "--master-port", Integer.toString(freePort()), "--"));
            args.addAll(cmd);
            Launcher.Result r = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
            r.out().lines().filter(l -> l.contains("RESULT ")).forEach(l -> resultLines.add(l.substring(l.indexOf("RESULT "))));
            failure = r.status() != 0 || resultLines.size() != run.workers()
                    ? "launcher exit " + r.status() + ", " + resultLines.size() + " of " + run.workers() + " RESULT lines;"
                    + " output:\n" + r.out() + r.err() : null;
        } else {
            Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    if (line.startsWith("RESULT ")) {
                        resultLines.add(line);
                    }
                }
            }
            boolean ended = p.waitFor(30, TimeUnit.MINUTES);
            failure = !ended || p.exitValue() != 0 || resultLines.size() != 1
                    ? "exit " + (ended ? p.exitValue() : "still running") + ", " + resultLines.size() + " RESULT lines" : null;
        }
        if (failure != null) {
            throw new IllegalStateException(run + " rep " + rep + " failed: " + failure + "; expected a RESULT line per rank;"
                    + " fix: see the run's output above for the cause");
        }
        return combine(run, rep, resultLines.stream().map(ZeroShardingBench::fields).toList());
    }

    private static Map<String, String> fields(String resultLine) {
        Map<String, String> kv = new LinkedHashMap<>();
        for (String part : resultLine.substring("RESULT ".length()).trim().split(" ")) {
            int eq = part.indexOf('=');
            kv.put(part.substring(0, eq), part.substring(eq + 1));
        }
        return kv;
    }

    /**
     * One run's result from its JVMs' RESULT lines (one for threads, one per rank for processes): bytes per rank the
     * largest, steps the slowest rank's per step, the loss rank 0's (every rank's model is the same).
     */
    static Result combine(Run run, int rep, List<Map<String, String>> ranks) {
        long maxState = 0;
        long sumState = 0;
        long maxParam = 0;
        long maxGrad = 0;
        long maxModel = 0;
        long baseline = 0;
        long peak = 0;
        double offHeap = 0;
        double fit = 0;
        long[] step = null;
        long[] sync = null;
        for (Map<String, String> kv : ranks) {
            maxState = Math.max(maxState, Long.parseLong(kv.get("maxStateBytes")));
            sumState += Long.parseLong(kv.get("sumStateBytes"));
            maxParam = Math.max(maxParam, Long.parseLong(kv.get("maxParamBytes")));
            maxGrad = Math.max(maxGrad, Long.parseLong(kv.get("maxGradientBytes")));
            maxModel = Math.max(maxModel, Long.parseLong(kv.get("maxModelStateBytes")));
            baseline = Math.max(baseline, Long.parseLong(kv.get("baselineRss")));
            peak = Math.max(peak, Long.parseLong(kv.get("peakRss")));
            offHeap = Math.max(offHeap, Double.parseDouble(kv.get("offHeapPerWorker")));
            fit = Math.max(fit, Double.parseDouble(kv.get("fitSeconds")));
            step = slowest(step, kv.get("stepNanos"));
            sync = slowest(sync, kv.get("syncNanos"));
        }
        Map<String, String> first = ranks.getFirst();
        Waits waits = first.containsKey("gathers") ? new Waits(medianOfSlowest(ranks, "exposedSyncNanos") / 1e6,
                medianOfSlowest(ranks, "gathers"), medianOfSlowest(ranks, "exposedGatherNanos") / 1e6,
                medianOfSlowest(ranks, "gatherNanos") / 1e6, medianOfSlowest(ranks, "reduceScatters"),
                medianOfSlowest(ranks, "exposedReduceScatterNanos") / 1e6, medianOfSlowest(ranks, "reduceScatterNanos") / 1e6,
                ranks.stream().mapToDouble(kv -> Double.parseDouble(kv.get("minorFaultsPerStep"))).max().orElseThrow(),
                medianOfFastest(ranks, "gatherNanos") / 1e6, medianOfFastest(ranks, "reduceScatterNanos") / 1e6,
                medianOfSlowest(ranks, "commDelayNanos") / 1e6, medianOfSlowest(ranks, "commCpuNanos") / 1e6,
                medianOfSlowest(ranks, "hookWorkNanos") / 1e6)
                : Waits.UNKNOWN;
        return new Result(run, rep, Long.parseLong(first.get("params")), Long.parseLong(first.get("unshardedStateBytes")),
                maxState, sumState, maxParam, maxGrad, maxModel, baseline, peak, offHeap,
                quantileAfterStart(step, 0.5) / 1e6, quantileAfterStart(step, 0.9) / 1e6,
                quantileAfterStart(sync, 0.5) / 1e6, fit, Double.parseDouble(first.get("finalLoss")), waits);
    }

    /**
     * The median over the measured steps of {@code key}'s per-step values, each step's the largest over the ranks; NaN
     * when the RESULT lines have no such key (written before it existed).
     */
    private static double medianOfSlowest(List<Map<String, String>> ranks, String key) {
        return medianPerStep(ranks, key, Math::max);
    }

    /** As {@link #medianOfSlowest}, each step's value the least over the ranks. */
    private static double medianOfFastest(List<Map<String, String>> ranks, String key) {
        return medianPerStep(ranks, key, Math::min);
    }

    private static double medianPerStep(List<Map<String, String>> ranks, String key, LongBinaryOperator pick) {
        if (!ranks.getFirst().containsKey(key)) {
            return Double.NaN;
        }
        long[] v = null;
        for (Map<String, String> kv : ranks) {
            v = combineSteps(v, kv.get(key), pick);
        }
        return quantileAfterStart(v, 0.5);
    }

    /** Per step, the larger of {@code sofar} and the comma-separated {@code values}. */
    private static long[] slowest(long[] sofar, String values) {
        return combineSteps(sofar, values, Math::max);
    }

    /** Per step, {@code pick} of {@code sofar} and the comma-separated {@code values}. */
    private static long[] combineSteps(long[] sofar, String values, LongBinaryOperator pick) {
        long[] v = Arrays.stream(values.split(",")).mapToLong(Long::parseLong).toArray();
        if (sofar == null) {
            return v;
        }
        if (sofar.length != v.length) {
            throw new IllegalStateException("the ranks reported " + sofar.length + " and " + v.length + " steps; expected"
                    + " the same count (every rank takes every step); fix: see the ranks' output for the one that failed");
        }
        for (int i = 0; i < v.length; i++) {
            v[i] = pick.applyAsLong(v[i], sofar[i]);
        }
        return v;
    }

    /**
     * {@code --child MODEL PLACEMENT MODE N S THREADS HIDDEN BATCH STEPS WARMUP}: one measured run (threads), or one
     * rank of it (processes, under the launcher); prints one RESULT line.
     */
    private static void child(String[] args) throws Exception {
        Model model = Model.ofFlag(args[1]);
        Placement placement = Placement.ofFlag(args[2]);
        Mode mode = Mode.ofFlag(args[3]);
        int n = Integer.parseInt(args[4]);
        int shardGroup = Integer.parseInt(args[5]);
        int threads = Integer.parseInt(args[6]);
        int hidden = Integer.parseInt(args[7]);
        int batch = Integer.parseInt(args[8]);
        int steps = Integer.parseInt(args[9]);
        int warmup = Integer.parseInt(args[10]);
        Nd4jThreadLimit.set(threads);

        MultiLayerNetwork net = model.build(hidden);
        SyntheticData gen = new SyntheticData(model.features(), CLASSES, 1);
        List<DataSet> warm = gen.batches(5, warmup, batch * n, DataType.FLOAT);
        List<DataSet> train = gen.batches(6, steps * n, batch, DataType.FLOAT);
        DataSet heldOut = gen.batches(7, 1, model == Model.MLP ? 2048 : 256, DataType.FLOAT).getFirst();
        // The user's model trains a few steps itself first: DL4J's forward and backward code is
        // compiled, and the model's own workspaces, gradient view and full updater state exist
        // before the baseline, in every mode alike.
        for (DataSet d : warm) {
            net.fit(d);
        }
        net.getUpdater(true);
        ProcessGroup group = placement == Placement.PROCESSES ? ProcessGroup.fromEnvironment(GroupOptions.defaults()) : null;
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
        List<StepReport> reports = new ArrayList<>();
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(net).ompThreadsPerWorker(threads)
                .stepListener(r -> {
                    stepNanos.add(r.stepNanos());
                    syncNanos.add(r.syncNanos());
                    reports.add(r);
                });
        b = group == null ? b.workers(n) : b.group(group);
        if (mode.stage != null) {
            b.sharding(mode.stage);
        }
        if (mode == Mode.HSDP) {
            b.shardGroupSize(shardGroup);
        }
        List<WorkerMemory> memory;
        INDArray trained;
        long t0 = System.nanoTime();
        double fitSeconds;
        long faults;
        try (SymmemParallelWrapper w = b.build()) {
            long faultsBefore = minorFaults();
            w.fit(new NoPrefetchIterator(train));
            faults = minorFaults() - faultsBefore;
            fitSeconds = (System.nanoTime() - t0) / 1e9;
            memory = w.workerMemory();
            sampling.set(false);
            trained = w.gatherParameters(); // collective in group mode; the held-out loss is the trained model's
        }
        sampler.join();
        if (group != null) {
            group.close();
        }
        if (stepNanos.size() != steps || memory.size() != (group == null ? n : 1)) {
            throw new IllegalStateException("mode=" + mode.flag + " N=" + n + ": steps reported=" + stepNanos.size()
                    + " expected " + steps + "; ranks measured=" + memory.size() + "; fix: see the wrapper's log above");
        }
        net.setParams(trained);
        long maxState = memory.stream().mapToLong(WorkerMemory::updaterStateBytes).max().orElseThrow();
        long sumState = memory.stream().mapToLong(WorkerMemory::updaterStateBytes).sum();
        long maxParam = memory.stream().mapToLong(WorkerMemory::paramBytes).max().orElseThrow();
        long maxGrad = memory.stream().mapToLong(WorkerMemory::gradientBytes).max().orElseThrow();
        long maxModel = memory.stream().mapToLong(m -> m.paramBytes() + m.gradientBytes() + m.updaterStateBytes()).max()
                .orElseThrow();
        long unsharded = net.getUpdater().getStateViewArray().length() * 4L;
        double offHeap = (double) (peak.get() - baseline) / (group == null ? n : 1);
        System.out.println(String.format(Locale.ROOT, "RESULT params=%d unshardedStateBytes=%d maxStateBytes=%d"
                        + " sumStateBytes=%d maxParamBytes=%d maxGradientBytes=%d maxModelStateBytes=%d baselineRss=%d"
                        + " peakRss=%d offHeapPerWorker=%.0f fitSeconds=%.4f finalLoss=%.6f stepNanos=%s syncNanos=%s"
                        + " exposedSyncNanos=%s gathers=%s exposedGatherNanos=%s gatherNanos=%s reduceScatters=%s"
                        + " exposedReduceScatterNanos=%s reduceScatterNanos=%s minorFaultsPerStep=%.1f commDelayNanos=%s"
                        + " commCpuNanos=%s hookWorkNanos=%s",
                net.numParams(), unsharded, maxState, sumState, maxParam, maxGrad, maxModel, baseline, peak.get(), offHeap,
                fitSeconds, net.score(heldOut), join(stepNanos), join(syncNanos),
                joinOf(reports, StepReport::exposedSyncNanos), joinOf(reports, r -> r.collectives().gathers()),
                joinOf(reports, r -> r.collectives().exposedGatherNanos()), joinOf(reports, r -> r.collectives().gatherNanos()),
                joinOf(reports, r -> r.collectives().reduceScatters()),
                joinOf(reports, r -> r.collectives().exposedReduceScatterNanos()),
                joinOf(reports, r -> r.collectives().reduceScatterNanos()),
                faults / (double) steps / (group == null ? n : 1), joinOf(reports, r -> r.collectives().commDelayNanos()),
                joinOf(reports, r -> r.collectives().commCpuNanos()), joinOf(reports, r -> r.collectives().hookWorkNanos())));
        System.out.flush();
        System.exit(0); // ND4J leaves non-daemon threads behind
    }

    private static String join(List<Long> values) {
        return String.join(",", values.stream().map(String::valueOf).toList());
    }

    private static String joinOf(List<StepReport> reports, java.util.function.ToLongFunction<StepReport> f) {
        return join(reports.stream().map(f::applyAsLong).toList());
    }

    /** This process's minor page faults so far ({@code /proc/self/stat}'s minflt), or 0 where there is no such file. */
    private static long minorFaults() {
        try {
            String stat = Files.readString(Path.of("/proc/self/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(f[7]); // fields after the command: state(3) ppid pgrp session tty tpgid flags minflt(10)
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    /**
     * The q-quantile of a run's per-step values, leaving out the first {@link #SKIPPED_STEPS}: the sorted values'
     * element {@code floor(q · count)} (for q = 0.5 the upper median, as earlier versions reported).
     */
    static long quantileAfterStart(long[] perStep, double q) {
        long[] v = Arrays.copyOfRange(perStep, SKIPPED_STEPS, perStep.length);
        Arrays.sort(v);
        return v[Math.min(v.length - 1, (int) Math.floor(q * v.length))];
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    static void log(String format, Object... args) {
        System.err.println(String.format(Locale.ROOT, format, args));
    }
}
