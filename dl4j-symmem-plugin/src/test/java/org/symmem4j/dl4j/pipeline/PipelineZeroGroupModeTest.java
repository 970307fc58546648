package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.IUpdater;
import org.nd4j.linalg.learning.config.Nesterovs;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.rendezvous.StoreSecret;

/**
 * ZeRO stages 1 and 2 on the pipeline's dp axis in group mode ({@code .group(group)}, one trainer per rank of a
 * {@code dp x pp} world, as one process per rank runs it; here the ranks are threads of one JVM, each with its own
 * trainer, as {@link PipelineGroupModeTest}'s): every rank's model equals thread mode's sharded pipeline and the
 * unsharded pipeline bitwise (parameters, updater state, counters, every step's loss), also when the model was changed
 * between fits and when the network is copied out after {@code close()}; each rank holds only its block of its
 * stages' updater state.
 */
class PipelineZeroGroupModeTest {

    static final int DP = 2;
    static final int PP = 2;
    /** Odd widths: the stages' flat vectors do not split evenly, so the blocks differ in length. */
    static final int[] WIDTHS = {10, 13, 11, 9, 7, 3};

    /** What a run leaves: the network copied out after close(), every step's loss, and the state each held stage keeps. */
    record Run(MultiLayerNetwork copied, MultiLayerNetwork model, List<Double> losses, List<long[]> stateHeld,
               long bytesHeld) {
    }

    static Stream<Arguments> cases() {
        return Stream.of(
                Arguments.of(ZeroStage.OPTIMIZER_STATE, PipelineSchedule.ONE_F_ONE_B, new Adam(0.01), 1e-3),
                Arguments.of(ZeroStage.OPTIMIZER_STATE, PipelineSchedule.GPIPE, new Nesterovs(0.05, 0.9), 0.0),
                Arguments.of(ZeroStage.GRADIENTS, PipelineSchedule.ONE_F_ONE_B, new Adam(0.01), 1e-3),
                Arguments.of(ZeroStage.GRADIENTS, PipelineSchedule.GPIPE, new Nesterovs(0.05, 0.9), 0.0),
                Arguments.of(ZeroStage.PARAMETERS, PipelineSchedule.ONE_F_ONE_B, new Adam(0.01), 1e-3),
                Arguments.of(ZeroStage.PARAMETERS, PipelineSchedule.GPIPE, new Nesterovs(0.05, 0.9), 0.0));
    }

    /**
     * Three fits (the model changed between the first two, unchanged before the third), close(), then copyParametersTo
     * a fresh copy of {@code base}.
     */
    static Run run(MultiLayerNetwork base, PipelineParallelTrainerBuilder builder, MultiLayerNetwork model,
                   List<DataSet> data) {
        List<Double> losses = new ArrayList<>();
        List<long[]> held = new ArrayList<>();
        long bytesHeld;
        PipelineParallelTrainer trainer = builder.ompThreadsPerRank(1).stepListener(r -> losses.add(r.loss())).build();
        try {
            trainer.fit(new BatchListIterator(data.subList(0, 2)));
            // the model changed between fits: every rank's stages take it (sharded: each replica its block)
            model.params().muli(0.75);
            trainer.fit(new BatchListIterator(data.subList(2, 3)));
            // a fit on an unchanged model: with sharding each rank compares its blocks and the group agrees on one
            // number, nothing gathered (StageReplicas.unchangedOnEveryRank)
            trainer.fit(new BatchListIterator(data.subList(3, data.size())));
            bytesHeld = trainer.modelBytesHeld();
            List<Dl4jPipelineStage> stages = trainer.replicaStages(0);
            for (Dl4jPipelineStage s : stages) {
                if (s.held() && s.network().getUpdater().getStateViewArray() != null) {
                    held.add(new long[] {s.stage(), s.network().getUpdater().getStateViewArray().length()});
                }
            }
        } finally {
            trainer.close();
        }
        MultiLayerNetwork copied = base.clone();
        trainer.copyParametersTo(copied); // after close(): group mode gathers over a one-off exchange
        return new Run(copied, model, losses, held, bytesHeld);
    }

