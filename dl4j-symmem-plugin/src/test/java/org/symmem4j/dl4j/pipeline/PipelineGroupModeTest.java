package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Group mode ({@code PipelineParallelTrainer.builder(model).group(group)}): each rank of a group builds
 * its own trainer on its own copy of the model and trains only its stages, as one process per rank
 * does; the result equals the trainer on threads bitwise — parameters (batch normalization's running
 * statistics among them), updater state, counters and every step's loss — on every rank, after the
 * collective {@code copyParametersTo}. The ranks here are threads of one JVM, each with its own trainer;
 * the examples' process test runs the same code as processes under the launcher. Ranks fed different
 * batches, or built from different parameters or settings, fail on every rank before training.
 */
class PipelineGroupModeTest {

    static final int STEPS = 3;
    static final int BATCH = 24;

    /** What a run leaves in the model: parameters, updater state, counters, and each step's loss. */
    record Outcome(INDArray params, INDArray updaterState, int iterations, int epochs, List<Double> losses, String split,
                   List<Integer> lastStepEventsPerRank) {
    }

    static Stream<Arguments> cases() {
        return Stream.of(
                // model, dp, pp, schedule, stagesPerRank, microbatches
                Arguments.of("mlp-adam", 1, 2, PipelineSchedule.ONE_F_ONE_B, 1, 4),
                Arguments.of("mlp-adam", 1, 3, PipelineSchedule.GPIPE, 1, 3),
                Arguments.of("mlp-adam", 1, 2, PipelineSchedule.INTERLEAVED, 2, 4),
                Arguments.of("mlp-adam", 1, 2, PipelineSchedule.ZERO_BUBBLE_H1, 1, 4),
                Arguments.of("mlp-adam", 2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 2),
                Arguments.of("batchnorm", 1, 2, PipelineSchedule.ONE_F_ONE_B, 1, 4),
                Arguments.of("batchnorm", 2, 2, PipelineSchedule.ONE_F_ONE_B, 1, 2));
    }

