package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * The recorder's times, from rows of (ms, begun, completed): ticks driven by hand here (never registered with the
 * clock), so every expected time is exact.
 */
class FlightRecorderTicksTest {

    private final AtomicLong begun = new AtomicLong();
    private final AtomicLong completed = new AtomicLong();

    @Test
    void aCollectiveIsDatedByTheFirstTickThatCountsItBegunAndCompleted() {
        FlightRecorderTicks t = new FlightRecorderTicks(begun::get, completed::get, 16);
        t.tick(1000); // nothing begun yet: the first row (0, 0)
        begun.set(1); // collective 0 begins
        t.tick(1001);
        t.tick(1002); // no change: no row
        completed.set(1);
        begun.set(3); // 0 returns, 1 and 2 begin between two ticks
        t.tick(1003);
        completed.set(2);
        t.tick(1004);
        assertEquals(1001, t.begunMillis(0));
        assertEquals(1003, t.completedMillis(0));
        assertEquals(1003, t.begunMillis(1));
        assertEquals(1003, t.begunMillis(2));
        assertEquals(1004, t.completedMillis(1));
        assertEquals(0, t.completedMillis(2), "not returned yet");
        assertEquals(0, t.begunMillis(3), "not begun yet");
        assertEquals(0, t.completedMillis(3), "never returned");
    }

    /**
     * A row never counts a collective completed that it does not count begun (completed is read first and begun is
     * raised to it), and counts never go back, so the binary search holds.
     */
    @Test
    void rowsAreMonotoneWhateverTheCountersSay() {
        FlightRecorderTicks t = new FlightRecorderTicks(begun::get, completed::get, 16);
        begun.set(2);
        completed.set(5); // read racily as ahead of begun: the row says begun 5
        t.tick(10);
        begun.set(1); // a stale read going back: ignored
        completed.set(1);
        t.tick(11);
        assertEquals(10, t.begunMillis(4));
        assertEquals(10, t.completedMillis(4));
        assertEquals(0, t.completedMillis(5), "the rows count 5 completed, no more");
    }

    /** When the rows kept no longer reach back to a collective's first tick, its time is unknown (0), not wrong. */
    @Test
    void aCollectiveOlderThanTheRowsKeptHasNoTime() {
        FlightRecorderTicks t = new FlightRecorderTicks(begun::get, completed::get, 16); // 64 rows kept
        for (int s = 0; s < 100; s++) {
            begun.set(s + 1);
            t.tick(2000 + 2L * s);
            completed.set(s + 1);
            t.tick(2001 + 2L * s);
        }
        // 200 rows written, the newest 64 kept: rows 136..199, collectives 68..99
        assertEquals(0, t.begunMillis(10), "its rows are gone");
        assertEquals(0, t.begunMillis(68), "counted already by the oldest row kept: its first tick is gone");
        assertEquals(2000 + 2L * 69, t.begunMillis(69));
        assertEquals(2001 + 2L * 68, t.completedMillis(68));
        assertEquals(2001 + 2L * 99, t.completedMillis(99));
    }
}
