package org.symmem4j.benchmarks.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * The usage text of the benchmarks that alternate off/on runs is the users' contract: their flags, defaults and help
 * lines, golden files under test resources (the text as it was before the shared options were extracted).
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
