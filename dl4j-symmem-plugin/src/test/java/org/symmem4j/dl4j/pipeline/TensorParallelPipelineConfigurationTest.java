package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.tensor.TensorParallel;

/**
 * DP x PP x TP started from a configuration ({@code builder(conf).tensorParallel(...)}): every shard takes its block of
 * its stages as DL4J's {@code init()} of the whole network draws them, the trainer's model stays hollow, and the network
 * {@code copyParametersTo} gathers is bitwise what the trainer given {@code new MultiLayerNetwork(conf).init()} trains:
 * in thread mode and in group mode (each rank its shard of its stages only); a chain graph likewise.
 */
class TensorParallelPipelineConfigurationTest {

    private static final int[] BLOCKS = TensorParallelPipelineTest.BLOCKS;
    private static final int STEPS = 3;

    private static MultiLayerConfiguration conf() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE).getLayerWiseConfigurations();
    }

    /** The trainer on the network DL4J's init() makes of the configuration, in thread mode: the reference. */
    private static MultiLayerNetwork trainedWhole(int dp, List<DataSet> data) {
        MultiLayerNetwork whole = new MultiLayerNetwork(conf().clone());
        whole.init();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(whole).ranks(2).dataParallel(dp)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
        }
        return whole;
    }

    private static MultiLayerNetwork gathered(PipelineParallelTrainer trainer) {
        MultiLayerNetwork target = new MultiLayerNetwork(conf().clone());
        target.init();
        trainer.copyParametersTo(target);
        return target;
    }

    @Test
    void onThreadsEqualsTheTrainerGivenTheInitialisedNetworkBitwise() {
        List<DataSet> data = PipelineNets.batches(23, STEPS, 8, DataType.DOUBLE);
        MultiLayerNetwork expected = trainedWhole(2, data);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(conf().clone()).ranks(2).dataParallel(2)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
            PipelineNets.assertSameState(expected, gathered(trainer), "copyParametersTo");
            DataParallelPipelineTest.assertReplicasBitwiseEqual(trainer, 2);
            assertTrue(trainer.modelResidentBytes() <= 4 * 4096, "the trainer's model holds "
                    + trainer.modelResidentBytes() + " bytes: expected none (a page per array at most)");
        }
    }

    @Test
    void inGroupModeEveryRankGathersTheTrainerGivenTheInitialisedNetworkBitwise() {
        List<DataSet> data = PipelineNets.batches(29, STEPS, 8, DataType.DOUBLE);
        MultiLayerNetwork expected = trainedWhole(1, data);
        record Run(MultiLayerNetwork gathered, long parametersHeld, long modelResident) {
        }
        List<Run> runs = TensorParallelPipelineGroupModeTest.onEveryRank(4, group -> {
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(conf().clone()).group(group)
                    .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
                data.forEach(trainer::fit);
                long resident = trainer.modelResidentBytes();
                return new Run(gathered(trainer), trainer.parametersHeld(), resident);
            }
        });
        MultiLayerNetwork initial = new MultiLayerNetwork(conf().clone());
        initial.init();
        PipelineStageSplit shardSplit = PipelineStageSplit.atBoundaries(TensorParallel.shard(initial, 0, 2, BLOCKS),
                PipelineStageSplit.balanced(initial, 2, PipelineTensorParallel.canStartStage(BLOCKS)).stageStarts());
        for (int r = 0; r < runs.size(); r++) {
            PipelineNets.assertSameState(expected, runs.get(r).gathered(), "rank " + r + " from a configuration");
            assertEquals(shardSplit.parameterCount(r / 2), runs.get(r).parametersHeld(), "rank " + r
                    + ": its shard of its stage only");
            assertTrue(runs.get(r).modelResident() <= 4 * 4096, "rank " + r + ": the trainer's model holds "
                    + runs.get(r).modelResident() + " bytes: expected none");
        }
    }

    /**
     * A chain graph trains as its network: given whole (thread mode, with a checkpoint saved and restored into a fresh
     * trainer) bitwise as the network's trainer, and from its configuration in group mode bitwise as the trainer given
     * {@code new ComputationGraph(conf).init()} on threads.
     */
    @Test
    void aChainGraphTrainsAsItsNetworkGivenWholeOrFromItsConfiguration(@TempDir Path dir) throws Exception {
        List<DataSet> data = PipelineNets.batches(31, STEPS, 8, DataType.DOUBLE);
        MultiLayerNetwork network = new MultiLayerNetwork(conf().clone());
        network.init();
        ComputationGraph graph = network.clone().toComputationGraph();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(network).ranks(2).dataParallel(2)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
        }
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(graph).ranks(2).dataParallel(2)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
            trainer.saveCheckpoint(dir);
        }
        assertSameState(network, graph, "the graph given whole vs its network");
        ComputationGraph restored = network.clone().toComputationGraph();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(restored).ranks(2)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            trainer.restoreCheckpoint(dir);
        }
        assertSameState(network, restored, "the graph restored from its stage shards");

        ComputationGraphConfiguration graphConf = graph.getConfiguration().clone();
        graphConf.setIterationCount(0);
        graphConf.setEpochCount(0);
        ComputationGraph initialised = new ComputationGraph(graphConf.clone());
        initialised.init();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(initialised).ranks(2)
                .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
        }
        List<ComputationGraph> gathered = TensorParallelPipelineGroupModeTest.onEveryRank(4, group -> {
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(graphConf.clone()).group(group)
                    .tensorParallel(2, BLOCKS).microbatches(2).ompThreadsPerRank(1).build()) {
                data.forEach(trainer::fit);
                ComputationGraph target = new ComputationGraph(graphConf.clone());
                target.init();
                trainer.copyParametersTo(target);
                return target;
            }
        });
        for (int r = 0; r < gathered.size(); r++) {
            assertTrue(PipelineNets.bitwiseEqual(initialised.params(), gathered.get(r).params()), "rank " + r
                    + ": the graph from its configuration, parameters");
            assertTrue(PipelineNets.bitwiseEqual(initialised.getUpdater().getStateViewArray(),
                    gathered.get(r).getUpdater().getStateViewArray()), "rank " + r + ": updater state");
        }
    }

    /**
     * A chain graph with tensor-parallel blocks under ZB-H1, the blocks' layers split: bitwise its own 1F1B run on
     * dp x pp x tp = 2 x 2 x 2, every layer split (none named by {@code unsplitBackwardLayers}).
     */
    @Test
    void aChainGraphUnderZeroBubbleEqualsOneFOneBBitwise() {
        List<DataSet> data = PipelineNets.batches(37, STEPS, 8, DataType.DOUBLE);
        MultiLayerNetwork network = new MultiLayerNetwork(conf().clone());
        network.init();
        ComputationGraph zb = network.clone().toComputationGraph();
        ComputationGraph oneFOneB = network.clone().toComputationGraph();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(zb).ranks(2).dataParallel(2)
                .tensorParallel(2, BLOCKS).microbatches(4).schedule(PipelineSchedule.ZERO_BUBBLE_H1)
                .ompThreadsPerRank(1).build()) {
            assertEquals(List.of(), trainer.unsplitBackwardLayers(), "every layer splits, the blocks' too");
            data.forEach(trainer::fit);
        }
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(oneFOneB).ranks(2).dataParallel(2)
                .tensorParallel(2, BLOCKS).microbatches(4).schedule(PipelineSchedule.ONE_F_ONE_B)
                .ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
        }
        assertTrue(PipelineNets.bitwiseEqual(oneFOneB.params(), zb.params()), "ZB-H1 vs 1F1B: parameters");
        assertTrue(PipelineNets.bitwiseEqual(oneFOneB.getUpdater().getStateViewArray(),
                zb.getUpdater().getStateViewArray()), "ZB-H1 vs 1F1B: updater state");
    }

    private static void assertSameState(MultiLayerNetwork expected, ComputationGraph actual, String what) {
        assertTrue(PipelineNets.bitwiseEqual(expected.params(), actual.params()), what + ": parameters");
        assertTrue(PipelineNets.bitwiseEqual(expected.getUpdater().getStateViewArray(),
                actual.getUpdater().getStateViewArray()), what + ": updater state");
        assertEquals(expected.getIterationCount(), actual.getConfiguration().getIterationCount(), what + ": iterations");
        assertEquals(expected.getEpochCount(), actual.getConfiguration().getEpochCount(), what + ": epochs");
    }
}
