package org.symmem4j.parallel.tensor;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.function.LongToDoubleFunction;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TensorParallelGemm;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Action;

/**
 * A ReLU MLP (the tensor-parallel MLP block's layers, {@code y = relu(x · W1) · W2}, or any chain of linear layers
 * with ReLU between them) trained with data parallelism over the GPUs of a group, fully sharded as PyTorch's FSDP2
 * ({@code fully_shard} per linear layer) or ZeRO stage 3 does: each rank holds only its 1/N shard of every layer's
 * float32 master weight and Adam moments; a layer's weight is cast to bfloat16 and all-gathered into one of two working
 * buffers on a second stream ahead of its use (the next layer's gather runs while this layer computes), forward and
 * backward run as cuBLAS bfloat16 GEMMs, each layer's weight gradient (bfloat16) is reduce-scattered as soon as its
 * backward is done, and Adam updates the shard. {@link Sharding#NONE} runs the same step on replicas (plain data
 * parallelism: every rank holds the whole model, gradients all-reduced) as the baseline.
 *
 * <pre>
 *  rank r, layer l (in × out weight, row-major), tokens T per rank, N ranks, b = l mod 2:
 *   comm stream     cast master shard → block r of working[b]; all-gather working[b]      (prefetch, ahead of use)
 *   compute stream  forward  z = a · W (bf16 GEMM), a' = relu(z)
 *                   backward da = dz · Wᵀ, dz' = da where a &gt; 0;  then dW = aᵀ · dz → working[b] (over W,
 *                            now dead; replicated: gradient[b])
 *   comm stream     reduce-scatter working[b] in place (bf16, peers summed in rank order in float32);
 *                   Adam on shard r: master, m, v (float32) from the mean gradient (sum / N)
 *  layer 0 (the backward's last GEMM, no input gradient): dW in K blocks of rows (K = tail chunks, max(4, 2N)), each
 *   all-reduced in place on the comm stream and Adam'ed on its part of shard r while the compute stream writes the next
 *   block: after the last GEMM only one block's reduction and Adam are left (K = 1: the whole layer's)
 * </pre>
 * The order of the two streams' work and their waits is {@link ShardedStepPlan} (data, validated); the loss is
 * {@code Σ y ⊙ dy} for the output gradient {@code dy} the caller writes (PyTorch's {@code y.backward(dy)}).
 *
 * <p>Numerics, as FSDP2 with {@code MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=bfloat16)} and
 * {@code torch.optim.Adam}: bfloat16 weights, activations and gradients (GEMMs accumulate in float32), float32 master
 * weights and moments. Sharded and replicated steps are bitwise equal: the reduce-scatter and the all-reduce
 * ({@link Algorithm#TWO_SHOT} or {@link Algorithm#ONE_SHOT}) sum the same bits in the same order, and the same Adam
 * kernel updates each element.
 *
 * <p>Memory per rank (P parameters, bf16 = 2 bytes): sharded {@code 12·P/N} (master, m, v) plus two working buffers (the
 * largest layer of each parity; a layer's gradient is written over its gathered weight once the backward has read it);
 * replicated {@code 14·P} (master, m, v, bf16 weights) plus two gradient buffers; both plus the activations. Every buffer
 * is {@link ShardedStepMemory}'s, allocated at construction and held until {@link #close()}: {@link #memory()} is the
 * peak, exactly.
 *
 * <p>Use: {@link #setWeights} for every layer, then per step write this rank's batch into {@link #input()} and the
 * output's gradient into {@link #outputGradient()} through {@link #device()} (its copies wait for the previous step),
 * and call {@link #step()}; {@link #output()} is the last step's output.
 */
public final class FullyShardedMlp implements AutoCloseable {

    /** How the weights, gradients and optimizer state are held. */
    public enum Sharding {
        /** 1/N of everything per rank; weights all-gathered before use, gradients reduce-scattered (FSDP, ZeRO-3). */
        FULL,
        /** Everything on every rank; gradients all-reduced (plain data parallelism, DDP). */
        NONE
    }

    /**
     * Adam's hyper-parameters (torch.optim.Adam's names; no weight decay).
     *
     * @param learningRate lr, finite and positive
     * @param beta1        β₁, in [0, 1)
     * @param beta2        β₂, in [0, 1)
     * @param epsilon      ε, positive
     */
    public record Adam(float learningRate, float beta1, float beta2, float epsilon) {

        /** Checks the ranges. */
        public Adam {
            if (!(learningRate > 0) || !Float.isFinite(learningRate) || !(beta1 >= 0 && beta1 < 1)
                    || !(beta2 >= 0 && beta2 < 1) || !(epsilon > 0) || !Float.isFinite(epsilon)) {
                throw new IllegalArgumentException("Adam learningRate=" + learningRate + " beta1=" + beta1 + " beta2=" + beta2
                        + " epsilon=" + epsilon + ": expected learningRate > 0, 0 <= beta1, beta2 < 1, epsilon > 0 (fix: pass"
                        + " values in those ranges, e.g. learningRate=1e-3 beta1=0.9 beta2=0.999 epsilon=1e-8)");
            }
        }

