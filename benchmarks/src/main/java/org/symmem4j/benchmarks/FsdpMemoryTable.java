package org.symmem4j.benchmarks;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.tensor.ShardedStepMemory;
import org.symmem4j.parallel.tensor.ShardedStepMemory.Purpose;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Peak GPU memory per rank of the MLP block's fully sharded training step, computed from the shapes: ours
 * ({@link ShardedStepMemory}, what {@code FullyShardedMlp} allocates, the benchmark's "accounted" column) against what
 * PyTorch FSDP2 holds at its peak in {@code bench/gpu/torch_anchors.py --what fsdp} (what
 * {@code torch.cuda.max_memory_allocated} measures there), component by component. Runs without GPUs.
 *
 * <p>FSDP2's peak ({@code fully_shard} on each {@code Linear} and on the block, {@code reshard_after_forward} on,
 * {@code MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)}, {@code torch.optim.Adam}, foreach): during the
 * backward of the block's ReLU, after {@code Linear2}'s post-backward hook. Live then:
 * <pre>
 *   float32 parameter shards (both layers), Adam exp_avg and exp_avg_sq       12·P/N   (after the first step)
 *   Linear2's reduced gradient shard, float32 (cast from the bf16 output)      4·P2/N
 *   Linear2's reduce-scatter input, bf16 (kept until the next reduce-scatter)  2·P2
 *   Linear1's unsharded bf16 weight (prefetched by Linear2's pre-backward)     2·P1
 *   x, dy, y (T × h, bf16) and the warm-up's y, which the script still holds   4 · 2·T·h
 *   ReLU's output (saved), its gradient, ReLU backward's output (T × f, bf16)  3 · 2·T·f
 * </pre>
 * This is a lower bound of the measured peak (other moments can be higher: the first cell also counts PyTorch's
 * cuBLAS workspaces, and a record_stream'd bf16 reduce-scatter output can still count); on 2 and 4 H200s
 * (2026-11-28) it is within 0.2 % of the measured peak at the 16384-token shapes and 3–4 % under it at the 8192-token
 * ones. Ours: everything {@link ShardedStepMemory} lists, all held for the whole step:
 * <pre>
 *   float32 master shards, Adam m and v                                         12·P/N
 *   two bf16 working buffers: W1, and W2 then dW2 (the reduce-scatter input)    2·P1 + 2·P2
 *   x, dy, y (T × h, bf16)                                                      3 · 2·T·h
 *   the hidden activation (saved) and its gradient (ReLU backward in place)     2 · 2·T·f
 * </pre>
 * FSDP2's minus ours: {@code 4·P2/N + 2·T·h + 2·T·f} bytes (+ the partition's padding, ours): ours is lower at every
 * shape and GPU count, also without the script's extra {@code y}.
 */
public final class FsdpMemoryTable {

    @Command(name = "FsdpMemoryTable", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Peak GPU memory per rank of the MLP block's FSDP step, ours against"
                    + " PyTorch FSDP2's, computed from the shapes (no GPU).")
    static final class Flags {
        @Option(names = "--shapes", split = ",", paramLabel = "TxHxF", description = "tokens per rank x hidden x ffn")
        List<String> shapes = List.of("8192x4096x14336", "16384x4096x14336", "8192x8192x28672", "16384x8192x28672");
        @Option(names = "--gpus", split = ",", paramLabel = "N", description = "GPU counts (ranks)")
        List<Integer> gpus = List.of(2, 4);
    }

    /**
     * One item of a rank's peak.
     *
     * @param what  what it holds
     * @param bytes its bytes
     */
    record Item(String what, long bytes) {
    }

    private FsdpMemoryTable() {
    }

