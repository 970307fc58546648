package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.benchmarks.RawCsv;
import org.symmem4j.dl4j.GradientTransfer;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.SyntheticData;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The error of bf16 gradient transfer against fp32, on the scaling benchmark's models, two ways:
 * <ol>
 *   <li>one averaged gradient: each worker's gradient of its batch (one model, same parameters)
 *       averaged as the fp32 sync does (sum in fp32, divide) and as the bf16 transfer does (each
 *       rounded to bf16, summed in fp32, rounded once to bf16, widened, divided): relative L2 error
 *       and the largest element's relative error;</li>
 *   <li>training: the same model, data and steps through SymmemParallelWrapper with fp32 and with
 *       bf16 transfer: held-out loss of each, and the relative L2 distance between the parameters;
 *       for scale, the same distance between the fp32 wrapper and one model trained on the merged
 *       batches, which differ only by fp32 rounding (Adam amplifies any difference in the small
 *       gradient elements, so trajectories part even then).</li>
 * </ol>
 * Prints a markdown table, one row per model; {@code --raw} writes the same rows as CSV.
 * <pre>
 *   Bf16TransferError [--models mlp-medium,cnn] [--workers 2] [--batch 64] [--steps 300] [--raw FILE.csv]
 * </pre>
 */
public final class Bf16TransferError {

    private Bf16TransferError() {
    }