        /** {@return torch.optim.Adam's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8} */
        public static Adam defaults() {
            return new Adam(1e-3f, 0.9f, 0.999f, 1e-8f);
        }
    }

    /**
     * Device bytes this rank allocated for the model, by purpose (the communicators' scratch and cuBLAS's workspace not
     * included: {@link DeviceCommunicator#memoryInfo()} sees them).
     *
     * @param state       float32 master weights and Adam's two moments (this rank's shards, or the replica)
     * @param weights     bfloat16 weights: the two working buffers (sharded; they also take each layer's gradient) or
     *                    the replica's copy
     * @param gradients   the two bfloat16 gradient buffers (symmetric memory; replicated only, 0 sharded)
     * @param activations input, every layer's output, the output's gradient and the backward buffers (one per parity of
     *                    the hidden layers)
     */
    public record Memory(long state, long weights, long gradients, long activations) {

        /** {@return the sum} */
        public long total() {
            return state + weights + gradients + activations;
        }
    }

    private static final DType BF16 = DType.BFLOAT16;
    private static final long HOST_CHUNK = 16L << 20;

    private final Group group;
    private final int world;
    private final int rank;
    private final int tokens;
    private final int[] widths;
    private final int layers;
    private final Sharding sharding;
    private final Adam adam;
    private final ShardedStepPlan plan;
    private final ShardedStepMemory layout;
    /** Bytes asked of the allocator so far, by {@link ShardedStepMemory.Purpose}'s ordinal. */
    private final long[] allocatedBytes = new long[ShardedStepMemory.Purpose.values().length];
    private final long[] counts;
    private final long[] partStart;
    private final long[] partSize;
    private final Algorithm[] allReduce;
    /** The tail's blocks of layer 0's rows: block k is rows [tailRows[k], tailRows[k + 1]). */
    private final int[] tailRows;
    /** Per tail block, the all-reduce of its rows (bitwise the reduce-scatter's sums: TWO_SHOT or ONE_SHOT). */
    private Algorithm[] tailAllReduce;
    private StepTimeline timeline;
    private final List<AutoCloseable> owned = new ArrayList<>();
    private final List<MemorySegment> deviceBuffers = new ArrayList<>();
    private Group commGroup;
    private Communicator compute;
    private Communicator comm;
    private DeviceCommunicator computeDevice;
    private DeviceCommunicator commDevice;
    private TensorParallelGemm computeOps;
    private TensorParallelGemm commOps;
    private MemorySegment[] master;
    private MemorySegment[] moment1;
    private MemorySegment[] moment2;
    private MemorySegment[] replica;
    private SymmetricMemory[] working;
    private SymmetricMemory[] gradients;
    private MemorySegment input;
    private MemorySegment outputGradient;
    private MemorySegment[] activations;
    private MemorySegment[] backward;
    private Memory memory;
    private long steps;
    private boolean closed;

    /**
     * Collective over {@code group}: checks the arguments, creates the two communicators (one on {@code group} for the
     * GEMMs, one on a sub-group of the same ranks, with a stream of its own, for the collectives and the optimizer),
     * allocates every buffer (moments zero; weights zero until {@link #setWeights}) and runs every GEMM shape once, so
     * that cuBLAS loads its kernels before any collective can wait on the GPU.
     *
     * @param group    the data-parallel group, on a GPU transport
     * @param tokens   rows of this rank's batch
     * @param widths   the layers' widths: {@code widths[0]} the input's, {@code widths[l + 1]} layer l's output's
     *                 ({@code {hidden, ffn, hidden}} for the MLP block)
     * @param sharding {@link Sharding#FULL} or {@link Sharding#NONE}
     * @param adam     the optimizer's hyper-parameters
     * @throws IllegalArgumentException when a size is not positive, there are fewer than two widths, or a GEMM
     *                                  dimension exceeds {@code int}
     * @throws UnsupportedOperationException when the group's transport has no device memory, or no cuBLAS (says which)
     */
    public FullyShardedMlp(Group group, int tokens, int[] widths, Sharding sharding, Adam adam) {
        this(group, tokens, widths, sharding, adam, ShardedStepPlan.defaultTailChunks(Objects.requireNonNull(group, "group").worldSize()));
    }

