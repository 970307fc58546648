package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.host.SharedMemoryFiles;

/**
 * Training that survives a dead worker, end to end (issue 32's restart), and the fault-injection suite around it:
 * {@code symmem4j-run -n 2 --max-restarts N} starts two JVMs of {@link RestartingTraining}, a data-parallel DL4J job
 * in group mode that checkpoints every {@value #EVERY} steps and resumes from its checkpoints, 2 epochs of 12 steps.
 * Each case injects faults (kill -9 at a seeded random step of rank 1, of rank 0, which hosts the store, twice in one
 * run, in set-up before the rendezvous completes, in the middle of a checkpoint's write, a rank that hangs, more
 * failures than {@code --max-restarts} allows) and checks that
 * <ul>
 *   <li>the final model equals, bitwise (parameters, updater state, counters), the one of the same job run by the
 *       launcher without faults;</li>
 *   <li>each generation resumes from the newest complete checkpoint at most {@value #EVERY} steps back, never from a
 *       torn one, and says how many steps it redoes; the launcher names the rank that died and the generation;</li>
 *   <li>nothing of the job is left: no process, no {@code /dev/shm} file of its processes, no port it listened on.</li>
 * </ul>
 * The kill steps come from {@code -Drestart.seed} (default {@value #DEFAULT_SEED}), printed with each case.
 */
class RestartAfterKillTest {

    static final int EVERY = 4;
    static final int EPOCHS = 2;
    static final int STEPS = EPOCHS * 12;
    static final long DEFAULT_SEED = 33;
    /**
     * The bound of a trainer's wait for a peer in the hang case: a stopped rank is detected by it, so the case waits it
     * out. Healthy, the same job (a kill and a restart from a checkpoint included) runs both generations under a fifth
     * of it (1 s), in every trial on the 2-core VM loaded by another build (bench/results/2026-11-30-ci-time-waits.md).
     */
    static final int HANG_TIMEOUT_MS = 5000;

    private static final Pattern KILL = Pattern.compile("\\[rank (\\d)\\] (KILL|STOP) rank \\d generation (\\d+) after step (\\d+)"
            + " at (\\d+) ms");
    private static final Pattern RESUMED = Pattern.compile("\\[rank 0\\] RESUMED generation (\\d+) from step (\\d+)"
            + " \\(epoch \\d+\\); main at (\\d+) ms, group at (\\d+) ms,"
            + " network at (\\d+) ms, restored at (\\d+) ms");
    private static final Pattern REDONE = Pattern.compile("\\[rank 0\\] REDONE generation (\\d+): progress (-?\\d+),"
            + " resumed from step (\\d+), (\\d+) steps redone");
    private static final Pattern FIRST = Pattern.compile("\\[rank (\\d)\\] FIRST STEP (\\d+) of generation (\\d+) at (\\d+) ms");
    private static final Pattern LAUNCHER_PID = Pattern.compile("\\(local rank \\d+, pid (\\d+)\\)");
    private static final Pattern START = Pattern.compile("\\[rank (\\d)\\] START rank \\d generation (\\d+) pid (\\d+)");

    @TempDir
    static Path shared;
    private static Path reference;

    /** What one launch of the job left: the launcher's result, the port of generation 0, its files. */
    record Job(Launcher.Result result, int port, Path checkpoints, Path model) {
        String log() {
            return result.err() + "\n" + result.out();
        }
    }

    static Job launch(Path dir, int maxRestarts, String... faults) throws IOException {
        return launch(dir, maxRestarts, List.of(), faults);
    }

    /** As {@link #launch(Path, int, String...)}, with more launcher options ({@code --cpu-bind none}) first. */
    static Job launch(Path dir, int maxRestarts, List<String> launcherOptions, String... faults) throws IOException {
        return launch(dir, freePort(), maxRestarts, launcherOptions, faults);
    }

