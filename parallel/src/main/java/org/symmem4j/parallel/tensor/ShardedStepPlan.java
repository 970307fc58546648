package org.symmem4j.parallel.tensor;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.symmem4j.parallel.Invariants;

/**
 * What one training step of {@link FullyShardedMlp} enqueues, in enqueue order, as data: the actions on the two
 * streams of a rank and the waits between them. The step only interprets it; {@link #validate} proves it safe (every
 * buffer read sees the write it needs, and no two accesses to a buffer race) and the plan's tests check the overlap.
 *
 * <pre>
 *  sharded (FSDP / ZeRO-3), L layers, working buffers b = l mod 2 (the weight, then its gradient):
 *   compute ─────────── wait ─ F0 ─────── wait ─ F1 ─ … ─ F(L-1) ── B(L-1) ─ wait ─ B(L-2) ─ … ─ B0 ─ wait(join)
 *   comm     G0 ─ wait ─ G1 ──── wait ─ G2 ─ …          wait ─ R(L-1) O(L-1) G(L-3) ─ wait ─ R(L-2) O(L-2) … R0 O0
 *
 *  G l: cast this rank's float32 master shard of layer l into its block of working buffer l mod 2, all-gather it
 *  F l / B l: the layer's forward / backward GEMMs on the gathered weight; B computes the input's gradient first (the
 *             last read of W l), then writes dW l over W l in the same working buffer (sharded), or into gradient
 *             buffer l mod 2 (replicated)
 *  R l: reduce-scatter of dW in place (sharded) or all-reduce (replicated);  O l: Adam on this rank's shard (or replica)
 *  wait: the stream waits for everything the other stream has been given so far (an event)
 *
 *  the tail, with K tail chunks ({@link #of(int, boolean, int)}; K = 1 is the plan above): layer 0, whose backward is
 *  the step's last GEMM and computes no input gradient, writes dW 0 in K blocks of rows, and each block is reduced
 *  (all-reduced in place, sharded too: the rows of a block lie in any rank's shard) and applied (Adam on the part of
 *  this rank's shard in it) as soon as its GEMM is done, while the next block's GEMM runs:
 *   compute  … B1 ─ B0#0 ─ B0#1 ─ … ─ B0#(K-1) ────────────────────────── wait(join)
 *   comm     … R1 O1 ─ wait ─ R0#0 O0#0 ─ wait ─ R0#1 O0#1 … ─ wait ─ R0#(K-1) O0#(K-1)
 *  so what is left after the last GEMM is one block's reduction and Adam, 1/K of the whole layer's.
 * </pre>
 *
 * The backward pass needs no gather for the last two layers: after the forward pass the two working buffers still hold
 * them. Sharded, a layer's gradient needs no buffer of its own: once its backward has read the gathered weight, that
 * weight is dead until the next gather into the buffer, which the comm stream runs after the reduction and Adam have
 * read the gradient (so the working set is two layers, as FSDP2's unsharded parameter plus reduce-scatter input).
 * Replicated (plain data parallelism, the baseline): no gathers; each layer's bf16 weight lives in a buffer of its
 * own, which its optimizer step rewrites.
 *
 * @param layers  the number of linear layers
 * @param sharded whether the weights are sharded (gathered before use) or replicated
 * @param actions the actions in enqueue order
 */
public record ShardedStepPlan(int layers, boolean sharded, List<Action> actions) {

    /** The two streams of a rank. */
    public enum Stream {
        /** The GEMMs and activations. */
        COMPUTE,
        /** The collectives (gathers, reductions) and the optimizer. */
        COMM
    }

    /** What an action does. */
    public enum Kind {
        /** Cast the master shard into the working buffer's block and all-gather it (COMM). */
        GATHER,
        /** Forward GEMM (and ReLU) of a layer on a weight buffer (COMPUTE). */
        FORWARD,
        /** Backward GEMMs of a layer: dW into a gradient buffer, the input's gradient (COMPUTE). */
        BACKWARD,
        /** Reduce-scatter (sharded) or all-reduce (replicated) of a gradient buffer (COMM). */
        REDUCE,
        /** Adam on the layer's shard (or replica) from a gradient buffer (COMM). */
        OPTIMIZE,
        /** The compute stream waits for what the comm stream has been given so far. */
        COMPUTE_WAITS_COMM,
        /** The comm stream waits for what the compute stream has been given so far. */
        COMM_WAITS_COMPUTE
    }

