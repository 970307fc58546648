package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code --nnodes MIN:MAX} with real launchers: each "machine" is a launcher JVM of its own on this host (node
 * addresses 127.0.0.1: a rendezvous on loopback can only be reached from this machine, so every node is local and the
 * loopback refusal of a fixed {@code --nnodes > 1} does not apply), its processes {@code sh} programs that run long in
 * generation 0 and exit 0 after a restart. A launcher and its processes are killed with {@code SIGKILL}; the others go
 * on without it. The time from the kill to the next generation's processes is printed (not asserted).
 */
@Timeout(180)
class ElasticNodesTest {

    /** One launcher JVM and every line it wrote, with when it was read. */
    static final class Node {
        final Process process;
        final List<String> lines = new ArrayList<>();
        final List<Long> at = new ArrayList<>();

        Node(Process p) {
            process = p;
            Thread.ofPlatform().daemon().start(() -> {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(),
                        StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null) {
                        synchronized (this) {
                            lines.add(line);
                            at.add(System.nanoTime());
                            notifyAll();
                        }
                    }
                } catch (IOException e) {
                    // the launcher is gone
                }
            });
        }

        /** Waits (bounded) for a line containing {@code s}; returns when it was read. */
        synchronized long await(String s) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            for (int seen = 0; ; ) {
                for (; seen < lines.size(); seen++) {
                    if (lines.get(seen).contains(s)) {
                        return at.get(seen);
                    }
                }
                long left = deadline - System.nanoTime();
                assertTrue(left > 0, "no line with '" + s + "' in:\n" + String.join("\n", lines));
                TimeUnit.NANOSECONDS.timedWait(this, left);
            }
        }

        synchronized String all() {
            return String.join("\n", lines);
        }

        /** kill -9 of the launcher and of every process it started. */
        void kill() {
            List<ProcessHandle> tree = process.descendants().toList();
            process.destroyForcibly();
            tree.forEach(ProcessHandle::destroyForcibly);
        }
    }

    private final List<Node> nodes = new ArrayList<>();

    @AfterEach
    void killAll() {
        nodes.forEach(Node::kill);
    }

    private Path secret;
    private int masterPort;

    private Node start(String nnodes, int maxRestarts) throws IOException {
        String program = "echo \"gen=$SYMMEM4J_RESTART_GENERATION rank=$RANK world=$WORLD_SIZE node=$GROUP_RANK\";"
                + " if [ \"$SYMMEM4J_RESTART_GENERATION\" = 0 ]; then exec sleep 120; fi";
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), Launcher.class.getName(),
                "--nnodes", nnodes, "-n", "2", "--max-restarts", Integer.toString(maxRestarts),
                "--master-addr", "127.0.0.1", "--master-port", Integer.toString(masterPort), "--run-id", "elastic-test",
                "--secret-file", secret.toString(), "--rdzv-last-call", "1", "--rdzv-timeout", "60",
                "--restart-delay", "0", "--grace-period", "2", "--cpu-bind", "none", "--", "sh", "-c", program));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().clear();
        pb.environment().putAll(Launcher.newJobEnvironment(System.getenv()));
        Node n = new Node(pb.start());
        nodes.add(n);
        return n;
    }

    private void setUp(Path dir) throws IOException {
        secret = Files.createFile(dir.resolve("secret"),
                PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.writeString(secret, "elastic-nodes-secret");
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            masterPort = probe.getLocalPort(); // the next ports (generations' stores, the rendezvous) are likely free too
        }
    }

    @Test
    void aKilledMachineIsLeftOutAndTheJobFinishesOnTheOthers(@TempDir Path dir) throws Exception {
        setUp(dir);
        Node host = start("2:3", 2);
        host.await("hosting the rendezvous");
        Node b = start("2:3", 2);
        Node c = start("2:3", 2);
        for (Node n : List.of(host, b, c)) {
            n.await("generation 0: node");
        }
        host.await("gen=0 rank=0 world=6 node=0");
        host.await("gen=0 rank=1 world=6 node=0");
        b.await("gen=0 rank=");
        c.await("gen=0 rank=");
        int cNode = c.all().contains("generation 0: node 1 of 3") ? 1 : 2;
        long killed = System.nanoTime();
        c.kill();
        long resumedHost = host.await("gen=1 rank=");
        long resumedB = b.await("gen=1 rank=");
        assertTrue(host.process.waitFor(60, TimeUnit.SECONDS) && b.process.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, host.process.exitValue(), host.all());
        assertEquals(0, b.process.exitValue(), b.all());
        assertTrue(host.all().contains("gen=1 rank=0 world=4 node=0") && host.all().contains("gen=1 rank=1 world=4 node=0"),
                host.all());
        assertTrue(b.all().contains("gen=1 rank=2 world=4 node=1") && b.all().contains("gen=1 rank=3 world=4 node=1"),
                b.all());
        assertTrue(host.all().contains("node " + cNode + " (launcher ") && host.all().contains("is gone in generation 0"),
                host.all());
        assertTrue(b.all().contains("left out: node " + cNode), b.all());
        System.out.printf(Locale.ROOT, "elastic-nodes: kill -9 of node %d -> generation 1's processes: node 0 %.2f s,"
                + " node 1 %.2f s (last call 1 s, grace 2 s, restart delay 0)%n", cNode, (resumedHost - killed) / 1e9,
                (resumedB - killed) / 1e9);
    }

    @Test
    void nodeZeroGoneEndsTheJobNamingIt(@TempDir Path dir) throws Exception {
        setUp(dir);
        Node host = start("2:2", 1);
        host.await("hosting the rendezvous");
        Node b = start("2:2", 1);
        b.await("gen=0 rank=2 world=4 node=1");
        host.await("gen=0 rank=0 world=4");
        host.kill();
        assertTrue(b.process.waitFor(60, TimeUnit.SECONDS));
        assertEquals(1, b.process.exitValue(), b.all());
        assertTrue(b.all().contains("node 0's launcher (the rendezvous host at 127.0.0.1:") && b.all().contains("is gone"),
                b.all());
        assertTrue(b.process.descendants().findAny().isEmpty(), "its processes were stopped");
    }
}
