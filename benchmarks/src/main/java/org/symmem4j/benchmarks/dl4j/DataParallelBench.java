package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.parallelism.ParallelWrapper;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.benchmarks.RawCsv;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.StepReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.DataParallelExample;
import org.symmem4j.examples.ListIterator;
import org.symmem4j.examples.SyntheticData;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Data-parallel DL4J training on the CPU, four ways, same model, same data, same number of
 * optimizer steps, in one run: a single model's {@code fit()} on merged batches of N·B examples;
 * DL4J's {@code ParallelWrapper} in {@code AVERAGING} mode with {@code averagingFrequency(1)} and in
 * {@code SHARED_GRADIENTS} mode; and symmem4j's {@link SymmemParallelWrapper}. N workers, batch B
 * per worker. Reports training examples per second of {@code fit()} wall time (median of
 * repetitions, run round-robin over the modes), the trained model's loss on a held-out set, and
 * symmem4j's share of step time spent in gradient sync. Writes a markdown report (see
 * {@link DataParallelReport}); progress goes to stderr.
 *
 * <pre>
 *   DataParallelBench [--workers N] [--batch B] [--hidden H] [--steps S] [--warmup-steps W]
 *                     [--warmup-round-steps W0] [--reps R] [--prefetch P] [--distinct-steps D]
 *                     [--held-out E] [--modes single,averaging,shared,symmem] [--run-timeout-seconds T]
 *                     [--out report.md] [--raw runs.csv] [--commit C] [--command "how it was started"]
 * </pre>
 * {@code --raw} writes one CSV row per measured run as it ends: the untrained model's loss, the single
 * model's thread sweep and every timed repetition.
 */
public final class DataParallelBench {

    /** The input width and classes of the generated data (as in {@code DataParallelExample}). */
    static final int FEATURES = 64;
    static final int CLASSES = 10;

