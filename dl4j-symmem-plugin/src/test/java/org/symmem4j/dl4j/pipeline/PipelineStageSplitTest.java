package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.dl4j.Nets;

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
        long[][] shapes = two.boundaryShapes(InputType.feedForward(16));
        assertArrayEquals(new long[] {64}, shapes[0], "what stage 0 sends stage 1, per example");
        assertArrayEquals(new long[] {4}, shapes[1], "the network's output");
        // ties: the later stages get the fewer layers
        assertArrayEquals(new int[] {0, 2, 3}, PipelineStageSplit.balancedStarts(new long[] {1, 100, 1}, 2));
        assertArrayEquals(new int[] {0, 2, 4}, PipelineStageSplit.balancedStarts(new long[] {10, 10, 10, 10}, 2));
    }

    /** The smallest possible largest stage over every way to cut layers [from, end) into {@code stages} parts. */
    static long bruteForceLargest(long[] params, int from, int stages) {
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

    /** A split by any per-layer cost (measured times) minimizes the most expensive stage, against brute force. */
    @Test
    void splitByCostMinimizesTheMostExpensiveStage() {
        MultiLayerNetwork net = PipelineNets.mlp(PipelineNets.updater("sgd"), 0, DataType.FLOAT);
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(3);
        for (int trial = 0; trial < 20; trial++) {
            long[] cost = new long[net.getnLayers()];
            for (int i = 0; i < cost.length; i++) {
                cost[i] = rnd.nextLong(0, 1000);
            }
            for (int stages = 1; stages <= cost.length; stages++) {
                PipelineStageSplit split = PipelineStageSplit.byCost(net, stages, cost);
                long largest = 0;
                for (int s = 0; s < stages; s++) {
                    largest = Math.max(largest, split.cost(s, cost));
                }
                assertEquals(bruteForceLargest(cost, 0, stages), largest, java.util.Arrays.toString(cost) + " " + split);
            }
        }
        // an output stage four times as slow as the rest gets a layer of its own
        long[] slowOutput = {10, 10, 10, 10, 10, 10, 10, 40};
        PipelineStageSplit slow = PipelineStageSplit.byCost(net, 4, slowOutput);
        assertEquals(7, slow.firstLayer(3), slow.toString());
        assertEquals(40, java.util.stream.IntStream.range(0, 4).mapToLong(st -> slow.cost(st, slowOutput)).max().orElseThrow());
        // by parameters the same network ends with three layers in its last stage
        assertTrue(PipelineStageSplit.balanced(net, 4).firstLayer(3) < 7);
        assertThrows(IllegalArgumentException.class, () -> PipelineStageSplit.byCost(net, 2, new long[] {1, 2}));
        assertThrows(IllegalArgumentException.class, () -> PipelineStageSplit.byCost(net, 2,
                new long[] {1, 1, 1, 1, 1, 1, 1, -1}));
    }

    /**
     * The profile times every layer on real passes (no update, the network untouched), and a trainer
     * split by it trains exactly as one split by parameters: the split moves work, not results.
     */
    @Test
    void profiledSplitTrainsLikeAnyOtherSplit() {
        MultiLayerNetwork base = PipelineModels.layerKinds(new Adam(0.01)).getFirst().network();
        INDArray before = base.params().dup();
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.IMAGES, 8, 3, 8);
        StageProfile profile = StageProfile.measure(base, data.getFirst(), 4, 3, 1, null);
        assertTrue(PipelineNets.bitwiseEqual(before, base.params()), "profiling must not change the network");
        assertEquals(6, profile.layerNanos().length);
        assertEquals(2, profile.microbatchExamples());
        for (int i = 0; i < 6; i++) {
            assertTrue(profile.backwardNanos()[i] > 0, "layer " + i + " backward " + profile);
        }
        MultiLayerNetwork byParameters = base.clone();
        MultiLayerNetwork byTime = base.clone();
        try (PipelineParallelTrainer a = PipelineParallelTrainer.builder(base.clone()).ranks(3).microbatches(4).build();
             PipelineParallelTrainer b = PipelineParallelTrainer.builder(base.clone()).ranks(3).microbatches(4).splitBy(profile)
                     .build()) {
            assertEquals(null, a.profile());
            assertEquals(profile, b.profile());
            var predicted = b.predictedStageDurations();
            assertEquals(3, predicted.stageCount());
            for (DataSet batch : data) {
                a.fit(batch);
                b.fit(batch);
            }
            a.copyParametersTo(byParameters);
            b.copyParametersTo(byTime);
            System.out.println("parameters: " + a.split() + "\nprofiled:   " + b.split() + "\n" + profile);
        }
        assertTrue(Nets.maxRelativeDifference(byParameters.params(), byTime.params()) <= 1e-12);
        assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(base).ranks(2).microbatches(4)
                .splitBy(profile).stageBoundaries(3).build());
    }

    /**
     * A split by measured times sizes its links for the stages it made: a cheap first stage runs ahead of the next
     * one, and with the equal-stage default of 2 slots its sends would wait where the schedule does not.
     */
    @Test
    void splitByMeasuredTimesSizesTheLinksForItsUnevenStages() {
        MultiLayerNetwork net = PipelineNets.mlp(new org.nd4j.linalg.learning.config.Sgd(0.1), 0,
                org.nd4j.linalg.api.buffer.DataType.FLOAT, 8, 16, 16, 16, 3);
        // the first layer a tenth of the others
        StageProfile uneven = new StageProfile(new long[] {1_000, 10_000, 10_000, 10_000},
                new long[] {2_000, 20_000, 20_000, 20_000}, 2);
        try (PipelineParallelTrainer plain = PipelineParallelTrainer.builder(net.clone()).ranks(4).microbatches(8).build();
             PipelineParallelTrainer measured = PipelineParallelTrainer.builder(net.clone()).ranks(4).microbatches(8)
                     .splitBy(uneven).build()) {
            assertEquals(2, plain.linkSlots());
            int expected = org.symmem4j.pipeline.channel.LinkPlan.of(measured.schedule(), measured.shape())
                    .stallFreeSlots(uneven.stageDurationsMicros(measured.split()));
            assertEquals(expected, measured.linkSlots());
            assertTrue(measured.linkSlots() > 2, "slots " + measured.linkSlots());
        }
    }

    /**
     * A split by measured times is the one whose simulated step is shortest for the trainer's schedule, near the split
     * balanced by time: with the 16-core runs' layer times (a 64-wide first layer a third of the others, a light output
     * layer), 1F1B at 4 ranks and 8 microbatches runs 0-4 | 5-8 | 9-12 | 13-16, where the time-balanced split
     * (0-3 | 4-7 | 8-11 | 12-16, the rule before) leaves stage 0 at 82 % of the others; ZB-H1 keeps the balanced split,
     * which the simulator finds fastest there. Fails on the old rule.
     */
    @Test
    void splitByMeasuredTimesTakesTheSplitWhoseSimulatedStepIsShortest() {
        int[] widths = new int[18];
        java.util.Arrays.fill(widths, 8);
        widths[17] = 3;
        MultiLayerNetwork net = PipelineNets.mlp(new org.nd4j.linalg.learning.config.Sgd(0.1), 0, DataType.FLOAT, widths);
        long[] forwardMicros = {2809, 7069, 6942, 7185, 6848, 7055, 6969, 7031, 7089, 7212, 7117, 7044, 7088, 7255, 7029,
            7036, 239};
        long[] backwardMicros = {4953, 17675, 18033, 17671, 17754, 17868, 17951, 17811, 17838, 17621, 18197, 17945, 18012,
            17923, 17833, 17764, 2194};
        StageProfile profile = new StageProfile(java.util.Arrays.stream(forwardMicros).map(t -> t * 1000).toArray(),
                java.util.Arrays.stream(backwardMicros).map(t -> t * 1000).toArray(), 128);
        assertArrayEquals(new int[] {4, 8, 12}, PipelineStageSplit.byCost(net, 4, profile.layerNanos()).stageStarts());
        try (PipelineParallelTrainer oneFOneB = PipelineParallelTrainer.builder(net.clone()).ranks(4).microbatches(8)
                .splitBy(profile).build();
             PipelineParallelTrainer zeroBubble = PipelineParallelTrainer.builder(net.clone()).ranks(4).microbatches(8)
                     .schedule(PipelineSchedule.ZERO_BUBBLE_H1).splitBy(profile).build()) {
            assertArrayEquals(new int[] {5, 9, 13}, oneFOneB.split().stageStarts());
            assertArrayEquals(new int[] {4, 8, 12}, zeroBubble.split().stageStarts());
            PipelineStageSplit balanced = PipelineStageSplit.byCost(net, 4, profile.layerNanos());
            long chosen = org.symmem4j.pipeline.schedule.ScheduleSimulator.simulate(oneFOneB.schedule(), oneFOneB.shape(),
                    profile.stageDurationsMicros(oneFOneB.split())).requireCompleted().makespan();
            long before = org.symmem4j.pipeline.schedule.ScheduleSimulator.simulate(oneFOneB.schedule(), oneFOneB.shape(),
                    profile.stageDurationsMicros(balanced)).requireCompleted().makespan();
            assertTrue(chosen < before, "simulated step " + chosen + " us against " + before + " us balanced");
        }
    }
}