    @ParameterizedTest(name = "{0} {1} {2} l2={3}")
    @MethodSource("cases")
    void ranksOfAGroupShardBitwiseLikeThreadsAndTheUnshardedPipeline(ZeroStage zero, PipelineSchedule schedule,
                                                                      IUpdater updater, double l2) {
        MultiLayerNetwork base = PipelineNets.mlp(updater, l2, DataType.DOUBLE, WIDTHS);
        List<DataSet> data = PipelineNets.batches(7, 4, 16, WIDTHS[0], WIDTHS[WIDTHS.length - 1], DataType.DOUBLE);
        MultiLayerNetwork plainModel = base.clone();
        Run plain = run(base, PipelineParallelTrainer.builder(plainModel).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(schedule), plainModel, data);
        MultiLayerNetwork threadModel = base.clone();
        Run threads = run(base, PipelineParallelTrainer.builder(threadModel).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(schedule).sharding(zero), threadModel, data);
        PipelineNets.assertSameState(plain.copied(), threads.copied(), "thread mode sharded vs unsharded");
        assertEquals(plain.losses(), threads.losses(), "thread mode sharded vs unsharded: every step's loss");

        List<Run> ranks = PipelineGroupModeTest.onEveryRank(DP * PP, group -> {
            MultiLayerNetwork mine = base.clone();
            return run(base, PipelineParallelTrainer.builder(mine).group(group).dataParallel(DP).microbatches(2)
                    .schedule(schedule).sharding(zero), mine, data);
        });
        long[] blocks = new long[plain.stateHeld().size() + 1];
        long ranksHold = 0;
        for (int r = 0; r < ranks.size(); r++) {
            Run o = ranks.get(r);
            ranksHold += o.bytesHeld();
            PipelineNets.assertSameState(plain.copied(), o.copied(), "rank " + r + " copyParametersTo after close()");
            PipelineNets.assertSameState(plain.model(), o.model(), "rank " + r + " the builder's model");
            assertEquals(plain.losses(), o.losses(), "rank " + r + ": every step's loss, bitwise (as doubles)");
            for (long[] stage : o.stateHeld()) {
                blocks[(int) stage[0]] += stage[1];
            }
        }
        // each rank's share (with stage 3 its blocks of parameters, gradient view and state): together thread mode's
        assertEquals(threads.bytesHeld(), ranksHold, "the ranks' model bytes held add up to thread mode's");
        assertTrue(threads.bytesHeld() < plain.bytesHeld(), "sharded ranks hold less than unsharded ones");
        // thread mode's unsharded replica 0 holds every stage whole: the ranks' blocks of a stage cover it once
        for (long[] stage : plain.stateHeld()) {
            assertEquals(stage[1], blocks[(int) stage[0]], "stage " + stage[0] + ": the replicas' blocks cover its"
                    + " updater state once (each rank holds its block only)");
        }
        assertTrue(!PipelineNets.bitwiseEqual(base.params(), plain.copied().params()), "training changed the parameters");
    }

