package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.nd4j.linalg.learning.config.Adam;

/** Balanced cuts against brute force; stage networks hold exactly the original's layers, parameters and state. */
class PipelineStageSplitTest {

    @Test
    void balancedSplitMinimizesTheLargestStage() {
        MultiLayerNetwork net = PipelineNets.mlp(PipelineNets.updater("sgd"), 0, DataType.FLOAT);
        long[] params = new long[net.getnLayers()];
        for (int i = 0; i < params.length; i++) {
            params[i] = net.getLayer(i).numParams();
        }
        for (int stages = 1; stages <= params.length; stages++) {
            PipelineStageSplit split = PipelineStageSplit.balanced(net, stages);
            long largest = 0;
            for (int s = 0; s < stages; s++) {
                assertTrue(split.endLayer(s) > split.firstLayer(s), "stage " + s + " is empty");
                largest = Math.max(largest, split.parameterCount(s));
            }
            assertEquals(bruteForceLargest(params, 0, stages), largest, "stages=" + stages + ": " + split);
            assertEquals(0, split.firstLayer(0));
            assertEquals(params.length, split.endLayer(stages - 1));
            assertEquals(split.toString(), PipelineStageSplit.balanced(net, stages).toString(), "deterministic");
        }
        // the 8-layer MLP in two: 544+1584+3136 | 3120+1568+792+400+68 parameters
        PipelineStageSplit two = PipelineStageSplit.balanced(net, 2);
        assertEquals(3, two.endLayer(0));
        assertEquals(5264, two.parameterCount(0));
        assertEquals(5948, two.parameterCount(1));
        assertEquals(64, two.outputWidth(0));
        assertEquals(64, two.inputWidth(1));
        // ties: the later stages get the fewer layers
        assertArrayEquals(new int[] {0, 2, 3}, PipelineStageSplit.balancedStarts(new long[] {1, 100, 1}, 2));
        assertArrayEquals(new int[] {0, 2, 4}, PipelineStageSplit.balancedStarts(new long[] {10, 10, 10, 10}, 2));
    }

    /** The smallest possible largest stage over every way to cut layers [from, end) into {@code stages} parts. */
    private static long bruteForceLargest(long[] params, int from, int stages) {
        if (stages == 1) {
            long sum = 0;
            for (int i = from; i < params.length; i++) {
                sum += params[i];
            }
            return sum;
        }
        long best = Long.MAX_VALUE;
        long first = 0;
        for (int end = from + 1; end <= params.length - (stages - 1); end++) {
            first += params[end - 1];
            best = Math.min(best, Math.max(first, bruteForceLargest(params, end, stages - 1)));
        }
        return best;
    }

    @Test
    void stageNetworksAreTheOriginalsLayersWithItsParametersAndUpdaterState() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.FLOAT);
        // train a little so that the original has Adam moments and counters to hand over
        for (DataSet batch : PipelineNets.batches(4, 2, 16, DataType.FLOAT)) {
            net.fit(batch);
        }
        PipelineStageSplit split = PipelineStageSplit.atBoundaries(net, 2, 5);
        List<MultiLayerNetwork> stages = split.buildStageNetworks();
        assertEquals(3, stages.size());
        INDArray flat = net.params();
        for (int s = 0; s < stages.size(); s++) {
            MultiLayerNetwork stage = stages.get(s);
            assertEquals(split.endLayer(s) - split.firstLayer(s), stage.getnLayers());
            INDArray slice = flat.get(NDArrayIndex.interval(split.parameterOffset(s),
                    split.parameterOffset(s) + split.parameterCount(s)));
            assertTrue(PipelineNets.bitwiseEqual(slice, stage.params()), "stage " + s + " parameters");
            assertEquals(DataType.FLOAT, stage.getLayerWiseConfigurations().getDataType());
            assertEquals(WorkspaceMode.NONE, stage.getLayerWiseConfigurations().getTrainingWorkspaceMode());
            assertEquals(2, stage.getIterationCount());
            for (int i = 0; i < stage.getnLayers(); i++) {
                BaseLayer mine = (BaseLayer) stage.getLayerWiseConfigurations().getConf(i).getLayer();
                BaseLayer theirs = (BaseLayer) net.getLayerWiseConfigurations().getConf(split.firstLayer(s) + i).getLayer();
                assertEquals(theirs, mine, "stage " + s + " layer " + i + " configuration (updater, regularization...)");
                assertEquals(net.getLayerWiseConfigurations().getConf(split.firstLayer(s) + i).getSeed(),
                        stage.getLayerWiseConfigurations().getConf(i).getSeed());
            }
        }
        // round trip: the stages written into a fresh network give back the original, state included
        MultiLayerNetwork copy = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.FLOAT);
        split.copyStagesInto(stages, copy);
        assertTrue(PipelineNets.bitwiseEqual(net.params(), copy.params()));
        assertTrue(PipelineNets.bitwiseEqual(net.getUpdater().getStateViewArray(), copy.getUpdater().getStateViewArray()),
                "Adam moments must survive split and copy back");
        assertEquals(2, copy.getIterationCount());
        // the updater state is not one slice per stage: a stage's Adam state is [m of its layers | v of its layers]
        INDArray stageState = stages.get(1).getUpdater().getStateViewArray();
        assertEquals(2 * split.parameterCount(1), stageState.length());
    }
}
