package org.symmem4j.benchmarks;

import java.nio.file.Path;

import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Option;

/**
 * The flags a JMH suite CLI shares ({@link RingFillSuite}, {@link MapLatencySuite}): where its JSON and summary go,
 * and how many forks, warm-up and measured iterations of 1 s each trial takes.
 */
abstract class JmhSuiteFlags {
    @Option(names = "--out", paramLabel = "DIR", description = "where JMH's JSON and the summary table go")
    Path out = Path.of(".");
    @Option(names = "--forks", paramLabel = "N", description = "forks per trial")
    int forks = 3;
    @Option(names = "--warmups", paramLabel = "N", description = "warm-up iterations of 1 s per fork")
    int warmups = 2;
    @Option(names = "--iterations", paramLabel = "N", description = "measured iterations of 1 s per fork")
    int iterations = 3;

    /** Refuses counts below 1, naming the flag. */
    void checkCounts() {
        Cli.positive("--forks", forks);
        Cli.positive("--warmups", warmups);
        Cli.positive("--iterations", iterations);
    }

    /** {@code options} with these forks and iterations of 1 s. */
    ChainedOptionsBuilder timing(ChainedOptionsBuilder options) {
        return options.warmupIterations(warmups).warmupTime(TimeValue.seconds(1))
                .measurementIterations(iterations).measurementTime(TimeValue.seconds(1))
                .forks(forks);
    }
}
