package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.benchmarks.RawCsv;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainerBuilder;
import org.symmem4j.dl4j.pipeline.PipelineSchedule;
import org.symmem4j.dl4j.pipeline.PipelineStageSplit;
import org.symmem4j.dl4j.pipeline.PipelineStepReport;
import org.symmem4j.dl4j.pipeline.StageProfile;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.PipelineParallelExample;
import org.symmem4j.examples.SyntheticData;
import org.symmem4j.pipeline.exec.TimelineReport;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.SimulationResult;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Pipeline-parallel DL4J training against the single model, in one run: the example's deep MLP
 * ({@code --layers} tanh layers of {@code --hidden} units, softmax output, Adam, fp32) on generated
 * data, a single model's {@code fit()} with {@code --threads} ND4J threads as the baseline, and the
 * pipeline for each rank count, schedule (1F1B; interleaved with 2 stages per rank where the network
 * has the layers) and split (by parameter count; by measured pass times), each rank with
 * {@code --threads} ND4J threads: "a core per rank" with the default of 1. Every configuration trains
 * {@code --warmup} untimed steps, then {@code --steps} timed steps, {@code --reps} times round-robin
 * with the baseline (fresh trainer each time, the median repetition reported).
 *
 * <p>Reports per configuration: examples/s and the speed-up over the single model next to the
 * schedule's ideal speed-up {@code p x (1 - ideal bubble)} and their ratio (target: at least 0.8),
 * and next to what microbatching leaves of it: the single model's rate on microbatch-sized batches
 * over its rate on whole batches (DL4J's per-operation overhead and small matrix products make
 * every microbatch's pass cost more per example; the pipeline cannot do better than that);
 * the median step's measured bubble next to the ideal (target: within 5 points), the simulator's
 * bubble for that step's measured per-stage times, and the profile's prediction. Raw per-repetition
 * numbers follow the table. Progress goes to stderr, the markdown report to {@code --out} (or stdout),
 * and with {@code --raw} one CSV row per measured run (the baselines' and each configuration's
 * repetitions), written as it ends.
 *
 * <pre>
 *   PipelineBench [--ranks 2,4,8] [--microbatches-per-rank 4] [--batch-per-microbatch 128] [--hidden 512]
 *                 [--layers 8] [--steps 40] [--warmup 10] [--reps 3] [--threads 1]
 *                 [--schedules 1f1b,interleaved,gpipe,zb-h1] [--splits params,time] [--out FILE] [--raw FILE.csv] [--commit C]
 *                 [--command TEXT] [--machine TEXT]
 * </pre>
 */
public final class PipelineBench {

    static final int FEATURES = 64;
    static final int CLASSES = 10;

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
        @Option(names = "--schedules", paramLabel = "SCHEDULE", split = ",", description = "schedules: 1f1b, interleaved, gpipe, zb-h1")
        List<String> schedules = new ArrayList<>(List.of("1f1b", "interleaved"));
        @Option(names = "--splits", paramLabel = "SPLIT", split = ",", description = "how stages are balanced: params, time")
        List<String> splits = new ArrayList<>(List.of("params", "time"));
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

    record Options(List<Integer> ranks, int microbatchesPerRank, int batchPerMicrobatch, int hidden, int layers,
                   int steps, int warmup, int reps, int threads, List<PipelineSchedule> schedules, List<String> splits,
                   Path out, Path raw, String commit, String command, String machine) {

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
                if (!s.equals("params") && !s.equals("time")) {
                    throw new IllegalArgumentException("--splits: unknown split=" + s + " expected params or time");
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
                    Cli.positive("--batch-per-microbatch", f.batchPerMicrobatch), Cli.positive("--hidden", f.hidden),
                    Cli.positive("--layers", f.layers), Cli.positive("--steps", f.steps), Cli.positive("--warmup", f.warmup),
                    Cli.positive("--reps", f.reps), Cli.positive("--threads", f.threads), schedules, splits, f.out,
                    f.raw, f.commit, command, machine);
        }
    }

    /** One pipeline configuration. */
    record Config(int ranks, PipelineSchedule schedule, int stagesPerRank, String split) {
        String label() {
            return ranks + " ranks " + (schedule == PipelineSchedule.INTERLEAVED ? "interleaved v=" + stagesPerRank
                    : schedule.tag()) + ", split by " + (split.equals("time") ? "measured times" : "parameters");
        }
    }

    /** One timed repetition of a configuration. */
    record Run(double examplesPerSecond, double medianBubble, double simulatedBubble, double medianStepMillis,
               String stages) {
    }

    /**
     * The columns of {@code --raw}, one row per measured run. {@code kind}: {@code single} (the baseline
     * on the batches of {@code ranks} ranks), {@code single-microbatch} (the single model on batches of
     * one microbatch) or {@code pipeline} (a configuration; {@code ideal}, {@code simulated} and
     * {@code predicted} bubbles as in the report's table; {@code predicted} only for the split by
     * measured times). Bubbles are fractions of the step (0..1); empty where a column does not apply.
     */
    static final List<String> CSV_COLUMNS = List.of("kind", "rep", "config", "ranks", "schedule", "stages_per_rank",
            "split", "microbatches", "batch", "nd4j_threads", "stages_layers", "examples_per_s",
            "median_bubble_fraction", "ideal_bubble_fraction", "simulated_bubble_fraction", "predicted_bubble_fraction",
            "median_step_ms");

    public static void main(String[] args) throws IOException {
        Options o = Options.parse(args);
        RawCsv raw = o.raw() == null ? null : RawCsv.open(o.raw(), CSV_COLUMNS);
        Nd4j.getEnvironment().setMaxThreads(o.threads());
        Nd4j.factory().blas().setMaxThreads(o.threads());
        SyntheticData data = new SyntheticData(FEATURES, CLASSES, 7);
        MultiLayerNetwork model = PipelineParallelExample.deepMlp(FEATURES, o.hidden(), CLASSES, o.layers());
        log("pipeline bench: %d layers, %d parameters, ranks %s, %d microbatches per rank of %d examples, %d ND4J threads"
                + " per rank, %d+%d steps x %d reps", model.getnLayers(), model.numParams(), o.ranks(),
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
        Map<Integer, List<Double>> single = new TreeMap<>();
        List<Double> singleMicrobatch = new ArrayList<>();
        List<List<Run>> runs = new ArrayList<>();
        for (int i = 0; i < configs.size(); i++) {
            runs.add(new ArrayList<>());
        }
        StageProfile[] profiles = new StageProfile[configs.size()];
        for (int rep = 1; rep <= o.reps(); rep++) {
            for (int p : o.ranks()) {
                int batch = o.microbatchesPerRank() * p * o.batchPerMicrobatch();
                double rate = singleModel(model, data.batches(21, o.warmup() + o.steps(), batch, DataType.FLOAT), o);
                single.computeIfAbsent(p, k -> new ArrayList<>()).add(rate);
                log("rep %d/%d single model (batch %d): %.0f examples/s", rep, o.reps(), batch, rate);
                if (raw != null) {
                    raw.row("single", rep, "single model", p, "", "", "", "", batch, o.threads(), "",
                            RawCsv.num("%.1f", rate), "", "", "", "", "");
                }
            }
            double small = singleModel(model, data.batches(22, (o.warmup() + o.steps()) * o.microbatchesPerRank(),
                    o.batchPerMicrobatch(), DataType.FLOAT), o);
            singleMicrobatch.add(small);
            if (raw != null) {
                raw.row("single-microbatch", rep, "single model, one microbatch", "", "", "", "", 1, o.batchPerMicrobatch(),
                        o.threads(), "", RawCsv.num("%.1f", small), "", "", "", "", "");
            }
            log("rep %d/%d single model (batch %d, one microbatch): %.0f examples/s", rep, o.reps(), o.batchPerMicrobatch(),
                    small);
            for (int c = 0; c < configs.size(); c++) {
                Config config = configs.get(c);
                int microbatches = o.microbatchesPerRank() * config.ranks();
                int batch = microbatches * o.batchPerMicrobatch();
                List<DataSet> batches = data.batches(21, o.warmup() + o.steps(), batch, DataType.FLOAT);
                if (config.split().equals("time") && profiles[c] == null) {
                    profiles[c] = StageProfile.measure(model, batches.getFirst(), microbatches, 4, o.threads(), null);
                }
                Run run = pipeline(model, batches, config, microbatches, profiles[c], o);
                runs.get(c).add(run);
                if (raw != null) {
                    raw.row("pipeline", rep, config.label(), config.ranks(), config.schedule().tag(), config.stagesPerRank(),
                            config.split(), microbatches, batch, o.threads(), run.stages(),
                            RawCsv.num("%.1f", run.examplesPerSecond()), RawCsv.num("%.4f", run.medianBubble()),
                            RawCsv.num("%.4f", idealBubble(config, microbatches)), RawCsv.num("%.4f", run.simulatedBubble()),
                            RawCsv.num("%.4f", predictedBubble(model, config, microbatches, profiles[c])),
                            RawCsv.num("%.3f", run.medianStepMillis()));
                }
                log("rep %d/%d %-48s %8.0f examples/s  bubble %.1f%% (simulated %.1f%%)  %s", rep, o.reps(),
                        config.label(), run.examplesPerSecond(), 100 * run.medianBubble(), 100 * run.simulatedBubble(),
                        run.stages());
            }
        }
        if (raw != null) {
            raw.close();
            log("wrote %s", o.raw());
        }
        String report = render(o, model, configs, runs, single, singleMicrobatch, profiles, skipped);
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
     * The baseline's rate on batches of the first rank count's size. Larger batches run a single model
     * somewhat faster per example; the report states the size.
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

    private static Run pipeline(MultiLayerNetwork model, List<DataSet> batches, Config config, int microbatches,
                                StageProfile profile, Options o) {
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
        if (profile != null) {
            builder.splitBy(profile);
        }
        try (PipelineParallelTrainer trainer = builder.build()) {
            for (int s = 0; s < o.warmup(); s++) {
                trainer.fit(batches.get(s));
            }
            timing[0] = true;
            long examples = 0;
            long start = System.nanoTime();
            for (int s = o.warmup(); s < batches.size(); s++) {
                trainer.fit(batches.get(s));
                examples += batches.get(s).numExamples();
            }
            double rate = examples / ((System.nanoTime() - start) / 1e9);
            List<TimelineReport> reports = timed.stream().map(PipelineStepReport::timelineReport)
                    .sorted((a, b) -> Long.compare(a.windowNanos(), b.windowNanos())).toList();
            TimelineReport median = reports.get(reports.size() / 2);
            double[] bubbles = reports.stream().mapToDouble(TimelineReport::bubbleFraction).sorted().toArray();
            SimulationResult.Completed simulated = median.simulatePerStage(trainer.schedule(), trainer.shape());
            return new Run(rate, bubbles[bubbles.length / 2], simulated.bubbleFraction(), median.windowNanos() / 1e6,
                    stages(trainer.split()));
        }
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
    private static double idealBubble(Config config, int microbatches) {
        PipelineShape shape = new PipelineShape(config.ranks(), microbatches, config.stagesPerRank());
        return ScheduleSimulator.simulate(schedule(config, microbatches), shape, ActionDurations.of(1, 2)).requireCompleted()
                .bubbleFraction();
    }

    /** The bubble the profile predicts for the split it makes; NaN without a profile (split by parameters). */
    private static double predictedBubble(MultiLayerNetwork model, Config config, int microbatches, StageProfile profile) {
        if (profile == null) {
            return Double.NaN;
        }
        PipelineShape shape = new PipelineShape(config.ranks(), microbatches, config.stagesPerRank());
        PipelineStageSplit split = PipelineStageSplit.byCost(model, shape.stageCount(), profile.layerNanos());
        return ScheduleSimulator.simulate(schedule(config, microbatches), shape, profile.stageDurationsMicros(split))
                .requireCompleted().bubbleFraction();
    }

    private static String stages(PipelineStageSplit split) {
        StringBuilder s = new StringBuilder();
        for (int stage = 0; stage < split.stageCount(); stage++) {
            s.append(stage == 0 ? "" : ", ").append(split.firstLayer(stage)).append('-').append(split.endLayer(stage) - 1);
        }
        return s.toString();
    }

    private static double median(List<Double> values) {
        List<Double> sorted = values.stream().sorted().toList();
        return sorted.get(sorted.size() / 2);
    }

    private static String render(Options o, MultiLayerNetwork model, List<Config> configs, List<List<Run>> runs,
                                 Map<Integer, List<Double>> single, List<Double> singleMicrobatch,
                                 StageProfile[] profiles, List<String> skipped) {
        StringBuilder md = new StringBuilder();
        md.append("# Pipeline speed: DL4J deep MLP, pipeline vs single model\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- machine: ").append(o.machine()).append('\n');
        md.append("- JDK: ").append(System.getProperty("java.vm.name")).append(' ').append(Runtime.version())
                .append("; DL4J/ND4J 1.0.0-M2.1 (nd4j-native)\n");
        md.append("- commit: ").append(o.commit()).append('\n');
        md.append("- command: `").append(o.command()).append("`\n");
        if (o.raw() != null) {
            md.append("- raw data, one CSV row per measured run: `").append(o.raw().getFileName()).append("`\n");
        }
        md.append(String.format(Locale.ROOT, "- model: %d → %d × tanh dense(%d) → softmax(%d), Adam(1e-3), fp32, %,d"
                        + " parameters; generated data (`SyntheticData`)%n", FEATURES, o.layers(), o.hidden(), CLASSES,
                model.numParams()));
        md.append(String.format(Locale.ROOT, "- each configuration: %d untimed steps, then %d timed steps; %d repetitions"
                        + " round-robin with the baseline, the median repetition shown; ND4J threads: %d per rank and %d for"
                        + " the single model; microbatches: %d per rank of %d examples (batch = ranks × %d)%n",
                o.warmup(), o.steps(), o.reps(), o.threads(), o.threads(), o.microbatchesPerRank(),
                o.batchPerMicrobatch(), o.microbatchesPerRank() * o.batchPerMicrobatch()));
        for (Map.Entry<Integer, List<Double>> e : single.entrySet()) {
            md.append(String.format(Locale.ROOT, "- baseline for %d ranks: single model `fit()` on the same batches of %d,"
                            + " %d ND4J thread(s): **%.0f examples/s** (repetitions: %s)%n", e.getKey(),
                    o.microbatchesPerRank() * e.getKey() * o.batchPerMicrobatch(), o.threads(), median(e.getValue()),
                    fmt(e.getValue(), "%.0f")));
        }
        md.append(String.format(Locale.ROOT, "- the single model on batches of one microbatch (%d): %.0f examples/s"
                        + " (repetitions: %s); its rate over the whole-batch rate is the microbatch efficiency%n",
                o.batchPerMicrobatch(), median(singleMicrobatch), fmt(singleMicrobatch, "%.0f")));
        for (String s : skipped) {
            md.append("- skipped (interleaving needs two layers per rank): ").append(s).append('\n');
        }
        md.append("\nTargets (issue 12, a core per rank): measured bubble within 5 points of the ideal for the schedule;"
                + " speed-up at least 0.8 × the ideal speed-up p × (1 − ideal bubble). \"Attainable\" is the ideal"
                + " speed-up times the microbatch efficiency: what is left when every pass runs at the single"
                + " model's per-example speed on microbatch-sized batches.\n\n");
        md.append("| configuration | stages (layers) | examples/s | speed-up | ideal speed-up | ratio (≥ 0.8) |"
                + " attainable | ratio to attainable | bubble measured | ideal | simulated for measured stage times |"
                + " predicted by the profile |\n");
        md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        StringBuilder raw = new StringBuilder();
        raw.append("config,rep,examples_per_s,median_bubble,simulated_bubble,median_step_ms\n");
        for (int c = 0; c < configs.size(); c++) {
            Config config = configs.get(c);
            List<Run> rs = runs.get(c);
            Run median = rs.stream().sorted((a, b) -> Double.compare(a.examplesPerSecond(), b.examplesPerSecond()))
                    .toList().get(rs.size() / 2);
            int microbatches = o.microbatchesPerRank() * config.ranks();
            double ideal = idealBubble(config, microbatches);
            double idealSpeedup = config.ranks() * (1 - ideal);
            double speedup = median.examplesPerSecond() / median(single.get(config.ranks()));
            double attainable = idealSpeedup * median(singleMicrobatch) / median(single.get(config.ranks()));
            double predictedBubble = predictedBubble(model, config, microbatches, profiles[c]);
            String predicted = Double.isNaN(predictedBubble) ? "—" : String.format(Locale.ROOT, "%.1f %%", 100 * predictedBubble);
            boolean bubbleMet = median.medianBubble() - ideal <= 0.05;
            boolean speedMet = speedup >= 0.8 * idealSpeedup;
            md.append(String.format(Locale.ROOT, "| %s | %s | %.0f | %.2f× | %.2f× | %.2f %s | %.2f× | %.2f | %.1f %% %s |"
                            + " %.1f %% | %.1f %% | %s |%n", config.label(), median.stages(), median.examplesPerSecond(),
                    speedup, idealSpeedup, speedup / idealSpeedup, speedMet ? "(met)" : "(not met)", attainable,
                    speedup / attainable, 100 * median.medianBubble(), bubbleMet ? "(met)" : "(not met)", 100 * ideal,
                    100 * median.simulatedBubble(), predicted));
            for (int r = 0; r < rs.size(); r++) {
                Run run = rs.get(r);
                raw.append(String.format(Locale.ROOT, "\"%s\",%d,%.1f,%.4f,%.4f,%.3f%n", config.label(), r + 1,
                        run.examplesPerSecond(), run.medianBubble(), run.simulatedBubble(), run.medianStepMillis()));
            }
        }
        md.append("\nProfiles (per layer, one microbatch, forward/backward ms; the last layer's forward runs inside its"
                + " backward):\n\n");
        for (int c = 0; c < configs.size(); c++) {
            if (profiles[c] != null) {
                md.append("- ").append(configs.get(c).label()).append(": ").append(profiles[c]).append('\n');
            }
        }
        md.append("\nRaw, one line per configuration and repetition (single model, by rank count: ");
        single.forEach((p, rates) -> md.append(p).append(" ranks ").append(fmt(rates, "%.1f")).append("; "));
        md.append("examples/s):\n\n```\n").append(raw).append("```\n");
        return md.toString();
    }

    private static String fmt(List<Double> values, String format) {
        return String.join(", ", values.stream().map(v -> String.format(Locale.ROOT, format, v)).toList());
    }

    private static void log(String format, Object... args) {
        System.err.printf(Locale.ROOT, format + "%n", args);
    }
}
