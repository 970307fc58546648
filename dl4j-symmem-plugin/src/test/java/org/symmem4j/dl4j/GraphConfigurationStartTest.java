package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * ZeRO stage 3 started from a graph's configuration ({@link SymmemParallelWrapper#builder(ComputationGraphConfiguration)}):
 * each worker initialises its shard vertex by vertex, bitwise equal to {@code new ComputationGraph(conf).init()}, trains
 * bitwise as plain data parallelism and stage 3 from that graph do, in threads and one worker per rank, and no worker
 * holds the graph whole; what it cannot do is refused at {@code build()}.
 */
class GraphConfigurationStartTest {

    /** The skip-and-merge graph's configuration (two layers on the input, an element-wise sum, a merge, BatchNorm). */
    private static ComputationGraphConfiguration conf(DataType dtype) {
        return FullyShardedStateAndGraphTest.skipGraph(dtype).getConfiguration().clone();
    }

    private static ComputationGraph dl4jInit(ComputationGraphConfiguration conf) {
        ComputationGraph g = new ComputationGraph(conf.clone());
        g.init();
        return g;
    }

    /** Each worker holds at most its blocks (and the pages they share with neighbours), and no gradient yet. */
    private static void assertNoWorkerHoldsTheGraph(SymmemParallelWrapper wrapper, long wholeBytes) {
        for (FullySharded fs : wrapper.fullySharded()) {
            long slack = 2L * 2 * 4096 * fs.units().size();
            assertTrue(fs.residentParameterBytes() <= fs.ownBytes() + slack, "parameters resident "
                    + fs.residentParameterBytes() + " > own blocks " + fs.ownBytes() + " + " + slack);
            assertTrue(fs.ownBytes() < wholeBytes, "own blocks " + fs.ownBytes() + " of a " + wholeBytes + "-byte graph");
        }
    }

