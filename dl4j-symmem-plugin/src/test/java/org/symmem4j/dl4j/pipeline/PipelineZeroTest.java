package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.learning.config.Nesterovs;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.dl4j.ZeroStage;

/**
 * ZeRO stages 1 and 2 on the pipeline's data-parallel axis ({@link PipelineParallelTrainerBuilder#sharding}): bitwise
 * the unsharded DP x PP pipeline, step by step (the model's listeners too), with each replica holding only its block of
 * each stage's updater state (stage 2: summing only its block of the gradient); what is not built is refused at
 * build().
 */
class PipelineZeroTest {

    private static final int STEPS = 4;
    private static final int BATCH = 16;
    /** Odd widths: the stages' flat vectors do not split evenly, so the blocks differ in length. */
    private static final int[] WIDTHS = {10, 13, 11, 9, 7, 3};

    static Stream<Arguments> cases() {
        return Stream.concat(Stream.of(ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS, ZeroStage.PARAMETERS)
                .flatMap(stage -> Stream.of(
                        Arguments.of(stage, PipelineSchedule.GPIPE, new Adam(0.01), 1e-3),
                        Arguments.of(stage, PipelineSchedule.ONE_F_ONE_B, new Adam(0.01), 1e-3),
                        Arguments.of(stage, PipelineSchedule.ONE_F_ONE_B, new Nesterovs(0.05, 0.9), 0.0))),
                // stage 3 under ZB-H1: the stages hold their whole parameters through the step, W passes included
                Stream.of(Arguments.of(ZeroStage.PARAMETERS, PipelineSchedule.ZERO_BUBBLE_H1, new Adam(0.01), 1e-3)));
    }

    /** Records, at every iterationDone, the score and a copy of the model's parameters. */
    static final class Iterations extends BaseTrainingListener {
        final List<Double> scores = new ArrayList<>();
        final List<INDArray> params = new ArrayList<>();
        final List<INDArray> updates = new ArrayList<>();

        @Override
        public void iterationDone(Model model, int iteration, int epoch) {
            scores.add(model.score());
            params.add(model.params().dup());
            updates.add(model.gradient().gradient().dup());
        }
    }

