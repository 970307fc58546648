package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
import org.symmem4j.parallel.affinity.CpuAffinity;
import org.symmem4j.parallel.affinity.RankAffinity;

/** {@code symmem4j.affinity} in the wrapper's thread mode: each worker thread runs on its own CPU alone. */
class DataParallelAffinityTest {

    /** The kernel's name of a worker thread ({@code symmem4j-worker-R} cut to 15 characters). */
    private static final String WORKER_THREAD = "symmem4j-worker";

    @AfterEach
    void unset() {
        System.clearProperty("symmem4j.affinity");
    }

    /** The distinct {@code Cpus_allowed_list}s of the live worker threads (and the native threads they started). */
    private static List<String> workerCpus() throws IOException {
        List<String> cpus = new ArrayList<>();
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path task : tasks.toList()) {
                try {
                    if (Files.readString(task.resolve("comm")).strip().equals(WORKER_THREAD)) {
                        for (String line : Files.readAllLines(task.resolve("status"))) {
                            if (line.startsWith("Cpus_allowed_list:")) {
                                cpus.add(line.substring("Cpus_allowed_list:".length()).strip());
                            }
                        }
                    }
                } catch (IOException ended) {
                    // the thread ended while listed
                }
            }
        }
        return cpus.stream().distinct().sorted().toList();
    }

    @Test
    void eachWorkerThreadRunsOnItsOwnCpu() throws IOException {
        assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), "not Linux");
        assumeTrue(CpuAffinity.allowedCpus().cardinality() >= 2, "needs 2 allowed CPUs");
        System.setProperty("symmem4j.affinity", "cores");
        RankAffinity plan = RankAffinity.fromConfiguration(2);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).build()) {
            wrapper.fit(new BatchListIterator(Nets.batches(1, 4, 8, DataType.FLOAT)));
            List<String> expected = new ArrayList<>(List.of(Integer.toString(plan.cpuOf(0)), Integer.toString(plan.cpuOf(1))));
            expected.sort(null);
            assertEquals(expected, workerCpus(), "the worker threads' allowed CPUs; plan " + plan);
        }
    }
}
