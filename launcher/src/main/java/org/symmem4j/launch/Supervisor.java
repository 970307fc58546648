package org.symmem4j.launch;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Starts a plan's processes and watches them: their output goes to the launcher's, each line
 * prefixed with its rank (and, with a log directory, also to {@code rank-N.log}); when one exits
 * with a non-zero code or is killed, the others are stopped — {@code SIGTERM}, then {@code SIGKILL}
 * after the grace period, their child processes too — and the launcher reports which rank failed
 * first and how. {@link #stop} does the same from a shutdown hook when the launcher itself is
 * interrupted or terminated; after it, nothing more starts. One supervisor watches one generation of the job
 * ({@link LaunchPlan#generation()}); the launcher makes the next.
 */
final class Supervisor {

    /**
     * How a launch ended: the exit code for the launcher and what to tell the user.
     *
     * @param exitCode    0 when every rank exited 0, else the first failed rank's code (at least 1)
     * @param message     what to tell the user
     * @param failedRank  the rank that failed first, -1 when none did
     * @param restartable whether starting the job again may help: a rank failed or was killed, rather than the
     *                    program not starting at all or the launcher being stopped
     */
    record Outcome(int exitCode, String message, int failedRank, boolean restartable) {
    }

    private final LaunchPlan plan;
    private final PrintStream out;
    private final Path logDir;
    private final Duration grace;
    /** The environment every process inherits (the launcher's, as {@link Launcher#run} was given it). */
    private final Map<String, String> env;
    private final List<Process> processes = new ArrayList<>();
    private final List<Thread> pumps = new ArrayList<>();
    private final long start = System.nanoTime();
    /** Set once the processes are being stopped (a failure, or the launcher's own shutdown). */
    private volatile boolean stopping;

    Supervisor(LaunchPlan plan, PrintStream out, Path logDir, Duration grace, Map<String, String> env) {
        this.plan = plan;
        this.env = env;
        this.out = out;
        this.logDir = logDir;
        this.grace = grace;
    }

    /**
     * Starts every process and waits until all exited 0, or one failed and the rest were stopped.
     *
     * @return the outcome: 0 when every rank exited 0, else the first failed rank's exit code (at least 1)
     */
    Outcome run() {
        for (LaunchPlan.RankLaunch r : plan.ranks()) {
            ProcessBuilder pb = new ProcessBuilder(r.command()).redirectErrorStream(true);
            pb.environment().clear();
            pb.environment().putAll(env);
            pb.environment().putAll(r.env());
            Process p;
            synchronized (this) { // after stop() nothing more starts: a shutdown hook may stop a generation being started
                if (stopping) {
                    return new Outcome(130, "interrupted", -1, false);
                }
                try {
                    p = pb.start();
                } catch (IOException e) {
                    stop();
                    return new Outcome(127, "could not start rank " + r.rank() + " (" + String.join(" ", r.command()) + "): "
                            + e.getMessage() + "; stopped the ranks started before it", r.rank(), false);
                }
                processes.add(p);
            }
            pumps.add(Thread.ofPlatform().name("symmem4j-run-output-" + r.rank()).daemon().start(() -> pump(r.rank(), p)));
        }
        int failed = -1;
        int code = 0;
        while (failed < 0) {
            List<CompletableFuture<Process>> running = new ArrayList<>();
            for (int i = 0; i < processes.size() && failed < 0; i++) {
                Process p = processes.get(i);
                if (p.isAlive()) {
                    running.add(p.onExit());
                } else if (p.exitValue() != 0) {
                    failed = i;
                    code = p.exitValue();
                }
            }
            if (failed >= 0) {
                break;
            }
            if (running.isEmpty()) {
                joinPumps();
                return new Outcome(0, "all " + processes.size() + " ranks exited 0 after " + elapsed(), -1, false);
            }
            if (stopping) { // the launcher is shutting down: its hook stops the processes and reports
                return new Outcome(130, "interrupted", -1, false);
            }
            // wakes when any process exits (also one the shutdown hook stops); a job runs as long as it runs
            CompletableFuture.anyOf(running.toArray(CompletableFuture[]::new)).join();
        }
        LaunchPlan.RankLaunch r = plan.ranks().get(failed);
        String how = describeExit(code);
        String at = elapsed();
        boolean interrupted = stopping; // the launcher's hook stopped the processes: no failure of the job's own
        List<String> stopped = stop();
        joinPumps();
        return new Outcome(Math.max(1, Math.min(code, 255)), "rank " + r.rank() + " (local rank " + r.localRank() + ", pid "
                + processes.get(failed).pid() + ") " + how + " after " + at + "; "
                + (stopped.isEmpty() ? "the other ranks had exited" : "stopped " + String.join(", ", stopped)), r.rank(),
                !interrupted);
    }

    /**
     * Stops every process still running: {@code SIGTERM} to it and its children, then, after the
     * grace period, {@code SIGKILL} to what is left. Safe to call from a shutdown hook, and twice.
     *
     * @return for each process it stopped, {@code "rank R (SIGTERM)"} or {@code "rank R (SIGKILL after G)"}
     */
    synchronized List<String> stop() {
        stopping = true;
        List<Process> alive = new ArrayList<>();
        for (Process p : processes) {
            if (p.isAlive()) {
                p.descendants().forEach(ProcessHandle::destroy);
                p.destroy();
                alive.add(p);
            }
        }
        long deadline = System.nanoTime() + grace.toNanos();
        List<String> what = new ArrayList<>();
        for (Process p : alive) {
            int rank = plan.ranks().get(processes.indexOf(p)).rank();
            boolean ended = waitUntil(p, deadline);
            if (!ended) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly();
                waitUntil(p, System.nanoTime() + Duration.ofSeconds(5).toNanos());
            }
            what.add("rank " + rank + (ended ? " (SIGTERM)" : " (SIGKILL after " + grace.toSeconds() + " s)"));
        }
        return what;
    }

    private static boolean waitUntil(Process p, long deadlineNanos) {
        try {
            long left = deadlineNanos - System.nanoTime();
            return left > 0 ? p.waitFor(left, TimeUnit.NANOSECONDS) : !p.isAlive();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return !p.isAlive();
        }
    }

    /** What an exit code means: Java reports a process killed by signal S as 128 + S. */
    static String describeExit(int code) {
        if (code > 128 && code < 128 + 65) {
            int signal = code - 128;
            return "was killed by signal " + signal + signalName(signal) + " (exit code " + code + ")";
        }
        return "exited with code " + code;
    }

    private static String signalName(int signal) {
        return switch (signal) {
            case 1 -> " (SIGHUP)";
            case 2 -> " (SIGINT)";
            case 6 -> " (SIGABRT)";
            case 9 -> " (SIGKILL)";
            case 11 -> " (SIGSEGV)";
            case 15 -> " (SIGTERM)";
            default -> "";
        };
    }

    private void pump(int rank, Process p) {
        String prefix = "[rank " + rank + "] ";
        Writer log = null;
        try (BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            if (logDir != null && plan.generation() == 0) {
                log = Files.newBufferedWriter(logDir.resolve("rank-" + rank + ".log"), StandardCharsets.UTF_8);
            } else if (logDir != null) { // a restart appends to the first generation's log, marked
                log = Files.newBufferedWriter(logDir.resolve("rank-" + rank + ".log"), StandardCharsets.UTF_8,
                        StandardOpenOption.CREATE, StandardOpenOption.APPEND);
                log.write("--- symmem4j-run: generation " + plan.generation() + ", run id " + plan.runId() + " ---\n");
            }
            String line;
            while ((line = in.readLine()) != null) {
                synchronized (out) {
                    out.println(prefix + line);
                }
                if (log != null) {
                    log.write(line);
                    log.write('\n');
                    log.flush();
                }
            }
        } catch (IOException e) {
            synchronized (out) {
                out.println(prefix + "(symmem4j-run: output lost: " + e.getMessage() + ")");
            }
        } finally {
            if (log != null) {
                try {
                    log.close();
                } catch (IOException ignored) {
                    // the lines written so far stay
                }
            }
        }
    }

    /** Waits for the output of the processes to drain (bounded: a grandchild may hold the pipe open). */
    private void joinPumps() {
        long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
        for (Thread t : pumps) {
            try {
                t.join(Duration.ofNanos(Math.max(1, deadline - System.nanoTime())));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    private String elapsed() {
        return String.format(Locale.ROOT, "%.1f s", (System.nanoTime() - start) / 1e9);
    }

}
