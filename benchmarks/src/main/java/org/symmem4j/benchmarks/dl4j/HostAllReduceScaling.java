package org.symmem4j.benchmarks.dl4j;

import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.symmem4j.examples.Cli;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientBuckets;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The host all-reduce at N ranks (threads of one JVM), float32 SUM in place on symmetric memory,
 * one message per size with the calibrated policy's algorithm (as the gradient sync's buckets run),
 * for comparison with Open MPI's {@code MPI_Allreduce} at the same ranks and sizes
 * ({@code bench/mpi/allreduce_bench.c}). Prints one CSV line per (ranks, size): rank 0's median
 * microseconds over the iterations, each started after a barrier.
 *
 * <pre>
 *   HostAllReduceScaling [--ranks 2,4,8,16] [--sizes 1024,65536,1048576,4194304,16777216] [--seconds-per-size 1]
 * </pre>
 */
public final class HostAllReduceScaling {

    private HostAllReduceScaling() {
    }

    @Command(name = "HostAllReduceScaling", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Host all-reduce latency over rank counts and sizes (threads, float32 SUM, every algorithm).")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "P", split = ",", description = "rank counts")
        List<Integer> ranks = new java.util.ArrayList<>(List.of(2, 4, 8, 16));
        @Option(names = "--sizes", paramLabel = "BYTES", split = ",", description = "message sizes in bytes")
        List<Long> sizes = new java.util.ArrayList<>(List.of(1024L, 65536L, 1L << 20, 4L << 20, 16L << 20));
        @Option(names = "--seconds-per-size", paramLabel = "S", description = "timing budget per size")
        double seconds = 1;
    }

    public static void main(String[] args) {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            f.ranks.forEach(r -> Cli.positive("--ranks", r));
            if (f.sizes.stream().anyMatch(b -> b < 4) || f.seconds <= 0) {
                throw new IllegalArgumentException("--sizes=" + f.sizes + " --seconds-per-size=" + f.seconds
                        + " expected sizes >= 4 bytes and seconds > 0");
            }
            return f;
        });
        List<Integer> ranks = List.copyOf(flags.ranks);
        List<Long> sizes = List.copyOf(flags.sizes);
        double seconds = flags.seconds;
        System.out.println("ranks,bytes,algorithm,median_us,iterations");
        for (int n : ranks) {
            for (long bytes : sizes) {
                long count = bytes / 4;
                double budget = seconds;
                List<String> out = InJvmWorld.runOnEveryRank(n, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                        group -> {
                            try (Communicator comm = Communicator.create(group);
                                 SymmetricMemory mem = SymmetricMemory.allocate(group, bytes)) {
                                for (long e = 0; e < count; e++) {
                                    mem.local().setAtIndex(ValueLayout.JAVA_FLOAT, e, (e % 13) * 0.25f);
                                }
                                GradientSynchronizer sync = new GradientSynchronizer(comm, mem, 0, DType.FLOAT32,
                                        GradientBuckets.split(count, DType.FLOAT32, Math.max(64, bytes)),
                                        AlgorithmPolicy.calibrated(), new SyncMetrics("host-in-jvm"));
                                Algorithm algorithm = sync.algorithms().getFirst();
                                double[] us = new double[100_000];
                                int done = 0;
                                long end = 0;
                                for (int it = -20; done < us.length; it++) {
                                    comm.barrier();
                                    if (it == 0) {
                                        end = System.nanoTime() + (long) (budget * 1e9);
                                    }
                                    long t0 = System.nanoTime();
                                    sync.allReduce(ReduceOp.SUM);
                                    if (it >= 0) {
                                        us[done++] = (System.nanoTime() - t0) / 1e3;
                                    }
                                    // every rank must run the same all-reduces: they agree every 10 whether time is up
                                    if (it >= 0 && done % 10 == 0 && agreeDone(comm, System.nanoTime() > end)) {
                                        break;
                                    }
                                }
                                double[] got = Arrays.copyOf(us, done);
                                Arrays.sort(got);
                                return String.format(Locale.ROOT, "%d,%d,%s,%.2f,%d", n, bytes, algorithm, got[done / 2], done);
                            }
                        });
                System.out.println(out.getFirst());
                System.out.flush();
            }
        }
    }

    /** Whether any rank's time is up (a MAX all-reduce of one flag), so every rank stops after the same iteration. */
    private static boolean agreeDone(Communicator comm, boolean mine) {
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
            java.lang.foreign.MemorySegment flag = arena.allocate(4);
            flag.set(ValueLayout.JAVA_FLOAT, 0, mine ? 1f : 0f);
            comm.allReduce(flag, 1, DType.FLOAT32, ReduceOp.MAX, Algorithm.ONE_SHOT);
            return flag.get(ValueLayout.JAVA_FLOAT, 0) > 0;
        }
    }
}
