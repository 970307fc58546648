package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.session.DeviceSessionCache;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Issue #34's GPU session-state cache: rank 1 gets a session's state block (8 KiB, 64 KiB, 1 MiB) that rank 0 saved
 * into its GPU's part of a {@link DeviceSessionCache}, against NCCL send/recv of the same bytes from rank 0 (the
 * anchor of {@link GpuRemoteShardBench}), threads of one JVM, in the same run. One rank per GPU where there are two;
 * on one GPU both ranks share it (the lent one-H200 machine) and the NCCL columns are left out (NCCL refuses two ranks
 * on one device):
 * <ul>
 *   <li><b>host-timed, per get</b> (what a worker sees, the medians of {@code --reps} repetitions of 50 gets):
 *       {@code find} alone (the session looked up in every rank's part of the directory, which is host memory the
 *       ranks share: host loads, no device copy), the copy of a held block ({@code cuMemcpyAsync} from rank 0's memory
 *       into rank 1's buffer, then synchronize), the check after use ({@code isValid}), {@code copyInto} (all three),
 *       and NCCL ({@code ncclSend} on rank 0, {@code ncclRecv} on rank 1, each followed by its stream's synchronize);</li>
 *   <li><b>stream-timed</b> (CUDA events on rank 1's stream, {@code GpuAllReduceBench.time}, eager): the peer copy of
 *       a held block against NCCL send/recv.</li>
 * </ul>
 * Every get's bytes are checked against rank 0's pattern after the timings.
 *
 * <pre>
 *   GpuSessionCacheBench [--out report.md] [--reps R]
 * </pre>
 */
public final class GpuSessionCacheBench {

    private static final long[] SIZES = {8L << 10, 64L << 10, 1L << 20};
    private static final int BATCH = 50;
    /**
     * Calls of a host-timed get before it is timed: enough for HotSpot's C2 to compile {@code find} and
     * {@code copyInto} (tier-4 thresholds are some 5,000-15,000 invocations). With the one batch of warm-up
     * {@link RepetitionSpread#medianMicrosPerCall} makes, 500 calls in all, find ran interpreted: 6-26 µs on
     * 2 × H200 (2026-11-29), host loads that a compiled call makes in well under a microsecond.
     */
    private static final int WARM_CALLS = 20_000;
    /** NCCL's send/recv pair (both ranks) warmed the same way, fewer calls: its Java side is a few downcalls. */
    private static final int NCCL_WARM_CALLS = 2_000;
    private static volatile String deviceName = "unknown";

    private GpuSessionCacheBench() {
    }

    /** One size's medians, µs per get; NaN for NCCL where the ranks share a GPU. */
    record Row(long bytes, double copyInto, double find, double heldCopy, double check, double ncclHost,
               double peerCopyStream, double ncclStream) {
    }

    @Command(name = "GpuSessionCacheBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "GPU session cache: a peer GPU's in-place read and peer copy of a"
                    + " session block against NCCL send/recv of the same bytes, in the same run.")
    static final class Flags {
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell (the median is reported)")
        int reps = 9;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--reps", f.reps);
            return f;
        });
        try (CudaTransport cuda = CudaTransport.create()) {
            boolean nccl = cuda.deviceCount() >= 2; // else both ranks on GPU 0, where NCCL refuses them
            List<List<Row>> perRank = InJvmWorld.runOnEveryRank(2,
                    GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda,
                    group -> measure(group, flags.reps, nccl));
            String report = report(cuda.runtimeVersions(), perRank.get(1), flags.reps, nccl);
            System.out.print(report);
            if (flags.out != null) {
                Files.writeString(flags.out, report);
            }
        }
    }

    /** Rank 1's rows; rank 0 saves, sends and joins the barriers. */
    static List<Row> measure(Group group, int reps, boolean withNccl) {
        int me = group.rank();
        long max = SIZES[SIZES.length - 1];
        List<Row> rows = new ArrayList<>();
        try (Communicator comm = Communicator.create(group);
             Arena arena = Arena.ofConfined();
             DeviceSessionCache cache = DeviceSessionCache.create(comm, 8 * (max + 256), 16, max)) {
            DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            deviceName = gpu.deviceName();
            MemorySegment dst = gpu.allocateDevice(max);
            MemorySegment host = arena.allocate(max, 64);
            for (long i = 0; i < max / Integer.BYTES; i++) {
                host.setAtIndex(ValueLayout.JAVA_INT, i, GpuRemoteShardBench.pattern(0, i));
            }
            if (me == 0) {
                gpu.copyFromHost(dst, host); // NCCL's source: the same bytes as the sessions
                for (long bytes : SIZES) {
                    cache.save("s" + bytes, host.asSlice(0, bytes));
                }
            }
            comm.barrier();
            for (long bytes : SIZES) {
                String id = "s" + bytes;
                MemorySegment into = dst.asSlice(0, bytes);
                double ncclHost = Double.NaN;
                double[] ncclStream = {Double.NaN};
                if (withNccl) {
                    Runnable nccl = me == 0 ? () -> gpu.send(into, 1) : () -> gpu.recv(into, 0);
                    Runnable ncclSync = () -> {
                        nccl.run();
                        gpu.synchronize();
                    };
                    warm(NCCL_WARM_CALLS, ncclSync); // both ranks: each send meets its recv
                    ncclHost = RepetitionSpread.medianMicrosPerCall(reps, BATCH, comm::barrier, ncclSync);
                    ncclStream = GpuAllReduceBench.time(comm, gpu, nccl, bytes, false, reps);
                }
                if (me == 1) {
                    poison(gpu, into);
                    warm(WARM_CALLS, () -> cache.copyInto(id, into)); // compiled, as in a server that has run a while
                    double copyInto = RepetitionSpread.medianMicrosPerCall(reps, BATCH, comm::barrier,
                            () -> cache.copyInto(id, into));
                    check(gpu, into, host, bytes, "copyInto");
                    warm(WARM_CALLS, () -> cache.find(id));
                    double find = RepetitionSpread.medianMicrosPerCall(reps, BATCH, comm::barrier, () -> cache.find(id));
                    DeviceSessionCache.Block held = cache.find(id);
                    poison(gpu, into);
                    double heldCopy = RepetitionSpread.medianMicrosPerCall(reps, BATCH, comm::barrier, () -> {
                        gpu.copyAsync(into, held.data());
                        gpu.synchronize();
                    });
                    check(gpu, into, host, bytes, "held copy");
                    double checkAfterUse = RepetitionSpread.medianMicrosPerCall(reps, BATCH, comm::barrier, () -> {
                        if (!held.isValid()) {
                            throw new IllegalStateException("the held block of " + id + " was freed while timed");
                        }
                    });
                    poison(gpu, into);
                    double[] peer = GpuAllReduceBench.time(comm, gpu, () -> gpu.copyAsync(into, held.data()), bytes,
                            false, reps);
                    if (!held.isValid()) {
                        throw new IllegalStateException("the held block of " + id + " was freed while timed");
                    }
                    check(gpu, into, host, bytes, "peer copy");
                    rows.add(new Row(bytes, copyInto, find, heldCopy, checkAfterUse, ncclHost,
                            RepetitionSpread.median(peer), RepetitionSpread.median(ncclStream)));
                } else {
                    for (int r = 0; r < 5 * reps; r++) {
                        comm.barrier(); // rank 1's timing loops: one barrier per repetition
                    }
                }
            }
            gpu.synchronize();
            comm.barrier(); // no rank closes the cache while a peer may still read it
            gpu.freeDevice(dst);
        }
        return rows;
    }

    /** Fills rank 1's buffer with bytes rank 0's state does not have, so a get that moves nothing is caught. */
    private static void warm(int calls, Runnable call) {
        for (int i = 0; i < calls; i++) {
            call.run();
        }
    }

    private static void poison(DeviceCommunicator gpu, MemorySegment into) {
        MemorySegment h = Arena.ofAuto().allocate(into.byteSize(), 64);
        h.fill((byte) 0xA5);
        gpu.copyFromHost(into, h);
    }

    private static void check(DeviceCommunicator gpu, MemorySegment into, MemorySegment host, long bytes,
                              String variant) {
        MemorySegment h = Arena.ofAuto().allocate(bytes, 64);
        gpu.copyToHost(h, into);
        long at = MemorySegment.mismatch(h, 0, bytes, host, 0, bytes);
        if (at >= 0) {
            throw new IllegalStateException("session block " + variant + " of " + bytes + " bytes: byte " + at
                    + " differs from rank 0's state (the get moved the wrong bytes; the timing is void)");
        }
    }

    static String report(String versions, List<Row> rows, int reps, boolean nccl) {
        StringBuilder md = new StringBuilder("# GPU session-state cache benchmark (issue #34)\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- device: ").append(nccl ? "2 × " + deviceName + ", a rank per GPU" : "one " + deviceName
                + ", both ranks sharing it (no NCCL: it refuses two ranks on one device)").append('\n');
        md.append("- ").append(versions).append('\n');
        md.append("- method: rank 0 saved one session per size into its GPU's part of a DeviceSessionCache; rank 1")
                .append(" gets it. Host-timed: median of ").append(reps).append(" repetitions of ").append(BATCH)
                .append(" calls, µs per call: find = the session looked up in every rank's part of the directory")
                .append(" (host memory the ranks share: no device copy); held copy = cuMemcpyAsync of a held block")
                .append(" into rank 1's buffer + synchronize; check = isValid after use; copyInto = find + copy +")
                .append(" synchronize + check; NCCL = send/recv + synchronize on both ranks. Stream-timed: CUDA")
                .append(" events on rank 1's stream, eager (peer copy of a held block; NCCL send/recv).\n\n");
        md.append("| size | find µs | held copy µs | check µs | copyInto µs | NCCL (host) µs | NCCL / copyInto |"
                + " peer copy (stream) µs | NCCL (stream) µs | NCCL / peer copy |\n"
                + "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Row r : rows) {
            md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.3f | %.2f | %s | %s | %.2f | %s | %s |%n",
                    GpuAllReduceBench.size(r.bytes()), r.find(), r.heldCopy(), r.check(), r.copyInto(),
                    cell(r.ncclHost(), ""), cell(r.ncclHost() / r.copyInto(), "×"), r.peerCopyStream(),
                    cell(r.ncclStream(), ""), cell(r.ncclStream() / r.peerCopyStream(), "×")));
        }
        return md.toString();
    }

    private static String cell(double v, String unit) {
        return Double.isNaN(v) ? "n/a" : String.format(Locale.ROOT, "%.2f%s", v, unit);
    }
}
