package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.symmem4j.examples.Cli;

/**
 * {@link ServingProcessBench} in a tiny configuration (1 worker, an MLP and a CNN, 0.3 s per model): every side runs
 * in its own JVMs, answers every request, and reports the PSS of each of its JVMs (the processes side: the router's
 * and its worker's). Its real runs are bench/serving/serving-processes.sh.
 */
class ServingProcessBenchTest {

    @Test
    void aTinyRunOfEverySideAnswersEveryModelAndMeasuresEachJvm() throws Exception {
        String[] args = {"--workers", "1", "--models", "2", "--clients", "2", "--seconds", "0.3", "--mlp-hidden", "16",
                "--max-batch", "4", "--ring-mib", "1"};
        ServingProcessBench.Flags f = Cli.parse(new ServingProcessBench.Flags(), args);
        ServingProcessBench.check(f);
        List<ServingProcessBench.SideRun> runs = ServingProcessBench.run(f, args);
        assertEquals(List.of("threads", "processes", "pi"), runs.stream().map(ServingProcessBench.SideRun::side).toList());
        for (ServingProcessBench.SideRun r : runs) {
            assertEquals(List.of("mlp0", "cnn1"), r.cells().stream().map(ServingBench.Cell::model).toList(), r.side());
            for (ServingBench.Cell c : r.cells()) {
                assertTrue(c.requestsPerSecond() > 0, r.side() + " " + c);
                assertEquals(0, c.failures(), r.side() + " " + c);
                assertTrue(c.p50Micros() > 0 && c.p99Micros() >= c.p50Micros(), r.side() + " " + c);
            }
            for (long kb : r.pssKb().values()) {
                assertTrue(kb > 10_000, r.side() + ": a JVM with ND4J loaded has more than 10 MB resident: " + r.pssKb());
            }
        }
        assertEquals(Set.of("router"), runs.get(0).pssKb().keySet());
        assertEquals(Set.of("router", "worker1"), runs.get(1).pssKb().keySet(), "the router and its worker JVM");
        assertEquals(Set.of("jvm"), runs.get(2).pssKb().keySet());
    }

    @Test
    void badFlagsAreRefusedWithTheFix() {
        ServingProcessBench.Flags f = Cli.parse(new ServingProcessBench.Flags(), new String[] {"--sides", "threads,gpu"});
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServingProcessBench.check(f));
        assertTrue(e.getMessage().contains("expected some of [threads, processes, pi]"), e.getMessage());
        ServingProcessBench.Flags g = Cli.parse(new ServingProcessBench.Flags(), new String[] {"--ring-mib", "3"});
        e = assertThrows(IllegalArgumentException.class, () -> ServingProcessBench.check(g));
        assertTrue(e.getMessage().contains("expected a power of two"), e.getMessage());
    }
}
