package org.symmem4j.benchmarks;

import java.io.File;
import java.io.IOException;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;

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
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * A shared hash map under load from 2 or 4 processes ({@link #processes}): the JMH fork (rank 0) measures gets and
 * puts of random keys while ranks 1.., {@link BenchPeer}s, run 50% gets / 50% puts on the same map; symmem4j's
 * {@link org.symmem4j.state.SymmetricHashMap} against Chronicle Map persisted to {@code /dev/shm}, and
 * {@link java.util.concurrent.ConcurrentHashMap} in one JVM with {@code processes - 1} threads as the load (the floor), in the
 * same run. Chronicle Map runs on JDK 25 with the module openings below.
 */
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
        "-Xmx1g", "--sun-misc-unsafe-memory-access=allow", "-Dchronicle.analytics.disable=true",
        // what Chronicle Map 2026.1 needs on JDK 25 (without them: InaccessibleObjectException at createPersistedTo)
        "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
        "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
        "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED"})
@State(Scope.Thread)
public class MapBenchmark {

    @Param({"SYMMEM", "CHRONICLE", "CONCURRENT_HASH_MAP"})
    public SharedMapPair.Kind kind;

    /** Processes on the map: the JMH fork and processes - 1 peers under load (the floor: as many load threads). */
    @Param({"2", "4"})
    public int processes;

    private PeerProcess peer;
    private SymmetricMemory control;
    private SharedMapPair map;
    private File file;
    private final java.util.List<Thread> floorLoad = new java.util.ArrayList<>();
    private volatile boolean stop;
    private final SplittableRandom rnd = new SplittableRandom(0);

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        file = new File("/dev/shm/symmem4j-map-bench-" + ProcessHandle.current().pid());
        file.delete();
        if (kind == SharedMapPair.Kind.CONCURRENT_HASH_MAP) {
            map = SharedMapPair.open(kind, null, file);
            map.fill();
            for (int t = 1; t < processes; t++) {
                Thread load = new Thread(() -> map.load(() -> stop), "map-floor-load-" + t);
                load.start();
                floorLoad.add(load);
            }
            return;
        }
        if (kind == SharedMapPair.Kind.CHRONICLE) {
            map = SharedMapPair.open(kind, null, file); // rank 0 creates the file before the peer opens it
        }
        peer = PeerProcess.start(processes, GroupOptions.defaults(), BenchPeer.MAP, "0", kind.name(), file.getPath());
        if (map == null) {
            map = SharedMapPair.open(kind, peer.group(), file);
        }
        control = SymmetricMemory.allocate(peer.group(), 0);
        map.fill();
        peer.group().allGatherBytes("map-bench-filled", new byte[0]);
    }

    /** A get of a random key (present), the value copied out (the floor hands a reference). */
    @Benchmark
    @BenchmarkMode({Mode.Throughput, Mode.SampleTime})
    @OutputTimeUnit(TimeUnit.MICROSECONDS)
    public int get() {
        return map.get(rnd.nextInt(SharedMapPair.KEYS));
    }

    /** A put of a random key (replacing its value). */
    @Benchmark
    @BenchmarkMode({Mode.Throughput, Mode.SampleTime})
    @OutputTimeUnit(TimeUnit.MICROSECONDS)
    public void put() {
        map.put(rnd.nextInt(SharedMapPair.KEYS));
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        stop = true;
        if (kind == SharedMapPair.Kind.CONCURRENT_HASH_MAP) {
            for (Thread load : floorLoad) {
                load.join();
            }
            floorLoad.clear();
            return;
        }
        for (int r = 1; r < processes; r++) {
            control.signal(r, 0, 1, SignalOp.SET); // release: ends peer r's load loop (it polls the slot)
        }
        peer.group().allGatherBytes("map-bench-done", new byte[0]);
        // collective closes in the peer's order (reverse of opening)
        control.close();
        map.close();
        peer.close();
        file.delete();
    }
}
