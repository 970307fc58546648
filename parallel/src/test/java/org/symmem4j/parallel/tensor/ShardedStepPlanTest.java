package org.symmem4j.parallel.tensor;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Action;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Kind;

/**
 * The fully sharded step's plan (what {@link FullyShardedMlp} enqueues on its two streams) checked on the host: golden
 * plans, the validator over consecutive steps for 1 to 8 layers (every read sees its write, no buffer races), the
 * overlap the plan exists for (the next layer's gather during this layer's GEMMs, a layer's reduction during the next
 * layer's backward), and plans broken on purpose, which the validator must reject. The GPU run is
 * {@code CudaFullyShardedMlpTest}'s.
 */
class ShardedStepPlanTest {

    @Test
    void theMlpBlocksPlansAreTheGoldenOnes() {
        // sharded, each layer's gradient is written over its gathered weight (B1w1), reduced and applied from there
        assertEquals("m<c G0w0 c<m m<c G1w1 F0w0 c<m F1w1 B1w1 m<c R1w1 O1w1 B0w0 m<c R0w0 O0w0 c<m",
                ShardedStepPlan.of(2, true).toString());
        assertEquals("c<m F0w0 F1w1 B1w1g1 m<c R1g1 O1w1g1 B0w0g0 m<c R0g0 O0w0g0 c<m", ShardedStepPlan.of(2, false).toString());
        // four layers: the backward pass regathers layers 1 and 0 (2 and 3 are still in the working buffers)
        assertEquals("m<c G0w0 c<m m<c G1w1 F0w0 c<m m<c G2w0 F1w1 c<m m<c G3w1 F2w0 c<m F3w1"
                        + " B3w1 m<c R3w1 O3w1 G1w1 B2w0 c<m m<c R2w0 O2w0 G0w0 B1w1 c<m m<c R1w1 O1w1 B0w0"
                        + " m<c R0w0 O0w0 c<m",
                ShardedStepPlan.of(4, true).toString());
    }

    @Test
    void everyPlanIsSafeOverConsecutiveSteps() {
        for (int layers = 1; layers <= 8; layers++) {
            for (boolean sharded : new boolean[] {true, false}) {
                ShardedStepPlan plan = ShardedStepPlan.of(layers, sharded);
                plan.validate(3);
                long gathers = plan.actions().stream().filter(a -> a.kind() == Kind.GATHER).count();
                assertEquals(sharded ? layers + Math.max(0, layers - 2) : 0, gathers, plan.toString());
                for (Kind k : List.of(Kind.FORWARD, Kind.BACKWARD, Kind.REDUCE, Kind.OPTIMIZE)) {
                    assertEquals(layers, plan.actions().stream().filter(a -> a.kind() == k).count(), k + " in " + plan);
                }
            }
        }
    }

    @Test
    void gathersAndReductionsOverlapTheGemms() {
        for (int layers = 2; layers <= 6; layers++) {
            ShardedStepPlan plan = ShardedStepPlan.of(layers, true);
            List<Action> a = plan.actions();
            for (int l = 0; l + 1 < layers; l++) {
                int forward = indexOf(a, Kind.FORWARD, l, 0);
                int nextGather = indexOf(a, Kind.GATHER, l + 1, 0);
                assertTrue(plan.mayOverlap(forward, nextGather), "gather " + (l + 1) + " during forward " + l + ": " + plan);
                int backward = indexOf(a, Kind.BACKWARD, l, 0);
                int reduceAbove = indexOf(a, Kind.REDUCE, l + 1, 0);
                assertTrue(plan.mayOverlap(backward, reduceAbove), "reduce " + (l + 1) + " during backward " + l + ": " + plan);
                if (l >= 1 && l - 1 <= layers - 3) {
                    int regather = indexOf(a, Kind.GATHER, l - 1, 1);
                    assertTrue(plan.mayOverlap(backward, regather), "gather " + (l - 1) + " during backward " + l + ": " + plan);
                }
            }
            // and the forward GEMM of a layer never overlaps its own gather
            for (int l = 0; l < layers; l++) {
                assertFalse(plan.mayOverlap(indexOf(a, Kind.FORWARD, l, 0), indexOf(a, Kind.GATHER, l, 0)));
            }
        }
        ShardedStepPlan replicated = ShardedStepPlan.of(3, false);
        List<Action> r = replicated.actions();
        assertTrue(replicated.mayOverlap(indexOf(r, Kind.BACKWARD, 0, 0), indexOf(r, Kind.REDUCE, 1, 0)));
    }

