package org.symmem4j.benchmarks.dl4j;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.ToDoubleFunction;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.benchmarks.dl4j.PipelineBench.Config;
import org.symmem4j.benchmarks.dl4j.PipelineBench.Options;
import org.symmem4j.benchmarks.dl4j.PipelineBench.Results;
import org.symmem4j.benchmarks.dl4j.PipelineBench.Run;
import org.symmem4j.dl4j.pipeline.InPipelineProfile;
import org.symmem4j.parallel.affinity.RankAffinity;
import org.symmem4j.pipeline.exec.TimelineBreakdown;

/**
 * {@link PipelineBench}'s markdown report: the speed of every configuration against the single model and against the
 * machine's own bound (P independent models on P cores, measured in the same run), and its bubble against the
 * schedule's ideal and the simulator's for the measured pass times, split by where the idle time went.
 */
final class PipelineBenchReport {

    private PipelineBenchReport() {
    }

    static String render(Options o, MultiLayerNetwork model, Results r, int repsDone) {
        StringBuilder md = new StringBuilder();
        md.append("# Pipeline speed: DL4J deep MLP, pipeline vs single model and vs the machine's bound\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- machine: ").append(o.machine()).append('\n');
        md.append("- JDK: ").append(System.getProperty("java.vm.name")).append(' ').append(Runtime.version())
                .append("; DL4J/ND4J 1.0.0-M2.1 (nd4j-native)\n");
        md.append("- commit: ").append(o.commit()).append('\n');
        md.append("- CPU affinity of the rank threads and of the bound's threads (`symmem4j.affinity`): ")
                .append(affinity(o)).append('\n');
        md.append("- command: `").append(o.command()).append("`\n");
        if (o.raw() != null) {
            md.append("- raw data, one CSV row per measured run: `").append(o.raw().getFileName()).append("`\n");
        }
        md.append(String.format(Locale.ROOT, "- model: %d → %d × tanh dense(%d) → softmax(%d), Adam(1e-3), fp32, %,d"
                        + " parameters; generated data (`SyntheticData`)%s%n", o.features(), o.layers(), o.hidden(),
                PipelineBench.CLASSES, model.numParams(), o.features() == o.hidden()
                        ? "; the input as wide as the hidden layers, so that every hidden layer costs the same and stages"
                        + " of whole layers can be equal (the output layer, which computes the loss, is the one lighter"
                        + " layer)" : ""));
        md.append(String.format(Locale.ROOT, "- each configuration: %d untimed steps, then %d timed steps; %d of %d"
                        + " repetitions done, round-robin with the baselines; the median repetition shown, min–max beside"
                        + " it; ND4J threads: %d per rank, per independent model and for the single model; microbatches:"
                        + " %d per rank of %d examples (batch = ranks × %d)%n", o.warmup(), o.steps(), repsDone, o.reps(),
                o.threads(), o.microbatchesPerRank(), o.batchPerMicrobatch(),
                o.microbatchesPerRank() * o.batchPerMicrobatch()));
        for (Map.Entry<Integer, List<Double>> e : r.single().entrySet()) {
            md.append(String.format(Locale.ROOT, "- single model `fit()` on the batches of %d ranks (%d examples), %d"
                            + " untimed + %d timed steps: **%.0f examples/s** (repetitions: %s)%n", e.getKey(),
                    o.microbatchesPerRank() * e.getKey() * o.batchPerMicrobatch(), o.warmup(), o.singleSteps(),
                    median(e.getValue()), fmt(e.getValue(), "%.0f")));
        }
        md.append(String.format(Locale.ROOT, "- the single model on batches of one microbatch (%d): %.0f examples/s"
                        + " (repetitions: %s)%n", o.batchPerMicrobatch(), median(r.singleMicrobatch()),
                fmt(r.singleMicrobatch(), "%.0f")));
        for (Map.Entry<Integer, List<Double>> e : r.bound().entrySet()) {
            md.append(String.format(Locale.ROOT, "- **bound for %d ranks**: %d independent copies of the model trained at"
                            + " once on %d threads, each on one-microbatch batches (%d), %.1f s window: **%.0f examples/s**"
                            + " (repetitions: %s); %.2f× the single model on one microbatch alone%n", e.getKey(),
                    e.getKey(), e.getKey(), o.batchPerMicrobatch(), o.boundSeconds(), median(e.getValue()),
                    fmt(e.getValue(), "%.0f"), median(e.getValue()) / median(r.singleMicrobatch())));
        }
        for (String s : r.skipped()) {
            md.append("- skipped (interleaving needs two layers per stage): ").append(s).append('\n');
        }
        md.append("\nTargets (issue 35, a core per rank), against the machine's own bound: the bound is what P cores"
                + " deliver to P independent copies of the model on one-microbatch batches (memory bandwidth, caches,"
                + " turbo and DL4J's per-microbatch cost included); a pipeline of P ranks with the schedule's ideal bubble"
                + " b would reach bound × (1 − b). Target: examples/s ≥ 0.8 × bound × (1 − b), and the measured bubble"
                + " within 5 points of b. The older ratio to P × (1 − b) × the single model's rate on the merged batch is"
                + " kept for comparison.\n\n");
        md.append("| configuration | stages (layers) | examples/s (min–max) | speed-up vs single | bound | speed-up /"
                + " bound | bound × (1 − ideal) | ratio (≥ 0.8) | old ratio to P × (1 − ideal) |\n");
        md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Measured m : measured(o, r)) {
            Config config = m.config();
            Run median = m.median();
            double ideal = m.ideal();
            double single = median(r.single().get(config.ranks()));
            double speedup = median.examplesPerSecond() / single;
            double oldRatio = speedup / (config.ranks() * (1 - ideal));
            List<Double> bounds = r.bound().get(config.ranks());
            String bound = "—";
            String overBound = "—";
            String boundIdeal = "—";
            String ratio = "—";
            if (bounds != null) {
                double b = median(bounds);
                bound = String.format(Locale.ROOT, "%.0f", b);
                overBound = String.format(Locale.ROOT, "%.2f", median.examplesPerSecond() / b);
                boundIdeal = String.format(Locale.ROOT, "%.0f", b * (1 - ideal));
                double q = median.examplesPerSecond() / (b * (1 - ideal));
                ratio = String.format(Locale.ROOT, "**%.2f** %s", q, q >= 0.8 ? "(met)" : "(not met)");
            }
            md.append(String.format(Locale.ROOT, "| %s | %s | %.0f (%s) | %.2f× | %s | %s | %s | %s | %.2f |%n",
                    config.label(), median.stages(), median.examplesPerSecond(),
                    range(m.runs(), Run::examplesPerSecond, "%.0f", 1), speedup, bound, overBound, boundIdeal, ratio, oldRatio));
        }
        if (measured(o, r).stream().anyMatch(m -> m.median().machineBound() != null)) {
            machineBoundTable(md, measured(o, r));
        }
        md.append("\nBubble: the median step's idle share of the ranks' window (first pass start to last pass end), against"
                + " the schedule's ideal (B = 2F, free hand-offs), the simulator's for that step's measured per-stage pass"
                + " times and hand-off latency (with each stage's measured weight-gradient share under ZB-H1), and the"
                + " profile's prediction for the split the trainer made (the simulated search from the time-balanced split,"
                + " `PipelineStageSplit.byProfile`) and for the time-balanced split alone (the rule before it); then the"
                + " measured bubble split by what the ranks did meanwhile"
                + " (`TimelineBreakdown`: waiting for / taking a message, posting one, the optimizer step, the executor"
                + " between events, before the rank's step began, after it ended), and the stages' compute in the"
                + " pipeline over the same"
                + " passes profiled alone on one thread (> 1: per-microbatch cost the pipeline adds, or cores the"
                + " ranks share); last, the median send (the hand-off's copy into the peer's slot, and any wait for room)"
                + " against the median pass: a fixed cost per message that the split by measured times does not"
                + " count.\n\n");
        md.append("| configuration | measured (min–max) | ideal | within 5 points | simulated | measured − simulated |"
                + " predicted by the profile | predicted, balanced split | receive | send | optimizer | between | before | after | compute / profile |"
                + " send / pass (median µs) |\n");
        md.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for (Measured m : measured(o, r)) {
            Config config = m.config();
            Run median = m.median();
            double ideal = m.ideal();
            double predicted = PipelineBench.predictedBubble(model, config, m.microbatches(), r.profiles()[m.index()],
                    r.inPipeline()[m.index()]);
            double balanced = PipelineBench.predictedBalancedBubble(model, config, m.microbatches(),
                    r.profiles()[m.index()], r.inPipeline()[m.index()]);
            TimelineBreakdown b = median.breakdown();
            md.append(String.format(Locale.ROOT, "| %s | %.1f %% (%s) | %.1f %% | %s | %.1f %% | %+.1f | %s | %s | %.1f %% |"
                            + " %.1f %% | %.1f %% | %.1f %% | %.1f %% | %.1f %% | %s | %.0f / %.0f |%n", config.label(),
                    100 * median.medianBubble(),
                    range(m.runs(), Run::medianBubble, "%.1f", 100), 100 * ideal,
                    median.medianBubble() - ideal <= 0.05 ? "met" : "not met", 100 * median.simulatedBubble(),
                    100 * (median.medianBubble() - median.simulatedBubble()),
                    percent(predicted), percent(balanced), 100 * b.receive(), 100 * b.send(), 100 * b.optimizer(), 100 * b.between(), 100 * b.before(),
                    100 * b.after(),
                    Double.isNaN(median.computeOverProfile()) ? "—"
                            : String.format(Locale.ROOT, "%.2f", median.computeOverProfile()),
                    median.medianSendMicros(), median.medianPassMicros()));
        }
        md.append("\nStages: per stage, the median step's mean forward + backward in the pipeline (input + weight"
                + " gradient under ZB-H1), ms, and after the slash the profile's for the same layers (the last stage's"
                + " forward inside its backward); then each rank's busy time in that step (all its passes), ms, and"
                + " after the slash the step's window (equal stages should keep their ranks equally busy); last, where the rank"
                + " threads ran over the timed steps, sampled from /proc every 5 ms (`ThreadPlacement`: the CPUs each busy"
                + " rank thread was seen on and its moves between them, and how often two sat on one CPU or on two"
                + " hardware threads of one core):\n\n");
        for (Measured m : measured(o, r)) {
            md.append("- ").append(m.config().label()).append(" (").append(m.median().stages()).append("): ")
                    .append(m.median().stageTimes()).append("; busy per rank ").append(m.median().rankBusy())
                    .append(busySpread(m.median().rankBusy())).append("; rank threads: ")
                    .append(m.median().placement()).append('\n');
        }
        if (java.util.Arrays.stream(r.inPipeline()).anyMatch(java.util.Objects::nonNull)) {
            md.append("\nRe-balanced from times measured in the pipeline (`--splits pipeline`, `InPipelineProfile`): the"
                    + " profiling run's split, each stage's median forward/backward there (ms) and its forward + backward"
                    + " over the alone profile's for the same layers (the factor the split assumes stays with the stage"
                    + " position), then the split the timed runs used. For these rows the bubble table's \"predicted by"
                    + " the profile\" is the in-pipeline times' simulated bubble for the new split, and \"predicted,"
                    + " balanced split\" theirs for the split that ran in the profiling run:\n\n");
            for (Measured m : measured(o, r)) {
                InPipelineProfile times = r.inPipeline()[m.index()];
                if (times != null) {
                    md.append("- ").append(m.config().label()).append(": ").append(times).append(" → ")
                            .append(m.median().stages()).append('\n');
                }
            }
        }
        md.append("\nProfiles (per layer, one microbatch, forward/backward ms; the last layer's forward runs inside its"
                + " backward):\n\n");
        for (int c = 0; c < r.configs().size(); c++) {
            if (r.profiles()[c] != null) {
                md.append("- ").append(r.configs().get(c).label()).append(": ").append(r.profiles()[c]).append('\n');
            }
        }
        md.append("\nRaw, one line per configuration and repetition:\n\n```\n");
        md.append("config,rep,examples_per_s,median_bubble,simulated_bubble,median_step_ms,compute_over_profile\n");
        for (int c = 0; c < r.configs().size(); c++) {
            List<Run> rs = r.runs().get(c);
            for (int i = 0; i < rs.size(); i++) {
                Run run = rs.get(i);
                md.append(String.format(Locale.ROOT, "\"%s\",%d,%.1f,%.4f,%.4f,%.3f,%.3f%n", r.configs().get(c).label(),
                        i + 1, run.examplesPerSecond(), run.medianBubble(), run.simulatedBubble(), run.medianStepMillis(),
                        run.computeOverProfile()));
            }
        }
        md.append("```\n");
        return md.toString();
    }

    /**
     * The target stated against the machine's own bound for the schedule ({@link MachineBoundSteps}): beside
     * the ideal, the bubble and speed the schedule reaches with each stage's passes timed on its rank's core while every
     * core runs its stages' work independently, measured after every timed step (ABAB).
     */
    private static void machineBoundTable(StringBuilder md, List<Measured> measured) {
        md.append("\nAgainst the machine's bound for the schedule (issue 35's target: bubble within 5 points of it,"
                + " speed ≥ 0.8 × its speed). After every timed step (ABAB, so that the machine's drift hits both), each"
                + " rank's stages ran alone and at once on the rank's CPU, pinned as the ranks are (N independent jobs on"
                + " N cores: every microbatch's forward and backward, its input- and weight-gradient halves under ZB-H1,"
                + " the optimizer step; `IndependentStages`); the simulator fed with those per-core pass times and free"
                + " hand-offs gives the bubble and step time the schedule can reach on this machine with this split"
                + " (`MachineBound`). \"Over the bound\" and \"speed / bound\" are medians over the step/window pairs;"
                + " \"pipeline / independent\" is, per stage, the median step's forward + backward over the paired"
                + " window's on the same core (> 1: the stage's passes ran slower inside the pipeline); last, the median"
                + " step's points over its window's bound split by the simulator: the step's own stage times with free"
                + " hand-offs against the bound (passes slower in the pipeline than alone), its hand-off latency, and"
                + " the rest (the executor, waits beyond the mean latency, the passes' jitter).\n\n");
        md.append("| configuration | bubble | ideal | over ideal | simulated, pipeline's stage times | machine's bound |"
                + " **over the bound (≤ 5)** | examples/s | bound's examples/s | **speed / bound (≥ 0.8)** | pipeline /"
                + " independent, per stage | independent stage ms | median step over its bound: passes / hand-offs /"
                + " rest |\n");
        md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
        for (Measured m : measured) {
            Run median = m.median();
            MachineBoundSteps b = median.machineBound();
            if (b == null) {
                continue;
            }
            md.append(String.format(Locale.ROOT, "| %s | %.1f %% | %.1f %% | %+.1f | %.1f %% | %.1f %% | **%+.1f** %s |"
                            + " %.0f | %.0f | **%.2f** %s | %s | %s | %s |%n", m.config().label(), 100 * median.medianBubble(),
                    100 * m.ideal(), 100 * (median.medianBubble() - m.ideal()), 100 * median.simulatedBubble(),
                    100 * b.boundBubble(), b.overBoundPoints(), b.overBoundPoints() <= 5 ? "(met)" : "(not met)",
                    median.examplesPerSecond(), b.boundExamplesPerSecond(), b.speedOverBound(),
                    b.speedOverBound() >= 0.8 ? "(met)" : "(not met)", median.passOverIndependent(),
                    median.independentStageTimes(), median.excess()));
        }
    }

    /**
     * A configuration that has runs, as both tables show it: its median run (by examples/s), its microbatches per
     * step and the schedule's ideal bubble for them.
     */
    private record Measured(int index, Config config, List<Run> runs, Run median, int microbatches, double ideal) {
    }

    /** The configurations with at least one run, in the results' order. */
    private static List<Measured> measured(Options o, Results r) {
        List<Measured> out = new ArrayList<>();
        for (int c = 0; c < r.configs().size(); c++) {
            Config config = r.configs().get(c);
            List<Run> rs = r.runs().get(c);
            if (!rs.isEmpty()) {
                int microbatches = o.microbatchesPerRank() * config.ranks();
                out.add(new Measured(c, config, rs, medianRun(rs), microbatches,
                        PipelineBench.idealBubble(config, microbatches)));
            }
        }
        return out;
    }

    private static Run medianRun(List<Run> runs) {
        return runs.stream().sorted((a, b) -> Double.compare(a.examplesPerSecond(), b.examplesPerSecond())).toList()
                .get(runs.size() / 2);
    }

    private static String range(List<Run> runs, ToDoubleFunction<Run> value, String format, double scale) {
        double min = runs.stream().mapToDouble(value).min().orElse(Double.NaN) * scale;
        double max = runs.stream().mapToDouble(value).max().orElse(Double.NaN) * scale;
        return String.format(Locale.ROOT, format + "–" + format, min, max);
    }

    /** The settings' pinning for each rank count of the run, or why none. */
    static String affinity(Options o) {
        try {
            StringBuilder s = new StringBuilder();
            for (int p : o.ranks()) {
                RankAffinity a = RankAffinity.fromConfiguration(p);
                if (!a.enabled()) {
                    return "off (threads float over the cores, as the kernel places them)";
                }
                s.append(s.isEmpty() ? "" : "; ").append(p).append(" ranks ").append(a);
            }
            return s.toString();
        } catch (RuntimeException e) {
            return "not applied: " + e.getMessage();
        }
    }

    /** " (max/min 1.23)" for a {@link PipelineBench#rankBusy} text, empty when it cannot be read. */
    static String busySpread(String rankBusy) {
        String[] parts = rankBusy.split("/")[0].split(";");
        double max = 0;
        double min = Double.MAX_VALUE;
        for (String part : parts) {
            double v = Double.parseDouble(part);
            max = Math.max(max, v);
            min = Math.min(min, v);
        }
        return min > 0 ? String.format(Locale.ROOT, " (max/min %.2f)", max / min) : "";
    }

    private static String percent(double fraction) {
        return Double.isNaN(fraction) ? "—" : String.format(Locale.ROOT, "%.1f %%", 100 * fraction);
    }

    static double median(List<Double> values) {
        List<Double> sorted = values.stream().sorted().toList();
        return sorted.get(sorted.size() / 2);
    }

    private static String fmt(List<Double> values, String format) {
        return String.join(", ", values.stream().map(v -> String.format(Locale.ROOT, format, v)).toList());
    }
}
