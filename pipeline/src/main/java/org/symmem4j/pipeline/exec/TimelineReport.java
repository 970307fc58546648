package org.symmem4j.pipeline.exec;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.function.ToDoubleFunction;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.SimulationResult;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * All ranks' timelines of one step: the measured bubble, the same figures from the simulator for the
 * measured durations, a Chrome trace and a picture.
 *
 * <p><b>Window.</b> As in the simulator, every rank is measured over the same window: from the start
 * of the step's first forward (nothing can compute earlier) to the end of its last forward or
 * backward on any rank. A rank is busy while it computes and idle otherwise; waiting for a message,
 * posting one and the optimizer step all count as idle, since the simulator's action durations are
 * compute only and its communication latency stands for hand-offs.
 */
public final class TimelineReport {

    private final List<StepTimeline> ranks;
    private final long windowStart;
    private final long windowEnd;

    private TimelineReport(List<StepTimeline> ranks) {
        this.ranks = ranks;
        long start = Long.MAX_VALUE;
        long end = Long.MIN_VALUE;
        for (StepTimeline rank : ranks) {
            for (TimelineEvent e : rank.events()) {
                if (e.kind().isCompute()) {
                    start = Math.min(start, e.startNanos());
                    end = Math.max(end, e.endNanos());
                }
            }
        }
        if (start == Long.MAX_VALUE) {
            throw new IllegalArgumentException("the timelines of " + ranks.size() + " ranks hold no forward or backward"
                    + " pass, expected at least one (fix: pass the timelines PipelineExecutor recorded for a step that"
                    + " ran at least one microbatch)");
        }
        this.windowStart = start;
        this.windowEnd = end;
    }

    /**
     * The report of one step.
     *
     * @return the report
     * @param ranks one timeline per rank of the same step, element {@code r} for rank {@code r}
     * @throws IllegalArgumentException when ranks are missing or out of order
     */
    public static TimelineReport of(List<StepTimeline> ranks) {
        Objects.requireNonNull(ranks, "ranks");
        for (int r = 0; r < ranks.size(); r++) {
            if (ranks.get(r).rank() != r) {
                throw new IllegalArgumentException("timeline " + r + " is rank " + ranks.get(r).rank()
                        + " expected=rank " + r + " (fix: pass one timeline per rank, in rank order)");
            }
        }
        return new TimelineReport(List.copyOf(ranks));
    }

    /**
     * The ranks' timelines, element {@code r} for rank {@code r}.
     *
     * @return the timelines (unmodifiable)
     */
    public List<StepTimeline> timelines() {
        return ranks;
    }

    /**
     * The number of ranks.
     *
     * @return one per timeline
     */
    public int rankCount() {
        return ranks.size();
    }

    /**
     * The step's window, first compute start to last compute end.
     *
     * @return the window in nanoseconds
     */
    public long windowNanos() {
        return windowEnd - windowStart;
    }

    /**
     * The window's start: the step's first forward or backward start on any rank.
     *
     * @return nanoseconds on the timelines' clock
     */
    public long windowStartNanos() {
        return windowStart;
    }

    /**
     * The window's end: the step's last forward or backward end on any rank.
     *
     * @return nanoseconds on the timelines' clock
     */
    public long windowEndNanos() {
        return windowEnd;
    }

    /**
     * Rank {@code rank}'s forward and backward time in the step.
     *
     * @param rank the rank
     * @return compute time in nanoseconds
     */
    public long computeNanos(int rank) {
        return ranks.get(rank).computeNanos();
    }

    /**
     * Rank {@code rank}'s idle share of the window: {@code 1 - compute / window}.
     *
     * @param rank the rank
     * @return the idle fraction, in [0, 1]
     */
    public double idleFraction(int rank) {
        return 1.0 - (double) ranks.get(rank).computeNanos() / windowNanos();
    }

    /**
     * Idle share of all ranks over the window: the measured bubble fraction.
     *
     * @return the bubble fraction, in [0, 1]
     */
    public double bubbleFraction() {
        long compute = ranks.stream().mapToLong(StepTimeline::computeNanos).sum();
        return 1.0 - (double) compute / ((double) windowNanos() * ranks.size());
    }

