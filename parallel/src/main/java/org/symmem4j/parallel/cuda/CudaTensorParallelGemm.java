package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.function.UnaryOperator;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TensorParallelGemm;
import org.symmem4j.parallel.cuda.ffi.Cublas;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.trace.Nvtx;

/**
 * {@link TensorParallelGemm} on the CUDA transport: cuBLAS for the GEMMs on the communicator's stream, a
 * second stream of this rank for the copy engine's transfers, events to fork and join the two (graph
 * capture turns them into edges), and the signal kernels of the symmetric memory for the meetings.
 *
 * <p>Fused all-gather + matmul on rank r (W ranks; each peer's block whole on 2 ranks, else cut into chunks of
 * {@link #chunkRows(int)} rows so the GEMMs start before a whole block has arrived):
 * <pre>
 *  main stream:  meet(READY) ─ GEMM(rows r) ─ wait(e₁) GEMM(chunk 1) ─ wait(e₂) GEMM(chunk 2) … ─ meet(DONE)
 *  copy stream:          └─ copy chunk 1 from its owner, record e₁ ─ copy chunk 2, record e₂ …
 * </pre>
 * Fused matmul + reduce-scatter: GEMM the rows of the next peer's block into this rank's sending slot,
 * record, and let the copy stream push them into that peer's receiving slot {@code r} while the next GEMM
 * runs; the own block goes straight to receiving slot r; then meet(READY) — every push into this rank
 * has landed — sum the W receiving slots in rank order, and meet(DONE) so no peer pushes the next
 * call's tiles before this rank has read them.
 *
 * <p>A meeting is a signal of +1 to every peer's slot and a consuming wait for W−1 on this rank's
 * slot (counting semaphores: a captured graph replays with the same thresholds). Stream order makes it
 * safe: a rank signals only after everything before it on its stream — the copies it waited for
 * included — has completed, and the signal kernel's release pairs with the waiter's acquire.
 */
final class CudaTensorParallelGemm implements TensorParallelGemm {

    /**
     * {@code -Dsymmem4j.tp.enqueue.order=false} ({@link Configuration#TP_ENQUEUE_ORDER}) lets the ranks' hosts enqueue
     * fused calls out of step (see {@link EnqueueOrder}): only to reproduce the deadlock it prevents.
     */
    static final boolean ENQUEUE_ORDER = Configuration.TP_ENQUEUE_ORDER.get();
    /**
     * {@code -Dsymmem4j.tp.fused.graphs.in.one.jvm=true} ({@link Configuration#TP_FUSED_GRAPHS_IN_ONE_JVM}) lets ranks
     * that are threads of one JVM capture fused calls in CUDA graphs. Off by default: such graphs, and eager fused calls after their replays, deadlocked the GPUs (3 of 4 runs on
     * 2 and 4 GPUs on 2026-11-26, 2 of 2 first replays on 4 × H200 on 2026-11-27; none of 6 runs with a process per GPU,
     * bench/results/2026-11-27-nvshmem.md), so the capture is refused with the way out instead.
     */
    static final boolean FUSED_GRAPHS_IN_ONE_JVM = Configuration.TP_FUSED_GRAPHS_IN_ONE_JVM.get();
    /**
     * NVTX ranges (nothing without NVTX): local GEMMs (payload: C's size), and the collective GEMMs by {@link Mode} in
     * its order, then one for a null mode (payload: the gathered A's, or the reduced partial sums', size in bytes).
     */
    private static final Nvtx.Range NVTX_MATMUL = Nvtx.range("symmem4j matmul");
    private static final Nvtx.Range[] NVTX_ALL_GATHER_MATMUL = byMode("symmem4j all_gather_matmul");
    private static final Nvtx.Range[] NVTX_MATMUL_REDUCE_SCATTER = byMode("symmem4j matmul_reduce_scatter");
    /** At most this many chunks per peer block. */
    static final int MAX_CHUNKS = 8;
    /**
     * Rows per chunk of a peer's block ({@code -Dsymmem4j.tp.chunk.rows}, {@link Configuration#TP_CHUNK_ROWS}; 0 moves
     * and multiplies each peer's block whole), or -1 when unset: then {@link #chunkRows(int)} picks by the group's size.
     */
    static final int CHUNK_ROWS_SET = Configuration.TP_CHUNK_ROWS.isSet() ? Configuration.TP_CHUNK_ROWS.get() : -1;
    /** The chunk rows for more than 2 ranks when {@code -Dsymmem4j.tp.chunk.rows} is unset. */
    static final int DEFAULT_CHUNK_ROWS = 1024;

