package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.parallel.affinity.CpuAffinity;
import org.symmem4j.parallel.affinity.RankAffinity;

/**
 * {@code symmem4j.affinity} in the pipeline trainer's thread mode: each rank thread runs on its own CPU alone (as the
 * kernel reports it in {@code /proc/self/task/<tid>/status}), and a CPU list naming a CPU the process may not use fails
 * at the first fit, before any rank thread starts.
 */
class PipelineAffinityTest {

    /** The kernel's name of a pipeline rank thread: its Java name cut to 15 characters. */
    private static final String RANK_THREAD = "symmem4j-pipeline-rank-".substring(0, 15);

    @AfterEach
    void unset() {
        System.clearProperty("symmem4j.affinity");
        System.clearProperty("symmem4j.affinity.cpus");
    }

    /**
     * {@code Cpus_allowed_list} of every live pipeline rank thread of this process, and of the native threads they
     * started (Linux gives a new thread its creator's name).
     */
    private static List<String> rankThreadCpus() throws IOException {
        List<String> cpus = new ArrayList<>();
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path task : tasks.toList()) {
                try {
                    if (!Files.readString(task.resolve("comm")).strip().equals(RANK_THREAD)) {
                        continue;
                    }
                    for (String line : Files.readAllLines(task.resolve("status"))) {
                        if (line.startsWith("Cpus_allowed_list:")) {
                            cpus.add(line.substring("Cpus_allowed_list:".length()).strip());
                        }
                    }
                } catch (IOException ended) {
                    // the thread ended while listed
                }
            }
        }
        return cpus;
    }

    private static MultiLayerNetwork net() {
        return PipelineNets.mlp(new Sgd(0.1), 0, DataType.FLOAT, 8, 16, 16, 3);
    }

    @Test
    void eachRankThreadRunsOnItsOwnCpu() throws IOException {
        assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), "not Linux");
        assumeTrue(CpuAffinity.allowedCpus().cardinality() >= 2, "needs 2 allowed CPUs");
        System.setProperty("symmem4j.affinity", "physical-cores");
        RankAffinity plan = RankAffinity.fromConfiguration(2);
        List<DataSet> batches = PipelineNets.batches(3, 2, 8, 8, 3, DataType.FLOAT);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net()).ranks(2).microbatches(2).build()) {
            trainer.fit(batches.getFirst());
            // native threads a rank starts (ND4J's OpenMP pool) carry its kernel name and inherit its CPU
            List<String> cpus = new ArrayList<>(rankThreadCpus().stream().distinct().sorted().toList());
            List<String> expected = new ArrayList<>(List.of(Integer.toString(plan.cpuOf(0)), Integer.toString(plan.cpuOf(1))));
            expected.sort(null);
            assertEquals(expected, cpus, "the rank threads' allowed CPUs; plan " + plan);
        }
    }

    @Test
    void aCpuTheProcessMayNotUseFailsBeforeAnyRankThreadStarts() throws IOException {
        assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), "not Linux");
        int outside = CpuAffinity.allowedCpus().length() + 3;
        System.setProperty("symmem4j.affinity.cpus", "0," + outside);
        int before = rankThreadCpus().size();
        List<DataSet> batches = PipelineNets.batches(3, 1, 8, 8, 3, DataType.FLOAT);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net()).ranks(2).microbatches(2).build()) {
            // the rank threads start at the first fit: the pinning is checked there, before the first starts
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.fit(batches.getFirst()));
            assertTrue(e.getMessage().contains("names cpu=" + outside) && e.getMessage().contains("fix:"), e.getMessage());
            assertEquals(before, rankThreadCpus().size());
        }
    }
}