    /**
     * As {@link #FullyShardedMlp(Group, int, int[], Sharding, Adam)}, with layer 0's weight gradient, reduction and Adam
     * in at most {@code tailChunks} blocks of rows ({@link ShardedStepPlan#tailChunkRows}; 1: the whole layer, the
     * gradient reduce-scattered when sharded); the shardings are bitwise equal at any one value. {@code tailChunks} is
     * at least 1; the rest as there.
     */
    public FullyShardedMlp(Group group, int tokens, int[] widths, Sharding sharding, Adam adam, int tailChunks) {
        this.group = Objects.requireNonNull(group, "group");
        this.sharding = Objects.requireNonNull(sharding, "sharding");
        this.adam = Objects.requireNonNull(adam, "adam");
        Objects.requireNonNull(widths, "widths");
        if (tokens <= 0 || widths.length < 2 || Arrays.stream(widths).anyMatch(w -> w <= 0) || tailChunks < 1) {
            throw new IllegalArgumentException("tokens=" + tokens + " widths=" + Arrays.toString(widths) + " tailChunks="
                    + tailChunks + ": expected tokens > 0, at least two positive widths (input, then each layer's output)"
                    + " and tailChunks >= 1 (fix: pass e.g. tokens=64, widths {784, 256, 10} and tailChunks=4)");
        }
        if (!group.transport().deviceMemory()) {
            throw new UnsupportedOperationException("FullyShardedMlp runs on GPUs: the group's transport "
                    + group.transport().name() + " has no device memory (fix: create the group on CudaTransport)");
        }
        this.world = group.worldSize();
        this.rank = group.rank();
        this.tokens = tokens;
        this.widths = widths.clone();
        this.layers = widths.length - 1;
        this.tailRows = ShardedStepPlan.tailChunkRows(widths[0], widths[1], tailChunks);
        this.plan = ShardedStepPlan.of(layers, sharding == Sharding.FULL, tailRows.length - 1);
        // host-only and cheap: the plan this step interprets is proven race-free over consecutive steps before any use
        plan.validate(3);
        this.layout = ShardedStepMemory.of(tokens, widths, world, rank, sharding == Sharding.FULL);
        // host-only: every buffer holds what the plan puts in it, and none is allocated that the plan does not use
        layout.verify(plan);
        this.counts = new long[layers];
        this.partStart = new long[layers];
        this.partSize = new long[layers];
        this.allReduce = new Algorithm[layers];
        for (int l = 0; l < layers; l++) {
            counts[l] = (long) widths[l] * widths[l + 1];
            if (sharding == Sharding.FULL) {
                ShardPartition p = ShardPartition.of(counts[l], world, BF16);
                partStart[l] = Math.min(p.start(rank), counts[l]);
                partSize[l] = p.size(rank);
            } else {
                partSize[l] = counts[l];
            }
        }
        // a failed start frees what it made and puts back the caller's device state (nothing to close on success)
        Transport.CallerState caller = group.transport().callerState();
        try {
            open();
        } catch (RuntimeException | Error e) {
            try (caller) {
                release(e);
            }
            throw e;
        }
    }

