package org.symmem4j.benchmarks;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;
import java.util.Locale;

/**
 * {@link RingOpCostBenchmark}'s message (written, then read back, in one thread) timed by the thread's own CPU time
 * instead of the wall clock: on a loaded machine a thread that waits for a core adds nothing to it, so the CPU cost per
 * message of two rings can be compared there (JMH's wall-clock times swung by 2× between forks on the 2-core dev VM at
 * load 20-30). Cache lines that other processes evict still count, so it reports the lowest, the first quartile and
 * the median of many short repetitions; the lowest is the least disturbed.
 *
 * <pre>{@code
 * java -cp ... org.symmem4j.benchmarks.RingOpCpuCost SYMMEM_MANY_TO_ONE 64 [warmupOps] [opsPerRep] [reps]
 * }</pre>
 * One kind per JVM (as JMH forks per parameter), so that no other kind's code shares its profile; alternate kinds and
 * JVMs for a comparison.
 */
public final class RingOpCpuCost {

    private RingOpCpuCost() {
    }

    /**
     * Measures one kind and prints one line: kind, bytes, then the lowest, first-quartile and median ns per message.
     *
     * @param args kind (a {@link RingOpCostBenchmark.Kind}), message bytes, and optionally warm-up messages (3,000,000),
     *             messages per repetition (300,000) and repetitions (40)
     */
    public static void main(String[] args) {
        if (args.length < 2 || args.length > 5) {
            throw new IllegalArgumentException("RingOpCpuCost: " + args.length + " arguments, expected KIND BYTES"
                    + " [WARMUP_OPS] [OPS_PER_REP] [REPS] (fix: e.g. RingOpCpuCost SYMMEM_MANY_TO_ONE 64; kinds: "
                    + Arrays.toString(RingOpCostBenchmark.Kind.values()) + ")");
        }
        RingOpCostBenchmark bench = new RingOpCostBenchmark();
        bench.kind = RingOpCostBenchmark.Kind.valueOf(args[0]);
        bench.messageBytes = Integer.parseInt(args[1]);
        long warmup = args.length > 2 ? Long.parseLong(args[2]) : 3_000_000;
        long ops = args.length > 3 ? Long.parseLong(args[3]) : 300_000;
        int reps = args.length > 4 ? Integer.parseInt(args[4]) : 40;
        if (bench.messageBytes < 1 || warmup < 0 || ops < 1 || reps < 1) {
            throw new IllegalArgumentException("RingOpCpuCost: bytes=" + bench.messageBytes + " warmup=" + warmup
                    + " ops=" + ops + " reps=" + reps + ", expected bytes, ops and reps >= 1 and warmup >= 0 (fix: e.g."
                    + " 64 3000000 300000 40)");
        }
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        bench.setUp();
        try {
            long sink = 0;
            for (long i = 0; i < warmup; i++) {
                sink += bench.writeAndRead();
            }
            double[] nanosPerOp = new double[reps];
            for (int r = 0; r < reps; r++) {
                long start = threads.getCurrentThreadCpuTime();
                for (long i = 0; i < ops; i++) {
                    sink += bench.writeAndRead();
                }
                nanosPerOp[r] = (threads.getCurrentThreadCpuTime() - start) / (double) ops;
            }
            Arrays.sort(nanosPerOp);
            System.out.printf(Locale.ROOT, "%-26s %5d B  min %6.1f  p25 %6.1f  median %6.1f ns/msg (thread CPU time)%s%n",
                    bench.kind, bench.messageBytes, nanosPerOp[0], nanosPerOp[reps / 4], nanosPerOp[reps / 2],
                    sink == Long.MIN_VALUE ? " " : "");
        } finally {
            bench.tearDown();
        }
    }
}