    /**
     * One action.
     *
     * @param kind   what it does
     * @param layer  its layer, or -1 for a wait
     * @param weight the weight buffer it reads or writes (working buffer sharded, the layer's own replicated), or -1
     * @param grad   the gradient buffer it writes or reads (replicated), or -1: sharded, the gradient of a BACKWARD,
     *               REDUCE or OPTIMIZE lives in the working buffer {@code weight}
     * @param chunk  the block of rows of the layer's weight gradient a BACKWARD, REDUCE or OPTIMIZE of the tail
     *               handles (0 .. {@link #tailChunks()} - 1), or -1: the whole layer
     */
    public record Action(Kind kind, int layer, int weight, int grad, int chunk) {

        /** An action on the whole layer (or a wait). */
        public Action(Kind kind, int layer, int weight, int grad) {
            this(kind, layer, weight, grad, -1);
        }

        /** {@return the stream this action is enqueued on (a wait: the stream that waits)} */
        public Stream stream() {
            return switch (kind) {
                case FORWARD, BACKWARD, COMPUTE_WAITS_COMM -> Stream.COMPUTE;
                case GATHER, REDUCE, OPTIMIZE, COMM_WAITS_COMPUTE -> Stream.COMM;
            };
        }

        /** {@return e.g. {@code G1w1}, {@code B2w0} (sharded), {@code B2w2g0}, {@code R3g1}, {@code R0w0#2}, {@code c<m}} */
        @Override
        public String toString() {
            return switch (kind) {
                case COMPUTE_WAITS_COMM -> "c<m";
                case COMM_WAITS_COMPUTE -> "m<c";
                default -> kind.name().charAt(0) + Integer.toString(layer) + (weight >= 0 ? "w" + weight : "")
                        + (grad >= 0 ? "g" + grad : "") + (chunk >= 0 ? "#" + chunk : "");
            };
        }
    }

    /** Validates and copies. */
    public ShardedStepPlan {
        actions = List.copyOf(actions);
        if (layers < 1) {
            throw new IllegalArgumentException("layers=" + layers + ": expected at least 1 (fix: pass the"
                    + " number of layers of the model)");
        }
    }

    /** The working buffers of a sharded plan (current and prefetched). */
    public static final int WORKING_BUFFERS = 2;
    /** The gradient buffers of a replicated plan (one being reduced while the next is written); sharded: none. */
    public static final int GRADIENT_BUFFERS = 2;

    /**
     * {@return the blocks of rows layer 0's weight gradient, reduction and Adam run in unless told otherwise: 2 per rank,
     * at least 4, so that the last block's Adam is at most half a rank's shard and its all-reduce a fraction of the layer}
     *
     * @param world ranks
     */
    public static int defaultTailChunks(int world) {
        return Math.max(4, 2 * world);
    }

    /**
     * The plan of one step.
     *
     * @param layers  linear layers, at least 1
     * @param sharded sharded (gather before use, reduce-scatter) or replicated (all-reduce)
     * @return the plan
     */
    public static ShardedStepPlan of(int layers, boolean sharded) {
        return of(layers, sharded, 1);
    }