    private final CudaCommunicator comm;
    private final CudaRank rank;
    private final CudaDriver driver;
    private final int world;
    private final int me;
    private final MemorySegment copyStream;
    private final long workspace;
    private final MemorySegment handle;
    private final MemorySegment fork;
    /** One event per chunk of a call, grown as needed (recorded and waited for in host order). */
    private final List<MemorySegment> chunkEvents = new ArrayList<>();
    /** GEMM shapes this rank has run in a collective call (their cuBLAS kernels are loaded: see {@link #loadKernels}). */
    private final Set<String> loaded = new HashSet<>();
    /** This rank's seat in the fused calls' enqueue order (null: ranks in processes of their own, or off). */
    private EnqueueOrder.Seat order;
    private boolean orderJoined;
    private boolean closed;

    CudaTensorParallelGemm(CudaCommunicator comm, CudaRank rank, CudaDriver driver, int world, int me) {
        this.comm = comm;
        this.rank = rank;
        this.driver = driver;
        this.world = world;
        this.me = me;
        Cublas cublas = Cublas.get();
        driver.setCurrent(rank.context);
        this.copyStream = driver.createStream(CudaDriver.STREAM_NON_BLOCKING);
        long ws = 0;
        MemorySegment h = null;
        try {
            ws = driver.malloc(Cublas.WORKSPACE_BYTES);
            h = cublas.createHandle(rank.stream, ws);
            this.fork = driver.createEvent(CudaDriver.EVENT_DISABLE_TIMING);
        } catch (RuntimeException e) {
            if (h != null) {
                cublas.destroyHandle(h);
            }
            if (ws != 0) {
                driver.free(ws);
            }
            driver.destroyStream(copyStream);
            throw e;
        }
        this.workspace = ws;
        this.handle = h;
        // saxpy's kernel loads now, while nothing of this group waits on the GPU (see loadKernels)
        cublas.saxpy(handle, 1, 0f, workspace, workspace);
        driver.synchronize(rank.stream);
    }

    @Override
    public String gemmLibrary() {
        return "cuBLAS (" + Cublas.get().library() + ")";
    }

    @Override
    public String fusedChunking() {
        int rows = chunkRows(world);
        return rows <= 0 ? "each peer's block whole" : "each peer's block in chunks of " + rows + " rows (at most "
                + MAX_CHUNKS + " a block)";
    }

    @Override
    public String unavailableReason(Mode mode) {
        return switch (Objects.requireNonNull(mode, "mode")) {
            case NCCL -> comm.supports(Algorithm.NCCL) ? null : "NCCL: " + comm.ncclUnavailableReason();
            case FUSED, SYMMEM -> rank.kernels == null ? "symmem4j's CUDA kernels are absent (built without nvcc)" : null;
        };
    }

    private void checkMode(Mode mode) {
        String why = unavailableReason(mode);
        if (why != null) {
            throw new UnsupportedOperationException("tensor-parallel GEMM in mode " + mode + " cannot run here: " + why
                    + " (fix: ask unavailableReason(mode) first and pick a mode it returns null for)");
        }
    }

    private static Nvtx.Range[] byMode(String name) {
        Mode[] modes = Mode.values();
        Nvtx.Range[] ranges = new Nvtx.Range[modes.length + 1];
        for (Mode mode : modes) {
            ranges[mode.ordinal()] = Nvtx.range(name + " " + mode.name().toLowerCase(java.util.Locale.ROOT));
        }
        ranges[modes.length] = Nvtx.range(name);
        return ranges;
    }

    private static Nvtx.Range nvtx(Nvtx.Range[] byMode, Mode mode) {
        return byMode[mode == null ? byMode.length - 1 : mode.ordinal()];
    }

    @Override
    public synchronized void matmul(MemorySegment c, MemorySegment a, boolean transA, MemorySegment b, boolean transB,
                                    int m, int n, int k, boolean accumulate, DType dtype) {
        Nvtx.push(NVTX_MATMUL, (long) m * n, dtype);
        try {
            checkOpen();
            checkDims(m, n, k, dtype);
            need("c", c, (long) m * n, dtype);
            need("a", a, (long) m * k, dtype);
            need("b", b, (long) k * n, dtype);
            driver.setCurrent(rank.context);
            gemm(c.address(), a.address(), transA, b.address(), transB, m, n, k, accumulate, dtype);
        } finally {
            Nvtx.pop();
        }
    }

