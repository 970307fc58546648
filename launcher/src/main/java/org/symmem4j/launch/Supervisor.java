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
import java.util.concurrent.TimeUnit;

/**
 * Starts a plan's processes and watches them: their output goes to the launcher's, each line
 * prefixed with its rank (and, with a log directory, also to {@code rank-N.log}); when one exits
 * with a non-zero code or is killed, the others are stopped — {@code SIGTERM}, then {@code SIGKILL}
 * after the grace period, their child processes too — and the launcher reports which rank failed
 * first and how. {@link #stop} does the same from a shutdown hook when the launcher itself is
 * interrupted or terminated; after it, nothing more starts. One supervisor watches one generation of the job
 * ({@link LaunchPlan#generation()}); the launcher makes the next.
 *
 * <p>With a membership file ({@code --on-failure shrink}) a failed process stops nobody: the supervisor adds its rank
 * to the file (the dead ranks so far, one {@code dead <rank> <how>} line each, replaced atomically: written to a
 * temporary file and renamed), which the surviving processes read to agree on who is gone and re-form their group
 * without it ({@code SYMMEM4J_MEMBERSHIP_FILE}; the trainers' {@code onWorkerFailure(SHRINK)}). The supervisor is the
 * membership authority because it sees each process end, whichever rank it was (rank 0, which hosts the first store,
 * included). The job ends when every process has ended: 0 when at least one exited 0 (the survivors finished it),
 * else the first failed rank's code.
 */
final class Supervisor implements NodeRendezvous.Stoppable {

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
    /**
     * Why another machine's launcher had this generation stopped ({@link #stopFor}), null while none did. Written before
     * {@link #stop} (whose lock and the processes' exits publish it to {@link #run}'s loop, which reads it after waking).
     */
    private volatile String stoppedFor;
    private volatile boolean stoppedForRestart;
    /** Every process {@link #stop} stopped, guarded by this. */
    private final List<String> stoppedSoFar = new ArrayList<>();
    /** Where the dead ranks are announced with {@code --on-failure shrink}; null: a failure stops every process. */
    private final Path membership;
    /** The launcher's own messages ({@code --on-failure shrink} says each death as it happens). */
    private final PrintStream err;

    Supervisor(LaunchPlan plan, PrintStream out, Path logDir, Duration grace, Map<String, String> env) {
        this(plan, out, logDir, grace, env, null, null);
    }

