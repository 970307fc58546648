package org.symmem4j.parallel.cuda;

/**
 * The kernels of {@code kernels/src/main/cuda/symmem4j_kernels.cu}: the symbol, the threads per
 * block every launch uses, and how far a launch spreads over the GPU when nothing else limits it.
 * Parameter lists are those of the {@code extern "C"} definitions, in order.
 *
 * <p>Every kernel here either waits on peers (the barrier of ONE_SHOT, TWO_SHOT, reduce-scatter and
 * all-gather; the LL words; the signal waits) or shares a stream with kernels that do, so every grid
 * goes through {@link LaunchBudget}, which keeps the blocks of all ranks on one GPU resident together.
 */
enum Kernel {
    /** (buf, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes): push, meet once, reduce. */
    ONE_SHOT_F32("symmem_one_shot_f32", Spread.ONE_PER_MULTIPROCESSOR),
    ONE_SHOT_BF16("symmem_one_shot_bf16", Spread.ONE_PER_MULTIPROCESSOR),
    /** (buf, Peers ll, Pads pads, count, rank, world, divisor, slotWords): no barrier; waits on each peer's words. */
    ONE_SHOT_LL_F32("symmem_one_shot_ll_f32", Spread.ONE_PER_MULTIPROCESSOR),
    ONE_SHOT_LL_BF16("symmem_one_shot_ll_bf16", Spread.ONE_PER_MULTIPROCESSOR),
    /** (Peers bufs, Pads pads, count, rank, world, divisor): two barriers. */
    TWO_SHOT_F32("symmem_two_shot_f32", Spread.ALL_RESIDENT),
    TWO_SHOT_BF16("symmem_two_shot_bf16", Spread.ALL_RESIDENT),
    /** (Peers bufs, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes): one meeting per round, one at the end. */
    TWO_SHOT_PUSH_F32("symmem_two_shot_push_f32", Spread.ALL_RESIDENT),
    TWO_SHOT_PUSH_BF16("symmem_two_shot_push_bf16", Spread.ALL_RESIDENT),
    /** (Peers bufs, Pads pads, out, count, rank, world): two barriers. */
    REDUCE_SCATTER_F32("symmem_reduce_scatter_f32", Spread.ONE_PER_MULTIPROCESSOR),
    REDUCE_SCATTER_BF16("symmem_reduce_scatter_bf16", Spread.ONE_PER_MULTIPROCESSOR),
    /** (Peers outs, Pads pads, in, bytes, rank, world): two barriers. */
    ALL_GATHER("symmem_all_gather", Spread.ONE_PER_MULTIPROCESSOR),
    /** (dst, src, bytes, done, signal, value, add): copies and signals; waits for nobody. */
    PUT_SIGNAL("symmem_put_signal", Spread.ONE_PER_MULTIPROCESSOR),
    /** (dst, src, bytes): the grid's loads and stores copy; either side may be a peer's buffer; waits for nobody. */
    COPY("symmem_copy", Spread.ALL_RESIDENT),
    /** (signal, value): one thread waits for a peer's signal. */
    WAIT_SIGNAL("symmem_wait_signal", Spread.SINGLE_BLOCK),
    /** (signal, value): waits, then takes the value off the slot. */
    WAIT_SIGNAL_CONSUME("symmem_wait_signal_consume", Spread.SINGLE_BLOCK),
    /** (in, out, count, slots): sums {@code slots} consecutive slots of count elements in order; waits for nobody. */
    SUM_SLOTS_F32("symmem_sum_slots_f32", Spread.ALL_RESIDENT),
    SUM_SLOTS_BF16("symmem_sum_slots_bf16", Spread.ALL_RESIDENT),
    /** (in, out, count): max(x, 0); waits for nobody. */
    RELU_F32("symmem_relu_f32", Spread.ALL_RESIDENT),
    RELU_BF16("symmem_relu_bf16", Spread.ALL_RESIDENT),
    /** (grad, pre, out, count): grad where pre &gt; 0, else 0; waits for nobody. */
    RELU_BACKWARD_F32("symmem_relu_backward_f32", Spread.ALL_RESIDENT),
    RELU_BACKWARD_BF16("symmem_relu_backward_bf16", Spread.ALL_RESIDENT),
    /** (in, out, count): float32 to bfloat16, round to nearest even; waits for nobody. */
    CAST_F32_BF16("symmem_cast_f32_bf16", Spread.ALL_RESIDENT),
    /**
     * (param, m, v, grad, out, count, gradScale, beta1, beta2, stepSize, sqrtBias2, eps): one Adam step on float32
     * parameters from a bfloat16 gradient, {@code out} (nullable) the updated parameters in bfloat16; waits for nobody.
     */
    ADAM_BF16("symmem_adam_bf16", Spread.ALL_RESIDENT),
    RING_PUT("symmem_ring_put", Spread.SINGLE_BLOCK),
    /**
     * (part, out, MapInline in, hash, op, rank, slotOff, seen, state, waitNs): one hash-map operation on the owner's
     * partition (system-scope CAS of a slot word, seqlock read); waits for a locked slot at most waitNs.
     */
    MAP_OP("symmem_map_op", Spread.SINGLE_BLOCK);

    /** How many blocks a launch may use when only the GPU's size limits it. */
    enum Spread {
        /** At most one block per multiprocessor (latency-bound kernels, measured that way). */
        ONE_PER_MULTIPROCESSOR,
        /** As many blocks as the multiprocessors hold at once (the occupancy calculator's figure). */
        ALL_RESIDENT,
        /** One block (the signal waits). */
        SINGLE_BLOCK
    }

    final String symbol;
    final int blockThreads;
    final Spread spread;

    Kernel(String symbol, Spread spread) {
        this.symbol = symbol;
        this.spread = spread;
        this.blockThreads = spread == Spread.SINGLE_BLOCK ? 32 : CudaKernels.BLOCK_THREADS;
    }

    static Kernel oneShot(boolean f32) {
        return f32 ? ONE_SHOT_F32 : ONE_SHOT_BF16;
    }

    static Kernel oneShotLl(boolean f32) {
        return f32 ? ONE_SHOT_LL_F32 : ONE_SHOT_LL_BF16;
    }

    static Kernel twoShot(boolean f32) {
        return f32 ? TWO_SHOT_F32 : TWO_SHOT_BF16;
    }

    static Kernel twoShotPush(boolean f32) {
        return f32 ? TWO_SHOT_PUSH_F32 : TWO_SHOT_PUSH_BF16;
    }

    static Kernel sumSlots(boolean f32) {
        return f32 ? SUM_SLOTS_F32 : SUM_SLOTS_BF16;
    }

    static Kernel relu(boolean f32) {
        return f32 ? RELU_F32 : RELU_BF16;
    }

    static Kernel reluBackward(boolean f32) {
        return f32 ? RELU_BACKWARD_F32 : RELU_BACKWARD_BF16;
    }

    static Kernel reduceScatter(boolean f32) {
        return f32 ? REDUCE_SCATTER_F32 : REDUCE_SCATTER_BF16;
    }
}
