package org.symmem4j.it;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.symmem4j.parallel.ChildJvmFlags;

/**
 * Starts worker JVMs (one per rank) running {@link ProcessWorker} with torchrun's variables, as a
 * launcher would: by default each job gets a fresh {@code SYMMEM4J_RUN_ID}. Variants for the fault
 * tests: a job launched by a shell of its own (so its ranks share a parent other than this JVM and
 * the default run id applies), and a rank whose parent never reaps it.
 */
final class Workers implements AutoCloseable {

    /** How to start a job. */
    record Launch(int worldSize, String scenario, long timeoutMillis, int port, String runId, boolean ownShell,
                  int unreapedRank, Map<String, String> extraEnv, boolean lightJvm) {

        static Launch of(int worldSize, String scenario, long timeoutMillis) {
            return new Launch(worldSize, scenario, timeoutMillis, freePort(), "it-" + UUID.randomUUID(), false, -1, Map.of(),
                    false);
        }

        /**
         * The ranks take {@link ChildJvmFlags} (C1 only in the build): for a job whose ranks run for a few seconds
         * (set-up, a few hundred small all-reduces, a wait for a peer), where C2's compiling is most of their CPU. Not
         * for collectives checked for correctness, nor for long or large loops: C1 runs the Vector API's loops several
         * times slower (a 4-rank RING of 1 MiB: 3x the CPU; bench/results/2026-11-30-ci-time-it.md).
         */
        Launch light() {
            return new Launch(worldSize, scenario, timeoutMillis, port, runId, ownShell, unreapedRank, extraEnv, true);
        }

        Launch onPort(int p) {
            return new Launch(worldSize, scenario, timeoutMillis, p, runId, ownShell, unreapedRank, extraEnv, lightJvm);
        }

        /** All ranks started by one shell of their own, with no run id set: the default (their parent) applies. */
        Launch launchedByOwnShell() {
            return new Launch(worldSize, scenario, timeoutMillis, port, null, true, unreapedRank, extraEnv, lightJvm);
        }

        /** Every rank started with run id {@code id}, or, when null, with none (the default, this JVM's pid, applies). */
        Launch withRunId(String id) {
            return new Launch(worldSize, scenario, timeoutMillis, port, id, ownShell, unreapedRank, extraEnv, lightJvm);
        }

        /** Rank {@code r}'s parent is a process that never reaps its children. */
        Launch unreaped(int r) {
            return new Launch(worldSize, scenario, timeoutMillis, port, runId, ownShell, r, extraEnv, lightJvm);
        }

        /** Every rank also gets environment variable {@code name=value}. */
        Launch withEnv(String name, String value) {
            Map<String, String> env = new java.util.LinkedHashMap<>(extraEnv);
            env.put(name, value);
            return new Launch(worldSize, scenario, timeoutMillis, port, runId, ownShell, unreapedRank, Map.copyOf(env), lightJvm);
        }
    }

    final Launch launch;
    /** Each rank's process, where this JVM started it directly (else null). */
    final List<Process> processes = new ArrayList<>();
    final List<Path> logs = new ArrayList<>();
    /** Every rank's pid. */
    final List<Long> rankPids = new ArrayList<>();
    /** Shells that started ranks (own-shell launches, unreaped ranks' parents). */
    private final List<Process> shells = new ArrayList<>();

    private Workers(Launch launch) {
        this.launch = launch;
    }

    /** Ports handed out by {@link #freePort()} in this JVM: trials running side by side (the soak) never share one. */
    private static final java.util.Set<Integer> ISSUED = java.util.concurrent.ConcurrentHashMap.newKeySet();

