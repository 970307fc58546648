package org.symmem4j.benchmarks;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.InJvmWorld;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.cuda.CudaCommunicator;
import org.symmem4j.parallel.cuda.CudaSymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Where an eager (not graph-captured) GPU all-reduce spends its host time: per call, wall time and
 * the calling thread's CPU time (a thread that sleeps or parks shows CPU time well below wall
 * time), for the argument check alone (count 0: the ranks agree, nothing is launched) and for
 * whole calls, on every rank, in phases: fresh, after NCCL calls on the same stream, and again.
 *
 * <pre>
 *   GpuEagerProbe [--calls N]
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
    }

    public static void main(String[] args) {
        int calls = Cli.parse(new Flags(), args, f -> Cli.positive("--calls", f.calls));
        CudaTransport cuda = CudaTransport.create();
        int world = 2; // on one GPU the two ranks share it
        List<String> lines = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                group -> {
            StringBuilder out = new StringBuilder();
            try (CudaCommunicator comm = (CudaCommunicator) cuda.communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) cuda.allocate(group, 1 << 20)) {
                long plain = comm.deviceMalloc(1 << 20);
                record Case(String name, long count, Algorithm alg) {
                }
                Case[] cases = {new Case("check only (count 0)", 0, Algorithm.ONE_SHOT),
                    new Case("ONE_SHOT 1 KiB (LL)", 512, Algorithm.ONE_SHOT),
                    new Case("ONE_SHOT 256 KiB (push)", 128 << 10, Algorithm.ONE_SHOT),
                    new Case("TWO_SHOT 1 KiB", 512, Algorithm.TWO_SHOT)};
                for (String phase : new String[] {"fresh", "after 200 NCCL calls", "again"}) {
                    if (phase.startsWith("after")) {
                        for (int i = 0; i < 200; i++) {
                            comm.ncclAllReduce(plain, plain, 512, DType.BFLOAT16, ReduceOp.SUM);
                        }
                        comm.synchronize();
                    }
                    for (String local : new String[] {"wait-signal kernel (no peer, no check)", "NCCL all-reduce 1 KiB",
                        "check + wait kernel, both ranks", "check + wait kernel, rank 0 only"}) {
                        boolean launch = !local.endsWith("rank 0 only") || group.rank() == 0;
                        Runnable call = switch (local) {
                            case "wait-signal kernel (no peer, no check)" -> () -> mem.enqueueWaitSignal(0, 0, false);
                            case "NCCL all-reduce 1 KiB" -> () -> comm.ncclAllReduce(plain, plain, 512, DType.BFLOAT16, ReduceOp.SUM);
                            default -> () -> {
                                // the ranks meet in the argument check (nothing launched), then launch a kernel
                                // that waits for nothing: lock-step launches on both GPUs, or on one
                                comm.allReduce(mem, 0, 0, DType.BFLOAT16, ReduceOp.SUM, Algorithm.ONE_SHOT);
                                if (launch) {
                                    mem.enqueueWaitSignal(0, 0, false);
                                }
                            };
                        };
                        out.append(measure(comm, group, phase, local, call, calls));
                    }
                    for (Case c : cases) {
                        out.append(measure(comm, group, phase, c.name(),
                                () -> comm.allReduce(mem, 0, c.count(), DType.BFLOAT16, ReduceOp.SUM, c.alg()), calls));
                    }
                    // the same kernels captured once into a one-op graph, the graph launched once per call:
                    // whether a graph launch escapes the slow eager launches
                    for (Case c : cases) {
                        if (c.count() == 0) {
                            continue;
                        }
                        try (org.symmem4j.parallel.cuda.CudaGraph g = comm.capture(
                                () -> comm.allReduce(mem, 0, c.count(), DType.BFLOAT16, ReduceOp.SUM, c.alg()))) {
                            out.append(measure(comm, group, phase, "1-op graph: " + c.name(), g::replay, calls));
                            // the ranks' host threads meet in the argument check before each replay, as an eager call does
                            out.append(measure(comm, group, phase, "check + 1-op graph: " + c.name(), () -> {
                                comm.allReduce(mem, 0, 0, DType.BFLOAT16, ReduceOp.SUM, Algorithm.ONE_SHOT);
                                g.replay();
                            }, calls));
                            comm.synchronize();
                        }
                    }
                }
                // one isolated LL all-reduce: its GPU time between events, and the host time of the call
                org.symmem4j.parallel.cuda.CudaDriver d = org.symmem4j.parallel.cuda.CudaDriver.get();
                for (int k = 0; k < 5; k++) {
                    comm.synchronize();
                    group.allGatherBytes("probe-one", new byte[0]);
                    java.lang.foreign.MemorySegment e0 = comm.recordEvent();
                    long t0 = System.nanoTime();
                    comm.allReduce(mem, 0, 512, DType.BFLOAT16, ReduceOp.SUM, Algorithm.ONE_SHOT);
                    long t1 = System.nanoTime();
                    java.lang.foreign.MemorySegment e1 = comm.recordEvent();
                    d.synchronizeEvent(e1);
                    out.append(String.format(Locale.ROOT, "rank %d isolated ONE_SHOT 1 KiB: host call %7.2f us, GPU %7.2f us%n",
                            group.rank(), (t1 - t0) / 1e3, d.elapsedMillis(e0, e1) * 1e3));
                    d.destroyEvent(e0);
                    d.destroyEvent(e1);
                }
                comm.free(plain);
            }
            return out.toString();
        });
        lines.forEach(System.out::print);
    }

    /**
     * One line: {@code calls} back-to-back calls after 200 warm-up calls, started together on every
     * rank; host wall and thread CPU time per call, and how long the stream needed afterwards.
     */
    private static String measure(CudaCommunicator comm, Group group, String phase, String name, Runnable call,
                                  int calls) {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        for (int i = 0; i < 200; i++) {
            call.run();
        }
        comm.synchronize();
        group.allGatherBytes("probe-start", new byte[0]);
        java.lang.foreign.MemorySegment e0 = comm.recordEvent();
        long cpu0 = mx.getCurrentThreadCpuTime();
        long t0 = System.nanoTime();
        for (int i = 0; i < calls; i++) {
            call.run();
        }
        long t1 = System.nanoTime();
        long cpu1 = mx.getCurrentThreadCpuTime();
        java.lang.foreign.MemorySegment e1 = comm.recordEvent();
        comm.synchronize();
        long t2 = System.nanoTime();
        org.symmem4j.parallel.cuda.CudaDriver d = org.symmem4j.parallel.cuda.CudaDriver.get();
        double gpuMicros = d.elapsedMillis(e0, e1) * 1e3;
        d.destroyEvent(e0);
        d.destroyEvent(e1);
        return String.format(Locale.ROOT, "rank %d %-22s %-46s host %7.2f us/call, thread CPU %7.2f us/call, stream %7.2f us/call,"
                        + " drain %8.1f us%n", group.rank(), phase, name, (t1 - t0) / 1e3 / calls, (cpu1 - cpu0) / 1e3 / calls,
                gpuMicros / calls, (t2 - t1) / 1e3);
    }
}
