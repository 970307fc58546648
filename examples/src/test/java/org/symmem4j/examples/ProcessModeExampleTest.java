package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.symmem4j.launch.Launcher;

/**
 * The README's main example as processes: {@code symmem4j-run -n 2} starts two JVMs of
 * {@link DataParallelExample}, each one worker of a process group; they train the same network on
 * the same data bitwise like the example's 2 worker threads in one JVM (same final parameters'
 * CRC-32), and only rank 0 prints the run. The pipeline example likewise, one process per pipeline rank.
 */
class ProcessModeExampleTest {

    private static final Pattern CRC = Pattern.compile("final parameters: (\\d+) values, CRC-32 ([0-9a-f]{8})");
    private static final List<String> ARGS = List.of("--epochs", "1", "--batch", "16", "--hidden", "32", "--port", "-1");

    /**
     * This JDK's java running {@code main} with {@code args} on this test's class path, with the flags the launcher's
     * {@code --java} gives: the same command runs the example's rank threads directly and its ranks under the launcher.
     */
    private static List<String> exampleJvm(Class<?> main, List<String> args) {
        return LaunchedJvm.command(List.of("-Xmx512m"), main, args);
    }

    private static List<String> javaCommand(String sharding) {
        List<String> cmd = exampleJvm(DataParallelExample.class, ARGS);
        if (!sharding.equals("none")) {
            cmd.addAll(List.of("--sharding", sharding));
        }
        return cmd;
    }

