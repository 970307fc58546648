package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.security.SecureRandom;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Runs a worker main as the ranks of a process group, one JVM each, with torchrun's variables (the way the
 * launcher starts them), and checks that every rank exited 0 and printed its success line. The child JVMs
 * get {@code -Dsymmem4j.test.classPath} as their class path where it is set (the GPU machine's runner sets
 * it: JUnit's console launcher keeps the test class path to itself), else this JVM's. Every rank's output
 * is printed, so a failure shows each rank's own story.
 */
public final class WorkerProcesses {

    private WorkerProcesses() {
    }

    /**
     * @param worker    the main class each rank runs
     * @param ranks     how many processes
     * @param okLine    what rank r prints on success, followed by {@code " rank=" + r}
     * @param logs      where each rank's output goes
     * @param seconds   how long the ranks may take
     * @param args      the worker's arguments
     */
    /**
     * The worker side of a kill test: this JVM sends itself SIGKILL ({@code kill -9}: no shutdown hooks, no cleanup,
     * as a crash) and waits for it to land. Never returns normally; the error it returns is for the caller to throw,
     * should this JVM still be alive 60 s later, so that the compiler sees the call site end there too.
     *
     * @return the error to throw ({@code throw WorkerProcesses.killSelf();})
     */
    public static IllegalStateException killSelf() {
        try {
            new ProcessBuilder("kill", "-9", Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
            Thread.sleep(60_000);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
        return new IllegalStateException("still alive 60 s after kill -9 of itself");
    }

    /**
     * The worker side: runs {@code body}, prints the success line it returns and exits 0, or prints what was thrown
     * and exits 3 (the group's and the transport's threads would otherwise keep the JVM, and the peers waiting).
     *
     * @param body the worker's checks; returns its success line, e.g. {@code "NVSHMEM OK rank=1"}
     */
    public static void exitWith(java.util.concurrent.Callable<String> body) {
        int status;
        try {
            System.out.println(body.call());
            status = 0;
        } catch (Throwable t) {
            System.out.println("FAILED " + t);
            t.printStackTrace(System.out);
            status = 3;
        }
        System.out.flush();
        System.exit(status);
    }

    public static void runAndCheck(Class<?> worker, int ranks, String okLine, Path logs, int seconds, String... args)
            throws IOException, InterruptedException {
        runAndCheck(worker, ranks, okLine, logs, seconds, java.util.Set.of(), args);
    }

    /**
     * As {@link #runAndCheck(Class, int, String, Path, int, String...)}, where the ranks in {@code killedRanks}
     * must end killed by SIGKILL (exit status 137, e.g. a rank that kills itself mid-write) instead of printing
     * their success line.
     *
     * @param worker      the main class each rank runs
     * @param ranks       how many processes
     * @param okLine      what a surviving rank r prints on success, followed by {@code " rank=" + r}
     * @param logs        where each rank's output goes
     * @param seconds     how long the ranks may take
     * @param killedRanks the ranks expected to die by SIGKILL
     * @param args        the worker's arguments
     */
    public static void runAndCheck(Class<?> worker, int ranks, String okLine, Path logs, int seconds,
                                   java.util.Set<Integer> killedRanks, String... args)
            throws IOException, InterruptedException {
        run(worker, ranks, okLine, logs, seconds, killedRanks, null, args);
    }

    /**
     * As {@link #runAndCheck(Class, int, String, Path, int, java.util.Set, String...)}, with this JVM in the launcher's
     * part of {@code symmem4j-run --on-failure shrink}: each rank gets {@code SYMMEM4J_MEMBERSHIP_FILE} (in a 0700
     * directory under {@code logs}) and one {@code SYMMEM4J_SECRET}, and a rank whose process ends with a non-zero
     * status is announced there at once ({@code dead <rank> exit=<status>}, the file replaced atomically: a temporary
     * file, forced, renamed), so the survivors' {@code Group.shrink()} finds it.
     */
    public static void runWithShrink(Class<?> worker, int ranks, String okLine, Path logs, int seconds,
                                     java.util.Set<Integer> killedRanks, String... args)
            throws IOException, InterruptedException {
        Path dir = Files.createDirectories(logs.resolve("launcher"));
        Files.setPosixFilePermissions(dir, java.nio.file.attribute.PosixFilePermissions.fromString("rwx------"));
        run(worker, ranks, okLine, logs, seconds, killedRanks, dir.resolve("membership"), args);
    }

    private static void run(Class<?> worker, int ranks, String okLine, Path logs, int seconds,
                            java.util.Set<Integer> killedRanks, Path membership, String... args)
            throws IOException, InterruptedException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        byte[] seed = new byte[16];
        new SecureRandom().nextBytes(seed);
        String secret = HexFormat.of().formatHex(seed); // the launcher's job secret (32 characters)
        String java = ProcessHandle.current().info().command().orElse("java");
        String classPath = System.getProperty("symmem4j.test.classPath", System.getProperty("java.class.path"));
        String runId = worker.getSimpleName() + "-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
        List<Process> processes = new ArrayList<>();
        List<Path> outputs = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            List<String> command = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED",
                    "--add-modules=jdk.incubator.vector", "-Xmx1g", "-cp", classPath, worker.getName()));
            command.addAll(List.of(args));
            ProcessBuilder pb = new ProcessBuilder(command);
            pb.environment().putAll(Map.of("RANK", Integer.toString(r), "WORLD_SIZE", Integer.toString(ranks),
                    "LOCAL_RANK", Integer.toString(r), "LOCAL_WORLD_SIZE", Integer.toString(ranks),
                    "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", Integer.toString(port), "SYMMEM4J_RUN_ID", runId));
            if (membership != null) {
                pb.environment().put("SYMMEM4J_MEMBERSHIP_FILE", membership.toString());
                pb.environment().put("SYMMEM4J_SECRET", secret);
            }
            Path out = logs.resolve("rank-" + r + ".log");
            outputs.add(out);
            processes.add(pb.redirectErrorStream(true).redirectOutput(out.toFile()).start());
        }
        List<Integer> codes = new ArrayList<>();
        try {
            if (membership == null) {
                for (Process p : processes) {
                    codes.add(p.waitFor(seconds, TimeUnit.SECONDS) ? p.exitValue() : -1);
                }
            } else {
                codes.addAll(awaitAnnouncingDeaths(processes, membership, seconds));
            }
        } finally {
            processes.forEach(Process::destroyForcibly);
        }
        StringBuilder all = new StringBuilder();
        for (int r = 0; r < ranks; r++) {
            String text = Files.readString(outputs.get(r));
            all.append("---- rank ").append(r).append(" (exit ").append(codes.get(r)).append(")\n").append(text);
        }
        System.out.println(all);
        for (int r = 0; r < ranks; r++) {
            if (killedRanks.contains(r)) {
                assertEquals(137, codes.get(r), "rank " + r + " was expected to die by SIGKILL (137):\n" + all);
                continue;
            }
            assertEquals(0, codes.get(r), "rank " + r + " failed (-1: still running after " + seconds + " s):\n" + all);
            assertTrue(Files.readString(outputs.get(r)).contains(okLine + " rank=" + r), all::toString);
        }
    }

    /**
     * Waits (polled every 10 ms, at most {@code seconds}) for every process, writing each one that ends with a non-zero
     * status into {@code membership} as the launcher does; returns the exit statuses (-1: still running).
     */
    private static List<Integer> awaitAnnouncingDeaths(List<Process> processes, Path membership, int seconds)
            throws IOException, InterruptedException {
        int n = processes.size();
        Integer[] codes = new Integer[n];
        StringBuilder lines = new StringBuilder();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        int left = n;
        while (left > 0 && System.nanoTime() - deadline < 0) {
            for (int r = 0; r < n; r++) {
                if (codes[r] == null && !processes.get(r).isAlive()) {
                    codes[r] = processes.get(r).exitValue();
                    left--;
                    if (codes[r] != 0) {
                        lines.append("dead ").append(r).append(" exit=").append(codes[r]).append('\n');
                        Path tmp = membership.resolveSibling(membership.getFileName() + ".tmp");
                        try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(tmp,
                                java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.TRUNCATE_EXISTING,
                                java.nio.file.StandardOpenOption.WRITE)) {
                            ch.write(java.nio.ByteBuffer.wrap(lines.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8)));
                            ch.force(true);
                        }
                        Files.move(tmp, membership, java.nio.file.StandardCopyOption.ATOMIC_MOVE,
                                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
                        System.out.println("launcher (test): rank " + r + " ended with status " + codes[r] + ", announced in "
                                + membership);
                    }
                }
            }
            Thread.sleep(10);
        }
        List<Integer> out = new ArrayList<>();
        for (Integer c : codes) {
            out.add(c == null ? -1 : c);
        }
        return out;
    }
}
