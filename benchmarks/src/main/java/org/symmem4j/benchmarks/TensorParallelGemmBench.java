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
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TensorParallelGemm;
import org.symmem4j.parallel.TensorParallelGemm.Mode;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.parallel.tensor.TensorParallelMlp;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * Tensor-parallel GEMMs on the GPUs of one machine, one rank per GPU, in one run: the all-gather +
 * matmul (column-parallel, input sharded by rows) and the matmul + reduce-scatter (row-parallel), each
 * fused ({@link Mode#FUSED}), unfused with NCCL (cuBLAS + NCCL) and unfused with symmem4j's collectives,
 * against cuBLAS alone on the same rank's GEMM (the time without any communication), at the seeds'
 * shapes (N=1792, K=4096 and N=3584, K=8192; M from 4096 to 16384; bf16); then the tensor-parallel
 * overhead of {@link TensorParallelMlp}'s forward + backward: its time over the same rank's GEMMs and
 * activations alone.
 *
 * <p>First a warm-up pass (the first shape's cells, not recorded: the JIT compiles the host's enqueue code). Each cell:
 * warm-up calls, then {@code --reps} timings of {@code --iters} back-to-back calls on each
 * rank's stream (CUDA events); the cell's time is the largest over the ranks of their medians (the
 * slowest rank bounds a tensor-parallel layer). Inputs are random (a GEMM on zeros runs faster).
 *
 * <pre>
 *   TensorParallelGemmBench [--out report.md] [--raw report.csv] [--gpus N] [--reps R] [--iters I] [--graph]
 *                           [--shapes 1792x4096,3584x8192] [--m 4096,8192,16384] [--mlp 8192x4096x14336]
 *                           [--processes [--timeout S]]
 * </pre>
 *
 * <p>{@code --processes} runs every rank in a JVM of its own (one process per GPU, as the launcher starts them): the
 * ranks' hosts then enqueue without sharing one driver instance, which tells one-JVM effects (the rank threads'
 * contention in the driver, the cross-rank submission order {@code EnqueueOrder} fences) from the GPUs' own.
 */
public final class TensorParallelGemmBench {

    /** The columns of {@code --raw}. */
    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "op", "m", "n", "k", "dtype", "variant", "us",
            "spread", "speedup_vs_nccl", "reps", "iters", "host_enqueue_us");

    @Command(name = "TensorParallelGemmBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Fused all-gather + matmul and matmul + reduce-scatter against cuBLAS +"
                    + " NCCL and cuBLAS alone; the tensor-parallel MLP block's overhead.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write every cell as CSV to FILE")
        Path raw;
        @Option(names = "--gpus", paramLabel = "N", description = "GPUs to use, one rank each (0: all)")
        int gpus = 0;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell (the median is reported)")
        int reps = 9;
        @Option(names = "--iters", paramLabel = "I", description = "calls per timed repetition")
        int iters = 5;
        @Option(names = "--graph", description = "time the calls captured into a CUDA graph and replayed (no host enqueue"
                + " cost; the warm-up calls run eagerly first, which also loads the GEMMs' kernels) instead of eager calls; fused"
                + " calls need --processes for it (in one JVM their capture is refused unless"
                + " -Dsymmem4j.tp.fused.graphs.in.one.jvm=true: it deadlocked)")
        boolean graph;
        @Option(names = "--shapes", split = ",", paramLabel = "NxK", description = "the all-gather + matmul's N (columns of"
                + " this rank's output) by K; the matmul + reduce-scatter runs the mirror (its output has K columns, its inner"
                + " dimension is N)")
        List<String> shapes = List.of("1792x4096", "3584x8192");
        @Option(names = "--m", split = ",", paramLabel = "M", description = "the group's rows (tokens)")
        List<Integer> ms = List.of(4096, 8192, 16384);
        @Option(names = "--mlp", paramLabel = "TxHxF", description = "the MLP block's tokens x hidden x ffn (none: skip)")
        String mlp = "8192x4096x14336";
        @Option(names = "--processes", description = "run every rank in a JVM of its own (one process per GPU, started by"
                + " this benchmark with torchrun's variables, memory exported between them) instead of as threads of this JVM")
        boolean processes;
        @Mixin
        RankProcessOptions ranks = new RankProcessOptions();
    }

    /** What one rank measured, and what it found about the machine. */
    record RankCells(List<Cell> cells, String deviceName, String library, List<String> notes) {
    }

    /** One cell as measured on one rank. */
    record Cell(String op, int m, int n, int k, String variant, double micros, double spread, double hostMicros) {
    }

    private TensorParallelGemmBench() {
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--reps", f.reps);
            Cli.positive("--iters", f.iters);
            return f;
        });
        if (flags.ranks.rankProcess) {
            ChildJvms.exitAsRank(() -> rankProcess(flags));
        }
        CudaTransport cuda = CudaTransport.create();
        int devices = cuda.deviceCount();
        int world = flags.gpus == 0 ? devices : flags.gpus;
        if (world < 1 || world > devices) {
            throw new IllegalStateException("--gpus=" + flags.gpus + ": this machine has " + devices + " GPUs");
        }
        if (CudaTransport.cublasUnavailableReason() != null) {
            throw new IllegalStateException(CudaTransport.cublasUnavailableReason());
        }
        if (flags.processes) {
            cuda.close(); // the driver only so far: no context of this JVM beside the ranks'
            System.exit(ChildJvms.rerunAsRanks(TensorParallelGemmBench.class, args, world, "tp-gemm",
                    Duration.ofSeconds(flags.ranks.timeoutSeconds)));
        }
        List<RankCells> perRank = InJvmWorld.runOnEveryRank(world,
                GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda, group -> measure(group, flags));
        writeReports(perRank, world, flags);
        cuda.close();
    }

    /** Every rank's cells: the slowest rank's of each cell, reported on stdout and in {@code --out} and {@code --raw}. */
    private static void writeReports(List<RankCells> perRank, int world, Flags flags) throws IOException {
        RankCells first = perRank.getFirst();
        List<Cell> slowest = slowestOverRanks(perRank.stream().map(RankCells::cells).toList());
        String report = report(slowest, world, first.deviceName(), first.library(), first.notes(), flags);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
        if (flags.raw != null) {
            try (RawCsv csv = RawCsv.open(flags.raw, CSV_COLUMNS)) {
                for (Cell c : slowest) {
                    Cell nccl = find(slowest, c.op(), c.m(), c.n(), c.k(), "cuBLAS + NCCL");
                    csv.row(world, first.deviceName(), c.op(), c.m(), c.n(), c.k(), "bf16", c.variant(),
                            RawCsv.num("%.2f", c.micros()), RawCsv.num("%.4f", c.spread()),
                            nccl == null ? "" : RawCsv.num("%.4f", nccl.micros() / c.micros()), flags.reps, flags.iters,
                            RawCsv.num("%.2f", c.hostMicros()));
                }
            }
        }
    }

    /** One rank's cells, on {@code group}'s GPU communicator (a thread of this JVM, or a process of its own). */
    static RankCells measure(org.symmem4j.parallel.Group group, Flags flags) {
        int world = group.worldSize();
        List<Cell> cells = new ArrayList<>();
        List<String> notes = new ArrayList<>();
        try (Communicator comm = Communicator.create(group)) {
            DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            TensorParallelGemm gemm = comm.unwrap(TensorParallelGemm.class).orElseThrow();
            List<Mode> modes = new ArrayList<>();
            for (Mode mode : Mode.values()) {
                if (gemm.unavailableReason(mode) == null) {
                    modes.add(mode);
                } else {
                    notes.add("mode " + mode + " not run: " + gemm.unavailableReason(mode));
                }
            }
            notes.add("fused: " + gemm.fusedChunking() + ", moved by the copy engine while the previous GEMM runs"
                    + " (-Dsymmem4j.tp.chunk.rows)");
            DType dtype = DType.BFLOAT16;
            // A warm-up pass, not recorded: the first shape at the first M, every variant. Without it the first cell
            // measured timed the host's enqueue code before the JIT compiled it: eager fused calls as the first cell
            // ran 0.48-0.83x of cuBLAS + NCCL, the same cell 1.24-1.43x when measured second (2 x H100,
            // bench/results/2026-11-27-gpu-2xh100-targets.md).
            int[] first = shape(flags.shapes.get(0));
            gemmCells(group.rank(), world, comm, device, gemm, modes, flags.ms.get(0), first[0], first[1], dtype, flags,
                    new ArrayList<>());
            for (String shape : flags.shapes) {
                int[] nk = shape(shape);
                for (int m : flags.ms) {
                    gemmCells(group.rank(), world, comm, device, gemm, modes, m, nk[0], nk[1], dtype, flags, cells);
                }
            }
            if (flags.mlp != null && !flags.mlp.equalsIgnoreCase("none")) {
                String[] thf = flags.mlp.toLowerCase(Locale.ROOT).split("x");
                mlpCells(comm, device, gemm, modes, Integer.parseInt(thf[0].trim()), Integer.parseInt(thf[1].trim()),
                        Integer.parseInt(thf[2].trim()), flags, cells);
            }
            return new RankCells(cells, device.deviceName(), gemm.gemmLibrary(), notes);
        }
    }

    /** {@code NxK} as {N, K}. */
    private static int[] shape(String nxk) {
        String[] nk = nxk.toLowerCase(Locale.ROOT).split("x");
        return new int[] {Integer.parseInt(nk[0].trim()), Integer.parseInt(nk[1].trim())};
    }

    /** One rank of a {@code --processes} run: joins the group from torchrun's variables; rank 0 writes every rank's cells. */
    private static int rankProcess(Flags flags) throws IOException {
        try (CudaTransport cuda = CudaTransport.create();
             org.symmem4j.parallel.group.ProcessGroup group = org.symmem4j.parallel.group.ProcessGroup.fromEnvironment(
                     GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda)) {
            RankCells mine = measure(group, flags);
            List<byte[]> all = group.allGatherBytes("tp-gemm-cells", encode(mine.cells()).getBytes(StandardCharsets.UTF_8));
            if (group.rank() == 0) {
                List<RankCells> perRank = new ArrayList<>();
                for (byte[] b : all) {
                    perRank.add(new RankCells(decode(new String(b, StandardCharsets.UTF_8)), mine.deviceName(), mine.library(),
                            mine.notes()));
                }
                writeReports(perRank, group.worldSize(), flags);
            }
            cuda.release(group);
            return 0;
        }
    }

    /** Cells as text, a line each: op, m, n, k, variant, µs, spread, host µs, tab-separated. */
    static String encode(List<Cell> cells) {
        return TabRows.encode(cells, c -> List.of(c.op(), c.m(), c.n(), c.k(), c.variant(), c.micros(), c.spread(),
                c.hostMicros()));
    }

    /** The cells of {@link #encode}'s text. */
    static List<Cell> decode(String text) {
        return TabRows.decode(text, 8, "cell", f -> new Cell(f[0], Integer.parseInt(f[1]), Integer.parseInt(f[2]),
                Integer.parseInt(f[3]), f[4], Double.parseDouble(f[5]), Double.parseDouble(f[6]), Double.parseDouble(f[7])));
    }

    static String variantName(Mode mode) {
        return switch (mode) {
            case FUSED -> "fused";
            case NCCL -> "cuBLAS + NCCL";
            case SYMMEM -> "cuBLAS + symmem collective";
        };
    }

    /** Fills a device buffer with random bf16 values in [-1, 1) (a 4 MiB random block, tiled). */
    static void randomize(DeviceCommunicator device, MemorySegment buffer, long seed) {
        long block = Math.min(buffer.byteSize(), 4L << 20) & ~1L;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(block, 16);
            SplittableRandom rnd = new SplittableRandom(seed);
            for (long i = 0; i < block / 2; i++) {
                host.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat((float) rnd.nextDouble(-1, 1)));
            }
            for (long off = 0; off < buffer.byteSize(); off += block) {
                long len = Math.min(block, buffer.byteSize() - off);
                device.copyFromHost(buffer.asSlice(off, len), host.asSlice(0, len));
            }
        }
    }

    /**
     * Median and spread of {@code reps} timings of {@code iters} calls of {@code body}, in microseconds per call; the
     * ranks meet on the host before the timed repetitions (so none times its wait for a late peer), and each says on
     * stderr what it starts (a run that hangs shows where) and what it measured, with the host's time to enqueue a call
     * (the {@code host_enqueue_us} column of {@code --raw}: a cell whose GPU time is close to it is host-bound).
     */
    static double[] time(Communicator comm, DeviceCommunicator device, String label, Runnable body, Flags flags) {
        System.err.println("[rank " + comm.group().rank() + "] " + label);
        System.err.flush();
        for (int w = 0; w < 3; w++) {
            body.run();
        }
        device.synchronize();
        comm.barrier();
        Runnable calls = () -> {
            for (int i = 0; i < flags.iters; i++) {
                body.run();
            }
        };
        double[] t = new double[flags.reps];
        double[] host = new double[flags.reps];
        DeviceGraph graph = flags.graph ? device.capture(calls) : null;
        try {
            Runnable enqueue = graph == null ? calls : graph::replay;
            if (graph != null) {
                graph.replay();
                device.synchronize();
            }
            for (int r = 0; r < flags.reps; r++) {
                int rep = r;
                t[r] = device.elapsedMillis(() -> {
                    long h = System.nanoTime();
                    enqueue.run();
                    host[rep] = (System.nanoTime() - h) / 1e3 / flags.iters;
                }) * 1000.0 / flags.iters;
            }
        } finally {
            if (graph != null) {
                graph.close();
            }
        }
        double[] result = {RepetitionSpread.median(t), RepetitionSpread.spread(t), RepetitionSpread.median(host)};
        System.err.printf(Locale.ROOT, "[rank %d] %s: %.1f us a call on the GPU, %.1f us a call to enqueue on the host%n",
                comm.group().rank(), label, result[0], result[2]);
        return result;
    }

    private static void gemmCells(int rank, int world, Communicator comm, DeviceCommunicator device, TensorParallelGemm gemm,
                                  List<Mode> modes, int m, int n, int k, DType dtype, Flags flags, List<Cell> cells) {
        long elt = dtype.byteSize();
        // all-gather + matmul: gathered (m × k, symmetric), this rank's b (k × n), c (m × n)
        try (SymmetricMemory gathered = SymmetricMemory.allocate(comm.group(), (long) m * k * elt);
             SymmetricMemory partials = SymmetricMemory.allocate(comm.group(), TensorParallelGemm.partialsBytes(m, k, dtype))) {
            MemorySegment b = device.allocateDevice((long) k * n * elt);
            MemorySegment c = device.allocateDevice((long) m * n * elt);
            MemorySegment out = device.allocateDevice((long) m / world * k * elt);
            MemorySegment a = device.allocateDevice((long) m * n * elt);
            randomize(device, gathered.local(), 1 + rank);
            randomize(device, b, 2 + rank);
            randomize(device, a, 3 + rank);
            String cell = " M=" + m + " N=" + n + " K=" + k;
            double[] t = time(comm, device, "all-gather + matmul, cuBLAS alone" + cell,
                    () -> gemm.matmul(c, gathered.local(), false, b, false, m, n, k, false, dtype), flags);
            cells.add(new Cell("all-gather + matmul", m, n, k, "cuBLAS alone", t[0], t[1], t[2]));
            for (Mode mode : modes) {
                t = time(comm, device, "all-gather + matmul, " + mode + cell,
                        () -> gemm.allGatherMatmul(gathered, 0, b, false, c, m, n, k, dtype, mode), flags);
                cells.add(new Cell("all-gather + matmul", m, n, k, variantName(mode), t[0], t[1], t[2]));
            }
            // matmul + reduce-scatter, the mirror: a (m × n) · b' (n × k) → out (m/W × k); b' is b read transposed
            t = time(comm, device, "matmul + reduce-scatter, cuBLAS alone" + cell,
                    () -> gemm.matmul(partials.local(), a, false, b, true, m, k, n, false, dtype), flags);
            cells.add(new Cell("matmul + reduce-scatter", m, k, n, "cuBLAS alone", t[0], t[1], t[2]));
            for (Mode mode : modes) {
                t = time(comm, device, "matmul + reduce-scatter, " + mode + cell,
                        () -> gemm.matmulReduceScatter(a, b, true, partials, 0, out, m, k, n, dtype, mode), flags);
                cells.add(new Cell("matmul + reduce-scatter", m, k, n, variantName(mode), t[0], t[1], t[2]));
            }
            // no rank frees while a peer's stream may still wait for it (cuMemFree synchronizes with the peers)
            device.synchronize();
            comm.barrier();
            for (MemorySegment s : List.of(b, c, out, a)) {
                device.freeDevice(s);
            }
        }
    }

    private static void mlpCells(Communicator comm, DeviceCommunicator device, TensorParallelGemm gemm, List<Mode> modes,
                                 int tokens, int hidden, int ffn, Flags flags, List<Cell> cells) {
        DType dtype = DType.BFLOAT16;
        int world = comm.group().worldSize();
        int rank = comm.group().rank();
        int fs = ffn / world;
        long elt = dtype.byteSize();
        try (TensorParallelMlp mlp = new TensorParallelMlp(comm, tokens, hidden, ffn, dtype)) {
            randomize(device, mlp.w1(), 10 + rank);
            randomize(device, mlp.w2(), 20 + rank);
            randomize(device, mlp.inputShard(), 30 + rank);
            randomize(device, mlp.outputGradientShard(), 40 + rank);
            for (Mode mode : modes) {
                double[] t = time(comm, device, "MLP block, " + mode, () -> {
                    mlp.forward(mode);
                    mlp.backward(mode);
                }, flags);
                cells.add(new Cell("MLP block fwd+bwd", tokens, hidden, ffn, variantName(mode), t[0], t[1], t[2]));
            }
            // the same rank's GEMMs and activations with no communication: the block's compute alone
            MemorySegment x = device.allocateDevice((long) tokens * hidden * elt);
            MemorySegment dy = device.allocateDevice((long) tokens * hidden * elt);
            MemorySegment z = device.allocateDevice((long) tokens * fs * elt);
            MemorySegment act = device.allocateDevice((long) tokens * fs * elt);
            MemorySegment da = device.allocateDevice((long) tokens * fs * elt);
            MemorySegment partial = device.allocateDevice((long) tokens * hidden * elt);
            MemorySegment dw1 = device.allocateDevice((long) hidden * fs * elt);
            MemorySegment dw2 = device.allocateDevice((long) fs * hidden * elt);
            randomize(device, x, 50 + rank);
            randomize(device, dy, 60 + rank);
            MemorySegment w1 = mlp.w1();
            MemorySegment w2 = mlp.w2();
            double[] t = time(comm, device, "MLP block, compute alone", () -> {
                gemm.matmul(z, x, false, w1, false, tokens, fs, hidden, false, dtype);
                gemm.relu(z, act, (long) tokens * fs, dtype);
                gemm.matmul(partial, act, false, w2, false, tokens, hidden, fs, false, dtype);
                gemm.matmul(da, dy, false, w2, true, tokens, fs, hidden, false, dtype);
                gemm.matmul(dw2, act, true, dy, false, fs, hidden, tokens, false, dtype);
                gemm.reluBackward(da, z, da, (long) tokens * fs, dtype);
                gemm.matmul(dw1, x, true, da, false, hidden, fs, tokens, false, dtype);
                gemm.matmul(partial, da, false, w1, true, tokens, hidden, fs, false, dtype);
            }, flags);
            cells.add(new Cell("MLP block fwd+bwd", tokens, hidden, ffn, "compute alone", t[0], t[1], t[2]));
            device.synchronize();
            comm.barrier();
            for (MemorySegment s : List.of(x, dy, z, act, da, partial, dw1, dw2)) {
                device.freeDevice(s);
            }
        }
    }

    /** Each cell as its slowest rank measured it (the ranks' lists hold the same cells in the same order). */
    static List<Cell> slowestOverRanks(List<List<Cell>> perRank) {
        List<Cell> result = new ArrayList<>();
        for (int i = 0; i < perRank.get(0).size(); i++) {
            Cell worst = perRank.get(0).get(i);
            for (List<Cell> cells : perRank) {
                if (cells.get(i).micros() > worst.micros()) {
                    worst = cells.get(i);
                }
            }
            result.add(worst);
        }
        return result;
    }

    private static Cell find(List<Cell> cells, String op, int m, int n, int k, String variant) {
        for (Cell c : cells) {
            if (c.op().equals(op) && c.m() == m && c.n() == n && c.k() == k && c.variant().equals(variant)) {
                return c;
            }
        }
        return null;
    }

    private static String report(List<Cell> cells, int world, String device, String library, List<String> notes, Flags flags) {
        StringBuilder md = new StringBuilder();
        md.append("# Tensor-parallel GEMMs: fused vs cuBLAS + NCCL vs cuBLAS alone\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- GPUs: ").append(world).append(" × ").append(device).append(", one rank per GPU, ")
                .append(flags.processes || flags.ranks.rankProcess ? "one process per GPU (--processes)" : "one JVM").append('\n');
        md.append("- GEMMs: ").append(library).append(", bf16 in and out, float32 accumulation\n");
        md.append("- ").append(org.symmem4j.parallel.trace.Nvtx.describe()).append('\n');
        md.append("- a warm-up pass first (the first shape's cells at the first M, not recorded); each cell: 3 warm-up calls,"
                + " then the median of ").append(flags.reps).append(" timings of ")
                .append(flags.iters).append(flags.graph ? " calls captured into one CUDA graph and replayed" : " back-to-back eager calls")
                .append(" (CUDA events on each rank's stream), the slowest rank's median\n");
        for (String note : notes) {
            md.append("- ").append(note).append('\n');
        }
        md.append('\n');
        List<String> variants = new ArrayList<>();
        for (Cell c : cells) {
            if (!variants.contains(c.variant())) {
                variants.add(c.variant());
            }
        }
        for (String op : List.of("all-gather + matmul", "matmul + reduce-scatter", "MLP block fwd+bwd")) {
            List<Cell> ofOp = cells.stream().filter(c -> c.op().equals(op)).toList();
            if (ofOp.isEmpty()) {
                continue;
            }
            md.append("## ").append(op).append("\n\n");
            List<String> present = variants.stream().filter(v -> ofOp.stream().anyMatch(c -> c.variant().equals(v))).toList();
            md.append(op.startsWith("MLP") ? "| tokens | hidden | ffn |" : "| M | N | K |");
            for (String v : present) {
                md.append(' ').append(v).append(" (µs) |");
            }
            md.append(op.startsWith("MLP") ? " overhead fused | overhead cuBLAS + NCCL |\n" : " fused vs cuBLAS + NCCL | fused vs cuBLAS alone |\n");
            md.append("|---|---|---|").append("---:|".repeat(present.size() + 2)).append('\n');
            List<String> keys = new ArrayList<>();
            for (Cell c : ofOp) {
                String key = c.m() + "|" + c.n() + "|" + c.k();
                if (keys.contains(key)) {
                    continue;
                }
                keys.add(key);
                md.append("| ").append(c.m()).append(" | ").append(c.n()).append(" | ").append(c.k()).append(" |");
                for (String v : present) {
                    Cell x = find(ofOp, op, c.m(), c.n(), c.k(), v);
                    md.append(x == null ? " – |" : String.format(Locale.ROOT, " %.1f (±%.0f%%) |", x.micros(), 100 * x.spread()));
                }
                Cell fused = find(ofOp, op, c.m(), c.n(), c.k(), "fused");
                Cell nccl = find(ofOp, op, c.m(), c.n(), c.k(), "cuBLAS + NCCL");
                String aloneName = op.startsWith("MLP") ? "compute alone" : "cuBLAS alone";
                Cell alone = find(ofOp, op, c.m(), c.n(), c.k(), aloneName);
                if (op.startsWith("MLP")) {
                    md.append(fused == null || alone == null ? " – |" : String.format(Locale.ROOT, " %+.1f %% |",
                            100 * (fused.micros() / alone.micros() - 1)));
                    md.append(nccl == null || alone == null ? " – |\n" : String.format(Locale.ROOT, " %+.1f %% |\n",
                            100 * (nccl.micros() / alone.micros() - 1)));
                } else {
                    md.append(fused == null || nccl == null ? " – |" : String.format(Locale.ROOT, " %.2f× |", nccl.micros() / fused.micros()));
                    md.append(fused == null || alone == null ? " – |\n" : String.format(Locale.ROOT, " %.2f× |\n",
                            alone.micros() / fused.micros()));
                }
            }
            md.append('\n');
        }
        md.append("Overhead of the MLP block: its forward + backward time over the same rank's GEMMs and activations with no"
                + " communication, minus 1 (the seeds' target: below 5 %).\n");
        return md.toString();
    }
}
