package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.cuda.CudaKernels;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Device gradient averaging on GPUs, in the writer's stream order, with device gradients of our own: each rank's
 * "backward pass" is a stream of its own (as ND4J's would be) that first copies 1 GiB (a delay of about a
 * millisecond) and then writes the rank's gradient; the averaging is enqueued at once, without the host waiting,
 * and the writer's stream then copies the result out. Without the ordering before the all-reduce it would average
 * the old contents (every element -7), without the ordering after it the copy out would read them: either shows
 * as a wrong element. Values are multiples of 1/4 whose sums, and averages over 2 or 4 ranks, are exact in float32.
 * Each algorithm the communicator runs (ONE_SHOT, TWO_SHOT, NCCL, and the policy's pick), with AVG ({@code average})
 * and with SUM ({@code sum}, what the DL4J wrapper's GPU mode divides by the step's examples itself). Each rank's
 * communicator names the GPU it runs on as CudaTransport places ranks (its local rank modulo the GPUs), the ordinal
 * another library on the rank's thread must use. With metrics, each averaging's GPU time lands in the host path's
 * meters. Skipped without a GPU.
 */
class DeviceGradientAveragingGpuTest {

    static float value(int rank, long i) {
        return (float) (((i * 7 + rank * 13L) % 101 - 50) * 0.25);
    }

    @Test
    void averagesInTheWritersStreamOrder() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
        int ranks = Math.max(2, Math.min(4, CudaDriver.get().deviceCount()));
        long count = 1_000_000;
        long bytes = count * Float.BYTES;
        long delayBytes = 1L << 30;
        try (CudaTransport cuda = CudaTransport.create()) {
            List<String> problems = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                    cuda, group -> {
                List<String> found = new ArrayList<>();
                int me = group.rank();
                try (Communicator comm = Communicator.create(group); Arena arena = Arena.ofConfined()) {
                    DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                    CudaDriver driver = CudaDriver.get();
                    if (device.deviceOrdinal() != me % driver.deviceCount()) {
                        found.add("rank " + me + " reports deviceOrdinal=" + device.deviceOrdinal() + ", expected "
                                + me % driver.deviceCount());
                    }
                    MemorySegment writer = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
                    MemorySegment gradient = device.allocateDevice(bytes);
                    MemorySegment mine = device.allocateDevice(bytes);
                    MemorySegment result = device.allocateDevice(bytes);
                    MemorySegment delayFrom = device.allocateDevice(delayBytes);
                    MemorySegment delayTo = device.allocateDevice(delayBytes);
                    MemorySegment host = arena.allocate(bytes, 16);
                    for (long i = 0; i < count; i++) {
                        host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(me, i));
                    }
                    device.copyFromHost(mine, host);
                    List<AlgorithmPolicy> policies = new ArrayList<>(List.of(AlgorithmPolicy.calibrated()));
                    for (Algorithm a : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL)) {
                        if (comm.supports(a, DType.FLOAT32, ReduceOp.AVG, count)
                                && comm.supports(a, DType.FLOAT32, ReduceOp.SUM, count)) {
                            policies.add(AlgorithmPolicy.forced(a));
                        }
                    }
                    for (AlgorithmPolicy policy : policies) {
                        for (ReduceOp op : List.of(ReduceOp.AVG, ReduceOp.SUM)) {
                            for (long i = 0; i < count; i++) {
                                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, -7f);
                            }
                            device.copyFromHost(gradient, host);
                            device.copyFromHost(result, host);
                            comm.barrier();
                            // the backward pass: a long copy, then the gradient, on the writer's stream; nothing waited for
                            driver.copyDeviceToDeviceAsync(delayTo.address(), delayFrom.address(), delayBytes, writer);
                            driver.copyDeviceToDeviceAsync(gradient.address(), mine.address(), bytes, writer);
                            DeviceGradientAveraging averaging = new DeviceGradientAveraging(comm, policy);
                            DeviceGradients gradients = DeviceGradients.of(gradient, DType.FLOAT32, writer);
                            Algorithm used = op == ReduceOp.AVG ? averaging.average(gradients) : averaging.sum(gradients);
                            // the optimizer step: reads the reduced gradient on the writer's stream
                            driver.copyDeviceToDeviceAsync(result.address(), gradient.address(), bytes, writer);
                            driver.synchronize(writer);
                            device.copyToHost(host, result);
                            for (long i = 0; i < count; i++) {
                                double sum = 0;
                                for (int p = 0; p < ranks; p++) {
                                    sum += value(p, i);
                                }
                                float expected = (float) (op == ReduceOp.AVG ? sum / ranks : sum);
                                if (host.getAtIndex(ValueLayout.JAVA_FLOAT, i) != expected) {
                                    found.add(used + " " + op + " (" + policy + "): element " + i + " on rank " + me + " is "
                                            + host.getAtIndex(ValueLayout.JAVA_FLOAT, i) + ", expected " + expected);
                                    break;
                                }
                            }
                        }
                    }
                    device.synchronize();
                    for (MemorySegment s : List.of(gradient, mine, result, delayFrom, delayTo)) {
                        device.freeDevice(s);
                    }
                    driver.destroyStream(writer);
                }
                cuda.release(group);
                return String.join("\n", found);
            });
            for (String p : problems) {
                assertEquals("", p);
            }
        }
    }

    /**
     * With {@link SyncMetrics}, the GPU time and bytes of every averaging land in the host path's all-reduce meters,
     * tagged with the algorithm used, without the host waiting: after {@code steps} averagings and one synchronize,
     * each rank's timer counts {@code steps}, its bytes add to {@code steps} times the gradient's, and every sample
     * is positive and fits inside the host's wall time around the steps.
     */
    @Test
    void recordsEachAveragingsGpuTimeInTheHostPathsMeters() {
        Assumptions.assumeTrue(CudaDriver.available(), "no CUDA: " + CudaDriver.unavailableReason());
        Assumptions.assumeTrue(CudaKernels.present(), "CUDA kernels not built (no nvcc at build time)");
        int ranks = Math.max(2, Math.min(4, CudaDriver.get().deviceCount()));
        long count = 1_000_000;
        long bytes = count * Float.BYTES;
        int steps = 6;
        try (CudaTransport cuda = CudaTransport.create()) {
            List<String> problems = InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                    cuda, group -> {
                List<String> found = new ArrayList<>();
                try (Communicator comm = Communicator.create(group)) {
                    DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                    CudaDriver driver = CudaDriver.get();
                    io.micrometer.core.instrument.simple.SimpleMeterRegistry registry =
                            new io.micrometer.core.instrument.simple.SimpleMeterRegistry();
                    SyncMetrics metrics = new SyncMetrics("cuda");
                    metrics.bindTo(registry);
                    MemorySegment writer = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
                    MemorySegment gradient = device.allocateDevice(bytes);
                    DeviceGradientAveraging averaging = new DeviceGradientAveraging(comm, AlgorithmPolicy.calibrated(), metrics);
                    DeviceGradients gradients = DeviceGradients.of(gradient, DType.FLOAT32, writer);
                    comm.barrier();
                    long wallStart = System.nanoTime();
                    Algorithm used = null;
                    for (int s = 0; s < steps; s++) {
                        used = averaging.average(gradients);
                    }
                    driver.synchronize(writer);
                    device.synchronize(); // reports what the steps have not
                    long wall = System.nanoTime() - wallStart;
                    io.micrometer.core.instrument.Timer timer = registry.find("symmem.allreduce.duration")
                            .tags("algorithm", used.name(), "transport", "cuda").timer();
                    io.micrometer.core.instrument.DistributionSummary summary = registry.find("symmem.allreduce.bytes")
                            .tags("algorithm", used.name(), "transport", "cuda").summary();
                    String me = "rank " + group.rank() + " " + used;
                    if (timer == null || summary == null) {
                        found.add(me + ": no all-reduce meters: " + registry.getMetersAsString());
                    } else {
                        if (timer.count() != steps) {
                            found.add(me + ": timer count " + timer.count() + ", expected " + steps);
                        }
                        double total = timer.totalTime(java.util.concurrent.TimeUnit.NANOSECONDS);
                        if (!(total > 0 && total <= wall)) {
                            found.add(me + ": GPU time " + total + " ns over " + steps + " steps, expected in (0, " + wall + "]");
                        }
                        if (summary.totalAmount() != (double) steps * bytes) {
                            found.add(me + ": bytes " + summary.totalAmount() + ", expected " + (double) steps * bytes);
                        }
                    }
                    if (device.droppedTimings() != 0) {
                        found.add(me + ": dropped " + device.droppedTimings());
                    }
                    device.freeDevice(gradient);
                    driver.destroyStream(writer);
                }
                cuda.release(group);
                return String.join("\n", found);
            });
            for (String p : problems) {
                assertEquals("", p);
            }
        }
    }
}
