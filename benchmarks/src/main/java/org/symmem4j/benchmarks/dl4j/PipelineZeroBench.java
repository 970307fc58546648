package org.symmem4j.benchmarks.dl4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineSchedule;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.SyntheticData;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * What ZeRO stage 1, 2 or 3 on the pipeline's dp axis ({@code sharding(ZeroStage.OPTIMIZER_STATE)}, {@code --stage
 * GRADIENTS} for {@code sharding(ZeroStage.GRADIENTS)}, {@code --stage PARAMETERS} for stage 3) costs and saves: the same
 * MLP, data and steps through a {@code dp x pp} pipeline on threads (1F1B) with and without it, runs alternating in
 * one JVM (so a slow stretch of a shared machine hits both). Reports the median step time (the wall time of
 * {@code fit(batch)}, median over the steps after the warm-up, median over the repetitions) and the model bytes the
 * trainer holds after training ({@code modelBytesHeld()}: parameters, gradient views, accumulated gradients and
 * updater state of every replica's stages; between steps, so with stage 3 each replica's block of parameters and
 * gradient view, the accumulated gradient given back), and where the steps go ({@link PipelineStepPhases}: the
 * pipeline, what runs outside it on the caller's thread, each rank's passes, waits and optimizer step).
 *
 * <pre>
 *   PipelineZeroBench [--dp 2] [--pp 2] [--layers 6] [--hidden 512] [--microbatches 4] [--batch 64] [--steps 40]
 *                     [--warmup 10] [--reps 3] [--threads 1] [--stage OPTIMIZER_STATE|GRADIENTS|PARAMETERS]
 * </pre>
 * Prints a markdown table and the raw medians of each run.
 */
public final class PipelineZeroBench {

    private static final int FEATURES = 64;
    private static final int CLASSES = 10;

    private PipelineZeroBench() {
    }

