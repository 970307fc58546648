package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import io.aeron.driver.MediaDriver;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.IterationParams;
import org.openjdk.jmh.runner.IterationType;
import org.symmem4j.parallel.GroupOptions;

/**
 * Ring buffers between 2 JVM processes on one host: symmem4j's {@link org.symmem4j.state.SymmetricRingBuffer}
 * (one-to-one, many-to-one; messages copied in by {@code offer} or written in place through {@code tryClaim}) against
 * Agrona's {@code OneToOneRingBuffer} / {@code ManyToOneRingBuffer} ({@code write}, or {@code tryClaim}) over files in
 * {@code /dev/shm} mapped by both processes, and against Aeron IPC (an exclusive or a concurrent publication) through
 * a media driver embedded in rank 0 ({@link RingPair#launchAeronDriver}), in the same run. The JMH fork is rank 0 (the
 * producer); rank 1 is a {@link BenchPeer} that drains ({@link #throughput}) or echoes ({@link #roundTrip}) with a
 * busy-spinning poll. Both sides spin, so each needs a core of its own: on a machine with fewer idle cores the numbers
 * measure the scheduler as much as the rings. With {@code -Dsymmem4j.bench.cpus=A,B[,C]} the producer's thread runs
 * on CPU A, the peer's on B and Aeron's driver on C ({@link BenchCpus}); {@link RingSuite} runs the whole comparison.
 *
 * <p>Paired mode ({@link #against} naming a second kind of symmem4j or Agrona): one fork holds both kinds' rings, the
 * peer echoes on both, and the JMH iterations (short blocks) alternate between them in ABBA order
 * ({@link FlightRecorderPairedBenchmark#recorderOn}: {@link #kind}'s when true), as {@link RingFillBenchmark}'s paired
 * mode; {@link RingPairedSuite} ({@code --round-trip}) pairs each block's p50 with the next one's.
 */
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
        "--sun-misc-unsafe-memory-access=allow", "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
        // Aeron's documented requirement on JDK 16+ (its build passes it to every JVM it runs)
        "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED", "-Xmx1g"})
@State(Scope.Thread)
public class RingBenchmark {

    /** Ring bytes: room for 256 messages of 4 KiB. */
    static final int CAPACITY = 1 << 20;

    @Param({"64", "4096"})
    public int messageBytes;

    @Param({"SYMMEM_ONE_TO_ONE", "SYMMEM_ONE_TO_ONE_CLAIM", "AGRONA_ONE_TO_ONE", "AGRONA_ONE_TO_ONE_CLAIM",
            "AERON_ONE_TO_ONE", "SYMMEM_MANY_TO_ONE", "SYMMEM_MANY_TO_ONE_CLAIM", "AGRONA_MANY_TO_ONE",
            "AGRONA_MANY_TO_ONE_CLAIM", "AERON_MANY_TO_ONE"})
    public RingPair.Kind kind;

    /** The kind measured against {@link #kind} in the same forks, block by block (paired mode), or NONE. */
    @Param({RingFillBenchmark.NONE})
    public String against;

