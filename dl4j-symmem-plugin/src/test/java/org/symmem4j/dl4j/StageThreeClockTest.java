package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * {@link StageThreeClock}'s two figures beside the waits: the communication thread's wake-up delay counts only the time
 * a collective waited while that thread was free (not the queue behind an earlier collective), and the worker's hook
 * work leaves out the gather waits inside the hook. Only lower bounds and bounds by measured intervals: no timing
 * assumption.
 */
class StageThreeClockTest {

    @Test
    void theWakeUpDelayCountsTheIdleThreadsLatenessNotTheQueue() throws InterruptedException {
        StageThreeClock clock = new StageThreeClock(1);
        clock.beginStep();
        long issued = clock.gatherIssued();
        Thread.sleep(3); // the thread was free: all of this is its delay
        long t0 = clock.gatherBegins(0, issued);
        long first = clock.step().commDelayNanos();
        assertTrue(first >= 3_000_000, "delay " + first);
        long queued = clock.reduceScatterIssued(); // issued while the gather runs: it queues behind it
        Thread.sleep(3);
        long beforeEnd = System.nanoTime();
        clock.gatherRan(t0);
        clock.reduceScatterRan(clock.reduceScatterBegins(queued));
        long after = System.nanoTime();
        long second = clock.step().commDelayNanos() - first;
        assertTrue(second >= 0 && second <= after - beforeEnd,
                "the 3 ms queued behind the gather are not a delay: " + second + " ns, at most " + (after - beforeEnd));
        StepReport.Collectives c = clock.step();
        assertTrue(c.commCpuNanos() >= 0 && c.commCpuNanos() <= c.gatherNanos() + c.reduceScatterNanos(),
                "the CPU time inside the collectives is part of their ran time: " + c);
        assertEquals(1, clock.step().gathers());
        assertEquals(1, clock.step().reduceScatters());
        clock.beginStep();
        assertEquals(0, clock.step().commDelayNanos());
    }

    @Test
    void hookWorkLeavesOutTheGatherWaitsInsideTheHook() {
        StageThreeClock clock = new StageThreeClock(1);
        clock.beginStep();
        Runnable waits = () -> {
            long t0 = System.nanoTime();
            sleep(3);
            clock.waitedForGather(0, t0, System.nanoTime()); // a wait inside the hook
        };
        clock.inHook(() -> { }); // the lambda machinery's first use outside the measured interval
        clock.beginStep();
        long a = System.nanoTime();
        clock.inHook(waits);
        long b = System.nanoTime();
        long work = clock.step().hookWorkNanos();
        long waited = clock.step().exposedGatherNanos();
        assertTrue(waited >= 3_000_000 && work >= 0 && work <= b - a - waited,
                "hook work " + work + " ns of " + (b - a) + " with a wait of " + waited);
        clock.inHook(() -> sleep(2)); // own work
        assertTrue(clock.step().hookWorkNanos() - work >= 2_000_000, clock.step().toString());
        long w0 = System.nanoTime();
        clock.waitedForGather(0, w0, w0 + 1_000_000); // outside a hook: not subtracted
        assertTrue(clock.step().hookWorkNanos() - work >= 2_000_000, clock.step().toString());
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
