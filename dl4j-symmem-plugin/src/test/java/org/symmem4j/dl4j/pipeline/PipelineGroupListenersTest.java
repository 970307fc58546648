package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.listeners.CheckpointListener;
import org.deeplearning4j.optimize.listeners.ScoreIterationListener;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * DL4J listeners in group mode (ranks as threads of this JVM, each with its own trainer and model, as one JVM per rank
 * runs them; {@link PipelineGroupListeners}): every rank's listener is called once per step with the step's loss,
 * bitwise thread mode's, and the counters thread mode's listener sees; its model shows this rank's stages' parameters,
 * update and gradient bitwise as thread mode's model shows them, the other ranks' stages as they were at the start of
 * the fit (update and gradient zero); at {@code onEpochEnd} the whole network, bitwise thread mode's. The ranks carry
 * different listeners (a ScoreIterationListener on rank 1 only). With ZeRO stage 1 on the dp axis the same holds for
 * the parameters. Listeners that read the whole network during a step are refused on every rank before training.
 */
class PipelineGroupListenersTest {

    static final int STEPS = 3;
    static final int BATCH = 16;

    /** What one call shows: the kind, counters, score, and copies of the model's parameters and gradient view. */
    record Call(String kind, int iteration, int epoch, double score, INDArray params, INDArray gradient) {
    }

    /** Records every call with the model's state at that moment. */
    static final class Recorder extends BaseTrainingListener {
        final List<Call> calls = new ArrayList<>();

        private void add(String kind, Model model, int iteration, int epoch) {
            INDArray g = model.getGradientsViewArray();
            calls.add(new Call(kind, iteration, epoch, kind.equals("iteration") ? model.score() : Double.NaN,
                    model.params().dup(), g == null ? null : g.dup()));
        }

        @Override
        public void iterationDone(Model model, int iteration, int epoch) {
            add("iteration", model, iteration, epoch);
        }

        @Override
        public void onGradientCalculation(Model model) {
            add("gradient", model, -1, -1);
        }

        @Override
        public void onEpochStart(Model model) {
            add("epochStart", model, -1, -1);
        }

        @Override
        public void onEpochEnd(Model model) {
            add("epochEnd", model, -1, -1);
        }
    }

    static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    /** Two fits of the data (two epochs) with {@code recorder} on the model; the split. */
    static PipelineStageSplit train(MultiLayerNetwork model, PipelineParallelTrainerBuilder builder, List<DataSet> data,
                                    TrainingListener... listeners) {
        model.setListeners(listeners);
        try (PipelineParallelTrainer trainer = builder.microbatches(4).ompThreadsPerRank(1).build()) {
            trainer.fit(new BatchListIterator(data));
            trainer.fit(new BatchListIterator(data));
            return trainer.split();
        }
    }

    static INDArray slice(INDArray flat, PipelineStageSplit split, int s) {
        return PipelineStageSplit.slice(flat, split.parameterOffset(s), split.parameterOffset(s) + split.parameterCount(s));
    }

    @ParameterizedTest(name = "dp={0} pp={1} zero1={2}")
    @CsvSource({"1, 2, false", "2, 2, true"})
    void everyRanksListenersSeeTheAgreedLossAndItsOwnStagesBitwiseAsThreadModesListener(int dp, int pp, boolean zero1) {
        List<DataSet> data = PipelineNets.batches(21, STEPS, BATCH, DataType.DOUBLE);
        MultiLayerNetwork initial = mlp();
        Recorder expected = new Recorder();
        MultiLayerNetwork threadsModel = initial.clone();
        PipelineStageSplit split = train(threadsModel, PipelineParallelTrainer.builder(threadsModel).ranks(pp)
                .dataParallel(dp), data, expected);

        List<Recorder> perRank = InJvmWorld.runOnEveryRank(dp * pp,
                GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
                    MultiLayerNetwork mine = initial.clone();
                    Recorder recorder = new Recorder();
                    PipelineParallelTrainerBuilder b = PipelineParallelTrainer.builder(mine).group(group).dataParallel(dp);
                    if (zero1) {
                        b.sharding(ZeroStage.OPTIMIZER_STATE);
                    }
                    if (group.rank() == 1) { // the ranks' listeners may differ: no collective depends on them
                        train(mine, b, data, recorder, new ScoreIterationListener(1));
                    } else {
                        train(mine, b, data, recorder);
                    }
                    return recorder;
                });