    @Command(name = "Bf16TransferError", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "The error of bf16 gradient transfer on the benchmark's models: the averaged gradient against"
                    + " fp32's, and the parameters after Adam steps.")
    static final class Flags {
        @Option(names = "--models", paramLabel = "MODEL", split = ",", description = "models: mlp-small, mlp-medium, cnn")
        List<String> models = new java.util.ArrayList<>(List.of("mlp-medium", "cnn"));
        @Option(names = "--workers", paramLabel = "N", description = "workers")
        int workers = 2;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 64;
        @Option(names = "--steps", paramLabel = "S", description = "Adam steps")
        int steps = 300;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write the table's numbers as CSV to FILE (appended under"
                + " the same header; default: none)")
        Path raw;
    }

    /** The columns of {@code --raw}: the table's, one row per model (errors and distances are relative, no unit). */
    static final List<String> CSV_COLUMNS = List.of("model", "parameters", "workers", "batch_per_worker", "steps",
            "gradient_rel_l2_error", "gradient_max_element_rel_error", "held_out_loss_fp32", "held_out_loss_bf16",
            "params_rel_l2_bf16_vs_fp32", "params_rel_l2_fp32_wrapper_vs_single");

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--workers", f.workers);
            Cli.positive("--batch", f.batch);
            Cli.positive("--steps", f.steps);
            f.models.forEach(ScalingBench.Model::of);
            return f;
        });
        List<ScalingBench.Model> models = flags.models.stream().map(String::trim).map(ScalingBench.Model::of).toList();
        int workers = flags.workers;
        int batch = flags.batch;
        int steps = flags.steps;
        RawCsv csv = flags.raw == null ? null : RawCsv.open(flags.raw, CSV_COLUMNS);
        System.out.println("| model | averaged gradient: relative L2 error | largest element relative error (elements > 1e-3 of max)"
                + " | held-out loss fp32 | held-out loss bf16 | parameters after " + steps + " steps: relative L2 distance bf16 vs"
                + " fp32 | the same, fp32 wrapper vs one model on the merged batches (rounding only) |");
        System.out.println("|---|---:|---:|---:|---:|---:|---:|");
        for (ScalingBench.Model m : models) {
            SyntheticData data = new SyntheticData(m.features(), ScalingBench.CLASSES, 1);
            List<DataSet> pool = data.batches(5, 64, batch, DataType.FLOAT);
            DataSet heldOut = data.batches(6, 1, 2048, DataType.FLOAT).getFirst();
            double[] gradientError = oneAveragedGradient(m, pool.subList(0, workers));
            double[] fp32 = train(m, pool, workers, steps, GradientTransfer.NETWORK_DTYPE, heldOut);
            double[] bf16 = train(m, pool, workers, steps, GradientTransfer.BFLOAT16, heldOut);
            double[] single = trainSingle(m, pool, workers, steps, heldOut);
            long params = m.build().numParams();
            System.out.println(String.format(Locale.ROOT, "| %s | %.2e | %.2e | %.4f | %.4f | %.2e | %.2e |", m.describe(
                    params), gradientError[0], gradientError[1], fp32[1], bf16[1], distance(bf16, fp32),
                    distance(single, fp32)));
            System.out.flush();
            if (csv != null) {
                csv.row(m.flag, params, workers, batch, steps, RawCsv.num("%.4e", gradientError[0]),
                        RawCsv.num("%.4e", gradientError[1]), RawCsv.num("%.6f", fp32[1]), RawCsv.num("%.6f", bf16[1]),
                        RawCsv.num("%.4e", distance(bf16, fp32)), RawCsv.num("%.4e", distance(single, fp32)));
            }
        }
        if (csv != null) {
            csv.close();
        }
        System.exit(0);
    }

    /** [relative L2 error, largest relative element error] of the bf16-transferred average of the workers' gradients. */
    static double[] oneAveragedGradient(ScalingBench.Model m, List<DataSet> batches) {
        MultiLayerNetwork net = m.build();
        net.getLayerWiseConfigurations().getConfs().forEach(c -> c.setMiniBatch(false)); // sums, as the wrapper's replicas
        List<float[]> grads = new ArrayList<>();
        long examples = 0;
        for (DataSet b : batches) {
            net.setInput(b.getFeatures());
            net.setLabels(b.getLabels());
            net.computeGradientAndScore();
            grads.add(net.getGradientsViewArray().dup().toFloatVector());
            examples += b.numExamples();
        }
        int n = grads.getFirst().length;
        double err = 0;
        double ref = 0;
        double maxAbs = 0;
        float[] exact = new float[n];
        float[] viaBf16 = new float[n];
        for (int i = 0; i < n; i++) {
            float sum = 0;
            float sumBf16 = 0;
            for (float[] g : grads) {
                sum += g[i];
                sumBf16 += bf16(g[i]);
            }
            exact[i] = sum / examples;
            viaBf16[i] = bf16(sumBf16) / examples;
            maxAbs = Math.max(maxAbs, Math.abs(exact[i]));
        }
        double worst = 0;
        for (int i = 0; i < n; i++) {
            double d = viaBf16[i] - exact[i];
            err += d * d;
            ref += (double) exact[i] * exact[i];
            if (Math.abs(exact[i]) > 1e-3 * maxAbs) {
                worst = Math.max(worst, Math.abs(d) / Math.abs(exact[i]));
            }
        }
        return new double[] {Math.sqrt(err / ref), worst};
    }

    /** Round to nearest even bf16 and back, as the transfer does (BFloat16.fromFloat / toFloat). */
    static float bf16(float f) {
        int bits = Float.floatToRawIntBits(f);
        if (Float.isNaN(f)) {
            return f;
        }
        int rounded = (bits + 0x7FFF + ((bits >>> 16) & 1)) & 0xFFFF0000;
        return Float.intBitsToFloat(rounded);
    }

    /** Relative L2 distance of the parameter parts ([2..]) of two results. */
    static double distance(double[] a, double[] ref) {
        double dist = 0;
        double norm = 0;
        for (int i = 2; i < ref.length; i++) {
            dist += (a[i] - ref[i]) * (a[i] - ref[i]);
            norm += ref[i] * ref[i];
        }
        return Math.sqrt(dist / norm);
    }

    /** As {@link #train}, one model on the same steps' batches merged (the fp32 reference up to rounding). */
    static double[] trainSingle(ScalingBench.Model m, List<DataSet> pool, int workers, int steps, DataSet heldOut) {
        MultiLayerNetwork net = m.build();
        for (int s = 0; s < steps; s++) {
            List<DataSet> step = new ArrayList<>();
            for (int w = 0; w < workers; w++) {
                step.add(pool.get((s * workers + w) % pool.size()));
            }
            net.fit(DataSet.merge(step));
        }
        float[] params = net.params().dup().toFloatVector();
        double[] out = new double[2 + params.length];
        out[0] = steps;
        out[1] = net.score(heldOut);
        for (int i = 0; i < params.length; i++) {
            out[2 + i] = params[i];
        }
        return out;
    }

    /** [steps, held-out loss, parameters...] after training through the wrapper. */
    static double[] train(ScalingBench.Model m, List<DataSet> pool, int workers, int steps, GradientTransfer transfer,
                          DataSet heldOut) {
        MultiLayerNetwork net = m.build();
        List<DataSet> batches = new ArrayList<>();
        for (int s = 0; s < steps * workers; s++) {
            batches.add(pool.get(s % pool.size()));
        }
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(workers).gradientTransfer(transfer).build()) {
            w.fit(new org.symmem4j.examples.ListIterator(batches));
        }
        INDArray p = net.params();
        float[] params = p.dup().toFloatVector();
        double[] out = new double[2 + params.length];
        out[0] = steps;
        out[1] = net.score(heldOut);
        for (int i = 0; i < params.length; i++) {
            out[2 + i] = params[i];
        }
        return out;
    }
}
