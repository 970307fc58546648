package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.EnumSet;
import java.util.List;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A tensor-parallel checkpoint of a {@code dp x tp = A x T} run resumed on {@code B x U} (issue 32): every rank
 * re-slices the T shards' weights, biases and updater state (Adam's moments) along each tensor-parallel layer's split
 * axis onto its own shard of degree U, and the dp shards (ZeRO 1-3) are cut from that as from a model-only checkpoint;
 * a ZeRO stage 3 checkpoint's tp shards are first assembled from their dp ranks' parameter and state shards.
 * Training on equals, bitwise, the uninterrupted run at the new degree started from the consolidated parameters and
 * updater state of that step ({@link TensorParallel#gather} of the old degree's shards, {@link TensorParallel#shard}
 * for the new): for a network of two column/row blocks, one with both vocabulary ends split, a graph's block, and a
 * graph's block with both vocabulary ends. A degree that does not divide a split dimension is refused on every rank,
 * naming the layer, its dimension and the degrees that work, before anything is read into a model or written.
 */
class TensorParallelResumeTest {

    /** Batches per epoch. The killed run's newest checkpoint is after 4 batches of epoch 1, on 1 or 2 dp ranks. */
    private static final int BATCHES = 8;

    @TempDir
    Path tmp;

    /** A model to shard: its unsharded network, how a rank shards it, and its data. */
    private enum Kind {
        BLOCKS(() -> TensorParallelTest.unsharded(DataType.DOUBLE, 0), TensorParallelTest.batches(DataType.DOUBLE, BATCHES, 8)),
        VOCABULARY(() -> VocabularyParallelTest.embedded(DataType.DOUBLE, Activation.IDENTITY),
                VocabularyParallelTest.tokens(DataType.DOUBLE, BATCHES, 8)),
        GRAPH(TensorParallelGraphTest::graph, TensorParallelTest.batches(DataType.DOUBLE, BATCHES, 8)),
        VOCABULARY_GRAPH(VocabularyParallelTest::embeddedGraph, VocabularyParallelTest.tokens(DataType.DOUBLE, BATCHES, 8));

        final Supplier<Model> unsharded;
        final List<DataSet> data;

        Kind(Supplier<Model> unsharded, List<DataSet> data) {
            this.unsharded = unsharded;
            this.data = data;
        }

        /** Rank {@code rank}'s shard of degree {@code size} of {@code whole}, updater state and counters included. */
        Model shard(Model whole, int rank, int size) {
            EnumSet<TensorParallel.VocabularyParallel> both = EnumSet.allOf(TensorParallel.VocabularyParallel.class);
            return switch (this) {
                case BLOCKS -> TensorParallel.shard((MultiLayerNetwork) whole, rank, size, 0, 2);
                case VOCABULARY -> TensorParallel.shard((MultiLayerNetwork) whole, rank, size, both, 1);
                case GRAPH -> TensorParallel.shard((ComputationGraph) whole, rank, size, "up");
                case VOCABULARY_GRAPH -> TensorParallel.shard((ComputationGraph) whole, rank, size, both, "up");
            };
        }
    }

    /** What one rank ends with. */
    private record Result(double[] params, double[] state, int iterations, int epochs, long resumedStep, Path resumedDir,
                          Model net, Model gathered) {
    }

    /** Trains one rank's wrapper of {@code mine}. */
    @FunctionalInterface
    private interface Body {
        void train(SymmemParallelWrapper wrapper, Model mine) throws Exception;
    }

    /**
     * On a {@code dp x tp} mesh in this JVM: every rank takes the network {@code start} gives its tp rank, attaches it,
     * builds a wrapper over its dp group with {@code options}, trains with {@code body}, and with {@code gather} gathers
     * the whole network (parameters, updater state, counters) over the tp group.
     */
    private static List<Result> mesh(Kind kind, int dp, int tp, java.util.function.IntFunction<Model> start,
                                     java.util.function.UnaryOperator<SymmemParallelWrapper.Builder> options,
                                     boolean gather, Body body) {
        return InJvmWorld.runOnEveryRank(dp * tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            try (DeviceMesh m = DeviceMesh.of(group, "dp", dp, "tp", tp)) {
                Group tpGroup = m.group("tp");
                Model mine = start.apply(tpGroup.rank());
                try (Communicator c = Communicator.create(tpGroup)) {
                    SymmemParallelWrapper.Builder b;
                    if (mine instanceof MultiLayerNetwork net) {
                        TensorParallel.attach(net, c);
                        b = SymmemParallelWrapper.builder(net);
                    } else {
                        TensorParallel.attach((ComputationGraph) mine, c);
                        b = SymmemParallelWrapper.builder((ComputationGraph) mine);
                    }
                    try (SymmemParallelWrapper w = options.apply(b.group(m.group("dp")).ompThreadsPerWorker(1)).build()) {
                        body.train(w, mine);
                        Model whole = null;
                        if (gather) {
                            whole = kind.unsharded.get();
                            if (mine instanceof MultiLayerNetwork net) {
                                TensorParallel.gather(net, c, (MultiLayerNetwork) whole);
                            } else {
                                TensorParallel.gather((ComputationGraph) mine, c, (ComputationGraph) whole);
                            }
                        }
                        CheckpointDirectory.Checkpoint from = w.resumedFrom();
                        return new Result(mine.params().dup().toDoubleVector(), state(mine).dup().toDoubleVector(),
                                iterations(mine), epochs(mine), from == null ? -1 : from.counters().step(),
                                from == null ? null : from.dir(), mine, whole);
                    }
                }
            }
        });
    }

    private static org.nd4j.linalg.api.ndarray.INDArray state(Model m) {
        return m instanceof MultiLayerNetwork n ? n.getUpdater().getStateViewArray()
                : ((ComputationGraph) m).getUpdater().getStateViewArray();
    }

    private static int iterations(Model m) {
        return m instanceof MultiLayerNetwork n ? n.getIterationCount() : ((ComputationGraph) m).getIterationCount();
    }

    private static int epochs(Model m) {
        return m instanceof MultiLayerNetwork n ? n.getEpochCount() : ((ComputationGraph) m).getEpochCount();
    }

    private static void setEpochs(Model m, int epochs) {
        if (m instanceof MultiLayerNetwork n) {
            n.setEpochCount(epochs);
        } else {
            ((ComputationGraph) m).getConfiguration().setEpochCount(epochs);
        }
    }

    private static SymmemParallelWrapper.Builder shard(SymmemParallelWrapper.Builder b, ZeroStage sharding) {
        return sharding == null ? b : b.sharding(sharding);
    }

    /**
     * One epoch and 6 batches of the second on {@code dp x tp} with a checkpoint every 3 steps; "dies" there. The
     * newest checkpoint is after 4 batches of epoch 1 on 1 dp rank (step 12) and on 2 (step 6).
     */
    private static void killed(Kind kind, int dp, int tp, Path root, ZeroStage sharding) {
        Model initial = kind.unsharded.get();
        mesh(kind, dp, tp, t -> kind.shard(initial, t, tp), b -> shard(b, sharding).checkpointEvery(3, root)
                .resumeFrom(root), false, (w, mine) -> {
            w.fit(new BatchListIterator(kind.data));
            w.fit(new BatchListIterator(kind.data.subList(0, 6)));
        });
    }

    @ParameterizedTest(name = "{0} {1}x{2} -> {3}x{4} sharding={5} then {6}")
    @CsvSource({
        "BLOCKS, 1, 2, 2, 1, NONE, NONE",
        "BLOCKS, 2, 2, 1, 4, OPTIMIZER_STATE, OPTIMIZER_STATE",
        "BLOCKS, 1, 4, 2, 2, GRADIENTS, GRADIENTS",
        "BLOCKS, 1, 4, 2, 2, OPTIMIZER_STATE, PARAMETERS",
        "BLOCKS, 2, 2, 1, 4, PARAMETERS, PARAMETERS",
        "BLOCKS, 1, 4, 2, 2, PARAMETERS, OPTIMIZER_STATE",
        "VOCABULARY, 2, 2, 1, 4, PARAMETERS, NONE",
        "VOCABULARY, 2, 2, 1, 4, NONE, NONE",
        "VOCABULARY, 1, 4, 2, 1, OPTIMIZER_STATE, OPTIMIZER_STATE",
        "GRAPH, 1, 2, 2, 1, OPTIMIZER_STATE, OPTIMIZER_STATE",
        "GRAPH, 2, 2, 1, 4, NONE, NONE",
        "GRAPH, 2, 2, 1, 4, PARAMETERS, PARAMETERS",
        "VOCABULARY_GRAPH, 1, 4, 2, 2, NONE, NONE"})
    void resumedOnAnotherTensorParallelDegreeEqualsTheRunAtThatDegreeFromTheConsolidatedStep(
            Kind kind, int a, int t, int b, int u, String stage, String then) throws IOException {
        ZeroStage sharding = stage.equals("NONE") ? null : ZeroStage.valueOf(stage);
        ZeroStage resumedSharding = then.equals("NONE") ? null : ZeroStage.valueOf(then);
        Path root = tmp.resolve("root");
        Model initial = kind.unsharded.get();
        // the reference: A x T on the batches the checkpoint had trained, consolidated, sharded for U, B x U on the rest
        List<Result> first = mesh(kind, a, t, r -> kind.shard(initial, r, t), x -> shard(x, sharding), true,
                (w, mine) -> {
                    w.fit(new BatchListIterator(kind.data));
                    w.fit(new BatchListIterator(kind.data.subList(0, 4)));
                    setEpochs(mine, 1); // as the checkpoint taken in the middle of the second epoch has it
                });
        Model consolidated = first.getFirst().gathered();
        List<Result> expected = mesh(kind, b, u, r -> kind.shard(consolidated, r, u), x -> shard(x, resumedSharding), false,
                (w, mine) -> w.fit(new BatchListIterator(kind.data.subList(4, BATCHES))));
        // the run: A x T killed after its checkpoint, resumed from the root on B x U (parameters shifted: only a
        // restore makes them the checkpoint's)
        killed(kind, a, t, root, sharding);
        long step = 12 / a;
        List<Result> resumed = mesh(kind, b, u, r -> {
            Model mine = kind.shard(initial, r, u);
            mine.params().addi(0.25);
            return mine;
        }, x -> shard(x, resumedSharding).checkpointEvery(1, root).resumeFrom(root), false, (w, mine) -> {
            assertEquals(new CheckpointDirectory.Counters(step, 1, (int) step, 4, 4 * 8, a), w.resumedFrom().counters(),
                    "the checkpoint of " + a + " x " + t);
            for (int e = epochs(mine); e < 2; e++) {
                w.fit(new BatchListIterator(kind.data));
            }
        });
        for (int r = 0; r < b * u; r++) {
            String what = kind + " " + a + "x" + t + " -> " + b + "x" + u + " rank " + r;
            assertEquals(step, resumed.get(r).resumedStep(), what);
            assertEquals(root.resolve("tp-0-of-" + t).resolve(String.format("step-%012d", step)), resumed.get(r)
                    .resumedDir(), what + ": the old degree's step");
            assertArrayEquals(expected.get(r).params(), resumed.get(r).params(), what + ": parameters");
            assertArrayEquals(expected.get(r).state(), resumed.get(r).state(), what + ": updater state");
            assertEquals(expected.get(r).iterations(), resumed.get(r).iterations(), what + ": iterations");
            assertEquals(2, resumed.get(r).epochs(), what + ": epochs");
        }
        // the new degree's checkpoints (one a step here) beside the old degree's
        List<String> dirs;
        try (Stream<Path> s = Files.list(root)) {
            dirs = s.filter(Files::isDirectory).map(p -> p.getFileName().toString()).sorted().toList();
        }
        for (int r = 0; r < u; r++) {
            assertTrue(dirs.contains("tp-" + r + "-of-" + u), dirs.toString());
        }
    }

    /** Two blocks as {@link TensorParallelTest#unsharded}, {@code width} wide, float64. */
    private static MultiLayerNetwork blocks(int width) {
        return TensorParallelTest.unsharded(DataType.DOUBLE, 0, width);
    }

    /**
     * Degree 3 does not divide the checkpoint's split dimensions (16): refused on every rank of a 1 x 3 mesh, before
     * anything is read into a model or written under the root, naming the layer, its dimension and the degrees that
     * work. (A network of width 16 cannot even be sharded for 3: {@link TensorParallel#shard} refuses it, with the
     * degrees that work; here the ranks hold a network of width 12, which can.)
     */
    @Test
    void aDegreeThatDoesNotDivideASplitDimensionIsRefusedOnEveryRankBeforeAnythingIsWritten() throws IOException {
        Path root = tmp.resolve("three");
        killed(Kind.BLOCKS, 2, 2, root, null);
        List<String> before = TensorParallelCheckpointTest.tree(root);
        MultiLayerNetwork twelve = blocks(12);
        List<String> refusals = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    try (DeviceMesh m = DeviceMesh.of(group, "dp", 1, "tp", 3);
                         Communicator c = Communicator.create(m.group("tp"))) {
                        MultiLayerNetwork mine = TensorParallel.shard(twelve, m.group("tp").rank(), 3, 0, 2);
                        TensorParallel.attach(mine, c);
                        double[] params = mine.params().dup().toDoubleVector();
                        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                                () -> SymmemParallelWrapper.builder(mine).group(m.group("dp")).ompThreadsPerWorker(1)
                                        .checkpointEvery(3, root).resumeFrom(root).build());
                        assertArrayEquals(params, mine.params().toDoubleVector(), "nothing read into the model");
                        return e.getMessage();
                    }
                });
        for (String message : refusals) {
            assertEquals(refusals.getFirst(), message, "every rank the same refusal");
            assertTrue(message.contains("tensor-parallel degree 2's checkpoint cannot be re-sliced for degree 3: layer 0"
                    + " (ColumnParallelDenseLayer) splits nOut=16, not divisible by 3")
                    && message.contains("layer 1 (RowParallelDenseLayer) splits nIn=16, not divisible by 3")
                    && message.contains("degrees that work: [1, 2, 4, 8, 16]"), message);
        }
        assertEquals(before, TensorParallelCheckpointTest.tree(root), "nothing written under the root");
        // sharding a network whose width 3 does not divide names the degrees that work too
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.shard(TensorParallelTest.unsharded(DataType.DOUBLE, 0), 0, 3, 0, 2));
        assertTrue(e.getMessage().contains("nOut=16, not divisible by the tensor-parallel size 3")
                && e.getMessage().contains("degrees that work: [1, 2, 4, 8, 16]"), e.getMessage());
    }

    /**
     * {@link TensorParallelReslice} alone: shards of degree 2 of a network trained 3 Adam steps, re-sliced for degree 4
     * and 1, are bit for bit {@link TensorParallel#shard} of the network for that degree (parameters, both Adam
     * moments, counters); a network of another width is refused naming the layer and both widths, nothing written.
     */
    @Test
    void reslicedShardsAreTheShardsOfTheWholeNetworkBitwise() {
        MultiLayerNetwork whole = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        for (DataSet batch : TensorParallelTest.batches(DataType.DOUBLE, 3, 8)) {
            whole.fit(batch);
        }
        List<MultiLayerNetwork> two = List.of(TensorParallel.shard(whole, 0, 2, 0, 2), TensorParallel.shard(whole, 1, 2, 0, 2));
        for (int size : new int[] {4, 1}) {
            for (int r = 0; r < size; r++) {
                MultiLayerNetwork expected = TensorParallel.shard(whole, r, size, 0, 2);
                MultiLayerNetwork target = TensorParallel.shard(TensorParallelTest.unsharded(DataType.DOUBLE, 0), r, size,
                        0, 2);
                TensorParallelReslice.reslice(two, target, r, size);
                assertArrayEquals(expected.params().toDoubleVector(), target.params().toDoubleVector(), size + "/" + r);
                assertArrayEquals(expected.getUpdater().getStateViewArray().toDoubleVector(),
                        target.getUpdater().getStateViewArray().toDoubleVector(), size + "/" + r + " Adam state");
                assertEquals(3, target.getIterationCount());
            }
        }
        MultiLayerNetwork wider = TensorParallel.shard(blocks(24), 0, 4, 0, 2);
        double[] before = wider.params().dup().toDoubleVector();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallelReslice.reslice(two, wider, 0, 4));
        assertTrue(e.getMessage().startsWith("tensor-parallel degree 2's checkpoint does not fit this rank's shard of"
                + " degree 4: layer 0 W splits nOut=16 in the checkpoint, 24 here (6 per rank of 4)"), e.getMessage());
        assertArrayEquals(before, wider.params().toDoubleVector(), "nothing written");
    }
}
