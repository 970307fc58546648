package org.symmem4j.parallel.tensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ShardPartition;

/**
 * Every device buffer one rank of {@link FullyShardedMlp} allocates, as data: its name, purpose and size, computed from
 * the shapes alone (tokens, widths, ranks, this rank). The model allocates exactly these and nothing else for the step,
 * all at construction, all alive until {@code close()}: its peak is {@link #total()} (the benchmark's "accounted" column).
 * {@link #verify} checks that every buffer holds what the step's {@link ShardedStepPlan} puts in it.
 *
 * <pre>
 *  rank r of N, L layers (layer l: widths[l] × widths[l+1], count c_l), T tokens; bf16 = 2 bytes, f32 = 4
 *
 *  buffer            sharded (FULL)                          replicated (NONE)         lives
 *  ───────────────── ─────────────────────────────────────── ───────────────────────── ───────────
 *  master l, m l,    f32, this rank's block of c_l            f32, c_l each             whole run
 *    v l             (ShardPartition, 64-byte blocks)
 *  working b         bf16, max c_l over layers l ≡ b (mod 2):  —                         whole run
 *   (symmetric)      the gathered weight W_l, then, once the
 *                    backward has read W_l, its gradient dW_l
 *                    (reduce-scatter input, or layer 0's tail
 *                    blocks all-reduced in place; Adam reads
 *                    block r)
 *  replica l         —                                       bf16, c_l                 whole run
 *  gradient g        —  (dW lives in working b: no buffer)    bf16, max c_l, l ≡ g        whole run
 *   (symmetric)
 *  input, dy         bf16, T × widths[0], T × widths[L]      the same                  whole run
 *  activation l      bf16, T × widths[l+1] (l = L-1: output) the same                  whole run
 *  backward b        bf16, max T × widths[l+1] over          the same                  whole run
 *                    l ≤ L-2, l ≡ b (mod 2); min(2, L-1) of
 *                    them (dz of a hidden layer's output,
 *                    ReLU's backward in place)
 * </pre>
 *
 * Each buffer is counted as the allocator is asked for it ({@code max(bytes, 16)}, as the model allocates); the
 * symmetric buffers' signal pads (64 KiB per symmetric buffer and rank) are the transport's and not counted here.
 *
 * @param tokens  rows of this rank's batch
 * @param widths  the layers' widths (input, then each layer's output)
 * @param world   ranks
 * @param rank    this rank
 * @param sharded FULL (true) or NONE (false)
 * @param buffers the buffers, in allocation order
 */
public record ShardedStepMemory(int tokens, int[] widths, int world, int rank, boolean sharded, List<Buffer> buffers) {

    /** What a buffer holds ({@link FullyShardedMlp.Memory}'s fields). */
    public enum Purpose {
        /** float32 master weights and Adam's moments. */
        STATE,
        /** bfloat16 weights: the working buffers (sharded, which also take the gradients) or the replica. */
        WEIGHTS,
        /** bfloat16 gradient buffers of their own (replicated only). */
        GRADIENTS,
        /** The batch, every layer's output, the output's gradient, the backward buffers. */
        ACTIVATIONS
    }

    /**
     * One buffer.
     *
     * @param name      e.g. {@code master0}, {@code working1}, {@code backward0}
     * @param purpose   what it holds
     * @param bytes     what the step uses of it
     * @param symmetric whether it is symmetric memory (gathered into, reduced from)
     */
    public record Buffer(String name, Purpose purpose, long bytes, boolean symmetric) {

        /** {@return the bytes the allocator is asked for: {@code max(bytes, 16)}} */
        public long allocated() {
            return Math.max(bytes, 16);
        }
    }

    private static final DType BF16 = DType.BFLOAT16;

    /** Copies. */
    public ShardedStepMemory {
        widths = widths.clone();
        buffers = List.copyOf(buffers);
    }

