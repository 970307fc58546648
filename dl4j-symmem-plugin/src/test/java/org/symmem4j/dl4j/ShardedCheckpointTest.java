package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * Sharded checkpoints: K steps, save, restore into a fresh wrapper and model, K more steps equals
 * 2K uninterrupted steps bitwise; the consolidated {@code model.zip} is a plain DL4J file holding
 * what unsharded training holds; files that do not fit are rejected before anything changes (a torn one by its manifest; one without a manifest, as
 * written before manifests, by the files' own checks).
 */
class ShardedCheckpointTest {

    private static final int WORKERS = 2;
    private static final int K = 4;

    @TempDir
    Path dir;

    @Test
    void kStepsSaveRestoreKStepsEqualsTwoKUninterruptedSteps() throws IOException {
        for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
            ZeroStage stage = dtype == DataType.DOUBLE ? ZeroStage.GRADIENTS : ZeroStage.OPTIMIZER_STATE;
            Path ckpt = dir.resolve(dtype.name());
            List<DataSet> first = Nets.batches(11, K * WORKERS, 8, dtype);
            List<DataSet> second = Nets.batches(12, K * WORKERS, 8, dtype);
            MultiLayerNetwork start = Nets.mlp("mixed", dtype, Nets.HIDDEN, 0);

            MultiLayerNetwork uninterrupted = start.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(uninterrupted).workers(WORKERS).sharding(stage).build()) {
                w.fit(new BatchListIterator(first));
                w.saveCheckpoint(ckpt);
                w.fit(new BatchListIterator(second));
            }
            // a different starting point, so only the restore can make the runs agree
            MultiLayerNetwork resumed = start.clone();
            resumed.params().addi(0.5);
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(resumed).workers(WORKERS).sharding(stage).build()) {
                w.restoreCheckpoint(ckpt);
                assertEquals(K, resumed.getIterationCount());
                assertEquals(1, resumed.getEpochCount());
                w.fit(new BatchListIterator(second));
            }
            assertTrue(ModelReplica.bitwiseEqual(uninterrupted.params(), resumed.params()), dtype + ": parameters");
            assertTrue(ModelReplica.bitwiseEqual(uninterrupted.getUpdater().getStateViewArray(),
                    resumed.getUpdater().getStateViewArray()), dtype + ": updater state");
            assertEquals(2 * K, resumed.getIterationCount());
            assertEquals(2, resumed.getEpochCount());
            assertTrue(Files.isRegularFile(ckpt.resolve("shard-00000-of-00002.bin"))
                    && Files.isRegularFile(ckpt.resolve("shard-00001-of-00002.bin"))
                    && Files.isRegularFile(ckpt.resolve("model.zip")));
        }
    }

    @Test
    void consolidatedModelZipIsWhatUnshardedTrainingHolds() throws IOException {
        List<DataSet> data = Nets.batches(13, K * WORKERS, 8, DataType.DOUBLE);
        MultiLayerNetwork start = Nets.mlp("adamw", DataType.DOUBLE, Nets.HIDDEN, 0);
        MultiLayerNetwork plain = start.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(plain).workers(WORKERS).build()) {
            w.fit(new BatchListIterator(data));
        }
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(start.clone()).workers(WORKERS)
                .sharding(ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(data));
            w.saveCheckpoint(dir);
        }
        // what a plain DL4J user does
        MultiLayerNetwork loaded = ModelSerializer.restoreMultiLayerNetwork(dir.resolve("model.zip").toFile(), true);
        assertTrue(ModelReplica.bitwiseEqual(plain.params(), loaded.params()));
        assertTrue(ModelReplica.bitwiseEqual(plain.getUpdater().getStateViewArray(), loaded.getUpdater().getStateViewArray()),
                "model.zip's updater state, gathered from the shards, equals unsharded training's");
        assertEquals(plain.getIterationCount(), loaded.getIterationCount());
        // and it trains on from there as unsharded training does
        List<DataSet> more = Nets.batches(14, WORKERS, 8, DataType.DOUBLE);
        plain.fit(Nets.merged(more));
        loaded.fit(Nets.merged(more));
        assertTrue(ModelReplica.bitwiseEqual(plain.params(), loaded.params()));
    }

    @Test
    void computationGraphCheckpointRoundTrips() throws IOException {
        List<DataSet> first = Nets.batches(15, K * WORKERS, 6, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(16, K * WORKERS, 6, DataType.DOUBLE);
        ComputationGraph start = Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        ComputationGraph uninterrupted = start.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(uninterrupted).workers(WORKERS)
                .sharding(ZeroStage.OPTIMIZER_STATE).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(dir);
            w.fit(new BatchListIterator(second));
        }
        ComputationGraph resumed = start.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(resumed).workers(WORKERS)
                .sharding(ZeroStage.OPTIMIZER_STATE).build()) {
            w.restoreCheckpoint(dir);
            w.fit(new BatchListIterator(second));
        }
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted.params(), resumed.params()));
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted.getUpdater().getStateViewArray(),
                resumed.getUpdater().getStateViewArray()));
    }

    @Test
    void checkpointsThatDoNotFitAreRejectedBeforeAnythingChanges() throws IOException {
        List<DataSet> first = Nets.batches(17, K * WORKERS, 8, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(18, K * WORKERS, 8, DataType.DOUBLE);
        MultiLayerNetwork start = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(start.clone()).workers(WORKERS)
                .sharding(ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(dir);
        }

        // another updater layout with as many parameters (Adam, Nesterov and SGD blocks instead of Adam's one):
        // named, with the fix (another worker count is re-sharded: ReshardingTest)
        MultiLayerNetwork mixed = Nets.mlp("mixed", DataType.DOUBLE, Nets.HIDDEN, 0);
        MultiLayerNetwork mixedBefore = mixed.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mixed).workers(3)
                .sharding(ZeroStage.GRADIENTS).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(dir));
            assertTrue(e.getMessage().contains("shard-00000-of-00002.bin does not fit this wrapper's model: expected")
                    && e.getMessage().contains("layoutHash=") && e.getMessage().contains("the network configuration"),
                    e.getMessage());
        }
        assertTrue(ModelReplica.bitwiseEqual(mixedBefore.params(), mixed.params()), "a refused restore changes nothing");

        // a damaged shard: the checksum catches it, the model is left as it was, and fit() goes on from the model
        Path shard1 = dir.resolve("shard-00001-of-00002.bin");
        byte[] bytes = Files.readAllBytes(shard1);
        bytes[bytes.length - 9] ^= 0x10; // the last state byte, just before the checksum
        Files.write(shard1, bytes);
        MultiLayerNetwork victim = start.clone();
        MultiLayerNetwork untouched = start.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(victim).workers(WORKERS)
                .sharding(ZeroStage.GRADIENTS).build()) {
            // the manifest's CRC-32C catches it first: the checkpoint is torn
            IOException torn = assertThrows(CheckpointDirectory.TornCheckpointException.class, () -> w.restoreCheckpoint(dir));
            assertTrue(torn.getMessage().contains("is torn: file=shard-00001-of-00002.bin"), torn.getMessage());
            assertTrue(torn.getMessage().contains("(fix: restore an earlier complete checkpoint"), torn.getMessage());
            // a checkpoint written before manifests: the shard's own checksum catches it
            Files.delete(dir.resolve(CheckpointDirectory.MANIFEST));
            IOException e = assertThrows(IOException.class, () -> w.restoreCheckpoint(dir));
            assertTrue(e.getMessage().contains("checksum mismatch"), e.getMessage());
            assertTrue(ModelReplica.bitwiseEqual(start.params(), victim.params()), "a failed restore leaves the model unchanged");
            w.fit(new BatchListIterator(second));
        }
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(untouched).workers(WORKERS)
                .sharding(ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(second));
        }
        assertTrue(ModelReplica.bitwiseEqual(untouched.params(), victim.params()),
                "after a failed restore the workers train from the model's state");
        bytes[bytes.length - 9] ^= 0x10;
        Files.write(shard1, bytes);

        // shards of one save with model.zip of another (no manifest here, so the files' own checks speak)
        Path other = dir.resolve("later");
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(start.clone()).workers(WORKERS)
                .sharding(ZeroStage.GRADIENTS).build()) {
            w.fit(new BatchListIterator(first));
            w.fit(new BatchListIterator(second));
            w.saveCheckpoint(other);
        }
        Files.copy(other.resolve("model.zip"), dir.resolve("model.zip"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(start.clone()).workers(WORKERS)
                .sharding(ZeroStage.GRADIENTS).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(dir));
            assertTrue(e.getMessage().contains("iteration=" + 2 * K) && e.getMessage().contains("iteration=" + K)
                    && e.getMessage().contains("different saves"), e.getMessage());
        }
    }

    /**
     * A save that fails on one rank only, before the ranks agree that every rank's files are in place: rank 0 (which
     * writes {@code model.zip}) cannot rename it into place (a directory of that name is in the way), rank 1 has nothing
     * to write. Rank 1 used to wait for rank 0 at that agreement until the group's timeout; now it learns of rank 0's
     * failure there and throws naming it, and no manifest is written (the directory stays torn, never loaded).
     */
    @Test
    void aSaveFailingOnOneRankOnlyFailsOnEveryRank() throws IOException {
        Path blocked = dir.resolve("blocked");
        Files.createDirectories(blocked.resolve("model.zip").resolve("in-the-way"));
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        List<String> failures = org.symmem4j.parallel.group.InJvmWorld.runOnEveryRank(2,
                org.symmem4j.parallel.GroupOptions.defaults().withTimeout(java.time.Duration.ofSeconds(5)), group -> {
                    MultiLayerNetwork mine = initial.clone();
                    try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group)
                            .ompThreadsPerWorker(1).build()) {
                        Exception e = assertThrows(Exception.class, () -> w.saveCheckpoint(blocked), "rank " + group.rank());
                        return group.rank() + " " + e;
                    }
                });
        assertTrue(failures.get(0).startsWith("0 java.nio.file."), failures.get(0));
        assertTrue(failures.get(1).startsWith("1 java.lang.IllegalStateException: checkpoint-saved failed on rank 0: "
                + "java.nio.file.") && failures.get(1).contains("fix:"), failures.get(1));
        assertTrue(!Files.exists(blocked.resolve(CheckpointDirectory.MANIFEST)), "no manifest: the directory stays torn");
    }
}
