package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;

/**
 * A DL4J stage copies each received activation and gradient into an array it reuses once the microbatch's passes
 * are over (as many as microbatches are in flight), and a row-major copy of an output into one it reuses per
 * direction: steps after the first make no new hand-off array (and the trainer cuts each batch into the microbatch
 * arrays of the step before: MicrobatchesReuseTest). Reuse must not change a bit: one trainer over several
 * steps (whose later steps overwrite the arrays of the earlier ones) ends bitwise where a fresh trainer per step ends
 * (whose arrays are new every step), parameters, updater state and every step's loss. A stage that overwrote an
 * array something still read across steps would differ; within a step, the equivalence tests against plain
 * {@code fit} (PipelineLayerKindsTest, PipelineEquivalenceTest) and ZeroBubblePipelineTest (a deferred {@code dZ})
 * would.
 */
class PipelineHandoffReuseTest {

    private static final int STEPS = 4;
    private static final int BATCH = 8;
    private static final int MICROBATCHES = 4;

    /** A model, its data, and how the pipeline splits it. */
    private record Case(String name, MultiLayerNetwork network, List<DataSet> data, int ranks, int[] boundaries,
                        PipelineSchedule schedule) {
        @Override
        public String toString() {
            return name + " " + schedule;
        }
    }

    static Stream<Arguments> cases() {
        List<PipelineModels.Model> kinds = PipelineModels.layerKinds(new Adam(0.01));
        PipelineModels.Model conv = kinds.get(0); // 4-D activations
        PipelineModels.Model lstm = kinds.get(3); // 3-D activations with masks
        MultiLayerNetwork mlp = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE);
        List<DataSet> mlpData = PipelineNets.batches(13, STEPS, BATCH, DataType.DOUBLE);
        return Stream.of(
                new Case(conv.name(), conv.network(), PipelineModels.batches(conv.data(), 5, STEPS, BATCH), 3,
                        conv.boundaries(), PipelineSchedule.ONE_F_ONE_B),
                new Case(conv.name(), conv.network(), PipelineModels.batches(conv.data(), 5, STEPS, BATCH), 3,
                        conv.boundaries(), PipelineSchedule.ZERO_BUBBLE_H1),
                new Case(lstm.name(), lstm.network(), PipelineModels.batches(lstm.data(), 5, STEPS, BATCH), 3,
                        lstm.boundaries(), PipelineSchedule.GPIPE),
                new Case("mlp fp64", mlp, mlpData, 2, null, PipelineSchedule.ZERO_BUBBLE_H1))
                .map(Arguments::of);
    }

    private static PipelineParallelTrainer trainer(Case c, MultiLayerNetwork network) {
        PipelineParallelTrainerBuilder builder = PipelineParallelTrainer.builder(network).ranks(c.ranks())
                .microbatches(MICROBATCHES).schedule(c.schedule());
        return (c.boundaries() == null ? builder : builder.stageBoundaries(c.boundaries())).build();
    }

    private static long handoffArrays(PipelineParallelTrainer trainer) {
        long sum = 0;
        for (Dl4jPipelineStage stage : trainer.replicaStages(0)) {
            sum += stage.handoffArrays();
        }
        return sum;
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void laterStepsReuseTheArraysAndEndBitwiseWhereFreshArraysDo(Case c) {
        MultiLayerNetwork reused = c.network().clone();
        List<Double> reusedLosses = new ArrayList<>();
        try (PipelineParallelTrainer trainer = trainer(c, reused)) {
            trainer.fit(c.data().getFirst());
            reusedLosses.add(trainer.lastStep().loss());
            long afterFirst = handoffArrays(trainer);
            // at least one array per direction of each link; at most one per microbatch and direction of each link,
            // plus a row-major copy per direction of each link
            int links = c.boundaries() == null ? c.ranks() - 1 : c.boundaries().length;
            assertTrue(afterFirst >= 2L * links && afterFirst <= 2L * links * (MICROBATCHES + 1),
                    c + ": hand-off arrays after the first step: " + afterFirst);
            for (int s = 1; s < STEPS; s++) {
                trainer.fit(c.data().get(s));
                reusedLosses.add(trainer.lastStep().loss());
            }
            assertEquals(afterFirst, handoffArrays(trainer), c + ": steps after the first made new hand-off arrays");
            System.out.printf("%s: %d hand-off arrays, all made in the first step%n", c, afterFirst);
        }
        MultiLayerNetwork fresh = c.network().clone();
        List<Double> freshLosses = new ArrayList<>();
        for (int s = 0; s < STEPS; s++) {
            try (PipelineParallelTrainer trainer = trainer(c, fresh)) {
                trainer.fit(c.data().get(s));
                freshLosses.add(trainer.lastStep().loss());
            }
        }
        PipelineNets.assertSameState(fresh, reused, c + ": one trainer (reused arrays) against a trainer per step");
        assertEquals(freshLosses, reusedLosses, c + ": every step's loss, bitwise (as doubles)");
    }
}