    /**
     * Mean duration of the events of {@code kind} over all ranks, or 0 if there are none.
     *
     * @param kind the event kind
     * @return the mean duration in nanoseconds
     */
    public double meanNanos(Kind kind) {
        return ranks.stream().flatMap(r -> r.events().stream()).filter(e -> e.kind() == kind)
                .mapToLong(TimelineEvent::durationNanos).average().orElse(0);
    }

    /**
     * Mean time from the end of a producing action's compute until the consumer, already waiting,
     * has the message: the simulator's communication latency. Messages the consumer found already
     * waiting do not say how long a hand-off takes and are left out; if every message was early,
     * this is the mean time to post one.
     *
     * @return the mean hand-off time in nanoseconds
     */
    public double meanHandoffNanos() {
        long[] waited = handoffNanos(true);
        if (waited.length > 0) {
            return java.util.Arrays.stream(waited).average().orElseThrow();
        }
        return meanNanos(Kind.SEND);
    }

    /**
     * Per message of the step: from the start of its post to the end of its receipt when the
     * receiver was already waiting (the hand-off as the receiver feels it), else the time to post.
     *
     * @param waitedOnly only the messages whose receiver was already waiting
     *
     * @return one duration per message, in nanoseconds
     */
    public long[] handoffNanos(boolean waitedOnly) {
        Map<String, TimelineEvent> sends = new HashMap<>();
        for (StepTimeline rank : ranks) {
            for (TimelineEvent e : rank.events()) {
                if (e.kind() == Kind.SEND) {
                    sends.put(e.stage() + ">" + e.peerStage() + "#" + e.microbatch(), e);
                }
            }
        }
        List<Long> handoffs = new ArrayList<>();
        for (StepTimeline rank : ranks) {
            for (TimelineEvent e : rank.events()) {
                if (e.kind() != Kind.RECEIVE) {
                    continue;
                }
                TimelineEvent send = sends.get(e.peerStage() + ">" + e.stage() + "#" + e.microbatch());
                if (send == null) {
                    continue;
                }
                boolean receiverWaited = e.startNanos() < send.endNanos();
                if (receiverWaited) {
                    handoffs.add(e.endNanos() - send.startNanos());
                } else if (!waitedOnly) {
                    handoffs.add(send.durationNanos());
                }
            }
        }
        return handoffs.stream().mapToLong(Long::longValue).toArray();
    }

    /**
     * The simulator's figures for this step: {@code schedule} dry-run with the measured mean forward
     * and backward times and hand-off latency, in microseconds.
     *
     * @param schedule the schedule the step ran
     * @param shape the pipeline it ran on
     * @return the simulated run, in microseconds
     * @throws IllegalStateException if the schedule deadlocks
     */
    public SimulationResult.Completed simulate(Schedule schedule, PipelineShape shape) {
        ActionDurations durations = new ActionDurations(Math.max(1, Math.round(meanNanos(Kind.FORWARD) / 1e3)),
                Math.max(1, Math.round(wholeBackwardNanos(this::meanNanos) / 1e3)), Math.round(meanHandoffNanos() / 1e3));
        return ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
    }

    /**
     * A whole backward's mean time by {@code mean}: a B's, or, where the step split its backwards
     * (zero-bubble schedules), an I's plus a W's.
     */
    private static double wholeBackwardNanos(ToDoubleFunction<Kind> mean) {
        double whole = mean.applyAsDouble(Kind.BACKWARD);
        return whole > 0 ? whole : mean.applyAsDouble(Kind.INPUT_GRADIENT) + mean.applyAsDouble(Kind.WEIGHT_GRADIENT);
    }

    /**
     * Mean duration of {@code stage}'s events of {@code kind} in this step, or 0 if it has none (the
     * last stage's forward returns at once when the stage computes its forward inside the backward).
     *
     * @param kind the event kind
     * @param stage the stage
     * @return the mean duration in nanoseconds
     */
    public double stageMeanNanos(Kind kind, int stage) {
        return ranks.stream().flatMap(r -> r.events().stream()).filter(e -> e.kind() == kind && e.stage() == stage)
                .mapToLong(TimelineEvent::durationNanos).average().orElse(0);
    }

