package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
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
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.NvshmemTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * Pipeline hand-off latency between GPUs: a microbatch crossing stages as a put into the next
 * stage's symmetric buffer plus a signal, against NCCL send/recv, in the same run. One pipeline
 * stage per GPU (all of them, or {@code --gpus N}); every stage boundary GPU i -> GPU i+1 is measured
 * in turn as a ping-pong (GPU i hands off to GPU i+1, which hands the same size back), one-way = round trip / 2,
 * eager (one launch per op) and graph-captured, 1 KiB … 16 MiB; medians of CUDA-event timings on
 * GPU 0's stream.
 *
 * <p>symmem4j: {@code symmem_put_signal} (copy into the peer's buffer over NVLink, then a
 * system-scope release add on the peer's signal slot) and {@code symmem_wait_signal_consume}
 * (acquire-wait for the slot, then take the count back, so a graph replays). NCCL:
 * {@code ncclSend}/{@code ncclRecv} on plain {@code cuMemAlloc} buffers.
 *
 * <p>{@code --processes}: every stage in a JVM of its own (one process per GPU, as the launcher starts them)
 * on the NVSHMEM transport, and NVSHMEM's hand-off measured beside the other two in the same run:
 * {@code nvshmemx_putmem_signal_on_stream} into the next stage's buffer on NVSHMEM's symmetric heap and
 * {@code nvshmemx_signal_wait_until_on_stream} (then the count taken back); our kernels then put into
 * memory exported between the processes (cuMem file descriptors), NCCL runs across the processes.
 *
 * <p>{@code --raw} writes the report's numbers as CSV, one row per boundary, mode and size.
 *
 * <pre>
 *   GpuHandoffBench [--out report.md] [--raw report.csv] [--reps R] [--gpus N] [--processes [--timeout S]]
 * </pre>
 */
public final class GpuHandoffBench {

    /** How rank 0 launched the symmem4j kernels, for the report. */
    private static volatile String launchMode = "unknown";
    /** The GPU model, for the report. */
    private static volatile String deviceName = "unknown";

    private static final long[] SIZES = {1L << 10, 4L << 10, 16L << 10, 64L << 10, 256L << 10, 1L << 20, 4L << 20,
        16L << 20};
    static final String SYMMEM = "symmem put+signal";
    static final String NCCL = "NCCL send/recv";
    static final String NVSHMEM = "NVSHMEM put+signal";
    /**
     * Signal slots of the ping-pong: slot 0 on the later GPU of a boundary says "the earlier GPU's
     * message is in", slot 1 on the earlier GPU the reply. Consuming waits leave both at zero, so the
     * next boundary reuses them.
     */
    private static final int TO_LATER = 0;
    private static final int TO_EARLIER = 1;

    private GpuHandoffBench() {
    }

    /**
     * One timing: the pipeline boundary {@code from -> from + 1}, a size, a variant, eager or graph; the
     * median one-way time and the spread (IQR / median) of the repetitions it is the median of.
     */
    record Cell(int from, long bytes, String variant, boolean graph, double oneWayMicros, double spread) {
    }

    /** The columns of {@code --raw}: the report's tables, one row per boundary, mode and size. */
    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "from_gpu", "to_gpu", "mode", "bytes",
            "symmem_one_way_us", "nccl_one_way_us", "speedup_vs_nccl", "symmem_gb_per_s", "symmem_spread", "nccl_spread",
            "reps", "ranks", "nvshmem_one_way_us", "nvshmem_speedup_vs_nccl", "nvshmem_spread");

    @Command(name = "GpuHandoffBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "GPU pipeline hand-off (put + signal into the next GPU's symmetric buffer, then the"
                    + " consumer's wait) at every stage boundary, against NCCL send/recv.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE (default: stdout only)")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write the report's numbers as CSV to FILE (appended under"
                + " the same header; default: none)")
        Path raw;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell (the median is reported)")
        int reps = 7;
        @Option(names = "--gpus", paramLabel = "N", description = "GPUs to use, one stage each (0: all)")
        int gpus = 0;
        @Option(names = "--processes", description = "run every stage in a JVM of its own on the NVSHMEM transport and"
                + " measure NVSHMEM's put-with-signal too (needs NVSHMEM's host library)")
        boolean processes;
        @Mixin
        RankProcessOptions ranks = new RankProcessOptions();
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--reps", f.reps);
            if (f.gpus < 0) {
                throw new IllegalArgumentException("--gpus=" + f.gpus + " expected >= 0 (0: all)");
            }
            return f;
        });
        if (flags.ranks.rankProcess) {
            ChildJvms.exitAsRank(() -> rankProcess(flags));
        }
        CudaTransport cuda = CudaTransport.create();
        int devices = cuda.deviceCount();
        int world = flags.gpus == 0 ? devices : flags.gpus;
        if (world < 2 || world > devices) {
            throw new IllegalStateException("the hand-off benchmark needs 2 to " + devices + " GPUs (one pipeline stage"
                    + " each); found " + devices + " devices, asked for " + world);
        }
        if (flags.processes) {
            if (!NvshmemTransport.available()) {
                throw new IllegalStateException("--processes measures NVSHMEM's hand-off: " + NvshmemTransport.unavailableReason());
            }
            cuda.close(); // the driver only so far: no context of this JVM beside the ranks'
            System.exit(ChildJvms.rerunAsRanks(GpuHandoffBench.class, args, world, "handoff",
                    Duration.ofSeconds(flags.ranks.timeoutSeconds)));
        }
        List<List<Cell>> perRank = InJvmWorld.runOnEveryRank(world,
                GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda, group -> {
            try (SymmetricMemory inbox = SymmetricMemory.allocate(group, SIZES[SIZES.length - 1])) {
                return measure(group, Map.of(SYMMEM, inbox), flags.reps, cuda.programmaticLaunch(group));
            }
        });
        writeReports(perRank, world, devices, cuda.runtimeVersions(), "threads of one JVM", flags);
    }

    /**
     * One stage of a {@code --processes} run, on the NVSHMEM transport: NVSHMEM's inbox on its heap, ours on the
     * CUDA transport's exported memory; every rank's cells gathered to rank 0, which writes the report.
     */
    private static int rankProcess(Flags flags) throws IOException {
        try (NvshmemTransport nvshmem = NvshmemTransport.create();
             ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)),
                     nvshmem)) {
            long maxBytes = SIZES[SIZES.length - 1];
            List<Cell> mine;
            try (SymmetricMemory heapInbox = SymmetricMemory.allocate(group, maxBytes);
                 SymmetricMemory kernelInbox = nvshmem.cudaTransport().allocate(group, maxBytes)) {
                Map<String, SymmetricMemory> inboxes = new LinkedHashMap<>();
                inboxes.put(SYMMEM, kernelInbox);
                inboxes.put(NVSHMEM, heapInbox);
                mine = measure(group, inboxes, flags.reps, nvshmem.cudaTransport().programmaticLaunch(group));
            }
            List<byte[]> all = group.allGatherBytes("handoff-cells", encode(mine).getBytes(StandardCharsets.UTF_8));
            if (group.rank() == 0) {
                List<List<Cell>> perRank = new ArrayList<>();
                for (byte[] b : all) {
                    perRank.add(decode(new String(b, StandardCharsets.UTF_8)));
                }
                writeReports(perRank, group.worldSize(), nvshmem.cudaTransport().deviceCount(), nvshmem.runtimeVersions(),
                        "one process per GPU (--processes)", flags);
            }
            nvshmem.release(group);
            return 0;
        }
    }

    /**
     * This rank's cells: every boundary in turn, each size, each variant ({@code inboxes}' put-with-signal, then
     * NCCL send/recv), eager and graph-captured; the ranks not on a boundary only join the timing loop's barriers.
     */
    static List<Cell> measure(Group group, Map<String, SymmetricMemory> inboxes, int repeats, boolean programmatic) {
        return measure(group, inboxes, repeats, programmatic, SIZES);
    }

    /** As {@link #measure(Group, Map, int, boolean)} at the given sizes (ascending; the inboxes hold the largest). */
    static List<Cell> measure(Group group, Map<String, SymmetricMemory> inboxes, int repeats, boolean programmatic,
                              long[] sizes) {
        List<Cell> cells = new ArrayList<>();
        int world = group.worldSize();
        int me = group.rank();
        long maxBytes = sizes[sizes.length - 1];
        try (Communicator comm = Communicator.create(group)) {
            DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            deviceName = gpu.deviceName();
            launchMode = programmatic ? "programmatic dependent launch (PDL)"
                    : "plain (no PDL: before sm_90, or -Dsymmem4j.cuda.pdl=false)";
            MemorySegment outbox = gpu.allocateDevice(maxBytes);
            MemorySegment ncclInbox = gpu.allocateDevice(maxBytes);
            // every boundary of a pipeline with one stage per GPU, one at a time: the two GPUs of the
            // boundary ping-pong, the others only join the timing loop's barriers
            for (int from = 0; from + 1 < world; from++) {
                boolean first = me == from;
                boolean second = me == from + 1;
                int peer = first ? from + 1 : from;
                for (long bytes : sizes) {
                    MemorySegment message = outbox.asSlice(0, bytes);
                    MemorySegment received = ncclInbox.asSlice(0, bytes);
                    Map<String, Runnable> variants = new LinkedHashMap<>();
                    for (Map.Entry<String, SymmetricMemory> e : inboxes.entrySet()) {
                        SymmetricMemory inbox = e.getValue();
                        // one round trip: the earlier stage hands off, the later one waits for it and hands
                        // the same size back (as a gradient would come back)
                        variants.put(e.getKey(), first
                                ? () -> {
                                    inbox.putWithSignal(peer, message, 0, TO_LATER, 1, SignalOp.ADD);
                                    inbox.orderAfterSignal(TO_EARLIER, 1, peer, true);
                                }
                                : () -> {
                                    inbox.orderAfterSignal(TO_LATER, 1, peer, true);
                                    inbox.putWithSignal(peer, message, 0, TO_EARLIER, 1, SignalOp.ADD);
                                });
                    }
                    variants.put(NCCL, first
                            ? () -> {
                                gpu.send(message, peer);
                                gpu.recv(received, peer);
                            }
                            : () -> {
                                gpu.recv(received, peer);
                                gpu.send(message, peer);
                            });
                    for (Map.Entry<String, Runnable> v : variants.entrySet()) {
                        for (boolean graph : new boolean[] {false, true}) {
                            if (first || second) {
                                double[] roundTrips = GpuAllReduceBench.time(comm, gpu, v.getValue(), bytes, graph, repeats);
                                cells.add(new Cell(from, bytes, v.getKey(), graph, RepetitionSpread.median(roundTrips) / 2,
                                        RepetitionSpread.spread(roundTrips)));
                            } else {
                                for (int r = 0; r < repeats; r++) {
                                    comm.barrier(); // the timing loop's one collective per sample
                                }
                            }
                        }
                    }
                }
            }
            gpu.synchronize();
            gpu.freeDevice(outbox);
            gpu.freeDevice(ncclInbox);
        }
        return cells;
    }

    /** The earlier GPU of each boundary timed its round trips on its own stream: its cells are the boundary's. */
    private static void writeReports(List<List<Cell>> perRank, int world, int devices, String versions, String ranksAs,
                                     Flags flags) throws IOException {
        List<Cell> cells = new ArrayList<>();
        for (int from = 0; from + 1 < world; from++) {
            for (Cell c : perRank.get(from)) {
                if (c.from() == from) {
                    cells.add(c);
                }
            }
        }
        String report = report(versions, cells, world, devices, deviceName, flags.reps, ranksAs);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
        if (flags.raw != null) {
            writeRaw(flags.raw, cells, world, deviceName, flags.reps, ranksAs);
        }
    }

    /** Cells as text, a line each: from, bytes, variant, graph, one-way µs, spread, tab-separated. */
    static String encode(List<Cell> cells) {
        return TabRows.encode(cells, c -> List.of(c.from(), c.bytes(), c.variant(), c.graph(), c.oneWayMicros(), c.spread()));
    }

    /** The cells {@link #encode} wrote. */
    static List<Cell> decode(String text) {
        return TabRows.decode(text, 6, "hand-off cell", f -> new Cell(Integer.parseInt(f[0]), Long.parseLong(f[1]), f[2],
                Boolean.parseBoolean(f[3]), Double.parseDouble(f[4]), Double.parseDouble(f[5])));
    }

    /** One CSV row per boundary, mode and size: the report's table cells and each timing's spread (NVSHMEM's empty when not run). */
    private static void writeRaw(Path file, List<Cell> cells, int world, String device, int reps, String ranksAs)
            throws IOException {
        Map<String, Cell> t = byKey(cells);
        try (RawCsv csv = RawCsv.open(file, CSV_COLUMNS)) {
            for (int from = 0; from + 1 < world; from++) {
                for (boolean graph : new boolean[] {true, false}) {
                    for (long bytes : SIZES) {
                        Cell ours = t.get(key(from, bytes, SYMMEM, graph));
                        Cell nccl = t.get(key(from, bytes, NCCL, graph));
                        Cell nv = t.get(key(from, bytes, NVSHMEM, graph));
                        csv.row(world, device, from, from + 1, graph ? "graph-captured" : "eager", bytes,
                                RawCsv.num("%.3f", ours.oneWayMicros()), RawCsv.num("%.3f", nccl.oneWayMicros()),
                                RawCsv.num("%.4f", nccl.oneWayMicros() / ours.oneWayMicros()),
                                RawCsv.num("%.2f", bytes / (ours.oneWayMicros() * 1e-6) / 1e9),
                                RawCsv.num("%.4f", ours.spread()), RawCsv.num("%.4f", nccl.spread()), reps, ranksAs,
                                nv == null ? "" : RawCsv.num("%.3f", nv.oneWayMicros()),
                                nv == null ? "" : RawCsv.num("%.4f", nccl.oneWayMicros() / nv.oneWayMicros()),
                                nv == null ? "" : RawCsv.num("%.4f", nv.spread()));
                    }
                }
            }
        }
    }

    private static String key(int from, long bytes, String variant, boolean graph) {
        return from + "|" + bytes + "|" + variant + "|" + graph;
    }

    private static Map<String, Cell> byKey(List<Cell> cells) {
        Map<String, Cell> t = new LinkedHashMap<>();
        for (Cell c : cells) {
            t.put(key(c.from(), c.bytes(), c.variant(), c.graph()), c);
        }
        return t;
    }

    static String report(String versions, List<Cell> cells, int world, int devices, String device, int reps, String ranksAs) {
        Map<String, Cell> t = byKey(cells);
        boolean withNvshmem = cells.stream().anyMatch(c -> c.variant().equals(NVSHMEM));
        StringBuilder md = new StringBuilder("# GPU pipeline hand-off benchmark\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- device: ").append(world).append(" of ").append(devices).append(" × ").append(device).append('\n');
        md.append("- ").append(versions).append('\n');
        md.append("- ranks: ").append(ranksAs).append('\n');
        md.append("- symmem4j kernel launches: ").append(launchMode).append('\n');
        md.append("- method: one pipeline stage per GPU; for each stage boundary GPU i -> GPU i+1 in turn (the other GPUs")
                .append(" idle), a ping-pong between the two, one-way = round trip / 2; median of ").append(reps)
                .append(" CUDA-event timings of a batch of round trips (100 up to 1 MiB, 20 above) on GPU i's stream;")
                .append(" symmem = put into the peer's symmetric buffer + release signal, acquire wait (consuming);")
                .append(withNvshmem ? " NVSHMEM = nvshmemx_putmem_signal_on_stream into the peer's buffer on NVSHMEM's symmetric"
                        + " heap, then " + ("kernel".equals(Configuration.NVSHMEM_WAIT.get())
                        ? "our consuming wait kernel on the heap's signal word (-Dsymmem4j.nvshmem.wait=kernel);"
                        : "nvshmemx_signal_wait_until_on_stream, the count taken back with nvshmemx_signal_op_on_stream;") : "")
                .append(" NCCL = ncclSend/ncclRecv on cuMemAlloc buffers (one communicator over all ").append(world)
                .append(" GPUs); eager = one launch per op, graph = the batch captured once and replayed.\n\n");
        List<String> misses = new ArrayList<>();
        for (int from = 0; from + 1 < world; from++) {
            String boundary = "GPU " + from + " -> GPU " + (from + 1);
            for (boolean graph : new boolean[] {true, false}) {
                md.append("## ").append(world > 2 ? boundary + ", " : "").append(graph ? "graph-captured" : "eager")
                        .append("\n\n");
                md.append(withNvshmem
                        ? "| size | symmem put+signal µs | NVSHMEM put+signal µs | NCCL send/recv µs | symmem vs NCCL | NVSHMEM vs NCCL | symmem GB/s |\n|---:|---:|---:|---:|---:|---:|---:|\n"
                        : "| size | symmem put+signal µs | NCCL send/recv µs | speedup | symmem GB/s |\n|---:|---:|---:|---:|---:|\n");
                for (long bytes : SIZES) {
                    double ours = t.get(key(from, bytes, SYMMEM, graph)).oneWayMicros();
                    double nccl = t.get(key(from, bytes, NCCL, graph)).oneWayMicros();
                    if (withNvshmem) {
                        double nv = t.get(key(from, bytes, NVSHMEM, graph)).oneWayMicros();
                        md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %.2f× | %.2f× | %.1f |%n",
                                GpuAllReduceBench.size(bytes), ours, nv, nccl, nccl / ours, nccl / nv, bytes / (ours * 1e-6) / 1e9));
                    } else {
                        md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f× | %.1f |%n",
                                GpuAllReduceBench.size(bytes), ours, nccl, nccl / ours, bytes / (ours * 1e-6) / 1e9));
                    }
                    String where = world > 2 ? boundary + ", " : "";
                    if (graph && bytes == (1L << 10) && ours > 5.0) {
                        misses.add(where + "1 KiB: " + String.format(Locale.ROOT, "%.2f", ours) + " µs (> 5 µs)");
                    }
                    if (graph && bytes <= (1L << 20) && ours >= nccl) {
                        misses.add(where + GpuAllReduceBench.size(bytes) + ": " + String.format(Locale.ROOT, "%.2f", ours)
                                + " µs, not faster than NCCL's " + String.format(Locale.ROOT, "%.2f", nccl) + " µs");
                    }
                }
                md.append('\n');
            }
        }
        md.append("## Targets (graph-captured, every boundary, symmem put+signal): ≤ 5 µs at 1 KiB, faster than NCCL send/recv up to 1 MiB\n\n");
        md.append(misses.isEmpty() ? "All met.\n" : "Not met:\n\n- " + String.join("\n- ", misses) + "\n");
        return md.toString();
    }
}
