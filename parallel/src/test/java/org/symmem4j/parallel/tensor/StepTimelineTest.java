package org.symmem4j.parallel.tensor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Action;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Kind;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Stream;
import org.symmem4j.parallel.tensor.StepTimeline.Span;
import org.symmem4j.parallel.tensor.StepTimeline.Timeline;

/**
 * What a step's timeline says (head, tail and its actions, busy time per stream), on spans made up on the host for the
 * MLP block's plan with two tail blocks; the events themselves are {@code CudaFullyShardedMlpTest}'s.
 */
class StepTimelineTest {

    @Test
    void headTailAndBusyTimeOfTheMlpBlocksStep() {
        // m<c G0w0 c<m m<c G1w1 F0w0 c<m F1w1 B1w1 m<c R1w1 O1w1 B0w0#0 m<c R0w0#0 O0w0#0 B0w0#1 m<c R0w0#1 O0w0#1 c<m
        ShardedStepPlan plan = ShardedStepPlan.of(2, true, 2);
        double[][] times = {
            {0.0, 0.5},   // G0 (comm): the head
            {0.5, 0.9},   // G1 (comm), during F0
            {0.5, 3.0},   // F0
            {3.0, 5.5},   // F1
            {5.5, 10.5},  // B1
            {10.5, 11.0}, // R1 (comm), during B0#0
            {11.0, 11.4}, // O1
            {10.5, 12.0}, // B0#0
            {12.0, 12.3}, // R0#0 (comm), during B0#1
            {12.3, 12.5}, // O0#0
            {12.0, 13.5}, // B0#1: the last GEMM
            {13.5, 13.8}, // R0#1 (comm): the tail
            {13.8, 14.0}, // O0#1
        };
        List<Span> spans = new ArrayList<>();
        int t = 0;
        for (Action x : plan.actions()) {
            if (x.layer() >= 0) {
                spans.add(new Span(x, times[t][0], times[t][1]));
                t++;
            }
        }
        assertEquals(times.length, t);
        Timeline timeline = new Timeline(spans);
        assertEquals(14.0, timeline.stepMillis(), 1e-9);
        assertEquals(0.5, timeline.headMillis(), 1e-9);
        assertEquals(0.5, timeline.tailMillis(), 1e-9);
        assertEquals(List.of(new Action(Kind.REDUCE, 0, 0, -1, 1), new Action(Kind.OPTIMIZE, 0, 0, -1, 1)),
                timeline.tail().stream().map(Span::action).toList());
        assertEquals(2.5 + 2.5 + 5 + 1.5 + 1.5, timeline.busyMillis(Stream.COMPUTE), 1e-9);
        assertEquals(0.5 + 0.4 + 0.5 + 0.4 + 0.3 + 0.2 + 0.3 + 0.2, timeline.busyMillis(Stream.COMM), 1e-9);
        String summary = timeline.summary();
        assertTrue(summary.startsWith("step 14.000 ms, head 0.500 ms") && summary.contains("tail 0.500 ms")
                && summary.contains("R0w0#1 0.300 O0w0#1 0.200"), summary);
        assertTrue(java.util.regex.Pattern.compile("COMM +R0w0#1 +13\\.500 +13\\.800 +0\\.300").matcher(timeline.table())
                .find(), timeline.table());
        // a reduction that started during the last GEMM but ends after it is part of the tail, and so is what it delays
        spans.set(8, new Span(spans.get(8).action(), 12.0, 13.6));
        spans.set(9, new Span(spans.get(9).action(), 13.6, 13.7));
        spans.set(11, new Span(spans.get(11).action(), 13.7, 14.0));
        spans.set(12, new Span(spans.get(12).action(), 14.0, 14.2));
        Timeline late = new Timeline(spans);
        assertEquals(List.of("R0w0#0", "O0w0#0", "R0w0#1", "O0w0#1"), late.tail().stream().map(s -> s.action().toString())
                .toList());
        assertEquals(0.7, late.tailMillis(), 1e-9);
    }
}
