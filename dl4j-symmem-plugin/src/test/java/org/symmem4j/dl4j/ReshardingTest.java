package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Resume on a different worker count: a checkpoint that N workers took inside a fit (mid-epoch) restores onto M != N
 * workers, in thread mode and in group mode (one wrapper per rank, as one JVM per worker runs it). Right after the
 * restore every worker's shard holds, bitwise, the consolidated state's elements of its new range, and the model the
 * consolidated parameters and full updater state; training on from there on M workers (skipping the batches of the
 * epoch the N workers had trained) equals, bitwise, an uninterrupted M-worker run started from the consolidated
 * {@code model.zip} on the rest of the data. The model has three updater blocks (Adam, Nesterov, SGD: 2, 1 and 0 state
 * arrays per parameter), so shard boundaries fall inside blocks on both sides. A checkpoint of another stage, model
 * layout or data type is refused before anything changes.
 */
class ReshardingTest {

    /** Batches per epoch: with 2 workers 6 steps, with 3 workers 4. */
    private static final int BATCHES = 12;
    private static final int EPOCHS = 2;

    @TempDir
    Path root;

    static Stream<Arguments> cases() {
        return Stream.of(
                Arguments.of(ZeroStage.OPTIMIZER_STATE, 2, 1),
                Arguments.of(ZeroStage.GRADIENTS, 2, 3),
                Arguments.of(ZeroStage.OPTIMIZER_STATE, 3, 2),
                Arguments.of(null, 2, 3)); // plain data parallelism: model.zip is the whole checkpoint
    }

    private static SymmemParallelWrapper.Builder builder(MultiLayerNetwork model, int workers, ZeroStage stage) {
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(model).workers(workers).ompThreadsPerWorker(1);
        return stage == null ? b : b.sharding(stage);
    }

    private static MultiLayerNetwork start() {
        return Nets.mlp("mixed", DataType.DOUBLE, Nets.HIDDEN, 0);
    }

    /** N workers: one epoch and 5 batches of the second, a checkpoint every 2 steps; the last one is the newest. */
    private static CheckpointDirectory.Checkpoint trainOnNAndDie(List<DataSet> data, ZeroStage stage, int n, Path ckpt)
            throws IOException {
        MultiLayerNetwork dead = start();
        try (SymmemParallelWrapper w = builder(dead, n, stage).checkpointEvery(2, ckpt).build()) {
            w.fit(new BatchListIterator(data));
            w.fit(new BatchListIterator(data.subList(0, 5))); // the process "dies" here
        }
        return CheckpointDirectory.latestComplete(ckpt).orElseThrow();
    }

    /**
     * The reference: an uninterrupted M-worker run started from the consolidated model.zip of the checkpoint, trained
     * on the rest of the epoch the checkpoint was taken in, then the epochs left.
     */
    private static MultiLayerNetwork referenceOnM(CheckpointDirectory.Checkpoint from, MultiLayerNetwork saved,
                                                  List<DataSet> data, ZeroStage stage, int m) {
        MultiLayerNetwork consolidated = saved.clone();
        try (SymmemParallelWrapper w = builder(consolidated, m, stage).build()) {
            int skipped = (int) from.counters().batchesInEpoch();
            w.fit(new BatchListIterator(data.subList(skipped, data.size())));
            for (int e = consolidated.getEpochCount(); e < EPOCHS; e++) {
                w.fit(new BatchListIterator(data));
            }
        }
        return consolidated;
    }

