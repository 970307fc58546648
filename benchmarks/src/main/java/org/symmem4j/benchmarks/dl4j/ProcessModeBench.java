package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.examples.Cli;
import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * DL4J data parallelism with one JVM per worker against worker threads of one JVM: the same model,
 * the same batches, the same machine, in the same run, with the single model at each ND4J thread
 * count as the baseline (its best is the one to beat). Every configuration runs in a fresh JVM
 * (the processes through {@code symmem4j-run}), repetitions interleaved across configurations;
 * each trains a fixed number of steps after a warm-up of its own and reports examples per second
 * of the timed steps (rank 0's clock for the processes; every rank trains the same steps in lock
 * step). Medians over the repetitions.
 *
 * <ul>
 *   <li>{@code single-T}: one model on the merged batch of N·B examples, T ND4J threads;</li>
 *   <li>{@code threads}: {@code SymmemParallelWrapper} with N worker threads, cores/N ND4J threads each;</li>
 *   <li>{@code processes}: N JVMs started by the launcher (by default {@code --cpu-bind auto}: each
 *       bound to its own cores/N CPUs), {@code builder(model).group(ProcessGroup.fromEnvironment())},
 *       cores/N ND4J threads each.</li>
 * </ul>
 *
 * <pre>
 *   ProcessModeBench [--model mlp-medium] [--workers 2] [--batch 64] [--warmup-steps 10] [--steps 40] [--reps 3]
 *                    [--out report.md] [--raw raw.csv] [--commit C]
 * </pre>
 */
public final class ProcessModeBench {

    private static final Pattern RESULT = Pattern.compile("RESULT examples=(\\d+) seconds=([0-9.]+)");

    private ProcessModeBench() {
    }

