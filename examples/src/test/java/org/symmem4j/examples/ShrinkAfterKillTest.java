package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.symmem4j.examples.RestartAfterKillTest.bits;
import static org.symmem4j.examples.RestartAfterKillTest.freePort;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.launch.Launcher;

/**
 * In-place shrink across processes, end to end (issue 32): {@code symmem4j-run -n 3 --on-failure shrink} starts three
 * JVMs of {@link ShrinkingTraining}, a data-parallel DL4J job in group mode with {@code onWorkerFailure(SHRINK)}. One
 * rank kills itself ({@code kill -9}) after step {@value #KILL_AFTER}; the launcher announces it dead and stops nobody;
 * the two survivors form a new group (whichever rank died: rank 0, which hosted the first store, too), redo the failed
 * step and finish. The final model equals, bitwise, the plain data parallelism SHRINK documents: three workers for the
 * steps before the failed one, then two workers on the rest of the batches from the failed step's first on (the
 * reference runs as threads of this JVM: N processes train bitwise like N worker threads). No shared-memory file of
 * the job is left in /dev/shm.
 */
class ShrinkAfterKillTest {

    static final int KILL_AFTER = 4; // steps 0..4 done by three ranks; step 5 fails and is redone by two
    /** With ZeRO: a checkpoint every 3 steps, so the survivors go back to the one after step 2 and redo steps 3-5. */
    static final int ZERO_EVERY = 3;

    private static final Pattern KILL = Pattern.compile("KILL rank (\\d) after step (\\d+) at (\\d+) ms");
    private static final Pattern SHRUNK = Pattern.compile("\\[rank (\\d)\\] SHRUNK step (\\d+) dead \\[(\\d)\\] from 3 to 2"
            + " redone (true|false) resumed at (\\d+) ms");
    private static final Pattern PID = Pattern.compile("\\[rank (\\d)\\] PID (\\d+)");

    /** {@code symmem4j-run -n 3 --on-failure shrink} of {@link ShrinkingTraining} with {@code trainingArgs}. */
    private static Launcher.Result launch(String... trainingArgs) throws IOException {
        return launch(freePort(), trainingArgs);
    }

    /** As {@link #launch(String...)}, on {@code MASTER_PORT} {@code port}. */
    private static Launcher.Result launch(int port, String... trainingArgs) {
        return launch(3, port, "-Xmx512m", ShrinkingTraining.class, trainingArgs);
    }

    /**
     * {@code symmem4j-run -n ranks --master-port port --on-failure shrink} of {@code main}'s JVMs with
     * {@code trainingArgs} (this test's class path, at most {@code heap} each).
     */
    static Launcher.Result launch(int ranks, int port, String heap, Class<?> main, String... trainingArgs) {
        List<String> args = new ArrayList<>(List.of("-n", Integer.toString(ranks), "--master-port", Integer.toString(port),
                "--on-failure", "shrink", "--java", "--"));
        args.addAll(LaunchedJvm.options(heap, "-Dsymmem4j.timeout.ms=30000"));
        args.add(main.getName());
        args.addAll(List.of(trainingArgs));
        return Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
    }

    @ParameterizedTest(name = "rank {0} killed")
    @ValueSource(ints = {0}) // rank 0 hosted the first store; rank 2 passes too (bench/results/2026-11-28-shrink.md)
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void survivorsOfAKill9ShrinkInPlaceAndEndBitwiseAsTwoWorkersFromTheFailedStep(int killed, @TempDir Path dir)
            throws IOException {
        Path model = dir.resolve("shrunk.zip");
        // another job's store holds MASTER_PORT + 1 throughout: the survivors' store must not need it (it binds a port
        // the system chooses and publishes it beside the membership file)
        try (java.net.ServerSocket other = holdPortAfterAFreeOne()) {
            checkShrunk(launch(other.getLocalPort() - 1, model.toString(), Integer.toString(killed),
                    Integer.toString(KILL_AFTER)), killed, model);
        }
    }

    /** A socket bound to {@code p + 1} (as another job's store would be) where {@code p} is free for the launch. */
    private static java.net.ServerSocket holdPortAfterAFreeOne() throws IOException {
        while (true) {
            int port = freePort();
            if (port < 65535) {
                try {
                    return new java.net.ServerSocket(port + 1, 50, java.net.InetAddress.getLoopbackAddress());
                } catch (IOException taken) {
                    // port + 1 is someone's already: pick another
                }
            }
        }
    }

