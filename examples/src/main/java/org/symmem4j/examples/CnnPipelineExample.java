package org.symmem4j.examples;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineSchedule;
import org.symmem4j.dl4j.pipeline.PipelineStageSplit;
import org.symmem4j.dl4j.pipeline.PipelineStepReport;
import org.symmem4j.pipeline.exec.TimelineReport;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * A convolutional network in a pipeline: two convolution + batch normalization + max pooling blocks,
 * a dense layer with dropout and a softmax output, on generated 16 x 16 images of four kinds of
 * stroke (horizontal, vertical, diagonal, anti-diagonal) in noise. The stages are split by measured
 * pass times (convolutions have few parameters and most of the compute) and exchange 4-D activations.
 * Batch normalization sees microbatches (each normalized with its own statistics, the running
 * statistics updated per microbatch in order) and dropout draws one mask per microbatch, so the
 * pipeline does not equal the single model's fit on the whole batch here; the example trains both and
 * prints their test accuracy. Writes the timed run as a Chrome trace and the median step as an SVG. With
 * {@code --schedule zb-h1} the convolution, dense and output layers split their backward into input- and
 * weight-gradient actions (batch normalization runs its whole backward in the input-gradient action, as the
 * printed unsplit layers say).
 *
 * <pre>
 *   CnnPipelineExample [--ranks P] [--microbatches M] [--batch B] [--warmup-epochs W] [--epochs E]
 *                      [--schedule 1f1b|zb-h1] [--out DIR]
 * </pre>
 */
public final class CnnPipelineExample {

    static final int SIZE = 16;
    static final int CLASSES = 4;

    private CnnPipelineExample() {
    }

