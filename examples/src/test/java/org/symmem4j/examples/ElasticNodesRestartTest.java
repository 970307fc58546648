package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.launch.Launcher;

/**
 * {@code symmem4j-run --nnodes 2:3} end to end with DL4J (issue 32): three launcher JVMs on this host act as three
 * machines of one process each (the rendezvous on 127.0.0.1; the processes share the host transport, as ranks of one
 * machine do), running {@link RestartingTraining} with a checkpoint every {@value ElasticRestartTest#EVERY} steps.
 * After step {@value #KILL} of generation 0 the process of rank 2 kills its launcher and then itself ({@code kill -9}
 * both: a machine that is gone). Node 0's launcher sees the connection close and stops the others' processes; the
 * two launchers left meet in round 1, which closes after the last call without the third, and their two processes
 * resume from step {@value ElasticRestartTest#CHECKPOINT} of three workers, re-sharded onto two. The final model
 * equals, bitwise, the uninterrupted 3-then-2-worker run of {@link ElasticRestartTest#uninterrupted}. The time from
 * the kill to generation 1's first step is printed ({@code elastic-nodes-dl4j: ...}), not asserted.
 */
class ElasticNodesRestartTest {

    static final int KILL = 5;
    private static final Pattern FIRST = Pattern.compile("FIRST STEP \\d+ of generation 1 at (\\d+) ms");

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"plain", "GRADIENTS"})
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aMachineThatIsGoneIsLeftOutAndTheOthersResumeReshardedBitwise(String sharding, @TempDir Path dir)
            throws Exception {
        Path checkpoints = dir.resolve("checkpoints");
        Path model = dir.resolve("model.zip");
        Path secret = Files.createFile(dir.resolve("secret"),
                PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.writeString(secret, "elastic-nodes-dl4j");
        int port = RestartAfterKillTest.freePortWithFreeNext();
        List<String> more = new ArrayList<>(List.of("node@g0r2s" + KILL));
        if (!sharding.equals("plain")) {
            more.add(sharding);
        }
        List<String> launcher = new ArrayList<>(List.of(LaunchedJvm.java()));
        launcher.addAll(LaunchedJvm.options());
        launcher.addAll(List.of(Launcher.class.getName(), "--nnodes", "2:3", "-n", "1",
                "--max-restarts", "1", "--master-addr", "127.0.0.1", "--master-port", Integer.toString(port), "--run-id",
                "elastic-dl4j", "--secret-file", secret.toString(), "--rdzv-last-call", "2", "--restart-delay", "0",
                "--grace-period", "1", "--cpu-bind", "none", "--"));
        launcher.addAll(RestartAfterKillTest.restartingTraining(checkpoints, model, ElasticRestartTest.EVERY,
                ElasticRestartTest.EPOCHS, -1, more.toArray(String[]::new)));
        Path mark = dir.resolve("node-killed-at");
        List<Process> nodes = new ArrayList<>();
        List<Path> logs = new ArrayList<>();
        try {
            for (int n = 0; n < 3; n++) {
                Path log = dir.resolve("launcher-" + n + ".log");
                logs.add(log);
                ProcessBuilder pb = new ProcessBuilder(launcher).redirectErrorStream(true).redirectOutput(log.toFile());
                pb.environment().clear();
                pb.environment().putAll(Launcher.newJobEnvironment(System.getenv()));
                pb.environment().put(RestartingTraining.NODE_MARK_ENV, mark.toString());
                nodes.add(pb.start());
                if (n == 0) { // node 0 first: it hosts the rendezvous
                    awaitLine(log, "hosting the rendezvous");
                }
            }
            for (int n = 0; n < 3; n++) {
                assertTrue(nodes.get(n).waitFor(8, TimeUnit.MINUTES), "launcher " + n + " ends");
            }
            String all = Files.readString(logs.get(0)) + "\n" + Files.readString(logs.get(1)) + "\n"
                    + Files.readString(logs.get(2));
            int gone = 0;
            for (int n = 0; n < 3; n++) { // the launcher the rendezvous made node 2 (started second or third) is gone
                boolean node2 = Files.readString(logs.get(n)).contains("generation 0: node 2 of 3");
                gone += node2 ? 1 : 0;
                assertEquals(node2 ? 137 : 0, nodes.get(n).exitValue(), "launcher " + n + ": " + all);
            }
            assertEquals(1, gone, all);
            assertTrue(all.contains("is gone in generation 0: its launcher's connection closed"), all);
            assertTrue(all.contains("left out: node 2"), all);
            for (int rank = 0; rank < 2; rank++) {
                assertTrue(all.contains("[rank " + rank + "] RESHARDED from 3 to 2 ranks at step "
                        + ElasticRestartTest.CHECKPOINT + " (batch " + 3 * ElasticRestartTest.CHECKPOINT + " of epoch 0)"),
                        "rank " + rank + ": " + all);
            }
            MultiLayerNetwork expected = ElasticRestartTest.uninterrupted(sharding.equals("plain") ? null
                    : ZeroStage.valueOf(sharding));
            MultiLayerNetwork found = ModelSerializer.restoreMultiLayerNetwork(model.toFile(), true);
            assertTrue(Arrays.equals(RestartAfterKillTest.bits(expected.params().data().asFloat()),
                    RestartAfterKillTest.bits(found.params().data().asFloat())), "parameters bitwise: " + all);
            assertTrue(Arrays.equals(RestartAfterKillTest.bits(expected.getUpdater().getStateViewArray().data().asFloat()),
                    RestartAfterKillTest.bits(found.getUpdater().getStateViewArray().data().asFloat())),
                    "updater state bitwise: " + all);
            assertEquals(expected.getIterationCount(), found.getIterationCount(), all);
            Matcher f = FIRST.matcher(all);
            assertTrue(f.find(), all);
            long killed = Long.parseLong(Files.readString(mark).strip());
            long first = Long.parseLong(f.group(1));
            while (f.find()) {
                first = Math.max(first, Long.parseLong(f.group(1)));
            }
            System.out.printf(Locale.ROOT, "elastic-nodes-dl4j %s: kill -9 of node 2 (launcher and rank 2) -> generation"
                    + " 1's first step on both ranks: %.2f s (last call 2 s, grace 1 s, restart delay 0)%n", sharding,
                    (first - killed) / 1e3);
        } finally {
            for (Process p : nodes) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly();
            }
        }
    }

    /** Waits (bounded) until the launcher's log has a line containing {@code s}. */
    private static void awaitLine(Path log, String s) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!Files.readString(log, StandardCharsets.UTF_8).contains(s)) {
            assertTrue(System.nanoTime() < deadline, "no '" + s + "' in " + Files.readString(log));
            TimeUnit.MILLISECONDS.sleep(50);
        }
    }
}
