package org.symmem4j.pipeline.exec;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;

/**
 * Where a step's window went, over all ranks: every rank's share of {@link TimelineReport}'s window
 * (first compute start to last compute end, on any rank) split by what the rank was doing. The parts
 * add up to 1, and {@code 1 - compute} is the report's {@link TimelineReport#bubbleFraction() bubble},
 * so the bubble itself is split into waiting for a message, posting one, the optimizer step, the
 * executor's own time between recorded events, and the time a rank was outside its step: before its first event
 * (its step began after the window opened: the trainer's per-step work or a late wake-up, which the schedule does
 * not need) or after its last (its step had ended: a rank that finished early, as the schedule's cool-down has it).
 * Clipped to the window, as the bubble is.
 *
 * @param compute   forward, backward and split-backward passes (the stage's own copies into and out of
 *                  its arrays and the per-microbatch bookkeeping of the stage are part of these)
 * @param receive   waiting for a message, and taking it (the schedule's dependencies, the hand-off's latency)
 * @param send      posting a message: the copy into the peer's slot and any wait for a free slot
 * @param optimizer the optimizer step of the rank's stages
 * @param between   between two recorded events of the rank: the executor's own work (releasing a slot,
 *                  same-rank copies, tracing)
 * @param before    in the window before the rank's first event: its step had not begun
 * @param after     in the window after the rank's last event: its step had ended
 */
public record TimelineBreakdown(double compute, double receive, double send, double optimizer, double between,
                                double before, double after) {

    /**
     * The breakdown of one step.
     *
     * @param report the step
     * @return the shares of the ranks' window time, adding up to 1
     */
    public static TimelineBreakdown of(TimelineReport report) {
        Objects.requireNonNull(report, "report");
        long start = report.windowStartNanos();
        long end = report.windowEndNanos();
        double total = (double) (end - start) * report.rankCount();
        long[] byKind = new long[Kind.values().length];
        long between = 0;
        long before = 0;
        long after = 0;
        for (StepTimeline rank : report.timelines()) {
            List<TimelineEvent> events = new ArrayList<>(rank.events());
            events.sort(Comparator.comparingLong(TimelineEvent::startNanos));
            long cursor = start;
            boolean begun = false;
            for (TimelineEvent e : events) {
                long from = Math.max(cursor, Math.max(e.startNanos(), start));
                long to = Math.min(e.endNanos(), end);
                if (e.startNanos() > cursor && cursor < end) {
                    long gap = Math.min(e.startNanos(), end) - cursor;
                    if (begun) {
                        between += gap;
                    } else {
                        before += gap;
                    }
                }
                begun = true;
                if (to > from) {
                    byKind[e.kind().ordinal()] += to - from;
                }
                cursor = Math.max(cursor, Math.min(e.endNanos(), end));
            }
            after += end - Math.max(cursor, start);
        }
        long compute = byKind[Kind.FORWARD.ordinal()] + byKind[Kind.BACKWARD.ordinal()]
                + byKind[Kind.INPUT_GRADIENT.ordinal()] + byKind[Kind.WEIGHT_GRADIENT.ordinal()];
        return new TimelineBreakdown(compute / total, byKind[Kind.RECEIVE.ordinal()] / total,
                byKind[Kind.SEND.ordinal()] / total, byKind[Kind.OPTIMIZER_STEP.ordinal()] / total, between / total,
                before / total, after / total);
    }

    /**
     * The idle parts, as the report's bubble splits them: {@code 1 - compute}.
     *
     * @return the bubble fraction
     */
    public double bubble() {
        return receive + send + optimizer + between + before + after;
    }

    /**
     * As percentages of the ranks' window time, e.g. {@code "receive 20.1 %, send 1.2 %, ..."}.
     *
     * @return the idle parts, one decimal each
     */
    public String idleText() {
        return String.format(Locale.ROOT, "receive %.1f %%, send %.1f %%, optimizer %.1f %%, between %.1f %%,"
                + " before %.1f %%, after %.1f %%", 100 * receive, 100 * send, 100 * optimizer, 100 * between,
                100 * before, 100 * after);
    }
}
