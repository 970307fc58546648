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
 * Rank 1 of a 2-process benchmark group, as a second JVM that a JMH fork (rank 0, which hosts the
 * rendezvous store) starts: {@link BenchPeer} with the given arguments, configured with torchrun's
 * variables, on the fork's class path and JVM flags. Its output is appended to {@code bench-peer.log}
 * in the working directory.
 */
final class PeerProcess {

    private static final List<String> JVM_FLAGS =
            List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g");

    private final Process process;
    private final ProcessGroup group;

    private PeerProcess(Process process, ProcessGroup group) {
        this.process = process;
        this.group = group;
    }

    /**
     * Starts {@code BenchPeer <peerArgs>} as rank 1 and joins the group as rank 0 with {@code options}
     * (collective with the peer, which must join with the same options).
     */
    static PeerProcess start(GroupOptions options, String... peerArgs) throws IOException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> command = new ArrayList<>(List.of(java));
        command.addAll(JVM_FLAGS);
        // the fork's own module openings (a benchmark of a library that needs them, e.g. Agrona, Chronicle Map)
        ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> a.startsWith("--add-opens") || a.startsWith("--add-exports")
                        || a.startsWith("--sun-misc-unsafe-memory-access") || a.startsWith("-Dchronicle."))
                .forEach(command::add);
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), BenchPeer.class.getName()));
        command.addAll(List.of(peerArgs));
        ProcessBuilder pb = new ProcessBuilder(command);
        // one run id for both ranks: the default (from each process's parent) differs between this
        // process and the peer it starts, and the store refuses a rank of another run
        String runId = "bench-" + ProcessHandle.current().pid() + "-" + port;
        pb.environment().putAll(Map.of("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1",
                "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", Integer.toString(port), "SYMMEM4J_RUN_ID", runId));
        pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(new File("bench-peer.log")));
        Process process = pb.start();
        try {
            return new PeerProcess(process,
                    ProcessGroup.join(new ProcessGroupConfig(0, 2, 0, "127.0.0.1", port, runId), options));
        } catch (RuntimeException e) {
            process.destroyForcibly();
            throw e;
        }
    }

    /** Rank 0's side of the group. */
    ProcessGroup group() {
        return group;
    }

    /** Closes rank 0's group (collective: the peer closes its own) and waits for the peer to exit. */
    void close() throws InterruptedException {
        group.close();
        if (!process.waitFor(60, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new IllegalStateException("benchmark peer did not exit within 60 s; see bench-peer.log");
        }
        if (process.exitValue() != 0) {
            throw new IllegalStateException("benchmark peer exited with status " + process.exitValue()
                    + " (expected 0); see bench-peer.log");
        }
    }
}
