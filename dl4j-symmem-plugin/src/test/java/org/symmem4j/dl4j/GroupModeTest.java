package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Group mode ({@code builder(model).group(group)}): N ranks, each its own wrapper on its own copy of
 * the model with one worker, train bitwise like one wrapper with N worker threads — parameters,
 * updater state, BatchNorm's running statistics and every step's score — including a short last
 * step that leaves ranks idle. The ranks here are threads of one JVM, each with its own wrapper, as
 * processes would be (the launcher's processes run the same code: see the examples' and it-tests'
 * process runs).
 */
class GroupModeTest {

    static Stream<Arguments> cases() {
        return Stream.of(
                Arguments.of("adam", 2, 6 * 2, false, null),
                Arguments.of("adam", 3, 5 * 3 + 1, false, null), // the last step has 1 batch for 3 ranks: two idle
                Arguments.of("batchnorm", 2, 5 * 2 + 1, false, null),
                Arguments.of("adam", 2, 4 * 2, true, null),      // overlap of the sync with backprop
                Arguments.of("adam", 3, 4 * 3 + 2, false, ZeroStage.OPTIMIZER_STATE),
                Arguments.of("batchnorm", 2, 4 * 2, false, ZeroStage.GRADIENTS),
                Arguments.of("adam", 3, 4 * 3 + 1, false, ZeroStage.PARAMETERS), // stage 3, two ranks idle at the end
                Arguments.of("adam", 2, 4 * 2, false, ZeroStage.PARAMETERS),
                Arguments.of("batchnorm", 2, 4 * 2 + 1, false, ZeroStage.PARAMETERS)); // running statistics merged
    }

    static MultiLayerNetwork net(String kind) {
        return kind.equals("batchnorm") ? StateNets.batchNormMlp(DataType.FLOAT, false, new Adam(0.01))
                : Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
    }

    static List<DataSet> data(String kind, int batches) {
        return Nets.batches(7, batches, 8, DataType.FLOAT);
    }

    /** What a run leaves: the model's parameters and updater state, and every step's score. */
    record Outcome(INDArray params, INDArray updaterState, List<Double> scores, double modelScore, int iterations) {
    }

    static Outcome train(MultiLayerNetwork model, SymmemParallelWrapper.Builder builder, List<DataSet> data, int epochs) {
        List<Double> scores = new ArrayList<>();
        builder.ompThreadsPerWorker(1).stepListener(r -> scores.add(r.loss()));
        try (SymmemParallelWrapper wrapper = builder.build()) {
            for (int e = 0; e < epochs; e++) {
                wrapper.fit(new BatchListIterator(data));
            }
        }
        return new Outcome(model.params().dup(), model.getUpdater().getStateViewArray().dup(), scores, model.score(),
                model.getIterationCount());
    }

    static SymmemParallelWrapper.Builder options(SymmemParallelWrapper.Builder b, boolean overlap, ZeroStage sharding) {
        b.overlapSyncWithBackprop(overlap);
        if (sharding != null) {
            b.sharding(sharding);
        }
        return b;
    }