    @Override
    public synchronized void matmul(MemorySegment c, MemorySegment a, int lda, boolean transA, MemorySegment b,
                                    boolean transB, int m, int n, int k, boolean accumulate, DType dtype) {
        Nvtx.push(NVTX_MATMUL, (long) m * n, dtype);
        try {
            checkOpen();
            checkDims(m, n, k, dtype);
            int row = transA ? m : k;
            int stored = transA ? k : m;
            if (lda < row) {
                throw new IllegalArgumentException("lda=" + lda + ": expected at least a stored row of a, " + row
                        + " elements (fix: pass the row length of the matrix a is a block of)");
            }
            need("c", c, (long) m * n, dtype);
            need("a", a, (long) (stored - 1) * lda + row, dtype);
            need("b", b, (long) k * n, dtype);
            driver.setCurrent(rank.context);
            Cublas.get().gemm(handle, c.address(), a.address(), lda, b.address(), m, n, k, transA, transB, accumulate, dtype);
        } finally {
            Nvtx.pop();
        }
    }

    private void gemm(long c, long a, boolean transA, long b, boolean transB, int m, int n, int k, boolean accumulate, DType dtype) {
        Cublas.get().gemm(handle, c, a, b, m, n, k, transA, transB, accumulate, dtype);
    }

    @Override
    public synchronized void allGatherMatmul(SymmetricMemory gathered, long offsetBytes, MemorySegment b, boolean transB,
                                             MemorySegment c, int rows, int n, int k, DType dtype, Mode mode) {
        Nvtx.push(nvtx(NVTX_ALL_GATHER_MATMUL, mode), (long) rows * k, dtype);
        try {
            CudaSymmetricMemory memory = checkCollective(gathered, "gathered", rows, n, k, dtype, mode);
            long elt = dtype.byteSize();
            long rowBytes = k * elt;
            checkFits("gathered", memory, offsetBytes, rows * rowBytes, dtype, "a " + rows + "×" + k + " " + dtype + " matrix");
            need("b", b, (long) k * n, dtype);
            need("c", c, (long) rows * n, dtype);
            driver.setCurrent(rank.context);
            int shardRows = rows / world;
            long mine = memory.bufferPointer(me) + offsetBytes;
            int chunks = chunksPerBlock(shardRows, chunkRows(world));
            loadKernels(c.address(), mine, b.address(), transB, n, k, dtype, gemmRows(mode, rows, shardRows, chunks));
            switch (mode) {
                case NCCL -> {
                    // in place: NCCL's all-gather with sendbuff == recvbuff + rank * sendcount
                    Nccl.get().allGather(mine + me * shardRows * rowBytes, mine, (long) shardRows * k, dtype,
                            comm.requireNccl(), rank.stream);
                    gemm(c.address(), mine, false, b.address(), transB, rows, n, k, false, dtype);
                }
                case SYMMEM -> {
                    checkEqualBlocks((long) rows * k, dtype, (long) shardRows * k);
                    comm.allGather(gathered, offsetBytes, (long) rows * k, dtype);
                    gemm(c.address(), mine, false, b.address(), transB, rows, n, k, false, dtype);
                }
                case FUSED -> {
                    EnqueueOrder.Seat seat = enterOrder();
                    meet(memory, READY_SLOT);
                    // fork: the copy stream starts after the meeting (every block is in place on its owner)
                    driver.record(fork, rank.stream);
                    driver.waitEvent(copyStream, fork);
                    long cRowBytes = n * elt;
                    gemm(c.address() + me * shardRows * cRowBytes, mine + me * shardRows * rowBytes, false, b.address(), transB,
                            shardRows, n, k, false, dtype);
                    int e = 0;
                    for (int step = 1; step < world; step++) {
                        int peer = (me + step) % world;
                        long theirs = memory.bufferPointer(peer) + offsetBytes;
                        for (int chunk = 0; chunk < chunks; chunk++) {
                            int lo = peer * shardRows + chunkStart(shardRows, chunks, chunk);
                            int count = chunkStart(shardRows, chunks, chunk + 1) - chunkStart(shardRows, chunks, chunk);
                            MemorySegment event = chunkEvent(e++);
                            driver.copyDeviceToDeviceAsync(mine + lo * rowBytes, theirs + lo * rowBytes, count * rowBytes, copyStream);
                            driver.record(event, copyStream);
                            // join: this chunk's GEMM reads what the copy wrote
                            driver.waitEvent(rank.stream, event);
                            gemm(c.address() + lo * cRowBytes, mine + lo * rowBytes, false, b.address(), transB, count, n, k, false, dtype);
                        }
                    }
                    // every copy of this rank has completed on the main stream's timeline (it waited for each)
                    meet(memory, DONE_SLOT);
                    exitOrder(seat);
                }
            }
        } finally {
            Nvtx.pop();
        }
    }