    @ParameterizedTest(name = "{0}: {1} -> {2} workers, threads")
    @MethodSource("cases")
    void threadModeResumesOnAnotherWorkerCountAsAnUninterruptedRunThere(ZeroStage stage, int n, int m) throws IOException {
        List<DataSet> data = Nets.batches(41, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        CheckpointDirectory.Checkpoint taken = trainOnNAndDie(data, stage, n, ckpt);
        assertEquals(n, taken.counters().ranks());
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);

        MultiLayerNetwork resumed = start();
        resumed.params().addi(0.5); // only the restore can make the runs agree
        try (SymmemParallelWrapper w = builder(resumed, m, stage).checkpointEvery(2, ckpt).resumeFrom(ckpt).build()) {
            assertEquals(taken.counters(), w.resumedFrom().counters());
            assertRestoredExactly(consolidated, resumed, w.replicas(), w.workerMemory(), stage, stage + " " + n + "->" + m);
            for (int e = resumed.getEpochCount(); e < EPOCHS; e++) {
                w.fit(new BatchListIterator(data)); // the first skips the batches the N workers trained in it
            }
        }
        MultiLayerNetwork reference = referenceOnM(taken, consolidated, data, stage, m);
        assertSameState(reference, resumed, stage + " " + n + "->" + m + " trained on");
        // and it keeps checkpointing on M workers, with M shard files
        CheckpointDirectory.Checkpoint newest = CheckpointDirectory.latestComplete(ckpt).orElseThrow();
        assertEquals(m, newest.counters().ranks());
        assertEquals(stage == null ? 0 : m, shardFiles(newest.dir()).size(), "shard files of the M-worker checkpoint");
    }

    @ParameterizedTest(name = "{0}: {1} -> {2} ranks, group mode")
    @MethodSource("cases")
    void groupModeResumesOnAnotherRankCountAsAnUninterruptedRunThere(ZeroStage stage, int n, int m) throws IOException {
        List<DataSet> data = Nets.batches(42, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        InJvmWorld.runOnEveryRank(n, options, group -> {
            MultiLayerNetwork mine = start();
            try (SymmemParallelWrapper w = groupBuilder(mine, group, stage).checkpointEvery(2, ckpt).build()) {
                w.fit(new BatchListIterator(data));
                w.fit(new BatchListIterator(data.subList(0, 5))); // every rank "dies" here
            }
            return null;
        });
        CheckpointDirectory.Checkpoint taken = CheckpointDirectory.latestComplete(ckpt).orElseThrow();
        assertEquals(n, taken.counters().ranks());
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);

        List<MultiLayerNetwork> resumed = InJvmWorld.runOnEveryRank(m, options, group -> {
            MultiLayerNetwork mine = start();
            mine.params().addi(0.5);
            try (SymmemParallelWrapper w = groupBuilder(mine, group, stage).checkpointEvery(2, ckpt).resumeFrom(ckpt)
                    .build()) {
                assertEquals(taken.counters(), w.resumedFrom().counters());
                assertRestoredExactly(consolidated, mine, w.replicas(), w.workerMemory(), stage,
                        "rank " + group.rank() + " of " + n + "->" + m);
                for (int e = mine.getEpochCount(); e < EPOCHS; e++) {
                    w.fit(new BatchListIterator(data));
                }
            }
            return mine;
        });
        MultiLayerNetwork reference = referenceOnM(taken, consolidated, data, stage, m);
        for (int r = 0; r < m; r++) {
            assertSameState(reference, resumed.get(r), "rank " + r + " of " + n + "->" + m + " trained on");
        }
    }

    private static SymmemParallelWrapper.Builder groupBuilder(MultiLayerNetwork model, org.symmem4j.parallel.Group group,
                                                              ZeroStage stage) {
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(model).group(group).ompThreadsPerWorker(1);
        return stage == null ? b : b.sharding(stage);
    }

