package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.symmem4j.launch.Launcher;

/**
 * The pipeline memory-cap demonstration on a {@code ComputationGraph} with residual connections
 * ({@code PipelineMemoryCapExample --model residual}: eight 1536-wide dense layers in four residual blocks, 18.9 M FLOAT
 * parameters, Adam), every JVM with a fixed pre-touched 128 MB heap: one JVM capped with JavaCPP's
 * {@code maxphysicalbytes} cannot build and train the whole graph (the control, refused by JavaCPP as the chain's is);
 * 4 JVMs under the launcher, each capped the same, each building only its stage from the configuration, train; every
 * stage's parameters (CRC-32 of their bits) and every step's loss equal the thread-mode pipeline's (one uncapped JVM).
 */
class PipelineMemoryCapExampleTest {

    /**
     * Between a rank (measured: at most 326.8 MB resident after training: a 195-197 MB JVM, 94 MB of stage state, DL4J's
     * temporaries) and the whole graph (302 MB of DL4J model state on the same JVM: at least 499 MB), 440.4 MB
     * (bench/results/2026-11-30-pipeline-residual-memory.md).
     */
    static final String CAP = "420m";
    static final List<String> ARGS = List.of("--model", "residual", "--inputs", "1536", "--hidden", "1536", "--layers",
            "8", "--steps", "2");
    private static final Pattern STAGE = Pattern.compile("stage \\d+ layers .*crc32=[0-9a-f]+");
    private static final Pattern LOSS = Pattern.compile("step \\d+ loss=[0-9a-f]+");

    private static List<String> jvm(String heap, boolean capped) {
        List<String> options = new ArrayList<>(List.of("-Xms128m", "-Xmx" + heap, "-XX:+AlwaysPreTouch",
                "-Dorg.deeplearning4j.crash.reporting.enabled=false")); // no crash dump file at the control's refusal
        if (capped) {
            options.addAll(List.of("-Dorg.bytedeco.javacpp.maxbytes=" + CAP,
                    "-Dorg.bytedeco.javacpp.maxphysicalbytes=" + CAP));
        }
        return LaunchedJvm.command(options, PipelineMemoryCapExample.class, ARGS);
    }

    private static String[] run(List<String> cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), "the JVM ends: " + out);
        return new String[] {Integer.toString(p.exitValue()), out};
    }

    private static TreeSet<String> all(Pattern pattern, String out) {
        TreeSet<String> found = new TreeSet<>();
        for (Matcher m = pattern.matcher(out); m.find(); ) {
            found.add(m.group());
        }
        return found;
    }

    @Test
    void aResidualGraphLargerThanOneCappedJvmTrainsOnFourCappedRanksBitwiseLikeTheThreads()
            throws IOException, InterruptedException {
        List<String> control = jvm("128m", true);
        control.addAll(List.of("--mode", "whole"));
        String[] whole = run(control);
        assertEquals(Integer.toString(PipelineMemoryCapExample.CAPPED), whole[0], "the whole graph must not train under"
                + " the cap: " + whole[1]);
        assertTrue(whole[1].contains("whole network refused by JavaCPP's cap: java.lang.OutOfMemoryError: Physical"
                + " memory usage is too high"), whole[1]);

        List<String> reference = jvm("1g", false);
        reference.addAll(List.of("--ranks", "4"));
        String[] threads = run(reference);
        assertEquals("0", threads[0], threads[1]);
        TreeSet<String> stages = all(STAGE, threads[1]);
        TreeSet<String> losses = all(LOSS, threads[1]);
        assertEquals(4, stages.size(), threads[1]);
        assertEquals(2, losses.size(), threads[1]);

        List<String> args = new ArrayList<>(List.of("-n", "4", "--master-port", Integer.toString(freePort()), "--"));
        args.addAll(jvm("128m", true));
        Launcher.Result ranks = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
        String out = ranks.out() + ranks.err();
        assertEquals(0, ranks.status(), out);
        assertFalse(out.contains("Physical memory usage is too high"), out);
        assertEquals(stages, all(STAGE, out), "every stage's parameters, bitwise the thread-mode pipeline's: " + out);
        assertEquals(losses, all(LOSS, out), "every step's loss, bitwise: " + out);
        for (int r = 0; r < 4; r++) {
            assertTrue(out.contains("rank " + r + " holds parameters"), out);
        }
        // the raw data of the cap's margins (bench/results/2026-11-30-pipeline-residual-memory.md)
        for (String line : (whole[1] + threads[1] + out).split("\n")) {
            if (line.contains("resident bytes")) {
                System.out.println(line);
            }
        }
    }

    private static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
