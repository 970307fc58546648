package org.symmem4j.benchmarks;

import picocli.CommandLine.Option;

/**
 * The options a benchmark's {@code --processes} mode shares ({@link ChildJvms#rerunAsRanks}): how long the rank JVMs
 * may run, and the hidden flag that makes a JVM one of them. Mixed into the benchmark's flags with {@code @Mixin};
 * {@code --processes} itself stays the benchmark's, whose description says what that mode measures.
 */
final class RankProcessOptions {

    @Option(names = "--timeout", paramLabel = "S", description = "with --processes: seconds the rank JVMs may run")
    int timeoutSeconds = 600;

    @Option(names = "--rank-process", hidden = true, description = "internal: be one rank of a --processes run")
    boolean rankProcess;
}