    @Test
    void theTailRunsInBlocksWithOneBlockLeftAfterTheLastGemm() {
        // layer 0's gradient in blocks of rows, each reduced and applied while the next block's GEMM runs
        assertEquals("m<c G0w0 c<m m<c G1w1 F0w0 c<m F1w1 B1w1 m<c R1w1 O1w1 B0w0#0 m<c R0w0#0 O0w0#0 B0w0#1 m<c"
                + " R0w0#1 O0w0#1 c<m", ShardedStepPlan.of(2, true, 2).toString());
        assertEquals("c<m F0w0 F1w1 B1w1g1 m<c R1g1 O1w1g1 B0w0g0#0 m<c R0g0#0 O0w0g0#0 B0w0g0#1 m<c R0g0#1 O0w0g0#1"
                + " B0w0g0#2 m<c R0g0#2 O0w0g0#2 c<m", ShardedStepPlan.of(2, false, 3).toString());
        for (int layers = 1; layers <= 6; layers++) {
            for (boolean sharded : new boolean[] {true, false}) {
                for (int chunks = 1; chunks <= 5; chunks++) {
                    ShardedStepPlan plan = ShardedStepPlan.of(layers, sharded, chunks);
                    plan.validate(3);
                    assertEquals(chunks, plan.tailChunks(), plan.toString());
                    List<Action> a = plan.actions();
                    int lastGemm = -1;
                    for (int i = 0; i < a.size(); i++) {
                        if (a.get(i).kind() == Kind.BACKWARD || a.get(i).kind() == Kind.FORWARD) {
                            lastGemm = i;
                        }
                    }
                    int last = lastGemm;
                    assertEquals(new Action(Kind.BACKWARD, 0, 0, sharded ? -1 : 0, chunks == 1 ? -1 : chunks - 1), a.get(last));
                    // what runs after the last GEMM (ordered after it, not overlapping it): that block's reduction and Adam
                    List<Action> after = new ArrayList<>();
                    for (int i = last + 1; i < a.size(); i++) {
                        Kind k = a.get(i).kind();
                        if ((k == Kind.REDUCE || k == Kind.OPTIMIZE || k == Kind.GATHER) && !plan.mayOverlap(i, last)) {
                            after.add(a.get(i));
                        }
                    }
                    int c = chunks == 1 ? -1 : chunks - 1;
                    assertEquals(List.of(new Action(Kind.REDUCE, 0, sharded ? 0 : -1, sharded ? -1 : 0, c),
                            new Action(Kind.OPTIMIZE, 0, 0, sharded ? -1 : 0, c)), after, plan.toString());
                    // and each earlier block's reduction and Adam may run during the next block's GEMM
                    for (int k = 0; k + 1 < chunks; k++) {
                        int reduce = a.indexOf(new Action(Kind.REDUCE, 0, sharded ? 0 : -1, sharded ? -1 : 0, k));
                        int optimize = a.indexOf(new Action(Kind.OPTIMIZE, 0, 0, sharded ? -1 : 0, k));
                        int next = a.indexOf(new Action(Kind.BACKWARD, 0, 0, sharded ? -1 : 0, k + 1));
                        assertTrue(plan.mayOverlap(reduce, next) && plan.mayOverlap(optimize, next), plan.toString());
                    }
                }
            }
        }
        // a block reduced before its GEMM has written it: the block's part of the working buffer races
        ShardedStepPlan chunked = ShardedStepPlan.of(2, true, 3);
        int waitBeforeR01 = chunked.actions().indexOf(new Action(Kind.REDUCE, 0, 0, -1, 1)) - 1;
        assertEquals(Kind.COMM_WAITS_COMPUTE, chunked.actions().get(waitBeforeR01).kind());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> without(chunked, waitBeforeR01).validate(2));
        assertTrue(e.getMessage().contains("race on weight0#1") && e.getMessage().contains("R0w0#1"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> ShardedStepPlan.of(2, true, 0));
    }