    @Command(name = "PipelineZeroBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Step time and model bytes held of a dp x pp pipeline with ZeRO"
                    + " stage 1, 2 or 3 on its dp axis, against the same pipeline without it, measured in the same run.")
    static final class Flags {
        @Option(names = "--dp", paramLabel = "D", description = "data-parallel replicas of the pipeline")
        int dp = 2;
        @Option(names = "--pp", paramLabel = "P", description = "pipeline ranks (one stage each)")
        int pp = 2;
        @Option(names = "--layers", paramLabel = "L", description = "hidden dense layers")
        int layers = 6;
        @Option(names = "--hidden", paramLabel = "H", description = "units per hidden layer")
        int hidden = 512;
        @Option(names = "--microbatches", paramLabel = "M", description = "microbatches per replica's share of a step")
        int microbatches = 4;
        @Option(names = "--batch", paramLabel = "B", description = "examples per step (all replicas together)")
        int batch = 64;
        @Mixin
        AlternatingRuns runs = new AlternatingRuns();
        @Option(names = "--threads", paramLabel = "T", description = "ND4J threads per rank")
        int threads = 1;
        @Option(names = "--stage", paramLabel = "Z", description = "ZeRO stage of the sharded runs: OPTIMIZER_STATE"
                + " (1), GRADIENTS (2) or PARAMETERS (3)")
        ZeroStage stage = ZeroStage.OPTIMIZER_STATE;
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--pp", flags.pp);
            Cli.positive("--layers", flags.layers);
            Cli.positive("--hidden", flags.hidden);
            Cli.positive("--microbatches", flags.microbatches);
            Cli.positive("--threads", flags.threads);
            if (flags.dp < 2) {
                throw new IllegalArgumentException("--dp=" + flags.dp + ": expected 2 or more (ZeRO cuts the state over"
                        + " the replicas; fix: --dp 2)");
            }
            if (flags.batch % (flags.dp * flags.microbatches) != 0) {
                throw new IllegalArgumentException("--batch=" + flags.batch + ": expected a multiple of --dp x"
                        + " --microbatches = " + flags.dp * flags.microbatches + " (fix: --batch "
                        + flags.dp * flags.microbatches * Math.max(1, flags.batch / (flags.dp * flags.microbatches)) + ")");
            }
            flags.runs.check();
            if (flags.layers + 1 < flags.pp) {
                throw new IllegalArgumentException("--pp=" + flags.pp + " stages need at least as many layers; found "
                        + (flags.layers + 1) + " (fix: --layers " + (flags.pp - 1) + " or more)");
            }
            return flags;
        });
        List<DataSet> data = new SyntheticData(FEATURES, CLASSES, 1).batches(3, f.runs.steps, f.batch, DataType.FLOAT);
        MultiLayerNetwork base = mlp(f);
        System.out.println("machine: " + MachineInfo.cpuModel() + ", " + Runtime.getRuntime().availableProcessors()
                + " cores; dp " + f.dp + " x pp " + f.pp + " rank threads, 1F1B, " + f.microbatches + " microbatches,"
                + " batch " + f.batch + ", MLP " + f.layers + " x " + f.hidden + " (" + base.numParams()
                + " FLOAT parameters, Adam), " + f.runs.steps + " steps (" + f.runs.warmup + " warm-up), " + f.runs.reps
                + " runs per setting, ND4J threads per rank " + f.threads + ", sharded: " + f.stage);
        double[][] off = new double[f.runs.reps][];
        double[][] on = new double[f.runs.reps][];
        List<String> raw = new ArrayList<>();
        List<String> phases = new ArrayList<>();
        for (int r = 0; r < f.runs.reps; r++) {
            PipelineStepPhases offPhases = new PipelineStepPhases();
            PipelineStepPhases onPhases = new PipelineStepPhases();
            off[r] = run(f, base, data, false, offPhases);
            on[r] = run(f, base, data, true, onPhases);
            phases.add(offPhases.row("rep " + r + " unsharded"));
            phases.add(onPhases.row("rep " + r + " " + f.stage));
            raw.add(String.format(Locale.ROOT, "rep %d: unsharded step %.3f ms, %d bytes; sharded step %.3f ms, %d bytes",
                    r, off[r][0], (long) off[r][1], on[r][0], (long) on[r][1]));
        }
        double stepOff = median(Arrays.stream(off).mapToDouble(x -> x[0]).toArray());
        double stepOn = median(Arrays.stream(on).mapToDouble(x -> x[0]).toArray());
        long bytesOff = (long) off[0][1];
        long bytesOn = (long) on[0][1];
        System.out.println();
        System.out.println("| dp x pp | parameters | step unsharded (ms) | step sharded (ms) | sharded / unsharded"
                + " | model bytes unsharded | model bytes sharded | saved |");
        System.out.println("|---|---:|---:|---:|---:|---:|---:|---:|");
        System.out.println(String.format(Locale.ROOT, "| %d x %d | %d | %.3f | %.3f | %.3f | %d | %d | %.1f %% |", f.dp,
                f.pp, base.numParams(), stepOff, stepOn, stepOn / stepOff, bytesOff, bytesOn,
                100.0 * (bytesOff - bytesOn) / bytesOff));
        System.out.println();
        raw.forEach(System.out::println);
        System.out.println();
        System.out.println("Where the step goes (medians over each run's steps after the warm-up; replica 0's pipeline"
                + " ranks r0 / r1 / ...; pipeline = the ranks' first event to their last; outside = the rest of"
                + " fit(batch), on the caller's thread while the ranks wait: the model's hand-overs, the batch cut;"
                + " optimizer step = the stage's dp gradient sum, the update and, with ZeRO, the all-gather):");
        System.out.println();
        System.out.println(PipelineStepPhases.HEADER);
        phases.forEach(System.out::println);
        System.exit(0);
    }

    /** One run: [median step ms after the warm-up, model bytes held after training]; its steps into {@code phases}. */
    private static double[] run(Flags f, MultiLayerNetwork base, List<DataSet> data, boolean sharded,
                                PipelineStepPhases phases) {
        MultiLayerNetwork net = base.clone();
        var builder = PipelineParallelTrainer.builder(net).ranks(f.pp).dataParallel(f.dp).microbatches(f.microbatches)
                .schedule(PipelineSchedule.ONE_F_ONE_B).ompThreadsPerRank(f.threads);
        if (sharded) {
            builder.sharding(f.stage);
        }
        double[] steps = new double[data.size() - f.runs.warmup];
        try (PipelineParallelTrainer trainer = builder.build()) {
            for (int s = 0; s < data.size(); s++) {
                long start = System.nanoTime();
                trainer.fit(data.get(s));
                if (s >= f.runs.warmup) {
                    steps[s - f.runs.warmup] = (System.nanoTime() - start) / 1e6;
                    phases.record(steps[s - f.runs.warmup], trainer.lastStep());
                }
            }
            return new double[] {median(steps), trainer.modelBytesHeld()};
        }
    }

    private static MultiLayerNetwork mlp(Flags f) {
        NeuralNetConfiguration.ListBuilder b = new NeuralNetConfiguration.Builder().seed(1).dataType(DataType.FLOAT)
                .updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER).list();
        int in = FEATURES;
        for (int k = 0; k < f.layers; k++) {
            b.layer(new DenseLayer.Builder().nIn(in).nOut(f.hidden).activation(Activation.RELU).build());
            in = f.hidden;
        }
        b.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(in).nOut(CLASSES)
                .activation(Activation.SOFTMAX).build());
        MultiLayerNetwork net = new MultiLayerNetwork(b.build());
        net.init();
        return net;
    }

    private static double median(double[] values) {
        return Stats.median(Arrays.stream(values));
    }
}