    /**
     * The plan of one step whose tail (layer 0's weight gradient, reduction and Adam) runs in {@code tailChunks} blocks
     * of rows, each reduced and applied while the next one's GEMM runs (see the class comment).
     *
     * @param layers     linear layers, at least 1
     * @param sharded    sharded (gather before use, reduce-scatter) or replicated (all-reduce)
     * @param tailChunks blocks of layer 0's rows, at least 1 (1: the whole layer at once, reduce-scattered when sharded)
     * @return the plan
     */
    public static ShardedStepPlan of(int layers, boolean sharded, int tailChunks) {
        if (layers < 1 || tailChunks < 1) {
            throw new IllegalArgumentException("layers=" + layers + " tailChunks=" + tailChunks + ": expected at least 1"
                    + " of each (fix: pass the number of layers of the model, and 1 or more tail chunks)");
        }
        List<Action> a = new ArrayList<>();
        int last = layers - 1;
        if (sharded) {
            // the previous step's backward GEMMs read both working buffers: the first gathers wait for them
            a.add(wait(Kind.COMM_WAITS_COMPUTE));
            a.add(new Action(Kind.GATHER, 0, 0, -1));
        } else {
            // the previous step's optimizer rewrote the replicas' bf16 weights (the join at its end already orders this)
            a.add(wait(Kind.COMPUTE_WAITS_COMM));
        }
        for (int l = 0; l < layers; l++) {
            if (sharded) {
                a.add(wait(Kind.COMPUTE_WAITS_COMM)); // gather l has landed
                if (l + 1 < layers) {
                    // working buffer (l + 1) mod 2 was last read by forward l - 1: prefetch l + 1 while l computes
                    a.add(wait(Kind.COMM_WAITS_COMPUTE));
                    a.add(new Action(Kind.GATHER, l + 1, (l + 1) % WORKING_BUFFERS, -1));
                }
            }
            a.add(new Action(Kind.FORWARD, l, weightBuffer(l, sharded), -1));
        }
        for (int l = last; l >= 0; l--) {
            boolean gather = sharded && l - 1 >= 0 && l - 1 <= last - 2;
            boolean reduce = l + 1 <= last;
            // gradient buffer l mod 2 was last reduced as layer l + 2's, and (sharded) working buffer l mod 2 is gathered
            // for l since the previous iteration: both on the comm stream before anything of this iteration
            if (l <= last - 2) {
                a.add(wait(Kind.COMPUTE_WAITS_COMM));
            }
            if (reduce || gather) {
                // layer l + 1's backward has written its gradient and stopped reading its working buffer
                a.add(wait(Kind.COMM_WAITS_COMPUTE));
            }
            if (reduce) {
                a.add(new Action(Kind.REDUCE, l + 1, sharded ? weightBuffer(l + 1, true) : -1, gradBuffer(l + 1, sharded)));
                a.add(new Action(Kind.OPTIMIZE, l + 1, weightBuffer(l + 1, sharded), gradBuffer(l + 1, sharded)));
            }
            if (gather) {
                a.add(new Action(Kind.GATHER, l - 1, (l - 1) % WORKING_BUFFERS, -1));
            }
            if (l > 0 || tailChunks == 1) {
                a.add(new Action(Kind.BACKWARD, l, weightBuffer(l, sharded), gradBuffer(l, sharded)));
            }
        }
        // layer 0's gradient is the last GEMM's: reduced and applied whole, or block by block behind the next block's GEMM
        for (int k = tailChunks == 1 ? -1 : 0; k < (tailChunks == 1 ? 0 : tailChunks); k++) {
            if (k >= 0) {
                a.add(new Action(Kind.BACKWARD, 0, weightBuffer(0, sharded), gradBuffer(0, sharded), k));
            }
            a.add(wait(Kind.COMM_WAITS_COMPUTE));
            a.add(new Action(Kind.REDUCE, 0, sharded ? 0 : -1, gradBuffer(0, sharded), k));
            a.add(new Action(Kind.OPTIMIZE, 0, 0, gradBuffer(0, sharded), k));
        }
        // join: the step is complete once the compute stream is (timing, synchronize, the host's next input copy)
        a.add(wait(Kind.COMPUTE_WAITS_COMM));
        return new ShardedStepPlan(layers, sharded, a);
    }

    /** {@return the blocks of rows layer 0's tail runs in (1: whole)} */
    public int tailChunks() {
        return 1 + Math.max(0, actions.stream().mapToInt(Action::chunk).max().orElse(0));
    }

