package org.symmem4j.examples;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * MNIST-shaped: LeNet-5 (two 5 x 5 convolutions with max pooling, dense 120 and 84, softmax 10) on
 * 28 x 28 single-channel images of the ten digits, trained once as one model and once with
 * {@link SymmemParallelWrapper} on N worker threads, printing each one's test accuracy and time per
 * epoch. The images are drawn in process by {@link DigitGlyphs} (no download) in MNIST's layout, so
 * {@code MnistDataSetIterator} can stand in for them.
 *
 * <p>The wrapper's N workers each train on their own batch of B examples and sum their gradients
 * before each update; that is one model with batch N x B, so the one model here fits the same
 * batches merged N at a time, and the two end with the same accuracy (their parameters part only by
 * float rounding, printed at the end).
 *
 * <pre>
 *   MnistExample [--workers N] [--epochs E] [--batch B] [--train-examples T] [--test-examples T]
 * </pre>
 */
public final class MnistExample {

    /** Adam's learning rate. */
    public static final double LEARNING_RATE = 2e-3;

    private MnistExample() {
    }

    @Command(name = "MnistExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "LeNet-5 on generated MNIST-shaped digits (28 x 28, 10 classes, no download), as one model"
                    + " and with the symmem4j wrapper on N workers: test accuracy and time per epoch.")
    static final class Flags {
        @Option(names = "--workers", paramLabel = "N", description = "worker threads (default: the number of cores)")
        int workers = Runtime.getRuntime().availableProcessors();
        @Option(names = "--epochs", paramLabel = "E", description = "passes over the training images")
        int epochs = 2;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 32;
        @Option(names = "--train-examples", paramLabel = "T", description = "generated training images (rounded down to"
                + " whole batches of B)")
        int trainExamples = 2048;
        @Option(names = "--test-examples", paramLabel = "T", description = "generated test images (rounded down to"
                + " whole batches of 256)")
        int testExamples = 1024;
    }

    /** What one run measured: test accuracy and training seconds per epoch, for the one model and the wrapper. */
    record Result(double[] singleAccuracy, double[] singleSeconds, double[] wrapperAccuracy, double[] wrapperSeconds,
            double maxParameterDifference) {
    }

    public static void main(String[] args) {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--workers", f.workers);
            Cli.positive("--epochs", f.epochs);
            Cli.positive("--batch", f.batch);
            if (f.trainExamples < f.batch) {
                throw new IllegalArgumentException("--train-examples=" + f.trainExamples + " expected >= --batch="
                        + f.batch + " (one batch at least; fix: raise --train-examples or lower --batch)");
            }
            if (f.testExamples < 256) {
                throw new IllegalArgumentException("--test-examples=" + f.testExamples + " expected >= 256 (test"
                        + " batches hold 256 images)");
            }
            return f;
        });
        run(flags, true);
    }

    /** Trains both ways, interleaved per epoch (so neither gets all of the JIT's warm-up), printing when asked. */
    static Result run(Flags flags, boolean print) {
        int workers = flags.workers;
        List<DataSet> train = DigitGlyphs.batches(1, flags.trainExamples / flags.batch, flags.batch);
        List<DataSet> test = DigitGlyphs.batches(2, flags.testExamples / 256, 256);
        List<DataSet> merged = merge(train, workers); // what the one model sees per step: N workers' batches
        MultiLayerNetwork single = lenet5();
        MultiLayerNetwork net = single.clone();
        if (print) {
            System.out.printf(Locale.ROOT, "symmem4j MNIST-shaped example: LeNet-5, %,d parameters, %,d generated training"
                    + " and %,d test images (28 x 28, 10 digits)%n", single.numParams(), train.size() * flags.batch,
                    test.size() * 256);
            System.out.println("a generated " + labelOf(train.getFirst(), 0) + ":");
            System.out.print(DigitGlyphs.ascii(train.getFirst(), 0));
            System.out.printf(Locale.ROOT, "one model: batch %d (= %d x %d); symmem4j: %d workers, batch %d each%n",
                    workers * flags.batch, workers, flags.batch, workers, flags.batch);
            System.out.printf(Locale.ROOT, "before training: test accuracy %.3f (chance: 0.100)%n", accuracy(single, test));
        }
        double[] singleAccuracy = new double[flags.epochs];
        double[] singleSeconds = new double[flags.epochs];
        double[] wrapperAccuracy = new double[flags.epochs];
        double[] wrapperSeconds = new double[flags.epochs];
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(workers).build()) {
            for (int epoch = 0; epoch < flags.epochs; epoch++) {
                long start = System.nanoTime();
                single.fit(new ListIterator(merged));
                singleSeconds[epoch] = (System.nanoTime() - start) / 1e9;
                singleAccuracy[epoch] = accuracy(single, test);

                start = System.nanoTime();
                wrapper.fit(new ListIterator(train));
                wrapperSeconds[epoch] = (System.nanoTime() - start) / 1e9;
                wrapperAccuracy[epoch] = accuracy(net, test);
                if (print) {
                    System.out.printf(Locale.ROOT, "epoch %d: one model  %6.2f s  test accuracy %.3f   |   symmem4j, %d"
                                    + " workers  %6.2f s  test accuracy %.3f%n", epoch + 1, singleSeconds[epoch],
                            singleAccuracy[epoch], workers, wrapperSeconds[epoch], wrapperAccuracy[epoch]);
                }
            }
        }
        double difference = net.params().sub(single.params()).amaxNumber().doubleValue();
        if (print) {
            System.out.printf(Locale.ROOT, "parameters of the two differ by at most %.2e (float rounding: the same"
                    + " training)%n", difference);
        }
        return new Result(singleAccuracy, singleSeconds, wrapperAccuracy, wrapperSeconds, difference);
    }

    /**
     * LeNet-5 for 28 x 28 x 1 inputs given flat (MNIST's layout in DL4J): conv 5 x 5 (6, ReLU), max pool
     * 2 x 2, conv 5 x 5 (16, ReLU), max pool 2 x 2, dense 120 and 84 (ReLU), softmax 10; Adam, fp32, fixed seed.
     */
    public static MultiLayerNetwork lenet5() {
        MultiLayerNetwork net = new MultiLayerNetwork(new NeuralNetConfiguration.Builder().seed(28)
                .dataType(DataType.FLOAT).updater(new Adam(LEARNING_RATE)).weightInit(WeightInit.RELU).list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(6).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(16).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(120).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nOut(84).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(DigitGlyphs.CLASSES)
                        .activation(Activation.SOFTMAX).weightInit(WeightInit.XAVIER).build())
                .setInputType(InputType.convolutionalFlat(DigitGlyphs.SIDE, DigitGlyphs.SIDE, 1)).build());
        net.init();
        return net;
    }

    static double accuracy(MultiLayerNetwork net, List<DataSet> test) {
        return net.evaluate(new ListIterator(test)).accuracy();
    }

    /** The batches merged {@code n} at a time, in order (the last merge may hold fewer). */
    static List<DataSet> merge(List<DataSet> batches, int n) {
        List<DataSet> out = new ArrayList<>();
        for (int i = 0; i < batches.size(); i += n) {
            out.add(DataSet.merge(batches.subList(i, Math.min(batches.size(), i + n))));
        }
        return out;
    }

    private static int labelOf(DataSet batch, int index) {
        return batch.getLabels().getRow(index).argMax().getInt(0);
    }
}
