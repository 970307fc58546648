package org.symmem4j.examples;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * All-reduce across N ranks on symmetric memory with every host algorithm: checks each result
 * against the exact expected sum, then prints the mean latency per size. The ranks are threads of
 * this JVM, or, when started by {@code symmem4j-run} (or torchrun or mpirun: {@code RANK} is set),
 * this process is one rank of a process group over {@code /dev/shm} and rank 0 prints the table.
 *
 * <pre>
 *   java ... org.symmem4j.examples.HostAllReduceExample [--ranks N] [--max-bytes B] [--seconds S]
 *   bin/symmem4j-run -n 4 --java -cp CLASSPATH org.symmem4j.examples.HostAllReduceExample [--max-bytes B]
 * </pre>
 *
 * The timings are a quick look; the JMH benchmark ({@code bench/host-allreduce.sh}) is the measurement.
 */
public final class HostAllReduceExample {

    private HostAllReduceExample() {
    }

    @Command(name = "HostAllReduceExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Host all-reduce (threads, float32 SUM, in place on symmetric memory): every algorithm at"
                    + " sizes from 1 KiB up by 4x, each result checked, then timed.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads (default: the number of cores, at least"
                + " 2); ignored when started by a launcher, whose processes are the ranks")
        int ranks = Math.max(2, Runtime.getRuntime().availableProcessors());
        @Option(names = "--max-bytes", paramLabel = "B", description = "largest message in bytes")
        long maxBytes = 64L << 20;
        @Option(names = "--seconds", paramLabel = "S", description = "timing budget per size and algorithm")
        double secondsPerCase = 0.2;
    }

    public static void main(String[] args) throws Exception {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--ranks", f.ranks);
            if (f.maxBytes < 1024 || f.secondsPerCase <= 0) {
                throw new IllegalArgumentException("--max-bytes=" + f.maxBytes + " --seconds=" + f.secondsPerCase
                        + " expected max-bytes >= 1024 and seconds > 0");
            }
            return f;
        });
        int ranks = flags.ranks;
        long maxBytes = flags.maxBytes;
        double secondsPerCase = flags.secondsPerCase;
        List<Long> sizes = new ArrayList<>();
        for (long b = 1024; b <= maxBytes; b *= 4) {
            sizes.add(b);
        }
        Algorithm[] algorithms = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING};
        int worldSize = ranks;
        long bufferBytes = sizes.getLast();
        double budget = secondsPerCase;
        boolean launched = System.getenv("RANK") != null || System.getenv("OMPI_COMM_WORLD_RANK") != null;
        InJvmWorld.RankTask<double[]> measure = group -> {
            double[] micros = new double[sizes.size() * algorithms.length];
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, bufferBytes)) {
                MemorySegment buf = mem.local();
                int cell = 0;
                for (long bytes : sizes) {
                    long count = bytes / 4;
                    for (Algorithm algorithm : algorithms) {
                        // correctness first: rank r contributes r+1 everywhere, so the sum is n(n+1)/2
                        buf.asSlice(0, bytes).fill((byte) 0);
                        for (long i = 0; i < count; i += Math.max(1, count / 64)) {
                            buf.setAtIndex(ValueLayout.JAVA_FLOAT, i, group.rank() + 1);
                        }
                        comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                        int world = group.worldSize();
                        float expected = world * (world + 1) / 2f;
                        for (long i = 0; i < count; i += Math.max(1, count / 64)) {
                            float got = buf.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                            if (got != expected) {
                                throw new IllegalStateException(algorithm + " bytes=" + bytes + " element " + i
                                        + " got=" + got + " expected=" + expected);
                            }
                        }
                        // then time: rank 0 picks the iteration count and everyone follows via a broadcast
                        MemorySegment iters = java.lang.foreign.Arena.ofAuto().allocate(8);
                        long t0 = System.nanoTime();
                        comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                        long once = Math.max(1, System.nanoTime() - t0);
                        iters.set(ValueLayout.JAVA_LONG, 0, Math.max(3, Math.min(200_000, (long) (budget * 1e9 / once))));
                        comm.broadcast(iters, 1, DType.FLOAT64, 0);
                        long n = iters.get(ValueLayout.JAVA_LONG, 0);
                        comm.barrier();
                        long start = System.nanoTime();
                        for (long it = 0; it < n; it++) {
                            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                        }
                        micros[cell++] = (System.nanoTime() - start) / 1e3 / n;
                    }
                }
            }
            return micros;
        };
        double[] rank0;
        if (launched) {
            // one rank per process, as the launcher set it up; the table is rank 0's
            try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                double[] mine = measure.run(group);
                if (group.rank() != 0) {
                    return;
                }
                System.out.printf("symmem4j host all-reduce: %d ranks (processes, %d on this machine), float32 SUM, in"
                        + " place on symmetric memory in /dev/shm%n", group.worldSize(), group.localWorldSize());
                rank0 = mine;
            }
        } else {
            System.out.printf("symmem4j host all-reduce: %d ranks (threads), float32 SUM, in place on symmetric memory%n",
                    worldSize);
            rank0 = InJvmWorld.runOnEveryRank(worldSize, GroupOptions.defaults(), measure).getFirst();
        }
        System.out.printf("%12s %14s %14s %14s%n", "bytes", "ONE_SHOT us", "TWO_SHOT us", "RING us");
        int cell = 0;
        for (long bytes : sizes) {
            System.out.printf("%12d", bytes);
            for (int a = 0; a < algorithms.length; a++) {
                System.out.printf(" %14.2f", rank0[cell++]);
            }
            System.out.println();
        }
        System.out.println("all results verified");
    }
}
