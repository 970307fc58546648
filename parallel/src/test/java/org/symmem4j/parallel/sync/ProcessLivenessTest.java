package org.symmem4j.parallel.sync;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import org.junit.jupiter.api.Test;

/** A process that exited but was never reaped counts as gone; a live one as alive. */
class ProcessLivenessTest {

    @Test
    void theStateLetterIsReadAfterTheLastParenthesis() {
        assertTrue(ProcessLiveness.stateIsGone("123 (java) Z 1 2 3"));
        assertTrue(ProcessLiveness.stateIsGone("123 (a) b) X 1"));
        assertFalse(ProcessLiveness.stateIsGone("123 (sleep Z) S 1 2 3"), "a command name may hold ') Z'");
        assertFalse(ProcessLiveness.stateIsGone("123 (java) R 1"));
        assertFalse(ProcessLiveness.stateIsGone("garbage"));
    }

    @Test
    void anUnreapedChildIsGoneAtOnce() throws Exception {
        long self = ProcessHandle.current().pid();
        long start = ProcessHandle.current().info().startInstant().map(Instant::toEpochMilli).orElse(0L);
        assertTrue(ProcessLiveness.isRunning(self, start));
        assertFalse(ProcessLiveness.isRunning(self, start + 1), "another start time is another process");
        // sh starts a short sleep, prints its pid, then execs a long sleep that never reaps it: a zombie.
        Process parent = new ProcessBuilder("sh", "-c", "sleep 0.2 & echo $!; exec sleep 30").start();
        try {
            long child = Long.parseLong(new BufferedReader(new InputStreamReader(parent.getInputStream())).readLine().trim());
            Path stat = Path.of("/proc", Long.toString(child), "stat");
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (!Files.readString(stat).contains(") Z ") && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(Files.readString(stat).contains(") Z "), "the child should be a zombie by now");
            assertTrue(ProcessHandle.of(child).map(ProcessHandle::isAlive).orElse(false),
                    "the JDK still calls a zombie alive: the case this class exists for");
            assertFalse(ProcessLiveness.isRunning(child, 0));
        } finally {
            parent.destroyForcibly();
        }
    }
}