    /** As {@link #launch(Path, int, List, String...)}, with generation 0's store port given. */
    static Job launch(Path dir, int port, int maxRestarts, List<String> launcherOptions, String... faults)
            throws IOException {
        Path checkpoints = dir.resolve("checkpoints");
        Path model = dir.resolve("model.zip");
        List<String> args = new ArrayList<>(launcherOptions);
        args.addAll(List.of("-n", "2", "--master-port", Integer.toString(port),
                "--max-restarts", Integer.toString(maxRestarts), "--restart-delay", "0", "--grace-period", "1", "--java",
                "--"));
        args.addAll(LaunchedJvm.options("-Xmx512m"));
        args.addAll(List.of(RestartingTraining.class.getName(), checkpoints.toString(), model.toString(),
                Integer.toString(EVERY), Integer.toString(EPOCHS)));
        args.addAll(List.of(faults));
        return new Job(Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv())), port, checkpoints, model);
    }

    /** The command of one {@link RestartingTraining} rank, for the launcher after its {@code --}. */
    static List<String> restartingTraining(Path checkpoints, Path model, int every, int epochs, int killAfter,
                                           String... more) {
        List<String> args = new ArrayList<>(List.of(checkpoints.toString(), model.toString(), Integer.toString(every),
                Integer.toString(epochs), Integer.toString(killAfter)));
        args.addAll(List.of(more));
        return LaunchedJvm.command(List.of("-Xmx512m"), RestartingTraining.class, args);
    }

    @BeforeAll
    static void uninterruptedRun() throws IOException {
        Path dir = Files.createDirectory(shared.resolve("plain"));
        Job plain = launch(dir, 1);
        assertEquals(0, plain.result().status(), plain.log());
        assertFalse(plain.result().err().contains("restarting"), "the uninterrupted run is not restarted: " + plain.log());
        assertTrue(plain.result().out().contains("[rank 0] DONE generation 0, " + STEPS + " iterations"), plain.log());
        assertNoResidue(plain, 0);
        reference = plain.model();
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void aNonZeroRankKilledAtASeededRandomStepIsRestartedFromTheNewestCheckpoint(@TempDir Path dir) throws IOException {
        long seed = Long.getLong("restart.seed", DEFAULT_SEED);
        long step = 1 + new SplittableRandom(seed).nextLong(STEPS - 1); // 1..23: the last step, 24, ends the job
        int port = freePortWithFreeNext();
        Job job;
        try (java.net.ServerSocket squatter = new java.net.ServerSocket(port + 1)) {
            // another program listens on --master-port + 1: generation 1's store takes a free port instead
            job = launch(dir, port, 1, List.of(), "kill@g0r1s" + step);
        }
        String log = "seed=" + seed + " kill after step " + step + "\n" + job.log();
        assertEquals(0, job.result().status(), log);
        assertTrue(job.result().err().contains("generation 1: port " + (port + 1) + " (--master-port " + port
                + " + 1) is in use on 127.0.0.1; taking port "), "the taken port is not used: " + log);
        assertNotEquals(port + 1, generationPorts(job).get(1), log);
        assertTrue(job.result().err().contains("generation 0 failed: rank 1 (local rank 1, pid ")
                && job.result().err().contains("was killed by signal 9 (SIGKILL)"), "the launcher names the dead rank: " + log);
        assertTrue(job.result().err().contains("restarting as generation 1"), log);
        assertTrue(job.result().out().contains("[rank 0] DONE generation 1, " + STEPS + " iterations"), log);
        Resumption r = resumption(job, 1, step, log);
        assertBitwiseAsReference(job, log);
        assertNoResidue(job, 1);
        Matcher kill = KILL.matcher(job.result().out());
        assertTrue(kill.find(), log);
        long killedAt = Long.parseLong(kill.group(5));
        Matcher resumed = RESUMED.matcher(job.result().out());
        String phases = "";
        if (resumed.find()) { // none when the kill came before the first checkpoint: generation 1 starts over
            phases = String.format(Locale.ROOT, " (rank 0's main entered %.2f s after it, its group formed %.2f s, its"
                            + " network made %.2f s, restored %.2f s)", (Long.parseLong(resumed.group(3)) - killedAt) / 1000.0,
                    (Long.parseLong(resumed.group(4)) - killedAt) / 1000.0,
                    (Long.parseLong(resumed.group(5)) - killedAt) / 1000.0,
                    (Long.parseLong(resumed.group(6)) - killedAt) / 1000.0);
        }
        System.out.printf(Locale.ROOT, "RestartAfterKillTest: seed %d, killed after step %d, resumed from step %d (%d steps"
                        + " redone), first step of generation 1 %.2f s after the kill%s%n", seed, step, r.from(), r.redone(),
                (r.firstStepAt() - killedAt) / 1000.0, phases);
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void rankZeroWhichHostsTheStoreKilledAndThenRankOneTwoRestarts(@TempDir Path dir) throws IOException {
        long seed = Long.getLong("restart.seed", DEFAULT_SEED) + 1;
        SplittableRandom rnd = new SplittableRandom(seed);
        long first = 1 + rnd.nextLong(STEPS - 2); // 1..22
        long resumed = newestCheckpointBefore(first);
        long second = resumed + 1 + rnd.nextLong(STEPS - 1 - resumed); // a step generation 1 completes: resumed+1..23
        Job job = launch(dir, 2, "kill@g0r0s" + first, "kill@g1r1s" + second);
        String log = "seed=" + seed + " kills after steps " + first + ", " + second + "\n" + job.log();
        assertEquals(0, job.result().status(), log);
        assertTrue(job.result().err().contains("generation 0 failed: rank 0 (local rank 0, pid "), log);
        assertTrue(job.result().err().contains("generation 1 failed: rank 1 (local rank 1, pid "), log);
        assertTrue(job.result().err().contains("restarting as generation 2 (restart 2 of 2, 0 left after it)"), log);
        assertTrue(job.result().out().contains("[rank 0] DONE generation 2, " + STEPS + " iterations"), log);
        resumption(job, 1, first, log);
        resumption(job, 2, second, log);
        assertBitwiseAsReference(job, log);
        assertNoResidue(job, 2);
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void aRankKilledInSetUpBeforeTheRendezvousCompletesIsRestartedFromScratch(@TempDir Path dir) throws IOException {
        Job job = launch(dir, 1, "setup@g0r1");
        String log = job.log();
        assertEquals(0, job.result().status(), log);
        assertTrue(job.result().out().contains("[rank 1] KILL rank 1 generation 0 in setup"), log);
        assertTrue(job.result().err().contains("generation 0 failed: rank 1 (local rank 1, pid ")
                && job.result().err().contains("was killed by signal 9 (SIGKILL)"), log);
        assertFalse(job.result().out().contains("FIRST STEP 1 of generation 0"), "generation 0 never trained: " + log);
        assertFalse(RESUMED.matcher(job.result().out()).find(), "no checkpoint to resume from: " + log);
        Matcher redone = REDONE.matcher(job.result().out());
        assertTrue(redone.find() && redone.group(2).equals("-1") && redone.group(4).equals("0"), log);
        assertTrue(job.result().out().contains("[rank 0] DONE generation 1, " + STEPS + " iterations"), log);
        assertBitwiseAsReference(job, log);
        assertNoResidue(job, 1);
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void aCheckpointTornByACrashInItsWriteIsSkippedAndTheOneBeforeItLoaded(@TempDir Path dir) throws IOException {
        long torn = 12 + 2 * EVERY; // a checkpoint step in the second epoch: 20
        Job job = launch(dir, 1, "halt@g0s" + torn);
        String log = job.log();
        assertEquals(0, job.result().status(), log);
        String tornDir = String.format(Locale.ROOT, "step-%012d", torn);
        assertTrue(job.result().out().contains("halting while writing ")
                && job.result().out().contains(tornDir + "/manifest.properties"), "rank 0 halted mid-write: " + log);
        assertTrue(job.result().err().contains("generation 0 failed: rank 0 (local rank 0, pid "), log);
        assertTrue(Pattern.compile("\\[rank \\d\\] .*symmem4j checkpoint: skipping .*" + tornDir + ": checkpoint .* is torn:"
                + " manifest=manifest.properties missing").matcher(job.result().out()).find(), "the torn one is skipped: " + log);
        Resumption r = resumption(job, 1, torn, log);
        assertEquals(torn - EVERY, r.from(), "resumed from the checkpoint before the torn one: " + log);
        assertBitwiseAsReference(job, log);
        assertNoResidue(job, 1);
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void moreFailuresThanMaxRestartsEndTheJobWithTheRanksCodeNamingRankAndGeneration(@TempDir Path dir)
            throws IOException {
        Job job = launch(dir, 1, "setup@g0r1", "setup@g1r1");
        String log = job.log();
        assertEquals(137, job.result().status(), "rank 1's code, killed by signal 9: " + log);
        assertTrue(job.result().err().contains("symmem4j-run: generation 1 failed: rank 1 (local rank 1, pid ")
                && job.result().err().contains("no restarts left (--max-restarts 1, all used): exiting with rank 1's code"
                + " 137 (of generation 1)"), log);
        assertFalse(Files.exists(job.model()), "no model from a job that did not finish");
        assertNoResidue(job, 1);
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void aRankThatHangsIsDetectedByItsPeersTimeoutAndTheJobRestartedWithinTheBound(@TempDir Path dir)
            throws IOException {
        long stopped = 14; // between checkpoints, in the second epoch: the peer waits in the next step's all-reduce
        Job job = launch(dir, 1, "timeout=" + HANG_TIMEOUT_MS, "stop@g0r1s" + stopped);
        String log = job.log();
        assertEquals(0, job.result().status(), log);
        assertTrue(job.result().out().contains("[rank 1] STOP rank 1 generation 0 after step " + stopped), log);
        // rank 0's wait in the group's all-reduce ends at the group's timeout, which the trainer takes (not at the
        // trainer's backstop, three timeouts and 30 s, that only a wait ignoring the timeout reaches), naming rank 1;
        // the launcher SIGKILLs the stopped rank 1 after the grace period (SIGTERM stays pending on a stopped process)
        assertTrue(job.result().err().contains("generation 0 failed: rank 0 (local rank 0, pid ")
                && job.result().err().contains("stopped rank 1 (SIGKILL after 1 s)"), log);
        String all = job.result().out() + job.result().err();
        assertTrue(Pattern.compile("rank=0 [^\\n]*timed out after " + java.time.Duration.ofMillis(HANG_TIMEOUT_MS)
                + " waiting for rank 1\\b").matcher(all).find(), "rank 0 names the timeout set and the stopped rank: " + log);
        assertFalse(all.contains("a wait that ignores the timeout"), "not the trainer's backstop: " + log);
        Resumption r = resumption(job, 1, stopped, log);
        assertEquals(newestCheckpointBefore(stopped), r.from(), log);
        assertBitwiseAsReference(job, log);
        assertNoResidue(job, 1);
    }

    /** Where generation {@code gen} resumed, how many steps it redid, and its first step's time. */
    record Resumption(long from, long redone, long firstStepAt) {
    }

    /**
     * Checks generation {@code gen}'s resume after a failure after step {@code failedAfter}: from the newest checkpoint
     * at or before it (at most {@value #EVERY} steps back), the steps redone said, and every rank's first step the one
     * after the checkpoint.
     */
    static Resumption resumption(Job job, int gen, long failedAfter, String log) {
        String out = job.result().out();
        long from = 0;
        for (Matcher m = RESUMED.matcher(out); m.find(); ) {
            if (Integer.parseInt(m.group(1)) == gen) {
                from = Long.parseLong(m.group(2));
            }
        }
        assertEquals(newestCheckpointBefore(failedAfter), from, "generation " + gen + " resumes from the newest"
                + " complete checkpoint before the failure after step " + failedAfter + ": " + log);
        long redone = -1;
        for (Matcher m = REDONE.matcher(out); m.find(); ) {
            if (Integer.parseInt(m.group(1)) == gen) {
                assertEquals(from, Long.parseLong(m.group(3)), log);
                redone = Long.parseLong(m.group(4));
            }
        }
        // rank 0 records a step after its listeners: when it is the one that dies in its listener, one step less
        assertTrue(redone == failedAfter - from || redone == failedAfter - 1 - from, "generation " + gen + " says"
                + " it redoes " + redone + " steps; expected " + (failedAfter - from) + " (or one less): " + log);
        assertTrue(redone <= EVERY, "at most " + EVERY + " steps redone: " + log);
        assertTrue(out.contains("symmem4j checkpoint: " + (from == 0 && !out.contains("RESUMED generation " + gen)
                ? "starting over from step 0" : "resuming from step " + from)), "the trainer logs the resume: " + log);
        long firstStepAt = Long.MAX_VALUE;
        int ranks = 0;
        for (Matcher m = FIRST.matcher(out); m.find(); ) {
            if (Integer.parseInt(m.group(3)) == gen) {
                assertEquals(from + 1, Long.parseLong(m.group(2)), "rank " + m.group(1) + " goes on after the checkpoint: "
                        + log);
                firstStepAt = Math.min(firstStepAt, Long.parseLong(m.group(4)));
                ranks++;
            }
        }
        assertEquals(2, ranks, "both ranks of generation " + gen + " train: " + log);
        return new Resumption(from, redone, firstStepAt);
    }

    /**
     * The newest checkpoint complete when a rank dies after step {@code failedAfter}: a rank that dies after a
     * checkpoint's step (in its step listener, which runs before the checkpoint) leaves that one incomplete.
     */
    static long newestCheckpointBefore(long failedAfter) {
        return (failedAfter - 1) / EVERY * EVERY;
    }

    static void assertBitwiseAsReference(Job job, String log) throws IOException {
        MultiLayerNetwork expected = ModelSerializer.restoreMultiLayerNetwork(reference.toFile(), true);
        MultiLayerNetwork found = ModelSerializer.restoreMultiLayerNetwork(job.model().toFile(), true);
        assertTrue(Arrays.equals(bits(expected.params().data().asFloat()), bits(found.params().data().asFloat())),
                "parameters bitwise as the uninterrupted run's: " + log);
        assertTrue(Arrays.equals(bits(expected.getUpdater().getStateViewArray().data().asFloat()),
                bits(found.getUpdater().getStateViewArray().data().asFloat())), "updater state bitwise: " + log);
        assertEquals(expected.getIterationCount(), found.getIterationCount(), log);
        assertEquals(expected.getEpochCount(), found.getEpochCount(), log);
    }

    /**
     * Nothing of the job is left once the launcher returned ({@link #residue}), and a process of every generation up
     * to {@code lastGeneration} started (a rank stopped before its main printed anything, as a peer of a rank killed
     * in set-up may be on a busy machine, has nothing to leave).
     */
    static void assertNoResidue(Job job, int lastGeneration) throws IOException {
        assertEquals(lastGeneration + 1, START.matcher(job.result().out()).results().map(m -> m.group(2)).distinct()
                .count(), "a process of every generation started: " + job.log());
        List<String> left = residue(job, lastGeneration);
        assertTrue(left.isEmpty(), "left by the job: " + left + "\n" + job.log());
    }

    /**
     * What the job left once the launcher returned: its processes (every generation's, from their START lines) still
     * alive, their {@code /dev/shm} files, its ports (generation g's is the first one's + g) still listened on.
     *
     * @return one line per thing left; empty when nothing is
     */
    static List<String> residue(Job job, int lastGeneration) throws IOException {
        List<Long> pids = new ArrayList<>();
        for (Matcher m = START.matcher(job.result().out()); m.find(); ) {
            pids.add(Long.parseLong(m.group(3)));
        }
        for (Matcher m = LAUNCHER_PID.matcher(job.result().err()); m.find(); ) { // the failed ones, named by the launcher
            pids.add(Long.parseLong(m.group(1)));
        }
        List<String> left = new ArrayList<>();
        String mine = job.checkpoints().toString(); // in the command line of every process of this job, only
        for (long pid : pids) {
            // a pid the machine gave to another process since (it reuses them quickly when busy) is not the job's
            ProcessHandle.of(pid).filter(ProcessHandle::isAlive)
                    .filter(p -> p.info().commandLine().map(c -> c.contains(mine)).orElse(true))
                    .ifPresent(p -> left.add("process " + pid + " " + p.info().commandLine().orElse("")));
        }
        try (Stream<Path> files = Files.list(SharedMemoryFiles.directory())) {
            files.map(f -> f.getFileName().toString())
                    .filter(n -> pids.stream().anyMatch(pid -> n.startsWith(SharedMemoryFiles.PREFIX + pid + "-")))
                    .forEach(n -> left.add(SharedMemoryFiles.directory().resolve(n).toString()));
        }
        List<Integer> ports = generationPorts(job);
        for (int g = 0; g < ports.size(); g++) {
            if (listening(ports.get(g))) {
                left.add("port " + ports.get(g) + " (generation " + g + "'s store) listened on");
            }
        }
        return left;
    }

    private static final Pattern GENERATION_PORT = Pattern.compile("symmem4j-run: generation (\\d+): run id \\S+, port"
            + " (\\d+),");

    /** Each generation's store port, as the launcher said it (generation 0's is the one given). */
    static List<Integer> generationPorts(Job job) {
        List<Integer> ports = new ArrayList<>(List.of(job.port()));
        for (Matcher m = GENERATION_PORT.matcher(job.result().err()); m.find(); ) {
            assertEquals(ports.size(), Integer.parseInt(m.group(1)), "generations in order: " + job.log());
            ports.add(Integer.parseInt(m.group(2)));
        }
        return ports;
    }

    /** Whether a socket listens on {@code port}, by /proc/net/tcp and tcp6 (state 0A). */
    static boolean listening(int port) throws IOException {
        String hex = String.format(Locale.ROOT, ":%04X", port);
        for (String table : List.of("/proc/net/tcp", "/proc/net/tcp6")) {
            Path f = Path.of(table);
            if (!Files.isReadable(f)) {
                continue;
            }
            for (String line : Files.readAllLines(f)) {
                String[] cols = line.trim().split("\\s+");
                if (cols.length > 3 && cols[1].endsWith(hex) && cols[3].equals("0A")) {
                    return true;
                }
            }
        }
        return false;
    }

    static int[] bits(float[] values) {
        int[] bits = new int[values.length];
        for (int i = 0; i < values.length; i++) {
            bits[i] = Float.floatToRawIntBits(values[i]);
        }
        return bits;
    }

    /** A port free now whose next one is free too. */
    static int freePortWithFreeNext() throws IOException {
        for (int attempt = 0; ; attempt++) {
            int port = freePort();
            if (port < 65535 && !listening(port + 1)) {
                try (java.net.ServerSocket next = new java.net.ServerSocket(port + 1)) {
                    return port;
                } catch (IOException taken) {
                    if (attempt > 100) {
                        throw taken;
                    }
                }
            }
        }
    }

    static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
