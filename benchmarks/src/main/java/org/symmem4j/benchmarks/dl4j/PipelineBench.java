package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Predicate;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.benchmarks.RawCsv;
import org.symmem4j.dl4j.pipeline.InPipelineProfile;
import org.symmem4j.dl4j.pipeline.IndependentStages;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainerBuilder;
import org.symmem4j.dl4j.pipeline.PipelineSchedule;
import org.symmem4j.dl4j.pipeline.PipelineStageSplit;
import org.symmem4j.dl4j.pipeline.PipelineStepReport;
import org.symmem4j.dl4j.pipeline.StageProfile;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.PipelineParallelExample;
import org.symmem4j.examples.SyntheticData;
import org.symmem4j.pipeline.exec.TimelineBreakdown;
import org.symmem4j.pipeline.exec.TimelineEvent;
import org.symmem4j.pipeline.exec.TimelineReport;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.MachineBound;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.SimulationResult;
import org.symmem4j.pipeline.schedule.StageDurations;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Pipeline-parallel DL4J training against the single model, in one run: the example's deep MLP
 * ({@code --features} inputs, {@code --layers} tanh layers of {@code --hidden} units, softmax output, Adam, fp32;
 * with {@code --features} equal to {@code --hidden} every hidden layer costs the same) on generated data, a single model's {@code fit()} with {@code --threads} ND4J threads as the baseline, and the
 * pipeline for each rank count, schedule (1F1B; interleaved with 2 stages per rank where the network
 * has the layers) and split (by parameter count; by measured pass times), each rank with
 * {@code --threads} ND4J threads: "a core per rank" with the default of 1. The split {@code pipeline} re-balances from
 * times measured inside the pipeline ({@link InPipelineProfile}): per configuration, once, a profiling run split by
 * the alone profile trains {@code --warmup} untimed and {@code --rebalance-steps} measured steps, and the timed runs use
 * the split those stage times call for. Every configuration trains
 * {@code --warmup} untimed steps, then {@code --steps} timed steps, {@code --reps} times round-robin
 * with the baseline (fresh trainer each time, the median repetition reported).
 *
 * <p>The machine's own bound is measured in the same run, per rank count P and repetition: P
 * independent copies of the model trained at once on P threads with the same ND4J threads, each on
 * one-microbatch batches ({@link IndependentReplicas}, the scaling benchmark's {@code independent}
 * mode): what P cores deliver to the pipeline's passes (memory bandwidth, caches, turbo and DL4J's
 * per-microbatch cost included). A pipeline with the schedule's ideal bubble b would reach
 * {@code bound x (1 - b)}.
 *
 * <p>Reports per configuration ({@link PipelineBenchReport}): examples/s (median repetition, min–max)
 * and the speed-up over the single model, over the bound, and over {@code bound x (1 - b)} (target:
 * at least 0.8); the median step's measured bubble next to the ideal (target: within 5 points), the
 * simulator's bubble for that step's measured per-stage times (and measured weight-gradient shares
 * under ZB-H1), the profile's prediction, the bubble split by what the ranks did
 * ({@code TimelineBreakdown}), the stages' compute in the pipeline over the same passes profiled
 * alone, and each rank's busy time in the median step. With {@code -Dsymmem4j.affinity=physical-cores} (or
 * {@code cores}, or a list in {@code symmem4j.affinity.cpus}) every rank thread, and every thread of the bound, runs on
 * a CPU of its own ({@code RankAffinity}); the report names the pinning. Progress goes to stderr, the markdown report to {@code --out} (or stdout) after every
 * repetition, and with {@code --raw} one CSV row per measured run, written as it ends.
 *
 * <pre>
 *   PipelineBench [--ranks 2,4,8] [--microbatches-per-rank 4] [--batch-per-microbatch 128] [--features 64] [--hidden 512]
 *                 [--layers 8] [--steps 40] [--warmup 10] [--reps 3] [--threads 1] [--single-steps S]
 *                 [--bound-seconds 1.5]
 *                 [--schedules 1f1b,interleaved,gpipe,zb-h1] [--splits params,time,pipeline] [--rebalance-steps 4]
 *                 [--out FILE] [--raw FILE.csv] [--commit C]
 *                 [--command TEXT] [--machine TEXT]
 * </pre>
 */
public final class PipelineBench {

    /** The input width by default: the first layer then costs about a third of a hidden layer (see {@code --features}). */
    static final int FEATURES = 64;
    static final int CLASSES = 10;
    /** Microbatches of the profile's sample: its passes time one microbatch of the run's size, four times per pass. */
    static final int PROFILE_MICROBATCHES = 4;

    private PipelineBench() {
    }