    /**
     * Where the tail's blocks of layer 0's weight gradient ({@code rows × cols}, row-major) start and end: at most
     * {@code chunks} blocks of whole rows, as equal as can be, each starting at an element that is a multiple of 32
     * (64 bytes of bfloat16: the shards' block, so that every block's reduction and Adam start aligned).
     *
     * @param rows   the layer's rows (its input width)
     * @param cols   the layer's columns (its output width)
     * @param chunks the blocks wanted, at least 1
     * @return the blocks' first rows and, last, {@code rows}; a single block (length 2) when the layer has too few rows
     */
    public static int[] tailChunkRows(int rows, int cols, int chunks) {
        if (rows < 1 || cols < 1 || chunks < 1) {
            throw new IllegalArgumentException("rows=" + rows + " cols=" + cols + " chunks=" + chunks + ": expected all"
                    + " positive (fix: pass layer 0's widths and 1 or more chunks)");
        }
        int step = 32 / gcd(cols, 32); // rows per 32-element multiple
        int units = rows / step;
        int k = Math.max(1, Math.min(chunks, units));
        int[] at = new int[k + 1];
        for (int i = 1; i < k; i++) {
            at[i] = (int) ((long) i * units / k) * step;
        }
        at[k] = rows;
        return at;
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }

    private static int weightBuffer(int layer, boolean sharded) {
        return sharded ? layer % WORKING_BUFFERS : layer;
    }

    /** Replicated: gradient buffer l mod 2; sharded: -1 (the gradient lives in the layer's working buffer). */
    private static int gradBuffer(int layer, boolean sharded) {
        return sharded ? -1 : layer % GRADIENT_BUFFERS;
    }

    private static Action wait(Kind kind) {
        return new Action(kind, -1, -1, -1);
    }

    /** {@return the actions on one line, e.g. {@code m<c G0w0 c<m m<c G1w1 F0w0 …}} */
    @Override
    public String toString() {
        StringBuilder b = new StringBuilder();
        for (Action x : actions) {
            b.append(b.isEmpty() ? "" : " ").append(x);
        }
        return b.toString();
    }

    // ---- validation: vector clocks over the two streams, a few steps in a row ----

    /**
     * Where each action of {@code steps} consecutive steps stands in the happens-before order of the two streams: action
     * i of the run (step-major) happens before action j when {@code position[i] < known[j][stream of i]}.
     */
    record Clocks(List<Action> run, int[] position, int[][] known) {

        static Clocks of(ShardedStepPlan plan, int steps) {
            List<Action> run = new ArrayList<>();
            for (int s = 0; s < steps; s++) {
                run.addAll(plan.actions());
            }
            int[] position = new int[run.size()];
            int[][] known = new int[run.size()][];
            // state[s] = what stream s knows has completed before its next action, per stream (its own: all before)
            int[][] state = {new int[2], new int[2]};
            int[] count = new int[2];
            for (int i = 0; i < run.size(); i++) {
                Action x = run.get(i);
                int s = x.stream().ordinal();
                int o = 1 - s;
                if (x.kind() == Kind.COMPUTE_WAITS_COMM || x.kind() == Kind.COMM_WAITS_COMPUTE) {
                    // the event is recorded on the other stream now: everything it has been given so far (with two
                    // streams that is all the waiter can learn: what the other knew of the waiter, the waiter knows)
                    state[s][o] = Math.max(state[s][o], count[o]);
                }
                position[i] = count[s];
                state[s][s] = count[s];
                known[i] = state[s].clone();
                count[s]++;
                state[s][s] = count[s];
            }
            return new Clocks(run, position, known);
        }

        boolean before(int i, int j) {
            int s = run.get(i).stream().ordinal();
            return position[i] < known[j][s];
        }

        boolean ordered(int i, int j) {
            return before(i, j) || before(j, i);
        }
    }

    /** A buffer and what it holds: {@code W l} (layer l's bf16 weight), {@code dW l}, {@code dW l reduced}, master l. */
    private record Access(int index, String buffer, String reads, String writes) {
    }

