package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * {@link DistributedTensorExample}: the row-sharded embedding table's lookups, slice, redistribution and gather, as
 * threads (a 2 x 2 grid on four ranks, column blocks on three) and as launched processes; its gathered-table check
 * finds a wrong value.
 */
class DistributedTensorExampleTest {

    private static final DistributedTensorExample.Settings SMALL =
            new DistributedTensorExample.Settings(1000, 16, 2000);

    @Test
    void fourRankThreadsLookUpFromPeersAndGatherTheBlocksExactly() {
        List<DistributedTensorExample.Outcome> outcomes = InJvmWorld.runOnEveryRank(4, GroupOptions.defaults(),
                group -> DistributedTensorExample.run(group, SMALL));
        DistributedTensorExample.Outcome o = outcomes.getFirst();
        for (DistributedTensorExample.Outcome other : outcomes) {
            assertEquals(o, other, "every rank returns the exchanged outcome");
        }
        assertEquals(4, o.ranks());
        assertEquals(4 * 2000, o.lookups());
        assertEquals(4 * 2000 / DistributedTensorExample.SENTENCE, o.sentences());
        // uniform random rows over four equal shards: about three in four are a peer's
        assertTrue(o.fromPeers() > 0.65 * o.lookups() && o.fromPeers() < 0.85 * o.lookups(), o.toString());
        assertEquals(2 * DistributedTensorExample.SLICE_HALF, o.sliceRows());
        assertEquals(List.of(2, 2), o.grid());
        assertEquals(1000 * 16, o.gathered());
    }

    @Test
    void threeRankThreadsRedistributeToColumnBlocks() {
        DistributedTensorExample.Outcome o = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(),
                group -> DistributedTensorExample.run(group, new DistributedTensorExample.Settings(101, 10, 333)))
                .getFirst();
        assertEquals(List.of(1, 3), o.grid());
        assertEquals(101 * 10, o.gathered());
        assertEquals(3 * (333 / DistributedTensorExample.SENTENCE + 1), o.sentences(), "a short last sentence each");
    }

    @Test
    void theGridIsTheSquarestFactorization() {
        assertArrayEquals(new int[] {1, 2}, DistributedTensorExample.grid(2));
        assertArrayEquals(new int[] {1, 3}, DistributedTensorExample.grid(3));
        assertArrayEquals(new int[] {2, 2}, DistributedTensorExample.grid(4));
        assertArrayEquals(new int[] {2, 3}, DistributedTensorExample.grid(6));
        assertArrayEquals(new int[] {2, 4}, DistributedTensorExample.grid(8));
        assertArrayEquals(new int[] {3, 3}, DistributedTensorExample.grid(9));
    }

    @Test
    void theGatheredCheckCountsValuesOffTheFormula() {
        DistributedTensorExample.Settings s = new DistributedTensorExample.Settings(7, 5, 1);
        MemorySegment whole = MemorySegment.ofArray(new float[7 * 5]);
        for (int r = 0; r < 7; r++) {
            for (int c = 0; c < 5; c++) {
                whole.setAtIndex(ValueLayout.JAVA_FLOAT, r * 5 + c,
                        DistributedTensorExample.updated(DistributedTensorExample.embedding(r, c), r, c));
            }
        }
        assertArrayEquals(new long[] {0, -1}, DistributedTensorExample.checkGathered(whole, s));
        whole.setAtIndex(ValueLayout.JAVA_FLOAT, 3 * 5 + 2, DistributedTensorExample.embedding(3, 2)); // not updated
        assertArrayEquals(new long[] {1, 17}, DistributedTensorExample.checkGathered(whole, s));
    }

    private static final Pattern LINE = Pattern.compile("\\[rank 0\\] distributed tensor: a 600 x 8 float32 embedding"
            + " table, rows sharded over 3 ranks; (\\d+) lookups \\((\\d+) zero-copy.*getRows of 16 rows.*redistributed"
            + " to a 1 x 3 grid of blocks.*gathered on rank 0: 4800 values, every one exact");

    @Test
    void threeLaunchedProcessesShareTheTable() throws IOException {
        String out = LaunchedJvm.launchRanksReportingFromRankZero(3, "128m", DistributedTensorExample.class,
                List.of("--rows", "600", "--dim", "8", "--lookups", "1000"), "distributed tensor");
        Matcher m = LINE.matcher(out);
        assertTrue(m.find(), "rank 0 prints the result: " + out);
        assertEquals("3000", m.group(1));
        long fromPeers = Long.parseLong(m.group(2));
        assertTrue(fromPeers > 1500 && fromPeers < 2500, "about two in three lookups read a peer's shard: " + out);
    }
}
