package org.symmem4j.parallel.trace;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Builds a Chrome trace in the JSON Object Format (Perfetto and chrome://tracing open it): one
 * process, named tracks (thread ids), complete slices ({@code "ph":"X"}) with arguments, counters
 * and flow arrows, and a top-level {@code metadata} object. Times are given in
 * {@link System#nanoTime()} nanoseconds and written as microseconds from {@code originNanos}.
 *
 * <p>Slices on one track must nest (a slice starting inside another ends inside it): Perfetto
 * flags slices that overlap partially. Callers that record work on several threads give each
 * thread its own track. Not thread-safe: one thread builds a trace.
 */
public final class ChromeTraceWriter {

    private final long originNanos;
    private final List<String> entries = new ArrayList<>();

    /**
     * Starts a trace with its process-name record.
     *
     * @param originNanos the {@link System#nanoTime()} shown as time 0
     * @param processName the process's name in the trace (e.g. "symmem4j pipeline")
     */
    public ChromeTraceWriter(long originNanos, String processName) {
        this.originNanos = originNanos;
        entries.add("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"" + jsonEscape(processName)
                + "\"}}");
    }

    /**
     * Names track {@code tid}; tracks show in increasing {@code sortIndex}.
     *
     * @param tid the track (thread) id
     * @param name the track's name
     * @param sortIndex the track's position, lower first
     */
    public void track(int tid, String name, int sortIndex) {
        entries.add("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + tid + ",\"args\":{\"name\":\""
                + jsonEscape(name) + "\"}}");
        entries.add("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":" + tid
                + ",\"args\":{\"sort_index\":" + sortIndex + "}}");
    }

    /**
     * A slice on track {@code tid} from {@code startNanos} to {@code endNanos}. Argument values
     * that are {@link Number}s are written as JSON numbers (NaN and infinities left out: JSON has
     * neither), everything else as strings.
     *
     * @param tid the track (thread) id
     * @param name the slice's name
     * @param category the slice's category
     * @param startNanos start, in {@link System#nanoTime()} nanoseconds
     * @param endNanos end, in {@link System#nanoTime()} nanoseconds
     * @param args the slice's arguments, written in the map's iteration order
     */
    public void slice(int tid, String name, String category, long startNanos, long endNanos, Map<String, ?> args) {
        entries.add(String.format(Locale.ROOT,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}",
                jsonEscape(name), jsonEscape(category), tid, micros(startNanos), (endNanos - startNanos) / 1e3,
                arguments(args)));
    }

    /**
     * A counter sample: Perfetto draws one track per counter name. NaN and infinities are left out.
     *
     * @param name the counter's name
     * @param atNanos sample time, in {@link System#nanoTime()} nanoseconds
     * @param value the sample
     */
    public void counter(String name, long atNanos, double value) {
        if (Double.isNaN(value) || Double.isInfinite(value)) {
            return;
        }
        entries.add(String.format(Locale.ROOT, "{\"name\":\"%s\",\"ph\":\"C\",\"pid\":0,\"ts\":%.3f,\"args\":{\"value\":%s}}",
                jsonEscape(name), micros(atNanos), number(value)));
    }

    /**
     * One end of a flow arrow {@code id}: the start ({@code "s"}) binds to the slice enclosing
     * {@code atNanos} on track {@code tid}, the finish ({@code "f"}, binding point "e") to the
     * slice enclosing it on its track.
     *
     * @param name the flow's name
     * @param category the flow's category
     * @param id the arrow's id, the same at both ends
     * @param tid the track (thread) id of this end
     * @param atNanos this end's time, in {@link System#nanoTime()} nanoseconds
     * @param start true for the start, false for the finish
     */
    public void flow(String name, String category, long id, int tid, long atNanos, boolean start) {
        entries.add(String.format(Locale.ROOT,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",\"id\":%d,\"pid\":0,\"tid\":%d,\"ts\":%.3f%s}",
                jsonEscape(name), jsonEscape(category), start ? "s" : "f", id, tid, micros(atNanos),
                start ? "" : ",\"bp\":\"e\""));
    }

    /**
     * The trace, with {@code metadata} (string values) as the top-level "metadata" object when not empty.
     *
     * @param metadata top-level metadata; may be empty, not null
     * @return the trace as JSON text
     */
    public String json(Map<String, String> metadata) {
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

    private String arguments(Map<String, ?> args) {
        StringBuilder a = new StringBuilder();
        args.forEach((key, value) -> {
            String v;
            if (value instanceof Number n) {
                double d = n.doubleValue();
                if (Double.isNaN(d) || Double.isInfinite(d)) {
                    return;
                }
                v = value instanceof Double || value instanceof Float ? number(d) : n.toString();
            } else {
                v = "\"" + jsonEscape(String.valueOf(value)) + "\"";
            }
            a.append(a.isEmpty() ? "" : ",").append('"').append(jsonEscape(key)).append("\":").append(v);
        });
        return a.toString();
    }

    private double micros(long nanos) {
        return (nanos - originNanos) / 1e3;
    }

    private static String number(double value) {
        return value == Math.rint(value) && Math.abs(value) < 1e15 ? Long.toString((long) value)
                : String.format(Locale.ROOT, "%.9g", value);
    }

    /**
     * {@code text} as the inside of a JSON string.
     *
     * @param text any text
     * @return {@code text} with quotes, backslashes and control characters escaped
     */
    public static String jsonEscape(String text) {
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