    /**
     * The buffers of one rank.
     *
     * @param tokens  rows of this rank's batch, positive
     * @param widths  at least two positive widths
     * @param world   ranks, positive
     * @param rank    this rank, in [0, world)
     * @param sharded FULL (true) or NONE (false)
     * @return the buffers
     * @throws IllegalArgumentException when a size is out of range
     */
    public static ShardedStepMemory of(int tokens, int[] widths, int world, int rank, boolean sharded) {
        if (tokens <= 0 || widths == null || widths.length < 2 || Arrays.stream(widths).anyMatch(w -> w <= 0) || world < 1
                || rank < 0 || rank >= world) {
            throw new IllegalArgumentException("tokens=" + tokens + " widths=" + Arrays.toString(widths) + " world=" + world
                    + " rank=" + rank + ": expected tokens > 0, at least two positive widths and 0 <= rank < world (fix:"
                    + " pass e.g. tokens=64, widths {784, 256, 10}, world=2, rank=0)");
        }
        int layers = widths.length - 1;
        List<Buffer> b = new ArrayList<>();
        for (int l = 0; l < layers; l++) {
            long shard = sharded ? partition(widths, l, world).size(rank) : count(widths, l);
            for (String part : List.of("master", "m", "v")) {
                b.add(new Buffer(part + l, Purpose.STATE, shard * 4, false));
            }
        }
        if (sharded) {
            for (int w = 0; w < Math.min(ShardedStepPlan.WORKING_BUFFERS, layers); w++) {
                b.add(new Buffer("working" + w, Purpose.WEIGHTS, maxCountOfParity(widths, w, layers) * 2, true));
            }
        } else {
            for (int l = 0; l < layers; l++) {
                b.add(new Buffer("replica" + l, Purpose.WEIGHTS, count(widths, l) * 2, false));
            }
            for (int g = 0; g < Math.min(ShardedStepPlan.GRADIENT_BUFFERS, layers); g++) {
                b.add(new Buffer("gradient" + g, Purpose.GRADIENTS, maxCountOfParity(widths, g, layers) * 2, true));
            }
        }
        b.add(new Buffer("input", Purpose.ACTIVATIONS, (long) tokens * widths[0] * 2, false));
        b.add(new Buffer("outputGradient", Purpose.ACTIVATIONS, (long) tokens * widths[layers] * 2, false));
        for (int l = 0; l < layers; l++) {
            b.add(new Buffer("activation" + l, Purpose.ACTIVATIONS, (long) tokens * widths[l + 1] * 2, false));
        }
        for (int p = 0; p < Math.min(2, layers - 1); p++) {
            long width = 0;
            for (int l = p; l <= layers - 2; l += 2) {
                width = Math.max(width, widths[l + 1]);
            }
            b.add(new Buffer("backward" + p, Purpose.ACTIVATIONS, tokens * width * 2, false));
        }
        return new ShardedStepMemory(tokens, widths, world, rank, sharded, b);
    }

    /** {@return layer l's elements} */
    static long count(int[] widths, int l) {
        return (long) widths[l] * widths[l + 1];
    }

    /** {@return the partition of layer l's weight over the ranks (bf16 blocks: what the gather and the reduction move)} */
    static ShardPartition partition(int[] widths, int l, int world) {
        return ShardPartition.of(count(widths, l), world, BF16);
    }

    private static long maxCountOfParity(int[] widths, int parity, int layers) {
        long max = 0;
        for (int l = parity; l < layers; l += 2) {
            max = Math.max(max, count(widths, l));
        }
        return max;
    }

    /** {@return the layers' widths (a copy)} */
    @Override
    public int[] widths() {
        return widths.clone();
    }

    /** {@return the number of layers} */
    public int layers() {
        return widths.length - 1;
    }

    /**
     * {@return the buffer called {@code name}}
     *
     * @param name e.g. {@code working0}
     * @throws IllegalArgumentException when there is none
     */
    public Buffer buffer(String name) {
        for (Buffer b : buffers) {
            if (b.name().equals(name)) {
                return b;
            }
        }
        throw new IllegalArgumentException("no buffer " + name + " in " + names() + " (fix: ask for one of those)");
    }

    /** {@return the number of buffers whose names start with {@code prefix} followed by a digit} */
    public int countOf(String prefix) {
        return (int) buffers.stream().filter(b -> b.name().matches(java.util.regex.Pattern.quote(prefix) + "\\d+")).count();
    }

    private List<String> names() {
        return buffers.stream().map(Buffer::name).toList();
    }

    /**
     * {@return the bytes allocated for {@code purpose}}
     *
     * @param purpose a purpose
     */
    public long bytes(Purpose purpose) {
        return buffers.stream().filter(b -> b.purpose() == purpose).mapToLong(Buffer::allocated).sum();
    }

    /** {@return every buffer's allocated bytes: the model's peak (all live from construction to close)} */
    public long total() {
        return buffers.stream().mapToLong(Buffer::allocated).sum();
    }

    /** {@return the totals by purpose, as {@link FullyShardedMlp#memory()} reports them} */
    public FullyShardedMlp.Memory memory() {
        return new FullyShardedMlp.Memory(bytes(Purpose.STATE), bytes(Purpose.WEIGHTS), bytes(Purpose.GRADIENTS),
                bytes(Purpose.ACTIVATIONS));
    }