    @Override
    public synchronized void matmulReduceScatter(MemorySegment a, MemorySegment b, boolean transB, SymmetricMemory partials,
                                                 long offsetBytes, MemorySegment out, int rows, int n, int k, DType dtype,
                                                 Mode mode) {
        Nvtx.push(nvtx(NVTX_MATMUL_REDUCE_SCATTER, mode), (long) rows * n, dtype);
        try {
            CudaSymmetricMemory memory = checkCollective(partials, "partials", rows, n, k, dtype, mode);
            long elt = dtype.byteSize();
            long need = TensorParallelGemm.partialsBytes(rows, n, dtype);
            checkFits("partials", memory, offsetBytes, need, dtype, need + " bytes (TensorParallelGemm.partialsBytes(" + rows
                    + ", " + n + ", " + dtype + "))");
            need("a", a, (long) rows * k, dtype);
            need("b", b, (long) k * n, dtype);
            int shardRows = rows / world;
            need("out", out, (long) shardRows * n, dtype);
            driver.setCurrent(rank.context);
            long rowBytes = n * elt;
            long slotBytes = shardRows * rowBytes;
            long aRowBytes = k * elt;
            long recv = memory.bufferPointer(me) + offsetBytes;
            long send = recv + world * slotBytes;
            int chunks = chunksPerBlock(shardRows, chunkRows(world));
            loadKernels(send, a.address(), b.address(), transB, n, k, dtype, gemmRows(mode, rows, shardRows, chunks));
            switch (mode) {
                case NCCL -> {
                    gemm(send, a.address(), false, b.address(), transB, rows, n, k, false, dtype);
                    Nccl.get().reduceScatter(send, out.address(), (long) shardRows * n, dtype, ReduceOp.SUM, comm.requireNccl(),
                            rank.stream);
                }
                case SYMMEM -> {
                    checkEqualBlocks((long) rows * n, dtype, (long) shardRows * n);
                    gemm(recv, a.address(), false, b.address(), transB, rows, n, k, false, dtype);
                    comm.reduceScatter(partials, offsetBytes, (long) rows * n, dtype, ReduceOp.SUM);
                    driver.copyDeviceToDeviceAsync(out.address(), recv + me * slotBytes, slotBytes, rank.stream);
                }
                case FUSED -> {
                    EnqueueOrder.Seat seat = enterOrder();
                    int e = 0;
                    for (int step = 1; step < world; step++) {
                        int peer = (me + step) % world;
                        long theirSlot = memory.bufferPointer(peer) + offsetBytes + me * slotBytes;
                        long mySendSlot = send + peer * slotBytes;
                        for (int chunk = 0; chunk < chunks; chunk++) {
                            int lo = chunkStart(shardRows, chunks, chunk);
                            int count = chunkStart(shardRows, chunks, chunk + 1) - lo;
                            gemm(mySendSlot + lo * rowBytes, a.address() + ((long) peer * shardRows + lo) * aRowBytes, false,
                                    b.address(), transB, count, n, k, false, dtype);
                            MemorySegment event = chunkEvent(e++);
                            driver.record(event, rank.stream);
                            // fork: the push reads what this GEMM wrote, while the next GEMM runs
                            driver.waitEvent(copyStream, event);
                            driver.copyDeviceToDeviceAsync(theirSlot + lo * rowBytes, mySendSlot + lo * rowBytes, count * rowBytes,
                                    copyStream);
                        }
                    }
                    gemm(recv + me * slotBytes, a.address() + (long) me * shardRows * aRowBytes, false, b.address(), transB,
                            shardRows, n, k, false, dtype);
                    // join: the meeting below signals only after every push of this rank has landed
                    driver.record(fork, copyStream);
                    driver.waitEvent(rank.stream, fork);
                    meet(memory, READY_SLOT);
                    launchElementwise(Kernel.sumSlots(dtype == DType.FLOAT32), (long) shardRows * n, l -> l
                            .pointer(recv).pointer(out.address()).size((long) shardRows * n).integer(world));
                    meet(memory, DONE_SLOT);
                    exitOrder(seat);
                }
            }
        } finally {
            Nvtx.pop();
        }
    }

