package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.misc.FrozenLayerWithBackprop;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.SyncBatchNormLayer;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;

/**
 * Synchronized BatchNorm on the pipeline's data-parallel axis ({@link PipelineParallelTrainerBuilder#syncBatchNorm}),
 * fp64, dp = 2 x pp = 2: replica {@code d}'s microbatch {@code k} is normalized with the statistics of both replicas'
 * microbatch {@code k}, so every step equals one model trained on the merged microbatches — the per-microbatch
 * definition of {@link MicrobatchReference} with {@code microbatches} (not {@code microbatches x dp}) microbatches —
 * parameters and running statistics to 1e-12, under every schedule the trainer runs, with BatchNormalization in the
 * first and in the last stage. Without synchronization the same runs fail that comparison (the control); the
 * replicas stay bitwise equal; group mode equals thread mode bitwise; what cannot be synchronized is refused.
 */
class PipelineSyncBatchNormTest {

    static final double LEARNING_RATE = 0.1;
    static final int BATCH = 16;
    static final int STEPS = 3;
    static final double TOLERANCE = 1e-12;

    static Stream<Arguments> cases() {
        return Stream.of(
                // name, model, data, schedule, stagesPerRank, microbatches, stage boundaries (null: balanced)
                Arguments.of("dense log10-std, 1F1B", PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), true),
                        PipelineModels.Data.DENSE, PipelineSchedule.ONE_F_ONE_B, 1, 4, new int[] {2}),
                Arguments.of("dense variance, GPipe", PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), false),
                        PipelineModels.Data.DENSE, PipelineSchedule.GPIPE, 1, 2, new int[] {1}),
                Arguments.of("conv variance, 1F1B, BN in both stages",
                        PipelineModels.convBatchNorm(new Sgd(LEARNING_RATE), false), PipelineModels.Data.IMAGES,
                        PipelineSchedule.ONE_F_ONE_B, 1, 4, new int[] {3}),
                Arguments.of("conv log10-std, interleaved v=2",
                        PipelineModels.convBatchNorm(new Sgd(LEARNING_RATE), true), PipelineModels.Data.IMAGES,
                        PipelineSchedule.INTERLEAVED, 2, 4, new int[] {1, 3, 4}),
                // ZB-H1: BatchNormalization's backward does not split, so it runs whole in the input-gradient action
                // (its statistic-gradient all-reduce there); the dense and output layers around it split
                Arguments.of("dense variance, ZB-H1, BN in the first stage",
                        PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), false), PipelineModels.Data.DENSE,
                        PipelineSchedule.ZERO_BUBBLE_H1, 1, 4, new int[] {3}),
                Arguments.of("conv log10-std, ZB-H1, BN in both stages",
                        PipelineModels.convBatchNorm(new Sgd(LEARNING_RATE), true), PipelineModels.Data.IMAGES,
                        PipelineSchedule.ZERO_BUBBLE_H1, 1, 4, new int[] {3}));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void equalsOneModelOnTheMergedMicrobatches(String name, MultiLayerNetwork base, PipelineModels.Data data,
                                               PipelineSchedule schedule, int stagesPerRank, int microbatches,
                                               int[] boundaries) {
        List<DataSet> batches = PipelineModels.batches(data, 31, STEPS, BATCH);
        double synced = run(base, batches, schedule, stagesPerRank, microbatches, boundaries, true);
        assertTrue(synced <= TOLERANCE, name + ": synchronized BatchNorm differs from one model on the merged"
                + " microbatches by " + synced);
        // the control: each replica normalizing its own half of the microbatch does not pass that comparison
        double alone = run(base, batches, schedule, stagesPerRank, microbatches, boundaries, false);
        System.out.printf("%s: synchronized %.3g, per replica %.3g%n", name, synced, alone);
        assertTrue(alone > 1e-6, name + ": without syncBatchNorm the run should differ from the merged-microbatch model,"
                + " found " + alone);
    }

    /** The largest difference from the reference over the steps (parameters and running statistics). */
    private static double run(MultiLayerNetwork base, List<DataSet> batches, PipelineSchedule schedule, int stagesPerRank,
                              int microbatches, int[] boundaries, boolean sync) {
        MultiLayerNetwork reference = base.clone();
        MultiLayerNetwork trained = base.clone();
        double worst = 0;
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).dataParallel(2)
                .microbatches(microbatches).schedule(schedule, stagesPerRank).stageBoundaries(boundaries)
                .ompThreadsPerRank(1).syncBatchNorm(sync).build()) {
            for (DataSet batch : batches) {
                trainer.fit(batch);
                // the replicas' microbatch k together are the batch's k-th 1/microbatches
                MicrobatchReference.sgdStep(reference, batch, microbatches, LEARNING_RATE, k -> { });
                trainer.copyParametersTo(trained);
                worst = Math.max(worst, Nets.maxRelativeDifference(trained.params(), reference.params()));
            }
            for (int s = 0; s < trainer.split().stageCount(); s++) {
                MultiLayerNetwork r0 = trainer.replicaStages(0).get(s).network();
                MultiLayerNetwork r1 = trainer.replicaStages(1).get(s).network();
                assertTrue(PipelineNets.bitwiseEqual(r0.params(), r1.params()), "stage " + s + ": replicas differ");
                boolean swapped = false;
                for (org.deeplearning4j.nn.api.Layer layer : r1.getLayers()) {
                    swapped |= layer instanceof SyncBatchNormLayer;
                }
                boolean hasBatchNorm = false;
                for (org.deeplearning4j.nn.api.Layer layer : r1.getLayers()) {
                    hasBatchNorm |= layer instanceof org.deeplearning4j.nn.layers.normalization.BatchNormalization;
                }
                assertEquals(sync && hasBatchNorm, swapped, "stage " + s + ": synchronized layers only with syncBatchNorm");
            }
        }
        return worst;
    }

    /**
     * Ranks of a group (threads here, processes under the launcher) train bitwise as the rank threads do, under 1F1B
     * and under ZB-H1 (BatchNorm's backward, with its all-reduce, whole in the input-gradient action).
     */
    @ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.EnumSource(value = PipelineSchedule.class, names = {"ONE_F_ONE_B",
            "ZERO_BUBBLE_H1"})
    void groupModeEqualsThreadModeBitwise(PipelineSchedule schedule) {
        List<DataSet> data = PipelineGroupModeTest.data("batchnorm");
        MultiLayerNetwork initial = PipelineModels.denseBatchNorm(new Adam(0.01), false);
        MultiLayerNetwork threadsModel = initial.clone();
        PipelineGroupModeTest.Outcome threads = PipelineGroupModeTest.train(threadsModel, PipelineParallelTrainer
                .builder(threadsModel).ranks(2).dataParallel(2).microbatches(2).schedule(schedule, 1).syncBatchNorm(true),
                data);
        MultiLayerNetwork unsynced = initial.clone();
        PipelineGroupModeTest.Outcome alone = PipelineGroupModeTest.train(unsynced, PipelineParallelTrainer
                .builder(unsynced).ranks(2).dataParallel(2).microbatches(2).schedule(schedule, 1), data);
        assertTrue(!PipelineNets.bitwiseEqual(threads.params(), alone.params()), "syncBatchNorm changes the training");
        List<PipelineGroupModeTest.Outcome> perRank = PipelineGroupModeTest.onEveryRank(4, group -> {
            MultiLayerNetwork mine = initial.clone();
            return PipelineGroupModeTest.train(mine, PipelineParallelTrainer.builder(mine).group(group).dataParallel(2)
                    .microbatches(2).schedule(schedule, 1).syncBatchNorm(true), data);
        });
        for (int r = 0; r < 4; r++) {
            assertTrue(PipelineNets.bitwiseEqual(threads.params(), perRank.get(r).params()), "rank " + r + ": parameters"
                    + " (running statistics included) differ bitwise from thread mode's");
            assertTrue(PipelineNets.bitwiseEqual(threads.updaterState(), perRank.get(r).updaterState()), "rank " + r);
            assertEquals(threads.losses(), perRank.get(r).losses(), "rank " + r + ": every step's loss");
        }
    }

    @Test
    void ranksThatDisagreeOnSyncBatchNormFailAtBuild() {
        MultiLayerNetwork initial = PipelineModels.denseBatchNorm(new Adam(0.01), false);
        List<String> errors = PipelineGroupModeTest.onEveryRank(4, group -> {
            MultiLayerNetwork mine = initial.clone();
            PipelineParallelTrainerBuilder b = PipelineParallelTrainer.builder(mine).group(group).dataParallel(2)
                    .microbatches(2).syncBatchNorm(group.rank() != 3);
            return assertThrows(IllegalArgumentException.class, b::build).getMessage();
        });
        for (String m : errors) {
            assertTrue(m.contains("syncBatchNorm=false") && m.contains("syncBatchNorm=true"), m);
        }
    }

    @Test
    void oneReplicaIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), false)).ranks(2).microbatches(2)
                .syncBatchNorm(true).build());
        assertTrue(e.getMessage().contains("dataParallel=1") && e.getMessage().contains("fix:"), e.getMessage());
    }

    @Test
    void aNetworkWithoutBatchNormIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(PipelineNets.mlp(new Sgd(LEARNING_RATE), 0, DataType.DOUBLE)).ranks(2).dataParallel(2)
                .microbatches(2).syncBatchNorm(true).build());
        assertTrue(e.getMessage().contains("found none") && e.getMessage().contains("fix:"), e.getMessage());
    }

    @Test
    void aFrozenBatchNormIsRefused() {
        MultiLayerNetwork frozen = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(3)
                .dataType(DataType.DOUBLE).updater(new Sgd(LEARNING_RATE)).list()
                .layer(new DenseLayer.Builder().nIn(8).nOut(6).activation(Activation.TANH).build())
                .layer(new FrozenLayerWithBackprop(new BatchNormalization.Builder().build()))
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3).activation(Activation.SOFTMAX)
                        .build())
                .setInputType(InputType.feedForward(8)).build());
        frozen.init();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(frozen).ranks(2).dataParallel(2).microbatches(2).syncBatchNorm(true).build());
        assertTrue(e.getMessage().contains("frozen") && e.getMessage().contains("fix:"), e.getMessage());
    }

    /**
     * Tensor-parallel stages: a BatchNormalization on a dp x pp x tp mesh would have to merge over the replicas of the
     * same tensor-parallel rank only, which is not built; refused at build() with the fix, before any rank runs.
     */
    @Test
    void tensorParallelStagesAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineParallelTrainer
                .builder(PipelineModels.denseBatchNorm(new Sgd(LEARNING_RATE), false)).ranks(2).dataParallel(2)
                .microbatches(2).tensorParallel(2, 3).syncBatchNorm(true).build());
        assertTrue(e.getMessage().contains("tensorParallel=2") && e.getMessage().contains("syncBatchNorm")
                && e.getMessage().contains("fix:"), e.getMessage());
    }

    /** Replicas whose schedules order a rank's actions differently would merge microbatches out of step. */
    @Test
    void replicasRunningAnotherOrderAreRefused() {
        PipelineShape shape = new PipelineShape(2, 4, 1);
        PipelineSyncBatchNorm.requireSameOrder(List.of(ScheduleGenerators.oneFOneB(2, 4), ScheduleGenerators.oneFOneB(2, 4)),
                shape);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PipelineSyncBatchNorm
                .requireSameOrder(List.of(ScheduleGenerators.gpipe(2, 4), ScheduleGenerators.oneFOneB(2, 4)), shape));
        assertTrue(e.getMessage().contains("pipeline rank 0 of replica 1") && e.getMessage().contains("position 2")
                && e.getMessage().contains("fix:"), e.getMessage());
    }

    /**
     * A refusal only one rank of a group reaches: rank 0 asks for synchronized BatchNorm with one replica
     * ({@code dataParallel=1}), which is refused; rank 1 does not ask, and its own checks pass. Without the agreement
     * rank 1 would wait for rank 0 in the build agreement until the group's timeout (short here); every rank refuses
     * instead with the same message naming rank 0 and what it refused, and no checkpoint is written.
     */
    @Test
    void syncBatchNormRefusedOnOneRankOnlyIsRefusedOnEveryRank(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) {
        MultiLayerNetwork initial = PipelineModels.denseBatchNorm(new Adam(0.01), false);
        java.nio.file.Path root = tmp.resolve("checkpoints");
        List<String> errors = org.symmem4j.parallel.group.InJvmWorld.runOnEveryRank(2,
                org.symmem4j.parallel.GroupOptions.defaults().withTimeout(java.time.Duration.ofSeconds(5)), group -> {
                    MultiLayerNetwork mine = initial.clone();
                    PipelineParallelTrainerBuilder b = PipelineParallelTrainer.builder(mine).group(group).microbatches(2)
                            .checkpointEvery(1, root).syncBatchNorm(group.rank() == 0);
                    return assertThrows(IllegalArgumentException.class, b::build, "rank " + group.rank()).getMessage();
                });
        for (String m : errors) {
            assertEquals(errors.getFirst(), m, "every rank the same refusal");
            assertTrue(m.startsWith("group mode: build() refused on every rank (2): rank(s) [0] refused it, expected"
                    + " every rank to accept the same pipeline; nothing was built or linked on any rank. rank 0 refused:"
                    + " syncBatchNorm(true) with dataParallel=1: expected dataParallel >= 2"), m);
        }
        assertTrue(!java.nio.file.Files.exists(root), "nothing written: " + root);
    }
}
