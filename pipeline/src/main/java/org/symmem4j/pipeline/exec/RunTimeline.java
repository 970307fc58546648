package org.symmem4j.pipeline.exec;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The timelines of a whole pipeline run, step after step, as one Chrome trace: what a single step's
 * {@link TimelineReport#chromeTraceJson()} shows, for every recorded step on one time axis, so the
 * time between steps (batch preparation, the caller's own work) shows too.
 *
 * <p>The trace has a track per rank with every forward, backward, hand-off and optimizer step
 * (args: step, stage, microbatch, peer stage), a flow arrow per hand-off, a {@code steps} track with
 * one slice per step (from its first event on any rank to its last; args: step, bubble, window, and
 * whatever the recorder adds, such as loss and examples), and a {@code bubble %} counter.
 *
 * <p>Memory: about 100 bytes per event, and a step has about {@code 3 x 2 x microbatches x
 * stagesPerRank} events per rank; recording stops after {@code maxSteps} steps (the first ones are
 * kept) and the trace's metadata says how many were left out.
 */
public final class RunTimeline {

    /**
     * One recorded step.
     *
     * @param step the step number
     * @param ranks every rank's timeline, in rank order
     * @param values named values shown on the step's slice
     */
    public record Step(long step, List<StepTimeline> ranks, Map<String, Double> values) {
        /** Copies the timelines and values (the step is immutable). */
        public Step {
            ranks = List.copyOf(ranks);
            values = Map.copyOf(values);
        }
    }

    private final int maxSteps;
    private final List<Step> steps = new ArrayList<>();
    private long droppedSteps;

    /**
     * An empty timeline of a run.
     *
     * @param maxSteps the most steps kept; later steps are counted as dropped
     */
    public RunTimeline(int maxSteps) {
        if (maxSteps < 1) {
            throw new IllegalArgumentException("maxSteps=" + maxSteps + " expected maxSteps >= 1 (fix: pass how"
                    + " many steps to record, e.g. 4)");
        }
        this.maxSteps = maxSteps;
    }

    /**
     * Records one step: every rank's timeline, in rank order, and named values to show on its slice
     * (e.g. {@code loss}, {@code examples}).
     *
     * @param step the step number
     * @param ranks every rank's timeline, in rank order
     * @param values named values shown on the step's slice
     * @throws IllegalArgumentException if the timelines are not in rank order or the step computed nothing
     */
    public synchronized void add(long step, List<StepTimeline> ranks, Map<String, Double> values) {
        Objects.requireNonNull(ranks, "ranks");
        Objects.requireNonNull(values, "values");
        TimelineReport.of(ranks); // checks rank order and that the step computed something
        if (steps.size() >= maxSteps) {
            droppedSteps++;
            return;
        }
        steps.add(new Step(step, ranks, values));
    }

    /**
     * Steps recorded, in order.
     *
     * @return a copy of the recorded steps
     */
    public synchronized List<Step> steps() {
        return List.copyOf(steps);
    }

    /**
     * Steps that arrived after {@code maxSteps} were recorded and were not kept.
     *
     * @return the number of dropped steps
     */
    public synchronized long droppedSteps() {
        return droppedSteps;
    }

    /**
     * The most steps kept.
     *
     * @return the bound given at creation
     */
    public int maxSteps() {
        return maxSteps;
    }

    /**
     * The run as Chrome trace JSON (open in https://ui.perfetto.dev or chrome://tracing), times in
     * microseconds from the first recorded event.
     *
     * @return the trace
     */
    public synchronized String chromeTraceJson() {
        long origin = Long.MAX_VALUE;
        int ranks = 0;
        for (Step s : steps) {
            ranks = Math.max(ranks, s.ranks().size());
            for (StepTimeline r : s.ranks()) {
                for (TimelineEvent e : r.events()) {
                    origin = Math.min(origin, e.startNanos());
                }
            }
        }
        ChromeTrace trace = new ChromeTrace(origin == Long.MAX_VALUE ? 0 : origin);
        int stepTrack = ranks;
        trace.namedTrack(stepTrack, "steps", -1);
        trace.rankTracks(ranks);
        for (Step s : steps) {
            TimelineReport report = TimelineReport.of(s.ranks());
            long first = Long.MAX_VALUE;
            long last = Long.MIN_VALUE;
            for (StepTimeline r : s.ranks()) {
                for (TimelineEvent e : r.events()) {
                    first = Math.min(first, e.startNanos());
                    last = Math.max(last, e.endNanos());
                }
            }
            Map<String, Double> args = new LinkedHashMap<>();
            args.put("step", (double) s.step());
            args.put("bubble", report.bubbleFraction());
            args.put("window_ms", report.windowNanos() / 1e6);
            args.putAll(s.values());
            trace.slice(stepTrack, "step " + s.step(), "step", first, last, args);
            trace.counter("bubble %", first, 100 * report.bubbleFraction());
            trace.stepEvents(s.step(), s.ranks());
        }
        Map<String, String> metadata = new LinkedHashMap<>();
        metadata.put("steps", Integer.toString(steps.size()));
        metadata.put("droppedSteps", Long.toString(droppedSteps));
        if (droppedSteps > 0) {
            metadata.put("note", "recording stopped after maxSteps=" + maxSteps + "; " + droppedSteps
                    + " later steps are not in this trace");
        }
        return trace.json(metadata);
    }

    /**
     * Writes {@link #chromeTraceJson()} to {@code file}.
     *
     * @param file the file to write, replaced if it exists
     * @throws IOException if the file cannot be written
     */
    public void writeChromeTrace(Path file) throws IOException {
        Files.writeString(file, chromeTraceJson());
    }
}
