package org.symmem4j.it;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Starts worker JVMs (one per rank) running {@link ProcessWorker} with torchrun's variables. */
final class Workers implements AutoCloseable {

    final List<Process> processes = new ArrayList<>();
    final List<Path> logs = new ArrayList<>();

    private Workers() {
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Starts {@code worldSize} workers running {@code scenario}. */
    static Workers start(int worldSize, String scenario, long timeoutMillis) throws IOException {
        Workers w = new Workers();
        int port = freePort();
        String java = ProcessHandle.current().info().command().orElse("java");
        Path logDir = Files.createDirectories(Path.of("target", "worker-logs"));
        for (int rank = 0; rank < worldSize; rank++) {
            List<String> cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED",
                    "--add-modules=jdk.incubator.vector", "-Xmx256m", "-XX:+UseSerialGC",
                    "-Dsymmem4j.timeout.ms=" + timeoutMillis, "-cp", System.getProperty("java.class.path"),
                    ProcessWorker.class.getName()));
            cmd.addAll(List.of(scenario.split(" "))); // the scenario and its arguments
            ProcessBuilder pb = new ProcessBuilder(cmd);
            Map<String, String> env = pb.environment();
            env.put("RANK", Integer.toString(rank));
            env.put("WORLD_SIZE", Integer.toString(worldSize));
            env.put("LOCAL_RANK", Integer.toString(rank));
            env.put("MASTER_ADDR", "127.0.0.1");
            env.put("MASTER_PORT", Integer.toString(port));
            Path log = logDir.resolve(scenario.replace(' ', '-') + "-ws" + worldSize + "-rank" + rank + "-" + port + ".log");
            pb.redirectErrorStream(true).redirectOutput(log.toFile());
            w.processes.add(pb.start());
            w.logs.add(log);
        }
        return w;
    }

    String log(int rank) {
        try {
            return Files.readString(logs.get(rank));
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }

    /** Waits until rank's log contains {@code text}; false on timeout or exit. */
    boolean awaitLog(int rank, String text, long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        while (System.nanoTime() < deadline) {
            if (log(rank).contains(text)) {
                return true;
            }
            if (!processes.get(rank).isAlive()) {
                return log(rank).contains(text);
            }
            Thread.sleep(20);
        }
        return false;
    }

    /** Exit code of each rank, waiting at most {@code millis} for all; -1 for a rank still running (then killed). */
    int[] awaitExit(long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        int[] codes = new int[processes.size()];
        for (int r = 0; r < processes.size(); r++) {
            Process p = processes.get(r);
            long left = Math.max(1, deadline - System.nanoTime());
            codes[r] = p.waitFor(left, TimeUnit.NANOSECONDS) ? p.exitValue() : -1;
        }
        return codes;
    }

    List<Long> pids() {
        return processes.stream().map(Process::pid).toList();
    }

    @Override
    public void close() {
        for (Process p : processes) {
            p.destroyForcibly();
        }
    }
}
