package org.symmem4j.examples;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

import org.symmem4j.parallel.Group;
import org.symmem4j.state.DistributedTensor;
import org.symmem4j.state.ElementType;
import org.symmem4j.state.TensorSharding;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * An embedding table sharded by rows over the ranks, on a {@link DistributedTensor}, no DL4J: each rank fills its own
 * rows ({@link DistributedTensor#localShard()}), then looks up the embeddings of its batch of token ids (random rows,
 * most of them on other ranks) and sums them per sentence, reading a peer's rows in place through
 * {@link DistributedTensor#shard(int)} (zero-copy) — every sentence's vector is checked bitwise against the formula
 * that filled the table. Each rank copies a slice of rows that spans two ranks' shards with
 * {@link DistributedTensor#getRows}, {@link DistributedTensor#redistribute}s the table into a grid of 2-D blocks
 * (2 x 2 on four ranks), applies an update to its block in place, and the blocks are {@link DistributedTensor#gather}ed
 * on rank 0, which checks every value of the whole table against the formula, exactly. Host memory (threads or
 * processes); on GPUs the same calls run with the tensor created from a {@code Communicator} (docs/shared-state.md).
 *
 * <pre>
 *   java ... org.symmem4j.examples.DistributedTensorExample [--ranks N] [--rows V] [--dim D] [--lookups L]
 *   bin/symmem4j-run -n 4 --java -cp CLASSPATH org.symmem4j.examples.DistributedTensorExample
 * </pre>
 */
public final class DistributedTensorExample {

    private DistributedTensorExample() {
    }

    @Command(name = "DistributedTensorExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "A row-sharded embedding table: zero-copy lookups from peers'"
            + " shards, a slice across shards, a redistribution to 2-D blocks and a gather, each checked exactly.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads, at least 2; ignored when started"
                + " by a launcher")
        int ranks = 4;
        @Option(names = "--rows", paramLabel = "V", description = "rows of the table (the vocabulary)")
        int rows = 20_000;
        @Option(names = "--dim", paramLabel = "D", description = "columns of the table (the embedding size)")
        int dim = 64;
        @Option(names = "--lookups", paramLabel = "L", description = "token lookups per rank")
        int lookups = 100_000;
    }

    /** What one run does: every rank passes the same. */
    record Settings(int rows, int dim, int lookups) {
    }

    /** Tokens per sentence: a sentence's vector is the sum of its tokens' embeddings. */
    static final int SENTENCE = 16;
    /** Rows on each side of a shard boundary in the slice a rank copies with getRows. */
    static final int SLICE_HALF = 8;
    /** The fix of a failed check: the settings cannot cause one. */
    static final String DEFECT = " (fix: none in the settings; a defect of DistributedTensor: report it with this"
            + " message)";

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--rows", flags.rows);
            Cli.positive("--dim", flags.dim);
            Cli.positive("--lookups", flags.lookups);
            if ((long) flags.rows * flags.dim > Integer.MAX_VALUE - 8) {
                throw new IllegalArgumentException("--rows=" + flags.rows + " --dim=" + flags.dim
                        + " expected a table of at most 2^31 values (rank 0 gathers it into one float array; fix: fewer"
                        + " rows or columns)");
            }
            if (flags.ranks < 2) {
                throw new IllegalArgumentException("--ranks=" + flags.ranks + " expected >= 2 (fix: --ranks 2 or"
                        + " more: a shard per rank, and the lookups read peers' shards)");
            }
            if (flags.rows < flags.ranks && System.getenv("RANK") == null) {
                throw new IllegalArgumentException("--rows=" + flags.rows + " expected >= --ranks=" + flags.ranks
                        + " (fix: at least a row per rank)");
            }
            return flags;
        });
        Settings s = new Settings(f.rows, f.dim, f.lookups);
        ExampleRanks.runAndPrintRankZero("DistributedTensorExample", f.ranks, group -> run(group, s), Outcome::line);
    }

    /** The table's value at (row, column): exact in float32 (16 + 7 bits of 24), so checks compare bits. */
    static float embedding(long row, long column) {
        return (row & 0xFFFF) + (column & 127) / 128f;
    }

    /** The update each rank applies to its block after the redistribution, as an optimizer step would. */
    static float updated(float value, long row, long column) {
        return value - 0.5f * (((row + column) & 7) * 0.25f);
    }

    /** The grid of blocks closest to square for {@code ranks}: rows x columns, rows <= columns. */
    static int[] grid(int ranks) {
        int gridRows = (int) Math.sqrt(ranks);
        while (ranks % gridRows != 0) {
            gridRows--;
        }
        return new int[] {gridRows, ranks / gridRows};
    }

    /**
     * What the run checked and measured, the same on every rank (exchanged at the end).
     *
     * @param ranks           the group's ranks
     * @param rows            rows of the table
     * @param dim             columns of the table
     * @param lookups         token lookups, every rank together
     * @param fromPeers       those read in place from another rank's shard
     * @param sentences       sentence vectors summed and checked, every rank together
     * @param sliceRows       rows each rank copied across a shard boundary with getRows
     * @param grid            the block grid after the redistribution: rows, columns
     * @param gathered        values rank 0 gathered and checked
     * @param lookupsPerSecond lookups per second per rank, averaged
     */
    record Outcome(int ranks, int rows, int dim, long lookups, long fromPeers, long sentences, int sliceRows,
                   List<Integer> grid, long gathered, double lookupsPerSecond) {
        String line() {
            return String.format("distributed tensor: a %d x %d float32 embedding table, rows sharded over %d ranks;"
                    + " %d lookups (%d zero-copy from peers' shards, %.1f M/s per rank) summed into %d sentence"
                    + " vectors,"
                    + " each bitwise the formula's; getRows of %d rows across a shard boundary on every rank, exact;"
                    + " redistributed to a %d x %d grid of blocks, each rank updated its block; gathered on rank 0:"
                    + " %d values, every one exact",
                    rows, dim, ranks, lookups, fromPeers, lookupsPerSecond / 1e6, sentences, sliceRows, grid.get(0),
                    grid.get(1), gathered);
        }
    }

    /**
     * Runs the example on this rank (collective: every rank calls it with the same settings).
     *
     * @param group this rank's group, at least 2 ranks
     * @param s     the same on every rank
     * @return the outcome, the same on every rank
     * @throws IllegalStateException when a value read, copied or gathered is not the formula's
     */
    static Outcome run(Group group, Settings s) {
        int n = group.worldSize();
        if (n < 2 || s.rows() < n) {
            throw new IllegalArgumentException("distributed tensor example on worldSize=" + n + " rows=" + s.rows()
                    + " expected >= 2 ranks and at least one row per rank (fix: more ranks or more rows)");
        }
        int[] grid = grid(n);
        try (DistributedTensor table = DistributedTensor.create(group, TensorSharding.rows(), ElementType.FLOAT32,
                s.rows(), s.dim())) {
            return ExampleRanks.abortingOnFailure(group, () -> shareTable(group, s, table, grid));
        }
    }

    private static Outcome shareTable(Group group, Settings s, DistributedTensor table, int[] grid) {
        int me = group.rank();
        int n = group.worldSize();
        fillOwnRows(table, me);
        table.barrier(); // every rank's rows are in before any rank reads a peer's

        long[] counts = lookUp(table, s, me, n);
        int sliceRows = copySliceAcrossBoundary(table, me, n);

        try (DistributedTensor blocks = table.redistribute(TensorSharding.blocks(grid[0], grid[1]))) {
            return ExampleRanks.abortingOnFailure(group, () -> {
                updateOwnBlock(blocks, me);
                MemorySegment whole = me == 0 ? MemorySegment.ofArray(new float[s.rows() * s.dim()]) : null;
                blocks.gather(0, whole); // collective: every block's update is in
                long[] verdict = me == 0 ? checkGathered(whole, s) : new long[] {0, -1};
                long[][] all = ExampleRanks.allGatherLongs(group, "distributed-tensor-example-checked",
                        new long[] {counts[0], counts[1], counts[2], counts[3], verdict[0], verdict[1]});
                if (all[0][4] != 0) { // every rank fails together: rank 0's verdict came with the exchange
                    long at = all[0][5];
                    throw new IllegalStateException("distributed tensor example: the gathered table has " + all[0][4]
                            + " values off the formula, the first at row=" + at / s.dim() + " column=" + at % s.dim()
                            + ": expected updated(embedding(row, column)) bitwise" + DEFECT);
                }
                return outcome(all, s, sliceRows, grid, (long) s.rows() * s.dim());
            });
        }
    }


    private static void fillOwnRows(DistributedTensor table, int me) {
        MemorySegment shard = table.localShard();
        long first = table.firstRow(me);
        long columns = table.columns();
        for (long r = 0; r < table.rows(me); r++) {
            for (long c = 0; c < columns; c++) {
                shard.setAtIndex(ValueLayout.JAVA_FLOAT, r * columns + c, embedding(first + r, c));
            }
        }
    }

    /**
     * This rank's batch: {@code lookups} random token ids, summed per sentence from whichever shard holds each row,
     * read in place, each sentence checked. Returns lookups, lookups from peers, sentences, nanoseconds spent looking
     * up (the checks not counted).
     */
    private static long[] lookUp(DistributedTensor table, Settings s, int me, int ranks) {
        int dim = s.dim();
        MemorySegment[] shards = new MemorySegment[ranks];
        for (int r = 0; r < ranks; r++) {
            shards[r] = table.shard(r); // a peer's is zero-copy: its memory, mapped in this rank
        }
        SplittableRandom random = new SplittableRandom(1234 + me);
        float[] sentence = new float[dim];
        long[] tokens = new long[SENTENCE];
        int inSentence = 0;
        long fromPeers = 0;
        long sentences = 0;
        long checking = 0;
        long start = System.nanoTime();
        for (int t = 0; t < s.lookups(); t++) {
            long row = random.nextInt(s.rows());
            int owner = table.ownerOf(row);
            MemorySegment shard = shards[owner];
            long offset = (row - table.firstRow(owner)) * table.rowBytes();
            for (int c = 0; c < dim; c++) {
                sentence[c] += shard.get(ValueLayout.JAVA_FLOAT, offset + 4L * c);
            }
            fromPeers += owner != me ? 1 : 0;
            tokens[inSentence++] = row;
            if (inSentence == SENTENCE || t + 1 == s.lookups()) {
                long checkStart = System.nanoTime();
                checkSentence(sentence, tokens, inSentence, me, t);
                Arrays.fill(sentence, 0);
                inSentence = 0;
                sentences++;
                checking += System.nanoTime() - checkStart;
            }
        }
        return new long[] {s.lookups(), fromPeers, sentences, System.nanoTime() - start - checking};
    }

    /** The sentence that ended at lookup {@code last}: the same sums of the formula's values, in the same order. */
    private static void checkSentence(float[] sentence, long[] tokens, int count, int me, int last) {
        for (int c = 0; c < sentence.length; c++) {
            float expected = 0;
            for (int t = 0; t < count; t++) {
                expected += embedding(tokens[t], c);
            }
            if (Float.floatToRawIntBits(expected) != Float.floatToRawIntBits(sentence[c])) {
                throw new IllegalStateException("distributed tensor example: rank=" + me + " sentence ending at lookup "
                        + last + " column=" + c + " summed " + sentence[c] + ", expected " + expected + " bitwise"
                        + DEFECT);
            }
        }
    }

    /**
     * Copies the rows around the boundary between two ranks' shards (rank {@code 1 + me mod (n-1)} and the one before
     * it) with getRows, from both shards at once, and checks them. Returns the rows copied.
     */
    private static int copySliceAcrossBoundary(DistributedTensor table, int me, int n) {
        int upper = 1 + me % (n - 1);
        long boundary = table.firstRow(upper);
        long first = Math.max(0, boundary - SLICE_HALF);
        long last = Math.min(table.firstRow(n), boundary + SLICE_HALF); // exclusive
        int count = (int) (last - first);
        MemorySegment slice = MemorySegment.ofArray(new float[count * (int) table.columns()]);
        table.getRows(first, count, slice);
        for (long r = 0; r < count; r++) {
            for (long c = 0; c < table.columns(); c++) {
                float got = slice.getAtIndex(ValueLayout.JAVA_FLOAT, r * table.columns() + c);
                if (Float.floatToRawIntBits(got) != Float.floatToRawIntBits(embedding(first + r, c))) {
                    throw new IllegalStateException("distributed tensor example: rank=" + me + " getRows(" + first
                            + ", " + count + ") row=" + (first + r) + " column=" + c + " holds " + got + ", expected "
                            + embedding(first + r, c) + DEFECT);
                }
            }
        }
        return count;
    }

    /** Checks this rank's block after the redistribution against the formula, then updates it in place. */
    private static void updateOwnBlock(DistributedTensor blocks, int me) {
        MemorySegment block = blocks.localShard();
        long row0 = blocks.firstRow(me);
        long column0 = blocks.firstColumn(me);
        long columns = blocks.columns(me);
        for (long r = 0; r < blocks.rows(me); r++) {
            for (long c = 0; c < columns; c++) {
                long at = r * columns + c;
                float v = block.getAtIndex(ValueLayout.JAVA_FLOAT, at);
                if (Float.floatToRawIntBits(v) != Float.floatToRawIntBits(embedding(row0 + r, column0 + c))) {
                    throw new IllegalStateException("distributed tensor example: rank=" + me + " block after the"
                            + " redistribution holds " + v + " at row=" + (row0 + r) + " column=" + (column0 + c)
                            + ", expected " + embedding(row0 + r, column0 + c) + DEFECT);
                }
                block.setAtIndex(ValueLayout.JAVA_FLOAT, at, updated(v, row0 + r, column0 + c));
            }
        }
    }

    /** Rank 0: values of the gathered table off the formula, and the index of the first (-1 when none). */
    static long[] checkGathered(MemorySegment whole, Settings s) {
        long wrong = 0;
        long first = -1;
        for (long r = 0; r < s.rows(); r++) {
            for (long c = 0; c < s.dim(); c++) {
                long at = r * s.dim() + c;
                float expected = updated(embedding(r, c), r, c);
                if (Float.floatToRawIntBits(whole.getAtIndex(ValueLayout.JAVA_FLOAT, at))
                        != Float.floatToRawIntBits(expected)) {
                    first = first < 0 ? at : first;
                    wrong++;
                }
            }
        }
        return new long[] {wrong, first};
    }

    private static Outcome outcome(long[][] all, Settings s, int sliceRows, int[] grid, long gathered) {
        long lookups = 0;
        long fromPeers = 0;
        long sentences = 0;
        double rate = 0;
        for (long[] rank : all) {
            lookups += rank[0];
            fromPeers += rank[1];
            sentences += rank[2];
            rate += rank[0] / (rank[3] / 1e9) / all.length;
        }
        return new Outcome(all.length, s.rows(), s.dim(), lookups, fromPeers, sentences, sliceRows,
                List.of(grid[0], grid[1]), gathered, rate);
    }
}
