package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TensorParallelGemm;
import org.symmem4j.parallel.TensorParallelGemm.Mode;
import org.symmem4j.parallel.cuda.ffi.Cublas;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.parallel.tensor.TensorParallelMlp;

/**
 * Tensor-parallel GEMMs on GPUs against float64 references computed on the host: cuBLAS's GEMM in every
 * transpose; the all-gather + matmul and the matmul + reduce-scatter in every mode (fused, our
 * collectives, NCCL where each rank has a GPU), twice in a row (the meetings' semaphores reset), with
 * blocks cut into several chunks, float32 and bfloat16; both fused calls replayed from a CUDA graph
 * on new inputs; and the end-to-end GPU training test: {@link TensorParallelMlp} trained for three
 * SGD steps on a data-parallel × tensor-parallel mesh (2 × 2 with 4 ranks, else 1 × W) against the
 * unsharded block in float64. Skipped without a GPU, the kernels or cuBLAS; on one GPU the ranks share it.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaTensorParallelTest {

    static final GpuTestSupport.ClassTransport GPU = new GpuTestSupport.ClassTransport();

    @BeforeEach
    void needsAGpu() {
        GpuTestSupport.assumeGpuAndKernels();
        Assumptions.assumeTrue(Cublas.available(), "no cuBLAS: " + Cublas.unavailableReason());
        GPU.open();
    }

    @AfterAll
    static void closeTransport() {
        GPU.close();
    }

    // ---- host helpers ----

    /** Random values exactly representable in dtype. */
    static double[] random(long seed, int count, DType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        double[] v = new double[count];
        for (int i = 0; i < count; i++) {
            float x = (float) rnd.nextDouble(-1, 1);
            v[i] = dtype == DType.BFLOAT16 ? BFloat16.toFloat(BFloat16.fromFloat(x)) : x;
        }
        return v;
    }

    static MemorySegment toHost(Arena arena, double[] v, DType dtype) {
        MemorySegment s = arena.allocate((long) v.length * dtype.byteSize(), 16);
        for (int i = 0; i < v.length; i++) {
            if (dtype == DType.FLOAT32) {
                s.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) v[i]);
            } else {
                s.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat((float) v[i]));
            }
        }
        return s;
    }

    static double[] fromHost(MemorySegment s, int count, DType dtype) {
        double[] v = new double[count];
        for (int i = 0; i < count; i++) {
            v[i] = dtype == DType.FLOAT32 ? s.getAtIndex(ValueLayout.JAVA_FLOAT, i)
                    : BFloat16.toFloat(s.getAtIndex(ValueLayout.JAVA_SHORT, i));
        }
        return v;
    }

    static MemorySegment upload(DeviceCommunicator device, Arena arena, double[] v, DType dtype) {
        MemorySegment d = device.allocateDevice((long) v.length * dtype.byteSize());
        device.copyFromHost(d, toHost(arena, v, dtype));
        return d;
    }

    static double[] download(DeviceCommunicator device, Arena arena, MemorySegment d, int count, DType dtype) {
        MemorySegment h = arena.allocate((long) count * dtype.byteSize(), 16);
        device.copyToHost(h, d.asSlice(0, h.byteSize()));
        return fromHost(h, count, dtype);
    }

    /** Row-major {@code op(a) · op(b)} in float64. */
    static double[] matmul(double[] a, boolean transA, double[] b, boolean transB, int m, int n, int k) {
        double[] c = new double[m * n];
        for (int i = 0; i < m; i++) {
            for (int p = 0; p < k; p++) {
                double x = transA ? a[p * m + i] : a[i * k + p];
                if (x == 0) {
                    continue;
                }
                for (int j = 0; j < n; j++) {
                    c[i * n + j] += x * (transB ? b[j * k + p] : b[p * n + j]);
                }
            }
        }
        return c;
    }

    static double relativeError(double[] got, double[] want) {
        assertEquals(want.length, got.length);
        double num = 0;
        double den = 0;
        for (int i = 0; i < want.length; i++) {
            double d = got[i] - want[i];
            num += d * d;
            den += want[i] * want[i];
        }
        return Math.sqrt(num / Math.max(den, 1e-300));
    }

    static void assertClose(double[] got, double[] want, double tolerance, String what) {
        double err = relativeError(got, want);
        assertTrue(err <= tolerance, what + ": relative L2 error " + err + " expected <= " + tolerance);
    }

    static double tolerance(DType dtype) {
        // float32: float32 accumulation over k <= 2048 terms of values in [-1, 1]; bfloat16: the output's rounding
        // (2^-9 relative) and, for the reduce-scatter, the partials' rounding before the sum
        return dtype == DType.FLOAT32 ? 2e-6 : 1e-2;
    }

    static double[] rows(double[] m, int cols, int from, int count) {
        double[] r = new double[count * cols];
        System.arraycopy(m, from * cols, r, 0, r.length);
        return r;
    }

    private static List<Mode> modes(TensorParallelGemm gemm) {
        List<Mode> modes = new ArrayList<>();
        for (Mode m : Mode.values()) {
            if (gemm.unavailableReason(m) == null) {
                modes.add(m);
            } else {
                System.out.println("mode " + m + " skipped: " + gemm.unavailableReason(m));
            }
        }
        return modes;
    }

    // ---- tests ----

    @Test
    void gemmMatchesFloat64InEveryTranspose() {
        GPU.onEveryRank(group -> {
            try (Communicator comm = Communicator.create(group); Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                TensorParallelGemm gemm = comm.unwrap(TensorParallelGemm.class).orElseThrow();
                int m = 300;
                int n = 200;
                int k = 150;
                for (DType dtype : new DType[] {DType.FLOAT32, DType.BFLOAT16}) {
                    for (int t = 0; t < 4; t++) {
                        boolean ta = (t & 1) != 0;
                        boolean tb = (t & 2) != 0;
                        double[] a = random(11 + t + 10L * group.rank(), m * k, dtype);
                        double[] b = random(21 + t + 10L * group.rank(), k * n, dtype);
                        double[] c0 = random(31 + t, m * n, dtype);
                        MemorySegment da = upload(device, arena, a, dtype);
                        MemorySegment db = upload(device, arena, b, dtype);
                        MemorySegment dc = upload(device, arena, c0, dtype);
                        gemm.matmul(dc, da, ta, db, tb, m, n, k, true, dtype);
                        double[] want = matmul(a, ta, b, tb, m, n, k);
                        for (int i = 0; i < want.length; i++) {
                            want[i] += c0[i];
                        }
                        assertClose(download(device, arena, dc, m * n, dtype), want, tolerance(dtype),
                                "GEMM " + dtype + " transA=" + ta + " transB=" + tb + " (accumulating)");
                        for (MemorySegment s : List.of(da, db, dc)) {
                            device.freeDevice(s);
                        }
                    }
                }
                MemorySegment tiny = device.allocateDevice(16);
                assertThrows(IllegalArgumentException.class, () -> gemm.matmul(tiny, tiny, false, tiny, false, 4, 4, 4, false,
                        DType.FLOAT32), "buffers smaller than the dimensions are refused before cuBLAS runs");
                device.freeDevice(tiny);
            }
            return null;
        });
    }

    /** Every rank's block of A (rows × k) for a case: rank q's rows come from seed + q. */
    static double[] wholeA(long seed, int rows, int k, DType dtype) {
        int shard = rows / GPU.worldSize();
        double[] a = new double[rows * k];
        for (int q = 0; q < GPU.worldSize(); q++) {
            System.arraycopy(random(seed + q, shard * k, dtype), 0, a, q * shard * k, shard * k);
        }
        return a;
    }

    @Test
    void allGatherMatmulMatchesFloat64InEveryMode() {
        GPU.onEveryRank(group -> {
            int r = group.rank();
            int rows = GPU.worldSize() * 1500; // 2 chunks of a block with 1024-row chunks
            int n = 192;
            int k = 256;
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory gathered = SymmetricMemory.allocate(group, (long) rows * k * 4 + 4096);
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                TensorParallelGemm gemm = comm.unwrap(TensorParallelGemm.class).orElseThrow();
                int shard = rows / GPU.worldSize();
                long seed = 100;
                // buffers live across the calls: a rank freeing device memory while its peer's stream already spins in the
                // next call's meeting (waiting for this rank) deadlocks, since cuMemFree waits for the peer GPU too
                MemorySegment db = device.allocateDevice((long) k * n * 4);
                MemorySegment dc = device.allocateDevice((long) rows * n * 4);
                for (DType dtype : new DType[] {DType.FLOAT32, DType.BFLOAT16}) {
                    long offset = 256; // not at the start of the region
                    for (Mode mode : modes(gemm)) {
                        for (int call = 0; call < 2; call++) {
                            seed += 10;
                            double[] a = wholeA(seed, rows, k, dtype);
                            double[] b = random(seed * 31 + r, k * n, dtype);
                            // rows of the other ranks start as garbage: the gather must overwrite them
                            double[] garbage = random(seed + 7, rows * k, dtype);
                            System.arraycopy(a, r * shard * k, garbage, r * shard * k, shard * k);
                            MemorySegment host = toHost(arena, garbage, dtype);
                            device.copyFromHost(gathered.local().asSlice(offset, host.byteSize()), host);
                            MemorySegment bHost = toHost(arena, b, dtype);
                            device.copyFromHost(db.asSlice(0, bHost.byteSize()), bHost);
                            gemm.allGatherMatmul(gathered, offset, db, false, dc, rows, n, k, dtype, mode);
                            String what = "all-gather + matmul " + mode + " " + dtype + " call " + call + " rank " + r;
                            assertArrayEquals(a, download(device, arena, gathered.local().asSlice(offset), rows * k, dtype),
                                    what + ": the gathered rows, bitwise");
                            assertClose(download(device, arena, dc, rows * n, dtype), matmul(a, false, b, false, rows, n, k),
                                    tolerance(dtype), what);
                        }
                    }
                }
                device.synchronize();
                comm.barrier();
                device.freeDevice(db);
                device.freeDevice(dc);
                assertThrows(IllegalArgumentException.class, () -> gemm.allGatherMatmul(gathered, 0, gathered.local(), false,
                        gathered.local(), GPU.worldSize() * 3 + 1, 4, 4, DType.FLOAT32, Mode.FUSED), "rows that do not split evenly");
            }
            return null;
        });
    }

    @Test
    void matmulReduceScatterMatchesFloat64InEveryMode() {
        GPU.onEveryRank(group -> {
            int r = group.rank();
            int rows = GPU.worldSize() * 1100;
            int n = 160;
            int k = 96;
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory partials = SymmetricMemory.allocate(group, TensorParallelGemm.partialsBytes(rows, n, DType.FLOAT32) + 512);
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                TensorParallelGemm gemm = comm.unwrap(TensorParallelGemm.class).orElseThrow();
                int shard = rows / GPU.worldSize();
                long seed = 500;
                // allocated once (see allGatherMatmulMatchesFloat64InEveryMode)
                MemorySegment da = device.allocateDevice((long) rows * k * 4);
                MemorySegment db = device.allocateDevice((long) k * n * 4);
                MemorySegment out = device.allocateDevice((long) shard * n * 4);
                for (DType dtype : new DType[] {DType.FLOAT32, DType.BFLOAT16}) {
                    for (Mode mode : modes(gemm)) {
                        for (int call = 0; call < 2; call++) {
                            seed += 10;
                            double[] want = new double[shard * n];
                            double[] mineA = null;
                            double[] mineB = null;
                            for (int q = 0; q < GPU.worldSize(); q++) {
                                double[] aq = random(seed + 2L * q, rows * k, dtype);
                                double[] bq = random(seed + 2L * q + 1, k * n, dtype);
                                double[] part = matmul(rows(aq, k, r * shard, shard), false, bq, false, shard, n, k);
                                for (int i = 0; i < want.length; i++) {
                                    want[i] += part[i];
                                }
                                if (q == r) {
                                    mineA = aq;
                                    mineB = bq;
                                }
                            }
                            MemorySegment aHost = toHost(arena, mineA, dtype);
                            MemorySegment bHost = toHost(arena, mineB, dtype);
                            device.copyFromHost(da.asSlice(0, aHost.byteSize()), aHost);
                            device.copyFromHost(db.asSlice(0, bHost.byteSize()), bHost);
                            gemm.matmulReduceScatter(da, db, false, partials, 512, out, rows, n, k, dtype, mode);
                            assertClose(download(device, arena, out, shard * n, dtype), want, 2 * tolerance(dtype),
                                    "matmul + reduce-scatter " + mode + " " + dtype + " call " + call + " rank " + r);
                        }
                    }
                }
                device.synchronize();
                comm.barrier();
                for (MemorySegment s : List.of(da, db, out)) {
                    device.freeDevice(s);
                }
                MemorySegment small = device.allocateDevice(64);
                assertThrows(IllegalArgumentException.class, () -> gemm.matmulReduceScatter(small, small, false, partials, 0, small,
                        rows * 4, n, k, DType.FLOAT32, Mode.FUSED), "partials too small for the rows are refused");
                device.freeDevice(small);
            }
            return null;
        });
    }

    /**
     * Fused calls captured once and replayed on new inputs; with the ranks as threads of one JVM (these tests) the
     * capture is refused (the test checks the refusal) unless {@code -Dsymmem4j.tp.fused.graphs.in.one.jvm=true} (through
     * run-on-device.sh's {@code SYMMEM4J_JAVA_OPTS}), which checks the replays' results on these small shapes.
     */
    @Test
    void fusedCallsReplayFromAGraphOnNewInputs() {
        GPU.onEveryRank(group -> {
            int r = group.rank();
            int rows = GPU.worldSize() * 512;
            int n = 128;
            int k = 64;
            DType dtype = DType.FLOAT32;
            int shard = rows / GPU.worldSize();
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory gathered = SymmetricMemory.allocate(group, (long) rows * k * 4);
                 SymmetricMemory partials = SymmetricMemory.allocate(group, TensorParallelGemm.partialsBytes(rows, n, dtype));
                 Arena arena = Arena.ofConfined()) {
                DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                TensorParallelGemm gemm = comm.unwrap(TensorParallelGemm.class).orElseThrow();
                MemorySegment b = device.allocateDevice((long) k * n * 4);
                MemorySegment c = device.allocateDevice((long) rows * n * 4);
                MemorySegment a2 = device.allocateDevice((long) rows * k * 4);
                MemorySegment b2 = device.allocateDevice((long) k * n * 4);
                MemorySegment out = device.allocateDevice((long) shard * n * 4);
                Runnable calls = () -> {
                    gemm.allGatherMatmul(gathered, 0, b, false, c, rows, n, k, dtype, Mode.FUSED);
                    gemm.matmulReduceScatter(a2, b2, false, partials, 0, out, rows, n, k, dtype, Mode.FUSED);
                };
                // a capture needs the shapes run once eagerly (their first run loads cuBLAS's kernels and meets on the host)
                assertThrows(IllegalStateException.class, () -> device.capture(calls));
                calls.run();
                device.synchronize();
                // ranks as threads of one JVM: fused captures are refused, saying why and what to do instead
                if (!CudaTensorParallelGemm.FUSED_GRAPHS_IN_ONE_JVM) {
                    IllegalStateException refused = assertThrows(IllegalStateException.class, () -> device.capture(calls));
                    assertTrue(refused.getMessage().contains("one process per GPU"), refused.getMessage());
                    comm.barrier();
                    for (MemorySegment s : List.of(b, c, a2, b2, out)) {
                        device.freeDevice(s);
                    }
                    return null;
                }
                DeviceGraph graph = device.capture(calls);
                try {
                    for (int replay = 0; replay < 3; replay++) {
                        long seed = 900 + 100L * replay;
                        double[] a = wholeA(seed, rows, k, dtype);
                        double[] bb = random(seed + 50 + r, k * n, dtype);
                        MemorySegment shardHost = toHost(arena, rows(a, k, r * shard, shard), dtype);
                        device.copyFromHost(gathered.local().asSlice((long) r * shard * k * 4, shardHost.byteSize()), shardHost);
                        device.copyFromHost(b, toHost(arena, bb, dtype));
                        double[] want = new double[shard * n];
                        for (int q = 0; q < GPU.worldSize(); q++) {
                            double[] aq = random(seed + 60 + 2L * q, rows * k, dtype);
                            double[] bq = random(seed + 61 + 2L * q, k * n, dtype);
                            double[] part = matmul(rows(aq, k, r * shard, shard), false, bq, false, shard, n, k);
                            for (int i = 0; i < want.length; i++) {
                                want[i] += part[i];
                            }
                            if (q == r) {
                                device.copyFromHost(a2, toHost(arena, aq, dtype));
                                device.copyFromHost(b2, toHost(arena, bq, dtype));
                            }
                        }
                        graph.replay();
                        device.synchronize();
                        assertClose(download(device, arena, c, rows * n, dtype), matmul(a, false, bb, false, rows, n, k),
                                tolerance(dtype), "replay " + replay + " all-gather + matmul, rank " + r);
                        assertClose(download(device, arena, out, shard * n, dtype), want, 2 * tolerance(dtype),
                                "replay " + replay + " matmul + reduce-scatter, rank " + r);
                    }
                } finally {
                    graph.close();
                }
                comm.barrier();
                for (MemorySegment s : List.of(b, c, a2, b2, out)) {
                    device.freeDevice(s);
                }
            }
            return null;
        });
    }

    /**
     * The end-to-end GPU training test: three SGD steps of the tensor-parallel MLP block, gradients
     * averaged over the data-parallel dimension, against the unsharded block in float64.
     */
    @Test
    void mlpTrainsLikeTheUnshardedBlockOnADataByTensorParallelMesh() {
        int tp = GPU.worldSize() >= 4 && GPU.worldSize() % 2 == 0 ? 2 : GPU.worldSize();
        int dp = GPU.worldSize() / tp;
        int tokens = 64 * tp;
        int hidden = 96;
        int ffn = 96 * tp;
        int steps = 3;
        float lr = 0.05f;
        // the unsharded reference, float64: every rank computes it (cheap) and checks its own shards
        double[] w1 = random(7001, hidden * ffn, DType.FLOAT32);
        double[] w2 = random(7002, ffn * hidden, DType.FLOAT32);
        for (int i = 0; i < w1.length; i++) {
            w1[i] *= 0.2;
            w2[i] *= 0.2;
        }
        double[] refW1 = w1.clone();
        double[] refW2 = w2.clone();
        List<double[]> refY = new ArrayList<>();
        List<double[]> refDx = new ArrayList<>();
        for (int step = 0; step < steps; step++) {
            double[] g1 = new double[w1.length];
            double[] g2 = new double[w2.length];
            for (int d = 0; d < dp; d++) {
                double[] x = random(8000 + 10L * step + d, tokens * hidden, DType.FLOAT32);
                double[] gy = random(9000 + 10L * step + d, tokens * hidden, DType.FLOAT32);
                double[] z = matmul(x, false, refW1, false, tokens, ffn, hidden);
                double[] a = z.clone();
                for (int i = 0; i < a.length; i++) {
                    a[i] = Math.max(a[i], 0);
                }
                refY.add(matmul(a, false, refW2, false, tokens, hidden, ffn));
                double[] da = matmul(gy, false, refW2, true, tokens, ffn, hidden);
                for (int i = 0; i < da.length; i++) {
                    da[i] = z[i] > 0 ? da[i] : 0;
                }
                refDx.add(matmul(da, false, refW1, true, tokens, hidden, ffn));
                double[] gw2 = matmul(a, true, gy, false, ffn, hidden, tokens);
                double[] gw1 = matmul(x, true, da, false, hidden, ffn, tokens);
                for (int i = 0; i < g1.length; i++) {
                    g1[i] += gw1[i] / dp;
                    g2[i] += gw2[i] / dp;
                }
            }
            for (int i = 0; i < g1.length; i++) {
                refW1[i] -= lr * g1[i];
                refW2[i] -= lr * g2[i];
            }
        }
        GPU.onEveryRank(group -> {
            try (DeviceMesh mesh = DeviceMesh.of(group, "dp", dp, "tp", tp);
                 Communicator tpComm = Communicator.create(mesh.group("tp"));
                 Communicator dpComm = dp > 1 ? Communicator.create(mesh.group("dp")) : null;
                 TensorParallelMlp mlp = new TensorParallelMlp(tpComm, tokens, hidden, ffn, DType.FLOAT32);
                 Arena arena = Arena.ofConfined()) {
                int t = mesh.coordinate("tp");
                int d = mesh.coordinate("dp");
                int fs = ffn / tp;
                int shard = tokens / tp;
                DeviceCommunicator device = tpComm.unwrap(DeviceCommunicator.class).orElseThrow();
                double[] w1Shard = new double[hidden * fs];
                for (int h = 0; h < hidden; h++) {
                    System.arraycopy(w1, h * ffn + t * fs, w1Shard, h * fs, fs);
                }
                device.copyFromHost(mlp.w1(), toHost(arena, w1Shard, DType.FLOAT32));
                device.copyFromHost(mlp.w2(), toHost(arena, rows(w2, hidden, t * fs, fs), DType.FLOAT32));
                for (int step = 0; step < steps; step++) {
                    double[] x = random(8000 + 10L * step + d, tokens * hidden, DType.FLOAT32);
                    double[] gy = random(9000 + 10L * step + d, tokens * hidden, DType.FLOAT32);
                    device.copyFromHost(mlp.inputShard(), toHost(arena, rows(x, hidden, t * shard, shard), DType.FLOAT32));
                    mlp.forward(Mode.FUSED);
                    device.copyFromHost(mlp.outputGradientShard(), toHost(arena, rows(gy, hidden, t * shard, shard), DType.FLOAT32));
                    mlp.backward(Mode.FUSED);
                    String what = "step " + step + " dp " + d + " tp " + t;
                    assertClose(download(device, arena, mlp.output(), shard * hidden, DType.FLOAT32),
                            rows(refY.get(step * dp + d), hidden, t * shard, shard), 1e-5, what + ": output rows");
                    assertClose(download(device, arena, mlp.inputGradient(), shard * hidden, DType.FLOAT32),
                            rows(refDx.get(step * dp + d), hidden, t * shard, shard), 1e-5, what + ": input gradient rows");
                    if (dpComm != null) {
                        device.synchronize();
                        for (MemorySegment g : mlp.gradients()) {
                            long count = g.byteSize() / 4;
                            Algorithm alg = dpComm.supports(Algorithm.ONE_SHOT, DType.FLOAT32, ReduceOp.AVG, count)
                                    ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT;
                            dpComm.allReduce(g, count, DType.FLOAT32, ReduceOp.AVG, alg);
                        }
                        dpComm.unwrap(DeviceCommunicator.class).orElseThrow().synchronize();
                    }
                    mlp.sgdStep(lr);
                }
                double[] refW1Shard = new double[hidden * fs];
                for (int h = 0; h < hidden; h++) {
                    System.arraycopy(refW1, h * ffn + t * fs, refW1Shard, h * fs, fs);
                }
                assertClose(download(device, arena, mlp.w1(), hidden * fs, DType.FLOAT32), refW1Shard, 1e-5,
                        "W1 columns of tp rank " + t + " after " + steps + " steps (dp " + d + ")");
                assertClose(download(device, arena, mlp.w2(), fs * hidden, DType.FLOAT32), rows(refW2, hidden, t * fs, fs), 1e-5,
                        "W2 rows of tp rank " + t + " after " + steps + " steps (dp " + d + ")");
            }
            return null;
        });
    }
}
