package org.symmem4j.pipeline.exec;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleSimulator;
import org.symmem4j.pipeline.schedule.SimulationResult;

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
            throw new IllegalArgumentException("the timelines hold no forward or backward pass");
        }
        this.windowStart = start;
        this.windowEnd = end;
    }

    /**
     * @param ranks one timeline per rank of the same step, element {@code r} for rank {@code r}
     * @throws IllegalArgumentException when ranks are missing or out of order
     */
    public static TimelineReport of(List<StepTimeline> ranks) {
        Objects.requireNonNull(ranks, "ranks");
        for (int r = 0; r < ranks.size(); r++) {
            if (ranks.get(r).rank() != r) {
                throw new IllegalArgumentException("timeline " + r + " is rank " + ranks.get(r).rank()
                        + " expected=rank " + r + " (pass one timeline per rank, in rank order)");
            }
        }
        return new TimelineReport(List.copyOf(ranks));
    }

    public int rankCount() {
        return ranks.size();
    }

    /** The step's window, first compute start to last compute end. */
    public long windowNanos() {
        return windowEnd - windowStart;
    }

    /** Rank {@code rank}'s forward and backward time in the step. */
    public long computeNanos(int rank) {
        return ranks.get(rank).computeNanos();
    }

    /** Rank {@code rank}'s idle share of the window: {@code 1 - compute / window}. */
    public double idleFraction(int rank) {
        return 1.0 - (double) ranks.get(rank).computeNanos() / windowNanos();
    }

    /** Idle share of all ranks over the window: the measured bubble fraction. */
    public double bubbleFraction() {
        long compute = ranks.stream().mapToLong(StepTimeline::computeNanos).sum();
        return 1.0 - (double) compute / ((double) windowNanos() * ranks.size());
    }

    /** Mean duration of the events of {@code kind} over all ranks, or 0 if there are none. */
    public double meanNanos(Kind kind) {
        return ranks.stream().flatMap(r -> r.events().stream()).filter(e -> e.kind() == kind)
                .mapToLong(TimelineEvent::durationNanos).average().orElse(0);
    }

    /**
     * Mean time from the end of a producing action's compute until the consumer, already waiting,
     * has the message: the simulator's communication latency. Messages the consumer found already
     * waiting do not say how long a hand-off takes and are left out; if every message was early,
     * this is the mean time to post one.
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
     */
    public SimulationResult.Completed simulate(Schedule schedule, PipelineShape shape) {
        ActionDurations durations = new ActionDurations(Math.max(1, Math.round(meanNanos(Kind.FORWARD) / 1e3)),
                Math.max(1, Math.round(meanNanos(Kind.BACKWARD) / 1e3)), Math.round(meanHandoffNanos() / 1e3));
        return ScheduleSimulator.simulate(schedule, shape, durations).requireCompleted();
    }

    /**
     * The step as Chrome trace JSON (open in Perfetto or chrome://tracing): one track per rank, a
     * slice per forward, backward, receive, send and optimizer step, and a flow arrow per hand-off
     * from the sender's post to the receiver's receipt. Times in microseconds from the first event.
     */
    public String chromeTraceJson() {
        long origin = ranks.stream().flatMap(r -> r.events().stream()).mapToLong(TimelineEvent::startNanos).min()
                .orElse(windowStart);
        StringBuilder json = new StringBuilder("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        List<String> entries = new ArrayList<>();
        for (StepTimeline rank : ranks) {
            entries.add("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + rank.rank()
                    + ",\"args\":{\"name\":\"rank " + rank.rank() + "\"}}");
            for (TimelineEvent e : rank.events()) {
                entries.add(String.format(Locale.ROOT,
                        "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                                + "\"args\":{\"stage\":%d,\"microbatch\":%d,\"peerStage\":%d}}",
                        label(e), e.kind().name().toLowerCase(Locale.ROOT), e.rank(), (e.startNanos() - origin) / 1e3,
                        e.durationNanos() / 1e3, e.stage(), e.microbatch(), e.peerStage()));
                if (e.kind() == Kind.SEND || e.kind() == Kind.RECEIVE) {
                    // one flow per message: starts inside the send slice, ends inside the receive slice
                    int from = e.kind() == Kind.SEND ? e.stage() : e.peerStage();
                    int to = e.kind() == Kind.SEND ? e.peerStage() : e.stage();
                    long id = ((long) from * 65_536 + to) * 1_000_000L + e.microbatch();
                    double ts = ((e.kind() == Kind.SEND ? e.startNanos() : e.endNanos()) - origin) / 1e3;
                    entries.add(String.format(Locale.ROOT,
                            "{\"name\":\"handoff\",\"cat\":\"handoff\",\"ph\":\"%s\",\"id\":%d,\"pid\":0,\"tid\":%d,"
                                    + "\"ts\":%.3f%s}",
                            e.kind() == Kind.SEND ? "s" : "f", id, e.rank(), ts,
                            e.kind() == Kind.SEND ? "" : ",\"bp\":\"e\""));
                }
            }
        }
        json.append(String.join(",\n", entries)).append("\n]}\n");
        return json.toString();
    }

    /**
     * The step as an SVG picture: a row per rank, time left to right, a box per forward (light) and
     * backward (dark) coloured by microbatch and labelled like the schedule's text ({@code 0F3}),
     * hand-offs as thin grey bars under the row.
     */
    public String svg(String title) {
        long origin = windowStart;
        double width = 1200;
        double left = 70;
        double rowHeight = 34;
        double top = 40;
        double scale = (width - left - 20) / Math.max(1, windowNanos());
        StringBuilder svg = new StringBuilder();
        double height = top + rowHeight * ranks.size() + 40;
        svg.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\""
                + " font-family=\"sans-serif\" font-size=\"11\">%n", width, height));
        svg.append(String.format(Locale.ROOT, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>%n"
                + "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s</text>%n", left, escape(title)));
        for (StepTimeline rank : ranks) {
            double y = top + rowHeight * rank.rank();
            svg.append(String.format(Locale.ROOT, "<text x=\"8\" y=\"%.1f\">rank %d</text>%n", y + 18, rank.rank()));
            List<TimelineEvent> sorted = new ArrayList<>(rank.events());
            sorted.sort(Comparator.comparingLong(TimelineEvent::startNanos));
            for (TimelineEvent e : sorted) {
                double x = left + Math.max(0, e.startNanos() - origin) * scale;
                double w = Math.max(0.5, (Math.min(e.endNanos(), windowEnd) - Math.max(e.startNanos(), origin)) * scale);
                if (e.endNanos() < origin || e.startNanos() > windowEnd) {
                    continue;
                }
                if (e.kind().isCompute()) {
                    int hue = (e.microbatch() * 47) % 360;
                    int lightness = e.kind() == Kind.FORWARD ? 72 : 45;
                    svg.append(String.format(Locale.ROOT, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"24\""
                            + " fill=\"hsl(%d,65%%,%d%%)\" stroke=\"#333\" stroke-width=\"0.3\"><title>%s</title></rect>%n",
                            x, y, w, hue, lightness, label(e)));
                    if (w > 26) {
                        svg.append(String.format(Locale.ROOT, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>%n",
                                x + w / 2, y + 16, label(e)));
                    }
                } else if (e.kind() == Kind.SEND || e.kind() == Kind.RECEIVE) {
                    svg.append(String.format(Locale.ROOT, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"4\""
                            + " fill=\"#999\"><title>%s</title></rect>%n", x, y + 26, w, label(e)));
                }
            }
        }
        double axisY = top + rowHeight * ranks.size() + 16;
        svg.append(String.format(Locale.ROOT, "<text x=\"%.0f\" y=\"%.1f\">0 ms</text>%n", left, axisY));
        svg.append(String.format(Locale.ROOT, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.2f ms"
                + " (bubble %.1f%%)</text>%n", width - 20, axisY, windowNanos() / 1e6, 100 * bubbleFraction()));
        svg.append("</svg>\n");
        return svg.toString();
    }

    private static String label(TimelineEvent e) {
        return switch (e.kind()) {
            case FORWARD -> e.stage() + "F" + e.microbatch();
            case BACKWARD -> e.stage() + "B" + e.microbatch();
            case RECEIVE -> "recv " + e.peerStage() + "->" + e.stage() + " mb" + e.microbatch();
            case SEND -> "send " + e.stage() + "->" + e.peerStage() + " mb" + e.microbatch();
            case OPTIMIZER_STEP -> "step stage " + e.stage();
        };
    }

    private static String escape(String text) {
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;");
    }
}
