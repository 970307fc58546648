package org.symmem4j.parallel.sync;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Optional;

/**
 * Whether a process that took part in a group still runs. {@link ProcessHandle#isAlive()} alone is
 * not enough: a process that exited but whose parent has not reaped it yet (a zombie) still has its
 * pid, and {@code isAlive()} says true until the parent calls {@code wait}, which may be never. On
 * Linux the state letter in {@code /proc/<pid>/stat} tells: {@code Z} (zombie) and {@code X} (dead)
 * are gone for our purposes. A pid recycled by a later process is told apart by its start time.
 */
public final class ProcessLiveness {

    private ProcessLiveness() {
    }

    /**
     * Whether process {@code pid}, started at {@code startMillis} (0 = unknown), still runs.
     * Unknown facts count in favour of alive: only a process known gone is reported gone.
     *
     * @param pid the process id
     * @param startMillis the process's start time in epoch milliseconds, 0 if unknown
     * @return false only if the process is known to be gone (or the pid reused by a later process)
     */
    public static boolean isRunning(long pid, long startMillis) {
        Optional<ProcessHandle> h = ProcessHandle.of(pid);
        if (h.isEmpty() || !h.get().isAlive()) {
            return false;
        }
        if (isZombieOrDead(pid)) {
            return false;
        }
        Optional<Instant> actual = h.get().info().startInstant();
        return startMillis == 0 || actual.isEmpty() || actual.get().toEpochMilli() == startMillis;
    }

    /**
     * True when {@code /proc/<pid>/stat} says the process is a zombie or dead. False where there is
     * no {@code /proc} (not Linux) or it cannot be read.
     */
    static boolean isZombieOrDead(long pid) {
        String stat;
        try {
            stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"), StandardCharsets.US_ASCII);
        } catch (NoSuchFileException e) {
            return Files.isDirectory(Path.of("/proc/self")); // /proc exists but the pid does not: gone
        } catch (IOException | RuntimeException e) {
            return false;
        }
        return stateIsGone(stat);
    }

    /**
     * Parses the state letter of a {@code /proc/<pid>/stat} line: "pid (comm) S ...". The command
     * name may itself hold spaces and parentheses, so the state is the first field after the last
     * ')'.
     */
    static boolean stateIsGone(String stat) {
        int close = stat.lastIndexOf(')');
        if (close < 0 || close + 2 >= stat.length()) {
            return false;
        }
        char state = stat.charAt(close + 2);
        return state == 'Z' || state == 'X' || state == 'x';
    }
}
