package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.ReduceOp;

/**
 * GPU time of all-reduces from CUDA events ({@link DeviceCommunicator#timeAllReduces}), on real GPUs: every timed
 * all-reduce is reported once, in order, with its algorithm and bytes, after the GPU ran it — on symmetric memory and
 * on plain device buffers, for each algorithm the communicator runs (ONE_SHOT, TWO_SHOT, NCCL where present); its GPU
 * time is positive and, with every other timed all-reduce's, fits inside the host's wall time from before the first
 * enqueue to after the synchronize (events inside that window cannot be further apart); the results are still the
 * exact sums; all-reduces captured into a graph are not timed; after {@code timeAllReduces(null)} nothing is. Skipped
 * without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaAllReduceTimingGpuTest {

    static final GpuTestSupport.ClassTransport GPU = new GpuTestSupport.ClassTransport();

    record Sample(Algorithm algorithm, long bytes, long nanos) {
    }

    @BeforeEach
    void needsAGpu() {
        GPU.open();
    }

    @AfterAll
    static void closeTransport() {
        GPU.close();
    }

    private static float value(int rank, long i, int round) {
        return (float) ((i * 7 + rank * 3 + round) % 9 - 4);
    }

    @Test
    void everyTimedAllReduceIsReportedOnceWithItsAlgorithmBytesAndGpuTime() {
        GPU.onEveryRankOfHostGroup(group -> {
            long count = 1 << 16; // 256 KiB of float32
            long bytes = count * Float.BYTES;
            try (CudaCommunicator comm = (CudaCommunicator) GPU.cuda().communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory mem = (CudaSymmetricMemory) GPU.cuda().allocate(group, bytes);
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                List<Sample> samples = new ArrayList<>();
                device.timeAllReduces((a, b, n) -> samples.add(new Sample(a, b, n)));
                MemorySegment plain = device.allocateDevice(bytes);
                MemorySegment host = arena.allocate(bytes, 16);
                List<Algorithm> algorithms = new ArrayList<>();
                for (Algorithm a : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL)) {
                    if (comm.supports(a, DType.FLOAT32, ReduceOp.SUM, count)) {
                        algorithms.add(a);
                    }
                }
                int rounds = 5;
                for (Algorithm a : algorithms) {
                    for (boolean symmetric : new boolean[] {true, false}) {
                        samples.clear();
                        fill(host, group.rank(), count, 0);
                        comm.synchronize();
                        group.allGatherBytes("timing-before-copy", new byte[0]);
                        if (symmetric) {
                            mem.copyFromHost(host, 0);
                        } else {
                            device.copyFromHost(plain, host);
                        }
                        group.allGatherBytes("timing-inputs-ready", new byte[0]);
                        long wallStart = System.nanoTime();
                        for (int k = 0; k < rounds; k++) {
                            if (symmetric) {
                                comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, a);
                            } else {
                                comm.allReduce(plain, count, DType.FLOAT32, ReduceOp.SUM, a);
                            }
                        }
                        int early = device.harvestTimings(); // never waits: whatever has finished so far
                        comm.synchronize(); // reports the rest
                        long wall = System.nanoTime() - wallStart;
                        String what = a + (symmetric ? " symmetric" : " plain") + " on rank " + group.rank();
                        assertTrue(early <= rounds, what + ": harvested " + early);
                        assertEquals(rounds, samples.size(), what + ": every all-reduce reported once: " + samples);
                        long sum = 0;
                        for (Sample s : samples) {
                            assertEquals(a, s.algorithm(), what);
                            assertEquals(bytes, s.bytes(), what);
                            assertTrue(s.nanos() > 0, what + ": GPU time " + s.nanos() + " ns");
                            sum += s.nanos();
                        }
                        assertTrue(sum <= wall, what + ": the GPU times add to " + sum + " ns, more than the host's "
                                + wall + " ns around them");
                        assertEquals(0, device.harvestTimings(), what + ": nothing left");
                        if (symmetric) {
                            mem.copyToHost(0, host);
                        } else {
                            device.copyToHost(host, plain);
                        }
                        checkSum(host, count, rounds, what);
                    }
                }
                // captured: no event pairs in the graph, nothing reported for its replays
                samples.clear();
                comm.synchronize();
                try (CudaGraph g = comm.capture(() -> comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM,
                        algorithms.getFirst()))) {
                    g.replay();
                    g.replay();
                    comm.synchronize();
                }
                assertEquals(List.of(), samples, "captured all-reduces are not timed");
                device.timeAllReduces(null);
                comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithms.getFirst());
                comm.synchronize();
                assertEquals(List.of(), samples, "timing off");
                assertEquals(0, device.harvestTimings());
                assertEquals(0, device.droppedTimings(), "5 all-reduces never fill 32 pairs");
                device.freeDevice(plain);
            }
            return null;
        });
    }

    private static void fill(MemorySegment host, int rank, long count, int round) {
        for (long i = 0; i < count; i++) {
            host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(rank, i, round));
        }
    }

    /** {@code rounds} SUMs in place: the sum over the ranks times worldSize^(rounds-1), exact for these small integers. */
    private static void checkSum(MemorySegment host, long count, int rounds, String what) {
        double scale = Math.pow(GPU.worldSize(), rounds - 1);
        for (long i = 0; i < count; i++) {
            double sum = 0;
            for (int r = 0; r < GPU.worldSize(); r++) {
                sum += value(r, i, 0);
            }
            float got = host.getAtIndex(ValueLayout.JAVA_FLOAT, i);
            if (got != (float) (sum * scale)) {
                fail(what + ": element " + i + " expected=" + sum * scale + " found=" + got);
            }
        }
    }

}