    @Command(name = "PipelineBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "The DL4J pipeline against the single model: 1F1B and interleaved, split by parameters and by"
                    + " measured times, a core per rank; speed-up and measured bubble against the ideal.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "P", split = ",", description = "pipeline rank counts")
        List<Integer> ranks = new ArrayList<>(List.of(2));
        @Option(names = "--microbatches-per-rank", paramLabel = "M", description = "microbatches per step, per rank")
        int microbatchesPerRank = 4;
        @Option(names = "--batch-per-microbatch", paramLabel = "B", description = "examples per microbatch")
        int batchPerMicrobatch = 128;
        @Option(names = "--features", paramLabel = "F", description = "input width; as wide as --hidden, the first layer"
                + " costs what the other hidden layers cost, so that stages of whole layers can be equal")
        int features = FEATURES;
        @Option(names = "--hidden", paramLabel = "H", description = "width of the hidden layers")
        int hidden = 512;
        @Option(names = "--layers", paramLabel = "L", description = "hidden layers")
        int layers = 8;
        @Option(names = "--steps", paramLabel = "S", description = "timed steps per run")
        int steps = 40;
        @Option(names = "--warmup", paramLabel = "W", description = "untimed steps first")
        int warmup = 10;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions (medians are reported)")
        int reps = 3;
        @Option(names = "--threads", paramLabel = "T", description = "ND4J threads per rank and for the single model")
        int threads = 1;
        @Option(names = "--single-steps", paramLabel = "S", description = "timed steps of the single model on the merged"
                + " batch (default: --steps; its steps are the slowest of the run)")
        Integer singleSteps;
        @Option(names = "--bound-seconds", paramLabel = "SECONDS", description = "window of the machine's bound: P"
                + " independent models on P threads, each on one-microbatch batches (0: no bound)")
        double boundSeconds = 1.5;
        @Option(names = "--schedules", paramLabel = "SCHEDULE", split = ",", description = "schedules: 1f1b, interleaved, gpipe, zb-h1")
        List<String> schedules = new ArrayList<>(List.of("1f1b", "interleaved"));
        @Option(names = "--splits", paramLabel = "SPLIT", split = ",", description = "how stages are balanced: params,"
                + " time (layers timed alone), pipeline (stage times measured in a short profiling run of the pipeline)")
        List<String> splits = new ArrayList<>(List.of("params", "time"));
        @Option(names = "--rebalance-steps", paramLabel = "K", description = "measured steps of the profiling run that"
                + " --splits pipeline takes its stage times from (after --warmup untimed steps; at most --steps)")
        int rebalanceSteps = 4;
        @Option(names = "--machine-bound", negatable = true, defaultValue = "true", fallbackValue = "true",
                description = "after every step of a configuration (ABAB), a window of the machine's bound for the"
                        + " schedule: each rank's stages run alone and at once on the rank's CPU (IndependentStages), fed"
                        + " into the simulator (MachineBound); --no-machine-bound leaves it out")
        boolean machineBound = true;
        @Option(names = "--tensor-parallel", paramLabel = "T", description = "tensor-parallel ranks per pipeline rank:"
                + " the hidden layers' pairs (0-1, 2-3, ...) become Megatron blocks split over T, P x T threads per"
                + " configuration (default 1: none; with T > 1 only --splits params, and the bound and single model stay"
                + " one core per rank: compare the bubbles, not the speed-up)")
        int tensorParallel = 1;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "write every measured run as a CSV row to FILE (appended under"
                + " the same header; default: none)")
        Path raw;
        @Option(names = "--commit", paramLabel = "C", description = "commit named in the report")
        String commit = "unknown";
        @Option(names = "--command", paramLabel = "TEXT", description = "command line named in the report (default: this one)")
        String command;
        @Option(names = "--machine", paramLabel = "TEXT", description = "machine named in the report (default: CPU model, cores and RAM)")
        String machine;
    }

    record Options(List<Integer> ranks, int microbatchesPerRank, int batchPerMicrobatch, int features, int hidden, int layers,
                   int steps, int warmup, int reps, int threads, int singleSteps, double boundSeconds,
                   List<PipelineSchedule> schedules, List<String> splits, Path out, Path raw, String commit,
                   String command, String machine, int tensorParallel, int rebalanceSteps, boolean machineBound) {

        static Options parse(String[] args) {
            return Cli.parse(new Flags(), args, f -> build(f, args));
        }

        private static Options build(Flags f, String[] args) {
            for (int p : f.ranks) {
                Cli.positive("--ranks", p);
            }
            List<PipelineSchedule> schedules = f.schedules.stream().map(String::trim).map(s -> switch (s) {
                case "1f1b" -> PipelineSchedule.ONE_F_ONE_B;
                case "interleaved" -> PipelineSchedule.INTERLEAVED;
                case "gpipe" -> PipelineSchedule.GPIPE;
                case "zb-h1" -> PipelineSchedule.ZERO_BUBBLE_H1;
                default -> throw new IllegalArgumentException("--schedules: unknown schedule=" + s
                        + " expected 1f1b, interleaved, gpipe or zb-h1");
            }).toList();
            List<String> splits = f.splits.stream().map(String::trim).toList();
            for (String s : splits) {
                if (!s.equals("params") && !s.equals("time") && !s.equals("pipeline")) {
                    throw new IllegalArgumentException("--splits: unknown split=" + s + " expected params, time or"
                            + " pipeline (fix: pass e.g. --splits time,pipeline)");
                }
            }
            String command = f.command;
            if (command == null) {
                command = "java " + PipelineBench.class.getName() + (args.length == 0 ? "" : " " + String.join(" ", args));
            }
            String machine = f.machine;
            if (machine == null) {
                machine = MachineInfo.cpuModel() + ", " + Runtime.getRuntime().availableProcessors() + " cores, "
                        + MachineInfo.ramGiB() + " RAM";
            }
            return new Options(List.copyOf(f.ranks), Cli.positive("--microbatches-per-rank", f.microbatchesPerRank),
                    Cli.positive("--batch-per-microbatch", f.batchPerMicrobatch), Cli.positive("--features", f.features),
                    Cli.positive("--hidden", f.hidden),
                    Cli.positive("--layers", f.layers), Cli.positive("--steps", f.steps), Cli.positive("--warmup", f.warmup),
                    Cli.positive("--reps", f.reps), Cli.positive("--threads", f.threads),
                    f.singleSteps == null ? f.steps : Cli.positive("--single-steps", f.singleSteps),
                    nonNegativeSeconds(f.boundSeconds), schedules, splits, f.out,
                    f.raw, f.commit, command, machine, checkedTensorParallel(f, splits), checkedRebalanceSteps(f),
                    f.machineBound && f.tensorParallel == 1);
        }
    }

    /** {@code --rebalance-steps}: at least 1, at most {@code --steps} (the profiling run trains on the run's batches). */
    private static int checkedRebalanceSteps(Flags f) {
        int k = Cli.positive("--rebalance-steps", f.rebalanceSteps);
        if (k > f.steps) {
            throw new IllegalArgumentException("--rebalance-steps=" + k + " with --steps=" + f.steps + ": expected at most"
                    + " --steps (fix: pass --rebalance-steps " + f.steps + " or fewer)");
        }
        return k;
    }

    /** {@code --tensor-parallel}: at least 1; above 1, the stages split by parameter count only. */
    private static int checkedTensorParallel(Flags f, List<String> splits) {
        int t = Cli.positive("--tensor-parallel", f.tensorParallel);
        if (t > 1 && f.layers < 2) {
            throw new IllegalArgumentException("--tensor-parallel=" + t + " with --layers=" + f.layers + ": expected at"
                    + " least 2 hidden layers (fix: pass --layers 2 or more: a block is two dense layers)");
        }
        if (t > 1 && f.hidden % t != 0) {
            throw new IllegalArgumentException("--tensor-parallel=" + t + " with --hidden=" + f.hidden + ": expected a"
                    + " width divisible by T (fix: pass a --hidden that T divides)");
        }
        if (t > 1 && !splits.equals(List.of("params"))) {
            throw new IllegalArgumentException("--tensor-parallel=" + t + " with --splits=" + String.join(",", splits)
                    + ": expected params only (fix: pass --splits params: a profile of the unsharded network does not"
                    + " time the shards)");
        }
        return t;
    }

    /** The first layers of the blocks {@code --tensor-parallel} splits: every pair of hidden layers, 0-1, 2-3, .... */
    static int[] blockColumns(int hiddenLayers) {
        int[] columns = new int[hiddenLayers / 2];
        for (int b = 0; b < columns.length; b++) {
            columns[b] = 2 * b;
        }
        return columns;
    }

    private static double nonNegativeSeconds(double seconds) {
        if (!(seconds >= 0) || Double.isInfinite(seconds)) {
            throw new IllegalArgumentException("--bound-seconds=" + seconds + " expected a finite number >= 0 (fix: pass"
                    + " e.g. 1.5, or 0 to leave the bound out)");
        }
        return seconds;
    }

    /** One pipeline configuration. */
    record Config(int ranks, PipelineSchedule schedule, int stagesPerRank, String split) {
        String label() {
            return ranks + " ranks " + (schedule == PipelineSchedule.INTERLEAVED ? "interleaved v=" + stagesPerRank
                    : schedule.tag()) + ", split by " + switch (split) {
                        case "time" -> "measured times";
                        case "pipeline" -> "times in the pipeline";
                        default -> "parameters";
                    };
        }

        /** Whether the split needs the layers' alone profile ({@code time}, and {@code pipeline} to start from). */
        boolean profiled() {
            return !split.equals("params");
        }
    }

    /**
     * One timed repetition of a configuration: the rate, the median step's measured and simulated bubble and where its
     * window went, and the stages' compute in the pipeline over the same passes profiled alone (NaN without a profile).
     */
    record Run(double examplesPerSecond, double medianBubble, double simulatedBubble, double medianStepMillis,
               String stages, TimelineBreakdown breakdown, double computeOverProfile, double medianSendMicros,
               double medianPassMicros, String stageTimes, String rankBusy, String placement,
               MachineBoundSteps machineBound, String independentStageTimes, String passOverIndependent,
               MachineBoundSteps.Excess excess) {
    }

    /**
     * The columns of {@code --raw}, one row per measured run. {@code kind}: {@code single} (the baseline
     * on the batches of {@code ranks} ranks), {@code single-microbatch} (the single model on batches of
     * one microbatch), {@code bound} ({@code ranks} independent models at once, each on one-microbatch batches:
     * the machine's bound) or {@code pipeline} (a configuration; {@code ideal}, {@code simulated} and
     * {@code predicted} bubbles as in the report's table; {@code predicted} only for the split by
     * measured times; the idle parts of the median step's window as {@link TimelineBreakdown} splits them;
     * {@code predicted_balanced}: the profile's bubble for the split balanced by time alone, the rule before the
     * simulated search; {@code stage_ms}: per stage, measured forward + backward ms of the median step, "/" the
     * profile's, separated by ";"; {@code rank_busy_ms}: per rank, the median step's busy time (all its forward and
     * backward passes) in ms, separated by ";", then "/" the step's window; {@code placement}: where the rank threads ran
     * over the timed steps, {@link ThreadPlacement#summary()}; the machine's bound for the schedule,
     * {@link MachineBoundSteps}: its bubble, the measured bubble's points over it and the pipeline's speed over its
     * speed, medians over the step/window pairs; {@code pass_over_independent}: per stage, the median step's forward +
     * backward over the paired window's on the same core, separated by ";").
     * Bubbles and parts are fractions of the step (0..1); empty where a column does not apply.
     */
    static final List<String> CSV_COLUMNS = List.of("kind", "rep", "config", "ranks", "schedule", "stages_per_rank",
            "split", "microbatches", "batch", "nd4j_threads", "stages_layers", "examples_per_s",
            "median_bubble_fraction", "ideal_bubble_fraction", "simulated_bubble_fraction", "predicted_bubble_fraction",
            "median_step_ms", "receive_fraction", "send_fraction", "optimizer_fraction", "between_fraction",
            "before_fraction", "after_fraction", "compute_over_profile", "predicted_balanced_bubble_fraction", "stage_ms",
            "rank_busy_ms", "placement", "machine_bound_bubble_fraction", "over_machine_bound_points",
            "machine_bound_examples_per_s", "speed_over_machine_bound", "pass_over_independent");

    /** Everything one run measured, by configuration and rank count, for the report. */
    record Results(List<Config> configs, List<List<Run>> runs, Map<Integer, List<Double>> single,
                   List<Double> singleMicrobatch, Map<Integer, List<Double>> bound, StageProfile[] profiles,
                   List<String> skipped, InPipelineProfile[] inPipeline) {
    }

    public static void main(String[] args) throws Exception {
        Options o = Options.parse(args);
        RawCsv raw = o.raw() == null ? null : RawCsv.open(o.raw(), CSV_COLUMNS);
        Nd4j.getEnvironment().setMaxThreads(o.threads());
        Nd4j.factory().blas().setMaxThreads(o.threads());
        SyntheticData data = new SyntheticData(o.features(), CLASSES, 7);
        MultiLayerNetwork model = PipelineParallelExample.deepMlp(o.features(), o.hidden(), CLASSES, o.layers());
        log("pipeline bench: %d layers, %d parameters, ranks %s x tensor parallel %d, %d microbatches per rank of %d"
                + " examples, %d ND4J threads per rank, %d+%d steps x %d reps", model.getnLayers(), model.numParams(),
                o.ranks(), o.tensorParallel(),
                o.microbatchesPerRank(), o.batchPerMicrobatch(), o.threads(), o.warmup(), o.steps(), o.reps());
        List<Config> configs = new ArrayList<>();
        List<String> skipped = new ArrayList<>();
        for (int p : o.ranks()) {
            for (PipelineSchedule schedule : o.schedules()) {
                int v = schedule == PipelineSchedule.INTERLEAVED ? 2 : 1;
                if (p * v > model.getnLayers()) {
                    skipped.add(String.format(Locale.ROOT, "%d ranks %s: %d stages but %d layers", p, schedule.tag(), p * v,
                            model.getnLayers()));
                    continue;
                }
                for (String split : o.splits()) {
                    configs.add(new Config(p, schedule, v, split));
                }
            }
        }
        // one batch size per rank count (m = microbatchesPerRank x p microbatches of batchPerMicrobatch),
        // and the single model measured on the same batches
        Results results = new Results(configs, new ArrayList<>(), new TreeMap<>(), new ArrayList<>(), new TreeMap<>(),
                new StageProfile[configs.size()], skipped, new InPipelineProfile[configs.size()]);
        for (int i = 0; i < configs.size(); i++) {
            results.runs().add(new ArrayList<>());
        }
        // one profile for the run: every configuration runs microbatches of the same size, and the profile times one
        // microbatch's passes (PROFILE_MICROBATCHES of them per pass over the layers, 5 passes, the first a warm-up)
        StageProfile[] profile = new StageProfile[1];
        List<DataSet> microbatchBatches = data.batches(22, (o.warmup() + o.steps()) * o.microbatchesPerRank(),
                o.batchPerMicrobatch(), DataType.FLOAT);
        for (int rep = 1; rep <= o.reps(); rep++) {
            for (int p : o.ranks()) {
                int batch = o.microbatchesPerRank() * p * o.batchPerMicrobatch();
                double rate = singleModel(model, data.batches(21, o.warmup() + o.singleSteps(), batch, DataType.FLOAT), o);
                results.single().computeIfAbsent(p, k -> new ArrayList<>()).add(rate);
                log("rep %d/%d single model (batch %d): %.0f examples/s", rep, o.reps(), batch, rate);
                if (raw != null) {
                    raw.row("single", rep, "single model", p, "", "", "", "", batch, o.threads(), "",
                            RawCsv.num("%.1f", rate), "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "",
                            "");
                }
                if (o.boundSeconds() > 0) {
                    IndependentReplicas.Result bound = IndependentReplicas.measure(p, i -> model.clone(), microbatchBatches,
                            o.threads(), Math.min(0.5, o.boundSeconds() / 3), o.boundSeconds());
                    results.bound().computeIfAbsent(p, k -> new ArrayList<>()).add(bound.examplesPerSecond());
                    log("rep %d/%d bound: %d independent models, one microbatch (%d) each: %.0f examples/s", rep, o.reps(),
                            p, o.batchPerMicrobatch(), bound.examplesPerSecond());
                    if (raw != null) {
                        raw.row("bound", rep, p + " independent models", p, "", "", "", 1, o.batchPerMicrobatch(),
                                o.threads(), "", RawCsv.num("%.1f", bound.examplesPerSecond()), "", "", "", "", "", "", "",
                                "", "", "", "", "", "", "", "", "", "", "", "", "", "");
                    }
                }
            }
            double small = singleModel(model, microbatchBatches, o);
            results.singleMicrobatch().add(small);
            if (raw != null) {
                raw.row("single-microbatch", rep, "single model, one microbatch", "", "", "", "", 1, o.batchPerMicrobatch(),
                        o.threads(), "", RawCsv.num("%.1f", small), "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "",
                        "", "", "", "");
            }
            log("rep %d/%d single model (batch %d, one microbatch): %.0f examples/s", rep, o.reps(), o.batchPerMicrobatch(),
                    small);
            for (int c = 0; c < configs.size(); c++) {
                Config config = configs.get(c);
                int microbatches = o.microbatchesPerRank() * config.ranks();
                int batch = microbatches * o.batchPerMicrobatch();
                List<DataSet> batches = data.batches(21, o.warmup() + o.steps(), batch, DataType.FLOAT);
                if (config.profiled() && results.profiles()[c] == null) {
                    if (profile[0] == null) {
                        DataSet sample = data.batches(23, 1, PROFILE_MICROBATCHES * o.batchPerMicrobatch(), DataType.FLOAT)
                                .getFirst();
                        profile[0] = StageProfile.measure(model, sample, PROFILE_MICROBATCHES, 5, o.threads(), null);
                    }
                    results.profiles()[c] = profile[0];
                }
                if (config.split().equals("pipeline") && results.inPipeline()[c] == null) {
                    results.inPipeline()[c] = inPipelineTimes(model, batches, config, microbatches, results.profiles()[c], o);
                    log("rep %d/%d %s: %s", rep, o.reps(), config.label(), results.inPipeline()[c]);
                }
                Run run = pipeline(model, batches, config, microbatches, results.profiles()[c], results.inPipeline()[c], o);
                results.runs().get(c).add(run);
                if (raw != null) {
                    TimelineBreakdown b = run.breakdown();
                    MachineBoundSteps m = run.machineBound();
                    raw.row("pipeline", rep, config.label(), config.ranks(), config.schedule().tag(), config.stagesPerRank(),
                            config.split(), microbatches, batch, o.threads(), run.stages(),
                            RawCsv.num("%.1f", run.examplesPerSecond()), RawCsv.num("%.4f", run.medianBubble()),
                            RawCsv.num("%.4f", idealBubble(config, microbatches)), RawCsv.num("%.4f", run.simulatedBubble()),
                            RawCsv.num("%.4f", predictedBubble(model, config, microbatches, results.profiles()[c],
                                    results.inPipeline()[c])),
                            RawCsv.num("%.3f", run.medianStepMillis()), RawCsv.num("%.4f", b.receive()),
                            RawCsv.num("%.4f", b.send()), RawCsv.num("%.4f", b.optimizer()), RawCsv.num("%.4f", b.between()),
                            RawCsv.num("%.4f", b.before()), RawCsv.num("%.4f", b.after()),
                            RawCsv.num("%.4f", run.computeOverProfile()),
                            RawCsv.num("%.4f", predictedBalancedBubble(model, config, microbatches, results.profiles()[c],
                                    results.inPipeline()[c])),
                            run.stageTimes().replace(", ", ";"), run.rankBusy(), run.placement(),
                            m == null ? "" : RawCsv.num("%.4f", m.boundBubble()),
                            m == null ? "" : RawCsv.num("%.2f", m.overBoundPoints()),
                            m == null ? "" : RawCsv.num("%.1f", m.boundExamplesPerSecond()),
                            m == null ? "" : RawCsv.num("%.4f", m.speedOverBound()), run.passOverIndependent());
                }
                log("rep %d/%d %-48s %8.0f examples/s  bubble %.1f%% (simulated %.1f%%; %s)  %s  stage ms %s  busy ms"
                        + " per rank %s%n    rank threads: %s%n    machine's bound: %s", rep, o.reps(), config.label(),
                        run.examplesPerSecond(), 100 * run.medianBubble(), 100 * run.simulatedBubble(),
                        run.breakdown().idleText(), run.stages(), run.stageTimes(), run.rankBusy(), run.placement(),
                        run.machineBound() == null ? "not measured" : run.machineBound() + ", independent stage ms "
                                + run.independentStageTimes() + ", pipeline / independent " + run.passOverIndependent()
                                + ", the median step's points over its bound: passes / hand-offs / rest " + run.excess());
            }
            // after every repetition: a run cut short by its time limit still leaves a report
            write(o, PipelineBenchReport.render(o, model, results, rep));
        }
        if (raw != null) {
            raw.close();
            log("wrote %s", o.raw());
        }
    }

    private static void write(Options o, String report) throws IOException {
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
     * The baseline's rate on {@code batches}: {@code --warmup} untimed steps, then the rest timed.
     */
    private static double singleModel(MultiLayerNetwork model, List<DataSet> batches, Options o) {
        Nd4j.getEnvironment().setMaxThreads(o.threads());
        Nd4j.factory().blas().setMaxThreads(o.threads());
        MultiLayerNetwork net = model.clone();
        for (int s = 0; s < o.warmup(); s++) {
            net.fit(batches.get(s));
        }
        long examples = 0;
        long start = System.nanoTime();
        for (int s = o.warmup(); s < batches.size(); s++) {
            net.fit(batches.get(s));
            examples += batches.get(s).numExamples();
        }
        return examples / ((System.nanoTime() - start) / 1e9);
    }

    /**
     * {@code --splits pipeline}'s profiling run: a trainer split by the alone profile trains {@code --warmup} untimed
     * steps and {@code --rebalance-steps} measured ones on the run's batches; their stage times, related to the
     * profile, are the in-pipeline times the timed runs split by.
     */
    private static InPipelineProfile inPipelineTimes(MultiLayerNetwork model, List<DataSet> batches, Config config,
                                                     int microbatches, StageProfile profile, Options o) {
        List<PipelineStepReport> measured = new ArrayList<>();
        boolean[] timing = {false};
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(model.clone()).ranks(config.ranks())
                .microbatches(microbatches).schedule(config.schedule(), config.stagesPerRank())
                .ompThreadsPerRank(o.threads()).splitBy(profile).stepListener(r -> {
                    if (timing[0]) {
                        measured.add(r);
                    }
                }).build()) {
            for (int s = 0; s < o.warmup(); s++) {
                trainer.fit(batches.get(s));
            }
            timing[0] = true;
            for (int s = o.warmup(); s < o.warmup() + o.rebalanceSteps(); s++) {
                trainer.fit(batches.get(s));
            }
            return InPipelineProfile.of(trainer, measured);
        }
    }

    private static Run pipeline(MultiLayerNetwork model, List<DataSet> batches, Config config, int microbatches,
                                StageProfile profile, InPipelineProfile inPipeline, Options o) {
        MultiLayerNetwork net = model.clone();
        List<PipelineStepReport> timed = new ArrayList<>();
        boolean[] timing = {false};
        PipelineParallelTrainerBuilder builder = PipelineParallelTrainer.builder(net).ranks(config.ranks())
                .microbatches(microbatches).schedule(config.schedule(), config.stagesPerRank())
                .ompThreadsPerRank(o.threads()).stepListener(r -> {
                    if (timing[0]) {
                        timed.add(r);
                    }
                });
        if (inPipeline != null) {
            builder.splitBy(inPipeline);
        } else if (profile != null) {
            builder.splitBy(profile);
        }
        if (o.tensorParallel() > 1) {
            builder.tensorParallel(o.tensorParallel(), blockColumns(o.layers()));
        }
        try (PipelineParallelTrainer trainer = builder.build();
             IndependentStages bound = o.machineBound() ? IndependentStages.start(trainer.split(), trainer.shape(),
                     batches.getFirst(), config.schedule().splitsBackward(), o.threads(), Duration.ofMinutes(2)) : null) {
            for (int s = 0; s < o.warmup(); s++) {
                trainer.fit(batches.get(s));
            }
            if (bound != null) {
                bound.measure(); // the bound's threads' first window warms them up, as the untimed steps do the ranks
            }
            timing[0] = true;
            long examples = 0;
            ThreadPlacement placement = new ThreadPlacement("symmem4j-pipeline-");
            int timedSteps = batches.size() - o.warmup();
            long[] stepNanos = new long[timedSteps];
            List<IndependentStages.Window> windows = new ArrayList<>();
            for (int s = o.warmup(); s < batches.size(); s++) {
                long start = System.nanoTime();
                trainer.fit(batches.get(s));
                stepNanos[s - o.warmup()] = System.nanoTime() - start;
                examples += batches.get(s).numExamples();
                if (bound != null) {
                    windows.add(bound.measure()); // ABAB: the machine's bound right after each timed step
                }
            }
            double rate = examples / (java.util.Arrays.stream(stepNanos).sum() / 1e9);
            placement.close();
            List<TimelineReport> inOrder = timed.stream().map(PipelineStepReport::timelineReport).toList();
            List<Integer> byWindow = java.util.stream.IntStream.range(0, inOrder.size()).boxed()
                    .sorted((a, b) -> Long.compare(inOrder.get(a).windowNanos(), inOrder.get(b).windowNanos())).toList();
            int medianIndex = byWindow.get(byWindow.size() / 2);
            TimelineReport median = inOrder.get(medianIndex);
            double[] bubbles = inOrder.stream().mapToDouble(TimelineReport::bubbleFraction).sorted().toArray();
            SimulationResult.Completed simulated = median.simulatePerStage(trainer.schedule(), trainer.shape());
            double overProfile = Double.NaN;
            StageDurations measured = median.stageDurationsMicros(trainer.shape());
            String stageTimes = stageTimes(measured, profile == null ? null : profile.stageDurationsMicros(trainer.split()));
            if (profile != null) {
                StageDurations alone = profile.stageDurationsMicros(trainer.split());
                double sumMeasured = 0;
                double sumAlone = 0;
                for (int s = 0; s < measured.stageCount(); s++) {
                    sumMeasured += measured.total(s);
                    sumAlone += alone.total(s);
                }
                overProfile = sumMeasured / sumAlone;
            }
            MachineBoundSteps machine = null;
            String independent = "";
            String passRatio = "";
            MachineBoundSteps.Excess excess = null;
            if (bound != null) {
                List<MachineBound> bounds = windows.stream().map(w -> MachineBound.of(trainer.schedule(), trainer.shape(),
                        w.micros(), w.optimizerMicros())).toList();
                machine = MachineBoundSteps.of(inOrder.stream().mapToDouble(TimelineReport::bubbleFraction).toArray(),
                        stepNanos, bounds, batches.getLast().numExamples());
                IndependentStages.Window pair = windows.get(medianIndex);
                independent = stageTimes(pair.micros(), null) + "; optimizer µs per rank "
                        + java.util.Arrays.toString(pair.optimizerMicros());
                passRatio = MachineBoundSteps.passRatio(measured, pair.micros());
                // the median step's excess over its window's bound, split by the simulator
                double free = MachineBound.of(trainer.schedule(), trainer.shape(), measured,
                        new long[trainer.shape().ranks()]).bubbleFraction();
                excess = MachineBoundSteps.Excess.of(median.bubbleFraction(), simulated.bubbleFraction(), free,
                        bounds.get(medianIndex).bubbleFraction());
            }
            return new Run(rate, bubbles[bubbles.length / 2], simulated.bubbleFraction(), median.windowNanos() / 1e6,
                    stages(trainer.split()), TimelineBreakdown.of(median), overProfile,
                    medianMicros(median, kind -> kind == TimelineEvent.Kind.SEND),
                    medianMicros(median, TimelineEvent.Kind::isCompute), stageTimes, rankBusy(median),
                    placement.summary(), machine, independent, passRatio, excess);
        }
    }

    /**
     * Per stage, the median step's mean forward + backward (input + weight gradient under ZB-H1) in ms, and the
     * profile's for the same layers after a slash: where the stages are uneven, and whether the profile saw it.
     */
    static String stageTimes(StageDurations measured, StageDurations profiled) {
        StringBuilder s = new StringBuilder();
        for (int stage = 0; stage < measured.stageCount(); stage++) {
            s.append(stage == 0 ? "" : ", ").append(String.format(Locale.ROOT, "%.1f", measured.total(stage) / 1e3));
            if (profiled != null) {
                s.append(String.format(Locale.ROOT, "/%.1f", profiled.total(stage) / 1e3));
            }
        }
        return s.toString();
    }

    /**
     * Per rank, its busy time in the step (every forward and backward pass it ran), ms, separated by ";", then "/" and
     * the step's window: ranks with equal stages should be busy equally long; one busier than its profile says ran slower
     * (a core shared or lost meanwhile).
     */
    static String rankBusy(TimelineReport step) {
        StringBuilder s = new StringBuilder();
        for (int rank = 0; rank < step.rankCount(); rank++) {
            s.append(rank == 0 ? "" : ";").append(String.format(Locale.ROOT, "%.1f", step.computeNanos(rank) / 1e6));
        }
        return s.append(String.format(Locale.ROOT, "/%.1f", step.windowNanos() / 1e6)).toString();
    }

    /** The median duration of the step's events whose kind passes {@code test}, in microseconds; NaN without any. */
    private static double medianMicros(TimelineReport step, Predicate<TimelineEvent.Kind> test) {
        long[] d = step.timelines().stream().flatMap(t -> t.events().stream()).filter(e -> test.test(e.kind()))
                .mapToLong(TimelineEvent::durationNanos).sorted().toArray();
        return d.length == 0 ? Double.NaN : d[d.length / 2] / 1e3;
    }

    private static Schedule schedule(Config config, int microbatches) {
        return switch (config.schedule()) {
            case GPIPE -> ScheduleGenerators.gpipe(config.ranks(), microbatches);
            case ONE_F_ONE_B -> ScheduleGenerators.oneFOneB(config.ranks(), microbatches);
            case INTERLEAVED -> ScheduleGenerators.interleavedOneFOneB(config.ranks(), microbatches, config.stagesPerRank());
            case ZERO_BUBBLE_H1 -> ScheduleGenerators.zeroBubbleH1(config.ranks(), microbatches);
        };
    }

    /** The schedule's bubble with every backward twice its forward and free hand-offs. */
    static double idealBubble(Config config, int microbatches) {
        PipelineShape shape = new PipelineShape(config.ranks(), microbatches, config.stagesPerRank());
        return ScheduleSimulator.simulate(schedule(config, microbatches), shape, ActionDurations.of(1, 2)).requireCompleted()
                .bubbleFraction();
    }

    /**
     * The bubble the profile predicts for the split the trainer makes from it ({@link PipelineStageSplit#byProfile});
     * NaN without a profile (split by parameters). With in-pipeline times ({@code --splits pipeline}): the bubble they
     * predict for the split they call for.
     */
    static double predictedBubble(MultiLayerNetwork model, Config config, int microbatches, StageProfile profile,
                                  InPipelineProfile inPipeline) {
        PipelineShape shape = new PipelineShape(config.ranks(), microbatches, config.stagesPerRank());
        Schedule schedule = schedule(config, microbatches);
        if (inPipeline != null) {
            return predicted(schedule, shape, inPipeline, starts(inPipeline.split(model, schedule, shape)));
        }
        if (profile == null) {
            return Double.NaN;
        }
        return predicted(schedule, shape, profile, PipelineStageSplit.byProfile(model, profile, schedule, shape));
    }

    /**
     * The bubble the profile predicts for the split balanced by forward plus backward time alone
     * ({@link PipelineStageSplit#byCost}, the rule before the simulated search); NaN without a profile. With in-pipeline
     * times: the bubble they predict for the split that ran in the profiling run (the split before the re-balance).
     */
    static double predictedBalancedBubble(MultiLayerNetwork model, Config config, int microbatches, StageProfile profile,
                                          InPipelineProfile inPipeline) {
        PipelineShape shape = new PipelineShape(config.ranks(), microbatches, config.stagesPerRank());
        if (inPipeline != null) {
            return predicted(schedule(config, microbatches), shape, inPipeline, inPipeline.ranWithStarts());
        }
        if (profile == null) {
            return Double.NaN;
        }
        return predicted(schedule(config, microbatches), shape, profile,
                PipelineStageSplit.byCost(model, shape.stageCount(), profile.layerNanos()));
    }

    private static double predicted(Schedule schedule, PipelineShape shape, StageProfile profile, PipelineStageSplit split) {
        return ScheduleSimulator.simulate(schedule, shape, profile.stageDurationsMicros(split)).requireCompleted()
                .bubbleFraction();
    }

    private static double predicted(Schedule schedule, PipelineShape shape, InPipelineProfile times, int[] starts) {
        return ScheduleSimulator.simulate(schedule, shape, times.stageDurationsMicros(starts)).requireCompleted()
                .bubbleFraction();
    }

    /** The split's stage starts with 0 first and the layer count last, as {@link InPipelineProfile} takes them. */
    static int[] starts(PipelineStageSplit split) {
        int[] starts = new int[split.stageCount() + 1];
        for (int s = 0; s < split.stageCount(); s++) {
            starts[s] = split.firstLayer(s);
        }
        starts[split.stageCount()] = split.layerCount();
        return starts;
    }

    private static String stages(PipelineStageSplit split) {
        StringBuilder s = new StringBuilder();
        for (int stage = 0; stage < split.stageCount(); stage++) {
            s.append(stage == 0 ? "" : ", ").append(split.firstLayer(stage)).append('-').append(split.endLayer(stage) - 1);
        }
        return s.toString();
    }

    static void log(String format, Object... args) {
        System.err.printf(Locale.ROOT, format + "%n", args);
    }
}