    @Command(name = "CnnPipelineExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "A CNN (convolution, batch normalization and pooling twice, dense with dropout) trained in a"
                    + " 1F1B (or ZB-H1) pipeline against the single model; writes a Chrome trace and an SVG of the median"
                    + " step.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "P", description = "pipeline ranks (threads)")
        int ranks = 2;
        @Option(names = "--microbatches", paramLabel = "M", description = "microbatches per batch")
        int microbatches = 8;
        @Option(names = "--batch", paramLabel = "B", description = "examples per batch")
        int batch = 64;
        @Option(names = "--warmup-epochs", paramLabel = "W",
                description = "untimed passes over the training batches first, for the single model and the pipeline alike"
                        + " (ND4J and JIT warm-up)")
        int warmupEpochs = 1;
        @Option(names = "--epochs", paramLabel = "E", description = "timed passes over the training batches, after the warm-up")
        int epochs = 2;
        @Option(names = "--schedule", paramLabel = "SCHEDULE", description = "pipeline schedule: 1f1b or zb-h1")
        String schedule = "1f1b";
        @Option(names = "--out", paramLabel = "DIR", description = "directory for the trace and SVG (relative to the working directory)")
        Path out = Path.of("target", "pipeline-example");
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--ranks", f.ranks);
            Cli.positive("--microbatches", f.microbatches);
            Cli.positive("--batch", f.batch);
            Cli.positive("--epochs", f.epochs);
            if (!f.schedule.equals(PipelineSchedule.ONE_F_ONE_B.tag())
                    && !f.schedule.equals(PipelineSchedule.ZERO_BUBBLE_H1.tag())) {
                throw new IllegalArgumentException("--schedule=" + f.schedule + " expected 1f1b or zb-h1 (fix: one of those)");
            }
            if (f.warmupEpochs < 0) {
                throw new IllegalArgumentException("--warmup-epochs=" + f.warmupEpochs + " expected >= 0");
            }
            return f;
        });
        int ranks = flags.ranks;
        int microbatches = flags.microbatches;
        int batch = flags.batch;
        int warmupEpochs = flags.warmupEpochs;
        int epochs = flags.epochs;
        Path out = flags.out;
        PipelineSchedule schedule = flags.schedule.equals(PipelineSchedule.ZERO_BUBBLE_H1.tag())
                ? PipelineSchedule.ZERO_BUBBLE_H1 : PipelineSchedule.ONE_F_ONE_B;
        String label = schedule == PipelineSchedule.ZERO_BUBBLE_H1 ? "ZB-H1" : "1F1B";
        Files.createDirectories(out);
        List<DataSet> train = strokes(31, 40, batch);
        List<DataSet> test = strokes(32, 4, 256);
        MultiLayerNetwork reference = cnn();
        System.out.printf(Locale.ROOT, "symmem4j CNN pipeline: %d ranks, %d layers, %d parameters, batch %d in %d"
                + " microbatches, %d batches per epoch, %d untimed + %d timed epochs%n", ranks, reference.getnLayers(),
                reference.numParams(), batch, microbatches, train.size(), warmupEpochs, epochs);

        // the baseline runs with the ND4J threads each rank gets (a core per rank, when there are enough)
        int threads = Math.max(1, Runtime.getRuntime().availableProcessors() / ranks);
        Nd4j.getEnvironment().setMaxThreads(threads);
        Nd4j.factory().blas().setMaxThreads(threads);
        MultiLayerNetwork single = reference.clone();
        for (int epoch = 0; epoch < warmupEpochs; epoch++) {
            single.fit(new ListIterator(train)); // ND4J and the JIT warm up, as for the pipeline below
        }
        long start = System.nanoTime();
        for (int epoch = 0; epoch < epochs; epoch++) {
            single.fit(new ListIterator(train));
        }
        double singleRate = (double) epochs * train.size() * batch / ((System.nanoTime() - start) / 1e9);
        String singleLabel = "single model fit (" + threads + " ND4J thread" + (threads == 1 ? ")" : "s)");
        System.out.printf(Locale.ROOT, "%-30s loss %.4f  %7.0f examples/s  test accuracy %.3f%n",
                singleLabel, single.score(), singleRate, single.evaluate(new ListIterator(test)).accuracy());

        MultiLayerNetwork net = reference.clone();
        List<PipelineStepReport> steps = new ArrayList<>();
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(ranks)
                .ompThreadsPerRank(threads).microbatches(microbatches)
                .schedule(schedule).splitByMeasuredTimes(train.getFirst())
                .recordTimeline((warmupEpochs + epochs) * train.size()).stepListener(steps::add).build()) {
            PipelineStageSplit split = trainer.split();
            for (int s = 0; s < split.stageCount(); s++) {
                System.out.printf(Locale.ROOT, "  stage %d: layers %d-%d (%s), %,d parameters, profiled F+B %.2f ms per"
                                + " microbatch%n", s, split.firstLayer(s), split.endLayer(s) - 1, layerNames(net, split, s),
                        split.parameterCount(s), trainer.predictedStageDurations().total(s) / 1e3);
            }
            if (!trainer.unsplitBackwardLayers().isEmpty()) {
                System.out.println("  backward not split (whole in I): " + trainer.unsplitBackwardLayers());
            }
            for (int epoch = 0; epoch < warmupEpochs; epoch++) {
                trainer.fit(new ListIterator(train));
            }
            start = System.nanoTime();
            for (int epoch = 0; epoch < epochs; epoch++) {
                trainer.fit(new ListIterator(train));
            }
            double rate = (double) epochs * train.size() * batch / ((System.nanoTime() - start) / 1e9);
            // net, given to the builder, holds the trained network after every fit
            System.out.printf(Locale.ROOT, "%-30s loss %.4f  %7.0f examples/s  test accuracy %.3f%n", "pipeline " + label,
                    trainer.lastStep().loss(), rate, net.evaluate(new ListIterator(test)).accuracy());

            List<TimelineReport> reports = new ArrayList<>();
            for (PipelineStepReport r : steps.subList(steps.size() / 2, steps.size())) {
                reports.add(r.timelineReport());
            }
            reports.sort(Comparator.comparingLong(TimelineReport::windowNanos));
            TimelineReport median = reports.get(reports.size() / 2);
            double predicted = ScheduleSimulator.simulate(trainer.schedule(), trainer.shape(),
                    trainer.predictedStageDurations()).requireCompleted().bubbleFraction();
            double ideal = ScheduleSimulator.simulate(trainer.schedule(), trainer.shape(), ActionDurations.of(1, 2))
                    .requireCompleted().bubbleFraction();
            System.out.printf(Locale.ROOT, "  bubble: predicted %.1f%%, measured %.1f%% (median step of the second half),"
                            + " simulated for its measured stage times %.1f%%, ideal %.1f%%%n", 100 * predicted,
                    100 * median.bubbleFraction(),
                    100 * median.simulatePerStage(trainer.schedule(), trainer.shape()).bubbleFraction(), 100 * ideal);
            Path run = out.resolve("cnn-" + schedule.tag() + ".run.trace.json");
            Path svg = out.resolve("cnn-" + schedule.tag() + ".svg");
            trainer.runTimeline().writeChromeTrace(run);
            Files.writeString(svg, median.svg("CNN, " + ranks + " ranks, " + microbatches + " microbatches (median step)"));
            // absolute paths: under `mvn -Pexample` the working directory is examples/, not where mvn was started
            System.out.println("  wrote " + run.toAbsolutePath().normalize() + " (open in https://ui.perfetto.dev) and "
                    + svg.toAbsolutePath().normalize());
        }
    }

    /** conv 5x5 (8, relu) + BN + max pool, conv 3x3 (16, relu) + BN + max pool, dense 64 with dropout, softmax; Adam, fp32. */
    static MultiLayerNetwork cnn() {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(2026)
                .dataType(DataType.FLOAT).updater(new Adam(2e-3)).weightInit(WeightInit.RELU).list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(8).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(16).activation(Activation.RELU).build())
                .layer(new BatchNormalization.Builder().build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(64).activation(Activation.RELU).dropOut(0.8).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(CLASSES)
                        .activation(Activation.SOFTMAX).weightInit(WeightInit.XAVIER).build())
                .setInputType(InputType.convolutional(SIZE, SIZE, 1)).build());
        net.init();
        return net;
    }

    /**
     * {@code count} batches of {@code size} images [1 x 16 x 16]: a stroke of random length and
     * position in one of four directions (the class) over Gaussian noise.
     */
    static List<DataSet> strokes(long seed, int count, int size) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>(count);
        for (int b = 0; b < count; b++) {
            INDArray x = Nd4j.create(DataType.FLOAT, size, 1, SIZE, SIZE);
            INDArray y = Nd4j.zeros(DataType.FLOAT, size, CLASSES);
            for (int i = 0; i < size; i++) {
                for (int r = 0; r < SIZE; r++) {
                    for (int c = 0; c < SIZE; c++) {
                        x.putScalar(new long[] {i, 0, r, c}, 0.3 * gaussian(rnd));
                    }
                }
                int cls = rnd.nextInt(CLASSES);
                int[][] steps = {{0, 1}, {1, 0}, {1, 1}, {1, -1}};
                int length = rnd.nextInt(6, 12);
                int r = rnd.nextInt(2, SIZE - 2);
                int c = rnd.nextInt(2, SIZE - 2);
                for (int k = 0; k < length; k++) {
                    int rr = Math.floorMod(r + k * steps[cls][0], SIZE);
                    int cc = Math.floorMod(c + k * steps[cls][1], SIZE);
                    x.putScalar(new long[] {i, 0, rr, cc}, 1.0 + 0.3 * gaussian(rnd));
                }
                y.putScalar(i, cls, 1.0);
            }
            out.add(new DataSet(x, y));
        }
        return out;
    }

    private static double gaussian(SplittableRandom rnd) {
        double u = rnd.nextDouble(1e-12, 1);
        return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rnd.nextDouble());
    }

    private static String layerNames(MultiLayerNetwork net, PipelineStageSplit split, int stage) {
        List<String> names = new ArrayList<>();
        for (int i = split.firstLayer(stage); i < split.endLayer(stage); i++) {
            names.add(net.getLayerWiseConfigurations().getConf(i).getLayer().getClass().getSimpleName());
        }
        return String.join(", ", names);
    }
}
