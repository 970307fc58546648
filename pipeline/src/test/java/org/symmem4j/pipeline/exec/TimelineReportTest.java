package org.symmem4j.pipeline.exec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.trace.Json;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;
import org.symmem4j.pipeline.schedule.Action;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.SimulationResult;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * The report's figures on timelines written by hand from a simulator run (no threads, no clocks), so
 * every number is known: the measured bubble, per-stage means, the per-stage simulation, idle
 * intervals, and a whole run's Chrome trace.
 */
class TimelineReportTest {

    /** One simulator time unit is one microsecond on these timelines. */
    static final long UNIT_NANOS = 1_000;
    static final long ORIGIN = 5_000_000_000L;

    /** Timelines whose passes start and end exactly where the simulator puts them, {@code offset} later. */
    static List<StepTimeline> timelinesOf(Schedule schedule, PipelineShape shape, StageDurations durations, long offset) {
        SimulationResult.Completed run = ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
        List<StepTimeline> ranks = new ArrayList<>();
        for (int rank = 0; rank < shape.ranks(); rank++) {
            List<TimelineEvent> events = new ArrayList<>();
            List<Action> actions = schedule.actions(rank);
            long end = 0;
            for (int i = 0; i < actions.size(); i++) {
                Action a = actions.get(i);
                long start = ORIGIN + offset + run.startOf(rank, i) * UNIT_NANOS;
                end = start + durations.of(a.type(), a.stage()) * UNIT_NANOS;
                Kind kind = switch (a.type()) {
                    case FORWARD -> Kind.FORWARD;
                    case BACKWARD -> Kind.BACKWARD;
                    case INPUT_GRADIENT -> Kind.INPUT_GRADIENT;
                    case WEIGHT_GRADIENT -> Kind.WEIGHT_GRADIENT;
                };
                events.add(new TimelineEvent(rank, kind, a.stage(), -1, a.microbatch(), start, end));
            }
            events.add(new TimelineEvent(rank, Kind.OPTIMIZER_STEP, rank, -1, -1, end, end + 3 * UNIT_NANOS));
            ranks.add(new StepTimeline(rank, events));
        }
        return ranks;
    }

    /** An unbalanced 4-stage split: the output stage's passes take twice the others'. */
    static final StageDurations UNBALANCED = new StageDurations(new long[] {10, 10, 10, 20}, new long[] {20, 20, 20, 40}, 0);

    /**
     * ZB-H1 with DL4J's shape of split backwards: the output stage's input-gradient half holds its forward and loss, its
     * weight-gradient half little. The per-stage simulation takes each stage's measured halves and reproduces the
     * step exactly; with halves of equal time (what it assumed before) it predicts another bubble.
     */
    @Test
    void perStageSimulationOfAZeroBubbleStepUsesTheMeasuredWeightGradientShare() {
        PipelineShape shape = PipelineShape.of(4, 8);
        Schedule schedule = ScheduleGenerators.zeroBubbleH1(4, 8);
        long[] forward = {10, 10, 10, 1};
        long[] backward = {20, 20, 20, 40};
        StageDurations durations = new StageDurations(forward, backward, new long[] {10, 10, 10, 6}, 0);
        SimulationResult.Completed truth = ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
        TimelineReport report = TimelineReport.of(timelinesOf(schedule, shape, durations, 0));

        assertEquals(truth.bubbleFraction(), report.bubbleFraction(), 1e-12, "measured bubble of exact timelines");
        assertEquals(durations, report.stageDurationsMicros(shape));
        assertEquals(truth.bubbleFraction(), report.simulatePerStage(schedule, shape).bubbleFraction(), 0.0);
        double halves = ScheduleSimulator.simulate(schedule, shape, new StageDurations(forward, backward, 0))
                .requireCompleted().bubbleFraction();
        assertTrue(Math.abs(halves - truth.bubbleFraction()) > 0.01, "halves " + halves + " truth " + truth.bubbleFraction());
    }

