package org.symmem4j.dl4j.pipeline;

import java.nio.file.Path;
import java.util.List;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.learning.config.Nesterovs;
import org.symmem4j.dl4j.LaunchedRanks;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link PipelineProcessModeTest}'s dp × pp = 2 × 2 job, a JVM of its own under {@code symmem4j-run -n 4}:
 * joins the launcher's group and runs each of {@link #CASES} in turn with one trainer on its rank
 * ({@code .group(group).dataParallel(2)}), writing the model it ends with and every step's loss
 * ({@link LaunchedRanks#write}). Synchronized BatchNorm cases train as {@link PipelineGroupModeTest#train} does (one
 * fit, then {@code copyParametersTo}); ZeRO cases (stages 1-3) as {@link PipelineZeroGroupModeTest#run} (two fits with the
 * model changed between them, then {@code copyParametersTo} after {@code close()}: written as {@code NAME}, the
 * builder's model as {@code NAME-model}; the length of updater state it holds per stage printed as
 * {@code STATE HELD NAME stage S length N}).
 *
 * <pre>PipelineProcessWorker outputDir</pre>
 */
public final class PipelineProcessWorker {

    /**
     * One training both sides run: the network, its batches, and the builder's settings after {@code dataParallel(2)}
     * ({@code ranks(2)} in thread mode, {@code group(group)} on a rank); {@code zero}: a ZeRO stage 1 or 2 run.
     */
    record Case(String name, Supplier<MultiLayerNetwork> model, Supplier<List<DataSet>> data,
                UnaryOperator<PipelineParallelTrainerBuilder> options, boolean zero) {
    }

    static final int DP = 2;
    static final int PP = 2;

    static final List<Case> CASES = List.of(
            new Case("syncbn-dense-1f1b", () -> PipelineModels.denseBatchNorm(new Adam(0.01), false),
                    () -> PipelineGroupModeTest.data("batchnorm"), b -> b.microbatches(2).syncBatchNorm(true), false),
            new Case("syncbn-conv-1f1b", () -> PipelineModels.convBatchNorm(new Adam(0.01), true),
                    () -> PipelineModels.batches(PipelineModels.Data.IMAGES, 31, 3, 16),
                    b -> b.microbatches(4).schedule(PipelineSchedule.ONE_F_ONE_B).stageBoundaries(3).syncBatchNorm(true),
                    false),
            new Case("zero1-1f1b-adam", () -> PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE,
                    PipelineZeroGroupModeTest.WIDTHS), PipelineProcessWorker::zeroData,
                    b -> b.microbatches(2).schedule(PipelineSchedule.ONE_F_ONE_B).sharding(ZeroStage.OPTIMIZER_STATE), true),
            new Case("zero1-gpipe-nesterovs", () -> PipelineNets.mlp(new Nesterovs(0.05, 0.9), 0.0, DataType.DOUBLE,
                    PipelineZeroGroupModeTest.WIDTHS), PipelineProcessWorker::zeroData,
                    b -> b.microbatches(2).schedule(PipelineSchedule.GPIPE).sharding(ZeroStage.OPTIMIZER_STATE), true),
            new Case("zero2-1f1b-adam", () -> PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE,
                    PipelineZeroGroupModeTest.WIDTHS), PipelineProcessWorker::zeroData,
                    b -> b.microbatches(2).schedule(PipelineSchedule.ONE_F_ONE_B).sharding(ZeroStage.GRADIENTS), true),
            new Case("zero3-1f1b-adam", () -> PipelineNets.mlp(new Adam(0.01), 1e-3, DataType.DOUBLE,
                    PipelineZeroGroupModeTest.WIDTHS), PipelineProcessWorker::zeroData,
                    b -> b.microbatches(2).schedule(PipelineSchedule.ONE_F_ONE_B).sharding(ZeroStage.PARAMETERS), true),
            new Case("zero3-gpipe-nesterovs", () -> PipelineNets.mlp(new Nesterovs(0.05, 0.9), 0.0, DataType.DOUBLE,
                    PipelineZeroGroupModeTest.WIDTHS), PipelineProcessWorker::zeroData,
                    b -> b.microbatches(2).schedule(PipelineSchedule.GPIPE).sharding(ZeroStage.PARAMETERS), true));

    private PipelineProcessWorker() {
    }

    static List<DataSet> zeroData() {
        int[] widths = PipelineZeroGroupModeTest.WIDTHS;
        return PipelineNets.batches(7, 4, 16, widths[0], widths[widths.length - 1], DataType.DOUBLE);
    }

    public static void main(String[] args) {
        Path out = Path.of(args[0]);
        WorkerProcesses.exitWith(() -> {
            try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                for (Case c : CASES) {
                    MultiLayerNetwork base = c.model().get();
                    MultiLayerNetwork mine = base.clone();
                    PipelineParallelTrainerBuilder b = c.options().apply(PipelineParallelTrainer.builder(mine)
                            .group(group).dataParallel(DP));
                    if (c.zero()) {
                        PipelineZeroGroupModeTest.Run run = PipelineZeroGroupModeTest.run(base, b, mine, c.data().get());
                        LaunchedRanks.write(out, c.name(), group.rank(), run.copied(), run.losses());
                        LaunchedRanks.write(out, c.name() + "-model", group.rank(), run.model(), run.losses());
                        for (long[] held : run.stateHeld()) {
                            System.out.println("STATE HELD " + c.name() + " stage " + held[0] + " length " + held[1]);
                        }
                    } else {
                        PipelineGroupModeTest.Outcome o = PipelineGroupModeTest.train(mine, b, c.data().get());
                        LaunchedRanks.write(out, c.name(), group.rank(), mine, o.losses());
                    }
                }
                return "PIPELINE OK rank=" + group.rank();
            }
        });
    }
}
