package org.symmem4j.pipeline.exec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaThreadRanksTestBase;
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.channel.PipelineAbortedException;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;

/**
 * The pipeline executor with its links on GPUs (one rank per GPU; on a one-GPU machine the ranks
 * share it, which is correct, not fast). The stages are device-to-device copies, enqueued on the
 * rank's stream like any GPU stage's kernels: each forward copies its input into a private buffer
 * per microbatch and hands that on; the last stage keeps what arrived and sends it back as the
 * gradient; each backward copies and hands on; stage 0 keeps what came back. The copies are puts
 * into the rank's own buffer ({@link SymmetricMemory#putWithSignal}, enqueued like the links' own
 * steps), so the test names no CUDA class beyond where the GPU memory comes from
 * ({@link #gpuTransport()}). Every microbatch
 * carries its own bytes, so a message delivered to the wrong microbatch, overwritten before its
 * receiver read it, or read before it landed shows as a byte mismatch. Skipped without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaPipelineExecutorTest extends CudaThreadRanksTestBase {

    private static final long MESSAGE_BYTES = CopyPipeline.MESSAGE_BYTES;

    /** Collective: {@code bytes} of GPU symmetric memory per rank of {@code group}. */
    static SymmetricMemory gpuMemory(Group group, long bytes) {
        return gpuTransport().allocate(group, bytes);
    }

    /**
     * One rank per GPU, 2 to 4 (2 sharing the GPU on a one-GPU machine); 2 where there is no GPU (every
     * case skips). {@code -Dsymmem4j.test.cudaRanks=N} runs N ranks, sharing GPUs where N exceeds them.
     */
    static int ranks() {
        int dflt = CudaDriver.available() ? Math.max(2, Math.min(4, CudaDriver.get().deviceCount())) : 2;
        int ranks = Integer.getInteger("symmem4j.test.cudaRanks", dflt);
        if (ranks < 2) {
            throw new IllegalArgumentException("symmem4j.test.cudaRanks=" + ranks + ": a GPU pipeline needs at least 2"
                    + " ranks (2 share the GPU on a one-GPU machine)");
        }
        return ranks;
    }

    static Stream<Arguments> schedules() {
        return schedules(ranks());
    }

    /** 1F1B, interleaved (2 stages per rank) and GPipe on {@code p} ranks. */
    static Stream<Arguments> schedules(int p) {
        return CopyPipeline.cases(p).stream().map(c -> Arguments.of(c.name(), c.shape(), c.schedule()));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("schedules")
    void everyMicrobatchCrossesEveryStageAndComesBackIntact(String name, PipelineShape shape, Schedule schedule) {
        List<String> problems = InJvmWorld.runOnEveryRank(shape.ranks(),
                OPTIONS,
                group -> CopyPipeline.run(group, gpuTransport(), name, shape, schedule, 3));
        for (String p : problems) {
            assertTrue(p.isEmpty(), p);
        }
    }

    /** A stage that throws on the host: its rank reports the cause, every other rank's GPU step aborts promptly. */
    @Test
    void aFailingStageAbortsEveryRank() {
        int p = ranks();
        PipelineShape shape = PipelineShape.of(p, 2 * p);
        Schedule schedule = ScheduleGenerators.oneFOneB(p, 2 * p);
        SymmemException e = assertThrows(SymmemException.class, () -> InJvmWorld.runOnEveryRank(p,
                OPTIONS, group -> {
            long perStage = 2L * shape.microbatches() * MESSAGE_BYTES;
            try (SymmetricMemory buffers = gpuMemory(group, perStage)) {
                CopyPipeline.CopyStage healthy = new CopyPipeline.CopyStage(buffers, group.rank(), p - 1, 0);
                healthy.microbatches = shape.microbatches();
                StageCompute stage = group.rank() != p - 1 ? healthy : new StageCompute() {
                    @Override
                    public MemorySegment forward(int microbatch, MemorySegment input) {
                        if (microbatch == 1) {
                            throw new ArithmeticException("last stage broke on microbatch 1");
                        }
                        return healthy.forward(microbatch, input);
                    }

                    @Override
                    public MemorySegment backward(int microbatch, MemorySegment g) {
                        return healthy.backward(microbatch, g);
                    }

                    @Override
                    public void step() {
                    }
                };
                try (PipelineExecutor executor = PipelineExecutor.create(group, gpuTransport(), schedule, shape,
                        Map.of(group.rank(), stage), 1, MESSAGE_BYTES)) {
                    executor.runStep();
                }
            }
            return null;
        }));
        // No elapsed-time bound (a loaded machine stretches it): a rank that had waited out the timeout
        // would report PeerTimeoutException, so p - 1 PipelineAbortedExceptions below are the proof that
        // the abort, not the timeout, stopped them.
        List<Throwable> causes = new ArrayList<>(List.of(e.getCause()));
        for (Throwable suppressed : e.getSuppressed()) {
            causes.add(suppressed.getCause());
        }
        assertTrue(causes.stream().anyMatch(c -> c instanceof ArithmeticException), "the failing rank's cause: " + causes);
        long aborted = causes.stream().filter(c -> c instanceof PipelineAbortedException).count();
        assertEquals(p - 1, aborted, "every other rank aborts: " + causes);
        // teardown after the abort fails only with the abort (the barriers of the links' and the buffers' close):
        // a driver error there means a rank's memory was not given back, or was freed under a peer
        for (Throwable c : causes) {
            for (Throwable closing : c.getSuppressed()) {
                assertTrue(closing instanceof PeerTimeoutException pe && pe.reason() == PeerTimeoutException.Reason.PEER_ABORTED,
                        "a close after the abort failed otherwise: " + stackTrace(closing));
            }
        }
        assertInstanceOf(Throwable.class, e.getCause());
    }

    private static String stackTrace(Throwable t) {
        java.io.StringWriter w = new java.io.StringWriter();
        t.printStackTrace(new java.io.PrintWriter(w));
        return w.toString();
    }

    @Test
    void oneRankIsRefusedOnTheGpu() {
        PipelineShape shape = new PipelineShape(1, 2, 2);
        Schedule schedule = ScheduleGenerators.interleavedOneFOneB(1, 2, 2);
        SymmemException e = assertThrows(SymmemException.class, () -> InJvmWorld.runOnEveryRank(1,
                GroupOptions.defaults(), (Group group) -> PipelineExecutor.create(group, gpuTransport(), schedule, shape,
                        Map.of(0, new CopyPipeline.CopyStage(null, 0, 1, 0), 1, new CopyPipeline.CopyStage(null, 1, 1, 0)), 1, 64)));
        assertTrue(e.getCause().getMessage().contains("ranks >= 2"), e.getCause().getMessage());
    }
}
