package org.symmem4j.pipeline.exec;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;

/**
 * Builds Chrome trace JSON (the "JSON Array/Object Format" that Perfetto and chrome://tracing open)
 * from pipeline timelines: one process, one thread track per rank, a slice per event, a flow arrow per
 * hand-off, and for whole runs a track of step slices and counters. Times are microseconds from
 * {@code originNanos}.
 */
final class ChromeTrace {

    private final long originNanos;
    private final List<String> entries = new ArrayList<>();
    private long nextFlowId = 1;

    ChromeTrace(long originNanos) {
        this.originNanos = originNanos;
    }

    /** Names the process and one track per rank, in rank order. */
    void rankTracks(int ranks) {
        entries.add("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"symmem4j pipeline\"}}");
        for (int rank = 0; rank < ranks; rank++) {
            entries.add("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + rank
                    + ",\"args\":{\"name\":\"rank " + rank + "\"}}");
            entries.add("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":" + rank
                    + ",\"args\":{\"sort_index\":" + rank + "}}");
        }
    }

    /** A named track above the ranks (for step slices). */
    void namedTrack(int tid, String name, int sortIndex) {
        entries.add("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + tid + ",\"args\":{\"name\":\""
                + jsonEscape(name) + "\"}}");
        entries.add("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":" + tid
                + ",\"args\":{\"sort_index\":" + sortIndex + "}}");
    }

    /**
     * Every event of one step's timelines as a slice, and a flow from each send to the matching
     * receive. {@code step} goes into each slice's args unless negative.
     */
    void stepEvents(long step, List<StepTimeline> ranks) {
        Map<String, Long> flowIds = new HashMap<>();
        for (StepTimeline rank : ranks) {
            for (TimelineEvent e : rank.events()) {
                entries.add(String.format(Locale.ROOT,
                        "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                                + "\"args\":{%s\"stage\":%d,\"microbatch\":%d,\"peerStage\":%d}}",
                        TimelineReport.label(e), e.kind().name().toLowerCase(Locale.ROOT), e.rank(), micros(e.startNanos()),
                        e.durationNanos() / 1e3, step >= 0 ? "\"step\":" + step + "," : "", e.stage(), e.microbatch(),
                        e.peerStage()));
                if (e.kind() == Kind.SEND || e.kind() == Kind.RECEIVE) {
                    // one flow per message: starts inside the send slice, ends inside the receive slice
                    int from = e.kind() == Kind.SEND ? e.stage() : e.peerStage();
                    int to = e.kind() == Kind.SEND ? e.peerStage() : e.stage();
                    long id = flowIds.computeIfAbsent(from + ">" + to + "#" + e.microbatch(), k -> nextFlowId++);
                    double ts = micros(e.kind() == Kind.SEND ? e.startNanos() : e.endNanos());
                    entries.add(String.format(Locale.ROOT,
                            "{\"name\":\"handoff\",\"cat\":\"handoff\",\"ph\":\"%s\",\"id\":%d,\"pid\":0,\"tid\":%d,"
                                    + "\"ts\":%.3f%s}",
                            e.kind() == Kind.SEND ? "s" : "f", id, e.rank(), ts,
                            e.kind() == Kind.SEND ? "" : ",\"bp\":\"e\""));
                }
            }
        }
    }

    /** A slice on track {@code tid} with numeric args (NaN values are left out: JSON has no NaN). */
    void slice(int tid, String name, String category, long startNanos, long endNanos, Map<String, Double> args) {
        StringBuilder a = new StringBuilder();
        args.forEach((key, value) -> {
            if (!Double.isNaN(value) && !Double.isInfinite(value)) {
                a.append(a.isEmpty() ? "" : ",").append('"').append(jsonEscape(key)).append("\":")
                        .append(number(value));
            }
        });
        entries.add(String.format(Locale.ROOT,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}",
                jsonEscape(name), category, tid, micros(startNanos), (endNanos - startNanos) / 1e3, a));
    }

    /** A counter sample: Perfetto draws one track per counter name. */
    void counter(String name, long atNanos, double value) {
        if (Double.isNaN(value) || Double.isInfinite(value)) {
            return;
        }
        entries.add(String.format(Locale.ROOT, "{\"name\":\"%s\",\"ph\":\"C\",\"pid\":0,\"ts\":%.3f,\"args\":{\"value\":%s}}",
                jsonEscape(name), micros(atNanos), number(value)));
    }

    /** The trace, with {@code metadata} as the top-level "metadata" object. */
    String json(Map<String, String> metadata) {
        StringBuilder json = new StringBuilder("{\"displayTimeUnit\":\"ms\",");
        if (!metadata.isEmpty()) {
            json.append("\"metadata\":{");
            boolean first = true;
            for (Map.Entry<String, String> m : metadata.entrySet()) {
                json.append(first ? "" : ",").append('"').append(jsonEscape(m.getKey())).append("\":\"")
                        .append(jsonEscape(m.getValue())).append('"');
                first = false;
            }
            json.append("},");
        }
        json.append("\"traceEvents\":[\n").append(String.join(",\n", entries)).append("\n]}\n");
        return json.toString();
    }

    String json() {
        return json(Map.of());
    }

    private double micros(long nanos) {
        return (nanos - originNanos) / 1e3;
    }

    private static String number(double value) {
        return value == Math.rint(value) && Math.abs(value) < 1e15 ? Long.toString((long) value)
                : String.format(Locale.ROOT, "%.9g", value);
    }

    static String jsonEscape(String text) {
        StringBuilder out = new StringBuilder(text.length());
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.toString();
    }
}