    private static void checkShrunk(Launcher.Result r, int killed, Path model) throws IOException {
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("rank " + killed + " (local rank " + killed + ", pid ")
                && r.err().contains("was killed by signal 9 (SIGKILL)")
                && r.err().contains("--on-failure shrink: the other ranks go on without it"), log);
        assertTrue(r.err().contains("2 of 3 ranks exited 0"), log);

        Matcher kill = KILL.matcher(r.out());
        assertTrue(kill.find(), log);
        long killedAt = Long.parseLong(kill.group(3));
        int survivors = 0;
        long latestResume = 0;
        for (Matcher m = SHRUNK.matcher(r.out()); m.find(); survivors++) {
            assertEquals(KILL_AFTER + 1, Integer.parseInt(m.group(2)), "the failed step: " + log);
            assertEquals(killed, Integer.parseInt(m.group(3)), "the dead rank, as the old group numbered it: " + log);
            assertEquals("true", m.group(4), "no survivor completed the failed step: it is redone: " + log);
            latestResume = Math.max(latestResume, Long.parseLong(m.group(5)));
        }
        assertEquals(2, survivors, "both survivors shrank: " + log);
        System.out.printf(Locale.ROOT, "ShrinkAfterKillTest: rank %d killed after step %d; the survivors' redone step"
                + " handed out %.2f s after the kill (the later of the two)%n", killed, KILL_AFTER,
                (latestResume - killedAt) / 1000.0);