    @Test
    void perStageSimulationReproducesAnUnbalancedSplitWhereTheUniformOneCannot() {
        PipelineShape shape = PipelineShape.of(4, 8);
        Schedule schedule = ScheduleGenerators.oneFOneB(4, 8);
        SimulationResult.Completed truth = ScheduleSimulator.simulate(schedule, shape, UNBALANCED).requireCompleted();
        TimelineReport report = TimelineReport.of(timelinesOf(schedule, shape, UNBALANCED, 0));

        assertEquals(truth.makespan() * UNIT_NANOS, report.windowNanos());
        assertEquals(truth.bubbleFraction(), report.bubbleFraction(), 1e-12, "measured bubble of exact timelines");
        for (int stage = 0; stage < 4; stage++) {
            assertEquals(UNBALANCED.forward()[stage] * UNIT_NANOS, report.stageMeanNanos(Kind.FORWARD, stage), 0.0);
            assertEquals(UNBALANCED.backward()[stage] * UNIT_NANOS, report.stageMeanNanos(Kind.BACKWARD, stage), 0.0);
        }
        assertEquals(UNBALANCED, report.stageDurationsMicros(shape));
        assertEquals(truth.bubbleFraction(), report.simulatePerStage(schedule, shape).bubbleFraction(), 0.0);
        // the uniform simulation averages the stages away: 1F1B's (p-1)/(m+p-1) = 27.3 %, far below the truth
        double uniform = report.simulate(schedule, shape).bubbleFraction();
        assertEquals(3.0 / 11, uniform, 1e-12);
        assertTrue(truth.bubbleFraction() > uniform + 0.1, "truth " + truth.bubbleFraction() + " uniform " + uniform);
        for (int rank = 0; rank < 4; rank++) {
            assertEquals(truth.rank(rank).idleTime() / (double) truth.makespan(), report.idleFraction(rank), 1e-12);
            long idle = report.idleIntervals(report.timelines().get(rank)).stream().mapToLong(g -> g[1] - g[0]).sum();
            assertEquals(truth.rank(rank).idleTime() * UNIT_NANOS, idle, "rank " + rank + " idle intervals");
        }
        assertThrows(IllegalArgumentException.class, () -> report.simulatePerStage(schedule, PipelineShape.of(2, 8)));
    }

    @Test
    void svgMarksEveryIdleIntervalAndHasALegendAndAnAxis() {
        PipelineShape shape = new PipelineShape(2, 4, 2);
        Schedule schedule = ScheduleGenerators.interleavedOneFOneB(2, 4, 2);
        StageDurations durations = new StageDurations(new long[] {3, 3, 3, 6}, new long[] {6, 6, 6, 12}, 0);
        List<StepTimeline> ranks = timelinesOf(schedule, shape, durations, 0);
        TimelineReport report = TimelineReport.of(ranks);
        String svg = report.svg("interleaved <test> & co");
        int idle = report.idleIntervals(ranks.get(0)).size() + report.idleIntervals(ranks.get(1)).size();
        assertTrue(idle >= 2);
        assertEquals(idle, count(svg, "class=\"idle\""));
        assertEquals(16, count(svg, "class=\"forward\""));
        assertEquals(16, count(svg, "class=\"backward\""));
        assertTrue(svg.contains("interleaved &lt;test&gt; &amp; co"), "escaped title");
        // a window of about 0.1 ms: ticks at 1, 2 or 5 x 10^k ms, labelled with as many decimals as they need
        assertTrue(count(svg, "class=\"tick\"") >= 5 && svg.contains("ms from the first pass"), "time axis");
        assertTrue(svg.contains(">0.00</text>") || svg.contains(">0.000</text>"), "axis labelled from 0 in ms");
        assertTrue(svg.contains("colour = microbatch"), "legend explains the colours");
    }

