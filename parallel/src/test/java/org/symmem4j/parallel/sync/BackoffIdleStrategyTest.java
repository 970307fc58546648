package org.symmem4j.parallel.sync;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.sync.BackoffIdleStrategy.Phase;

/** The back-off's phases, counted idle by idle (no timing): spins, then yields, then parks doubling to the cap. */
class BackoffIdleStrategyTest {

    @Test
    void spinsThenYieldsThenParksDoublingUpToTheCapAndResetStartsOver() {
        BackoffIdleStrategy idle = new BackoffIdleStrategy(3, 2, 1, 8); // parks of 1..8 ns: the test does not wait
        for (int round = 0; round < 2; round++) {
            List<Phase> phases = new ArrayList<>();
            List<Long> parks = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                phases.add(idle.phase());
                assertEquals(i >= 5, idle.isParking(), "isParking before idle " + i);
                if (idle.phase() == Phase.PARK) {
                    parks.add(idle.nextParkNanos());
                }
                idle.idle();
            }
            assertEquals(List.of(Phase.SPIN, Phase.SPIN, Phase.SPIN, Phase.YIELD, Phase.YIELD, Phase.PARK, Phase.PARK,
                    Phase.PARK, Phase.PARK, Phase.PARK), phases, "round " + round);
            assertEquals(List.of(1L, 2L, 4L, 8L, 8L), parks, "round " + round + ": doubling, capped at 8");
            idle.reset();
            assertEquals(Phase.SPIN, idle.phase());
            assertFalse(idle.isParking());
            assertEquals(1, idle.nextParkNanos());
        }
    }

    @Test
    void noSpinsOrYieldsParksAtOnceAndUnboundedSpinsNeverPark() {
        BackoffIdleStrategy parker = new BackoffIdleStrategy(0, 0, 5, 5);
        assertEquals(Phase.PARK, parker.phase());
        assertTrue(parker.isParking());
        parker.idle();
        assertEquals(5, parker.nextParkNanos());

        BackoffIdleStrategy spinner = new BackoffIdleStrategy(Integer.MAX_VALUE, 0, 1, 1);
        for (int i = 0; i < 100_000; i++) {
            spinner.idle();
        }
        assertEquals(Phase.SPIN, spinner.phase());
    }

    @Test
    void boundsOutOfRangeAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new BackoffIdleStrategy(1, 1, 10, 5));
        assertTrue(e.getMessage().contains("minParkNanos=10") && e.getMessage().contains("fix:"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new BackoffIdleStrategy(-1, 1, 1, 1));
        assertThrows(IllegalArgumentException.class, () -> new BackoffIdleStrategy(1, -1, 1, 1));
        assertThrows(IllegalArgumentException.class, () -> new BackoffIdleStrategy(1, 1, 0, 1));
    }
}