    static int freePort() {
        while (true) {
            try (ServerSocket s = new ServerSocket(0)) {
                if (ISSUED.add(s.getLocalPort())) {
                    return s.getLocalPort();
                }
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    /** Starts {@code worldSize} workers running {@code scenario}, as one job with its own run id. */
    static Workers start(int worldSize, String scenario, long timeoutMillis) throws IOException {
        return start(Launch.of(worldSize, scenario, timeoutMillis));
    }

    static Workers start(Launch launch) throws IOException {
        return start(launch, null);
    }

    /** What runs between starting rank 0 and the other ranks. */
    interface AfterRank0 {
        void run() throws Exception;
    }

    /**
     * As {@link #start(Launch)}, running {@code afterRank0} (if not null) once rank 0 is started and
     * before the other ranks are (not for own-shell launches).
     */
    static Workers start(Launch launch, AfterRank0 afterRank0) throws IOException {
        Workers w = new Workers(launch);
        String java = ProcessHandle.current().info().command().orElse("java");
        Path logDir = Files.createDirectories(Path.of("target", "worker-logs"));
        StringBuilder script = new StringBuilder();
        for (int rank = 0; rank < launch.worldSize(); rank++) {
            if (rank == 1 && afterRank0 != null && !launch.ownShell()) {
                try {
                    afterRank0.run();
                } catch (Exception e) {
                    w.close();
                    throw new IOException("between rank 0 and the others: " + e, e);
                }
            }
            List<String> cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED",
                    "--add-modules=jdk.incubator.vector", "-Xmx256m", "-XX:+UseSerialGC"));
            if (launch.lightJvm()) {
                cmd.addAll(ChildJvmFlags.get());
            }
            cmd.addAll(List.of("-Dsymmem4j.timeout.ms=" + launch.timeoutMillis(), "-cp",
                    System.getProperty("java.class.path"), ProcessWorker.class.getName()));
            cmd.addAll(List.of(launch.scenario().split(" ")));
            Path log = logDir.resolve(launch.scenario().replace(' ', '-') + "-ws" + launch.worldSize() + "-rank" + rank
                    + "-" + launch.port() + "-" + System.nanoTime() + ".log");
            w.logs.add(log);
            Map<String, String> env = environment(launch, rank);
            if (launch.ownShell()) {
                script.append(envPrefix(env)).append(shellQuote(cmd)).append(" > ").append(shellQuote(List.of(log.toString())))
                        .append(" 2>&1 & echo $!\n");
                w.processes.add(null);
            } else if (rank == launch.unreapedRank()) {
                // sh starts the rank, prints its pid and becomes `sleep`, which never calls wait(): once the
                // rank dies it stays a zombie for as long as the sleep runs.
                String line = envPrefix(env) + shellQuote(cmd) + " > " + shellQuote(List.of(log.toString()))
                        + " 2>&1 & echo $!; exec sleep 600";
                Process sh = new ProcessBuilder("sh", "-c", line).redirectErrorStream(true).start();
                w.shells.add(sh);
                w.processes.add(null);
                w.rankPids.add(readPid(new BufferedReader(new InputStreamReader(sh.getInputStream()))));
                continue;
            } else {
                ProcessBuilder pb = new ProcessBuilder(cmd);
                pb.environment().remove("SYMMEM4J_RUN_ID"); // none set: the default run id (this JVM's pid) applies
                pb.environment().remove("TORCHELASTIC_RUN_ID");
                pb.environment().putAll(env);
                pb.redirectErrorStream(true).redirectOutput(log.toFile());
                Process p = pb.start();
                w.processes.add(p);
                w.rankPids.add(p.pid());
                continue;
            }
        }
        if (launch.ownShell()) {
            script.append("wait\n");
            Process sh = new ProcessBuilder("sh", "-c", script.toString()).redirectErrorStream(true).start();
            w.shells.add(sh);
            BufferedReader pids = new BufferedReader(new InputStreamReader(sh.getInputStream())); // one reader: it reads ahead
            for (int rank = 0; rank < launch.worldSize(); rank++) {
                w.rankPids.add(readPid(pids));
            }
        }
        return w;
    }

    private static Map<String, String> environment(Launch launch, int rank) {
        Map<String, String> env = new java.util.LinkedHashMap<>();
        env.put("RANK", Integer.toString(rank));
        env.put("WORLD_SIZE", Integer.toString(launch.worldSize()));
        env.put("LOCAL_RANK", Integer.toString(rank));
        env.put("MASTER_ADDR", "127.0.0.1");
        env.put("MASTER_PORT", Integer.toString(launch.port()));
        if (launch.runId() != null) {
            env.put("SYMMEM4J_RUN_ID", launch.runId());
        }
        env.putAll(launch.extraEnv());
        return env;
    }

    private static String envPrefix(Map<String, String> env) {
        StringBuilder b = new StringBuilder();
        env.forEach((k, v) -> b.append(k).append('=').append(shellQuote(List.of(v))).append(' '));
        return b.toString();
    }

    private static String shellQuote(List<String> words) {
        StringBuilder b = new StringBuilder();
        for (String w : words) {
            if (!b.isEmpty()) {
                b.append(' ');
            }
            b.append('\'').append(w.replace("'", "'\\''")).append('\'');
        }
        return b.toString();
    }

    private static long readPid(BufferedReader shellOutput) throws IOException {
        String line = shellOutput.readLine();
        if (line == null) {
            throw new IOException("launcher shell printed no pid");
        }
        return Long.parseLong(line.trim());
    }

    String log(int rank) {
        try {
            return Files.readString(logs.get(rank));
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }

    boolean isAlive(int rank) {
        Optional<ProcessHandle> h = ProcessHandle.of(rankPids.get(rank));
        if (h.isEmpty() || !h.get().isAlive()) {
            return false;
        }
        try {
            String stat = Files.readString(Path.of("/proc", Long.toString(rankPids.get(rank)), "stat"));
            char state = stat.charAt(stat.lastIndexOf(')') + 2);
            return state != 'Z' && state != 'X';
        } catch (IOException e) {
            return false;
        }
    }

    /** Waits until rank's log contains {@code text}; false on timeout or exit. */
    boolean awaitLog(int rank, String text, long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        while (System.nanoTime() < deadline) {
            if (log(rank).contains(text)) {
                return true;
            }
            if (!isAlive(rank)) {
                return log(rank).contains(text);
            }
            Thread.sleep(20);
        }
        return false;
    }

    /**
     * Exit code of each rank, waiting at most {@code millis} for all; -1 for a rank still running.
     * Ranks this JVM did not start directly report 0 once gone (their logs say how they ended).
     */
    int[] awaitExit(long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        int[] codes = new int[rankPids.size()];
        for (int r = 0; r < rankPids.size(); r++) {
            Process p = processes.get(r);
            if (p != null) {
                long left = Math.max(1, deadline - System.nanoTime());
                codes[r] = p.waitFor(left, TimeUnit.NANOSECONDS) ? p.exitValue() : -1;
            } else {
                while (isAlive(r) && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                codes[r] = isAlive(r) ? -1 : 0;
            }
        }
        return codes;
    }

    /** Nanosecond time at which each rank was last seen alive, polling every 5 ms until all are gone or {@code millis} pass. */
    long[] awaitExitTimes(long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        long[] ends = new long[rankPids.size()];
        boolean any = true;
        while (any && System.nanoTime() < deadline) {
            any = false;
            for (int r = 0; r < ends.length; r++) {
                if (ends[r] == 0) {
                    if (isAlive(r)) {
                        any = true;
                    } else {
                        ends[r] = System.nanoTime();
                    }
                }
            }
            Thread.sleep(5);
        }
        return ends;
    }

    /** Sends {@code signal} (KILL, STOP, CONT, ...) to rank {@code rank}'s process. */
    void signal(int rank, String signal) throws IOException, InterruptedException {
        new ProcessBuilder("kill", "-" + signal, Long.toString(rankPids.get(rank))).inheritIO().start().waitFor();
    }

    List<Long> pids() {
        return List.copyOf(rankPids);
    }

    @Override
    public void close() {
        for (int r = 0; r < rankPids.size(); r++) {
            ProcessHandle.of(rankPids.get(r)).ifPresent(ProcessHandle::destroyForcibly); // SIGKILL ends stopped ranks too
        }
        for (Process sh : shells) {
            sh.destroyForcibly();
        }
    }
}