    /**
     * Right after a restore: the model holds the consolidated parameters, full updater state and counters; with
     * sharding every replica the parameters, and every worker's shard the consolidated state's elements of its
     * parameter range, in the order DL4J's updater blocks lay them out.
     */
    private static void assertRestoredExactly(MultiLayerNetwork consolidated, MultiLayerNetwork model,
                                              List<ModelReplica> replicas, List<WorkerMemory> memory, ZeroStage stage,
                                              String what) {
        assertSameState(consolidated, model, what + ": the model right after the restore");
        assertEquals(consolidated.getIterationCount(), model.getIterationCount(), what + ": iterations");
        assertEquals(consolidated.getEpochCount(), model.getEpochCount(), what + ": epochs");
        INDArray full = consolidated.getUpdater().getStateViewArray();
        UpdaterLayout layout = UpdaterLayout.of((BaseMultiLayerUpdater<?>) consolidated.getUpdater(),
                consolidated.numParams());
        if (stage == null) {
            return; // plain data parallelism: the replicas take the model's state at the next fit
        }
        assertEquals(replicas.size(), memory.size());
        for (int i = 0; i < replicas.size(); i++) {
            ModelReplica replica = replicas.get(i);
            assertTrue(ModelReplica.bitwiseEqual(consolidated.params(), replica.params()), what + ": replica " + i
                    + "'s parameters");
            WorkerMemory w = memory.get(i);
            List<INDArray> pieces = new ArrayList<>();
            for (ShardedCheckpoints.Range r : layout.stateRanges(w.shardStart(), w.shardEnd())) {
                pieces.add(full.get(org.nd4j.linalg.indexing.NDArrayIndex.interval(r.start(), r.end())));
            }
            INDArray expected = pieces.isEmpty() ? null : Nd4j.concat(0, pieces.toArray(INDArray[]::new));
            INDArray shard = replica.updaterState();
            if (expected == null) {
                assertTrue(shard == null || shard.length() == 0, what + ": worker " + w.worker() + " keeps no state");
            } else {
                assertNotNull(shard, what + ": worker " + w.worker() + "'s shard");
                assertTrue(ModelReplica.bitwiseEqual(expected, shard.reshape(shard.length())), what + ": worker "
                        + w.worker() + "'s shard [" + w.shardStart() + "," + w.shardEnd() + ") holds the consolidated"
                        + " state of its range, bitwise");
            }
        }
    }

