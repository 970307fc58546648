package org.symmem4j.benchmarks;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.rendezvous.StoreSecret;

/**
 * Starts and supervises the child JVMs of {@link GpuProcessAllReduceBench}: fresh JVMs of the same {@code java},
 * class path and flags, either one per rank (torchrun's variables and a private store secret, as
 * {@code symmem4j-run} starts them), since one process per GPU is what the benchmark measures, or one JVM of
 * every rank's thread, so that both phases start from a fresh JVM and the parent never holds a GPU context while
 * the rank processes run.
 *
 * <p>The children of a phase live and die together: the first to exit non-zero, or the time limit passing with
 * any still running, stops them all and fails the phase, because the others would only wait in collectives for a
 * peer that never comes; none outlives the parent, even one stopped with Ctrl-C. Their output reaches the
 * parent's stdout line by line, each line prefixed with its child's name ({@code [rank 1] }), so that the ranks'
 * interleaved lines stay readable.
 */
final class ChildJvms {

    /** JVM flags every child gets, whether or not this JVM was started with them. */
    static final List<String> REQUIRED_JVM_FLAGS = List.of("--enable-native-access=ALL-UNNAMED",
            "--add-modules=jdk.incubator.vector");

    private ChildJvms() {
    }

    /**
     * The command line of a child: this JVM's {@code java} (else {@code java.home}'s), {@code jvmFlags}, this JVM's
     * class path, {@code main} and its {@code args}.
     */
    static List<String> javaCommand(List<String> jvmFlags, Class<?> main, List<String> args) {
        String java = ProcessHandle.current().info().command().orElse(
                Path.of(System.getProperty("java.home"), "bin", "java").toString());
        List<String> command = new ArrayList<>(List.of(java));
        command.addAll(jvmFlags);
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), main.getName()));
        command.addAll(args);
        return command;
    }

    /**
     * Runs {@code n} JVMs of {@code command}, the ranks of one job on this machine ({@link #childEnvironment}, with
     * a free {@code MASTER_PORT}), until every one has exited; see {@link #supervise}.
     *
     * @throws RankFailure naming the rank that failed, or those still running after {@code limit}
     */
    static void runRanks(List<String> command, int n, String runId, Path secretFile, Duration limit)
            throws IOException, InterruptedException {
        runRanks(rank -> command, rank -> Map.of(), n, runId, secretFile, limit);
    }

    /**
     * {@link #runRanks(List, int, String, Path, Duration)} with a command and extra environment variables per rank
     * (a router and its worker JVMs, started with other flags).
     */
    static void runRanks(IntFunction<List<String>> command, IntFunction<Map<String, String>> extraEnv, int n,
                         String runId, Path secretFile, Duration limit) throws IOException, InterruptedException {
        int port;
        try (ServerSocket socket = new ServerSocket(0)) {
            port = socket.getLocalPort();
        }
        List<ProcessBuilder> builders = new ArrayList<>();
        List<String> labels = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            ProcessBuilder pb = new ProcessBuilder(command.apply(r));
            pb.environment().putAll(extraEnv.apply(r));
            childEnvironment(pb.environment(), r, n, port, runId, secretFile);
            builders.add(pb);
            labels.add("rank " + r);
        }
        run(builders, labels, limit);
    }

    /**
     * A benchmark's {@code --processes}: {@code main} again in {@code world} JVMs, one rank each ({@link #runRanks}:
     * torchrun's variables and a private store secret), with the parent's arguments less {@code --processes} plus
     * {@code --rank-process} ({@link #rankProcessArgs}); the ranks write the report. The parent holds no GPU context
     * meanwhile (close any before calling).
     *
     * @param label names the run id and the temporary directory of the secret
     * @return the exit status for the parent: 0 when every rank exited 0
     */
    static int rerunAsRanks(Class<?> main, String[] args, int world, String label, Duration limit) throws IOException {
        List<String> command = javaCommand(childJvmFlags(java.lang.management.ManagementFactory.getRuntimeMXBean()
                .getInputArguments()), main, rankProcessArgs(args));
        Path work = Files.createTempDirectory("symmem4j-" + label + "-"); // mode 0700
        try {
            Path secret = writeSecret(work.resolve("store.secret"));
            runRanks(command, world, label + "-" + ProcessHandle.current().pid() + "-" + System.nanoTime(), secret, limit);
            return 0;
        } catch (RankFailure e) {
            System.err.println(main.getSimpleName() + " --processes failed: " + e.getMessage());
            return 1;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return 1;
        } finally {
            deleteTree(work);
        }
    }

    /** One rank of a {@code --processes} run. */
    @FunctionalInterface
    interface RankBody {
        /** @return the exit status */
        int run() throws Exception;
    }

    /**
     * Runs one rank process's work and exits with its status, or 1 after printing what was thrown: the group's and the
     * transport's threads would otherwise keep this JVM, and its peers waiting, after an uncaught error.
     */
    static void exitAsRank(RankBody body) {
        int status;
        try {
            status = body.run();
        } catch (Throwable t) {
            System.err.println("rank process failed: " + t);
            t.printStackTrace();
            status = 1;
        }
        System.exit(status);
    }

    /** A rank process's arguments: the parent's, without {@code --processes}, with {@code --rank-process}. */
    static List<String> rankProcessArgs(String[] parentArgs) {
        List<String> out = new ArrayList<>();
        for (String a : parentArgs) {
            if (!a.equals("--processes")) {
                out.add(a);
            }
        }
        out.add("--rank-process");
        return out;
    }

    /**
     * Runs one JVM of {@code command}, named {@code label} in its output, until it has exited; see
     * {@link #supervise}.
     *
     * @throws RankFailure when it failed, or was still running after {@code limit}
     */
    static void runOne(List<String> command, String label, Duration limit) throws IOException, InterruptedException {
        run(List.of(new ProcessBuilder(command)), List.of(label), limit);
    }

    /** Starts every child and {@linkplain #supervise supervises} them, to stdout. */
    private static void run(List<ProcessBuilder> builders, List<String> labels, Duration limit)
            throws IOException, InterruptedException {
        List<Process> children = new CopyOnWriteArrayList<>();
        Thread killer = new Thread(() -> children.forEach(Process::destroyForcibly), "gpu-process-allreduce-stop");
        Runtime.getRuntime().addShutdownHook(killer); // this JVM stopped (Ctrl-C): no child outlives it
        try {
            for (ProcessBuilder pb : builders) {
                children.add(pb.redirectErrorStream(true).start());
            }
            supervise(children, labels, limit, System.out);
        } finally {
            children.forEach(Process::destroyForcibly);
            try {
                Runtime.getRuntime().removeShutdownHook(killer);
            } catch (IllegalStateException shuttingDown) {
                // the hook runs now
            }
        }
    }

    /**
     * The JVM flags of a child: this JVM's own ({@code -Xmx}, {@code -D...} and the rest, as the
     * runtime reports them, class path excluded), without a debugger agent (its port is taken), plus
     * {@link #REQUIRED_JVM_FLAGS} where missing.
     */
    static List<String> childJvmFlags(List<String> mine) {
        List<String> flags = new ArrayList<>();
        for (String f : mine) {
            if (f.startsWith("-agentlib:jdwp") || f.startsWith("-Xrunjdwp") || f.startsWith("-Djava.class.path=")) {
                continue;
            }
            flags.add(f);
        }
        int at = 0;
        for (String required : REQUIRED_JVM_FLAGS) {
            if (!flags.contains(required)) {
                flags.add(at++, required);
            }
        }
        return flags;
    }

    /**
     * A rank process's environment: this one's, less any outer job's identity, plus torchrun's variables for
     * rank {@code rank} of {@code n} on this machine, the run id and the secret file.
     */
    static void childEnvironment(Map<String, String> env, int rank, int n, int port, String runId, Path secretFile) {
        env.remove(StoreSecret.SECRET_ENV);
        env.remove(ProcessGroupConfig.TORCH_RUN_ID_ENV);
        env.remove("GROUP_RANK");
        env.put("RANK", Integer.toString(rank));
        env.put("LOCAL_RANK", Integer.toString(rank));
        env.put("WORLD_SIZE", Integer.toString(n));
        env.put("LOCAL_WORLD_SIZE", Integer.toString(n));
        env.put("MASTER_ADDR", "127.0.0.1");
        env.put("MASTER_PORT", Integer.toString(port));
        env.put(ProcessGroupConfig.RUN_ID_ENV, runId);
        env.put(StoreSecret.SECRET_FILE_ENV, secretFile.toString());
    }

    /** A fresh store secret (32 random bytes, base64), in a file only this user can read. */
    static Path writeSecret(Path file) throws IOException {
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.writeString(file, Base64.getEncoder().encodeToString(secret) + "\n");
        return file;
    }

    /**
     * Waits for every child to exit 0, copying each one's output to {@code out} line by line, prefixed with its
     * label in brackets ({@code [rank 1] }). The first to exit non-zero, or the limit passing with children still
     * running (they get a SIGQUIT first, so that their JVMs print every thread's stack), stops the others and
     * throws.
     *
     * @throws RankFailure naming the child and its exit status, or the children still running
     */
    static void supervise(List<Process> children, List<String> labels, Duration limit, PrintStream out)
            throws InterruptedException {
        List<Thread> pumps = new ArrayList<>();
        BlockingQueue<Integer> exited = new LinkedBlockingQueue<>();
        for (int i = 0; i < children.size(); i++) {
            int index = i;
            Process p = children.get(i);
            pumps.add(Thread.ofPlatform().daemon().name(labels.get(i).replace(' ', '-') + "-output")
                    .start(() -> pump(p.getInputStream(), "[" + labels.get(index) + "] ", out)));
            p.onExit().thenRun(() -> exited.add(index));
        }
        long deadline = System.nanoTime() + limit.toNanos();
        Set<Integer> done = new HashSet<>();
        try {
            while (done.size() < children.size()) {
                long left = deadline - System.nanoTime();
                Integer i = left > 0 ? exited.poll(left, TimeUnit.NANOSECONDS) : null;
                if (i == null) {
                    List<String> running = new ArrayList<>();
                    for (int q = 0; q < children.size(); q++) {
                        if (children.get(q).isAlive()) {
                            running.add(labels.get(q));
                            threadDump(children.get(q));
                        }
                    }
                    Thread.sleep(2_000); // the dumps reach the output
                    stop(children);
                    throw new RankFailure(running + " still running after --timeout=" + limit.toSeconds() + " s"
                            + " (expected every child JVM to exit by then; their stacks are above, prefixed with their"
                            + " names); stopped them all; fix: look for the wait they hang in, or raise --timeout");
                }
                done.add(i);
                int code = children.get(i).exitValue();
                if (code != 0) {
                    stop(children);
                    throw new RankFailure(labels.get(i) + " exited with status=" + code + " (expected 0; "
                            + GpuProcessAllReduceBench.CHILD_FAILED + ": it failed, its reason is above, prefixed ["
                            + labels.get(i) + "]); stopped the others");
                }
            }
        } finally {
            stop(children);
            for (Thread t : pumps) {
                t.join(5_000); // the last lines of an exited child
            }
            out.flush();
        }
    }

    private static void pump(InputStream in, String prefix, PrintStream out) {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                out.println(prefix + line);
            }
        } catch (IOException e) {
            out.println(prefix + "(output lost: " + e + ")");
        }
    }

    private static void threadDump(Process p) {
        try {
            new ProcessBuilder("kill", "-QUIT", Long.toString(p.pid())).start().waitFor(5, TimeUnit.SECONDS);
        } catch (IOException e) {
            // no kill(1): no dump, the process is stopped all the same
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** SIGTERM to every child still running, SIGKILL to any still running 5 s later. */
    private static void stop(List<Process> children) throws InterruptedException {
        // only the live ones: destroy() also closes a process's output pipe, and a child that has exited may still have
        // lines in it (a failed rank's reason) that its pump thread has not read yet
        for (Process p : children) {
            if (p.isAlive()) {
                p.destroy();
            }
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        for (Process p : children) {
            if (!p.waitFor(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                p.destroyForcibly();
            }
        }
    }

    static void deleteTree(Path dir) {
        try (var files = Files.walk(dir)) {
            for (Path p : files.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException | UncheckedIOException e) {
            System.err.println("GpuProcessAllReduceBench: could not delete " + dir + ": " + e);
        }
    }

    /** A child JVM that failed or hung: the message names it and its exit status. */
    static final class RankFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        RankFailure(String message) {
            super(message);
        }
    }
}
