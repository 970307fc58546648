package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import org.symmem4j.examples.Cli;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.ThresholdTable;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * GPU all-reduce benchmark, nccl-tests style: for 1 KiB … 256 MiB, bf16 and fp32, in place, the
 * time per operation, algbw and busbw of symmem4j's ONE_SHOT and TWO_SHOT kernels, the policy's
 * choice (the fastest symmem4j/NCCL option calibrated in this run), and the baselines
 * {@link Algorithm#NCCL} (NCCL on the symmetric memory's own cuMemAlloc buffers) and
 * {@link Algorithm#NCCL_SYMMETRIC} (NCCL on the communicator's symmetric window, the message copied in
 * and out), each eager and graph-captured; all through the common interfaces on a world created on
 * the CUDA transport. One rank per GPU (threads of this JVM). Medians of repeated timings with CUDA
 * events on rank 0's stream.
 *
 * <p>{@code --thresholds} writes the calibrated rows only when every timing they are calibrated from
 * (graph-captured, each algorithm and size) is steady: a cell whose repetitions spread more than
 * {@code --max-spread} (interquartile range / median, {@link RepetitionSpread}, the host calibration's
 * rule) makes the run refuse the file, list the cells in the report and exit with status 1.
 * {@code --raw} writes every number of the report's tables as CSV, one row per dtype, mode and size.
 *
 * <pre>
 *   GpuAllReduceBench [--out report.md] [--raw report.csv] [--thresholds thresholds.properties]
 *                     [--max-spread S] [--max-bytes B] [--reps R]
 * </pre>
 */
public final class GpuAllReduceBench {

    /** How rank 0 launched the symmem4j kernels, for the report. */
    private static volatile String launchMode = "unknown";

    private static final long[] SIZES = {1L << 10, 4L << 10, 16L << 10, 64L << 10, 256L << 10, 1L << 20, 4L << 20,
        16L << 20, 64L << 20, 256L << 20};
    /** The algorithms measured, each a column and a candidate of the calibrated row. */
    private static final Algorithm[] VARIANTS = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL,
        Algorithm.NCCL_SYMMETRIC};

    private GpuAllReduceBench() {
    }

    /**
     * Per (dtype, size, variant, mode): median microseconds per op and the repetitions it is the median
     * of (microseconds per op each), NaN and no repetitions where it cannot run.
     */
    record Cell(DType dtype, long bytes, String variant, boolean graph, double micros, double[] repetitions) {

        static Cell measured(DType dtype, long bytes, String variant, boolean graph, double[] repetitions) {
            return new Cell(dtype, bytes, variant, graph, RepetitionSpread.median(repetitions), repetitions);
        }

        static Cell notRun(DType dtype, long bytes, String variant, boolean graph) {
            return new Cell(dtype, bytes, variant, graph, Double.NaN, new double[0]);
        }

        /** IQR / median of the repetitions; NaN where the cell did not run. */
        double spread() {
            return repetitions.length == 0 ? Double.NaN : RepetitionSpread.spread(repetitions);
        }
    }

    /** The columns of {@code --raw}: the report's tables, one row per dtype, mode and size, and the spreads. */
    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "dtype", "mode", "bytes", "one_shot_us",
            "two_shot_us", "nccl_plain_us", "nccl_window_us", "best", "best_us", "best_busbw_gb_per_s",
            "speedup_vs_better_nccl", "policy", "policy_us", "policy_over_best", "one_shot_spread", "two_shot_spread",
            "nccl_plain_spread", "nccl_window_spread", "policy_spread", "reps", "copy_bytes", "copy_alone_us",
            "copy_all_us");

    @Command(name = "GpuAllReduceBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "GPU all-reduce on every GPU of the machine: symmem4j's algorithms against NCCL, eager and"
                    + " graph-captured, with a calibrated threshold row.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write every number of the report's tables as CSV to FILE"
                + " (appended under the same header; default: none)")
        Path raw;
        @Option(names = "--thresholds", paramLabel = "FILE", description = "write the calibrated threshold rows to FILE, unless a"
                + " timing they come from spreads more than --max-spread (default: none)")
        Path thresholds;
        @Option(names = "--max-spread", paramLabel = "S", description = "largest accepted spread (interquartile range / median) of"
                + " the repetitions of a timing the thresholds are calibrated from")
        double maxSpread = RepetitionSpread.DEFAULT_MAX_SPREAD;
        @Option(names = "--max-bytes", paramLabel = "B", description = "largest message in bytes")
        long maxBytes = 256L << 20;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell (the median is reported)")
        int reps = 7;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--reps", f.reps);
            if (f.maxBytes < 1024) {
                throw new IllegalArgumentException("--max-bytes=" + f.maxBytes + " expected >= 1024");
            }
            if (!(f.maxSpread > 0)) {
                throw new IllegalArgumentException("--max-spread=" + f.maxSpread + " expected > 0");
            }
            if (f.thresholds != null && f.reps < RepetitionSpread.MIN_REPETITIONS) {
                throw new IllegalArgumentException("--reps=" + f.reps + " with --thresholds expected >= "
                        + RepetitionSpread.MIN_REPETITIONS + " (the calibration judges the spread of each timing's"
                        + " repetitions; fewer have none to judge)");
            }
            return f;
        });
        Path out = flags.out;
        Path thresholds = flags.thresholds;
        long maxBytes = flags.maxBytes;
        int reps = flags.reps;
        CudaTransport cuda = CudaTransport.create();
        int devices = cuda.deviceCount();
        int worldSize = Math.max(2, Math.min(8, devices));
        long maxB = maxBytes;
        int repeats = reps;
        String[] deviceName = new String[1];
        String[] calibration = new String[1];
        double[] peerCopy = new double[2];
        List<List<Cell>> perRank = InJvmWorld.runOnEveryRank(worldSize,
                GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda, group -> {
            List<Cell> cells = new ArrayList<>();
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, maxB)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                DeviceMemory peers = mem.unwrap(DeviceMemory.class).orElseThrow();
                deviceName[0] = gpu.deviceName();
                launchMode = cuda.programmaticLaunch(group) ? "programmatic dependent launch (PDL)"
                        : "plain (no PDL: before sm_90, or -Dsymmem4j.cuda.pdl=false)";
                boolean nccl = comm.supports(Algorithm.NCCL);
                fillRandom(mem, maxB, group.rank());
                // JIT warm-up of the eager call paths, so the first sizes measure compiled code
                for (int i = 0; i < 5_000; i++) {
                    comm.allReduce(mem, 0, 512, DType.BFLOAT16, ReduceOp.SUM, i % 2 == 0 ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT);
                    if (nccl) {
                        comm.allReduce(mem, 0, 512, DType.BFLOAT16, ReduceOp.SUM, Algorithm.NCCL);
                    }
                }
                gpu.synchronize();
                // Baselines: the copy engine moving maxB from this rank's buffer into the next rank's,
                // rank 0 alone (one way), then every rank at once (each link busy both ways)
                MemorySegment next = MemorySegment.ofAddress(peers.bufferPointer((group.rank() + 1) % worldSize)).reinterpret(maxB);
                MemorySegment mine = MemorySegment.ofAddress(peers.bufferPointer(group.rank())).reinterpret(maxB);
                boolean first = group.rank() == 0;
                double alone = RepetitionSpread.median(time(comm, gpu, () -> {
                    if (first) {
                        gpu.copyAsync(next, mine);
                    }
                }, maxB, false, repeats));
                double all = RepetitionSpread.median(time(comm, gpu, () -> gpu.copyAsync(next, mine), maxB, false, repeats));
                if (first) {
                    peerCopy[0] = alone;
                    peerCopy[1] = all;
                }
                for (DType dtype : new DType[] {DType.BFLOAT16, DType.FLOAT32}) {
                    for (long bytes : SIZES) {
                        if (bytes > maxB) {
                            continue;
                        }
                        long count = bytes / dtype.byteSize();
                        for (Algorithm variant : VARIANTS) {
                            Runnable op = comm.supports(variant, dtype, ReduceOp.SUM, count)
                                    ? () -> comm.allReduce(mem, 0, count, dtype, ReduceOp.SUM, variant) : null;
                            for (boolean graph : new boolean[] {false, true}) {
                                cells.add(op == null ? Cell.notRun(dtype, bytes, variant.name(), graph)
                                        : Cell.measured(dtype, bytes, variant.name(), graph,
                                        time(comm, gpu, op, bytes, graph, repeats)));
                            }
                        }
                    }
                }
                // The policy: rank 0's calibrated row (all ranks must choose alike), then every size
                // measured again as the policy picks it.
                String row = calibratedRow(cells, comm.transportName() + "." + worldSize, DType.BFLOAT16) + "\n"
                        + calibratedRow(cells, comm.transportName() + "." + worldSize + ".float32", DType.FLOAT32);
                String agreed = new String(group.allGatherBytes("policy-row", row.getBytes(StandardCharsets.UTF_8)).getFirst(),
                        StandardCharsets.UTF_8);
                AlgorithmPolicy policy = AlgorithmPolicy.fromTable(ThresholdTable.parse(agreed, "this run"));
                for (DType dtype : new DType[] {DType.BFLOAT16, DType.FLOAT32}) {
                    for (long bytes : SIZES) {
                        if (bytes > maxB) {
                            continue;
                        }
                        long count = bytes / dtype.byteSize();
                        Algorithm chosen = policy.choose(comm, count, dtype, ReduceOp.SUM);
                        Runnable op = () -> comm.allReduce(mem, 0, count, dtype, ReduceOp.SUM, chosen);
                        for (boolean graph : new boolean[] {false, true}) {
                            cells.add(Cell.measured(dtype, bytes, "policy:" + chosen, graph,
                                    time(comm, gpu, op, bytes, graph, repeats)));
                        }
                    }
                }
                calibration[0] = agreed;
                gpu.synchronize();
            }
            return cells;
        });
        List<Cell> rank0 = perRank.getFirst();
        // the rows every rank used came from rank 0's timings: those are the ones judged
        List<String> problems = calibrationProblems(rank0, flags.maxSpread);
        boolean refused = thresholds != null && !problems.isEmpty();
        String report = report(cuda, rank0, worldSize, devices, deviceName[0], repeats, calibration[0], thresholds,
                flags.maxSpread, problems, maxB, peerCopy);
        System.out.print(report);
        if (out != null) {
            Files.writeString(out, report);
        }
        if (flags.raw != null) {
            writeRaw(flags.raw, rank0, worldSize, deviceName[0], repeats, maxB, peerCopy);
        }
        if (refused) {
            System.err.println("not written: " + thresholds + " (" + problems.size() + " calibration timing(s) spread more"
                    + " than --max-spread=" + flags.maxSpread + ", listed in the report); fix: run again with the GPUs idle,"
                    + " or accept more spread with --max-spread");
            System.exit(1);
        }
    }

    /**
     * Why the calibrated rows cannot be trusted: each timing they are calibrated from (graph-captured,
     * not the policy's second pass, run) whose repetitions spread more than {@code maxSpread}, by the
     * host calibration's rule ({@link RepetitionSpread#problem}). Pure, so it is tested on made-up cells.
     *
     * @param cells     rank 0's cells, as measured
     * @param maxSpread the largest accepted spread (IQR / median)
     * @return one message per refused cell, in measurement order; empty when the rows may be written
     */
    static List<String> calibrationProblems(List<Cell> cells, double maxSpread) {
        List<String> problems = new ArrayList<>();
        for (Cell c : cells) {
            if (c.graph() && !c.variant().startsWith("policy:") && c.repetitions().length > 0) {
                RepetitionSpread.problem("dtype=" + c.dtype().name().toLowerCase(Locale.ROOT) + " bytes=" + c.bytes() + " "
                        + c.variant() + " graph-captured", c.repetitions(), maxSpread).ifPresent(problems::add);
            }
        }
        return problems;
    }

    /** One CSV row per dtype, mode and size: what the report's tables hold, plus each timing's spread. */
    private static void writeRaw(Path file, List<Cell> cells, int worldSize, String device, int reps, long copyBytes,
                                 double[] peerCopy) throws IOException {
        Map<String, Cell> byKey = new LinkedHashMap<>();
        for (Cell c : cells) {
            String variant = c.variant().startsWith("policy:") ? "policy" : c.variant();
            byKey.put(c.dtype() + "|" + c.bytes() + "|" + variant + "|" + c.graph(), c);
        }
        try (RawCsv csv = RawCsv.open(file, CSV_COLUMNS)) {
            for (DType dtype : new DType[] {DType.BFLOAT16, DType.FLOAT32}) {
                for (boolean graph : new boolean[] {true, false}) {
                    for (long bytes : SIZES) {
                        String key = dtype + "|" + bytes + "|";
                        Cell one = byKey.get(key + "ONE_SHOT|" + graph);
                        if (one == null) {
                            continue;
                        }
                        Cell two = byKey.get(key + "TWO_SHOT|" + graph);
                        Cell plain = byKey.get(key + "NCCL|" + graph);
                        Cell win = byKey.get(key + "NCCL_SYMMETRIC|" + graph);
                        Cell pol = byKey.get(key + "policy|" + graph);
                        Best best = best(one.micros(), two.micros(), plain.micros(), win.micros());
                        double policyUs = pol == null ? Double.NaN : pol.micros();
                        csv.row(worldSize, device, dtype.name().toLowerCase(Locale.ROOT), graph ? "graph-captured" : "eager",
                                bytes, RawCsv.num("%.3f", one.micros()), RawCsv.num("%.3f", two.micros()),
                                RawCsv.num("%.3f", plain.micros()), RawCsv.num("%.3f", win.micros()), best.name(),
                                RawCsv.num("%.3f", best.micros()), RawCsv.num("%.2f", busbw(bytes, best.micros(), worldSize)),
                                RawCsv.num("%.4f", speedup(one.micros(), two.micros(), plain.micros(), win.micros())),
                                pol == null ? "" : pol.variant().substring("policy:".length()), RawCsv.num("%.3f", policyUs),
                                RawCsv.num("%.4f", policyUs / best.micros()), RawCsv.num("%.4f", one.spread()),
                                RawCsv.num("%.4f", two.spread()), RawCsv.num("%.4f", plain.spread()),
                                RawCsv.num("%.4f", win.spread()), RawCsv.num("%.4f", pol == null ? Double.NaN : pol.spread()),
                                reps, copyBytes, RawCsv.num("%.3f", peerCopy[0]), RawCsv.num("%.3f", peerCopy[1]));
                    }
                }
            }
        }
    }

    /** The fastest of the four algorithms at one size, NaN (not run) never winning. */
    record Best(String name, double micros) {
    }

    static Best best(double one, double two, double plain, double win) {
        String pick = "ONE_SHOT";
        double best = nanMax(one);
        if (nanMax(two) < best) {
            pick = "TWO_SHOT";
            best = two;
        }
        if (nanMax(plain) < best) {
            pick = "NCCL";
            best = plain;
        }
        if (nanMax(win) < best) {
            pick = "NCCL_SYMMETRIC";
            best = win;
        }
        return new Best(pick, best);
    }

    /** busbw = algbw × 2(n-1)/n, in GB/s. */
    static double busbw(long bytes, double micros, int worldSize) {
        return bytes / (micros * 1e-6) / 1e9 * 2.0 * (worldSize - 1) / worldSize;
    }

    /** The better NCCL mode's time over symmem4j's faster algorithm's; NaN where NCCL did not run. */
    static double speedup(double one, double two, double plain, double win) {
        double betterNccl = Math.min(nanMax(plain), nanMax(win));
        return Double.isInfinite(betterNccl) ? Double.NaN : betterNccl / Math.min(nanMax(one), nanMax(two));
    }

    /** Fills {@code bytes} of this rank's region with random float32 values (a random block, tiled); the process benchmark's too. */
    static void fillRandom(SymmetricMemory mem, long bytes, int rank) {
        try (Arena a = Arena.ofConfined()) {
            long chunk = Math.min(bytes, 16L << 20);
            MemorySegment host = a.allocate(chunk, 16);
            SplittableRandom rnd = new SplittableRandom(rank + 1);
            for (long i = 0; i < chunk / 4; i++) {
                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) rnd.nextDouble(-1, 1));
            }
            for (long off = 0; off < bytes; off += chunk) {
                mem.copyFromHost(host.asSlice(0, Math.min(chunk, bytes - off)), off);
            }
        }
    }

    /**
     * Microseconds per op of each of {@code reps} timings of a batch (the repetitions, in the order
     * they ran), timed with CUDA events on this rank's stream. Eager: the batch is {@code batch} calls.
     * Graph: the batch is captured once into a graph of {@code batch} ops and each timing replays it.
     */
    static double[] time(Communicator comm, DeviceCommunicator gpu, Runnable op, long bytes, boolean graph, int reps) {
        int batch = bytes >= (64L << 20) ? 5 : bytes >= (4L << 20) ? 20 : 100;
        // eager and below 4 MiB, where the host's time per call shows: calls first, so that a cell times the call's
        // C2-compiled Java (FFM downcalls included), not the interpreter's or C1's. The smallest sizes come first in
        // every benchmark and take 20,000 (C2 compiles a method after ~15,000 calls: with 20 warm-up calls the
        // remote-shard run's eager 1 KiB kernel read took 23.5 us, with 2,000 still 18.3 and 16.5 at 1 and 4 KiB,
        // where 16 KiB, ~8,000 calls into the run, took 4.9); later sizes run the compiled code and take 2,000
        int warmUp = graph || batch != 100 ? Math.max(3, batch / 5) : bytes <= 4096 ? 20_000 : 2_000;
        for (int w = 0; w < warmUp; w++) {
            op.run();
        }
        gpu.synchronize();
        DeviceGraph g = graph ? gpu.capture(() -> {
            for (int i = 0; i < batch; i++) {
                op.run();
            }
        }) : null;
        if (g != null) {
            g.replay(); // warm the graph
        }
        double[] samples = new double[reps];
        for (int r = 0; r < reps; r++) {
            comm.barrier();
            double millis = gpu.elapsedMillis(() -> {
                if (g != null) {
                    g.replay();
                } else {
                    for (int i = 0; i < batch; i++) {
                        op.run();
                    }
                }
            });
            samples[r] = millis * 1000.0 / batch;
        }
        if (g != null) {
            gpu.synchronize();
            g.close();
        }
        return samples;
    }

    static String size(long bytes) {
        return bytes >= (1 << 20) ? (bytes >> 20) + " MiB" : (bytes >> 10) + " KiB";
    }

    /**
     * Rank 0's threshold row from its graph-captured timings of {@code dtype}: each size's fastest of
     * ONE_SHOT, TWO_SHOT, NCCL and NCCL_SYMMETRIC.
     */
    static String calibratedRow(List<Cell> cells, String key, DType dtype) {
        Map<Long, Map<String, Double>> bySize = new LinkedHashMap<>();
        for (Cell c : cells) {
            if (c.dtype() == dtype && c.graph() && !c.variant().startsWith("policy:") && !Double.isNaN(c.micros())) {
                bySize.computeIfAbsent(c.bytes(), b -> new LinkedHashMap<>()).put(c.variant(), c.micros());
            }
        }
        StringBuilder row = new StringBuilder(key).append('=');
        String previous = null;
        long previousUpTo = 0;
        for (Map.Entry<Long, Map<String, Double>> e : bySize.entrySet()) {
            String best = null;
            double bestTime = Double.MAX_VALUE;
            for (Map.Entry<String, Double> v : e.getValue().entrySet()) {
                if (v.getValue() < bestTime) {
                    bestTime = v.getValue();
                    best = v.getKey();
                }
            }
            if (previous != null && !best.equals(previous)) {
                row.append(previous).append(':').append(previousUpTo).append(',');
            }
            previous = best;
            previousUpTo = e.getKey();
        }
        return row.append(previous == null ? "TWO_SHOT" : previous).append(":max").toString();
    }

    private static String report(CudaTransport cuda, List<Cell> cells, int worldSize, int devices, String device, int reps,
                                 String row, Path thresholdsOut, double maxSpread, List<String> problems, long copyBytes,
                                 double[] peerCopy) throws IOException {
        Map<String, Double> t = new LinkedHashMap<>();
        Map<String, String> policyChoice = new LinkedHashMap<>();
        for (Cell c : cells) {
            String variant = c.variant();
            if (variant.startsWith("policy:")) {
                policyChoice.put(c.dtype() + "|" + c.bytes(), variant.substring("policy:".length()));
                variant = "policy";
            }
            t.put(c.dtype() + "|" + c.bytes() + "|" + variant + "|" + c.graph(), c.micros());
        }
        StringBuilder md = new StringBuilder();
        md.append("# GPU all-reduce benchmark\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- device: ").append(worldSize).append(" ranks on ").append(devices).append(" × ").append(device)
                .append(devices < worldSize ? " (ranks share a GPU: correctness only, timings meaningless)" : "").append('\n');
        md.append("- ").append(cuda.runtimeVersions()).append('\n');
        md.append("- symmem4j kernel launches: ").append(launchMode).append('\n');
        md.append("- method: in-place SUM on random data; median of ").append(reps).append(" CUDA-event timings of a batch")
                .append(" (100 ops up to 1 MiB, 20 up to 16 MiB, 5 above) on rank 0's stream, after a JIT warm-up;")
                .append(" eager = one call per op (symmem4j's calls include the host-side argument check across ranks, and launch")
                .append(" their kernel as a cached one-kernel graph unless -Dsymmem4j.cuda.eager.graphs=false: ")
                .append(Configuration.CUDA_EAGER_GRAPHS.get() ? "on" : "off")
                .append(" in this run);")
                .append(" graph = the batch captured once and replayed. busbw = algbw × 2(n-1)/n. NCCL = NCCL on the")
                .append(" symmetric memory's cuMemAlloc buffers; NCCL_SYMMETRIC = NCCL on the communicator's NCCL symmetric")
                .append(" window, the message copied into it and back (two copy-engine copies included). best = fastest of")
                .append(" all four in the first pass; policy = the calibrated table (from the first pass's")
                .append(" graph timings of that dtype, below) choosing per size, measured again in a second pass.\n");
        md.append(String.format(Locale.ROOT, "- baseline, copy engine (cuMemcpyDtoDAsync into the next rank's buffer), %s: rank 0"
                + " alone %.1f us = %.1f GB/s; every rank at once %.1f us = %.1f GB/s per rank and direction%n%n",
                size(copyBytes), peerCopy[0], copyBytes / (peerCopy[0] * 1e-6) / 1e9, peerCopy[1],
                copyBytes / (peerCopy[1] * 1e-6) / 1e9));
        List<String> misses = new ArrayList<>();
        for (DType dtype : new DType[] {DType.BFLOAT16, DType.FLOAT32}) {
            for (boolean graph : new boolean[] {true, false}) {
                md.append("## ").append(dtype).append(graph ? ", graph-captured" : ", eager").append("\n\n");
                md.append("| size | ONE_SHOT µs | TWO_SHOT µs | NCCL µs | NCCL_SYMMETRIC µs | best | best µs | best busbw GB/s"
                        + " | speedup vs better NCCL | policy | policy µs | policy / best |\n");
                md.append("|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|\n");
                for (long bytes : SIZES) {
                    Double one = t.get(dtype + "|" + bytes + "|ONE_SHOT|" + graph);
                    if (one == null) {
                        continue;
                    }
                    double two = t.get(dtype + "|" + bytes + "|TWO_SHOT|" + graph);
                    double plain = t.get(dtype + "|" + bytes + "|NCCL|" + graph);
                    double win = t.get(dtype + "|" + bytes + "|NCCL_SYMMETRIC|" + graph);
                    double pol = t.getOrDefault(dtype + "|" + bytes + "|policy|" + graph, Double.NaN);
                    Best b = best(one, two, plain, win);
                    String pick = b.name();
                    double best = b.micros();
                    double ours = Math.min(nanMax(one), nanMax(two));
                    double betterNccl = Math.min(nanMax(plain), nanMax(win));
                    double busbw = busbw(bytes, best, worldSize);
                    double speedup = betterNccl / ours;
                    md.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s | %s | %.2f | %.1f | %s | %s | %s | %s |%n",
                            size(bytes), f(one), f(two), f(plain), f(win), pick, best, busbw,
                            Double.isInfinite(betterNccl) ? "—" : String.format(Locale.ROOT, "%.2f×", speedup),
                            policyChoice.getOrDefault(dtype + "|" + bytes, "—"), f(pol),
                            Double.isNaN(pol) ? "—" : String.format(Locale.ROOT, "%.3f", pol / best)));
                    if (graph && dtype == DType.BFLOAT16 && !Double.isInfinite(betterNccl)) {
                        if (speedup < 1) {
                            misses.add(size(bytes) + ": symmem4j " + f(ours) + " us vs NCCL " + f(betterNccl) + " us (slower)");
                        } else if (bytes >= (256L << 10) && bytes <= (64L << 20) && speedup < 1.25) {
                            misses.add(size(bytes) + ": " + String.format(Locale.ROOT, "%.2f×", speedup) + " (< 1.25×)");
                        }
                        if (bytes == (256L << 20)) {
                            double ourBusbw = bytes / (ours * 1e-6) / 1e9 * 2.0 * (worldSize - 1) / worldSize;
                            if (ourBusbw < 350) {
                                misses.add("256 MiB: busbw " + String.format(Locale.ROOT, "%.0f", ourBusbw) + " GB/s (< 350)");
                            }
                        }
                    }
                    if (!Double.isNaN(pol) && pol > 1.03 * best) {
                        misses.add(dtype + (graph ? " graph " : " eager ") + size(bytes) + ": policy " + f(pol) + " us is "
                                + String.format(Locale.ROOT, "%.1f%%", 100 * (pol / best - 1)) + " behind the best (> 3%)");
                    }
                }
                md.append('\n');
            }
        }
        md.append("## Targets (bf16, graph-captured, against the better NCCL configuration)\n\n");
        md.append(misses.isEmpty() ? "All met.\n" : "Not met:\n\n- " + String.join("\n- ", misses) + "\n");
        md.append("\nCalibrated threshold rows (graph-captured, bf16 the plain row and float32 its own; each algorithm up to"
                + " the largest size it won):\n\n```\n")
                .append(row).append("\n```\n");
        double widest = cells.stream().filter(c -> c.graph() && !c.variant().startsWith("policy:"))
                .mapToDouble(Cell::spread).filter(v -> !Double.isNaN(v)).max().orElse(Double.NaN);
        md.append(String.format(Locale.ROOT, "%nSpread of the timings the rows come from (graph-captured, each algorithm and"
                + " size; IQR / median of the %d repetitions): at most %.3f, accepted up to %s.%n", reps, widest, maxSpread));
        if (!problems.isEmpty()) {
            md.append(thresholdsOut == null ? "\nThese timings spread too far for a calibration (no --thresholds file was"
                    + " asked for):\n\n- " : "\n**Not written** to `" + thresholdsOut + "`: these timings spread too far to"
                    + " calibrate from (fix: run again with the GPUs idle, or accept more spread with --max-spread):\n\n- ")
                    .append(String.join("\n- ", problems)).append('\n');
        } else if (thresholdsOut != null) {
            Files.writeString(thresholdsOut, "# measured by GpuAllReduceBench on " + Instant.now() + "; every timing's"
                    + " spread (IQR / median) at most " + maxSpread + "\n" + row + "\n");
        }
        return md.toString();
    }

    private static double nanMax(double v) {
        return Double.isNaN(v) ? Double.POSITIVE_INFINITY : v;
    }

    private static String f(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.2f", v);
    }
}
