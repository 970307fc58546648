package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
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
 * ZeRO stage 3's sharded checkpoints ({@link FullyShardedCheckpoints}): each worker writes only its blocks of the
 * parameters and of the updater state (no {@code model.zip}), also when the run started from a configuration and no
 * process ever holds the model whole; a checkpoint of N workers restores onto M (4 → 2, 4 → 3, 2 → 4, threads; 3 → 2,
 * one wrapper per rank). Right after the restore the model, gathered, is bitwise the saved one (parameters, full
 * updater state, counters), and training on equals, bitwise, plain data parallelism on M workers started from the
 * consolidated {@code ModelSerializer} file of the same state. The model has three updater blocks (Adam, Nesterov, SGD)
 * so block and shard boundaries cross. A torn or partial checkpoint, another stage's wrapper and another model are
 * refused with what was expected, what was found and the fix, leaving the wrapper as it was.
 */
class FullyShardedCheckpointTest {

    private static final int BATCHES = 12;

    @TempDir
    Path root;

    private static MultiLayerConfiguration conf(int hidden) {
        return Nets.mlp("mixed", DataType.DOUBLE, hidden, 0).getLayerWiseConfigurations().clone();
    }

    private static SymmemParallelWrapper.Builder stage3(boolean hollow, int workers) {
        MultiLayerConfiguration conf = conf(Nets.HIDDEN);
        SymmemParallelWrapper.Builder b;
        if (hollow) {
            b = SymmemParallelWrapper.builder(conf);
        } else {
            MultiLayerNetwork net = new MultiLayerNetwork(conf);
            net.init();
            b = SymmemParallelWrapper.builder(net);
        }
        return b.workers(workers).ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS);
    }

    /** Plain data parallelism on {@code m} workers from a consolidated file: the reference. */
    private static MultiLayerNetwork plainFrom(MultiLayerNetwork net, int m, List<DataSet> data, List<Double> losses) {
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(m).ompThreadsPerWorker(1)
                .stepListener(r -> losses.add(r.loss())).build()) {
            w.fit(new BatchListIterator(data));
        }
        return net;
    }

    @ParameterizedTest(name = "{0} -> {1} workers, hollow={2}")
    @CsvSource({"4, 2, true", "4, 3, true", "2, 4, false"})
    void restoresOnAnotherWorkerCountAndTrainsAsPlainDataParallelismFromTheConsolidatedModel(int n, int m,
                                                                                             boolean hollow)
            throws IOException {
        List<DataSet> first = Nets.batches(51, BATCHES, 6, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(52, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        Path saved = root.resolve("saved.zip");
        long count;
        try (SymmemParallelWrapper w = stage3(hollow, n).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(ckpt);
            w.saveModel(saved); // the consolidated file, on request: the reference's start
            count = w.gatherParameters().length();
        }
        // each worker wrote its blocks only: no model.zip, and the parameter files together hold the vector once
        assertFalse(Files.exists(ckpt.resolve(ShardCheckpoint.MODEL_FILE)), "a stage-3 checkpoint holds no model.zip");
        long held = 0;
        for (int r = 0; r < n; r++) {
            ShardCheckpoint.Header h = ShardCheckpoint.readHeader(ckpt.resolve(ShardCheckpoint.paramsFileName(r, n)));
            assertEquals(ZeroStage.PARAMETERS.name(), h.stage());
            assertTrue(h.stateElements() < count / n + 64L * h.paramRanges().size(), "rank " + r + " wrote "
                    + h.stateElements() + " of " + count + " parameters");
            held += h.stateElements();
            assertTrue(Files.isRegularFile(ckpt.resolve(ShardCheckpoint.shardFileName(r, n))));
        }
        assertEquals(count, held);
        assertEquals(n, CheckpointDirectory.verify(ckpt).ranks());
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(saved.toFile(), true);

        List<Double> losses = new ArrayList<>();
        INDArray trained;
        Path restored = root.resolve("restored.zip");
        Path after = root.resolve("after.zip");
        try (SymmemParallelWrapper w = stage3(hollow, m).stepListener(r -> losses.add(r.loss())).build()) {
            w.restoreCheckpoint(ckpt);
            w.saveModel(restored);
            w.fit(new BatchListIterator(second));
            trained = w.gatherParameters();
            w.saveModel(after);
        }
        String what = n + " -> " + m + " workers";
        SameTraining.assertSameModel(consolidated, ModelSerializer.restoreMultiLayerNetwork(restored.toFile(), true),
                what + ", right after the restore");
        List<Double> expectedLosses = new ArrayList<>();
        MultiLayerNetwork reference = plainFrom(ModelSerializer.restoreMultiLayerNetwork(saved.toFile(), true), m, second,
                expectedLosses);
        SameTraining.assertSameLosses(expectedLosses, losses, what);
        assertTrue(ModelReplica.bitwiseEqual(reference.params(), trained), what + ", trained on: parameters; max"
                + " relative difference " + Nets.maxRelativeDifference(trained, reference.params()));
        SameTraining.assertSameModel(reference, ModelSerializer.restoreMultiLayerNetwork(after.toFile(), true),
                what + ", trained on");
    }

    @Test
    void groupModeCheckpointsEveryKStepsAndResumesOnFewerRanks() throws Exception {
        int n = 3;
        int m = 2;
        List<DataSet> data = Nets.batches(53, BATCHES, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        Path atDeath = root.resolve("at-death.zip");
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        InJvmWorld.runOnEveryRank(n, options, group -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf(Nets.HIDDEN)).group(group)
                    .ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS).checkpointEvery(2, ckpt).build()) {
                w.fit(new BatchListIterator(data));
                w.fit(new BatchListIterator(data.subList(0, 6))); // 2 steps, the last one checkpointed; then "dies"
                w.saveModel(atDeath);
            }
            return null;
        });
        CheckpointDirectory.Checkpoint taken = CheckpointDirectory.latestComplete(ckpt).orElseThrow();
        assertEquals(6, taken.counters().step());
        assertEquals(6, taken.counters().batchesInEpoch());
        assertFalse(Files.exists(taken.dir().resolve(ShardCheckpoint.MODEL_FILE)));
        Path restored = root.resolve("restored.zip");
        List<INDArray> trained = InJvmWorld.runOnEveryRank(m, options, group -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf(Nets.HIDDEN)).group(group)
                    .ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS).checkpointEvery(2, ckpt).resumeFrom(ckpt)
                    .build()) {
                assertEquals(taken.counters(), w.resumedFrom().counters());
                w.saveModel(restored);
                w.fit(new BatchListIterator(data)); // skips the 6 batches the 3 ranks trained in this epoch
                return w.gatherParameters();
            }
        });
        // the 3 ranks' state at their last step, the checkpointed one (their fit then counted the epoch it left)
        MultiLayerNetwork last = ModelSerializer.restoreMultiLayerNetwork(atDeath.toFile(), true);
        last.setEpochCount(taken.counters().epoch());
        SameTraining.assertSameModel(last, ModelSerializer.restoreMultiLayerNetwork(restored.toFile(), true),
                "3 -> 2 ranks, right after the restore");
        MultiLayerNetwork reference = plainFrom(last, m, data.subList(6, BATCHES), new ArrayList<>());
        for (int r = 0; r < m; r++) {
            assertTrue(ModelReplica.bitwiseEqual(reference.params(), trained.get(r)), "rank " + r + " trained on");
        }
        assertEquals(m, CheckpointDirectory.latestComplete(ckpt).orElseThrow().counters().ranks());
    }

    @Test
    void aHollowRunResumesFromAConsolidatedCheckpointOfAnotherStage() throws IOException {
        List<DataSet> first = Nets.batches(55, 8, 6, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(56, 6, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        MultiLayerNetwork net = new MultiLayerNetwork(conf(Nets.HIDDEN));
        net.init();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(2).ompThreadsPerWorker(1)
                .sharding(ZeroStage.OPTIMIZER_STATE).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(ckpt); // stage 1: state shards and model.zip
        }
        MultiLayerNetwork consolidated = ModelSerializer.restoreMultiLayerNetwork(
                ckpt.resolve(ShardCheckpoint.MODEL_FILE).toFile(), true);
        Path restored = root.resolve("restored.zip");
        INDArray trained;
        try (SymmemParallelWrapper w = stage3(true, 3).build()) {
            w.restoreCheckpoint(ckpt);
            w.saveModel(restored);
            w.fit(new BatchListIterator(second));
            trained = w.gatherParameters();
        }
        SameTraining.assertSameModel(consolidated, ModelSerializer.restoreMultiLayerNetwork(restored.toFile(), true),
                "stage 1 on 2 -> stage 3 on 3, right after the restore");
        MultiLayerNetwork reference = plainFrom(consolidated, 3, second, new ArrayList<>());
        assertTrue(ModelReplica.bitwiseEqual(reference.params(), trained), "trained on from the stage-1 checkpoint");
    }

    @Test
    void tornPartialAndForeignCheckpointsAreRefusedLeavingTheWrapperAsItWas() throws IOException {
        List<DataSet> data = Nets.batches(54, 4, 6, DataType.DOUBLE);
        Path ckpt = root.resolve("ckpt");
        try (SymmemParallelWrapper w = stage3(true, 2).build()) {
            w.fit(new BatchListIterator(data));
            w.saveCheckpoint(ckpt);
        }
        try (SymmemParallelWrapper w = stage3(true, 2).build()) {
            INDArray before = w.gatherParameters();
            IllegalArgumentException p = CheckpointRefusals.assertTornAndPartialRefused(w, ckpt, root, 2);
            assertTrue(p.getMessage().contains(ShardCheckpoint.paramsFileName(0, 2)), p.getMessage());
            assertTrue(ModelReplica.bitwiseEqual(before, w.gatherParameters()), "a refused restore changed the shards");
        }
        // another stage: refused with the fix, nothing changed
        MultiLayerNetwork plain = new MultiLayerNetwork(conf(Nets.HIDDEN));
        plain.init();
        INDArray plainBefore = plain.params().dup();
        for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.OPTIMIZER_STATE}) {
            SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(plain).workers(2).ompThreadsPerWorker(1);
            try (SymmemParallelWrapper w = stage == null ? b.build() : b.sharding(stage).build()) {
                IllegalArgumentException s = assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(ckpt));
                assertTrue(s.getMessage().contains("stage-3 checkpoint") && s.getMessage().contains("sharding(PARAMETERS)")
                        && s.getMessage().contains("saveModel"), stage + ": " + s.getMessage());
            }
            assertTrue(ModelReplica.bitwiseEqual(plainBefore, plain.params()), stage + ": the model changed");
        }
        // another model: refused naming what was expected and found
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf(Nets.HIDDEN + 2)).workers(2)
                .ompThreadsPerWorker(1).sharding(ZeroStage.PARAMETERS).build()) {
            IllegalArgumentException s = assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(ckpt));
            assertTrue(s.getMessage().contains("does not fit") && s.getMessage().contains("expected")
                    && s.getMessage().contains("found"), s.getMessage());
        }
    }
}
