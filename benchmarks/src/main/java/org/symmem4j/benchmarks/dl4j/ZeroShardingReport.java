package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.function.ToDoubleFunction;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Mode;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Options;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Result;
import org.symmem4j.examples.DataParallelExample;

/** The markdown report of one {@link ZeroShardingBench} run: setup, method, the table per N, targets, every run. */
final class ZeroShardingReport {

    /** A worker's updater state may exceed 1/N of the unsharded state by this factor (shard alignment). */
    static final double STATE_TARGET = 1.01;

    private final Options o;
    private final List<Result> results;

    ZeroShardingReport(Options o, List<Result> results) {
        this.o = o;
        this.results = List.copyOf(results);
    }

    String render() {
        int cores = Runtime.getRuntime().availableProcessors();
        Result any = results.getFirst();
        StringBuilder s = new StringBuilder();
        s.append("# ZeRO-style sharding benchmark: updater state, off-heap memory and step time per worker (CPU)\n\n");
        s.append("- date: ").append(Instant.now().truncatedTo(ChronoUnit.MINUTES)).append(" (UTC)\n");
        s.append("- machine: ").append(MachineInfo.cpuModel()).append(", ").append(cores).append(" cores, ").append(MachineInfo.ramGiB()).append(" RAM, ")
                .append(System.getProperty("os.name")).append(' ').append(System.getProperty("os.version")).append('\n');
        s.append("- JDK: ").append(System.getProperty("java.vm.vendor")).append(' ').append(System.getProperty("java.vm.name"))
                .append(' ').append(System.getProperty("java.runtime.version")).append('\n');
        s.append("- DL4J/ND4J: 1.0.0-M2.1, nd4j-native (CPU); sharding runs on the host transport (threads of one JVM)\n");
        s.append("- commit: ").append(o.commit()).append('\n');
        s.append("- command: `").append(o.command()).append("`\n");
        if (o.raw() != null) {
            s.append("- raw data, one CSV row per run: `").append(o.raw().getFileName()).append("`\n");
        }
        s.append('\n');

        s.append("## Setup and method\n\n");
        s.append(fmt("- model: MLP %d-%d-%d-%d (ReLU, ReLU, softmax; MCXENT), Adam(lr %s) on every layer, fp32, %,d parameters"
                        + " (%,d bytes); Adam keeps two state elements per parameter, so the unsharded updater state is %,d bytes.\n",
                ZeroShardingBench.FEATURES, o.hidden(), o.hidden(), ZeroShardingBench.CLASSES, DataParallelExample.LEARNING_RATE,
                any.params(), any.paramBytes(), any.unshardedStateBytes()));
        s.append(fmt("- data: generated (`SyntheticData`), %d optimizer steps of N × %d examples per run; before the measured"
                        + " `fit()`, the user's model trains %d steps by itself (compiles DL4J's code, allocates its own"
                        + " workspaces and full updater state), in every mode alike.\n", o.steps(), o.batch(), o.warmupSteps()));
        s.append("- modes: plain data parallelism (`SymmemParallelWrapper`, every worker keeps DL4J's whole updater state: the"
                + " baseline), ZeRO-1 (`.sharding(ZeroStage.OPTIMIZER_STATE)`: gradient all-reduced, update all-gathered) and"
                + " ZeRO-2 (`.sharding(ZeroStage.GRADIENTS)`: gradient reduce-scattered, update all-gathered) and ZeRO-3"
                + " (`.sharding(ZeroStage.PARAMETERS)`: each worker holds its block of every layer, layers all-gathered before"
                + " use and prefetched, gradients reduce-scattered per layer); each worker updates only its 1/N shard.\n");
        s.append(fmt("- every (repetition, N, mode) runs in a fresh JVM (`-Xms%s -Xmx%s -XX:+AlwaysPreTouch`), round-robin over"
                + " the modes; %d repetitions; medians reported. ND4J threads per worker: cores ÷ N, at least 1.\n",
                o.heap(), o.heap(), o.reps()));
        s.append("- updater state per worker: from the workers' state arrays (`wrapper.workerMemory()`); the largest worker's.\n");
        s.append("- off-heap per worker: (peak − baseline) ÷ N of the process's resident set (`Pointer.physicalBytes()`, read"
                + " from `/proc/self/statm`), sampled every 1 ms during `fit()`; the baseline is taken just before the wrapper"
                + " is built. With the heap fixed and pre-touched, the growth is native memory: each replica's parameters,"
                + " gradient view, updater state (or shard) and DL4J workspaces, symmetric scratch memory touched by the"
                + " collectives, worker thread stacks, and code compiled during the run. JavaCPP's `Pointer.totalBytes()`"
                + " and ND4J's `MemoryManager.allocatedMemory()` were tried and report near zero on the CPU backend (ND4J's"
                + " buffers bypass them), so the resident set is used.\n");
        s.append(fmt("- step time: per run, the median over steps %d..%d of the slowest worker's step (forward, backward,"
                + " gradient sync, update, all-gather), from the wrapper's step reports; sync: the same for the slowest"
                + " worker's time in collectives (plain: the all-reduce; ZeRO-1: all-reduce, norm/NaN all-reduce and the"
                + " update's all-gather; ZeRO-2: reduce-scatter instead of the all-reduce; ZeRO-3: the parameter all-gathers"
                + " that prefetching left exposed, the last layer's reduce-scatter and the norm/NaN all-reduce). For ZeRO-3"
                + " the params + gradient column is what is resident after the fit (mincore), not the views' size.\n",
                ZeroShardingBench.SKIPPED_STEPS + 1, o.steps()));
        if (o.workers().stream().anyMatch(n -> n > cores)) {
            s.append(fmt("- **N > %d is oversubscribed on this %d-core machine**: workers share cores and a worker waiting in a"
                    + " collective yields its core; its step times measure contention, not sharding.\n", cores, cores));
        }
        s.append('\n');

        s.append("## Results (medians)\n\n");
        s.append("| N | mode | updater state / worker (B) | ÷ (unsharded ÷ N) | params + gradient / worker (B) | peak off-heap / worker (B) |"
                + " vs plain | step (ms) | vs plain | sync (ms) | held-out loss |\n");
        s.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        List<String> targets = new ArrayList<>();
        for (int n : o.workers()) {
            List<Result> plainRuns = of(Mode.PLAIN, n);
            double plainOffHeap = median(plainRuns, Result::offHeapPerWorker);
            double plainStep = median(plainRuns, Result::medianStepMs);
            for (Mode m : Mode.values()) {
                List<Result> runs = of(m, n);
                if (runs.isEmpty()) {
                    continue;
                }
                Result first = runs.getFirst();
                double offHeap = median(runs, Result::offHeapPerWorker);
                double step = median(runs, Result::medianStepMs);
                s.append(fmt("| %d%s | %s | %,d | %.4f | %,d | %,.0f | %s | %.2f | %s | %.2f | %.4f |\n", n,
                        n > cores ? " (oversubscribed)" : "", m.label, first.maxStateBytes(), first.stateRatio(),
                        first.paramBytes() + first.gradientBytes(), offHeap,
                        m == Mode.PLAIN ? "1.00×" : fmt("%.2f×", offHeap / plainOffHeap), step,
                        m == Mode.PLAIN ? "1.00×" : fmt("%.2f×", step / plainStep), median(runs, Result::medianSyncMs),
                        median(runs, Result::finalLoss)));
                if (m != Mode.PLAIN) {
                    boolean met = first.stateRatio() <= STATE_TARGET;
                    targets.add(fmt("N=%d %s: largest worker's state %,d B = %.4f × (unsharded ÷ N), target ≤ %.2f: %s;"
                                    + " the shards sum to %,d B (unsharded: %,d B)", n, m.label, first.maxStateBytes(),
                            first.stateRatio(), STATE_TARGET, met ? "met" : "NOT met", first.sumStateBytes(),
                            first.unshardedStateBytes()));
                }
            }
        }
        s.append('\n');
        s.append("Targets and checks:\n\n");
        for (String t : targets) {
            s.append("- ").append(t).append('\n');
        }
        s.append("- held-out loss: all modes train bitwise-identical parameters (see `ShardedEquivalenceTest`,"
                + " `FullyShardedEquivalenceTest`), so the"
                + " loss column agrees within each N.\n\n");

        s.append("All runs, in the order they ran:\n\n");
        s.append("| rep | N | mode | state / worker (B) | baseline RSS (B) | peak RSS (B) | off-heap / worker (B) | step (ms) | sync (ms) | fit (s) | loss |\n");
        s.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Result r : results) {
            s.append(fmt("| %d | %d | %s | %,d | %,d | %,d | %,.0f | %.2f | %.2f | %.2f | %.4f |\n", r.rep(), r.workers(),
                    r.mode().label, r.maxStateBytes(), r.baselineRss(), r.peakRss(), r.offHeapPerWorker(), r.medianStepMs(),
                    r.medianSyncMs(), r.fitSeconds(), r.finalLoss()));
        }
        return s.toString();
    }

    private List<Result> of(Mode m, int n) {
        return results.stream().filter(r -> r.mode() == m && r.workers() == n).toList();
    }

    private static double median(List<Result> runs, ToDoubleFunction<Result> f) {
        return Stats.median(runs.stream().mapToDouble(f));
    }

    private static String fmt(String format, Object... args) {
        return String.format(Locale.ROOT, format, args);
    }
}
