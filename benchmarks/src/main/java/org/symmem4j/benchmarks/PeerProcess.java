package org.symmem4j.benchmarks;

import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.group.ProcessGroupConfig;

/**
 * Ranks 1.. of a benchmark group of processes, as JVMs that a JMH fork (rank 0, which hosts the
 * rendezvous store) starts: {@link BenchPeer} with the given arguments, configured with torchrun's
 * variables, on the fork's class path and JVM flags. Their output is appended to {@code bench-peer.log}
 * in the working directory.
 */
final class PeerProcess {

    private static final List<String> JVM_FLAGS =
            List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g");

    private final List<Process> processes;
    private final ProcessGroup group;

    private PeerProcess(List<Process> processes, ProcessGroup group) {
        this.processes = processes;
        this.group = group;
    }

    /**
     * Starts {@code BenchPeer <peerArgs>} as rank 1 and joins the group as rank 0 with {@code options}
     * (collective with the peer, which must join with the same options).
     */
    static PeerProcess start(GroupOptions options, String... peerArgs) throws IOException {
        return start(2, options, peerArgs);
    }

    /**
     * Starts {@code BenchPeer <peerArgs>} as ranks 1..world-1 and joins the group of {@code world} processes as
     * rank 0 with {@code options} (collective with the peers, which must join with the same options).
     */
    static PeerProcess start(int world, GroupOptions options, String... peerArgs) throws IOException {
        if (world < 2) {
            throw new IllegalArgumentException("benchmark processes=" + world + " expected >= 2 (rank 0 and a peer)");
        }
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> command = new ArrayList<>(List.of(java));
        command.addAll(JVM_FLAGS);
        // the fork's own module openings (a benchmark of a library that needs them, e.g. Agrona, Chronicle Map), and the
        // ring's switches (-Dsymmem4j.ring.*: a control run, RingPairedSuite --control, sets both processes' rings), and
        // the fork's JIT and diagnostic flags (-XX:..., e.g. a control's inlining limits or -XX:+PrintInlining), so that
        // both ends of a measured link run under the same compiler settings
        ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> a.startsWith("--add-opens") || a.startsWith("--add-exports")
                        || a.startsWith("--sun-misc-unsafe-memory-access") || a.startsWith("-Dchronicle.")
                        || a.startsWith("-Dsymmem4j.bench.") || a.startsWith("-Dsymmem4j.ring.")
                        || a.startsWith("-XX:"))
                .forEach(command::add);
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), BenchPeer.class.getName()));
        command.addAll(List.of(peerArgs));
        ProcessBuilder pb = new ProcessBuilder(command);
        // one run id for both ranks: the default (from each process's parent) differs between this
        // process and the peer it starts, and the store refuses a rank of another run
        String runId = "bench-" + ProcessHandle.current().pid() + "-" + port;
        pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(new File("bench-peer.log")));
        List<Process> started = new ArrayList<>();
        try {
            for (int rank = 1; rank < world; rank++) {
                pb.environment().putAll(Map.of("RANK", Integer.toString(rank), "WORLD_SIZE", Integer.toString(world),
                        "LOCAL_RANK", Integer.toString(rank), "MASTER_ADDR", "127.0.0.1",
                        "MASTER_PORT", Integer.toString(port), "SYMMEM4J_RUN_ID", runId));
                started.add(pb.start());
            }
            return new PeerProcess(started,
                    ProcessGroup.join(new ProcessGroupConfig(0, world, 0, "127.0.0.1", port, runId), options));
        } catch (RuntimeException | IOException e) {
            started.forEach(Process::destroyForcibly);
            throw e;
        }
    }

    /** Rank 0's side of the group. */
    ProcessGroup group() {
        return group;
    }

    /** Closes rank 0's group (collective: the peers close their own) and waits for the peers to exit. */
    void close() throws InterruptedException {
        group.close();
        for (int i = 0; i < processes.size(); i++) {
            Process process = processes.get(i);
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                processes.forEach(Process::destroyForcibly);
                throw new IllegalStateException("benchmark peer rank=" + (i + 1) + " did not exit within 60 s; see"
                        + " bench-peer.log");
            }
            if (process.exitValue() != 0) {
                throw new IllegalStateException("benchmark peer rank=" + (i + 1) + " exited with status "
                        + process.exitValue() + " (expected 0); see bench-peer.log");
            }
        }
    }
}
