package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.Tags;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.GradientBuckets;
import org.symmem4j.gradsync.GradientSynchronizer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The overlap's readiness rule, driven by hand on one rank (its all-reduce changes nothing, so the
 * division by the step's examples shows which buckets ran): a bucket runs once every layer it
 * covers has been written, not before, and the rest runs in the hook.
 */
class GradientAveragingTest {

    private static final ValueLayout.OfFloat F = ValueLayout.JAVA_FLOAT;

    @Test
    void aBucketRunsAsSoonAsItsLayersAreWrittenAndNoSooner() {
        InJvmWorld.runOnEveryRank(1, GroupOptions.defaults().withTimeout(Duration.ofSeconds(20)), group -> {
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, 4 * 96)) {
                MemorySegment g = mem.local();
                // three layers: [0,32) [32,64) [64,96); one bucket each
                List<ModelReplica.LayerSlice> layers = List.of(new ModelReplica.LayerSlice("0", 0, 32),
                        new ModelReplica.LayerSlice("1", 32, 64), new ModelReplica.LayerSlice("2", 64, 96));
                List<GradientBuckets.Bucket> buckets = GradientBuckets.splitAtBoundaries(96, DType.FLOAT32, 1 << 20, 0,
                        new long[] {0, 32, 64});
                assertEquals(3, buckets.size());
                GradientSynchronizer sync = new GradientSynchronizer(comm, mem, 0, DType.FLOAT32, buckets,
                        AlgorithmPolicy.calibrated(), new SyncMetrics("host-in-jvm", Tags.empty()));
                try (GradientAveraging avg = new GradientAveraging(0, g, DType.FLOAT32, sync, null, layers, true,
                        GradientAveraging.BucketHook.NONE, Duration.ofSeconds(20), false)) {
                    fill(g, 96, 10f);
                    avg.beginStep(false, 2, null);
                    avg.layerWritten("2");
                    awaitValue(g, 64, 5f);          // the top bucket ran on the sync thread
                    Thread.sleep(100);
                    assertEquals(10f, g.getAtIndex(F, 32), "bucket of layer 1 ran before layer 1 was written");
                    assertEquals(10f, g.getAtIndex(F, 0), "bucket of layer 0 ran before layer 0 was written");
                    avg.layerWritten("1");
                    awaitValue(g, 32, 5f);
                    assertEquals(10f, g.getAtIndex(F, 0), "bucket of layer 0 ran before layer 0 was written");
                    GradientAveraging.Outcome o = avg.finishStep(); // layer 0 is written by then: the hook releases it
                    assertEquals(new GradientAveraging.Outcome(-1, -1), o);
                    for (int i = 0; i < 96; i++) {
                        assertEquals(5f, g.getAtIndex(F, i), "element " + i + " after the step");
                    }

                    // a signal outside a step (an earlier micro-batch) starts nothing; NaN is found and named
                    avg.layerWritten("2");
                    fill(g, 96, 4f);
                    g.setAtIndex(F, 70, Float.NaN);
                    g.setAtIndex(F, 40, Float.POSITIVE_INFINITY);
                    avg.beginStep(false, 4, null);
                    Thread.sleep(50);
                    assertEquals(4f, g.getAtIndex(F, 64), "a signal from before the step started a bucket");
                    o = avg.finishStep();
                    assertEquals(new GradientAveraging.Outcome(40, 40), o, "first non-finite element, local and averaged");
                    assertEquals(1f, g.getAtIndex(F, 0));

                    // an abandoned step releases the sync thread, and the next step works
                    avg.beginStep(false, 1, null);
                    avg.abandonStep();
                    fill(g, 96, 3f);
                    avg.beginStep(true, 3, null); // idle: contributes zeros
                    o = avg.finishStep();
                    assertEquals(new GradientAveraging.Outcome(-1, -1), o);
                    assertEquals(0f, g.getAtIndex(F, 95));
                }
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
            return null;
        });
    }

    private static void fill(MemorySegment g, int n, float v) {
        for (int i = 0; i < n; i++) {
            g.setAtIndex(F, i, v);
        }
    }

    private static void awaitValue(MemorySegment g, int index, float expected) throws InterruptedException {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (g.getAtIndex(F, index) != expected) {
            assertTrue(System.nanoTime() < deadline, "element " + index + " never became " + expected + " (bucket never ran)");
            Thread.sleep(1);
        }
    }
}
