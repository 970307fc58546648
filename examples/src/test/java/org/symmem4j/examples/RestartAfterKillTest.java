package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.launch.Launcher;

/**
 * Training that survives a dead worker, end to end (issue 32's restart): {@code symmem4j-run -n 2 --max-restarts 1}
 * starts two JVMs of {@link RestartingTraining}, a data-parallel DL4J job in group mode that checkpoints every
 * {@value #EVERY} steps and resumes from its checkpoints. In generation 0, rank 1 kills itself ({@code kill -9}) after
 * step {@value #KILL_AFTER}, not a multiple of {@value #EVERY}; the launcher stops rank 0 and starts generation 1,
 * which resumes from the newest complete checkpoint (step 30), redoes the steps after it, and finishes. The final
 * model equals, bitwise, that of the same job run by the launcher without the kill.
 */
class RestartAfterKillTest {

    static final int EVERY = 5;
    static final int KILL_AFTER = 33; // epoch 2 of 2 (24 steps per epoch): the resume also skips part of an epoch
    static final int EPOCHS = 2;

    private static final Pattern KILL = Pattern.compile("\\[rank 1\\] KILL rank 1 after step (\\d+) at (\\d+) ms");
    private static final Pattern RESUMED = Pattern.compile("\\[rank 0\\] RESUMED generation 1 from step (\\d+)"
            + " \\(epoch \\d+\\); main at (\\d+) ms, group at (\\d+) ms,"
            + " network at (\\d+) ms, restored at (\\d+) ms");
    private static final Pattern FIRST = Pattern.compile("\\[rank (\\d)\\] FIRST STEP (\\d+) of generation 1 at (\\d+) ms");

    private static Launcher.Result launch(Path checkpoints, Path model, int killAfter) throws IOException {
        List<String> args = new ArrayList<>(List.of("-n", "2", "--master-port", Integer.toString(freePort()),
                "--max-restarts", "1", "--restart-delay", "0", "--",
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
                "--sun-misc-unsafe-memory-access=allow", "-Xmx512m", "-cp", System.getProperty("java.class.path"),
                RestartingTraining.class.getName(), checkpoints.toString(), model.toString(), Integer.toString(EVERY),
                Integer.toString(EPOCHS), Integer.toString(killAfter)));
        return Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
    }

    @Test
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aKilledRankIsRestartedFromTheNewestCheckpointAndTheRunEndsBitwiseAsAnUninterruptedOne(@TempDir Path dir)
            throws IOException {
        Launcher.Result plain = launch(dir.resolve("plain-checkpoints"), dir.resolve("plain.zip"), -1);
        assertEquals(0, plain.status(), plain.err() + "\n" + plain.out());
        assertTrue(!plain.err().contains("restarting"), "the uninterrupted run is not restarted: " + plain.err());
        assertTrue(plain.out().contains("[rank 0] DONE generation 0, " + 2 * 24 + " iterations"), plain.out());

        Launcher.Result killed = launch(dir.resolve("checkpoints"), dir.resolve("restarted.zip"), KILL_AFTER);
        String log = killed.err() + "\n" + killed.out();
        assertEquals(0, killed.status(), log);
        assertTrue(killed.err().contains("generation 0 failed: rank 1 (local rank 1, pid ")
                && killed.err().contains("was killed by signal 9 (SIGKILL)"), "the launcher names the dead rank: " + log);
        assertTrue(killed.err().contains("restarting as generation 1"), log);
        assertTrue(killed.out().contains("[rank 0] DONE generation 1, " + 2 * 24 + " iterations"), log);

        Matcher kill = KILL.matcher(killed.out());
        assertTrue(kill.find(), log);
        long killedAfter = Long.parseLong(kill.group(1));
        Matcher resumed = RESUMED.matcher(killed.out());
        assertTrue(resumed.find(), "generation 1 resumes from a checkpoint: " + log);
        long resumedStep = Long.parseLong(resumed.group(1));
        long redone = killedAfter - resumedStep;
        assertTrue(redone >= 0 && redone <= EVERY, "steps redone: " + redone + " (at most " + EVERY + ")\n" + log);
        long firstStepAt = Long.MAX_VALUE;
        for (Matcher m = FIRST.matcher(killed.out()); m.find(); ) {
            assertEquals(resumedStep + 1, Long.parseLong(m.group(2)), "rank " + m.group(1) + " goes on after the checkpoint");
            firstStepAt = Math.min(firstStepAt, Long.parseLong(m.group(3)));
        }
        assertTrue(firstStepAt != Long.MAX_VALUE, "generation 1 trains: " + log);
        long killedAt = Long.parseLong(kill.group(2));
        System.out.printf(Locale.ROOT, "RestartAfterKillTest: killed after step %d, resumed from step %d (%d steps"
                        + " redone), first step of generation 1 %.2f s after the kill (rank 0's main entered %.2f s after"
                        + " it, its group formed %.2f s, its network made %.2f s, restored %.2f s)%n", killedAfter, resumedStep, redone,
                (firstStepAt - killedAt) / 1000.0, (Long.parseLong(resumed.group(2)) - killedAt) / 1000.0,
                (Long.parseLong(resumed.group(3)) - killedAt) / 1000.0, (Long.parseLong(resumed.group(4)) - killedAt) / 1000.0,
                (Long.parseLong(resumed.group(5)) - killedAt) / 1000.0);

        MultiLayerNetwork reference = ModelSerializer.restoreMultiLayerNetwork(dir.resolve("plain.zip").toFile(), true);
        MultiLayerNetwork restarted = ModelSerializer.restoreMultiLayerNetwork(dir.resolve("restarted.zip").toFile(), true);
        assertTrue(Arrays.equals(bits(reference.params().data().asFloat()), bits(restarted.params().data().asFloat())),
                "parameters bitwise as the uninterrupted run's");
        assertTrue(Arrays.equals(bits(reference.getUpdater().getStateViewArray().data().asFloat()),
                bits(restarted.getUpdater().getStateViewArray().data().asFloat())), "updater state bitwise");
        assertEquals(reference.getIterationCount(), restarted.getIterationCount());
        assertEquals(reference.getEpochCount(), restarted.getEpochCount());
    }

    static int[] bits(float[] values) {
        int[] bits = new int[values.length];
        for (int i = 0; i < values.length; i++) {
            bits[i] = Float.floatToRawIntBits(values[i]);
        }
        return bits;
    }

    static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