    /**
     * This step's measured pass times per stage, in microseconds (at least 1, as the simulator
     * needs), with the measured hand-off latency: what {@link #simulatePerStage} feeds the simulator.
     * Where the step split its backwards (zero-bubble schedules), a stage's backward is its input- plus
     * weight-gradient time and the weight-gradient share is the measured one.
     *
     * @param shape the pipeline the step ran on
     * @return the durations, in microseconds
     */
    public StageDurations stageDurationsMicros(PipelineShape shape) {
        int stages = shape.stageCount();
        long[] forward = new long[stages];
        long[] backward = new long[stages];
        long[] weight = new long[stages];
        for (int s = 0; s < stages; s++) {
            forward[s] = Math.max(1, Math.round(stageMeanNanos(Kind.FORWARD, s) / 1e3));
            int stage = s;
            backward[s] = Math.max(1, Math.round(wholeBackwardNanos(kind -> stageMeanNanos(kind, stage)) / 1e3));
            // a split backward's measured halves (rarely equal: the output stage's I holds its forward and loss);
            // halves as the simulator's default where the step ran whole backwards
            double w = stageMeanNanos(Kind.WEIGHT_GRADIENT, s);
            weight[s] = stageMeanNanos(Kind.BACKWARD, s) > 0 || w == 0 && stageMeanNanos(Kind.INPUT_GRADIENT, s) == 0
                    ? backward[s] / 2 : Math.min(backward[s] - 1, Math.round(w / 1e3));
        }
        return new StageDurations(forward, backward, weight, Math.round(meanHandoffNanos() / 1e3));
    }

    /**
     * The simulator's figures for this step with each stage's own measured mean forward and backward
     * times and the measured hand-off latency: unlike {@link #simulate}, an unbalanced split shows up
     * as the bubble its slowest stage causes. The gap between this and {@link #bubbleFraction()} is
     * what the schedule does not explain (shared cores, slow hand-offs, waits for slots).
     *
     * @param schedule the schedule the step ran
     * @param shape the pipeline it ran on
     * @return the simulated run, in microseconds
     * @throws IllegalStateException if the schedule deadlocks
     */
    public SimulationResult.Completed simulatePerStage(Schedule schedule, PipelineShape shape) {
        return ScheduleSimulator.simulate(schedule, shape, stageDurationsMicros(shape)).requireCompleted();
    }

    /**
     * The step as Chrome trace JSON (open in Perfetto or chrome://tracing): one track per rank, a
     * slice per forward, backward, receive, send and optimizer step, and a flow arrow per hand-off
     * from the sender's post to the receiver's receipt. Times in microseconds from the first event.
     * {@link RunTimeline} writes a whole run the same way.
     *
     * @return the trace
     */
    public String chromeTraceJson() {
        long origin = ranks.stream().flatMap(r -> r.events().stream()).mapToLong(TimelineEvent::startNanos).min()
                .orElse(windowStart);
        ChromeTrace trace = new ChromeTrace(origin);
        trace.rankTracks(ranks.size());
        trace.stepEvents(-1, ranks);
        return trace.json();
    }

