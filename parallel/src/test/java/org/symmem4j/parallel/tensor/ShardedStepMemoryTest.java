package org.symmem4j.parallel.tensor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.tensor.ShardedStepMemory.Buffer;
import org.symmem4j.parallel.tensor.ShardedStepMemory.Purpose;

/**
 * The fully sharded step's buffers ({@link ShardedStepMemory}: what {@link FullyShardedMlp} allocates, its accounted
 * peak) on the host: the MLP block's bytes at the benchmark's shapes against a formula written out here, per-parity
 * sizing, every plan's buffers verified for 1 to 8 layers at 1 to 8 ranks, and layouts broken on purpose, which
 * {@code verify} must reject. The GPU test ({@code CudaFullyShardedMlpTest}) checks that the model allocates exactly this.
 */
class ShardedStepMemoryTest {

    /** tokens per rank × hidden × ffn of the benchmark (bench/gpu/run-on-device.sh fsdp). */
    private static final int[][] SHAPES = {{8192, 4096, 14336}, {16384, 4096, 14336}, {8192, 8192, 28672},
            {16384, 8192, 28672}};

    @Test
    void theMlpBlockHoldsItsShardsTwoWorkingBuffersAndNoGradientBuffers() {
        for (int[] s : SHAPES) {
            long t = s[0];
            long h = s[1];
            long f = s[2];
            for (int world : new int[] {2, 4, 8}) {
                for (int rank = 0; rank < world; rank++) {
                    ShardedStepMemory m = ShardedStepMemory.of(s[0], new int[] {s[1], s[2], s[1]}, world, rank, true);
                    m.verify(ShardedStepPlan.of(2, true));
                    long shard = ShardPartition.of(h * f, world, DType.BFLOAT16).size(rank);
                    // f32 master, m, v of this rank's block of each of the two layers
                    assertEquals(2 * 3 * 4 * shard, m.bytes(Purpose.STATE));
                    // two bf16 working buffers of h·f (W1, W2; each layer's dW written over its W)
                    assertEquals(2 * 2 * h * f, m.bytes(Purpose.WEIGHTS));
                    assertEquals(0, m.bytes(Purpose.GRADIENTS));
                    // x, dy, y (T×h) and the hidden activation and its gradient (T×f), bf16: nothing twice
                    assertEquals(2 * (3 * t * h + 2 * t * f), m.bytes(Purpose.ACTIVATIONS));
                    assertEquals(m.bytes(Purpose.STATE) + 4 * h * f + 2 * (3 * t * h + 2 * t * f), m.total());
                    assertEquals(m.total(), m.memory().total());
                }
            }
            // replicated, the baseline: the whole state, a bf16 replica and two gradient buffers
            ShardedStepMemory r = ShardedStepMemory.of(s[0], new int[] {s[1], s[2], s[1]}, 2, 1, false);
            r.verify(ShardedStepPlan.of(2, false));
            assertEquals(2 * 12 * h * f, r.bytes(Purpose.STATE));
            assertEquals(2 * 2 * h * f, r.bytes(Purpose.WEIGHTS));
            assertEquals(2 * 2 * h * f, r.bytes(Purpose.GRADIENTS));
        }
        // the 8192 × 8192 × 28672 block on 4 GPUs, in bytes: 12·P/N + 2·P + 2·T·(3h + 2f), P = 2·h·f
        assertEquals(12L * 2 * 8192 * 28672 / 4 + 2L * 2 * 8192 * 28672 + 2L * 8192 * (3 * 8192 + 2 * 28672),
                ShardedStepMemory.of(8192, new int[] {8192, 28672, 8192}, 4, 0, true).total());
    }

    @Test
    void workingAndBackwardBuffersAreSizedPerParity() {
        // layers 0 and 2 (64×256, 32×512) share working0, layer 1 (256×32) and 3 (512×8) working1
        ShardedStepMemory m = ShardedStepMemory.of(10, new int[] {64, 256, 32, 512, 8}, 3, 2, true);
        m.verify(ShardedStepPlan.of(4, true));
        assertEquals(2L * 64 * 256, m.buffer("working0").bytes());
        assertEquals(2L * 256 * 32, m.buffer("working1").bytes());
        // the gradients of the outputs of layers 0 and 2 (widths 256, 512) in backward0, of layer 1 (32) in backward1
        assertEquals(2L * 10 * 512, m.buffer("backward0").bytes());
        assertEquals(2L * 10 * 32, m.buffer("backward1").bytes());
        assertEquals(0, m.countOf("gradient"));
        // one layer: one working buffer, no backward buffer; two: one backward buffer
        assertEquals(1, ShardedStepMemory.of(4, new int[] {8, 8}, 2, 0, true).countOf("working"));
        assertEquals(0, ShardedStepMemory.of(4, new int[] {8, 8}, 2, 0, true).countOf("backward"));
        assertEquals(1, ShardedStepMemory.of(4, new int[] {8, 16, 8}, 2, 0, true).countOf("backward"));
        // a buffer is counted as the allocator is asked for it: at least 16 bytes (an empty shard of the last rank)
        ShardedStepMemory tiny = ShardedStepMemory.of(1, new int[] {4, 4}, 4, 3, true);
        assertEquals(0, tiny.buffer("master0").bytes());
        assertEquals(16, tiny.buffer("master0").allocated());
    }

