package org.symmem4j.examples;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.SplittableRandom;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceFunction;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.DeviceKernels;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.DeviceModule;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.KernelArguments;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.group.InJvmWorld;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Writing your own GPU kernel over symmetric memory, as PyTorch's symmetric-memory document does with
 * {@code buffer_ptrs} and {@code signal_pad_ptrs}: a one-shot all-reduce in CUDA C
 * ({@code kernels/src/main/cuda/examples/user_one_shot_all_reduce.cu}, built by the kernels module
 * into {@code org/symmem4j/kernels/examples/user_one_shot_all_reduce.fatbin}) meets its peers through
 * the signal pads' user bytes and reads every rank's buffer through the device pointer table. The
 * example loads it, launches it on each rank's stream beside symmem4j's own ONE_SHOT, checks the two
 * bitwise equal on every rank, then captures the user's kernel and ONE_SHOT into one CUDA graph and
 * replays it, checking after every replay.
 *
 * <pre>
 *   java ... org.symmem4j.examples.UserKernelAllReduceExample [--ranks N] [--count C] [--image FILE]
 * </pre>
 *
 * Needs a CUDA driver; with one GPU the ranks share it.
 */
public final class UserKernelAllReduceExample {

    static final String IMAGE_RESOURCE = "/org/symmem4j/kernels/examples/user_one_shot_all_reduce.fatbin";
    static final String SYMBOL = "user_one_shot_all_reduce_f32";
    /** The kernel's block size and its grid limit (MAX_BLOCKS in the .cu). */
    static final int BLOCK = 512;
    static final int MAX_BLOCKS = 512;

    private UserKernelAllReduceExample() {
    }

