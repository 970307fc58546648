package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Where an eager (not graph-captured) GPU all-reduce spends its host time: per call, wall time and
 * the calling thread's CPU time (a thread that sleeps or parks shows CPU time well below wall
 * time), for the argument check alone (count 0: the ranks agree, nothing is launched) and for
 * whole calls, on every rank, in phases: fresh, after NCCL calls on the same stream, and again.
 *
 * <p>Prints one line per rank and case; {@code --raw} writes the same numbers as CSV.
 *
 * <pre>
 *   GpuEagerProbe [--calls N] [--raw probe.csv]
 * </pre>
 */
public final class GpuEagerProbe {

    private GpuEagerProbe() {
    }

    @Command(name = "GpuEagerProbe", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Host time per eager (uncaptured) GPU call: kernels, NCCL and one-op graphs, on 2 ranks.")
    static final class Flags {
        @Option(names = "--calls", paramLabel = "N", description = "calls timed per case")
        int calls = 2_000;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write every line's numbers as CSV to FILE (appended"
                + " under the same header; default: none)")
        Path raw;
    }

    /** The columns of {@code --raw}: one row per rank, phase and case, as the printed lines. */
    static final List<String> CSV_COLUMNS = List.of("rank", "phase", "case", "calls", "host_us_per_call",
            "thread_cpu_us_per_call", "stream_us_per_call", "drain_us");

