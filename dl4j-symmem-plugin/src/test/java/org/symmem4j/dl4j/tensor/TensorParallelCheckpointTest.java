package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
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
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.CheckpointLayout;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Periodic checkpoints of a tensor-parallel network trained data-parallel on a {@code dp x tp = 2 x 2} mesh: each tp
 * rank's shard goes to {@code root/tp-R-of-2/step-<n>}, written by its data-parallel group; a run killed after step 7
 * and resumed from the root equals the uninterrupted run bitwise (plain, ZeRO-1 and ZeRO-3 over dp); a step torn on one tp rank
 * is skipped by every rank, which all resume from the step before; a tensor-parallel root for a plain network, and
 * another rank's shard, are refused before anything is read into the model.
 */
class TensorParallelCheckpointTest {

    /** Batches per epoch: 4 steps of 2 data-parallel ranks. */
    private static final int BATCHES = 8;
    private static final List<DataSet> DATA = TensorParallelTest.batches(DataType.DOUBLE, BATCHES, 8);

    @TempDir
    Path tmp;

    /** What one rank ends with. */
    private record Result(double[] params, double[] state, int iterations, int epochs, long resumedStep, Path resumedDir,
                          MultiLayerNetwork net) {
    }

    /** Trains one rank's wrapper of {@code mine}, tp shard {@code tpRank}. */
    @FunctionalInterface
    private interface Body {
        void train(SymmemParallelWrapper wrapper, MultiLayerNetwork mine, int tpRank) throws Exception;
    }