    public static void main(String[] args) {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            for (String s : f.shapes) {
                FsdpMlpBench.shape(s);
            }
            for (int n : f.gpus) {
                Cli.positive("--gpus", n);
            }
            return f;
        });
        System.out.print(markdown(flags.shapes, flags.gpus));
    }

    /**
     * Ours, the largest of any rank (ranks differ only by the partition's padding).
     *
     * @param tokens tokens per rank
     * @param hidden h
     * @param ffn    f
     * @param world  ranks
     * @return the items
     */
    static List<Item> ours(int tokens, int hidden, int ffn, int world) {
        ShardedStepMemory m = ShardedStepMemory.of(tokens, new int[] {hidden, ffn, hidden}, world, 0, true);
        for (int r = 1; r < world; r++) {
            ShardedStepMemory other = ShardedStepMemory.of(tokens, new int[] {hidden, ffn, hidden}, world, r, true);
            m = other.total() > m.total() ? other : m;
        }
        long th = 2L * tokens * hidden;
        long tf = 2L * tokens * ffn;
        long activations = m.bytes(Purpose.ACTIVATIONS);
        if (activations != 3 * th + 2 * tf) {
            throw new IllegalStateException("ShardedStepMemory's activations of the MLP block are " + activations
                    + " bytes, this table explains " + (3 * th + 2 * tf) + " (fix: update FsdpMemoryTable's items)");
        }
        return List.of(new Item("f32 master shards + Adam m, v (12·P/N)", m.bytes(Purpose.STATE)),
                new Item("f32 reduced gradient shard", 0),
                new Item("bf16 working buffers: W1; W2 then dW2 = reduce-scatter input (2·P)", m.bytes(Purpose.WEIGHTS)
                        + m.bytes(Purpose.GRADIENTS)),
                new Item("x, dy, y (T×h bf16)", 3 * th),
                new Item("warm-up y held by the script (T×h)", 0),
                new Item("hidden activation, its gradient (T×f bf16)", 2 * tf));
    }

    /**
     * FSDP2's at its peak moment (the class comment), for shapes that every GPU count divides.
     *
     * @param tokens tokens per rank
     * @param hidden h
     * @param ffn    f
     * @param world  ranks
     * @return the items
     * @throws IllegalArgumentException when {@code world} does not divide {@code ffn} and {@code hidden} (FSDP2 pads its
     *                                  shards then; not modelled)
     */
    static List<Item> fsdp2(int tokens, int hidden, int ffn, int world) {
        if (ffn % world != 0 || hidden % world != 0) {
            throw new IllegalArgumentException("hidden=" + hidden + " ffn=" + ffn + " world=" + world + ": expected world to"
                    + " divide both (FSDP2 pads the dim-0 shards otherwise, which this table does not model; fix: pick such"
                    + " shapes, as the benchmark's)");
        }
        long layer = (long) hidden * ffn;
        long th = 2L * tokens * hidden;
        long tf = 2L * tokens * ffn;
        return List.of(new Item("f32 parameter shards + Adam exp_avg, exp_avg_sq (12·P/N)", 12 * 2 * layer / world),
                new Item("f32 reduced gradient shard of Linear2 (4·P2/N)", 4 * layer / world),
                new Item("bf16 Linear1 weight prefetched + Linear2 reduce-scatter input (2·P)", 2 * layer + 2 * layer),
                new Item("x, dy, y (T×h bf16)", 3 * th),
                new Item("warm-up y held by the script (T×h)", th),
                new Item("ReLU output, its gradient, ReLU backward's output (T×f bf16)", 3 * tf));
    }

    static long total(List<Item> items) {
        return items.stream().mapToLong(Item::bytes).sum();
    }

    private static final double GIB = 1024.0 * 1024 * 1024;

    /** The totals table, then per shape and GPU count the items side by side. */
    static String markdown(List<String> shapes, List<Integer> gpus) {
        StringBuilder b = new StringBuilder();
        b.append("| GPUs | tokens × hidden × ffn | ours GiB | FSDP2 at its peak GiB | ours / FSDP2 | FSDP2 − ours GiB |\n");
        b.append("|---:|---|---:|---:|---:|---:|\n");
        List<String> detail = new ArrayList<>();
        for (int n : gpus) {
            for (String s : shapes) {
                int[] thf = FsdpMlpBench.shape(s);
                List<Item> o = ours(thf[0], thf[1], thf[2], n);
                List<Item> f = fsdp2(thf[0], thf[1], thf[2], n);
                b.append(String.format(Locale.ROOT, "| %d | %s | %.3f | %.3f | %.3f | %.3f |%n", n, s.replace("x", " × "),
                        total(o) / GIB, total(f) / GIB, (double) total(o) / total(f), (total(f) - total(o)) / GIB));
                StringBuilder d = new StringBuilder();
                d.append(String.format(Locale.ROOT, "%n%d GPUs, %s (GiB per rank; ours: the same item as we hold it, 0 where"
                        + " we hold none):%n%n| item | ours | FSDP2 |%n|---|---:|---:|%n", n, s.replace("x", " × ")));
                for (int i = 0; i < o.size(); i++) {
                    d.append(String.format(Locale.ROOT, "| %s | %.3f | %.3f |%n", f.get(i).what(), o.get(i).bytes() / GIB,
                            f.get(i).bytes() / GIB));
                }
                d.append(String.format(Locale.ROOT, "| total | %.3f | %.3f |%n", total(o) / GIB, total(f) / GIB));
                detail.add(d.toString());
            }
        }
        detail.forEach(b::append);
        return b.toString();
    }
}
