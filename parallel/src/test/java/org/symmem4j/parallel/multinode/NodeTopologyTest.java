package org.symmem4j.parallel.multinode;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;

/** The layout arithmetic the hierarchical collectives rely on. */
class NodeTopologyTest {

    @Test
    void packedOrderPutsEveryMachinesBlockOfALocalRankTogether() {
        // 3 machines x 2 ranks: ranks 0 1 | 2 3 | 4 5; local rank 0's blocks (ranks 0, 2, 4) first, then local rank 1's
        NodeTopology t = NodeTopology.fromIds(List.of("a", "a", "b", "b", "c", "c"), 3);
        assertEquals(new NodeTopology(3, 2, 1, 1), t);
        long[] expected = {0, 3, 1, 4, 2, 5};
        for (int rank = 0; rank < 6; rank++) {
            assertEquals(expected[rank], t.packedIndex(rank), "rank " + rank);
        }
        // one rank per machine: the packed order is the rank order
        NodeTopology single = NodeTopology.fromIds(List.of("a", "b", "c"), 0);
        for (int rank = 0; rank < 3; rank++) {
            assertEquals(rank, single.packedIndex(rank));
        }
    }
}
