package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;

class GradientSyncTest {

    @Test
    void bucketsCoverTheGradientOnAlignedBoundaries() {
        List<GradientBuckets.Bucket> b = GradientBuckets.split(1000, DType.FLOAT32, 1000);
        assertEquals(5, b.size());
        long next = 0;
        for (GradientBuckets.Bucket x : b) {
            assertEquals(next, x.firstElement());
            assertEquals(0, x.offsetBytes() % 64, "bucket starts on a 64-byte boundary");
            next += x.count();
        }
        assertEquals(1000, next);
        assertEquals(0, GradientBuckets.split(0, DType.FLOAT64, 64).size());
        assertThrows(IllegalArgumentException.class, () -> GradientBuckets.split(10, DType.FLOAT32, 8));
    }

    @Test
    void layerAlignedBucketsStartOnlyAtLayersAndStayWithinTheLimit() {
        long[] starts = {0, 100, 500, 990};
        // no merging: one bucket per layer (starts moved up to 16-float lines), big layers in equal pieces
        List<GradientBuckets.Bucket> plain = GradientBuckets.splitAtBoundaries(1000, DType.FLOAT32, 1000, 0, starts);
        assertEquals(List.of(0L, 112L, 320L, 512L, 752L, 992L), plain.stream().map(GradientBuckets.Bucket::firstElement).toList());
        assertEquals(List.of(112L, 208L, 192L, 240L, 240L, 8L), plain.stream().map(GradientBuckets.Bucket::count).toList());
        // the 32-byte top layer is merged down into the layer below, and that range cut into equal pieces
        List<GradientBuckets.Bucket> merged = GradientBuckets.splitAtBoundaries(1000, DType.FLOAT32, 1000, 200, starts);
        assertEquals(List.of(0L, 112L, 320L, 512L, 688L, 864L), merged.stream().map(GradientBuckets.Bucket::firstElement).toList());
        // a large minimum merges everything into one range
        List<GradientBuckets.Bucket> one = GradientBuckets.splitAtBoundaries(1000, DType.FLOAT32, 4096, 4096, starts);
        assertEquals(1, one.size());
        assertEquals(1000, one.getFirst().count());
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(3);
        for (int trial = 0; trial < 500; trial++) {
            DType dtype = DType.values()[rnd.nextInt(DType.values().length)];
            long count = rnd.nextLong(0, 5000);
            long[] layerStarts = rnd.longs(rnd.nextInt(0, 12), -5, count + 5).toArray();
            long bucketBytes = 64L * rnd.nextInt(1, 40);
            long min = rnd.nextLong(0, bucketBytes + 1);
            List<GradientBuckets.Bucket> b = GradientBuckets.splitAtBoundaries(count, dtype, bucketBytes, min, layerStarts);
            long next = 0;
            for (GradientBuckets.Bucket x : b) {
                assertEquals(next, x.firstElement(), "buckets tile the gradient");
                assertEquals(0, x.offsetBytes() % 64, "bucket starts on a 64-byte boundary");
                assertTrue(x.count() >= 1 && x.bytes() <= bucketBytes, "bucket within the limit: " + x);
                next += x.count();
            }
            assertEquals(count, next);
            for (long s : layerStarts) {
                long aligned = (s + 64 / dtype.byteSize() - 1) / (64 / dtype.byteSize()) * (64 / dtype.byteSize());
                if (min == 0 && aligned > 0 && aligned < count) {
                    assertTrue(b.stream().anyMatch(x -> x.firstElement() == aligned), "a bucket starts at layer start " + aligned);
                }
            }
        }
    }

