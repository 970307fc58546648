package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.symmem4j.benchmarks.ChildJvms.RankFailure;
import org.symmem4j.benchmarks.ProcessAllReduceReport.Comparison;
import org.symmem4j.benchmarks.ProcessAllReduceReport.ReportHeader;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * GPU all-reduce with one process per GPU against one JVM with one rank thread per GPU, the same
 * measurements in the same run: is a job of one JVM per GPU (as {@code symmem4j-run} starts it) as fast
 * as one JVM driving every GPU? The target is processes within 5 % of threads at every size.
 *
 * <ul>
 *   <li>{@code processes}: this program starts N JVMs of itself (the same {@code java}, class path and JVM
 *       flags) with torchrun's variables ({@code RANK}, {@code LOCAL_RANK}, {@code WORLD_SIZE},
 *       {@code LOCAL_WORLD_SIZE}, {@code MASTER_ADDR=127.0.0.1}, a free {@code MASTER_PORT}), a fresh
 *       {@code SYMMEM4J_RUN_ID} and a private store secret ({@code SYMMEM4J_SECRET_FILE}, mode 0600); each
 *       joins a {@link ProcessGroup} on the CUDA transport (GPU {@code LOCAL_RANK}, memory exported between
 *       the processes), measures, and sends its timings to rank 0 through the group, whose JVM writes them
 *       to a file this one reads. Their output reaches this program's stdout, each line prefixed with its
 *       rank; a rank that fails, or any still running after {@code --timeout}, stops them all and fails the
 *       run, naming the rank and its exit status.</li>
 *   <li>{@code threads}: after those JVMs exited (the GPUs are free), one JVM of N rank threads
 *       ({@link InJvmWorld#runOnEveryRank}), as {@link GpuAllReduceBench} measures; started like the processes
 *       (same {@code java}, class path and flags, supervised alike), so that both phases start from a fresh
 *       JVM and this one never holds a GPU context while the rank processes run.</li>
 * </ul>
 *
 * <p>Both measure alike, with {@link GpuAllReduceBench}'s timing: in-place SUM on random data of
 * 1 KiB … {@code --max-bytes} (powers of 4), bf16 and fp32, with every algorithm of ONE_SHOT, TWO_SHOT and
 * NCCL that the communicator supports there (NCCL skipped with a note where it does not load); a batch of
 * calls captured once into a CUDA graph and replayed (and with {@code --modes graph,eager}, one call per op
 * too), timed with CUDA events on rank 0's stream after a barrier; medians of the repetitions. With
 * {@code --rounds} above 1 the two phases run again in the other order and the repetitions are pooled.
 * {@code --raw} writes one CSV row per dtype, mode, algorithm and size. {@link ChildJvms} starts and supervises
 * the child JVMs, {@link ProcessAllReduceReport} compares the phases and writes the report.
 *
 * <pre>
 *   GpuProcessAllReduceBench [--gpus N] [--reps R] [--rounds K] [--max-bytes B] [--dtypes bf16,fp32]
 *                            [--modes graph[,eager]] [--timeout S] [--out report.md] [--raw report.csv]
 *                            [--commit C]
 * </pre>
 */
public final class GpuProcessAllReduceBench {

    /** The algorithms compared, each where the communicator supports it. */
    static final List<Algorithm> ALGORITHMS = List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL);
    /** Exit status of a child JVM that failed (its reason is printed before). */
    static final int CHILD_FAILED = 3;
    /** First line of the result file rank 0's JVM writes. */
    static final String RESULT_MAGIC = "symmem4j-gpu-process-allreduce 1";

    private GpuProcessAllReduceBench() {
    }

    // ------------------------------------------------------------------ options

    @Command(name = "GpuProcessAllReduceBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "GPU all-reduce with one process per GPU against one JVM with one"
                    + " rank thread per GPU, same sizes and algorithms, same run (target: processes within 5 %%).")
    static final class Flags {
        @Option(names = "--gpus", paramLabel = "N", description = "GPUs, one rank each (0: every GPU CUDA shows; at"
                + " least 2; the first N, as CUDA_VISIBLE_DEVICES orders them)")
        int gpus;
        @Option(names = "--share-gpus", description = "let the --gpus N ranks share the GPUs CUDA shows (rank r on GPU r mod"
                + " GPUs; one GPU is enough): correctness and the latency range of processes against threads sharing a GPU,"
                + " not speed; NCCL refuses shared GPUs and is skipped")
        boolean shareGpus;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell and round (the median"
                + " of all rounds' is reported)")
        int reps = 15;
        @Option(names = "--rounds", paramLabel = "K", description = "rounds of both phases, the order alternating"
                + " (processes first in odd rounds, threads first in even ones), repetitions pooled")
        int rounds = 2;
        @Option(names = "--max-bytes", paramLabel = "B", description = "largest message in bytes")
        long maxBytes = 256L << 20;
        @Option(names = "--dtypes", paramLabel = "T", split = ",", description = "element types: bf16, fp32")
        List<String> dtypes = new ArrayList<>(List.of("bf16", "fp32"));
        @Option(names = "--modes", paramLabel = "M", split = ",", description = "graph (a batch captured into a CUDA"
                + " graph and replayed) and/or eager (one call per op)")
        List<String> modes = new ArrayList<>(List.of("graph"));
        @Option(names = "--timeout", paramLabel = "S", description = "seconds the JVMs of one phase and round (the rank"
                + " processes, or the threads' JVM) may take; one still running then fails the run (the group's own"
                + " waits time out after half of it)")
        int timeoutSeconds = 240;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write every number of the report's tables"
                + " as CSV to FILE (appended under the same header)")
        Path raw;
        @Option(names = "--commit", paramLabel = "C", description = "the commit measured, for the report (default:"
                + " git rev-parse HEAD where git works here)")
        String commit;
        @Option(names = "--child", hidden = true, paramLabel = "rank|threads", description = "internal: be one rank"
                + " process (rank), or the JVM of every rank's thread (threads)")
        String child;
        @Option(names = "--result", hidden = true, paramLabel = "FILE", description = "internal: where the child (rank"
                + " 0's process, or the threads' JVM) writes every rank's timings")
        Path result;
    }

    /**
     * What one run measures, from the flags.
     *
     * @param gpus           ranks (0: every GPU)
     * @param reps           repetitions per cell and round
     * @param rounds         rounds of both phases
     * @param maxBytes       largest message
     * @param dtypes         element types, in measurement order
     * @param eager          whether one call per op is timed
     * @param graph          whether graph replays are timed
     * @param timeoutSeconds limit of one phase's JVMs in one round
     */
    record Settings(int gpus, int reps, int rounds, long maxBytes, List<DType> dtypes, boolean eager, boolean graph,
                    int timeoutSeconds) {

        Settings {
            dtypes = List.copyOf(dtypes);
        }

        /** The checked settings of {@code f}; an {@link IllegalArgumentException} names the bad flag. */
        static Settings of(Flags f) {
            Cli.positive("--reps", f.reps);
            Cli.positive("--rounds", f.rounds);
            Cli.positive("--timeout", f.timeoutSeconds);
            if (f.gpus != 0 && f.gpus < 2) {
                throw new IllegalArgumentException("--gpus=" + f.gpus + " expected 0 (every GPU) or >= 2 (one process"
                        + " per GPU needs at least two)");
            }
            if (f.maxBytes < 1024) {
                throw new IllegalArgumentException("--max-bytes=" + f.maxBytes + " expected >= 1024");
            }
            List<DType> dtypes = new ArrayList<>();
            for (String d : f.dtypes) {
                DType t = switch (d.trim().toLowerCase(Locale.ROOT)) {
                    case "bf16", "bfloat16" -> DType.BFLOAT16;
                    case "fp32", "float32" -> DType.FLOAT32;
                    default -> throw new IllegalArgumentException("--dtypes: '" + d + "' expected bf16 or fp32");
                };
                if (!dtypes.contains(t)) {
                    dtypes.add(t);
                }
            }
            boolean eager = false;
            boolean graph = false;
            for (String m : f.modes) {
                switch (m.trim().toLowerCase(Locale.ROOT)) {
                    case "graph" -> graph = true;
                    case "eager" -> eager = true;
                    default -> throw new IllegalArgumentException("--modes: '" + m + "' expected graph or eager");
                }
            }
            if (dtypes.isEmpty() || !(eager || graph)) {
                throw new IllegalArgumentException("--dtypes and --modes expected at least one value each");
            }
            return new Settings(f.gpus, f.reps, f.rounds, f.maxBytes, dtypes, eager, graph, f.timeoutSeconds);
        }

        /** The message sizes measured: {@link Sizes#ALL} up to {@link #maxBytes}. */
        long[] sizes() {
            return Arrays.stream(Sizes.ALL).filter(b -> b <= maxBytes).toArray();
        }

        /** The modes measured, in measurement order: eager (false) before graph (true), as GpuAllReduceBench. */
        List<Boolean> modes() {
            List<Boolean> m = new ArrayList<>();
            if (eager) {
                m.add(false);
            }
            if (graph) {
                m.add(true);
            }
            return m;
        }

        /** Group options of both phases alike: waits time out after half of {@code --timeout} (at least 10 s). */
        GroupOptions groupOptions() {
            return GroupOptions.defaults().withTimeout(Duration.ofSeconds(Math.max(10, timeoutSeconds / 2)));
        }

        /**
         * The arguments that make a child JVM measure these settings on {@code gpuCount} GPUs, writing to
         * {@code result}: as one rank process ({@code rank}) or as the JVM of every rank's thread ({@code threads}).
         */
        List<String> childArgs(String child, int gpuCount, Path result) {
            List<String> a = new ArrayList<>(List.of("--child", child, "--result", result.toString(), "--gpus",
                    Integer.toString(gpuCount), "--reps", Integer.toString(reps), "--rounds", "1", "--max-bytes",
                    Long.toString(maxBytes), "--timeout", Integer.toString(timeoutSeconds), "--dtypes"));
            a.add(String.join(",", dtypes.stream().map(d -> d.name().toLowerCase(Locale.ROOT)).toList()));
            a.add("--modes");
            a.add(String.join(",", modes().stream().map(g -> g ? "graph" : "eager").toList()));
            return a;
        }
    }

    // ------------------------------------------------------------------ measured values

    /**
     * One rank's repetitions (microseconds per op each) of one dtype, algorithm, mode and size; none where
     * the algorithm does not run there.
     */
    record Cell(DType dtype, Algorithm algorithm, boolean graph, long bytes, double[] repetitions) {

        /** Whether the cell was measured. */
        boolean ran() {
            return repetitions.length > 0;
        }

        /** The median repetition ({@link RepetitionSpread#median}); NaN where the cell did not run. */
        double micros() {
            return ran() ? RepetitionSpread.median(repetitions) : Double.NaN;
        }

        /** IQR / median of the repetitions; NaN where the cell did not run. */
        double spread() {
            return ran() ? RepetitionSpread.spread(repetitions) : Double.NaN;
        }

        String key() {
            return key(dtype, algorithm, graph, bytes);
        }

        static String key(DType dtype, Algorithm algorithm, boolean graph, long bytes) {
            return dtype + "|" + algorithm + "|" + graph + "|" + bytes;
        }
    }

    /** What one rank of one phase measured, and what its GPU and communicator are. */
    record RankRun(String device, String launch, boolean nccl, List<Cell> cells) {
    }

    /**
     * One phase (processes or threads), every rank's cells, pooled over the rounds.
     *
     * @param device      rank 0's GPU
     * @param launch      how rank 0 launched symmem4j's kernels
     * @param nccl        whether every round's communicator supported NCCL
     * @param perRank     each rank's cells, by rank
     * @param wallSeconds wall time of the phase (all rounds; for the processes JVM start and set-up included)
     */
    record Phase(String device, String launch, boolean nccl, List<List<Cell>> perRank, double wallSeconds) {

        Phase {
            perRank = perRank.stream().map(List::copyOf).toList();
        }

        /** Rank 0's cell of a key, or null. */
        Cell rank0(String key) {
            return perRank.getFirst().stream().filter(c -> c.key().equals(key)).findFirst().orElse(null);
        }

        /** The largest median of any rank for a key; NaN where no rank ran it. */
        double slowestRank(String key) {
            double worst = Double.NaN;
            for (List<Cell> cells : perRank) {
                for (Cell c : cells) {
                    if (c.key().equals(key) && c.ran()) {
                        worst = Double.isNaN(worst) ? c.micros() : Math.max(worst, c.micros());
                    }
                }
            }
            return worst;
        }

        /** Rounds of one phase as one: each rank's repetitions of each cell concatenated, in round order. */
        static Phase pool(List<Phase> rounds) {
            Phase first = rounds.getFirst();
            List<List<Cell>> perRank = new ArrayList<>();
            for (int r = 0; r < first.perRank().size(); r++) {
                Map<String, Cell> pooled = new LinkedHashMap<>();
                for (Phase p : rounds) {
                    if (p.perRank().size() != first.perRank().size()) {
                        throw new IllegalStateException("rounds of " + first.perRank().size() + " and "
                                + p.perRank().size() + " ranks cannot be pooled");
                    }
                    for (Cell c : p.perRank().get(r)) {
                        pooled.merge(c.key(), c, (a, b) -> new Cell(a.dtype(), a.algorithm(), a.graph(), a.bytes(),
                                concat(a.repetitions(), b.repetitions())));
                    }
                }
                perRank.add(new ArrayList<>(pooled.values()));
            }
            return new Phase(first.device(), first.launch(), rounds.stream().allMatch(Phase::nccl), perRank,
                    rounds.stream().mapToDouble(Phase::wallSeconds).sum());
        }

        private static double[] concat(double[] a, double[] b) {
            double[] c = Arrays.copyOf(a, a.length + b.length);
            System.arraycopy(b, 0, c, a.length, b.length);
            return c;
        }
    }

    // ------------------------------------------------------------------ main

    /**
     * Runs the benchmark: the rank processes, then the rank threads, then the report (see the class comment).
     * Exits 0 after the report, 1 when the machine has fewer than 2 GPUs, no CUDA, or a rank process failed or
     * hung, 2 for a bad option.
     *
     * @param args the options; {@code --help} lists them
     * @throws Exception when the report cannot be written
     */
    public static void main(String[] args) throws Exception {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Settings.of(f);
            if (f.child != null && (!List.of("rank", "threads").contains(f.child) || f.result == null
                    || (f.child.equals("threads") && f.gpus < 2))) {
                throw new IllegalArgumentException("--child=" + f.child + " expected rank or threads, with --result FILE"
                        + " (and --gpus N for threads)");
            }
            return f;
        });
        Settings settings = Settings.of(flags);
        if (flags.child != null) {
            int status;
            try {
                if (flags.child.equals("rank")) {
                    rankChild(settings, flags.result);
                } else {
                    threadsChild(settings, flags.gpus, flags.result);
                }
                status = 0;
            } catch (Throwable t) {
                System.out.println("FAILED " + t);
                t.printStackTrace(System.out);
                status = CHILD_FAILED;
            }
            System.out.flush();
            System.exit(status); // the transport's and the store's threads would keep the JVM
        }
        System.exit(parent(settings, flags));
    }

    // ------------------------------------------------------------------ the children

    /** One rank process: joins the group from torchrun's variables; rank 0 writes every rank's cells. */
    private static void rankChild(Settings s, Path result) throws IOException {
        try (CudaTransport cuda = CudaTransport.create();
             ProcessGroup group = ProcessGroup.fromEnvironment(s.groupOptions(), cuda)) {
            int rank = group.rank();
            try {
                System.out.println("rank=" + rank + " pid=" + ProcessHandle.current().pid() + " on " + cuda.describe(group));
                RankRun run = measure(group, cuda, s, "processes", System.out::println);
                List<byte[]> all = group.allGatherBytes("gpu-process-allreduce-cells",
                        encodeCells(rank, run.cells()).getBytes(StandardCharsets.UTF_8));
                if (rank == 0) {
                    writeResult(result, encodeResult(run, all.stream().map(b -> new String(b, StandardCharsets.UTF_8))
                            .toList()));
                }
            } catch (Throwable t) {
                failFast("rank=" + rank, t);
            }
            cuda.release(group);
            System.out.println("rank=" + rank + " done");
        }
    }

    /** The JVM of every rank's thread, as {@link GpuAllReduceBench}: writes every rank's cells. */
    private static void threadsChild(Settings s, int n, Path result) throws IOException {
        try (CudaTransport cuda = CudaTransport.create()) {
            List<RankRun> runs = InJvmWorld.runOnEveryRank(n, s.groupOptions(), cuda, group -> {
                try {
                    if (group.rank() == 0) {
                        System.out.println(n + " rank threads, pid=" + ProcessHandle.current().pid() + "; rank 0 on "
                                + cuda.describe(group));
                    }
                    return measure(group, cuda, s, "threads", System.out::println);
                } catch (Throwable t) {
                    failFast("rank=" + group.rank() + " (a thread)", t);
                    throw t;
                } finally {
                    cuda.release(group);
                }
            });
            List<String> blocks = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                blocks.add(encodeCells(r, runs.get(r).cells()));
            }
            RankRun r0 = runs.getFirst();
            writeResult(result, encodeResult(new RankRun(r0.device(), r0.launch(), runs.stream().allMatch(RankRun::nccl),
                    r0.cells()), blocks));
            System.out.println("threads done");
        }
    }

    /**
     * Prints why this child failed and exits with {@link #CHILD_FAILED} at once: closing the group would wait for
     * peers stuck in a collective that this rank never joins, while the parent stops every child as soon as the
     * first one exits non-zero.
     */
    private static void failFast(String who, Throwable t) {
        System.out.println("FAILED " + who + ": " + t);
        t.printStackTrace(System.out);
        System.out.flush();
        System.exit(CHILD_FAILED);
    }

    private static void writeResult(Path result, String text) throws IOException {
        Path tmp = result.resolveSibling(result.getFileName() + ".tmp");
        Files.writeString(tmp, text);
        Files.move(tmp, result, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    // ------------------------------------------------------------------ the measurement, for both phases

    /**
     * Collective over {@code group}: every cell of the settings on this rank, rank 0 printing one line per
     * size through {@code log}.
     */
    static RankRun measure(Group group, CudaTransport cuda, Settings s, String phase, Consumer<String> log) {
        List<Cell> cells = new ArrayList<>();
        long maxBytes = s.maxBytes();
        boolean first = group.rank() == 0;
        try (Communicator comm = Communicator.create(group);
             SymmetricMemory mem = SymmetricMemory.allocate(group, maxBytes)) {
            DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow(() -> new IllegalStateException(
                    "communicator on transport=" + comm.transportName() + " has no DeviceCommunicator (expected cuda)"));
            String launch = cuda.programmaticLaunch(group) ? "programmatic dependent launch (PDL)"
                    : "plain (no PDL: before sm_90, or -Dsymmem4j.cuda.pdl=false)";
            boolean nccl = comm.supports(Algorithm.NCCL);
            GpuAllReduceBench.fillRandom(mem, maxBytes, group.rank());
            // JIT warm-up of the call paths (capture goes through them too): the first sizes measure compiled code
            int warmup = s.eager() ? 5_000 : 1_000;
            for (int i = 0; i < warmup; i++) {
                comm.allReduce(mem, 0, 512, DType.BFLOAT16, ReduceOp.SUM, i % 2 == 0 ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT);
                if (nccl) {
                    comm.allReduce(mem, 0, 512, DType.BFLOAT16, ReduceOp.SUM, Algorithm.NCCL);
                }
            }
            gpu.synchronize();
            for (DType dtype : s.dtypes()) {
                for (long bytes : s.sizes()) {
                    long count = bytes / dtype.byteSize();
                    StringBuilder line = new StringBuilder(phase + " " + ProcessAllReduceReport.dtypeName(dtype) + " "
                            + GpuAllReduceBench.size(bytes) + ":");
                    for (Algorithm algorithm : ALGORITHMS) {
                        boolean runs = comm.supports(algorithm, dtype, ReduceOp.SUM, count);
                        Runnable op = () -> comm.allReduce(mem, 0, count, dtype, ReduceOp.SUM, algorithm);
                        for (boolean graph : s.modes()) {
                            Cell c = new Cell(dtype, algorithm, graph, bytes, runs
                                    ? GpuAllReduceBench.time(comm, gpu, op, bytes, graph, s.reps()) : new double[0]);
                            cells.add(c);
                            line.append(' ').append(algorithm).append(' ').append(graph ? "graph " : "eager ")
                                    .append(runs ? String.format(Locale.ROOT, "%.2f us", c.micros()) : "n/a");
                        }
                    }
                    if (first) {
                        log.accept(line.toString());
                    }
                }
            }
            gpu.synchronize();
            return new RankRun(gpu.deviceName(), launch, nccl, cells);
        }
    }


    // ------------------------------------------------------------------ the result file of the rank processes

    /** One rank's cells as lines: {@code cell<TAB>rank<TAB>dtype<TAB>algorithm<TAB>graph|eager<TAB>bytes<TAB>reps}. */
    static String encodeCells(int rank, List<Cell> cells) {
        StringBuilder b = new StringBuilder();
        for (Cell c : cells) {
            b.append("cell\t").append(rank).append('\t').append(c.dtype()).append('\t').append(c.algorithm()).append('\t')
                    .append(c.graph() ? "graph" : "eager").append('\t').append(c.bytes()).append('\t');
            for (int i = 0; i < c.repetitions().length; i++) {
                b.append(i == 0 ? "" : ",").append(c.repetitions()[i]);
            }
            b.append('\n');
        }
        return b.toString();
    }

    /** The result file: rank 0's GPU, launch mode and NCCL support, then every rank's cells. */
    static String encodeResult(RankRun rank0, List<String> cellBlocks) {
        return RESULT_MAGIC + "\nranks\t" + cellBlocks.size() + "\ndevice\t" + oneLine(rank0.device()) + "\nlaunch\t"
                + oneLine(rank0.launch()) + "\nnccl\t" + rank0.nccl() + "\n" + String.join("", cellBlocks);
    }

    /**
     * Reads a result file written by {@link #encodeResult}.
     *
     * @throws IllegalArgumentException naming the line where the text is not such a file
     */
    static Phase parseResult(String text, double wallSeconds) {
        String[] lines = text.split("\n");
        if (lines.length < 5 || !lines[0].equals(RESULT_MAGIC)) {
            throw new IllegalArgumentException("result file: first line=" + (lines.length == 0 ? "" : lines[0])
                    + " expected=" + RESULT_MAGIC + " and 4 header lines");
        }
        int ranks = Integer.parseInt(field(lines, 1, "ranks"));
        String device = field(lines, 2, "device");
        String launch = field(lines, 3, "launch");
        boolean nccl = Boolean.parseBoolean(field(lines, 4, "nccl"));
        List<List<Cell>> perRank = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            perRank.add(new ArrayList<>());
        }
        for (int i = 5; i < lines.length; i++) {
            String[] f = lines[i].split("\t", -1);
            if (f.length != 7 || !f[0].equals("cell")) {
                throw new IllegalArgumentException("result file line=" + (i + 1) + ": '" + lines[i] + "' expected"
                        + " cell<TAB>rank<TAB>dtype<TAB>algorithm<TAB>graph|eager<TAB>bytes<TAB>repetitions");
            }
            int rank = Integer.parseInt(f[1]);
            if (rank < 0 || rank >= ranks) {
                throw new IllegalArgumentException("result file line=" + (i + 1) + ": rank=" + rank + " outside [0, "
                        + ranks + ")");
            }
            double[] reps = f[6].isEmpty() ? new double[0]
                    : Arrays.stream(f[6].split(",")).mapToDouble(Double::parseDouble).toArray();
            perRank.get(rank).add(new Cell(DType.valueOf(f[2]), Algorithm.parse(f[3]), f[4].equals("graph"),
                    Long.parseLong(f[5]), reps));
        }
        return new Phase(device, launch, nccl, perRank, wallSeconds);
    }

    private static String field(String[] lines, int i, String name) {
        if (!lines[i].startsWith(name + "\t")) {
            throw new IllegalArgumentException("result file line=" + (i + 1) + ": '" + lines[i] + "' expected " + name
                    + "<TAB>value");
        }
        return lines[i].substring(name.length() + 1);
    }

    private static String oneLine(String s) {
        return s.replaceAll("[\\t\\r\\n]", " ");
    }

    // ------------------------------------------------------------------ the parent: both phases and the report

    private static int parent(Settings s, Flags flags) throws IOException, InterruptedException {
        int devices;
        String versions;
        try (CudaTransport cuda = CudaTransport.create()) { // the driver only: no context in this JVM
            devices = cuda.deviceCount();
            versions = cuda.runtimeVersions();
        } catch (RuntimeException e) {
            System.err.println("GpuProcessAllReduceBench: no CUDA here: " + e.getMessage() + " (expected a machine with"
                    + " at least 2 GPUs)");
            return 1;
        }
        if (devices < 2 && !flags.shareGpus) {
            System.err.println("GpuProcessAllReduceBench needs at least 2 GPUs (one rank per GPU): found devices="
                    + devices + " (CUDA_VISIBLE_DEVICES=" + System.getenv().getOrDefault("CUDA_VISIBLE_DEVICES", "unset")
                    + "); fix: run it on a machine with 2 or more GPUs, or make them visible, or --share-gpus --gpus 2");
            return 1;
        }
        int n = s.gpus() == 0 ? Math.max(devices, flags.shareGpus ? 2 : 0) : s.gpus();
        if (n > devices && !flags.shareGpus) {
            System.err.println("GpuProcessAllReduceBench: --gpus=" + n + " but CUDA shows devices=" + devices
                    + " (ranks would share GPUs: timings meaningless); fix: --gpus " + devices + " or fewer, or --share-gpus"
                    + " to compare processes and threads sharing GPUs");
            return Cli.USAGE_ERROR;
        }
        List<String> jvmFlags = ChildJvms.childJvmFlags(ManagementFactory.getRuntimeMXBean().getInputArguments());
        Path work = Files.createTempDirectory("symmem4j-gpu-process-allreduce-"); // mode 0700
        List<Phase> processRounds = new ArrayList<>();
        List<Phase> threadRounds = new ArrayList<>();
        List<String> order = new ArrayList<>();
        try {
            Path secret = ChildJvms.writeSecret(work.resolve("store.secret"));
            for (int round = 1; round <= s.rounds(); round++) {
                boolean processesFirst = round % 2 == 1;
                order.add(processesFirst ? "processes, threads" : "threads, processes");
                for (boolean processes : processesFirst ? new boolean[] {true, false} : new boolean[] {false, true}) {
                    System.out.println("---- round " + round + " of " + s.rounds() + ": " + n + " "
                            + (processes ? "processes" : "threads of one JVM"));
                    Phase p = runPhase(processes, s, n, round, work, secret, jvmFlags);
                    (processes ? processRounds : threadRounds).add(p);
                }
            }
        } catch (RankFailure e) {
            System.err.println("GpuProcessAllReduceBench failed: " + e.getMessage());
            return 1;
        } finally {
            ChildJvms.deleteTree(work);
        }
        Phase processes = Phase.pool(processRounds);
        Phase threads = Phase.pool(threadRounds);
        List<Comparison> comparisons = ProcessAllReduceReport.compare(s, processes, threads);
        ReportHeader header = new ReportHeader(Instant.now().toString(), n, devices, commit(flags.commit), versions,
                jvmFlags, order);
        String report = ProcessAllReduceReport.report(header, s, processes, threads, comparisons);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
        if (flags.raw != null) {
            ProcessAllReduceReport.writeRaw(flags.raw, s, n, processes.device(), comparisons);
        }
        return 0;
    }

    /**
     * One round of one phase, in fresh JVMs of this program ({@link ChildJvms}): N rank processes with torchrun's
     * variables, or one JVM of N rank threads; the result file read back.
     */
    private static Phase runPhase(boolean processes, Settings s, int n, int round, Path work, Path secret,
                                  List<String> jvmFlags) throws IOException, InterruptedException {
        long t0 = System.nanoTime();
        Path result = work.resolve((processes ? "processes" : "threads") + "-round" + round + ".txt");
        List<String> command = ChildJvms.javaCommand(jvmFlags, GpuProcessAllReduceBench.class,
                s.childArgs(processes ? "rank" : "threads", n, result));
        Duration limit = Duration.ofSeconds(s.timeoutSeconds());
        if (processes) {
            String runId = "gpu-process-allreduce-" + ProcessHandle.current().pid() + "-" + round + "-" + System.nanoTime();
            ChildJvms.runRanks(command, n, runId, secret, limit);
        } else {
            ChildJvms.runOne(command, "threads", limit);
        }
        if (!Files.exists(result)) {
            throw new RankFailure("every " + (processes ? "rank process" : "threads JVM") + " exited 0, but no result"
                    + " file=" + result + " was written (expected it before the exit)");
        }
        return parseResult(Files.readString(result), (System.nanoTime() - t0) / 1e9);
    }

    /** {@code --commit}, else {@code git rev-parse HEAD} here (marked where the tree has changes), else a pointer. */
    private static String commit(String given) {
        if (given != null && !given.isBlank()) {
            return given;
        }
        String head = git("rev-parse", "--short=12", "HEAD");
        if (head == null || head.isBlank()) {
            return "see the results file (git rev-parse is unavailable here)";
        }
        String changes = git("status", "--porcelain", "--untracked-files=no");
        return head.strip() + (changes != null && !changes.isBlank() ? " with uncommitted changes" : "");
    }

    private static String git(String... args) {
        try {
            List<String> cmd = new ArrayList<>(List.of("git"));
            cmd.addAll(List.of(args));
            Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
            String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return null;
            }
            return p.exitValue() == 0 ? text : null;
        } catch (IOException e) {
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }
}
