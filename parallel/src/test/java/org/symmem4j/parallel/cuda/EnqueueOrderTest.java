package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicLongArray;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.group.InJvmWorld;

/** {@link EnqueueOrder}: ranks in one process enter unit n + 1 only after every peer has left unit n. CPU only. */
class EnqueueOrderTest {

    private static final int UNITS = 40;

    @Test
    void noRankEntersAUnitBeforeEveryPeerLeftTheOneBefore() {
        int world = 3;
        int before = EnqueueOrder.live();
        // units each rank has left, published after exit(): a rank entering unit n must see every peer at n or more
        AtomicLongArray left = new AtomicLongArray(world);
        List<Long> violations = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults(), group -> {
            EnqueueOrder.Seat seat = EnqueueOrder.join(group, "enqueue-order-test");
            assertNotNull(seat, "threads of one process share an order");
            long seen = 0;
            for (int n = 0; n < UNITS; n++) {
                seat.enter();
                for (int p = 0; p < world; p++) {
                    if (p != group.rank() && left.get(p) < n) {
                        seen++;
                    }
                }
                if (group.rank() == (n % world)) {
                    // one rank slow to finish enqueuing its unit: the others must wait for it, not run ahead
                    Thread.sleep(2);
                }
                left.set(group.rank(), n + 1);
                seat.exit();
            }
            seat.leave();
            return seen;
        });
        assertEquals(List.of(0L, 0L, 0L), violations, "entries into a unit before a peer had left the unit before, per rank");
        assertEquals(before, EnqueueOrder.live(), "the last rank to leave removes the order");
    }

    @Test
    void aRankThatStopsIsNamedAfterTheTimeout() {
        GroupOptions quick = GroupOptions.defaults().withTimeout(Duration.ofMillis(300));
        List<String> outcomes = InJvmWorld.runOnEveryRank(2, quick, group -> {
            EnqueueOrder.Seat seat = EnqueueOrder.join(group, "enqueue-order-stop");
            try {
                if (group.rank() == 1) {
                    return "stopped";  // makes no call
                }
                seat.enter();  // call 0 needs nothing before it
                seat.exit();
                PeerTimeoutException e = assertThrows(PeerTimeoutException.class, seat::enter);
                assertEquals(List.of(1), e.missingRanks());
                assertTrue(e.getMessage().contains("ranks [1] have not enqueued call 0"), e.getMessage());
                return "timed out";
            } finally {
                seat.leave();
            }
        });
        assertEquals(List.of("timed out", "stopped"), outcomes);
    }
}