        for (int r = 0; r < dp * pp; r++) {
            List<Call> got = perRank.get(r).calls;
            assertEquals(expected.calls.stream().map(Call::kind).toList(), got.stream().map(Call::kind).toList(),
                    "rank " + r + ": the same calls in the same order (per step: gradient, iteration; per fit: epochs)");
            INDArray fitStart = null;
            for (int i = 0; i < got.size(); i++) {
                Call want = expected.calls.get(i);
                Call mine = got.get(i);
                String at = "rank " + r + " call " + i + " (" + mine.kind() + ")";
                switch (mine.kind()) {
                    case "epochStart", "epochEnd" -> {
                        assertTrue(PipelineNets.bitwiseEqual(want.params(), mine.params()), at + ": the whole network");
                        fitStart = mine.params();
                    }
                    case "iteration", "gradient" -> {
                        assertEquals(want.iteration(), mine.iteration(), at + ": iteration");
                        assertEquals(want.epoch(), mine.epoch(), at + ": epoch");
                        assertEquals(Double.doubleToRawLongBits(want.score()), Double.doubleToRawLongBits(mine.score()),
                                at + ": the step's loss, bitwise (" + want.score() + " vs " + mine.score() + ")");
                        for (int s = 0; s < split.stageCount(); s++) {
                            boolean own = s % pp == r % pp;
                            INDArray p = slice(mine.params(), split, s);
                            INDArray g = slice(mine.gradient(), split, s);
                            if (own) {
                                assertTrue(PipelineNets.bitwiseEqual(slice(want.params(), split, s), p), at + " stage " + s
                                        + ": this rank's stage's parameters as thread mode's listener sees them");
                                assertTrue(PipelineNets.bitwiseEqual(slice(want.gradient(), split, s), g), at + " stage " + s
                                        + ": its " + (mine.kind().equals("gradient") ? "gradient" : "update"));
                                assertFalse(g.amaxNumber().doubleValue() == 0, at + " stage " + s + ": a gradient is shown");
                            } else {
                                assertTrue(PipelineNets.bitwiseEqual(slice(fitStart, split, s), p), at + " stage " + s
                                        + ": another rank's stage as the fit started");
                                assertEquals(0, g.amaxNumber().doubleValue(), at + " stage " + s + ": zeros");
                            }
                        }
                    }
                    default -> throw new AssertionError(mine.kind());
                }
            }
        }
    }

    /** Overrides onForwardPass: it would read the whole network's activations. */
    static final class Activations extends BaseTrainingListener {
        @Override
        public void onForwardPass(Model model, Map<String, INDArray> activations) {
        }
    }

    @Test
    void listenersThatReadTheWholeNetworkDuringAStepAreRefusedOnEveryRankBeforeTraining(@TempDir Path dir) {
        List<DataSet> data = PipelineNets.batches(22, 1, BATCH, DataType.DOUBLE);
        MultiLayerNetwork initial = mlp();
        List<TrainingListener> refused = List.of(new Activations(),
                new CheckpointListener.Builder(dir.toFile()).saveEveryNIterations(1).build());
        List<String> expected = List.of("a listener that overrides onForwardPass in group mode",
                "listener=CheckpointListener in group mode: it saves the whole network");
        for (int k = 0; k < refused.size(); k++) {
            TrainingListener listener = refused.get(k);
            List<String> messages = InJvmWorld.runOnEveryRank(2,
                    GroupOptions.defaults().withTimeout(Duration.ofSeconds(30)), group -> {
                        MultiLayerNetwork mine = initial.clone();
                        if (group.rank() == 0) {
                            mine.setListeners(listener); // one rank's: every rank refuses the build
                        }
                        RuntimeException e = assertThrows(RuntimeException.class, () -> PipelineParallelTrainer
                                .builder(mine).group(group).microbatches(4).ompThreadsPerRank(1).build());
                        return e.getMessage();
                    });
            for (String m : messages) {
                assertTrue(m.contains(expected.get(k)) && m.contains("fix: "), m);
            }
        }
        // thread mode is unchanged: the same listeners are called there
        MultiLayerNetwork threads = initial.clone();
        train(threads, PipelineParallelTrainer.builder(threads).ranks(2), data, new Activations());
    }
}
