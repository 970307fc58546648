package org.symmem4j.parallel.tensor;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Objects;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TensorParallelGemm;
import org.symmem4j.parallel.TensorParallelGemm.Mode;
import org.symmem4j.parallel.trace.Nvtx;

/**
 * Megatron's MLP block with sequence parallelism on the GPUs of a tensor-parallel group: {@code y = relu(x ·
 * W1) · W2}, {@code x} and {@code y} being {@code tokens × hidden}, {@code W1} {@code hidden × ffn} split by
 * columns and {@code W2} {@code ffn × hidden} split by rows over the W ranks, the tokens split in W blocks of
 * rows between the blocks:
 *
 * <pre>
 *  forward   x rows r ─▶ [all-gather + matmul W1_r] ─▶ z (tokens × ffn/W) ─▶ relu ─▶ a ─▶ [matmul W2_r + reduce-scatter] ─▶ y rows r
 *  backward  dy rows r ─▶ [all-gather + matmul W2_rᵀ] ─▶ da ─▶ relu' (z) ─▶ dz ─▶ [matmul W1_rᵀ + reduce-scatter] ─▶ dx rows r
 *            dW2_r = aᵀ · dy (gathered),  dW1_r = xᵀ (gathered) · dz
 * </pre>
 *
 * One fused all-gather + matmul and one fused matmul + reduce-scatter each way ({@link Mode} picks fused or
 * unfused). Write this rank's rows of {@code x} into {@link #inputShard()} and of {@code dy} into
 * {@link #outputGradientShard()} (in stream order: {@link DeviceCommunicator#copyAsync} or a kernel), then
 * call {@link #forward} and {@link #backward}; {@link #gradients()} are this rank's shards of the weights'
 * gradients (all-reduce them over the data-parallel group), {@link #sgdStep} applies them (float32).
 * Everything is enqueued on the communicator's stream and can be captured into a graph (in {@code Mode.FUSED} with one
 * process per GPU: with the ranks as threads of one JVM fused captures are refused, they deadlocked).
 */
public final class TensorParallelMlp implements AutoCloseable {

    /**
     * NVTX ranges around each step, over the GEMMs' own ranges (nothing without NVTX). Payload: the whole input's
     * ({@code tokens × hidden}) size in bytes for the passes, both weight shards' for the step.
     */
    private static final Nvtx.Range NVTX_FORWARD = Nvtx.range("symmem4j tp_mlp forward");
    private static final Nvtx.Range NVTX_BACKWARD = Nvtx.range("symmem4j tp_mlp backward");
    private static final Nvtx.Range NVTX_SGD_STEP = Nvtx.range("symmem4j tp_mlp sgd_step");

    private final Communicator communicator;
    private final DeviceCommunicator device;
    private final TensorParallelGemm gemm;
    private final int world;
    private final int rank;
    private final int tokens;
    private final int hidden;
    private final int ffnShard;
    private final DType dtype;
    private final long elt;
    private final SymmetricMemory xGathered;
    private final SymmetricMemory dyGathered;
    private final SymmetricMemory partials;
    private final MemorySegment w1;
    private final MemorySegment w2;
    private final MemorySegment dw1;
    private final MemorySegment dw2;
    private final MemorySegment z;
    private final MemorySegment a;
    private final MemorySegment da;
    private final MemorySegment y;
    private final MemorySegment dx;
    private boolean closed;

