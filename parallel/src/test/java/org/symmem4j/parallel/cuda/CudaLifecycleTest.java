package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Closing GPU groups gives everything back: a thousand times a transport, a world of 2 ranks,
 * symmetric memory, a communicator, a collective and a captured graph are created, used and closed,
 * and device memory (cuMemGetInfo), open file descriptors, threads and the ranks' own state (open
 * ranks, the kernels' holders, the transport's map, the eager graphs, the launch scratch) are flat
 * after a warm-up. Skipped (not passed) without a CUDA driver or without the kernels. Counts are
 * compared with their values before each test: other test classes' transports in this JVM may still
 * hold ranks.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaLifecycleTest {

    static final int WORLD = 2;
    static final long COUNT = 4096;
    static final int WARM_UP = 50;
    /**
     * How much of a life {@link #oneLife} lives, to find what leaks: 1 the rank's GPU state alone, 2 with a
     * symmetric memory, 3 with a communicator too, 4 with an eager all-reduce, 5 (default) with a captured
     * and replayed one ({@code -Dsymmem4j.test.lifecycleSteps=N}).
     */
    static final int LIFE_STEPS = Integer.getInteger("symmem4j.test.lifecycleSteps", 5);
    /** Device memory a leak-free run may still lose to the driver's own pools, bytes (one iteration allocates > 64 MiB). */
    static final long DEVICE_MEMORY_SLACK = 32L << 20;
    static final int FD_SLACK = 16;
    static final int THREAD_SLACK = 8;

    @BeforeEach
    void needsAGpu() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
    }

    private static GroupOptions options() {
        return GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    }

    /**
     * One group's life on a fresh transport: allocate, communicator, ONE_SHOT, a captured TWO_SHOT
     * replayed, results checked, everything closed, the rank released; then the rank's state is
     * checked gone.
     */
    private static void oneLife(int iteration) {
        CudaTransport cuda = CudaTransport.create();
        try {
            InJvmWorld.runOnEveryRank(WORLD, options(), group -> {
                CudaRank rank;
                if (LIFE_STEPS < 2) { // the rank's state alone
                    try {
                        rank = cuda.rank(group);
                    } finally {
                        cuda.release(group);
                    }
                    assertTrue(rank.closed(), "rank closed by release");
                    return null;
                }
                try (SymmetricMemory mem = cuda.allocate(group, COUNT * 4);
                     Communicator comm = LIFE_STEPS < 3 ? null : cuda.communicator(group, CommunicatorOptions.defaults());
                     Arena arena = Arena.ofConfined()) {
                    rank = cuda.rank(group);
                    if (comm == null || LIFE_STEPS < 4) { // memory without a communicator, or no collective
                        return null;
                    }
                    DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                    MemorySegment host = arena.allocate(COUNT * 4);
                    for (long i = 0; i < COUNT; i++) {
                        host.setAtIndex(ValueLayout.JAVA_FLOAT, i, group.rank() + 1);
                    }
                    mem.copyFromHost(host, 0);
                    comm.allReduce(mem, 0, COUNT, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                    if (LIFE_STEPS < 5) { // no graph
                        device.synchronize();
                        return null;
                    }
                    try (DeviceGraph graph = device.capture(
                            () -> comm.allReduce(mem, 0, COUNT, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT))) {
                        graph.replay();
                        device.synchronize();
                    }
                    mem.copyToHost(0, host);
                    // 1 + 2 = 3 after ONE_SHOT, 3 + 3 = 6 after the replayed TWO_SHOT
                    for (long i = 0; i < COUNT; i += 511) {
                        assertEquals(6f, host.getAtIndex(ValueLayout.JAVA_FLOAT, i), "iteration " + iteration + " element " + i);
                    }
                } finally {
                    cuda.release(group);
                }
                assertTrue(rank.closed(), "rank closed by release");
                assertFalse(rank.launchScratch.scope().isAlive(), "launch scratch freed");
                assertEquals(0, rank.eagerGraphs.size(), "eager graphs destroyed");
                return null;
            });
            assertEquals(0, cuda.heldRanks(), "the transport holds no rank after every group was released");
        } finally {
            cuda.close();
        }
    }

    private record Sample(long[] freeDeviceBytes, int fds, int threads) {
    }

    private static Sample sample(CudaDriver driver, List<MemorySegment> contexts) {
        long[] free = new long[contexts.size()];
        for (int d = 0; d < contexts.size(); d++) {
            driver.setCurrent(contexts.get(d));
            free[d] = driver.memoryInfo()[0];
        }
        return new Sample(free, openFileDescriptors(), ManagementFactory.getThreadMXBean().getThreadCount());
    }

    private static int openFileDescriptors() {
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            return (int) fds.count();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * A thousand lives (a hundred where the ranks have a GPU each: NCCL's set-up per communicator
     * then dominates; -Dsymmem4j.test.lifecycleIterations=N overrides). This thread retains the
     * primary contexts throughout, as an application whose GPUs stay in use would, so that the
     * driver does not tear the context down between lives (which would free everything and hide a
     * leak); the kernels stay loaded from the first life on ({@link CudaKernels#release}).
     */
    @Test
    void thousandGroupsCreatedAndClosedLeaveNothingBehind() {
        CudaDriver driver = CudaDriver.get();
        int devices = Math.min(WORLD, driver.deviceCount());
        int iterations = Integer.getInteger("symmem4j.test.lifecycleIterations", devices == 1 ? 1000 : 100);
        List<MemorySegment> contexts = new ArrayList<>();
        for (int d = 0; d < devices; d++) {
            contexts.add(driver.retainPrimaryContext(driver.device(d)));
        }
        int openBefore = CudaRank.openRanks();
        int[] usersBefore = new int[devices]; // other tests' transports in this JVM may hold the kernels
        for (int d = 0; d < devices; d++) {
            usersBefore[d] = CudaKernels.users(d);
        }
        try {
            Sample warm = null;
            long start = 0;
            // device memory lost since the warm-up at each sample, MiB per device, for the messages: a leak
            // grows with the iterations, a driver pool's step does not
            StringBuilder trajectory = new StringBuilder();
            for (int i = 0; i < iterations; i++) {
                if (i == WARM_UP) {
                    warm = sample(driver, contexts);
                    start = System.nanoTime();
                }
                oneLife(i);
                assertEquals(openBefore, CudaRank.openRanks(), "iteration " + i + ": every rank closed");
                for (int d = 0; d < devices; d++) {
                    assertEquals(usersBefore[d], CudaKernels.users(d), "iteration " + i + ": device " + d + " kernels released");
                }
                if (warm != null && (i % 50 == 0 || i == iterations - 1)) {
                    Sample now = sample(driver, contexts);
                    int iteration = i;
                    trajectory.append(trajectory.isEmpty() ? "" : ", ").append(i).append(':');
                    for (int d = 0; d < devices; d++) {
                        trajectory.append(d == 0 ? "" : "/")
                                .append((warm.freeDeviceBytes()[d] - now.freeDeviceBytes()[d]) >> 20);
                    }
                    for (int d = 0; d < devices; d++) {
                        long lost = warm.freeDeviceBytes()[d] - now.freeDeviceBytes()[d];
                        assertTrue(lost <= DEVICE_MEMORY_SLACK, "iteration " + iteration + ": device " + d + " free memory"
                                + " fell by " + lost + " bytes since the warm-up, expected <= " + DEVICE_MEMORY_SLACK
                                + " (a leak of device memory per group); MiB lost per device at each sample: " + trajectory);
                    }
                    assertTrue(now.fds() - warm.fds() <= FD_SLACK, "iteration " + i + ": open file descriptors "
                            + warm.fds() + " -> " + now.fds() + " expected growth <= " + FD_SLACK);
                    assertTrue(now.threads() - warm.threads() <= THREAD_SLACK, "iteration " + i + ": threads "
                            + warm.threads() + " -> " + now.threads() + " expected growth <= " + THREAD_SLACK);
                }
            }
            if (warm != null) {
                Sample end = sample(driver, contexts);
                System.out.printf("lifecycle: %d lives of %d ranks on %d GPU(s), %.2f ms each after warm-up;"
                                + " free device memory %s -> %s bytes (MiB lost at each sample: %s), fds %d -> %d,"
                                + " threads %d -> %d%n",
                        iterations, WORLD, devices, (System.nanoTime() - start) / 1e6 / (iterations - WARM_UP),
                        java.util.Arrays.toString(warm.freeDeviceBytes()), java.util.Arrays.toString(end.freeDeviceBytes()),
                        trajectory, warm.fds(), end.fds(), warm.threads(), end.threads());
            }
        } finally {
            driver.setCurrent(MemorySegment.NULL);
            for (int d = 0; d < devices; d++) {
                driver.releasePrimaryContext(driver.device(d));
            }
        }
    }

    /**
     * The kernels stay loaded on a device after its last rank let go, and the next group, on a new
     * transport, uses the same module again: unloading and reloading leaks device memory in the driver
     * ({@link CudaKernels#release}).
     */
    @Test
    void kernelsStayLoadedAfterTheLastReleaseAndTheNextGroupReusesThem() {
        int openBefore = CudaRank.openRanks();
        int usersBefore = CudaKernels.users(0); // other tests' transports in this JVM may hold them
        oneLife(0);
        CudaKernels first = CudaKernels.loaded(0);
        assertNotNull(first, "device 0's kernels loaded");
        for (int i = 1; i < 3; i++) {
            oneLife(i);
            assertEquals(openBefore, CudaRank.openRanks());
            assertEquals(usersBefore, CudaKernels.users(0), "every rank of the group gave the kernels back");
            assertSame(first, CudaKernels.loaded(0), "the next group reuses the loaded kernels");
        }
    }

    /**
     * A rank that closes its memory after an abort, while a peer's queued put still targets that
     * memory, frees nothing under the peer: the put lands when its wait is released (no
     * {@code CUDA_ERROR_ILLEGAL_ADDRESS}, which would lose the peer's context for good) and every
     * rank's buffer and pad are freed by the peer's close, the last one. Freeing at the first close,
     * as before {@link SymmetricAllocation}, faulted the peer's put on two GPUs (4 × H100: every
     * context lost) and, on one shared GPU, blocked rank 0's free behind rank 1's waiting kernel. The aborting rank's
     * close does not meet its peers (its group is aborted); the peer's, which had not heard of the abort, fails its
     * barrier saying why.
     */
    @Test
    void aClosedRanksMemoryOutlivesAPeersQueuedPut() {
        CudaTransport cuda = CudaTransport.create();
        CountDownLatch rank0Closed = new CountDownLatch(1);
        try {
            List<String> closeErrors = InJvmWorld.runOnEveryRank(WORLD, options(), group -> {
                SymmetricMemory mem = cuda.allocate(group, 4096);
                String closeError;
                if (group.rank() == 1) {
                    // queued on rank 1's stream: a wait on slot 0 of its own pad, then a put into rank 0's buffer
                    mem.orderAfterSignal(0, 1, 0, false);
                    mem.putWithSignal(0, mem.local().reinterpret(1024), 2048, 1, 1, SignalOp.SET);
                    assertTrue(rank0Closed.await(60, TimeUnit.SECONDS), "rank 0 closed its memory");
                    assertEquals(List.of(1), ((CudaSymmetricMemory) mem).allocation().openRanks(),
                            "rank 0's close gave its share back");
                    assertFalse(((CudaSymmetricMemory) mem).allocation().freed(), "nothing freed while rank 1 is open");
                    // releases the wait: the put now writes into rank 0's buffer and pad
                    assertTrue(mem.storeSignalsNow(0, 1, 1, Duration.ofSeconds(30)), "the store landed");
                    // a put into freed memory would fail this poll with CUDA_ERROR_ILLEGAL_ADDRESS
                    assertTrue(mem.awaitWork(Duration.ofSeconds(30)), "rank 1's put completed");
                    closeError = assertThrows(RuntimeException.class, mem::close).getMessage();
                    assertTrue(((CudaSymmetricMemory) mem).allocation().freed(),
                            "the last close freed every rank's buffer and pad");
                } else {
                    group.abort("test: rank 0 leaves early");
                    try {
                        // the aborting rank's own close meets nobody (GroupAbort: an aborted rank's teardown waits for no
                        // peer), so it does not fail; it only gives its share back
                        mem.close();
                        closeError = null;
                    } finally {
                        rank0Closed.countDown();
                    }
                }
                cuda.release(group);
                return closeError;
            });
            assertEquals(null, closeErrors.get(0), "the aborting rank's close meets nobody and does not fail");
            // rank 1 had not heard of the abort: its close's barrier fails, saying why
            assertTrue(closeErrors.get(1).contains("aborted"), "close after the abort fails its barrier, saying why: "
                    + closeErrors.get(1));
            assertEquals(0, cuda.openAllocations(), "no allocation left once both ranks closed");
        } finally {
            cuda.close();
        }
    }

    /**
     * Ranks of one group must allocate on one transport instance (the last rank to close frees every
     * rank's memory through it): ranks each on a transport of their own are refused on every rank, saying
     * which rank used which, before any memory is shared.
     */
    @Test
    void ranksOnDifferentTransportInstancesAreRefused() {
        CudaTransport[] transports = {CudaTransport.create(), CudaTransport.create()};
        try {
            List<String> messages = InJvmWorld.runOnEveryRank(WORLD, options(), (Group group) -> {
                try {
                    return assertThrows(SymmemException.class, () -> transports[group.rank()].allocate(group, 1024))
                            .getMessage();
                } finally {
                    transports[group.rank()].release(group);
                }
            });
            for (String m : messages) {
                assertTrue(m.contains("different CudaTransport instances") && m.contains("rank=0 transport=#")
                        && m.contains("rank=1 transport=#"), m);
            }
            assertEquals(0, transports[0].openAllocations() + transports[1].openAllocations(), "nothing shared");
        } finally {
            transports[0].close();
            transports[1].close();
        }
    }

    @Test
    void closedTransportRefusesUseAndReleaseAndCloseAreIdempotent() {
        CudaTransport cuda = CudaTransport.create();
        InJvmWorld.runOnEveryRank(WORLD, options(), group -> {
            try (SymmetricMemory mem = cuda.allocate(group, 1024)) {
                assertTrue(mem.byteSize() == 1024);
            }
            cuda.release(group);
            cuda.release(group); // a no-op the second time
            return null;
        });
        cuda.close();
        cuda.close(); // idempotent
        List<String> messages = InJvmWorld.runOnEveryRank(WORLD, options(), (Group group) -> {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> cuda.allocate(group, 1024));
            assertThrows(IllegalStateException.class, () -> cuda.communicator(group, CommunicatorOptions.defaults()));
            assertThrows(IllegalStateException.class, () -> cuda.describe(group));
            return e.getMessage();
        });
        for (String m : messages) {
            assertTrue(m.contains("cuda transport closed") && m.contains("CudaTransport.create()"), m);
        }
    }
}