    /**
     * On a {@code dp x tp} mesh in this JVM: every rank shards the same initial network for its tp rank (its parameters
     * shifted by {@code shift}: only a restore makes such a run agree with another), attaches it, builds a wrapper over
     * its dp group with {@code options}, and trains with {@code body}.
     */
    private static List<Result> mesh(int dp, int tp, double shift, Consumer<SymmemParallelWrapper.Builder> options,
                                     Body body) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        return mesh(dp, tp, (worldRank, tpRank) -> {
            MultiLayerNetwork mine = TensorParallel.shard(initial, tpRank, tp, 0, 2);
            mine.params().addi(shift);
            return mine;
        }, options, body);
    }

    /** {@link #mesh} on the networks {@code start} gives each rank (world rank, tp rank). */
    private static List<Result> mesh(int dp, int tp, java.util.function.BiFunction<Integer, Integer, MultiLayerNetwork> start,
                                     Consumer<SymmemParallelWrapper.Builder> options, Body body) {
        return InJvmWorld.runOnEveryRank(dp * tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            try (DeviceMesh m = DeviceMesh.of(group, "dp", dp, "tp", tp)) {
                Group tpGroup = m.group("tp");
                MultiLayerNetwork mine = start.apply(group.rank(), tpGroup.rank());
                try (Communicator c = Communicator.create(tpGroup)) {
                    TensorParallel.attach(mine, c);
                    SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(m.group("dp"))
                            .ompThreadsPerWorker(1);
                    options.accept(b);
                    try (SymmemParallelWrapper w = b.build()) {
                        body.train(w, mine, tpGroup.rank());
                        CheckpointDirectory.Checkpoint from = w.resumedFrom();
                        return new Result(mine.params().dup().toDoubleVector(),
                                mine.getUpdater().getStateViewArray().dup().toDoubleVector(), mine.getIterationCount(),
                                mine.getEpochCount(), from == null ? -1 : from.counters().step(),
                                from == null ? null : from.dir(), mine);
                    }
                }
            }
        });
    }

    /** Two epochs, uninterrupted. */
    private static List<Result> uninterrupted(ZeroStage sharding) {
        return mesh(2, 2, 0, b -> shard(b, sharding), (w, mine, t) -> {
            w.fit(new BatchListIterator(DATA));
            w.fit(new BatchListIterator(DATA));
        });
    }

    /** One epoch and 3 steps of the second with a checkpoint every 3 steps (at 3 and 6); "dies" after step 7. */
    private static void killedAfterStep7(Path root, ZeroStage sharding) {
        List<Result> dead = mesh(2, 2, 0, b -> shard(b, sharding).checkpointEvery(3, root).resumeFrom(root), (w, mine, t) -> {
            assertNull(w.resumedFrom(), "nothing to resume from: a fresh start");
            w.fit(new BatchListIterator(DATA));
            w.fit(new BatchListIterator(DATA.subList(0, 6)));
        });
        assertEquals(4, dead.size());
    }

    /** The remaining epochs from the newest checkpoint complete on every tp rank. */
    private static List<Result> resumed(Path root, ZeroStage sharding) {
        return mesh(2, 2, 0.25, b -> shard(b, sharding).checkpointEvery(3, root).resumeFrom(root), (w, mine, t) -> {
            // the model's counters are the checkpoint's: the loop runs what is left of 2 epochs
            for (int e = mine.getEpochCount(); e < 2; e++) {
                w.fit(new BatchListIterator(DATA));
            }
        });
    }

    /**
     * On a {@code dp x tp} mesh in this JVM: every rank's wrapper, resuming from and checkpointing into {@code root}, is
     * refused at {@code build()} with an {@link IllegalArgumentException}, nothing read into its network.
     *
     * @return each rank's message, in world rank order
     */
    private static List<String> refusedAtBuild(int dp, int tp, Path root) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        return InJvmWorld.runOnEveryRank(dp * tp, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            try (DeviceMesh m = DeviceMesh.of(group, "dp", dp, "tp", tp);
                 Communicator c = Communicator.create(m.group("tp"))) {
                MultiLayerNetwork mine = TensorParallel.shard(initial, m.group("tp").rank(), tp, 0, 2);
                mine.params().addi(0.25); // only a restore would make it the checkpoint's
                TensorParallel.attach(mine, c);
                double[] params = mine.params().dup().toDoubleVector();
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> SymmemParallelWrapper.builder(mine).group(m.group("dp")).ompThreadsPerWorker(1)
                                .checkpointEvery(3, root).resumeFrom(root).build());
                assertArrayEquals(params, mine.params().toDoubleVector(), "nothing read into the model");
                return e.getMessage();
            }
        });
    }

    private static SymmemParallelWrapper.Builder shard(SymmemParallelWrapper.Builder b, ZeroStage sharding) {
        return sharding == null ? b : b.sharding(sharding);
    }

    private static List<String> list(Path dir) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> !n.startsWith("progress")).sorted().toList();
        }
    }

    private static void assertBitwiseEqual(List<Result> expected, List<Result> actual, String what) {
        for (int r = 0; r < expected.size(); r++) {
            assertArrayEquals(expected.get(r).params(), actual.get(r).params(), what + ": rank " + r + " parameters");
            assertArrayEquals(expected.get(r).state(), actual.get(r).state(), what + ": rank " + r + " Adam state");
            assertEquals(expected.get(r).iterations(), actual.get(r).iterations(), what + ": rank " + r + " iterations");
            assertEquals(expected.get(r).epochs(), actual.get(r).epochs(), what + ": rank " + r + " epochs");
        }
    }

    @ParameterizedTest(name = "sharding={0}")
    @ValueSource(strings = {"NONE", "OPTIMIZER_STATE", "PARAMETERS"})
    void killedAndResumedEqualsUninterruptedBitwise(String stage) throws IOException {
        ZeroStage sharding = stage.equals("NONE") ? null : ZeroStage.valueOf(stage);
        Path root = tmp.resolve(stage);
        List<Result> expected = uninterrupted(sharding);
        killedAfterStep7(root, sharding);
        // each tp rank's shard apart, the newest two complete steps kept
        assertEquals(List.of("tp-0-of-2", "tp-1-of-2"), list(root));
        for (int t = 0; t < 2; t++) {
            Path own = root.resolve("tp-" + t + "-of-2");
            assertEquals(List.of("step-000000000003", "step-000000000006"), list(own));
            assertEquals(new CheckpointDirectory.Counters(6, 1, 6, 4, 4 * 8, 2),
                    CheckpointDirectory.verify(own.resolve("step-000000000006")));
            assertEquals("rank=" + t + "\nsize=2\n", Files.readString(own.resolve("step-000000000006")
                    .resolve(CheckpointLayout.MARKER)));
        }
        List<Result> resumed = resumed(root, sharding);
        for (int r = 0; r < 4; r++) {
            assertEquals(6, resumed.get(r).resumedStep(), "rank " + r + " resumed at");
            // world rank d * 2 + t holds tp shard t
            assertEquals(root.resolve("tp-" + r % 2 + "-of-2").resolve("step-000000000006"), resumed.get(r).resumedDir());
        }
        assertBitwiseEqual(expected, resumed, "sharding=" + stage);
    }

    /**
     * The checkpoint of step 6 of dp 2 x tp 2 resumed on dp 1 x tp 2 (the ZeRO-1 shards of two dp ranks re-sliced onto
     * one), against the same steps uninterrupted: dp 2 x tp 2 on the first 6 steps' batches, then dp 1 x tp 2 on those
     * networks for the rest of the second epoch, one batch a step.
     */
    @Test
    void resumedOnFewerDataParallelRanksEqualsTheUninterruptedRunOnThoseCounts() throws IOException {
        ZeroStage sharding = ZeroStage.OPTIMIZER_STATE;
        List<Result> first = mesh(2, 2, 0, b -> shard(b, sharding), (w, mine, t) -> {
            w.fit(new BatchListIterator(DATA));
            w.fit(new BatchListIterator(DATA.subList(0, 4)));
            mine.setEpochCount(1); // as the checkpoint taken in the middle of the second epoch has it
        });
        // world rank d * 2 + t: replica 0's shards go on
        List<Result> expected = mesh(1, 2, (worldRank, tpRank) -> first.get(tpRank).net(), b -> shard(b, sharding),
                (w, mine, t) -> w.fit(new BatchListIterator(DATA.subList(4, BATCHES))));
        Path root = tmp.resolve("fewer");
        killedAfterStep7(root, sharding);
        List<Result> resumed = mesh(1, 2, 0.25, b -> shard(b, sharding).checkpointEvery(3, root).resumeFrom(root),
                (w, mine, t) -> {
                    assertEquals(new CheckpointDirectory.Counters(6, 1, 6, 4, 4 * 8, 2), w.resumedFrom().counters(),
                            "a checkpoint of 2 dp ranks");
                    for (int e = mine.getEpochCount(); e < 2; e++) {
                        w.fit(new BatchListIterator(DATA));
                    }
                });
        assertBitwiseEqual(expected, resumed, "2 then 1 dp ranks");
        assertEquals(10, resumed.getFirst().iterations());
    }

    @Test
    void aStepTornOnOneTensorParallelRankIsSkippedByEveryRank() throws IOException {
        Path root = tmp.resolve("torn");
        List<Result> expected = uninterrupted(null);
        killedAfterStep7(root, null);
        // tp rank 1's step 6 lost its model half way: complete on tp rank 0 only
        Path model = root.resolve("tp-1-of-2").resolve("step-000000000006").resolve("model.zip");
        byte[] bytes = Files.readAllBytes(model);
        Files.write(model, java.util.Arrays.copyOf(bytes, bytes.length / 2));
        List<Result> resumed = resumed(root, null);
        for (int r = 0; r < 4; r++) {
            assertEquals(3, resumed.get(r).resumedStep(), "rank " + r + ": step 6 is torn on tp rank 1, so step 3 for all");
        }
        assertBitwiseEqual(expected, resumed, "resumed from step 3");
    }

    /** Another degree resumes (re-sliced: {@link TensorParallelResumeTest}); a plain network is refused. */
    @Test
    void aTensorParallelRootIsRefusedForAPlainNetworkBeforeAnythingIsRead() throws IOException {
        Path root = tmp.resolve("degree");
        killedAfterStep7(root, null);
        // a plain network on that root is refused too: it would find no step-<n> there and start over
        MultiLayerNetwork plain = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(plain).workers(1).resumeFrom(root).build());
        assertTrue(e.getMessage().contains("holds a tensor-parallel run's checkpoints [tp-0-of-2, tp-1-of-2]")
                && e.getMessage().contains("fix: resume on a tensor-parallel run, of that degree or of another"), e.getMessage());
    }

    @Test
    void anotherRanksShardIsRefusedBeforeAnythingIsRead() throws IOException {
        Path root = tmp.resolve("rank");
        killedAfterStep7(root, null);
        List<String> refusals = new java.util.concurrent.CopyOnWriteArrayList<>();
        mesh(2, 2, 0.25, b -> { }, (w, mine, t) -> {
            double[] params = mine.params().dup().toDoubleVector();
            // a rank given the other tp rank's directory of step 6 (same shapes: only the marker tells them apart)
            Path theirs = root.resolve("tp-" + (1 - t) + "-of-2").resolve("step-000000000006");
            refusals.add(assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(theirs)).getMessage());
            assertArrayEquals(params, mine.params().toDoubleVector(), "tp rank " + t + ": nothing read into the model");
            // its own is restored
            w.restoreCheckpoint(root.resolve("tp-" + t + "-of-2").resolve("step-000000000006"));
            assertEquals(6, w.resumedFrom().counters().step());
        });
        assertEquals(4, refusals.size());
        for (String message : refusals) {
            // every rank the same refusal, naming both tp ranks and what each found
            assertEquals(refusals.getFirst(), message);
            // every tp rank of both replicas found it: all named, by replica and tp rank
            assertTrue(message.startsWith("checkpoint restore refused on every rank (4 = dp 2 x tp 2): rank(s)"
                    + " [dp 0 tp 0, dp 0 tp 1, dp 1 tp 0, dp 1 tp 1] found a checkpoint that does not fit"), message);
            for (int n = 0; n < 4; n++) {
                int t = n % 2;
                assertTrue(java.util.regex.Pattern.compile("rank dp " + n / 2 + " tp " + t + " found: checkpoint \\S*tp-" + (1 - t)
                        + "-of-2.step-000000000006 holds tensor-parallel rank=" + (1 - t) + " size=2's shard: expected"
                        + " rank=" + t + " size=2's, this rank's \\(fix: restore tp-" + t + "-of-2 on this rank")
                        .matcher(message).find(), message);
            }
        }
    }

    /**
     * A mismatch only one tp rank sees: tp rank 1's directory of step 6 replaced, manifest and all, by tp rank 0's (a
     * complete checkpoint, so the step is the newest complete on every rank). Only tp rank 1 finds, reading its marker,
     * that it holds another rank's shard; every rank of both dp replicas refuses at {@code build()} with the same error
     * naming tp rank 1 and what it found, nothing read into any model: tp rank 0 does not go on to train and wait for
     * tp rank 1 until its timeout.
     */
    @Test
    void aShardMismatchOnlyOneTensorParallelRankSeesIsRefusedByEveryRankAlike() throws IOException {
        Path root = tmp.resolve("one-rank");
        killedAfterStep7(root, null);
        Path theirs = root.resolve("tp-1-of-2").resolve("step-000000000006");
        for (String name : list(theirs)) {
            Files.delete(theirs.resolve(name));
        }
        for (String name : list(root.resolve("tp-0-of-2").resolve("step-000000000006"))) {
            Files.copy(root.resolve("tp-0-of-2").resolve("step-000000000006").resolve(name), theirs.resolve(name));
        }
        List<String> refusals = refusedAtBuild(2, 2, root);
        for (String message : refusals) {
            assertEquals(refusals.getFirst(), message, "every rank the same refusal");
            assertTrue(message.startsWith("checkpoint restore refused on every rank (4 = dp 2 x tp 2): rank(s)"
                    + " [dp 0 tp 1, dp 1 tp 1] found a checkpoint that does not fit, expected every rank's to fit;"
                    + " nothing was read into or written from any rank's model. rank dp 0 tp 1 found: checkpoint " + theirs
                    + " holds tensor-parallel rank=0 size=2's shard: expected rank=1 size=2's, this rank's (fix: restore"
                    + " tp-1-of-2 on this rank"), message);
            assertTrue(message.endsWith("(fix: what rank dp 0 tp 1's message says, then retry on every rank)"), message);
            assertFalse(message.contains("tp 0 found"), message);
        }
    }

    /**
     * The data-parallel replicas disagree (as when each node restores its own copy of the checkpoint): replica 0's tp
     * ranks are given their own directories of step 6, replica 1's each the other tp rank's. Only replica 1's tp ranks
     * find the mismatch; replica 0's tp group alone would pass and go on into the restore's collectives over the dp
     * groups, waiting for replica 1's until their timeout. Every rank of both replicas refuses instead, with the same
     * error naming replica 1's two ranks and what each found, within a short timeout; nothing is read into any model
     * and nothing is written under the root.
     */
    @Test
    void aRestoreOnlyOneDataParallelReplicaRefusesIsRefusedByEveryRankOfEveryReplica() throws IOException {
        Path root = tmp.resolve("replicas");
        killedAfterStep7(root, null);
        List<String> before = tree(root);
        // a short timeout: without the agreement across replicas, replica 0's ranks wait this long, then fail otherwise
        List<String> refusals = restoredOnShortTimeoutMesh(0.25, (w, d, t) -> {
            Path dir = root.resolve("tp-" + (d == 0 ? t : 1 - t) + "-of-2").resolve("step-000000000006");
            return assertThrows(IllegalArgumentException.class, () -> w.restoreCheckpoint(dir), "dp " + d + " tp " + t)
                    .getMessage();
        });
        assertEquals(4, refusals.size());
        for (String message : refusals) {
            assertEquals(refusals.getFirst(), message, "every rank of every replica the same refusal");
            assertTrue(message.startsWith("checkpoint restore refused on every rank (4 = dp 2 x tp 2): rank(s)"
                    + " [dp 1 tp 0, dp 1 tp 1] found a checkpoint that does not fit"), message);
            for (int t = 0; t < 2; t++) {
                assertTrue(java.util.regex.Pattern.compile("rank dp 1 tp " + t + " found: checkpoint \\S*tp-" + (1 - t)
                        + "-of-2.step-000000000006 holds tensor-parallel rank=" + (1 - t) + " size=2's shard: expected"
                        + " rank=" + t + " size=2's").matcher(message).find(), message);
            }
            assertFalse(message.contains("dp 0 tp"), "replica 0 found nothing: " + message);
        }
        assertEquals(before, tree(root), "nothing written under the root");
    }

    /**
     * A shard torn under one tp rank's directory only ({@code saveCheckpoint}'s {@code tp-1-of-2/model.zip} cut in
     * half), restored with {@code restoreCheckpoint}: tp rank 1's data-parallel group finds it, tp rank 0's does not.
     * Agreed over the data-parallel group alone, tp rank 0's ranks read their shard into their models and went on while
     * tp rank 1's refused; now every rank of every replica refuses before any applies what it read: nothing changes in
     * any model, and tp rank 0's ranks name tp rank 1's failure.
     */
    @Test
    void aShardTornUnderOneTensorParallelRankOnlyIsRestoredByNoRank() throws IOException {
        Path dir = tmp.resolve("saved");
        mesh(2, 2, 0, b -> { }, (w, mine, t) -> {
            w.fit(new BatchListIterator(DATA.subList(0, 4)));
            w.saveCheckpoint(dir);
        });
        Path model = dir.resolve("tp-1-of-2").resolve("model.zip");
        byte[] bytes = Files.readAllBytes(model);
        Files.write(model, java.util.Arrays.copyOf(bytes, bytes.length / 2));
        List<String> before = tree(dir);
        List<String> failures = restoredOnShortTimeoutMesh(0, (w, d, t) -> t + " "
                + assertThrows(Exception.class, () -> w.restoreCheckpoint(dir), "dp " + d + " tp " + t));
        for (String f : failures) {
            if (f.startsWith("0 ")) {
                assertTrue(f.contains("checkpoint-restored failed on tp rank 1 of this data-parallel replica")
                        && f.contains("model.zip"), f);
            } else {
                assertTrue(f.contains("model.zip"), f);
            }
        }
        assertEquals(before, tree(dir), "nothing written");
    }

    /** What one rank of {@link #restoredOnShortTimeoutMesh} does with its wrapper: a restore that must fail. */
    @FunctionalInterface
    private interface FailedRestore {
        String run(SymmemParallelWrapper wrapper, int dpRank, int tpRank) throws Exception;
    }

    /**
     * On a {@code dp x tp = 2 x 2} mesh in this JVM with a 5 s group timeout (a rank left waiting for the others fails
     * soon, otherwise than the test expects): every rank builds a wrapper over its tp shard of the initial network
     * (shifted by {@code shift}), runs {@code restore}, and checks that nothing was read into its model.
     *
     * @return what each rank's {@code restore} returned, in world rank order
     */
    private static List<String> restoredOnShortTimeoutMesh(double shift, FailedRestore restore) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        return InJvmWorld.runOnEveryRank(4, GroupOptions.defaults().withTimeout(Duration.ofSeconds(5)), group -> {
            try (DeviceMesh m = DeviceMesh.of(group, "dp", 2, "tp", 2);
                 Communicator c = Communicator.create(m.group("tp"))) {
                int t = m.group("tp").rank();
                int d = m.group("dp").rank();
                MultiLayerNetwork mine = TensorParallel.shard(initial, t, 2, 0, 2);
                mine.params().addi(shift);
                TensorParallel.attach(mine, c);
                double[] params = mine.params().dup().toDoubleVector();
                try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(m.group("dp"))
                        .ompThreadsPerWorker(1).build()) {
                    String outcome = restore.run(w, d, t);
                    assertArrayEquals(params, mine.params().toDoubleVector(), "dp " + d + " tp " + t
                            + ": nothing read into the model");
                    assertNull(w.resumedFrom(), "dp " + d + " tp " + t);
                    return outcome;
                }
            }
        });
    }

    /** Every file under {@code root}, with its size and last change, in path order. */
    static List<String> tree(Path root) throws IOException {
        try (Stream<Path> s = Files.walk(root)) {
            return s.filter(Files::isRegularFile).sorted().map(p -> {
                try {
                    return root.relativize(p) + " " + Files.size(p) + " " + Files.getLastModifiedTime(p);
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }).toList();
        }
    }
}
