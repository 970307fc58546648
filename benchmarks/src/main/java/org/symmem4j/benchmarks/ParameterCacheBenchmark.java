package org.symmem4j.benchmarks;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.ConcurrentHashMap;
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
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.ParameterCache;

/**
 * Parameter cache lookup latency (the seed's target: under 2 us on the host): {@link ParameterCache#get} of one of
 * {@link #ENTRIES} named entries, zero-copy, and its first value read; the floor is a
 * {@link ConcurrentHashMap} of the same names to segments in one JVM, in the same run. One rank (a group of one
 * thread): a lookup reads the owner's directory and block header the same way from any rank, through the mapping.
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class ParameterCacheBenchmark {

    static final int ENTRIES = 64;

    @Param({"4096"})
    public int entryBytes;

    private InJvmWorld world;
    private Group group;
    private ParameterCache cache;
    private final ConcurrentHashMap<String, MemorySegment> floor = new ConcurrentHashMap<>();
    private final String[] names = new String[ENTRIES];
    private int next;

    @Setup(Level.Trial)
    public void setUp() {
        world = InJvmWorld.create(1);
        group = world.join(0);
        cache = ParameterCache.create(group, (long) ENTRIES * (entryBytes + 64) * 2, ENTRIES * 2);
        for (int i = 0; i < ENTRIES; i++) {
            names[i] = "layer/" + i + "/weight";
            MemorySegment data = MemorySegment.ofArray(new long[entryBytes / 8]);
            data.set(ValueLayout.JAVA_LONG, 0, i);
            cache.put(names[i], data);
            floor.put(names[i], data);
        }
    }

    /** A zero-copy lookup by name and a read of the entry's first value. */
    @Benchmark
    public long cacheGet() {
        ParameterCache.Entry e = cache.get(names[next++ & (ENTRIES - 1)]);
        return e.data().get(ValueLayout.JAVA_LONG, 0);
    }

    /** The same through a ConcurrentHashMap of segments in this JVM: the floor. */
    @Benchmark
    public long concurrentHashMapGet() {
        return floor.get(names[next++ & (ENTRIES - 1)]).get(ValueLayout.JAVA_LONG, 0);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        cache.close();
        group.close();
    }
}
