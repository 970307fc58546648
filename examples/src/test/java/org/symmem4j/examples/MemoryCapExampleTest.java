package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.symmem4j.launch.Launcher;

/**
 * The memory-cap demonstration, one JVM per worker under the launcher, each capped: the MLP's replica (hidden 1024:
 * 1.1 M parameters, 4.5 MB; with Adam and the wrapper's model about 32 MB of ND4J arrays per process) does not fit
 * {@code -Dorg.bytedeco.javacpp.maxbytes=16m}: plain data parallelism is refused on the ranks before training, with
 * what it needs, what the cap leaves and the fix; ZeRO stage 3 started from the configuration trains under the same
 * caps (and {@code -Dsymmem4j.max.symmetric.bytes=16m}), and each worker holds about half the parameters and gradient
 * after training, measured.
 */
class MemoryCapExampleTest {

    private static final Pattern HOLDS = Pattern.compile(
            "worker (\\d) holds parameters (\\d+), gradient (\\d+), updater state (\\d+) bytes");

    private static Launcher.Result launch(String sharding) throws IOException {
        List<String> args = new ArrayList<>(List.of("-n", "2", "--master-port", Integer.toString(freePort()), "--java",
                "--"));
        args.addAll(LaunchedJvm.options("-Xmx256m",
                // the caps: ND4J's arrays, and resident symmetric memory; JavaCPP's own check of the process's whole
                // resident set (heap, code, libraries) is off: it is not model state
                "-Dorg.bytedeco.javacpp.maxbytes=16m", "-Dorg.bytedeco.javacpp.maxphysicalbytes=0",
                "-Dsymmem4j.max.symmetric.bytes=16m"));
        args.addAll(List.of(MemoryCapExample.class.getName(), "--sharding", sharding, "--hidden", "1024", "--steps", "3"));
        return Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
    }

    @Test
    void plainDataParallelismIsRefusedAndStage3TrainsUnderTheSameCap() throws IOException {
        Launcher.Result plain = launch("none");
        String out = plain.out() + plain.err();
        assertTrue(plain.status() != 0, "plain data parallelism must not train under the cap: " + out);
        // every rank refuses; the launcher stops the job at the first rank's exit, so one may be stopped before it prints.
        // A rank prints its own refusal, or, when the ranks' build-time agreement collected it first, the agreed one
        // ("build() refused on every rank (2): ... rank 0 failed: plain data parallelism does not fit ...")
        assertTrue(out.contains("refused before training: ") && out.contains("plain data parallelism does not fit"), out);
        assertTrue(out.contains("expected model state of at most") && out.contains("found it needs")
                && out.contains("fix: sharding(ZeroStage.PARAMETERS)"), out);
        assertTrue(!out.contains("trained "), out);

        Launcher.Result stage3 = launch("PARAMETERS");
        String trained = stage3.out() + stage3.err();
        assertEquals(0, stage3.status(), trained);
        long whole = 4L * (64 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
        int ranks = 0;
        for (Matcher m = HOLDS.matcher(trained); m.find(); ranks++) {
            long params = Long.parseLong(m.group(2));
            long gradient = Long.parseLong(m.group(3));
            long state = Long.parseLong(m.group(4));
            // its blocks: half of every layer, plus the pages shared at the blocks' edges
            assertTrue(params <= whole / 2 + 6 * 4096 && params >= whole / 2 - 6 * 4096, "parameters " + params
                    + " of " + whole + ": " + trained);
            assertTrue(gradient <= whole / 2 + 6 * 4096, "gradient " + gradient + ": " + trained);
            assertTrue(state <= whole + 4096, "Adam's two states of half the parameters: " + state);
        }
        assertEquals(2, ranks, trained);
        assertTrue(trained.contains("trained 3 steps with sharding=PARAMETERS under the caps"), trained);
    }

    private static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
