package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@link Plots}: every plot, raw and speed-up, drawn from the committed raw CSVs. */
class PlotsTest {

    @Test
    void everyPlotIsDrawnFromTheCommittedCsvs(@TempDir Path out) throws IOException {
        Path here = Path.of("").toAbsolutePath();
        Path root = Files.isDirectory(here.resolve("bench")) ? here : here.getParent();
        Plots.main(new String[] {"--results", root.resolve("bench/results").toString(), "--out", out.toString()});
        for (String png : List.of("data-parallel-mlp-medium.png", "data-parallel-mlp-medium-speedup.png",
                "data-parallel-cnn.png", "data-parallel-cnn-speedup.png", "data-parallel-mlp-small.png",
                "data-parallel-mlp-small-speedup.png", "pipeline-bubble-measured-vs-simulated.png",
                "host-allreduce-vs-openmpi.png", "host-allreduce-speedup.png", "gpu-allreduce-vs-nccl.png",
                "gpu-allreduce-speedup.png", "zero-memory-per-worker.png")) {
            Path p = out.resolve(png);
            assertTrue(Files.isRegularFile(p) && Files.size(p) > 10_000, png + " was not drawn (or is nearly empty)");
        }
    }
}
