package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Hybrid sharding (HSDP, {@code shardGroupSize(S)} with stage 3) on a {@code replicate × shard} mesh: against plain
 * data parallelism over all N workers in float64 (to a tolerance: the gradient is summed in another association),
 * bitwise against itself across runs and between its replicas, bitwise equal to stage 3 when S = N, 1/S of the
 * parameters per worker, threads and group mode, and the bad shapes refused.
 */
class HybridShardingTest {

    record Run(List<Double> losses, INDArray params, INDArray updaterState) {
    }

    /** Trains a copy of {@code original} on {@code workers} threads; {@code shardGroupSize} 0 for none. */
    static Run train(MultiLayerNetwork original, int workers, ZeroStage stage, int shardGroupSize, List<DataSet> data) {
        MultiLayerNetwork net = original.clone();
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(net).workers(workers);
        if (stage != null) {
            builder.sharding(stage);
        }
        if (shardGroupSize > 0) {
            builder.shardGroupSize(shardGroupSize);
        }
        List<Double> losses = new ArrayList<>();
        builder.stepListener(report -> losses.add(report.loss()));
        try (SymmemParallelWrapper wrapper = builder.build()) {
            wrapper.fit(new BatchListIterator(data));
            if (shardGroupSize > 0) {
                // every worker's blocks are the model's, bitwise: the replicas of a block did not drift apart
                for (int r = 0; r < workers; r++) {
                    assertTrue(wrapper.fullySharded().get(r).ownBlocksMatch(net.params()),
                            "worker " + r + "'s blocks differ from the gathered model (its replicas disagree)");
                }
            }
        }
        INDArray state = net.getUpdater().getStateViewArray();
        return new Run(losses, net.params().dup(), state == null ? null : state.dup());
    }

    private static void assertClose(Run expected, Run actual, double tol, String what) {
        assertEquals(expected.losses().size(), actual.losses().size(), what + ": steps");
        for (int s = 0; s < expected.losses().size(); s++) {
            double e = expected.losses().get(s);
            double a = actual.losses().get(s);
            assertTrue(Math.abs(e - a) <= tol * Math.abs(e), what + ": step " + s + " loss " + a + ", expected " + e);
        }
        double p = Nets.maxRelativeDifference(actual.params(), expected.params());
        assertTrue(p <= tol, what + ": parameters' max relative difference " + p + " > " + tol);
        System.out.println(what + ": parameters' max relative difference " + p);
        double u = Nets.maxRelativeDifference(actual.updaterState(), expected.updaterState());
        assertTrue(u <= tol, what + ": updater state's max relative difference " + u + " > " + tol);
    }

    private static void assertBitwise(Run expected, Run actual, String what) {
        assertTrue(ModelReplica.bitwiseEqual(expected.params(), actual.params()), what + ": parameters");
        assertTrue(ModelReplica.bitwiseEqual(expected.updaterState(), actual.updaterState()), what + ": updater state");
        assertEquals(expected.losses(), actual.losses(), what + ": every step's loss");
    }

    /**
     * 4 = 2 × 2 and 6 = 3 × 2 workers against plain data parallelism in float64 (the reference), and float32
     * against the same; a second run bitwise the same; a shorter run far outside the tolerance (it can fail).
     */
    @ParameterizedTest(name = "workers={0} shardGroupSize={1} {2} {3}")
    @CsvSource({"4, 2, adam, DOUBLE, 1e-13", "6, 2, nesterov+l2, DOUBLE, 1e-13", "4, 2, adam+ClipL2PerLayer, DOUBLE, 1e-13",
            "4, 2, mixed, FLOAT, 1e-5",
            "6, 3, adamw, FLOAT, 1e-5"})
    void hybridEqualsPlainDataParallelismToRoundingAndItselfBitwise(int workers, int shardGroupSize, String recipe,
                                                                  DataType dtype, double tol) {
        List<DataSet> data = Nets.batches(53, 3 * workers + 1, 8, dtype); // the last step leaves workers idle
        MultiLayerNetwork net = Nets.mlp(recipe, dtype, 40, 0.002);
        Run plain = train(net, workers, null, 0, data);
        Run hybrid = train(net, workers, ZeroStage.PARAMETERS, shardGroupSize, data);
        assertClose(plain, hybrid, tol, "HSDP " + workers / shardGroupSize + " x " + shardGroupSize + " vs plain DP");
        Run stage3 = train(net, workers, ZeroStage.PARAMETERS, 0, data);
        assertClose(stage3, hybrid, tol, "HSDP vs stage 3");
        assertBitwise(hybrid, train(net, workers, ZeroStage.PARAMETERS, shardGroupSize, data), "HSDP run twice");
        Run shorter = train(net, workers, ZeroStage.PARAMETERS, shardGroupSize, data.subList(0, data.size() - workers));
        assertTrue(Nets.maxRelativeDifference(shorter.params(), plain.params()) > 100 * tol,
                "one step less must land outside the tolerance for the comparison to mean something");
    }

    /** S = N: one shard group, no replicas: stage 3 itself, bitwise equal to plain data parallelism. */
    @Test
    void oneShardGroupOfEveryWorkerIsStageThreeBitwise() {
        List<DataSet> data = Nets.batches(59, 3 * 4, 8, DataType.FLOAT);
        MultiLayerNetwork net = Nets.mlp("adam", DataType.FLOAT, 40, 0.002);
        assertBitwise(train(net, 4, null, 0, data), train(net, 4, ZeroStage.PARAMETERS, 4, data), "S = N vs plain DP");
    }