    @ParameterizedTest(name = "{0} {1} {2} l2={3}")
    @MethodSource("cases")
    void bitwiseTheUnshardedPipelineWithAReplicasShareOfTheState(ZeroStage stage, PipelineSchedule schedule,
                                                                 IUpdater updater, double l2) {
        int dp = 2;
        MultiLayerNetwork base = PipelineNets.mlp(updater, l2, DataType.DOUBLE, WIDTHS);
        List<DataSet> data = PipelineNets.batches(5, STEPS, BATCH, WIDTHS[0], WIDTHS[WIDTHS.length - 1],
                DataType.DOUBLE);
        MultiLayerNetwork plainModel = base.clone();
        MultiLayerNetwork shardedModel = base.clone();
        // the model's listeners see the same steps: the score and the parameters after each, bitwise
        Iterations plainSeen = new Iterations();
        Iterations shardedSeen = new Iterations();
        plainModel.setListeners(plainSeen);
        shardedModel.setListeners(shardedSeen);
        try (PipelineParallelTrainer plain = PipelineParallelTrainer.builder(plainModel).ranks(2).dataParallel(dp)
                .microbatches(2).schedule(schedule).build();
             PipelineParallelTrainer sharded = PipelineParallelTrainer.builder(shardedModel).ranks(2).dataParallel(dp)
                .microbatches(2).schedule(schedule).sharding(stage).build()) {
            MultiLayerNetwork a = base.clone();
            MultiLayerNetwork b = base.clone();
            for (int s = 0; s < STEPS; s++) {
                if (s == 2) {
                    // the model changed between fits: both trainers' stages take it (sharded: into their blocks)
                    plainModel.params().muli(0.75);
                    shardedModel.params().muli(0.75);
                }
                plain.fit(data.get(s));
                sharded.fit(data.get(s));
                plain.copyParametersTo(a);
                sharded.copyParametersTo(b);
                PipelineNets.assertSameState(a, b, "step " + s + " copyParametersTo");
                PipelineNets.assertSameState(plainModel, shardedModel, "step " + s + " the builder's model");
                assertEquals(plain.lastStep().loss(), sharded.lastStep().loss(), "step " + s + " loss");
                for (int st = 0; st < sharded.replicaStages(0, 0).size(); st++) {
                    if (stage == ZeroStage.PARAMETERS) {
                        assertHoldsItsBlock(plain, sharded, st, dp, "step " + s);
                        continue;
                    }
                    assertTrue(PipelineNets.bitwiseEqual(sharded.replicaStages(0, 0).get(st).network().params(),
                            sharded.replicaStages(1, 0).get(st).network().params()), "step " + s + " stage " + st
                            + ": the replicas' parameters after the all-gathered update");
                }
            }
            assertEquals(STEPS, shardedSeen.params.size(), "a listener call per step");
            assertEquals(plainSeen.scores, shardedSeen.scores, "the listeners' scores");
            for (int i = 0; i < STEPS; i++) {
                assertTrue(PipelineNets.bitwiseEqual(plainSeen.params.get(i), shardedSeen.params.get(i)),
                        "step " + i + ": the parameters the listener saw");
                assertTrue(PipelineNets.bitwiseEqual(plainSeen.updates.get(i), shardedSeen.updates.get(i)),
                        "step " + i + ": the update the listener saw as the model's gradient");
            }
            // each replica of each stage holds its block: together the whole state, once
            long wholeState = 0;
            long stage3Held = 0;
            for (int st = 0; st < sharded.replicaStages(0, 0).size(); st++) {
                long blocks = 0;
                for (int d = 0; d < dp; d++) {
                    INDArray state = sharded.replicaStages(d, 0).get(st).network().getUpdater().getStateViewArray();
                    INDArray full = plain.replicaStages(d, 0).get(st).network().getUpdater().getStateViewArray();
                    assertTrue(state.length() < full.length(), "stage " + st + " replica " + d + " holds "
                            + state.length() + " of " + full.length() + " state elements");
                    blocks += state.length();
                }
                long full = plain.replicaStages(0, 0).get(st).network().getUpdater().getStateViewArray().length();
                assertEquals(full, blocks, "stage " + st + ": the replicas' blocks cover the state once");
                wholeState += full * Double.BYTES;
                stage3Held += (2 * plain.replicaStages(0, 0).get(st).network().numParams() + full) * Double.BYTES;
            }
            long saved = plain.modelBytesHeld() - sharded.modelBytesHeld();
            if (stage == ZeroStage.PARAMETERS) {
                // the replicas' blocks of parameters, gradient view and updater state cover each once; the accumulated
                // gradient is given back between steps
                assertEquals(stage3Held, sharded.modelBytesHeld(), "stage 3: parameters, gradient and state once");
            } else {
                assertEquals((dp - 1) * wholeState, saved, "the updater state held once instead of dp times");
            }
            System.out.printf("pipeline ZeRO " + stage + " %s %s: model bytes held %d unsharded, %d sharded (updater state %d"
                    + " bytes per replica unsharded, %d sharded)%n", schedule, updater.getClass().getSimpleName(),
                    plain.modelBytesHeld(), sharded.modelBytesHeld(), wholeState, wholeState / dp);
        }
        // the comparison can fail: one step on half the batch is not the step the unsharded pipeline took
        MultiLayerNetwork half = base.clone();
        half.fit(PipelineNets.rows(data.getFirst(), 0, BATCH / 2));
        MultiLayerNetwork whole = base.clone();
        whole.fit(data.getFirst());
        assertTrue(!PipelineNets.bitwiseEqual(whole.params(), half.params()), "half a batch took the same step");
    }

