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

    /** No sharding, and ZeRO stages 1 and 2 over the data-parallel dimension. */
    enum Sharding { NONE, OPTIMIZER_STATE, GRADIENTS }

    @ParameterizedTest(name = "sharding={0} vocabulary-parallel output={1}")
    @org.junit.jupiter.params.provider.CsvSource({"NONE, false", "OPTIMIZER_STATE, false", "GRADIENTS, false", "NONE, true",
            "GRADIENTS, true"})
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

    @org.junit.jupiter.api.Test
    void workerThreadsSharingOneRanksTensorParallelGroupAreRefused() {
        MultiLayerNetwork mine = TensorParallel.shard(TensorParallelTest.unsharded(DataType.FLOAT, 0), 0, 2, 0);
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> SymmemParallelWrapper.builder(mine).workers(2).build());
        assertTrue(e.getMessage().contains("workers=2 threads with a tensor-parallel network")
                && e.getMessage().contains("group(dataParallelGroup)"), e.getMessage());
    }
}
