package org.symmem4j.examples;

import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
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
import org.symmem4j.dl4j.DataParallelTimeline;
import org.symmem4j.prometheus.PrometheusEndpoint;
import org.symmem4j.dl4j.StepReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The README's main example: trains a DL4J network data-parallel on the CPU with N workers over
 * symmetric memory, on generated data. Prints progress (loss, examples/s, sync time per step),
 * test accuracy per epoch and a sync-latency summary, and serves Prometheus metrics at
 * {@code http://127.0.0.1:<port>/metrics} while it runs.
 *
 * <pre>
 *   DataParallelExample [--workers N] [--epochs E] [--batch B] [--hidden H] [--port P] [--linger-seconds S]
 *                       [--timeline FILE] [--timeline-steps N] [--sharding OPTIMIZER_STATE|GRADIENTS|PARAMETERS]
 * </pre>
 * {@code --port 0} picks a free port, {@code --port -1} serves nothing; {@code --linger-seconds}
 * keeps serving metrics after training (for a Prometheus server to scrape). {@code --timeline FILE}
 * records the run (the first {@code --timeline-steps} steps, default 1000) and writes it as a
 * Chrome trace for https://ui.perfetto.dev: per worker compute, sync, waiting for peers, update and
 * each bucket's all-reduce, and the caller's work between steps.
 *
 * <p>Started by {@code symmem4j-run} (or torchrun or mpirun: {@code RANK} is set), each process is
 * one worker of a process group ({@code builder(net).group(ProcessGroup.fromEnvironment())}): every
 * process reads the same generated batches and trains on its share of each step, rank 0 prints and
 * evaluates, and rank r serves its metrics on port + r. Either way it ends with the final parameters'
 * CRC-32, equal for N threads and N processes (they train bitwise alike).
 *
 * <pre>
 *   bin/symmem4j-run -n 2 --java --sun-misc-unsafe-memory-access=allow -cp CLASSPATH org.symmem4j.examples.DataParallelExample
 * </pre>
 */
public final class DataParallelExample {

    /** Adam's learning rate in {@link #mlp}. */
    public static final double LEARNING_RATE = 1e-3;

    /**
     * The tag that names this program on every meter. Not {@code job}: Prometheus sets that label
     * itself (the scrape job), and renames an application's own {@code job} to {@code exported_job}.
     */
    public static final String APPLICATION_TAG = "application";
    public static final String APPLICATION = "data-parallel-example";

    private DataParallelExample() {
    }

    @Command(name = "DataParallelExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "DL4J training data-parallel over symmetric memory on generated data: loss, examples/s and"
                    + " sync time per step, then a sync-latency summary, with Prometheus metrics served meanwhile.")
    static final class Flags {
        @Option(names = "--workers", paramLabel = "N", description = "worker threads (default: the number of cores);"
                + " under a launcher the processes are the workers and this must be left out")
        Integer workers;
        @Option(names = "--epochs", paramLabel = "E", description = "passes over the training batches")
        int epochs = 4;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 64;
        @Option(names = "--hidden", paramLabel = "H", description = "width of the MLP's hidden layers")
        int hidden = 256;
        @Option(names = "--port", paramLabel = "P", description = "Prometheus endpoint port on 127.0.0.1 (negative: none)")
        int port = 9404;
        @Option(names = "--linger-seconds", paramLabel = "S", description = "keep serving metrics this long after training")
        double lingerSeconds = 0;
        @Option(names = "--timeline", paramLabel = "FILE",
                description = "write the run as a Chrome trace to FILE (default: none)")
        Path timeline;
        @Option(names = "--timeline-steps", paramLabel = "N", description = "steps the timeline keeps")
        int timelineSteps = 1000;
        @Option(names = "--sharding", paramLabel = "STAGE",
                description = "ZeRO sharding: OPTIMIZER_STATE (stage 1), GRADIENTS (stage 2) or PARAMETERS (stage 3,"
                        + " fully sharded); default none")
        ZeroStage sharding;
    }

    public static void main(String[] args) throws InterruptedException, IOException {
        boolean launched = System.getenv("RANK") != null || System.getenv("OMPI_COMM_WORLD_RANK") != null;
        Flags flags = Cli.parse(new Flags(), args, f -> {
            if (f.workers != null) {
                Cli.positive("--workers", f.workers);
                if (launched) {
                    throw new IllegalArgumentException("--workers=" + f.workers + " under a launcher (RANK is set): the"
                            + " launched processes are the workers; expected no --workers (fix: give the launcher -n N)");
                }
            }
            if (launched && f.timeline != null) {
                throw new IllegalArgumentException("--timeline with launched processes: the timeline records worker threads"
                        + " of one JVM; expected no --timeline (fix: run with --workers N instead of a launcher)");
            }
            Cli.positive("--epochs", f.epochs);
            Cli.positive("--batch", f.batch);
            Cli.positive("--hidden", f.hidden);
            Cli.positive("--timeline-steps", f.timelineSteps);
            if (f.lingerSeconds < 0) {
                throw new IllegalArgumentException("--linger-seconds=" + f.lingerSeconds + " expected >= 0");
            }
            return f;
        });
        // under a launcher: this process is one worker of the group it set up
        ProcessGroup group = launched ? ProcessGroup.fromEnvironment() : null;
        try {
            train(flags, group);
        } finally {
            if (group != null) {
                group.close();
            }
        }
    }

    private static void train(Flags flags, ProcessGroup group) throws InterruptedException, IOException {
        boolean printing = group == null || group.rank() == 0; // one process prints and evaluates
        int workers = group != null ? group.worldSize() : flags.workers != null ? flags.workers
                : Runtime.getRuntime().availableProcessors();
        int epochs = flags.epochs;
        int batch = flags.batch;
        int hidden = flags.hidden;
        int port = flags.port <= 0 || group == null ? flags.port : flags.port + group.rank(); // a port per process
        double lingerSeconds = flags.lingerSeconds;
        Path timeline = flags.timeline;
        int timelineSteps = flags.timelineSteps;
        SyntheticData data = new SyntheticData(64, 10, 1);
        List<DataSet> train = data.batches(2, 96, batch, DataType.FLOAT);
        List<DataSet> test = data.batches(3, 8, 256, DataType.FLOAT);
        MultiLayerNetwork net = mlp(data.features(), hidden, data.classes());

        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        PrometheusEndpoint endpoint = port >= 0 ? PrometheusEndpoint.start(registry, port) : null;
        if (printing) {
            System.out.printf(Locale.ROOT, "symmem4j data parallelism: %d workers (%s), %d parameters, batch %d per worker,"
                    + " %d batches per epoch%n", workers, group == null ? "threads of this JVM" : "processes", net.numParams(),
                    batch, train.size());
        }
        if (endpoint != null) {
            System.out.println("metrics: " + endpoint.url());
        }

        Progress progress = new Progress(printing);
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(net)
                .meterRegistry(registry, Tags.of(APPLICATION_TAG, APPLICATION))
                .stepListener(progress);
        if (group != null) {
            builder.group(group);
        } else {
            builder.workers(workers);
        }
        if (flags.sharding != null) {
            builder.sharding(flags.sharding);
        }
        if (timeline != null) {
            builder.recordTimeline(timelineSteps);
        }
        try (SymmemParallelWrapper wrapper = builder.build()) {
            for (int epoch = 1; epoch <= epochs; epoch++) {
                wrapper.fit(new ListIterator(train));
                if (printing) {
                    double accuracy = net.evaluate(new ListIterator(test)).accuracy();
                    System.out.printf(Locale.ROOT, "epoch %d: test accuracy %.3f%n", epoch, accuracy);
                }
            }
            if (timeline != null) {
                if (timeline.toAbsolutePath().getParent() != null) {
                    Files.createDirectories(timeline.toAbsolutePath().getParent());
                }
                DataParallelTimeline recorded = wrapper.runTimeline();
                recorded.writeChromeTrace(timeline);
                System.out.printf(Locale.ROOT, "timeline: %s (%d steps%s; open in https://ui.perfetto.dev)%n",
                        timeline.toAbsolutePath().normalize(),
                        recorded.recordedSteps(), recorded.droppedSteps() > 0
                                ? ", " + recorded.droppedSteps() + " later steps left out" : "");
            }
        }
        if (printing) {
            printSummary(registry, progress);
            System.out.printf(Locale.ROOT, "final parameters: %d values, CRC-32 %08x%n", net.numParams(), crc32(net));
        }
        if (endpoint != null) {
            if (lingerSeconds > 0) {
                System.out.printf(Locale.ROOT, "serving %s for %.0f more seconds%n", endpoint.url(), lingerSeconds);
                Thread.sleep((long) (lingerSeconds * 1000));
            }
            endpoint.close();
        }
    }

    /** The example's MLP (Adam 1e-3, two ReLU layers, softmax), from a fixed seed; the benchmark trains the same one. */
    public static MultiLayerNetwork mlp(int in, int hidden, int out) {
        MultiLayerNetwork net = new MultiLayerNetwork(mlpConfiguration(in, hidden, out));
        net.init();
        return net;
    }

    /** The configuration of {@link #mlp}: what {@code SymmemParallelWrapper.builder(conf)} starts from. */
    public static MultiLayerConfiguration mlpConfiguration(int in, int hidden, int out) {
        return new NeuralNetConfiguration.Builder()
                .seed(12345).dataType(DataType.FLOAT).updater(new Adam(LEARNING_RATE)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(in).nOut(hidden).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(out)
                        .activation(Activation.SOFTMAX).build())
                .build();
    }

    /** CRC-32 of the network's parameters as stored (their bits), to compare runs. */
    static long crc32(MultiLayerNetwork net) {
        java.util.zip.CRC32 crc = new java.util.zip.CRC32();
        float[] values = net.params().dup().data().asFloat();
        java.nio.ByteBuffer bytes = java.nio.ByteBuffer.allocate(4 * values.length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (float v : values) {
            bytes.putInt(Float.floatToRawIntBits(v));
        }
        crc.update(bytes.array());
        return crc.getValue();
    }

    /** Prints a progress line every 20 steps: loss, examples/s and sync time per step over that window. */
    static final class Progress implements SymmemParallelWrapper.StepListener {
        private static final int EVERY = 20;
        private final boolean printing;
        private long windowStart = System.nanoTime();
        private long windowExamples;
        private long windowSyncNanos;
        private long windowStepNanos;
        private int windowSteps;
        long totalSteps;
        long totalExamples;
        final long start = System.nanoTime();

        Progress(boolean printing) {
            this.printing = printing;
        }

        @Override
        public void onStep(StepReport r) {
            windowExamples += r.examples();
            windowSyncNanos += r.syncNanos();
            windowStepNanos += r.stepNanos();
            windowSteps++;
            totalSteps++;
            totalExamples += r.examples();
            if (windowSteps == EVERY) {
                double seconds = (System.nanoTime() - windowStart) / 1e9;
                if (printing) {
                    System.out.printf(Locale.ROOT, "step %5d  loss %.4f  %8.0f examples/s  sync %.3f ms/step (%.1f%% of step)%n",
                            r.step() + 1, r.loss(), windowExamples / seconds, windowSyncNanos / 1e6 / windowSteps,
                            100.0 * windowSyncNanos / Math.max(1, windowStepNanos));
                }
                windowStart = System.nanoTime();
                windowExamples = 0;
                windowSyncNanos = 0;
                windowStepNanos = 0;
                windowSteps = 0;
            }
        }
    }

    static void printSummary(PrometheusMeterRegistry registry, Progress progress) {
        double seconds = (System.nanoTime() - progress.start) / 1e9;
        System.out.printf(Locale.ROOT, "%ntrained %d steps, %d examples in %.1f s (%.0f examples/s including evaluation)%n",
                progress.totalSteps, progress.totalExamples, seconds, progress.totalExamples / seconds);
        System.out.println("sync latency (all-reduce of one gradient bucket, per worker):");
        System.out.printf(Locale.ROOT, "  %-10s %-8s %8s %12s %12s%n", "algorithm", "size", "count", "mean us", "max us");
        List<Timer> timers = new ArrayList<>(registry.find("symmem.allreduce.duration").timers());
        timers.sort(Comparator.comparing((Timer t) -> t.getId().getTag("algorithm"))
                .thenComparing(t -> t.getId().getTag("size.class")));
        for (Timer t : timers) {
            if (t.count() > 0) {
                System.out.printf(Locale.ROOT, "  %-10s %-8s %8d %12.1f %12.1f%n", t.getId().getTag("algorithm"),
                        t.getId().getTag("size.class"), t.count(), t.mean(TimeUnit.MICROSECONDS), t.max(TimeUnit.MICROSECONDS));
            }
        }
        Gauge share = registry.find("symmem.gradsync.sync.share").gauge();
        if (share != null) {
            System.out.printf(Locale.ROOT, "sync share of step time: %.1f%%%n", 100 * share.value());
        }
        // a straggler computes longest and waits least; its peers wait for it in sync
        System.out.println("per worker (mean per step):");
        List<Timer> compute = new ArrayList<>(registry.find("symmem.gradsync.worker.compute").timers());
        compute.sort(Comparator.comparingInt(t -> Integer.parseInt(t.getId().getTag("worker"))));
        for (Timer c : compute) {
            String worker = c.getId().getTag("worker");
            Timer sync = registry.get("symmem.gradsync.worker.sync").tag("worker", worker).timer();
            System.out.printf(Locale.ROOT, "  worker %-3s compute %8.3f ms  sync %8.3f ms%n", worker,
                    c.mean(TimeUnit.MILLISECONDS), sync.mean(TimeUnit.MILLISECONDS));
        }
    }
}