    /**
     * Thread mode's hand-overs read the replicas' blocks where they lie ({@link ZeroHandover}, no stage given DL4J's whole
     * updater): after a fit the blocks hold the model bitwise; an element of the model's state or parameters that
     * replica 1 owns (the last: its block of the last stage), changed, is seen; the copy writes it back.
     */
    @ParameterizedTest
    @org.junit.jupiter.params.provider.EnumSource(ZeroStage.class)
    void theModelsHandOversReadEveryReplicasBlockWhereItLies(ZeroStage stage) {
        MultiLayerNetwork model = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE, WIDTHS);
        List<DataSet> data = PipelineNets.batches(5, 1, BATCH, WIDTHS[0], WIDTHS[WIDTHS.length - 1], DataType.DOUBLE);
        boolean parameters = stage == ZeroStage.PARAMETERS;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(model).ranks(2).dataParallel(2)
                .microbatches(2).schedule(PipelineSchedule.ONE_F_ONE_B).sharding(stage).build()) {
            List<List<Dl4jPipelineStage>> all = List.of(trainer.replicaStages(0, 0), trainer.replicaStages(1, 0));
            assertTrue(!ZeroHandover.applies(all), "before the first step no stage holds a block");
            trainer.fit(data.getFirst());
            assertTrue(ZeroHandover.applies(all), "after it every stage does");
            PipelineStageSplit split = trainer.split();
            assertTrue(ZeroHandover.holds(model.params(), model.getUpdater(), split, all, parameters),
                    "the blocks hold the model after fit");
            for (INDArray changed : List.of(model.getUpdater().getStateViewArray(), model.params())) {
                INDArray flat = changed.reshape(changed.length());
                long last = flat.length() - 1;
                double kept = flat.getDouble(last);
                flat.putScalar(last, kept + 1);
                assertTrue(!ZeroHandover.holds(model.params(), model.getUpdater(), split, all, parameters),
                        "a changed element of replica 1's block");
                ZeroHandover.copyInto(model.params(), model.getUpdater(), split, all, parameters);
                assertEquals(kept, flat.getDouble(last), "the copy wrote replica 1's element back");
                assertTrue(ZeroHandover.holds(model.params(), model.getUpdater(), split, all, parameters));
            }
        }
    }

    @Test
    void refusesWhatItDoesNotBuildAtBuild() {
        MultiLayerNetwork net = PipelineNets.mlp(new Sgd(0.1), 0.0, DataType.DOUBLE, WIDTHS);
        MultiLayerNetwork constrained = new MultiLayerNetwork(new org.deeplearning4j.nn.conf.NeuralNetConfiguration.Builder()
                .seed(42).dataType(DataType.DOUBLE).updater(new Sgd(0.1)).list()
                .layer(new org.deeplearning4j.nn.conf.layers.DenseLayer.Builder().nIn(4).nOut(3)
                        .constrainWeights(new org.deeplearning4j.nn.conf.constraint.MaxNormConstraint(1.0, 1)).build())
                .layer(new org.deeplearning4j.nn.conf.layers.OutputLayer.Builder().nIn(3).nOut(2)
                        .activation(org.nd4j.linalg.activations.Activation.SOFTMAX).build())
                .build());
        constrained.init();
        assertRefused(() -> PipelineParallelTrainer.builder(constrained).ranks(2).dataParallel(2).microbatches(2)
                .sharding(ZeroStage.PARAMETERS).build(), "sharding(PARAMETERS) with weight constraints",
                "fix: sharding(ZeroStage.GRADIENTS)");
        MultiLayerNetwork listened = net.clone();
        listened.setListeners(new PipelineGroupListenersTest.Recorder()); // overrides onGradientCalculation
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> PipelineParallelTrainer
                .builder(listened).ranks(2).dataParallel(2).microbatches(2).sharding(ZeroStage.GRADIENTS).build());
        assertTrue(e.getMessage().startsWith("a listener that overrides onGradientCalculation with"
                + " sharding(GRADIENTS)") && e.getMessage().contains("fix: sharding(ZeroStage.OPTIMIZER_STATE)"),
                e.getMessage());
        assertRefused(() -> PipelineParallelTrainer.builder(net).ranks(2).microbatches(2)
                .sharding(ZeroStage.OPTIMIZER_STATE).build(), "dataParallel=1", "dataParallel >= 2");
        MultiLayerNetwork bn = PipelineModels.convBatchNorm(new Sgd(0.1), true);
        assertRefused(() -> PipelineParallelTrainer.builder(bn).ranks(2).dataParallel(2).microbatches(2)
                .sharding(ZeroStage.OPTIMIZER_STATE).build(), "BatchNormalization", "fix:");
    }

    /**
     * ZeRO stage 3 on stages of about 0.6 MB of parameters each (so pages tell): after every step each replica holds
     * bitwise the unsharded pipeline's values in its block, and of its parameters, gradient view and accumulated
     * gradient only its block's pages are resident; the whole trained network (copyParametersTo) is bitwise too.
     */
    @Test
    void stageThreeGivesTheOtherBlocksPagesBackBetweenSteps() {
        int[] widths = {32, 256, 256, 256, 4};
        MultiLayerNetwork base = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE, widths);
        List<DataSet> data = PipelineNets.batches(3, 3, 8, widths[0], widths[widths.length - 1], DataType.DOUBLE);
        try (PipelineParallelTrainer plain = PipelineParallelTrainer.builder(base.clone()).ranks(2).dataParallel(2)
                .microbatches(2).build();
             PipelineParallelTrainer sharded = PipelineParallelTrainer.builder(base.clone()).ranks(2).dataParallel(2)
                .microbatches(2).sharding(ZeroStage.PARAMETERS).build()) {
            for (int s = 0; s < data.size(); s++) {
                plain.fit(data.get(s));
                sharded.fit(data.get(s));
                for (int st = 0; st < 2; st++) {
                    assertHoldsItsBlock(plain, sharded, st, 2, "step " + s);
                    assertTrue(PipelineNets.bitwiseEqual(plain.stageParameters(st), sharded.stageParameters(st)),
                            "step " + s + " stage " + st + ": stageParameters joins the replicas' blocks");
                    for (int d = 0; d < 2; d++) {
                        INDArray accumulated = sharded.replicaStages(d, 0).get(st).gradientBeforeUpdate();
                        long resident = org.symmem4j.parallel.memory.ReservedMemory.residentBytes(
                                org.symmem4j.dl4j.nd4j.ArrayCollectives.segmentOf(accumulated), 0,
                                accumulated.length() * Double.BYTES);
                        assertTrue(resident <= 2 * 4096, "step " + s + " stage " + st + " replica " + d + ": "
                                + resident + " resident bytes of the accumulated gradient between steps");
                    }
                }
                MultiLayerNetwork a = base.clone();
                MultiLayerNetwork b = base.clone();
                plain.copyParametersTo(a);
                sharded.copyParametersTo(b);
                PipelineNets.assertSameState(a, b, "step " + s + " copyParametersTo");
            }
        }
    }

    /**
     * ZeRO stage 3 between steps: each replica of stage {@code st} holds its block of the parameters bitwise the
     * unsharded pipeline's, and of its parameters and gradient view only that block is resident (plus the pages its
     * ends share with the neighbouring blocks, and an array's first page).
     */
    static void assertHoldsItsBlock(PipelineParallelTrainer plain, PipelineParallelTrainer sharded, int st, int dp,
                                    String when) {
        INDArray reference = plain.replicaStages(0, 0).get(st).network().params();
        long bytes = reference.length() * Double.BYTES;
        for (int d = 0; d < dp; d++) {
            Dl4jPipelineStage stage = sharded.replicaStages(d, 0).get(st);
            long[] block = stage.optimizerShard().block();
            INDArray mine = stage.network().params().reshape(reference.length());
            INDArray theirs = reference.reshape(reference.length());
            for (long i = block[0]; i < block[1]; i++) {
                assertEquals(Double.doubleToRawLongBits(theirs.getDouble(i)), Double.doubleToRawLongBits(mine.getDouble(i)),
                        when + " stage " + st + " replica " + d + " parameter " + i);
            }
            long resident = stage.optimizerShard().residentParameterAndGradientBytes();
            long blockBytes = (block[1] - block[0]) * Double.BYTES;
            long page = 4096;
            // per array: the block's pages, the two it shares with its neighbours, and one more (DL4J reads an array's
            // first element, which maps the zero page there; mincore counts it)
            assertTrue(resident <= 2 * (blockBytes + 3 * page), when + " stage " + st + " replica " + d + ": "
                    + resident + " resident bytes of parameters and gradient, block " + blockBytes + " of " + bytes);
        }
    }

    /**
     * Stage 3 in group mode refuses what would read a rank's stages between steps, where it holds only its blocks: the
     * model's DL4J listeners (at build, on every rank though only rank 0's model has one) and stageParameters.
     */
    @Test
    void stageThreeInGroupModeRefusesListenersAndStageParameters() {
        MultiLayerNetwork net = PipelineNets.mlp(new Adam(0.01), 0.0, DataType.DOUBLE, WIDTHS);
        List<DataSet> data = PipelineNets.batches(5, 1, BATCH, WIDTHS[0], WIDTHS[WIDTHS.length - 1], DataType.DOUBLE);
        List<String> messages = org.symmem4j.parallel.group.InJvmWorld.runOnEveryRank(4,
                org.symmem4j.parallel.GroupOptions.defaults().withTimeout(java.time.Duration.ofSeconds(60)), group -> {
                    MultiLayerNetwork listened = net.clone();
                    if (group.rank() == 0) {
                        listened.setListeners(new Iterations());
                    }
                    RuntimeException e = assertThrows(RuntimeException.class, () -> PipelineParallelTrainer
                            .builder(listened).group(group).dataParallel(2).microbatches(2)
                            .sharding(ZeroStage.PARAMETERS).build());
                    MultiLayerNetwork mine = net.clone();
                    try (PipelineParallelTrainer t = PipelineParallelTrainer.builder(mine).group(group).dataParallel(2)
                            .microbatches(2).sharding(ZeroStage.PARAMETERS).build()) {
                        t.fit(data.getFirst());
                        int own = group.rank() % 2; // pipeline rank p of replica d is world rank d * pp + p
                        IllegalStateException s = assertThrows(IllegalStateException.class, () -> t.stageParameters(own));
                        return e.getMessage() + "\n" + s.getMessage();
                    }
                });
        for (String m : messages) {
            assertTrue(m.contains("DL4J listeners with sharding(PARAMETERS) in group mode") && m.contains("fix: "), m);
            assertTrue(m.contains("stageParameters: stage=") && m.contains("fix: copyParametersTo(network)"), m);
        }
    }

    private static void assertRefused(org.junit.jupiter.api.function.Executable build, String... parts) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build);
        for (String p : parts) {
            assertTrue(e.getMessage().contains(p), "message lacks '" + p + "': " + e.getMessage());
        }
    }
}
