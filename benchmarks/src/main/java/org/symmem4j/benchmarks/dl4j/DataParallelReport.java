package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.ToDoubleFunction;
import java.util.stream.Collectors;
import org.symmem4j.benchmarks.dl4j.DataParallelBench.Mode;
import org.symmem4j.benchmarks.dl4j.DataParallelBench.Options;
import org.symmem4j.benchmarks.dl4j.DataParallelBench.Result;

/** The markdown report of one {@link DataParallelBench} run: setup, method, results table, targets. */
final class DataParallelReport {

    /** symmem4j must reach this multiple of SHARED_GRADIENTS throughput. */
    static final double SHARED_GRADIENTS_TARGET = 1.25;

    private final Options o;
    private final List<Result> results;
    private final double untrainedLoss;
    private final long params;
    private final Map<Mode, List<Result>> byMode = new EnumMap<>(Mode.class);

    DataParallelReport(Options o, List<Result> results, double untrainedLoss, long params) {
        this.o = o;
        this.results = List.copyOf(results);
        this.untrainedLoss = untrainedLoss;
        this.params = params;
        for (Result r : results) {
            byMode.computeIfAbsent(r.mode(), m -> new ArrayList<>()).add(r);
        }
    }

    String render() {
        StringBuilder s = new StringBuilder();
        s.append("# Data-parallel training benchmark: DL4J ParallelWrapper vs symmem4j (CPU)\n\n");
        s.append("- date: ").append(Instant.now().truncatedTo(ChronoUnit.MINUTES)).append(" (UTC)\n");
        s.append("- machine: ").append(MachineInfo.cpuModel()).append(", ").append(o.cores()).append(" cores, ").append(MachineInfo.ramGiB())
                .append(" RAM, ").append(System.getProperty("os.name")).append(' ').append(System.getProperty("os.version"))
                .append('\n');
        s.append("- JDK: ").append(System.getProperty("java.vm.vendor")).append(' ')
                .append(System.getProperty("java.vm.name")).append(' ').append(System.getProperty("java.runtime.version"))
                .append('\n');
        s.append("- DL4J/ND4J: 1.0.0-M2.1, nd4j-native (CPU)\n");
        s.append("- commit: ").append(o.commit()).append('\n');
        s.append("- command: `").append(o.command()).append("`\n");
        if (o.raw() != null) {
            s.append("- raw data, one CSV row per measured run: `").append(o.raw().getFileName()).append("`\n");
        }
        s.append('\n');

        s.append("## Setup and method\n\n");
        s.append(fmt("- model: MLP %d-%d-%d-%d (ReLU, ReLU, softmax; MCXENT), Adam(lr %s), fp32, Xavier init from seed"
                + " 12345, %,d parameters; every run starts from a freshly built model with the same initial weights"
                + " (untrained held-out loss %.4f).\n", DataParallelBench.FEATURES, o.hidden(), o.hidden(),
                DataParallelBench.CLASSES, org.symmem4j.examples.DataParallelExample.LEARNING_RATE, params, untrainedLoss));
        s.append(fmt("- data: generated (`SyntheticData`: Gaussian inputs labelled by a fixed random linear teacher, 10%%"
                + " label noise; no downloads). %d distinct steps of data, cycled; held-out set: %,d other examples.\n",
                o.distinctSteps(), o.heldOut()));
        s.append(fmt("- work per run: %,d optimizer steps of %d examples each (N = %d workers × B = %d per worker), i.e."
                + " %,d training examples, for every mode. The parallel modes consume %d-example batches, one per"
                + " worker per step; the single model gets the same %d batches of each step merged"
                + " (`DataSet.merge`) into one batch of %d, so every mode sees the same examples per optimizer step.\n",
                o.steps(), o.examplesPerStep(), o.workers(), o.batch(), (long) o.steps() * o.examplesPerStep(),
                o.batch(), o.workers(), o.examplesPerStep()));
        s.append("- timed: the wall time of the one `fit(iterator)` call of each run (for the parallel modes this includes"
                + " the wrapper starting its workers and replicas, once per run); not timed: building the model and the"
                + " wrapper, warm-up, and scoring the held-out set. examples/s = training examples ÷ that time.\n");
        s.append(fmt("- repetitions: %d per mode, reported as the median, run round-robin (every mode's repetition 1,"
                + " then every mode's repetition 2, ...) so slow stretches of a shared machine hit all modes alike.\n",
                o.reps()));
        s.append(fmt("- warm-up: before any timing, every mode trains %,d steps once (JIT and ND4J warm-up of each code"
                + " path, so the first timed mode is not penalised); before each timed run, %d more steps of the same"
                + " mode on a throwaway model and wrapper. `System.gc()` before each run.\n",
                o.warmupRoundSteps(), o.warmupSteps()));
        s.append(fmt("- threads: ND4J's op threads (`setMaxMasterThreads`; `setMaxThreads` is a no-op in this ND4J) and its"
                + " BLAS threads: for the single model the fastest of a sweep over %s threads, each timed for %,d steps on"
                + " the same merged batches (%s examples/s): **%d**; cores ÷ workers = %d for each parallel mode.\n",
                DataParallelBench.threadSweep(o.cores()), o.warmupRoundSteps(),
                o.single().sweep.stream().map(x -> fmt("%d: %,.0f", (int) x[0], x[1])).collect(Collectors.joining(", ")),
                o.single().best, o.threadsPerWorker()));
        s.append(fmt("- a fresh model and a fresh wrapper per run for every parallel mode: a second `fit()` of one"
                + " ParallelWrapper deadlocks in SHARED_GRADIENTS mode, and symmem4j is given the same treatment."
                + " ParallelWrapper: `workers(%d)` set explicitly, `prefetchBuffer(%d)`%s,"
                + " `reportScoreAfterAveraging(false)`; AVERAGING with `averagingFrequency(1)` (parameters and Adam"
                + " state averaged after every step); SHARED_GRADIENTS with its defaults (adaptive threshold,"
                + " `EncodedGradientsAccumulator`). symmem4j: `SymmemParallelWrapper.builder(net).workers(%d)`, calibrated"
                + " all-reduce policy, %d ND4J threads per worker.\n",
                o.workers(), o.prefetch(), o.prefetch() == 0
                        ? " (batches are already in memory; no mode gets a prefetch thread, the single model's fit reads"
                        + " its iterator on the calling thread too)" : "",
                o.workers(), o.threadsPerWorker()));
        s.append("- final loss: `net.score(heldOut)` of the model each mode hands back (ParallelWrapper: worker 0"
                + " trains the user's model itself; symmem4j copies the replicas' state back after `fit`).\n\n");

        s.append("## Results\n\n");
        s.append("| mode | examples/s (median) | the ").append(o.reps()).append(" runs | final held-out loss (median) |"
                + " vs single model | vs SHARED_GRADIENTS | vs AVERAGING(1) |\n");
        s.append("|---|---:|---|---:|---:|---:|---:|\n");
        for (Mode m : o.modes()) {
            List<Result> rs = byMode.getOrDefault(m, List.of());
            if (rs.isEmpty()) {
                continue;
            }
            double eps = median(m, Result::examplesPerSecond);
            s.append("| ").append(m.label).append(" | ").append(fmt("%,.0f", eps)).append(" | ")
                    .append(rs.stream().map(r -> fmt("%,.0f", r.examplesPerSecond())).collect(Collectors.joining(", ")))
                    .append(" | ").append(fmt("%.4f", median(m, Result::heldOutLoss)))
                    .append(" | ").append(ratio(eps, Mode.SINGLE))
                    .append(" | ").append(ratio(eps, Mode.SHARED_GRADIENTS))
                    .append(" | ").append(ratio(eps, Mode.AVERAGING)).append(" |\n");
        }
        s.append('\n');
        if (byMode.containsKey(Mode.SYMMEM)) {
            List<Result> rs = byMode.get(Mode.SYMMEM);
            s.append(fmt("- symmem4j sync share of step time (Σ syncNanos ÷ Σ stepNanos over a run, slowest worker"
                    + " per step): %.1f%% (median; runs %s)\n", 100 * median(Mode.SYMMEM, Result::syncShare),
                    rs.stream().map(r -> fmt("%.1f%%", 100 * r.syncShare())).collect(Collectors.joining(", "))));
            s.append(fmt("- symmem4j sync per step: %.3f ms (median; runs %s)\n",
                    median(Mode.SYMMEM, Result::syncMillisPerStep),
                    rs.stream().map(r -> fmt("%.3f", r.syncMillisPerStep())).collect(Collectors.joining(", "))));
        }
        if (byMode.containsKey(Mode.SYMMEM) && byMode.containsKey(Mode.SINGLE)) {
            s.append(fmt("- held-out loss, symmem4j − single model: %+.4f (median of each; exact mode, so they agree up to"
                    + " fp32 rounding differences compounded over %,d steps)\n",
                    median(Mode.SYMMEM, Result::heldOutLoss) - median(Mode.SINGLE, Result::heldOutLoss), o.steps()));
        }
        s.append("- untrained model's held-out loss: ").append(fmt("%.4f", untrainedLoss)).append("\n\n");

        s.append("All runs, in the order they ran:\n\n");
        s.append("| rep | mode | fit() s | examples/s | held-out loss |\n|---:|---|---:|---:|---:|\n");
        for (Result r : results) {
            s.append(fmt("| %d | %s | %.2f | %,.0f | %.4f |\n", r.rep(), r.mode().label, r.seconds(),
                    r.examplesPerSecond(), r.heldOutLoss()));
        }
        s.append('\n');

        s.append("## Targets\n\n");
        if (byMode.containsKey(Mode.SYMMEM) && byMode.containsKey(Mode.SHARED_GRADIENTS)) {
            double sym = median(Mode.SYMMEM, Result::examplesPerSecond);
            double sg = median(Mode.SHARED_GRADIENTS, Result::examplesPerSecond);
            s.append(fmt("- symmem4j ≥ %.2f× SHARED_GRADIENTS throughput: **%s** — symmem4j %,.0f examples/s vs %.2f ×"
                    + " %,.0f = %,.0f (ratio %.2f×)\n", SHARED_GRADIENTS_TARGET,
                    sym >= SHARED_GRADIENTS_TARGET * sg ? "met" : "not met", sym, SHARED_GRADIENTS_TARGET, sg,
                    SHARED_GRADIENTS_TARGET * sg, sym / sg));
        } else {
            s.append("- symmem4j ≥ 1.25× SHARED_GRADIENTS throughput: not measured in this run\n");
        }
        if (byMode.containsKey(Mode.SYMMEM) && byMode.containsKey(Mode.AVERAGING)) {
            double sym = median(Mode.SYMMEM, Result::examplesPerSecond);
            double avg = median(Mode.AVERAGING, Result::examplesPerSecond);
            s.append(fmt("- symmem4j ≥ AVERAGING(1) throughput: **%s** — symmem4j %,.0f examples/s vs %,.0f (ratio"
                    + " %.2f×)\n", sym >= avg ? "met" : "not met", sym, avg, sym / avg));
        } else {
            s.append("- symmem4j ≥ AVERAGING(1) throughput: not measured in this run\n");
        }
        s.append(fmt("\nMedians of %d repetitions on this machine (%d cores); judge scaling on bigger machines.\n\n",
                o.reps(), o.cores()));

        s.append("## What each mode computes\n\n");
        s.append("- **single model fit()**: plain Adam on batches of N·B — the reference.\n");
        s.append("- **symmem4j**: exact synchronous data parallelism — the workers' raw gradients are averaged"
                + " (all-reduce over symmetric memory) before each replica's updater runs, so every replica applies the"
                + " same Adam step and N × B trains like one model with batch N·B, to fp32 rounding: its held-out loss"
                + " should match the single model's.\n");
        s.append("- **ParallelWrapper AVERAGING(1)**: each worker takes its own Adam step on its own batch of B, then"
                + " parameters and updater state are averaged — not equal to large-batch Adam (Adam is not linear in"
                + " the gradient).\n");
        s.append("- **ParallelWrapper SHARED_GRADIENTS**: each worker runs Adam on its own gradient and shares the"
                + " resulting update threshold-encoded (sparse, ±threshold; the rest carried over as a residual to later"
                + " steps) — lossy; replicas are not kept identical.\n");
        return s.toString();
    }

    private double median(Mode m, ToDoubleFunction<Result> f) {
        return Stats.median(byMode.getOrDefault(m, List.of()).stream().mapToDouble(f));
    }

    private String ratio(double eps, Mode baseline) {
        if (!byMode.containsKey(baseline)) {
            return "—";
        }
        return fmt("%.2f×", eps / median(baseline, Result::examplesPerSecond));
    }

    private static String fmt(String format, Object... args) {
        return String.format(Locale.ROOT, format, args);
    }
}