    /**
     * Stage 3 on ranks started from the configuration (no rank ever holds the whole network; each initialises its
     * stages as DL4J's init() would, then keeps its blocks): the network copied out after training is bitwise the
     * unsharded pipeline's on threads from the initialised network.
     */
    @org.junit.jupiter.api.Test
    void stageThreeFromAConfigurationBitwiseTheUnshardedPipeline() {
        MultiLayerNetwork base = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE, WIDTHS);
        List<DataSet> data = PipelineNets.batches(13, 4, 16, WIDTHS[0], WIDTHS[WIDTHS.length - 1], DataType.DOUBLE);
        MultiLayerNetwork plainModel = base.clone();
        try (PipelineParallelTrainer plain = PipelineParallelTrainer.builder(plainModel).ranks(PP).dataParallel(DP)
                .microbatches(2).ompThreadsPerRank(1).build()) {
            plain.fit(new BatchListIterator(data));
        }
        List<MultiLayerNetwork> ranks = PipelineGroupModeTest.onEveryRank(DP * PP, group -> {
            try (PipelineParallelTrainer t = PipelineParallelTrainer.builder(base.getLayerWiseConfigurations().clone())
                    .group(group).dataParallel(DP).microbatches(2).ompThreadsPerRank(1)
                    .sharding(ZeroStage.PARAMETERS).build()) {
                t.fit(new BatchListIterator(data));
                MultiLayerNetwork whole = base.clone();
                t.copyParametersTo(whole);
                return whole;
            }
        });
        for (int r = 0; r < ranks.size(); r++) {
            PipelineNets.assertSameState(plainModel, ranks.get(r), "rank " + r + " from the configuration");
        }
        assertTrue(!PipelineNets.bitwiseEqual(base.params(), plainModel.params()), "training changed the parameters");
    }

    /**
     * The ranks as members of a {@link ProcessGroup} on the {@code /dev/shm} transport (threads of this JVM here, as
     * one JVM per rank joins it under the launcher), which cannot register a stage's gradient view: the view moves into
     * symmetric memory at the first step, and the result is still bitwise the unsharded pipeline's.
     */
    @ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.EnumSource(value = ZeroStage.class, names = {"OPTIMIZER_STATE", "GRADIENTS", "PARAMETERS"})
    void ranksOfAProcessGroupOnDevShmShardBitwiseLikeTheUnshardedPipeline(ZeroStage stage) throws Exception {
        MultiLayerNetwork base = PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE, WIDTHS);
        List<DataSet> data = PipelineNets.batches(11, 4, 16, WIDTHS[0], WIDTHS[WIDTHS.length - 1], DataType.DOUBLE);
        MultiLayerNetwork plainModel = base.clone();
        Run plain = run(base, PipelineParallelTrainer.builder(plainModel).ranks(PP).dataParallel(DP).microbatches(2)
                .schedule(PipelineSchedule.ONE_F_ONE_B), plainModel, data);
        int port;
        try (java.net.ServerSocket free = new java.net.ServerSocket(0)) {
            port = free.getLocalPort();
        }
        String runId = "pipeline-zero-shm-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        byte[] secret = "pipeline-zero-group-mode-test".getBytes(java.nio.charset.StandardCharsets.UTF_8);
        ExecutorService pool = Executors.newFixedThreadPool(DP * PP);
        try {
            List<Future<Run>> ranks = new ArrayList<>();
            for (int r = 0; r < DP * PP; r++) {
                ProcessGroupConfig config = new ProcessGroupConfig(r, DP * PP, r, "127.0.0.1", port, runId);
                ranks.add(pool.submit(() -> {
                    try (ProcessGroup group = ProcessGroup.join(config, options, StoreSecret.of(secret))) {
                        assertTrue(!group.transport().capabilities(group).supports(
                                TransportCapabilities.Capability.REGISTER), "a transport that cannot register");
                        MultiLayerNetwork mine = base.clone();
                        return run(base, PipelineParallelTrainer.builder(mine).group(group).dataParallel(DP)
                                .microbatches(2).schedule(PipelineSchedule.ONE_F_ONE_B)
                                .sharding(stage), mine, data);
                    }
                }));
            }
            for (int r = 0; r < ranks.size(); r++) {
                Run o = ranks.get(r).get(180, TimeUnit.SECONDS);
                PipelineNets.assertSameState(plain.copied(), o.copied(), "/dev/shm rank " + r + " copyParametersTo");
                PipelineNets.assertSameState(plain.model(), o.model(), "/dev/shm rank " + r + " the builder's model");
                assertEquals(plain.losses(), o.losses(), "/dev/shm rank " + r + ": every step's loss");
            }
        } finally {
            pool.shutdownNow();
        }
    }
}