    /**
     * @param membership the membership file ({@code --on-failure shrink}), which every process finds in
     *                   {@code SYMMEM4J_MEMBERSHIP_FILE}; null: a failure stops every process
     * @param err        where the launcher's messages go (used with a membership file)
     */
    Supervisor(LaunchPlan plan, PrintStream out, Path logDir, Duration grace, Map<String, String> env, Path membership,
               PrintStream err) {
        this.plan = plan;
        this.membership = membership;
        this.err = err;
        if (membership != null) {
            env = new java.util.HashMap<>(env);
            env.put(MEMBERSHIP_FILE_ENV, membership.toString());
        }
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
        if (membership != null) {
            try {
                announceDead(); // the file exists, empty, before any process starts
            } catch (IOException e) {
                return new Outcome(1, "cannot write the membership file " + membership + ": " + e.getMessage(), -1, false);
            }
        }
        for (LaunchPlan.RankLaunch r : plan.ranks()) {
            ProcessBuilder pb = new ProcessBuilder(r.command()).redirectErrorStream(true);
            pb.environment().clear();
            pb.environment().putAll(env);
            pb.environment().putAll(r.env());
            Process p;
            synchronized (this) { // after stop() nothing more starts: a shutdown hook may stop a generation being started
                if (stopping) {
                    return stoppedFor != null ? stoppedElsewhere(List.of()) : new Outcome(130, "interrupted", -1, false);
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
            Thread.ofPlatform().name("symmem4j-run-exit-" + r.rank()).daemon().start(() -> watchExit(p));
        }
        if (membership != null) {
            return runShrinking();
        }
        int failed = -1;
        int code = 0;
        while (failed < 0) {
            if (stoppedFor != null) {
                return stoppedElsewhere(stop());
            }
            boolean running = false;
            for (int i = 0; i < processes.size() && failed < 0; i++) {
                Process p = processes.get(i);
                if (p.isAlive()) {
                    running = true;
                } else if (p.exitValue() != 0) {
                    failed = i;
                    code = p.exitValue();
                }
            }
            if (failed >= 0) {
                break;
            }
            if (!running) {
                joinPumps();
                return new Outcome(0, "all " + processes.size() + " ranks exited 0 after " + elapsed(), -1, false);
            }
            if (stopping) { // the launcher is shutting down: its hook stops the processes and reports
                return new Outcome(130, "interrupted", -1, false);
            }
            awaitAnExit(); // wakes when any process exits (also one the shutdown hook stops); a job runs as long as it runs
        }
        if (stoppedFor != null) { // its exit is the stop's doing
            return stoppedElsewhere(stop());
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
     * Stops this generation because of what happened elsewhere ({@code --nnodes MIN:MAX}): another machine's generation
     * failed or its launcher is gone ({@code restartable}), or node 0's launcher is gone (not). {@link #run} then returns
     * an outcome with {@code why}, failed rank -1. Called from the rendezvous' reader thread; safe before {@link #run}.
     */
    @Override
    public void stopFor(String why, boolean restartable) {
        stoppedForRestart = restartable;
        stoppedFor = why; // volatile: read by run()'s loop after stop() below wakes it through the processes' exits
        stop();
        exits.release(); // wakes run()'s loop even when no process was running
    }

    private Outcome stoppedElsewhere(List<String> ignored) {
        List<String> stopped;
        synchronized (this) { // after every stop() so far: stopFor's own included
            stopped = List.copyOf(stoppedSoFar);
        }
        joinPumps();
        return new Outcome(1, stoppedFor + "; " + (stopped.isEmpty() ? "no process of this machine was running"
                : "stopped " + String.join(", ", stopped)), -1, stoppedForRestart);
    }

    /**
     * On a thread of its own, one per process: waits until {@code p} has exited, then wakes the supervisor. The
     * supervisor does not wait through {@link Process#onExit()}, whose future completes through a task of the common
     * {@link java.util.concurrent.ForkJoinPool}: called as a library from a thread of that pool (a parallel stream, a
     * {@code CompletableFuture.supplyAsync}), the supervisor would block one of the pool's workers in a wait that needs
     * another of them, and with every worker so blocked and no spare allowed the launch fails ("Thread limit exceeded
     * replacing blocked worker") or never returns.
     */
    private void watchExit(Process p) {
        boolean interrupted = false;
        while (true) {
            try {
                p.waitFor();
                break;
            } catch (InterruptedException e) {
                interrupted = true; // nobody interrupts these threads; go on waiting for the exit all the same
            }
        }
        exits.release(); // the supervisor's loop looks at every process again
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Waits until a process exits (one permit per exit, {@link #watchExit}); the caller then looks at every process.
     * An interrupt of the calling thread is kept, and the wait goes on: a job runs as long as it runs, and the
     * launcher's shutdown hook ends it by stopping its processes.
     */
    private void awaitAnExit() {
        exits.acquireUninterruptibly();
    }

    /** One permit per process that exited ({@link #watchExit}); the loops of {@link #run} take one per look. */
    private final java.util.concurrent.Semaphore exits = new java.util.concurrent.Semaphore(0);

    /** The variable that tells every process where the membership file is ({@code --on-failure shrink}). */
    static final String MEMBERSHIP_FILE_ENV = "SYMMEM4J_MEMBERSHIP_FILE";

    /** The dead ranks so far, in the order they died, and how (written to the membership file). */
    private final List<String> deaths = new ArrayList<>();

    /**
     * {@code --on-failure shrink}: waits for every process to end; each that fails is announced in the membership
     * file at once, and the others go on.
     */
    private Outcome runShrinking() {
        boolean[] ended = new boolean[processes.size()];
        int firstFailed = -1;
        int firstCode = 0;
        int succeeded = 0;
        List<String> died = new ArrayList<>();
        while (true) {
            boolean running = false;
            for (int i = 0; i < processes.size(); i++) {
                Process p = processes.get(i);
                if (p.isAlive()) {
                    running = true;
                    continue;
                }
                if (ended[i]) {
                    continue;
                }
                ended[i] = true;
                int code = p.exitValue();
                if (code == 0) {
                    succeeded++;
                    continue;
                }
                LaunchPlan.RankLaunch r = plan.ranks().get(i);
                String how = "rank " + r.rank() + " (local rank " + r.localRank() + ", pid " + p.pid() + ") "
                        + describeExit(code) + " after " + elapsed();
                died.add(how);
                if (firstFailed < 0) {
                    firstFailed = i;
                    firstCode = code;
                }
                deaths.add("dead " + r.rank() + " " + describeExit(code));
                try {
                    announceDead();
                } catch (IOException e) {
                    synchronized (err) {
                        err.println("symmem4j-run: " + how + "; cannot announce it in " + membership + " (" + e.getMessage()
                                + "): stopping every rank");
                    }
                    stop();
                    joinPumps();
                    return new Outcome(Math.max(1, Math.min(code, 255)), how + "; the membership file could not be"
                            + " written, every rank stopped", r.rank(), false);
                }
                synchronized (err) {
                    err.println("symmem4j-run: " + how + "; --on-failure shrink: the other ranks go on without it");
                }
            }
            if (!running) {
                break;
            }
            if (stopping) {
                return new Outcome(130, "interrupted", -1, false);
            }
            awaitAnExit();
        }
        joinPumps();
        if (firstFailed < 0) {
            return new Outcome(0, "all " + processes.size() + " ranks exited 0 after " + elapsed(), -1, false);
        }
        if (succeeded > 0) {
            return new Outcome(0, succeeded + " of " + processes.size() + " ranks exited 0 after " + elapsed()
                    + " (--on-failure shrink); died: " + String.join("; ", died), -1, false);
        }
        return new Outcome(Math.max(1, Math.min(firstCode, 255)), "no rank exited 0 (--on-failure shrink); died: "
                + String.join("; ", died), plan.ranks().get(firstFailed).rank(), false);
    }

    /** Replaces the membership file with the dead ranks so far: a temporary file, forced to disk, renamed over it. */
    private void announceDead() throws IOException {
        Path tmp = membership.resolveSibling(membership.getFileName() + ".tmp");
        try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(tmp, StandardOpenOption.CREATE,
                StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE)) {
            StringBuilder b = new StringBuilder();
            for (String d : deaths) {
                b.append(d).append('\n');
            }
            ch.write(java.nio.ByteBuffer.wrap(b.toString().getBytes(StandardCharsets.UTF_8)));
            ch.force(true);
        }
        Files.move(tmp, membership, java.nio.file.StandardCopyOption.ATOMIC_MOVE,
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
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
        stoppedSoFar.addAll(what);
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
