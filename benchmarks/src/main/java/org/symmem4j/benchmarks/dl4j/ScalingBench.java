package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import jdk.jfr.Configuration;
import jdk.jfr.Recording;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.deeplearning4j.parallelism.ParallelWrapper;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.GradientTransfer;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.StepReport;
import org.symmem4j.dl4j.SymmemGradientsAccumulator;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.DataParallelExample;
import org.symmem4j.examples.SyntheticData;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientBuckets;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Data-parallel scaling on the CPU, with honest baselines measured in the same run: for each model
 * and worker count N (batch B per worker, Adam, fp32),
 * <ul>
 *   <li>{@code alone}: one worker's share trained alone — one model, batch B, one ND4J thread. N ×
 *       this is the ideal the workers could reach;</li>
 *   <li>{@code independent}: N models trained at once on N threads with no sync at all — what the
 *       machine gives N replicas (shared memory bandwidth, caches, clocks); the gap from here to
 *       symmem4j is sync and hand-off;</li>
 *   <li>{@code single}: one model on the merged batch of N·B at 1, 2, 4, ... ND4J threads — the best
 *       of these is the single-model baseline;</li>
 *   <li>{@code symmem}, {@code symmem-overlap}, {@code symmem-bf16}, {@code symmem-zero1}:
 *       SymmemParallelWrapper with N workers, one ND4J thread each (sync after backprop; overlapped
 *       with backprop; bf16 transfer; ZeRO stage 1, so no worker runs the updater on all parameters);</li>
 *   <li>{@code averaging}, {@code shared}: DL4J's ParallelWrapper, AVERAGING(1) and SHARED_GRADIENTS,
 *       N workers, one ND4J thread each;</li>
 *   <li>{@code pw-symmem}: DL4J's ParallelWrapper in CUSTOM mode with symmem4j's
 *       SymmemGradientsAccumulator (exact all-reduce inside ParallelWrapper's own trainers), N workers,
 *       one ND4J thread each;</li>
 *   <li>{@code allreduce}: the host all-reduce alone, N threads, the model's gradient bytes in the
 *       wrapper's buckets — what a step's sync costs without waiting for anybody.</li>
 * </ul>
 * Throughput runs are timed windows (warm-up, then a fixed time; examples trained ÷ wall time),
 * repeated round-robin over all configurations of a model; medians are reported. Every row goes to
 * the raw CSV as soon as it is measured. {@code --jfr CONFIG} records one configuration's first
 * timed window with JFR's profile settings.
 *
 * <pre>
 *   ScalingBench [--models mlp-small,mlp-medium,cnn] [--workers 1,2,4,8,16] [--compare-workers 8,16]
 *                [--single-threads 1,2,4,8,16] [--modes alone,independent,single,symmem,symmem-overlap,
 *                symmem-bf16,averaging,shared,pw-symmem,allreduce] [--batch 64] [--seconds 1.5] [--warmup-seconds 0.5]
 *                [--reps 3] [--raw FILE.csv] [--out FILE.md] [--jfr model:mode:workers --jfr-out FILE.jfr]
 *                [--commit C] [--command TEXT]
 * </pre>
 */
public final class ScalingBench {

    static final int FEATURES = 64;
    static final int CLASSES = 10;
    static final int IMAGE = 28;

    private static final ScheduledExecutorService WATCHDOG = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "scaling-bench-watchdog");
        t.setDaemon(true);
        return t;
    });

    private ScalingBench() {
    }

    /** The models: a small and a medium MLP, and a LeNet-style convolutional network. */
    enum Model {
        MLP_SMALL("mlp-small"), MLP_MEDIUM("mlp-medium"), CNN("cnn");

        final String flag;

        Model(String flag) {
            this.flag = flag;
        }

        static Model of(String flag) {
            for (Model m : values()) {
                if (m.flag.equals(flag)) {
                    return m;
                }
            }
            throw new IllegalArgumentException("--models: unknown model=" + flag + " (expected mlp-small, mlp-medium, cnn)");
        }

        MultiLayerNetwork build() {
            return switch (this) {
                case MLP_SMALL -> DataParallelExample.mlp(FEATURES, 256, CLASSES);
                case MLP_MEDIUM -> DataParallelExample.mlp(FEATURES, 1400, CLASSES);
                case CNN -> lenet();
            };
        }

        String describe(long params) {
            return switch (this) {
                case MLP_SMALL -> String.format(Locale.ROOT, "MLP 64-256-256-10, %,d parameters", params);
                case MLP_MEDIUM -> String.format(Locale.ROOT, "MLP 64-1400-1400-10, %,d parameters", params);
                case CNN -> String.format(Locale.ROOT, "CNN 28x28x1: conv5x5x20-maxpool-conv5x5x50-maxpool-dense500-10,"
                        + " %,d parameters", params);
            };
        }

        int features() {
            return this == CNN ? IMAGE * IMAGE : FEATURES;
        }
    }

    static MultiLayerNetwork lenet() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(12345).dataType(DataType.FLOAT).updater(new Adam(DataParallelExample.LEARNING_RATE))
                .weightInit(WeightInit.XAVIER)
                .list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(20).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(50).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(500).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutionalFlat(IMAGE, IMAGE, 1))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** What is measured. */
    enum Mode {
        ALONE("alone"), SINGLE_SETMAXTHREADS("single-setmaxthreads"), INDEPENDENT("independent"), SINGLE("single"),
        SYMMEM("symmem"), SYMMEM_OVERLAP("symmem-overlap"), SYMMEM_BF16("symmem-bf16"), SYMMEM_ZERO1("symmem-zero1"),
        AVERAGING("averaging"),
        SHARED("shared"), PW_CUSTOM_SYMMEM("pw-symmem"), ALLREDUCE("allreduce");

        final String flag;

        Mode(String flag) {
            this.flag = flag;
        }

        static Mode of(String flag) {
            for (Mode m : values()) {
                if (m.flag.equals(flag)) {
                    return m;
                }
            }
            throw new IllegalArgumentException("--modes: unknown mode=" + flag);
        }
    }

    @Command(name = "ScalingBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "DL4J data-parallel scaling: each model alone, the single model at several ND4J thread counts,"
                    + " independent replicas, symmem4j's modes and ParallelWrapper's, over worker counts; raw CSV and a"
                    + " markdown report (or the report alone from an earlier CSV with --render-from).")
    static final class Flags {
        @Option(names = "--models", paramLabel = "MODEL", split = ",", description = "models: mlp-small, mlp-medium, cnn")
        List<String> models = new ArrayList<>(List.of("mlp-small", "mlp-medium", "cnn"));
        @Option(names = "--workers", paramLabel = "N", split = ",",
                description = "worker counts (default: powers of two up to the cores, and the core count)")
        List<Integer> workers = Options.powersOfTwoUpTo(Runtime.getRuntime().availableProcessors());
        @Option(names = "--compare-workers", paramLabel = "N", split = ",",
                description = "worker counts at which ParallelWrapper and the other baselines run (default: the largest two of --workers' default)")
        List<Integer> compareWorkers;
        @Option(names = "--single-threads", paramLabel = "T", split = ",",
                description = "ND4J thread counts of the single model (default: powers of two up to the cores, and the core count)")
        List<Integer> singleThreads = Options.powersOfTwoUpTo(Runtime.getRuntime().availableProcessors());
        @Option(names = "--modes", paramLabel = "MODE", split = ",", description = "modes (default: all): alone, single-setmaxthreads, independent, single, symmem, symmem-overlap, symmem-bf16, symmem-zero1, averaging, shared, pw-symmem, allreduce")
        List<String> modes;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 64;
        @Option(names = "--seconds", paramLabel = "S", description = "timed seconds per cell")
        double seconds = 1.5;
        @Option(names = "--warmup-seconds", paramLabel = "W", description = "untimed seconds per cell first")
        double warmupSeconds = 0.5;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions (medians are reported)")
        int reps = 3;
        @Option(names = "--raw", paramLabel = "FILE", description = "write every measurement as CSV to FILE (default: none)")
        Path raw;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--jfr", paramLabel = "model:mode:workers", description = "record a JFR profile of this cell (default: none)")
        String jfr;
        @Option(names = "--jfr-out", paramLabel = "FILE", description = "where the JFR recording goes")
        Path jfrOut;
        @Option(names = "--commit", paramLabel = "C", description = "commit named in the report")
        String commit = "unknown";
        @Option(names = "--command", paramLabel = "TEXT", description = "command line named in the report (default: this one)")
        String command;
        @Option(names = "--label", paramLabel = "L", description = "label of this run in the CSV")
        String label = "run";
        @Option(names = "--render-from", paramLabel = "FILE.csv", description = "only render the report from an earlier --raw CSV (default: measure)")
        Path renderFrom;
        @Option(names = "--machine", paramLabel = "TEXT", description = "machine named in a rendered report")
        String machine;
    }

    record Options(List<Model> models, List<Integer> workers, List<Integer> compareWorkers, List<Integer> singleThreads,
                   List<Mode> modes, int batch, double seconds, double warmupSeconds, int reps, Path raw, Path out,
                   String jfr, Path jfrOut, String commit, String command, String label, Path renderFrom, String machine) {

        static Options parse(String[] args) {
            return Cli.parse(new Flags(), args, f -> build(f, args));
        }

        private static Options build(Flags f, String[] args) {
            List<Model> models = f.models.stream().map(String::trim).map(Model::of).toList();
            List<Integer> workers = positives("--workers", f.workers);
            List<Integer> compare = f.compareWorkers != null ? positives("--compare-workers", f.compareWorkers)
                    : workers.size() >= 2 ? workers.subList(workers.size() - 2, workers.size()) : workers;
            List<Integer> threads = positives("--single-threads", f.singleThreads);
            List<Mode> modes = f.modes == null ? List.of(Mode.values())
                    : f.modes.stream().map(String::trim).map(Mode::of).toList();
            String command = f.command != null ? f.command
                    : "java " + ScalingBench.class.getName() + " " + String.join(" ", args);
            if (f.seconds <= 0 || f.warmupSeconds < 0) {
                throw new IllegalArgumentException("--seconds=" + f.seconds + " --warmup-seconds=" + f.warmupSeconds
                        + " expected seconds > 0 and warm-up >= 0");
            }
            return new Options(models, workers, compare, threads, modes, Cli.positive("--batch", f.batch), f.seconds,
                    f.warmupSeconds, Cli.positive("--reps", f.reps), f.raw, f.out, f.jfr, f.jfrOut, f.commit, command,
                    f.label, f.renderFrom, f.machine);
        }

        private static List<Integer> positives(String flag, List<Integer> values) {
            for (int x : values) {
                Cli.positive(flag, x);
            }
            return List.copyOf(values);
        }

        private static List<Integer> powersOfTwoUpTo(int n) {
            List<Integer> out = new ArrayList<>();
            for (int p = 1; p <= n; p *= 2) {
                out.add(p);
            }
            if (out.getLast() != n) {
                out.add(n);
            }
            return out;
        }

        boolean has(Mode m) {
            return modes.contains(m);
        }
    }

    /** One configuration: a mode at N workers (or batch N·B) with {@code threads} ND4J threads. */
    record Config(Model model, Mode mode, int workers, int threads) {
        String key() {
            return model.flag + ":" + mode.flag + ":" + workers + (mode == Mode.SINGLE ? "x" + threads : "");
        }
    }

    /** One measurement. Step fields are means over the window's steps (symmem4j modes only, else NaN). */
    record Row(Config config, int rep, long examples, double seconds, long steps, double stepMillis, double syncMillis,
               double exposedSyncMillis, double allReduceMillis) {
        double examplesPerSecond() {
            return examples / seconds;
        }
    }

    static final String CSV_HEADER = "label,model,mode,workers,threads,rep,examples,seconds,examples_per_s,steps,step_ms,sync_ms,"
            + "exposed_sync_ms,allreduce_ms,omp_num_threads,cores";

    public static void main(String[] args) throws Exception {
        Options o = Options.parse(args);
        if (o.renderFrom() != null) {
            renderFrom(o);
            return;
        }
        int cores = Runtime.getRuntime().availableProcessors();
        log("scaling bench: cores=%d models=%s workers=%s compare=%s threads=%s batch=%d window=%.2fs warm-up=%.2fs reps=%d",
                cores, o.models().stream().map(m -> m.flag).toList(), o.workers(), o.compareWorkers(), o.singleThreads(),
                o.batch(), o.seconds(), o.warmupSeconds(), o.reps());
        log("ND4J at start: maxThreads=%d maxMasterThreads=%d blas=%d OMP_NUM_THREADS=%s",
                Nd4j.getEnvironment().maxThreads(), Nd4j.getEnvironment().maxMasterThreads(),
                Nd4j.factory().blas().getMaxThreads(), System.getenv("OMP_NUM_THREADS"));
        PrintWriter raw = null;
        if (o.raw() != null) {
            boolean fresh = !Files.exists(o.raw());
            raw = new PrintWriter(Files.newBufferedWriter(o.raw(), StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND), true);
            if (fresh) {
                raw.println(CSV_HEADER);
            }
        }
        List<Row> rows = new ArrayList<>();
        Map<Model, Long> params = new java.util.EnumMap<>(Model.class);
        for (Model model : o.models()) {
            MultiLayerNetwork probe = model.build();
            params.put(model, probe.numParams());
            log("model %s: %s", model.flag, model.describe(probe.numParams()));
            Workload work = new Workload(model, o);
            List<Config> plan = plan(o, model);
            log("plan for %s: %d configurations x %d reps: %s", model.flag, plan.size(), o.reps(),
                    plan.stream().map(Config::key).toList());
            if (o.reps() < 3) {
                // with fewer than 3 repetitions no median shields the first run of a code path from the JIT's
                // warm-up: one untimed pass over every mode first
                for (Config c : plan) {
                    if (c.mode() != Mode.ALLREDUCE && c.workers() == plan.stream().mapToInt(Config::workers).max().orElse(1)) {
                        measure(c, work, o, 0, Math.min(o.warmupSeconds(), 0.5), 0, false);
                    }
                }
            }
            for (int rep = 1; rep <= o.reps(); rep++) {
                for (Config c : plan) {
                    boolean jfr = rep == 1 && c.key().equals(o.jfr());
                    Row r = measure(c, work, o, rep, o.warmupSeconds(), o.seconds(), jfr);
                    rows.add(r);
                    log("%-34s rep %d: %10.0f examples/s%s", c.key(), rep, r.examplesPerSecond(),
                            Double.isNaN(r.stepMillis()) ? (Double.isNaN(r.allReduceMillis()) ? ""
                                    : String.format(Locale.ROOT, "  all-reduce %.3f ms", r.allReduceMillis()))
                                    : String.format(Locale.ROOT, "  step %.2f ms, sync %.2f ms (exposed %.2f ms)",
                                    r.stepMillis(), r.syncMillis(), r.exposedSyncMillis()));
                    if (raw != null) {
                        raw.println(String.format(Locale.ROOT, "%s,%s,%s,%d,%d,%d,%d,%.4f,%.1f,%d,%.4f,%.4f,%.4f,%.4f,%s,%d",
                                o.label(), c.model().flag, c.mode().flag, c.workers(), c.threads(), rep, r.examples(), r.seconds(),
                                r.examplesPerSecond(), r.steps(), r.stepMillis(), r.syncMillis(), r.exposedSyncMillis(),
                                r.allReduceMillis(), System.getenv("OMP_NUM_THREADS"), cores));
                    }
                }
            }
        }
        if (raw != null) {
            raw.close();
        }
        if (o.out() != null) {
            String report = new ScalingReport(o, rows, params, MachineInfo.cpuModel() + ", " + cores + " cores visible to the JVM"
                    + ScalingReport.cpuTopology() + ", " + MachineInfo.ramGiB() + " RAM").render();
            Files.writeString(o.out(), report, StandardCharsets.UTF_8);
            log("wrote %s", o.out());
        }
        System.exit(0); // ParallelWrapper leaves non-daemon threads behind
    }

    /** Renders the report of the rows labelled {@code --label} in a raw CSV written by an earlier run (on another machine). */
    static void renderFrom(Options o) throws IOException {
        List<String> lines = Files.readAllLines(o.renderFrom());
        if (lines.isEmpty() || !lines.getFirst().equals(CSV_HEADER)) {
            throw new IllegalArgumentException(o.renderFrom() + ": expected the header " + CSV_HEADER);
        }
        List<Row> rows = new ArrayList<>();
        Map<Model, Long> params = new java.util.EnumMap<>(Model.class);
        for (String line : lines.subList(1, lines.size())) {
            String[] f = line.split(",", -1);
            if (!f[0].equals(o.label())) {
                continue;
            }
            Model model = Model.of(f[1]);
            params.computeIfAbsent(model, m -> m.build().numParams());
            Config c = new Config(model, Mode.of(f[2]), Integer.parseInt(f[3]), Integer.parseInt(f[4]));
            rows.add(new Row(c, Integer.parseInt(f[5]), Long.parseLong(f[6]), Double.parseDouble(f[7]), Long.parseLong(f[9]),
                    Double.parseDouble(f[10]), Double.parseDouble(f[11]), Double.parseDouble(f[12]), Double.parseDouble(f[13])));
        }
        if (rows.isEmpty()) {
            throw new IllegalArgumentException(o.renderFrom() + " has no rows labelled " + o.label());
        }
        String report = new ScalingReport(o, rows, params, o.machine() == null ? "(not given)" : o.machine()).render();
        if (o.out() != null) {
            Files.writeString(o.out(), report, StandardCharsets.UTF_8);
            log("wrote %s from %d rows", o.out(), rows.size());
        } else {
            System.out.print(report);
        }
    }

    /** The configurations of one model, in the order they run within a repetition. */
    static List<Config> plan(Options o, Model m) {
        List<Config> plan = new ArrayList<>();
        if (o.has(Mode.ALONE)) {
            plan.add(new Config(m, Mode.ALONE, 1, 1));
        }
        if (o.has(Mode.SINGLE_SETMAXTHREADS)) {
            plan.add(new Config(m, Mode.SINGLE_SETMAXTHREADS, 1, 1));
        }
        for (int n : o.workers()) {
            boolean compare = o.compareWorkers().contains(n);
            if (o.has(Mode.SINGLE) && n > 1) {
                // the full thread sweep at the largest N, where targets are judged; elsewhere 1 thread and N threads
                boolean sweep = n == o.workers().getLast();
                for (int t : o.singleThreads()) {
                    if (sweep || t == 1 || t == n) {
                        plan.add(new Config(m, Mode.SINGLE, n, t));
                    }
                }
            }
            if (o.has(Mode.INDEPENDENT) && compare && n > 1) {
                plan.add(new Config(m, Mode.INDEPENDENT, n, 1));
            }
            if (o.has(Mode.SYMMEM)) {
                plan.add(new Config(m, Mode.SYMMEM, n, 1));
            }
            if (o.has(Mode.SYMMEM_OVERLAP) && compare && n > 1) {
                plan.add(new Config(m, Mode.SYMMEM_OVERLAP, n, 1));
            }
            if (o.has(Mode.SYMMEM_BF16) && compare && n > 1 && n == o.compareWorkers().getLast()) {
                plan.add(new Config(m, Mode.SYMMEM_BF16, n, 1));
            }
            if (o.has(Mode.SYMMEM_ZERO1) && compare && n > 1 && n == o.compareWorkers().getLast()) {
                plan.add(new Config(m, Mode.SYMMEM_ZERO1, n, 1));
            }
            if (o.has(Mode.AVERAGING) && compare && n > 1) {
                plan.add(new Config(m, Mode.AVERAGING, n, 1));
            }
            if (o.has(Mode.SHARED) && compare && n > 1) {
                plan.add(new Config(m, Mode.SHARED, n, 1));
            }
            if (o.has(Mode.PW_CUSTOM_SYMMEM) && compare && n > 1) {
                plan.add(new Config(m, Mode.PW_CUSTOM_SYMMEM, n, 1));
            }
            if (o.has(Mode.ALLREDUCE) && n > 1 && compare) {
                plan.add(new Config(m, Mode.ALLREDUCE, n, 1));
            }
        }
        return plan;
    }

    /** The data of one model: distinct batches of B, cycled; the same batches merged N at a time for the single model. */
    static final class Workload {
        final List<DataSet> pool;
        final Map<Integer, List<DataSet>> merged = new java.util.HashMap<>();
        final long[] layerStarts;
        final long params;

        Workload(Model model, Options o) {
            int distinct = 32;
            SyntheticData data = new SyntheticData(model.features(), CLASSES, 1);
            this.pool = data.batches(2, distinct, o.batch(), DataType.FLOAT);
            for (int n : o.workers()) {
                List<DataSet> m = new ArrayList<>();
                for (int s = 0; s < Math.max(1, distinct / n); s++) {
                    m.add(DataSet.merge(pool.subList((s * n) % distinct, (s * n) % distinct + Math.min(n, distinct))));
                }
                merged.put(n, m);
            }
            MultiLayerNetwork net = model.build();
            this.params = net.numParams();
            List<Long> starts = new ArrayList<>();
            long at = 0;
            for (org.deeplearning4j.nn.api.Layer l : net.getLayers()) {
                starts.add(at);
                at += l.numParams();
            }
            this.layerStarts = starts.stream().mapToLong(Long::longValue).toArray();
        }
    }

    /** Hands out batches until the deadline, ending only at a step boundary ({@code perStep} batches). */
    static final class TimedIterator implements DataSetIterator {
        private final List<DataSet> batches;
        private final int perStep;
        private final long deadline;
        /** The most batches served (a count rather than a deadline: processes in lock step must agree on it). */
        private final long limit;
        private int cursor;
        long examples;

        TimedIterator(List<DataSet> batches, int perStep, long deadlineNanos) {
            this(batches, perStep, deadlineNanos, Long.MAX_VALUE);
        }

        private TimedIterator(List<DataSet> batches, int perStep, long deadlineNanos, long limit) {
            this.batches = batches;
            this.perStep = perStep;
            this.deadline = deadlineNanos;
            this.limit = limit;
        }

        /** Exactly {@code count} batches, cycling through {@code batches}, whatever the time. */
        static TimedIterator counted(List<DataSet> batches, long count) {
            return new TimedIterator(batches, 1, Long.MAX_VALUE, count);
        }

        @Override
        public boolean hasNext() {
            if (limit != Long.MAX_VALUE) {
                return cursor < limit;
            }
            return cursor % perStep != 0 || System.nanoTime() - deadline < 0;
        }

        @Override
        public DataSet next() {
            DataSet d = batches.get(cursor++ % batches.size());
            examples += d.numExamples();
            return d;
        }

        @Override
        public DataSet next(int num) {
            throw new UnsupportedOperationException("next(num)");
        }

        @Override
        public int inputColumns() {
            return (int) batches.getFirst().getFeatures().size(1);
        }

        @Override
        public int totalOutcomes() {
            return (int) batches.getFirst().getLabels().size(1);
        }

        @Override
        public boolean resetSupported() {
            return false;
        }

        @Override
        public boolean asyncSupported() {
            return false;
        }

        @Override
        public void reset() {
            throw new UnsupportedOperationException("reset");
        }

        @Override
        public int batch() {
            return batches.getFirst().numExamples();
        }

        @Override
        public void setPreProcessor(DataSetPreProcessor p) {
            throw new UnsupportedOperationException("setPreProcessor");
        }

        @Override
        public DataSetPreProcessor getPreProcessor() {
            return null;
        }

        @Override
        public List<String> getLabels() {
            return null;
        }
    }

    /** Sums symmem4j's step reports over a window. */
    static final class StepTotals implements SymmemParallelWrapper.StepListener {
        long steps;
        long stepNanos;
        long syncNanos;
        long exposedNanos;

        @Override
        public void onStep(StepReport r) {
            steps++;
            stepNanos += r.stepNanos();
            syncNanos += r.syncNanos();
            exposedNanos += r.exposedSyncNanos();
        }

        void reset() {
            steps = stepNanos = syncNanos = exposedNanos = 0;
        }
    }

    /** One configuration's window ({@code seconds} = 0: warm-up only). */
    static Row measure(Config c, Workload w, Options o, int rep, double warmup, double seconds, boolean jfr) throws Exception {
        System.gc();
        return guarded(c.key() + " rep " + rep, Duration.ofSeconds((long) (60 + 4 * (warmup + seconds))), () -> {
            try {
                return switch (c.mode()) {
                    case ALONE, SINGLE, SINGLE_SETMAXTHREADS -> single(c, w, warmup, seconds, rep, jfr, o);
                    case INDEPENDENT -> independent(c, w, warmup, seconds, rep, jfr, o);
                    case SYMMEM, SYMMEM_OVERLAP, SYMMEM_BF16, SYMMEM_ZERO1 -> symmem(c, w, warmup, seconds, rep, jfr, o);
                    case AVERAGING, SHARED, PW_CUSTOM_SYMMEM -> parallelWrapper(c, w, warmup, seconds, rep, jfr, o);
                    case ALLREDUCE -> allReduce(c, w, rep, seconds > 0 ? 60 : 5);
                };
            } catch (Exception e) {
                throw new IllegalStateException(c.key() + " failed: " + e, e);
            }
        });
    }

    private static Recording startJfr(boolean jfr) throws Exception {
        if (!jfr) {
            return null;
        }
        Recording r = new Recording(Configuration.getConfiguration("profile"));
        r.start();
        return r;
    }

    private static void stopJfr(Recording r, Options o) throws IOException {
        if (r != null) {
            r.stop();
            r.dump(o.jfrOut() != null ? o.jfrOut() : Path.of("scaling-bench.jfr"));
            r.close();
            log("JFR recording written to %s", o.jfrOut());
        }
    }

    static Row single(Config c, Workload w, double warmup, double seconds, int rep, boolean jfr, Options o) throws Exception {
        if (c.mode() == Mode.SINGLE_SETMAXTHREADS) {
            // what the wrapper used to call: the native setter is empty in this ND4J, so this shows its (lack of) effect
            Nd4j.getEnvironment().setMaxMasterThreads(Nd4j.getEnvironment().maxThreads());
            Nd4j.getEnvironment().setMaxThreads(1);
            Nd4j.factory().blas().setMaxThreads(1);
        } else {
            Nd4jThreadLimit.set(c.threads());
        }
        MultiLayerNetwork net = c.model().build();
        List<DataSet> data = c.mode() == Mode.SINGLE ? w.merged.get(c.workers()) : w.pool;
        net.fit(new TimedIterator(data, 1, System.nanoTime() + (long) (warmup * 1e9)));
        if (seconds == 0) {
            return null;
        }
        Recording r = startJfr(jfr); // before the window: starting a recording takes a while
        TimedIterator it = new TimedIterator(data, 1, System.nanoTime() + (long) (seconds * 1e9));
        long t0 = System.nanoTime();
        net.fit(it);
        long t = System.nanoTime() - t0;
        stopJfr(r, o);
        return new Row(c, rep, it.examples, t / 1e9, 0, Double.NaN, Double.NaN, Double.NaN, Double.NaN);
    }

    static Row independent(Config c, Workload w, double warmup, double seconds, int rep, boolean jfr, Options o)
            throws Exception {
        Recording r = startJfr(jfr); // spans the warm-up too: starting a recording takes a while
        IndependentReplicas.Result result = IndependentReplicas.measure(c.workers(), i -> c.model().build(), w.pool, 1,
                warmup, seconds);
        stopJfr(r, o);
        return result == null ? null
                : new Row(c, rep, result.examples(), result.seconds(), 0, Double.NaN, Double.NaN, Double.NaN, Double.NaN);
    }

    static Row symmem(Config c, Workload w, double warmup, double seconds, int rep, boolean jfr, Options o) throws Exception {
        MultiLayerNetwork net = c.model().build();
        StepTotals totals = new StepTotals();
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(net).workers(c.workers()).ompThreadsPerWorker(1)
                .stepListener(totals);
        if (c.mode() == Mode.SYMMEM_OVERLAP) {
            b.overlapSyncWithBackprop(true);
        } else if (c.mode() == Mode.SYMMEM_BF16) {
            b.gradientTransfer(GradientTransfer.BFLOAT16);
        } else if (c.mode() == Mode.SYMMEM_ZERO1) {
            b.sharding(org.symmem4j.dl4j.ZeroStage.OPTIMIZER_STATE); // each worker runs Adam on its 1/N only
        }
        try (SymmemParallelWrapper wrapper = b.build()) {
            // the warm-up fit also starts the workers: the timed window is steady-state training
            wrapper.fit(new TimedIterator(w.pool, c.workers(), System.nanoTime() + (long) (Math.max(warmup, 0.05) * 1e9)));
            if (seconds == 0) {
                return null;
            }
            totals.reset();
            Recording r = startJfr(jfr);
            TimedIterator it = new TimedIterator(w.pool, c.workers(), System.nanoTime() + (long) (seconds * 1e9));
            long t0 = System.nanoTime();
            wrapper.fit(it);
            long t = System.nanoTime() - t0;
            stopJfr(r, o);
            double s = Math.max(1, totals.steps);
            return new Row(c, rep, it.examples, t / 1e9, totals.steps, totals.stepNanos / 1e6 / s, totals.syncNanos / 1e6 / s,
                    totals.exposedNanos / 1e6 / s, Double.NaN);
        }
    }

    static Row parallelWrapper(Config c, Workload w, double warmup, double seconds, int rep, boolean jfr, Options o)
            throws Exception {
        Nd4jThreadLimit.set(1);
        // a fresh ParallelWrapper per fit: a second fit of one deadlocks in SHARED_GRADIENTS mode
        for (double window : seconds == 0 ? new double[] {warmup} : new double[] {warmup, seconds}) {
            MultiLayerNetwork net = c.model().build();
            ParallelWrapper.Builder<MultiLayerNetwork> b = new ParallelWrapper.Builder<>(net);
            b.workers(c.workers()).prefetchBuffer(0).reportScoreAfterAveraging(false);
            if (c.mode() == Mode.AVERAGING) {
                b.trainingMode(ParallelWrapper.TrainingMode.AVERAGING).averagingFrequency(1);
            } else if (c.mode() == Mode.PW_CUSTOM_SYMMEM) {
                b.trainingMode(ParallelWrapper.TrainingMode.CUSTOM).gradientsAccumulator(SymmemGradientsAccumulator.attach(net));
            } else {
                b.trainingMode(ParallelWrapper.TrainingMode.SHARED_GRADIENTS);
            }
            ParallelWrapper pw = b.build();
            try {
                boolean timed = window == seconds && seconds > 0;
                Recording r = startJfr(jfr && timed);
                TimedIterator it = new TimedIterator(w.pool, c.workers(), System.nanoTime() + (long) (window * 1e9));
                long t0 = System.nanoTime();
                pw.fit(it);
                long t = System.nanoTime() - t0;
                stopJfr(r, o);
                if (timed) {
                    return new Row(c, rep, it.examples, t / 1e9, 0, Double.NaN, Double.NaN, Double.NaN, Double.NaN);
                }
            } finally {
                pw.shutdown();
            }
        }
        return null;
    }

    /**
     * The host all-reduce alone: N threads, the model's gradient in the buckets the wrapper cuts
     * (layer boundaries, 4 MiB at most, 256 KiB at least), SUM in place, the calibrated policy;
     * median per all-reduce of the whole gradient, rank 0's clock.
     */
    static Row allReduce(Config c, Workload w, int rep, int iterations) {
        int n = c.workers();
        long count = w.params;
        List<GradientBuckets.Bucket> buckets = GradientBuckets.splitAtBoundaries(count, DType.FLOAT32, 4L << 20, 256L << 10,
                w.layerStarts);
        List<double[]> perRank = InJvmWorld.runOnEveryRank(n, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    try (Communicator comm = Communicator.create(group);
                         SymmetricMemory mem = SymmetricMemory.allocate(group, 4 * count)) {
                        for (long i = 0; i < count; i++) {
                            mem.local().setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i, (i % 97) * 1e-3f);
                        }
                        GradientSynchronizer sync = new GradientSynchronizer(comm, mem, 0, DType.FLOAT32, buckets,
                                AlgorithmPolicy.calibrated(), new SyncMetrics("host-in-jvm"));
                        double[] ms = new double[iterations];
                        for (int i = -10; i < iterations; i++) {
                            comm.barrier();
                            long t0 = System.nanoTime();
                            sync.allReduce(ReduceOp.SUM);
                            if (i >= 0) {
                                ms[i] = (System.nanoTime() - t0) / 1e6;
                            }
                        }
                        return ms;
                    }
                });
        double[] ms = perRank.getFirst().clone();
        Arrays.sort(ms);
        return new Row(c, rep, 0, 1, 0, Double.NaN, Double.NaN, Double.NaN, ms[ms.length / 2]);
    }

    static <T> T guarded(String what, Duration limit, Supplier<T> body) {
        ScheduledFuture<?> alarm = WATCHDOG.schedule(() -> {
            StringBuilder dump = new StringBuilder("scaling bench: " + what + " still running after " + limit
                    + " (deadlock?); thread dump:\n");
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                dump.append('"').append(e.getKey().getName()).append("\" ").append(e.getKey().getState()).append('\n');
                for (StackTraceElement f : e.getValue()) {
                    dump.append("    at ").append(f).append('\n');
                }
            }
            System.err.print(dump);
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, limit.toMillis(), TimeUnit.MILLISECONDS);
        try {
            return body.get();
        } finally {
            alarm.cancel(false);
        }
    }

    static void log(String format, Object... args) {
        System.err.println(String.format(Locale.ROOT, format, args));
        System.err.flush();
    }
}
