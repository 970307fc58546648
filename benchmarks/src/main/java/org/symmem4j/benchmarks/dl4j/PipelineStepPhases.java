package org.symmem4j.benchmarks.dl4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;
import org.symmem4j.dl4j.pipeline.PipelineStepReport;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.exec.TimelineEvent;

/**
 * Where a pipeline trainer's {@code fit(batch)} goes, from the step's timelines ({@link PipelineStepReport#timelines},
 * replica 0's pipeline ranks) and the wall time of the call: the pipeline itself (first event's start to last event's
 * end over the ranks), what runs outside it on the caller's thread while the ranks wait (the model's hand-overs at the
 * call's start and end, the batch cut into microbatches), and per rank its passes (forward and backward), its waits for
 * and posts of messages, and its optimizer step (the stage's dp gradient sync, the update, with ZeRO the update's or
 * the parameters' all-gather). Medians over the steps recorded ({@link #record}); one row of {@link #row} per run.
 */
final class PipelineStepPhases {

    /** The table's header, for {@link #row}'s columns. */
    static final String HEADER = "| setting | step (ms) | pipeline (ms) | outside the pipeline (ms) | passes per rank (ms)"
            + " | waits per rank (ms) | optimizer step per rank (ms) |\n|---|---:|---:|---:|---|---|---|";

    private final List<Double> wall = new ArrayList<>();
    private final List<Double> span = new ArrayList<>();
    private final List<double[]> passes = new ArrayList<>();
    private final List<double[]> waits = new ArrayList<>();
    private final List<double[]> optimizer = new ArrayList<>();

    /** One step: its {@code fit(batch)} wall time and the trainer's report of it. */
    void record(double wallMs, PipelineStepReport report) {
        List<StepTimeline> timelines = report.timelines();
        long start = Long.MAX_VALUE;
        long end = Long.MIN_VALUE;
        double[] pass = new double[timelines.size()];
        double[] wait = new double[timelines.size()];
        double[] step = new double[timelines.size()];
        for (int r = 0; r < timelines.size(); r++) {
            for (TimelineEvent e : timelines.get(r).events()) {
                start = Math.min(start, e.startNanos());
                end = Math.max(end, e.endNanos());
                double ms = e.durationNanos() / 1e6;
                switch (e.kind()) {
                    case RECEIVE, SEND -> wait[r] += ms;
                    case OPTIMIZER_STEP -> step[r] += ms;
                    default -> pass[r] += ms;
                }
            }
        }
        wall.add(wallMs);
        span.add(end > start ? (end - start) / 1e6 : 0);
        passes.add(pass);
        waits.add(wait);
        optimizer.add(step);
    }

    /** {@return the median wall time of the steps recorded, ms} */
    double medianWallMs() {
        return median(wall.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /** {@return the median time outside the pipeline of the steps recorded, ms} */
    double medianOutsideMs() {
        double[] outside = new double[wall.size()];
        for (int i = 0; i < outside.length; i++) {
            outside[i] = wall.get(i) - span.get(i);
        }
        return median(outside);
    }

    /** {@return one markdown row: medians over the steps recorded, per rank as r0 / r1 / ...} */
    String row(String setting) {
        return String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %s | %s | %s |", setting, medianWallMs(),
                median(span.stream().mapToDouble(Double::doubleValue).toArray()), medianOutsideMs(), perRank(passes),
                perRank(waits), perRank(optimizer));
    }

    private static String perRank(List<double[]> steps) {
        int ranks = steps.getFirst().length;
        return java.util.stream.IntStream.range(0, ranks)
                .mapToObj(r -> String.format(Locale.ROOT, "%.2f", median(steps.stream().mapToDouble(s -> s[r]).toArray())))
                .collect(Collectors.joining(" / "));
    }

    private static double median(double[] values) {
        return Stats.median(Arrays.stream(values));
    }
}