    private static final ScheduledExecutorService WATCHDOG = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "data-parallel-bench-watchdog");
        t.setDaemon(true);
        return t;
    });

    private DataParallelBench() {
    }

    /** The training modes compared, in the order they run within a repetition. */
    enum Mode {
        SINGLE("single", "single model fit(), fastest ND4J threads"),
        AVERAGING("averaging", "ParallelWrapper AVERAGING(1)"),
        SHARED_GRADIENTS("shared", "ParallelWrapper SHARED_GRADIENTS"),
        SYMMEM("symmem", "symmem4j SymmemParallelWrapper");

        final String flag;
        final String label;

        Mode(String flag, String label) {
            this.flag = flag;
            this.label = label;
        }

        static Mode ofFlag(String flag) {
            for (Mode m : values()) {
                if (m.flag.equals(flag)) {
                    return m;
                }
            }
            throw new IllegalArgumentException("--modes: unknown mode=" + flag + " (expected a comma-separated subset of"
                    + " single,averaging,shared,symmem)");
        }
    }

    /** 1, 2, 4, ... and the core count. */
    static List<Integer> threadSweep(int cores) {
        List<Integer> out = new ArrayList<>();
        for (int t = 1; t <= cores; t *= 2) {
            out.add(t);
        }
        if (out.getLast() != cores) {
            out.add(cores);
        }
        return out;
    }

    @Command(name = "DataParallelBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Single-model fit(), ParallelWrapper AVERAGING(1) and SHARED_GRADIENTS, and symmem4j on the"
                    + " same model, data and steps; a markdown report with the baselines measured in the same run.")
    static final class Flags {
        @Option(names = "--workers", paramLabel = "N", description = "parallel workers, at least 2 (default: the number of cores, at least 2)")
        int workers = Math.max(2, Runtime.getRuntime().availableProcessors());
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 64;
        @Option(names = "--hidden", paramLabel = "H", description = "width of the MLP's hidden layers")
        int hidden = 256;
        @Option(names = "--steps", paramLabel = "S", description = "timed steps per mode and repetition")
        int steps = 1200;
        @Option(names = "--warmup-steps", paramLabel = "W", description = "untimed steps before each timed run")
        int warmupSteps = 30;
        @Option(names = "--warmup-round-steps", paramLabel = "W0", description = "steps of the warm-up round every mode trains first")
        int warmupRoundSteps = 300;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions (medians are reported)")
        int reps = 3;
        @Option(names = "--prefetch", paramLabel = "P", description = "prefetch buffer, 0: no prefetch thread")
        int prefetch = 0;
        @Option(names = "--distinct-steps", paramLabel = "D", description = "distinct batches generated (at most --steps)")
        int distinctSteps = 500;
        @Option(names = "--held-out", paramLabel = "E", description = "held-out examples for the loss")
        int heldOut = 8192;
        @Option(names = "--modes", paramLabel = "MODE[,MODE...]", description = "modes to run: single, averaging, shared, symmem")
        String modes = "single,averaging,shared,symmem";
        @Option(names = "--run-timeout-seconds", paramLabel = "T", description = "a run taking longer fails")
        int runTimeoutSeconds = 600;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "write every measured run as a CSV row to FILE (appended under"
                + " the same header; default: none)")
        Path raw;
        @Option(names = "--commit", paramLabel = "C", description = "commit named in the report")
        String commit = "unknown";
        @Option(names = "--command", paramLabel = "TEXT", description = "command line named in the report (default: this one)")
        String command;
    }

    /** The command line, validated; and the single model's thread sweep, filled in by the run. */
    record Options(int workers, int batch, int hidden, int steps, int warmupSteps, int warmupRoundSteps, int reps,
                   int prefetch, int distinctSteps, int heldOut, List<Mode> modes, Duration runTimeout, Path out,
                   Path raw, String commit, String command, SingleThreads single) {

        /** ND4J threads for the single model: the core count until the sweep picked the fastest. */
        static final class SingleThreads {
            int current;
            int best;
            final List<double[]> sweep = new ArrayList<>();
        }

        static Options parse(String[] args) {
            return Cli.parse(new Flags(), args, f -> build(f, args));
        }

        private static Options build(Flags f, String[] args) {
            int cores = Runtime.getRuntime().availableProcessors();
            int workers = f.workers;
            int batch = Cli.positive("--batch", f.batch);
            int hidden = Cli.positive("--hidden", f.hidden);
            int steps = Cli.positive("--steps", f.steps);
            int warmupSteps = Cli.positive("--warmup-steps", f.warmupSteps);
            int warmupRoundSteps = Cli.positive("--warmup-round-steps", f.warmupRoundSteps);
            int reps = Cli.positive("--reps", f.reps);
            int prefetch = f.prefetch;
            int distinctSteps = Cli.positive("--distinct-steps", f.distinctSteps);
            int heldOut = Cli.positive("--held-out", f.heldOut);
            List<Mode> modes = Arrays.stream(f.modes.split(",")).map(String::trim).map(Mode::ofFlag).distinct().sorted()
                    .toList();
            long timeoutSeconds = Cli.positive("--run-timeout-seconds", f.runTimeoutSeconds);
            Path out = f.out;
            String commit = f.commit;
            String command = f.command;
            if (workers < 2) {
                throw new IllegalArgumentException("--workers=" + workers + " must be >= 2 (ParallelWrapper.Builder"
                        + " rejects fewer; default: the number of cores, at least 2)");
            }
            if (prefetch < 0) {
                throw new IllegalArgumentException("--prefetch=" + prefetch + " must be >= 0 (0: no prefetch thread)");
            }
            if (command == null) {
                command = "java " + DataParallelBench.class.getName() + (args.length == 0 ? "" : " " + String.join(" ", args));
            }
            SingleThreads single = new SingleThreads();
            single.current = cores;
            single.best = cores;
            return new Options(workers, batch, hidden, steps, warmupSteps, warmupRoundSteps, reps, prefetch,
                    Math.min(distinctSteps, steps), heldOut, modes, Duration.ofSeconds(timeoutSeconds), out, f.raw, commit,
                    command, single);
        }


        int cores() {
            return Runtime.getRuntime().availableProcessors();
        }

        /** ND4J threads for each parallel worker: cores ÷ workers, at least 1. */
        int threadsPerWorker() {
            return Math.max(1, cores() / workers);
        }

        int examplesPerStep() {
            return workers * batch;
        }
    }

    /**
     * One timed (or warm-up) run. {@code steps}, {@code syncNanos} and {@code stepNanos} are the
     * sums over symmem4j's step reports (zero for the other modes).
     */
    record Result(Mode mode, int rep, long examples, long fitNanos, double heldOutLoss, long reportedSteps,
                  long syncNanos, long stepNanos) {

        double examplesPerSecond() {
            return examples / (fitNanos / 1e9);
        }

        double seconds() {
            return fitNanos / 1e9;
        }

        double syncShare() {
            return stepNanos == 0 ? Double.NaN : (double) syncNanos / stepNanos;
        }

        double syncMillisPerStep() {
            return reportedSteps == 0 ? Double.NaN : syncNanos / 1e6 / reportedSteps;
        }
    }

    /** Sums symmem4j's per-step reports over one run. */
    private static final class StepTotals implements SymmemParallelWrapper.StepListener {
        long steps;
        long examples;
        long syncNanos;
        long stepNanos;

        @Override
        public void onStep(StepReport r) {
            steps++;
            examples += r.examples();
            syncNanos += r.syncNanos();
            stepNanos += r.stepNanos();
        }
    }

    /**
     * The data: a pool of {@code distinctSteps} steps' worth of distinct batches (N batches of B
     * examples per step), cycled through for longer runs, the same batches merged N at a time for
     * the single model (step k of every mode sees the same examples), and a held-out set.
     */
    static final class Workload {
        final List<DataSet> pool;
        final List<DataSet> mergedPool;
        final DataSet heldOut;
        final int workers;

        Workload(Options o) {
            SyntheticData data = new SyntheticData(FEATURES, CLASSES, 1);
            this.workers = o.workers();
            this.pool = data.batches(2, o.distinctSteps() * o.workers(), o.batch(), DataType.FLOAT);
            List<DataSet> merged = new ArrayList<>(o.distinctSteps());
            for (int s = 0; s < o.distinctSteps(); s++) {
                merged.add(DataSet.merge(pool.subList(s * workers, (s + 1) * workers)));
            }
            this.mergedPool = List.copyOf(merged);
            this.heldOut = data.batches(3, 1, o.heldOut(), DataType.FLOAT).getFirst();
        }

        /** {@code steps × N} batches of B examples, in step order (what the parallel modes consume). */
        List<DataSet> workerBatches(int steps) {
            List<DataSet> out = new ArrayList<>(steps * workers);
            for (int s = 0; s < steps; s++) {
                int p = s % mergedPool.size();
                out.addAll(pool.subList(p * workers, (p + 1) * workers));
            }
            return out;
        }

        /** {@code steps} batches of N·B examples: step k holds the N batches of step k of {@link #workerBatches}. */
        List<DataSet> mergedBatches(int steps) {
            List<DataSet> out = new ArrayList<>(steps);
            for (int s = 0; s < steps; s++) {
                out.add(mergedPool.get(s % mergedPool.size()));
            }
            return out;
        }
    }

    /**
     * The columns of {@code --raw}, one row per measured run: {@code phase} is {@code untrained} (the
     * fresh model's held-out loss, nothing trained), {@code thread-sweep} (the single model at
     * {@code nd4j_threads}) or {@code timed} (repetition {@code rep}); {@code workers} is the run's N
     * in every row (the single model trains each step's N batches merged into one); the sync columns
     * are symmem4j's only (empty for the other modes).
     */
    static final List<String> CSV_COLUMNS = List.of("phase", "rep", "mode", "workers", "nd4j_threads", "batch_per_worker",
            "hidden", "params", "cores", "steps", "examples", "fit_s", "examples_per_s", "held_out_loss",
            "sync_share_of_step", "sync_ms_per_step");

    private static void rawRow(RawCsv raw, String phase, Options o, long params, int threads, Result r) {
        if (raw != null) {
            raw.row(phase, r.rep(), r.mode().flag, o.workers(), threads, o.batch(), o.hidden(),
                    params, o.cores(), r.examples() / o.examplesPerStep(), r.examples(), RawCsv.num("%.4f", r.seconds()),
                    RawCsv.num("%.1f", r.examplesPerSecond()), RawCsv.num("%.6f", r.heldOutLoss()),
                    RawCsv.num("%.5f", r.syncShare()), RawCsv.num("%.4f", r.syncMillisPerStep()));
        }
    }

    public static void main(String[] args) throws IOException {
        Options o = Options.parse(args);
        log("data-parallel bench: modes=%s workers=%d batch=%d hidden=%d steps=%d warmup=%d warmup-round=%d reps=%d"
                + " prefetch=%d cores=%d", o.modes().stream().map(m -> m.flag).toList(), o.workers(), o.batch(),
                o.hidden(), o.steps(), o.warmupSteps(), o.warmupRoundSteps(), o.reps(), o.prefetch(), o.cores());
        Workload work = new Workload(o);
        MultiLayerNetwork probe = DataParallelExample.mlp(FEATURES, o.hidden(), CLASSES);
        double untrainedLoss = probe.score(work.heldOut);
        log("model: %d parameters; untrained held-out loss %.4f; ND4J threads default: environment=%d blas=%d",
                probe.numParams(), untrainedLoss, Nd4j.getEnvironment().maxThreads(), Nd4j.factory().blas().getMaxThreads());
        RawCsv raw = o.raw() == null ? null : RawCsv.open(o.raw(), CSV_COLUMNS);
        if (raw != null) {
            raw.row("untrained", 0, Mode.SINGLE.flag, o.workers(), "", o.batch(), o.hidden(), probe.numParams(), o.cores(), 0, 0, "", "",
                    RawCsv.num("%.6f", untrainedLoss), "", "");
        }

        // Warm-up round: every mode trains once before anything is timed, so the first timed mode
        // does not pay for JIT compilation of DL4J code that later modes then get for free.
        for (Mode m : o.modes()) {
            log("warm-up round: %s, %d steps", m.label, o.warmupRoundSteps());
            run(o, work, m, 0, o.warmupRoundSteps(), "warm-up round");
        }
        // The single model's best configuration: every ND4J thread count from 1 to the cores, timed
        // on the same merged batches; the timed single-model runs use the fastest.
        if (o.modes().contains(Mode.SINGLE)) {
            double best = 0;
            for (int t : threadSweep(o.cores())) {
                o.single().current = t;
                Result r = run(o, work, Mode.SINGLE, 0, o.warmupRoundSteps(), "thread sweep");
                o.single().sweep.add(new double[] {t, r.examplesPerSecond()});
                rawRow(raw, "thread-sweep", o, probe.numParams(), t, r);
                log("thread sweep: single model at %d ND4J threads: %.0f examples/s", t, r.examplesPerSecond());
                if (r.examplesPerSecond() > best) {
                    best = r.examplesPerSecond();
                    o.single().best = t;
                }
            }
            o.single().current = o.single().best;
        }
        List<Result> results = new ArrayList<>();
        for (int rep = 1; rep <= o.reps(); rep++) {
            for (Mode m : o.modes()) {
                run(o, work, m, rep, o.warmupSteps(), "warm-up"); // a throwaway model and wrapper, not timed
                Result r = run(o, work, m, rep, o.steps(), "timed");
                results.add(r);
                rawRow(raw, "timed", o, probe.numParams(), m == Mode.SINGLE ? o.single().best : o.threadsPerWorker(), r);
                log("rep %d/%d %-34s %9.0f examples/s  %6.2f s  held-out loss %.4f%s", rep, o.reps(), m.label,
                        r.examplesPerSecond(), r.seconds(), r.heldOutLoss(), m == Mode.SYMMEM
                                ? String.format(Locale.ROOT, "  sync %.1f%% of step, %.3f ms/step", 100 * r.syncShare(),
                                r.syncMillisPerStep()) : "");
            }
        }
        if (raw != null) {
            raw.close();
            log("wrote %s", o.raw());
        }
        String report = new DataParallelReport(o, results, untrainedLoss, probe.numParams()).render();
        if (o.out() != null) {
            Path parent = o.out().toAbsolutePath().getParent();
            if (parent != null) {
                Files.createDirectories(parent);
            }
            Files.writeString(o.out(), report, StandardCharsets.UTF_8);
            log("wrote %s", o.out());
        } else {
            System.out.print(report);
            System.out.flush();
        }
        // ParallelWrapper leaves non-daemon threads behind (its prefetchers, ND4J's); don't wait for them.
        System.exit(0);
    }

    /**
     * One run of {@code mode} for {@code steps} steps on a fresh model (same seed every time) and,
     * for the parallel modes, a fresh wrapper: ParallelWrapper must not fit twice (a second fit in
     * SHARED_GRADIENTS mode deadlocks), and a fresh symmem4j wrapper starts its replicas the same
     * way. Only {@code fit()} is timed; building the model and the wrapper is not.
     */
    static Result run(Options o, Workload work, Mode mode, int rep, int steps, String phase) {
        MultiLayerNetwork net = DataParallelExample.mlp(FEATURES, o.hidden(), CLASSES);
        int threads = mode == Mode.SINGLE ? o.single().current : o.threadsPerWorker();
        Nd4jThreadLimit.set(threads);
        List<DataSet> batches = mode == Mode.SINGLE ? work.mergedBatches(steps) : work.workerBatches(steps);
        StepTotals totals = new StepTotals();
        System.gc(); // collect the previous run's garbage (and ND4J's off-heap buffers it holds) before timing
        String what = mode.label + " " + phase + (rep == 0 ? "" : " rep " + rep) + ", " + steps + " steps";
        long nanos = guarded(what, o.runTimeout(), () -> switch (mode) {
            case SINGLE -> {
                NoPrefetchIterator it = new NoPrefetchIterator(batches);
                long t0 = System.nanoTime();
                net.fit(it);
                yield System.nanoTime() - t0;
            }
            case AVERAGING, SHARED_GRADIENTS -> {
                ParallelWrapper.Builder<MultiLayerNetwork> b = new ParallelWrapper.Builder<>(net);
                b.workers(o.workers()) // must be explicit: the default is the device count, 1 on a CPU
                        .prefetchBuffer(o.prefetch())
                        .reportScoreAfterAveraging(false);
                if (mode == Mode.AVERAGING) {
                    b.trainingMode(ParallelWrapper.TrainingMode.AVERAGING).averagingFrequency(1);
                } else {
                    // Default threshold algorithm (adaptive) and EncodedGradientsAccumulator.
                    b.trainingMode(ParallelWrapper.TrainingMode.SHARED_GRADIENTS);
                }
                ParallelWrapper pw = b.build();
                try {
                    // Prefetch > 0 takes ListIterator (async supported) so ParallelWrapper starts its prefetcher.
                    DataSetIterator it = o.prefetch() > 0 ? new ListIterator(batches) : new NoPrefetchIterator(batches);
                    long t0 = System.nanoTime();
                    pw.fit(it);
                    yield System.nanoTime() - t0;
                } finally {
                    pw.shutdown(); // fit() already closed it; shutting down again is harmless
                }
            }
            case SYMMEM -> {
                try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(o.workers())
                        .ompThreadsPerWorker(threads).stepListener(totals).build()) {
                    NoPrefetchIterator it = new NoPrefetchIterator(batches);
                    long t0 = System.nanoTime();
                    w.fit(it);
                    yield System.nanoTime() - t0;
                }
            }
        });
        // Every mode must have applied exactly `steps` optimizer steps to the model it hands back
        // (ParallelWrapper: worker 0 trains the user's model itself).
        if (net.getIterationCount() != steps) {
            throw new IllegalStateException("after " + what + ": model iterationCount=" + net.getIterationCount()
                    + " expected=" + steps + " (the mode did not train the model it was given for every step)");
        }
        if (mode == Mode.SYMMEM && (totals.steps != steps || totals.examples != (long) steps * o.examplesPerStep())) {
            throw new IllegalStateException("after " + what + ": symmem4j reported steps=" + totals.steps + " examples="
                    + totals.examples + " expected steps=" + steps + " examples=" + (long) steps * o.examplesPerStep());
        }
        double loss = net.score(work.heldOut);
        return new Result(mode, rep, (long) steps * o.examplesPerStep(), nanos, loss, totals.steps, totals.syncNanos,
                totals.stepNanos);
    }

    /**
     * Runs {@code body}; if it takes longer than {@code limit} (a ParallelWrapper deadlock), prints
     * every thread's stack to stderr and halts the JVM with status 3 rather than hang the bench.
     */
    private static long guarded(String what, Duration limit, Supplier<Long> body) {
        ScheduledFuture<?> alarm = WATCHDOG.schedule(() -> {
            StringBuilder dump = new StringBuilder("data-parallel bench: " + what + " still running after " + limit
                    + " (deadlock? raise --run-timeout-seconds if the run is just slow); thread dump:\n");
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
