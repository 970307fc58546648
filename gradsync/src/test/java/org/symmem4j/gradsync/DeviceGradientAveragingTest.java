package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.lang.foreign.MemorySegment;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceTimingListener;
import org.symmem4j.parallel.Group;

/**
 * What of device gradient averaging runs without a GPU: its refusals, and the order in which it calls the gradient's
 * owner and the communicator (the GPU path is {@link DeviceGradientAveragingGpuTest}).
 */
class DeviceGradientAveragingTest {

    @Test
    void aCommunicatorWithoutAGpuSideIsRefusedSayingWhatToUse() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new DeviceGradientAveraging(
                AcrossMachinesPolicyTest.runs(2, Set.of(Algorithm.ONE_SHOT)), AlgorithmPolicy.calibrated()));
        assertTrue(e.getMessage().contains("no DeviceCommunicator") && e.getMessage().contains("GradientSynchronizer"),
                e.getMessage());
    }

    @Test
    void aGradientMustBeWholeElements() {
        MemorySegment odd = MemorySegment.ofAddress(0x1000).reinterpret(10);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> DeviceGradients.of(odd, DType.FLOAT32, MemorySegment.NULL));
        assertTrue(e.getMessage().contains("10 bytes") && e.getMessage().contains("FLOAT32"), e.getMessage());
        assertTrue(DeviceGradients.of(odd.reinterpret(12), DType.FLOAT32, MemorySegment.NULL).elements() == 3);
    }

    /**
     * An owner with host and device copies (ND4J's CUDA backend) has a valid device address only once its device copy
     * is current: {@code beforeSync} must come before the buffer and its size are read, here an owner whose
     * {@code buffer()} throws before it. Then the collective between the two orderings, then {@code afterSync}; with
     * the op asked for: SUM for {@code sum}, AVG for {@code average}.
     */
    @Test
    void theOwnerMakesItsDeviceCopyCurrentBeforeTheBufferIsReadAndMarksItWrittenAfterTheCollective() {
        for (String op : List.of("SUM", "AVG")) {
            List<String> calls = new ArrayList<>();
            Communicator comm = recordingDeviceCommunicator(calls);
            DeviceGradients owner = new DeviceGradients() {
                private boolean current;

                @Override
                public MemorySegment buffer() {
                    if (!current) {
                        throw new IllegalStateException("buffer() before beforeSync(): the device copy is not current");
                    }
                    calls.add("buffer");
                    return MemorySegment.ofAddress(0x4000).reinterpret(64);
                }

                @Override
                public DType dtype() {
                    return DType.FLOAT32;
                }

                @Override
                public MemorySegment stream() {
                    return MemorySegment.ofAddress(0x77);
                }

                @Override
                public void beforeSync() {
                    current = true;
                    calls.add("beforeSync");
                }

                @Override
                public void afterSync() {
                    calls.add("afterSync");
                }
            };
            DeviceGradientAveraging averaging = new DeviceGradientAveraging(comm, AlgorithmPolicy.forced(Algorithm.ONE_SHOT));
            Algorithm used = op.equals("SUM") ? averaging.sum(owner) : averaging.average(owner);
            assertEquals(Algorithm.ONE_SHOT, used);
            assertEquals("beforeSync", calls.getFirst(), calls.toString());
            assertTrue(calls.contains("buffer") && calls.lastIndexOf("buffer") < calls.indexOf("orderAfter 0x77"),
                    calls.toString());
            assertEquals(List.of("beforeSync", "orderAfter 0x77", "allReduce 0x4000 count=16 FLOAT32 " + op + " ONE_SHOT",
                    "orderBefore 0x77", "afterSync"), calls.stream().filter(c -> !c.equals("buffer")).toList(), op);
        }
    }

    /**
     * With metrics, the communicator times the all-reduces and each call first reports the earlier ones that have run
     * (before it orders anything): their GPU time and bytes land in the host path's {@code symmem.allreduce.duration}
     * and {@code symmem.allreduce.bytes}, tagged with the algorithm and size class; without metrics, timing is never
     * asked for.
     */
    @Test
    void withMetricsTheAllReducesGpuTimeFeedsTheHostPathsTimerAtTheNextCall() {
        List<String> calls = new ArrayList<>();
        DeviceTimingListener[] listener = new DeviceTimingListener[1];
        Communicator comm = recordingDeviceCommunicator(calls, listener);
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        SyncMetrics metrics = new SyncMetrics("recording-gpu");
        metrics.bindTo(registry);
        DeviceGradientAveraging averaging = new DeviceGradientAveraging(comm, AlgorithmPolicy.forced(Algorithm.TWO_SHOT),
                metrics);
        assertEquals(List.of("timeAllReduces"), calls);
        DeviceGradients gradients = DeviceGradients.of(MemorySegment.ofAddress(0x4000).reinterpret(64), DType.FLOAT32,
                MemorySegment.ofAddress(0x77));
        averaging.sum(gradients);
        assertEquals(null, registry.find("symmem.allreduce.duration").timer(), "nothing has run yet");
        averaging.sum(gradients);
        assertEquals(List.of("timeAllReduces", "harvestTimings", "orderAfter 0x77",
                "allReduce 0x4000 count=16 FLOAT32 SUM TWO_SHOT", "orderBefore 0x77", "harvestTimings", "orderAfter 0x77",
                "allReduce 0x4000 count=16 FLOAT32 SUM TWO_SHOT", "orderBefore 0x77"), calls);
        Timer timer = registry.find("symmem.allreduce.duration").tags("algorithm", "TWO_SHOT", "size.class", "small",
                "transport", "recording-gpu").timer();
        assertEquals(1, timer.count(), "the first call's all-reduce, reported by the second call");
        assertEquals(5_000, timer.totalTime(TimeUnit.NANOSECONDS), 0.0);
        comm.unwrap(DeviceCommunicator.class).orElseThrow().harvestTimings(); // what synchronize() does on a GPU
        assertEquals(2, timer.count());
        DistributionSummary bytes = registry.find("symmem.allreduce.bytes").tags("algorithm", "TWO_SHOT").summary();
        assertEquals(2, bytes.count());
        assertEquals(128, bytes.totalAmount(), 0.0);

        List<String> untimed = new ArrayList<>();
        DeviceGradientAveraging plain = new DeviceGradientAveraging(recordingDeviceCommunicator(untimed),
                AlgorithmPolicy.forced(Algorithm.TWO_SHOT));
        plain.sum(gradients);
        assertTrue(untimed.stream().noneMatch(c -> c.contains("Timings") || c.contains("timeAll")), untimed.toString());
    }

    /**
     * A communicator of 2 ranks with a GPU side that records what is asked of it; nothing runs. For the order of
     * calls only: the collectives themselves are tested on GPUs.
     */
    private static Communicator recordingDeviceCommunicator(List<String> calls) {
        return recordingDeviceCommunicator(calls, new DeviceTimingListener[1]);
    }

    /**
     * As above; the device side also keeps the listener of {@code timeAllReduces} in {@code listener[0]} and, at each
     * {@code harvestTimings}, reports the all-reduces enqueued before it as a GPU would that has run them since: 64
     * bytes, 5 µs each.
     */
    private static Communicator recordingDeviceCommunicator(List<String> calls, DeviceTimingListener[] listener) {
        List<Algorithm> enqueued = new ArrayList<>();
        Group group = (Group) Proxy.newProxyInstance(Group.class.getClassLoader(), new Class<?>[] {Group.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "worldSize" -> 2;
                    case "rank" -> 0;
                    default -> throw new UnsupportedOperationException(method.getName());
                });
        DeviceCommunicator device = (DeviceCommunicator) Proxy.newProxyInstance(DeviceCommunicator.class.getClassLoader(),
                new Class<?>[] {DeviceCommunicator.class}, (proxy, method, args) -> switch (method.getName()) {
                    case "orderAfter", "orderBefore" -> {
                        calls.add(method.getName() + " 0x" + Long.toHexString(((MemorySegment) args[0]).address()));
                        yield null;
                    }
                    case "timeAllReduces" -> {
                        calls.add("timeAllReduces");
                        listener[0] = (DeviceTimingListener) args[0];
                        yield null;
                    }
                    case "harvestTimings" -> {
                        calls.add("harvestTimings");
                        int n = enqueued.size();
                        for (Algorithm a : enqueued) {
                            listener[0].allReduceTimed(a, 64, 5_000);
                        }
                        enqueued.clear();
                        yield n;
                    }
                    default -> throw new UnsupportedOperationException(method.getName());
                });
        return (Communicator) Proxy.newProxyInstance(Communicator.class.getClassLoader(), new Class<?>[] {Communicator.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "group" -> group;
                    case "transportName" -> "recording-gpu";
                    case "supports" -> true;
                    case "unwrap" -> args[0] == DeviceCommunicator.class ? Optional.of(device) : Optional.empty();
                    case "allReduce" -> {
                        calls.add("allReduce 0x" + Long.toHexString(((MemorySegment) args[0]).address()) + " count=" + args[1]
                                + " " + args[2] + " " + args[3] + " " + args[4]);
                        enqueued.add((Algorithm) args[4]);
                        yield null;
                    }
                    default -> throw new UnsupportedOperationException(method.getName());
                });
    }
}
