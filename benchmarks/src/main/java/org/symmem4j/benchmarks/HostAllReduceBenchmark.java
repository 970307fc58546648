package org.symmem4j.benchmarks;

import java.lang.foreign.ValueLayout;
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
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * All-reduce latency, 2 ranks as threads of one JVM ({@link #ranks()}: a subclass may measure more): float32 SUM in
 * place on symmetric memory. The JMH thread is rank 0; the other ranks are threads driven by {@link PeerDriver}.
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class HostAllReduceBenchmark {

    @Param({"1024", "4096", "16384", "65536", "262144", "1048576", "4194304", "16777216", "67108864", "268435456"}) // keep in step with Sizes and bench/mpi
    public long bytes;

    @Param({"ONE_SHOT", "TWO_SHOT", "RING"})
    public Algorithm algorithm;

    private InJvmWorld world;
    private Group group;
    private Communicator comm;
    private SymmetricMemory mem;
    private long count;
    private final AtomicLong requested = new AtomicLong();
    private volatile boolean stop;
    private Thread[] peers;

    /** Ranks of the group, this thread included: 2 here; a subclass may measure more. */
    protected int ranks() {
        return 2;
    }

    @Setup(Level.Trial)
    public void setUp() throws InterruptedException {
        count = bytes / 4;
        int ranks = ranks();
        world = InJvmWorld.create(ranks);
        peers = new Thread[ranks - 1];
        for (int r = 1; r < ranks; r++) {
            int rank = r;
            peers[r - 1] = Thread.ofPlatform().name("bench-rank-" + r).start(() -> {
                try (Group g = world.join(rank); Communicator c = Communicator.create(g);
                     SymmetricMemory m = SymmetricMemory.allocate(g, bytes)) {
                    fill(m);
                    PeerDriver.serve(PeerDriver.inJvm(requested, () -> stop),
                            () -> c.allReduce(m, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm));
                }
            });
        }
        group = world.join(0);
        comm = Communicator.create(group);
        mem = SymmetricMemory.allocate(group, bytes);
        fill(mem);
    }

    /** Ones, not zeros: sums double each op and saturate at infinity, which costs the same as finite adds. */
    static void fill(SymmetricMemory m) {
        for (long i = 0; i < m.byteSize() / 4; i++) {
            m.local().setAtIndex(ValueLayout.JAVA_FLOAT, i, 1f);
        }
    }

    @Benchmark
    @OperationsPerInvocation(Sizes.OPS_PER_INVOCATION)
    public void allReduce() {
        // release: the peers read the new total with getAcquire and run the same number of ops
        requested.setRelease(requested.get() + Sizes.OPS_PER_INVOCATION);
        for (int i = 0; i < Sizes.OPS_PER_INVOCATION; i++) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        stop = true;
        // close is collective: the peers close memory then communicator when they stop; same order here
        mem.close();
        comm.close();
        for (Thread peer : peers) {
            peer.join();
        }
        group.close();
        world.close();
    }
}
