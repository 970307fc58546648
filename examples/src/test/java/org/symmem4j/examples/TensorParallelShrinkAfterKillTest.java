package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * In-place shrink of a {@code dp x tp} mesh across processes (issue 32): {@code symmem4j-run -n 6 --on-failure shrink}
 * starts the six JVMs of {@link TensorParallelShrinkingTraining}, a {@code dp 3 x tp 2} mesh trained by the
 * data-parallel wrapper over {@code group(mesh, "dp")} with {@code onWorkerFailure(SHRINK)}. One rank kills itself
 * ({@code kill -9}) after step {@value #KILL_AFTER}: its tp peer leaves ({@code ReplicaLostException}, status 0), the
 * other two replicas (four ranks) shrink the mesh to {@code dp 2 x tp 2}, redo the failed step and finish. Each
 * survivor's shard (parameters, updater state, counters) equals, bitwise, plain {@code dp x tp} as threads of this JVM:
 * {@code dp 3} for the steps before the failed one, then {@code dp 2} over the same surviving ranks from the failed
 * step's first batch on. No survivor maps a shared-memory file of the lost replica after its fit, none at all once
 * closed, and no {@code /dev/shm} file of the job is left. Killed: world rank 3 (tp rank 1 of replica 1, not the store's
 * host) and world rank 0 (tp rank 0 of replica 0, which hosted the first store).
 */
class TensorParallelShrinkAfterKillTest {

    static final int DP = 3;
    static final int TP = 2;
    static final int KILL_AFTER = 3; // steps 0..3 done by three replicas; step 4 fails and is redone by two

    private static final Pattern SHRUNK = Pattern.compile("\\[rank (\\d)\\] SHRUNK step (\\d+) dead \\[(\\d)\\] from 3"
            + " to 2 redone (true|false) resumed at (\\d+) ms");

    @ParameterizedTest(name = "world rank {0} killed")
    @CsvSource({"3", "0"})
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void theDeadReplicaLeavesWholeAndTheSurvivorsEndBitwiseAsDpByTpOnThemFromTheFailedStep(int killed,
            @TempDir Path dir) throws IOException {
        int ranks = DP * TP;
        int lostReplica = killed / TP;
        List<Integer> gone = new ArrayList<>();
        List<Integer> survivors = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            (r / TP == lostReplica ? gone : survivors).add(r);
        }
        Path out = dir.resolve("out");
        Launcher.Result r = ShrinkAfterKillTest.launch(ranks, RestartAfterKillTest.freePort(), "-Xmx384m",
                TensorParallelShrinkingTraining.class, out.toString(), Integer.toString(DP), Integer.toString(TP),
                Integer.toString(killed), Integer.toString(KILL_AFTER));
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        assertTrue(r.err().contains("rank " + killed + " (local rank " + killed + ", pid ")
                && r.err().contains("was killed by signal 9 (SIGKILL)"), log);
        for (int g : gone) {
            if (g != killed) {
                assertTrue(r.out().contains("[rank " + g + "] LEFT at "), "rank " + g + " leaves with its replica: " + log);
            }
        }
        Matcher kill = Pattern.compile("KILL rank \\d after step \\d+ at (\\d+) ms").matcher(r.out());
        assertTrue(kill.find(), log);
        int shrunk = 0;
        long latestResume = 0;
        for (Matcher m = SHRUNK.matcher(r.out()); m.find(); shrunk++) {
            assertTrue(survivors.contains(Integer.parseInt(m.group(1))), log);
            assertEquals(KILL_AFTER + 1, Integer.parseInt(m.group(2)), "the failed step: " + log);
            assertEquals(lostReplica, Integer.parseInt(m.group(3)), "the dead replica, as the old dp group numbered it: "
                    + log);
            assertEquals("true", m.group(4), "no survivor completed the failed step: it is redone: " + log);
            latestResume = Math.max(latestResume, Long.parseLong(m.group(5)));
        }
        assertEquals(survivors.size(), shrunk, "every survivor shrank: " + log);
        System.out.printf(Locale.ROOT, "TensorParallelShrinkAfterKillTest: dp %d x tp %d, world rank %d killed after step"
                + " %d; the survivors' redone step handed out %.2f s after the kill (the latest of %d)%n", DP, TP, killed,
                KILL_AFTER, (latestResume - Long.parseLong(kill.group(1))) / 1000.0, survivors.size());

        // the reference: plain dp x tp as threads, dp 3 before the failed step, then dp 2 on the surviving ranks' shards
        List<DataSet> data = TensorParallelShrinkingTraining.batches();
        int before = DP * (KILL_AFTER + 1);
        GroupOptions options = GroupOptions.defaults().withTimeout(TensorParallelShrinkingTraining.TIMEOUT);
        List<MultiLayerNetwork> first = InJvmWorld.runOnEveryRank(ranks, options,
                g -> TensorParallelShrinkingTraining.train(g, DP, TP, null, data.subList(0, before)));
        List<byte[]> expected = InJvmWorld.runOnEveryRank(survivors.size(), options, g -> {
            MultiLayerNetwork mine = first.get(survivors.get(g.rank()));
            mine.setEpochCount(0); // one fit in the shrinking run
            return TensorParallelRestartingTraining.result(TensorParallelShrinkingTraining.train(g, DP - 1, TP, mine,
                    data.subList(before, data.size())));
        });
        for (int i = 0; i < survivors.size(); i++) {
            int rank = survivors.get(i);
            byte[] found = Files.readAllBytes(out.resolve("rank-" + rank + ".bin"));
            assertArrayEquals(expected.get(i), found, "world rank " + rank + ": its shard's parameters, updater state and"
                    + " counters bitwise as plain dp 2 x tp 2 on the survivors from the failed step: " + log);
        }
        for (int g : gone) {
            assertTrue(!Files.exists(out.resolve("rank-" + g + ".bin")), log);
        }
        ShrinkAfterKillTest.assertNoSharedMemoryLeft(r.out(), log, ranks, gone);
    }

    /**
     * ZeRO stages 1 to 3 on the mesh's dp axis across processes (one launch per stage): checkpoints every 2 steps,
     * world rank 3 killed after step 4 (the checkpoint after 4 steps complete). The survivors go back to their tp
     * shard's checkpoint after 4 steps, re-sliced from 3 onto 2 dp ranks (stage 3: its parameter blocks too), and redo
     * the steps since it; each survivor's
     * shard equals, bitwise, a fresh {@code dp 2 x tp 2} run of the same stage as threads of this JVM resumed from that
     * checkpoint (from perturbed parameters: only the restore can make them agree). No {@code /dev/shm} file of the job
     * is left.
     */
    @ParameterizedTest(name = "sharding={0}")
    @org.junit.jupiter.params.provider.EnumSource(value = org.symmem4j.dl4j.ZeroStage.class,
            names = {"OPTIMIZER_STATE", "GRADIENTS", "PARAMETERS"})
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void zeroOnTheDpAxisGoesBackToEachTpShardsCheckpointReslicedOntoTheSurvivors(org.symmem4j.dl4j.ZeroStage stage,
            @TempDir Path dir) throws IOException {
        int ranks = DP * TP;
        int killed = 3;
        int killAfter = 4;
        List<Integer> gone = List.of(2, 3);
        List<Integer> survivors = List.of(0, 1, 4, 5);
        Path out = dir.resolve("out");
        Path ckpt = dir.resolve("ckpt");
        Launcher.Result r = ShrinkAfterKillTest.launch(ranks, RestartAfterKillTest.freePort(), "-Xmx384m",
                TensorParallelShrinkingTraining.class, out.toString(), Integer.toString(DP), Integer.toString(TP),
                Integer.toString(killed), Integer.toString(killAfter), stage.name(), ckpt.toString());
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        Matcher m = Pattern.compile("\\[rank (\\d)\\] SHRUNK step (\\d+) dead \\[1\\] from 3 to 2 redone true resumed at"
                + " (\\d+) ms mesh .* back to step 4 checkpoint (\\S+)").matcher(r.out());
        Matcher kill = Pattern.compile("KILL rank \\d after step \\d+ at (\\d+) ms").matcher(r.out());
        assertTrue(kill.find(), log);
        long latestResume = 0;
        List<Integer> shrunk = new ArrayList<>();
        java.util.Map<Integer, Path> checkpointOf = new java.util.HashMap<>();
        while (m.find()) {
            int rank = Integer.parseInt(m.group(1));
            shrunk.add(rank);
            assertEquals(killAfter + 1, Integer.parseInt(m.group(2)), "the failed step: " + log);
            latestResume = Math.max(latestResume, Long.parseLong(m.group(3)));
            checkpointOf.put(rank, Path.of(m.group(4)));
            assertEquals(org.symmem4j.dl4j.train.CheckpointDirectory.stepDir(ckpt.resolve("tp-" + (rank % TP) + "-of-"
                    + TP), 4), Path.of(m.group(4)), "its tp shard's checkpoint after 4 steps: " + log);
        }
        System.out.printf(Locale.ROOT, "TensorParallelShrinkAfterKillTest: ZeRO %s on dp %d x tp %d, world rank %d"
                + " killed after step %d; the survivors' first step after the checkpoint's restore handed out %.2f s"
                + " after the kill (the latest of %d)%n", stage, DP, TP, killed, killAfter,
                (latestResume - Long.parseLong(kill.group(1))) / 1000.0, survivors.size());
        java.util.Collections.sort(shrunk);
        assertEquals(survivors, shrunk, "every survivor went back to the checkpoint: " + log);

        List<DataSet> data = TensorParallelShrinkingTraining.batches();
        GroupOptions options = GroupOptions.defaults().withTimeout(TensorParallelShrinkingTraining.TIMEOUT);
        List<byte[]> expected = InJvmWorld.runOnEveryRank(survivors.size(), options, g -> {
            try (org.symmem4j.parallel.DeviceMesh mesh = org.symmem4j.parallel.DeviceMesh.of(g, "dp", DP - 1, "tp", TP);
                 org.symmem4j.parallel.Communicator c = org.symmem4j.parallel.Communicator.create(mesh.group("tp"))) {
                MultiLayerNetwork mine = TensorParallelShrinkingTraining.shard(mesh.coordinate("tp"), TP);
                mine.params().addi(0.5); // only the restore can make the runs agree
                org.symmem4j.dl4j.tensor.TensorParallel.attach(mine, c);
                try (org.symmem4j.dl4j.SymmemParallelWrapper w = org.symmem4j.dl4j.SymmemParallelWrapper.builder(mine)
                        .group(mesh.group("dp")).ompThreadsPerWorker(1).sharding(stage)
                        .build()) {
                    w.restoreCheckpoint(checkpointOf.get(survivors.get(g.rank())));
                    w.fit(new ListIterator(data));
                }
                return TensorParallelRestartingTraining.result(mine);
            }
        });
        for (int i = 0; i < survivors.size(); i++) {
            int rank = survivors.get(i);
            byte[] found = Files.readAllBytes(out.resolve("rank-" + rank + ".bin"));
            assertArrayEquals(expected.get(i), found, "world rank " + rank + ": its shard bitwise as a dp 2 x tp 2"
                    + " " + stage + " run resumed from its checkpoint: " + log);
        }
        for (int g : gone) {
            assertTrue(!Files.exists(out.resolve("rank-" + g + ".bin")), log);
        }
        ShrinkAfterKillTest.assertNoSharedMemoryLeft(r.out(), log, ranks, gone);
    }
}
