package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.dl4j.LaunchedRanks;

/**
 * The pipeline's data-parallel axis with one JVM per rank: {@code symmem4j-run -n 4} starts four JVMs of
 * {@link PipelineProcessWorker}, the ranks of a dp × pp = 2 × 2 pipeline, which run synchronized BatchNorm (a Dense+BN
 * MLP under 1F1B, a Conv+BN network with BatchNorm in both stages), ZeRO stage 1 (Adam with L2 under 1F1B, Nesterov
 * momentum under GPipe) and stage 2 (Adam with L2 under 1F1B; odd widths so the blocks differ in length; two fits
 * with the model changed between them, the network copied out after {@code close()}). Every rank's model — parameters with the running statistics, updater
 * state, counters, every step's loss — equals the same training as rank threads of this JVM bitwise; ZeRO's also
 * equals the unsharded pipeline's ({@link PipelineZeroGroupModeTest}), and each rank process holds only its block of
 * its stages' updater state.
 */
class PipelineProcessModeTest {

    @Test
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void fourRankProcessesTrainBitwiseLikeRankThreads(@TempDir Path out) throws IOException {
        int ranks = PipelineProcessWorker.DP * PipelineProcessWorker.PP;
        String output = LaunchedRanks.run(ranks, "PIPELINE OK", PipelineProcessWorker.class, out.toString());
        for (PipelineProcessWorker.Case c : PipelineProcessWorker.CASES) {
            MultiLayerNetwork base = c.model().get();
            MultiLayerNetwork threadsModel = base.clone();
            PipelineParallelTrainerBuilder b = c.options().apply(PipelineParallelTrainer.builder(threadsModel)
                    .ranks(PipelineProcessWorker.PP).dataParallel(PipelineProcessWorker.DP));
            List<Double> losses;
            if (c.zero()) {
                PipelineZeroGroupModeTest.Run threads = PipelineZeroGroupModeTest.run(base, b, threadsModel,
                        c.data().get());
                losses = threads.losses();
                MultiLayerNetwork plainModel = base.clone();
                PipelineZeroGroupModeTest.Run plain = PipelineZeroGroupModeTest.run(base, PipelineParallelTrainer
                        .builder(plainModel).ranks(PipelineProcessWorker.PP).dataParallel(PipelineProcessWorker.DP)
                        .microbatches(2).schedule(c.name().contains("gpipe") ? PipelineSchedule.GPIPE
                                : PipelineSchedule.ONE_F_ONE_B), plainModel, c.data().get());
                PipelineNets.assertSameState(plain.copied(), threads.copied(), c.name() + ": threads sharded vs unsharded");
                for (int r = 0; r < ranks; r++) {
                    PipelineNets.assertSameState(threads.copied(), LaunchedRanks.read(out, c.name(), r), c.name()
                            + ", rank " + r + ": copyParametersTo after close(), against rank threads");
                    PipelineNets.assertSameState(threads.model(), LaunchedRanks.read(out, c.name() + "-model", r),
                            c.name() + ", rank " + r + ": the builder's model, against rank threads");
                }
                assertTrue(!PipelineNets.bitwiseEqual(base.params(), threads.copied().params()), "training changed it");
                // thread mode's unsharded replica 0 holds every stage whole: the ranks' blocks of a stage cover it once
                long[] blocks = new long[plain.stateHeld().size() + 1];
                java.util.regex.Matcher m = java.util.regex.Pattern.compile("\\[rank \\d\\] STATE HELD "
                        + java.util.regex.Pattern.quote(c.name()) + " stage (\\d+) length (\\d+)").matcher(output);
                while (m.find()) {
                    blocks[Integer.parseInt(m.group(1))] += Long.parseLong(m.group(2));
                }
                for (long[] stage : plain.stateHeld()) {
                    assertEquals(stage[1], blocks[(int) stage[0]], c.name() + ", stage " + stage[0] + ": the ranks'"
                            + " blocks cover its updater state once (each rank process holds its block only)\n" + output);
                }
            } else {
                PipelineGroupModeTest.Outcome threads = PipelineGroupModeTest.train(threadsModel, b, c.data().get());
                losses = threads.losses();
                for (int r = 0; r < ranks; r++) {
                    PipelineNets.assertSameState(threadsModel, LaunchedRanks.read(out, c.name(), r), c.name() + ", rank "
                            + r + ": parameters (running statistics included), updater state and counters against rank"
                            + " threads");
                }
            }
            for (int r = 0; r < ranks; r++) {
                assertEquals(losses, LaunchedRanks.losses(out, c.name(), r), c.name() + ", rank " + r
                        + ": every step's loss");
            }
        }
    }
}