    @Command(name = "UserKernelAllReduceExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "A user-written one-shot all-reduce kernel (float32 SUM) over symmetric"
                    + " memory: launched beside symmem4j's ONE_SHOT, compared bitwise, then captured with it in one graph.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads (default: the GPUs, at least 2; ranks"
                + " beyond the GPUs share them)")
        int ranks = 0;
        @Option(names = "--count", paramLabel = "C", description = "float32 elements per rank (at most 1048576: ONE_SHOT's"
                + " capacity)")
        long count = 100_000;
        @Option(names = "--image", paramLabel = "FILE", description = "a fatbin, cubin or PTX file exporting "
                + SYMBOL + " with the same parameters (default: the one built with the kernels module)")
        Path image;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            if (f.count < 1 || f.count > 1L << 20 || f.ranks < 0) {
                throw new IllegalArgumentException("--count=" + f.count + " --ranks=" + f.ranks
                        + " expected 1 <= count <= 1048576 and ranks >= 0 (0: one per GPU)");
            }
            return f;
        });
        byte[] image = flags.image != null ? Files.readAllBytes(flags.image) : bundledImage();
        CudaTransport cuda;
        try {
            cuda = CudaTransport.create(); // the one CUDA class the example names: it picks the transport
        } catch (CudaUnavailableException e) {
            System.err.println("no CUDA: " + e.getMessage());
            System.exit(1);
            return;
        }
        int ranks = flags.ranks > 0 ? flags.ranks : Math.max(2, cuda.deviceCount());
        long count = flags.count;
        try (cuda) {
            List<String> reports = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                    cuda, group -> {
                        try {
                            return runRank(group, image, count);
                        } finally {
                            cuda.release(group);
                        }
                    });
            reports.forEach(System.out::println);
        }
        System.out.println("user kernel bitwise equal to ONE_SHOT on every rank, eagerly and in one graph with it");
    }

    /** The kernel the kernels module built, or a loud exit saying it was not built. */
    private static byte[] bundledImage() throws IOException {
        try (InputStream in = UserKernelAllReduceExample.class.getResourceAsStream(IMAGE_RESOURCE)) {
            if (in == null) {
                System.err.println("the example's kernel is ABSENT: " + IMAGE_RESOURCE + " is not on the class path (the"
                        + " kernels module was built without nvcc; build on a machine with CUDA's nvcc, or pass --image"
                        + " FILE with a fatbin built from kernels/src/main/cuda/examples/user_one_shot_all_reduce.cu)");
                System.exit(1);
            }
            return in.readAllBytes();
        }
    }

    private static String runRank(Group group, byte[] image, long count) {
        int rank = group.rank();
        int world = group.worldSize();
        try (SymmetricMemory input = SymmetricMemory.allocate(group, count * 4);
             SymmetricMemory ours = SymmetricMemory.allocate(group, count * 4);
             Communicator comm = Communicator.create(group);
             Arena arena = Arena.ofConfined()) {
            DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            DeviceKernels kernels = comm.unwrap(DeviceKernels.class).orElseThrow();
            DeviceMemory peers = input.unwrap(DeviceMemory.class).orElseThrow();
            MemorySegment out = device.allocateDevice(count * 4);
            MemorySegment host = arena.allocate(count * 4);
            SplittableRandom rnd = new SplittableRandom(1000 + rank);
            for (long i = 0; i < count; i++) {
                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) rnd.nextDouble(-1, 1));
            }
            input.copyFromHost(host, 0);
            ours.copyFromHost(host, 0);
            try (DeviceModule module = kernels.load(image)) {
                DeviceFunction allReduce = module.function(SYMBOL);
                // every rank launches the same grid (block b meets block b of each peer), all of it resident
                int grid = (int) Math.max(1, Math.min(Math.min(MAX_BLOCKS, allReduce.maxCoResidentBlocks(BLOCK, 0)),
                        (count + BLOCK - 1) / BLOCK));
                KernelArguments arguments = new KernelArguments()
                        .pointer(peers.bufferPointerTable())     // uint64_t* buffer_ptrs (device-resident)
                        .pointer(peers.signalPadPointerTable())  // uint64_t* signal_pad_ptrs
                        .int64(peers.userPadOffset())            // where the pads' user bytes begin
                        .pointer(out)                            // float* out
                        .int64(count).int32(rank).int32(world);
                allReduce.launch(grid, BLOCK, arguments);       // on this rank's stream
                comm.allReduce(ours, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                long differing = compare(device, ours, out, count, arena);
                if (differing != 0) {
                    throw new IllegalStateException("rank " + rank + ": " + differing + " of " + count
                            + " elements differ between the user kernel and ONE_SHOT");
                }
                // one graph: the user's kernel (input -> out), then ONE_SHOT on the input in place (it runs
                // once every peer's user kernel has finished reading this rank's input). Each replay starts
                // from the last one's ONE_SHOT result, so out must equal the input after every replay.
                try (DeviceGraph graph = device.capture(() -> {
                    allReduce.launch(grid, BLOCK, arguments);
                    comm.allReduce(input, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                })) {
                    for (int replay = 0; replay < 3; replay++) {
                        graph.replay();
                        device.synchronize();
                        differing = compare(device, input, out, count, arena);
                        if (differing != 0) {
                            throw new IllegalStateException("rank " + rank + " replay " + replay + ": " + differing
                                    + " elements differ between the user kernel and ONE_SHOT");
                        }
                    }
                }
                return "rank " + rank + " (" + device.deviceName() + "): " + count + " elements, grid " + grid + "x" + BLOCK
                        + ", bitwise equal eagerly and in 3 graph replays";
            } finally {
                device.freeDevice(out);
            }
        }
    }

    /** Elements whose bits differ between {@code ours} and {@code out}. */
    private static long compare(DeviceCommunicator device, SymmetricMemory ours, MemorySegment out, long count, Arena arena) {
        MemorySegment a = arena.allocate(count * 4);
        MemorySegment b = arena.allocate(count * 4);
        ours.copyToHost(0, a);
        device.copyToHost(b, out);
        long differing = 0;
        for (long i = 0; i < count; i++) {
            if (a.getAtIndex(ValueLayout.JAVA_INT, i) != b.getAtIndex(ValueLayout.JAVA_INT, i)) {
                differing++;
            }
        }
        return differing;
    }
}