    private void open() {
        compute = Communicator.create(group);
        owned.add(compute);
        computeDevice = compute.unwrap(DeviceCommunicator.class).orElseThrow(() -> new UnsupportedOperationException(
                "FullyShardedMlp runs on GPUs: the communicator of transport " + group.transport().name() + " has no device side"
                        + " (fix: create the group on CudaTransport)"));
        computeOps = compute.unwrap(TensorParallelGemm.class).orElseThrow(() -> new UnsupportedOperationException(
                "FullyShardedMlp needs cuBLAS for its GEMMs, which did not load (see CudaTransport.cublasUnavailableReason();"
                        + " fix: install CUDA's cuBLAS, or point -Dsymmem4j.cublas.library at its libcublas.so)"));
        // a sub-group of the same ranks: its communicator has a stream of its own (the collectives and the optimizer)
        commGroup = group.split(0, rank, "fsdp-comm");
        owned.add(0, commGroup);
        comm = Communicator.create(commGroup);
        owned.add(0, comm);
        commDevice = comm.unwrap(DeviceCommunicator.class).orElseThrow();
        commOps = comm.unwrap(TensorParallelGemm.class).orElseThrow();
        boolean sharded = sharding == Sharding.FULL;
        if (!sharded) {
            for (int l = 0; l < layers; l++) {
                allReduce[l] = pickAllReduce(counts[l]);
            }
        }
        tailAllReduce = new Algorithm[tailRows.length - 1];
        for (int k = 0; k + 1 < tailRows.length && tailRows.length > 2; k++) {
            tailAllReduce[k] = pickAllReduce((long) (tailRows[k + 1] - tailRows[k]) * widths[1]);
        }
        master = new MemorySegment[layers];
        moment1 = new MemorySegment[layers];
        moment2 = new MemorySegment[layers];
        for (int l = 0; l < layers; l++) {
            master[l] = allocate("master" + l);
            moment1[l] = allocate("m" + l);
            moment2[l] = allocate("v" + l);
            zero(master[l]);
            zero(moment1[l]);
            zero(moment2[l]);
        }
        if (sharded) {
            // the gathered weights, and each layer's gradient once its backward has read the weight (the plan)
            working = new SymmetricMemory[layout.countOf("working")];
            for (int b = 0; b < working.length; b++) {
                working[b] = symmetric("working" + b);
            }
        } else {
            replica = new MemorySegment[layers];
            for (int l = 0; l < layers; l++) {
                replica[l] = allocate("replica" + l);
                zero(replica[l]);
            }
            gradients = new SymmetricMemory[layout.countOf("gradient")];
            for (int g = 0; g < gradients.length; g++) {
                gradients[g] = symmetric("gradient" + g);
            }
        }
        input = allocate("input");
        outputGradient = allocate("outputGradient");
        activations = new MemorySegment[layers];
        for (int l = 0; l < layers; l++) {
            activations[l] = allocate("activation" + l);
        }
        backward = new MemorySegment[layout.countOf("backward")];
        for (int b = 0; b < backward.length; b++) {
            backward[b] = allocate("backward" + b);
        }
        // what was allocated, counted as it was asked for, is the layout's total: the accounted peak is exact
        Memory asked = new Memory(allocatedBytes[0], allocatedBytes[1], allocatedBytes[2], allocatedBytes[3]);
        if (!asked.equals(layout.memory())) {
            throw org.symmem4j.parallel.Invariants.violated("FullyShardedMlp allocated " + asked + " but its layout says "
                    + layout.memory() + ": " + layout);
        }
        memory = asked;
        // every GEMM shape once (on whatever the buffers hold: the outputs are overwritten before use), so that cuBLAS's
        // lazy kernel loads happen now, while no rank's stream waits on the GPU for a peer (see TensorParallelMlp)
        for (int l = 0; l < layers; l++) {
            MemorySegment weight = sharded ? working[l % working.length].local() : replica[l];
            MemorySegment grad = sharded ? weight : gradients[l % gradients.length].local();
            computeOps.matmul(activations[l], layerInput(l), false, weight, false, tokens, widths[l + 1], widths[l], false, BF16);
            if (l > 0) {
                computeOps.matmul(outputGradientOf(l - 1), outputGradientOf(l), false, weight, true, tokens, widths[l],
                        widths[l + 1], false, BF16);
            }
            computeOps.matmul(grad, layerInput(l), true, outputGradientOf(l), false, widths[l], widths[l + 1], tokens, false,
                    BF16);
        }
        for (int k = 0; k + 1 < tailRows.length && tailRows.length > 2; k++) {
            tailGradient(sharded ? working[0].local() : gradients[0].local(), k);
        }
        computeDevice.synchronize();
        commDevice.synchronize();
        compute.barrier();
    }

    /** The all-reduce of a replica's gradient: our kernels (bitwise equal to the sharded reduce-scatter), else NCCL. */
    private Algorithm pickAllReduce(long count) {
        for (Algorithm a : List.of(Algorithm.TWO_SHOT, Algorithm.ONE_SHOT, Algorithm.NCCL)) {
            if (comm.supports(a, BF16, ReduceOp.SUM, count)) {
                return a;
            }
        }
        throw new UnsupportedOperationException("no all-reduce of " + count + " bfloat16 elements on this group: TWO_SHOT,"
                + " ONE_SHOT and NCCL all refuse it (were the kernels built?; fix: build the kernels module with nvcc on"
                + " the path, or install NCCL so libnccl.so.2 is on the library path)");
    }

    /** The layout's device buffer {@code name}, counted by purpose. */
    private MemorySegment allocate(String name) {
        ShardedStepMemory.Buffer b = layout.buffer(name);
        MemorySegment m = computeDevice.allocateDevice(b.allocated());
        deviceBuffers.add(m);
        allocatedBytes[b.purpose().ordinal()] += b.allocated();
        return m.asSlice(0, b.bytes());
    }

    /** The layout's symmetric buffer {@code name} (the transport asks for {@code max(bytes, 16)} too), counted. */
    private SymmetricMemory symmetric(String name) {
        ShardedStepMemory.Buffer b = layout.buffer(name);
        SymmetricMemory m = SymmetricMemory.allocate(commGroup, b.bytes());
        owned.add(0, m);
        allocatedBytes[b.purpose().ordinal()] += b.allocated();
        return m;
    }

    /** Zeroes a device buffer from host zeros (at set-up; the comm stream's copies). */
    private void zero(MemorySegment device) {
        if (device.byteSize() == 0) {
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment zeros = arena.allocate(Math.min(HOST_CHUNK, device.byteSize()), 16);
            for (long at = 0; at < device.byteSize(); at += zeros.byteSize()) {
                long n = Math.min(zeros.byteSize(), device.byteSize() - at);
                commDevice.copyFromHost(device.asSlice(at, n), zeros.asSlice(0, n));
            }
        }
    }

    // ---- the step ----

