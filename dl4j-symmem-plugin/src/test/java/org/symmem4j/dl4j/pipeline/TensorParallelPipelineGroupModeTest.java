package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * DP x PP x TP in group mode ({@link PipelineParallelTrainerBuilder#tensorParallel} with
 * {@link PipelineParallelTrainerBuilder#group}): every rank of a {@code dp x pp x tp} group builds its own trainer on
 * its own copy of the unsharded model, holds only its shard of its stages, and the result equals the trainer on
 * threads bitwise on every rank (parameters, updater state, counters, every step's loss, a model changed between
 * fits), and so plain {@code fit} of the unsharded network on the whole batch to fp64 rounding. The ranks are threads
 * of one JVM, each with its own trainer, as one process per rank runs them. Mismatched meshes and settings fail on
 * every rank at {@code build()}.
 */
class TensorParallelPipelineGroupModeTest {

    static final int STEPS = 4;
    static final int BATCH = TensorParallelPipelineTest.BATCH;
    static final int[] BLOCKS = TensorParallelPipelineTest.BLOCKS;

    /** What a run leaves in the model, each step's loss, and the parameters the trainer held. */
    record Outcome(INDArray params, INDArray updaterState, int iterations, int epochs, List<Double> losses,
                   long parametersHeld, String split, int[] stageStarts) {
    }

    /** Trains {@code model} step by step on {@code data}, halving its parameters before step 2 (a change between fits). */
    static Outcome train(MultiLayerNetwork model, PipelineParallelTrainerBuilder builder, List<DataSet> data) {
        List<Double> losses = new ArrayList<>();
        builder.ompThreadsPerRank(1).stepListener(r -> losses.add(r.loss()));
        try (PipelineParallelTrainer trainer = builder.build()) {
            for (int s = 0; s < data.size(); s++) {
                if (s == 2) {
                    model.params().muli(0.5);
                }
                trainer.fit(data.get(s));
            }
            return new Outcome(model.params().dup(), model.getUpdater().getStateViewArray() == null ? null
                    : model.getUpdater().getStateViewArray().dup(), model.getIterationCount(), model.getEpochCount(),
                    losses, trainer.parametersHeld(), trainer.split().toString(),
                    trainer.split().stageStarts());
        }
    }

    static <T> List<T> onEveryRank(int ranks, InJvmWorld.RankTask<T> task) {
        return InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), task);
    }

    @ParameterizedTest(name = "dp={0} pp={1} tp={2} {3} v={4} m={5} {6} l2={7}")
    @MethodSource("org.symmem4j.dl4j.pipeline.TensorParallelPipelineTest#cases") // thread mode's cases, as groups
    void ranksOfAGroupTrainBitwiseLikeRankThreadsAndAsThePlainFit(int dp, int pp, int tp, PipelineSchedule schedule,
                                                                  int stagesPerRank, int microbatches, String updater,
                                                                  double l2) {
        DataType dtype = DataType.DOUBLE;
        MultiLayerNetwork initial = PipelineNets.mlp(PipelineNets.updater(updater), l2, dtype);
        List<DataSet> data = PipelineNets.batches(11, STEPS, BATCH, dtype);
        MultiLayerNetwork threadsModel = initial.clone();
        Outcome threads = train(threadsModel, PipelineParallelTrainer.builder(threadsModel).ranks(pp).dataParallel(dp)
                .tensorParallel(tp, BLOCKS).microbatches(microbatches).schedule(schedule, stagesPerRank), data);

        int world = dp * pp * tp;
        List<Outcome> perRank = onEveryRank(world, group -> {
            MultiLayerNetwork mine = initial.clone();
            return train(mine, PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp)
                    .tensorParallel(tp, BLOCKS).microbatches(microbatches).schedule(schedule, stagesPerRank), data);
        });

        PipelineStageSplit shardSplit = PipelineStageSplit.atBoundaries(TensorParallel.shard(initial, 0, tp, BLOCKS),
                threads.stageStarts());
        long replicaZero = 0;
        for (int r = 0; r < world; r++) {
            Outcome o = perRank.get(r);
            assertTrue(PipelineNets.bitwiseEqual(threads.params(), o.params()), "rank " + r + ": parameters differ"
                    + " bitwise from thread mode's");
            if (threads.updaterState() != null) {
                assertTrue(PipelineNets.bitwiseEqual(threads.updaterState(), o.updaterState()), "rank " + r
                        + ": updater state");
            }
            assertEquals(threads.losses(), o.losses(), "rank " + r + ": every step's loss, bitwise (as doubles)");
            assertEquals(threads.iterations(), o.iterations(), "rank " + r + ": iteration count");
            assertEquals(threads.epochs(), o.epochs(), "rank " + r + ": epoch count");
            assertEquals(threads.split(), o.split(), "rank " + r + ": the split");
            // world rank (d * pp + p) * tp + t holds shard t of pipeline rank p's stages, nothing else
            int p = r / tp % pp;
            long own = 0;
            for (int s = p; s < shardSplit.stageCount(); s += pp) {
                own += shardSplit.parameterCount(s);
            }
            assertEquals(own, o.parametersHeld(), "rank " + r + ": only its shard of its own stages");
            replicaZero += r < pp * tp ? o.parametersHeld() : 0;
        }
        assertEquals(threads.parametersHeld(), replicaZero, "one replica's ranks together hold every shard of every stage");

        // and the plain fit of the unsharded network on the whole batch, to fp64 rounding
        MultiLayerNetwork reference = initial.clone();
        double tol = PipelineEquivalenceTest.tolerance(dtype, updater);
        for (int s = 0; s < STEPS; s++) {
            if (s == 2) {
                reference.params().muli(0.5);
            }
            reference.fit(data.get(s));
        }
        double diff = Nets.maxRelativeDifference(threads.params(), reference.params());
        assertTrue(diff <= tol, "parameters differ from plain fit of the unsharded network by " + diff + " > " + tol);
        assertTrue(Math.abs(threads.losses().getLast() - reference.score()) / (1 + Math.abs(reference.score()))
                <= PipelineEquivalenceTest.lossTolerance(dtype), "last loss " + threads.losses().getLast() + " vs "
                + reference.score());
        assertEquals(STEPS, threads.iterations());
        System.out.printf("group dp=%d pp=%d tp=%d %s: params vs plain fit %.3g%n", dp, pp, tp, schedule, diff);
    }

    /**
     * ZB-H1 in group mode, the blocks' column- and row-parallel layers split (their tp all-reduces in F and I, W local):
     * every rank of a dp x pp x tp group equals the group's 1F1B run bitwise (parameters, updater state, counters,
     * every step's loss), on 2 x 2 x 2 and on 1 x 4 x 2. A W that reached a tp collective in a different order on the
     * two tp ranks of a stage would hang here (the group's bounded wait names the missing rank).
     */
    @ParameterizedTest(name = "dp={0} pp={1} tp={2} m={3}")
    @org.junit.jupiter.params.provider.CsvSource({"2, 2, 2, 4", "1, 4, 2, 8"})
    void zeroBubbleRanksEqualOneFOneBRanksBitwise(int dp, int pp, int tp, int microbatches) {
        MultiLayerNetwork initial = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
        List<DataSet> data = PipelineNets.batches(17, STEPS, BATCH, DataType.DOUBLE);
        int world = dp * pp * tp;
        List<List<Outcome>> bySchedule = new ArrayList<>();
        for (PipelineSchedule schedule : new PipelineSchedule[] {PipelineSchedule.ONE_F_ONE_B,
                PipelineSchedule.ZERO_BUBBLE_H1}) {
            bySchedule.add(onEveryRank(world, group -> {
                MultiLayerNetwork mine = initial.clone();
                return train(mine, PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp)
                        .tensorParallel(tp, BLOCKS).microbatches(microbatches).schedule(schedule), data);
            }));
        }
        for (int r = 0; r < world; r++) {
            Outcome oneFOneB = bySchedule.get(0).get(r);
            Outcome zb = bySchedule.get(1).get(r);
            assertTrue(PipelineNets.bitwiseEqual(oneFOneB.params(), zb.params()), "rank " + r + ": parameters");
            assertTrue(PipelineNets.bitwiseEqual(oneFOneB.updaterState(), zb.updaterState()), "rank " + r
                    + ": updater state");
            assertEquals(oneFOneB.losses(), zb.losses(), "rank " + r + ": every step's loss, bitwise (as doubles)");
            assertEquals(oneFOneB.iterations(), zb.iterations(), "rank " + r + ": iteration count");
        }
    }

    /**
     * What a group-mode rank builds from and gathers into, layer range by layer range, is what the whole shards hold:
     * {@link TensorParallel#reshardInto(MultiLayerNetwork, int, MultiLayerNetwork, int)} of a stage's layers equals that
     * stage of {@link TensorParallel#shard}, and {@link TensorParallel#joinInto} of every stage's shards equals
     * {@link TensorParallel#join} of the whole shards, parameters and Adam's state bitwise.
     */
    @Test
    void stageRangesReshardAndJoinBitwiseAsTheWholeShards() {
        int tp = 2;
        MultiLayerNetwork trained = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
        PipelineNets.batches(3, 2, BATCH, DataType.DOUBLE).forEach(trained::fit); // Adam's moments are non-zero
        int[] starts = {2, 6};
        List<MultiLayerNetwork> shards = new ArrayList<>();
        List<List<MultiLayerNetwork>> stagesByShard = new ArrayList<>();
        for (int t = 0; t < tp; t++) {
            MultiLayerNetwork shard = TensorParallel.shard(trained, t, tp, BLOCKS);
            shards.add(shard);
            PipelineStageSplit split = PipelineStageSplit.atBoundaries(shard, starts);
            List<MultiLayerNetwork> expected = split.buildStageNetworks();
            List<MultiLayerNetwork> ranged = new ArrayList<>();
            for (int s = 0; s < split.stageCount(); s++) {
                MultiLayerNetwork stage = split.newStageNetwork(s);
                TensorParallel.reshardInto(trained, t, stage, split.firstLayer(s));
                assertTrue(PipelineNets.bitwiseEqual(expected.get(s).params(), stage.params()), "shard " + t + " stage "
                        + s + ": parameters");
                assertTrue(PipelineNets.bitwiseEqual(expected.get(s).getUpdater().getStateViewArray(),
                        stage.getUpdater().getStateViewArray()), "shard " + t + " stage " + s + ": updater state");
                ranged.add(stage);
            }
            stagesByShard.add(ranged);
        }
        MultiLayerNetwork joined = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
        TensorParallel.join(shards, joined);
        MultiLayerNetwork byStage = PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
        PipelineStageSplit split = PipelineStageSplit.atBoundaries(shards.getFirst(), starts);
        for (int s = 0; s < split.stageCount(); s++) {
            int stage = s;
            TensorParallel.joinInto(stagesByShard.stream().map(l -> l.get(stage)).toList(), byStage, split.firstLayer(s));
        }
        assertTrue(PipelineNets.bitwiseEqual(trained.params(), byStage.params()), "joined by stage: the trained network");
        assertTrue(PipelineNets.bitwiseEqual(joined.getUpdater().getStateViewArray(),
                byStage.getUpdater().getStateViewArray()), "joined by stage: updater state as join's");
        assertTrue(PipelineNets.bitwiseEqual(trained.getUpdater().getStateViewArray(),
                byStage.getUpdater().getStateViewArray()), "joined by stage: the trained network's updater state");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> TensorParallel.reshardInto(trained, 0, stagesByShard.getFirst().get(1), 5));
        assertTrue(e.getMessage().contains("layers [5, 9) of a network of 8 layers: expected a range inside it"),
                e.getMessage());
    }

    @Test
    void aMeshThatDoesNotFactorTheWorldIsRefusedOnEveryRank() {
        List<String> messages = onEveryRank(6, group -> assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(mlp()).group(group).dataParallel(2).tensorParallel(2, BLOCKS)
                        .microbatches(2).build()).getMessage());
        messages.forEach(m -> assertTrue(m.contains("group(...) of worldSize=6 with dataParallel=2 x tensorParallel=2:"
                + " expected a world size divisible by 4"), m));
        messages = onEveryRank(4, group -> assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(mlp()).group(group).ranks(3).tensorParallel(2, BLOCKS)
                        .microbatches(3).build()).getMessage());
        messages.forEach(m -> assertTrue(m.contains("ranks=3 x dataParallel=1 x tensorParallel=2 = 6 with group(...)"
                + " of worldSize=4: expected the dp x pp x tp mesh to factor the group"), m));
    }

    /** The tensor-parallel settings are part of the build agreement: ranks that differ fail together, naming both. */
    @Test
    void ranksWithOtherTensorParallelSettingsAreRefusedOnEveryRank() {
        List<String> blocks = onEveryRank(4, group -> assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(mlp()).group(group).ranks(2)
                        .tensorParallel(2, group.rank() == 3 ? new int[] {0, 2} : BLOCKS).microbatches(2).build())
                .getMessage());
        blocks.forEach(m -> assertTrue(m.contains("rank 3 built a different pipeline than rank 0")
                && m.contains("columnLayers=[0, 2, 4]") && m.contains("columnLayers=[0, 2]"), m));
        // a refusal on one rank alone (its boundary inside a block) is every rank's, before any links
        List<String> boundary = onEveryRank(4, group -> assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(mlp()).group(group).tensorParallel(2, BLOCKS).microbatches(2)
                        .stageBoundaries(group.rank() == 1 ? 3 : 4).build()).getMessage());
        boundary.forEach(m -> assertTrue(m.contains("build() refused on every rank (4): rank(s) [1]")
                && m.contains("stage 1 starts at layer 3, inside the tensor-parallel block of layers 2-3"), m));
    }

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("sgd"), 0, DataType.DOUBLE);
    }
}