    @ParameterizedTest(name = "{0}, {1} ranks, {2} batches, overlap={3}, sharding={4}")
    @MethodSource("cases")
    void ranksOfAGroupTrainBitwiseLikeWorkerThreads(String kind, int ranks, int batches, boolean overlap,
                                                     ZeroStage sharding) {
        List<DataSet> data = data(kind, batches);
        MultiLayerNetwork initial = net(kind);
        MultiLayerNetwork threadsModel = initial.clone();
        Outcome threads = train(threadsModel, options(SymmemParallelWrapper.builder(threadsModel).workers(ranks), overlap,
                sharding), data, 2);

        List<Outcome> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = initial.clone();
                    return train(mine, options(SymmemParallelWrapper.builder(mine).group(group), overlap, sharding), data, 2);
                });
        for (int r = 0; r < ranks; r++) {
            Outcome o = perRank.get(r);
            assertTrue(ModelReplica.bitwiseEqual(threads.params(), o.params()), "rank " + r + ": parameters differ bitwise"
                    + " from thread mode's (BatchNorm's running statistics are parameters too)");
            assertTrue(ModelReplica.bitwiseEqual(threads.updaterState(), o.updaterState()), "rank " + r + ": updater state");
            assertEquals(threads.scores(), o.scores(), "rank " + r + ": every step's score, bitwise (as doubles)");
            assertEquals(Double.doubleToLongBits(threads.modelScore()), Double.doubleToLongBits(o.modelScore()),
                    "rank " + r + ": model.score() after fit");
            assertEquals(threads.iterations(), o.iterations(), "rank " + r + ": iteration count");
        }
    }

    /**
     * The replicas' gradient views lie in the group's symmetric memory, which ND4J wraps without owning:
     * wrappers built, trained and closed again and again, with garbage collections between them (ND4J
     * releases its buffers then), neither crash nor corrupt the next run, which still equals threads.
     */
    @Test
    void wrappersClosedAgainAndAgainLeaveNoBufferBehindThatNd4jFrees() throws Exception {
        List<DataSet> data = Nets.batches(3, 4, 8, DataType.FLOAT);
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        MultiLayerNetwork threadsModel = initial.clone();
        Outcome threads = train(threadsModel, SymmemParallelWrapper.builder(threadsModel).workers(2), data, 1);
        for (int cycle = 0; cycle < 5; cycle++) {
            List<Outcome> perRank = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                    group -> {
                        MultiLayerNetwork mine = initial.clone();
                        return train(mine, SymmemParallelWrapper.builder(mine).group(group), data, 1);
                    });
            for (int i = 0; i < 3; i++) {
                System.gc();
                Thread.sleep(50); // ND4J's deallocator thread releases what the collection found unreachable
            }
            int c = cycle;
            perRank.forEach(o -> assertTrue(ModelReplica.bitwiseEqual(threads.params(), o.params()), "cycle " + c));
        }
    }

    /**
     * ZeRO checkpoints in group mode: each rank writes its own shard file and rank 0 the model; wrappers
     * built afresh restore them and train on exactly as the uninterrupted run of worker threads does.
     * A shard that fails its checksum on one rank makes every rank refuse the restore, each model left
     * as it was.
     */
    @Test
    void shardedCheckpointsArePerRankAndRestoreTheRun(@TempDir Path dir) throws IOException {
        List<DataSet> data = Nets.batches(9, 2 * 4, 8, DataType.FLOAT);
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        MultiLayerNetwork threadsModel = initial.clone();
        Outcome threads = train(threadsModel, SymmemParallelWrapper.builder(threadsModel).workers(2)
                .sharding(ZeroStage.OPTIMIZER_STATE), data, 2);
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        List<Outcome> resumed = InJvmWorld.runOnEveryRank(2, options, group -> {
            MultiLayerNetwork first = initial.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(first).group(group)
                    .sharding(ZeroStage.OPTIMIZER_STATE).ompThreadsPerWorker(1).build()) {
                w.fit(new BatchListIterator(data));
                w.saveCheckpoint(dir);
            }
            MultiLayerNetwork fresh = initial.clone();
            return train(fresh, SymmemParallelWrapper.builder(fresh).group(group).sharding(ZeroStage.OPTIMIZER_STATE),
                    data, 1, w -> w.restoreCheckpoint(dir));
        });
        assertTrue(Files.isRegularFile(dir.resolve(ShardCheckpoint.shardFileName(0, 2))));
        assertTrue(Files.isRegularFile(dir.resolve(ShardCheckpoint.shardFileName(1, 2))));
        assertTrue(Files.isRegularFile(dir.resolve(ShardCheckpoint.MODEL_FILE)));
        for (int r = 0; r < 2; r++) {
            assertTrue(ModelReplica.bitwiseEqual(threads.params(), resumed.get(r).params()), "rank " + r + ": parameters");
            assertTrue(ModelReplica.bitwiseEqual(threads.updaterState(), resumed.get(r).updaterState()),
                    "rank " + r + ": the full updater state, gathered from both ranks' shards");
        }

        Path shard1 = dir.resolve(ShardCheckpoint.shardFileName(1, 2));
        byte[] bytes = Files.readAllBytes(shard1);
        bytes[bytes.length - 1] ^= 1;
        Files.write(shard1, bytes);
        List<String> errors = refusedRestores(initial, dir, options);
        // every rank checks every file against the manifest: both refuse the torn checkpoint, naming the file
        for (int r = 0; r < 2; r++) {
            assertTrue(errors.get(r).contains("is torn: file=" + ShardCheckpoint.shardFileName(1, 2)), errors.get(r));
        }

        // written before manifests: the shard's own checksum, on the rank that reads it, and the agreement
        Files.delete(dir.resolve(CheckpointDirectory.MANIFEST));
        errors = refusedRestores(initial, dir, options);
        assertTrue(errors.get(0).contains("checkpoint-restored failed on rank 1"), errors.get(0));
        assertTrue(errors.get(1).toLowerCase(java.util.Locale.ROOT).contains("checksum"), errors.get(1));
    }

    private static List<String> stepDirs(Path root) throws IOException {
        try (java.util.stream.Stream<Path> s = Files.list(root)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("step-")).sorted().toList();
        }
    }

    /** Every rank restores {@code dir} into a fresh wrapper, which must refuse it leaving the model as it was. */
    private static List<String> refusedRestores(MultiLayerNetwork initial, Path dir, GroupOptions options) {
        return InJvmWorld.runOnEveryRank(2, options, group -> {
            MultiLayerNetwork m = initial.clone();
            INDArray before = m.params().dup();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(m).group(group).sharding(ZeroStage.OPTIMIZER_STATE)
                    .build()) {
                Exception e = assertThrows(Exception.class, () -> w.restoreCheckpoint(dir));
                assertTrue(ModelReplica.bitwiseEqual(before, m.params()), "rank " + group.rank() + ": model as it was");
                return e.getMessage();
            }
        });
    }

    @Test
    void periodicCheckpointsInGroupModeResumeTheRunBitwise(@TempDir Path root) throws IOException {
        List<DataSet> data = Nets.batches(10, 2 * 4, 8, DataType.FLOAT);
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        MultiLayerNetwork threadsModel = initial.clone();
        Outcome threads = train(threadsModel, SymmemParallelWrapper.builder(threadsModel).workers(2)
                .sharding(ZeroStage.OPTIMIZER_STATE), data, 2);
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        List<Outcome> resumed = InJvmWorld.runOnEveryRank(2, options, group -> {
            MultiLayerNetwork dead = initial.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(dead).group(group)
                    .sharding(ZeroStage.OPTIMIZER_STATE).ompThreadsPerWorker(1)
                    .checkpointEvery(Duration.ofNanos(1), root).build()) { // by time: rank 0's clock, every step here
                w.fit(new BatchListIterator(data)); // steps 1..4
                w.fit(new BatchListIterator(data.subList(0, 4))); // steps 5, 6; then "dies"
            }
            if (group.rank() == 0) {
                assertEquals(List.of("step-000000000005", "step-000000000006"), stepDirs(root), "the newest 2 kept");
            }
            MultiLayerNetwork fresh = initial.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(fresh).group(group)
                    .sharding(ZeroStage.OPTIMIZER_STATE).ompThreadsPerWorker(1).checkpointEvery(3, root).resumeFrom(root)
                    .build()) {
                assertEquals(new CheckpointDirectory.Counters(6, 1, 6, 4, 4 * 8, 2), w.resumedFrom().counters());
                for (int e = fresh.getEpochCount(); e < 2; e++) {
                    w.fit(new BatchListIterator(data)); // skips the 4 batches trained before step 6's checkpoint
                }
            }
            return new Outcome(fresh.params().dup(), fresh.getUpdater().getStateViewArray().dup(), List.of(),
                    fresh.score(), fresh.getIterationCount());
        });
        for (int r = 0; r < 2; r++) {
            assertTrue(ModelReplica.bitwiseEqual(threads.params(), resumed.get(r).params()), "rank " + r + ": parameters");
            assertTrue(ModelReplica.bitwiseEqual(threads.updaterState(), resumed.get(r).updaterState()),
                    "rank " + r + ": updater state");
            assertEquals(threads.iterations(), resumed.get(r).iterations(), "rank " + r + ": iterations");
        }
    }

    /** As {@link #train}, with {@code first} run on the wrapper before the epochs (a restore). */
    static Outcome train(MultiLayerNetwork model, SymmemParallelWrapper.Builder builder, List<DataSet> data, int epochs,
                         WrapperAction first) throws IOException {
        List<Double> scores = new ArrayList<>();
        builder.ompThreadsPerWorker(1).stepListener(r -> scores.add(r.loss()));
        try (SymmemParallelWrapper wrapper = builder.build()) {
            first.run(wrapper);
            for (int e = 0; e < epochs; e++) {
                wrapper.fit(new BatchListIterator(data));
            }
        }
        return new Outcome(model.params().dup(), model.getUpdater().getStateViewArray().dup(), scores, model.score(),
                model.getIterationCount());
    }

    /** Something done to a wrapper that may fail with an I/O error. */
    interface WrapperAction {
        void run(SymmemParallelWrapper wrapper) throws IOException;
    }

    @Test
    void whatGroupModeCannotDoYetIsRefusedBeforeAnythingStarts() {
        List<String> messages = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
            MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
            List<String> out = new ArrayList<>();
            Function<Runnable, String> refusal = r -> assertThrows(IllegalArgumentException.class, r::run).getMessage();
            out.add(refusal.apply(() -> SymmemParallelWrapper.builder(net).group(group).workers(3).build()));
            out.add(refusal.apply(() -> SymmemParallelWrapper.builder(net).group(group).recordTimeline(10).build()));
            // a listener reading activations: refused at fit, before any step
            net.setListeners(new BaseTrainingListener() {
                @Override
                public void onForwardPass(org.deeplearning4j.nn.api.Model model, List<INDArray> activations) {
                }
            });
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).group(group).build()) {
                out.add(assertThrows(IllegalStateException.class,
                        () -> w.fit(new BatchListIterator(Nets.batches(1, 2, 4, DataType.FLOAT)))).getMessage());
            }
            // and any listener with sharding (each step would need every rank's shards)
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).group(group)
                    .sharding(ZeroStage.OPTIMIZER_STATE).build()) {
                out.add(assertThrows(IllegalStateException.class,
                        () -> w.fit(new BatchListIterator(Nets.batches(1, 2, 4, DataType.FLOAT)))).getMessage());
            }
            return String.join("\n", out);
        });
        for (String m : messages) {
            assertTrue(m.contains("workers=3 with group(...) of worldSize=2"), m);
            assertTrue(m.contains("group(...) with recordTimeline"), m);
            assertTrue(m.contains("overrides onForwardPass in group mode"), m);
            assertTrue(m.contains("listeners with sharding=OPTIMIZER_STATE in group mode"), m);
        }
    }
}