    /**
     * Collective: allocates the block's weights (zero until {@link #w1()} and {@link #w2()} are written),
     * gradients, activations and symmetric buffers on every rank of the communicator's group.
     *
     * @param communicator a GPU communicator of the tensor-parallel group
     * @param tokens       rows of {@code x} over the group (a multiple of its size)
     * @param hidden       the model width
     * @param ffn          the inner width over the group (a multiple of its size)
     * @param dtype        FLOAT32 or BFLOAT16 ({@link #sgdStep} needs FLOAT32)
     * @throws IllegalArgumentException when a size does not split over the group
     * @throws UnsupportedOperationException when the communicator has no tensor-parallel GEMMs (a host
     *                                       transport, or no cuBLAS: says which)
     */
    public TensorParallelMlp(Communicator communicator, int tokens, int hidden, int ffn, DType dtype) {
        Objects.requireNonNull(communicator, "communicator");
        Group group = communicator.group();
        this.communicator = communicator;
        this.world = group.worldSize();
        this.rank = group.rank();
        if (tokens <= 0 || hidden <= 0 || ffn <= 0 || tokens % world != 0 || ffn % world != 0) {
            throw new IllegalArgumentException("tokens=" + tokens + " hidden=" + hidden + " ffn=" + ffn + ": expected all positive,"
                    + " tokens and ffn multiples of the tensor-parallel size " + world + " (fix: round tokens and ffn up"
                    + " to multiples of " + world + ")");
        }
        this.device = communicator.unwrap(DeviceCommunicator.class).orElseThrow(() -> new UnsupportedOperationException(
                "TensorParallelMlp runs on GPUs: the communicator's transport " + group.transport().name() + " has no device side"
                        + " (fix: create the group on CudaTransport)"));
        this.gemm = communicator.unwrap(TensorParallelGemm.class).orElseThrow(() -> new UnsupportedOperationException(
                "the communicator has no tensor-parallel GEMMs (cuBLAS did not load: see CudaTransport.cublasUnavailableReason();"
                        + " fix: install CUDA's cuBLAS, or point -Dsymmem4j.cublas.library at its libcublas.so)"));
        this.tokens = tokens;
        this.hidden = hidden;
        this.ffnShard = ffn / world;
        this.dtype = dtype;
        this.elt = dtype.byteSize();
        long activations = (long) tokens * ffnShard * elt;
        this.xGathered = SymmetricMemory.allocate(group, (long) tokens * hidden * elt);
        this.dyGathered = SymmetricMemory.allocate(group, (long) tokens * hidden * elt);
        this.partials = SymmetricMemory.allocate(group, TensorParallelGemm.partialsBytes(tokens, hidden, dtype));
        this.w1 = device.allocateDevice((long) hidden * ffnShard * elt);
        this.w2 = device.allocateDevice((long) ffnShard * hidden * elt);
        this.dw1 = device.allocateDevice(w1.byteSize());
        this.dw2 = device.allocateDevice(w2.byteSize());
        this.z = device.allocateDevice(activations);
        this.a = device.allocateDevice(activations);
        this.da = device.allocateDevice(activations);
        this.y = device.allocateDevice((long) tokens / world * hidden * elt);
        this.dx = device.allocateDevice(y.byteSize());
        // the weight gradients' GEMMs (local: no meeting of their own) run once now, so cuBLAS loads their kernels while
        // no rank's stream waits on the GPU (TensorParallelGemm's collective calls do the same for theirs)
        gemm.matmul(dw2, a, true, dyGathered.local(), false, ffnShard, hidden, tokens, false, dtype);
        gemm.matmul(dw1, xGathered.local(), true, da, false, hidden, ffnShard, tokens, false, dtype);
        device.synchronize();
        communicator.barrier();
    }

    /** {@return this rank's rows of the input ({@code tokens/W × hidden}), to write before {@link #forward}} */
    public MemorySegment inputShard() {
        return shardOf(xGathered);
    }

    /** {@return this rank's rows of the output's gradient ({@code tokens/W × hidden}), to write before {@link #backward}} */
    public MemorySegment outputGradientShard() {
        return shardOf(dyGathered);
    }

    private MemorySegment shardOf(SymmetricMemory memory) {
        long shardBytes = (long) tokens / world * hidden * elt;
        return memory.local().asSlice(rank * shardBytes, shardBytes);
    }

    /** {@return this rank's columns of W1, {@code hidden × ffn/W}, row-major} */
    public MemorySegment w1() {
        return w1;
    }

    /** {@return this rank's rows of W2, {@code ffn/W × hidden}, row-major} */
    public MemorySegment w2() {
        return w2;
    }

    /** {@return this rank's rows of the output ({@code tokens/W × hidden}), valid after {@link #forward}} */
    public MemorySegment output() {
        return y;
    }

