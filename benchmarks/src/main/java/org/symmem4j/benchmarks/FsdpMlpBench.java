package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.zip.CRC32;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.parallel.tensor.FullyShardedMlp;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Adam;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Sharding;
import org.symmem4j.parallel.tensor.ShardedStepPlan;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The fully sharded training step of the MLP block ({@link FullyShardedMlp}, FSDP / ZeRO-3: per-layer bf16 gathers
 * prefetched on a second stream, gradients reduce-scattered, Adam on the float32 shard) against the same step on
 * replicas (plain data parallelism, gradients all-reduced), one rank per GPU as threads of this JVM, at the tensor-parallel
 * table's shapes (tokens per rank × hidden × ffn, bf16). PyTorch FSDP2's anchor is {@code bench/gpu/torch_anchors.py
 * --what fsdp}, run in the same device call by {@code run-on-device.sh fsdp}, which prints the ratio table.
 *
 * <p>Per cell and rank: the device's used memory (free bytes from {@code cuMemGetInfo} before the model, minus the
 * least free after set-up and after the steps) and the model's own allocations; {@code --warmup} steps, then
 * {@code --reps} timings of {@code --steps} steps (CUDA events on the compute stream, which completes after each whole
 * step); the cell's time is the slowest rank's median per step.
 *
 * <p>Checks, so that a run's numbers are of a correct step: the first step's output rows {@code 0..--check-rows-1} of every
 * rank against a float64 host reference from the same weights and batch (rounded to bfloat16 where the GPU rounds),
 * within 2 % of the rows' largest value; every output finite after the steps; and the sharded and the replicated runs'
 * outputs after the same steps bitwise equal (CRC-32), as they must be (same sums in the same order, same Adam).
 *
 * <pre>
 *   FsdpMlpBench [--gpus N] [--shapes 8192x4096x14336,...] [--blocks B] [--warmup W] [--steps S] [--reps R]
 *                [--variants fsdp,ddp] [--lr LR] [--out report.md] [--raw cells.csv]
 * </pre>
 */
public final class FsdpMlpBench {