    @Test
    void synchronizerAveragesEveryBucketAndRecordsMetrics() {
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        SyncMetrics metrics = new SyncMetrics("host-in-jvm", Tags.of("application", "test"));
        metrics.bindTo(registry);
        int count = 10_000;
        List<List<Algorithm>> chosen = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults().withTimeout(Duration.ofSeconds(30)), group -> {
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, 4L * count + 64)) {
                for (int i = 0; i < count; i++) {
                    mem.local().setAtIndex(ValueLayout.JAVA_FLOAT, 16 + i, group.rank() * 3 + i % 7);
                }
                GradientSynchronizer sync = new GradientSynchronizer(comm, mem, 64, count, DType.FLOAT32, 4096,
                        AlgorithmPolicy.calibrated(), metrics);
                sync.allReduce(ReduceOp.AVG);
                for (int i = 0; i < count; i++) {
                    assertEquals(3f + i % 7, mem.local().getAtIndex(ValueLayout.JAVA_FLOAT, 16 + i), "element " + i);
                }
                metrics.recordWorkerStep(group.rank(), 4_000_000, 1_000_000);
                return sync.algorithms();
            }
        });
        assertEquals(chosen.get(0), chosen.get(1), "every rank must choose the same algorithms");
        assertEquals(10, chosen.getFirst().size(), "40000 bytes in 4096-byte buckets");
        long recorded = registry.find("symmem.allreduce.duration").timers().stream().mapToLong(Timer::count).sum();
        assertEquals(3 * 10, recorded, "one latency sample per bucket per rank");
        Timer t = registry.find("symmem.allreduce.duration").tag("size.class", "small").tag("application", "test").timers()
                .stream().filter(x -> x.count() > 0).findFirst().orElseThrow();
        assertEquals("host-in-jvm", t.getId().getTag("transport"));
        assertEquals(3L * 4L * count, (long) registry.find("symmem.allreduce.bytes")
                .summaries().stream().mapToDouble(s -> s.totalAmount()).sum(), "bytes synced");
        Gauge share = registry.find("symmem.gradsync.sync.share").gauge();
        assertEquals(0.25, share.value(), 1e-12);
        assertEquals(3, registry.find("symmem.gradsync.step.duration").timer().count());
    }

    @Test
    void allReduceSeriesAppearOnlyForWhatRan() {
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        SyncMetrics metrics = new SyncMetrics("host-in-jvm");
        metrics.recordAllReduce(Algorithm.RING, 1 << 20, 5_000); // before binding: dropped
        metrics.bindTo(registry);
        assertEquals(0, registry.find("symmem.allreduce.duration").timers().size(), "no series before the first all-reduce");
        metrics.recordAllReduce(Algorithm.ONE_SHOT, 4096, 7_000);
        metrics.recordAllReduce(Algorithm.ONE_SHOT, 4096, 9_000);
        metrics.recordAllReduce(Algorithm.TWO_SHOT, 64L << 20, 1_000_000);
        var timers = registry.find("symmem.allreduce.duration").timers();
        assertEquals(2, timers.size(), "one series per (algorithm, size class) that ran: " + timers);
        Timer small = registry.find("symmem.allreduce.duration").tag("algorithm", "ONE_SHOT").timer();
        assertEquals(2, small.count());
        assertEquals(16_000, small.totalTime(java.util.concurrent.TimeUnit.NANOSECONDS), 1e-6);
        assertEquals(SizeClass.of(4096).tag(), small.getId().getTag("size.class"));
        assertEquals(0, registry.find("symmem.allreduce.duration").tag("algorithm", "NCCL").timers().size());
        assertEquals(1, registry.find("symmem.allreduce.bytes").tag("algorithm", "TWO_SHOT").summary().count());
    }

    @Test
    void forcedPolicyIsUsedAndRejectsWhatCannotRun() {
        InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
            try (Communicator comm = Communicator.create(group)) {
                assertEquals(Algorithm.RING, AlgorithmPolicy.forced(Algorithm.RING).choose(comm, 1 << 20, DType.FLOAT32, ReduceOp.SUM));
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> AlgorithmPolicy.forced(Algorithm.NCCL).choose(comm, 10, DType.FLOAT32, ReduceOp.SUM));
                assertTrue(e.getMessage().contains("cannot run on transport=host-in-jvm"), e.getMessage());
                // it names what this communicator does run, not a fixed list
                assertTrue(e.getMessage().contains("[ONE_SHOT, TWO_SHOT, RING]"), e.getMessage());
                // eligibility: tiny messages never go to TWO_SHOT or RING, whatever the table says
                AlgorithmPolicy table = new ThresholdPolicy(ThresholdTable.parse("host-in-jvm.2=RING:max\n", "t"));
                assertEquals(Algorithm.ONE_SHOT, table.choose(comm, 10, DType.FLOAT32, ReduceOp.SUM));
                assertEquals(Algorithm.RING, table.choose(comm, 1000, DType.FLOAT32, ReduceOp.SUM));
            }
            return null;
        });
    }
}
