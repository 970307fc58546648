package org.symmem4j.parallel.tensor;

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