    /**
     * One measured case on one rank: host wall and thread CPU time per call, stream time per call and
     * how long the stream needed after the last call returned (NaN where not measured: the isolated
     * calls time no CPU and no drain).
     */
    record Line(int rank, String phase, String name, int calls, double hostMicros, double cpuMicros, double streamMicros,
                double drainMicros) {

        String text() {
            if (phase.equals("isolated")) {
                return String.format(Locale.ROOT, "rank %d isolated ONE_SHOT 1 KiB: host call %7.2f us, GPU %7.2f us%n",
                        rank, hostMicros, streamMicros);
            }
            return String.format(Locale.ROOT, "rank %d %-22s %-46s host %7.2f us/call, thread CPU %7.2f us/call, stream %7.2f"
                    + " us/call, drain %8.1f us%n", rank, phase, name, hostMicros, cpuMicros, streamMicros, drainMicros);
        }
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--calls", f.calls);
            return f;
        });
        int calls = flags.calls;
        CudaTransport cuda = CudaTransport.create();
        int world = 2; // on one GPU the two ranks share it
        List<List<Line>> lines = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                cuda, group -> {
            List<Line> out = new ArrayList<>();
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, 1 << 20);
                 SymmetricMemory ncclBuffer = SymmetricMemory.allocate(group, 1 << 20)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                boolean nccl = comm.supports(Algorithm.NCCL);
                // NCCL through the communicator: each call includes the ranks' argument check, as ours do
                Runnable ncclCall = () -> comm.allReduce(ncclBuffer, 0, 512, DType.BFLOAT16, ReduceOp.SUM, Algorithm.NCCL);
                record Case(String name, long count, Algorithm alg) {
                }
                Case[] cases = {new Case("check only (count 0)", 0, Algorithm.ONE_SHOT),
                    new Case("ONE_SHOT 1 KiB (LL)", 512, Algorithm.ONE_SHOT),
                    new Case("ONE_SHOT 256 KiB (push)", 128 << 10, Algorithm.ONE_SHOT),
                    new Case("TWO_SHOT 1 KiB", 512, Algorithm.TWO_SHOT)};
                for (String phase : new String[] {"fresh", "after 200 NCCL calls", "again"}) {
                    if (phase.startsWith("after") && nccl) {
                        for (int i = 0; i < 200; i++) {
                            ncclCall.run();
                        }
                        gpu.synchronize();
                    }
                    for (String local : new String[] {"wait-signal kernel (no peer, no check)", "NCCL all-reduce 1 KiB",
                        "check + wait kernel, both ranks", "check + wait kernel, rank 0 only"}) {
                        if (local.startsWith("NCCL") && !nccl) {
                            continue; // ranks sharing a GPU: no NCCL
                        }
                        boolean launch = !local.endsWith("rank 0 only") || group.rank() == 0;
                        Runnable call = switch (local) {
                            case "wait-signal kernel (no peer, no check)" -> () -> mem.orderAfterSignal(0, 0, -1, false);
                            case "NCCL all-reduce 1 KiB" -> ncclCall;
                            default -> () -> {
                                // the ranks meet in the argument check (nothing launched), then launch a kernel
                                // that waits for nothing: lock-step launches on both GPUs, or on one
                                comm.allReduce(mem, 0, 0, DType.BFLOAT16, ReduceOp.SUM, Algorithm.ONE_SHOT);
                                if (launch) {
                                    mem.orderAfterSignal(0, 0, -1, false);
                                }
                            };
                        };
                        out.add(measure(gpu, group, phase, local, call, calls));
                    }
                    for (Case c : cases) {
                        out.add(measure(gpu, group, phase, c.name(),
                                () -> comm.allReduce(mem, 0, c.count(), DType.BFLOAT16, ReduceOp.SUM, c.alg()), calls));
                    }
                    // the same kernels captured once into a one-op graph, the graph launched once per call:
                    // whether a graph launch escapes the slow eager launches
                    for (Case c : cases) {
                        if (c.count() == 0) {
                            continue;
                        }
                        try (DeviceGraph g = gpu.capture(
                                () -> comm.allReduce(mem, 0, c.count(), DType.BFLOAT16, ReduceOp.SUM, c.alg()))) {
                            out.add(measure(gpu, group, phase, "1-op graph: " + c.name(), g::replay, calls));
                            // the ranks' host threads meet in the argument check before each replay, as an eager call does
                            out.add(measure(gpu, group, phase, "check + 1-op graph: " + c.name(), () -> {
                                comm.allReduce(mem, 0, 0, DType.BFLOAT16, ReduceOp.SUM, Algorithm.ONE_SHOT);
                                g.replay();
                            }, calls));
                            gpu.synchronize();
                        }
                    }
                }
                // one isolated LL all-reduce: its GPU time between events, and the host time of the call
                for (int k = 0; k < 5; k++) {
                    gpu.synchronize();
                    group.allGatherBytes("probe-one", new byte[0]);
                    long[] host = new long[2];
                    double gpuMillis = gpu.elapsedMillis(() -> {
                        host[0] = System.nanoTime();
                        comm.allReduce(mem, 0, 512, DType.BFLOAT16, ReduceOp.SUM, Algorithm.ONE_SHOT);
                        host[1] = System.nanoTime();
                    });
                    out.add(new Line(group.rank(), "isolated", "ONE_SHOT 1 KiB", 1, (host[1] - host[0]) / 1e3, Double.NaN,
                            gpuMillis * 1e3, Double.NaN));
                }
            }
            return out;
        });
        lines.forEach(rank -> rank.forEach(l -> System.out.print(l.text())));
        if (flags.raw != null) {
            try (RawCsv csv = RawCsv.open(flags.raw, CSV_COLUMNS)) {
                for (List<Line> rank : lines) {
                    for (Line l : rank) {
                        csv.row(l.rank(), l.phase(), l.name(), l.calls(), RawCsv.num("%.3f", l.hostMicros()),
                                RawCsv.num("%.3f", l.cpuMicros()), RawCsv.num("%.3f", l.streamMicros()),
                                RawCsv.num("%.1f", l.drainMicros()));
                    }
                }
            }
        }
    }

    /**
     * One line: {@code calls} back-to-back calls after 200 warm-up calls, started together on every
     * rank; host wall and thread CPU time per call, and how long the stream needed afterwards.
     */
    private static Line measure(DeviceCommunicator gpu, Group group, String phase, String name, Runnable call,
                                  int calls) {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        for (int i = 0; i < 200; i++) {
            call.run();
        }
        gpu.synchronize();
        group.allGatherBytes("probe-start", new byte[0]);
        long[] at = new long[4]; // cpu0, t0, t1, cpu1
        double gpuMillis = gpu.elapsedMillis(() -> {
            at[0] = mx.getCurrentThreadCpuTime();
            at[1] = System.nanoTime();
            for (int i = 0; i < calls; i++) {
                call.run();
            }
            at[2] = System.nanoTime();
            at[3] = mx.getCurrentThreadCpuTime();
        });
        long t2 = System.nanoTime(); // elapsedMillis returned once the stream reached its end event
        double gpuMicros = gpuMillis * 1e3;
        return new Line(group.rank(), phase, name, calls, (at[2] - at[1]) / 1e3 / calls, (at[3] - at[0]) / 1e3 / calls,
                gpuMicros / calls, (t2 - at[2]) / 1e3);
    }
}
