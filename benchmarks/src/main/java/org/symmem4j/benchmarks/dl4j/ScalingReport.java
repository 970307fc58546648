package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.function.ToDoubleFunction;
import org.symmem4j.benchmarks.dl4j.ScalingBench.Config;
import org.symmem4j.benchmarks.dl4j.ScalingBench.Mode;
import org.symmem4j.benchmarks.dl4j.ScalingBench.Model;
import org.symmem4j.benchmarks.dl4j.ScalingBench.Options;
import org.symmem4j.benchmarks.dl4j.ScalingBench.Row;

/** The markdown report of one {@link ScalingBench} run: setup, per-model scaling tables, targets, every run. */
final class ScalingReport {

    private final Options o;
    private final List<Row> rows;
    private final Map<Model, Long> params;
    private final Map<String, List<Row>> byKey = new LinkedHashMap<>();
    private final String machine;

    ScalingReport(Options o, List<Row> rows, Map<Model, Long> params, String machine) {
        this.o = o;
        this.machine = machine;
        this.rows = List.copyOf(rows);
        this.params = params;
        for (Row r : rows) {
            byKey.computeIfAbsent(r.config().key(), k -> new ArrayList<>()).add(r);
        }
    }

    private OptionalDouble median(Model m, Mode mode, int workers, int threads, ToDoubleFunction<Row> f) {
        List<Row> rs = byKey.get(new Config(m, mode, workers, threads).key());
        if (rs == null || rs.isEmpty()) {
            return OptionalDouble.empty();
        }
        double[] v = rs.stream().mapToDouble(f).sorted().toArray();
        return OptionalDouble.of(v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2);
    }

    private OptionalDouble throughput(Model m, Mode mode, int workers) {
        return median(m, mode, workers, 1, Row::examplesPerSecond);
    }

    /** The best single-model configuration on the merged batch of N·B: [examples/s, threads], or null. */
    private double[] bestSingle(Model m, int workers) {
        double[] best = null;
        for (int t : o.singleThreads()) {
            OptionalDouble v = median(m, Mode.SINGLE, workers, t, Row::examplesPerSecond);
            if (v.isPresent() && (best == null || v.getAsDouble() > best[0])) {
                best = new double[] {v.getAsDouble(), t};
            }
        }
        return best;
    }

    String render() {
        StringBuilder s = new StringBuilder();
        s.append("# Data-parallel scaling on the CPU: symmem4j vs one model and ParallelWrapper\n\n");
        s.append("- rendered: ").append(Instant.now().truncatedTo(ChronoUnit.MINUTES)).append(" (UTC)")
                .append(o.renderFrom() == null ? "" : ", from " + o.renderFrom().getFileName() + " rows labelled " + o.label())
                .append('\n');
        s.append("- machine: ").append(machine).append('\n');
        if (o.renderFrom() == null) {
            s.append("- JDK: ").append(System.getProperty("java.vm.vendor")).append(' ')
                    .append(System.getProperty("java.vm.name")).append(' ').append(System.getProperty("java.runtime.version"))
                    .append('\n');
            s.append("- OMP_NUM_THREADS=").append(System.getenv("OMP_NUM_THREADS") == null ? "(unset)"
                    : System.getenv("OMP_NUM_THREADS")).append('\n');
        }
        s.append("- DL4J/ND4J: 1.0.0-M2.1, nd4j-native (CPU), OpenBLAS\n");
        s.append("- commit: ").append(o.commit()).append('\n');
        s.append("- command: `").append(o.command()).append("`\n\n");
        s.append("## Method\n\n");
        s.append(fmt("- every mode trains the same model from the same initial weights on the same generated data"
                + " (SyntheticData, 32 distinct batches of B = %d per worker, cycled), Adam, fp32.\n", o.batch()));
        s.append(fmt("- throughput: examples trained in a timed window of %.1f s (after %.1f s of warm-up on the same"
                + " model and wrapper; ParallelWrapper warms up on a throwaway instance and its timed fit includes its own"
                + " start) ÷ wall time; %d repetitions round-robin over all configurations of a model, medians.\n",
                o.seconds(), o.warmupSeconds(), o.reps()));
        s.append("- ND4J threads: every parallel mode and `alone`/`independent` run one ND4J thread per worker"
                + " (`setMaxMasterThreads`, BLAS threads); `single` sweeps the threads given. `setMaxThreads` alone has no"
                + " effect in this ND4J (see the `single-setmaxthreads` row).\n");
        s.append("- ideal = N × `alone` (one worker's share, batch B, trained alone on one thread). `independent` = N"
                + " unsynchronized models trained at once on N threads: what the machine gives N replicas; symmem4j ÷"
                + " independent is what sync and hand-off cost.\n");
        s.append("- between steps ms: wall time per step minus the slowest worker's step time: the caller's hand-off"
                + " to the workers and back, and its work between steps.\n");
        s.append("- step/sync ms: symmem4j's step reports (slowest worker's step and sync), means over the window;"
                + " exposed sync = from the last worker's arrival at the sync to the last worker's finish (no waiting"
                + " for stragglers). all-reduce ms: the host all-reduce alone, N threads, the model's gradient in the"
                + " wrapper's buckets, median of 60.\n\n");

        for (Model m : o.models()) {
            if (params.containsKey(m)) { // a report rendered from a CSV holds only the models it measured
                renderModel(s, m);
            }
        }
        s.append("## Every run\n\n");
        s.append("| config | rep | examples/s | steps | step ms | sync ms | exposed sync ms | all-reduce ms |\n");
        s.append("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Row r : rows) {
            s.append(fmt("| %s | %d | %s | %d | %s | %s | %s | %s |\n", r.config().key(), r.rep(),
                    r.examples() == 0 ? "" : fmt("%,.0f", r.examplesPerSecond()), r.steps(), num(r.stepMillis()),
                    num(r.syncMillis()), num(r.exposedSyncMillis()), num(r.allReduceMillis())));
        }
        return s.toString();
    }

