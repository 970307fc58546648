package org.symmem4j.parallel.affinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.rendezvous.StoreSecret;

/**
 * A process of a process group with {@code SYMMEM4J_AFFINITY_CPUS} set (as {@code symmem4j-run} hands it out): every
 * thread of it, the JVM's own included, is allowed its local rank's CPU alone once it joined; a CPU it may not use fails
 * the join with the fix.
 */
class ProcessAffinityTest {

    private static final byte[] SECRET = "process-affinity-test-secret".getBytes(StandardCharsets.UTF_8);

    /** The child: joins a group of one and prints "TASK <comm> <Cpus_allowed_list>" for each of its threads. */
    public static void main(String[] args) throws Exception {
        ProcessGroupConfig config = new ProcessGroupConfig(0, 1, 0, 1, "127.0.0.1", Integer.parseInt(args[0]),
                "affinity-child");
        try (ProcessGroup g = ProcessGroup.join(config, GroupOptions.defaults().withTimeout(Duration.ofSeconds(20)),
                StoreSecret.of(SECRET))) {
            System.out.println("JOINED rank " + g.rank());
            try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
                for (Path task : tasks.toList()) {
                    try {
                        String comm = Files.readString(task.resolve("comm")).strip().replace(' ', '_');
                        for (String line : Files.readAllLines(task.resolve("status"))) {
                            if (line.startsWith("Cpus_allowed_list:")) {
                                System.out.println("TASK " + comm + " " + line.substring(18).strip());
                            }
                        }
                    } catch (IOException ended) {
                        // the thread ended while listed
                    }
                }
            }
        } catch (Throwable t) {
            System.out.println("FAILED " + t.getMessage());
        }
        System.out.flush();
    }

    private static String runChild(String cpus) throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        ProcessBuilder pb = new ProcessBuilder(ProcessHandle.current().info().command().orElse("java"),
                "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"),
                ProcessAffinityTest.class.getName(), Integer.toString(port)).redirectErrorStream(true);
        pb.environment().put("SYMMEM4J_AFFINITY_CPUS", cpus);
        pb.environment().remove("SYMMEM4J_AFFINITY");
        Process child = pb.start();
        String out = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(child.waitFor(60, TimeUnit.SECONDS), out);
        return out;
    }

    @Test
    void everyThreadOfAJoinedProcessIsOnItsCpu() throws Exception {
        assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), "not Linux");
        int last = CpuAffinity.allowedCpus().length() - 1;
        String out = runChild(Integer.toString(last));
        List<String> tasks = out.lines().filter(l -> l.startsWith("TASK ")).toList();
        assertTrue(tasks.size() >= 5, "the JVM's threads (GC, compiler, ...) and main: " + out);
        for (String task : tasks) {
            assertEquals(Integer.toString(last), task.substring(task.lastIndexOf(' ') + 1), out);
        }
    }

    @Test
    void aCpuTheProcessMayNotUseFailsTheJoinWithTheFix() throws Exception {
        assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), "not Linux");
        int outside = CpuAffinity.allowedCpus().length() + 5;
        String out = runChild(Integer.toString(outside));
        assertTrue(out.contains("FAILED") && out.contains("names cpu=" + outside) && out.contains("fix:"), out);
        assertTrue(out.lines().noneMatch(l -> l.startsWith("TASK ")), out);
    }
}
