package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.multinode.NodeTopology;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * A GPU group spanning pretend machines ({@code --ranks-per-machine k}: every k consecutive GPUs one machine), in
 * one run: the hierarchical all-reduce (our kernels inside a machine, NCCL between machines) against NCCL flat over
 * every GPU, and, as the one-machine reference, the same GPUs as one group (the policy's best: our kernels or NCCL).
 * FLOAT32 SUM, 1 KiB to 256 MiB, graph-captured, medians of CUDA-event timings; one rank thread per GPU. The pretend
 * machines are joined by whatever NCCL finds between the GPUs (NVLink here): the table tells what the hierarchy costs
 * or saves on links as fast as the machine's own, not a network's; {@code NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1} in
 * the environment makes NCCL's traffic (between machines, and all of the flat NCCL's) go through sockets instead.
 *
 * <pre>
 *   GpuHierarchicalAllReduceBench [--ranks-per-machine K] [--out report.md] [--raw report.csv] [--reps R]
 * </pre>
 */
public final class GpuHierarchicalAllReduceBench {

    private static final long[] SIZES = {1L << 10, 16L << 10, 256L << 10, 1L << 20, 4L << 20, 16L << 20, 64L << 20,
        256L << 20};

    private GpuHierarchicalAllReduceBench() {
    }

    @Command(name = "GpuHierarchicalAllReduceBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Hierarchical GPU all-reduce (our kernels inside a pretend machine, NCCL"
                    + " between) against flat NCCL and the one-machine group, one rank thread per GPU.")
    static final class Flags {
        @Option(names = "--ranks-per-machine", paramLabel = "K", description = "GPUs per pretend machine")
        int perMachine = 2;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
        @Option(names = "--raw", paramLabel = "FILE", description = "also write the numbers as CSV to FILE")
        Path raw;
        @Option(names = "--reps", paramLabel = "R", description = "timed repetitions per cell (the median is reported)")
        int reps = 7;
    }

