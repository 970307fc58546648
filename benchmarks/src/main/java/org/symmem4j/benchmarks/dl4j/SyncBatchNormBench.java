package org.symmem4j.benchmarks.dl4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.StepReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.SyntheticData;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * The cost of synchronized BatchNorm ({@code syncBatchNorm(true)}) per BatchNorm layer: the same network, data and
 * steps through the wrapper with and without it, in the same run (after one untimed run of each, runs alternate in
 * ABBA order, so a slow stretch of a shared machine hits both), N worker threads. Per step and BatchNorm layer it
 * reports the extra step time (the slowest worker's step: forward, backward, sync, update; median over the steps
 * after the warm-up, median over the repetitions) and the extra time the workers spent in collectives (the step reports' sync time, which with
 * synchronized BatchNorm includes its three all-reduces per layer, waiting for the slowest worker included).
 * Two networks: an MLP of dense + BatchNorm + ReLU blocks (2-D statistics, C = width) and a CNN of 3×3 convolution +
 * BatchNorm + ReLU blocks on 16×16 images (4-D statistics over examples and positions, C = channels).
 *
 * <pre>
 *   SyncBatchNormBench [--models mlp,cnn] [--workers 2] [--blocks 4] [--width 256] [--channels 16] [--batch 32]
 *                      [--steps 40] [--warmup 10] [--reps 3]
 * </pre>
 * Prints a markdown table, one row per model, and the raw medians of each run.
 */
public final class SyncBatchNormBench {

    private static final int CLASSES = 10;
    private static final int SIDE = 16;
    private static final int IMAGE_CHANNELS = 3;

    private SyncBatchNormBench() {
    }

