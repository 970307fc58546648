package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * {@code PipelineParallelTrainer.builder(ComputationGraphConfiguration)}: a chain graph started from its configuration
 * trains bitwise as {@code builder(graph)} with the initialised graph (parameters before and after training, updater
 * state, every step's loss, counters), in thread mode and in group mode, with 2 and 3 stages; in group mode each rank
 * allocates only its own stages' parameter elements (and a one-layer scratch for the draws it does not keep), never the
 * whole graph's; a configuration the pipeline cannot split is refused at {@code build()}.
 *
 * <p>The chain's vertices are added out of topological order, so DL4J draws their parameters in an order other than
 * their flat layout: {@link #theGraphDrawsInItsVertexOrder} shows that this matters (the equivalent network, drawing in
 * layer order, initialises differently), so the bitwise checks would catch a replay in the wrong order.
 */
class PipelineGraphConfigurationTest {

    /** The chain's layer vertices in topological (flat layout) order. */
    static final List<String> CHAIN = List.of("d1", "d2", "d3", "out");
    static final int IN = 8;
    static final int CLASSES = 3;
    static final int MICROBATCHES = 4;

    private static NeuralNetConfiguration.Builder base() {
        return new NeuralNetConfiguration.Builder().seed(4242).dataType(DataType.DOUBLE).updater(new Adam(0.01))
                .weightInit(WeightInit.XAVIER);
    }

    private static DenseLayer dense(int nOut) {
        return new DenseLayer.Builder().nOut(nOut).activation(Activation.TANH).build();
    }

    private static OutputLayer output() {
        return new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES).activation(Activation.SOFTMAX)
                .build();
    }

    /** in -> d1 -> d2 -> d3 -> out, the vertices added as d2, out, d1, d3 (DL4J draws in that order). */
    static ComputationGraphConfiguration chain() {
        return base().graphBuilder().addInputs("in")
                .addLayer("d2", dense(12), "d1")
                .addLayer("out", output(), "d3")
                .addLayer("d1", dense(16), "in")
                .addLayer("d3", dense(10), "d2")
                .setOutputs("out").setInputTypes(InputType.feedForward(IN)).build();
    }

    static ComputationGraph initialised(ComputationGraphConfiguration conf) {
        ComputationGraph graph = new ComputationGraph(conf.clone());
        graph.init();
        return graph;
    }

    static List<DataSet> data() {
        return PipelineNets.batches(77, 3, 16, IN, CLASSES, DataType.DOUBLE);
    }

    /** One trainer's run: the graph copyParametersTo gathered, the losses, what the trainer allocated and held. */
    record Run(INDArray initialParams, INDArray params, INDArray updaterState, int iterations, int epochs,
               List<Double> losses, String split, long parametersHeld, long allocated, long modelResident) {
    }

    /** Builds, copies the untrained state out, trains on {@code data}, copies the trained state out. */
    static Run run(PipelineParallelTrainerBuilder builder, List<DataSet> data) {
        List<Double> losses = new ArrayList<>();
        try (PipelineParallelTrainer trainer = builder.microbatches(MICROBATCHES).ompThreadsPerRank(1)
                .stepListener(r -> losses.add(r.loss())).build()) {
            ComputationGraph before = initialised(chain());
            trainer.copyParametersTo(before); // collective in group mode: the whole graph only when asked for
            for (DataSet batch : data) {
                trainer.fit(batch);
            }
            ComputationGraph after = initialised(chain());
            trainer.copyParametersTo(after);
            return new Run(before.params().dup(), after.params().dup(), after.getUpdater().getStateViewArray().dup(),
                    after.getConfiguration().getIterationCount(), after.getConfiguration().getEpochCount(), losses,
                    trainer.split().toString(), trainer.parametersHeld(), trainer.split().parameterElementsAllocated(),
                    trainer.modelResidentBytes());
        }
    }

    static void assertSameRun(Run expected, Run actual, String what) {
        assertTrue(PipelineNets.bitwiseEqual(expected.initialParams(), actual.initialParams()), what + ": initial parameters");
        assertTrue(PipelineNets.bitwiseEqual(expected.params(), actual.params()), what + ": trained parameters");
        assertTrue(PipelineNets.bitwiseEqual(expected.updaterState(), actual.updaterState()), what + ": updater state");
        assertEquals(expected.losses(), actual.losses(), what + ": every step's loss, bitwise (as doubles)");
        assertEquals(expected.iterations(), actual.iterations(), what + ": iterations");
        assertEquals(expected.epochs(), actual.epochs(), what + ": epochs");
        assertEquals(expected.split(), actual.split(), what + ": the split");
    }

    /** builder(graph) in thread mode, from the initialised graph: the reference. */
    static Run reference(int stages, List<DataSet> data) {
        ComputationGraph graph = initialised(chain());
        INDArray init = graph.params().dup();
        Run run = run(PipelineParallelTrainer.builder(graph).ranks(stages), data);
        assertTrue(PipelineNets.bitwiseEqual(init, run.initialParams()), "the reference starts from DL4J's init()");
        assertFalse(PipelineNets.bitwiseEqual(init, run.params()), "training changed the parameters");
        return run;
    }

    @Test
    void theGraphDrawsInItsVertexOrder() {
        ComputationGraph graph = initialised(chain());
        MultiLayerConfiguration layerOrder = base().list().layer(dense(16)).layer(dense(12)).layer(dense(10))
                .layer(output()).setInputType(InputType.feedForward(IN)).build();
        MultiLayerNetwork network = new MultiLayerNetwork(layerOrder);
        network.init();
        assertEquals(graph.numParams(), network.numParams(), "the same layers");
        assertFalse(PipelineNets.bitwiseEqual(graph.params(), network.params()), "a graph whose vertices were added out"
                + " of order draws differently from its chain drawn in layer order: the control of the bitwise checks");
    }

    @ParameterizedTest(name = "{0} stages")
    @ValueSource(ints = {2, 3})
    void threadModeFromTheConfigurationIsBitwiseTheInitialisedGraphs(int stages) {
        List<DataSet> data = data();
        Run expected = reference(stages, data);
        Run fromConfiguration = run(PipelineParallelTrainer.builder(chain()).ranks(stages), data);
        assertSameRun(expected, fromConfiguration, "thread mode, " + stages + " stages");
        assertTrue(fromConfiguration.modelResident() <= 6 * 4096L, "the trainer's graph and chain are hollow: "
                + fromConfiguration.modelResident() + " bytes resident");
    }

    @Test
    void threadModeWithDataParallelReplicasIsBitwiseTheInitialisedGraphs() {
        List<DataSet> data = data();
        ComputationGraph graph = initialised(chain());
        Run expected = run(PipelineParallelTrainer.builder(graph).ranks(2).dataParallel(2), data);
        Run fromConfiguration = run(PipelineParallelTrainer.builder(chain()).ranks(2).dataParallel(2), data);
        assertSameRun(expected, fromConfiguration, "thread mode, 2 stages x 2 replicas");
    }

    /**
     * Group mode, one rank per stage: every rank's gathered graph is bitwise the reference's, and each rank allocated
     * the parameter elements of its own stage plus at most one other layer (the scratch the draws it does not keep go
     * to), never the whole graph's; the ranks' stages add up to the graph.
     */
    @ParameterizedTest(name = "{0} ranks")
    @ValueSource(ints = {2, 3})
    void groupModeRanksAllocateOnlyTheirStagesAndTrainBitwise(int ranks) {
        List<DataSet> data = data();
        Run expected = reference(ranks, data);
        ComputationGraph whole = initialised(chain());
        PipelineStageSplit split;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(whole).ranks(ranks).microbatches(1)
                .build()) {
            split = trainer.split();
        }
        List<Run> runs = PipelineGroupModeTest.onEveryRank(ranks,
                group -> run(PipelineParallelTrainer.builder(chain()).group(group), data));
        long total = whole.numParams();
        long held = 0;
        for (int r = 0; r < ranks; r++) {
            Run run = runs.get(r);
            assertSameRun(expected, run, "rank " + r + " of " + ranks);
            assertEquals(split.parameterCount(r), run.parametersHeld(), "rank " + r + ": parameters held = its stage's");
            long largestOther = 0;
            for (int i = 0; i < CHAIN.size(); i++) {
                if (i < split.firstLayer(r) || i >= split.endLayer(r)) {
                    largestOther = Math.max(largestOther, whole.getLayer(CHAIN.get(i)).numParams());
                }
            }
            long scratch = run.allocated() - run.parametersHeld();
            assertTrue(scratch >= 0 && scratch <= largestOther, "rank " + r + ": allocated " + run.allocated()
                    + " parameter elements, its stage " + run.parametersHeld() + ", the largest other layer "
                    + largestOther + ": expected at most its stage plus one other layer");
            assertTrue(run.allocated() < total, "rank " + r + ": allocated " + run.allocated() + " of " + total);
            assertTrue(run.modelResident() <= 6 * 4096L, "rank " + r + ": the trainer's hollow graph and chain hold "
                    + run.modelResident() + " bytes: expected none (a page per array at most)");
            held += run.parametersHeld();
            // the raw data of the docs' statement (docs/pipeline.md)
            System.out.printf("graph-configuration ranks=%d rank=%d stage=%d parametersHeld=%d allocated=%d of %d"
                    + " (%.3f) largestOtherLayer=%d modelResident=%d%n", ranks, r, r, run.parametersHeld(),
                    run.allocated(), total, (double) run.allocated() / total, largestOther, run.modelResident());
        }
        assertEquals(total, held, "the ranks' stages add up to the graph");
    }

    @Test
    void aConfigurationThePipelineCannotSplitIsRefusedAtBuild(@TempDir Path dir) {
        ComputationGraphConfiguration residual = base().graphBuilder().addInputs("in")
                .addLayer("a", dense(8), "in")
                .addLayer("b", dense(8), "a")
                .addVertex("sum", new ElementWiseVertex(ElementWiseVertex.Op.Add), "a", "b")
                .addLayer("out", output(), "sum")
                .setOutputs("out").setInputTypes(InputType.feedForward(IN)).build();
        // a residual graph builds from its configuration (PipelineResidualGraphTest trains one): a stage per cut
        PipelineParallelTrainer.builder(residual).ranks(3).microbatches(2).build().close();

        ComputationGraphConfiguration twoInputs = base().graphBuilder().addInputs("x", "y")
                .addLayer("out", output(), "x", "y")
                .setOutputs("out").setInputTypes(InputType.feedForward(4), InputType.feedForward(4)).build();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(twoInputs).ranks(1).microbatches(2).build());
        assertTrue(e.getMessage().contains("inputs=[x, y]") && e.getMessage().contains("expected one input"),
                e.getMessage());

        e = assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(chain()).ranks(5).microbatches(2).build());
        assertTrue(e.getMessage().contains("stages=5") && e.getMessage().contains("4 layers")
                && e.getMessage().contains("fix:"), e.getMessage());

        e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer.builder(chain()).ranks(2)
                .microbatches(2).checkpointEvery(10, dir).build());
        assertTrue(e.getMessage().startsWith("builder(ComputationGraphConfiguration) with checkpointEvery")
                && e.getMessage().contains("fix:"), e.getMessage());
    }
}
