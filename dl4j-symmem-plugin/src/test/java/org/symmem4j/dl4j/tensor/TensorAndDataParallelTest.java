package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Tensor parallelism combined with data parallelism on a {@code dp x tp = 2 x 2} mesh: each rank
 * holds its tensor-parallel shard, {@link SymmemParallelWrapper} in group mode all-reduces the
 * gradients of equal shards over the {@code dp} sub-group (with ZeRO over it too), and the gathered
 * network equals data parallelism of the unsharded network on 2 worker threads (fp64, to rounding), with the output
 * layer's vocabulary split too (the wrapper's replicas keep the vocabulary-parallel loss bound to the group);
 * the two replicas of each shard stay bitwise equal.
 */
class TensorAndDataParallelTest {

    /**
     * No sharding, and ZeRO stages 1 to 3 over the data-parallel dimension (stage 3: each rank's stage-3 network, built
     * over its sparse views, is attached to the rank's tp group as the rank's own network is).
     */
    enum Sharding { NONE, OPTIMIZER_STATE, GRADIENTS, PARAMETERS }

    @ParameterizedTest(name = "sharding={0} vocabulary-parallel output={1}")
    @org.junit.jupiter.params.provider.CsvSource({"NONE, false", "OPTIMIZER_STATE, false", "GRADIENTS, false",
            "PARAMETERS, false", "NONE, true", "GRADIENTS, true", "PARAMETERS, true"})
    void dpTimesTpEqualsDataParallelismOfTheUnshardedNetwork(Sharding sharding, boolean vocabularyParallelOutput) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        List<DataSet> data = TensorParallelTest.batches(DataType.DOUBLE, 8, 16);
        MultiLayerNetwork threads = initial.clone();
        SymmemParallelWrapper.Builder reference = SymmemParallelWrapper.builder(threads).workers(2).ompThreadsPerWorker(1);
        if (sharding != Sharding.NONE) {
            reference.sharding(ZeroStage.valueOf(sharding.name()));
        }
        try (SymmemParallelWrapper wrapper = reference.build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        INDArray expected = threads.params().dup();
        INDArray expectedState = threads.getUpdater().getStateViewArray().dup();

        List<INDArray[]> perRank = InJvmWorld.runOnEveryRank(4, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    try (DeviceMesh mesh = DeviceMesh.of(group, "dp", 2, "tp", 2)) {
                        Group tp = mesh.group("tp");
                        Group dp = mesh.group("dp");
                        MultiLayerNetwork mine = vocabularyParallelOutput
                                ? TensorParallel.shard(initial, tp.rank(), tp.worldSize(),
                                        java.util.EnumSet.of(TensorParallel.VocabularyParallel.OUTPUT), 0, 2)
                                : TensorParallel.shard(initial, tp.rank(), tp.worldSize(), 0, 2);
                        MultiLayerNetwork gathered = initial.clone();
                        try (Communicator c = Communicator.create(tp)) {
                            TensorParallel.attach(mine, c);
                            SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(dp).ompThreadsPerWorker(1);
                            if (sharding != Sharding.NONE) {
                                b.sharding(ZeroStage.valueOf(sharding.name()));
                            }
                            try (SymmemParallelWrapper wrapper = b.build()) {
                                wrapper.fit(new BatchListIterator(data));
                            }
                            TensorParallel.gather(mine, c, gathered);
                        }
                        return new INDArray[] {gathered.params().dup(), mine.params().dup(),
                                gathered.getUpdater().getStateViewArray().dup()};
                    }
                });
        for (int r = 0; r < 4; r++) {
            double diff = TensorParallelTest.maxRelDiff(perRank.get(r)[0], expected);
            assertTrue(diff <= 1e-10, "rank " + r + ": gathered parameters differ from data parallelism of the unsharded"
                    + " network by " + diff);
            double state = TensorParallelTest.maxRelDiff(perRank.get(r)[2], expectedState);
            assertTrue(state <= 1e-10, "rank " + r + ": gathered Adam state differs from data parallelism of the unsharded"
                    + " network's by " + state);
        }
        // world rank d * 2 + t holds shard t of replica d: the replicas of each shard are bitwise equal
        for (int t = 0; t < 2; t++) {
            assertTrue(perRank.get(t)[1].equals(perRank.get(2 + t)[1]), "shard " + t + ": replicas bitwise equal");
        }
    }

    /**
     * A graph's tensor-parallel block on a {@code dp 2 x tp 2} mesh, plain and with ZeRO stage 3 over the dp dimension:
     * the gathered graph equals data parallelism of the unsharded graph on 2 worker threads of the same stage (fp64, to
     * rounding), and each shard's replicas are bitwise equal.
     */
    @ParameterizedTest(name = "sharding={0}")
    @org.junit.jupiter.params.provider.EnumSource(value = Sharding.class, names = {"NONE", "PARAMETERS"})
    void aGraphOnDpTimesTpEqualsDataParallelismOfTheUnshardedGraph(Sharding sharding) {
        org.deeplearning4j.nn.graph.ComputationGraph initial = TensorParallelGraphTest.graph();
        List<DataSet> data = TensorParallelTest.batches(DataType.DOUBLE, 8, 16);
        org.deeplearning4j.nn.graph.ComputationGraph threads = initial.clone();
        SymmemParallelWrapper.Builder reference = SymmemParallelWrapper.builder(threads).workers(2).ompThreadsPerWorker(1);
        if (sharding != Sharding.NONE) {
            reference.sharding(ZeroStage.valueOf(sharding.name()));
        }
        try (SymmemParallelWrapper wrapper = reference.build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        INDArray expected = threads.params().dup();
        List<INDArray[]> perRank = InJvmWorld.runOnEveryRank(4, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    try (DeviceMesh mesh = DeviceMesh.of(group, "dp", 2, "tp", 2);
                         Communicator c = Communicator.create(mesh.group("tp"))) {
                        org.deeplearning4j.nn.graph.ComputationGraph mine = TensorParallel.shard(initial,
                                mesh.coordinate("tp"), 2, "up");
                        org.deeplearning4j.nn.graph.ComputationGraph gathered = initial.clone();
                        TensorParallel.attach(mine, c);
                        SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(mesh.group("dp"))
                                .ompThreadsPerWorker(1);
                        if (sharding != Sharding.NONE) {
                            b.sharding(ZeroStage.valueOf(sharding.name()));
                        }
                        try (SymmemParallelWrapper wrapper = b.build()) {
                            wrapper.fit(new BatchListIterator(data));
                        }
                        TensorParallel.gather(mine, c, gathered);
                        return new INDArray[] {gathered.params().dup(), mine.params().dup()};
                    }
                });
        for (int r = 0; r < 4; r++) {
            double diff = TensorParallelTest.maxRelDiff(perRank.get(r)[0], expected);
            assertTrue(diff <= 1e-10, "rank " + r + ": gathered graph differs from data parallelism of the unsharded"
                    + " graph by " + diff);
        }
        for (int t = 0; t < 2; t++) {
            assertTrue(perRank.get(t)[1].equals(perRank.get(2 + t)[1]), "shard " + t + ": replicas bitwise equal");
        }
        assertTrue(TensorParallelTest.maxRelDiff(expected, initial.params()) > 1e-3, "the graph trained");
    }

    @org.junit.jupiter.api.Test
    void periodicCheckpointsOfAnUnattachedTensorParallelNetworkAreRefusedBeforeAnythingIsWritten(
            @org.junit.jupiter.api.io.TempDir java.nio.file.Path root) throws java.io.IOException {
        MultiLayerNetwork mine = TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 2, 0);
        for (boolean resume : new boolean[] {false, true}) {
            SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).workers(1);
            if (resume) {
                b.resumeFrom(root);
            } else {
                b.checkpointEvery(4, root);
            }
            IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                    b::build);
            // its rank, which says which tp-R-of-S directory is its own, comes from the communicator it is attached to
            assertTrue(e.getMessage().startsWith("checkpointEvery/resumeFrom with a tensor-parallel network not attached")
                    && e.getMessage().contains("found no layer attached")
                    && e.getMessage().contains("fix: call TensorParallel.attach(network, tpCommunicator) before build()"),
                    e.getMessage());
        }
        try (var left = java.nio.file.Files.list(root)) {
            assertTrue(left.findAny().isEmpty(), "nothing written");
        }
    }

    /**
     * On a {@code dp x tp = 2 x 2} mesh with a 5 s group timeout, rank dp 0 tp 1 leaves its network unattached. Before
     * the build agreement's data-parallel round went first, that rank agreed over its dp group alone (it knows no tp
     * group): without checkpoints it was not even refused, and its tp peer dp 0 tp 0 waited for it in the agreement's
     * tp round until the timeout. Now the unattached rank refuses, its dp peer learns it in the dp round and tells its
     * own replica in the tp round, and its tp peer fails on its abort at once: every rank throws, naming the refusal,
     * none a timeout.
     */
    @org.junit.jupiter.api.Test
    void aTensorParallelNetworkLeftUnattachedOnOneRankIsRefusedOnEveryRankOfTheMesh() {
        String refusal = "a tensor-parallel network not attached to its group: expected its tensor-parallel layers"
                + " bound to the tp group's communicator";
        List<String> messages = builtOnShortTimeoutMesh((d, t) -> d != 0 || t != 1, (b, d, t) -> { },
                RuntimeException.class);
        for (String m : messages) {
            assertTrue(m.contains(refusal) && !m.contains("timed out"), m);
        }
        // world rank d * 2 + t: the rank itself, over its dp group (it knows no other)
        assertTrue(messages.get(1).startsWith("dp 0 tp 1: IllegalArgumentException: build() refused on every rank (2):"
                + " rank(s) [0] refused it"), messages.get(1));
        // the other replica, and the unattached rank's dp peer, over the whole mesh
        for (int r : new int[] {2, 3}) {
            assertTrue(messages.get(r).contains(": IllegalArgumentException: build() refused on every rank (4 = dp 2 x"
                    + " tp 2): rank(s) [dp 0 tp 1] refused it"), messages.get(r));
        }
        // its tp peer, which waited for it in the tp round: told by its abort
        assertTrue(messages.get(0).startsWith("dp 0 tp 0: IllegalStateException: build() refused on tensor-parallel"
                + " rank 0 of 2: a peer of its tensor-parallel group left the agreement"), messages.get(0));
    }

    /**
     * On a {@code dp x tp = 2 x 2} mesh, one rank asks for another ZeRO stage: every rank refuses with the same message,
     * naming the ranks mesh-wise. The tp ranks' shards are compared among the replicas of each tp rank only (the
     * dp x tp tests above build alike and train).
     */
    @org.junit.jupiter.api.Test
    void aSettingThatDiffersOnOneRankOfTheMeshIsRefusedOnEveryRank() {
        List<String> messages = builtOnShortTimeoutMesh((d, t) -> true, (b, d, t) -> {
            if (d == 1 && t == 1) {
                b.sharding(ZeroStage.GRADIENTS);
            }
        }, IllegalArgumentException.class);
        for (String m : messages) {
            String text = m.substring(m.indexOf(": IllegalArgumentException: ") + 1);
            org.junit.jupiter.api.Assertions.assertEquals(messages.getFirst().substring(
                    messages.getFirst().indexOf(": IllegalArgumentException: ") + 1), text, "every rank the same refusal");
            assertTrue(text.startsWith(" IllegalArgumentException: build() refused on every rank (4 = dp 2 x tp 2): the"
                    + " ranks were built with different settings"), m);
            assertTrue(text.contains(" sharding differs: none on rank(s) [dp 0 tp 0, dp 0 tp 1, dp 1 tp 0], GRADIENTS on"
                    + " rank(s) [dp 1 tp 1] (fix: "), m);
        }
    }

    /** Which ranks attach their network to the tp group. */
    private interface Attached {
        boolean at(int d, int t);
    }

    /** Each rank's builder settings. */
    private interface Settings {
        void apply(SymmemParallelWrapper.Builder b, int d, int t);
    }

    /**
     * On a {@code dp x tp = 2 x 2} mesh in this JVM with a 5 s group timeout (a rank left waiting for the others fails
     * soon): every rank builds a wrapper over its tp shard, attached or not, with its settings, and must refuse.
     *
     * @return each rank's {@code "dp D tp T: ExceptionClass: message"}, in world rank order
     */
    private static List<String> builtOnShortTimeoutMesh(Attached attached, Settings settings,
                                                        Class<? extends RuntimeException> refusal) {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        return InJvmWorld.runOnEveryRank(4, GroupOptions.defaults().withTimeout(Duration.ofSeconds(5)), group -> {
            try (DeviceMesh m = DeviceMesh.of(group, "dp", 2, "tp", 2);
                 Communicator c = Communicator.create(m.group("tp"))) {
                int d = m.group("dp").rank();
                int t = m.group("tp").rank();
                MultiLayerNetwork mine = TensorParallel.shard(initial, t, 2, 0, 2);
                if (attached.at(d, t)) {
                    TensorParallel.attach(mine, c);
                }
                SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(m.group("dp"))
                        .ompThreadsPerWorker(1);
                settings.apply(b, d, t);
                RuntimeException e = org.junit.jupiter.api.Assertions.assertThrows(refusal, b::build, "dp " + d + " tp " + t);
                return "dp " + d + " tp " + t + ": " + e.getClass().getSimpleName() + ": " + e.getMessage();
            }
        });
    }

    @org.junit.jupiter.api.Test
    void workerThreadsSharingOneRanksTensorParallelGroupAreRefused() {
        MultiLayerNetwork mine = TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 2, 0);
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(mine).workers(2).build());
        assertTrue(e.getMessage().contains("workers=2 threads with a tensor-parallel network")
                && e.getMessage().contains("group(dataParallelGroup)"), e.getMessage());
    }

    /**
     * SHRINK on a dp x tp mesh refuses at build(), on every rank and before anything is allocated, what it cannot do:
     * the dp group without its mesh (a dead rank takes its replica's tp peers with it), and ranks that are
     * threads of a world not created shrinking (no membership authority names the dead); each message names the fix.
     */
    @org.junit.jupiter.api.Test
    void shrinkOnADpTimesTpMeshRefusesAtBuildWhatItCannotDo() {
        MultiLayerNetwork initial = TensorParallelTest.unsharded(DataType.DOUBLE, 0);
        java.util.Map<String, java.util.function.BiFunction<SymmemParallelWrapper.Builder, DeviceMesh,
                SymmemParallelWrapper.Builder>> cases = new java.util.LinkedHashMap<>();
        cases.put("without the mesh", (b, mesh) -> b.group(mesh.group("dp")));
        cases.put("threads", (b, mesh) -> b.group(mesh, "dp"));
        java.util.Map<String, List<String>> expected = java.util.Map.of(
                "without the mesh", List.of("a tensor-parallel network on group(", "fix: builder(network).group(mesh, \"dp\")"),
                "threads", List.of("cannot shrink in place", "fix: one process per rank under symmem4j-run --on-failure"
                        + " shrink, InJvmWorld.createShrinking(n, options) for thread ranks"));
        for (var c : cases.entrySet()) {
            List<String> messages = InJvmWorld.runOnEveryRank(4, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                    group -> {
                        try (DeviceMesh mesh = DeviceMesh.of(group, "dp", 2, "tp", 2);
                             Communicator comm = Communicator.create(mesh.group("tp"))) {
                            MultiLayerNetwork mine = TensorParallel.shard(initial, mesh.coordinate("tp"), 2, 0, 2);
                            TensorParallel.attach(mine, comm);
                            SymmemParallelWrapper.Builder b = c.getValue().apply(SymmemParallelWrapper.builder(mine)
                                    .ompThreadsPerWorker(1).onWorkerFailure(org.symmem4j.dl4j.WorkerFailure.SHRINK), mesh);
                            IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(
                                    IllegalArgumentException.class, b::build);
                            return e.getMessage();
                        }
                    });
            for (String m : messages) {
                for (String part : expected.get(c.getKey())) {
                    assertTrue(m.contains(part), c.getKey() + ": expected '" + part + "' in: " + m);
                }
            }
        }
    }
}