    /** One size's medians, µs: hierarchical, flat NCCL, and the one-machine group's best. */
    record Row(long bytes, double hierarchical, double flatNccl, double oneMachine, String oneMachineAlgorithm) {
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--reps", f.reps);
            Cli.positive("--ranks-per-machine", f.perMachine);
            return f;
        });
        try (CudaTransport cuda = CudaTransport.create()) {
            int gpus = cuda.deviceCount();
            if (gpus < 2 || gpus % flags.perMachine != 0 || gpus / flags.perMachine < 2) {
                throw new IllegalStateException("--ranks-per-machine=" + flags.perMachine + " with " + gpus + " GPUs: expected"
                        + " at least 2 pretend machines of equal size (e.g. 2 on 4 GPUs, 1 on 2)");
            }
            GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(300));
            // the same GPUs as one machine first, then pretending to be several
            List<double[]> oneMachine = InJvmWorld.runOnEveryRank(gpus, options, cuda, group -> {
                try (Communicator comm = Communicator.create(group)) {
                    DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                    double[] best = new double[2 * SIZES.length];
                    for (int s = 0; s < SIZES.length; s++) {
                        long count = SIZES[s] / Float.BYTES;
                        MemorySegment buffer = gpu.allocateDevice(SIZES[s]);
                        best[2 * s] = Double.MAX_VALUE;
                        for (Algorithm a : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL)) {
                            if (!comm.supports(a, DType.FLOAT32, ReduceOp.SUM, count)) {
                                continue;
                            }
                            double t = RepetitionSpread.median(GpuAllReduceBench.time(comm, gpu,
                                    () -> comm.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM, a), SIZES[s], true, flags.reps));
                            if (t < best[2 * s]) {
                                best[2 * s] = t;
                                best[2 * s + 1] = a.ordinal();
                            }
                        }
                        gpu.freeDevice(buffer);
                    }
                    return best;
                } finally {
                    cuda.release(group); // after the communicator's close, which uses the rank's stream
                }
            });
            String before = System.getProperty(NodeTopology.PRETEND_PROPERTY);
            System.setProperty(NodeTopology.PRETEND_PROPERTY, Integer.toString(flags.perMachine));
            List<double[]> pretend;
            String deviceName;
            try {
                String[] name = new String[1];
                pretend = InJvmWorld.runOnEveryRank(gpus, options, cuda, group -> {
                    try (Communicator comm = Communicator.create(group)) {
                        DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                        name[0] = gpu.deviceName();
                        double[] times = new double[2 * SIZES.length];
                        for (int s = 0; s < SIZES.length; s++) {
                            long count = SIZES[s] / Float.BYTES;
                            MemorySegment buffer = gpu.allocateDevice(SIZES[s]);
                            int k = 0;
                            for (Algorithm a : List.of(Algorithm.HIERARCHICAL, Algorithm.NCCL)) {
                                times[2 * s + k++] = RepetitionSpread.median(GpuAllReduceBench.time(comm, gpu,
                                        () -> comm.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM, a), SIZES[s], true,
                                        flags.reps));
                            }
                            gpu.freeDevice(buffer);
                        }
                        return times;
                    } finally {
                        cuda.release(group); // after the communicator's close
                    }
                });
                deviceName = name[0];
            } finally {
                if (before == null) {
                    System.clearProperty(NodeTopology.PRETEND_PROPERTY);
                } else {
                    System.setProperty(NodeTopology.PRETEND_PROPERTY, before);
                }
            }
            List<Row> rows = new ArrayList<>();
            for (int s = 0; s < SIZES.length; s++) {
                // rank 0's stream timed each call; the calls end together (every rank waits for the others)
                rows.add(new Row(SIZES[s], pretend.getFirst()[2 * s], pretend.getFirst()[2 * s + 1], oneMachine.getFirst()[2 * s],
                        Algorithm.values()[(int) oneMachine.getFirst()[2 * s + 1]].name()));
            }
            String report = report(rows, gpus, flags.perMachine, deviceName, cuda.runtimeVersions(), flags.reps);
            System.out.print(report);
            if (flags.out != null) {
                Files.writeString(flags.out, report);
            }
            if (flags.raw != null) {
                try (RawCsv csv = RawCsv.open(flags.raw, List.of("gpus", "ranks_per_machine", "device", "bytes",
                        "hierarchical_us", "flat_nccl_us", "one_machine_us", "one_machine_algorithm", "reps", "nccl_p2p_disable"))) {
                    for (Row r : rows) {
                        csv.row(gpus, flags.perMachine, deviceName, r.bytes(), RawCsv.num("%.2f", r.hierarchical()),
                                RawCsv.num("%.2f", r.flatNccl()), RawCsv.num("%.2f", r.oneMachine()), r.oneMachineAlgorithm(),
                                flags.reps, System.getenv().getOrDefault("NCCL_P2P_DISABLE", ""));
                    }
                }
            }
        }
    }

    static String report(List<Row> rows, int gpus, int perMachine, String device, String versions, int reps) {
        StringBuilder md = new StringBuilder("# GPU hierarchical all-reduce on pretend machines\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- device: ").append(gpus).append(" × ").append(device).append(", pretending ").append(gpus / perMachine)
                .append(" machines × ").append(perMachine).append(" GPUs\n");
        md.append("- ").append(versions).append('\n');
        md.append("- NCCL_P2P_DISABLE=").append(System.getenv().getOrDefault("NCCL_P2P_DISABLE", "unset"))
                .append(", NCCL_SHM_DISABLE=").append(System.getenv().getOrDefault("NCCL_SHM_DISABLE", "unset")).append('\n');
        md.append("- method: FLOAT32 SUM, graph-captured, median of ").append(reps).append(" CUDA-event timings on rank 0's")
                .append(" stream; hierarchical = our reduce-scatter inside each pretend machine, NCCL all-reduce of the shard")
                .append(" between machines, our all-gather; flat NCCL = one NCCL all-reduce over every GPU; one machine = the")
                .append(" same GPUs as one group, the fastest of ONE_SHOT, TWO_SHOT and NCCL.\n\n");
        md.append("| size | hierarchical µs | flat NCCL µs | hierarchical vs flat NCCL | one machine µs (algorithm) |\n");
        md.append("|---:|---:|---:|---:|---:|\n");
        for (Row r : rows) {
            md.append(String.format(Locale.ROOT, "| %s | %.1f | %.1f | %.2f× | %.1f (%s) |%n", GpuAllReduceBench.size(r.bytes()),
                    r.hierarchical(), r.flatNccl(), r.flatNccl() / r.hierarchical(), r.oneMachine(), r.oneMachineAlgorithm()));
        }
        return md.toString();
    }
}