    @Command(name = "SyncBatchNormBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Step time and collective time per BatchNorm layer of synchronized"
                    + " BatchNorm, against the same training without it, measured in the same run.")
    static final class Flags {
        @Option(names = "--models", paramLabel = "MODEL", split = ",", description = "models: mlp, cnn")
        List<String> models = new ArrayList<>(List.of("mlp", "cnn"));
        @Option(names = "--workers", paramLabel = "N", description = "worker threads")
        int workers = 2;
        @Option(names = "--blocks", paramLabel = "K", description = "dense/convolution + BatchNorm blocks (BatchNorm layers)")
        int blocks = 4;
        @Option(names = "--width", paramLabel = "W", description = "MLP: units per dense layer (BatchNorm channels)")
        int width = 256;
        @Option(names = "--channels", paramLabel = "C", description = "CNN: channels per convolution (BatchNorm channels)")
        int channels = 16;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 32;
        @Mixin
        AlternatingRuns runs = new AlternatingRuns();
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--workers", flags.workers);
            Cli.positive("--blocks", flags.blocks);
            Cli.positive("--width", flags.width);
            Cli.positive("--channels", flags.channels);
            Cli.positive("--batch", flags.batch);
            flags.runs.check();
            for (String m : flags.models) {
                if (!m.equals("mlp") && !m.equals("cnn")) {
                    throw new IllegalArgumentException("--models: expected mlp or cnn, found " + m + " (fix: --models mlp,cnn)");
                }
            }
            return flags;
        });
        System.out.println("machine: " + MachineInfo.cpuModel() + ", " + Runtime.getRuntime().availableProcessors()
                + " cores; workers " + f.workers + ", " + f.blocks + " BatchNorm layers, batch " + f.batch
                + " per worker, " + f.runs.steps + " steps (" + f.runs.warmup + " warm-up), " + f.runs.reps
                + " runs per setting");
        System.out.println();
        System.out.println("| model | C | step off (ms) | step on (ms) | extra step per BN layer (µs) | sync off (ms)"
                + " | sync on (ms) | extra collective time per BN layer (µs) |");
        System.out.println("|---|---:|---:|---:|---:|---:|---:|---:|");
        List<String> raw = new ArrayList<>();
        for (String model : f.models) {
            int features = model.equals("cnn") ? SIDE * SIDE * IMAGE_CHANNELS : 64;
            List<DataSet> data = new SyntheticData(features, CLASSES, 1).batches(3, f.runs.steps * f.workers, f.batch,
                    DataType.FLOAT);
            double[][] off = new double[f.runs.reps][];
            double[][] on = new double[f.runs.reps][];
            // One untimed run of each setting first: the first run of a JVM pays for compiling the wrapper's and
            // DL4J's paths, which the warm-up steps of one run do not cover (on 32 cores the first 'off' run's sync
            // was 4-7x the later ones').
            run(f, model, features, data, false);
            run(f, model, features, data, true);
            for (int r = 0; r < f.runs.reps; r++) {
                // ABBA order: a drift over the run (heat, a neighbour) hits both settings alike.
                if (r % 2 == 0) {
                    off[r] = run(f, model, features, data, false);
                    on[r] = run(f, model, features, data, true);
                } else {
                    on[r] = run(f, model, features, data, true);
                    off[r] = run(f, model, features, data, false);
                }
                raw.add(String.format(Locale.ROOT, "%s rep %d: off step %.3f ms sync %.3f ms; on step %.3f ms sync %.3f ms",
                        model, r, off[r][0], off[r][1], on[r][0], on[r][1]));
            }
            double stepOff = median(column(off, 0));
            double stepOn = median(column(on, 0));
            double syncOff = median(column(off, 1));
            double syncOn = median(column(on, 1));
            System.out.println(String.format(Locale.ROOT, "| %s | %d | %.3f | %.3f | %.1f | %.3f | %.3f | %.1f |", model,
                    model.equals("cnn") ? f.channels : f.width, stepOff, stepOn, (stepOn - stepOff) * 1000 / f.blocks,
                    syncOff, syncOn, (syncOn - syncOff) * 1000 / f.blocks));
            System.out.flush();
        }
        System.out.println();
        raw.forEach(System.out::println);
        System.exit(0);
    }

    /** One run: [median slowest-worker step ms, median slowest-worker sync ms] over the steps after the warm-up. */
    private static double[] run(Flags f, String model, int features, List<DataSet> data, boolean sync) {
        MultiLayerNetwork net = model.equals("cnn") ? cnn(f) : mlp(f, features);
        List<Double> steps = new ArrayList<>();
        List<Double> syncs = new ArrayList<>();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(f.workers)
                .syncBatchNorm(sync).stepListener((StepReport report) -> {
                    if (report.step() > f.runs.warmup) {
                        steps.add(report.stepNanos() / 1e6);
                        syncs.add(report.syncNanos() / 1e6);
                    }
                }).build()) {
            wrapper.fit(new NoPrefetchIterator(data));
        }
        return new double[] {median(steps.stream().mapToDouble(Double::doubleValue).toArray()),
                median(syncs.stream().mapToDouble(Double::doubleValue).toArray())};
    }

    private static MultiLayerNetwork mlp(Flags f, int features) {
        NeuralNetConfiguration.ListBuilder b = new NeuralNetConfiguration.Builder().seed(1).dataType(DataType.FLOAT)
                .updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER).list();
        int in = features;
        for (int k = 0; k < f.blocks; k++) {
            b.layer(new DenseLayer.Builder().nIn(in).nOut(f.width).activation(Activation.IDENTITY).hasBias(false).build());
            b.layer(new BatchNormalization.Builder().nOut(f.width).build());
            b.layer(new ActivationLayer.Builder().activation(Activation.RELU).build());
            in = f.width;
        }
        b.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(in).nOut(CLASSES)
                .activation(Activation.SOFTMAX).build());
        MultiLayerNetwork net = new MultiLayerNetwork(b.build());
        net.init();
        return net;
    }

    private static MultiLayerNetwork cnn(Flags f) {
        NeuralNetConfiguration.ListBuilder b = new NeuralNetConfiguration.Builder().seed(1).dataType(DataType.FLOAT)
                .updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER).list();
        for (int k = 0; k < f.blocks; k++) {
            b.layer(new ConvolutionLayer.Builder(3, 3).padding(1, 1).nOut(f.channels).activation(Activation.IDENTITY)
                    .hasBias(false).build());
            b.layer(new BatchNormalization.Builder().build());
            b.layer(new ActivationLayer.Builder().activation(Activation.RELU).build());
        }
        b.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES).activation(Activation.SOFTMAX)
                .build());
        b.setInputType(InputType.convolutionalFlat(SIDE, SIDE, IMAGE_CHANNELS));
        MultiLayerNetwork net = new MultiLayerNetwork(b.build());
        net.init();
        return net;
    }

    private static double[] column(double[][] rows, int c) {
        return Arrays.stream(rows).mapToDouble(r -> r[c]).toArray();
    }

    private static double median(double[] values) {
        return Stats.median(Arrays.stream(values));
    }
}
