package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceFunction;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.DeviceKernels;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.DeviceModule;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.KernelArguments;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A user-written kernel beside ours: the example one-shot all-reduce of
 * {@code kernels/src/main/cuda/examples/user_one_shot_all_reduce.cu}, loaded through
 * {@link DeviceKernels} and fed {@link DeviceMemory}'s pointer tables, gives results bitwise equal to
 * our ONE_SHOT on every rank (same rank order, same float32 additions), eagerly and inside a graph
 * captured together with our collectives; and the API's refusals (bad image, missing symbol, wrong
 * arguments, a grid too large for ranks sharing a GPU, use after close). Skipped (not passed) without
 * a CUDA driver, without our kernels or without the example's fatbin (built without nvcc).
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaUserKernelTest {

    static final String IMAGE = "/org/symmem4j/kernels/examples/user_one_shot_all_reduce.fatbin";
    static final String SYMBOL = "user_one_shot_all_reduce_f32";
    /** The example kernel's block size and grid limit (MAX_BLOCKS in its .cu). */
    static final int BLOCK = 512;
    static final int MAX_BLOCKS = 512;

    static CudaTransport cuda;
    static int worldSize;

    @BeforeEach
    void needsAGpuAndTheExampleKernel() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
        Assumptions.assumeTrue(CudaUserKernelTest.class.getResource(IMAGE) != null, IMAGE + " is not on the class path:"
                + " the kernels module was built without nvcc (its manifest says Symmem4j-Example-Kernels: ABSENT)");
        if (cuda == null) {
            cuda = CudaTransport.create();
            worldSize = Math.max(2, Math.min(CudaKernels.MAX_RANKS, CudaDriver.get().deviceCount()));
        }
    }

    @AfterAll
    static void closeTransport() {
        if (cuda != null) {
            cuda.close();
            cuda = null;
        }
    }

    static byte[] image() {
        try (InputStream in = CudaUserKernelTest.class.getResourceAsStream(IMAGE)) {
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static <T> List<T> onEveryRank(InJvmWorld.RankTask<T> task) {
        return InJvmWorld.runOnEveryRank(worldSize, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), task);
    }

    /** The example's grid for {@code count} elements: the same on every rank, all of it resident. */
    static int grid(DeviceFunction f, long count) {
        return (int) Math.max(1, Math.min(Math.min(MAX_BLOCKS, f.maxCoResidentBlocks(BLOCK, 0)), (count + BLOCK - 1) / BLOCK));
    }

    /** The example's launch: out = sum over ranks of {@code input}, in rank order. */
    static void launchUserAllReduce(DeviceFunction f, int grid, DeviceMemory input, long out, long count, int rank, int world) {
        f.launch(grid, BLOCK, new KernelArguments()
                .pointer(input.bufferPointerTable()).pointer(input.signalPadPointerTable()).int64(input.userPadOffset())
                .pointer(out).int64(count).int32(rank).int32(world));
    }

    static float[] toFloats(MemorySegment host, long count) {
        float[] f = new float[(int) count];
        for (int i = 0; i < count; i++) {
            f[i] = host.getAtIndex(ValueLayout.JAVA_FLOAT, i);
        }
        return f;
    }

    static void assertBitwiseEqual(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what);
        for (int i = 0; i < expected.length; i++) {
            if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(actual[i])) {
                throw new AssertionError(what + ": element " + i + " expected=" + expected[i] + " (0x"
                        + Integer.toHexString(Float.floatToRawIntBits(expected[i])) + ") found=" + actual[i] + " (0x"
                        + Integer.toHexString(Float.floatToRawIntBits(actual[i])) + ")");
            }
        }
    }

    /**
     * Eager: for counts through the LL ONE_SHOT, the pushing ONE_SHOT, odd tails and its largest
     * message, the user's kernel equals ONE_SHOT bitwise on every rank, and both are within float32
     * rounding of the float64 sum.
     */
    @Test
    void userOneShotEqualsOursBitwise() {
        long[] counts = {1, 1023, 16384, 100_003, 1 << 20};
        long maxCount = counts[counts.length - 1];
        onEveryRank(group -> {
            int rank = group.rank();
            int world = group.worldSize();
            try (SymmetricMemory ours = cuda.allocate(group, maxCount * 4);
                 SymmetricMemory theirs = cuda.allocate(group, maxCount * 4);
                 Communicator comm = cuda.communicator(group, CommunicatorOptions.defaults());
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                DeviceKernels kernels = comm.unwrap(DeviceKernels.class).orElseThrow();
                DeviceMemory input = theirs.unwrap(DeviceMemory.class).orElseThrow();
                MemorySegment out = device.allocateDevice(maxCount * 4);
                try (DeviceModule module = kernels.load(image())) {
                    DeviceFunction f = module.function(SYMBOL);
                    assertTrue(f.parameterCount() == -1 || f.parameterCount() == 7, "parameters: " + f.parameterCount());
                    for (long count : counts) {
                        MemorySegment host = arena.allocate(count * 4);
                        for (int r = 0; r < world; r++) { // every rank's input, for the float64 reference
                            SplittableRandom rnd = new SplittableRandom(31L * count + r);
                            for (long i = 0; i < count; i++) {
                                float x = (float) rnd.nextDouble(-1, 1);
                                if (r == rank) {
                                    host.setAtIndex(ValueLayout.JAVA_FLOAT, i, x);
                                }
                            }
                        }
                        ours.copyFromHost(host, 0);
                        theirs.copyFromHost(host, 0);
                        comm.allReduce(ours, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                        launchUserAllReduce(f, grid(f, count), input, out.address(), count, rank, world);
                        MemorySegment oursHost = arena.allocate(count * 4);
                        MemorySegment theirsHost = arena.allocate(count * 4);
                        ours.copyToHost(0, oursHost);
                        device.copyToHost(theirsHost, out.asSlice(0, count * 4));
                        float[] expected = toFloats(oursHost, count);
                        assertBitwiseEqual(expected, toFloats(theirsHost, count), "rank " + rank + " count " + count);
                        double[] reference = new double[(int) count];
                        for (int r = 0; r < world; r++) {
                            SplittableRandom rnd = new SplittableRandom(31L * count + r);
                            for (int i = 0; i < count; i++) {
                                reference[i] += (float) rnd.nextDouble(-1, 1);
                            }
                        }
                        for (int i = 0; i < count; i++) {
                            assertEquals(reference[i], expected[i], 1e-6 * world, "count " + count + " element " + i);
                        }
                    }
                } finally {
                    device.freeDevice(out);
                }
            }
            return null;
        });
    }

    /**
     * In one captured graph: the user's all-reduce of {@code theirs} into {@code out}, a copy of
     * {@code out} into {@code ours}, then our ONE_SHOT on {@code ours} — each step needs the one
     * before it to have finished. Replayed three times; each time {@code out} equals an eager
     * ONE_SHOT of the inputs bitwise, and {@code ours} equals the float32 sum of {@code world} copies
     * of {@code out} in rank order.
     */
    @Test
    void userKernelRunsInOneGraphWithOurCollectives() {
        long count = 50_001;
        onEveryRank(group -> {
            int rank = group.rank();
            int world = group.worldSize();
            try (SymmetricMemory ours = cuda.allocate(group, count * 4);
                 SymmetricMemory theirs = cuda.allocate(group, count * 4);
                 SymmetricMemory reference = cuda.allocate(group, count * 4);
                 Communicator comm = cuda.communicator(group, CommunicatorOptions.defaults());
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                DeviceKernels kernels = comm.unwrap(DeviceKernels.class).orElseThrow();
                DeviceMemory input = theirs.unwrap(DeviceMemory.class).orElseThrow();
                DeviceMemory oursDevice = ours.unwrap(DeviceMemory.class).orElseThrow();
                MemorySegment out = device.allocateDevice(count * 4);
                MemorySegment host = arena.allocate(count * 4);
                SplittableRandom rnd = new SplittableRandom(7 + rank);
                for (long i = 0; i < count; i++) {
                    host.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) rnd.nextDouble(-4, 4));
                }
                theirs.copyFromHost(host, 0);
                reference.copyFromHost(host, 0);
                comm.allReduce(reference, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                MemorySegment expectedHost = arena.allocate(count * 4);
                reference.copyToHost(0, expectedHost);
                float[] expectedOut = toFloats(expectedHost, count);
                float[] expectedOurs = new float[(int) count];
                for (int i = 0; i < count; i++) {
                    float acc = expectedOut[i]; // ONE_SHOT of world equal inputs: rank order, float32
                    for (int p = 1; p < world; p++) {
                        acc += expectedOut[i];
                    }
                    expectedOurs[i] = acc;
                }
                MemorySegment oursLocal = MemorySegment.ofAddress(oursDevice.bufferPointer(rank)).reinterpret(count * 4);
                try (DeviceModule module = kernels.load(image())) {
                    DeviceFunction f = module.function(SYMBOL);
                    input.bufferPointerTable(); // made now: its first call copies from the host, which a capture refuses
                    int grid = grid(f, count);
                    try (DeviceGraph graph = device.capture(() -> {
                        launchUserAllReduce(f, grid, input, out.address(), count, rank, world);
                        device.copyAsync(oursLocal, out);
                        comm.allReduce(ours, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                    })) {
                        for (int replay = 0; replay < 3; replay++) {
                            ours.copyFromHost(arena.allocate(count * 4), 0); // zeros: the graph must refill it
                            comm.barrier();
                            graph.replay();
                            device.synchronize();
                            MemorySegment outHost = arena.allocate(count * 4);
                            MemorySegment oursHost = arena.allocate(count * 4);
                            device.copyToHost(outHost, out);
                            ours.copyToHost(0, oursHost);
                            assertBitwiseEqual(expectedOut, toFloats(outHost, count), "rank " + rank + " replay " + replay + " out");
                            assertBitwiseEqual(expectedOurs, toFloats(oursHost, count), "rank " + rank + " replay " + replay + " ours");
                            comm.barrier(); // no rank zeroes `ours` for the next replay while a peer's graph still runs
                        }
                    }
                } finally {
                    device.freeDevice(out);
                }
            }
            return null;
        });
    }

    /** What a user gets wrong, refused with a message saying what and how to fix it, on every rank. */
    @Test
    void mistakesAreRefusedClearly() {
        onEveryRank(group -> {
            try (SymmetricMemory theirs = cuda.allocate(group, 4096);
                 Communicator comm = cuda.communicator(group, CommunicatorOptions.defaults())) {
                DeviceKernels kernels = comm.unwrap(DeviceKernels.class).orElseThrow();
                DeviceMemory input = theirs.unwrap(DeviceMemory.class).orElseThrow();
                assertThrows(IllegalArgumentException.class, () -> kernels.load(new byte[0]));
                SymmemException badImage = assertThrows(SymmemException.class,
                        () -> kernels.load("this is not a module".getBytes(StandardCharsets.US_ASCII)));
                assertTrue(badImage.getMessage().contains("format=unknown") && badImage.getMessage().contains("nvcc -fatbin"),
                        badImage.getMessage());
                DeviceModule module = kernels.load(image());
                SymmemException missing = assertThrows(SymmemException.class, () -> module.function("no_such_kernel"));
                assertTrue(missing.getMessage().contains("symbol=no_such_kernel") && missing.getMessage().contains("extern \"C\""),
                        missing.getMessage());
                DeviceFunction f = module.function(SYMBOL);
                if (f.parameterCount() >= 0) { // the driver can tell (CUDA 12.4+)
                    IllegalArgumentException count = assertThrows(IllegalArgumentException.class,
                            () -> f.launch(1, BLOCK, new KernelArguments().pointer(input.bufferPointerTable())));
                    assertTrue(count.getMessage().contains("count=1 expected=7"), count.getMessage());
                    IllegalArgumentException size = assertThrows(IllegalArgumentException.class, () -> f.launch(1, BLOCK,
                            new KernelArguments().pointer(input.bufferPointerTable()).pointer(input.signalPadPointerTable())
                                    .int32(0).pointer(0).int64(1).int32(group.rank()).int32(group.worldSize())));
                    assertTrue(size.getMessage().contains("argument 2") && size.getMessage().contains("int32 of 4 bytes"),
                            size.getMessage());
                }
                IllegalArgumentException block = assertThrows(IllegalArgumentException.class,
                        () -> f.launch(1, f.maxThreadsPerBlock() + 1, new KernelArguments()));
                assertTrue(block.getMessage().contains("maxThreadsPerBlock"), block.getMessage());
                if (cuda.rank(group).ranksOnDevice > 1) {
                    int limit = f.maxCoResidentBlocks(BLOCK, 0);
                    IllegalArgumentException grid = assertThrows(IllegalArgumentException.class, () -> f.launch(limit + 1, BLOCK,
                            new KernelArguments().pointer(0).pointer(0).int64(0).pointer(0).int64(0).int32(0).int32(1)));
                    assertTrue(grid.getMessage().contains("too large for ranks sharing a GPU"), grid.getMessage());
                }
                module.close();
                module.close(); // idempotent
                IllegalStateException closed = assertThrows(IllegalStateException.class, () -> f.launch(1, BLOCK,
                        new KernelArguments()));
                assertTrue(closed.getMessage().contains("module was closed"), closed.getMessage());
            }
            return null;
        });
    }
}
