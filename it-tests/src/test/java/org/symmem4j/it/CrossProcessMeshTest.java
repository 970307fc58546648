package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Device-mesh sub-groups of JVM processes: every dimension's sub-groups (concurrent, disjoint, each
 * with its own /dev/shm files) reduce exactly, and an abort in one sub-group reaches every process.
 */
class CrossProcessMeshTest {

    @ParameterizedTest(name = "{1} on {0} processes")
    @CsvSource(delimiter = ';', value = {"4; dp=2,pp=2", "8; dp=2,pp=2,tp=2"})
    void everyDimensionReducesExactlyAcrossProcesses(int worldSize, String shape) throws Exception {
        try (Workers w = Workers.start(worldSize, "mesh " + shape, 60_000)) {
            int[] codes = w.awaitExit(240_000);
            for (int r = 0; r < worldSize; r++) {
                assertEquals(0, codes[r], "rank " + r + " exit code; log:\n" + w.log(r));
                for (String dim : shape.split(",")) {
                    String name = dim.split("=")[0];
                    int size = Integer.parseInt(dim.split("=")[1]);
                    assertTrue(w.log(r).lines().anyMatch(l -> l.startsWith("MESH " + name + " ") && l.endsWith(" " + size)),
                            "rank " + r + " checked dimension " + name + "; log:\n" + w.log(r));
                }
            }
            CrossProcessTest.assertNoFilesOf(w.pids());
        }
    }

    @Test
    void anAbortInOneSubGroupReachesEveryProcess() throws Exception {
        try (Workers w = Workers.start(4, "mesh-abort", 60_000)) {
            int[] codes = w.awaitExit(240_000);
            assertEquals(3, codes[3], w.log(3));
            assertTrue(w.log(3).contains("rank 3 aborted its pp group"), w.log(3));
            for (int r = 0; r < 3; r++) {
                String log = w.log(r);
                assertEquals(3, codes[r], "rank " + r + " must fail; log:\n" + log);
                assertTrue(log.contains("injected failure in the pp group"), "rank " + r + " names the cause; log:\n" + log);
                assertTrue(log.contains("rank 1 of 'pp' (parent rank 3 (pid " + w.pids().get(3) + "))"),
                        "rank " + r + " names the culprit's world rank and pid; log:\n" + log);
                // heard of through the sub-groups' pads, not waited out (no elapsed-time bound: a loaded machine stretches it)
                assertTrue(log.contains("REASON PEER_ABORTED"),
                        "rank " + r + " must fail hearing of the abort, not by its deadline; log:\n" + log);
            }
            CrossProcessTest.assertNoFilesOf(w.pids());
        }
    }
}
