package org.symmem4j.benchmarks.dl4j;

import org.symmem4j.examples.Cli;
import picocli.CommandLine.Option;

/**
 * The options of a benchmark that measures one setting against another in alternating runs of the same steps
 * ({@link PipelineZeroBench}, {@link SyncBatchNormBench}): how many steps a run has, how many of them at its start are
 * left out of the medians, and how many runs per setting. Mixed into the benchmark's flags with {@code @Mixin}.
 */
final class AlternatingRuns {

    @Option(names = "--steps", paramLabel = "S", description = "steps per run, warm-up included")
    int steps = 40;
    @Option(names = "--warmup", paramLabel = "W", description = "steps at the start of a run left out of the medians")
    int warmup = 10;
    @Option(names = "--reps", paramLabel = "R", description = "runs per setting (alternating off/on)")
    int reps = 3;

    /** Rejects, for {@link Cli#parse}'s build step, fewer than one run or a run without steps after its warm-up. */
    void check() {
        Cli.positive("--reps", reps);
        Cli.stepsBeyondWarmup(steps, warmup);
    }
}
