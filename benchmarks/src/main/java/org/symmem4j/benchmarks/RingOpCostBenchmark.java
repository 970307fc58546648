package org.symmem4j.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.TimeUnit;

import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.ringbuffer.ManyToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.OneToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.RingBuffer;
import org.agrona.concurrent.ringbuffer.RingBufferDescriptor;
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
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * The CPU cost of one message through a ring, in one thread: write a message, then read it back (the ring never
 * fills), symmem4j's {@link SymmetricRingBuffer} against Agrona's rings over native memory, in the same run. It
 * leaves out what {@link RingBenchmark} measures besides (cache lines moving between cores, the other side's
 * scheduling), so it shows where each ring spends its instructions and runs steadily on a loaded machine.
 * {@code CLAIM} copies the same payload into the claimed room ({@code tryClaim}, then {@code commit}); the others
 * hand the heap array to {@code offer} / {@code write}, which copy it.
 */
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--sun-misc-unsafe-memory-access=allow",
        "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED", "-Xmx1g"})
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class RingOpCostBenchmark {

    /** The ring kinds measured in one thread. */
    public enum Kind {
        SYMMEM_ONE_TO_ONE, SYMMEM_ONE_TO_ONE_CLAIM, AGRONA_ONE_TO_ONE, AGRONA_ONE_TO_ONE_CLAIM,
        SYMMEM_MANY_TO_ONE, SYMMEM_MANY_TO_ONE_CLAIM, AGRONA_MANY_TO_ONE, AGRONA_MANY_TO_ONE_CLAIM;

        boolean manyToOne() {
            return name().contains("MANY_TO_ONE");
        }
    }

    static final int CAPACITY = 1 << 20;

    @Param({"64", "4096"})
    public int messageBytes;

    @Param({"SYMMEM_ONE_TO_ONE", "SYMMEM_ONE_TO_ONE_CLAIM", "AGRONA_ONE_TO_ONE", "AGRONA_ONE_TO_ONE_CLAIM",
            "SYMMEM_MANY_TO_ONE", "SYMMEM_MANY_TO_ONE_CLAIM", "AGRONA_MANY_TO_ONE", "AGRONA_MANY_TO_ONE_CLAIM"})
    public Kind kind;

    private InJvmWorld world;
    private Group group;
    private SymmetricRingBuffer symmem;
    private Arena arena;
    private RingBuffer agrona;
    private MemorySegment src;
    private UnsafeBuffer agronaSrc;
    private long sum;
    private final MessageHandler symmemHandler = (type, buf, off, len) -> sum += buf.get(ValueLayout.JAVA_BYTE, off) + len;
    private final org.agrona.concurrent.MessageHandler agronaHandler = (type, buf, index, len) -> sum += buf.getByte(index) + len;

    @Setup(Level.Trial)
    public void setUp() {
        byte[] bytes = new byte[messageBytes];
        bytes[0] = 1;
        src = MemorySegment.ofArray(bytes);
        agronaSrc = new UnsafeBuffer(bytes);
        switch (kind) {
            case SYMMEM_ONE_TO_ONE, SYMMEM_ONE_TO_ONE_CLAIM, SYMMEM_MANY_TO_ONE, SYMMEM_MANY_TO_ONE_CLAIM -> {
                world = InJvmWorld.create(1);
                group = world.join(0);
                symmem = kind.manyToOne() ? SymmetricRingBuffer.manyToOne(group, 0, CAPACITY)
                        : SymmetricRingBuffer.oneToOne(group, 0, 0, CAPACITY);
            }
            default -> {
                arena = Arena.ofShared();
                MemorySegment memory = arena.allocate(CAPACITY + RingBufferDescriptor.TRAILER_LENGTH, 4096);
                UnsafeBuffer buffer = new UnsafeBuffer(memory.address(), (int) memory.byteSize());
                agrona = kind.manyToOne() ? new ManyToOneRingBuffer(buffer) : new OneToOneRingBuffer(buffer);
            }
        }
    }

    /** One message written and read back. */
    @Benchmark
    public long writeAndRead() {
        switch (kind) {
            case SYMMEM_ONE_TO_ONE, SYMMEM_MANY_TO_ONE -> {
                if (!symmem.offer(1, src, 0, messageBytes)) {
                    throw new IllegalStateException("ring full");
                }
                symmem.poll(symmemHandler, 64);
            }
            case SYMMEM_ONE_TO_ONE_CLAIM, SYMMEM_MANY_TO_ONE_CLAIM -> {
                SymmetricRingBuffer.Claim claim = symmem.tryClaim(1, messageBytes);
                MemorySegment.copy(src, 0, claim.buffer(), claim.offset(), messageBytes);
                claim.commit();
                symmem.poll(symmemHandler, 64);
            }
            case AGRONA_ONE_TO_ONE_CLAIM, AGRONA_MANY_TO_ONE_CLAIM -> {
                int at = agrona.tryClaim(1, messageBytes);
                agrona.buffer().putBytes(at, agronaSrc, 0, messageBytes);
                agrona.commit(at);
                agrona.read(agronaHandler, 64);
            }
            default -> {
                if (!agrona.write(1, agronaSrc, 0, messageBytes)) {
                    throw new IllegalStateException("ring full");
                }
                agrona.read(agronaHandler, 64);
            }
        }
        return sum;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        if (symmem != null) {
            symmem.close();
            group.close();
            world.close();
        }
        if (arena != null) {
            arena.close();
        }
    }
}