    @Override
    public synchronized void relu(MemorySegment in, MemorySegment out, long count, DType dtype) {
        checkOpen();
        checkElementwise(dtype);
        need("in", in, count, dtype);
        need("out", out, count, dtype);
        driver.setCurrent(rank.context);
        launchElementwise(Kernel.relu(dtype == DType.FLOAT32), count,
                l -> l.pointer(in.address()).pointer(out.address()).size(count));
    }

    @Override
    public synchronized void reluBackward(MemorySegment grad, MemorySegment pre, MemorySegment out, long count, DType dtype) {
        checkOpen();
        checkElementwise(dtype);
        need("grad", grad, count, dtype);
        need("pre", pre, count, dtype);
        need("out", out, count, dtype);
        driver.setCurrent(rank.context);
        launchElementwise(Kernel.reluBackward(dtype == DType.FLOAT32), count,
                l -> l.pointer(grad.address()).pointer(pre.address()).pointer(out.address()).size(count));
    }

    @Override
    public synchronized void axpy(float alpha, MemorySegment x, MemorySegment y, long count) {
        checkOpen();
        if (count < 0 || count > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("axpy count=" + count + ": expected 0 <= count <= " + Integer.MAX_VALUE
                    + " (fix: split a larger update into calls of at most that many elements)");
        }
        need("x", x, count, DType.FLOAT32);
        need("y", y, count, DType.FLOAT32);
        driver.setCurrent(rank.context);
        Cublas.get().saxpy(handle, (int) count, alpha, x.address(), y.address());
    }

    @Override
    public synchronized void castToBfloat16(MemorySegment in, MemorySegment out, long count) {
        checkOpen();
        checkCount("castToBfloat16", count);
        need("in", in, count, DType.FLOAT32);
        need("out", out, count, DType.BFLOAT16);
        if (count == 0) {
            return;
        }
        driver.setCurrent(rank.context);
        launchElementwise(Kernel.CAST_F32_BF16, count, l -> l.pointer(in.address()).pointer(out.address()).size(count));
    }

