package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.dataset.DataSet;

/**
 * Group mode holds only a rank's own stages of a graph with residual connections, as of a network: each rank's trainer
 * has the parameters, gradient view, accumulated gradient and updater state of its own stage, runs only its stage's
 * vertices ({@link GraphStagePasses}), trains its stage network without DL4J workspaces, and holds nothing of the other
 * stages (hollow: no resident page); started from the graph's configuration, it allocates of the graph's parameters
 * only its stage and a one-layer scratch, and the trainer's graph holds no page. The result is bitwise thread mode's.
 * 4 ranks, the residual MLP of {@link PipelineResidualGraphTest} (two residual blocks and a merge), fp64, Adam.
 */
class PipelineResidualStageMemoryTest {

    static final int RANKS = 4;
    static final int MICROBATCHES = 2;

    /** What one rank's trainer held, and the graph it gathered after training. */
    record RankRun(long parametersHeld, long modelBytesHeld, long expectedBytes, long hollowResident,
                   List<String> vertices, boolean noWorkspaces, long allocated, long modelResident, String split,
                   List<Double> losses, ComputationGraph gathered) {
    }

    static RankRun run(PipelineParallelTrainerBuilder builder, List<DataSet> data, int rank) {
        List<Double> losses = new ArrayList<>();
        try (PipelineParallelTrainer trainer = builder.microbatches(MICROBATCHES).schedule(PipelineSchedule.ONE_F_ONE_B)
                .ompThreadsPerRank(1).stepListener(r -> losses.add(r.loss())).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
            Dl4jPipelineStage own = trainer.replicaStages(0).get(rank);
            assertTrue(own.held(), "rank " + rank + " holds stage " + rank);
            long state = own.network().getUpdater(true).getStateViewArray().length();
            // parameters, gradient view, accumulated gradient, updater state: 8-byte doubles
            long expected = (3 * own.network().numParams() + state) * Double.BYTES;
            long hollowResident = 0;
            for (Dl4jPipelineStage stage : trainer.replicaStages(0)) {
                if (stage != own) {
                    assertFalse(stage.held(), "stage " + stage.stage() + " on rank " + rank);
                    assertNull(stage.graphPasses(), "stage " + stage.stage() + " on rank " + rank + " runs no vertex");
                    hollowResident += stage.modelBytes();
                }
            }
            boolean noWorkspaces = own.network().getLayerWiseConfigurations().getTrainingWorkspaceMode()
                    == WorkspaceMode.NONE;
            ComputationGraph gathered = PipelineResidualGraphTest.residualMlp();
            trainer.copyParametersTo(gathered); // collective: the whole graph only when asked for
            return new RankRun(trainer.parametersHeld(), trainer.modelBytesHeld(), expected, hollowResident,
                    own.graphPasses().vertexNames(), noWorkspaces, trainer.split().parameterElementsAllocated(),
                    trainer.modelResidentBytes(), trainer.split().toString(), losses, gathered);
        }
    }

    /** The vertices of the graph after its input, in topological order. */
    static List<String> vertices(ComputationGraph graph) {
        List<String> names = new ArrayList<>();
        for (int index : graph.topologicalSortOrder()) {
            GraphVertex v = graph.getVertices()[index];
            if (!v.isInputVertex()) {
                names.add(v.getVertexName());
            }
        }
        return names;
    }

    /** The parameter counts of the graph's layer vertices in topological order: the layers of the network it trains as. */
    static List<Long> layerParameters(ComputationGraph graph) {
        List<Long> counts = new ArrayList<>();
        for (int index : graph.topologicalSortOrder()) {
            GraphVertex v = graph.getVertices()[index];
            if (v.hasLayer()) {
                counts.add(v.getLayer().numParams());
            }
        }
        return counts;
    }

