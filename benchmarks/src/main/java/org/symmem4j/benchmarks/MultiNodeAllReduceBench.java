package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.mpi.Mpi;
import org.symmem4j.parallel.mpi.MpiComm;
import org.symmem4j.parallel.multinode.HierarchicalCommunicator;
import org.symmem4j.parallel.multinode.NodeTopology;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Hierarchical against flat all-reduce on a group that spans (pretended) machines, in one run:
 * {@code HIERARCHICAL} (symmetric memory inside each machine, MPI between machines) against
 * {@code MPI} (one {@code MPI_Allreduce} over every rank), FLOAT32 SUM, 1 KiB to 256 MiB. Also times
 * the two halves of the hierarchy on their own (the machine's reduce-scatter + all-gather on symmetric
 * memory, and the MPI reduce-scatter + all-gather of one shard between machines), the inputs of the
 * scaling model in bench/results. Every process is started by {@code mpirun} (see
 * bench/multinode-allreduce.sh); rank 0 prints a markdown table and appends each size's medians to the
 * raw CSV as it is measured.
 *
 * <pre>
 *   MultiNodeAllReduceBench [--repetitions R] [--max-bytes B] [--raw FILE]
 * </pre>
 */
public final class MultiNodeAllReduceBench {

    private MultiNodeAllReduceBench() {
    }

