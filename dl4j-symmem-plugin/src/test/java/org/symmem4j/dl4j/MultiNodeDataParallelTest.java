package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.ChildJvmFlags;

/**
 * DL4J data parallelism across machines, on one machine pretending to be several: {@code mpirun} starts
 * the processes (Open MPI's TCP transport only, so traffic between the pretended machines goes through
 * sockets), each joins the job's group on {@code MultiNodeTransport} and trains with the wrapper in group
 * mode, unchanged ({@link MultiNodeDataParallelWorker}). Against the same training as worker threads of one
 * JVM ({@link GroupModeTest#train}): 2 machines of 1 rank train bitwise alike (a sum of two terms has one
 * order); 2 machines of 2 ranks agree to float32 rounding (the hierarchical sums associate as
 * {@code (g0 + g1) + (g2 + g3)}, one machine's as {@code ((g0 + g1) + g2) + g3}); ZeRO stages 1 and 2 likewise.
 * Every rank's parameters are the same bits. Skipped where Open MPI is not
 * installed, unless {@code SYMMEM4J_REQUIRE_MPI=1} (CI) makes that a failure. The cases of one layout share one
 * {@code mpirun}, whose processes train each case's mode one after another ({@link #job}): every launch costs each
 * process a JVM and ND4J to start, about 3 s of CI's 2 cores per process.
 */
class MultiNodeDataParallelTest {

    private static final int BATCHES = 4 * 4;

    /** The modes that one {@code mpirun} of a layout trains, keyed by {@code ranks x perMachine}. */
    private static final Map<String, List<String>> MODES = Map.of(
            "2x1", List.of(MultiNodeDataParallelWorker.PLAIN, ZeroStage.OPTIMIZER_STATE.name(), ZeroStage.GRADIENTS.name()),
            "4x2", List.of(MultiNodeDataParallelWorker.PLAIN, ZeroStage.GRADIENTS.name(), MultiNodeDataParallelWorker.HSDP,
                    MultiNodeDataParallelWorker.DP_TP));

    /** The output of each layout's {@code mpirun} that ended well, by layout. */
    private static final Map<String, String> JOBS = new java.util.concurrent.ConcurrentHashMap<>();

    @TempDir
    static Path jobs;

    /**
     * Runs (once per layout, for every case of it) the worker on {@code ranks} processes, {@code perMachine} to a
     * pretended machine, in every mode of {@link #MODES}; returns the lines of {@code mode} (without their
     * {@code [mode] } prefix) and the folder that mode's rank 0 wrote into.
     */
    static Job job(int ranks, int perMachine, String mode) throws IOException, InterruptedException {
        String layout = ranks + "x" + perMachine;
        List<String> modes = MODES.get(layout);
        assertTrue(modes != null && modes.contains(mode), "mode " + mode + " of layout " + layout + " is in MODES");
        Path out = jobs.resolve(layout);
        String text;
        synchronized (JOBS) {
            text = JOBS.get(layout);
            if (text == null) {
                Files.createDirectories(out);
                text = mpirun(ranks, perMachine, out, modes.toArray(String[]::new));
                JOBS.put(layout, text);
            }
        }
        String prefix = "[" + mode + "] ";
        StringBuilder lines = new StringBuilder();
        for (String line : text.split("\n")) {
            if (line.startsWith(prefix)) {
                lines.append(line, prefix.length(), line.length()).append('\n');
            }
        }
        return new Job(lines.toString(), out.resolve(mode));
    }

    /** One mode's lines of a shared {@code mpirun}'s output and the folder its rank 0 wrote into. */
    record Job(String text, Path out) {
    }

    static void requireMpi() {
        boolean present;
        try {
            Process p = new ProcessBuilder("mpirun", "--version").redirectErrorStream(true).start();
            p.getInputStream().readAllBytes();
            present = p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException | InterruptedException e) {
            present = false;
        }
        if (!present && "1".equals(System.getenv("SYMMEM4J_REQUIRE_MPI"))) {
            throw new AssertionError("SYMMEM4J_REQUIRE_MPI=1 but mpirun is not on the PATH (install Debian's openmpi-bin)");
        }
        Assumptions.assumeTrue(present, "Open MPI (mpirun) is not installed");
    }