    /**
     * From the graph ({@code builder(graph)}) and from its configuration ({@code builder(conf)}): each rank holds
     * exactly its stage's share, runs only its stage's vertices (together every vertex once), holds no page of the other
     * stages, and gathers thread mode's graph bitwise; from the configuration it also allocates at most one other layer
     * besides its stage, and the trainer's graph and layer network hold no page.
     */
    @Test
    void eachRankHoldsAndRunsOnlyItsStagesOfAResidualGraph() {
        List<DataSet> data = PipelineModels.batches(PipelineModels.Data.DENSE, 31, 3, 8);
        ComputationGraph initial = PipelineResidualGraphTest.residualMlp();
        ComputationGraph threads = initial.clone();
        List<Double> threadLosses = new ArrayList<>();
        PipelineStageSplit split;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(threads).ranks(RANKS)
                .microbatches(MICROBATCHES).schedule(PipelineSchedule.ONE_F_ONE_B).ompThreadsPerRank(1)
                .stepListener(r -> threadLosses.add(r.loss())).build()) {
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
            split = trainer.split();
            assertEquals(initial.numParams(), trainer.parametersHeld(), "thread mode holds every stage");
        }
        assertFalse(PipelineNets.bitwiseEqual(initial.params(), threads.params()), "training changed the parameters");
        for (boolean fromConfiguration : new boolean[] {false, true}) {
            List<RankRun> runs = PipelineGroupModeTest.onEveryRank(RANKS, group -> run(fromConfiguration
                    ? PipelineParallelTrainer.builder(initial.getConfiguration().clone()).group(group)
                    : PipelineParallelTrainer.builder(initial.clone()).group(group), data, group.rank()));
            String how = fromConfiguration ? "from the configuration" : "from the graph";
            long total = 0;
            List<String> ran = new ArrayList<>();
            for (int r = 0; r < RANKS; r++) {
                RankRun run = runs.get(r);
                String what = how + ", rank " + r;
                assertEquals(split.toString(), run.split(), what + ": the split");
                assertEquals(split.parameterCount(r), run.parametersHeld(), what + ": parameters held = its stage's");
                assertEquals(run.expectedBytes(), run.modelBytesHeld(), what + ": bytes held = its stage's state");
                assertEquals(0, run.hollowResident(), what + ": the other stages' hollow arrays hold no page");
                assertTrue(run.noWorkspaces(), what + ": its stage trains without DL4J workspaces");
                assertEquals(threadLosses, run.losses(), what + ": every step's loss, bitwise (as doubles)");
                assertTrue(PipelineNets.bitwiseEqual(threads.params(), run.gathered().params()), what + ": parameters");
                assertTrue(PipelineNets.bitwiseEqual(threads.getUpdater().getStateViewArray(),
                        run.gathered().getUpdater().getStateViewArray()), what + ": Adam state");
                if (fromConfiguration) {
                    long largestOther = 0;
                    for (int layer = 0; layer < split.layerCount(); layer++) {
                        if (layer < split.firstLayer(r) || layer >= split.endLayer(r)) {
                            largestOther = Math.max(largestOther, layerParameters(initial).get(layer));
                        }
                    }
                    long scratch = run.allocated() - run.parametersHeld();
                    assertTrue(scratch >= 0 && scratch <= largestOther, what + ": allocated " + run.allocated()
                            + " parameter elements, its stage " + run.parametersHeld() + ", the largest other layer "
                            + largestOther + ": expected at most its stage plus one other layer");
                    assertTrue(run.modelResident() <= 6 * 4096L, what + ": the trainer's hollow graph and layer network"
                            + " hold " + run.modelResident() + " bytes: expected none (a page per array at most)");
                }
                total += run.parametersHeld();
                ran.addAll(run.vertices());
                // the raw data of bench/results/2026-11-30-pipeline-residual-memory.md
                System.out.printf("residual-stage-memory %s rank=%d vertices=%s parametersHeld=%d of %d (%.4f)"
                                + " modelBytesHeld=%d expected=%d hollowResident=%d allocated=%d modelResident=%d%n",
                        fromConfiguration ? "conf" : "graph", r, run.vertices(), run.parametersHeld(),
                        initial.numParams(), (double) run.parametersHeld() / initial.numParams(), run.modelBytesHeld(),
                        run.expectedBytes(), run.hollowResident(), run.allocated(), run.modelResident());
            }
            assertEquals(initial.numParams(), total, how + ": the ranks' shares add up to the graph");
            assertEquals(vertices(initial), ran, how + ": the ranks run every vertex once, in topological order");
        }
    }
}
