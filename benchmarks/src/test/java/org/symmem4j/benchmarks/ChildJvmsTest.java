package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.benchmarks.ChildJvms.RankFailure;
import org.symmem4j.parallel.group.ProcessGroupConfig;

/**
 * {@link ChildJvms} without a GPU: the child JVMs' flags and environment (read back through
 * {@link ProcessGroupConfig}, as a rank reads them), and the supervision of child processes (plain shell commands
 * standing in for the rank JVMs).
 */
class ChildJvmsTest {

    @TempDir
    Path dir;

    @Test
    void childJvmFlagsAreThisJvmsWithoutDebuggerOrClassPathAndWithTheRequiredOnes() {
        List<String> flags = ChildJvms.childJvmFlags(List.of("-Xmx24g",
                "-agentlib:jdwp=transport=dt_socket,server=y,address=5005", "-Djava.class.path=/x.jar",
                "-Dsymmem4j.cuda.pdl=false", "--add-modules=jdk.incubator.vector"));
        assertEquals(List.of("--enable-native-access=ALL-UNNAMED", "-Xmx24g", "-Dsymmem4j.cuda.pdl=false",
                "--add-modules=jdk.incubator.vector"), flags);
        assertEquals(List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector"),
                ChildJvms.childJvmFlags(List.of()));
    }

    @Test
    void aRankProcessReadsItsPlaceTheRunAndTheSecretFileNotAnOuterJobs() {
        Map<String, String> env = new HashMap<>(Map.of("SYMMEM4J_SECRET", "an-outer-jobs-secret-0123456789",
                "SYMMEM4J_RUN_ID", "outer", "TORCHELASTIC_RUN_ID", "torch", "PATH", "/bin"));
        Path secret = dir.resolve("store.secret");
        ChildJvms.childEnvironment(env, 1, 2, 29500, "run-7", secret);
        assertFalse(env.containsKey("SYMMEM4J_SECRET"), "the secret variable would win over the file");
        assertFalse(env.containsKey("TORCHELASTIC_RUN_ID"));
        assertEquals(secret.toString(), env.get("SYMMEM4J_SECRET_FILE"));
        assertEquals("/bin", env.get("PATH"));
        ProcessGroupConfig c = ProcessGroupConfig.fromEnvironment(env);
        assertEquals(new ProcessGroupConfig(1, 2, 1, 2, "127.0.0.1", 29500, "run-7"), c);
    }

    private static List<Process> start(String... scripts) throws IOException {
        List<Process> ps = new ArrayList<>();
        for (String s : scripts) {
            ps.add(new ProcessBuilder("sh", "-c", s).redirectErrorStream(true).start());
        }
        return ps;
    }

    @Test
    void everyChildsOutputArrivesPrefixedWithItsName() throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        ChildJvms.supervise(start("echo hello; echo world >&2", "echo there"), List.of("rank 0", "rank 1"),
                Duration.ofSeconds(60), out);
        String text = bytes.toString(StandardCharsets.UTF_8);
        assertTrue(text.contains("[rank 0] hello\n"), text);
        assertTrue(text.contains("[rank 0] world\n"), text);
        assertTrue(text.contains("[rank 1] there\n"), text);
    }

    @Test
    void aFailingChildStopsTheOthersAndIsNamedWithItsExitStatus() throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        List<Process> ps = start("echo waiting; exec sleep 60", "echo FAILED boom; exit 3");
        RankFailure e = assertThrows(RankFailure.class, () -> ChildJvms.supervise(ps,
                List.of("rank 0", "rank 1"), Duration.ofSeconds(60), out));
        assertTrue(e.getMessage().startsWith("rank 1 exited with status=3 (expected 0"), e.getMessage());
        assertFalse(ps.getFirst().isAlive(), "rank 0 was stopped");
        assertTrue(bytes.toString(StandardCharsets.UTF_8).contains("[rank 1] FAILED boom"));
    }

    @Test
    void aChildStillRunningAtTheLimitIsNamedAndStopped() throws Exception {
        PrintStream out = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        List<Process> ps = start("exec sleep 60", "exit 0");
        RankFailure e = assertThrows(RankFailure.class, () -> ChildJvms.supervise(ps,
                List.of("rank 0", "rank 1"), Duration.ofSeconds(1), out));
        assertTrue(e.getMessage().startsWith("[rank 0] still running after --timeout=1 s"), e.getMessage());
        assertFalse(ps.getFirst().isAlive(), "rank 0 was stopped");
    }
}
