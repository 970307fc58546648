package org.symmem4j.benchmarks.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Mode;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Model;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Placement;
import org.symmem4j.benchmarks.dl4j.ZeroShardingBench.Run;

/** {@link ZeroShardingBench}'s plan of runs (HSDP where S divides N) and how it combines the ranks' RESULT lines. */
class ZeroShardingBenchTest {

    @Test
    void hsdpRunsOnlyWhereTheShardGroupDividesNAndIsSmaller() {
        List<Run> runs = ZeroShardingBench.Options.parse(new String[] {"--workers", "2,4,6", "--shard-groups", "2,3",
                "--models", "mlp,cnn", "--placements", "threads,processes"}).runs();
        List<Run> hsdp = runs.stream().filter(r -> r.mode() == Mode.HSDP).toList();
        // per model and placement: N=4 as 2×2, N=6 as 3×2 and 2×3; N=2 none (S=2 is not smaller)
        assertEquals(4 * 3, hsdp.size(), hsdp.toString());
        assertEquals(4 * 3 * 4 + hsdp.size(), runs.size());
        Run r = new Run(Model.MLP, Placement.THREADS, 6, Mode.HSDP, 3);
        assertEquals(3, r.shards());
        assertEquals("HSDP 2×3 (replicas × shards)", r.label());
        assertEquals(6, new Run(Model.CNN, Placement.PROCESSES, 6, Mode.ZERO3, 0).shards());
        assertEquals(List.of(), ZeroShardingBench.Options.parse(new String[] {"--workers", "4", "--shard-groups", "0"})
                .runs().stream().filter(x -> x.mode() == Mode.HSDP).toList());
    }