    private static void assertSameState(MultiLayerNetwork expected, MultiLayerNetwork actual, String what) {
        assertTrue(ModelReplica.bitwiseEqual(expected.params(), actual.params()), what + ": parameters");
        assertTrue(ModelReplica.bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), what + ": updater state");
        assertEquals(expected.getIterationCount(), actual.getIterationCount(), what + ": iterations");
        assertEquals(expected.getEpochCount(), actual.getEpochCount(), what + ": epochs");
    }

    private static List<String> shardFiles(Path dir) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).filter(f -> f.startsWith("shard-")).sorted().toList();
        }
    }

    /** A plain checkpoint restores into a sharded wrapper: model.zip's full state cut into the shards. */
    @Test
    void aPlainCheckpointIsCutIntoTheShardsOfAShardedWrapper() throws IOException {
        List<DataSet> data = Nets.batches(43, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("plain");
        CheckpointDirectory.Checkpoint taken = trainOnNAndDie(data, null, 2, ckpt);
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
        MultiLayerNetwork resumed = start();
        try (SymmemParallelWrapper w = builder(resumed, 3, ZeroStage.GRADIENTS).resumeFrom(ckpt).build()) {
            assertRestoredExactly(consolidated, resumed, w.replicas(), w.workerMemory(), ZeroStage.GRADIENTS, "plain->zero2");
            for (int e = resumed.getEpochCount(); e < EPOCHS; e++) {
                w.fit(new BatchListIterator(data));
            }
        }
        assertSameState(referenceOnM(taken, consolidated, data, ZeroStage.GRADIENTS, 3), resumed, "plain 2 -> ZeRO-2 on 3, trained on");
    }

    /**
     * Stage 1 and 2 keep the same updater state cut the same way: a stage-1 checkpoint of 3 workers resumes a stage-2
     * wrapper of 2 as an uninterrupted stage-2 run from the consolidated state.
     */
    @Test
    void stagesOneAndTwoReadEachOthersShards() throws IOException {
        List<DataSet> data = Nets.batches(44, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("zero1");
        CheckpointDirectory.Checkpoint taken = trainOnNAndDie(data, ZeroStage.OPTIMIZER_STATE, 3, ckpt);
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
        MultiLayerNetwork resumed = start();
        try (SymmemParallelWrapper w = builder(resumed, 2, ZeroStage.GRADIENTS).resumeFrom(ckpt).build()) {
            for (int e = resumed.getEpochCount(); e < EPOCHS; e++) {
                w.fit(new BatchListIterator(data));
            }
        }
        assertSameState(referenceOnM(taken, consolidated, data, ZeroStage.GRADIENTS, 2), resumed, "ZeRO-1 on 3 -> ZeRO-2 on 2");
    }

    /**
     * The data position is the iterator's batches, whatever the worker count, and the checkpoint records their
     * examples: a resume whose iterator holds other batches (another batch size, or fewer batches than were trained)
     * is refused before any step, naming both positions, and keeps the skip for a fit with the right iterator.
     */
    @Test
    void aResumeOnAnIteratorOfOtherBatchesIsRefusedBeforeAnyStep() throws IOException {
        List<DataSet> data = Nets.batches(47, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("position");
        CheckpointDirectory.Checkpoint taken = trainOnNAndDie(data, ZeroStage.GRADIENTS, 2, ckpt);
        assertEquals(4, taken.counters().batchesInEpoch());
        assertEquals(4 * 6, taken.counters().examplesInEpoch());
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
        MultiLayerNetwork resumed = start();
        try (SymmemParallelWrapper w = builder(resumed, 3, ZeroStage.GRADIENTS).resumeFrom(ckpt).build()) {
            // the same examples in batches of 4 instead of 6: the first 4 batches hold 16 examples, not 24
            List<DataSet> rebatched = new ArrayList<>();
            for (DataSet d : Nets.merged(data).batchBy(4)) {
                rebatched.add(d);
            }
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> w.fit(new BatchListIterator(rebatched)));
            assertTrue(e.getMessage().contains("was taken after batches=4 examples=24 of its epoch; this iterator's first"
                    + " 4 batches hold examples=16"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> w.fit(new BatchListIterator(data.subList(0, 3))));
            assertTrue(e.getMessage().contains("this iterator ended after 3 batches"), e.getMessage());
            assertSameState(consolidated, resumed, "the model after refused fits");
            w.fit(new BatchListIterator(data)); // the right iterator: skips its first 4 batches
        }
        MultiLayerNetwork reference = consolidated.clone();
        try (SymmemParallelWrapper w = builder(reference, 3, ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(data.subList(4, data.size())));
        }
        assertSameState(reference, resumed, "resumed after the refusals");
    }

    /**
     * Shard files of format 1 (one parameter range, no state ranges: written before format 2) still restore, onto the
     * same worker count and onto another one: their state ranges are derived from DL4J's updater blocks.
     */
    @Test
    void formatOneFilesStillRestoreOntoAnyWorkerCount() throws IOException {
        List<DataSet> data = Nets.batches(46, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("v1");
        CheckpointDirectory.Checkpoint taken = trainOnNAndDie(data, ZeroStage.OPTIMIZER_STATE, 2, ckpt);
        for (String f : shardFiles(taken.dir())) {
            rewriteAsFormatOne(taken.dir().resolve(f));
        }
        CheckpointDirectory.writeManifest(taken.dir(), taken.counters()); // over the rewritten files
        assertEquals(1, ShardCheckpoint.readHeader(taken.dir().resolve(ShardCheckpoint.shardFileName(0, 2))).formatVersion());
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                taken.dir().resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
        for (int m : new int[] {2, 3}) {
            MultiLayerNetwork resumed = start();
            resumed.params().addi(0.5);
            try (SymmemParallelWrapper w = builder(resumed, m, ZeroStage.OPTIMIZER_STATE).build()) {
                w.restoreCheckpoint(taken.dir());
                assertRestoredExactly(consolidated, resumed, w.replicas(), w.workerMemory(), ZeroStage.OPTIMIZER_STATE,
                        "format 1, 2->" + m);
            }
        }
    }

    /** Writes a shard file again in format 1, as symmem4j wrote it before format 2 (one range, no state ranges). */
    private static void rewriteAsFormatOne(Path file) throws IOException {
        ShardCheckpoint.Header h = ShardCheckpoint.readHeader(file);
        assertEquals(1, h.paramRanges().size());
        byte[] all = Files.readAllBytes(file);
        byte[] state = java.util.Arrays.copyOfRange(all, (int) h.dataOffset(), all.length - Long.BYTES);
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        java.util.zip.CRC32 crc = new java.util.zip.CRC32();
        try (java.io.DataOutputStream out = new java.io.DataOutputStream(new java.util.zip.CheckedOutputStream(bytes, crc))) {
            out.write("S4JSHARD".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            out.writeInt(1);
            out.writeInt(h.worldSize());
            out.writeInt(h.rank());
            out.writeUTF(h.stage());
            out.writeUTF(h.dataType());
            out.writeUTF(h.byteOrder());
            out.writeLong(h.paramCount());
            out.writeLong(h.paramRanges().getFirst().start());
            out.writeLong(h.paramRanges().getFirst().end());
            out.writeLong(h.stateElements());
            out.writeInt(h.iterationCount());
            out.writeInt(h.epochCount());
            out.writeLong(h.layoutHash());
            out.write(state);
        }
        java.io.ByteArrayOutputStream withCrc = new java.io.ByteArrayOutputStream();
        withCrc.write(bytes.toByteArray());
        new java.io.DataOutputStream(withCrc).writeLong(crc.getValue());
        Files.write(file, withCrc.toByteArray());
    }

    @Test
    void checkpointsOfAnotherStageLayoutOrTypeAreRefusedBeforeAnythingChanges() throws IOException {
        List<DataSet> data = Nets.batches(45, 4, 6, DataType.DOUBLE);
        Path zero = root.resolve("zero");
        try (SymmemParallelWrapper w = builder(start(), 2, ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(data));
            w.saveCheckpoint(zero);
        }
        // a pipeline trainer's checkpoint of the same network: its shards are stages, each in its own layout
        Path pipeline = root.resolve("pipeline");
        try (PipelineParallelTrainer t = PipelineParallelTrainer.builder(start()).ranks(2).microbatches(2).build()) {
            t.fit(Nets.merged(data));
            t.saveCheckpoint(pipeline);
        }
        String stageRefusal = refusal(start(), 3, pipeline);
        assertTrue(stageRefusal.contains("holds shards of stage=PIPELINE (shard-00000-of-00002.bin); this wrapper reads"
                + " ZeRO shards of stage OPTIMIZER_STATE or GRADIENTS") && stageRefusal.contains("ModelSerializer"),
                stageRefusal);
        // another updater layout with as many parameters (Adam everywhere instead of Adam, Nesterov and SGD)
        String layoutRefusal = refusal(Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0), 3, zero);
        assertTrue(layoutRefusal.contains("shard-00000-of-00002.bin does not fit this wrapper's model: expected")
                && layoutRefusal.matches("(?s).*expected .*layoutHash=\\d+.*found .*layoutHash=\\d+.*"), layoutRefusal);
        // another data type
        String typeRefusal = refusal(Nets.mlp("mixed", DataType.FLOAT, Nets.HIDDEN, 0), 1, zero);
        assertTrue(typeRefusal.contains("holds " + start().numParams() + " x DOUBLE parameters")
                        || typeRefusal.contains("expected dataType=FLOAT"), typeRefusal);
    }

    /** Restores {@code dir} into a fresh wrapper of {@code workers}, which must refuse it changing nothing. */
    private static String refusal(MultiLayerNetwork model, int workers, Path dir) throws IOException {
        MultiLayerNetwork before = model.clone();
        List<String> files;
        try (Stream<Path> s = Files.list(dir)) {
            files = s.map(p -> p.getFileName().toString()).sorted().toList();
        }
        String message;
        try (SymmemParallelWrapper w = builder(model, workers, ZeroStage.OPTIMIZER_STATE).build()) {
            message = assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(dir)).getMessage();
        }
        assertSameState(before, model, "the model after a refused restore");
        try (Stream<Path> s = Files.list(dir)) {
            assertEquals(files, s.map(p -> p.getFileName().toString()).sorted().toList(), "nothing written");
        }
        return message;
    }
}
