package org.symmem4j.examples;

import io.micrometer.core.instrument.Tags;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
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
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.prometheus.PrometheusEndpoint;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainerBuilder;
import org.symmem4j.dl4j.pipeline.PipelineSchedule;
import org.symmem4j.dl4j.pipeline.PipelineStageSplit;
import org.symmem4j.dl4j.pipeline.PipelineStepReport;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.pipeline.exec.TimelineEvent;
import org.symmem4j.pipeline.exec.TimelineReport;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.SimulationResult;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The pipeline-parallel example: a deep MLP cut into stages across {@code --ranks} ranks (threads),
 * trained on generated data with 1F1B (one stage per rank) and, where the network has enough layers,
 * interleaved 1F1B (2 virtual stages per rank), from the same initial parameters. The stages are
 * split by measured pass times (a few profiling passes of the first batch; {@code --split params}
 * balances parameter counts instead). Prints loss, throughput and test accuracy per schedule, each
 * stage's layers and profiled time, and the bubble four ways: predicted from the profile before
 * training, measured on the median step, simulated for that step's measured per-stage times, and the
 * schedule's ideal. Writes the whole timed run as a Chrome trace ({@code *.run.trace.json}), the
 * median step as a Chrome trace and an SVG (open the traces at https://ui.perfetto.dev).
 *
 * <pre>
 *   PipelineParallelExample [--ranks P] [--microbatches M] [--batch B] [--warmup-epochs W] [--epochs E] [--hidden H]
 *                           [--layers L] [--split time|params] [--out DIR] [--port P]
 * </pre>
 * {@code --port P} serves the pipelines' metrics (tag {@code application=pipeline-example}) at
 * {@code http://127.0.0.1:P/metrics} while they train (0 picks a free port; default: none).
 *
 * <p>Started by {@code symmem4j-run -n P} (or torchrun or mpirun: {@code RANK} is set), each process is
 * one pipeline rank of a process group ({@code builder(net).group(ProcessGroup.fromEnvironment())}):
 * the same pipelines train bitwise as the {@code --ranks P} threads do (each prints its final
 * parameters' CRC-32); rank 0 prints the run and writes the traces. The single-model baseline runs
 * only in thread mode (under the launcher every process is a pipeline rank; run without it to compare).
 */
public final class PipelineParallelExample {

    private PipelineParallelExample() {
    }

    @Command(name = "PipelineParallelExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "A deep MLP trained in a pipeline (1F1B and, with two layers per stage, interleaved) against"
                    + " the single model; prints each stage's layers and the bubble predicted, measured, simulated and"
                    + " ideal; writes Chrome traces and SVGs.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "P", description = "pipeline ranks (threads; default 4); under a launcher the"
                + " processes are the ranks and this must be left out")
        Integer ranks;
        @Option(names = "--microbatches", paramLabel = "M", description = "microbatches per batch")
        int microbatches = 8;
        @Option(names = "--batch", paramLabel = "B", description = "examples per batch")
        int batch = 128;
        @Option(names = "--warmup-epochs", paramLabel = "W",
                description = "untimed passes over the training batches first, for the single model and every pipeline alike"
                        + " (ND4J and JIT warm-up)")
        int warmupEpochs = 1;
        @Option(names = "--epochs", paramLabel = "E", description = "timed passes over the training batches, after the warm-up")
        int epochs = 1;
        @Option(names = "--hidden", paramLabel = "H", description = "width of the hidden layers")
        int hidden = 192;
        @Option(names = "--layers", paramLabel = "L", description = "hidden layers")
        int hiddenLayers = 8;
        @Option(names = "--split", paramLabel = "time|params",
                description = "balance stages by measured pass times or by parameter counts")
        String split = "time";
        @Option(names = "--out", paramLabel = "DIR", description = "directory for traces and SVGs (relative to the working directory)")
        Path out = Path.of("target", "pipeline-example");
        @Option(names = "--port", paramLabel = "P", description = "serve Prometheus metrics on 127.0.0.1:P (negative: none)")
        int port = -1;
    }

    public static void main(String[] args) throws IOException {
        boolean launched = System.getenv("RANK") != null || System.getenv("OMPI_COMM_WORLD_RANK") != null;
        Flags flags = Cli.parse(new Flags(), args, f -> {
            if (f.ranks != null) {
                Cli.positive("--ranks", f.ranks);
                if (launched) {
                    throw new IllegalArgumentException("--ranks=" + f.ranks + " under a launcher (RANK is set): the launched"
                            + " processes are the ranks; expected no --ranks (fix: give the launcher -n " + f.ranks + ")");
                }
            }
            Cli.positive("--microbatches", f.microbatches);
            Cli.positive("--batch", f.batch);
            Cli.positive("--epochs", f.epochs);
            if (f.warmupEpochs < 0) {
                throw new IllegalArgumentException("--warmup-epochs=" + f.warmupEpochs + " expected >= 0");
            }
            Cli.positive("--hidden", f.hidden);
            Cli.positive("--layers", f.hiddenLayers);
            if (!f.split.equals("time") && !f.split.equals("params")) {
                throw new IllegalArgumentException("--split=" + f.split + " expected time or params");
            }
            return f;
        });
        // under a launcher: this process is one pipeline rank of the group it set up
        try (ProcessGroup group = launched ? ProcessGroup.fromEnvironment() : null) {
            train(flags, group);
        }
    }

    private static void train(Flags flags, ProcessGroup group) throws IOException {
        boolean printing = group == null || group.rank() == 0; // one process prints, evaluates and writes
        int ranks = group != null ? group.worldSize() : flags.ranks != null ? flags.ranks : 4;
        int microbatches = flags.microbatches;
        int batch = flags.batch;
        int warmupEpochs = flags.warmupEpochs;
        int epochs = flags.epochs;
        int hidden = flags.hidden;
        int hiddenLayers = flags.hiddenLayers;
        boolean splitByTime = flags.split.equals("time");
        Path out = flags.out;
        int port = flags.port;
        if (printing) {
            Files.createDirectories(out);
        }
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        // a port per process under a launcher, as in DataParallelExample
        int myPort = port <= 0 || group == null ? port : port + group.rank();
        PrometheusEndpoint endpoint = myPort >= 0 ? PrometheusEndpoint.start(registry, myPort) : null;
        if (endpoint != null) {
            System.out.println("metrics" + (group == null ? "" : " of rank " + group.rank()) + ": " + endpoint.url());
        }
        SyntheticData data = new SyntheticData(64, 10, 7);
        List<DataSet> train = data.batches(11, 48, batch, DataType.FLOAT);
        List<DataSet> test = data.batches(12, 8, 256, DataType.FLOAT);
        MultiLayerNetwork reference = deepMlp(data.features(), hidden, data.classes(), hiddenLayers);
        if (printing) {
            System.out.printf(Locale.ROOT, "symmem4j pipeline parallelism: %d ranks (%s), %d layers, %d parameters, batch %d"
                    + " in %d microbatches, %d batches per epoch%n", ranks, group == null ? "threads of this JVM" : "processes",
                    reference.getnLayers(), reference.numParams(), batch, microbatches, train.size());
        }

        // the baseline: the same network trained by plain fit on the same batches, timed like the
        // pipelines below: the same untimed warm-up epochs (ND4J and the JIT), then the timed ones; at
        // its fastest ND4J thread count of two tried: a rank's share of the cores, and all of them
        int cores = Runtime.getRuntime().availableProcessors();
        // each rank's ND4J threads; under a launcher each process has the CPU slice the launcher gave it
        int threads = group != null ? cores : Math.max(1, cores / ranks);
        double singleRate = Double.NaN;
        int singleThreads = threads;
        if (group == null) {
            for (int t : threads == cores ? new int[] {cores} : new int[] {threads, cores}) {
                Nd4jThreadLimit.set(t);
                MultiLayerNetwork single = reference.clone();
                for (int epoch = 0; epoch < warmupEpochs; epoch++) {
                    for (DataSet b : train) {
                        single.fit(b);
                    }
                }
                long start = System.nanoTime();
                for (int epoch = 0; epoch < epochs; epoch++) {
                    for (DataSet b : train) {
                        single.fit(b);
                    }
                }
                double rate = (double) epochs * train.size() * batch / ((System.nanoTime() - start) / 1e9);
                String singleLabel = "single model fit (" + t + " ND4J thread" + (t == 1 ? ")" : "s)");
                System.out.printf(Locale.ROOT, "%-34s loss %.4f  %8.0f examples/s  test accuracy %.3f%n",
                        singleLabel, single.score(), rate, single.evaluate(new ListIterator(test)).accuracy());
                if (Double.isNaN(singleRate) || rate > singleRate) {
                    singleRate = rate;
                    singleThreads = t;
                }
            }
            Nd4jThreadLimit.set(threads);
        } else if (printing) {
            System.out.println("single model: not run under a launcher (every process is a pipeline rank); run with"
                    + " --ranks " + ranks + " and no launcher to compare");
        }
        Map<String, Double> pipelineRates = new LinkedHashMap<>();

        for (PipelineSchedule kind : new PipelineSchedule[] {PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED}) {
            int stagesPerRank = stagesPerRank(kind, ranks, PipelineStageSplit.maxStages(reference));
            if (stagesPerRank == 0) {
                if (printing) {
                    System.out.printf(Locale.ROOT, "%s: skipped: %d ranks need at least %d stages but the network has %d"
                            + " layers (use fewer ranks, or --layers %d or more)%n", kind.tag(), ranks, 2 * ranks,
                            reference.getnLayers(), 2 * ranks - 1);
                }
                continue;
            }
            MultiLayerNetwork net = reference.clone();
            String name = kind == PipelineSchedule.INTERLEAVED ? "interleaved-1f1b" : "1f1b";
            List<PipelineStepReport> timedSteps = new ArrayList<>();
            boolean[] timing = {false};
            PipelineParallelTrainerBuilder builder = PipelineParallelTrainer.builder(net)
                    .ompThreadsPerRank(threads)
                    .microbatches(microbatches).schedule(kind, stagesPerRank)
                    .recordTimeline(train.size() * epochs)
                    .meterRegistry(registry, Tags.of(DataParallelExample.APPLICATION_TAG, "pipeline-example"))
                    .stepListener(report -> {
                        if (timing[0]) {
                            timedSteps.add(report);
                        }
                    });
            if (group != null) {
                builder.group(group);
            } else {
                builder.ranks(ranks);
            }
            if (splitByTime) {
                builder.splitByMeasuredTimes(train.getFirst());
            }
            try (PipelineParallelTrainer trainer = builder.build()) {
                if (printing) {
                    System.out.printf(Locale.ROOT, "%s: %d stages split by %s, %d link slots%n", name,
                            trainer.split().stageCount(), splitByTime ? "measured pass times" + (group == null ? ""
                                    : " (rank 0's profile)") : "parameter count", trainer.linkSlots());
                    printStages(trainer);
                }
                for (int epoch = 0; epoch < warmupEpochs; epoch++) {
                    trainer.fit(new ListIterator(train)); // ND4J and the JIT warm up, as for the single model
                }
                timing[0] = true;
                long start = System.nanoTime();
                for (int epoch = 0; epoch < epochs; epoch++) {
                    trainer.fit(new ListIterator(train));
                }
                double rate = (double) epochs * train.size() * batch / ((System.nanoTime() - start) / 1e9);
                pipelineRates.put(name, rate);
                PipelineStepReport last = trainer.lastStep();
                // net holds the trained network (under a launcher every rank's: gathered at the end of each fit)
                if (printing) {
                    System.out.printf(Locale.ROOT, "%-34s loss %.4f  %8.0f examples/s  test accuracy %.3f%n",
                            "pipeline " + name, last.loss(), rate, net.evaluate(new ListIterator(test)).accuracy());
                    System.out.printf(Locale.ROOT, "  %s final parameters: %d values, CRC-32 %08x%n", name, net.numParams(),
                            DataParallelExample.crc32(net));
                    reportBubble(trainer, timedSteps, out, name, ranks, microbatches);
                }
            }
        }
        if (printing && group == null) {
            System.out.println(conclusion(singleRate, singleThreads, pipelineRates, ranks, threads, cores));
        }
        if (endpoint != null) {
            endpoint.close();
        }
    }

    /**
     * The run's conclusion, from its own numbers: the fastest pipeline against the single model, and
     * the cores they had (with fewer cores than ranks, ranks share cores and stretch each other's passes).
     */
    static String conclusion(double singleRate, int singleThreads, Map<String, Double> pipelineRates, int ranks, int threads,
                             int cores) {
        if (pipelineRates.isEmpty()) {
            return "No pipeline ran (see above): nothing to compare with the single model.";
        }
        Map.Entry<String, Double> best = pipelineRates.entrySet().stream().max(Map.Entry.comparingByValue()).orElseThrow();
        double ratio = best.getValue() / singleRate;
        String verdict = ratio > 1.05 ? "faster than" : ratio < 0.95 ? "slower than" : "as fast as (within 5 %)";
        String machine = ranks * threads > cores
                ? String.format(Locale.ROOT, "%d ranks shared %d cores, so every pass ran slower than on a core of its own,"
                        + " while the single model had %d ND4J thread%s (its faster setting)", ranks, cores, singleThreads,
                        singleThreads == 1 ? "" : "s")
                : String.format(Locale.ROOT, "each of the %d ranks had %d ND4J thread%s on %d cores, the single model %d"
                        + " (its faster setting)", ranks, threads, threads == 1 ? "" : "s", cores, singleThreads);
        return String.format(Locale.ROOT, "Conclusion: the fastest pipeline (%s, %.0f examples/s) was %s the single model"
                + " (%.0f examples/s): %.2fx. %s; both were timed after the same warm-up.", best.getKey(), best.getValue(),
                verdict, singleRate, ratio, Character.toUpperCase(machine.charAt(0)) + machine.substring(1));
    }

    /**
     * Stages per rank the network allows for {@code kind}: 1 for GPipe and 1F1B, 2 for interleaved when
     * there are at least {@code 2 x ranks} layers (every stage needs a layer), else 0: not possible.
     */
    static int stagesPerRank(PipelineSchedule kind, int ranks, int layers) {
        if (kind != PipelineSchedule.INTERLEAVED) {
            return ranks <= layers ? 1 : 0;
        }
        return 2 * ranks <= layers ? 2 : 0;
    }

    private static void printStages(PipelineParallelTrainer trainer) {
        PipelineStageSplit split = trainer.split();
        var predicted = trainer.predictedStageDurations();
        for (int s = 0; s < split.stageCount(); s++) {
            System.out.printf(Locale.ROOT, "  stage %2d (rank %d): layers %d-%d, %,d parameters%s%n", s,
                    s % trainer.shape().ranks(), split.firstLayer(s), split.endLayer(s) - 1, split.parameterCount(s),
                    predicted == null ? "" : String.format(Locale.ROOT, ", profiled F+B %.2f ms per microbatch",
                            predicted.total(s) / 1e3));
        }
    }

    /** The bubble four ways for the timed steps; writes the run's trace and the median step's trace and SVG. */
    private static void reportBubble(PipelineParallelTrainer trainer, List<PipelineStepReport> timedSteps, Path out,
                                     String name, int ranks, int microbatches) throws IOException {
        // the median step by duration stands for the run: with more ranks than cores, single steps now
        // and then lose a core for tens of milliseconds
        List<TimelineReport> steps = new ArrayList<>();
        for (PipelineStepReport r : timedSteps) {
            steps.add(r.timelineReport());
        }
        steps.sort(Comparator.comparingLong(TimelineReport::windowNanos));
        TimelineReport step = steps.get(steps.size() / 2);
        double[] bubbles = steps.stream().mapToDouble(TimelineReport::bubbleFraction).sorted().toArray();
        SimulationResult.Completed simulated = step.simulatePerStage(trainer.schedule(), trainer.shape());
        double ideal = ScheduleSimulator.simulate(trainer.schedule(), trainer.shape(), ActionDurations.of(1, 2))
                .requireCompleted().bubbleFraction();
        String predicted = trainer.predictedStageDurations() == null ? "n/a (split by parameters)"
                : String.format(Locale.ROOT, "%.1f%%", 100 * ScheduleSimulator.simulate(trainer.schedule(), trainer.shape(),
                trainer.predictedStageDurations()).requireCompleted().bubbleFraction());
        System.out.printf(Locale.ROOT, "  bubble: predicted from the profile %s, measured %.1f%% on the median step of %d"
                        + " (%.2f ms), simulated for its measured stage times %.1f%%, ideal for the schedule %.1f%%%n",
                predicted, 100 * step.bubbleFraction(), steps.size(), step.windowNanos() / 1e6,
                100 * simulated.bubbleFraction(), 100 * ideal);
        StringBuilder perStage = new StringBuilder();
        for (int s = 0; s < trainer.shape().stageCount(); s++) {
            perStage.append(String.format(Locale.ROOT, " %d: %.2f/%.2f", s,
                    step.stageMeanNanos(TimelineEvent.Kind.FORWARD, s) / 1e6,
                    step.stageMeanNanos(TimelineEvent.Kind.BACKWARD, s) / 1e6));
        }
        System.out.printf(Locale.ROOT, "  measured F/B ms per stage:%s; hand-off %.1f µs%n", perStage,
                step.meanHandoffNanos() / 1e3);
        System.out.printf(Locale.ROOT, "  bubble over all %d timed steps: median %.1f%%, range %.1f%% .. %.1f%%%n",
                bubbles.length, 100 * bubbles[bubbles.length / 2], 100 * bubbles[0], 100 * bubbles[bubbles.length - 1]);
        Path run = out.resolve(name + ".run.trace.json");
        Path trace = out.resolve(name + ".trace.json");
        Path svg = out.resolve(name + ".svg");
        trainer.runTimeline().writeChromeTrace(run);
        Files.writeString(trace, step.chromeTraceJson());
        Files.writeString(svg, step.svg(name + ": " + ranks + " ranks, " + trainer.split().stageCount() + " stages, "
                + microbatches + " microbatches (median step)"));
        // absolute paths: under `mvn -Pexample` the working directory is examples/, not where mvn was started
        System.out.println("  wrote " + run.toAbsolutePath().normalize() + " (the timed run), "
                + trace.toAbsolutePath().normalize() + " (open in https://ui.perfetto.dev) and "
                + svg.toAbsolutePath().normalize());
    }

    /** A deep MLP: {@code hiddenLayers} tanh layers of {@code hidden} units and a softmax output (Adam), fixed seed. */
    public static MultiLayerNetwork deepMlp(int in, int hidden, int out, int hiddenLayers) {
        NeuralNetConfiguration.ListBuilder list = new NeuralNetConfiguration.Builder()
                .seed(2026).dataType(DataType.FLOAT).updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER).list();
        list.layer(new DenseLayer.Builder().nIn(in).nOut(hidden).activation(Activation.TANH).build());
        for (int i = 1; i < hiddenLayers; i++) {
            list.layer(new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.TANH).build());
        }
        list.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(out)
                .activation(Activation.SOFTMAX).build());
        MultiLayerConfiguration conf = list.build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }
}