    /** The columns of {@code --raw}. */
    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "tokens", "hidden", "ffn", "layers", "variant",
            "step_ms", "spread", "device_used_bytes", "accounted_bytes", "state_bytes", "weight_bytes", "gradient_bytes",
            "activation_bytes", "runtime_bytes", "output_crc", "check");

    @Command(name = "FsdpMlpBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "The MLP block's fully sharded step (FSDP) against replicas (DDP), one"
                    + " rank per GPU: step time and peak GPU memory per rank.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write every cell as CSV to FILE")
        Path raw;
        @Option(names = "--gpus", paramLabel = "N", description = "GPUs to use, one rank each (0: all)")
        int gpus = 0;
        @Option(names = "--shapes", split = ",", paramLabel = "TxHxF", description = "tokens per rank x hidden x ffn")
        List<String> shapes = List.of("8192x4096x14336", "16384x4096x14336", "8192x8192x28672", "16384x8192x28672");
        @Option(names = "--blocks", paramLabel = "B", description = "MLP blocks stacked (2B linear layers, ReLU between)")
        int blocks = 1;
        @Option(names = "--warmup", paramLabel = "W", description = "untimed steps first (after the checked first step)")
        int warmup = 3;
        @Option(names = "--steps", paramLabel = "S", description = "steps per timing")
        int steps = 5;
        @Option(names = "--reps", paramLabel = "R", description = "timings per cell (the median is reported)")
        int reps = 3;
        @Option(names = "--variants", split = ",", paramLabel = "V", description = "fsdp (sharded), ddp (replicated),"
                + " fsdp-whole (sharded, layer 0's tail whole: the schedule before the tail blocks, for an A/B)")
        List<String> variants = List.of("fsdp", "ddp");
        @Option(names = "--tail-chunks", paramLabel = "K", description = "blocks of rows of layer 0's gradient, reduction"
                + " and Adam for fsdp and ddp (0: ShardedStepPlan.defaultTailChunks, max(4, 2 x GPUs))")
        int tailChunks = 0;
        @Option(names = "--timeline", negatable = true, description = "after the timings, record one step's CUDA events"
                + " per action on both streams and print its head, tail and per-action table (rank 0: the summary line)")
        boolean timeline = true;
        @Option(names = "--lr", paramLabel = "LR", description = "Adam's learning rate (betas 0.9, 0.999, eps 1e-8)")
        float lr = 1e-4f;
        @Option(names = "--check-rows", paramLabel = "N", description = "rows of each rank's first output checked in float64")
        int checkRows = 2;
    }

    /** One rank's measurement of one cell. */
    record Cell(String shape, int layers, String variant, double stepMillis, long deviceUsed, FullyShardedMlp.Memory memory,
                long outputCrc, boolean bitwise, String check) {

        Cell failed(String why) {
            return new Cell(shape, layers, variant, stepMillis, deviceUsed, memory, outputCrc, bitwise, "FAILED: " + why);
        }

        Cell checked(String what) {
            return new Cell(shape, layers, variant, stepMillis, deviceUsed, memory, outputCrc, bitwise, what);
        }
    }

    /**
     * Per rank, the device bytes of the runtime a model brings whatever its size (its two communicators with their NCCL
     * communicators and staging, the cuBLAS handles and workspaces, the GEMM kernels loaded): measured with a tiny model
     * before the cells; part of every cell's device-used bytes.
     */
    private static volatile long runtimeBytes;

    private FsdpMlpBench() {
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--blocks", f.blocks);
            Cli.positive("--steps", f.steps);
            Cli.positive("--reps", f.reps);
            for (String v : f.variants) {
                if (!v.equals("fsdp") && !v.equals("ddp") && !v.equals("fsdp-whole")) {
                    throw new IllegalArgumentException("--variants: " + v + " is none of fsdp, ddp, fsdp-whole (fix: pass"
                            + " e.g. --variants fsdp,ddp,fsdp-whole)");
                }
            }
            if (f.tailChunks < 0) {
                throw new IllegalArgumentException("--tail-chunks " + f.tailChunks + ": expected 0 (the default) or more"
                        + " (fix: pass e.g. --tail-chunks 4)");
            }
            for (String s : f.shapes) {
                shape(s);
            }
            return f;
        });
        CudaTransport cuda = CudaTransport.create();
        int devices = cuda.deviceCount();
        int world = flags.gpus == 0 ? devices : flags.gpus;
        if (world < 1 || world > devices) {
            throw new IllegalStateException("--gpus=" + flags.gpus + ": this machine has " + devices + " GPUs");
        }
        if (CudaTransport.cublasUnavailableReason() != null) {
            throw new IllegalStateException(CudaTransport.cublasUnavailableReason());
        }
        List<List<Cell>> perRank = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)),
                cuda, group -> measure(group, flags));
        String device = deviceName;
        String report = report(perRank, world, device, flags);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
        if (flags.raw != null) {
            try (RawCsv csv = RawCsv.open(flags.raw, CSV_COLUMNS)) {
                for (int i = 0; i < perRank.getFirst().size(); i++) {
                    Cell c = slowest(perRank, i);
                    int[] thf = shape(c.shape());
                    csv.row(world, device, thf[0], thf[1], thf[2], c.layers(), c.variant(), RawCsv.num("%.3f", c.stepMillis()),
                            RawCsv.num("%.4f", spread(perRank, i)), c.deviceUsed(), c.memory().total(), c.memory().state(),
                            c.memory().weights(), c.memory().gradients(), c.memory().activations(), runtimeBytes,
                            Long.toHexString(c.outputCrc()),
                            c.check());
                }
            }
        }
        cuda.close();
        boolean failed = perRank.stream().flatMap(List::stream).anyMatch(c -> !c.check().startsWith("ok"));
        if (failed) {
            System.err.println("FsdpMlpBench: a check failed (see the check column)");
            System.exit(1);
        }
    }

    /** Set by rank 0's thread for the report. */
    private static volatile String deviceName = "?";

    /** One rank's cells. */
    static List<Cell> measure(Group group, Flags flags) {
        List<Cell> cells = new ArrayList<>();
        try (Communicator probe = Communicator.create(group)) {
            DeviceCommunicator device = probe.unwrap(DeviceCommunicator.class).orElseThrow();
            if (group.rank() == 0) {
                deviceName = device.deviceName();
            }
            probe.barrier();
            long before = device.memoryInfo()[0];
            try (FullyShardedMlp tiny = new FullyShardedMlp(group, 64, new int[] {64, 64, 64}, Sharding.FULL, Adam.defaults())) {
                tiny.step();
                tiny.synchronize();
                long used = before - device.memoryInfo()[0] - tiny.memory().total();
                if (group.rank() == 0) {
                    runtimeBytes = used;
                }
            }
            for (String shape : flags.shapes) {
                int[] thf = shape(shape);
                int[] widths = widths(thf[1], thf[2], flags.blocks);
                Cell first = null;
                for (String variant : flags.variants) {
                    Sharding sharding = variant.startsWith("fsdp") ? Sharding.FULL : Sharding.NONE;
                    int tail = variant.equals("fsdp-whole") ? 1
                            : flags.tailChunks == 0 ? ShardedStepPlan.defaultTailChunks(group.worldSize()) : flags.tailChunks;
                    probe.barrier();
                    long free0 = device.memoryInfo()[0];
                    // the first variant's first output is checked in float64; the second's output after the same steps
                    // on the same data must then be the first's, bit for bit (same sums in the same order, same Adam)
                    // (fsdp-whole sums layer 0's gradient in another GEMM split: checked in float64 itself, not bitwise)
                    boolean whole = variant.equals("fsdp-whole");
                    Cell cell = measureCell(group, device, shape, thf[0], widths, sharding, tail, variant, free0, flags,
                            first == null || whole ? flags.checkRows : 0);
                    if (first == null) {
                        first = cell;
                    } else if (!whole && cell.check().startsWith("ok") && first.bitwise() && cell.bitwise()) {
                        cell = cell.outputCrc() == first.outputCrc()
                                ? cell.checked("ok (output after the steps bitwise " + first.variant() + "'s)")
                                : cell.failed("output after the steps differs from " + first.variant() + "'s (crc "
                                        + Long.toHexString(cell.outputCrc()) + " vs " + Long.toHexString(first.outputCrc()) + ")");
                    }
                    cells.add(cell);
                    if (group.rank() == 0) {
                        System.err.printf(Locale.ROOT, "[rank 0] %s %s: %.3f ms/step, device used %.2f GiB, accounted %.2f GiB, %s%n",
                                shape, variant, cell.stepMillis(), cell.deviceUsed() / GIB, cell.memory().total() / GIB, cell.check());
                    }
                }
            }
        }
        return cells;
    }

    private static final double GIB = 1024.0 * 1024 * 1024;

    private static Cell measureCell(Group group, DeviceCommunicator probe, String shape, int tokens, int[] widths,
                                    Sharding sharding, int tailChunks, String variant, long free0, Flags flags, int checkRows) {
        int layers = widths.length - 1;
        int rank = group.rank();
        try (FullyShardedMlp mlp = new FullyShardedMlp(group, tokens, widths, sharding,
                new Adam(flags.lr, 0.9f, 0.999f, 1e-8f), tailChunks)) {
            for (int l = 0; l < layers; l++) {
                int layer = l;
                double scale = 1 / Math.sqrt(widths[l]);
                mlp.setWeights(l, i -> weightAt(layer, i, scale));
            }
            DeviceCommunicator device = mlp.device();
            float[] inputTile = tile(7000 + rank, 1.0);
            float[] gradTile = tile(8000 + rank, 0.01);
            fill(device, mlp.input(), inputTile);
            fill(device, mlp.outputGradient(), gradTile);
            long leastFree = probe.memoryInfo()[0];
            // the first step, checked against float64 rows
            mlp.step();
            String check = checkFirstOutput(mlp, tokens, widths, inputTile, checkRows);
            for (int i = 0; i < flags.warmup; i++) {
                mlp.step();
            }
            mlp.synchronize();
            leastFree = Math.min(leastFree, probe.memoryInfo()[0]);
            double[] perStep = new double[flags.reps];
            for (int r = 0; r < flags.reps; r++) {
                perStep[r] = device.elapsedMillis(() -> {
                    for (int s = 0; s < flags.steps; s++) {
                        mlp.step();
                    }
                }) / flags.steps;
            }
            mlp.synchronize();
            leastFree = Math.min(leastFree, probe.memoryInfo()[0]);
            if (flags.timeline) {
                printTimeline(group, mlp, shape, variant);
            }
            long[] crcAndFinite = crc(device, mlp.output(), (long) tokens * widths[layers]);
            if (crcAndFinite[1] != 0 && check.startsWith("ok")) {
                check = "FAILED: " + crcAndFinite[1] + " output elements are not finite after the steps";
            }
            Arrays.sort(perStep);
            // a replica's all-reduce through NCCL sums in another order than the reduce-scatter: not bitwise comparable
            boolean bitwise = mlp.allReduceAlgorithms() == null || !mlp.allReduceAlgorithms().contains(Algorithm.NCCL);
            return new Cell(shape, layers, variant, perStep[perStep.length / 2], free0 - leastFree, mlp.memory(), crcAndFinite[0],
                    bitwise, check);
        }
    }

    /**
     * One step's timeline, after the timings (outside them): three recorded steps back to back (the steady state: the
     * last one starts behind the previous one's join, as in the timed loop), the last one read. Rank 0 prints the summary
     * (head: the exposed first gather; tail: what is left after the last GEMM, by action) and every rank the per-action
     * table to the log. The output after these steps is what the CRC check compares, the same count of steps per variant.
     */
    private static void printTimeline(Group group, FullyShardedMlp mlp, String shape, String variant) {
        group.allGatherBytes("fsdp-bench-timeline", new byte[0]); // every rank synchronized: no kernel waits for a peer
        try (org.symmem4j.parallel.tensor.StepTimeline recorder = mlp.recordTimeline()) {
            for (int s = 0; s < 3; s++) {
                mlp.step();
            }
            org.symmem4j.parallel.tensor.StepTimeline.Timeline t = recorder.read();
            if (group.rank() == 0) {
                System.err.printf(Locale.ROOT, "[rank 0] %s %s timeline (tail chunks %d): %s%n", shape, variant,
                        mlp.plan().tailChunks(), t.summary());
            }
            System.err.printf(Locale.ROOT, "timeline rank %d %s %s:%n%s", group.rank(), shape, variant, t.table());
        }
        group.allGatherBytes("fsdp-bench-timeline-done", new byte[0]);
    }

    /** {hidden, ffn, hidden, ffn, ..., hidden}: B blocks. */
    static int[] widths(int hidden, int ffn, int blocks) {
        int[] w = new int[2 * blocks + 1];
        for (int i = 0; i < w.length; i++) {
            w[i] = i % 2 == 0 ? hidden : ffn;
        }
        return w;
    }

    /** {@code TxHxF} as {T, H, F}. */
    static int[] shape(String txhxf) {
        String[] p = txhxf.toLowerCase(Locale.ROOT).split("x");
        if (p.length != 3) {
            throw new IllegalArgumentException("shape " + txhxf + ": expected tokens x hidden x ffn, e.g. 8192x4096x14336");
        }
        int[] v = new int[3];
        for (int i = 0; i < 3; i++) {
            v[i] = Integer.parseInt(p[i].trim());
            if (v[i] <= 0) {
                throw new IllegalArgumentException("shape " + txhxf + ": every size must be positive");
            }
        }
        return v;
    }

    /** Layer l's weight at flat index i: a counter-based uniform in ±scale (every rank computes any element alike). */
    static double weightAt(int layer, long i, double scale) {
        long z = i * 0x9E3779B97F4A7C15L + (layer + 1) * 0xD1B54A32D192ED03L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        z ^= z >>> 31;
        return ((z >>> 11) * 0x1.0p-53 * 2 - 1) * scale;
    }

    /** 1 Mi bfloat16-exact values in ±scale: a buffer is this tile repeated. */
    static float[] tile(long seed, double scale) {
        SplittableRandom rnd = new SplittableRandom(seed);
        float[] t = new float[1 << 20];
        for (int i = 0; i < t.length; i++) {
            t[i] = BFloat16.toFloat(BFloat16.fromFloat((float) (rnd.nextDouble(-1, 1) * scale)));
        }
        return t;
    }

    private static void fill(DeviceCommunicator device, MemorySegment buffer, float[] tile) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate((long) tile.length * 2, 16);
            for (int i = 0; i < tile.length; i++) {
                host.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat(tile[i]));
            }
            for (long at = 0; at < buffer.byteSize(); at += host.byteSize()) {
                long n = Math.min(host.byteSize(), buffer.byteSize() - at);
                device.copyFromHost(buffer.asSlice(at, n), host.asSlice(0, n));
            }
        }
    }

    /**
     * The first {@code rows} rows of the first step's output against float64 from the initial weights (rounded to bfloat16
     * as the GPU casts them) and the batch, each layer's output rounded to bfloat16 as the GPU stores it.
     */
    static String checkFirstOutput(FullyShardedMlp mlp, int tokens, int[] widths, float[] inputTile, int rows) {
        rows = Math.min(rows, tokens);
        if (rows <= 0) {
            return "ok (not checked)";
        }
        int layers = widths.length - 1;
        double[][] a = new double[rows][];
        for (int r = 0; r < rows; r++) {
            a[r] = new double[widths[0]];
            for (int j = 0; j < widths[0]; j++) {
                a[r][j] = inputTile[(int) (((long) r * widths[0] + j) % inputTile.length)];
            }
        }
        for (int l = 0; l < layers; l++) {
            int in = widths[l];
            int out = widths[l + 1];
            double scale = 1 / Math.sqrt(in);
            double[][] z = new double[rows][out];
            for (int i = 0; i < in; i++) {
                long base = (long) i * out;
                for (int j = 0; j < out; j++) {
                    double w = BFloat16.toFloat(BFloat16.fromFloat((float) weightAt(l, base + j, scale)));
                    for (int r = 0; r < rows; r++) {
                        z[r][j] += a[r][i] * w;
                    }
                }
            }
            for (int r = 0; r < rows; r++) {
                for (int j = 0; j < out; j++) {
                    double v = BFloat16.toFloat(BFloat16.fromFloat((float) z[r][j]));
                    z[r][j] = l < layers - 1 ? Math.max(v, 0) : v;
                }
            }
            a = z;
        }
        int width = widths[layers];
        double[] got;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate((long) rows * width * 2, 16);
            mlp.device().copyToHost(host, mlp.output().asSlice(0, host.byteSize()));
            got = new double[rows * width];
            for (int i = 0; i < got.length; i++) {
                got[i] = BFloat16.toFloat(host.getAtIndex(ValueLayout.JAVA_SHORT, i));
            }
        }
        double largest = 0;
        double worst = 0;
        for (int r = 0; r < rows; r++) {
            for (int j = 0; j < width; j++) {
                largest = Math.max(largest, Math.abs(a[r][j]));
                worst = Math.max(worst, Math.abs(got[r * width + j] - a[r][j]));
            }
        }
        if (!(largest > 0)) {
            return "FAILED: the reference rows are all zero";
        }
        double relative = worst / largest;
        return relative <= 0.02 ? String.format(Locale.ROOT, "ok (first output %d rows vs float64: max error %.2e of max)", rows,
                relative) : String.format(Locale.ROOT, "FAILED: first output rows vs float64: max error %.3g of the largest"
                + " value %.3g (expected <= 2%%)", relative, largest);
    }

    /** CRC-32 of a bfloat16 buffer's bytes, and how many of its elements are not finite. */
    private static long[] crc(DeviceCommunicator device, MemorySegment buffer, long count) {
        CRC32 crc = new CRC32();
        long bad = 0;
        try (Arena arena = Arena.ofConfined()) {
            long chunk = Math.min(count * 2, 64L << 20);
            MemorySegment host = arena.allocate(chunk, 16);
            byte[] bytes = new byte[(int) chunk];
            for (long at = 0; at < count * 2; at += chunk) {
                long n = Math.min(chunk, count * 2 - at);
                device.copyToHost(host.asSlice(0, n), buffer.asSlice(at, n));
                MemorySegment.copy(host, ValueLayout.JAVA_BYTE, 0, bytes, 0, (int) n);
                crc.update(bytes, 0, (int) n);
                for (long i = 0; i < n / 2; i++) {
                    if ((host.getAtIndex(ValueLayout.JAVA_SHORT, i) & 0x7F80) == 0x7F80) {
                        bad++;
                    }
                }
            }
        }
        return new long[] {crc.getValue(), bad};
    }

    private static Cell slowest(List<List<Cell>> perRank, int i) {
        Cell worst = perRank.getFirst().get(i);
        for (List<Cell> cells : perRank) {
            Cell c = cells.get(i);
            if (c.stepMillis() > worst.stepMillis()) {
                worst = c;
            }
        }
        // the largest memory and the first failed check of any rank
        long used = perRank.stream().mapToLong(c -> c.get(i).deviceUsed()).max().orElse(0);
        String check = perRank.stream().map(c -> c.get(i).check()).filter(s -> !s.startsWith("ok")).findFirst()
                .orElse(worst.check());
        return new Cell(worst.shape(), worst.layers(), worst.variant(), worst.stepMillis(), used, worst.memory(),
                worst.outputCrc(), worst.bitwise(), check);
    }

    private static double spread(List<List<Cell>> perRank, int i) {
        double lo = Double.MAX_VALUE;
        double hi = 0;
        for (List<Cell> cells : perRank) {
            lo = Math.min(lo, cells.get(i).stepMillis());
            hi = Math.max(hi, cells.get(i).stepMillis());
        }
        return hi / lo - 1;
    }

    private static String report(List<List<Cell>> perRank, int world, String device, Flags flags) {
        StringBuilder b = new StringBuilder();
        b.append("# Fully sharded MLP step (FSDP) vs replicas (DDP), ").append(world).append(" x ").append(device).append("\n\n");
        b.append(String.format(Locale.ROOT, "bf16 GEMMs (cuBLAS), float32 master weights and Adam (lr %g), %d block(s);"
                + " %d warm-up steps, median of %d timings of %d steps (slowest rank); memory: the device's used bytes"
                + " (cuMemGetInfo) and the model's own allocations, per rank; of the device-used bytes, %.2f GiB are the"
                + " runtime's whatever the model (two communicators with NCCL, cuBLAS workspaces; rank 0, measured with a"
                + " tiny model).%n%n", flags.lr, flags.blocks, flags.warmup, flags.reps, flags.steps, runtimeBytes / GIB));
        b.append("| tokens/rank x hidden x ffn | variant | ms/step | device used GiB | accounted GiB | state | weights |"
                + " gradients | activations | check |\n");
        b.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for (int i = 0; i < perRank.getFirst().size(); i++) {
            Cell c = slowest(perRank, i);
            FullyShardedMlp.Memory m = c.memory();
            b.append(String.format(Locale.ROOT, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |%n",
                    c.shape(), c.variant(), c.stepMillis(), c.deviceUsed() / GIB, m.total() / GIB, m.state() / GIB,
                    m.weights() / GIB, m.gradients() / GIB, m.activations() / GIB, c.check()));
        }
        return b.toString();
    }
}
