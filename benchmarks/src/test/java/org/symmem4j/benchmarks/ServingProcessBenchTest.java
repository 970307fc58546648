package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.symmem4j.examples.Cli;

/**
 * {@link ServingProcessBench} in a tiny configuration (an MLP and a CNN, 0.3 s per model): every side runs in its own
 * JVMs, answers every request, and reports the memory of each of its JVMs (the processes side: the router's and its
 * workers'), split into parts that add up to its PSS, and the CPU time each JVM used under load and idle; with
 * {@code --compare-workers}, at each worker count, with the larger against the smaller. Its real runs are
 * bench/serving/serving-processes.sh.
 */
class ServingProcessBenchTest {

    private static final String[] TINY = {"--models", "2", "--clients", "2", "--seconds", "0.3", "--mlp-hidden", "16",
            "--max-batch", "4", "--ring-mib", "1", "--idle-seconds", "0.3"};

    @Test
    void aTinyRunOfEverySideAnswersEveryModelAndMeasuresEachJvm() throws Exception {
        List<ServingProcessBench.SideRun> runs = run(concat(TINY, "--workers", "1"));
        assertEquals(List.of("threads", "processes", "pi"), runs.stream().map(ServingProcessBench.SideRun::side).toList());
        for (ServingProcessBench.SideRun r : runs) {
            assertAnsweredAndMeasured(r);
            for (ServingBench.Cell c : r.cells()) {
                assertTrue(c.requestsPerSecond() > 0, r.side() + " " + c);
                assertTrue(c.p50Micros() > 0 && c.p99Micros() >= c.p50Micros(), r.side() + " " + c);
            }
        }
        assertEquals(Set.of("router"), runs.get(0).memory().keySet());
        assertEquals(Set.of("router", "worker1"), runs.get(1).memory().keySet(), "the router and its worker JVM");
        assertEquals(Set.of("jvm"), runs.get(2).memory().keySet());
        for (String jvm : List.of("router", "worker1")) {
            assertTrue(runs.get(1).memory().get(jvm).sharedMemoryKb() > 0, jvm + " maps the shared weights and rings: "
                    + runs.get(1).memory());
        }
    }

    @Test
    void comparingWorkerCountsRunsEachSideAtEachCountAndReportsTheLargerAgainstTheSmaller() throws Exception {
        PrintStream out = System.out;
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        List<ServingProcessBench.SideRun> runs;
        System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            runs = run(concat(TINY, "--compare-workers", "1,2", "--sides", "processes"));
        } finally {
            System.setOut(out);
        }
        String report = captured.toString(StandardCharsets.UTF_8);
        out.print(report);
        assertEquals(List.of(1, 2), runs.stream().map(ServingProcessBench.SideRun::workers).toList());
        runs.forEach(ServingProcessBenchTest::assertAnsweredAndMeasured);
        assertEquals(Set.of("router", "worker1", "worker2"), runs.get(1).memory().keySet());
        assertTrue(report.contains("## 2 workers against 1"), report);
        assertTrue(report.contains("| router, worker processes | 2 | all 3 JVMs |"), "the CPU of all JVMs: " + report);
        assertTrue(report.contains("What is compared:"), report);
    }

    @Test
    void badFlagsAreRefusedWithTheFix() {
        for (Map.Entry<String[], String> bad : Map.of(
                new String[] {"--sides", "threads,gpu"}, "expected some of [threads, processes, pi]",
                new String[] {"--ring-mib", "3"}, "expected a power of two",
                new String[] {"--compare-workers", "1,0"}, "expected worker counts >= 1",
                new String[] {"--worker-jvm", "small"}, "expected default or bare",
                new String[] {"--idle-seconds", "-1"}, "expected >= 0").entrySet()) {
            ServingProcessBench.Flags f = Cli.parse(new ServingProcessBench.Flags(), bad.getKey());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServingProcessBench.check(f));
            assertTrue(e.getMessage().contains(bad.getValue()) && e.getMessage().contains("fix: "), e.getMessage());
        }
    }

    private static List<ServingProcessBench.SideRun> run(String[] args) throws Exception {
        ServingProcessBench.Flags f = Cli.parse(new ServingProcessBench.Flags(), args);
        ServingProcessBench.check(f);
        return ServingProcessBench.run(f, args);
    }

    private static void assertAnsweredAndMeasured(ServingProcessBench.SideRun r) {
        assertEquals(List.of("mlp0", "cnn1"), r.cells().stream().map(ServingBench.Cell::model).toList(), r.side());
        for (ServingBench.Cell c : r.cells()) { // requests/s may be 0: at K = 2 on a loaded machine, 0.3 s can pass
            assertEquals(0, c.failures(), r.side() + " " + c); // without an answer (then p50 is NaN)
        }
        assertEquals(r.memory().keySet(), r.cpuTicks().keySet(), r.side());
        r.memory().forEach((jvm, m) -> {
            assertTrue(m.pssKb() > 10_000, r.side() + " " + jvm + ": a JVM with ND4J loaded has more than 10 MB"
                    + " resident: " + m);
            assertTrue(m.javaHeapKb() > 0, r.side() + " " + jvm + ": its heap found through its log: " + m);
            assertEquals(m.pssKb(), m.sharedMemoryKb() + m.javaHeapKb() + m.fileKb() + m.otherAnonKb(),
                    r.side() + " " + jvm + ": the parts add up: " + m);
        });
        r.cpuTicks().forEach((jvm, t) -> assertTrue(t[0] > 0 && t[1] >= 0, r.side() + " " + jvm
                + ": a JVM that served used CPU: " + t[0] + " " + t[1]));
        assertTrue(r.loadSeconds() > 0.6 && r.idleSeconds() >= 0.3, r.side() + " windows " + r.loadSeconds() + " "
                + r.idleSeconds());
    }

    private static String[] concat(String[] a, String... b) {
        String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