    @Test
    void wholeRunTraceHasEveryStepOnOneAxis() {
        PipelineShape shape = PipelineShape.of(2, 4);
        Schedule schedule = ScheduleGenerators.oneFOneB(2, 4);
        StageDurations durations = new StageDurations(new long[] {10, 15}, new long[] {20, 30}, 0);
        RunTimeline run = new RunTimeline(2);
        long gap = 1_000_000; // 1 ms between steps: the trainer's own time, visible in the trace
        for (int step = 0; step < 3; step++) {
            List<StepTimeline> timelines = new ArrayList<>(timelinesOf(schedule, shape, durations, step * gap));
            if (step == 0) {
                // one hand-off each way, to check the flow arrows
                long t = ORIGIN + 10 * UNIT_NANOS;
                List<TimelineEvent> r0 = new ArrayList<>(timelines.get(0).events());
                r0.add(new TimelineEvent(0, Kind.SEND, 0, 1, 0, t, t + 100));
                List<TimelineEvent> r1 = new ArrayList<>(timelines.get(1).events());
                r1.add(new TimelineEvent(1, Kind.RECEIVE, 1, 0, 0, t - 50, t + 150));
                timelines.set(0, new StepTimeline(0, r0));
                timelines.set(1, new StepTimeline(1, r1));
            }
            run.add(step, timelines, Map.of("loss", 2.5 - step, "examples", 32.0));
        }
        assertEquals(2, run.steps().size());
        assertEquals(1, run.droppedSteps());

        @SuppressWarnings("unchecked")
        Map<String, Object> trace = (Map<String, Object>) Json.parse(run.chromeTraceJson());
        @SuppressWarnings("unchecked")
        Map<String, Object> metadata = (Map<String, Object>) trace.get("metadata");
        assertEquals("2", metadata.get("steps"));
        assertEquals("1", metadata.get("droppedSteps"));
        assertTrue(((String) metadata.get("note")).contains("maxSteps=2"));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> events = (List<Map<String, Object>>) trace.get("traceEvents");
        List<Map<String, Object>> stepSlices = events.stream().filter(e -> "step".equals(e.get("cat"))).toList();
        assertEquals(2, stepSlices.size());
        double bubble = TimelineReport.of(timelinesOf(schedule, shape, durations, 0)).bubbleFraction();
        for (int step = 0; step < 2; step++) {
            @SuppressWarnings("unchecked")
            Map<String, Object> args = (Map<String, Object>) stepSlices.get(step).get("args");
            assertEquals((double) step, args.get("step"));
            assertEquals(2.5 - step, (Double) args.get("loss"), 1e-9);
            assertEquals(bubble, (Double) args.get("bubble"), 1e-8);
            // the second step starts 1 ms after the first on the same axis
            assertEquals(step * gap / 1e3, (Double) stepSlices.get(step).get("ts"), 1e-3);
        }
        long passes = events.stream().filter(e -> "forward".equals(e.get("cat")) || "backward".equals(e.get("cat"))).count();
        assertEquals(2 * 2 * 2 * 4, passes, "2 steps x 2 stages x forward and backward x 4 microbatches");
        List<Map<String, Object>> flows = events.stream().filter(e -> "handoff".equals(e.get("cat"))
                && !"X".equals(e.get("ph"))).toList();
        assertEquals(2, flows.size());
        assertEquals(flows.get(0).get("id"), flows.get(1).get("id"), "the send's flow ends at its receive");
        assertEquals(2, events.stream().filter(e -> "C".equals(e.get("ph"))).count(), "one bubble counter sample per step");
        assertTrue(events.stream().anyMatch(e -> "M".equals(e.get("ph")) && "steps".equals(
                ((Map<?, ?>) e.get("args")).get("name"))), "a named steps track");
        assertThrows(IllegalArgumentException.class, () -> new RunTimeline(0));
    }

    private static int count(String text, String part) {
        return text.split(java.util.regex.Pattern.quote(part), -1).length - 1;
    }
}
