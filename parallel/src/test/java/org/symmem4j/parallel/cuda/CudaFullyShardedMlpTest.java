package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.cuda.ffi.Cublas;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.parallel.tensor.FullyShardedMlp;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Adam;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Sharding;
import org.symmem4j.parallel.tensor.ShardedStepMemory;
import org.symmem4j.parallel.tensor.ShardedStepPlan;
import org.symmem4j.parallel.tensor.StepTimeline;

/**
 * {@link FullyShardedMlp} on GPUs against a float64 host reference of the same steps: every rank its own batch, the
 * float64 reference rounding to bfloat16 where the GPU stores bfloat16 (weights cast from the float32 masters, each
 * GEMM's output, the summed gradient), so that only the GEMMs' float32 accumulation and Adam's float32 arithmetic
 * differ. Checked: each step's output on every rank (before that step's update), and after the steps every rank's
 * float32 master shard; the sharded and the replicated (plain data-parallel) steps bitwise equal to each other. Four
 * layers of different widths (the backward pass regathers layers 0 and 1, each working buffer holds layers of two sizes)
 * and the two-layer MLP block. Skipped without a GPU, the kernels or cuBLAS; on one GPU the ranks share it.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaFullyShardedMlpTest {

    static final GpuTestSupport.ClassTransport GPU = new GpuTestSupport.ClassTransport();

    /** Streams a rank of one model keeps: the GEMMs', the collectives' sub-group's, and each communicator's copy stream. */
    static final int STREAMS_PER_RANK = 4;

    @BeforeEach
    void needsAGpu() {
        GpuTestSupport.assumeGpuAndKernels();
        Assumptions.assumeTrue(Cublas.available(), "no cuBLAS: " + Cublas.unavailableReason());
        GPU.open();
        // ranks sharing a GPU each need their streams on hardware queues of their own: a collective kernel spinning for a
        // peer must not sit in front of that peer's kernel in one queue (see LaunchBudget); two models' streams live here
        int devices = CudaDriver.get().deviceCount();
        int perGpu = (GPU.worldSize() + devices - 1) / devices;
        String set = System.getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        int connections = set == null ? 8 : Integer.parseInt(set.trim());
        int needed = perGpu == 1 ? 1 : 2 * STREAMS_PER_RANK * perGpu + 1;
        Assumptions.assumeTrue(connections >= needed, perGpu + " ranks share a GPU: their 2 x " + STREAMS_PER_RANK
                + " streams each need CUDA_DEVICE_MAX_CONNECTIONS >= " + needed + ", found " + connections);
    }

    @AfterAll
    static void closeTransport() {
        GPU.close();
    }

    @Test
    void fourLayersShardedAndReplicatedMatchTheReferenceAndEachOther() {
        check(48, new int[] {48, 96, 64, 80, 32}, 1);
        check(48, new int[] {48, 96, 64, 80, 32}, 3);
    }

    @Test
    void theMlpBlockMatchesTheReference() {
        check(64, new int[] {64, 256, 64}, 1);
        check(64, new int[] {64, 256, 64}, 2);
    }

    /**
     * Layer 0's tail whole (1 block: its gradient reduce-scattered, the schedule before the tail blocks) and in 3 blocks
     * (all-reduced block by block), both against the reference and sharded = replicated bitwise; and the recorded
     * timeline of the last step: every action has a span, a stream's actions do not overlap, and the last block's
     * reduction and Adam end after the last GEMM.
     */
    @Test
    void theTailWholeOrInBlocksMatchesTheReferenceAndItsTimelineEndsWithOneBlock() {
        check(64, new int[] {64, 256, 64}, 2, 1, true);
        check(64, new int[] {64, 256, 64}, 2, 3, true);
    }

    /**
     * The two kernels the step adds, alone: the float32 → bfloat16 cast bitwise against the host's round-to-nearest-even,
     * and one Adam step (t = 3, with the bfloat16 copy) against the same arithmetic in double on the host; a bad
     * hyper-parameter refused before anything runs.
     */
    @Test
    void castAndAdamKernelsMatchTheHostArithmetic() {
        int n = 5000; // not a multiple of a block's threads
        GPU.onEveryRank(group -> {
            try (org.symmem4j.parallel.Communicator comm = org.symmem4j.parallel.Communicator.create(group);
                 Arena arena = Arena.ofConfined()) {
                org.symmem4j.parallel.DeviceCommunicator device = comm.unwrap(org.symmem4j.parallel.DeviceCommunicator.class)
                        .orElseThrow();
                org.symmem4j.parallel.TensorParallelGemm ops = comm.unwrap(org.symmem4j.parallel.TensorParallelGemm.class)
                        .orElseThrow();
                SplittableRandom rnd = new SplittableRandom(40 + group.rank());
                double[] p = new double[n];
                double[] m = new double[n];
                double[] v = new double[n];
                double[] g = new double[n];
                for (int i = 0; i < n; i++) {
                    p[i] = (float) rnd.nextDouble(-1, 1);
                    m[i] = (float) rnd.nextDouble(-0.1, 0.1);
                    v[i] = (float) rnd.nextDouble(0, 0.01);
                    g[i] = Reference.bf16(rnd.nextDouble(-0.2, 0.2));
                }
                var dp = CudaTensorParallelTest.upload(device, arena, p, DType.FLOAT32);
                var dm = CudaTensorParallelTest.upload(device, arena, m, DType.FLOAT32);
                var dv = CudaTensorParallelTest.upload(device, arena, v, DType.FLOAT32);
                var dg = CudaTensorParallelTest.upload(device, arena, g, DType.BFLOAT16);
                var copy = device.allocateDevice((long) n * 2);
                var cast = device.allocateDevice((long) n * 2);
                try {
                    ops.castToBfloat16(dp, cast, n);
                    double[] casted = CudaTensorParallelTest.download(device, arena, cast, n, DType.BFLOAT16);
                    for (int i = 0; i < n; i++) {
                        assertEquals(BFloat16.toFloat(BFloat16.fromFloat((float) p[i])), casted[i], "cast " + i + " of " + p[i]);
                    }
                    float lr = 0.01f;
                    float b1 = 0.9f;
                    float b2 = 0.999f;
                    float eps = 1e-3f;
                    int t = 3;
                    ops.adamStep(dp, dm, dv, dg, copy, n, 0.5f, lr, b1, b2, eps, t);
                    double[] p2 = CudaTensorParallelTest.download(device, arena, dp, n, DType.FLOAT32);
                    double[] m2 = CudaTensorParallelTest.download(device, arena, dm, n, DType.FLOAT32);
                    double[] v2 = CudaTensorParallelTest.download(device, arena, dv, n, DType.FLOAT32);
                    double[] c2 = CudaTensorParallelTest.download(device, arena, copy, n, DType.BFLOAT16);
                    double stepSize = lr / (1 - Math.pow(b1, t));
                    double sqrtBias2 = Math.sqrt(1 - Math.pow(b2, t));
                    int moved = 0;
                    for (int i = 0; i < n; i++) {
                        double gi = 0.5 * g[i];
                        double mi = m[i] + (1 - b1) * (gi - m[i]);
                        double vi = b2 * v[i] + (1 - b2) * gi * gi;
                        double pi = p[i] - stepSize * mi / (Math.sqrt(vi) / sqrtBias2 + eps);
                        assertEquals(mi, m2[i], 1e-6 * (Math.abs(mi) + 1e-3), "m " + i);
                        assertEquals(vi, v2[i], 1e-6 * (Math.abs(vi) + 1e-6), "v " + i);
                        assertEquals(pi, p2[i], 1e-6, "param " + i);
                        // random moments can cancel for a few elements (an update below 1e-4): the data must move
                        // most of them, so that the equality above tests the update and not a no-op
                        moved += Math.abs(pi - p[i]) > 1e-4 ? 1 : 0;
                        assertEquals(BFloat16.toFloat(BFloat16.fromFloat((float) p2[i])), c2[i], "bf16 copy " + i);
                    }
                    assertTrue(moved >= n * 9 / 10, "the step moved " + moved + " of " + n + " params by more than 1e-4");
                    IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                            () -> ops.adamStep(dp, dm, dv, dg, null, n, 1f, lr, 1f, b2, eps, 1));
                    assertTrue(e.getMessage().contains("beta1=1.0"), e.getMessage());
                } finally {
                    device.synchronize();
                    for (var d : List.of(dp, dm, dv, dg, copy, cast)) {
                        device.freeDevice(d);
                    }
                }
            }
            return null;
        });
    }

    private static void check(int tokens, int[] widths, int steps) {
        check(tokens, widths, steps, ShardedStepPlan.defaultTailChunks(GPU.worldSize()), false);
    }

    private static void check(int tokens, int[] widths, int steps, int tailChunks, boolean timeline) {
        int world = GPU.worldSize();
        int layers = widths.length - 1;
        Reference ref = new Reference(tokens, widths, world);
        // ε at a tenth of the first step's RMS gradient: Adam's update is then smooth in the gradient (near-zero gradients
        // whose sign a rounding could flip move their weight by far less than lr)
        float eps = (float) (0.1 * ref.rmsOfFirstGradient());
        Adam adam = new Adam(0.02f, 0.9f, 0.999f, eps);
        for (int step = 1; step <= steps; step++) {
            ref.step(step, adam);
        }
        List<Result> sharded = GPU.onEveryRank(group -> run(group, tokens, widths, steps, Sharding.FULL, adam, tailChunks, timeline));
        List<Result> replicated = GPU.onEveryRank(group -> run(group, tokens, widths, steps, Sharding.NONE, adam, tailChunks, timeline));
        for (int r = 0; r < world; r++) {
            Result s = sharded.get(r);
            Result p = replicated.get(r);
            for (int step = 0; step < steps; step++) {
                String what = "rank " + r + " step " + (step + 1) + " output";
                assertClose(s.outputs.get(step), ref.outputs.get(step)[r], 0.01, what + " (sharded)");
                assertClose(p.outputs.get(step), ref.outputs.get(step)[r], 0.01, what + " (replicated)");
                if (p.bitwiseComparable || step == 0) {
                    assertTrue(Arrays.equals(s.outputs.get(step), p.outputs.get(step)), what + ": sharded and replicated differ");
                }
            }
            for (int l = 0; l < layers; l++) {
                long count = (long) widths[l] * widths[l + 1];
                ShardPartition part = ShardPartition.of(count, world, DType.BFLOAT16);
                assertEquals(Math.min(part.start(r), count), s.starts[l], "rank " + r + " layer " + l + " shard start");
                assertEquals(part.size(r), s.masters.get(l).length, "rank " + r + " layer " + l + " shard size");
                assertEquals(count, p.masters.get(l).length, "a replica holds the whole layer");
                float[] shard = s.masters.get(l);
                float[] whole = p.masters.get(l);
                double tolerance = 0.1 * adam.learningRate() + 1e-6;
                double moved = 0;
                double squares = 0;
                for (int i = 0; i < shard.length; i++) {
                    int at = (int) s.starts[l] + i;
                    String what = "rank " + r + " layer " + l + " weight " + at + " after " + steps + " steps";
                    double expected = ref.w[l][at];
                    // the flat tolerance, plus what one-ulp flips of the bfloat16 gradients may move this weight through
                    // Adam (Reference.allowance): only weights whose mean gradient nearly cancels get much of it
                    double allowed = tolerance + ref.allowance[l][at];
                    squares += (shard[i] - expected) * (shard[i] - expected);
                    // After the first step, each weight against the reference. After more steps only the layer as a
                    // whole: the first step's small differences move every pre-activation a little, a few of the
                    // thousands near zero cross it, and a ReLU whose mask flips for one token changes that token's whole
                    // row of the next layer's gradient; where the ranks' gradients nearly cancel, Adam (ε a tenth of the
                    // RMS gradient) turns that into a third of a step (4 ranks on 2 × H200, 2026-11-29: layer 2 weight
                    // 144, 0.0070 off after 3 steps). A wrong reduction moves every weight and shows in the RMS.
                    assertTrue(steps > 1 || Math.abs(shard[i] - expected) <= allowed, what + ": " + shard[i] + " expected "
                            + expected + " ± " + allowed + " (flat " + tolerance + " + flips " + ref.allowance[l][at]
                            + "; started at " + ref.w0[l][at] + ")");
                    moved = Math.max(moved, Math.abs(expected - ref.w0[l][at]));
                    if (p.bitwiseComparable) {
                        assertEquals(Float.floatToRawIntBits(whole[at]), Float.floatToRawIntBits(shard[i]),
                                what + ": sharded " + shard[i] + " replicated " + whole[at]);
                    }
                }
                double rms = shard.length == 0 ? 0 : Math.sqrt(squares / shard.length);
                assertTrue(rms <= tolerance, "rank " + r + " layer " + l + " after " + steps + " steps: RMS distance from"
                        + " the reference " + rms + ", more than " + tolerance);
                // the check means something only if the weights moved by more than the tolerance
                assertTrue(shard.length == 0 || moved > 5 * tolerance, "layer " + l + " moved only " + moved);
            }
        }
    }

    private static void checkTimeline(FullyShardedMlp mlp, StepTimeline.Timeline t, int tailChunks) {
        long actions = mlp.plan().actions().stream().filter(x -> x.layer() >= 0).count();
        assertEquals(actions, t.spans().size(), t.table());
        assertEquals(Math.min(tailChunks, 64), mlp.plan().tailChunks());
        for (ShardedStepPlan.Stream stream : ShardedStepPlan.Stream.values()) {
            double end = 0;
            for (StepTimeline.Span s : t.spans()) {
                if (s.action().stream() == stream) {
                    assertTrue(s.startMillis() >= end - 1e-3 && s.endMillis() >= s.startMillis(), s + " in\n" + t.table());
                    end = s.endMillis();
                }
            }
        }
        int last = tailChunks == 1 ? -1 : tailChunks - 1;
        List<String> tail = t.tail().stream().map(s -> s.action().toString().replaceAll("[wg]\\d", "")).toList();
        // the last block's reduction and Adam are ordered after the last GEMM (an earlier block's may still run then at
        // these tiny shapes, where a GEMM is shorter than a collective: the plan's test checks what the plan allows)
        String suffix = last < 0 ? "" : "#" + last;
        assertTrue(tail.contains("R0" + suffix) && tail.contains("O0" + suffix), "after the last GEMM: " + tail + "\n"
                + t.summary() + "\n" + t.table());
    }

    /** What one rank saw: each step's output, and its master elements after the steps. */
    record Result(List<double[]> outputs, List<float[]> masters, long[] starts, boolean bitwiseComparable) {
    }

    private static Result run(org.symmem4j.parallel.Group group, int tokens, int[] widths, int steps, Sharding sharding,
                              Adam adam, int tailChunks, boolean recordTimeline) {
        int rank = group.rank();
        int layers = widths.length - 1;
        // each rank's GPU state of the group itself made now (describe uses it), so that the model adds only its own;
        // every rank counts before any rank builds
        GPU.cuda().describe(group);
        group.allGatherBytes("fsdp-count-before", new byte[0]);
        int heldBefore = GPU.cuda().heldRanks();
        group.allGatherBytes("fsdp-counted-before", new byte[0]);
        // the caller's context (the group's rank made its GPU's primary context current): current again after close()
        CudaDriver driver = CudaDriver.get();
        java.lang.foreign.MemorySegment callers = driver.currentContext();
        assertTrue(!java.lang.foreign.MemorySegment.NULL.equals(callers), "rank " + rank + ": a context is current");
        Result result;
        FullyShardedMlp closed;
        try (FullyShardedMlp mlp = new FullyShardedMlp(group, tokens, widths, sharding, adam, tailChunks);
             Arena arena = Arena.ofConfined()) {
            closed = mlp;
            for (int l = 0; l < layers; l++) {
                double[] w = Reference.initialWeights(widths, l);
                mlp.setWeights(l, i -> w[(int) i]);
            }
            List<double[]> outputs = new ArrayList<>();
            for (int step = 1; step <= steps; step++) {
                mlp.device().copyFromHost(mlp.input(), CudaTensorParallelTest.toHost(arena,
                        Reference.input(tokens, widths, step, rank), DType.BFLOAT16));
                mlp.device().copyFromHost(mlp.outputGradient(), CudaTensorParallelTest.toHost(arena,
                        Reference.outputGradient(tokens, widths, step, rank), DType.BFLOAT16));
                StepTimeline timeline = null;
                if (step == steps && recordTimeline) {
                    mlp.synchronize(); // the timeline's events are created while no peer's kernel can wait for this rank
                    group.allGatherBytes("fsdp-timeline", new byte[0]);
                    timeline = mlp.recordTimeline();
                }
                mlp.step();
                if (timeline != null) {
                    checkTimeline(mlp, timeline.read(), tailChunks);
                    timeline.close();
                }
                outputs.add(CudaTensorParallelTest.download(mlp.device(), arena, mlp.output(), tokens * widths[layers],
                        DType.BFLOAT16));
            }
            List<float[]> masters = new ArrayList<>();
            long[] starts = new long[layers];
            for (int l = 0; l < layers; l++) {
                masters.add(mlp.masterWeights(l));
                starts[l] = mlp.heldStart(l);
                assertEquals(mlp.heldCount(l), masters.get(l).length);
            }
            long state = 0;
            for (float[] m : masters) {
                state += 12L * m.length;
            }
            assertEquals(state, mlp.memory().state(), "master + m + v, float32");
            // the accounted peak is the layout's, computed from the shapes alone; sharded, the gradients live in the
            // working buffers (none of their own) and each working buffer is its parity's largest layer
            ShardedStepMemory layout = ShardedStepMemory.of(tokens, widths, group.worldSize(), rank, sharding == Sharding.FULL);
            assertEquals(layout.memory(), mlp.memory());
            assertEquals(layout, mlp.layout());
            if (sharding == Sharding.FULL) {
                assertEquals(0, mlp.memory().gradients(), "sharded: dW is written over W in its working buffer");
                long weights = 0;
                for (int parity = 0; parity < Math.min(2, layers); parity++) {
                    long max = 0;
                    for (int l = parity; l < layers; l += 2) {
                        max = Math.max(max, (long) widths[l] * widths[l + 1]);
                    }
                    weights += 2 * max;
                }
                assertEquals(weights, mlp.memory().weights(), "two bf16 working buffers, one per parity of the layers");
            }
            List<Algorithm> algorithms = mlp.allReduceAlgorithms();
            boolean bitwise = algorithms == null || !algorithms.contains(Algorithm.NCCL);
            result = new Result(outputs, masters, starts, bitwise);
        }
        assertEquals(callers, driver.currentContext(), "rank " + rank + ": close() puts the caller's context back");
        long raw = driver.malloc(256); // a raw driver call after close() works (CUDA_ERROR_INVALID_CONTEXT without one)
        driver.free(raw);
        closed.close(); // a second close does nothing (and releases nothing twice)
        // close() released the collectives' sub-group's GPU state: what is left is each rank's state of the group itself
        group.allGatherBytes("fsdp-count-after", new byte[0]);
        int heldAfter = GPU.cuda().heldRanks();
        group.allGatherBytes("fsdp-counted-after", new byte[0]);
        GPU.cuda().release(group); // the caller's group: the test's to release
        assertEquals(heldBefore, heldAfter, "rank " + rank + ": GPU states held after close(): the group's, as before the"
                + " model, and none for the model's sub-group (" + group.worldSize() + " more before close() released it)");
        return result;
    }

    private static void assertClose(double[] actual, double[] expected, double relative, String what) {
        double scale = 0;
        for (double e : expected) {
            scale = Math.max(scale, Math.abs(e));
        }
        assertTrue(scale > 0, what + ": the reference is all zeros (the check would mean nothing)");
        for (int i = 0; i < expected.length; i++) {
            assertTrue(Math.abs(actual[i] - expected[i]) <= relative * scale, what + " [" + i + "]: " + actual[i]
                    + " expected " + expected[i] + " ± " + relative * scale);
        }
    }

    /**
     * The steps in float64 on the host, every rank's batch, rounding to bfloat16 where the GPU stores bfloat16, the
     * masters and moments to float32 where the GPU stores float32.
     */
    static final class Reference {
        final int tokens;
        final int[] widths;
        final int world;
        final int layers;
        final double[][] w0;
        final double[][] w;
        final double[][] m;
        final double[][] v;
        /**
         * How far, to first order, each weight may sit from {@link #w} because a bfloat16 result the GPU rounds is one
         * unit in the last place off the reference's: cuBLAS sums a rank's weight gradient in float32 in an order of its
         * own, so when the exact value lies near a rounding boundary its bfloat16 result can land on the other side.
         * Such a flip is at most one bfloat16 ulp of each rank's gradient and of the reduction's result; Adam turns a
         * change δ of the mean gradient into a change of its step of about stepSize · δ / (√v̂ + ε), which is large only
         * where the mean gradient nearly cancels (√v̂ ≈ 0) while the ranks' own gradients do not: with 4 ranks, such a
         * weight moved 1.09 × the flat tolerance (2 × H200, 2026-11-29). Elsewhere the term is about lr/128.
         */
        final double[][] allowance;
        /** Adam's first moment's first-order change from the flips so far (see {@link #allowance}). */
        private final double[][] momentFlip;
        /** The last {@link #gradients} call's bound on one-ulp flips of the mean gradient, per weight. */
        private double[][] gradientFlip;
        final List<double[][]> outputs = new ArrayList<>();

        Reference(int tokens, int[] widths, int world) {
            this.tokens = tokens;
            this.widths = widths;
            this.world = world;
            this.layers = widths.length - 1;
            w0 = new double[layers][];
            w = new double[layers][];
            m = new double[layers][];
            v = new double[layers][];
            allowance = new double[layers][];
            momentFlip = new double[layers][];
            for (int l = 0; l < layers; l++) {
                w0[l] = initialWeights(widths, l);
                w[l] = w0[l].clone();
                m[l] = new double[w[l].length];
                v[l] = new double[w[l].length];
                allowance[l] = new double[w[l].length];
                momentFlip[l] = new double[w[l].length];
            }
        }

        /** Layer l's initial weight, float32 values: uniform in ±1/√in. */
        static double[] initialWeights(int[] widths, int l) {
            SplittableRandom rnd = new SplittableRandom(1000 + l);
            double[] x = new double[widths[l] * widths[l + 1]];
            double scale = 1 / Math.sqrt(widths[l]);
            for (int i = 0; i < x.length; i++) {
                x[i] = (float) (rnd.nextDouble(-1, 1) * scale);
            }
            return x;
        }

        static double[] input(int tokens, int[] widths, int step, int rank) {
            return bf16Random(2000 + 100L * step + rank, tokens * widths[0], 1);
        }

        static double[] outputGradient(int tokens, int[] widths, int step, int rank) {
            return bf16Random(3000 + 100L * step + rank, tokens * widths[widths.length - 1], 0.5);
        }

        private static double[] bf16Random(long seed, int count, double scale) {
            SplittableRandom rnd = new SplittableRandom(seed);
            double[] x = new double[count];
            for (int i = 0; i < count; i++) {
                x[i] = bf16(rnd.nextDouble(-1, 1) * scale);
            }
            return x;
        }

        double rmsOfFirstGradient() {
            double[][] g = gradients(1, null);
            double sum = 0;
            long n = 0;
            for (double[] layer : g) {
                for (double x : layer) {
                    sum += x * x;
                    n++;
                }
            }
            return Math.sqrt(sum / n);
        }

        /** The mean gradient of every layer at the current weights (each rank's batch of {@code step}); outputs kept. */
        double[][] gradients(int step, List<double[][]> keepOutputs) {
            double[][] sum = new double[layers][];
            double[][] flips = new double[layers][];
            double[][] ys = new double[world][];
            double[][] wb = new double[layers][];
            for (int l = 0; l < layers; l++) {
                sum[l] = new double[w[l].length];
                flips[l] = new double[w[l].length];
                wb[l] = bf16(w[l].clone());
            }
            for (int r = 0; r < world; r++) {
                double[] x = input(tokens, widths, step, r);
                double[][] act = new double[layers][];
                double[] in = x;
                for (int l = 0; l < layers; l++) {
                    double[] z = bf16(CudaTensorParallelTest.matmul(in, false, wb[l], false, tokens, widths[l + 1], widths[l]));
                    if (l < layers - 1) {
                        for (int i = 0; i < z.length; i++) {
                            z[i] = Math.max(z[i], 0);
                        }
                    }
                    act[l] = z;
                    in = z;
                }
                ys[r] = act[layers - 1];
                double[] dz = outputGradient(tokens, widths, step, r);
                for (int l = layers - 1; l >= 0; l--) {
                    double[] a = l == 0 ? x : act[l - 1];
                    double[] dw = bf16(CudaTensorParallelTest.matmul(a, true, dz, false, widths[l], widths[l + 1], tokens));
                    for (int i = 0; i < dw.length; i++) {
                        sum[l][i] += dw[i];
                        flips[l][i] += bf16Ulp(dw[i]);
                    }
                    if (l > 0) {
                        double[] da = bf16(CudaTensorParallelTest.matmul(dz, false, wb[l], true, tokens, widths[l], widths[l + 1]));
                        for (int i = 0; i < da.length; i++) {
                            da[i] = a[i] > 0 ? da[i] : 0;
                        }
                        dz = da;
                    }
                }
            }
            if (keepOutputs != null) {
                keepOutputs.add(ys);
            }
            double scale = 1f / world;
            for (int l = 0; l < layers; l++) {
                bf16(sum[l]); // the reduction's bfloat16 result
                for (int i = 0; i < sum[l].length; i++) {
                    flips[l][i] = (flips[l][i] + bf16Ulp(sum[l][i])) * scale;
                    sum[l][i] *= scale;
                }
            }
            gradientFlip = flips;
            return sum;
        }

        /** One step: outputs at the current weights, then Adam (step t) from the mean gradient. */
        void step(int t, Adam adam) {
            double[][] g = gradients(t, outputs);
            double b1 = adam.beta1();
            double b2 = adam.beta2();
            double stepSize = (float) (adam.learningRate() / (1 - Math.pow(b1, t)));
            double sqrtBias2 = (float) Math.sqrt(1 - Math.pow(b2, t));
            for (int l = 0; l < layers; l++) {
                for (int i = 0; i < w[l].length; i++) {
                    double mi = (float) (m[l][i] + (1 - b1) * (g[l][i] - m[l][i]));
                    double vi = (float) (b2 * v[l][i] + (1 - b2) * g[l][i] * g[l][i]);
                    m[l][i] = mi;
                    v[l][i] = vi;
                    momentFlip[l][i] = (1 - b1) * gradientFlip[l][i] + b1 * momentFlip[l][i];
                    allowance[l][i] += stepSize * momentFlip[l][i] / (Math.sqrt(vi) / sqrtBias2 + adam.epsilon());
                    w[l][i] = (float) (w[l][i] - stepSize * (mi / (Math.sqrt(vi) / sqrtBias2 + adam.epsilon())));
                }
            }
        }

        /** One unit in the last place of x's bfloat16 value (7 stored mantissa bits against float's 23). */
        static double bf16Ulp(double x) {
            return Math.ulp((float) x) * 65536.0;
        }

        static double bf16(double x) {
            return BFloat16.toFloat(BFloat16.fromFloat((float) x));
        }

        static double[] bf16(double[] x) {
            for (int i = 0; i < x.length; i++) {
                x[i] = bf16(x[i]);
            }
            return x;
        }
    }
}
