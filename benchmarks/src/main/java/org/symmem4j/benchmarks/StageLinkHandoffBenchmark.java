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
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;

/**
 * Pipeline stage-to-stage hand-off latency, one way, between 2 ranks: a ping-pong over the
 * activation and gradient links of a 2-stage pipeline ({@link StageLinkPingPong}: send, receive,
 * copy the payload out into the stage's private buffer, release). The JMH thread is rank 0 (stage 0);
 * rank 1 (stage 1) is a thread of the same JVM ({@link Ranks#THREADS}, {@code host-in-jvm}) or a
 * second JVM over {@code /dev/shm} ({@link Ranks#PROCESSES}, {@code host-shm}), driven by
 * {@link PeerDriver} through signal slots of a small control allocation either way.
 *
 * <p>Waiting ranks wait as {@link Waits} says: as the group's defaults have them (what
 * {@code PipelineExecutor} gets today), or spinning only, as Open MPI's shared-memory transport polls.
 *
 * <p>Each invocation is {@link Sizes#OPS_PER_INVOCATION} round trips, that is twice as many one-way
 * hand-offs, so the score is the one-way latency (round trip / 2). Warm-up and measurement are
 * shorter than the other host benchmarks' so that bench/pipeline-handoff.sh, which runs 32
 * combinations, stays near 7 minutes on 2 cores.
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 4, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class StageLinkHandoffBenchmark {

    /** Where rank 1 runs. */
    public enum Ranks {
        /** A second thread of the JMH fork: the {@code host-in-jvm} transport. */
        THREADS,
        /** A second JVM ({@link BenchPeer}): the {@code host-shm} transport. */
        PROCESSES
    }

    /** How a rank waits for a message or a credit. */
    public enum Waits {
        /**
         * {@code GroupOptions.defaults()}: {@code BackoffIdleStrategy} spins, yields, then parks for
         * 1 µs doubling up to 1 ms, so waits longer than the spin phase end up to a park period late.
         */
        BACKOFF,
        /** Spins until the message comes (the deadline is still checked): never yields or parks. */
        SPIN;

        GroupOptions options() {
            GroupOptions defaults = GroupOptions.defaults();
            return switch (this) {
                case BACKOFF -> defaults;
                // spins up to Integer.MAX_VALUE polls (many seconds), longer than any hand-off measured
                case SPIN -> defaults.withIdleStrategy(() -> new BackoffIdleStrategy(Integer.MAX_VALUE, 0, 1, 1));
            };
        }
    }

    @Param({"1024", "4096", "16384", "65536", "262144", "1048576", "4194304", "16777216"}) // keep in step with bench/pipeline-handoff.sh
    public long bytes;

    @Param({"THREADS", "PROCESSES"})
    public Ranks ranks;

    @Param({"BACKOFF", "SPIN"})
    public Waits waits;

    private InJvmWorld world;
    private Thread peerThread;
    private PeerProcess peerProcess;
    private Group group;
    private StageLinkPingPong pingPong;
    private SymmetricMemory control;
    private PeerDriver.SignalChannel driver;
    private long requested;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        switch (ranks) {
            case THREADS -> {
                world = InJvmWorld.create(2, waits.options());
                peerThread = Thread.ofPlatform().name("bench-rank-1").start(() -> {
                    try (Group g = world.join(1)) {
                        StageLinkPingPong.serveEchoes(g, bytes);
                    }
                });
                group = world.join(0);
            }
            case PROCESSES -> {
                peerProcess = PeerProcess.start(waits.options(), BenchPeer.HANDOFF, Long.toString(bytes), waits.name());
                group = peerProcess.group();
            }
        }
        // the same allocations in the same order as the peer's serveEchoes: allocation is collective
        pingPong = StageLinkPingPong.open(group, bytes);
        control = SymmetricMemory.allocate(group, 0);
        driver = new PeerDriver.SignalChannel(control);
        requested = 1;
        driver.request(requested);
        pingPong.roundTrip();
        pingPong.requireEchoMatchesPayload();
    }

    @Benchmark
    @OperationsPerInvocation(2 * Sizes.OPS_PER_INVOCATION)
    public void handoff() {
        requested += Sizes.OPS_PER_INVOCATION;
        driver.request(requested);
        for (int i = 0; i < Sizes.OPS_PER_INVOCATION; i++) {
            pingPong.roundTrip();
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        // every measured round trip carried the whole payload there and back, up to the last one
        pingPong.requireEchoMatchesPayload();
        driver.stop();
        // collective closes, in the peer's order (reverse of allocation)
        control.close();
        pingPong.close();
        switch (ranks) {
            case THREADS -> {
                peerThread.join();
                group.close();
                world.close();
            }
            case PROCESSES -> peerProcess.close();
        }
    }
}
