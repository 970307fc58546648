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
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Model;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Options;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Result;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Run;
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
        StringBuilder s = new StringBuilder();
        s.append("# ZeRO-style and hybrid sharding benchmark: model state, off-heap memory and step time per rank (CPU)\n\n");
        s.append("- date: ").append(Instant.now().truncatedTo(ChronoUnit.MINUTES)).append(" (UTC)\n");
        s.append("- machine: ").append(MachineInfo.cpuModel()).append(", ").append(cores).append(" cores, ").append(MachineInfo.ramGiB()).append(" RAM, ")
                .append(System.getProperty("os.name")).append(' ').append(System.getProperty("os.version")).append('\n');
        s.append("- JDK: ").append(System.getProperty("java.vm.vendor")).append(' ').append(System.getProperty("java.vm.name"))
                .append(' ').append(System.getProperty("java.runtime.version")).append('\n');
        s.append("- DL4J/ND4J: 1.0.0-M2.1, nd4j-native (CPU); the host transport\n");
        s.append("- commit: ").append(o.commit()).append('\n');
        s.append("- command: `").append(o.command()).append("`\n");
        if (o.raw() != null) {
            s.append("- raw data, one CSV row per run: `").append(o.raw().getFileName()).append("`\n");
        }
        s.append('\n');

        s.append("## Setup and method\n\n");
        for (Model model : o.models()) {
            results.stream().filter(r -> r.run().model() == model).findFirst().ifPresent(r -> s.append(fmt(
                    "- model: %s, Adam(lr %s) on every layer, fp32, %,d parameters (%,d bytes); Adam keeps two state"
                            + " elements per parameter, so the unsharded updater state is %,d bytes and a whole replica's"
                            + " parameters + gradient + optimizer state %,d bytes.\n", model.describe(o.hidden()),
                    DataParallelExample.LEARNING_RATE, r.params(), r.params() * 4, r.unshardedStateBytes(), r.replicaBytes())));
        }
        s.append(fmt("- data: generated (`SyntheticData`), %d optimizer steps of N × %d examples per run; before the measured"
                        + " `fit()`, the user's model trains %d steps by itself (compiles DL4J's code, allocates its own"
                        + " workspaces and full updater state), in every mode alike.\n", o.steps(), o.batch(), o.warmupSteps()));
        s.append("- modes: plain data parallelism (`SymmemParallelWrapper`, every rank keeps DL4J's whole updater state: the"
                + " baseline), ZeRO-1 (`.sharding(ZeroStage.OPTIMIZER_STATE)`: gradient all-reduced, update all-gathered),"
                + " ZeRO-2 (`.sharding(ZeroStage.GRADIENTS)`: gradient reduce-scattered, update all-gathered), ZeRO-3"
                + " (`.sharding(ZeroStage.PARAMETERS)`: each rank holds its block of every layer, layers all-gathered before"
                + " use and prefetched, gradients reduce-scattered per layer) and HSDP R×S (`.sharding(ZeroStage.PARAMETERS)"
                + ".shardGroupSize(S)`: stage 3 inside each group of S ranks, the R = N ÷ S replicas all-reduce their shards);"
                + " each rank updates only its shard.\n");
        s.append(fmt("- placements: %s. threads: the N ranks are worker threads of one JVM (`workers(N)`); processes: one JVM"
                + " per rank started by the launcher (`symmem4j-run`'s `Launcher`, `--cpu-bind %s`),"
                + " `builder(model).group(ProcessGroup.fromEnvironment())`.\n",
                String.join(", ", o.placements().stream().map(p -> p.flag).toList()), o.cpuBind()));
        s.append(fmt("- every (repetition, model, placement, N, mode) runs in fresh JVMs (`-Xms%s -Xmx%s -XX:+AlwaysPreTouch`),"
                + " round-robin over the modes; %d repetitions; medians of the runs reported. ND4J threads per rank: cores ÷ N,"
                + " at least 1%s.\n", o.heap(), o.heap(), o.reps(), o.commCpu() ? " (`--comm-cpu`: stage 3 and HSDP ranks with"
                + " two CPUs or more one less, so that their communication thread has a CPU of its own)" : ""));
        s.append("- parameters, gradient and optimizer state per rank: from each rank's actual arrays"
                + " (`wrapper.workerMemory()`): the replica's parameter and gradient views (ZeRO-3 and HSDP: the bytes of"
                + " them that are resident after the fit, measured with mincore: the rank's blocks and edge pages) and the"
                + " updater state or the rank's shard of it; the largest rank's. The model-state column is the largest"
                + " sum of one rank's three.\n");
        s.append("- off-heap per rank: the process's resident set (`Pointer.physicalBytes()`, `/proc/self/statm`) sampled every"
                + " 1 ms during `fit()`, peak − the value just before the wrapper was built; threads: ÷ N; processes: the"
                + " largest process's. With the heap fixed and pre-touched, the growth is native memory: replicas,"
                + " workspaces, symmetric memory touched by the collectives, thread stacks, code compiled during the run.\n");
        s.append(fmt("- step time: per step the slowest rank's (forward, backward, gradient sync, update, all-gather) from the"
                + " wrapper's step reports (processes: every rank's reports, the slowest per step); per run the median and"
                + " the 90th percentile (p90) over steps %d..%d; sync: the median of the slowest rank's time in"
                + " collectives (ZeRO-3 and HSDP: the parameter all-gathers that prefetching left exposed, reduce-scatters,"
                + " HSDP's replica all-reduce, the norm/NaN all-reduce).\n", ZeroShardingBench.SKIPPED_STEPS + 1, o.steps()));
        if (o.workers().stream().anyMatch(n -> n > cores)) {
            s.append(fmt("- **N > %d is oversubscribed on this %d-core machine**: ranks share cores and a rank waiting in a"
                    + " collective yields its core; its step times measure contention, not sharding.\n", cores, cores));
        }
        s.append('\n');

        List<String> targets = new ArrayList<>();
        for (Model model : o.models()) {
            for (ZeroShardingBench.Placement placement : o.placements()) {
                s.append(fmt("## Results: %s, %s (medians)\n\n", model.flag, placement.flag));
                s.append("| N | mode | params / rank (B) | gradient / rank (B) | optimizer / rank (B) | model state / rank (B) |"
                        + " ÷ (replica ÷ shards) | vs plain | peak off-heap / rank (B) | vs plain | step median (ms) | step p90 (ms) |"
                        + " vs plain | sync (ms) | held-out loss |\n");
                s.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
                for (int n : o.workers()) {
                    List<Result> plainRuns = of(model, placement, n, Mode.PLAIN, 0);
                    double plainOffHeap = median(plainRuns, Result::offHeapPerWorker);
                    double plainStep = median(plainRuns, Result::medianStepMs);
                    double plainState = median(plainRuns, r -> r.maxModelStateBytes());
                    for (Run run : runsOf(model, placement, n)) {
                        List<Result> runs = of(model, placement, n, run.mode(), run.shardGroup());
                        Result first = runs.getFirst();
                        boolean plain = run.mode() == Mode.PLAIN;
                        double offHeap = median(runs, Result::offHeapPerWorker);
                        double step = median(runs, Result::medianStepMs);
                        double state = median(runs, r -> r.maxModelStateBytes());
                        s.append(fmt("| %d%s | %s | %,.0f | %,.0f | %,.0f | %,.0f | %.4f | %s | %,.0f | %s | %.2f | %.2f | %s |"
                                        + " %.2f | %.4f |\n", n, n > cores ? " (oversubscribed)" : "", run.label(),
                                median(runs, r -> r.maxParamBytes()), median(runs, r -> r.maxGradientBytes()),
                                median(runs, r -> r.maxStateBytes()), state,
                                state / (first.replicaBytes() / (double) (plain ? 1 : run.shards())),
                                plain ? "1.00×" : fmt("%.2f×", state / plainState), offHeap,
                                plain ? "1.00×" : fmt("%.2f×", offHeap / plainOffHeap), step,
                                median(runs, Result::p90StepMs), plain ? "1.00×" : fmt("%.2f×", step / plainStep),
                                median(runs, Result::medianSyncMs), median(runs, Result::finalLoss)));
                        if (!plain) {
                            boolean met = first.stateRatio() <= STATE_TARGET;
                            targets.add(fmt("%s %s N=%d %s: largest rank's optimizer state %,d B = %.4f × (unsharded ÷ %d),"
                                            + " target ≤ %.2f: %s; the shards sum to %,d B (unsharded: %,d B%s)", model.flag,
                                    placement.flag, n, run.label(), first.maxStateBytes(), first.stateRatio(), run.shards(),
                                    STATE_TARGET, met ? "met" : "NOT met", first.sumStateBytes(), first.unshardedStateBytes(),
                                    run.mode() == Mode.HSDP ? fmt(", held %d times: once per replica", n / run.shards()) : ""));
                        }
                    }
                }
                s.append('\n');
                waits(s, model, placement, targets);
            }
        }
        s.append("Targets and checks:\n\n");
        for (String t : targets) {
            s.append("- ").append(t).append('\n');
        }
        s.append("- held-out loss: all modes train bitwise-identical parameters (see `ShardedEquivalenceTest`,"
                + " `FullyShardedEquivalenceTest`, `HybridShardingTest`), so the loss column agrees within each model and N.\n\n");

        s.append("All runs, in the order they ran:\n\n");
        s.append("| rep | model | placement | N | mode | model state / rank (B) | baseline RSS (B) | peak RSS (B) |"
                + " off-heap / rank (B) | step median (ms) | p90 (ms) | sync (ms) | fit (s) | loss |\n");
        s.append("|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Result r : results) {
            s.append(fmt("| %d | %s | %s | %d | %s | %,d | %,d | %,d | %,.0f | %.2f | %.2f | %.2f | %.2f | %.4f |\n", r.rep(),
                    r.run().model().flag, r.run().placement().flag, r.run().workers(), r.run().label(), r.maxModelStateBytes(),
                    r.baselineRss(), r.peakRss(), r.offHeapPerWorker(), r.medianStepMs(), r.p90StepMs(), r.medianSyncMs(),
                    r.fitSeconds(), r.finalLoss()));
        }
        return s.toString();
    }

    /**
     * Where each mode's sync time goes (medians of the runs, each the median over steps of the slowest rank per step):
     * the wrapper's exposed sync (ScalingBench's {@code exposed_sync_ms}), stage 3's per-layer collectives (count per
     * step, the rank's waits for them: exposed, and their time on its communication thread: ran) and the minor page
     * faults per rank and step; and stage 3's step against stage 1's (the 1.25× target of issue #31).
     */
    private void waits(StringBuilder s, Model model, ZeroShardingBench.Placement placement, List<String> targets) {
        s.append(fmt("Where the sync goes, %s, %s (ms per step; gathers and reduce-scatters: stage 3's per-layer"
                + " collectives, exposed = the rank waited, ran = on its communication thread, least rank = the ran time"
                + " of the rank with the least, close to the collectives' own cost: ran − least is the wait for the"
                + " slowest rank; comm wake-up = collectives issued to an idle communication thread that waited for a"
                + " CPU; comm CPU = that thread's CPU time inside the collectives, the rest of ran it slept; hook work = the worker's own stage-3 work in the layer hooks):\n\n", model.flag, placement.flag));
        s.append("| N | mode | step (ms) | sync (ms) | exposed sync (ms) | gathers / step | exposed gather (ms) | gather ran (ms) |"
                + " gather ran, least rank (ms) | reduce-scatters / step | exposed reduce-scatter (ms) | reduce-scatter ran (ms) |"
                + " reduce-scatter ran, least rank (ms) | comm wake-up (ms) | comm CPU (ms) | hook work (ms) |"
                + " minor faults / step / rank |\n");
        s.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int n : o.workers()) {
            for (Run run : runsOf(model, placement, n)) {
                List<Result> runs = of(model, placement, n, run.mode(), run.shardGroup());
                s.append(fmt("| %d | %s | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f"
                                + " | %.2f | %,.0f |\n", n, run.label(),
                        median(runs, Result::medianStepMs), median(runs, Result::medianSyncMs),
                        median(runs, r -> r.waits().exposedSyncMs()), median(runs, r -> r.waits().gathersPerStep()),
                        median(runs, r -> r.waits().exposedGatherMs()), median(runs, r -> r.waits().gatherMs()),
                        median(runs, r -> r.waits().leastGatherMs()), median(runs, r -> r.waits().reduceScattersPerStep()),
                        median(runs, r -> r.waits().exposedReduceScatterMs()), median(runs, r -> r.waits().reduceScatterMs()),
                        median(runs, r -> r.waits().leastReduceScatterMs()), median(runs, r -> r.waits().commDelayMs()),
                        median(runs, r -> r.waits().commCpuMs()), median(runs, r -> r.waits().hookWorkMs()), median(runs, r -> r.waits().minorFaultsPerStep())));
            }
            List<Result> zero1 = of(model, placement, n, Mode.ZERO1, 0);
            List<Result> zero3 = of(model, placement, n, Mode.ZERO3, 0);
            if (!zero1.isEmpty() && !zero3.isEmpty()) {
                double ratio = median(zero3, Result::medianStepMs) / median(zero1, Result::medianStepMs);
                targets.add(fmt("%s %s N=%d: ZeRO-3's step %.2f × ZeRO-1's, target ≤ 1.25: %s", model.flag, placement.flag,
                        n, ratio, ratio <= 1.25 ? "met" : "NOT met"));
            }
        }
        s.append('\n');
    }

    /** The configurations that ran for (model, placement, N), in run order. */
    private List<Run> runsOf(Model model, ZeroShardingBench.Placement placement, int n) {
        return results.stream().map(Result::run).filter(r -> r.model() == model && r.placement() == placement
                && r.workers() == n).distinct().toList();
    }

    private List<Result> of(Model model, ZeroShardingBench.Placement placement, int n, Mode m, int shardGroup) {
        return results.stream().filter(r -> r.run().model() == model && r.run().placement() == placement
                && r.run().workers() == n && r.run().mode() == m && r.run().shardGroup() == shardGroup).toList();
    }

    private static double median(List<Result> runs, ToDoubleFunction<Result> f) {
        return Stats.median(runs.stream().mapToDouble(f));
    }

    private static String fmt(String format, Object... args) {
        return String.format(Locale.ROOT, format, args);
    }
}