    private void renderModel(StringBuilder s, Model m) {
        s.append("## ").append(m.describe(params.get(m))).append("\n\n");
        OptionalDouble alone = throughput(m, Mode.ALONE, 1);
        OptionalDouble oldApi = throughput(m, Mode.SINGLE_SETMAXTHREADS, 1);
        if (alone.isPresent()) {
            s.append(fmt("One worker's share alone (batch %d, 1 ND4J thread via setMaxMasterThreads): %,.0f examples/s",
                    o.batch(), alone.getAsDouble()));
            if (oldApi.isPresent()) {
                s.append(fmt("; with only `setMaxThreads(1)` (what the wrapper used to call): %,.0f examples/s (%.2f×)",
                        oldApi.getAsDouble(), oldApi.getAsDouble() / alone.getAsDouble()));
            }
            s.append(".\n\n");
        }
        s.append("| N | ideal N×alone | independent | best single (threads) | symmem4j | ×ideal | ×independent | ×best single"
                + " | overlapped | bf16 | ZeRO-1 | AVERAGING(1) | SHARED_GRADIENTS | PW CUSTOM+symmem4j | ×best PW | step ms | sync ms | exposed sync ms"
                + " | overlapped exposed ms | all-reduce ms | between steps ms |\n");
        s.append("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int n : o.workers()) {
            double ideal = alone.isPresent() ? n * alone.getAsDouble() : Double.NaN;
            double indep = throughput(m, Mode.INDEPENDENT, n).orElse(n == 1 ? alone.orElse(Double.NaN) : Double.NaN);
            double[] single = n == 1 ? (alone.isPresent() ? new double[] {alone.getAsDouble(), 1} : null) : bestSingle(m, n);
            double sym = throughput(m, Mode.SYMMEM, n).orElse(Double.NaN);
            double ov = throughput(m, Mode.SYMMEM_OVERLAP, n).orElse(Double.NaN);
            double bf = throughput(m, Mode.SYMMEM_BF16, n).orElse(Double.NaN);
            double zero1 = throughput(m, Mode.SYMMEM_ZERO1, n).orElse(Double.NaN);
            double avg = throughput(m, Mode.AVERAGING, n).orElse(Double.NaN);
            double sh = throughput(m, Mode.SHARED, n).orElse(Double.NaN);
            double pwSymmem = throughput(m, Mode.PW_CUSTOM_SYMMEM, n).orElse(Double.NaN);
            double bestPw = Double.isNaN(avg) ? sh : Double.isNaN(sh) ? avg : Math.max(avg, sh);
            s.append(fmt("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n,
                    rate(ideal), rate(indep), single == null ? "" : fmt("%,.0f (%d)", single[0], (int) single[1]), rate(sym),
                    ratio(sym, ideal), ratio(sym, indep), ratio(sym, single == null ? Double.NaN : single[0]), rate(ov),
                    rate(bf), rate(zero1), rate(avg), rate(sh), rate(pwSymmem), ratio(Math.max(sym, Double.isNaN(ov) ? 0 : ov), bestPw),
                    num(median(m, Mode.SYMMEM, n, 1, Row::stepMillis).orElse(Double.NaN)),
                    num(median(m, Mode.SYMMEM, n, 1, Row::syncMillis).orElse(Double.NaN)),
                    num(median(m, Mode.SYMMEM, n, 1, Row::exposedSyncMillis).orElse(Double.NaN)),
                    num(median(m, Mode.SYMMEM_OVERLAP, n, 1, Row::exposedSyncMillis).orElse(Double.NaN)),
                    num(median(m, Mode.ALLREDUCE, n, 1, Row::allReduceMillis).orElse(Double.NaN)),
                    // wall time per step less the slowest worker's step: hand-off and the caller's work between steps
                    num(median(m, Mode.SYMMEM, n, 1, r -> r.steps() == 0 ? Double.NaN
                            : r.seconds() * 1e3 / r.steps() - r.stepMillis()).orElse(Double.NaN))));
        }
        s.append('\n');
        renderTargets(s, m, alone);
    }

