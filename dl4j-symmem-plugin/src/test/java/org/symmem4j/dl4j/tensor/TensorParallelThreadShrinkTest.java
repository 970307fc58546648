package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.ReplicaLostException;
import org.symmem4j.dl4j.ShrinkReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.WorkerFailure;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.RankOutcomes;

/**
 * In-place shrink of a {@code dp x tp} mesh whose ranks are threads of one JVM ({@link InJvmWorld#createShrinking}):
 * six rank threads, {@code dp 3 x tp 2}, each training its tp shard with a wrapper over {@code group(mesh, "dp")} and
 * {@link WorkerFailure#SHRINK}. One rank's worker thread dies in step {@value #FAILED_STEP} (its batch throws when read
 * on a worker thread: the thread-mode shrink tests' fault), so its rank's task ends with that failure and the world
 * names it dead; its tp peer leaves ({@link ReplicaLostException}); the other four ranks shrink the mesh to
 * {@code dp 2 x tp 2}, redo the failed step and finish. Each survivor's shard (parameters, updater state, counters)
 * equals, bitwise, plain {@code dp x tp} as threads: {@code dp 3} for the steps before the failed one, then {@code dp 2}
 * over the surviving ranks' shards from the failed step's first batch on.
 */
class TensorParallelThreadShrinkTest {