    /** {@return this rank's rows of the input's gradient ({@code tokens/W × hidden}), valid after {@link #backward}} */
    public MemorySegment inputGradient() {
        return dx;
    }

    /** {@return the gradients of {@link #w1()} and {@link #w2()}, in that order, valid after {@link #backward}} */
    public List<MemorySegment> gradients() {
        return List.of(dw1, dw2);
    }

    /**
     * Collective: enqueues the forward pass from the rows written into {@link #inputShard()}.
     *
     * @param mode fused, or unfused with symmem4j's collectives or NCCL's
     */
    public void forward(Mode mode) {
        Nvtx.push(NVTX_FORWARD, (long) tokens * hidden, dtype);
        try {
            checkOpen();
            gemm.allGatherMatmul(xGathered, 0, w1, false, z, tokens, ffnShard, hidden, dtype, mode);
            gemm.relu(z, a, (long) tokens * ffnShard, dtype);
            gemm.matmulReduceScatter(a, w2, false, partials, 0, y, tokens, hidden, ffnShard, dtype, mode);
        } finally {
            Nvtx.pop();
        }
    }

    /**
     * Collective: enqueues the backward pass from the rows written into {@link #outputGradientShard()};
     * needs the activations of the last {@link #forward}.
     *
     * @param mode fused, or unfused with symmem4j's collectives or NCCL's
     */
    public void backward(Mode mode) {
        Nvtx.push(NVTX_BACKWARD, (long) tokens * hidden, dtype);
        try {
            checkOpen();
            MemorySegment dyAll = dyGathered.local();
            MemorySegment xAll = xGathered.local();
            // da = dy · W2ᵀ (dy gathered on the way)
            gemm.allGatherMatmul(dyGathered, 0, w2, true, da, tokens, ffnShard, hidden, dtype, mode);
            // dW2 = aᵀ · dy
            gemm.matmul(dw2, a, true, dyAll, false, ffnShard, hidden, tokens, false, dtype);
            // dz = da where z > 0 (in place)
            gemm.reluBackward(da, z, da, (long) tokens * ffnShard, dtype);
            // dW1 = xᵀ · dz
            gemm.matmul(dw1, xAll, true, da, false, hidden, ffnShard, tokens, false, dtype);
            // dx = dz · W1ᵀ, reduce-scattered to this rank's rows
            gemm.matmulReduceScatter(da, w1, true, partials, 0, dx, tokens, hidden, ffnShard, dtype, mode);
        } finally {
            Nvtx.pop();
        }
    }

    /**
     * Enqueues {@code W -= lr · dW} for both weights (float32 only).
     *
     * @param learningRate the step size
     */
    public void sgdStep(float learningRate) {
        Nvtx.push(NVTX_SGD_STEP, (long) hidden * ffnShard * 2, DType.FLOAT32);
        try {
            checkOpen();
            if (dtype != DType.FLOAT32) {
                throw new UnsupportedOperationException("sgdStep updates float32 weights; this block is " + dtype
                        + " (fix: keep float32 master weights for bfloat16 training)");
            }
            gemm.axpy(-learningRate, dw1, w1, (long) hidden * ffnShard);
            gemm.axpy(-learningRate, dw2, w2, (long) ffnShard * hidden);
        } finally {
            Nvtx.pop();
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("TensorParallelMlp of rank " + rank + " is closed; expected an open"
                    + " block (fix: make every call before close(), or"
                    + " build a new one)");
        }
    }

    /**
     * Collective: frees the block's device buffers and symmetric memories, once every rank's stream has drained and
     * every rank has arrived (a rank freeing device memory while a peer's kernel still waits for this rank's signal
     * would wait for that peer's GPU, which waits for this rank: {@code cuMemFree} synchronizes with the peers).
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        device.synchronize();
        communicator.barrier();
        for (MemorySegment m : List.of(w1, w2, dw1, dw2, z, a, da, y, dx)) {
            device.freeDevice(m);
        }
        xGathered.close();
        dyGathered.close();
        partials.close();
    }
}