    /**
     * Checks that every buffer holds what {@code plan} puts in it: each gather's layer (and, sharded, its gradient) fits
     * the working buffer the plan names, each gradient its gradient buffer (replicated), each weight its replica, each
     * layer's output gradient its backward buffer; that the buffers the plan names exist and no buffer is allocated that
     * the plan does not use; and that this rank's state is its partition's block.
     *
     * @param plan the step's plan, for the same layers and sharding
     * @throws IllegalStateException naming the first buffer that does not fit or is missing
     */
    public void verify(ShardedStepPlan plan) {
        int layers = layers();
        if (plan.layers() != layers || plan.sharded() != sharded) {
            throw Invariants.violated("plan of " + plan.layers() + " layers sharded=" + plan.sharded() + " for buffers of "
                    + layers + " layers sharded=" + sharded);
        }
        for (int l = 0; l < layers; l++) {
            long shard = sharded ? partition(widths, l, world).size(rank) : count(widths, l);
            for (String part : List.of("master", "m", "v")) {
                need(part + l, shard * 4, "layer " + l + "'s " + (sharded ? "shard" : "replica") + " in float32");
            }
        }
        boolean[] usedWeight = new boolean[sharded ? countOf("working") : countOf("replica")];
        boolean[] usedGrad = new boolean[countOf("gradient")];
        for (ShardedStepPlan.Action x : plan.actions()) {
            int l = x.layer();
            if (l < 0) {
                continue;
            }
            long weightBytes = count(widths, l) * 2;
            if (x.weight() >= 0) {
                String name = (sharded ? "working" : "replica") + x.weight();
                need(name, weightBytes, x + ": layer " + l + "'s bf16 weight" + (sharded ? " (and its gradient)" : ""));
                usedWeight[x.weight()] = true;
            }
            if (x.grad() >= 0) {
                need("gradient" + x.grad(), weightBytes, x + ": layer " + l + "'s bf16 gradient");
                usedGrad[x.grad()] = true;
            }
            if (x.kind() == ShardedStepPlan.Kind.BACKWARD && l > 0) {
                need("backward" + (l - 1) % 2, (long) tokens * widths[l] * 2, x + ": the gradient of layer " + (l - 1)
                        + "'s output");
            }
        }
        for (int i = 0; i < usedWeight.length; i++) {
            if (!usedWeight[i]) {
                throw Invariants.violated((sharded ? "working" : "replica") + i + " is allocated but no action of the plan"
                        + " uses it (plan: " + plan + ")");
            }
        }
        for (int i = 0; i < usedGrad.length; i++) {
            if (!usedGrad[i]) {
                throw Invariants.violated("gradient" + i + " is allocated but no action of the plan uses it (plan: " + plan
                        + ")");
            }
        }
        need("input", (long) tokens * widths[0] * 2, "the batch");
        need("outputGradient", (long) tokens * widths[layers] * 2, "the output's gradient");
        for (int l = 0; l < layers; l++) {
            need("activation" + l, (long) tokens * widths[l + 1] * 2, "layer " + l + "'s output");
        }
        if (countOf("backward") != Math.min(2, layers - 1)) {
            throw Invariants.violated(countOf("backward") + " backward buffers for " + layers + " layers: expected "
                    + Math.min(2, layers - 1) + " (one per parity of the hidden layers)");
        }
    }

    private void need(String name, long bytes, String what) {
        Buffer b = buffers.stream().filter(x -> x.name().equals(name)).findFirst().orElseThrow(() -> Invariants.violated(
                what + " needs buffer " + name + ", which is not allocated (buffers: " + names() + ")"));
        if (b.bytes() < bytes) {
            throw Invariants.violated(what + " needs " + bytes + " bytes in " + name + ", which has " + b.bytes());
        }
    }

    /** {@return one line per buffer (name, purpose, bytes) and the totals} */
    @Override
    public String toString() {
        StringBuilder s = new StringBuilder();
        s.append(String.format(Locale.ROOT, "rank %d of %d, %s, tokens %d, widths %s%n", rank, world,
                sharded ? "sharded" : "replicated", tokens, Arrays.toString(widths)));
        for (Buffer b : buffers) {
            s.append(String.format(Locale.ROOT, "  %-16s %-11s %,16d%s%n", b.name(), b.purpose(), b.allocated(),
                    b.symmetric() ? "  symmetric" : ""));
        }
        s.append(String.format(Locale.ROOT, "  %-16s %-11s %,16d%n", "total", "", total()));
        return s.toString();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ShardedStepMemory m && tokens == m.tokens && Arrays.equals(widths, m.widths) && world == m.world
                && rank == m.rank && sharded == m.sharded && buffers.equals(m.buffers);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(widths) * 31 + buffers.hashCode();
    }
}
