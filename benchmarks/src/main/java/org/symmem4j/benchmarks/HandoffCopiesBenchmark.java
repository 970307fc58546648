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
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.symmem4j.pipeline.channel.ChannelLayout;

/**
 * Baseline for {@link StageLinkHandoffBenchmark}: the copies of one ping-pong round trip, done by
 * one thread with nothing to wait for. Five distinct buffers, as in the ping-pong: rank 0's payload
 * to rank 1's slot (behind its header), out into rank 1's private buffer, to rank 0's slot, out into
 * rank 0's private buffer. The score is per one-way hand-off (two copies). Set against
 * {@link MemcpyBenchmark}, which copies between the same two buffers every time, it shows what the
 * hand-off's larger working set alone costs (once the five buffers outgrow the caches); set against
 * the hand-off, what the second core and the waiting add.
 */
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 4, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class HandoffCopiesBenchmark {

    @Param({"1024", "4096", "16384", "65536", "262144", "1048576", "4194304", "16777216"}) // keep in step with bench/pipeline-handoff.sh
    public long bytes;

    private Arena arena;
    private MemorySegment payload;
    private MemorySegment peerSlot;
    private MemorySegment peerPrivate;
    private MemorySegment ownSlot;
    private MemorySegment ownPrivate;

    @Setup(Level.Trial)
    public void setUp() {
        arena = Arena.ofConfined();
        // page-aligned buffers like the ping-pong's; payloads sit behind a slot's 64-byte header
        payload = filled(bytes, 1);
        peerSlot = filled(ChannelLayout.HEADER_BYTES + bytes, 2).asSlice(ChannelLayout.HEADER_BYTES);
        peerPrivate = filled(bytes, 3);
        ownSlot = filled(ChannelLayout.HEADER_BYTES + bytes, 4).asSlice(ChannelLayout.HEADER_BYTES);
        ownPrivate = filled(bytes, 5);
    }

    private MemorySegment filled(long size, int value) {
        MemorySegment segment = arena.allocate(size, 4096);
        segment.fill((byte) value); // touched, so no page faults inside the measurement
        return segment;
    }

    @Benchmark
    @OperationsPerInvocation(2)
    public void roundTripCopies() {
        MemorySegment.copy(payload, 0, peerSlot, 0, bytes);
        MemorySegment.copy(peerSlot, 0, peerPrivate, 0, bytes);
        MemorySegment.copy(peerPrivate, 0, ownSlot, 0, bytes);
        MemorySegment.copy(ownSlot, 0, ownPrivate, 0, bytes);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }
}
