package org.symmem4j.examples;

import io.micrometer.core.instrument.Tags;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
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
import org.symmem4j.dl4j.PrometheusEndpoint;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineSchedule;
import org.symmem4j.dl4j.pipeline.PipelineStepReport;
import org.symmem4j.pipeline.exec.TimelineReport;
import org.symmem4j.pipeline.schedule.SimulationResult;

/**
 * The pipeline-parallel example: a deeper MLP cut into stages across 4 ranks (threads), trained on
 * generated data with 1F1B (4 stages) and with interleaved 1F1B (2 virtual stages per rank, 8
 * stages), from the same initial parameters. Prints loss and throughput per schedule, the measured
 * bubble next to the simulator's for the measured pass times, and test accuracy; writes each
 * schedule's median step (by duration) as a Chrome trace ({@code .trace.json}: open it at https://ui.perfetto.dev)
 * with every forward, backward and hand-off per rank, and as an SVG picture.
 *
 * <pre>
 *   PipelineParallelExample [--ranks P] [--microbatches M] [--batch B] [--epochs E] [--hidden H] [--out DIR] [--port P]
 * </pre>
 * {@code --port P} serves the pipelines' metrics (tag {@code application=pipeline-example}) at
 * {@code http://127.0.0.1:P/metrics} while they train (0 picks a free port; default: none).
 */
public final class PipelineParallelExample {

    private PipelineParallelExample() {
    }