    private void renderTargets(StringBuilder s, Model m, OptionalDouble alone) {
        List<String> lines = new ArrayList<>();
        for (int n : o.compareWorkers()) {
            double sym = throughput(m, Mode.SYMMEM, n).orElse(Double.NaN);
            double ov = throughput(m, Mode.SYMMEM_OVERLAP, n).orElse(Double.NaN);
            double best = Double.isNaN(ov) ? sym : Math.max(sym, ov);
            double ideal = alone.isPresent() ? n * alone.getAsDouble() : Double.NaN;
            double indep = throughput(m, Mode.INDEPENDENT, n).orElse(Double.NaN);
            double share = n >= 16 ? 0.7 : 0.8;
            if (n == 8 || n == 16) {
                lines.add(fmt("- N=%d: symmem4j (better of plain/overlapped) %s ≥ %.1f × ideal %s: **%s** (%.2f×); the machine"
                        + " itself gives N unsynchronized replicas %s = %.2f× ideal, and symmem4j reaches %.2f× of that",
                        n, rate(best), share, rate(ideal), verdict(best >= share * ideal), best / ideal, rate(indep),
                        indep / ideal, best / indep));
            }
            double[] single = bestSingle(m, n);
            if (n == 16 && single != null) {
                lines.add(fmt("- N=16: ≥ 4× the best single-model configuration (%,.0f at %d threads): **%s** (%.2f×)",
                        single[0], (int) single[1], verdict(best >= 4 * single[0]), best / single[0]));
            }
            double avg = throughput(m, Mode.AVERAGING, n).orElse(Double.NaN);
            double sh = throughput(m, Mode.SHARED, n).orElse(Double.NaN);
            double pw = Math.max(Double.isNaN(avg) ? 0 : avg, Double.isNaN(sh) ? 0 : sh);
            if (pw > 0) {
                lines.add(fmt("- N=%d: ≥ 2× ParallelWrapper's best mode (%s): **%s** (%.2f×)", n, rate(pw),
                        verdict(best >= 2 * pw), best / pw));
            }
            double exposed = median(m, Mode.SYMMEM, n, 1, Row::exposedSyncMillis).orElse(Double.NaN);
            double ar = median(m, Mode.ALLREDUCE, n, 1, Row::allReduceMillis).orElse(Double.NaN);
            if (n == 16 && !Double.isNaN(ar)) {
                lines.add(fmt("- N=16: exposed sync per step %.3f ms within 2× the all-reduce alone (%.3f ms): **%s** (%.2f×);"
                        + " the slowest worker's sync, waiting for stragglers included: %.3f ms", exposed, ar,
                        verdict(exposed <= 2 * ar), exposed / ar,
                        median(m, Mode.SYMMEM, n, 1, Row::syncMillis).orElse(Double.NaN)));
            }
            double ovExposed = median(m, Mode.SYMMEM_OVERLAP, n, 1, Row::exposedSyncMillis).orElse(Double.NaN);
            if (!Double.isNaN(ovExposed) && exposed > 0) {
                lines.add(fmt("- N=%d: overlap hides %.0f %% of the exposed sync (%.3f → %.3f ms per step; target ≥ 50 %% where"
                        + " backprop below the last bucket is long enough); throughput %s vs %s", n,
                        100 * (1 - ovExposed / exposed), exposed, ovExposed, rate(ov), rate(sym)));
            }
        }
        if (!lines.isEmpty()) {
            s.append("Targets:\n\n");
            lines.forEach(l -> s.append(l).append('\n'));
            s.append('\n');
        }
    }

    static String cpuTopology() {
        try {
            List<String> lines = Files.readAllLines(Path.of("/proc/cpuinfo"));
            String siblings = lines.stream().filter(l -> l.startsWith("siblings")).findFirst().map(l -> l.split(":")[1].trim())
                    .orElse("?");
            String coresPer = lines.stream().filter(l -> l.startsWith("cpu cores")).findFirst().map(l -> l.split(":")[1].trim())
                    .orElse("?");
            long sockets = lines.stream().filter(l -> l.startsWith("physical id")).distinct().count();
            return " (/proc/cpuinfo: " + sockets + " socket(s), cpu cores " + coresPer + ", siblings " + siblings + ")";
        } catch (IOException | RuntimeException e) {
            return "";
        }
    }

    private static String verdict(boolean met) {
        return met ? "met" : "not met";
    }

    private static String rate(double v) {
        return Double.isNaN(v) ? "" : fmt("%,.0f", v);
    }

    private static String ratio(double a, double b) {
        return Double.isNaN(a) || Double.isNaN(b) || b == 0 ? "" : fmt("%.2f×", a / b);
    }

    private static String num(double v) {
        return Double.isNaN(v) ? "" : fmt("%.3f", v);
    }

    static String fmt(String f, Object... args) {
        return String.format(Locale.ROOT, f, args);
    }
}
