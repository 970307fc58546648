package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Checkpoints of hybrid sharding (HSDP, {@code shardGroupSize(S)} with S &lt; N; {@link FullyShardedCheckpoints}):
 * only the first replica's S workers write, in stage 3's sharded format (a stage-3 checkpoint of S ranks). An HSDP
 * save restored onto the same HSDP shape trains on bitwise as the uninterrupted run; across shapes (HSDP 4/2 → stage
 * 3 on 2 and 3 workers, stage 3 on 4 → HSDP 4/2, HSDP 4/2 → HSDP 6/3) the restored model is bitwise the consolidated
 * {@code ModelSerializer} file's, and training on equals, bitwise, the target shape started from that file. A torn or
 * partial HSDP checkpoint is refused and changes nothing; periodic checkpoints and {@code resumeFrom} run under HSDP
 * in group mode. The model has three updater blocks (Adam, Nesterov, SGD) so block and shard boundaries cross.
 */
class HybridShardingCheckpointTest {

    private static final int BATCHES = 8;

    @TempDir
    Path root;

    private static MultiLayerConfiguration conf() {
        return Nets.mlp("mixed", DataType.DOUBLE, Nets.HIDDEN, 0).getLayerWiseConfigurations().clone();
    }

    /** Stage 3 on {@code workers} threads from the configuration (hollow); {@code shardGroupSize} 0: over all. */
    private static SymmemParallelWrapper.Builder fsdp(int workers, int shardGroupSize) {
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(conf()).workers(workers).ompThreadsPerWorker(1)
                .sharding(ZeroStage.PARAMETERS);
        return shardGroupSize > 0 ? b.shardGroupSize(shardGroupSize) : b;
    }

    /** The reference: {@code net} (a consolidated file's model) trained on {@code data} by the given shape. */
    private static INDArray trainedFrom(MultiLayerNetwork net, int workers, int shardGroupSize, List<DataSet> data,
                                        List<Double> losses) {
        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(net).workers(workers).ompThreadsPerWorker(1)
                .stepListener(r -> losses.add(r.loss()));
        if (shardGroupSize >= 0) { // -1: plain data parallelism (stage 3 over all is bitwise equal to it)
            b.sharding(ZeroStage.PARAMETERS);
        }
        if (shardGroupSize > 0) {
            b.shardGroupSize(shardGroupSize);
        }
        try (SymmemParallelWrapper w = b.build()) {
            w.fit(new BatchListIterator(data));
            return w.gatherParameters();
        }
    }

    /** The checkpoint holds S parameter and S state files (the first replica's), covering the vector once. */
    private static void assertFirstReplicaOnly(Path ckpt, int s, long count) throws IOException {
        assertFalse(Files.exists(ckpt.resolve(ShardCheckpoint.MODEL_FILE)), "an HSDP checkpoint holds no model.zip");
        long held = 0;
        for (int r = 0; r < s; r++) {
            ShardCheckpoint.Header h = ShardCheckpoint.readHeader(ckpt.resolve(ShardCheckpoint.paramsFileName(r, s)));
            assertEquals(ZeroStage.PARAMETERS.name(), h.stage());
            held += h.stateElements();
            assertTrue(Files.isRegularFile(ckpt.resolve(ShardCheckpoint.shardFileName(r, s))));
        }
        assertEquals(count, held, "the first replica's parameter files hold every parameter once");
        try (var listing = Files.list(ckpt)) {
            List<String> extra = listing.map(f -> f.getFileName().toString())
                    .filter(f -> ShardCheckpoint.worldSizeOf(Path.of(f)) >= 0 && ShardCheckpoint.worldSizeOf(Path.of(f)) != s
                            || ShardCheckpoint.worldSizeOf(Path.of(f), true) >= 0
                            && ShardCheckpoint.worldSizeOf(Path.of(f), true) != s)
                    .toList();
            assertTrue(extra.isEmpty(), "files of another rank count: " + extra);
        }
        assertEquals(s, CheckpointDirectory.verify(ckpt).ranks(), "the manifest names the S ranks that wrote");
    }