    @Override
    public synchronized void adamStep(MemorySegment params, MemorySegment m, MemorySegment v, MemorySegment gradient,
                                      MemorySegment bf16Copy, long count, float gradientScale, float learningRate,
                                      float beta1, float beta2, float epsilon, long step) {
        checkOpen();
        checkCount("adamStep", count);
        if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(epsilon > 0) || !Float.isFinite(learningRate)
                || !Float.isFinite(gradientScale) || step < 1) {
            throw new IllegalArgumentException("adamStep beta1=" + beta1 + " beta2=" + beta2 + " epsilon=" + epsilon
                    + " learningRate=" + learningRate + " gradientScale=" + gradientScale + " step=" + step
                    + ": expected 0 <= beta1, beta2 < 1, epsilon > 0, finite learningRate and gradientScale, step >= 1"
                    + " (fix: pass values in those ranges, e.g. beta1=0.9 beta2=0.999 epsilon=1e-8, step counted from 1)");
        }
        need("params", params, count, DType.FLOAT32);
        need("m", m, count, DType.FLOAT32);
        need("v", v, count, DType.FLOAT32);
        need("gradient", gradient, count, DType.BFLOAT16);
        if (bf16Copy != null) {
            need("bf16Copy", bf16Copy, count, DType.BFLOAT16);
        }
        if (count == 0) {
            return;
        }
        // torch computes the bias corrections in Python floats (double): so do we, then round once
        float stepSize = (float) (learningRate / (1 - Math.pow(beta1, step)));
        float sqrtBias2 = (float) Math.sqrt(1 - Math.pow(beta2, step));
        long copy = bf16Copy == null ? 0 : bf16Copy.address();
        driver.setCurrent(rank.context);
        launchElementwise(Kernel.ADAM_BF16, count, l -> l.pointer(params.address()).pointer(m.address()).pointer(v.address())
                .pointer(gradient.address()).pointer(copy).size(count).floating(gradientScale).floating(beta1).floating(beta2)
                .floating(stepSize).floating(sqrtBias2).floating(epsilon));
    }

    private static void checkCount(String what, long count) {
        if (count < 0) {
            throw new IllegalArgumentException(what + " count=" + count + ": expected count >= 0 (fix: pass the number"
                    + " of elements, 0 or more)");
        }
    }

    /** Closes the copy stream, the events, the cuBLAS handle and its workspace (after this rank's streams drain). */
    synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        driver.setCurrent(rank.context);
        driver.synchronize(copyStream);
        driver.synchronize(rank.stream);
        Cublas.get().destroyHandle(handle);
        driver.free(workspace);
        if (order != null) {
            order.leave();
        }
        driver.destroyEvent(fork);
        for (MemorySegment event : chunkEvents) {
            driver.destroyEvent(event);
        }
        driver.destroyStream(copyStream);
    }

    // ---- helpers ----

    private void launchElementwise(Kernel kernel, long count, UnaryOperator<CudaLaunch> args) {
        // 4 elements a thread is plenty for a bandwidth-bound loop; the budget caps the grid
        int blocks = rank.ownGrid(kernel, Math.max(1, (count + 4L * kernel.blockThreads - 1) / (4L * kernel.blockThreads)));
        try (Arena a = Arena.ofConfined()) {
            rank.launch(driver, kernel, blocks, args.apply(new CudaLaunch(a)).array());
        }
    }

    /**
     * Collective, on a call's first use of a GEMM shape: runs each shape's GEMM once into the call's own output (which
     * the call overwrites), waits for it and meets the group on the host. cuBLAS loads a kernel at its first launch
     * (CUDA's lazy loading), and a load waits until the GPU is idle; issued after this rank's stream — or a peer's on
     * the same GPU — already spins in a meeting or in NCCL waiting for a rank whose host is itself stuck in such a load,
     * it never returns (seen: 4 ranks on 2 H100s). After the first call every kernel is loaded and nothing here blocks
     * the host. Every rank passes the same shapes (same arguments), so all of them meet or none.
     *
     * @throws IllegalStateException during graph capture when a shape was never run eagerly (the meeting cannot be captured)
     */
    private void loadKernels(long out, long a, long b, boolean transB, int n, int k, DType dtype, int[] rowCounts) {
        List<String> fresh = new ArrayList<>();
        for (int m : rowCounts) {
            String key = m + "x" + n + "x" + k + (transB ? "T" : "N") + dtype;
            if (m > 0 && !loaded.contains(key) && !fresh.contains(key)) {
                fresh.add(key);
            }
        }
        if (fresh.isEmpty()) {
            return;
        }
        if (rank.capturing) {
            throw new IllegalStateException("tensor-parallel GEMM shapes " + fresh + " were never run before this graph capture:"
                    + " make the same calls once eagerly first (their first run loads cuBLAS's kernels and meets the group on"
                    + " the host, which a capture cannot hold; fix: run those calls once outside the capture)");
        }
        for (int m : rowCounts) {
            String key = m + "x" + n + "x" + k + (transB ? "T" : "N") + dtype;
            if (fresh.contains(key) && loaded.add(key)) {
                gemm(out, a, false, b, transB, m, n, k, false, dtype);
            }
        }
        driver.synchronize(rank.stream);
        comm.group().allGatherBytes("tensor-parallel-gemm-kernels-loaded", new byte[0]);
    }

    /**
     * Before a fused call's first enqueue: waits until every peer has enqueued its previous fused call (see
     * {@link EnqueueOrder}; the first fused call joins the order, collectively). While capturing, nothing waits: the
     * graph's replays keep the order instead. Returns the seat to {@link #exitOrder} after the call's last enqueue.
     */
    private EnqueueOrder.Seat enterOrder() {
        if (!ENQUEUE_ORDER) {
            return null;
        }
        if (!orderJoined) {
            if (rank.capturing) {
                throw new IllegalStateException("a fused tensor-parallel call in a graph capture before any eager one: make the"
                        + " same calls once eagerly first (the first fused call joins the ranks' enqueue order on the host,"
                        + " which a capture cannot hold; fix: run those calls once outside the capture)");
            }
            order = EnqueueOrder.join(comm.group(), "tensor-parallel-gemm");
            orderJoined = true;
        }
        if (order == null) {
            return null;
        }
        if (rank.capturing) {
            if (!FUSED_GRAPHS_IN_ONE_JVM) {
                throw new IllegalStateException("fused tensor-parallel calls captured in a CUDA graph with the ranks as threads"
                        + " of one JVM: such graphs deadlocked the GPUs (bench/results/2026-11-27-nvshmem.md); fix: run one process"
                        + " per GPU (bin/symmem4j-run --nproc-per-node <GPUs>, ProcessGroup.fromEnvironment(options,"
                        + " CudaTransport.create())), capture Mode.NCCL or Mode.SYMMEM calls instead, or call fused eagerly;"
                        + " -Dsymmem4j.tp.fused.graphs.in.one.jvm=true captures them anyway");
            }
            rank.capturedOrder = order;
            return null;
        }
        order.enter();
        return order;
    }

    private static void exitOrder(EnqueueOrder.Seat seat) {
        if (seat != null) {
            seat.exit();
        }
    }

    /** Signal +1 to every peer's {@code slot}, then wait (consuming) for W−1 on this rank's. */
    private void meet(CudaSymmetricMemory memory, int slot) {
        for (int peer = 0; peer < world; peer++) {
            if (peer != me) {
                // release (system scope, in the signal kernel): everything before it on this stream is visible to the peer
                memory.signal(peer, slot, 1, SignalOp.ADD);
            }
        }
        // acquire: pairs with every peer's release above; consuming keeps the slot a semaphore for the next call
        memory.enqueueWaitSignal(slot, world - 1, true);
    }

    private MemorySegment chunkEvent(int index) {
        while (chunkEvents.size() <= index) {
            chunkEvents.add(driver.createEvent(CudaDriver.EVENT_DISABLE_TIMING));
        }
        return chunkEvents.get(index);
    }

    /**
     * The row counts a call's GEMMs run with: fused, the own block and the chunks (at most two sizes, nearly equal
     * chunks); unfused, all rows at once.
     */
    private static int[] gemmRows(Mode mode, int rows, int shardRows, int chunks) {
        return mode == Mode.FUSED
                ? new int[] {shardRows, chunkStart(shardRows, chunks, 1), shardRows - chunkStart(shardRows, chunks, chunks - 1)}
                : new int[] {rows};
    }

    /** Refuses, naming {@code what} and {@code describes}, {@code bytes} at {@code offsetBytes} that do not fit {@code memory}. */
    private static void checkFits(String what, CudaSymmetricMemory memory, long offsetBytes, long bytes, DType dtype,
                                  String describes) {
        long elt = dtype.byteSize();
        if (offsetBytes < 0 || offsetBytes % elt != 0 || offsetBytes > memory.byteSize() - bytes) {
            throw new IllegalArgumentException(what + ": " + describes + " at offsetBytes=" + offsetBytes + " does not fit its "
                    + memory.byteSize() + " bytes (or the offset is not a multiple of " + elt + "; fix: pass an offset"
                    + " that is a multiple of " + elt + " and leaves room for " + bytes + " bytes)");
        }
    }

    /**
     * The rows per chunk of a peer's block for a group of {@code world} ranks: {@code -Dsymmem4j.tp.chunk.rows} when set,
     * else whole blocks (0) on 2 ranks and {@link #DEFAULT_CHUNK_ROWS} on more.
     *
     * <p>Why: the own block's GEMM runs first, while the first peer's block is copied in, and each peer block's GEMM
     * while the next one is copied, so the copies hide behind the GEMMs whenever a block's GEMM takes longer than its
     * copy (N × link bandwidth ≥ GEMM throughput: from N of about 1500 on H100/H200 NVLink), and chunks then only make
     * the GEMMs smaller and the host's enqueue longer. Measured (bench/results/2026-11-27-gpu-2x-targets.md): on
     * 2 × H200, whole blocks against 1024-row chunks, eager fused calls met 1.2× cuBLAS + NCCL at M ≥ 8192 in 23 of 24
     * cells against 18 of 24 (graph-captured within the noise, 15 against 17), and the MLP block's graph-captured
     * overhead was −0.2 to 1.9 % against 2.5 to 5.2 %; 2 × H100 the same direction. On 4 × H200 (two runs each) the two
     * were even but for the reduce-scatter at N = 1792, where chunks did better (eager 1.46-1.51× against
     * 1.38-1.43×): more ranks keep the chunks. 8 GPUs: not measured.
     */
    static int chunkRows(int world) {
        if (CHUNK_ROWS_SET >= 0) {
            return CHUNK_ROWS_SET;
        }
        return world == 2 ? 0 : DEFAULT_CHUNK_ROWS;
    }

    /**
     * Chunks per peer block of {@code shardRows} rows: one with {@code chunkRows} 0, else {@code chunkRows} rows each (the
     * last may be shorter), at most {@link #MAX_CHUNKS}.
     */
    static int chunksPerBlock(int shardRows, int chunkRows) {
        if (chunkRows <= 0) {
            return 1;
        }
        return (int) Math.max(1, Math.min(MAX_CHUNKS, ((long) shardRows + chunkRows - 1) / chunkRows));
    }

    /** Start row of chunk {@code i} of {@code chunks} nearly equal chunks of {@code rows} rows. */
    static int chunkStart(int rows, int chunks, int i) {
        return (int) ((long) rows * i / chunks);
    }

    /**
     * What both collective GEMMs check first, in this order: open, the mode can run here, {@code memory} is this group's,
     * the dimensions and dtype, and rows that split into equal blocks. Returns the memory as this transport's.
     */
    private CudaSymmetricMemory checkCollective(SymmetricMemory memory, String what, int rows, int n, int k, DType dtype,
                                                Mode mode) {
        checkOpen();
        checkMode(mode);
        CudaSymmetricMemory own = ownMemory(memory, what);
        checkDims(rows, n, k, dtype);
        checkRows(rows);
        return own;
    }

    private CudaSymmetricMemory ownMemory(SymmetricMemory memory, String what) {
        Objects.requireNonNull(memory, what);
        if (!(memory instanceof CudaSymmetricMemory cuda) || memory.group() != comm.group()) {
            throw new IllegalArgumentException(what + ": symmetric memory of this communicator's group expected, found one of "
                    + memory.group() + " (fix: allocate it with SymmetricMemory.allocate(group, bytes) on the"
                    + " same group)");
        }
        if (memory.signalSlots() <= DONE_SLOT) {
            throw new IllegalArgumentException(what + ": " + memory.signalSlots() + " signal slots, the fused calls need "
                    + (DONE_SLOT + 1) + " (fix: allocate it with SymmetricMemory.allocate(group, bytes), which gives"
                    + " the default number of slots)");
        }
        return cuda;
    }

    private void checkRows(int rows) {
        if (rows % world != 0) {
            throw new IllegalArgumentException("rows=" + rows + " does not split into " + world
                    + " equal blocks (fix: pad M to a multiple of the tensor-parallel size)");
        }
    }

    private void checkEqualBlocks(long count, DType dtype, long block) {
        ShardPartition p = ShardPartition.of(count, world, dtype);
        for (int r = 0; r < world; r++) {
            if (p.start(r) != r * block || p.size(r) != block) {
                throw new IllegalArgumentException("mode SYMMEM needs the collective's blocks to be the row blocks: rank " + r
                        + "'s block is [" + p.start(r) + ", " + p.end(r) + ") elements, the rows' [" + r * block + ", "
                        + (r + 1) * block + ") (rows of " + ShardPartition.ALIGN_BYTES + "-byte multiples fit); fix: use"
                        + " FUSED or NCCL");
            }
        }
    }

    private static void checkDims(int m, int n, int k, DType dtype) {
        if (m <= 0 || n <= 0 || k <= 0) {
            throw new IllegalArgumentException("GEMM dimensions m=" + m + " n=" + n + " k=" + k + ": expected all positive"
                    + " (fix: pass the matrices' row and column counts, each >= 1)");
        }
        if (dtype != DType.FLOAT32 && dtype != DType.BFLOAT16) {
            throw new IllegalArgumentException("GEMM dtype " + dtype + ": expected FLOAT32 or BFLOAT16 (fix: convert"
                    + " the operands to one of them)");
        }
    }

    private static void checkElementwise(DType dtype) {
        if (dtype != DType.FLOAT32 && dtype != DType.BFLOAT16) {
            throw new IllegalArgumentException("dtype " + dtype + ": expected FLOAT32 or BFLOAT16 (fix: convert the"
                    + " operands to one of them)");
        }
    }

    private static void need(String what, MemorySegment buffer, long elements, DType dtype) {
        Objects.requireNonNull(buffer, what);
        long bytes = elements * dtype.byteSize();
        if (buffer.byteSize() < bytes) {
            throw new IllegalArgumentException(what + ": " + buffer.byteSize() + " bytes, expected at least " + bytes
                    + " (" + elements + " " + dtype + " elements; fix: pass a buffer of at least " + bytes + " bytes)");
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("tensor-parallel GEMMs of rank " + me + " are closed (their communicator was"
                    + " closed; fix: call them before closing the communicator, or create new ones)");
        }
    }
}