    /**
     * Plain data parallelism, ZeRO stage 1 (each process keeps its shard; the state is gathered across processes), and
     * stage 3 (each process holds its blocks of every layer in a sparse /dev/shm file; layers gathered across processes).
     */
    @ParameterizedTest(name = "sharding={0}")
    @ValueSource(strings = {"none", "OPTIMIZER_STATE", "PARAMETERS"})
    void twoLaunchedProcessesTrainBitwiseLikeTwoWorkerThreads(String sharding) throws IOException, InterruptedException {
        // 2 worker threads in one JVM, each with half the CPUs for ND4J, as the launcher's processes get
        List<String> threads = javaCommand(sharding);
        threads.addAll(List.of("--workers", "2"));
        Process p = new ProcessBuilder(threads).redirectErrorStream(true).start();
        String threadOut = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), "the thread-mode example ends");
        assertEquals(0, p.exitValue(), threadOut);
        Matcher threadCrc = CRC.matcher(threadOut);
        assertTrue(threadCrc.find(), threadOut);

        List<String> args = new ArrayList<>(List.of("-n", "2", "--master-port", Integer.toString(freePort()), "--"));
        args.addAll(javaCommand(sharding));
        Launcher.Result launched = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
        String processOut = launched.out();
        assertEquals(0, launched.status(), launched.err() + "\n" + processOut);
        Matcher processCrc = CRC.matcher(processOut);
        assertTrue(processCrc.find(), processOut);
        assertTrue(processOut.contains("[rank 0] final parameters:"), "rank 0 reports: " + processOut);
        assertTrue(!processOut.contains("[rank 1] final parameters:") && !processOut.contains("[rank 1] epoch"),
                "only rank 0 prints the run: " + processOut);
        assertTrue(processOut.contains("2 workers (processes)"), processOut);
        assertEquals(threadCrc.group(1), processCrc.group(1));
        assertEquals(threadCrc.group(2), processCrc.group(2), "2 processes end with the parameters of 2 threads, bitwise");
    }

    private static final Pattern PIPELINE_CRC =
            Pattern.compile("(1f1b|interleaved-1f1b) final parameters: (\\d+) values, CRC-32 ([0-9a-f]{8})");

    /**
     * The pipeline example as processes: {@code symmem4j-run -n 2} starts two JVMs of
     * {@link PipelineParallelExample}, each one pipeline rank; both schedules (1F1B, and interleaved with
     * two stages per rank) end with the parameters of the example's 2 rank threads, bitwise.
     */
    @org.junit.jupiter.api.Test
    void twoLaunchedPipelineRanksTrainBitwiseLikeTwoRankThreads() throws IOException, InterruptedException {
        List<String> cmd = exampleJvm(PipelineParallelExample.class, List.of("--epochs", "1", "--warmup-epochs", "0",
                "--batch", "32", "--microbatches", "4", "--hidden", "32", "--layers", "3", "--split", "params",
                "--out", System.getProperty("java.io.tmpdir") + "/symmem4j-pipeline-process-test"));
        List<String> threads = new ArrayList<>(cmd);
        threads.addAll(List.of("--ranks", "2"));
        Process p = new ProcessBuilder(threads).redirectErrorStream(true).start();
        String threadOut = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), "the thread-mode example ends");
        assertEquals(0, p.exitValue(), threadOut);

        List<String> args = new ArrayList<>(List.of("-n", "2", "--master-port", Integer.toString(freePort()), "--"));
        args.addAll(cmd);
        Launcher.Result launched = Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
        String processOut = launched.out();
        assertEquals(0, launched.status(), launched.err() + "\n" + processOut);
        assertTrue(processOut.contains("2 ranks (processes)"), processOut);
        assertTrue(!processOut.contains("[rank 1] pipeline"), "only rank 0 prints the run: " + processOut);
        java.util.Map<String, String> threadCrcs = new java.util.TreeMap<>();
        java.util.Map<String, String> processCrcs = new java.util.TreeMap<>();
        for (Matcher m = PIPELINE_CRC.matcher(threadOut); m.find(); ) {
            threadCrcs.put(m.group(1), m.group(2) + " " + m.group(3));
        }
        for (Matcher m = PIPELINE_CRC.matcher(processOut); m.find(); ) {
            processCrcs.put(m.group(1), m.group(2) + " " + m.group(3));
        }
        assertEquals(java.util.Set.of("1f1b", "interleaved-1f1b"), threadCrcs.keySet(), threadOut);
        assertEquals(threadCrcs, processCrcs, "2 processes end with the parameters of 2 threads, bitwise, for both"
                + " schedules\n" + processOut);
    }

    private static final Pattern PRINTED_COUNT =
            Pattern.compile("(?m)^\\[rank 0\\]\\s+(ONE_SHOT|TWO_SHOT|RING)\\s+\\S+\\s+(\\d+)\\s");

    /**
     * Each launched process serves its own metrics (rank r on the given port + r), as a Prometheus server would scrape
     * them: polled while the job runs and while it lingers after training, both ranks count every all-reduce they ran,
     * the same number on both (the ranks run the same collectives) and the number rank 0 prints.
     */
    @org.junit.jupiter.api.Test
    void eachLaunchedProcessServesItsOwnMetrics() throws Exception {
        int base = twoFreePorts();
        List<String> args = new ArrayList<>(List.of("-n", "2", "--master-port", Integer.toString(freePort()), "--"));
        args.addAll(exampleJvm(DataParallelExample.class, List.of("--epochs", "1", "--batch", "16", "--hidden", "32",
                "--port", Integer.toString(base), "--linger-seconds", "5")));
        java.util.concurrent.CompletableFuture<Launcher.Result> job = java.util.concurrent.CompletableFuture.supplyAsync(
                () -> Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv())));
        java.net.http.HttpClient http = java.net.http.HttpClient.newBuilder()
                .connectTimeout(java.time.Duration.ofSeconds(2)).build();
        double[] most = new double[2]; // the largest count each rank served: its final one, once it lingers
        while (!job.isDone()) {
            for (int r = 0; r < 2; r++) {
                try {
                    String body = http.send(java.net.http.HttpRequest.newBuilder(java.net.URI.create(
                                    "http://127.0.0.1:" + (base + r) + "/metrics")).timeout(java.time.Duration.ofSeconds(2))
                            .build(), java.net.http.HttpResponse.BodyHandlers.ofString()).body();
                    double count = PrometheusScrapeTest.ExpositionSample.parse(body).stream()
                            .filter(x -> x.name().equals("symmem_allreduce_duration_seconds_count"))
                            .mapToDouble(PrometheusScrapeTest.ExpositionSample::value).sum();
                    most[r] = Math.max(most[r], count);
                } catch (IOException | IllegalStateException notServingYet) {
                    // not started yet, no all-reduce yet, or already gone
                }
            }
            Thread.sleep(100);
        }
        Launcher.Result launched = job.get();
        String out = launched.out();
        assertEquals(0, launched.status(), launched.err() + "\n" + out);
        long printed = 0;
        for (Matcher m = PRINTED_COUNT.matcher(out); m.find(); ) {
            printed += Long.parseLong(m.group(2));
        }
        assertTrue(printed > 0, "rank 0 prints its all-reduce counts:\n" + out);
        assertEquals(printed, (long) most[0], "rank 0's endpoint (port " + base + ") counts what rank 0 printed:\n" + out);
        assertEquals(printed, (long) most[1], "rank 1's endpoint (port " + (base + 1) + ") counts as many:\n" + out);
    }

    /** A port p with p + 1 free too (rank r of the example serves its metrics on p + r). */
    private static int twoFreePorts() throws IOException {
        while (true) {
            try (java.net.ServerSocket first = new java.net.ServerSocket(0)) {
                int p = first.getLocalPort();
                if (p < 65535) {
                    try (java.net.ServerSocket second = new java.net.ServerSocket(p + 1)) {
                        return p;
                    } catch (IOException taken) {
                        // p + 1 is in use: another pair
                    }
                }
            }
        }
    }

    private static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