        List<DataSet> data = ShrinkingTraining.batches();
        MultiLayerNetwork reference = ShrinkingTraining.network();
        int before = 3 * (KILL_AFTER + 1);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(3).ompThreadsPerWorker(1).build()) {
            w.fit(new ListIterator(data.subList(0, before)));
        }
        reference.setEpochCount(0); // one fit in the shrinking run
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(2).ompThreadsPerWorker(1).build()) {
            w.fit(new ListIterator(data.subList(before, data.size())));
        }
        MultiLayerNetwork shrunk = ModelSerializer.restoreMultiLayerNetwork(model.toFile(), true);
        assertTrue(Arrays.equals(bits(reference.params().data().asFloat()), bits(shrunk.params().data().asFloat())),
                "parameters bitwise as plain data parallelism on the survivors from the failed step");
        assertTrue(Arrays.equals(bits(reference.getUpdater().getStateViewArray().data().asFloat()),
                bits(shrunk.getUpdater().getStateViewArray().data().asFloat())), "updater state bitwise");
        assertEquals(reference.getIterationCount(), shrunk.getIterationCount());
        assertEquals(reference.getEpochCount(), shrunk.getEpochCount());

        assertNoSharedMemoryLeft(r.out(), log, killed);
    }

    /**
     * ZeRO across processes, checkpoints every {@value #ZERO_EVERY} steps, each stage: rank 0 (the first store's host)
     * dies after step {@value #KILL_AFTER}; its shard of the updater state (stage 3: of the parameters too) is lost with
     * it, so the two survivors go back to the checkpoint after {@value #ZERO_EVERY} steps, restore it re-sliced from 3
     * onto 2 (collectively, over their new group; stage 3 into new sparse /dev/shm working buffers of that group), redo
     * the steps since it and finish. The final model equals, bitwise, a fresh two-worker run (threads) resumed from that
     * checkpoint, and for stages 1 and 2 one started from its consolidated {@code model.zip} on the batches after it
     * (stage 3 writes none). One JVM launch per stage: the three stages share this one test's shape.
     */
    @ParameterizedTest(name = "{0}")
    @EnumSource(ZeroStage.class)
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void withZeroShardingTheSurvivorsGoBackToTheNewestCheckpointAndEndBitwiseAsARunResumedFromIt(ZeroStage stage,
            @TempDir Path dir) throws IOException {
        Path model = dir.resolve("shrunk.zip");
        Path ckpt = dir.resolve("ckpt");
        int killed = 0;
        Launcher.Result r = launch(model.toString(), Integer.toString(killed), Integer.toString(KILL_AFTER),
                "zero=" + stage.name(), ckpt.toString(), Integer.toString(ZERO_EVERY));
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("was killed by signal 9 (SIGKILL)") && r.err().contains("2 of 3 ranks exited 0"), log);
        Path checkpoint = org.symmem4j.dl4j.train.CheckpointDirectory.stepDir(ckpt, ZERO_EVERY);
        Matcher m = Pattern.compile("\\[rank (\\d)\\] SHRUNK step (\\d+) dead \\[(\\d)\\] from 3 to 2 redone true"
                + " resumed at (\\d+) ms back to step (\\d+) checkpoint (\\S+)").matcher(r.out());
        Matcher kill = KILL.matcher(r.out());
        assertTrue(kill.find(), log);
        long latestResume = 0;
        int survivors = 0;
        for (; m.find(); survivors++) {
            latestResume = Math.max(latestResume, Long.parseLong(m.group(4)));
            assertEquals(KILL_AFTER + 1, Integer.parseInt(m.group(2)), "the failed step: " + log);
            assertEquals(killed, Integer.parseInt(m.group(3)), log);
            assertEquals(ZERO_EVERY, Integer.parseInt(m.group(5)), "back to the newest checkpoint: " + log);
            assertEquals(checkpoint.toString(), m.group(6), log);
        }
        assertEquals(2, survivors, "both survivors went back: " + log);
        System.out.printf(Locale.ROOT, "ShrinkAfterKillTest: ZeRO %s, rank %d killed after step %d; the survivors'"
                + " first step after the checkpoint's restore handed out %.2f s after the kill (the later of the two)%n",
                stage, killed, KILL_AFTER, (latestResume - Long.parseLong(kill.group(3))) / 1000.0);

        List<DataSet> data = ShrinkingTraining.batches();
        MultiLayerNetwork resumed = ShrinkingTraining.network();
        resumed.params().addi(0.5f); // only the restore can make the runs agree
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(resumed).workers(2).ompThreadsPerWorker(1)
                .sharding(stage).build()) {
            w.restoreCheckpoint(checkpoint);
            w.fit(new ListIterator(data));
        }
        MultiLayerNetwork shrunk = ModelSerializer.restoreMultiLayerNetwork(model.toFile(), true);
        assertSameState(resumed, shrunk, stage + ": against a two-worker run resumed from the checkpoint");
        if (stage != ZeroStage.PARAMETERS) { // stage 3's checkpoints hold no consolidated model.zip
            MultiLayerNetwork fromZip = ModelSerializer.restoreMultiLayerNetwork(checkpoint.resolve("model.zip").toFile(),
                    true);
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(fromZip).workers(2).ompThreadsPerWorker(1)
                    .sharding(stage).build()) {
                w.fit(new ListIterator(data.subList(3 * ZERO_EVERY, data.size())));
            }
            assertSameState(fromZip, shrunk, stage + ": against the checkpoint's model.zip trained on two workers");
        }
        assertNoSharedMemoryLeft(r.out(), log, killed);
    }

    /** HSDP: six ranks in shard groups of two; steps 0..2 done by 3 x 2 ranks, step 3 fails and is redone by 2 x 2. */
    static final int HSDP_KILL_AFTER = 2;

    /**
     * Hybrid sharding across processes ({@code hsdp=2}: six JVMs, three shard groups of two): rank {@code killed} dies
     * after step {@value #HSDP_KILL_AFTER}; the other rank of its shard group leaves ({@code ReplicaLostException},
     * status 0), and the four survivors go on from their own copy, no checkpoint, as HSDP 2 x 2 from the failed step's
     * first batch on: the final model equals, bitwise, HSDP 3 x 2 worker threads for steps 0..2 then 2 x 2 threads on
     * the rest. No survivor maps a shared-memory file of the two ranks that are gone, and no file of the job is left.
     */
    @ParameterizedTest(name = "hsdp 3 x 2, rank {0} killed")
    @ValueSource(ints = {0, 5}) // rank 0 (the first group, the first store's host) and the last group's last rank
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void withHybridShardingTheDeadRanksShardGroupLeavesAndTheOthersEndBitwiseAsHsdpOnThem(int killed, @TempDir Path dir)
            throws IOException {
        Path model = dir.resolve("shrunk.zip");
        Launcher.Result r = launch(6, freePort(), "-Xmx384m", ShrinkingTraining.class, model.toString(),
                Integer.toString(killed), Integer.toString(HSDP_KILL_AFTER), "hsdp=2");
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("was killed by signal 9 (SIGKILL)"), log);
        int partner = killed ^ 1;
        assertTrue(r.out().contains("LEFT launch rank " + partner + " at "), log);
        Matcher kill = KILL.matcher(r.out());
        assertTrue(kill.find(), log);
        long killedAt = Long.parseLong(kill.group(3));
        Pattern shrunk = Pattern.compile("\\[rank (\\d)\\] SHRUNK step (\\d+) dead \\[(\\d)\\] from 6 to 4 redone"
                + " (true|false) resumed at (\\d+) ms");
        int survivors = 0;
        long latestResume = 0;
        for (Matcher m = shrunk.matcher(r.out()); m.find(); survivors++) {
            // every survivor reports the step they agreed on, also one the abort reached at step 2's loss sum (after
            // its update): the failed step, redone
            assertEquals(HSDP_KILL_AFTER + 1, Integer.parseInt(m.group(2)), m.group() + "\n" + log);
            assertEquals("true", m.group(4), m.group() + "\n" + log);
            assertEquals(killed, Integer.parseInt(m.group(3)), log);
            latestResume = Math.max(latestResume, Long.parseLong(m.group(5)));
        }
        assertEquals(4, survivors, "the four ranks of the other shard groups shrank: " + log);
        System.out.printf(Locale.ROOT, "ShrinkAfterKillTest: hsdp 3 x 2, rank %d killed after step %d; the survivors'"
                + " redone step handed out %.2f s after the kill (the latest of the four)%n", killed, HSDP_KILL_AFTER,
                (latestResume - killedAt) / 1000.0);

        List<DataSet> data = ShrinkingTraining.batches();
        MultiLayerNetwork reference = ShrinkingTraining.network();
        int before = 6 * (HSDP_KILL_AFTER + 1);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(6).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).build()) {
            w.fit(new ListIterator(data.subList(0, before)));
        }
        reference.setEpochCount(0); // one fit in the shrinking run
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(4).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).build()) {
            w.fit(new ListIterator(data.subList(before, data.size())));
        }
        assertSameState(reference, ModelSerializer.restoreMultiLayerNetwork(model.toFile(), true),
                "hsdp 3 x 2 -> 2 x 2 after rank " + killed + "'s kill");
        assertNoSharedMemoryLeft(r.out(), log, 6, List.of(Math.min(killed, partner), Math.max(killed, partner)));
    }

    /** HSDP's second kill: after step 6, the fourth of the 2 x 2 survivors' steps (batches 18-33). */
    static final int HSDP_SECOND_KILL_AFTER = 6;

    /**
     * Two shrinks in a row across processes with hybrid sharding ({@code hsdp=2}, six JVMs): rank 5 (the last shard
     * group's last rank) dies after step {@value #HSDP_KILL_AFTER}, its group leaves and 3 x 2 becomes 2 x 2 (launch ranks
     * 0-3), which redo step 3; then rank 0 — the store host of the first group and of the survivors' — dies after step
     * {@value #HSDP_SECOND_KILL_AFTER}, its group leaves and 2 x 2 becomes 1 x 2 (launch ranks 2 and 3), which redo step
     * 7. The final model equals, bitwise, HSDP as threads: 3 x 2 for steps 0-2 (batches 0-17), 2 x 2 for steps 3-6
     * (18-33), then one shard group of two (stage 3 itself) from batch 34 on. No survivor maps a shared-memory file of
     * the four ranks that are gone, and no file of the job is left.
     */
    @org.junit.jupiter.api.Test
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void withHybridShardingTwoDeathsInARowShrinkTwiceAndTheLastGroupEndsBitwiseAsHsdpOnIt(@TempDir Path dir)
            throws IOException {
        Path model = dir.resolve("shrunk.zip");
        Launcher.Result r = launch(6, freePort(), "-Xmx384m", ShrinkingTraining.class, model.toString(), "5",
                Integer.toString(HSDP_KILL_AFTER), "hsdp=2", "0", Integer.toString(HSDP_SECOND_KILL_AFTER));
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("4 of 6 ranks exited 0"), log); // the two survivors and the two that left
        assertTrue(r.out().contains("LEFT launch rank 4 at ") && r.out().contains("LEFT launch rank 1 at "), log);
        Matcher kill = KILL.matcher(r.out());
        List<Long> kills = new ArrayList<>();
        while (kill.find()) {
            kills.add(Long.parseLong(kill.group(3)));
        }
        assertEquals(2, kills.size(), log);
        Pattern shrunk = Pattern.compile("\\[rank (\\d)\\] SHRUNK step (\\d+) dead \\[(\\d)\\] from (\\d) to (\\d) redone"
                + " (true|false) resumed at (\\d+) ms");
        List<String> seen = new ArrayList<>();
        long[] latestResume = new long[2];
        for (Matcher m = shrunk.matcher(r.out()); m.find(); ) {
            int second = m.group(4).equals("6") ? 0 : 1;
            seen.add("rank " + m.group(1) + ": step " + m.group(2) + " dead " + m.group(3) + " " + m.group(4) + "->"
                    + m.group(5) + " redone " + m.group(6));
            latestResume[second] = Math.max(latestResume[second], Long.parseLong(m.group(7)));
        }
        // the dead rank as the group of that shrink numbered it: launch rank 5 in the first, 0 (new rank 0) in the
        // second; only launch ranks 2 and 3 went through both
        assertEquals(List.of("rank 2: step 3 dead 5 6->4 redone true", "rank 2: step 7 dead 0 4->2 redone true",
                "rank 3: step 3 dead 5 6->4 redone true", "rank 3: step 7 dead 0 4->2 redone true"),
                seen.stream().sorted().toList(), log);
        System.out.printf(Locale.ROOT, "ShrinkAfterKillTest: hsdp 3 x 2 -> 2 x 2 -> 1 x 2, ranks 5 and 0 killed after"
                + " steps %d and %d; the survivors' redone step handed out %.2f s and %.2f s after each kill%n",
                HSDP_KILL_AFTER, HSDP_SECOND_KILL_AFTER, (latestResume[0] - kills.get(0)) / 1000.0,
                (latestResume[1] - kills.get(1)) / 1000.0);

        List<DataSet> data = ShrinkingTraining.batches();
        MultiLayerNetwork reference = ShrinkingTraining.network();
        int first = 6 * (HSDP_KILL_AFTER + 1);
        int second = first + 4 * (HSDP_SECOND_KILL_AFTER - HSDP_KILL_AFTER);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(6).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).build()) {
            w.fit(new ListIterator(data.subList(0, first)));
        }
        reference.setEpochCount(0); // one fit in the shrinking run
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(4).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).build()) {
            w.fit(new ListIterator(data.subList(first, second)));
        }
        reference.setEpochCount(0);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(2).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).build()) { // one shard group: HSDP of one replica is stage 3 itself
            w.fit(new ListIterator(data.subList(second, data.size())));
        }
        assertSameState(reference, ModelSerializer.restoreMultiLayerNetwork(model.toFile(), true),
                "hsdp 3 x 2 -> 2 x 2 -> 1 x 2 after the kills of ranks 5 and 0");
        assertNoSharedMemoryLeft(r.out(), log, 6, List.of(0, 1, 4, 5));
    }

    private static void assertSameState(MultiLayerNetwork expected, MultiLayerNetwork actual, String what) {
        assertTrue(Arrays.equals(bits(expected.params().data().asFloat()), bits(actual.params().data().asFloat())),
                what + ": parameters bitwise");
        assertTrue(Arrays.equals(bits(expected.getUpdater().getStateViewArray().data().asFloat()),
                bits(actual.getUpdater().getStateViewArray().data().asFloat())), what + ": updater state bitwise");
        assertEquals(expected.getIterationCount(), actual.getIterationCount(), what + ": iterations");
        assertEquals(expected.getEpochCount(), actual.getEpochCount(), what + ": epochs");
    }

    @org.junit.jupiter.api.Test
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void aDeathDuringTheRebuildEndsTheJobWithAClearErrorAndNoResidue(@TempDir Path dir) throws IOException {
        // rank 1 dies after step 4; rank 2 dies 1.5 s later, while rank 0 forms the survivors' group with it (or, had
        // the launcher announced both before rank 0 read the membership, rank 0 alone is below minWorkers=2)
        Launcher.Result r = launch(dir.resolve("never.zip").toString(), "1", Integer.toString(KILL_AFTER), "2", "1500");
        String log = r.err() + "\n" + r.out();
        assertTrue(r.status() != 0, "no rank finished: " + log);
        assertTrue(r.err().contains("no rank exited 0 (--on-failure shrink)"), log);
        Matcher failed = Pattern.compile("\\[rank 0\\] FIT FAILED at (\\d+) ms: (.*)").matcher(r.out());
        assertTrue(failed.find(), log);
        String why = failed.group(2);
        assertTrue(why.contains("could not shrink in place") && why.contains("exited before arriving")
                || why.contains("minWorkers=2"), why);
        Matcher second = Pattern.compile("KILL rank 2 1500 ms after step \\d+ at (\\d+) ms").matcher(r.out());
        assertTrue(second.find(), log);
        System.out.printf(Locale.ROOT, "ShrinkAfterKillTest: a death during the rebuild: rank 0's fit failed %.2f s"
                + " after the second death: %s%n", (Long.parseLong(failed.group(1)) - Long.parseLong(second.group(1)))
                / 1000.0, why);
        assertTrue(!Files.exists(dir.resolve("never.zip")));
        assertNoSharedMemoryLeft(r.out(), log);
    }

    /** No /dev/shm file of the job's processes (named by their pids) is left. */
    private static void assertNoSharedMemoryLeft(String out, String log) throws IOException {
        assertNoJobFileLeft(out, log, 3);
    }

    /** As {@link #assertNoSharedMemoryLeft(String, String)}, for a job of {@code ranks} processes. */
    static void assertNoJobFileLeft(String out, String log, int ranks) throws IOException {
        List<String> pids = new ArrayList<>();
        for (Matcher m = PID.matcher(out); m.find(); ) {
            pids.add(m.group(2));
        }
        assertEquals(ranks, pids.size(), log);
        try (Stream<Path> shm = Files.list(Path.of("/dev/shm"))) {
            List<String> left = shm.map(p -> p.getFileName().toString())
                    .filter(n -> pids.stream().anyMatch(pid -> n.startsWith("symmem4j-" + pid + "-"))).toList();
            assertEquals(List.of(), left, "the job's shared-memory files are gone");
        }
    }

    /**
     * As {@link #assertNoSharedMemoryLeft(String, String)}, and the two survivors of the kill of {@code killed} hold
     * no mapping of its shared-memory files once their fit is done (the files are unlinked once mapped: a mapping is
     * what would keep the dead rank's pages, the old group's buffers, in /dev/shm), nor any at all once closed.
     */
    private static void assertNoSharedMemoryLeft(String out, String log, int killed) throws IOException {
        assertNoSharedMemoryLeft(out, log, 3, List.of(killed));
    }

    /**
     * As {@link #assertNoJobFileLeft(String, String, int)}, for a job of {@code ranks} processes of which
     * {@code gone} (the killed one, and on a mesh its replica's ranks that left) are not among the survivors: no
     * survivor maps a shared-memory file of any of them after its fit, nor any file once closed.
     */
    static void assertNoSharedMemoryLeft(String out, String log, int ranks, List<Integer> gone) throws IOException {
        assertNoJobFileLeft(out, log, ranks);
        List<String> deadPids = new ArrayList<>();
        List<String> survivorPids = new ArrayList<>();
        for (Matcher m = PID.matcher(out); m.find(); ) {
            if (gone.contains(Integer.parseInt(m.group(1)))) {
                deadPids.add(m.group(2));
            } else {
                survivorPids.add(m.group(2));
            }
        }
        assertEquals(gone.size(), deadPids.size(), log);
        Matcher afterFit = Pattern.compile("\\[rank (\\d)\\] MAPPED after fit \\[([0-9, ]*)\\]").matcher(out);
        int survivors = 0;
        for (; afterFit.find(); survivors++) {
            List<String> owners = Arrays.asList(afterFit.group(2).split(", "));
            assertTrue(deadPids.stream().noneMatch(owners::contains), "rank " + afterFit.group(1) + " still maps shared"
                    + " memory of a rank that is gone (pids " + deadPids + "): " + owners + "\n" + log);
            // the probe sees mappings: the survivors' group's memory is mapped until the wrapper closes
            assertTrue(!owners.getFirst().isEmpty() && survivorPids.containsAll(owners), "rank " + afterFit.group(1)
                    + " maps shared memory of " + owners + ", expected some of the survivors' " + survivorPids + "\n"
                    + log);
        }
        assertEquals(ranks - gone.size(), survivors, log);
        Matcher afterClose = Pattern.compile("\\[rank (\\d)\\] MAPPED after close \\[([0-9, ]*)\\]").matcher(out);
        int closed = 0;
        for (; afterClose.find(); closed++) {
            assertEquals("", afterClose.group(2), "rank " + afterClose.group(1) + " maps shared memory after close: "
                    + log);
        }
        assertTrue(closed >= ranks - gone.size(), log); // a rank that left prints it too
    }
}