    @Test
    void tailBlocksAreWholeRowsStartingAt64ByteMultiples() {
        assertArrayEquals(new int[] {0, 12, 24, 36, 48}, ShardedStepPlan.tailChunkRows(48, 96, 4));
        assertArrayEquals(new int[] {0, 1024, 2048, 3072, 4096}, ShardedStepPlan.tailChunkRows(4096, 14336, 4));
        assertArrayEquals(new int[] {0, 16, 48, 64, 100}, ShardedStepPlan.tailChunkRows(100, 10, 4));
        assertArrayEquals(new int[] {0, 3}, ShardedStepPlan.tailChunkRows(3, 10, 4)); // too few rows: one block
        assertArrayEquals(new int[] {0, 64}, ShardedStepPlan.tailChunkRows(64, 256, 1));
        for (int rows = 1; rows <= 70; rows += 3) {
            for (int cols : new int[] {1, 3, 10, 32, 48, 96, 100}) {
                for (int chunks = 1; chunks <= 6; chunks++) {
                    int[] at = ShardedStepPlan.tailChunkRows(rows, cols, chunks);
                    assertTrue(at.length >= 2 && at.length - 1 <= chunks && at[0] == 0 && at[at.length - 1] == rows);
                    for (int k = 1; k < at.length; k++) {
                        assertTrue(at[k] > at[k - 1], rows + "x" + cols + " in " + chunks);
                        assertEquals(0, (long) at[k - 1] * cols % 32, rows + "x" + cols + " in " + chunks);
                    }
                }
            }
        }
    }

