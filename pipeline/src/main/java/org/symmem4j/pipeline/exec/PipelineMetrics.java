package org.symmem4j.pipeline.exec;

import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Pipeline metrics as a Micrometer {@link MeterBinder}: the caller passes its registry. Until bound,
 * recording is a no-op. Fed once per step with the step's {@link TimelineReport} (all ranks).
 *
 * <table>
 *   <caption>Meters</caption>
 *   <tr><th>name</th><th>type</th><th>what</th></tr>
 *   <tr><td>{@code symmem.pipeline.bubble.ratio}</td><td>gauge (ratio)</td>
 *       <td>the last step's measured bubble: idle share of all ranks over the step's window</td></tr>
 *   <tr><td>{@code symmem.pipeline.handoff.latency}</td><td>timer</td>
 *       <td>one stage-to-stage message: post start to receipt when the receiver waited, else the post</td></tr>
 *   <tr><td>{@code symmem.pipeline.step.latency}</td><td>timer</td>
 *       <td>one step's window, first forward to last backward</td></tr>
 * </table>
 *
 * Every meter carries {@code schedule} (e.g. {@code 1f1b}) and {@code transport} tags plus the extra tags.
 */
public final class PipelineMetrics implements MeterBinder {

    private final Tags tags;
    private volatile Bound bound;

    private record Bound(Timer handoff, Timer step, AtomicLong bubbleBits) {
    }

    public PipelineMetrics(String schedule, String transport, Iterable<Tag> extraTags) {
        this.tags = Tags.of(extraTags).and("schedule", Objects.requireNonNull(schedule, "schedule"), "transport",
                Objects.requireNonNull(transport, "transport"));
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        AtomicLong bubbleBits = new AtomicLong(Double.doubleToRawLongBits(Double.NaN));
        Gauge.builder("symmem.pipeline.bubble.ratio", bubbleBits, bits -> Double.longBitsToDouble(bits.get())).description("Idle share of the last pipeline step")
                .baseUnit("ratio").tags(tags).register(registry);
        bound = new Bound(
                Timer.builder("symmem.pipeline.handoff.latency").description("One stage-to-stage hand-off")
                        .tags(tags).publishPercentileHistogram().register(registry),
                Timer.builder("symmem.pipeline.step.latency").description("One pipeline step, first forward to last backward")
                        .tags(tags).publishPercentileHistogram().register(registry),
                bubbleBits);
    }

    /** Records one step (every rank's timeline). */
    public void record(TimelineReport step) {
        Bound b = bound;
        if (b == null) {
            return;
        }
        for (long nanos : step.handoffNanos(false)) {
            b.handoff().record(nanos, TimeUnit.NANOSECONDS);
        }
        b.step().record(step.windowNanos(), TimeUnit.NANOSECONDS);
        // the bits of a double in one atomic word: a scrape on another thread sees this step's value or the last
        b.bubbleBits().set(Double.doubleToRawLongBits(step.bubbleFraction()));
    }
}
