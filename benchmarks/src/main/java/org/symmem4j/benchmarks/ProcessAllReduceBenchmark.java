package org.symmem4j.benchmarks;

import java.io.IOException;
import java.util.concurrent.TimeUnit;
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
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * All-reduce latency, 2 ranks as JVM processes over {@code /dev/shm}: float32 SUM in place on
 * symmetric memory. The JMH fork is rank 0 and hosts the rendezvous store; rank 1 is a
 * {@link BenchPeer} process it starts ({@link PeerProcess}), driven through signal slots of a small
 * control allocation ({@link PeerDriver.SignalChannel}).
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class ProcessAllReduceBenchmark {

    @Param({"1024", "4096", "16384", "65536", "262144", "1048576", "4194304", "16777216", "67108864", "268435456"}) // keep in step with Sizes and bench/mpi
    public long bytes;

    @Param({"ONE_SHOT", "TWO_SHOT", "RING"})
    public Algorithm algorithm;

    private PeerProcess peer;
    private Communicator comm;
    private SymmetricMemory mem;
    private SymmetricMemory control;
    private PeerDriver.SignalChannel driver;
    private long count;
    private long requested;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        count = bytes / 4;
        peer = PeerProcess.start(GroupOptions.defaults(), BenchPeer.ALL_REDUCE, Long.toString(bytes), algorithm.name());
        ProcessGroup group = peer.group();
        comm = Communicator.create(group);
        mem = SymmetricMemory.allocate(group, bytes);
        control = SymmetricMemory.allocate(group, 0);
        driver = new PeerDriver.SignalChannel(control);
        HostAllReduceBenchmark.fill(mem);
    }

    @Benchmark
    @OperationsPerInvocation(Sizes.OPS_PER_INVOCATION)
    public void allReduce() {
        requested += Sizes.OPS_PER_INVOCATION;
        driver.request(requested);
        for (int i = 0; i < Sizes.OPS_PER_INVOCATION; i++) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        driver.stop();
        // collective closes, in the peer's order (reverse of allocation)
        control.close();
        mem.close();
        comm.close();
        peer.close();
    }
}
