package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * In-place shrink of hybrid sharding ({@link WorkerFailure#SHRINK} with {@code shardGroupSize}, HSDP), worker threads
 * of one JVM and group mode on thread ranks of a shrinking world, no checkpoint: a dead worker's shard group leaves whole, the other groups go on from their own copy as HSDP
 * with one replica fewer, redoing the failed step. The result equals, bitwise, HSDP of the old shape for the steps
 * before the failed one and then HSDP of the survivors' shape from the failed step's first batch on (the reference
 * {@link ShrinkTest} builds for plain data parallelism). The model has three updater blocks (Adam, Nesterov, SGD).
 */
class HybridShrinkTest {

    /** Two shards per group throughout. */
    private static final int S = 2;

    private static MultiLayerNetwork start() {
        return Nets.mlp("mixed", DataType.DOUBLE, Nets.HIDDEN, 0);
    }

    private static SymmemParallelWrapper.Builder hsdp(MultiLayerNetwork model, int workers) {
        return SymmemParallelWrapper.builder(model).workers(workers).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(S);
    }

    /** HSDP on {@code shapes[i]} workers over the batches from {@code firstBatch[i]} on, one fit per shape. */
    private static MultiLayerNetwork reference(List<DataSet> data, int[] shapes, int[] firstBatch) {
        return reference(start(), data, shapes, firstBatch);
    }

    /** As {@link #reference(List, int[], int[])}, from {@code ref} (trained in place). */
    private static MultiLayerNetwork reference(MultiLayerNetwork ref, List<DataSet> data, int[] shapes, int[] firstBatch) {
        for (int i = 0; i < shapes.length; i++) {
            int to = i + 1 < shapes.length ? firstBatch[i + 1] : data.size();
            SymmemParallelWrapper.Builder b = shapes[i] == S // one group left: HSDP of one replica is stage 3 itself
                    ? SymmemParallelWrapper.builder(ref).workers(S).ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS)
                    : hsdp(ref, shapes[i]);
            try (SymmemParallelWrapper w = b.build()) {
                w.fit(new BatchListIterator(data.subList(firstBatch[i], to)));
            }
            ref.setEpochCount(0); // one fit in the shrinking run: the counter is not part of the arithmetic
        }
        ref.setEpochCount(1);
        return ref;
    }

    private static void assertSameState(MultiLayerNetwork expected, MultiLayerNetwork actual, String what) {
        assertTrue(ModelReplica.bitwiseEqual(expected.params(), actual.params()), what + ": parameters differ by "
                + Nets.maxRelativeDifference(actual.params(), expected.params()));
        assertTrue(ModelReplica.bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), what + ": updater state");
        assertEquals(expected.getIterationCount(), actual.getIterationCount(), what + ": iterations");
        assertEquals(expected.getEpochCount(), actual.getEpochCount(), what + ": epochs");
    }

    /** Every survivor's blocks are the gathered model's, bitwise: the replicas of a block did not drift apart. */
    private static void assertReplicasAgree(SymmemParallelWrapper wrapper, MultiLayerNetwork net) {
        List<FullySharded> shards = wrapper.fullySharded();
        for (int r = 0; r < shards.size(); r++) {
            assertTrue(shards.get(r).ownBlocksMatch(net.params()), "survivor " + r + "'s blocks differ from the model");
        }
    }

    @ParameterizedTest(name = "dead worker {0} of 3 x 2")
    @ValueSource(ints = {0, 1, 5}) // rank 0, the first group's other worker, the last group's last worker
    void theDeadWorkersShardGroupLeavesAndTheOthersGoOnAsHsdpWithOneReplicaFewerBitwise(int dead) {
        // 30 batches: steps 0 and 1 on 3 x 2 workers (batches 0-11); step 2 deals 12-17 and worker `dead` fails on its
        // batch; the 2 x 2 survivors redo step 2 from batch 12 on: steps 2-5 of four batches, step 6 of two
        List<DataSet> data = Nets.batches(71 + dead, 30, 6, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        ShrinkTest.FailsOnceOnAWorker fault = new ShrinkTest.FailsOnceOnAWorker(data.get(12 + dead),
                () -> new IllegalStateException("injected fault"));
        faulty.set(12 + dead, fault);
        MultiLayerNetwork net = start();
        List<Long> reported = new ArrayList<>();
        ShrinkReport s;
        try (SymmemParallelWrapper wrapper = hsdp(net, 6).onWorkerFailure(WorkerFailure.SHRINK)
                .stepListener(r -> reported.add(r.step())).build()) {
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(4, wrapper.workers());
            assertEquals(1, wrapper.shrinks().size());
            s = wrapper.shrinks().getFirst();
            assertEquals(4, wrapper.workerMemory().size(), "the survivors' shards");
            assertReplicasAgree(wrapper, net);
        }
        assertEquals(2, s.step());
        assertEquals(List.of(dead), s.dead());
        assertEquals(6, s.workersBefore());
        assertEquals(4, s.workersAfter(), "the dead worker's shard group of " + S + " left whole");
        assertTrue(s.redone());
        assertEquals(2, s.resumedAt(), "the failed step, from the survivors' own copy");
        assertNull(s.checkpoint(), "no checkpoint");
        assertTrue(s.failure().contains("injected fault"), s.failure());
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L), reported);
        System.out.printf(Locale.ROOT, "hsdp shrink 3x2->2x2, worker %d dead: survivors' next step %.1f ms after the"
                + " worker failed (rebuild %.1f ms)%n", dead, (s.resumedNanos() - fault.failedNanos) / 1e6,
                s.rebuildMillis());

        MultiLayerNetwork ref = reference(data, new int[] {6, 4}, new int[] {0, 12});
        assertSameState(ref, net, "3 x 2 shrunk to 2 x 2 after worker " + dead + " died");
        // and the shrink mattered: HSDP 3 x 2 throughout (no death) ends elsewhere
        MultiLayerNetwork whole = reference(data, new int[] {6}, new int[] {0});
        assertFalse(ModelReplica.bitwiseEqual(whole.params(), net.params()));
    }

    /**
     * Group mode, one worker per rank, the ranks threads of a world made by {@code InJvmWorld.createShrinking}: rank
     * {@code dead}'s worker fails in step 2, its task ends with the failure and the world names it dead; the other rank
     * of its shard group leaves with {@link ReplicaLostException}, and the four survivors end bitwise as thread mode's
     * reference (HSDP 3 x 2 for steps 0-1, then 2 x 2 from batch 12 on).
     */
    @ParameterizedTest(name = "group mode: dead rank {0} of 3 x 2")
    @ValueSource(ints = {0, 5})
    void inGroupModeTheDeadRanksShardGroupLeavesAndTheSurvivorsEndBitwiseAsHsdpOnThem(int dead) {
        List<DataSet> data = Nets.batches(91 + dead, 30, 6, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        faulty.set(12 + dead, new ShrinkTest.FailsOnceOnAWorker(data.get(12 + dead),
                () -> new IllegalStateException("injected fault")));
        AtomicReferenceArray<MultiLayerNetwork> ends = new AtomicReferenceArray<>(6);
        AtomicReferenceArray<String> left = new AtomicReferenceArray<>(6);
        try (InJvmWorld world = InJvmWorld.createShrinking(6, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)))) {
            SymmemException e = assertThrows(SymmemException.class, () -> InJvmWorld.runOnEveryRank(world, group -> {
                MultiLayerNetwork mine = start();
                try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(mine).group(group)
                        .ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS).shardGroupSize(S)
                        .onWorkerFailure(WorkerFailure.SHRINK).build()) {
                    try {
                        wrapper.fit(new BatchListIterator(faulty));
                    } catch (ReplicaLostException lost) {
                        left.set(group.rank(), lost.getMessage());
                        return null; // its shard group lost a rank: it leaves
                    }
                    assertEquals(4, wrapper.workers());
                    ShrinkReport s = wrapper.shrinks().getFirst();
                    // every survivor reports the step they agreed on, also one the abort reached at step 1's loss sum
                    // (after its update): step 2, redone (SurvivorSteps)
                    assertTrue(s.step() == 2 && s.redone() && s.resumedAt() == 2,
                            "rank " + group.rank() + ": failed step " + s.step() + " redone " + s.redone());
                    assertEquals(List.of(dead), s.dead());
                    assertEquals(List.of(6, 4), List.of(s.workersBefore(), s.workersAfter()));
                }
                ends.set(group.rank(), mine);
                return null;
            }));
            assertTrue(e.getMessage().startsWith("rank " + dead + " failed")
                    && String.valueOf(e.getCause()).contains("injected fault"), e.toString());
        }
        int partner = dead ^ 1; // the other rank of its shard group
        assertTrue(left.get(partner) != null && left.get(partner).contains("leaves at step"), String.valueOf(left));
        MultiLayerNetwork ref = reference(data, new int[] {6, 4}, new int[] {0, 12});
        for (int r = 0; r < 6; r++) {
            if (r == dead || r == partner) {
                assertNull(ends.get(r), "rank " + r + " does not go on");
            } else {
                assertSameState(ref, ends.get(r), "group mode, rank " + r + " after rank " + dead + " died");
            }
        }
    }

    /** The step at whose update {@link StallingAdam} acts: step 2, handed out at iteration 2. */
    private static final int STALL_AT = 2;

    /** What {@link StallingAdam} does at iteration {@link #STALL_AT} in the faulty run; null otherwise. */
    private static volatile Stall stall;

    /**
     * The survivors split between the step's start and end, made deterministic: at their update of step 2 (every sum
     * done), old rank 0 waits until the two {@code ahead} ranks (group mode: shard group 1's, 2 and 3) start theirs,
     * then fails (it is the dead one); the other two of ranks 2..5 (group mode: 4 and 5) wait for that and throw a {@link PeerTimeoutException} before changing
     * anything, as when the abort cuts their group's last sum short (the state a group the abort reached there holds:
     * the step's start, a kept copy of its blocks). Rank 1 goes on and leaves with its group. Each rank acts once.
     */
    private record Stall(java.util.concurrent.atomic.AtomicBoolean[] armed, java.util.concurrent.CountDownLatch aheadUpdates,
                         java.util.concurrent.CountDownLatch deadFailed, java.util.concurrent.atomic.AtomicInteger stopped,
                         List<Integer> ahead) {

        /** Group 1 (ranks 2, 3) ahead, group 2 (4, 5) stopped. */
        Stall() {
            this(2, 3);
        }

        /** Ranks {@code a} and {@code b} ahead (their update runs), the other two survivors of 2..5 stopped. */
        Stall(int a, int b) {
            this(java.util.stream.IntStream.range(0, 6).mapToObj(r -> new java.util.concurrent.atomic.AtomicBoolean(true))
                    .toArray(java.util.concurrent.atomic.AtomicBoolean[]::new), new java.util.concurrent.CountDownLatch(2),
                    new java.util.concurrent.CountDownLatch(1), new java.util.concurrent.atomic.AtomicInteger(),
                    List.of(a, b));
        }

        void act() {
            String name = Thread.currentThread().getName();
            if (!name.startsWith("symmem4j-worker-")) {
                return;
            }
            int r = Integer.parseInt(name.substring("symmem4j-worker-".length()));
            if (r >= armed.length || !armed[r].compareAndSet(true, false)) {
                return; // acted already (the survivors' new workers, renumbered, redo step 2)
            }
            switch (r) {
                case 0 -> {
                    await(aheadUpdates);
                    deadFailed.countDown();
                    throw new IllegalStateException("injected fault in rank 0's update");
                }
                case 2, 3, 4, 5 -> {
                    if (ahead.contains(r)) {
                        aheadUpdates.countDown(); // its update goes on: no collective inside or after it
                        return;
                    }
                    await(deadFailed);
                    stopped.incrementAndGet();
                    throw new PeerTimeoutException("injected: rank " + r + "'s sum over the shard groups aborted", r,
                            List.of(0), "hsdp sum over the shard groups", PeerTimeoutException.Reason.PEER_ABORTED,
                            Duration.ofSeconds(60));
                }
                default -> {
                    // rank 1: goes on, fails in the loss sum and leaves with its shard group
                }
            }
        }

        private static void await(java.util.concurrent.CountDownLatch latch) {
            try {
                if (!latch.await(60, java.util.concurrent.TimeUnit.SECONDS)) {
                    throw new IllegalStateException("the test's stall waited 60 s for a peer's update");
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }

    /** Adam (learning rate 0.01) whose updaters call {@link #stall} at iteration {@link #STALL_AT}; the same bits. */
    public static final class StallingAdam extends org.nd4j.linalg.learning.config.Adam {
        public StallingAdam() {
            super(0.01);
        }

        @Override
        public StallingAdam clone() {
            return new StallingAdam();
        }

        @Override
        public org.nd4j.linalg.learning.GradientUpdater instantiate(INDArray viewArray, boolean initialize) {
            return new Stalling(super.instantiate(viewArray, initialize));
        }

        @Override
        public org.nd4j.linalg.learning.GradientUpdater instantiate(java.util.Map<String, INDArray> state,
                                                                     boolean initialize) {
            return new Stalling(super.instantiate(state, initialize));
        }

        private record Stalling(org.nd4j.linalg.learning.GradientUpdater<?> inner)
                implements org.nd4j.linalg.learning.GradientUpdater<org.nd4j.linalg.learning.config.IUpdater> {
            @Override
            public org.nd4j.linalg.learning.config.IUpdater getConfig() {
                return inner.getConfig();
            }

            @Override
            public void setState(java.util.Map<String, INDArray> state, boolean initialize) {
                inner.setState(state, initialize);
            }

            @Override
            public java.util.Map<String, INDArray> getState() {
                return inner.getState();
            }

            @Override
            public void setStateViewArray(INDArray viewArray, long[] gradientShape, char order, boolean initialize) {
                inner.setStateViewArray(viewArray, gradientShape, order, initialize);
            }

            @Override
            public void applyUpdater(INDArray gradient, int iteration, int epoch) {
                Stall s = stall;
                if (s != null && iteration == STALL_AT) {
                    s.act();
                }
                inner.applyUpdater(gradient, iteration, epoch);
            }
        }
    }

    /**
     * Group mode, the survivors split between the failed step's start and end (issue 32: go on from the last step
     * every survivor completed): rank 0 dies in step 2 after every sum of the step, the ranks of shard group 1 (2, 3)
     * have run their update (iteration 3) while those of shard group 2 (4, 5) were stopped before theirs (iteration 2)
     * ({@link Stall}). The survivors agree on iteration 2 and step 2 ({@link SurvivorSteps}); ranks 2 and 3 go back to
     * their own copy of step 2's start ({@link StepStart}) and all four redo step 2, ending bitwise as HSDP 3 x 2 for
     * steps 0-1, then 2 x 2 from batch 12. Before, the fit failed: "the survivors of hybrid sharding hold different
     * steps".
     */
    @Test
    void inGroupModeASurvivorWhoseUpdateRanGoesBackToTheStepStartAndAllEndBitwiseAsHsdpOnThem() {
        List<DataSet> data = Nets.batches(97, 30, 6, DataType.DOUBLE);
        AtomicReferenceArray<MultiLayerNetwork> ends = new AtomicReferenceArray<>(6);
        AtomicReferenceArray<String> left = new AtomicReferenceArray<>(6);
        AtomicReferenceArray<String> failures = new AtomicReferenceArray<>(6);
        Stall faults = new Stall();
        stall = faults;
        try (InJvmWorld world = InJvmWorld.createShrinking(6, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)))) {
            SymmemException e = assertThrows(SymmemException.class, () -> InJvmWorld.runOnEveryRank(world, group -> {
                MultiLayerNetwork mine = Nets.mlp(new StallingAdam(), DataType.DOUBLE);
                try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(mine).group(group)
                        .ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS).shardGroupSize(S)
                        .onWorkerFailure(WorkerFailure.SHRINK).build()) {
                    try {
                        wrapper.fit(new BatchListIterator(data));
                    } catch (ReplicaLostException lost) {
                        left.set(group.rank(), lost.getMessage());
                        return null;
                    } catch (RuntimeException failed) {
                        failures.set(group.rank(), failed.toString());
                        throw failed;
                    }
                    assertEquals(4, wrapper.workers());
                    ShrinkReport s = wrapper.shrinks().getFirst();
                    assertEquals(List.of(2L, 2L), List.of(s.step(), s.resumedAt()), "rank " + group.rank());
                    assertTrue(s.redone(), "rank " + group.rank());
                    assertEquals(List.of(0), s.dead());
                    assertEquals(List.of(6, 4), List.of(s.workersBefore(), s.workersAfter()));
                }
                ends.set(group.rank(), mine);
                return null;
            }));
            assertTrue(e.getMessage().startsWith("rank 0 failed")
                    && String.valueOf(e.getCause()).contains("injected fault in rank 0's update"), e.toString());
        } finally {
            stall = null;
        }
        assertEquals(0, faults.aheadUpdates().getCount(), "ranks 2 and 3 ran their update of step 2");
        assertEquals(2, faults.stopped().get(), "ranks 4 and 5 were stopped before theirs");
        assertTrue(left.get(1) != null && left.get(1).contains("leaves at step"), String.valueOf(left));
        MultiLayerNetwork ref = reference(Nets.mlp(new StallingAdam(), DataType.DOUBLE), data, new int[] {6, 4},
                new int[] {0, 12});
        for (int r = 2; r < 6; r++) {
            assertNull(failures.get(r), "survivor " + r + "'s fit failed");
            assertSameState(ref, ends.get(r), "group mode, rank " + r + " after rank 0 died past group 1's updates");
        }
    }

    /**
     * Threads, the survivors split inside each surviving shard group (issue 32): worker 0 dies in its update of step 2
     * after workers 2 and 4 ran theirs (iteration 3), while 3 and 5 were stopped before theirs (iteration 2)
     * ({@link Stall}): neither surviving group holds step 2's start (nor its end) on both its workers. The survivors go
     * on from iteration 2: group 1's worker 3 gives the blocks it kept, worker 2 its copy of the step's start
     * ({@link StepStart}); the four redo step 2 and end bitwise as HSDP 3 x 2 for steps 0-1, then 2 x 2 from batch 12.
     * Before, the fit failed: "no surviving shard group holds the last step every survivor completed".
     */
    @Test
    void threadsSplitInsideEverySurvivingGroupGoBackToTheirStepStartAndEndBitwiseAsHsdpOnThem() {
        List<DataSet> data = Nets.batches(98, 30, 6, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(new StallingAdam(), DataType.DOUBLE);
        Stall faults = new Stall(2, 4);
        stall = faults;
        ShrinkReport s;
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(6).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(S).onWorkerFailure(WorkerFailure.SHRINK).build()) {
            wrapper.fit(new BatchListIterator(data));
            assertEquals(4, wrapper.workers());
            assertEquals(1, wrapper.shrinks().size());
            s = wrapper.shrinks().getFirst();
            assertReplicasAgree(wrapper, net);
        } finally {
            stall = null;
        }
        assertEquals(0, faults.aheadUpdates().getCount(), "workers 2 and 4 ran their update of step 2");
        assertEquals(2, faults.stopped().get(), "workers 3 and 5 were stopped before theirs");
        assertEquals(List.of(2L, 2L), List.of(s.step(), s.resumedAt()));
        assertTrue(s.redone());
        assertEquals(List.of(0), s.dead());
        assertEquals(List.of(6, 4), List.of(s.workersBefore(), s.workersAfter()));
        assertTrue(s.failure().contains("injected fault in rank 0's update"), s.failure());
        MultiLayerNetwork ref = reference(Nets.mlp(new StallingAdam(), DataType.DOUBLE), data, new int[] {6, 4},
                new int[] {0, 12});
        assertSameState(ref, net, "threads, worker 0 dead with workers 2 and 4 past their update of step 2");
    }

    @Test
    void aSecondDeathShrinksAgainAndADeathInTheLastReplicaGroupFailsTheFitNamingTheFix() {
        // 3 x 2: worker 3 (group 1) fails at step 1 (batches 6-11) -> 2 x 2 redo step 1 from batch 6; their step 3
        // deals 14-17 and their worker 0 (old worker 0, group 0) fails -> 1 x 2 redo step 3 from batch 14; their
        // step 5 deals 18, 19 and their worker 1 fails: no replica group is left to go on from
        List<DataSet> data = Nets.batches(81, 24, 6, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        faulty.set(9, new ShrinkTest.FailsOnceOnAWorker(data.get(9), () -> new IllegalStateException("first")));
        faulty.set(14, new ShrinkTest.FailsOnceOnAWorker(data.get(14), () -> new IllegalStateException("second")));
        List<DataSet> third = new ArrayList<>(data); // faults of their own: each fails once
        third.set(9, new ShrinkTest.FailsOnceOnAWorker(data.get(9), () -> new IllegalStateException("first")));
        third.set(14, new ShrinkTest.FailsOnceOnAWorker(data.get(14), () -> new IllegalStateException("second")));
        third.set(19, new ShrinkTest.FailsOnceOnAWorker(data.get(19), () -> new IllegalStateException("third")));

        MultiLayerNetwork net = start();
        List<ShrinkReport> shrinks;
        try (SymmemParallelWrapper wrapper = hsdp(net, 6).onWorkerFailure(WorkerFailure.SHRINK).build()) {
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(2, wrapper.workers());
            shrinks = wrapper.shrinks();
        }
        assertEquals(2, shrinks.size(), shrinks.toString());
        assertEquals(List.of(3), shrinks.get(0).dead());
        assertEquals(1, shrinks.get(0).step());
        assertEquals(List.of(6, 4), List.of(shrinks.get(0).workersBefore(), shrinks.get(0).workersAfter()));
        assertEquals(List.of(0), shrinks.get(1).dead());
        assertEquals(3, shrinks.get(1).step());
        assertEquals(List.of(4, 2), List.of(shrinks.get(1).workersBefore(), shrinks.get(1).workersAfter()));
        assertSameState(reference(data, new int[] {6, 4, 2}, new int[] {0, 6, 14}), net, "3 x 2 -> 2 x 2 -> 1 x 2");

        MultiLayerNetwork again = start();
        INDArray before = again.params().dup();
        try (SymmemParallelWrapper wrapper = hsdp(again, 6).onWorkerFailure(WorkerFailure.SHRINK).build()) {
            DataParallelTrainingException e = assertThrows(DataParallelTrainingException.class,
                    () -> wrapper.fit(new BatchListIterator(third)));
            assertTrue(e.getMessage().contains("only one replica group was left")
                    && e.getMessage().contains("no whole copy of the model survives")
                    && e.getMessage().contains("fix:") && e.getMessage().contains("--max-restarts"), e.getMessage());
            assertEquals(5, e.step());
            assertEquals(1, e.worker());
            assertTrue(ModelReplica.bitwiseEqual(before, again.params()), "a failed fit leaves the model unchanged");
            assertEquals(0, again.getIterationCount());
        }
    }

    @Test
    void fewerThanMinWorkersAfterTheGroupLeavesFailsTheFit() {
        List<DataSet> data = new ArrayList<>(Nets.batches(82, 12, 6, DataType.DOUBLE));
        data.set(7, new ShrinkTest.FailsOnceOnAWorker(data.get(7), () -> new IllegalStateException("injected fault")));
        MultiLayerNetwork net = start();
        try (SymmemParallelWrapper wrapper = hsdp(net, 6).onWorkerFailure(WorkerFailure.SHRINK).minWorkers(5).build()) {
            DataParallelTrainingException e = assertThrows(DataParallelTrainingException.class,
                    () -> wrapper.fit(new BatchListIterator(data)));
            assertTrue(e.getMessage().contains("leaving 4 of 6 workers") && e.getMessage().contains("minWorkers=5"),
                    e.getMessage());
        }
    }

    @Test
    void buildRefusesWhatTheHybridShrinkCannotDo() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        // no checkpoint needed: every other shard group holds a whole copy
        try (SymmemParallelWrapper ok = SymmemParallelWrapper.builder(net).workers(4).sharding(ZeroStage.PARAMETERS)
                .shardGroupSize(2).onWorkerFailure(WorkerFailure.SHRINK).build()) {
            assertEquals(4, ok.workers());
        }
        IllegalArgumentException one = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net).workers(4).sharding(ZeroStage.PARAMETERS).shardGroupSize(4)
                .onWorkerFailure(WorkerFailure.SHRINK).build());
        assertTrue(one.getMessage().contains("one replica group") && one.getMessage().contains("fix:"), one.getMessage());
        IllegalArgumentException hollow = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net.getLayerWiseConfigurations()).workers(4).sharding(ZeroStage.PARAMETERS).shardGroupSize(2)
                .onWorkerFailure(WorkerFailure.SHRINK).build());
        assertTrue(hollow.getMessage().contains("started from its configuration")
                && hollow.getMessage().contains("fix:"), hollow.getMessage());
        // group mode on a world that names no dead (not InJvmWorld.createShrinking, no launcher): refused on every rank
        List<String> refusals = InJvmWorld.runOnEveryRank(4, GroupOptions.defaults(), group -> assertThrows(
                IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(Nets.mlp(Nets.updater("adam"),
                        DataType.FLOAT)).group(group).sharding(ZeroStage.PARAMETERS).shardGroupSize(2)
                        .onWorkerFailure(WorkerFailure.SHRINK).build()).getMessage());
        for (String m : refusals) {
            assertTrue(m.contains("which cannot shrink in place") && m.contains("fix:"), m);
        }
    }
}
