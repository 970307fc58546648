package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * Checkpoints the wrapper takes itself ({@code checkpointEvery}) and resumes from ({@code resumeFrom}): they appear at
 * their steps and only the newest K stay; a torn one (manifest missing, a file truncated, a checksum mismatch) is
 * skipped and the one before it loaded; a run resumed from one and trained on equals the uninterrupted run bitwise,
 * with plain data parallelism and with ZeRO sharding; bad options are refused with key=value messages before anything
 * is written.
 */
class PeriodicCheckpointTest {

    private static final int WORKERS = 2;
    /** Batches per epoch: 5 steps of 2 workers. */
    private static final int BATCHES = 10;

    @TempDir
    Path root;

    private static List<String> stepDirs(Path root) throws IOException {
        try (Stream<Path> s = Files.list(root)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("step-")).sorted().toList();
        }
    }

    private static SymmemParallelWrapper.Builder builder(MultiLayerNetwork model, ZeroStage sharding) {
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(model).workers(WORKERS);
        return sharding == null ? b : b.sharding(sharding);
    }

    @Test
    void checkpointsAppearAtTheirStepsAndOnlyTheNewestKStay() throws IOException {
        List<DataSet> data = Nets.batches(31, BATCHES, 8, DataType.DOUBLE);
        MultiLayerNetwork model = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper w = builder(model, null).checkpointEvery(2, root).keepCheckpoints(2).build()) {
            w.fit(new BatchListIterator(data));
            assertEquals(List.of("step-000000000002", "step-000000000004"), stepDirs(root));
            w.fit(new BatchListIterator(data));
        }
        // steps 2, 4, 6, 8, 10 were taken; the two newest stay
        assertEquals(List.of("step-000000000008", "step-000000000010"), stepDirs(root));
        assertEquals(10, CheckpointDirectory.progress(root), "the progress of the last step, for a restart to read");
        CheckpointDirectory.Counters c8 = CheckpointDirectory.verify(CheckpointDirectory.stepDir(root, 8));
        assertEquals(new CheckpointDirectory.Counters(8, 1, 8, 6, 6 * 8, WORKERS), c8);
        CheckpointDirectory.Counters c10 = CheckpointDirectory.verify(CheckpointDirectory.stepDir(root, 10));
        assertEquals(new CheckpointDirectory.Counters(10, 1, 10, BATCHES, BATCHES * 8, WORKERS), c10);
        // plain data parallelism: the model is the checkpoint, as plain DL4J loads it
        MultiLayerNetwork loaded = ModelSerializer.restoreMultiLayerNetwork(
                CheckpointDirectory.stepDir(root, 10).resolve("model.zip").toFile(), true);
        assertTrue(ModelReplica.bitwiseEqual(model.params(), loaded.params()), "step 10 holds the last step's parameters");
        assertFalse(Files.exists(CheckpointDirectory.stepDir(root, 10).resolve("shard-00000-of-00002.bin")));
    }

    @Test
    void resumedAndTrainedOnEqualsUninterruptedPlain() throws IOException {
        resumedEqualsUninterrupted(null, root.resolve("plain"));
    }

    @Test
    void resumedAndTrainedOnEqualsUninterruptedSharded() throws IOException {
        resumedEqualsUninterrupted(ZeroStage.OPTIMIZER_STATE, root.resolve("zero2"));
        resumedEqualsUninterrupted(ZeroStage.GRADIENTS, root.resolve("zero1"));
    }

    /**
     * Two epochs uninterrupted, against: one epoch and 4 batches of the second with a checkpoint every 3 steps (so
     * at steps 3 and 6, the newest 2 batches into epoch 1; step 7 is lost with the "dead" process), then a new wrapper
     * on a different model that resumes in one builder line and runs the remaining epoch.
     */
    private static void resumedEqualsUninterrupted(ZeroStage sharding, Path ckpt) throws IOException {
        List<DataSet> data = Nets.batches(32, BATCHES, 8, DataType.DOUBLE);
        MultiLayerNetwork start = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        int epochs = 2;

        MultiLayerNetwork uninterrupted = start.clone();
        try (SymmemParallelWrapper w = builder(uninterrupted, sharding).build()) {
            for (int e = 0; e < epochs; e++) {
                w.fit(new BatchListIterator(data));
            }
        }

        MultiLayerNetwork dead = start.clone();
        try (SymmemParallelWrapper w = builder(dead, sharding).checkpointEvery(3, ckpt).resumeFrom(ckpt).build()) {
            assertNull(w.resumedFrom(), "nothing to resume from: a fresh start");
            w.fit(new BatchListIterator(data));
            w.fit(new BatchListIterator(data.subList(0, 4))); // dies after step 7
        }

        MultiLayerNetwork resumed = start.clone();
        resumed.params().addi(0.25); // only the restore can make the runs agree
        try (SymmemParallelWrapper w = builder(resumed, sharding).checkpointEvery(3, ckpt).resumeFrom(ckpt).build()) {
            CheckpointDirectory.Checkpoint from = w.resumedFrom();
            assertEquals(new CheckpointDirectory.Counters(6, 1, 6, 2, 2 * 8, WORKERS), from.counters(), sharding + ": resumed at");
            assertEquals(1, resumed.getEpochCount());
            for (int e = resumed.getEpochCount(); e < epochs; e++) {
                w.fit(new BatchListIterator(data)); // skips the epoch's first 2 batches, trained before the checkpoint
            }
        }
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted.params(), resumed.params()), sharding + ": parameters");
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted.getUpdater().getStateViewArray(),
                resumed.getUpdater().getStateViewArray()), sharding + ": updater state");
        assertEquals(uninterrupted.getIterationCount(), resumed.getIterationCount(), sharding + ": iterations");
        assertEquals(uninterrupted.getEpochCount(), resumed.getEpochCount(), sharding + ": epochs");
    }

    @Test
    void withoutShardingSaveCheckpointWritesTheModelAndRestoresIt() throws IOException {
        List<DataSet> first = Nets.batches(34, 4, 8, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(35, 4, 8, DataType.DOUBLE);
        MultiLayerNetwork start = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        MultiLayerNetwork uninterrupted = start.clone();
        Path dir = root.resolve("plain");
        try (SymmemParallelWrapper w = builder(uninterrupted, null).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(dir);
            w.fit(new BatchListIterator(second));
        }
        assertEquals(new CheckpointDirectory.Counters(2, 1, 2, 0, 0, WORKERS), CheckpointDirectory.verify(dir));
        for (boolean withManifest : new boolean[] {true, false}) {
            if (!withManifest) {
                Files.delete(dir.resolve(CheckpointDirectory.MANIFEST)); // as written before manifests
            }
            MultiLayerNetwork resumed = start.clone();
            resumed.params().addi(0.5);
            try (SymmemParallelWrapper w = builder(resumed, null).build()) {
                w.restoreCheckpoint(dir);
                w.fit(new BatchListIterator(second));
            }
            assertTrue(ModelReplica.bitwiseEqual(uninterrupted.params(), resumed.params()), withManifest + ": parameters");
            assertTrue(ModelReplica.bitwiseEqual(uninterrupted.getUpdater().getStateViewArray(),
                    resumed.getUpdater().getStateViewArray()), withManifest + ": updater state");
            assertEquals(uninterrupted.getIterationCount(), resumed.getIterationCount());
        }
    }

    @Test
    void byTimeACheckpointFollowsTheFirstStepPastTheInterval() throws IOException {
        List<DataSet> data = Nets.batches(36, 6, 8, DataType.DOUBLE);
        MultiLayerNetwork model = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper w = builder(model, null).checkpointEvery(Duration.ofNanos(1), root)
                .keepCheckpoints(5).build()) {
            w.fit(new BatchListIterator(data)); // 3 steps, each past a 1 ns interval
        }
        assertEquals(List.of("step-000000000001", "step-000000000002", "step-000000000003"), stepDirs(root));
        try (SymmemParallelWrapper w = builder(model, null).checkpointEvery(Duration.ofDays(1), root.resolve("daily"))
                .build()) {
            w.fit(new BatchListIterator(data));
        }
        assertEquals(List.of(), stepDirs(root.resolve("daily")), "no step was a day past the start");
        assertEquals(3, CheckpointDirectory.progress(root.resolve("daily")), "its progress is recorded all the same");
    }

    @Test
    void tornCheckpointsAreSkippedAndTheOneBeforeLoaded() throws IOException {
        List<DataSet> data = Nets.batches(33, BATCHES, 8, DataType.DOUBLE);
        MultiLayerNetwork model = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper w = builder(model, ZeroStage.OPTIMIZER_STATE).checkpointEvery(1, root)
                .keepCheckpoints(4).build()) {
            w.fit(new BatchListIterator(data.subList(0, 8))); // steps 1..4
        }
        assertEquals(4, stepDirs(root).size());

        // the newest's manifest missing (its write never completed): step 3 is loaded
        Files.delete(CheckpointDirectory.stepDir(root, 4).resolve(CheckpointDirectory.MANIFEST));
        assertResumesAt(3);
        // step 3's shard truncated: step 2
        Path shard = CheckpointDirectory.stepDir(root, 3).resolve("shard-00001-of-00002.bin");
        byte[] bytes = Files.readAllBytes(shard);
        Files.write(shard, java.util.Arrays.copyOf(bytes, bytes.length - 100));
        assertResumesAt(2);
        // step 2's model.zip with a flipped byte, same size: its CRC-32C differs, step 1
        Path zip = CheckpointDirectory.stepDir(root, 2).resolve("model.zip");
        byte[] z = Files.readAllBytes(zip);
        z[z.length / 2] ^= 0x01;
        Files.write(zip, z);
        IOException torn = assertThrows(CheckpointDirectory.TornCheckpointException.class,
                () -> CheckpointDirectory.verify(CheckpointDirectory.stepDir(root, 2)));
        assertTrue(torn.getMessage().contains("file=model.zip") && torn.getMessage().contains("manifest says"),
                torn.getMessage());
        assertResumesAt(1);

        // resumed at step 1, the run writes step 2 again over the torn one, and keeping 1 deletes step 1; the torn
        // steps 3 and 4, newer than any complete one, stay until the run writes them again
        MultiLayerNetwork again = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper w = builder(again, ZeroStage.OPTIMIZER_STATE).checkpointEvery(1, root)
                .keepCheckpoints(1).resumeFrom(root).build()) {
            w.fit(new BatchListIterator(data.subList(0, 4))); // skips the 2 batches of step 1, trains step 2
        }
        assertEquals(List.of("step-000000000002", "step-000000000003", "step-000000000004"), stepDirs(root));
        assertEquals(2, CheckpointDirectory.verify(CheckpointDirectory.stepDir(root, 2)).step());
        assertEquals(2, CheckpointDirectory.progress(root), "the resumed run's progress replaces the earlier one's");
    }

    @Test
    void aResumedRunSaysFromWhichStepAndHowManyStepsItRedoes() throws IOException {
        assertEquals(-1, CheckpointDirectory.progress(root), "nothing recorded");
        assertEquals("starting over from step 0 (no complete checkpoint under " + root + "); no earlier progress"
                + " recorded under " + root + ": 0 steps redone", CheckpointDirectory.resumeLine(root, null, -1));
        List<DataSet> data = Nets.batches(35, BATCHES, 8, DataType.DOUBLE);
        MultiLayerNetwork model = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper w = builder(model, null).checkpointEvery(2, root).build()) {
            w.fit(new BatchListIterator(data.subList(0, 6))); // steps 1..3, a checkpoint at 2
        }
        assertEquals(3, CheckpointDirectory.progress(root));
        CheckpointDirectory.Checkpoint latest = CheckpointDirectory.latestComplete(root).orElseThrow();
        assertEquals("resuming from step 2 (checkpoint " + CheckpointDirectory.stepDir(root, 2) + "); the run had"
                + " reached step 3 before: 1 steps redone", CheckpointDirectory.resumeLine(root, latest, 3));
        assertEquals("starting over from step 0 (no complete checkpoint under " + root + "); the run had reached step 3"
                + " before: 3 steps redone", CheckpointDirectory.resumeLine(root, null, 3));
        Files.writeString(root.resolve(CheckpointDirectory.PROGRESS), "garbage");
        assertEquals(-1, CheckpointDirectory.progress(root), "an unreadable record is none");
    }

    private void assertResumesAt(long step) throws IOException {
        MultiLayerNetwork fresh = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        fresh.params().addi(0.5);
        try (SymmemParallelWrapper w = builder(fresh, ZeroStage.OPTIMIZER_STATE).resumeFrom(root).build()) {
            assertEquals(step, w.resumedFrom().counters().step());
            MultiLayerNetwork saved = ModelSerializer.restoreMultiLayerNetwork(
                    CheckpointDirectory.stepDir(root, step).resolve("model.zip").toFile(), true);
            assertTrue(ModelReplica.bitwiseEqual(saved.params(), fresh.params()), "restored step " + step);
            assertEquals((int) step, fresh.getIterationCount());
        }
    }

    @Test
    void badOptionsAreRefusedWithKeyValueMessagesBeforeAnythingIsWritten() throws IOException {
        MultiLayerNetwork model = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        Path file = Files.writeString(root.resolve("a-file"), "x");
        Path absent = root.resolve("not-yet");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(model).checkpointEvery(0, absent));
        assertTrue(e.getMessage().contains("checkpointEvery steps=0: expected >= 1"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(model).checkpointEvery(5, file));
        assertTrue(e.getMessage().contains("checkpointEvery root=" + file + ": expected a writable directory, found a file"),
                e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(model).checkpointEvery(5, file.resolve("below")));
        assertTrue(e.getMessage().contains("cannot be created") && e.getMessage().contains("nearest existing ancestor="),
                e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(model).checkpointEvery(Duration.ZERO, absent));
        assertTrue(e.getMessage().contains("checkpointEvery interval=PT0S: expected a positive duration"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(model).keepCheckpoints(0));
        assertTrue(e.getMessage().contains("keepCheckpoints keep=0: expected >= 1"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(model).resumeFrom(file));
        assertTrue(e.getMessage().contains("resumeFrom root=" + file + ": expected a readable directory"), e.getMessage());
        assertFalse(Files.exists(absent), "nothing written");
        try (Stream<Path> s = Files.list(root)) {
            assertEquals(List.of("a-file"), s.map(p -> p.getFileName().toString()).toList());
        }

        // a valid root that does not exist yet is created by the first checkpoint, not by build()
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(model).workers(WORKERS)
                .checkpointEvery(Duration.ofDays(1), absent).resumeFrom(absent).build()) {
            assertFalse(Files.exists(absent), "build() writes nothing");
            assertNull(w.resumedFrom());
        }
    }
}