    /**
     * Collective: enqueues one training step (forward, backward, gradient reduction, Adam) on this rank's two streams and
     * returns; the compute stream ({@link #device()}) completes after the whole step. Reads {@link #input()} and
     * {@link #outputGradient()}, writes {@link #output()}.
     */
    public void step() {
        checkOpen();
        steps++;
        StepTimeline t = timeline;
        if (t == null || t.closed()) {
            for (Action x : plan.actions()) {
                run(x);
            }
            return;
        }
        t.restart();
        for (int i = 0; i < plan.actions().size(); i++) {
            Action x = plan.actions().get(i);
            t.before(i, x);
            run(x);
            t.after(i, x);
        }
    }

    /**
     * Records every later step's timeline (CUDA events on the action's stream around each action: no wait is added) into
     * the returned {@link StepTimeline} until it is closed; {@link StepTimeline#read()} gives the last step's. Creates
     * its events: call it between steps, after a {@link #synchronize()} every rank has passed.
     *
     * @return the timeline (the same one until it is closed); close it before or with this model
     */
    public StepTimeline recordTimeline() {
        checkOpen();
        if (timeline == null || timeline.closed()) {
            timeline = new StepTimeline(computeDevice, commDevice, plan);
            owned.add(0, timeline);
        }
        return timeline;
    }

    private void run(Action x) {
        int l = x.layer();
        switch (x.kind()) {
            case COMPUTE_WAITS_COMM -> computeDevice.orderAfter(commDevice.stream());
            case COMM_WAITS_COMPUTE -> commDevice.orderAfter(computeDevice.stream());
            case GATHER -> {
                SymmetricMemory w = working[x.weight()];
                commOps.castToBfloat16(master[l], w.local().asSlice(partStart[l] * 2, partSize[l] * 2), partSize[l]);
                comm.allGather(w, 0, counts[l], BF16);
            }
            case FORWARD -> {
                computeOps.matmul(activations[l], layerInput(l), false, weight(x), false, tokens, widths[l + 1], widths[l],
                        false, BF16);
                if (l < layers - 1) {
                    computeOps.relu(activations[l], activations[l], (long) tokens * widths[l + 1], BF16);
                }
            }
            case BACKWARD -> {
                if (x.chunk() >= 0) {
                    tailGradient(gradient(x), x.chunk());
                    return;
                }
                MemorySegment dz = outputGradientOf(l);
                if (l > 0) {
                    // da = dz · Wᵀ, then dz of the layer below = da where its output (the ReLU's) is positive; first: it
                    // is the last read of W, which (sharded) the gradient overwrites next
                    MemorySegment below = outputGradientOf(l - 1);
                    computeOps.matmul(below, dz, false, weight(x), true, tokens, widths[l], widths[l + 1], false, BF16);
                    computeOps.reluBackward(below, activations[l - 1], below, (long) tokens * widths[l], BF16);
                }
                // dW = aᵀ · dz (a: the layer's input), over W in its working buffer (sharded), same stream: after da
                computeOps.matmul(gradient(x), layerInput(l), true, dz, false, widths[l], widths[l + 1], tokens, false, BF16);
            }
            case REDUCE -> {
                if (x.chunk() >= 0) {
                    int k = x.chunk();
                    long rowBytes = (long) widths[1] * 2;
                    comm.allReduce(sharding == Sharding.FULL ? working[x.weight()] : gradients[x.grad()], tailRows[k] * rowBytes,
                            (long) (tailRows[k + 1] - tailRows[k]) * widths[1], BF16, ReduceOp.SUM, tailAllReduce[k]);
                } else if (sharding == Sharding.FULL) {
                    comm.reduceScatter(working[x.weight()], 0, counts[l], BF16, ReduceOp.SUM);
                } else {
                    comm.allReduce(gradients[x.grad()], 0, counts[l], BF16, ReduceOp.SUM, allReduce[l]);
                }
            }
            case OPTIMIZE -> {
                // this rank's elements of the layer, or (a tail block) of the block's rows: Adam is element-wise
                long from = x.chunk() < 0 ? partStart[l] : Math.max(partStart[l], (long) tailRows[x.chunk()] * widths[1]);
                long to = x.chunk() < 0 ? partStart[l] + partSize[l]
                        : Math.min(partStart[l] + partSize[l], (long) tailRows[x.chunk() + 1] * widths[1]);
                if (to > from) {
                    long at = from - partStart[l];
                    commOps.adamStep(master[l].asSlice(at * 4), moment1[l].asSlice(at * 4), moment2[l].asSlice(at * 4),
                            gradient(x).asSlice(from * 2, (to - from) * 2),
                            sharding == Sharding.FULL ? null : replica[l].asSlice(at * 2), to - from, 1f / world,
                            adam.learningRate(), adam.beta1(), adam.beta2(), adam.epsilon(), steps);
                }
            }
        }
    }