    /**
     * Checks the plan over {@code steps} consecutive steps: every read of a buffer happens after the write of what it
     * must see, with no write to that buffer between or racing; every two accesses to a buffer of which one writes are
     * ordered.
     *
     * @param steps consecutive steps to check, at least 2 (the seams between steps)
     * @throws IllegalStateException naming the first violation
     */
    public void validate(int steps) {
        Clocks c = Clocks.of(this, steps);
        List<Access> whole = new ArrayList<>();
        for (int i = 0; i < c.run().size(); i++) {
            Action x = c.run().get(i);
            int l = x.layer();
            // a tail block's action touches its block of each buffer (part k of K), any other action every part
            String part = x.chunk() >= 0 ? "#" + x.chunk() : "";
            String w = "weight" + x.weight() + part;
            // sharded, a layer's gradient is written over its weight in the working buffer
            String g = (x.grad() >= 0 ? "grad" + x.grad() : "weight" + x.weight()) + part;
            List<Access> accesses = new ArrayList<>();
            switch (x.kind()) {
                case GATHER -> {
                    accesses.add(new Access(i, "master" + l + part, "master " + l, null));
                    accesses.add(new Access(i, w, null, "W " + l));
                }
                case FORWARD -> accesses.add(new Access(i, w, "W " + l, null));
                case BACKWARD -> {
                    // one action reads W l (the input's gradient) and then writes dW l; the same buffer when sharded
                    accesses.add(new Access(i, w, "W " + l, null));
                    accesses.add(new Access(i, g, null, "dW " + l));
                }
                case REDUCE -> accesses.add(new Access(i, g, "dW " + l, "dW " + l + " reduced"));
                case OPTIMIZE -> {
                    accesses.add(new Access(i, g, "dW " + l + " reduced", null));
                    accesses.add(new Access(i, "master" + l + part, "master " + l, "master " + l));
                    if (!sharded) {
                        accesses.add(new Access(i, w, null, "W " + l));
                    }
                }
                default -> {
                }
            }
            whole.addAll(accesses);
        }
        int parts = tailChunks();
        Map<String, List<Access>> byBuffer = new HashMap<>();
        for (Access a : whole) {
            boolean block = a.buffer().contains("#");
            for (int k = 0; k < parts; k++) {
                if (!block || a.buffer().endsWith("#" + k)) {
                    String name = block ? a.buffer() : a.buffer() + "#" + k;
                    byBuffer.computeIfAbsent(name, n -> new ArrayList<>()).add(new Access(a.index(), name, a.reads(), a.writes()));
                }
            }
        }
        for (List<Access> list : byBuffer.values()) {
            for (int p = 0; p < list.size(); p++) {
                for (int q = p + 1; q < list.size(); q++) {
                    Access a = list.get(p);
                    Access b = list.get(q);
                    if ((a.writes() != null || b.writes() != null) && a.index() != b.index() && !c.ordered(a.index(), b.index())) {
                        throw Invariants.violated("race on " + a.buffer() + ": " + describe(c, a.index()) + " and "
                                + describe(c, b.index()) + " are not ordered (plan: " + this + ")");
                    }
                }
            }
            // every read sees the latest write before it in enqueue order (all accesses are ordered now), which must be
            // what it reads; a read with no write before it reads the initial content (weights loaded, masters set)
            for (Access r : list) {
                if (r.reads() == null) {
                    continue;
                }
                Access latest = null;
                for (Access w : list) {
                    if (w.writes() != null && w.index() < r.index() && (latest == null || c.before(latest.index(), w.index()))) {
                        latest = w;
                    }
                }
                if (latest != null && !c.before(latest.index(), r.index())) {
                    throw Invariants.violated(describe(c, r.index()) + " reads " + r.buffer() + " before "
                            + describe(c, latest.index()) + " has written it (plan: " + this + ")");
                }
                boolean initial = r.reads().startsWith("master") || (!sharded && r.reads().startsWith("W "));
                String seen = latest == null ? (initial ? r.reads() : "nothing") : latest.writes();
                if (!Objects.equals(seen, r.reads())) {
                    throw Invariants.violated(describe(c, r.index()) + " reads " + r.buffer() + " expecting '" + r.reads()
                            + "' but finds '" + seen + "'" + (latest == null ? "" : " written by " + describe(c, latest.index()))
                            + " (plan: " + this + ")");
                }
            }
        }
    }

    /**
     * Whether actions {@code a} and {@code b} of the plan (indices into {@link #actions()}) may run at the same time on
     * the GPU: neither happens before the other within one step.
     *
     * @param a an action's index
     * @param b another action's index
     * @return true when they may overlap
     */
    public boolean mayOverlap(int a, int b) {
        Clocks c = Clocks.of(this, 1);
        return !c.ordered(a, b);
    }

    private String describe(Clocks c, int i) {
        int n = actions.size();
        return c.run().get(i) + " (step " + i / n + ", action " + i % n + ")";
    }
}