    @Test
    void ranksCombineAsTheSlowestPerStepAndTheLargestRank() {
        Run run = new Run(Model.MLP, Placement.PROCESSES, 2, Mode.HSDP, 2);
        // 3 skipped steps, then 10 measured: rank 0 slower on the even ones, rank 1 on the odd ones
        String steps0 = "9,9,9,10,30,10,30,10,30,10,30,10,30";
        String steps1 = "9,9,9,20,20,20,20,20,20,20,20,20,99";
        ZeroShardingBench.Result c = ZeroShardingBench.combine(run, 1, List.of(rank(steps0, 100, 7), rank(steps1, 120, 5)));
        // slowest per step: 20,30,20,30,20,30,20,30,20,99 -> sorted 20×5, 30×4, 99: upper median 30, p90 99
        assertEquals(30e-6, c.medianStepMs(), 1e-12);
        assertEquals(99e-6, c.p90StepMs(), 1e-12);
        assertEquals(120, c.maxModelStateBytes());
        assertEquals(7 + 5, c.sumStateBytes());
        assertEquals(7, c.maxStateBytes());
        assertEquals(7 / (40 / 2.0), c.stateRatio(), 1e-12); // the divisor is S for HSDP
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> ZeroShardingBench.combine(run, 1,
                List.of(rank(steps0, 1, 1), rank("1,2,3,4,5", 1, 1))));
        assertEquals(true, e.getMessage().contains("13 and 5 steps"), e.getMessage());
    }

    @Test
    void theSyncBreakdownIsTheMedianOfTheSlowestRankPerStep() {
        Run run = new Run(Model.MLP, Placement.PROCESSES, 2, Mode.ZERO3, 0);
        String steps = "9,9,9,10,10,10,10,10";
        ZeroShardingBench.Result old = ZeroShardingBench.combine(run, 1, List.of(rank(steps, 1, 1)));
        assertEquals(true, Double.isNaN(old.waits().exposedGatherMs()), "earlier RESULT lines have no breakdown");
        Map<String, String> r0 = new java.util.HashMap<>(rank(steps, 1, 1));
        Map<String, String> r1 = new java.util.HashMap<>(rank(steps, 1, 1));
        // 3 skipped steps, then 5: rank 0 waits longer for gathers on steps 4 and 5, rank 1 on 6..8
        r0.putAll(waits("0,0,0,4000,4000,1000,1000,1000", "0,0,0,500,500,500,500,500", "8"));
        r1.putAll(waits("0,0,0,2000,2000,3000,3000,3000", "0,0,0,700,700,700,700,700", "12"));
        ZeroShardingBench.Waits w = ZeroShardingBench.combine(run, 1, List.of(r0, r1)).waits();
        assertEquals(3000e-6, w.exposedGatherMs(), 1e-12); // slowest per step 4000,4000,3000,3000,3000
        assertEquals(700e-6, w.exposedReduceScatterMs(), 1e-12);
        assertEquals(4, w.gathersPerStep(), 1e-12);
        assertEquals(3, w.reduceScattersPerStep(), 1e-12);
        assertEquals(12, w.minorFaultsPerStep(), 1e-12); // the rank with the most
    }

    @Test
    void theLeastRanksRanTimeSeparatesTheWaitForTheSlowestRank() {
        Run run = new Run(Model.MLP, Placement.PROCESSES, 2, Mode.ZERO3, 0);
        String steps = "9,9,9,10,10,10,10,10";
        Map<String, String> r0 = new java.util.HashMap<>(rank(steps, 1, 1));
        Map<String, String> r1 = new java.util.HashMap<>(rank(steps, 1, 1));
        r0.putAll(waits("0,0,0,0,0,0,0,0", "0,0,0,0,0,0,0,0", "8"));
        r1.putAll(waits("0,0,0,0,0,0,0,0", "0,0,0,0,0,0,0,0", "8"));
        // rank 0 arrives last on steps 4, 5 (its reduce-scatters ran 1 ms), rank 1 on 6..8
        r0.putAll(Map.of("reduceScatterNanos", "0,0,0,1000,1000,9000,9000,9000", "commDelayNanos", "0,0,0,5,5,5,5,5",
                "commCpuNanos", "0,0,0,3,3,3,3,3", "hookWorkNanos", "0,0,0,70,70,70,70,70"));
        r1.putAll(Map.of("reduceScatterNanos", "0,0,0,8000,8000,2000,2000,2000", "commDelayNanos", "0,0,0,6,6,6,6,6",
                "commCpuNanos", "0,0,0,4,4,4,4,4", "hookWorkNanos", "0,0,0,60,60,60,60,60"));
        ZeroShardingBench.Waits w = ZeroShardingBench.combine(run, 1, List.of(r0, r1)).waits();
        assertEquals(9000e-6, w.reduceScatterMs(), 1e-12); // slowest per step 8000,8000,9000,9000,9000
        assertEquals(2000e-6, w.leastReduceScatterMs(), 1e-12); // least per step 1000,1000,2000,2000,2000
        assertEquals(6e-6, w.commDelayMs(), 1e-12);
        assertEquals(70e-6, w.hookWorkMs(), 1e-12);
        assertEquals(4e-6, w.commCpuMs(), 1e-12);
        Map<String, String> older = new java.util.HashMap<>(rank(steps, 1, 1));
        older.putAll(waits("0,0,0,0,0,0,0,0", "0,0,0,0,0,0,0,0", "8"));
        assertEquals(true, Double.isNaN(ZeroShardingBench.combine(run, 1, List.of(older)).waits().commDelayMs()),
                "RESULT lines from before the wake-up column have none");
    }

    @Test
    void commCpuLeavesStage3RanksOneCpuForTheirCommunicationThread() {
        ZeroShardingBench.Options plain = ZeroShardingBench.Options.parse(new String[] {"--workers", "8"});
        ZeroShardingBench.Options comm = ZeroShardingBench.Options.parse(new String[] {"--workers", "8", "--comm-cpu"});
        Run zero3 = new Run(Model.MLP, Placement.PROCESSES, 8, Mode.ZERO3, 0);
        Run hsdp = new Run(Model.MLP, Placement.PROCESSES, 8, Mode.HSDP, 4);
        Run zero1 = new Run(Model.MLP, Placement.PROCESSES, 8, Mode.ZERO1, 0);
        assertEquals(4, ZeroShardingBench.ndThreads(plain, zero3, 32));
        assertEquals(3, ZeroShardingBench.ndThreads(comm, zero3, 32));
        assertEquals(3, ZeroShardingBench.ndThreads(comm, hsdp, 32));
        assertEquals(4, ZeroShardingBench.ndThreads(comm, zero1, 32), "stage 1 has no communication thread");
        assertEquals(1, ZeroShardingBench.ndThreads(comm, zero3, 8), "one CPU per rank: nothing to leave");
        assertEquals(1, ZeroShardingBench.ndThreads(comm, new Run(Model.MLP, Placement.PROCESSES, 16, Mode.ZERO3, 0), 32));
    }

    private static Map<String, String> waits(String exposedGather, String exposedReduceScatter, String faults) {
        String zeros = "0,0,0,0,0,0,0,0";
        return Map.of("exposedSyncNanos", zeros, "gathers", "4,4,4,4,4,4,4,4", "exposedGatherNanos", exposedGather,
                "gatherNanos", zeros, "reduceScatters", "3,3,3,3,3,3,3,3", "exposedReduceScatterNanos", exposedReduceScatter,
                "reduceScatterNanos", zeros, "minorFaultsPerStep", faults);
    }

    private static Map<String, String> rank(String stepNanos, long modelState, long state) {
        return Map.ofEntries(Map.entry("params", "10"), Map.entry("unshardedStateBytes", "40"),
                Map.entry("maxStateBytes", Long.toString(state)), Map.entry("sumStateBytes", Long.toString(state)),
                Map.entry("maxParamBytes", "20"), Map.entry("maxGradientBytes", "20"),
                Map.entry("maxModelStateBytes", Long.toString(modelState)), Map.entry("baselineRss", "1000"),
                Map.entry("peakRss", "2000"), Map.entry("offHeapPerWorker", "1000"), Map.entry("fitSeconds", "1.5"),
                Map.entry("finalLoss", "0.5"), Map.entry("stepNanos", stepNanos), Map.entry("syncNanos", stepNanos));
    }
}