    @Command(name = "ProcessModeBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "DL4J data parallelism: N processes (symmem4j-run) against N worker"
                    + " threads of one JVM and the single model at each ND4J thread count, same data, same run.")
    static final class Flags {
        @Option(names = "--model", paramLabel = "M", description = "mlp-small, mlp-medium or cnn")
        String model = "mlp-medium";
        @Option(names = "--workers", paramLabel = "N", description = "workers: threads, or processes")
        int workers = 2;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 64;
        @Option(names = "--warmup-steps", paramLabel = "W", description = "steps before the timed ones (each JVM)")
        int warmupSteps = 10;
        @Option(names = "--steps", paramLabel = "S", description = "timed steps")
        int steps = 40;
        @Option(names = "--reps", paramLabel = "R", description = "repetitions of every configuration, interleaved")
        int reps = 3;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "append every measurement to this CSV")
        Path raw;
        @Option(names = "--commit", paramLabel = "C", description = "the commit measured, for the report")
        String commit = "unknown";
        @Option(names = "--max-park-us", paramLabel = "US",
                description = "longest park of a process's waits in the group's idle strategy (0: the group default,"
                        + " 1000 us; the thread mode's wrapper parks at most 50 us)")
        long maxParkMicros;
        @Option(names = "--cpu-bind", paramLabel = "auto|none", description = "the launcher's --cpu-bind for the processes")
        String cpuBind = "auto";
        @Option(names = "--child", hidden = true, description = "internal: run one configuration in this JVM")
        String child;
        @Option(names = "--threads", hidden = true, description = "internal: ND4J threads of a child")
        int threads = 1;
    }

    public static void main(String[] args) throws Exception {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--workers", flags.workers);
            Cli.positive("--batch", flags.batch);
            Cli.positive("--steps", flags.steps);
            Cli.positive("--reps", flags.reps);
            if (flags.warmupSteps < 0) {
                throw new IllegalArgumentException("--warmup-steps=" + flags.warmupSteps + " expected >= 0");
            }
            ScalingBench.Model.of(flags.model); // refuses an unknown model now
            return flags;
        });
        if (f.child != null) {
            child(f);
            System.exit(0); // ND4J's non-daemon threads would keep the JVM
        }
        parent(f, args);
    }

    // ------------------------------------------------------------------ the parent: configurations and report

    private static void parent(Flags f, String[] args) throws Exception {
        int cores = Runtime.getRuntime().availableProcessors();
        List<String> modes = new ArrayList<>();
        for (int t = 1; t <= cores; t *= 2) {
            modes.add("single-" + t);
        }
        if (Integer.bitCount(cores) != 1) {
            modes.add("single-" + cores);
        }
        modes.add("threads");
        modes.add("processes");
        Map<String, List<double[]>> results = new LinkedHashMap<>();
        modes.forEach(m -> results.put(m, new ArrayList<>()));
        for (int rep = 0; rep < f.reps; rep++) {
            for (int i = 0; i < modes.size(); i++) {
                String mode = modes.get((i + rep) % modes.size()); // a different configuration first each round
                double[] r = run(f, mode, cores);
                results.get(mode).add(r);
                System.err.printf(Locale.ROOT, "rep %d %-10s %8.1f examples/s (%d examples in %.2f s)%n", rep + 1, mode,
                        r[0] / r[1], (long) r[0], r[1]);
                if (f.raw != null) {
                    appendRaw(f, mode, rep, r);
                }
            }
        }
        String report = report(f, cores, results, String.join(" ", args));
        System.out.print(report);
        if (f.out != null) {
            Files.writeString(f.out, report);
        }
    }

    /** Runs one configuration in fresh JVMs; returns {examples, seconds} of its timed steps. */
    private static double[] run(Flags f, String mode, int cores) throws IOException, InterruptedException {
        List<String> common = List.of("--model", f.model, "--workers", Integer.toString(f.workers), "--batch",
                Integer.toString(f.batch), "--warmup-steps", Integer.toString(f.warmupSteps), "--steps",
                Integer.toString(f.steps), "--max-park-us", Long.toString(f.maxParkMicros));
        if (mode.equals("processes")) {
            List<String> args = new ArrayList<>(List.of("-n", Integer.toString(f.workers), "--cpu-bind", f.cpuBind,
                    "--master-port", Integer.toString(freePort()), "--"));
            args.addAll(childCommand(common, "processes", Math.max(1, cores / f.workers))); // as the threads get
            Launcher.Result r = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
            return result(r.status(), r.out() + r.err(), mode);
        }
        int threads = mode.startsWith("single-") ? Integer.parseInt(mode.substring(7)) : Math.max(1, cores / f.workers);
        Process p = new ProcessBuilder(childCommand(common, mode.startsWith("single-") ? "single" : "threads", threads))
                .redirectErrorStream(true).start();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(30, TimeUnit.MINUTES)) {
            p.destroyForcibly();
            throw new IllegalStateException(mode + " did not end within 30 minutes:\n" + output);
        }
        return result(p.exitValue(), output, mode);
    }

    private static double[] result(int status, String output, String mode) {
        Matcher m = RESULT.matcher(output);
        if (status != 0 || !m.find()) {
            throw new IllegalStateException(mode + " failed (exit " + status + "):\n" + output);
        }
        return new double[] {Long.parseLong(m.group(1)), Double.parseDouble(m.group(2))};
    }

    private static List<String> childCommand(List<String> common, String child, int threads) {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
                "--sun-misc-unsafe-memory-access=allow", "-Xmx8g", "-cp", System.getProperty("java.class.path"),
                ProcessModeBench.class.getName()));
        cmd.addAll(common);
        cmd.addAll(List.of("--child", child, "--threads", Integer.toString(threads)));
        return cmd;
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static void appendRaw(Flags f, String mode, int rep, double[] r) throws IOException {
        boolean header = !Files.exists(f.raw);
        String row = String.format(Locale.ROOT, "%s,%s,%d,%d,%s,%d,%d,%.0f,%.4f,%.1f%n", Instant.now(), f.commit,
                Runtime.getRuntime().availableProcessors(), f.workers, f.model, f.batch, rep, r[0], r[1], r[0] / r[1]);
        Files.writeString(f.raw, (header ? "mode,time,commit,cores,workers,model,batch,rep,examples,seconds,examples_per_s\n"
                : "") + mode + "," + row, StandardCharsets.UTF_8,
                java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
    }

    private static String report(Flags f, int cores, Map<String, List<double[]>> results, String command) {
        StringBuilder b = new StringBuilder();
        b.append("# DL4J data parallelism: one JVM per worker against worker threads\n\n");
        b.append(String.format(Locale.ROOT, "- date: %s%n- machine: %s, %d cores available, %s%n- commit: %s%n", Instant.now(),
                MachineInfo.cpuModel(), cores, MachineInfo.ramGiB(), f.commit));
        b.append(String.format(Locale.ROOT, "- model: %s, Adam, fp32; %d workers x batch %d; %d warm-up steps, %d timed steps"
                + " per JVM; %d repetitions, interleaved; medians%n", f.model, f.workers, f.batch, f.warmupSteps, f.steps,
                f.reps));
        b.append(String.format(Locale.ROOT, "- processes: launcher --cpu-bind %s; idle strategy: longest park %s%n", f.cpuBind,
                f.maxParkMicros <= 0
                ? "1000 us (GroupOptions.defaults())" : f.maxParkMicros + " us"));
        b.append("- command: `ProcessModeBench ").append(command).append("`\n\n");
        b.append("| configuration | examples/s (median) | runs |\n|---|---:|---|\n");
        double bestSingle = 0;
        String bestSingleMode = "";
        Map<String, Double> medians = new LinkedHashMap<>();
        for (Map.Entry<String, List<double[]>> e : results.entrySet()) {
            List<Double> rates = e.getValue().stream().map(r -> r[0] / r[1]).sorted().toList();
            double median = Stats.median(rates.stream().mapToDouble(Double::doubleValue));
            medians.put(e.getKey(), median);
            if (e.getKey().startsWith("single-") && median > bestSingle) {
                bestSingle = median;
                bestSingleMode = e.getKey();
            }
            b.append(String.format(Locale.ROOT, "| %s | %.1f | %s |%n", e.getKey(), median,
                    String.join(", ", rates.stream().map(r -> String.format(Locale.ROOT, "%.1f", r)).toList())));
        }
        double threads = medians.get("threads");
        double processes = medians.get("processes");
        b.append(String.format(Locale.ROOT, "%nprocesses / threads: %.3f; processes / best single model (%s): %.3f;"
                + " threads / best single model: %.3f%n", processes / threads, bestSingleMode, processes / bestSingle,
                threads / bestSingle));
        return b.toString();
    }

    // ------------------------------------------------------------------ a child: one configuration in this JVM

    private static void child(Flags f) throws Exception {
        ScalingBench.Model model = ScalingBench.Model.of(f.model);
        SyntheticBatches data = new SyntheticBatches(model, f.batch, f.workers);
        MultiLayerNetwork net = model.build();
        switch (f.child) {
            case "single" -> {
                Nd4jThreadLimit.set(f.threads);
                net.fit(ScalingBench.TimedIterator.counted(data.merged, f.warmupSteps));
                ScalingBench.TimedIterator timed = ScalingBench.TimedIterator.counted(data.merged, f.steps);
                long t0 = System.nanoTime();
                net.fit(timed);
                print(timed.examples, System.nanoTime() - t0);
            }
            case "threads" -> {
                try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(f.workers)
                        .ompThreadsPerWorker(f.threads).build()) {
                    timedFits(w, data, f, true);
                }
            }
            case "processes" -> {
                GroupOptions options = f.maxParkMicros <= 0 ? GroupOptions.defaults()
                        : GroupOptions.defaults().withIdleStrategy(() -> new BackoffIdleStrategy(BackoffIdleStrategy.DEFAULT_MAX_SPINS,
                        BackoffIdleStrategy.DEFAULT_MAX_YIELDS, BackoffIdleStrategy.DEFAULT_MIN_PARK_NANOS, f.maxParkMicros * 1000));
                try (ProcessGroup group = ProcessGroup.fromEnvironment(options);
                     SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).group(group).ompThreadsPerWorker(f.threads)
                             .build()) {
                    timedFits(w, data, f, group.rank() == 0);
                }
            }
            default -> throw new IllegalArgumentException("--child=" + f.child);
        }
    }

    private static void timedFits(SymmemParallelWrapper w, SyntheticBatches data, Flags f, boolean reporting) {
        w.fit(ScalingBench.TimedIterator.counted(data.pool, (long) Math.max(1, f.warmupSteps) * f.workers)); // starts the workers too
        ScalingBench.TimedIterator timed = ScalingBench.TimedIterator.counted(data.pool, (long) f.steps * f.workers);
        long t0 = System.nanoTime();
        w.fit(timed);
        if (reporting) {
            print(timed.examples, System.nanoTime() - t0);
        }
    }

    private static void print(long examples, long nanos) {
        System.out.printf(Locale.ROOT, "RESULT examples=%d seconds=%.6f%n", examples, nanos / 1e9);
        System.out.flush();
    }

    /** The benchmark's batches: a pool of per-worker batches, and merged batches of one step's examples. */
    static final class SyntheticBatches {
        final List<DataSet> pool;
        final List<DataSet> merged = new ArrayList<>();

        SyntheticBatches(ScalingBench.Model model, int batch, int workers) {
            int distinct = 32;
            this.pool = new org.symmem4j.examples.SyntheticData(model.features(), ScalingBench.CLASSES, 1)
                    .batches(2, distinct, batch, org.nd4j.linalg.api.buffer.DataType.FLOAT);
            for (int s = 0; s < Math.max(1, distinct / workers); s++) {
                merged.add(DataSet.merge(pool.subList((s * workers) % distinct, (s * workers) % distinct
                        + Math.min(workers, distinct))));
            }
        }
    }

}
