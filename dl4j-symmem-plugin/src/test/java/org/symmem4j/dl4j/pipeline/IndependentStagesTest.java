package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.pipeline.schedule.PipelineShape;

/**
 * The machine's bound's per-core stage times: every stage of the split timed by its rank's thread, the network given
 * untouched, bad input refused with the fix. No timing assertions: only that every stage and rank got a time.
 */
class IndependentStagesTest {

    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    /** Interleaved: 2 ranks, 2 stages each (rank r runs stages r and r + 2), 4 microbatches, two windows. */
    @Test
    void everyStageIsTimedOnItsRanksThreadAndTheNetworkIsUntouched() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(1e-3), 0, DataType.FLOAT);
        INDArray before = net.params().dup();
        PipelineStageSplit split = PipelineStageSplit.balanced(net, 4);
        DataSet batch = PipelineNets.batches(3, 1, 16, DataType.FLOAT).getFirst();
        PipelineShape shape = new PipelineShape(2, 4, 2);
        try (IndependentStages stages = IndependentStages.start(split, shape, batch, false, 1, TIMEOUT)) {
            for (int window = 0; window < 2; window++) {
                IndependentStages.Window w = stages.measure();
                assertEquals(4, w.micros().stageCount());
                assertEquals(2, w.optimizerMicros().length);
                assertEquals(0, w.micros().communicationLatency(), "the bound's hand-offs are free");
                for (int s = 0; s < 4; s++) {
                    assertTrue(w.micros().forward()[s] >= 1 && w.micros().backward()[s] >= 1, w.toString());
                }
                assertEquals(4, w.stageMillis().split(";").length);
            }
        }
        assertTrue(PipelineNets.bitwiseEqual(before, net.params()), "the windows train copies of the stages");
    }

    /** ZB-H1: the backward's halves timed apart; the weight share within what the simulator accepts. */
    @Test
    void splitBackwardsKeepTheirMeasuredWeightShare() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(1e-3), 0, DataType.FLOAT);
        PipelineStageSplit split = PipelineStageSplit.balanced(net, 2);
        DataSet batch = PipelineNets.batches(3, 1, 16, DataType.FLOAT).getFirst();
        try (IndependentStages stages = IndependentStages.start(split, new PipelineShape(2, 4, 1), batch, true, 1,
                TIMEOUT)) {
            IndependentStages.Window w = stages.measure();
            for (int s = 0; s < 2; s++) {
                assertTrue(w.micros().weightGradient()[s] <= w.micros().backward()[s] - 1, w.toString());
            }
        }
    }

    @Test
    void badInputIsRefusedWithTheFix() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(1e-3), 0, DataType.FLOAT);
        DataSet batch = PipelineNets.batches(3, 1, 16, DataType.FLOAT).getFirst();
        for (Runnable bad : List.<Runnable>of(
                () -> IndependentStages.start(PipelineStageSplit.balanced(net, 4), new PipelineShape(2, 4, 1), batch,
                        false, 1, TIMEOUT),
                () -> IndependentStages.start(PipelineStageSplit.balanced(net, 2), new PipelineShape(2, 4, 1), batch,
                        false, 0, TIMEOUT))) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, bad::run);
            assertTrue(e.getMessage().contains("fix:"), e.getMessage());
        }
    }
}