    private PeerProcess peer;
    /** The rings of this block. */
    private RingPair rings;
    /** Paired mode: {@link #kind}'s rings, then {@link #against}'s; null otherwise. */
    private RingPair[] lanes;
    private int warmupBlocks;
    private int measuredBlocks;
    /** Agrona's ring files' path prefix, or Aeron's directory. */
    private Path files;
    private MediaDriver driver;
    private int echoes;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        BenchCpus.pinCurrentThread(BenchCpus.PRODUCER, "the benchmark's producer thread");
        files = Path.of("/dev/shm", (kind.aeron() ? "symmem4j-aeron-bench-" : "symmem4j-ring-bench-")
                + ProcessHandle.current().pid());
        if (!RingFillBenchmark.NONE.equals(against)) {
            setUpPaired(RingFillBenchmark.kinds(kind, against));
            return;
        }
        try {
            if (kind.agrona()) {
                RingPair.createAgronaFiles(files, CAPACITY);
            } else if (kind.aeron()) {
                driver = RingPair.launchAeronDriver(files);
            }
            peer = PeerProcess.start(GroupOptions.defaults(), BenchPeer.RING, Integer.toString(CAPACITY), kind.name(),
                    files.toString());
            rings = RingPair.open(kind, peer.group(), CAPACITY, files, (type, length) -> echoes++);
            peer.group().allGatherBytes("ring-bench-ready", new byte[0]);
        } catch (IOException | RuntimeException | Error e) {
            removeFiles(); // a failed set-up leaves no ring files or driver directory in /dev/shm
            throw e;
        }
    }

    /** Paired mode: both kinds' rings, each lane's files under {@link RingFillBenchmark#laneFiles}. */
    private void setUpPaired(java.util.List<RingPair.Kind> kinds) throws IOException {
        lanes = new RingPair[kinds.size()];
        try {
            for (int i = 0; i < lanes.length; i++) {
                if (kinds.get(i).agrona()) {
                    RingPair.createAgronaFiles(RingFillBenchmark.laneFiles(files, i), CAPACITY);
                }
            }
            peer = PeerProcess.start(GroupOptions.defaults(), BenchPeer.RING, Integer.toString(CAPACITY),
                    RingFillBenchmark.variant(kinds), files.toString());
            for (int i = 0; i < lanes.length; i++) {
                lanes[i] = RingPair.open(kinds.get(i), peer.group(), CAPACITY, RingFillBenchmark.laneFiles(files, i),
                        (type, length) -> echoes++);
            }
            peer.group().allGatherBytes("ring-bench-ready", new byte[0]);
        } catch (IOException | RuntimeException | Error e) {
            removeFiles();
            throw e;
        }
        rings = lanes[0];
    }

    /**
     * Paired mode: the rings of the coming block ({@link FlightRecorderPairedBenchmark#recorderOn}: {@link #kind}'s
     * when true), warm-up and measured blocks counted apart.
     *
     * @param params which kind of iteration comes
     */
    @Setup(Level.Iteration)
    public void choose(IterationParams params) {
        if (lanes == null) {
            return;
        }
        int k = params.getType() == IterationType.WARMUP ? warmupBlocks++ : measuredBlocks++;
        rings = lanes[FlightRecorderPairedBenchmark.recorderOn(k) ? 0 : 1];
    }

    private void removeFiles() throws IOException {
        if (lanes != null) {
            for (int i = 0; i < lanes.length; i++) {
                RingPair.deleteAgronaFiles(RingFillBenchmark.laneFiles(files, i)); // none for symmem4j's lane
            }
            return;
        }
        if (kind.agrona()) {
            RingPair.deleteAgronaFiles(files);
        } else if (kind.aeron()) {
            if (driver != null) {
                driver.close();
                driver = null;
            }
            RingPair.deleteAeronDir(files);
        }
    }

    /** Messages per second one producer pushes through to a draining consumer (bounded ring: the consumer's rate). */
    @Benchmark
    @BenchmarkMode(Mode.Throughput)
    @OutputTimeUnit(TimeUnit.SECONDS)
    public void throughput() {
        while (!rings.send(RingPair.DRAIN, messageBytes)) {
            RingPair.idle();
        }
    }

    /** One message to the peer and its echo back: the round trip, sampled for p50/p99. */
    @Benchmark
    @BenchmarkMode(Mode.SampleTime)
    @OutputTimeUnit(TimeUnit.MICROSECONDS)
    public int roundTrip() {
        int before = echoes;
        while (!rings.send(RingPair.ECHO, messageBytes)) {
            RingPair.idle();
        }
        while (echoes == before) {
            if (rings.receive() == 0) {
                RingPair.idle();
            }
        }
        return echoes;
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        for (RingPair r : lanes == null ? new RingPair[] {rings} : lanes) {
            while (!r.send(RingPair.STOP, 0)) {
                RingPair.idle();
            }
        }
        peer.group().allGatherBytes("ring-bench-done", new byte[0]);
        for (RingPair r : lanes == null ? new RingPair[] {rings} : lanes) {
            r.close(); // collective, in the peer's order
        }
        peer.close(); // the peer's Aeron client is closed before the driver it talks to
        removeFiles();
    }
}