    static final int DP = 3;
    static final int TP = 2;
    static final int FAILED_STEP = 2; // steps 0, 1 done by three replicas; step 2 fails and is redone by two
    static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));

    /** A batch whose first read on a wrapper's worker thread throws: that worker's step fails, its rank's fit too. */
    static final class FailsOnAWorker extends DataSet {
        private final AtomicBoolean armed = new AtomicBoolean(true);
        volatile long failedNanos;

        FailsOnAWorker(DataSet data) {
            super(data.getFeatures(), data.getLabels());
        }

        @Override
        public INDArray getFeatures() {
            if (Thread.currentThread().getName().startsWith("symmem4j-worker-") && armed.compareAndSet(true, false)) {
                failedNanos = System.nanoTime();
                throw new IllegalStateException("injected: the worker thread dies");
            }
            return super.getFeatures();
        }
    }

    /** How a rank's fit ended: a survivor's shrink reports and shard, or a leaving rank's message (shard null). */
    record End(String outcome, ShrinkReport report, Shard shard) {
    }

    /** A rank's shard as raw bits: parameters, then updater state, then iteration and epoch counts. */
    record Shard(float[] params, float[] state, int iterations, int epochs) {
        static Shard of(MultiLayerNetwork net) {
            return new Shard(net.params().dup().data().asFloat(), net.getUpdater().getStateViewArray().dup().data()
                    .asFloat(), net.getIterationCount(), net.getEpochCount());
        }
    }

    @ParameterizedTest(name = "world rank {0} dies")
    @CsvSource({"3", "0"})
    void theDeadReplicaLeavesWholeAndTheSurvivorsEndBitwiseAsDpByTpOnThemFromTheFailedStep(int dies) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.FLOAT, 0);
        List<DataSet> data = TensorParallelTest.batches(DataType.FLOAT, 24, 8);
        int ranks = DP * TP;
        int lostReplica = dies / TP;
        // world rank d * TP + t trains batch s * DP + d of step s: the dying rank's batch of the failed step throws
        List<DataSet> faulty = new ArrayList<>(data);
        int batch = FAILED_STEP * DP + lostReplica;
        FailsOnAWorker fault = new FailsOnAWorker(data.get(batch));
        faulty.set(batch, fault);
        RankOutcomes<End> ends;
        try (InJvmWorld world = InJvmWorld.createShrinking(ranks, OPTIONS)) {
            ends = InJvmWorld.runOnEveryRankSurviving(world, group -> {
                try (DeviceMesh mesh = DeviceMesh.of(group, "dp", DP, "tp", TP);
                     Communicator c = Communicator.create(mesh.group("tp"))) {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, mesh.coordinate("tp"), TP, 0, 2);
                    TensorParallel.attach(mine, c);
                    try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(mine).group(mesh, "dp")
                            .ompThreadsPerWorker(1).onWorkerFailure(WorkerFailure.SHRINK).build()) {
                        try {
                            wrapper.fit(new BatchListIterator(group.rank() == dies ? faulty : data));
                        } catch (ReplicaLostException lost) {
                            // its task ends normally: the world does not count it dead
                            return new End("left: " + lost.getMessage(), null, null);
                        }
                        List<ShrinkReport> s = wrapper.shrinks();
                        return new End(s.size() + " shrink(s): step " + s.getFirst().step() + " dead "
                                + s.getFirst().dead() + " from " + s.getFirst().workersBefore() + " to "
                                + s.getFirst().workersAfter() + " redone " + s.getFirst().redone() + "; mesh dp "
                                + wrapper.mesh().size("dp") + " x tp " + wrapper.mesh().size("tp"), s.getFirst(),
                                Shard.of(mine));
                    }
                }
            });
        }
        assertEquals(List.of(dies), ends.dead(), "the dying rank's task failed, no other's");
        assertTrue(String.valueOf(ends.failure(dies)).contains("injected: the worker thread dies"),
                String.valueOf(ends.failure(dies)));
        long latestResume = ends.survivorResults().values().stream().filter(end -> end.report() != null)
                .mapToLong(end -> end.report().resumedNanos()).max().orElseThrow();
        System.out.printf(java.util.Locale.ROOT, "TensorParallelThreadShrinkTest: dp %d x tp %d threads, world rank %d"
                + " died in step %d; the survivors' redone step handed out %.1f ms after its worker failed (the latest of"
                + " %d)%n", DP, TP, dies, FAILED_STEP, (latestResume - fault.failedNanos) / 1e6, ranks - TP);
        List<Integer> survivors = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            // every survivor reports the agreed failed step, redone: also one the abort reached still finishing the
            // step before (past its update, in the loss merge), which goes on from the same state (SurvivorSteps)
            if (r / TP != lostReplica) {
                survivors.add(r);
                assertEquals("1 shrink(s): step " + FAILED_STEP + " dead [" + lostReplica + "] from 3 to 2 redone true;"
                        + " mesh dp 2 x tp 2", ends.result(r).outcome(), "world rank " + r);
            } else if (r != dies) {
                // the lost replica's live rank names its own step: it leaves before the survivors agree on one
                String left = ends.result(r).outcome();
                assertTrue(left.startsWith("left: ") && (left.contains("leaves at step " + FAILED_STEP)
                        || left.contains("leaves at step " + (FAILED_STEP - 1))), "world rank " + r + ": " + left);
            }
        }

        // the reference: plain dp x tp as threads, dp 3 before the failed step, then dp 2 on the survivors' shards
        int before = DP * FAILED_STEP;
        List<MultiLayerNetwork> first = InJvmWorld.runOnEveryRank(ranks, OPTIONS,
                g -> plain(g, DP, TensorParallel.shard(initial, g.rank() % TP, TP, 0, 2), data.subList(0, before)));
        List<Shard> expected = InJvmWorld.runOnEveryRank(survivors.size(), OPTIONS, g -> {
            MultiLayerNetwork mine = first.get(survivors.get(g.rank()));
            mine.setEpochCount(0); // one fit in the shrinking run
            return Shard.of(plain(g, DP - 1, mine, data.subList(before, data.size())));
        });
        for (int i = 0; i < survivors.size(); i++) {
            int r = survivors.get(i);
            Shard found = ends.result(r).shard();
            assertNotNull(found, "world rank " + r);
            assertArrayEquals(expected.get(i).params(), found.params(), "world rank " + r + ": parameters bitwise");
            assertArrayEquals(expected.get(i).state(), found.state(), "world rank " + r + ": updater state bitwise");
            assertEquals(expected.get(i).iterations(), found.iterations(), "world rank " + r);
            assertEquals(expected.get(i).epochs(), found.epochs(), "world rank " + r);
        }
        // and the shrink mattered: the survivors' shards differ from an uninterrupted dp 3 run's
        List<Shard> uninterrupted = InJvmWorld.runOnEveryRank(ranks, OPTIONS,
                g -> Shard.of(plain(g, DP, TensorParallel.shard(initial, g.rank() % TP, TP, 0, 2), data)));
        assertTrue(!java.util.Arrays.equals(uninterrupted.get(survivors.getFirst()).params(),
                ends.result(survivors.getFirst()).shard().params()));
    }

    /**
     * ZeRO stage 1, 2 or 3 over the mesh's dp axis with SHRINK: checkpoints every 2 steps (each tp rank's in its
     * {@code tp-R-of-2}); world rank 3 dies in step 5, after the checkpoint after 4 steps. The survivors go back to that
     * checkpoint, re-sliced from 3 onto 2 dp ranks (stage 3: its parameter blocks too), and redo steps 4 on; each
     * survivor's shard then equals, bitwise, a fresh {@code dp 2 x tp 2} run of the same stage resumed from its
     * checkpoint ({@code restoreCheckpoint}: it skips the 12 batches before it).
     */
    @ParameterizedTest(name = "stage {0}")
    @CsvSource({"OPTIMIZER_STATE", "GRADIENTS", "PARAMETERS"})
    void zeroOnTheDpAxisGoesBackToTheTpShardsCheckpointReslicedOntoTheSurvivors(org.symmem4j.dl4j.ZeroStage stage,
            @org.junit.jupiter.api.io.TempDir java.nio.file.Path root) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.FLOAT, 0);
        List<DataSet> data = TensorParallelTest.batches(DataType.FLOAT, 24, 8);
        int ranks = DP * TP;
        int dies = 3;
        int failed = 5;
        List<DataSet> faulty = new ArrayList<>(data);
        int batch = failed * DP + dies / TP;
        faulty.set(batch, new FailsOnAWorker(data.get(batch)));
        RankOutcomes<End> ends;
        try (InJvmWorld world = InJvmWorld.createShrinking(ranks, OPTIONS)) {
            ends = InJvmWorld.runOnEveryRankSurviving(world, group -> {
                try (DeviceMesh mesh = DeviceMesh.of(group, "dp", DP, "tp", TP);
                     Communicator c = Communicator.create(mesh.group("tp"))) {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, mesh.coordinate("tp"), TP, 0, 2);
                    TensorParallel.attach(mine, c);
                    try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(mine).group(mesh, "dp")
                            .ompThreadsPerWorker(1).sharding(stage).checkpointEvery(2, root).keepCheckpoints(20)
                            .onWorkerFailure(WorkerFailure.SHRINK).build()) {
                        try {
                            wrapper.fit(new BatchListIterator(group.rank() == dies ? faulty : data));
                        } catch (ReplicaLostException lost) {
                            return new End("left: " + lost.getMessage(), null, null);
                        }
                        assertEquals(1, wrapper.shrinks().size());
                        return new End("shrunk", wrapper.shrinks().getFirst(), Shard.of(mine));
                    }
                }
            });
        }
        assertEquals(List.of(dies), ends.dead());
        assertTrue(ends.result(2).outcome().startsWith("left: "), ends.result(2).outcome());
        List<Integer> survivors = List.of(0, 1, 4, 5);
        // the agreed failed step: the first step not every survivor completed (SurvivorSteps), the same on every one.
        // Step 5, or 4 where the abort reached a survivor still in step 4: world ranks 0, 2 and 4 share no dp collective
        // with rank 3, which can finish step 4 and die at step 5's start while they still sync step 4's gradients (seen
        // in a clean clone under load). Either way the survivors go back to the checkpoint after 4 steps (taken before
        // step 4) and end bitwise as below
        assertNotNull(ends.result(survivors.getFirst()).report(), "world rank " + survivors.getFirst() + " finished");
        long agreed = ends.result(survivors.getFirst()).report().step();
        assertTrue(agreed == failed || agreed == failed - 1, "the agreed failed step " + agreed + ", expected " + failed
                + " or " + (failed - 1));
        for (int r : survivors) {
            ShrinkReport s = ends.result(r).report();
            assertNotNull(s, "world rank " + r + " finished");
            assertEquals(agreed, s.step(), "world rank " + r + ": the agreed failed step, the same on every survivor");
            assertEquals(List.of(1), s.dead(), "the lost replica");
            assertEquals(4, s.resumedAt(), "back to the checkpoint after 4 steps");
            assertEquals(org.symmem4j.dl4j.train.CheckpointDirectory.stepDir(root.resolve("tp-" + (r % TP) + "-of-" + TP),
                    4), s.checkpoint(), "world rank " + r + ": its tp shard's checkpoint");
        }
        List<Shard> expected = InJvmWorld.runOnEveryRank(survivors.size(), OPTIONS, g -> {
            try (DeviceMesh mesh = DeviceMesh.of(g, "dp", DP - 1, "tp", TP);
                 Communicator c = Communicator.create(mesh.group("tp"))) {
                MultiLayerNetwork mine = TensorParallel.shard(initial, mesh.coordinate("tp"), TP, 0, 2);
                mine.params().addi(0.5); // only the restore can make the runs agree
                TensorParallel.attach(mine, c);
                try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(mesh.group("dp"))
                        .ompThreadsPerWorker(1).sharding(stage).build()) {
                    w.restoreCheckpoint(ends.result(survivors.get(g.rank())).report().checkpoint());
                    w.fit(new BatchListIterator(data));
                }
                return Shard.of(mine);
            }
        });
        for (int i = 0; i < survivors.size(); i++) {
            int r = survivors.get(i);
            Shard found = ends.result(r).shard();
            assertArrayEquals(expected.get(i).params(), found.params(), "world rank " + r + ": parameters");
            assertArrayEquals(expected.get(i).state(), found.state(), "world rank " + r + ": updater state");
            assertEquals(expected.get(i).iterations(), found.iterations(), "world rank " + r);
            assertEquals(expected.get(i).epochs(), found.epochs(), "world rank " + r);
        }
    }

    /**
     * Hybrid sharding on the mesh's dp axis: a shrink would drop a tensor-parallel replica and a shard group at once,
     * which the wrapper does not do: refused at {@code build()} on every rank, with the fix.
     */
    @org.junit.jupiter.api.Test
    void hybridShardingOnTheMeshsDpAxisIsRefusedWithSHRINK() {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.FLOAT, 0);
        try (InJvmWorld world = InJvmWorld.createShrinking(4, OPTIONS)) {
            List<String> refusals = InJvmWorld.runOnEveryRank(world, group -> {
                try (DeviceMesh mesh = DeviceMesh.of(group, "dp", 2, "tp", TP);
                     Communicator c = Communicator.create(mesh.group("tp"))) {
                    MultiLayerNetwork mine = TensorParallel.shard(initial, mesh.coordinate("tp"), TP, 0, 2);
                    TensorParallel.attach(mine, c);
                    return assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(mine)
                            .group(mesh, "dp").ompThreadsPerWorker(1).sharding(org.symmem4j.dl4j.ZeroStage.PARAMETERS)
                            .shardGroupSize(2).onWorkerFailure(WorkerFailure.SHRINK).build()).getMessage();
                }
            });
            for (String m : refusals) {
                assertTrue(m.contains("(hybrid sharding) on a dp x tp mesh") && m.contains("fix:"), m);
            }
        }
    }

    /** Plain {@code dp x tp} (no SHRINK) of {@code mine}, this rank's shard, attached here, over {@code data}. */
    private static MultiLayerNetwork plain(Group world, int dp, MultiLayerNetwork mine, List<DataSet> data) {
        try (DeviceMesh mesh = DeviceMesh.of(world, "dp", dp, "tp", TP);
             Communicator c = Communicator.create(mesh.group("tp"))) {
            TensorParallel.attach(mine, c);
            try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(mine).group(mesh.group("dp"))
                    .ompThreadsPerWorker(1).build()) {
                wrapper.fit(new BatchListIterator(data));
            }
            return mine;
        }
    }
}
