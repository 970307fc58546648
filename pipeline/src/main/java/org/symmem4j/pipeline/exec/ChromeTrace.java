package org.symmem4j.pipeline.exec;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.symmem4j.parallel.trace.ChromeTraceWriter;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;

/**
 * Pipeline timelines as Chrome trace JSON, on the shared {@link ChromeTraceWriter}: one process,
 * one thread track per rank, a slice per event, a flow arrow per hand-off, and for whole runs a
 * track of step slices and counters. Times are microseconds from {@code originNanos}.
 */
final class ChromeTrace {

    private final ChromeTraceWriter writer;
    private long nextFlowId = 1;

    ChromeTrace(long originNanos) {
        this.writer = new ChromeTraceWriter(originNanos, "symmem4j pipeline");
    }

    /** Names one track per rank, in rank order. */
    void rankTracks(int ranks) {
        for (int rank = 0; rank < ranks; rank++) {
            writer.track(rank, "rank " + rank, rank);
        }
    }

    /** A named track above the ranks (for step slices). */
    void namedTrack(int tid, String name, int sortIndex) {
        writer.track(tid, name, sortIndex);
    }

    /**
     * Every event of one step's timelines as a slice, and a flow from each send to the matching
     * receive. {@code step} goes into each slice's args unless negative.
     */
    void stepEvents(long step, List<StepTimeline> ranks) {
        Map<String, Long> flowIds = new HashMap<>();
        for (StepTimeline rank : ranks) {
            for (TimelineEvent e : rank.events()) {
                Map<String, Object> args = new LinkedHashMap<>();
                if (step >= 0) {
                    args.put("step", step);
                }
                args.put("stage", e.stage());
                args.put("microbatch", e.microbatch());
                args.put("peerStage", e.peerStage());
                writer.slice(e.rank(), TimelineReport.label(e), e.kind().name().toLowerCase(Locale.ROOT), e.startNanos(),
                        e.endNanos(), args);
                if (e.kind() == Kind.SEND || e.kind() == Kind.RECEIVE) {
                    // one flow per message: starts inside the send slice, ends inside the receive slice
                    int from = e.kind() == Kind.SEND ? e.stage() : e.peerStage();
                    int to = e.kind() == Kind.SEND ? e.peerStage() : e.stage();
                    long id = flowIds.computeIfAbsent(from + ">" + to + "#" + e.microbatch(), k -> nextFlowId++);
                    writer.flow("handoff", "handoff", id, e.rank(), e.kind() == Kind.SEND ? e.startNanos() : e.endNanos(),
                            e.kind() == Kind.SEND);
                }
            }
        }
    }

    /** A slice on track {@code tid} with numeric args (NaN values are left out: JSON has no NaN). */
    void slice(int tid, String name, String category, long startNanos, long endNanos, Map<String, Double> args) {
        writer.slice(tid, name, category, startNanos, endNanos, args);
    }

    /** A counter sample: Perfetto draws one track per counter name. */
    void counter(String name, long atNanos, double value) {
        writer.counter(name, atNanos, value);
    }

    /** The trace, with {@code metadata} as the top-level "metadata" object. */
    String json(Map<String, String> metadata) {
        return writer.json(metadata);
    }

    String json() {
        return json(Map.of());
    }
}
