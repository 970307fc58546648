package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.symmem4j.dl4j.InitialisationReplay;

/**
 * Group mode holds only a rank's own stages: each rank's trainer has the parameters, gradient views and updater state
 * of its stages and nothing of the others' (they are hollow: layouts over reserved memory with no resident page),
 * while the training result (gathered into each rank's network after every fit) is bitwise thread mode's, and a
 * checkpoint's consolidated {@code model.zip} is the whole network as thread mode trains it.
 */
class PipelineStageMemoryTest {

    static final int RANKS = 4;

    /** What one rank's trainer held, and what its model holds after training. */
    record RankRun(long parametersHeld, long modelBytesHeld, long expectedBytes, long hollowResident, String split,
                   MultiLayerNetwork model) {
    }

    static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.FLOAT);
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(value = PipelineSchedule.class, names = {"GPIPE", "ONE_F_ONE_B"})
    void eachRankHoldsItsStagesShareAndTrainsBitwiseLikeThreadMode(PipelineSchedule schedule) {
        List<DataSet> data = PipelineNets.batches(7, 3, 16, DataType.FLOAT);
        MultiLayerNetwork initial = mlp();
        MultiLayerNetwork threads = initial.clone();
        PipelineStageSplit split;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(threads).ranks(RANKS).microbatches(4)
                .schedule(schedule).ompThreadsPerRank(1).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
            split = trainer.split();
            assertEquals(initial.numParams(), trainer.parametersHeld(), "thread mode holds every stage");
        }
        List<RankRun> runs = PipelineGroupModeTest.onEveryRank(RANKS, group -> {
            MultiLayerNetwork mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(4)
                    .schedule(schedule).ompThreadsPerRank(1).build()) {
                for (DataSet batch : data) {
                    trainer.fit(batch);
                }
                Dl4jPipelineStage own = trainer.replicaStages(0).get(group.rank());
                long state = own.network().getUpdater(true).getStateViewArray().length();
                // parameters, gradient view, accumulated gradient, updater state: 4-byte floats
                long expected = (3 * own.network().numParams() + state) * 4;
                long hollowResident = 0;
                for (Dl4jPipelineStage stage : trainer.replicaStages(0)) {
                    if (stage != own) {
                        assertFalse(stage.held(), "stage " + stage.stage() + " on rank " + group.rank());
                        hollowResident += stage.modelBytes();
                    }
                }
                return new RankRun(trainer.parametersHeld(), trainer.modelBytesHeld(), expected, hollowResident,
                        trainer.split().toString(), mine);
            }
        });
        long total = 0;
        for (int r = 0; r < RANKS; r++) {
            RankRun run = runs.get(r);
            assertEquals(split.toString(), run.split(), "rank " + r + ": the split");
            assertEquals(split.parameterCount(r), run.parametersHeld(), "rank " + r + ": parameters held = its stage's");
            assertEquals(run.expectedBytes(), run.modelBytesHeld(), "rank " + r + ": bytes held = its stage's state");
            assertEquals(0, run.hollowResident(), "rank " + r + ": the other stages' hollow arrays hold no page");
            total += run.parametersHeld();
            // the raw data of bench/results/2026-11-28-pipeline-stage-memory.md
            System.out.printf("stage-memory schedule=%s rank=%d parametersHeld=%d of %d (%.4f) modelBytesHeld=%d"
                    + " expected=%d hollowResident=%d%n", schedule, r, run.parametersHeld(), initial.numParams(),
                    (double) run.parametersHeld() / initial.numParams(), run.modelBytesHeld(), run.expectedBytes(),
                    run.hollowResident());
            PipelineNets.assertSameState(threads, run.model(), "rank " + r + " (gathered after fit)");
        }
        assertEquals(initial.numParams(), total, "the ranks' shares add up to the network");
        assertFalse(PipelineNets.bitwiseEqual(initial.params(), threads.params()), "training changed the parameters");
    }

    /**
     * A checkpoint written in group mode, where no rank's trainer holds another's stages: its model.zip (rank 0's
     * gathered network) is bitwise the network thread mode trained, updater state included, and restores into a
     * group whose ranks again hold only their stages.
     */
    @Test
    void aConsolidatedCheckpointIsTheWholeNetwork(@TempDir Path dir) throws Exception {
        List<DataSet> data = PipelineNets.batches(11, 4, 16, DataType.FLOAT);
        MultiLayerNetwork initial = mlp();
        MultiLayerNetwork threads = initial.clone();
        MultiLayerNetwork threadsAtCheckpoint;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(threads).ranks(RANKS).microbatches(2)
                .ompThreadsPerRank(1).build()) {
            trainer.fit(data.get(0));
            trainer.fit(data.get(1));
            threadsAtCheckpoint = threads.clone();
            trainer.fit(data.get(2));
            trainer.fit(data.get(3));
        }
        List<MultiLayerNetwork> perRank = PipelineGroupModeTest.onEveryRank(RANKS, group -> {
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(initial.clone()).group(group)
                    .microbatches(2).ompThreadsPerRank(1).build()) {
                trainer.fit(data.get(0));
                trainer.fit(data.get(1));
                trainer.saveCheckpoint(dir);
            }
            MultiLayerNetwork mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(2)
                    .ompThreadsPerRank(1).build()) {
                trainer.restoreCheckpoint(dir);
                assertEquals(trainer.split().parameterCount(group.rank()), trainer.parametersHeld(), "after restore");
                trainer.fit(data.get(2));
                trainer.fit(data.get(3));
            }
            return mine;
        });
        MultiLayerNetwork saved = ModelSerializer.restoreMultiLayerNetwork(new File(dir.toFile(), "model.zip"), true);
        PipelineNets.assertSameState(threadsAtCheckpoint, saved, "model.zip");
        for (int r = 0; r < RANKS; r++) {
            PipelineNets.assertSameState(threads, perRank.get(r), "rank " + r + " after restore and two more steps");
        }
    }

    /**
     * From a configuration alone ({@code builder(conf)}), no rank holds the whole network at any time: each rank
     * initialises its own stage (bitwise DL4J's init, drawn layer by layer), its model stays hollow, and the network
     * gathered by copyParametersTo is bitwise what builder(network) trains in thread mode.
     */
    @Test
    void fromAConfigurationNoRankEverHoldsTheWholeNetwork() {
        List<DataSet> data = PipelineNets.batches(5, 2, 16, DataType.FLOAT);
        MultiLayerNetwork initial = mlp();
        MultiLayerNetwork threads = initial.clone();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(threads).ranks(RANKS).microbatches(4)
                .ompThreadsPerRank(1).build()) {
            data.forEach(trainer::fit);
        }
        List<RankRun> runs = PipelineGroupModeTest.onEveryRank(RANKS, group -> {
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(initial.getLayerWiseConfigurations())
                    .group(group).microbatches(4).ompThreadsPerRank(1).build()) {
                data.forEach(trainer::fit);
                long modelResident = trainer.modelResidentBytes();
                // its own stage without gathering anything: the slice of thread mode's trained network, bitwise
                int own = group.rank();
                int offset = Math.toIntExact(trainer.split().parameterOffset(own));
                float[] expected = Arrays.copyOfRange(threads.params().toFloatVector(), offset,
                        offset + Math.toIntExact(trainer.split().parameterCount(own)));
                assertArrayEquals(expected, trainer.stageParameters(own).toFloatVector(),
                        "rank " + own + ": stageParameters(" + own + ")");
                int other = (own + 1) % RANKS;
                String notHeld = assertThrows(IllegalArgumentException.class, () -> trainer.stageParameters(other))
                        .getMessage();
                assertTrue(notHeld.contains("stage=" + other + " is trained by pipeline rank " + other), notHeld);
                assertThrows(IllegalArgumentException.class, () -> trainer.stageParameters(RANKS));
                MultiLayerNetwork gathered = new MultiLayerNetwork(initial.getLayerWiseConfigurations().clone());
                gathered.init();
                trainer.copyParametersTo(gathered); // the user asks for the whole network: gathered stage by stage
                return new RankRun(trainer.parametersHeld(), trainer.modelBytesHeld(), 0, modelResident,
                        trainer.split().toString(), gathered);
            }
        });
        PipelineStageSplit split = PipelineStageSplit.balanced(initial, RANKS);
        for (int r = 0; r < RANKS; r++) {
            assertEquals(split.parameterCount(r), runs.get(r).parametersHeld(), "rank " + r + ": parameters held");
            assertTrue(runs.get(r).hollowResident() <= 3 * 4096, "rank " + r + ": the trainer's model holds "
                    + runs.get(r).hollowResident() + " bytes: expected none (a page per array at most)");
            PipelineNets.assertSameState(threads, runs.get(r).model(), "rank " + r + " from a configuration");
        }
        String refused = PipelineGroupModeTest.onEveryRank(2, group -> assertThrows(IllegalStateException.class, () -> {
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(initial.getLayerWiseConfigurations())
                    .group(group).microbatches(4).ompThreadsPerRank(1).build()) {
                trainer.saveCheckpoint(Path.of("unused"));
            }
        }).getMessage()).getFirst();
        assertTrue(refused.contains("saveCheckpoint on a pipeline trainer built from a configuration"), refused);
    }

    /**
     * A stage keeps the gradient view its network has: DL4J's {@code initGradientsView()} allocates a new one at every
     * call, and a second call left the first (a stage's parameter count of floats) resident as garbage until a
     * collection found it, 33.6 MB per rank of bench/pipeline-memory-cap.sh.
     */
    @Test
    void aStageKeepsItsNetworksGradientView() {
        MultiLayerNetwork net = mlp();
        net.initGradientsView();
        INDArray view = net.getGradientsViewArray();
        Dl4jPipelineStage stage = new Dl4jPipelineStage(0, 1, net);
        assertSame(view, stage.network().getGradientsViewArray(), "the stage allocated a second gradient view");
        MultiLayerNetwork fresh = mlp();
        new Dl4jPipelineStage(0, 1, fresh);
        assertEquals(fresh.numParams(), fresh.getGradientsViewArray().length(), "a network without one gets one");
    }

    /**
     * A rank started from a configuration draws the layers it does not hold into a scratch array of one layer
     * (to replay DL4J's draws in order): freed once the stages are drawn, not when a collection finds it.
     */
    @Test
    void theInitialisationScratchIsFreedOnceTheStagesAreDrawn() {
        MultiLayerNetwork net = mlp();
        PipelineStageSplit split = PipelineStageSplit.balanced(net, RANKS);
        List<INDArray> scratch = new ArrayList<>();
        split.buildStages(s -> s == 1, target -> InitialisationReplay.replay(net, new InitialisationReplay.Target() {
            @Override
            public INDArray view(int position, long offset, long length) {
                INDArray view = target.view(position, offset, length);
                if (position < split.firstLayer(1) || position >= split.endLayer(1)) {
                    scratch.add(view);
                }
                return view;
            }

            @Override
            public void drawn(int position, long offset, long length) {
                target.drawn(position, offset, length);
            }
        }));
        assertFalse(scratch.isEmpty(), "layers outside stage 1 drew into the scratch");
        for (INDArray view : scratch) {
            assertTrue(view.wasClosed(), "the scratch is still allocated after the draws");
        }
    }

    @Test
    void aHollowStageRefusesToCompute() {
        MultiLayerNetwork net = mlp();
        PipelineStageSplit split = PipelineStageSplit.balanced(net, RANKS);
        List<Dl4jPipelineStage> stages = split.buildStages(s -> s == 1, null);
        assertTrue(stages.get(1).held());
        assertFalse(stages.get(0).held());
        assertEquals(split.parameterCount(0), stages.get(0).network().numParams(), "the hollow stage's layout");
        IllegalStateException e = assertThrows(IllegalStateException.class, stages.get(0)::step);
        assertTrue(e.getMessage().contains("stage 0 got a step but this process does not hold it"), e.getMessage());
    }
}