    /**
     * The step as an SVG picture: a row per rank, time left to right with a millisecond axis, a box per
     * forward (light) and backward (dark) coloured by microbatch and labelled like the schedule's text
     * ({@code 0F3}), optimizer steps in grey, hand-offs as thin grey bars under the row, and the rank's
     * idle time in the step's window hatched in red with its share at the row's end; a legend below.
     *
     * @param title the picture's title
     * @return the SVG document
     */
    public String svg(String title) {
        double width = 1200;
        double left = 70;
        double right = 110;
        double rowHeight = 34;
        double top = 40;
        double plotWidth = width - left - right;
        double scale = plotWidth / Math.max(1, windowNanos());
        double axisTop = top + rowHeight * ranks.size() + 4;
        double legendTop = axisTop + 40;
        double height = legendTop + 50;
        StringBuilder svg = new StringBuilder();
        svg.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\""
                + " font-family=\"sans-serif\" font-size=\"11\">%n", width, height));
        svg.append("<defs><pattern id=\"idle\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\""
                + " patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fdecea\"/>"
                + "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#e57373\" stroke-width=\"2\"/></pattern></defs>\n");
        svg.append(String.format(Locale.ROOT, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>%n"
                + "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s</text>%n", left, escape(title)));
        for (StepTimeline rank : ranks) {
            double y = top + rowHeight * rank.rank();
            svg.append(String.format(Locale.ROOT, "<text x=\"8\" y=\"%.1f\">rank %d</text>%n", y + 16, rank.rank()));
            // idle first, so the passes are drawn over its edges
            for (long[] gap : idleIntervals(rank)) {
                double x = left + (gap[0] - windowStart) * scale;
                double w = (gap[1] - gap[0]) * scale;
                svg.append(String.format(Locale.ROOT, "<rect class=\"idle\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\""
                        + " height=\"24\" fill=\"url(#idle)\"><title>idle %.3f ms</title></rect>%n", x, y, w,
                        (gap[1] - gap[0]) / 1e6));
            }
            List<TimelineEvent> sorted = new ArrayList<>(rank.events());
            sorted.sort(Comparator.comparingLong(TimelineEvent::startNanos));
            for (TimelineEvent e : sorted) {
                if (e.endNanos() < windowStart || e.startNanos() > windowEnd) {
                    continue;
                }
                double x = left + (Math.max(e.startNanos(), windowStart) - windowStart) * scale;
                double w = Math.max(0.5, (Math.min(e.endNanos(), windowEnd) - Math.max(e.startNanos(), windowStart)) * scale);
                if (e.kind().isCompute()) {
                    int lightness = e.kind() == Kind.FORWARD ? 72 : 45;
                    svg.append(String.format(Locale.ROOT, "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\""
                            + " height=\"24\" fill=\"hsl(%d,65%%,%d%%)\" stroke=\"#333\" stroke-width=\"0.3\"><title>%s"
                            + " %.3f ms</title></rect>%n", e.kind() == Kind.FORWARD ? "forward" : "backward", x, y, w,
                            microbatchHue(e.microbatch()), lightness, label(e), e.durationNanos() / 1e6));
                    if (w > 26) {
                        svg.append(String.format(Locale.ROOT, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>%n",
                                x + w / 2, y + 16, label(e)));
                    }
                } else if (e.kind() == Kind.OPTIMIZER_STEP) {
                    svg.append(String.format(Locale.ROOT, "<rect class=\"optimizer\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\""
                            + " height=\"24\" fill=\"#777\"><title>%s %.3f ms</title></rect>%n", x, y, w, label(e),
                            e.durationNanos() / 1e6));
                } else {
                    svg.append(String.format(Locale.ROOT, "<rect class=\"handoff\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\""
                            + " height=\"4\" fill=\"#999\"><title>%s</title></rect>%n", x, y + 26, w, label(e)));
                }
            }
            svg.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%.1f\">idle %.1f%%</text>%n",
                    left + plotWidth + 8, y + 16, 100 * idleFraction(rank.rank())));
        }
        appendAxis(svg, left, plotWidth, axisTop);
        appendLegend(svg, left, legendTop);
        svg.append("</svg>\n");
        return svg.toString();
    }

    /**
     * The gaps between {@code rank}'s forward and backward passes inside the step's window, as
     * {@code [start, end)} nanosecond pairs: exactly the time {@link #idleFraction} counts.
     */
    List<long[]> idleIntervals(StepTimeline rank) {
        List<TimelineEvent> compute = new ArrayList<>();
        for (TimelineEvent e : rank.events()) {
            if (e.kind().isCompute()) {
                compute.add(e);
            }
        }
        compute.sort(Comparator.comparingLong(TimelineEvent::startNanos));
        List<long[]> gaps = new ArrayList<>();
        long cursor = windowStart;
        for (TimelineEvent e : compute) {
            if (e.startNanos() > cursor) {
                gaps.add(new long[] {cursor, e.startNanos()});
            }
            cursor = Math.max(cursor, e.endNanos());
        }
        if (cursor < windowEnd) {
            gaps.add(new long[] {cursor, windowEnd});
        }
        return gaps;
    }

    /** Ticks at 1, 2 or 5 times a power of ten milliseconds, about eight across the window. */
    private void appendAxis(StringBuilder svg, double left, double plotWidth, double axisTop) {
        double windowMs = windowNanos() / 1e6;
        double rough = Math.max(windowMs, 1e-6) / 8;
        double power = Math.pow(10, Math.floor(Math.log10(rough)));
        double tick = rough / power < 2 ? power : rough / power < 5 ? 2 * power : 5 * power;
        svg.append(String.format(Locale.ROOT, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\""
                + " stroke=\"#333\"/>%n", left, axisTop, left + plotWidth, axisTop));
        int decimals = tick >= 1 ? 0 : (int) Math.ceil(-Math.log10(tick));
        for (int i = 0; i * tick <= windowMs + 1e-9; i++) {
            double x = left + i * tick / Math.max(windowMs, 1e-9) * plotWidth;
            svg.append(String.format(Locale.ROOT, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\""
                    + " stroke=\"#333\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%." + decimals + "f</text>%n",
                    x, axisTop, x, axisTop + 5, x, axisTop + 17, i * tick));
        }
        svg.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">ms from the first"
                + " pass; window %.3f ms, bubble %.1f%%</text>%n", left + plotWidth, axisTop + 32, windowMs,
                100 * bubbleFraction()));
    }

    private static void appendLegend(StringBuilder svg, double left, double top) {
        String[][] items = {
                {"hsl(0,65%,72%)", "forward (light)"},
                {"hsl(0,65%,45%)", "backward (dark)"},
                {"url(#idle)", "idle: no pass running"},
                {"#777", "optimizer step"},
                {"#999", "hand-off (thin bar: send or receive)"},
        };
        double x = left;
        for (String[] item : items) {
            double h = item[1].startsWith("hand-off") ? 4 : 14;
            svg.append(String.format(Locale.ROOT, "<rect class=\"legend\" x=\"%.1f\" y=\"%.1f\" width=\"18\""
                    + " height=\"%.0f\" fill=\"%s\" stroke=\"#333\" stroke-width=\"0.3\"/><text x=\"%.1f\""
                    + " y=\"%.1f\">%s</text>%n", x, top + (14 - h) / 2, h, item[0], x + 24, top + 11, escape(item[1])));
            x += 40 + 6.2 * item[1].length();
        }
        svg.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%.1f\">colour = microbatch (hue %d per"
                + " microbatch); label sFm / sBm = stage s, forward / backward, microbatch m</text>%n", left, top + 32,
                MICROBATCH_HUE_STEP));
    }

    /** Hue step between consecutive microbatches: 47 degrees keeps neighbours apart for a few dozen. */
    private static final int MICROBATCH_HUE_STEP = 47;

    private static int microbatchHue(int microbatch) {
        return (microbatch * MICROBATCH_HUE_STEP) % 360;
    }

    static String label(TimelineEvent e) {
        return switch (e.kind()) {
            case FORWARD -> e.stage() + "F" + e.microbatch();
            case BACKWARD -> e.stage() + "B" + e.microbatch();
            case INPUT_GRADIENT -> e.stage() + "I" + e.microbatch();
            case WEIGHT_GRADIENT -> e.stage() + "W" + e.microbatch();
            case RECEIVE -> "recv " + e.peerStage() + "->" + e.stage() + " mb" + e.microbatch();
            case SEND -> "send " + e.stage() + "->" + e.peerStage() + " mb" + e.microbatch();
            case OPTIMIZER_STEP -> "step stage " + e.stage();
        };
    }

    static String escape(String text) {
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;");
    }
}
