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
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * How close the reduction loop runs to memory bandwidth: {@code dst += src} over {@code bytes} of
 * float32 (two streams read, one written) in one thread, next to a memcpy of the same bytes (one
 * read, one written). Bandwidths in the report count every byte read and written.
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class ReducerBandwidthBenchmark {

    @Param({"65536", "1048576", "67108864"})
    public long bytes;

    private Arena arena;
    private final Reducer reducer = Reducer.forThisJvm();
    private MemorySegment[] srcs;
    private final long[] offsets = {0, 0};
    private final DType[] types = {DType.FLOAT32, DType.FLOAT32};
    private MemorySegment copyDst;

    @Setup(Level.Trial)
    public void setUp() {
        arena = Arena.ofConfined();
        srcs = new MemorySegment[] {arena.allocate(bytes, 4096), arena.allocate(bytes, 4096)};
        copyDst = arena.allocate(bytes, 4096);
        srcs[0].fill((byte) 0);
        srcs[1].fill((byte) 0);
    }

    /** The loop TWO_SHOT and RING run (NaN bits as computed). */
    @Benchmark
    public void reduceSumInPlace() {
        reducer.reduce(srcs, offsets, types, 2, srcs[0], 0, DType.FLOAT32, bytes / 4, ReduceOp.SUM, 0, false);
    }

    /** The loop ONE_SHOT runs (canonical NaNs: a test and a blend per vector more). */
    @Benchmark
    public void reduceSumInPlaceCanonicalNaN() {
        reducer.reduce(srcs, offsets, types, 2, srcs[0], 0, DType.FLOAT32, bytes / 4, ReduceOp.SUM, 0, true);
    }

    @Benchmark
    public void memcpy() {
        MemorySegment.copy(srcs[1], 0, copyDst, 0, bytes);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }
}
