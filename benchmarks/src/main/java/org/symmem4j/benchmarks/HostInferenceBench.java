package org.symmem4j.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

import jdk.incubator.vector.FloatVector;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.examples.Cli;
import org.symmem4j.serving.host.HostNetwork;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * DL4J's own forward pass ({@code net.output(x, false)}) against {@link HostNetwork} (the Java, vectorized forward
 * pass over the same flat parameters, read in place) for ServingBench's MLP (784-256-256-10) and LeNet-like CNN, at
 * batch 1 to 32, in one JVM, on one thread each. Per cell: a warm-up alternating both sides, then repetitions that
 * alternate DL4J and the host path, each timing whole calls for at least {@code --min-ms}; the table gives the median
 * per-example time, GFLOP/s (2 per multiply-add, 1 per pooled cell) and the ratio DL4J / host. Before timing, each
 * model's outputs are compared (max relative difference printed; the tests hold it to 1e-4).
 *
 * <pre>
 *   OMP_NUM_THREADS=1 HostInferenceBench [--models mlp,cnn] [--batches 1,2,4,8,16,32] [--reps 7] [--min-ms 200]
 *                                        [--warmup-ms 1500]
 * </pre>
 */
public final class HostInferenceBench {

    @Command(name = "HostInferenceBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "DL4J's forward pass against the host inference path (HostNetwork)"
                    + " for an MLP and a CNN: per-example time, GFLOP/s, ratio.")
    static final class Flags {
        @Option(names = "--models", split = ",", paramLabel = "NAME", description = "mlp and/or cnn")
        List<String> models = List.of("cnn", "mlp");
        @Option(names = "--batches", split = ",", paramLabel = "B", description = "batch sizes")
        List<Integer> batches = List.of(1, 2, 4, 8, 16, 32);
        @Option(names = "--reps", paramLabel = "R", description = "repetitions per side and cell, alternating (median)")
        int reps = 7;
        @Option(names = "--min-ms", paramLabel = "MS", description = "least time of one repetition")
        int minMillis = 200;
        @Option(names = "--warmup-ms", paramLabel = "MS", description = "warm-up per cell, alternating both sides")
        int warmupMillis = 1500;
    }

    private HostInferenceBench() {
    }

    /** One cell: median nanoseconds per example of each side. */
    record Cell(String model, int batch, double dl4jNanos, double hostNanos, long flops) {
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args);
        Cli.positive("--reps", f.reps);
        Cli.positive("--min-ms", f.minMillis);
        f.batches.forEach(b -> Cli.positive("--batches", b));
        System.out.printf(Locale.ROOT,
                "# HostInferenceBench: cpus=%d OMP_NUM_THREADS=%s vector=%d floats (%s) java=%s%n",
                Runtime.getRuntime().availableProcessors(), System.getenv("OMP_NUM_THREADS"),
                FloatVector.SPECIES_PREFERRED.length(), FloatVector.SPECIES_PREFERRED, Runtime.version());
        List<Cell> cells = new ArrayList<>();
        for (String model : f.models) {
            MultiLayerConfiguration conf = switch (model) {
                case "mlp" -> ServingBench.mlp(1);
                case "cnn" -> ServingBench.cnn(1);
                default -> throw new IllegalArgumentException("--models entry '" + model + "', expected mlp or cnn"
                        + " (fix: pass e.g. --models mlp,cnn)");
            };
            long[] example = model.equals("mlp") ? new long[] {784} : new long[] {1, 28, 28};
            MultiLayerNetwork net = new MultiLayerNetwork(conf.clone());
            net.init();
            float[] p = net.params().toFloatVector();
            MemorySegment params = Arena.ofAuto().allocate((long) p.length * Float.BYTES, 64);
            MemorySegment.copy(p, 0, params, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, p.length);
            HostNetwork host = HostNetwork.of(conf, params, example);
            System.out.printf(Locale.ROOT, "# %s: params=%d flops/example=%d%n", model, p.length,
                    host.flopsPerExample());
            for (int batch : f.batches) {
                long[] shape = new long[example.length + 1];
                shape[0] = batch;
                System.arraycopy(example, 0, shape, 1, example.length);
                INDArray x = Nd4j.rand(DataType.FLOAT, shape);
                double diff = maxRelativeDifference(net.output(x, false), host.output(x));
                Runnable dl4j = () -> net.output(x, false);
                Runnable ours = () -> host.output(x);
                long warmEnd = System.nanoTime() + f.warmupMillis * 1_000_000L;
                while (System.nanoTime() < warmEnd) {
                    time(dl4j, 20);
                    time(ours, 20);
                }
                double[] a = new double[f.reps], b = new double[f.reps];
                for (int r = 0; r < f.reps; r++) {
                    a[r] = time(dl4j, f.minMillis) / batch;
                    b[r] = time(ours, f.minMillis) / batch;
                }
                Cell c = new Cell(model, batch, median(a), median(b), host.flopsPerExample());
                cells.add(c);
                System.out.printf(Locale.ROOT, "# %s batch=%d max relative difference=%.2e dl4j=%.1f us host=%.1f us%n",
                        model, batch, diff, c.dl4jNanos / 1e3, c.hostNanos / 1e3);
            }
        }
        System.out.println();
        System.out.println("| model | batch | DL4J us/example | DL4J GFLOP/s | host us/example | host GFLOP/s"
                + " | DL4J / host |");
        System.out.println("|---|---:|---:|---:|---:|---:|---:|");
        for (Cell c : cells) {
            System.out.printf(Locale.ROOT, "| %s | %d | %.1f | %.2f | %.1f | %.2f | %.2fx |%n", c.model, c.batch,
                    c.dl4jNanos / 1e3, c.flops / c.dl4jNanos, c.hostNanos / 1e3, c.flops / c.hostNanos,
                    c.dl4jNanos / c.hostNanos);
        }
    }

    /** {@return nanoseconds per call of whole calls run for at least {@code millis}} */
    private static double time(Runnable call, int millis) {
        long start = System.nanoTime(), end = start + millis * 1_000_000L, now;
        int calls = 0;
        do {
            call.run();
            calls++;
            now = System.nanoTime();
        } while (now < end);
        return (double) (now - start) / calls;
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    private static double maxRelativeDifference(INDArray ref, INDArray got) {
        float[] r = ref.castTo(DataType.FLOAT).dup('c').data().asFloat();
        float[] g = got.dup('c').data().asFloat();
        double worst = 0;
        for (int i = 0; i < r.length; i++) {
            worst = Math.max(worst, Math.abs(g[i] - r[i]) / Math.max(1.0, Math.abs(r[i])));
        }
        return worst;
    }
}
