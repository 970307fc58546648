package org.symmem4j.benchmarks.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * The benchmarks that alternate off/on runs: their usage text is the users' contract (flags, defaults and help lines,
 * golden files under test resources, the text as it was before the shared options were extracted into
 * {@link AlternatingRuns}), and the shared options parse into the mixin.
 */
class AlternatingBenchUsageTest {

    @Test
    void pipelineZeroBenchUsageIsUnchanged() throws IOException {
        assertUsage("PipelineZeroBench", new PipelineZeroBench.Flags());
    }

    @Test
    void syncBatchNormBenchUsageIsUnchanged() throws IOException {
        assertUsage("SyncBatchNormBench", new SyncBatchNormBench.Flags());
    }

    /** The shared options land in each benchmark's mixin, next to the benchmark's own. */
    @Test
    void sharedOptionsParseIntoTheMixin() {
        String[] args = {"--steps", "7", "--warmup", "2", "--reps", "5"};
        PipelineZeroBench.Flags zero = new PipelineZeroBench.Flags();
        new CommandLine(zero).parseArgs(append(args, "--threads", "4"));
        assertEquals(List.of(7, 2, 5, 4), List.of(zero.runs.steps, zero.runs.warmup, zero.runs.reps, zero.threads));
        SyncBatchNormBench.Flags bn = new SyncBatchNormBench.Flags();
        new CommandLine(bn).parseArgs(append(args, "--workers", "3"));
        assertEquals(List.of(7, 2, 5, 3), List.of(bn.runs.steps, bn.runs.warmup, bn.runs.reps, bn.workers));
    }

    private static String[] append(String[] args, String... more) {
        String[] all = java.util.Arrays.copyOf(args, args.length + more.length);
        System.arraycopy(more, 0, all, args.length, more.length);
        return all;
    }

    private static void assertUsage(String name, Object flags) throws IOException {
        String actual = new CommandLine(flags).setUsageHelpWidth(120).getUsageMessage(CommandLine.Help.Ansi.OFF);
        Path dump = Path.of("target", "usage", name + ".txt");
        Files.createDirectories(dump.getParent());
        Files.writeString(dump, actual, StandardCharsets.UTF_8); // to diff by hand when it differs
        String golden = name + "-usage.txt";
        try (InputStream in = AlternatingBenchUsageTest.class.getResourceAsStream(golden)) {
            assertNotNull(in, "missing golden file " + golden + " (fix: compare " + dump.toAbsolutePath() + ")");
            assertEquals(new String(in.readAllBytes(), StandardCharsets.UTF_8), actual, name + " usage");
        }
    }
}