    /** Tail block k of layer 0's weight gradient, {@code dW[rows] = x[:, rows]ᵀ · dz}, into its rows of {@code grad}. */
    private void tailGradient(MemorySegment grad, int k) {
        int rows = tailRows[k + 1] - tailRows[k];
        computeOps.matmul(grad.asSlice((long) tailRows[k] * widths[1] * 2, (long) rows * widths[1] * 2),
                input.asSlice((long) tailRows[k] * 2), widths[0], true, outputGradientOf(0), false, rows, widths[1], tokens,
                false, BF16);
    }

    private MemorySegment weight(Action x) {
        return sharding == Sharding.FULL ? working[x.weight()].local() : replica[x.weight()];
    }

    /** Where action x's layer's gradient lives: over its weight in the working buffer (sharded), or a gradient buffer. */
    private MemorySegment gradient(Action x) {
        return sharding == Sharding.FULL ? working[x.weight()].local() : gradients[x.grad()].local();
    }

    /** Layer l's input: the batch, or the layer below's (ReLU'd) output. */
    private MemorySegment layerInput(int l) {
        return l == 0 ? input : activations[l - 1];
    }

    /** Where the gradient of layer l's output lives during the backward pass. */
    private MemorySegment outputGradientOf(int l) {
        return l == layers - 1 ? outputGradient : backward[l % 2];
    }

    // ---- the caller's side ----