    @Test
    void everyPlansBuffersVerify() {
        SplittableRandom random = new SplittableRandom(31);
        for (int layers = 1; layers <= 8; layers++) {
            for (int world = 1; world <= 8; world++) {
                int[] widths = new int[layers + 1];
                for (int i = 0; i <= layers; i++) {
                    widths[i] = 1 + random.nextInt(300);
                }
                int tokens = 1 + random.nextInt(50);
                for (boolean sharded : new boolean[] {true, false}) {
                    long stateElements = 0;
                    for (int rank = 0; rank < world; rank++) {
                        ShardedStepMemory m = ShardedStepMemory.of(tokens, widths, world, rank, sharded);
                        m.verify(ShardedStepPlan.of(layers, sharded));
                        stateElements += m.bytes(Purpose.STATE) / 12;
                        assertEquals(m.total(), m.memory().total());
                    }
                    // the shards cover every layer once (buffers of fewer than 16 bytes count 16 in the allocation)
                    long whole = 0;
                    for (int l = 0; l < layers; l++) {
                        whole += (long) widths[l] * widths[l + 1];
                    }
                    assertTrue(stateElements >= (sharded ? whole : whole * world), layers + " layers " + world + " ranks");
                }
            }
        }
    }

    @Test
    void brokenLayoutsAreRejected() {
        int[] widths = {64, 256, 32, 512, 8};
        ShardedStepPlan plan = ShardedStepPlan.of(4, true);
        ShardedStepMemory good = ShardedStepMemory.of(10, widths, 2, 0, true);
        // working1 one element short of layer 1's weight (256 × 32, the larger of layers 1 and 3)
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> with(good, "working1", new Buffer("working1", Purpose.WEIGHTS, 2L * 256 * 32 - 2, true)).verify(plan));
        assertTrue(e.getMessage().contains("needs " + 2L * 256 * 32 + " bytes in working1"), e.getMessage());
        // backward0 sized for layer 0's output only (256), not layer 2's (512)
        e = assertThrows(IllegalStateException.class,
                () -> with(good, "backward0", new Buffer("backward0", Purpose.ACTIVATIONS, 2L * 10 * 256, false)).verify(plan));
        assertTrue(e.getMessage().contains("B3w1") && e.getMessage().contains("backward0"), e.getMessage());
        // a gradient buffer a sharded plan never uses (the old layout's): refused, it would only cost memory
        List<Buffer> extra = new ArrayList<>(good.buffers());
        extra.add(new Buffer("gradient0", Purpose.GRADIENTS, 2L * 64 * 256, true));
        e = assertThrows(IllegalStateException.class, () -> new ShardedStepMemory(10, widths, 2, 0, true, extra).verify(plan));
        assertTrue(e.getMessage().contains("gradient0 is allocated but no action of the plan uses it"), e.getMessage());
        // a missing activation
        List<Buffer> missing = new ArrayList<>(good.buffers());
        missing.removeIf(b -> b.name().equals("activation2"));
        e = assertThrows(IllegalStateException.class, () -> new ShardedStepMemory(10, widths, 2, 0, true, missing).verify(plan));
        assertTrue(e.getMessage().contains("activation2, which is not allocated"), e.getMessage());
        // the replicated plan against the sharded buffers
        e = assertThrows(IllegalStateException.class, () -> good.verify(ShardedStepPlan.of(4, false)));
        assertTrue(e.getMessage().contains("sharded=false"), e.getMessage());
        // a shard smaller than this rank's block
        e = assertThrows(IllegalStateException.class,
                () -> with(good, "v1", new Buffer("v1", Purpose.STATE, 4, false)).verify(plan));
        assertTrue(e.getMessage().contains("layer 1's shard") && e.getMessage().contains("v1"), e.getMessage());
        IllegalArgumentException bad = assertThrows(IllegalArgumentException.class,
                () -> ShardedStepMemory.of(8, new int[] {16, 16}, 2, 2, true));
        assertTrue(bad.getMessage().contains("rank=2") && bad.getMessage().contains("fix:"), bad.getMessage());
    }

    private static ShardedStepMemory with(ShardedStepMemory m, String name, Buffer replacement) {
        List<Buffer> b = new ArrayList<>(m.buffers());
        b.replaceAll(x -> x.name().equals(name) ? replacement : x);
        return new ShardedStepMemory(m.tokens(), m.widths(), m.world(), m.rank(), m.sharded(), b);
    }
}
