package org.symmem4j.pipeline.exec;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;

/**
 * The breakdown of a step written by hand (two ranks, times in microseconds), so every share is known: compute,
 * receive, send, optimizer, the executor's gaps between events and the time before and after a rank's step, clipped to the
 * window of the report, adding up to one, the idle parts to the report's bubble.
 */
class TimelineBreakdownTest {

    private static TimelineEvent e(int rank, Kind kind, int stage, int microbatch, long fromMicros, long toMicros) {
        int peer = kind == Kind.RECEIVE || kind == Kind.SEND ? 1 - stage : -1;
        return new TimelineEvent(rank, kind, stage, peer, microbatch, 7_000_000 + fromMicros * 1_000,
                7_000_000 + toMicros * 1_000);
    }

    @Test
    void splitsTheWindowOfEveryRankByWhatItDid() {
        StepTimeline rank0 = new StepTimeline(0, List.of(
                e(0, Kind.FORWARD, 0, 0, 0, 10),
                e(0, Kind.SEND, 0, 0, 10, 12),
                // 12..13: between two events (the executor's own time)
                e(0, Kind.RECEIVE, 0, 0, 13, 30),
                e(0, Kind.BACKWARD, 0, 0, 30, 50),
                e(0, Kind.OPTIMIZER_STEP, 0, -1, 50, 55))); // after the window: not counted
        StepTimeline rank1 = new StepTimeline(1, List.of(
                // 0..2: outside (the rank's step had not begun)
                e(1, Kind.RECEIVE, 1, 0, 2, 14),
                e(1, Kind.FORWARD, 1, 0, 14, 20),
                e(1, Kind.BACKWARD, 1, 0, 20, 28),
                e(1, Kind.SEND, 1, 0, 28, 30),
                e(1, Kind.OPTIMIZER_STEP, 1, -1, 30, 33)));
                // 33..50: outside (its step had ended)
        TimelineReport report = TimelineReport.of(List.of(rank0, rank1));
        TimelineBreakdown b = TimelineBreakdown.of(report);

        assertEquals(50_000, report.windowNanos());
        assertEquals(0.44, b.compute(), 1e-12);
        assertEquals(0.29, b.receive(), 1e-12);
        assertEquals(0.04, b.send(), 1e-12);
        assertEquals(0.03, b.optimizer(), 1e-12);
        assertEquals(0.01, b.between(), 1e-12);
        assertEquals(0.02, b.before(), 1e-12);
        assertEquals(0.17, b.after(), 1e-12);
        assertEquals(1.0, b.compute() + b.bubble(), 1e-12);
        assertEquals(report.bubbleFraction(), b.bubble(), 1e-12);
        assertEquals("receive 29.0 %, send 4.0 %, optimizer 3.0 %, between 1.0 %, before 2.0 %, after 17.0 %", b.idleText());
    }

    @Test
    void exactSimulatedTimelinesHaveTheSimulatorsBubbleAndNoGaps() {
        var shape = org.symmem4j.pipeline.schedule.PipelineShape.of(4, 8);
        var schedule = org.symmem4j.pipeline.schedule.ScheduleGenerators.oneFOneB(4, 8);
        TimelineReport report = TimelineReport.of(TimelineReportTest.timelinesOf(schedule, shape,
                TimelineReportTest.UNBALANCED, 0));
        TimelineBreakdown b = TimelineBreakdown.of(report);
        assertEquals(report.bubbleFraction(), b.bubble(), 1e-12);
        assertEquals(0.0, b.receive() + b.send(), 0.0, "no hand-off events on these timelines");
        assertEquals(b.bubble(), b.between() + b.before() + b.after() + b.optimizer(), 1e-12);
    }
}
