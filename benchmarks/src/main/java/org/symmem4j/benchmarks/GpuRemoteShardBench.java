package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceFunction;
import org.symmem4j.parallel.DeviceKernels;
import org.symmem4j.parallel.DeviceModule;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.KernelArguments;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.DistributedTensor;
import org.symmem4j.state.DistributedTensor.Transfer;
import org.symmem4j.state.ElementType;
import org.symmem4j.state.TensorSharding;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Issue #33's remote-shard read on GPUs: rank 0 reads the first {@code bytes} of a peer's shard of a row-sharded
 * {@link DistributedTensor} into a buffer of its own GPU, 1 KiB … 256 MiB, three ways in the same run —
 * <ul>
 *   <li><b>kernel</b>: {@code getRows(..., Transfer.KERNEL)}, a kernel on GPU 0 whose loads read the peer's shard
 *       zero-copy over NVLink ({@code symmem_copy});</li>
 *   <li><b>copy engine</b>: {@code getRows(..., Transfer.COPY_ENGINE)}, {@code cuMemcpyAsync} from the peer's shard;</li>
 *   <li><b>NCCL</b>: the same bytes sent by the peer with {@code ncclSend} from its shard and received by rank 0 with
 *       {@code ncclRecv} (NCCL P2P, the seed's baseline).</li>
 * </ul>
 * and, up to {@code --in-kernel-max-bytes}, the read a kernel that is already running makes itself:
 * <ul>
 *   <li><b>in-kernel read</b>: one block of {@code remote_read_rounds} ({@code kernels/src/main/cuda/bench/}, loaded
 *       through {@code DeviceKernels} as a user's kernel would be) reads the bytes of the peer's shard through its
 *       zero-copy pointer ({@link DistributedTensor#shard(int)}) {@value #ROUNDS} times, each round's loads returned
 *       before the next, timed by the GPU's clock: what a kernel pays to read remote data itself, with no launch and
 *       no copy; beside it the same read of rank 0's own shard. The kernel's checksum of the words it read is
 *       compared with the one the host computes from the pattern.</li>
 * </ul>
 * One rank per GPU (threads of one JVM); with more than 2 GPUs every peer in turn. Each cell is the median of
 * {@code --reps} CUDA-event timings on GPU 0's stream of a batch of reads (100 below 4 MiB, 20 below 64 MiB, 5
 * from 64 MiB), eager (one launch per read) and graph-captured. After the timings every variant's bytes are checked
 * against the peer's pattern (all of them up to 16 MiB, the first and last MiB above): a read that moves the wrong
 * bytes fails the run instead of producing a number.
 *
 * <pre>
 *   GpuRemoteShardBench [--out report.md] [--raw report.csv] [--reps R] [--gpus N] [--max-bytes B]
 *                       [--in-kernel-max-bytes B]
 * </pre>
 */
public final class GpuRemoteShardBench {

    static final String KERNEL = "kernel load (zero-copy)";
    static final String COPY_ENGINE = "copy engine";
    static final String NCCL = "NCCL send/recv";
    static final String IN_KERNEL_REMOTE = "in-kernel read, peer's shard";
    static final String IN_KERNEL_LOCAL = "in-kernel read, own shard";
    /** The in-kernel read's image and kernel (built by the kernels module when nvcc is there). */
    static final String IN_KERNEL_IMAGE = "/org/symmem4j/kernels/bench/remote_read_rounds.fatbin";
    static final String IN_KERNEL_SYMBOL = "remote_read_rounds";
    /** The in-kernel read's block (its {@code __launch_bounds__}) and rounds per launch. */
    static final int IN_KERNEL_BLOCK = 1024;
    static final int ROUNDS = 1000;
    private static final long FULL_CHECK_BYTES = 16L << 20;
    private static final long SAMPLE_BYTES = 1L << 20;

    /** The GPU model, for the report. */
    private static volatile String deviceName = "unknown";

    private GpuRemoteShardBench() {
    }

    /** One timing: rank 0 reading {@code bytes} of {@code peer}'s shard by {@code variant}. */
    record Cell(int peer, long bytes, String variant, boolean graph, double micros, double spread) {
    }

    static final List<String> IN_KERNEL_CSV_COLUMNS = List.of("gpus", "device", "reader", "peer", "bytes",
            "in_kernel_remote_us", "in_kernel_local_us", "nccl_eager_us", "nccl_graph_us",
            "nccl_eager_vs_in_kernel_remote", "nccl_graph_vs_in_kernel_remote", "in_kernel_remote_gb_per_s",
            "in_kernel_remote_spread", "in_kernel_local_spread", "rounds", "reps");

    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "reader", "peer", "mode", "bytes", "kernel_us",
            "copy_engine_us", "nccl_us", "kernel_speedup_vs_nccl", "copy_engine_speedup_vs_nccl", "kernel_gb_per_s",
            "copy_engine_gb_per_s", "nccl_gb_per_s", "kernel_spread", "copy_engine_spread", "nccl_spread", "reps");

    @Command(name = "GpuRemoteShardBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Remote-shard read of a distributed tensor on GPUs: zero-copy loads in"
                    + " a kernel and the copy engine against NCCL send/recv of the same bytes, in the same run.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write the report's numbers as CSV to FILE")
        Path raw;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell (the median is reported)")
        int reps = 7;
        @Option(names = "--gpus", paramLabel = "N", description = "GPUs to use, one rank each (0: all)")
        int gpus = 0;
        @Option(names = "--max-bytes", paramLabel = "B", description = "largest read, a power of 4 times 1 KiB")
        long maxBytes = 256L << 20;
        @Option(names = "--in-kernel-max-bytes", paramLabel = "B", description = "largest in-kernel read (one block"
                + " reads it, so its bandwidth is one multiprocessor's); 0 skips the in-kernel cells")
        long inKernelMaxBytes = 256L << 10;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--reps", f.reps);
            if (f.gpus < 0) {
                throw new IllegalArgumentException("--gpus=" + f.gpus + " expected >= 0 (0: all)");
            }
            if (f.maxBytes < 1024 || Long.bitCount(f.maxBytes) != 1) {
                throw new IllegalArgumentException("--max-bytes=" + f.maxBytes + " expected a power of 2, at least 1024");
            }
            if (f.inKernelMaxBytes < 0 || f.inKernelMaxBytes > f.maxBytes) {
                throw new IllegalArgumentException("--in-kernel-max-bytes=" + f.inKernelMaxBytes + " expected 0 (none)"
                        + " up to --max-bytes=" + f.maxBytes);
            }
            return f;
        });
        List<Long> sizes = new ArrayList<>();
        for (long b = 1024; b <= flags.maxBytes; b *= 4) {
            sizes.add(b);
        }
        byte[] image = flags.inKernelMaxBytes == 0 ? null : inKernelImage();
        try (CudaTransport cuda = CudaTransport.create()) {
            int devices = cuda.deviceCount();
            int world = flags.gpus == 0 ? devices : flags.gpus;
            if (world < 2 || world > devices) {
                throw new IllegalStateException("the remote-shard benchmark needs 2 to " + devices + " GPUs (one rank"
                        + " each); found " + devices + " devices, asked for " + world);
            }
            List<List<Cell>> perRank = InJvmWorld.runOnEveryRank(world,
                    GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda,
                    group -> measure(group, sizes, flags.reps, flags.inKernelMaxBytes, image));
            List<Cell> cells = perRank.getFirst();
            String report = report(cuda.runtimeVersions(), cells, sizes, world, devices, flags.reps);
            report += inKernelReport(cells, sizes, world, flags.inKernelMaxBytes == 0 ? "skipped (--in-kernel-max-bytes 0)"
                    : image == null ? "ABSENT: " + IN_KERNEL_IMAGE + " is not on the class path (the kernels module was"
                    + " built without nvcc)" : null);
            System.out.print(report);
            if (flags.out != null) {
                Files.writeString(flags.out, report);
            }
            if (flags.raw != null) {
                writeRaw(flags.raw, cells, sizes, world, flags.reps);
                String name = flags.raw.getFileName().toString().replaceFirst("\\.csv$", "");
                writeInKernelRaw(flags.raw.resolveSibling(name + "-in-kernel.csv"), cells, sizes, world, flags.reps);
            }
        }
    }

    /** The int32 every rank writes at element {@code i} of its shard. */
    static int pattern(int rank, long i) {
        return (int) ((rank + 1) * 1_000_003L + i * 7);
    }

    /**
     * The in-kernel read's fatbin from the class path, or null: then no in-kernel cell is measured, and the report says
     * why.
     */
    private static byte[] inKernelImage() throws IOException {
        try (InputStream in = GpuRemoteShardBench.class.getResourceAsStream(IN_KERNEL_IMAGE)) {
            return in == null ? null : in.readAllBytes();
        }
    }

    /**
     * Rank 0's cells (every peer, size, variant, eager and graph; the in-kernel reads up to {@code inKernelMaxBytes}
     * where {@code image} is there); the peers only serve and join the barriers.
     */
    static List<Cell> measure(Group group, List<Long> sizes, int reps, long inKernelMaxBytes, byte[] image) {
        int world = group.worldSize();
        int me = group.rank();
        long maxBytes = sizes.getLast();
        long shardInts = maxBytes / Integer.BYTES;
        List<Cell> cells = new ArrayList<>();
        try (Communicator comm = Communicator.create(group)) {
            DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            deviceName = gpu.deviceName();
            MemorySegment dst = gpu.allocateDevice(maxBytes);
            try (Arena arena = Arena.ofConfined();
                 DistributedTensor t = DistributedTensor.create(comm, TensorSharding.rows(), ElementType.INT32,
                         shardInts * world)) {
                MemorySegment host = arena.allocate(maxBytes, 64);
                for (long i = 0; i < shardInts; i++) {
                    host.setAtIndex(ValueLayout.JAVA_INT, i, pattern(me, i));
                }
                gpu.copyFromHost(t.localShard(), host);
                t.barrier();
                if (image != null && inKernelMaxBytes > 0) {
                    // collective (every rank loads the module); rank 0 alone launches, the shards stay as written
                    try (DeviceModule module = comm.unwrap(DeviceKernels.class).orElseThrow().load(image)) {
                        DeviceFunction read = module.function(IN_KERNEL_SYMBOL); // collective too
                        if (me == 0) {
                            cells.addAll(measureInKernel(gpu, read, t, world, sizes, inKernelMaxBytes, reps));
                        }
                        t.barrier(); // the module is unloaded collectively once rank 0's reads are done
                    }
                }
                for (int peer = 1; peer < world; peer++) {
                    final int p = peer;
                    for (long bytes : sizes) {
                        long rows = bytes / Integer.BYTES;
                        long first = t.firstRow(p);
                        MemorySegment into = dst.asSlice(0, bytes);
                        Map<String, Runnable> reader = new LinkedHashMap<>();
                        reader.put(KERNEL, () -> t.getRows(first, rows, into, Transfer.KERNEL));
                        reader.put(COPY_ENGINE, () -> t.getRows(first, rows, into, Transfer.COPY_ENGINE));
                        MemorySegment source = t.localShard().asSlice(0, Math.min(bytes, t.localShard().byteSize()));
                        reader.put(NCCL, () -> gpu.recv(into, p));
                        for (Map.Entry<String, Runnable> v : reader.entrySet()) {
                            boolean nccl = v.getKey().equals(NCCL);
                            for (boolean graph : new boolean[] {false, true}) {
                                if (me == 0) {
                                    poison(gpu, dst, host, bytes);
                                    double[] samples = GpuAllReduceBench.time(comm, gpu, v.getValue(), bytes, graph, reps);
                                    check(gpu, into, host, p, v.getKey(), bytes);
                                    cells.add(new Cell(p, bytes, v.getKey(), graph, RepetitionSpread.median(samples),
                                            RepetitionSpread.spread(samples)));
                                } else if (me == p && nccl) {
                                    GpuAllReduceBench.time(comm, gpu, () -> gpu.send(source, 0), bytes, graph, reps);
                                } else {
                                    for (int r = 0; r < reps; r++) {
                                        comm.barrier(); // the timing loop's one collective per sample
                                    }
                                }
                            }
                        }
                    }
                }
                gpu.synchronize();
                t.barrier(); // no rank frees its shard while rank 0 may still read it
            }
            gpu.freeDevice(dst);
        }
        return cells;
    }

    /**
     * Rank 0's in-kernel reads of every size up to {@code maxBytes}: of its own shard (cells under peer 0), then of each
     * peer's; each the median of {@code reps} launches of {@value #ROUNDS} rounds, per round, after one launch not
     * timed.
     */
    static List<Cell> measureInKernel(DeviceCommunicator gpu, DeviceFunction read, DistributedTensor t, int world,
                                      List<Long> sizes, long maxBytes, int reps) {
        List<Cell> cells = new ArrayList<>();
        MemorySegment out = gpu.allocateDevice(16);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment result = arena.allocate(16, 8);
            // rank 0's own shard once (its cells under peer 0), then every peer's
            for (int owner = 0; owner < world; owner++) {
                for (long bytes : sizes) {
                    if (bytes > maxBytes) {
                        continue;
                    }
                    long want = inKernelCheck(owner, bytes, ROUNDS);
                    KernelArguments args = new KernelArguments().pointer(t.shard(owner)).int64(bytes).int32(ROUNDS)
                            .pointer(out);
                    read.launch(1, IN_KERNEL_BLOCK, args); // warm-up: the first launch loads and caches
                    gpu.synchronize();
                    double[] samples = new double[reps];
                    for (int r = 0; r < reps; r++) {
                        read.launch(1, IN_KERNEL_BLOCK, args);
                        gpu.synchronize();
                        gpu.copyToHost(result, out);
                        samples[r] = result.get(ValueLayout.JAVA_LONG, 0) / 1e3 / ROUNDS;
                        long got = result.get(ValueLayout.JAVA_LONG, 8);
                        if (got != want) {
                            throw new IllegalStateException("in-kernel read of " + bytes + " bytes of rank " + owner
                                    + "'s shard: checksum " + Long.toHexString(got) + ", expected "
                                    + Long.toHexString(want) + " (the kernel read the wrong bytes; the timing is void)");
                        }
                    }
                    cells.add(new Cell(owner, bytes, owner == 0 ? IN_KERNEL_LOCAL : IN_KERNEL_REMOTE, false,
                            RepetitionSpread.median(samples), RepetitionSpread.spread(samples)));
                }
            }
        } finally {
            gpu.freeDevice(out);
        }
        return cells;
    }

    /**
     * The in-kernel read's checksum ({@code remote_read_rounds.cu}): over the rounds r, XOR of (the XOR of every 32-bit
     * word of the first {@code bytes} of {@code rank}'s shard + r), in 32-bit arithmetic.
     */
    static long inKernelCheck(int rank, long bytes, int rounds) {
        int words = 0;
        for (long i = 0; i < bytes / Integer.BYTES; i++) {
            words ^= pattern(rank, i);
        }
        int check = 0;
        for (int r = 0; r < rounds; r++) {
            check ^= words + r;
        }
        return Integer.toUnsignedLong(check);
    }

    /** Fills rank 0's destination with bytes no peer's pattern has, so a read that moves nothing is caught. */
    private static void poison(DeviceCommunicator gpu, MemorySegment dst, MemorySegment host, long bytes) {
        MemorySegment h = host.asSlice(0, bytes);
        h.fill((byte) 0xA5);
        gpu.copyFromHost(dst.asSlice(0, bytes), h);
    }

    /** Checks the bytes read against peer's pattern: all of them up to 16 MiB, the first and last MiB above. */
    private static void check(DeviceCommunicator gpu, MemorySegment into, MemorySegment host, int peer, String variant,
                              long bytes) {
        long[][] ranges = bytes <= FULL_CHECK_BYTES ? new long[][] {{0, bytes}}
                : new long[][] {{0, SAMPLE_BYTES}, {bytes - SAMPLE_BYTES, SAMPLE_BYTES}};
        for (long[] range : ranges) {
            MemorySegment h = host.asSlice(0, range[1]);
            gpu.copyToHost(h, into.asSlice(range[0], range[1]));
            long firstInt = range[0] / Integer.BYTES;
            for (long i = 0; i < range[1] / Integer.BYTES; i++) {
                int got = h.getAtIndex(ValueLayout.JAVA_INT, i);
                int want = pattern(peer, firstInt + i);
                if (got != want) {
                    throw new IllegalStateException("remote-shard read " + variant + " of " + bytes + " bytes from rank "
                            + peer + ": int " + (firstInt + i) + " is " + got + ", expected " + want
                            + " (the read moved the wrong bytes; the timing is void)");
                }
            }
        }
    }

    private static String key(int peer, long bytes, String variant, boolean graph) {
        return peer + "|" + bytes + "|" + variant + "|" + graph;
    }

    private static Map<String, Cell> byKey(List<Cell> cells) {
        Map<String, Cell> t = new LinkedHashMap<>();
        for (Cell c : cells) {
            t.put(key(c.peer(), c.bytes(), c.variant(), c.graph()), c);
        }
        return t;
    }

    private static double gbps(long bytes, double micros) {
        return bytes / (micros * 1e-6) / 1e9;
    }

    static String report(String versions, List<Cell> cells, List<Long> sizes, int world, int devices, int reps) {
        Map<String, Cell> t = byKey(cells);
        StringBuilder md = new StringBuilder("# GPU remote-shard read benchmark (issue #33)\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- device: ").append(world).append(" of ").append(devices).append(" × ").append(deviceName).append('\n');
        md.append("- ").append(versions).append('\n');
        md.append("- method: a row-sharded DistributedTensor (int32, ").append(GpuAllReduceBench.size(sizes.getLast()))
                .append(" per rank), one rank per GPU (threads of one JVM); rank 0 reads the first `size` bytes of a")
                .append(" peer's shard into a buffer on its own GPU: kernel = getRows(..., Transfer.KERNEL), a kernel's")
                .append(" 16-byte loads of the peer's memory over NVLink (zero-copy); copy engine = getRows(...,")
                .append(" Transfer.COPY_ENGINE), cuMemcpyAsync from the peer's shard; NCCL = the peer's ncclSend of the")
                .append(" same bytes from its shard, rank 0's ncclRecv. Median of ").append(reps)
                .append(" CUDA-event timings on GPU 0's stream of a batch of reads (100 below 4 MiB, 20 below 64 MiB, 5")
                .append(" from 64 MiB), per read; every variant's bytes checked against the peer's pattern after its timing.\n\n");
        List<String> tenfold = new ArrayList<>();
        for (int peer = 1; peer < world; peer++) {
            for (boolean graph : new boolean[] {true, false}) {
                md.append("## GPU ").append(peer).append(" -> GPU 0, ").append(graph ? "graph-captured" : "eager")
                        .append("\n\n");
                md.append("| size | kernel µs | copy engine µs | NCCL µs | kernel vs NCCL | copy engine vs NCCL |"
                        + " kernel GB/s | copy engine GB/s | NCCL GB/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
                for (long bytes : sizes) {
                    double k = t.get(key(peer, bytes, KERNEL, graph)).micros();
                    double ce = t.get(key(peer, bytes, COPY_ENGINE, graph)).micros();
                    double n = t.get(key(peer, bytes, NCCL, graph)).micros();
                    md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %.2f× | %.2f× | %.1f | %.1f | %.1f |%n",
                            GpuAllReduceBench.size(bytes), k, ce, n, n / k, n / ce, gbps(bytes, k), gbps(bytes, ce),
                            gbps(bytes, n)));
                    if (graph && Math.max(n / k, n / ce) >= 10) {
                        tenfold.add("GPU " + peer + ", " + GpuAllReduceBench.size(bytes));
                    }
                }
                md.append('\n');
            }
        }
        md.append("## The seed's claim: 10× faster remote access than NCCL P2P (graph-captured, best of kernel and copy engine)\n\n");
        md.append(tenfold.isEmpty() ? "Met at no size.\n" : "Met at: " + String.join("; ", tenfold) + ".\n");
        return md.toString();
    }

    /**
     * The in-kernel read's section: per peer and size it was measured at, the read of the peer's shard and of rank 0's
     * own by a running kernel, against NCCL send/recv of the same bytes (eager and graph-captured, from the same run),
     * and where the seed's tenfold holds for it; or why there is no section ({@code absent}).
     */
    static String inKernelReport(List<Cell> cells, List<Long> sizes, int world, String absent) {
        if (absent != null) {
            return "\n## In-kernel read\n\nNot measured: " + absent + ".\n";
        }
        Map<String, Cell> t = byKey(cells);
        StringBuilder md = new StringBuilder("\n## In-kernel read: a running kernel reads the bytes itself\n\n");
        md.append("One block of `remote_read_rounds` (1024 threads, 16-byte `ld.relaxed.sys` loads, so no cache of the")
                .append(" reader serves a round) reads the first `size` bytes ").append(ROUNDS).append(" times through")
                .append(" the shard's device pointer, each round's loads returned before the next; per round, median of")
                .append(" the launches, timed by the GPU's clock (`%globaltimer`): no launch and no copy in it. The NCCL")
                .append(" columns are the send/recv cells above. The checksum of every launch matched the pattern.\n\n");
        List<String> tenfold = new ArrayList<>();
        for (int peer = 1; peer < world; peer++) {
            md.append("### GPU ").append(peer).append(" -> GPU 0\n\n");
            md.append("| size | in-kernel, peer's shard µs | in-kernel, own shard µs | NCCL eager µs | NCCL graph µs |"
                    + " NCCL eager / in-kernel | NCCL graph / in-kernel | in-kernel GB/s |\n"
                    + "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for (long bytes : sizes) {
                Cell remote = t.get(key(peer, bytes, IN_KERNEL_REMOTE, false));
                if (remote == null) {
                    continue;
                }
                double r = remote.micros();
                double l = t.get(key(0, bytes, IN_KERNEL_LOCAL, false)).micros();
                double ne = t.get(key(peer, bytes, NCCL, false)).micros();
                double ng = t.get(key(peer, bytes, NCCL, true)).micros();
                md.append(String.format(Locale.ROOT, "| %s | %.3f | %.3f | %.2f | %.2f | %.1f× | %.1f× | %.1f |%n",
                        GpuAllReduceBench.size(bytes), r, l, ne, ng, ne / r, ng / r, gbps(bytes, r)));
                if (ng / r >= 10) {
                    tenfold.add("GPU " + peer + ", " + GpuAllReduceBench.size(bytes));
                }
            }
            md.append('\n');
        }
        md.append("The seed's 10× against NCCL P2P (graph-captured) by the in-kernel read: ")
                .append(tenfold.isEmpty() ? "met at no size.\n" : "met at " + String.join("; ", tenfold) + ".\n");
        return md.toString();
    }

    private static void writeInKernelRaw(Path file, List<Cell> cells, List<Long> sizes, int world, int reps)
            throws IOException {
        Map<String, Cell> t = byKey(cells);
        try (RawCsv csv = RawCsv.open(file, IN_KERNEL_CSV_COLUMNS)) {
            for (int peer = 1; peer < world; peer++) {
                for (long bytes : sizes) {
                    Cell r = t.get(key(peer, bytes, IN_KERNEL_REMOTE, false));
                    if (r == null) {
                        continue;
                    }
                    Cell l = t.get(key(0, bytes, IN_KERNEL_LOCAL, false));
                    double ne = t.get(key(peer, bytes, NCCL, false)).micros();
                    double ng = t.get(key(peer, bytes, NCCL, true)).micros();
                    csv.row(world, deviceName, 0, peer, bytes, RawCsv.num("%.4f", r.micros()),
                            RawCsv.num("%.4f", l.micros()), RawCsv.num("%.3f", ne), RawCsv.num("%.3f", ng),
                            RawCsv.num("%.3f", ne / r.micros()), RawCsv.num("%.3f", ng / r.micros()),
                            RawCsv.num("%.2f", gbps(bytes, r.micros())), RawCsv.num("%.4f", r.spread()),
                            RawCsv.num("%.4f", l.spread()), ROUNDS, reps);
                }
            }
        }
    }

    private static void writeRaw(Path file, List<Cell> cells, List<Long> sizes, int world, int reps) throws IOException {
        Map<String, Cell> t = byKey(cells);
        try (RawCsv csv = RawCsv.open(file, CSV_COLUMNS)) {
            for (int peer = 1; peer < world; peer++) {
                for (boolean graph : new boolean[] {true, false}) {
                    for (long bytes : sizes) {
                        Cell k = t.get(key(peer, bytes, KERNEL, graph));
                        Cell ce = t.get(key(peer, bytes, COPY_ENGINE, graph));
                        Cell n = t.get(key(peer, bytes, NCCL, graph));
                        csv.row(world, deviceName, 0, peer, graph ? "graph-captured" : "eager", bytes,
                                RawCsv.num("%.3f", k.micros()), RawCsv.num("%.3f", ce.micros()),
                                RawCsv.num("%.3f", n.micros()), RawCsv.num("%.4f", n.micros() / k.micros()),
                                RawCsv.num("%.4f", n.micros() / ce.micros()), RawCsv.num("%.2f", gbps(bytes, k.micros())),
                                RawCsv.num("%.2f", gbps(bytes, ce.micros())), RawCsv.num("%.2f", gbps(bytes, n.micros())),
                                RawCsv.num("%.4f", k.spread()), RawCsv.num("%.4f", ce.spread()),
                                RawCsv.num("%.4f", n.spread()), reps);
                    }
                }
            }
        }
    }
}
