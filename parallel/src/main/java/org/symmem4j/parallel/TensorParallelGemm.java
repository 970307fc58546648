package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * GEMMs of a tensor-parallel group on device buffers: a plain GEMM, the column-parallel
 * <b>all-gather + matmul</b> and the row-parallel <b>matmul + reduce-scatter</b> of Megatron's sequence
 * parallelism, each either fused (every chunk's transfer overlapped with the previous chunk's GEMM) or
 * unfused (one collective, then one GEMM) with symmem4j's kernels or NCCL as the collective — plus the
 * elementwise steps of an MLP block. Reached through
 * {@link Communicator#unwrap Communicator.unwrap(TensorParallelGemm.class)} on a GPU transport (empty
 * on host transports); everything is enqueued on the communicator's stream
 * ({@link DeviceCommunicator#stream()}), in order with its collectives, and can be captured into a graph.
 *
 * <p>Matrices are dense and row-major; {@code rows} is the whole {@code M} of the group and is split in
 * {@code worldSize} equal blocks, rank r's block being rows {@code [r·M/W, (r+1)·M/W)}.
 *
 * <pre>
 *  allGatherMatmul (column-parallel, input sharded by rows)   matmulReduceScatter (row-parallel)
 *
 *  gathered (symmetric, M×K): rank r wrote rows r before      a (M×K_r) · op(b) = rank r's partial (M×N)
 *  ┌────────┐ ┌────────┐                                      partials (symmetric), on every rank:
 *  │ rows 0 │ │ rows 0 │◀─ copy engine, chunk by chunk,       ┌──────────────── recv: W slots ──┬── send: W slots ─┐
 *  │ rows 1 │ │ rows 1 │   each GEMM'd as it lands            │ slot q = rank q's partial of    │ this rank's      │
 *  └────────┘ └────────┘                                      │ this rank's rows (M/W × N)      │ tiles for peers  │
 *   rank 0     rank 1      c (M×N) = gathered · op(b)          └─────────────────────────────────┴──────────────────┘
 *                                                             out (M/W×N) = Σ_q slot q, in rank order
 * </pre>
 *
 * <p>Fused calls synchronize through signal slots {@link #READY_SLOT} and {@link #DONE_SLOT} of the
 * symmetric memory they are given: keep those two slots for them.
 */
public interface TensorParallelGemm {

    /** Signal slot of the given symmetric memory that the fused calls' first meeting uses. */
    int READY_SLOT = 0;
    /** Signal slot of the given symmetric memory that the fused calls' last meeting uses. */
    int DONE_SLOT = 1;

    /** How the collective part of a tensor-parallel GEMM runs. */
    enum Mode {
        /**
         * Chunked: each peer's block moves by the copy engine while the previous block's GEMM runs; two
         * meetings on the GPU (shards in place; peers done reading).
         */
        FUSED,
        /** Unfused: symmem4j's all-gather or reduce-scatter kernel, then one GEMM (or one GEMM, then the kernel). */
        SYMMEM,
        /** Unfused: NCCL's all-gather or reduce-scatter, then one GEMM (or one GEMM, then NCCL); one GPU per rank. */
        NCCL
    }

    /**
     * Bytes of the symmetric {@code partials} that {@link #matmulReduceScatter} needs from its offset on:
     * {@code 2 · rows · n} elements (the receiving and the sending slots).
     *
     * @param rows  the group's whole M
     * @param n     the output's columns
     * @param dtype the element type
     * @return the bytes
     */
    static long partialsBytes(int rows, int n, DType dtype) {
        return 2L * rows * n * dtype.byteSize();
    }

    /**
     * Whether {@code mode} can run on this group, and if not, why.
     *
     * @param mode the mode
     * @return null when it can run, else the reason (e.g. NCCL with two ranks on one GPU)
     */
    String unavailableReason(Mode mode);

    /**
     * Enqueues {@code c[m×n] = op(a) · op(b)}, plus {@code c} when {@code accumulate}; {@code op(a)} is
     * {@code m×k} ({@code a} stored {@code k×m} when {@code transA}), {@code op(b)} is {@code k×n}
     * ({@code b} stored {@code n×k} when {@code transB}); accumulated in float32. Local: no communication.
     *
     * @param c          output, at least {@code m·n} elements
     * @param a          left operand
     * @param transA     whether {@code a} is stored transposed
     * @param b          right operand
     * @param transB     whether {@code b} is stored transposed
     * @param m          rows of the output
     * @param n          columns of the output
     * @param k          the inner dimension
     * @param accumulate add to {@code c} instead of overwriting it
     * @param dtype      FLOAT32 or BFLOAT16
     * @throws IllegalArgumentException when a buffer is too small or a dimension is not positive
     */
    void matmul(MemorySegment c, MemorySegment a, boolean transA, MemorySegment b, boolean transB,
                int m, int n, int k, boolean accumulate, DType dtype);

    /**
     * {@link #matmul} with {@code a} a block of a wider row-major matrix: consecutive rows of {@code a} as stored lie
     * {@code lda} elements apart ({@code lda} at least its row length: {@code m} when {@code transA}, else {@code k}).
     * With {@code transA}, {@code a} sliced at a column offset of a {@code k × lda} matrix gives a block of rows of the
     * product {@code aᵀ · b} (a weight gradient computed in blocks of rows).
     *
     * @param c          output, {@code m × n}
     * @param a          left operand, from its first element ({@code (rows - 1) · lda + row length} elements)
     * @param lda        elements between the starts of consecutive stored rows of {@code a}
     * @param transA     whether {@code a} is stored transposed
     * @param b          right operand
     * @param transB     whether {@code b} is stored transposed
     * @param m          rows of the output
     * @param n          columns of the output
     * @param k          the inner dimension
     * @param accumulate add to {@code c} instead of overwriting it
     * @param dtype      FLOAT32 or BFLOAT16
     * @throws IllegalArgumentException when a buffer is too small, a dimension is not positive or {@code lda} is less than
     *                                  a stored row
     */
    void matmul(MemorySegment c, MemorySegment a, int lda, boolean transA, MemorySegment b, boolean transB,
                int m, int n, int k, boolean accumulate, DType dtype);

    /**
     * Collective: gathers the rows of {@code gathered} from every rank, then {@code c[rows×n] = gathered ·
     * op(b)}. Before the call rank r has written its block (rows {@code [r·rows/W, (r+1)·rows/W)}, row
     * length {@code k}) at {@code offsetBytes} of its region, in stream order; afterwards every rank's
     * region holds every block and {@code c} the product.
     *
     * @param gathered    symmetric memory of this communicator's group
     * @param offsetBytes where the {@code rows×k} matrix starts in every rank's region
     * @param b           right operand, {@code k×n} ({@code n×k} when {@code transB}), this rank's shard
     * @param transB      whether {@code b} is stored transposed
     * @param c           output, {@code rows×n}
     * @param rows        the group's whole M, a multiple of the world size
     * @param n           columns of {@code c}
     * @param k           columns of the gathered matrix
     * @param dtype       FLOAT32 or BFLOAT16
     * @param mode        fused or unfused, and with which collective
     * @throws IllegalArgumentException when a buffer is too small, {@code rows} does not split evenly, or the
     *                                  memory is not of this communicator's group
     * @throws UnsupportedOperationException when {@code mode} cannot run here ({@link #unavailableReason})
     */
    void allGatherMatmul(SymmetricMemory gathered, long offsetBytes, MemorySegment b, boolean transB,
                         MemorySegment c, int rows, int n, int k, DType dtype, Mode mode);

    /**
     * Collective: {@code out = } this rank's block of rows of {@code Σ_ranks a · op(b)}: every rank
     * multiplies its {@code a} ({@code rows×k}, the inner dimension being its shard) by its {@code op(b)}
     * ({@code k×n}), and rank r receives the sum, in rank order, of every rank's rows
     * {@code [r·rows/W, (r+1)·rows/W)}.
     *
     * @param a           left operand, {@code rows×k}
     * @param b           right operand, {@code k×n} ({@code n×k} when {@code transB})
     * @param transB      whether {@code b} is stored transposed
     * @param partials    symmetric memory of this communicator's group, {@link #partialsBytes} from {@code offsetBytes}
     * @param offsetBytes where the partial products start in every rank's region
     * @param out         output, {@code rows/W × n}
     * @param rows        the group's whole M, a multiple of the world size
     * @param n           columns of the output
     * @param k           the inner dimension (this rank's shard of it)
     * @param dtype       FLOAT32 or BFLOAT16
     * @param mode        fused or unfused, and with which collective
     * @throws IllegalArgumentException when a buffer is too small, {@code rows} does not split evenly, or the
     *                                  memory is not of this communicator's group
     * @throws UnsupportedOperationException when {@code mode} cannot run here ({@link #unavailableReason})
     */
    void matmulReduceScatter(MemorySegment a, MemorySegment b, boolean transB, SymmetricMemory partials,
                             long offsetBytes, MemorySegment out, int rows, int n, int k, DType dtype, Mode mode);

    /**
     * Enqueues {@code out = max(in, 0)} over {@code count} elements ({@code out} may be {@code in}).
     *
     * @param in    input
     * @param out   output
     * @param count elements
     * @param dtype FLOAT32 or BFLOAT16
     */
    void relu(MemorySegment in, MemorySegment out, long count, DType dtype);

    /**
     * Enqueues {@code out = pre > 0 ? grad : 0} over {@code count} elements ({@code out} may be {@code grad}).
     *
     * @param grad  the gradient of the activation's output
     * @param pre   the activation's input
     * @param out   the gradient of the activation's input
     * @param count elements
     * @param dtype FLOAT32 or BFLOAT16
     */
    void reluBackward(MemorySegment grad, MemorySegment pre, MemorySegment out, long count, DType dtype);

    /**
     * Enqueues {@code y += alpha · x} over {@code count} float32 elements (an SGD step: {@code alpha = -lr}).
     *
     * @param alpha the factor
     * @param x     the added vector
     * @param y     the updated vector
     * @param count elements
     */
    void axpy(float alpha, MemorySegment x, MemorySegment y, long count);

    /**
     * Enqueues {@code out = bfloat16(in)} over {@code count} elements, rounded to nearest even (as torch's
     * {@code .to(torch.bfloat16)}): a float32 master copy cast into the bfloat16 buffer the GEMMs read.
     *
     * @param in    float32 input, at least {@code count} elements
     * @param out   bfloat16 output, at least {@code count} elements
     * @param count elements (0 enqueues nothing)
     * @throws IllegalArgumentException when a buffer is too small or {@code count} is negative
     */
    void castToBfloat16(MemorySegment in, MemorySegment out, long count);

    /**
     * Enqueues one Adam step (torch.optim.Adam's arithmetic, no weight decay, no amsgrad) on {@code count} float32
     * parameters from a bfloat16 gradient:
     * <pre>
     *   g = gradientScale · gradient
     *   m = m + (1 − β₁)(g − m);   v = β₂ v + (1 − β₂) g²
     *   params −= lr / (1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
     * </pre>
     * with the bias corrections computed in double on the host; {@code bf16Copy}, when not null, receives the updated
     * parameters rounded to bfloat16.
     *
     * @param params        float32 parameters, updated
     * @param m             float32 first moments (zero before step 1), updated
     * @param v             float32 second moments (zero before step 1), updated
     * @param gradient      bfloat16 gradient
     * @param bf16Copy      receives the new parameters in bfloat16, or null
     * @param count         elements (0 enqueues nothing)
     * @param gradientScale factor on the gradient (e.g. 1 / world size for the mean of summed gradients)
     * @param learningRate  lr
     * @param beta1         β₁, in [0, 1)
     * @param beta2         β₂, in [0, 1)
     * @param epsilon       ε, positive
     * @param step          t, the step number from 1
     * @throws IllegalArgumentException when a buffer is too small, {@code count} is negative or a hyper-parameter is
     *                                  out of its range
     */
    void adamStep(MemorySegment params, MemorySegment m, MemorySegment v, MemorySegment gradient, MemorySegment bf16Copy,
                  long count, float gradientScale, float learningRate, float beta1, float beta2, float epsilon, long step);

    /** {@return the GEMM library in use, e.g. {@code cuBLAS (libcublas.so.13)}} */
    String gemmLibrary();

    /**
     * {@return how {@link Mode#FUSED} calls on this group cut a peer's block, for reports, e.g. {@code each peer's block
     * whole} or {@code each peer's block in chunks of 1024 rows (at most 8 a block)}}
     */
    String fusedChunking();
}