    /**
     * A graph whose vertices were added deepest first, so that DL4J's instantiation order (the order of addition, in
     * which the random values are drawn) differs from its parameter layout (topological): a merge of two branches.
     */
    private static ComputationGraphConfiguration addedDeepestFirst(DataType dtype) {
        return new NeuralNetConfiguration.Builder()
                .seed(17).dataType(dtype).updater(new Adam(0.01)).weightInit(org.deeplearning4j.nn.weights.WeightInit.XAVIER)
                .graphBuilder()
                .addInputs("in")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(10).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build(), "top")
                .addLayer("top", new DenseLayer.Builder().nIn(16).nOut(10).activation(Activation.TANH).build(), "both")
                .addVertex("both", new org.deeplearning4j.nn.conf.graph.MergeVertex(), "left", "right")
                .addLayer("right", new DenseLayer.Builder().nIn(Nets.IN).nOut(8).activation(Activation.RELU).build(), "in")
                .addLayer("left", new DenseLayer.Builder().nIn(Nets.IN).nOut(8).activation(Activation.TANH).build(), "in")
                .setOutputs("out").build();
    }

    @ParameterizedTest(name = "{0} {1} workers={2}")
    @CsvSource({"skip, FLOAT, 2", "skip, DOUBLE, 3", "deepest-first, FLOAT, 2", "deepest-first, DOUBLE, 3"})
    void theShardsAreDl4jsInitialisationBitwise(String recipe, DataType dtype, int workers) {
        ComputationGraphConfiguration conf = recipe.equals("skip") ? conf(dtype) : addedDeepestFirst(dtype);
        INDArray expected = dl4jInit(conf).params().dup();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(conf).workers(workers)
                .sharding(ZeroStage.PARAMETERS).build()) {
            INDArray gathered = wrapper.gatherParameters();
            assertTrue(ModelReplica.bitwiseEqual(expected, gathered), "initial parameters differ from DL4J's init();"
                    + " max relative difference " + Nets.maxRelativeDifference(gathered, expected));
            assertNoWorkerHoldsTheGraph(wrapper, expected.length() * dtype.width());
            for (FullySharded fs : wrapper.fullySharded()) {
                assertTrue(fs.residentGradientBytes() <= 2L * 2 * 4096 * fs.units().size(), "gradient resident before"
                        + " any step: " + fs.residentGradientBytes());
            }
        }
        // the comparison can fail: another seed draws other values
        ComputationGraphConfiguration other = recipe.equals("skip") ? conf(dtype) : addedDeepestFirst(dtype);
        other.getDefaultConfiguration().setSeed(7);
        assertFalse(ModelReplica.bitwiseEqual(expected, dl4jInit(other).params()));
    }

    @Test
    void trainsBitwiseAsStage3AndPlainDataParallelismFromTheBuiltGraph() {
        int workers = 2;
        ComputationGraphConfiguration conf = conf(DataType.FLOAT);
        List<DataSet> data = Nets.batches(37, 3 * workers + 1, 8, DataType.FLOAT); // the last step leaves a worker idle
        FullyShardedStateAndGraphTest.Run plain = FullyShardedStateAndGraphTest.train(dl4jInit(conf), workers, null, data);
        FullyShardedStateAndGraphTest.Run built = FullyShardedStateAndGraphTest.train(dl4jInit(conf), workers,
                ZeroStage.PARAMETERS, data);
        List<Double> losses = new ArrayList<>();
        INDArray params;
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(conf).workers(workers)
                .sharding(ZeroStage.PARAMETERS).stepListener(r -> losses.add(r.loss())).build()) {
            wrapper.fit(new BatchListIterator(data));
            params = wrapper.gatherParameters();
            assertNoWorkerHoldsTheGraph(wrapper, params.length() * 4L);
        }
        for (FullyShardedStateAndGraphTest.Run reference : List.of(plain, built)) {
            assertEquals(reference.losses().size(), losses.size());
            for (int s = 0; s < losses.size(); s++) {
                assertEquals(Double.doubleToRawLongBits(reference.losses().get(s)), Double.doubleToRawLongBits(losses.get(s)),
                        "step " + s + " loss: " + reference.losses().get(s) + " vs from the configuration " + losses.get(s));
            }
            assertTrue(ModelReplica.bitwiseEqual(reference.params(), params), "parameters after the fit; max relative"
                    + " difference " + Nets.maxRelativeDifference(params, reference.params()));
        }
    }

    /** The consolidated save: DL4J's graph of the configuration over the gathered parameters, for ModelSerializer. */
    @Test
    void saveModelWritesTheWholeGraph(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        ComputationGraphConfiguration conf = conf(DataType.FLOAT);
        List<DataSet> data = Nets.batches(43, 4, 8, DataType.FLOAT);
        java.nio.file.Path file = dir.resolve("model.zip");
        INDArray params;
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(conf).workers(2)
                .sharding(ZeroStage.PARAMETERS).build()) {
            wrapper.fit(new BatchListIterator(data));
            params = wrapper.gatherParameters();
            wrapper.saveModel(file);
        }
        ComputationGraph restored = org.deeplearning4j.util.ModelSerializer.restoreComputationGraph(file.toFile(), true);
        assertTrue(ModelReplica.bitwiseEqual(params, restored.params()), "saved parameters");
        assertFalse(ModelReplica.bitwiseEqual(dl4jInit(conf).params(), restored.params()), "training moved nothing");
        assertEquals(2, restored.getIterationCount());
    }

    /**
     * Checkpoints of a graph that no process ever held whole: stage 3 from the configuration on {@code n} workers saves
     * its shards; a new wrapper from the configuration on {@code m} workers (the same count, fewer, more) restores them
     * and trains on. Every step's loss, the parameters, the updater state and the counters equal, bitwise, the
     * uninterrupted run: one graph of DL4J's {@code init()} trained by plain data parallelism on {@code n} workers and
     * then on {@code m}, never saved. (The graph has BatchNorm, whose running statistics are parameters.)
     */
    @ParameterizedTest(name = "{0} -> {1} workers")
    @CsvSource({"2, 2", "3, 2", "2, 3"})
    void checkpointsResumeOnAnyWorkerCountBitwiseAsTheUninterruptedRun(int n, int m,
                                                                      @org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws Exception {
        ComputationGraphConfiguration conf = conf(DataType.DOUBLE);
        List<DataSet> first = Nets.batches(47, 2 * n + 1, 8, DataType.DOUBLE); // the last step leaves workers idle
        List<DataSet> second = Nets.batches(48, 2 * m, 8, DataType.DOUBLE);
        ComputationGraph uninterrupted = dl4jInit(conf);
        List<Double> expectedLosses = new ArrayList<>();
        for (int[] part : new int[][] {{n, 0}, {m, 1}}) {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(uninterrupted).workers(part[0])
                    .stepListener(r -> expectedLosses.add(r.loss())).build()) {
                w.fit(new BatchListIterator(part[1] == 0 ? first : second));
            }
        }
        java.nio.file.Path ckpt = dir.resolve("ckpt");
        List<Double> losses = new ArrayList<>();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf).workers(n).sharding(ZeroStage.PARAMETERS)
                .stepListener(r -> losses.add(r.loss())).build()) {
            w.fit(new BatchListIterator(first));
            w.saveCheckpoint(ckpt);
            assertNoWorkerHoldsTheGraph(w, w.gatherParameters().length() * 8L);
        }
        assertFalse(java.nio.file.Files.exists(ckpt.resolve(ShardCheckpoint.MODEL_FILE)), "a stage-3 checkpoint of a"
                + " graph started from its configuration holds no model.zip");
        for (int r = 0; r < n; r++) {
            assertTrue(java.nio.file.Files.isRegularFile(ckpt.resolve(ShardCheckpoint.paramsFileName(r, n))), "rank " + r);
        }
        java.nio.file.Path resumed = dir.resolve("resumed.zip");
        INDArray params;
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf).workers(m).sharding(ZeroStage.PARAMETERS)
                .stepListener(r -> losses.add(r.loss())).build()) {
            w.restoreCheckpoint(ckpt);
            w.fit(new BatchListIterator(second));
            params = w.gatherParameters();
            w.saveModel(resumed);
        }
        String what = n + " -> " + m + " workers";
        assertEquals(expectedLosses.size(), losses.size(), what + ": steps");
        for (int s = 0; s < losses.size(); s++) {
            assertEquals(Double.doubleToRawLongBits(expectedLosses.get(s)), Double.doubleToRawLongBits(losses.get(s)),
                    what + ": step " + s + " loss " + losses.get(s) + ", uninterrupted " + expectedLosses.get(s));
        }
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted.params(), params), what + ": parameters; max relative"
                + " difference " + Nets.maxRelativeDifference(params, uninterrupted.params()));
        ComputationGraph saved = org.deeplearning4j.util.ModelSerializer.restoreComputationGraph(resumed.toFile(), true);
        assertTrue(ModelReplica.bitwiseEqual(uninterrupted.getUpdater().getStateViewArray(),
                saved.getUpdater().getStateViewArray()), what + ": updater state");
        assertEquals(uninterrupted.getIterationCount(), saved.getIterationCount(), what + ": iterations");
        assertEquals(uninterrupted.getEpochCount(), saved.getEpochCount(), what + ": epochs");
        assertFalse(ModelReplica.bitwiseEqual(dl4jInit(conf).params(), params), what + ": training moved nothing");
    }

    /** One rank per group member: each rank holds its blocks only, and the result equals stage 3 in threads. */
    @Test
    void inGroupModeEachRankHoldsItsShardAndEqualsThreadsBitwise() {
        int ranks = 3;
        ComputationGraphConfiguration conf = conf(DataType.FLOAT);
        List<DataSet> data = Nets.batches(41, 2 * ranks + 1, 8, DataType.FLOAT);
        FullyShardedStateAndGraphTest.Run threads = FullyShardedStateAndGraphTest.train(dl4jInit(conf), ranks,
                ZeroStage.PARAMETERS, data);
        record Rank(List<Double> losses, INDArray params, long own, long resident) {
        }
        List<Rank> perRank = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                group -> {
                    List<Double> losses = new ArrayList<>();
                    try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(conf).group(group).ompThreadsPerWorker(1)
                            .sharding(ZeroStage.PARAMETERS).stepListener(r -> losses.add(r.loss())).build()) {
                        w.fit(new BatchListIterator(data));
                        FullySharded fs = w.fullySharded().getFirst();
                        long own = fs.ownBytes();
                        long resident = fs.residentParameterBytes();
                        return new Rank(losses, w.gatherParameters(), own, resident);
                    }
                });
        for (int r = 0; r < ranks; r++) {
            Rank o = perRank.get(r);
            assertTrue(ModelReplica.bitwiseEqual(threads.params(), o.params()), "rank " + r + ": parameters; max relative"
                    + " difference " + Nets.maxRelativeDifference(o.params(), threads.params()));
            assertEquals(threads.losses(), o.losses(), "rank " + r + ": every step's loss");
            long whole = threads.params().length() * 4L;
            long slack = 2L * 2 * 4096 * 6;
            assertTrue(o.resident() <= o.own() + slack && o.own() < whole, "rank " + r + " holds " + o.resident()
                    + " parameter bytes after the fit; its blocks are " + o.own() + " of " + whole);
        }
    }

    @Test
    void whatCannotWorkIsRefusedAtBuild() {
        ComputationGraphConfiguration conf = conf(DataType.FLOAT);
        for (ZeroStage stage : new ZeroStage[] {null, ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS}) {
            SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(conf).workers(2);
            if (stage != null) {
                b.sharding(stage);
            }
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, b::build);
            assertTrue(e.getMessage().contains("sharding=" + stage) && e.getMessage().contains("expected sharding(ZeroStage"
                    + ".PARAMETERS)") && e.getMessage().contains("fix:"), e.getMessage());
        }
        ComputationGraphConfiguration frozen = new NeuralNetConfiguration.Builder()
                .seed(5).dataType(DataType.FLOAT).updater(new Adam(0.01)).graphBuilder()
                .addInputs("in")
                .addLayer("a", new FrozenLayer(new DenseLayer.Builder().nIn(Nets.IN).nOut(8).build()), "in")
                .addLayer("b", new DenseLayer.Builder().nIn(8).nOut(8).build(), "a")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build(), "b")
                .setOutputs("out").build();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper
                .builder(frozen).workers(2).sharding(ZeroStage.PARAMETERS).build());
        assertTrue(e.getMessage().contains("vertex a") && e.getMessage().contains("fix:"), e.getMessage());
        // the caps: checked from the configuration before anything is allocated
        System.setProperty(ConfigurationStart.Caps.SYMMETRIC_PROPERTY, "16k");
        try {
            IllegalStateException s = assertThrows(IllegalStateException.class, () -> SymmemParallelWrapper.builder(conf)
                    .workers(2).sharding(ZeroStage.PARAMETERS).build());
            assertTrue(s.getMessage().contains("symmetric-memory cap"), s.getMessage());
        } finally {
            System.clearProperty(ConfigurationStart.Caps.SYMMETRIC_PROPERTY);
        }
    }
}