    @Test
    void brokenPlansAreRejected() {
        ShardedStepPlan good = ShardedStepPlan.of(4, true);
        List<Action> a = good.actions();
        // the forward of layer 1 no longer waits for its gather
        int waitBeforeF1 = indexOf(a, Kind.FORWARD, 1, 0) - 3; // c<m m<c G2w0 F1w1
        assertEquals(Kind.COMPUTE_WAITS_COMM, a.get(waitBeforeF1).kind());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> without(good, waitBeforeF1).validate(2));
        assertTrue(e.getMessage().contains("weight1"), e.getMessage());
        // the prefetch of layer 2 no longer waits for forward 0, which still reads working buffer 0
        int waitBeforeG2 = indexOf(a, Kind.GATHER, 2, 0) - 1;
        assertEquals(Kind.COMM_WAITS_COMPUTE, a.get(waitBeforeG2).kind());
        e = assertThrows(IllegalStateException.class, () -> without(good, waitBeforeG2).validate(2));
        assertTrue(e.getMessage().contains("race on weight0"), e.getMessage());
        // the reduction of layer 3 no longer waits for its backward
        int waitBeforeR3 = indexOf(a, Kind.REDUCE, 3, 0) - 1;
        e = assertThrows(IllegalStateException.class, () -> without(good, waitBeforeR3).validate(2));
        assertTrue(e.getMessage().contains("weight1"), e.getMessage());
        // the regather of layer 1 before the reduction and Adam of layer 3 have read dW3 out of the same buffer
        List<Action> overwrite = new ArrayList<>(a);
        int g1 = indexOf(a, Kind.GATHER, 1, 1);
        overwrite.add(indexOf(a, Kind.REDUCE, 3, 0), overwrite.remove(g1));
        e = assertThrows(IllegalStateException.class, () -> new ShardedStepPlan(4, true, overwrite).validate(2));
        assertTrue(e.getMessage().contains("R3w1 ") && e.getMessage().contains("expecting 'dW 3' but finds 'W 1'"),
                e.getMessage());
        // backward 1 reading the wrong working buffer
        List<Action> wrong = new ArrayList<>(a);
        int b1 = indexOf(a, Kind.BACKWARD, 1, 0);
        wrong.set(b1, new Action(Kind.BACKWARD, 1, 0, -1));
        e = assertThrows(IllegalStateException.class, () -> new ShardedStepPlan(4, true, wrong).validate(2));
        // (it would read layer 2's or 0's weight, and writes dW1 where the reduction of layer 1 does not look for it)
        assertTrue(e.getMessage().contains("B1w0") && e.getMessage().contains("expecting 'dW 1'"), e.getMessage());
        // the regather of layer 1 into the buffer backward 3 still reads
        List<Action> early = new ArrayList<>(a);
        early.add(indexOf(a, Kind.BACKWARD, 3, 0), early.remove(g1));
        e = assertThrows(IllegalStateException.class, () -> new ShardedStepPlan(4, true, early).validate(2));
        assertTrue(e.getMessage().contains("weight1"), e.getMessage());
        // no waits for the comm stream in a replicated step: the next step races the reductions and the optimizer
        ShardedStepPlan replicated = ShardedStepPlan.of(2, false);
        List<Action> r = replicated.actions();
        e = assertThrows(IllegalStateException.class,
                () -> without(without(replicated, r.size() - 1), 0).validate(2));
        assertTrue(e.getMessage().contains("race on grad0") && e.getMessage().contains("step 1"), e.getMessage());
        // without only the join the first wait of the next step still orders it: the join is for the caller (timing,
        // copies of the next batch through the compute stream)
        without(replicated, r.size() - 1).validate(3);
    }

    @Test
    void theStepRefusesHostTransportsAndBadSizesBeforeAnythingCollective() {
        InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(30)), group -> {
            IllegalArgumentException bad = assertThrows(IllegalArgumentException.class, () -> new FullyShardedMlp(group, 8,
                    new int[] {16}, FullyShardedMlp.Sharding.FULL, FullyShardedMlp.Adam.defaults()));
            assertTrue(bad.getMessage().contains("widths=[16]") && bad.getMessage().contains("at least two"), bad.getMessage());
            IllegalArgumentException chunks = assertThrows(IllegalArgumentException.class, () -> new FullyShardedMlp(group, 8,
                    new int[] {16, 32, 16}, FullyShardedMlp.Sharding.FULL, FullyShardedMlp.Adam.defaults(), 0));
            assertTrue(chunks.getMessage().contains("tailChunks=0") && chunks.getMessage().contains("fix:"),
                    chunks.getMessage());
            UnsupportedOperationException host = assertThrows(UnsupportedOperationException.class, () -> new FullyShardedMlp(
                    group, 8, new int[] {16, 32, 16}, FullyShardedMlp.Sharding.FULL, FullyShardedMlp.Adam.defaults()));
            assertTrue(host.getMessage().contains("runs on GPUs") && host.getMessage().contains("CudaTransport"),
                    host.getMessage());
            return null;
        });
        IllegalArgumentException adam = assertThrows(IllegalArgumentException.class,
                () -> new FullyShardedMlp.Adam(1e-3f, 1f, 0.999f, 1e-8f));
        assertTrue(adam.getMessage().contains("beta1=1.0"), adam.getMessage());
    }

    private static ShardedStepPlan without(ShardedStepPlan plan, int index) {
        List<Action> a = new ArrayList<>(plan.actions());
        a.remove(index);
        return new ShardedStepPlan(plan.layers(), plan.sharded(), a);
    }

    /** The index of the {@code nth} (from 0) action of {@code kind} for {@code layer}. */
    private static int indexOf(List<Action> actions, Kind kind, int layer, int nth) {
        int seen = 0;
        for (int i = 0; i < actions.size(); i++) {
            if (actions.get(i).kind() == kind && actions.get(i).layer() == layer && seen++ == nth) {
                return i;
            }
        }
        throw new AssertionError("no " + kind + " " + layer + " #" + nth + " in " + actions);
    }
}