    public static void main(String[] args) throws IOException {
        int ranks = 4;
        int microbatches = 8;
        int batch = 128;
        int epochs = 2;
        int hidden = 192;
        Path out = Path.of("target", "pipeline-example");
        int port = -1;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--ranks" -> ranks = Integer.parseInt(args[++i]);
                case "--microbatches" -> microbatches = Integer.parseInt(args[++i]);
                case "--batch" -> batch = Integer.parseInt(args[++i]);
                case "--epochs" -> epochs = Integer.parseInt(args[++i]);
                case "--hidden" -> hidden = Integer.parseInt(args[++i]);
                case "--out" -> out = Path.of(args[++i]);
                case "--port" -> port = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i] + " (expected --ranks P,"
                        + " --microbatches M, --batch B, --epochs E, --hidden H, --out DIR, --port P)");
            }
        }
        Files.createDirectories(out);
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        PrometheusEndpoint endpoint = port >= 0 ? PrometheusEndpoint.start(registry, port) : null;
        if (endpoint != null) {
            System.out.println("metrics: " + endpoint.url());
        }
        SyntheticData data = new SyntheticData(64, 10, 7);
        List<DataSet> train = data.batches(11, 48, batch, DataType.FLOAT);
        List<DataSet> test = data.batches(12, 8, 256, DataType.FLOAT);
        MultiLayerNetwork reference = deepMlp(data.features(), hidden, data.classes());
        System.out.printf(Locale.ROOT, "symmem4j pipeline parallelism: %d ranks, %d layers, %d parameters, batch %d in %d"
                + " microbatches, %d batches per epoch%n", ranks, reference.getnLayers(), reference.numParams(), batch,
                microbatches, train.size());

        // the baseline: the same network trained by plain fit on the same batches, timed like the
        // pipelines below (the first epoch warms up ND4J and the JIT and is not timed)
        MultiLayerNetwork single = reference.clone();
        long start = 0;
        for (int epoch = 0; epoch < epochs; epoch++) {
            if (epoch == 1 || epochs == 1) {
                start = System.nanoTime();
            }
            for (DataSet b : train) {
                single.fit(b);
            }
        }
        double singleRate = (double) Math.max(1, epochs - 1) * train.size() * batch / ((System.nanoTime() - start) / 1e9);
        System.out.printf(Locale.ROOT, "%-22s loss %.4f  %8.0f examples/s  test accuracy %.3f%n", "single model fit",
                single.score(), singleRate, single.evaluate(new ListIterator(test)).accuracy());

        for (PipelineSchedule kind : new PipelineSchedule[] {PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED}) {
            int stagesPerRank = kind == PipelineSchedule.INTERLEAVED ? 2 : 1;
            MultiLayerNetwork net = reference.clone();
            String name = kind == PipelineSchedule.INTERLEAVED ? "interleaved-1f1b" : "1f1b";
            List<PipelineStepReport> timedSteps = new java.util.ArrayList<>();
            boolean[] timing = {false};
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(ranks)
                    .microbatches(microbatches).schedule(kind, stagesPerRank)
                    .meterRegistry(registry, Tags.of(DataParallelExample.APPLICATION_TAG, "pipeline-example"))
                    .stepListener(report -> {
                        if (timing[0]) {
                            timedSteps.add(report);
                        }
                    }).build()) {
                System.out.printf(Locale.ROOT, "%s: %d stages (layers %s), %d link slots%n", name,
                        trainer.split().stageCount(), stageRanges(trainer), trainer.linkSlots());
                for (int epoch = 0; epoch < epochs; epoch++) {
                    if (epoch == 1 || epochs == 1) {
                        start = System.nanoTime(); // the first epoch warms up ND4J and the JIT
                        timing[0] = true;
                    }
                    trainer.fit(new ListIterator(train));
                }
                double rate = (double) Math.max(1, epochs - 1) * train.size() * batch / ((System.nanoTime() - start) / 1e9);
                PipelineStepReport last = trainer.lastStep();
                trainer.copyParametersTo(net);
                System.out.printf(Locale.ROOT, "%-22s loss %.4f  %8.0f examples/s  test accuracy %.3f%n",
                        "pipeline " + name, last.loss(), rate, net.evaluate(new ListIterator(test)).accuracy());

                // the median step by duration stands for the run: with more ranks than cores, single
                // steps now and then lose a core for tens of milliseconds
                List<TimelineReport> steps = new java.util.ArrayList<>();
                for (PipelineStepReport r : timedSteps) {
                    steps.add(r.timelineReport());
                }
                steps.sort(java.util.Comparator.comparingLong(TimelineReport::windowNanos));
                TimelineReport step = steps.get(steps.size() / 2);
                double[] bubbles = steps.stream().mapToDouble(TimelineReport::bubbleFraction).sorted().toArray();
                SimulationResult.Completed simulated = step.simulate(trainer.schedule(), trainer.shape());
                StringBuilder idle = new StringBuilder();
                for (int r = 0; r < step.rankCount(); r++) {
                    idle.append(String.format(Locale.ROOT, " rank %d %.1f%% (sim %.1f%%)", r, 100 * step.idleFraction(r),
                            100.0 * simulated.rank(r).idleTime() / simulated.makespan()));
                }
                System.out.printf(Locale.ROOT, "  median step of %d: %.2f ms, bubble %.1f%% measured, %.1f%% simulated for"
                        + " its measured times (F %.2f ms, B %.2f ms, hand-off %.1f µs); idle:%s%n", steps.size(),
                        step.windowNanos() / 1e6, 100 * step.bubbleFraction(), 100 * simulated.bubbleFraction(),
                        step.meanNanos(org.symmem4j.pipeline.exec.TimelineEvent.Kind.FORWARD) / 1e6,
                        step.meanNanos(org.symmem4j.pipeline.exec.TimelineEvent.Kind.BACKWARD) / 1e6,
                        step.meanHandoffNanos() / 1e3, idle);
                System.out.printf(Locale.ROOT, "  bubble over all %d timed steps: median %.1f%%, range %.1f%% .. %.1f%%%n",
                        bubbles.length, 100 * bubbles[bubbles.length / 2], 100 * bubbles[0], 100 * bubbles[bubbles.length - 1]);
                Path trace = out.resolve(name + ".trace.json");
                Path svg = out.resolve(name + ".svg");
                Files.writeString(trace, step.chromeTraceJson());
                Files.writeString(svg, step.svg(name + ": " + ranks + " ranks, " + trainer.split().stageCount()
                        + " stages, " + microbatches + " microbatches (median step)"));
                System.out.println("  wrote " + trace + " (open in https://ui.perfetto.dev) and " + svg);
            }
        }
        System.out.println("On a machine with fewer cores than ranks the ranks share cores: the pipeline cannot beat the"
                + " single model there; the bubble and the timeline show the schedule itself.");
        if (endpoint != null) {
            endpoint.close();
        }
    }

    /** A deeper MLP: 8 tanh layers of {@code hidden} units and a softmax output (Adam), fixed seed. */
    static MultiLayerNetwork deepMlp(int in, int hidden, int out) {
        NeuralNetConfiguration.ListBuilder list = new NeuralNetConfiguration.Builder()
                .seed(2026).dataType(DataType.FLOAT).updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER).list();
        list.layer(new DenseLayer.Builder().nIn(in).nOut(hidden).activation(Activation.TANH).build());
        for (int i = 1; i < 8; i++) {
            list.layer(new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.TANH).build());
        }
        list.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(out)
                .activation(Activation.SOFTMAX).build());
        MultiLayerConfiguration conf = list.build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    private static String stageRanges(PipelineParallelTrainer trainer) {
        StringBuilder s = new StringBuilder();
        for (int stage = 0; stage < trainer.split().stageCount(); stage++) {
            s.append(stage == 0 ? "" : " | ").append(trainer.split().firstLayer(stage)).append('-')
                    .append(trainer.split().endLayer(stage) - 1);
        }
        return s.toString();
    }
}