    /** Runs the worker on {@code ranks} processes, {@code perMachine} to a pretended machine; returns its output. */
    static String mpirun(int ranks, int perMachine, Path out, String... extra) throws IOException, InterruptedException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        List<String> cmd = new ArrayList<>(List.of("mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                Integer.toString(ranks), "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
                "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + port, "-x", "OMP_NUM_THREADS=1",
                "-x", "SYMMEM4J_RUN_ID=multinode-dl4j-" + port,
                "-x", "SYMMEM4J_SECRET=multinode-dl4j-test-secret-of-enough-bytes-" + port,
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
                "--add-modules=jdk.incubator.vector", "--sun-misc-unsafe-memory-access=allow", "-Xss1m", "-Xmx512m"));
        cmd.addAll(ChildJvmFlags.get());
        cmd.addAll(List.of("-Dsymmem4j.pretend.ranks.per.node=" + perMachine, "-cp", System.getProperty("java.class.path"),
                MultiNodeDataParallelWorker.class.getName(), out.toString(), Integer.toString(BATCHES)));
        cmd.addAll(List.of(extra));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().remove("RANK"); // Open MPI's variables give each process its rank
        Process p = pb.start();
        String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), "mpirun ends");
        System.out.println(text);
        assertEquals(0, p.exitValue(), text);
        return text;
    }

    /** Every rank trained over the hierarchical communicator, and every rank's parameters are the same bits. */
    static void assertTrainedHierarchically(String text, int ranks) {
        java.util.Set<String> crcs = new java.util.HashSet<>();
        for (int r = 0; r < ranks; r++) {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("rank " + r
                    + " OK: trained on hierarchical\\(.*parameters CRC-32 ([0-9a-f]+)").matcher(text);
            assertTrue(m.find(), "rank " + r + " trained over the hierarchical communicator:\n" + text);
            crcs.add(m.group(1));
        }
        assertEquals(1, crcs.size(), "every rank's parameters bitwise equal (one CRC-32), found " + crcs + ":\n" + text);
    }

    /**
     * A dp x tp mesh on 2 machines of 2 ranks: tensor parallelism inside each machine, data parallelism across them
     * over the data-parallel sub-group's own MPI communicator; the gathered network equals data parallelism of the
     * unsharded network on 2 worker threads of one JVM to float32 rounding, and is the same bits on every rank.
     */
    @Test
    void dataParallelAcrossMachinesWithTensorParallelInsideTrainsLikeTwoWorkerThreads() throws Exception {
        requireMpi();
        Job job = job(4, 2, MultiNodeDataParallelWorker.DP_TP);
        String text = job.text();
        Path out = job.out();
        java.util.Set<String> crcs = new java.util.HashSet<>();
        for (int r = 0; r < 4; r++) {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("rank " + r
                    + " OK: dp over hierarchical\\(.*, tp over (?!hierarchical).*gathered parameters CRC-32 ([0-9a-f]+)")
                    .matcher(text);
            assertTrue(m.find(), "rank " + r + ": data parallelism across machines (hierarchical), tensor parallelism inside"
                    + " one:\n" + text);
            crcs.add(m.group(1));
        }
        assertEquals(1, crcs.size(), "every rank gathered the same bits, found " + crcs);
        MultiLayerNetwork threads = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        GroupModeTest.train(threads, SymmemParallelWrapper.builder(threads).workers(2),
                Nets.batches(7, BATCHES, 8, DataType.FLOAT), 2);
        INDArray gathered = Nd4j.readBinary(out.resolve("params.bin").toFile());
        double worst = 0;
        for (long i = 0; i < gathered.length(); i++) {
            double a = gathered.getDouble(i);
            double b = threads.params().getDouble(i);
            worst = Math.max(worst, Math.abs(a - b) / (1e-3 + Math.abs(b)));
        }
        System.out.println("dp across machines x tp inside: worst relative difference to 2 worker threads " + worst);
        assertTrue(worst <= 1e-4, "gathered parameters differ from data parallelism on 2 worker threads by " + worst);
    }

    /** ZeRO across machines: its in-place shard collectives go through the hierarchy (padded blocks). */
    @ParameterizedTest(name = "{0}")
    @EnumSource(value = ZeroStage.class, names = {"OPTIMIZER_STATE", "GRADIENTS"}) // stage 3 refuses multinode
    void zeroShardingOnTwoMachinesOfOneRankTrainsBitwiseLikeTwoWorkerThreads(ZeroStage stage) throws Exception {
        requireMpi();
        Job job = job(2, 1, stage.name());
        Path out = job.out();
        assertTrainedHierarchically(job.text(), 2);
        GroupModeTest.Outcome threads = threads(2, stage);
        assertTrue(ModelReplica.bitwiseEqual(threads.params(), Nd4j.readBinary(out.resolve("params.bin").toFile())),
                stage + ": parameters differ bitwise from 2 worker threads'");
        assertEquals(threads.scores(), scores(out), stage + ": every step's score, bitwise");
    }

    @Test
    void zeroShardingOnTwoMachinesOfTwoRanksTrainsLikeFourWorkerThreadsToRounding() throws Exception {
        requireMpi();
        Job job = job(4, 2, ZeroStage.GRADIENTS.name());
        Path out = job.out();
        assertTrainedHierarchically(job.text(), 4);
        GroupModeTest.Outcome threads = threads(4, ZeroStage.GRADIENTS);
        double relative = relativeDifference(out, threads);
        System.out.println("ZeRO-2, 2 machines x 2 ranks against 4 worker threads: relative L2 difference " + relative);
        assertTrue(relative < 1e-5, "parameters: relative L2 difference " + relative + " from 4 worker threads' (ZeRO-2)");
    }

    /**
     * Hybrid sharding across machines: stage 3 inside each machine (2 ranks, the host transport's sparse memory), the
     * blocks all-reduced between the machines over the replica sub-group's own MPI communicator. Against the same
     * HSDP on 4 worker threads of one JVM: the same sums (inside a shard group in rank order, then two replicas' sums,
     * whose one addition has one result in either order), so the parameters and updater state are the same bits.
     */
    @Test
    void hybridShardingWithAShardGroupPerMachineTrainsBitwiseLikeFourWorkerThreads() throws Exception {
        requireMpi();
        Job job = job(4, 2, MultiNodeDataParallelWorker.HSDP);
        Path out = job.out();
        assertTrainedHierarchically(job.text(), 4);
        MultiLayerNetwork model = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        GroupModeTest.Outcome threads = GroupModeTest.train(model, SymmemParallelWrapper.builder(model).workers(4)
                .sharding(ZeroStage.PARAMETERS).shardGroupSize(2), Nets.batches(7, BATCHES, 8, DataType.FLOAT), 2);
        INDArray params = Nd4j.readBinary(out.resolve("params.bin").toFile());
        INDArray updater = Nd4j.readBinary(out.resolve("updater.bin").toFile());
        System.out.println("HSDP, 2 machines x 2 ranks against 4 worker threads: relative L2 difference "
                + relativeDifference(out, threads));
        assertTrue(ModelReplica.bitwiseEqual(threads.params(), params), "parameters differ bitwise from 4 threads' HSDP");
        assertTrue(ModelReplica.bitwiseEqual(threads.updaterState(), updater), "updater state differs bitwise");
        List<Double> scores = scores(out);
        assertEquals(threads.scores().size(), scores.size(), "steps");
        for (int i = 0; i < scores.size(); i++) { // the loss is summed over the machines in the hierarchy's order
            assertEquals(threads.scores().get(i), scores.get(i), 1e-6 * Math.abs(threads.scores().get(i)), "step " + i);
        }
    }

    static GroupModeTest.Outcome threads(int workers) {
        return threads(workers, null);
    }

    static GroupModeTest.Outcome threads(int workers, ZeroStage sharding) {
        List<DataSet> data = Nets.batches(7, BATCHES, 8, DataType.FLOAT);
        MultiLayerNetwork model = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(model).workers(workers);
        if (sharding != null) {
            builder.sharding(sharding);
        }
        return GroupModeTest.train(model, builder, data, 2);
    }

    /** The relative L2 difference of rank 0's parameters (written into {@code out}) from the threads'. */
    static double relativeDifference(Path out, GroupModeTest.Outcome threads) throws IOException {
        INDArray params = Nd4j.readBinary(out.resolve("params.bin").toFile());
        return params.sub(threads.params()).norm2Number().doubleValue() / threads.params().norm2Number().doubleValue();
    }

    static List<Double> scores(Path out) throws IOException {
        List<Double> scores = new ArrayList<>();
        for (String line : Files.readAllLines(out.resolve("scores.txt"))) {
            scores.add(Double.longBitsToDouble(Long.parseLong(line.strip())));
        }
        return scores;
    }

    @Test
    void twoMachinesOfOneRankTrainBitwiseLikeTwoWorkerThreads() throws Exception {
        requireMpi();
        Job job = job(2, 1, MultiNodeDataParallelWorker.PLAIN);
        Path out = job.out();
        assertTrainedHierarchically(job.text(), 2);
        GroupModeTest.Outcome threads = threads(2);
        INDArray params = Nd4j.readBinary(out.resolve("params.bin").toFile());
        INDArray updater = Nd4j.readBinary(out.resolve("updater.bin").toFile());
        assertTrue(ModelReplica.bitwiseEqual(threads.params(), params), "parameters differ bitwise from 2 worker threads'");
        assertTrue(ModelReplica.bitwiseEqual(threads.updaterState(), updater), "updater state differs bitwise");
        assertEquals(threads.scores(), scores(out), "every step's score, bitwise");
    }

    @Test
    void twoMachinesOfTwoRanksTrainLikeFourWorkerThreadsToRounding() throws Exception {
        requireMpi();
        Job job = job(4, 2, MultiNodeDataParallelWorker.PLAIN);
        Path out = job.out();
        assertTrainedHierarchically(job.text(), 4);
        GroupModeTest.Outcome threads = threads(4);
        double relative = relativeDifference(out, threads);
        System.out.println("2 machines x 2 ranks against 4 worker threads: parameters' relative L2 difference " + relative);
        assertTrue(relative < 1e-5, "parameters after " + threads.scores().size() + " steps: relative L2 difference "
                + relative + " from 4 worker threads', expected float32 rounding (< 1e-5)");
        List<Double> scores = scores(out);
        assertEquals(threads.scores().size(), scores.size(), "steps");
        for (int i = 0; i < scores.size(); i++) {
            assertEquals(threads.scores().get(i), scores.get(i), 1e-5 * Math.abs(threads.scores().get(i)), "step " + i + "'s score");
        }
    }
}
