package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * In-place shrink with ZeRO sharding ({@link WorkerFailure#SHRINK}, stages 1, 2 and 3), threads of one JVM: the dead
 * worker's shard of the updater state (stage 3: and of the parameters) is lost with it, so the survivors go back to
 * the newest complete periodic checkpoint of the fit, re-sliced from 3 onto 2 workers, and redo the steps since it
 * with the failed step's batches. The result equals, bitwise, a fresh 2-worker run resumed from that checkpoint (and,
 * stages 1 and 2, one started from its consolidated {@code model.zip} on the batches after it, the reference the
 * re-sharding tests use). Before the fit's first checkpoint they go back to the fit's start. The model has three
 * updater blocks (Adam, Nesterov, SGD), so shard boundaries fall inside blocks for 3 and for 2 workers.
 */
class ShardedShrinkTest {

    /** Batches per epoch: 8 steps of 3 workers, 12 of 2. */
    private static final int BATCHES = 24;

    @TempDir
    Path root;

    private static MultiLayerNetwork start() {
        return Nets.mlp("mixed", DataType.DOUBLE, Nets.HIDDEN, 0);
    }

    private static SymmemParallelWrapper.Builder builder(MultiLayerNetwork model, int workers, ZeroStage stage) {
        return SymmemParallelWrapper.builder(model).workers(workers).ompThreadsPerWorker(1).sharding(stage);
    }

    private static void assertSameState(MultiLayerNetwork expected, MultiLayerNetwork actual, String what) {
        assertTrue(ModelReplica.bitwiseEqual(expected.params(), actual.params()), what + ": parameters differ by "
                + Nets.maxRelativeDifference(actual.params(), expected.params()));
        assertTrue(ModelReplica.bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), what + ": updater state");
        assertEquals(expected.getIterationCount(), actual.getIterationCount(), what + ": iterations");
        assertEquals(expected.getEpochCount(), actual.getEpochCount(), what + ": epochs");
    }

    @ParameterizedTest(name = "{0}: 3 -> 2 workers")
    @EnumSource(ZeroStage.class)
    void theSurvivorsGoBackToTheNewestCheckpointReslicedAndEqualARunResumedFromItOnTwoWorkers(ZeroStage stage)
            throws IOException {
        List<DataSet> data = Nets.batches(51, BATCHES, 6, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        // checkpoints after 2 and 4 steps (batches 0-11); step 4 deals 12-14 and completes; step 5 deals 15, 16, 17:
        // worker 1 fails on batch 16, after the newest checkpoint
        faulty.set(16, new ShrinkTest.FailsOnceOnAWorker(data.get(16), () -> new IllegalStateException("injected fault")));
        MultiLayerNetwork net = start();
        Path ckpt = root.resolve("ckpt");
        List<Long> reported = new ArrayList<>();
        ShrinkReport s;
        try (SymmemParallelWrapper wrapper = builder(net, 3, stage).onWorkerFailure(WorkerFailure.SHRINK)
                .checkpointEvery(2, ckpt).keepCheckpoints(20).stepListener(r -> reported.add(r.step())).build()) {
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(2, wrapper.workers());
            assertEquals(1, wrapper.shrinks().size());
            s = wrapper.shrinks().getFirst();
            assertEquals(2, wrapper.workerMemory().size(), "the survivors' shards");
        }
        assertEquals(5, s.step());
        assertEquals(List.of(1), s.dead());
        assertEquals(3, s.workersBefore());
        assertEquals(2, s.workersAfter());
        assertTrue(s.redone());
        assertEquals(4, s.resumedAt(), "back to the checkpoint after 4 steps");
        assertEquals(2, s.redoneSteps(), "steps 4 and 5 redone");
        assertEquals(CheckpointDirectory.stepDir(ckpt, 4), s.checkpoint());
        assertTrue(s.failure().contains("injected fault"), s.failure());
        // steps 0-4 on three workers, then from step 4 on two: batches 12-23, six steps
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 4L, 5L, 6L, 7L, 8L, 9L), reported);

        CheckpointDirectory.Counters at = CheckpointDirectory.latestComplete(ckpt).orElseThrow().counters();
        assertEquals(10, at.step(), "the survivors go on checkpointing every 2 steps");
        assertEquals(2, at.ranks(), "with two shard files");

        // the reference: a fresh two-worker run resumed from that checkpoint (it skips the 12 batches before it)
        MultiLayerNetwork resumed = start();
        resumed.params().addi(0.5); // only the restore can make the runs agree
        try (SymmemParallelWrapper w = builder(resumed, 2, stage).build()) {
            w.restoreCheckpoint(s.checkpoint());
            w.fit(new BatchListIterator(data));
        }
        assertSameState(resumed, net, stage + " shrunk 3 -> 2, against a run resumed on 2 workers");
        if (stage != ZeroStage.PARAMETERS) { // and one started from its consolidated model.zip (stage 3 writes none)
            MultiLayerNetwork reference = ModelSerializer.restoreMultiLayerNetwork(
                    s.checkpoint().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
            try (SymmemParallelWrapper w = builder(reference, 2, stage).build()) {
                w.fit(new BatchListIterator(data.subList(12, BATCHES)));
            }
            assertSameState(reference, net, stage + " shrunk 3 -> 2, against its model.zip on 2 workers");
        }
        // and the rollback mattered: going on from the survivors' own state at step 5 (as plain data parallelism's
        // shrink does) trains step 4 on three workers, and ends elsewhere
        MultiLayerNetwork fromStep5 = start();
        try (SymmemParallelWrapper w = builder(fromStep5, 3, stage).build()) {
            w.fit(new BatchListIterator(data.subList(0, 15)));
        }
        fromStep5.setEpochCount(0);
        try (SymmemParallelWrapper w = builder(fromStep5, 2, stage).build()) {
            w.fit(new BatchListIterator(data.subList(15, BATCHES)));
        }
        assertFalse(ModelReplica.bitwiseEqual(fromStep5.params(), net.params()));
    }

    @Test
    void aSecondDeathInTheRedoneStepsGoesBackToTheSameCheckpointAgain() throws IOException {
        List<DataSet> data = Nets.batches(54, BATCHES, 6, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        // as above, worker 1 fails on batch 16 at step 5, and the two survivors go back to the checkpoint after step 4;
        // they redo step 4 (batches 12, 13), then step 5 deals 14, 15: batch 14, read by another thread at step 4 of
        // the three workers, fails on the new worker 0, before the next checkpoint (due after 6 steps)
        faulty.set(16, new ShrinkTest.FailsOnceOnAWorker(data.get(16), () -> new IllegalStateException("first fault")));
        faulty.set(14, new ShrinkTest.FailsOnAnotherThread(data.get(14)));
        MultiLayerNetwork net = start();
        Path ckpt = root.resolve("ckpt");
        List<Long> reported = new ArrayList<>();
        List<ShrinkReport> shrinks;
        try (SymmemParallelWrapper wrapper = builder(net, 3, ZeroStage.GRADIENTS).onWorkerFailure(WorkerFailure.SHRINK)
                .checkpointEvery(2, ckpt).keepCheckpoints(20).stepListener(r -> reported.add(r.step())).build()) {
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(1, wrapper.workers());
            shrinks = wrapper.shrinks();
        }
        assertEquals(2, shrinks.size(), shrinks.toString());
        assertEquals(List.of(0), shrinks.get(1).dead());
        assertEquals(5, shrinks.get(1).step());
        assertEquals(2, shrinks.get(1).workersBefore());
        assertEquals(4, shrinks.get(1).resumedAt());
        assertEquals(CheckpointDirectory.stepDir(ckpt, 4), shrinks.get(1).checkpoint());
        // steps 0-4 on three workers, step 4 on two, then from step 4 on one: batches 12-23
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 4L, 4L, 5L, 6L, 7L, 8L, 9L, 10L, 11L, 12L, 13L, 14L, 15L), reported);
        MultiLayerNetwork reference = ModelSerializer.restoreMultiLayerNetwork(
                shrinks.get(1).checkpoint().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
        try (SymmemParallelWrapper w = builder(reference, 1, ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(data.subList(12, BATCHES)));
        }
        assertSameState(reference, net, "shrunk 3 -> 2 -> 1");
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(value = ZeroStage.class, names = {"OPTIMIZER_STATE", "PARAMETERS"})
    void beforeTheFitsFirstCheckpointTheSurvivorsGoBackToTheFitsStart(ZeroStage stage) {
        List<DataSet> data = Nets.batches(52, 12, 6, DataType.DOUBLE);
        List<DataSet> faulty = new ArrayList<>(data);
        // second fit: steps 4 (batches 0-2) and 5 (3-5); a checkpoint is due after 6 steps; worker 2 fails on batch 5
        faulty.set(5, new ShrinkTest.FailsOnceOnAWorker(data.get(5), () -> new OutOfMemoryError("injected: worker dies")));
        MultiLayerNetwork net = start();
        MultiLayerNetwork begin = net.clone();
        ShrinkReport s;
        try (SymmemParallelWrapper wrapper = builder(net, 3, stage)
                .onWorkerFailure(WorkerFailure.SHRINK).checkpointEvery(3, root.resolve("ckpt")).build()) {
            wrapper.fit(new BatchListIterator(data)); // 4 steps, a checkpoint after 3 (older than the next fit's start)
            wrapper.fit(new BatchListIterator(faulty));
            assertEquals(2, wrapper.workers());
            s = wrapper.shrinks().getFirst();
        }
        assertEquals(5, s.step());
        assertEquals(List.of(2), s.dead());
        assertEquals(4, s.resumedAt(), "back to the second fit's start");
        assertNull(s.checkpoint());
        MultiLayerNetwork reference = begin.clone();
        try (SymmemParallelWrapper w = builder(reference, 3, stage).build()) {
            w.fit(new BatchListIterator(data));
        }
        try (SymmemParallelWrapper w = builder(reference, 2, stage).build()) {
            w.fit(new BatchListIterator(data));
        }
        assertSameState(reference, net, "shrunk 3 -> 2 in the second fit");
    }

    @Test
    void aCheckpointThatCannotBeReadBackFailsTheFitWithTheModelAsBefore() throws IOException {
        List<DataSet> data = new ArrayList<>(Nets.batches(53, BATCHES, 6, DataType.DOUBLE));
        data.set(16, new ShrinkTest.FailsOnceOnAWorker(data.get(16), () -> new IllegalStateException("injected fault")));
        MultiLayerNetwork net = start();
        INDArray before = net.params().dup();
        Path ckpt = root.resolve("ckpt");
        try (SymmemParallelWrapper wrapper = builder(net, 3, ZeroStage.GRADIENTS).onWorkerFailure(WorkerFailure.SHRINK)
                .checkpointEvery(4, ckpt).stepListener(r -> {
                    if (r.step() == 4) { // the checkpoint after 4 steps is complete: a disk fault tears a shard file
                        try (Stream<Path> files = Files.list(CheckpointDirectory.stepDir(ckpt, 4))) {
                            Path shard = files.filter(f -> f.getFileName().toString().startsWith("shard-"))
                                    .findFirst().orElseThrow();
                            Files.write(shard, new byte[] {1, 2, 3});
                        } catch (IOException e) {
                            throw new java.io.UncheckedIOException(e);
                        }
                    }
                }).build()) {
            DataParallelTrainingException e = assertThrows(DataParallelTrainingException.class,
                    () -> wrapper.fit(new BatchListIterator(data)));
            assertTrue(e.getMessage().contains("could not go back to the checkpoint")
                    && e.getMessage().contains(CheckpointDirectory.stepDir(ckpt, 4).toString())
                    && e.getMessage().contains("is torn") && e.getMessage().contains("fix:"), e.getMessage());
            assertEquals(5, e.step());
            assertEquals(1, e.worker());
            assertTrue(ModelReplica.bitwiseEqual(before, net.params()), "a failed fit leaves the model unchanged");
            assertEquals(0, net.getIterationCount());
        }
    }

    @Test
    void buildRefusesWhatTheShardedShrinkCannotDo() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        IllegalArgumentException noCheckpoints = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net).workers(2).sharding(ZeroStage.OPTIMIZER_STATE).onWorkerFailure(WorkerFailure.SHRINK).build());
        assertTrue(noCheckpoints.getMessage().contains("sharding=OPTIMIZER_STATE and no periodic checkpoints")
                && noCheckpoints.getMessage().contains("checkpointEvery(k, dir)")
                && noCheckpoints.getMessage().contains("--max-restarts"), noCheckpoints.getMessage());
        IllegalArgumentException hollow = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(net.getLayerWiseConfigurations()).workers(2).sharding(ZeroStage.PARAMETERS)
                .onWorkerFailure(WorkerFailure.SHRINK).checkpointEvery(2, root).build());
        assertTrue(hollow.getMessage().contains("sharding=PARAMETERS on a model started from its configuration")
                && hollow.getMessage().contains("fix:"), hollow.getMessage());
        // hybrid sharding shrinks without a checkpoint: HybridShrinkTest
        // stages 1, 2 and 3 shrink across processes (examples' ShrinkAfterKillTest): an in-JVM world, which cannot
        // shrink, gets the refusal every group-mode SHRINK gets, not a ZeRO one
        for (ZeroStage stage : List.of(ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS, ZeroStage.PARAMETERS)) {
            List<String> cannot = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> assertThrows(
                    IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(Nets.mlp(Nets.updater("adam"),
                            DataType.FLOAT)).group(group).sharding(stage).onWorkerFailure(WorkerFailure.SHRINK)
                            .checkpointEvery(2, root.resolve("h")).build()).getMessage());
            for (String m : cannot) {
                assertTrue(m.contains("which cannot shrink in place") && !m.contains("sharding="), stage + ": " + m);
            }
        }
    }
}