    /** HSDP 4/2: fit, save, close; a new HSDP 4/2 wrapper restores and fits on, bitwise the uninterrupted run. */
    @Test
    void hsdpSaveRestoredOntoTheSameShapeContinuesBitwiseAsTheUninterruptedRun() throws IOException {
        List<DataSet> first = Nets.batches(81, BATCHES, 6, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(82, BATCHES, 6, DataType.DOUBLE);
        List<Double> uninterruptedLosses = new ArrayList<>();
        INDArray uninterrupted;
        Path end = root.resolve("uninterrupted.zip");
        try (SymmemParallelWrapper w = fsdp(4, 2).stepListener(r -> uninterruptedLosses.add(r.loss())).build()) {
            w.fit(new BatchListIterator(first));
            w.fit(new BatchListIterator(second));
            uninterrupted = w.gatherParameters();
            w.saveModel(end);
        }
        Path ckpt = root.resolve("ckpt");
        List<Double> losses = new ArrayList<>();
        try (SymmemParallelWrapper w = fsdp(4, 2).stepListener(r -> losses.add(r.loss())).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(ckpt);
            assertFirstReplicaOnly(ckpt, 2, w.gatherParameters().length());
        }
        Path resumed = root.resolve("resumed.zip");
        INDArray trained;
        try (SymmemParallelWrapper w = fsdp(4, 2).stepListener(r -> losses.add(r.loss())).build()) {
            w.restoreCheckpoint(ckpt);
            w.fit(new BatchListIterator(second));
            trained = w.gatherParameters();
            w.saveModel(resumed);
            // every worker's blocks, the second replica's too, are the gathered model's bitwise
            for (int r = 0; r < 4; r++) {
                assertTrue(w.fullySharded().get(r).ownBlocksMatch(trained), "worker " + r + "'s blocks");
            }
        }
        SameTraining.assertSameLosses(uninterruptedLosses, losses, "HSDP 4/2 saved and restored");
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted, trained), "HSDP 4/2 saved and restored: parameters");
        SameTraining.assertSameModel(ModelSerializer.restoreMultiLayerNetwork(end.toFile(), true),
                ModelSerializer.restoreMultiLayerNetwork(resumed.toFile(), true), "HSDP 4/2 saved and restored");
    }

    /**
     * A checkpoint of one shape restored onto another: right after the restore the model is the consolidated file's,
     * bitwise; trained on, it equals the target shape started from that file (stage 3 over all: plain data
     * parallelism, bitwise). Shard group size 0: stage 3 over every worker.
     */
    @ParameterizedTest(name = "{0}/{1} -> {2}/{3}")
    @CsvSource({"4, 2, 2, 0", "4, 2, 3, 0", "4, 0, 4, 2", "4, 2, 6, 3"})
    void restoresAcrossShapesAsTheConsolidatedFile(int n, int s, int m, int t) throws IOException {
        List<DataSet> first = Nets.batches(83, BATCHES, 6, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(84, 2 * m, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        Path saved = root.resolve("saved.zip");
        try (SymmemParallelWrapper w = fsdp(n, s).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(ckpt);
            w.saveModel(saved);
            assertFirstReplicaOnly(ckpt, s > 0 ? s : n, w.gatherParameters().length());
        }
        String what = (s > 0 ? "HSDP " + n + "/" + s : "stage 3 on " + n) + " -> "
                + (t > 0 ? "HSDP " + m + "/" + t : "stage 3 on " + m);
        Path restored = root.resolve("restored.zip");
        List<Double> losses = new ArrayList<>();
        INDArray trained;
        try (SymmemParallelWrapper w = fsdp(m, t).stepListener(r -> losses.add(r.loss())).build()) {
            w.restoreCheckpoint(ckpt);
            w.saveModel(restored);
            w.fit(new BatchListIterator(second));
            trained = w.gatherParameters();
        }
        SameTraining.assertSameModel(ModelSerializer.restoreMultiLayerNetwork(saved.toFile(), true),
                ModelSerializer.restoreMultiLayerNetwork(restored.toFile(), true), what + ", right after the restore");
        List<Double> expectedLosses = new ArrayList<>();
        INDArray reference = trainedFrom(ModelSerializer.restoreMultiLayerNetwork(saved.toFile(), true), m,
                t > 0 ? t : -1, second, expectedLosses);
        SameTraining.assertSameLosses(expectedLosses, losses, what + ", trained on");
        assertTrue(ModelReplica.bitwiseEqual(reference, trained), what + ", trained on: parameters; max relative"
                + " difference " + Nets.maxRelativeDifference(trained, reference));
    }

    @Test
    void tornAndPartialHsdpCheckpointsAreRefusedLeavingTheWrapperAsItWas() throws IOException {
        List<DataSet> data = Nets.batches(85, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        try (SymmemParallelWrapper w = fsdp(4, 2).build()) {
            w.fit(new BatchListIterator(data));
            w.saveCheckpoint(ckpt);
        }
        try (SymmemParallelWrapper w = fsdp(4, 2).build()) {
            INDArray before = w.gatherParameters();
            CheckpointRefusals.assertTornAndPartialRefused(w, ckpt, root, 2);
            assertTrue(ModelReplica.bitwiseEqual(before, w.gatherParameters()), "a refused restore changed the shards");
            for (int r = 0; r < 4; r++) {
                assertTrue(w.fullySharded().get(r).ownBlocksMatch(before), "worker " + r + "'s blocks changed");
            }
        }
    }

    /**
     * Group mode, 4 ranks in 2 replicas of 2: {@code checkpointEvery} writes the first replica's shards; a new job of
     * the same shape resumes with {@code resumeFrom} (as the launcher's restarts do), skips the trained batches and
     * trains on bitwise as HSDP 4/2 threads started from the model at the checkpointed step.
     */
    @Test
    void groupModeCheckpointsEveryKStepsAndResumes() throws Exception {
        int n = 4;
        List<DataSet> data = Nets.batches(86, 16, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        Path atDeath = root.resolve("at-death.zip");
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        InJvmWorld.runOnEveryRank(n, options, group -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf()).group(group).ompThreadsPerWorker(1)
                    .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).checkpointEvery(2, ckpt).build()) {
                w.fit(new BatchListIterator(data)); // 4 steps
                w.fit(new BatchListIterator(data.subList(0, 8))); // 2 steps, the last checkpointed; then "dies"
                w.saveModel(atDeath);
            }
            return null;
        });
        CheckpointDirectory.Checkpoint taken = CheckpointDirectory.latestComplete(ckpt).orElseThrow();
        assertEquals(6, taken.counters().step());
        assertEquals(8, taken.counters().batchesInEpoch());
        assertEquals(2, taken.counters().ranks(), "the first replica's 2 ranks wrote it");
        assertFalse(Files.exists(taken.dir().resolve(ShardCheckpoint.paramsFileName(2, 4))));
        Path restored = root.resolve("restored.zip");
        List<INDArray> trained = InJvmWorld.runOnEveryRank(n, options, group -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf()).group(group).ompThreadsPerWorker(1)
                    .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).checkpointEvery(2, ckpt).resumeFrom(ckpt)
                    .build()) {
                assertEquals(taken.counters(), w.resumedFrom().counters());
                w.saveModel(restored);
                w.fit(new BatchListIterator(data)); // skips the 8 batches trained in this epoch
                return w.gatherParameters();
            }
        });
        MultiLayerNetwork last = ModelSerializer.restoreMultiLayerNetwork(atDeath.toFile(), true);
        last.setEpochCount(taken.counters().epoch());
        SameTraining.assertSameModel(last, ModelSerializer.restoreMultiLayerNetwork(restored.toFile(), true),
                "HSDP 4/2 resumed, right after the restore");
        INDArray reference = trainedFrom(last, n, 2, data.subList(8, 16), new ArrayList<>());
        for (int r = 0; r < n; r++) {
            assertTrue(ModelReplica.bitwiseEqual(reference, trained.get(r)), "rank " + r + " trained on");
        }
    }
}
