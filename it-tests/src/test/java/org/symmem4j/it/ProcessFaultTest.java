package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.symmem4j.parallel.host.SharedMemoryFiles;

/**
 * A rank killed with SIGKILL mid-run: every other rank fails with the timeout error naming it, well
 * inside the timeout (its pid is gone), nothing hangs, and no shared-memory file is left behind.
 */
class ProcessFaultTest {

    @ParameterizedTest(name = "kill rank {0} of 3")
    @ValueSource(ints = {1, 0})
    void killedRankIsNamedByEverySurvivor(int victim) throws Exception {
        long timeoutMs = 30_000;
        try (Workers w = Workers.start(3, "loop", timeoutMs)) {
            for (int r = 0; r < 3; r++) {
                assertTrue(w.awaitLog(r, "READY", 60_000), "rank " + r + " never got going; log:\n" + w.log(r));
            }
            long killedAt = System.nanoTime();
            w.processes.get(victim).destroyForcibly(); // SIGKILL on Linux: no shutdown hooks, no cleanup
            int[] codes = w.awaitExit(timeoutMs + 30_000);
            Duration took = Duration.ofNanos(System.nanoTime() - killedAt);
            for (int r = 0; r < 3; r++) {
                if (r == victim) {
                    continue;
                }
                String log = w.log(r);
                assertEquals(3, codes[r], "rank " + r + " must fail, not hang or succeed; log:\n" + log);
                assertTrue(log.contains("FAILED org.symmem4j.parallel.PeerTimeoutException"), log);
                assertTrue(log.contains("rank " + victim + " (pid " + w.processes.get(victim).pid() + ")"),
                        "the error must name the killed rank; log:\n" + log);
            }
            assertTrue(took.compareTo(Duration.ofMillis(timeoutMs)) < 0, "a dead pid must be noticed before the timeout: " + took);
            CrossProcessTest.assertNoFilesOf(w.pids());
        }
    }

    @Test
    void filesOfACrashedOwnerAreSwept() throws Exception {
        try (Workers w = Workers.start(1, "leak-file", 10_000)) {
            assertTrue(w.awaitLog(0, "READY", 30_000), w.log(0));
            String name = w.log(0).lines().filter(l -> l.startsWith("FILE ")).findFirst().orElseThrow().substring(5);
            assertTrue(Files.exists(SharedMemoryFiles.directory().resolve(name)));
            SharedMemoryFiles.sweepStale();
            assertTrue(Files.exists(SharedMemoryFiles.directory().resolve(name)), "owner alive: its file must stay");
            w.processes.getFirst().destroyForcibly().waitFor();
            assertTrue(SharedMemoryFiles.sweepStale() >= 1);
            assertFalse(Files.exists(SharedMemoryFiles.directory().resolve(name)), "owner dead: its file must go");
        }
    }
}
