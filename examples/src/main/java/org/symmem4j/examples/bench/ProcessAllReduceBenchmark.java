package org.symmem4j.examples.bench;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.util.List;
import java.util.Map;
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
import org.symmem4j.parallel.ProcessGroup;
import org.symmem4j.parallel.ProcessGroupConfig;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * All-reduce latency, 2 ranks as JVM processes over {@code /dev/shm}: float32 SUM in place on
 * symmetric memory. The JMH fork is rank 0 and hosts the rendezvous store; rank 1 is a
 * {@link BenchPeer} process it starts, driven through signal slots of a small control allocation.
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class ProcessAllReduceBenchmark {

    /** Signal slots of the control allocation on rank 1. */
    static final int REQUESTED_SLOT = 0;
    static final int STOP_SLOT = 1;

    @Param({"1024", "4096", "16384", "65536", "262144", "1048576", "4194304", "16777216", "67108864", "268435456"}) // keep in step with Sizes and bench/mpi
    public long bytes;

    @Param({"ONE_SHOT", "TWO_SHOT", "RING"})
    public Algorithm algorithm;

    private Process peer;
    private ProcessGroup group;
    private Communicator comm;
    private SymmetricMemory mem;
    private SymmetricMemory control;
    private long count;
    private long requested;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        count = bytes / 4;
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        String java = ProcessHandle.current().info().command().orElse("java");
        ProcessBuilder pb = new ProcessBuilder(List.of(java, "--enable-native-access=ALL-UNNAMED",
                "--add-modules=jdk.incubator.vector", "-Xmx1g", "-cp", System.getProperty("java.class.path"),
                BenchPeer.class.getName(), Long.toString(bytes), algorithm.name()));
        pb.environment().putAll(Map.of("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1",
                "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", Integer.toString(port)));
        pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(new File("bench-peer.log")));
        peer = pb.start();
        group = ProcessGroup.join(new ProcessGroupConfig(0, 2, 0, "127.0.0.1", port), GroupOptions.defaults());
        comm = Communicator.create(group);
        mem = SymmetricMemory.allocate(group, bytes);
        control = SymmetricMemory.allocate(group, 0);
        HostAllReduceBenchmark.fill(mem);
    }

    @Benchmark
    @OperationsPerInvocation(Sizes.OPS_PER_INVOCATION)
    public void allReduce() {
        requested += Sizes.OPS_PER_INVOCATION;
        control.signal(1, REQUESTED_SLOT, requested, SignalOp.SET);
        for (int i = 0; i < Sizes.OPS_PER_INVOCATION; i++) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        control.signal(1, STOP_SLOT, 1, SignalOp.SET);
        // collective closes, in the peer's order (reverse of allocation)
        control.close();
        mem.close();
        comm.close();
        group.close();
        if (!peer.waitFor(60, TimeUnit.SECONDS)) {
            peer.destroyForcibly();
            throw new IllegalStateException("benchmark peer did not exit; see bench-peer.log");
        }
    }
}
