package org.symmem4j.benchmarks;

import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.IterationParams;
import org.openjdk.jmh.runner.IterationType;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The flight recorder's cost in a host all-reduce (issue #36: at most 1 % of a 1 KiB one), measured on and off in
 * the same JVM, so that fork-to-fork variation (up to 18 % between forks of one setting on 16 cores) cancels: every
 * rank holds two communicators on one group, one made with {@code symmem4j.flight.recorder.entries=0} (no recorder)
 * and one with 1024 entries, and each iteration runs one of them, in the order off, on, on, off, off, on, on, off ...
 * ({@link #recorderOn}: pairs in ABBA order, so a linear drift within the fork cancels too). Both run the same
 * symmetric buffer. {@code FlightRecorderCostBench} runs this, pairs iteration 2j with 2j+1 and reports the mean
 * paired difference with its confidence interval. The communicators are created in a random order per fork, so
 * whatever differs between two communicators of one group besides the recorder (their scratch memory's placement)
 * varies from fork to fork instead of biasing every fork the same way.
 *
 * <p>The JIT sees both communicators, so the off runs execute the recorder's {@code null} checks as real branches
 * (a production JVM with the recorder off would compile them away): four untaken branches per collective, which
 * makes the measured difference, if anything, smaller than the true one by well under a nanosecond.
 *
 * <p>On a machine with at least {@code ranks} idle cores (each rank spins on its own; fewer cores measure the
 * scheduler). The JMH thread is rank 0; the other ranks are threads driven by {@link PeerDriver}.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 4, time = 1)
@Measurement(iterations = 20, time = 1)
@Fork(value = 3, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class FlightRecorderPairedBenchmark {

    /** The recorder's size in the "on" communicator (the default). */
    public static final int ENTRIES_ON = 1024;

    @Param({"1024"})
    public long bytes;

    @Param({"ONE_SHOT", "TWO_SHOT"})
    public Algorithm algorithm;

    @Param({"2", "4"})
    public int ranks;

    private InJvmWorld world;
    private Group group;
    private Communicator off;
    private Communicator on;
    private SymmetricMemory mem;
    private long count;
    /** The communicator of this iteration (rank 0's; written between iterations only). */
    private Communicator current;
    /** Which communicator the peers use: written by rank 0 before it requests the iteration's operations. */
    private volatile boolean peersOn;
    private final AtomicLong requested = new AtomicLong();
    private volatile boolean stop;
    private Thread[] peers;
    private int warmups;
    private int measured;

    /**
     * Whether iteration {@code k} (of the warm-up or of the measurement, counted from 0) runs with the recorder: off, on,
     * on, off, off, on, on, off ... Iterations {@code 2j} and {@code 2j + 1} form pair {@code j}, one of each.
     *
     * @param k the iteration
     * @return true for the recorder-on communicator
     */
    public static boolean recorderOn(int k) {
        boolean firstOfPair = k % 2 == 0;
        boolean pairStartsOff = (k / 2) % 2 == 0;
        return firstOfPair != pairStartsOff;
    }

    @Setup(Level.Trial)
    public void setUp() throws InterruptedException {
        count = bytes / 4;
        boolean onFirst = ThreadLocalRandom.current().nextBoolean();
        String property = Configuration.FLIGHT_RECORDER_ENTRIES.property();
        String before = System.getProperty(property);
        System.setProperty(property, onFirst ? Integer.toString(ENTRIES_ON) : "0");
        world = InJvmWorld.create(ranks);
        peers = new Thread[ranks - 1];
        for (int r = 1; r < ranks; r++) {
            int rank = r;
            peers[r - 1] = Thread.ofPlatform().name("bench-rank-" + r).start(() -> {
                try (Group g = world.join(rank); Pair c = Pair.create(g, onFirst, null);
                     SymmetricMemory m = SymmetricMemory.allocate(g, bytes)) {
                    HostAllReduceBenchmark.fill(m);
                    PeerDriver.serve(PeerDriver.inJvm(requested, () -> stop), () -> (peersOn ? c.on : c.off)
                            .allReduce(m, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm));
                }
            });
        }
        group = world.join(0);
        Pair pair = Pair.create(group, onFirst, () -> System.setProperty(property, onFirst ? "0" : Integer.toString(ENTRIES_ON)));
        if (before == null) {
            System.clearProperty(property);
        } else {
            System.setProperty(property, before);
        }
        off = pair.off;
        on = pair.on;
        mem = SymmetricMemory.allocate(group, bytes);
        HostAllReduceBenchmark.fill(mem);
        System.out.println("flight recorder paired benchmark: communicators created " + (onFirst ? "on, off" : "off, on"));
    }

    /**
     * One rank's two communicators, created in the order given: the first under the property as it is, then (after
     * every rank has made its first, and rank 0 has run {@code between}) the second.
     */
    private record Pair(Communicator off, Communicator on) implements AutoCloseable {
        static Pair create(Group g, boolean onFirst, Runnable between) {
            Communicator first = Communicator.create(g);
            first.barrier(); // every rank made its first communicator under the first setting
            if (between != null) {
                between.run();
            }
            first.barrier(); // rank 0 changed the setting
            Communicator second = Communicator.create(g);
            return onFirst ? new Pair(second, first) : new Pair(first, second);
        }

        @Override
        public void close() {
            // collective, the same order on every rank
            off.close();
            on.close();
        }
    }

    /**
     * Chooses this iteration's communicator ({@link #recorderOn}), warm-up and measurement counted apart.
     *
     * @param params which kind of iteration comes
     */
    @Setup(Level.Iteration)
    public void choose(IterationParams params) {
        int k = params.getType() == IterationType.WARMUP ? warmups++ : measured++;
        boolean withRecorder = recorderOn(k);
        current = withRecorder ? on : off;
        // volatile write, before allReduce() publishes the iteration's request count (release): a peer that sees the
        // new count sees this choice; every peer has begun the previous iteration's last operation already (rank 0's
        // last one could not pass its entry barrier before), so none runs an old operation on the new communicator
        peersOn = withRecorder;
    }

    @Benchmark
    @OperationsPerInvocation(Sizes.OPS_PER_INVOCATION)
    public void allReduce() {
        Communicator c = current;
        // release: the peers read the new total with getAcquire and run the same number of ops
        requested.setRelease(requested.get() + Sizes.OPS_PER_INVOCATION);
        for (int i = 0; i < Sizes.OPS_PER_INVOCATION; i++) {
            c.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        stop = true;
        // close is collective: the peers close memory, then their communicators (off, on), when they stop; same order
        mem.close();
        off.close();
        on.close();
        for (Thread peer : peers) {
            peer.join();
        }
        group.close();
        world.close();
    }
}