    @Command(name = "MultiNodeAllReduceBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Hierarchical (symmetric memory + MPI) against flat MPI all-reduce,"
            + " under mpirun; rank 0 prints the table.")
    static final class Flags {
        @Option(names = "--repetitions", paramLabel = "R", description = "timed calls per size and algorithm (median reported)")
        int repetitions = 21;
        @Option(names = "--warmup", paramLabel = "W", description = "untimed calls per size and measurement first (the JIT"
                + " compiles the host reduction loops, Vector API ones included, only after many calls)")
        int warmup = 20;
        @Option(names = "--max-bytes", paramLabel = "B", description = "largest message, bytes (sizes are powers of 4 from 1 KiB)")
        long maxBytes = 268_435_456L;
        @Option(names = "--raw", paramLabel = "FILE", description = "raw CSV: one row per size, appended as measured (rank 0)")
        Path raw;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--repetitions", f.repetitions);
            if (f.warmup < 0) {
                throw new IllegalArgumentException("--warmup=" + f.warmup + " expected >= 0");
            }
            if (f.maxBytes < 1024) {
                throw new IllegalArgumentException("--max-bytes=" + f.maxBytes + " expected at least 1024");
            }
            return f;
        });
        try (ProcessGroup group = ProcessGroup.fromEnvironment();
             HierarchicalCommunicator comm = HierarchicalCommunicator.create(group, Mpi.world())) {
            NodeTopology t = comm.topology();
            boolean printing = group.rank() == 0;
            RawCsv raw = printing && flags.raw != null ? RawCsv.open(flags.raw, List.of("machines", "ranks_per_machine",
                    "bytes", "hierarchical_us", "flat_mpi_us", "machine_rs_ag_us", "between_machines_us")) : null;
            if (printing) {
                System.out.printf(Locale.ROOT, "# %d machines x %d ranks, %s; FLOAT32 SUM; median of %d calls%n%n", t.nodes(),
                        t.ranksPerNode(), Mpi.libraryVersion().lines().findFirst().orElse("MPI"), flags.repetitions);
                System.out.println("| bytes | hierarchical µs | flat MPI µs | hierarchical / flat | machine RS+AG µs | between machines µs |");
                System.out.println("|---|---|---|---|---|---|");
            }
            // the hierarchy's two halves, timed on their own: the machine's ranks, and one rank per machine
            try (Arena arena = Arena.ofConfined();
                 Group machineGroup = group.split(t.node(), t.localRank(), "bench-machine");
                 Communicator machine = Communicator.create(machineGroup);
                 MpiComm betweenMachines = Mpi.world().split(t.localRank(), t.node())) {
                for (long bytes : Sizes.ALL) {
                    if (bytes > flags.maxBytes) {
                        break;
                    }
                    long count = bytes / Float.BYTES;
                    MemorySegment buffer = arena.allocate(bytes, 64);
                    fill(buffer, count, group.rank()); // once: the sums' values do not change a float add's time
                    double hierarchical = median(flags.repetitions, () -> {
                        long start = System.nanoTime();
                        comm.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.HIERARCHICAL);
                        return System.nanoTime() - start;
                    }, comm, flags.warmup);
                    double flat = median(flags.repetitions, () -> {
                        long start = System.nanoTime();
                        comm.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.MPI);
                        return System.nanoTime() - start;
                    }, comm, flags.warmup);
                    long piece = Math.max(t.nodes(), count / t.ranksPerNode() / t.nodes() * t.nodes());
                    long sub = piece / t.nodes();
                    MemorySegment shard = arena.allocate(piece * Float.BYTES, 64);
                    MemorySegment subShard = arena.allocate(sub * Float.BYTES, 64);
                    MemorySegment whole = arena.allocate(piece * Float.BYTES * t.ranksPerNode(), 64);
                    double inside = median(flags.repetitions, () -> {
                        long start = System.nanoTime();
                        machine.reduceScatter(whole, shard, piece, DType.FLOAT32, ReduceOp.SUM);
                        machine.allGather(shard, whole, piece, DType.FLOAT32);
                        return System.nanoTime() - start;
                    }, comm, flags.warmup);
                    double between = median(flags.repetitions, () -> {
                        long start = System.nanoTime();
                        betweenMachines.reduceScatterBlock(shard, subShard, sub, DType.FLOAT32, ReduceOp.SUM);
                        betweenMachines.allGather(subShard, shard, sub, DType.FLOAT32);
                        return System.nanoTime() - start;
                    }, comm, flags.warmup);
                    if (printing) {
                        System.out.printf(Locale.ROOT, "| %d | %.1f | %.1f | %.2f | %.1f | %.1f |%n", bytes, hierarchical / 1e3,
                                flat / 1e3, hierarchical / flat, inside / 1e3, between / 1e3);
                        if (raw != null) {
                            raw.row(t.nodes(), t.ranksPerNode(), bytes, RawCsv.num("%.3f", hierarchical / 1e3),
                                    RawCsv.num("%.3f", flat / 1e3), RawCsv.num("%.3f", inside / 1e3),
                                    RawCsv.num("%.3f", between / 1e3));
                        }
                    }
                }
            }
            if (raw != null) {
                raw.close();
                System.out.println("\nraw rows appended to " + flags.raw.toAbsolutePath());
            }
        }
    }

    /** One timed call, in nanoseconds (on this rank). */
    @FunctionalInterface
    interface Timed {
        long run();
    }

    /**
     * The median over repetitions of the slowest rank's time ({@code warmup} untimed calls first); a barrier before
     * each call lines the ranks up, and an MPI all-reduce of the times takes the slowest.
     */
    private static double median(int repetitions, Timed call, HierarchicalCommunicator comm, int warmup) {
        for (int i = 0; i < warmup; i++) {
            call.run();
        }
        double[] times = new double[repetitions];
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment t = arena.allocate(Double.BYTES, 8);
            for (int i = 0; i < repetitions; i++) {
                comm.barrier();
                t.set(ValueLayout.JAVA_DOUBLE, 0, call.run());
                comm.allReduce(t, 1, DType.FLOAT64, ReduceOp.MAX, Algorithm.MPI);
                times[i] = t.get(ValueLayout.JAVA_DOUBLE, 0);
            }
        }
        Arrays.sort(times);
        return times[repetitions / 2];
    }

    private static void fill(MemorySegment buffer, long count, int rank) {
        for (long i = 0; i < count; i++) {
            buffer.setAtIndex(ValueLayout.JAVA_FLOAT, i, (rank + 1) * 0.25f);
        }
    }
}