    static MultiLayerNetwork model(String kind) {
        return kind.equals("batchnorm") ? PipelineModels.denseBatchNorm(new Adam(0.01), false)
                : PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.FLOAT);
    }

    static List<DataSet> data(String kind) {
        return kind.equals("batchnorm") ? PipelineModels.batches(PipelineModels.Data.DENSE, 5, STEPS, BATCH)
                : PipelineNets.batches(5, STEPS, BATCH, DataType.FLOAT);
    }

    static Outcome train(MultiLayerNetwork model, PipelineParallelTrainerBuilder builder, List<DataSet> data) {
        List<Double> losses = new ArrayList<>();
        builder.ompThreadsPerRank(1).stepListener(r -> losses.add(r.loss()));
        String split;
        List<Integer> events = new ArrayList<>();
        try (PipelineParallelTrainer trainer = builder.build()) {
            split = trainer.split().toString();
            trainer.fit(new BatchListIterator(data));
            trainer.copyParametersTo(model);
            for (var timeline : trainer.lastStep().timelines()) {
                assertEquals(events.size(), timeline.rank(), "timelines in rank order");
                events.add(timeline.events().size());
            }
            assertTrue(trainer.lastStep().timelineReport().bubbleFraction() >= 0, "a whole pipeline's report");
        }
        return new Outcome(model.params().dup(), model.getUpdater().getStateViewArray().dup(), model.getIterationCount(),
                model.getEpochCount(), losses, split, events);
    }

    static <T> List<T> onEveryRank(int ranks, InJvmWorld.RankTask<T> task) {
        return InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), task);
    }

    @ParameterizedTest(name = "{0} dp={1} pp={2} {3} v={4} m={5}")
    @MethodSource("cases")
    void ranksOfAGroupTrainBitwiseLikeRankThreads(String kind, int dp, int pp, PipelineSchedule schedule, int stagesPerRank,
                                                  int microbatches) {
        List<DataSet> data = data(kind);
        MultiLayerNetwork initial = model(kind);
        MultiLayerNetwork threadsModel = initial.clone();
        Outcome threads = train(threadsModel, PipelineParallelTrainer.builder(threadsModel).ranks(pp).dataParallel(dp)
                .microbatches(microbatches).schedule(schedule, stagesPerRank), data);

        List<Outcome> perRank = onEveryRank(dp * pp, group -> {
            MultiLayerNetwork mine = initial.clone();
            return train(mine, PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp)
                    .microbatches(microbatches).schedule(schedule, stagesPerRank), data);
        });
        for (int r = 0; r < dp * pp; r++) {
            Outcome o = perRank.get(r);
            assertTrue(PipelineNets.bitwiseEqual(threads.params(), o.params()), "rank " + r + ": parameters differ bitwise"
                    + " from thread mode's (batch normalization's running statistics are parameters too)");
            assertTrue(PipelineNets.bitwiseEqual(threads.updaterState(), o.updaterState()), "rank " + r + ": updater state");
            assertEquals(threads.losses(), o.losses(), "rank " + r + ": every step's loss, bitwise (as doubles)");
            assertEquals(threads.iterations(), o.iterations(), "rank " + r + ": iteration count");
            assertEquals(threads.epochs(), o.epochs(), "rank " + r + ": epoch count");
            assertEquals(threads.split(), o.split(), "rank " + r + ": the split");
            assertEquals(threads.lastStepEventsPerRank(), o.lastStepEventsPerRank(), "rank " + r + ": replica 0's"
                    + " timelines, gathered from every pipeline rank (events per rank)");
        }
        assertTrue(!PipelineNets.bitwiseEqual(initial.params(), threads.params()), "training changed the parameters");
    }

    /** Each rank measures its own pass times; every rank trains with rank 0's split. */
    @Test
    void aSplitByMeasuredTimesIsRankZerosOnEveryRank() {
        List<DataSet> data = data("mlp-adam");
        MultiLayerNetwork initial = model("mlp-adam");
        List<Outcome> perRank = onEveryRank(3, group -> {
            MultiLayerNetwork mine = initial.clone();
            return train(mine, PipelineParallelTrainer.builder(mine).group(group).microbatches(3)
                    .splitByMeasuredTimes(data.getFirst()), data);
        });
        for (int r = 1; r < 3; r++) {
            assertEquals(perRank.getFirst().split(), perRank.get(r).split(), "rank " + r + "'s split");
            assertTrue(PipelineNets.bitwiseEqual(perRank.getFirst().params(), perRank.get(r).params()), "rank " + r);
        }
    }

    @Test
    void aRankGivenAnotherBatchFailsEveryRankBeforeTrainingAndTheTrainerGoesOn() {
        List<DataSet> data = data("mlp-adam");
        MultiLayerNetwork initial = model("mlp-adam");
        List<String> errors = onEveryRank(2, group -> {
            MultiLayerNetwork mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(4)
                    .ompThreadsPerRank(1).build()) {
                DataSet batch = group.rank() == 1 ? data.get(1) : data.get(0);
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.fit(batch));
                assertEquals(null, trainer.lastStep(), "nothing trained");
                trainer.fit(data.get(0)); // the same batch everywhere: trains
                assertEquals(0, trainer.lastStep().step());
                return e.getMessage();
            }
        });
        for (String m : errors) {
            assertTrue(m.contains("rank 1 was given a different batch than rank 0 (its features differ by CRC-32C)"), m);
            assertTrue(m.contains("the same iterator, the same shuffling seed"), m);
        }
        List<String> sizes = onEveryRank(2, group -> {
            MultiLayerNetwork mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(4)
                    .ompThreadsPerRank(1).build()) {
                DataSet batch = group.rank() == 1 ? PipelineNets.rows(data.get(0), 0, 16) : data.get(0);
                return assertThrows(IllegalArgumentException.class, () -> trainer.fit(batch)).getMessage();
            }
        });
        sizes.forEach(m -> assertTrue(m.contains("its example count differ: 16 vs 24 examples"), m));
    }

    @Test
    void ranksBuiltFromOtherParametersOrSettingsAreRefusedAtBuild() {
        MultiLayerNetwork initial = model("mlp-adam");
        List<String> params = onEveryRank(2, group -> {
            MultiLayerNetwork net = initial.clone();
            if (group.rank() == 1) {
                net.params().addi(1e-3); // the same configuration, other parameters (another seed, another file)
            }
            return assertThrows(IllegalArgumentException.class,
                    () -> PipelineParallelTrainer.builder(net).group(group).microbatches(4).build()).getMessage();
        });
        params.forEach(m -> assertTrue(m.contains("rank 1 built a different pipeline than rank 0") && m.contains("parameterCrc="), m));
        List<String> settings = onEveryRank(2, group -> {
            MultiLayerNetwork mine = initial.clone();
            return assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(mine).group(group)
                    .microbatches(group.rank() == 0 ? 4 : 8).build()).getMessage();
        });
        settings.forEach(m -> assertTrue(m.contains("microbatches=4") && m.contains("microbatches=8"), m));
    }

    /** A stage that throws on one rank stops every rank: each hears of it, none waits out its timeout. */
    @Test
    void aFailureOnOneRankStopsEveryRank() {
        MultiLayerNetwork net = new MultiLayerNetwork(new org.deeplearning4j.nn.conf.NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.FLOAT).updater(new Adam(0.01)).list()
                .layer(new org.deeplearning4j.nn.conf.layers.DenseLayer.Builder().nIn(16).nOut(8).build())
                .layer(new org.deeplearning4j.nn.conf.layers.OutputLayer.Builder(new RankOneFailingLoss()).nIn(8).nOut(4)
                        .activation(org.nd4j.linalg.activations.Activation.SOFTMAX).build())
                .build());
        net.init();
        List<DataSet> data = PipelineNets.batches(5, 2, 8, DataType.FLOAT);
        List<Throwable> errors = onEveryRank(2, group -> {
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net.clone()).group(group).microbatches(2)
                    .ompThreadsPerRank(1).build()) {
                trainer.fit(data.get(0));
                if (group.rank() == 1) {
                    RankOneFailingLoss.failing = true;
                }
                PipelineTrainingException e = assertThrows(PipelineTrainingException.class, () -> trainer.fit(data.get(1)));
                assertThrows(IllegalStateException.class, () -> trainer.fit(data.get(1)), "closed after a failed step");
                return e;
            } finally {
                RankOneFailingLoss.failing = false;
            }
        });
        assertEquals(1, errors.get(1) instanceof PipelineTrainingException p ? p.rank() : -1);
        assertTrue(errors.get(1).getCause() instanceof IllegalStateException, String.valueOf(errors.get(1).getCause()));
        Throwable heard = errors.get(0).getCause();
        assertTrue(heard instanceof org.symmem4j.pipeline.channel.PipelineAbortedException
                || heard instanceof org.symmem4j.parallel.PeerTimeoutException t
                && t.reason() == org.symmem4j.parallel.PeerTimeoutException.Reason.PEER_ABORTED,
                "rank 0 stopped by the abort, not by its deadline: " + heard);
    }

    /** Cross-entropy that throws from its gradient on rank 1's thread while {@link #failing} is set. */
    static final class RankOneFailingLoss extends org.nd4j.linalg.lossfunctions.impl.LossMCXENT {
        static volatile boolean failing;

        @Override
        public INDArray computeGradient(INDArray labels, INDArray preOutput,
                                        org.nd4j.linalg.activations.IActivation activationFn, INDArray mask) {
            if (failing && Thread.currentThread().getName().equals("symmem4j-rank-1")) {
                throw new IllegalStateException("injected failure in rank 1's loss gradient");
            }
            return super.computeGradient(labels, preOutput, activationFn, mask);
        }
    }

    @Test
    void ranksThatDoNotMatchTheGroupAreRefused() {
        MultiLayerNetwork initial = model("mlp-adam");
        Supplier<MultiLayerNetwork> copy = initial::clone;
        List<String> errors = onEveryRank(4, group -> assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(copy.get()).group(group).ranks(3).microbatches(4).build()).getMessage());
        errors.forEach(m -> assertTrue(m.contains("ranks=3 x dataParallel=1 = 3 with group(...) of worldSize=4"), m));
        List<String> odd = onEveryRank(3, group -> assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(copy.get()).group(group).dataParallel(2).microbatches(4).build())
                .getMessage());
        odd.forEach(m -> assertTrue(m.contains("worldSize=3 with dataParallel=2: expected a world size divisible"), m));
    }
}
