package org.symmem4j.benchmarks;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
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
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.rendezvous.StoreSecret;
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
 * {@code --raw} writes one CSV row per dtype, mode, algorithm and size.
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
    /** The target: processes' time over threads' time at most this at every size. */
    static final double TARGET_RATIO = 1.05;
    /** Exit status of a child JVM that failed (its reason is printed before). */
    static final int CHILD_FAILED = 3;
    /** First line of the result file rank 0's JVM writes. */
    static final String RESULT_MAGIC = "symmem4j-gpu-process-allreduce 1";
    /** JVM flags every child gets, whether or not this JVM was started with them. */
    static final List<String> REQUIRED_JVM_FLAGS = List.of("--enable-native-access=ALL-UNNAMED",
            "--add-modules=jdk.incubator.vector");
    /** The columns of {@code --raw}. */
    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "dtype", "algorithm", "mode", "bytes",
            "processes_us", "threads_us", "processes_over_threads", "processes_spread", "threads_spread",
            "processes_slowest_rank_us", "threads_slowest_rank_us", "reps", "rounds");

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

    /**
     * One row of the report: rank 0's cells of both phases at one dtype, algorithm, mode and size (null where a
     * phase has none), and the slowest rank's median of each.
     */
    record Comparison(DType dtype, Algorithm algorithm, boolean graph, long bytes, Cell processes, Cell threads,
                      double processesSlowest, double threadsSlowest) {

        double processesMicros() {
            return processes == null ? Double.NaN : processes.micros();
        }

        double threadsMicros() {
            return threads == null ? Double.NaN : threads.micros();
        }

        /** processes / threads, rank 0's medians; NaN unless both ran. */
        double ratio() {
            return processesMicros() / threadsMicros();
        }
    }

    /**
     * The ratios of a set of comparisons: the largest (and where), the median, and how many exceed the target.
     *
     * @param cells  comparisons with a ratio (both phases ran)
     * @param worst  the comparison of the largest ratio, null with no cells
     * @param median the median ratio (of an even count, the mean of the middle two), NaN with no cells
     * @param above  how many ratios exceed {@link #TARGET_RATIO}
     */
    record Summary(int cells, Comparison worst, double median, int above) {

        static Summary of(List<Comparison> comparisons) {
            List<Comparison> with = comparisons.stream().filter(c -> !Double.isNaN(c.ratio())).toList();
            if (with.isEmpty()) {
                return new Summary(0, null, Double.NaN, 0);
            }
            Comparison worst = with.getFirst();
            for (Comparison c : with) {
                if (c.ratio() > worst.ratio()) {
                    worst = c;
                }
            }
            double[] r = with.stream().mapToDouble(Comparison::ratio).sorted().toArray();
            double median = r.length % 2 == 1 ? r[r.length / 2] : (r[r.length / 2 - 1] + r[r.length / 2]) / 2;
            int above = (int) with.stream().filter(c -> c.ratio() > TARGET_RATIO).count();
            return new Summary(with.size(), worst, median, above);
        }

        /** The largest ratio; NaN with no cells. */
        double largest() {
            return worst == null ? Double.NaN : worst.ratio();
        }

        /** Where the largest ratio is, e.g. {@code bf16 graph-captured 4 KiB}; a dash with no cells. */
        String largestAt() {
            return worst == null ? "—" : dtypeName(worst.dtype()) + " " + modeName(worst.graph()) + " "
                    + GpuAllReduceBench.size(worst.bytes());
        }

        String verdict() {
            if (cells == 0) {
                return "not measured";
            }
            return above == 0 ? "within 5 %" : "not within 5 %: " + above + " of " + cells + " cells above "
                    + TARGET_RATIO;
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
                    StringBuilder line = new StringBuilder(phase + " " + dtypeName(dtype) + " "
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
            perRank.get(rank).add(new Cell(DType.valueOf(f[2]), Algorithm.valueOf(f[3]), f[4].equals("graph"),
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
        if (devices < 2) {
            System.err.println("GpuProcessAllReduceBench needs at least 2 GPUs (one rank per GPU): found devices="
                    + devices + " (CUDA_VISIBLE_DEVICES=" + System.getenv().getOrDefault("CUDA_VISIBLE_DEVICES", "unset")
                    + "); fix: run it on a machine with 2 or more GPUs, or make them visible");
            return 1;
        }
        int n = s.gpus() == 0 ? devices : s.gpus();
        if (n > devices) {
            System.err.println("GpuProcessAllReduceBench: --gpus=" + n + " but CUDA shows devices=" + devices
                    + " (ranks would share GPUs: timings meaningless); fix: --gpus " + devices + " or fewer");
            return Cli.USAGE_ERROR;
        }
        List<String> jvmFlags = childJvmFlags(ManagementFactory.getRuntimeMXBean().getInputArguments());
        Path work = Files.createTempDirectory("symmem4j-gpu-process-allreduce-"); // mode 0700
        List<Phase> processRounds = new ArrayList<>();
        List<Phase> threadRounds = new ArrayList<>();
        List<String> order = new ArrayList<>();
        try {
            Path secret = writeSecret(work.resolve("store.secret"));
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
            deleteTree(work);
        }
        Phase processes = Phase.pool(processRounds);
        Phase threads = Phase.pool(threadRounds);
        List<Comparison> comparisons = compare(s, processes, threads);
        ReportHeader header = new ReportHeader(Instant.now().toString(), n, devices, commit(flags.commit), versions,
                jvmFlags, order);
        String report = report(header, s, processes, threads, comparisons);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
        if (flags.raw != null) {
            writeRaw(flags.raw, s, n, processes.device(), comparisons);
        }
        return 0;
    }

    /** A child JVM that failed or hung: the message names it and its exit status. */
    static final class RankFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        RankFailure(String message) {
            super(message);
        }
    }

    /**
     * One round of one phase, in fresh JVMs of this program (the same {@code java}, class path and flags):
     * N rank processes with torchrun's variables, or one JVM of N rank threads; supervised; the result file
     * read back.
     */
    private static Phase runPhase(boolean processes, Settings s, int n, int round, Path work, Path secret,
                                  List<String> jvmFlags) throws IOException, InterruptedException {
        long t0 = System.nanoTime();
        Path result = work.resolve((processes ? "processes" : "threads") + "-round" + round + ".txt");
        String java = ProcessHandle.current().info().command().orElse(
                Path.of(System.getProperty("java.home"), "bin", "java").toString());
        List<String> command = new ArrayList<>(List.of(java));
        command.addAll(jvmFlags);
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), GpuProcessAllReduceBench.class.getName()));
        command.addAll(s.childArgs(processes ? "rank" : "threads", n, result));
        List<ProcessBuilder> builders = new ArrayList<>();
        List<String> labels = new ArrayList<>();
        if (processes) {
            int port;
            try (ServerSocket socket = new ServerSocket(0)) {
                port = socket.getLocalPort();
            }
            String runId = "gpu-process-allreduce-" + ProcessHandle.current().pid() + "-" + round + "-" + System.nanoTime();
            for (int r = 0; r < n; r++) {
                ProcessBuilder pb = new ProcessBuilder(command);
                childEnvironment(pb.environment(), r, n, port, runId, secret);
                builders.add(pb);
                labels.add("rank " + r);
            }
        } else {
            builders.add(new ProcessBuilder(command));
            labels.add("threads");
        }
        List<Process> children = new CopyOnWriteArrayList<>();
        Thread killer = new Thread(() -> children.forEach(Process::destroyForcibly), "gpu-process-allreduce-stop");
        Runtime.getRuntime().addShutdownHook(killer); // this JVM stopped (Ctrl-C): no child outlives it
        try {
            for (ProcessBuilder pb : builders) {
                children.add(pb.redirectErrorStream(true).start());
            }
            supervise(children, labels, Duration.ofSeconds(s.timeoutSeconds()), System.out);
        } finally {
            children.forEach(Process::destroyForcibly);
            try {
                Runtime.getRuntime().removeShutdownHook(killer);
            } catch (IllegalStateException shuttingDown) {
                // the hook runs now
            }
        }
        if (!Files.exists(result)) {
            throw new RankFailure("every " + (processes ? "rank process" : "threads JVM") + " exited 0, but no result"
                    + " file=" + result + " was written (expected it before the exit)");
        }
        return parseResult(Files.readString(result), (System.nanoTime() - t0) / 1e9);
    }

    /**
     * The JVM flags of a child: this JVM's own ({@code -Xmx}, {@code -D...} and the rest, as the
     * runtime reports them, class path excluded), without a debugger agent (its port is taken), plus
     * {@link #REQUIRED_JVM_FLAGS} where missing.
     */
    static List<String> childJvmFlags(List<String> mine) {
        List<String> flags = new ArrayList<>();
        for (String f : mine) {
            if (f.startsWith("-agentlib:jdwp") || f.startsWith("-Xrunjdwp") || f.startsWith("-Djava.class.path=")) {
                continue;
            }
            flags.add(f);
        }
        int at = 0;
        for (String required : REQUIRED_JVM_FLAGS) {
            if (!flags.contains(required)) {
                flags.add(at++, required);
            }
        }
        return flags;
    }

    /**
     * A rank process's environment: this one's, less any outer job's identity, plus torchrun's variables for
     * rank {@code rank} of {@code n} on this machine, the run id and the secret file.
     */
    static void childEnvironment(Map<String, String> env, int rank, int n, int port, String runId, Path secretFile) {
        env.remove(StoreSecret.SECRET_ENV);
        env.remove(ProcessGroupConfig.TORCH_RUN_ID_ENV);
        env.remove("GROUP_RANK");
        env.put("RANK", Integer.toString(rank));
        env.put("LOCAL_RANK", Integer.toString(rank));
        env.put("WORLD_SIZE", Integer.toString(n));
        env.put("LOCAL_WORLD_SIZE", Integer.toString(n));
        env.put("MASTER_ADDR", "127.0.0.1");
        env.put("MASTER_PORT", Integer.toString(port));
        env.put(ProcessGroupConfig.RUN_ID_ENV, runId);
        env.put(StoreSecret.SECRET_FILE_ENV, secretFile.toString());
    }

    /** A fresh store secret (32 random bytes, base64), in a file only this user can read. */
    private static Path writeSecret(Path file) throws IOException {
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.writeString(file, Base64.getEncoder().encodeToString(secret) + "\n");
        return file;
    }

    /**
     * Waits for every child to exit 0, copying each one's output to {@code out} line by line, prefixed with its
     * label in brackets ({@code [rank 1] }). The first to exit non-zero, or the limit passing with children still
     * running (they get a SIGQUIT first, so that their JVMs print every thread's stack), stops the others and
     * throws.
     *
     * @throws RankFailure naming the child and its exit status, or the children still running
     */
    static void supervise(List<Process> children, List<String> labels, Duration limit, PrintStream out)
            throws InterruptedException {
        List<Thread> pumps = new ArrayList<>();
        BlockingQueue<Integer> exited = new LinkedBlockingQueue<>();
        for (int i = 0; i < children.size(); i++) {
            int index = i;
            Process p = children.get(i);
            pumps.add(Thread.ofPlatform().daemon().name(labels.get(i).replace(' ', '-') + "-output")
                    .start(() -> pump(p.getInputStream(), "[" + labels.get(index) + "] ", out)));
            p.onExit().thenRun(() -> exited.add(index));
        }
        long deadline = System.nanoTime() + limit.toNanos();
        Set<Integer> done = new HashSet<>();
        try {
            while (done.size() < children.size()) {
                long left = deadline - System.nanoTime();
                Integer i = left > 0 ? exited.poll(left, TimeUnit.NANOSECONDS) : null;
                if (i == null) {
                    List<String> running = new ArrayList<>();
                    for (int q = 0; q < children.size(); q++) {
                        if (children.get(q).isAlive()) {
                            running.add(labels.get(q));
                            threadDump(children.get(q));
                        }
                    }
                    Thread.sleep(2_000); // the dumps reach the output
                    stop(children);
                    throw new RankFailure(running + " still running after --timeout=" + limit.toSeconds() + " s"
                            + " (expected every child JVM to exit by then; their stacks are above, prefixed with their"
                            + " names); stopped them all; fix: look for the wait they hang in, or raise --timeout");
                }
                done.add(i);
                int code = children.get(i).exitValue();
                if (code != 0) {
                    stop(children);
                    throw new RankFailure(labels.get(i) + " exited with status=" + code + " (expected 0; " + CHILD_FAILED
                            + ": it failed, its reason is above, prefixed [" + labels.get(i) + "]); stopped the others");
                }
            }
        } finally {
            stop(children);
            for (Thread t : pumps) {
                t.join(5_000); // the last lines of an exited child
            }
            out.flush();
        }
    }

    private static void pump(InputStream in, String prefix, PrintStream out) {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                out.println(prefix + line);
            }
        } catch (IOException e) {
            out.println(prefix + "(output lost: " + e + ")");
        }
    }

    private static void threadDump(Process p) {
        try {
            new ProcessBuilder("kill", "-QUIT", Long.toString(p.pid())).start().waitFor(5, TimeUnit.SECONDS);
        } catch (IOException e) {
            // no kill(1): no dump, the process is stopped all the same
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** SIGTERM to every child still running, SIGKILL to any still running 5 s later. */
    private static void stop(List<Process> children) throws InterruptedException {
        children.forEach(Process::destroy);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        for (Process p : children) {
            if (!p.waitFor(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                p.destroyForcibly();
            }
        }
    }

    private static void deleteTree(Path dir) {
        try (var files = Files.walk(dir)) {
            for (Path p : files.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException | UncheckedIOException e) {
            System.err.println("GpuProcessAllReduceBench: could not delete " + dir + ": " + e);
        }
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

    // ------------------------------------------------------------------ comparison and report (pure)

    /** Every dtype, algorithm, mode and size of the settings, in report order: algorithm, dtype, mode, size. */
    static List<Comparison> compare(Settings s, Phase processes, Phase threads) {
        List<Comparison> rows = new ArrayList<>();
        for (Algorithm algorithm : ALGORITHMS) {
            for (DType dtype : s.dtypes()) {
                for (boolean graph : reportModes(s)) {
                    for (long bytes : s.sizes()) {
                        String key = Cell.key(dtype, algorithm, graph, bytes);
                        rows.add(new Comparison(dtype, algorithm, graph, bytes, processes.rank0(key), threads.rank0(key),
                                processes.slowestRank(key), threads.slowestRank(key)));
                    }
                }
            }
        }
        return rows;
    }

    /** Graph-captured first in the report: the target's mode. */
    private static List<Boolean> reportModes(Settings s) {
        return s.modes().reversed();
    }

    /**
     * What the report says about the run, besides the cells.
     *
     * @param date     when the report was made
     * @param gpus     ranks (one per GPU)
     * @param devices  GPUs CUDA shows
     * @param commit   the commit measured, or where to find it
     * @param versions CUDA driver and NCCL
     * @param jvmFlags every JVM's flags
     * @param order    the phases' order, per round
     */
    record ReportHeader(String date, int gpus, int devices, String commit, String versions, List<String> jvmFlags,
                        List<String> order) {
    }

    /**
     * The markdown report: the header, the summary (a line per algorithm, then per algorithm, dtype and mode) with
     * the notes, and a table per algorithm, dtype and mode. Pure, so it is tested on made-up cells.
     */
    static String report(ReportHeader h, Settings s, Phase processes, Phase threads, List<Comparison> rows) {
        StringBuilder md = new StringBuilder();
        md.append("# GPU all-reduce: one process per GPU against one JVM with a thread per GPU\n\n");
        md.append("- date: ").append(h.date()).append('\n');
        md.append("- GPUs: ").append(h.gpus()).append(" × ").append(processes.device()).append(" (CUDA shows ")
                .append(h.devices()).append(")\n");
        md.append("- commit: ").append(h.commit()).append('\n');
        md.append("- ").append(h.versions()).append('\n');
        md.append("- symmem4j kernel launches: processes ").append(processes.launch()).append("; threads ")
                .append(threads.launch()).append('\n');
        md.append("- repetitions: ").append(s.reps()).append(" per cell and round, ").append(s.rounds())
                .append(s.rounds() == 1 ? " round" : " rounds").append(" (").append(s.reps() * s.rounds())
                .append(" pooled; the median is reported); order per round: ").append(String.join("; ", h.order()))
                .append('\n');
        md.append(String.format(Locale.ROOT, "- processes: %d JVMs started by this benchmark with torchrun's variables,"
                + " each a ProcessGroup on the CUDA transport (memory exported between processes); %.1f s wall in all"
                + " (JVM start, CUDA and NCCL set-up included)%n", h.gpus(), processes.wallSeconds()));
        md.append(String.format(Locale.ROOT, "- threads: one JVM of %d rank threads (InJvmWorld, as GpuAllReduceBench),"
                + " started by this benchmark like the processes, never at the same time; %.1f s wall in all (likewise)%n",
                h.gpus(), threads.wallSeconds()));
        md.append("- JVM flags of every child JVM: `").append(String.join(" ", h.jvmFlags())).append("`\n");
        md.append("- method: in-place SUM on random data, GpuAllReduceBench's timing: CUDA-event timings of a batch")
                .append(" (100 ops up to 1 MiB, 20 up to 16 MiB, 5 above) on rank 0's stream, each after a barrier;")
                .append(" graph-captured = the batch captured once (DeviceCommunicator.capture) and replayed, eager = one")
                .append(" call per op. processes / threads: rank 0's medians (below 1: the processes are faster); spread")
                .append(" = IQR / median of the pooled repetitions.\n\n");

        md.append("## Summary\n\n");
        md.append("Target: one process per GPU within 5 % of one JVM (processes / threads ≤ ").append(TARGET_RATIO)
                .append(" at every size).\n\n");
        List<String> notes = new ArrayList<>();
        for (Algorithm algorithm : ALGORITHMS) {
            List<Comparison> mine = rows.stream().filter(c -> c.algorithm() == algorithm).toList();
            Summary sum = Summary.of(mine);
            String skipped = skipped(algorithm, processes, threads);
            if (skipped != null) {
                notes.add(skipped);
            }
            if (sum.cells() == 0) {
                md.append("- ").append(algorithm).append(": no size ran in both phases")
                        .append(skipped != null ? ": " + skipped : "").append('\n');
                continue;
            }
            md.append(String.format(Locale.ROOT, "- %s: largest processes / threads %.3f (%s), median %.3f over %d"
                    + " cells: %s%n", algorithm, sum.largest(), sum.largestAt(), sum.median(), sum.cells(), sum.verdict()));
        }
        md.append("\n| algorithm | dtype | mode | cells | largest processes / threads | at | median | verdict |\n");
        md.append("|---|---|---|---:|---:|---|---:|---|\n");
        for (Algorithm algorithm : ALGORITHMS) {
            for (DType dtype : s.dtypes()) {
                for (boolean graph : reportModes(s)) {
                    Summary sum = Summary.of(rows.stream().filter(c -> c.algorithm() == algorithm && c.dtype() == dtype
                            && c.graph() == graph).toList());
                    md.append(String.format(Locale.ROOT, "| %s | %s | %s | %d | %s | %s | %s | %s |%n", algorithm,
                            dtypeName(dtype), modeName(graph), sum.cells(), ratio(sum.largest()),
                            sum.worst() == null ? "—" : GpuAllReduceBench.size(sum.worst().bytes()), ratio(sum.median()),
                            sum.verdict()));
                }
            }
        }
        for (Comparison c : rows) {
            boolean explained = skipped(c.algorithm(), processes, threads) != null;
            if (!explained && c.processes() != null && c.threads() != null && c.processes().ran() != c.threads().ran()) {
                notes.add(c.algorithm() + " " + dtypeName(c.dtype()) + " " + modeName(c.graph()) + " "
                        + GpuAllReduceBench.size(c.bytes()) + " ran only in the " + (c.processes().ran() ? "processes"
                        : "threads"));
            }
        }
        if (!notes.isEmpty()) {
            md.append("\nNotes:\n\n- ").append(String.join("\n- ", notes)).append('\n');
        }
        md.append('\n');

        for (Algorithm algorithm : ALGORITHMS) {
            md.append("## ").append(algorithm).append("\n\n");
            for (DType dtype : s.dtypes()) {
                for (boolean graph : reportModes(s)) {
                    md.append("### ").append(dtypeName(dtype)).append(", ").append(modeName(graph)).append("\n\n");
                    md.append("| size | processes µs | threads µs | processes / threads | spread processes |"
                            + " spread threads |\n");
                    md.append("|---:|---:|---:|---:|---:|---:|\n");
                    for (Comparison c : rows) {
                        if (c.algorithm() != algorithm || c.dtype() != dtype || c.graph() != graph) {
                            continue;
                        }
                        double r = c.ratio();
                        md.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s | %s |%n",
                                GpuAllReduceBench.size(c.bytes()), f2(c.processesMicros()), f2(c.threadsMicros()),
                                r > TARGET_RATIO ? "**" + ratio(r) + "**" : ratio(r),
                                f3(c.processes() == null ? Double.NaN : c.processes().spread()),
                                f3(c.threads() == null ? Double.NaN : c.threads().spread())));
                    }
                    md.append('\n');
                }
            }
        }
        return md.toString();
    }

    /** Why an algorithm did not run in a phase, or null where it ran in both. */
    private static String skipped(Algorithm algorithm, Phase processes, Phase threads) {
        if (algorithm != Algorithm.NCCL || (processes.nccl() && threads.nccl())) {
            return null;
        }
        String where = !processes.nccl() && !threads.nccl() ? "processes or threads"
                : !processes.nccl() ? "processes" : "threads";
        return "NCCL skipped: the communicator does not support it in the " + where + " (NCCL did not load, see the"
                + " runtime line above, or ranks share a GPU)";
    }

    /** One CSV row per dtype, algorithm, mode and size. */
    static void writeRaw(Path file, Settings s, int gpus, String device, List<Comparison> rows) throws IOException {
        try (RawCsv csv = RawCsv.open(file, CSV_COLUMNS)) {
            for (Comparison c : rows) {
                csv.row(gpus, device, c.dtype().name().toLowerCase(Locale.ROOT), c.algorithm(), modeName(c.graph()),
                        c.bytes(), RawCsv.num("%.3f", c.processesMicros()), RawCsv.num("%.3f", c.threadsMicros()),
                        RawCsv.num("%.4f", c.ratio()),
                        RawCsv.num("%.4f", c.processes() == null ? Double.NaN : c.processes().spread()),
                        RawCsv.num("%.4f", c.threads() == null ? Double.NaN : c.threads().spread()),
                        RawCsv.num("%.3f", c.processesSlowest()), RawCsv.num("%.3f", c.threadsSlowest()), s.reps(),
                        s.rounds());
            }
        }
    }

    static String dtypeName(DType d) {
        return d == DType.BFLOAT16 ? "bf16" : d == DType.FLOAT32 ? "fp32" : d.name().toLowerCase(Locale.ROOT);
    }

    static String modeName(boolean graph) {
        return graph ? "graph-captured" : "eager";
    }

    private static String f2(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.2f", v);
    }

    private static String f3(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.3f", v);
    }

    private static String ratio(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.3f", v);
    }
}