    /**
     * Sets layer {@code layer}'s weight (row-major, {@code widths[layer] × widths[layer + 1]}): this rank copies the
     * elements it holds ({@link #heldStart}, {@link #heldCount}) from {@code valueAt(flat index)} as float32 into its
     * master copy (and, replicated, its bfloat16 weight). Call before the first step; waits for the copies.
     *
     * @param layer   the layer
     * @param valueAt the weight's element at a flat row-major index
     */
    public void setWeights(int layer, LongToDoubleFunction valueAt) {
        checkOpen();
        checkLayer(layer);
        Objects.requireNonNull(valueAt, "valueAt");
        long n = partSize[layer];
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(Math.max(4, Math.min(HOST_CHUNK, n * 4)), 16);
            long chunk = host.byteSize() / 4;
            for (long at = 0; at < n; at += chunk) {
                long len = Math.min(chunk, n - at);
                for (long i = 0; i < len; i++) {
                    host.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) valueAt.applyAsDouble(partStart[layer] + at + i));
                }
                commDevice.copyFromHost(master[layer].asSlice(at * 4, len * 4), host.asSlice(0, len * 4));
            }
        }
        if (sharding == Sharding.NONE) {
            commOps.castToBfloat16(master[layer], replica[layer], n);
        }
        commDevice.synchronize();
        // the next step's compute stream must see the replica's weight: the plan's first wait orders it
    }

    /**
     * This rank's float32 master copy of layer {@code layer}'s elements {@code [heldStart, heldStart + heldCount)} (after
     * the steps enqueued so far: waits for them).
     *
     * @param layer the layer
     * @return the elements
     */
    public float[] masterWeights(int layer) {
        checkOpen();
        checkLayer(layer);
        computeDevice.synchronize();
        long n = partSize[layer];
        float[] out = new float[Math.toIntExact(n)];
        if (n == 0) {
            return out;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(n * 4, 16);
            commDevice.copyToHost(host, master[layer]);
            MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, out, 0, out.length);
        }
        return out;
    }

    /**
     * {@return the first flat index of layer {@code layer}'s weight that this rank holds (its shard's start; 0 replicated)}
     *
     * @param layer the layer
     */
    public long heldStart(int layer) {
        checkLayer(layer);
        return partStart[layer];
    }

    /**
     * {@return how many elements of layer {@code layer}'s weight this rank holds (its shard's; all replicated)}
     *
     * @param layer the layer
     */
    public long heldCount(int layer) {
        checkLayer(layer);
        return partSize[layer];
    }

    /** {@return this rank's batch, {@code tokens × widths[0]} bfloat16, to write before a step through {@link #device()}} */
    public MemorySegment input() {
        return input;
    }

    /** {@return the gradient of the loss by the output, {@code tokens × widths[L]} bfloat16, written before a step} */
    public MemorySegment outputGradient() {
        return outputGradient;
    }

    /** {@return the last step's output (before its update), {@code tokens × widths[L]} bfloat16} */
    public MemorySegment output() {
        return activations[layers - 1];
    }

    /** {@return the compute stream's device side: copies in and out go through it, and it completes after each step} */
    public DeviceCommunicator device() {
        return computeDevice;
    }

    /** {@return the step's plan} */
    public ShardedStepPlan plan() {
        return plan;
    }

    /** {@return the device bytes this rank allocated, by purpose: its peak (all held from construction to close)} */
    public Memory memory() {
        return memory;
    }

    /** {@return every buffer this rank allocated, by name (what {@link #memory()} sums)} */
    public ShardedStepMemory layout() {
        return layout;
    }

    /** {@return the all-reduce each layer's gradient uses (replicated), or null (sharded)} */
    public List<Algorithm> allReduceAlgorithms() {
        return sharding == Sharding.NONE ? List.of(allReduce) : null;
    }

    /** {@return how the model is held} */
    public Sharding sharding() {
        return sharding;
    }

    /** {@return the steps taken (Adam's t of the last one)} */
    public long steps() {
        return steps;
    }

    /** Waits for both streams. */
    public void synchronize() {
        checkOpen();
        computeDevice.synchronize();
        commDevice.synchronize();
    }

    /**
     * A replica's whole training state, on the host: every layer's float32 master weight and Adam's two moments, and the
     * steps taken (Adam's t). What a survivor of a shrink carries into the model it builds on the survivors' group
     * ({@link ShrinkingMlp}).
     *
     * @param steps   the steps taken
     * @param master  per layer, its float32 master weight (row-major)
     * @param moment1 per layer, Adam's first moment
     * @param moment2 per layer, Adam's second moment
     */
    public record State(long steps, float[][] master, float[][] moment1, float[][] moment2) {
    }

    /**
     * {@link Sharding#NONE} only: copies this replica's state to the host (after the steps enqueued so far: waits for
     * them).
     *
     * @return the state
     * @throws UnsupportedOperationException when sharded: a rank holds 1/N of the state
     */
    public State state() {
        checkOpen();
        requireReplica("state()");
        synchronize();
        float[][][] parts = new float[3][layers][];
        for (int l = 0; l < layers; l++) {
            parts[0][l] = download(master[l], partSize[l]);
            parts[1][l] = download(moment1[l], partSize[l]);
            parts[2][l] = download(moment2[l], partSize[l]);
        }
        return new State(steps, parts[0], parts[1], parts[2]);
    }

    /**
     * {@link Sharding#NONE} only: puts {@code state} into this replica (master weights, moments, the bfloat16 weights cast
     * from the masters as Adam's step casts them, and the step count) and waits for the copies.
     *
     * @param state a state of a model of the same widths ({@link #state()})
     * @throws IllegalArgumentException when its layers or sizes differ from this model's (nothing is written then)
     */
    public void restore(State state) {
        checkOpen();
        requireReplica("restore(state)");
        Objects.requireNonNull(state, "state");
        for (int l = 0; l < layers; l++) {
            for (float[][] part : List.of(state.master(), state.moment1(), state.moment2())) {
                if (part.length != layers || part[l] == null || part[l].length != partSize[l]) {
                    throw new IllegalArgumentException("restore: the state has " + part.length + " layers, layer " + l
                            + " with " + (l < part.length && part[l] != null ? part[l].length : -1) + " elements; expected "
                            + layers + " layers of " + Arrays.toString(counts) + " elements (fix: restore a state of a"
                            + " model with the same widths " + Arrays.toString(widths) + ")");
                }
            }
        }
        for (int l = 0; l < layers; l++) {
            upload(master[l], state.master()[l]);
            upload(moment1[l], state.moment1()[l]);
            upload(moment2[l], state.moment2()[l]);
            commOps.castToBfloat16(master[l], replica[l], partSize[l]);
        }
        commDevice.synchronize();
        steps = state.steps();
    }

    private void requireReplica(String what) {
        if (sharding != Sharding.NONE) {
            throw new UnsupportedOperationException(what + " with Sharding." + sharding + ": rank " + rank + " holds 1/"
                    + world + " of the state (fix: Sharding.NONE, whose every rank holds the whole replica)");
        }
    }

    private float[] download(MemorySegment device, long n) {
        float[] out = new float[Math.toIntExact(n)];
        if (n > 0) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment host = arena.allocate(n * 4, 16);
                commDevice.copyToHost(host, device.asSlice(0, n * 4));
                MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, out, 0, out.length);
            }
        }
        return out;
    }

    private void upload(MemorySegment device, float[] values) {
        if (values.length > 0) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment host = arena.allocate((long) values.length * 4, 16);
                MemorySegment.copy(values, 0, host, ValueLayout.JAVA_FLOAT, 0, values.length);
                commDevice.copyFromHost(device.asSlice(0, host.byteSize()), host);
            }
        }
    }

    /**
     * Waits at most {@code timeout} for both streams.
     *
     * @return false when a stream still runs then (a kernel waiting for a peer that is gone: nothing stops it), true when
     *         both completed
     */
    boolean synchronize(java.time.Duration timeout) {
        checkOpen();
        return idleWithin(timeout);
    }

    /** Both streams synchronized on a helper thread, so a stream that never completes costs the caller only the timeout. */
    private boolean idleWithin(java.time.Duration timeout) {
        RuntimeException[] failed = new RuntimeException[1];
        Thread waiter = Thread.ofPlatform().daemon().name("fsdp-sync-rank-" + rank).start(() -> {
            try {
                computeDevice.synchronize();
                commDevice.synchronize();
            } catch (RuntimeException e) {
                failed[0] = e;
            }
        });
        try {
            if (!waiter.join(timeout)) {
                return false;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("rank " + rank + " interrupted while waiting for its streams (fix: do not"
                    + " interrupt the training thread)", e);
        }
        // join() orders the waiter's write of failed[0] before this read (Thread.join's happens-before edge)
        if (failed[0] != null) {
            throw failed[0];
        }
        return true;
    }

    /**
     * Not collective: frees everything of this rank after its group was aborted (a peer died: {@code Group.shrink()}),
     * without meeting the peers: waits at most {@code timeout} for both streams, then frees the buffers, closes the
     * symmetric memories (its mappings of every peer's exported memory, a dead one's included, are unmapped), the
     * communicators and the sub-group, and releases the sub-group's GPU state on the transport; the calling thread's
     * current context is put back as {@link #close()} does.
     *
     * @param timeout how long the streams may still run
     * @param gone    the peers that are gone, for the message
     * @throws org.symmem4j.parallel.SymmemException when a stream still runs after {@code timeout} (a kernel of a
     *         collective waits for {@code gone} on the GPU; nothing is freed: the process should exit)
     */
    public void abandon(java.time.Duration timeout, String gone) {
        if (closed) {
            return;
        }
        try (Transport.CallerState caller = group.transport().callerState()) {
            abandonIdle(timeout, gone);
        }
    }

    private void abandonIdle(java.time.Duration timeout, String gone) {
        if (!idleWithin(timeout)) {
            throw new org.symmem4j.parallel.SymmemException("rank=" + rank + ": its GPU streams still run " + timeout
                    + " after " + gone + " died: a collective's kernel waits on the GPU for " + gone + ", and symmem4j's"
                    + " kernels cannot be stopped from the host, so this rank cannot free its memory and go on (the dead"
                    + " rank died inside a step's collective rather than between steps; fix: restart the job from its"
                    + " checkpoints, symmem4j-run --max-restarts N, or exit this process)");
        }
        closed = true;
        release(null);
    }

    private void checkLayer(int layer) {
        if (layer < 0 || layer >= layers) {
            throw new IndexOutOfBoundsException("layer=" + layer + ": expected 0 <= layer < " + layers + " (fix: pass a"
                    + " layer index 0 .. " + (layers - 1) + ")");
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("FullyShardedMlp of rank " + rank + " is closed (fix: use it before close(),"
                    + " or create a new one)");
        }
    }

    /**
     * Collective: waits for both streams, meets the group (no peer's kernel can then wait for this rank), frees the
     * buffers and closes the symmetric memories, the sub-group's communicator, the sub-group and the communicator, and
     * releases the sub-group's GPU state on the transport (its stream, context retain and kernels' hold: the sub-group is
     * this model's, so nobody else would). Idempotent. The group's own GPU state stays: the group is the caller's, and
     * so does the calling thread's current context: the one current before {@code close()} is current after it
     * ({@link Transport#callerState()}), so the caller's own driver calls go on working.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try (Transport.CallerState caller = group.transport().callerState()) {
            computeDevice.synchronize();
            commDevice.synchronize();
            compute.barrier();
            release(null);
        }
    }

    /**
     * Frees what was made, newest first, then releases the sub-group's GPU state on the transport once (after its
     * memories and communicator, which use it); the first failure is thrown (or added to {@code cause}). Every way out
     * runs it: {@link #close}, {@link #abandon}, and a constructor that failed.
     */
    private void release(Throwable cause) {
        Throwable first = cause;
        if (computeDevice != null) {
            for (MemorySegment m : deviceBuffers) {
                try {
                    computeDevice.freeDevice(m);
                } catch (RuntimeException e) {
                    first = add(first, e);
                }
            }
        }
        deviceBuffers.clear();
        for (AutoCloseable c : owned) {
            try {
                c.close();
            } catch (Exception e) {
                first = add(first, e);
            }
        }
        owned.clear();
        Group sub = commGroup;
        commGroup = null; // once: a later release (close after abandon) finds nothing
        if (sub != null) {
            try {
                group.transport().release(sub);
            } catch (RuntimeException e) {
                first = add(first, e);
            }
        }
        if (cause == null && first != null) {
            if (first instanceof RuntimeException r) {
                throw r;
            }
            throw new IllegalStateException("closing FullyShardedMlp of rank " + rank + " failed: " + first + " (fix: see"
                    + " the cause below and its suppressed failures)", first);
        }
    }

    private static Throwable add(Throwable first, Throwable next) {
        if (first == null) {
            return next;
        }
        first.addSuppressed(next);
        return first;
    }
}