    /** BatchNormalization's running statistics are merged over all N workers, as in plain data parallelism. */
    @Test
    void batchNormStatisticsMergeOverEveryWorker() {
        List<DataSet> data = StateNets.shiftedBatches(61, new int[] {8, 6, 7, 5, 8, 6, 7, 5}, DataType.DOUBLE);
        MultiLayerNetwork net = StateNets.batchNormMlp(DataType.DOUBLE, false, new org.nd4j.linalg.learning.config.Adam(0.01));
        assertClose(train(net, 4, null, 0, data), train(net, 4, ZeroStage.PARAMETERS, 2, data), 1e-13,
                "HSDP with BatchNorm vs plain DP");
    }

    /** Each worker keeps its block of every layer cut over its shard group: 1/S of the parameters, not 1/N. */
    @Test
    void eachWorkerHoldsOneShardGroupsShare() {
        int workers = 4;
        int s = 2;
        MultiLayerNetwork net = Nets.mlp("adam", DataType.FLOAT, 300, 0);
        long full = net.numParams() * 4;
        List<DataSet> data = Nets.batches(67, 2 * workers, 8, DataType.FLOAT);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net.clone()).workers(workers)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(s).build()) {
            w.fit(new BatchListIterator(data));
            List<WorkerMemory> memory = w.workerMemory();
            for (int r = 0; r < workers; r++) {
                FullySharded fs = w.fullySharded().get(r);
                long expected = 0;
                for (FullySharded.Unit u : fs.units()) {
                    ShardPartition part = ShardPartition.of(u.length(), s, DType.FLOAT32);
                    expected += 4 * (part.end(r % s) - part.start(r % s)); // its block in its row of the mesh
                }
                assertEquals(expected, fs.ownBytes(), "worker " + r + ": block " + r % s + " of " + s + " of every layer");
                assertTrue(fs.ownBytes() > full / workers + 4096 && fs.ownBytes() <= full / s + 4 * 64 * fs.units().size(),
                        "worker " + r + " owns " + fs.ownBytes() + " of " + full + " bytes; expected about 1/" + s);
                long pages = 4096L * 2 * (fs.units().size() + 1);
                WorkerMemory m = memory.get(r);
                assertTrue(m.paramBytes() <= fs.ownBytes() + pages && m.paramBytes() >= fs.ownBytes() - pages,
                        "worker " + r + ": " + m.paramBytes() + " parameter bytes resident; own " + fs.ownBytes());
                assertTrue(m.gradientBytes() <= fs.ownBytes() + pages, "worker " + r + ": gradient " + m.gradientBytes());
                // the updater state of its block: Adam keeps 2 values per parameter
                assertTrue(m.updaterStateBytes() <= 2 * fs.ownBytes() && m.updaterStateBytes() >= 2 * fs.ownBytes() - 64,
                        "worker " + r + ": updater state " + m.updaterStateBytes() + " B for own " + fs.ownBytes() + " B");
            }
        }
    }

    /** Group mode (one worker per rank, each with its own wrapper) against threads, bitwise: the same reductions. */
    @Test
    void groupModeEqualsThreadsBitwise() {
        int ranks = 4;
        List<DataSet> data = Nets.batches(71, 2 * ranks + 1, 8, DataType.FLOAT);
        MultiLayerNetwork initial = Nets.mlp("adam", DataType.FLOAT, 40, 0);
        Run threads = train(initial, ranks, ZeroStage.PARAMETERS, 2, data);
        List<Run> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    MultiLayerNetwork mine = initial.clone();
                    List<Double> losses = new ArrayList<>();
                    try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                            .sharding(ZeroStage.PARAMETERS).shardGroupSize(2).stepListener(r -> losses.add(r.loss()))
                            .build()) {
                        w.fit(new BatchListIterator(data));
                    }
                    return new Run(losses, mine.params().dup(), mine.getUpdater().getStateViewArray().dup());
                });
        for (int r = 0; r < ranks; r++) {
            assertBitwise(threads, perRank.get(r), "rank " + r + " (group mode) vs threads");
        }
    }

    @Test
    void badShapesAreRefusedBeforeAnyStep() {
        MultiLayerNetwork net = Nets.mlp("adam", DataType.FLOAT, 8, 0);
        String one = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net.clone())
                .workers(4).sharding(ZeroStage.PARAMETERS).shardGroupSize(1).build()).getMessage();
        assertTrue(one.contains("shardGroupSize=1") && one.contains("plain data parallelism") && one.contains("fix:"), one);
        String three = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net.clone())
                .workers(4).sharding(ZeroStage.PARAMETERS).shardGroupSize(3).build()).getMessage();
        assertTrue(three.contains("shardGroupSize=3 with workers=4") && three.contains("{2, 4}"), three);
        String eight = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net.clone())
                .workers(4).sharding(ZeroStage.PARAMETERS).shardGroupSize(8).build()).getMessage();
        assertTrue(eight.contains("shardGroupSize=8 with workers=4"), eight);
        String stage = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net.clone())
                .workers(4).sharding(ZeroStage.GRADIENTS).shardGroupSize(2).build()).getMessage();
        assertTrue(stage.contains("sharding=GRADIENTS") && stage.contains("sharding(ZeroStage.PARAMETERS)"), stage);
        String none = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net.clone())
                .workers(4).shardGroupSize(2).build()).getMessage();
        assertTrue(none.contains("sharding=null"), none);
        assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net.clone()).shardGroupSize(0));
    }
}
