package org.symmem4j.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
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

/** Baseline: copying the same number of bytes within one thread ({@code MemorySegment.copy}, i.e. memmove). */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class MemcpyBenchmark {

    @Param({"1024", "4096", "16384", "65536", "262144", "1048576", "4194304", "16777216", "67108864", "268435456"}) // keep in step with Sizes and bench/mpi
    public long bytes;

    private Arena arena;
    private MemorySegment src;
    private MemorySegment dst;

    @Setup(Level.Trial)
    public void setUp() {
        arena = Arena.ofConfined();
        src = arena.allocate(bytes, 4096);
        dst = arena.allocate(bytes, 4096);
        src.fill((byte) 1);
        dst.fill((byte) 2);
    }

    @Benchmark
    public void memcpy() {
        MemorySegment.copy(src, 0, dst, 0, bytes);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }
}
