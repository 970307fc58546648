package org.symmem4j.pipeline.exec;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.time.Duration;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.symmem4j.parallel.BuildInfo;

/**
 * Pipeline metrics as a Micrometer {@link MeterBinder}: the caller passes its registries (it may
 * bind to several). Until bound, recording is a no-op. Fed once per step with the step's
 * {@link TimelineReport} (all ranks), and by a trainer with each step's examples and loss.
 *
 * <table>
 *   <caption>Meters (Prometheus names in brackets)</caption>
 *   <tr><th>name</th><th>type</th><th>what</th></tr>
 *   <tr><td>{@code symmem.pipeline.bubble.ratio}</td><td>gauge (ratio)</td>
 *       <td>the last step's measured bubble: idle share of all ranks over the step's window</td></tr>
 *   <tr><td>{@code symmem.pipeline.handoff.duration}</td><td>timer, histogram</td>
 *       <td>one stage-to-stage message: post start to receipt when the receiver waited, else the post</td></tr>
 *   <tr><td>{@code symmem.pipeline.step.duration}</td><td>timer, histogram</td>
 *       <td>one step's window, first forward to last backward; its count is the steps</td></tr>
 *   <tr><td>{@code symmem.pipeline.rank.compute}</td><td>timer, tag {@code rank}</td>
 *       <td>one rank's forward and backward passes in one step: the slowest stage has the longest
 *       [symmem_pipeline_rank_compute_seconds]</td></tr>
 *   <tr><td>{@code symmem.pipeline.examples}</td><td>counter</td>
 *       <td>examples trained [symmem_pipeline_examples_total]</td></tr>
 *   <tr><td>{@code symmem4j.build.info}</td><td>gauge (always 1), tags {@code version, commit, java} only</td>
 *       <td>which build recorded these meters [symmem4j_build_info]</td></tr>
 *   <tr><td>{@code symmem.pipeline.loss}</td><td>gauge</td><td>the last step's loss (NaN before the first)</td></tr>
 *   <tr><td>{@code symmem.pipeline.failures}</td><td>counter, tag {@code reason}</td>
 *       <td>steps that failed: timeout or error [symmem_pipeline_failures_total]</td></tr>
 * </table>
 *
 * Every meter carries {@code schedule} (e.g. {@code 1f1b}) and {@code transport} tags plus the extra
 * tags. Timers resolve 1 µs to 10 s ({@link #LATENCY_MIN}, {@link #LATENCY_MAX}): a host hand-off
 * takes microseconds. Only {@code symmem.pipeline.rank.compute} carries the rank, without a histogram.
 */
public final class PipelineMetrics implements MeterBinder {

    /** The lowest latency the timers' histograms resolve (Micrometer's default starts at 1 ms). */
    public static final Duration LATENCY_MIN = Duration.ofNanos(1_000);
    /** The highest: a slow step. */
    public static final Duration LATENCY_MAX = Duration.ofSeconds(10);

    /** Why a step failed: the {@code reason} tag of {@code symmem.pipeline.failures}. */
    public enum FailureReason {
        /** A rank waited for another past the group's timeout. */
        TIMEOUT("timeout"),
        /** Anything else a rank threw. */
        ERROR("error");

        private final String tag;

        FailureReason(String tag) {
            this.tag = tag;
        }

        /**
         * The tag value ({@code reason}).
         *
         * @return the value on the failure counter
         */
        public String tag() {
            return tag;
        }
    }

    private final Tags tags;
    /** One entry per registry bound to; replaced whole on each bind (copy on write). */
    private volatile Bound[] bound = new Bound[0];

    private static final class Bound {
        final MeterRegistry registry;
        final Tags tags;
        final Timer handoff;
        final Timer step;
        final Counter examples;
        final Map<FailureReason, Counter> failures = new EnumMap<>(FailureReason.class);
        final Map<Integer, Timer> rankCompute = new ConcurrentHashMap<>();
        /** The bits of a double in one atomic word: a scrape on another thread sees this step's value or the last. */
        final AtomicLong bubbleBits = new AtomicLong(Double.doubleToRawLongBits(Double.NaN));
        final AtomicLong lossBits = new AtomicLong(Double.doubleToRawLongBits(Double.NaN));

        Bound(MeterRegistry registry, Tags tags) {
            this.registry = registry;
            this.tags = tags;
            // symmem4j_build_info, as the gradient-sync metrics register it (same name and tags: one meter)
            Gauge.builder("symmem4j.build.info", () -> 1).description("The symmem4j build: version, commit, Java runtime (value 1)")
                    .tags(BuildInfo.current().tags()).strongReference(true).register(registry);
            // strong references: the registry usually outlives the trainer, whose last values it keeps serving
            Gauge.builder("symmem.pipeline.bubble.ratio", bubbleBits, bits -> Double.longBitsToDouble(bits.get()))
                    .description("Idle share of the last pipeline step").baseUnit("ratio").tags(tags).strongReference(true)
                    .register(registry);
            Gauge.builder("symmem.pipeline.loss", lossBits, bits -> Double.longBitsToDouble(bits.get()))
                    .description("Loss of the last pipeline step").tags(tags).strongReference(true).register(registry);
            handoff = durationTimer("symmem.pipeline.handoff.duration", "One stage-to-stage hand-off").tags(tags)
                    .register(registry);
            step = durationTimer("symmem.pipeline.step.duration", "One pipeline step, first forward to last backward")
                    .tags(tags).register(registry);
            examples = Counter.builder("symmem.pipeline.examples").description("Examples trained by the pipeline")
                    .baseUnit("examples").tags(tags).register(registry);
            for (FailureReason r : FailureReason.values()) {
                failures.put(r, Counter.builder("symmem.pipeline.failures").description("Pipeline steps that failed")
                        .baseUnit("failures").tags(tags).tag("reason", r.tag()).register(registry));
            }
        }
    }

    private static Timer.Builder durationTimer(String name, String description) {
        return Timer.builder(name).description(description).publishPercentileHistogram()
                .minimumExpectedValue(LATENCY_MIN).maximumExpectedValue(LATENCY_MAX);
    }

    /**
     * Metrics of one pipeline; bind them to registries with {@code bindTo}.
     *
     * @param schedule  the {@code schedule} tag value
     * @param transport the {@code transport} tag value
     * @param extraTags added to every meter
     */
    public PipelineMetrics(String schedule, String transport, Iterable<Tag> extraTags) {
        this.tags = Tags.of(extraTags).and("schedule", Objects.requireNonNull(schedule, "schedule"), "transport",
                Objects.requireNonNull(transport, "transport"));
    }

    @Override
    public synchronized void bindTo(MeterRegistry registry) {
        Bound[] next = Arrays.copyOf(bound, bound.length + 1);
        next[next.length - 1] = new Bound(registry, tags);
        bound = next; // volatile: recorders see the new registry's meters, fully built, from their next step
    }

    /**
     * Records one step's timings (every rank's timeline).
     *
     * @param step the step's report
     */
    public void record(TimelineReport step) {
        long[] handoffs = step.handoffNanos(false);
        for (Bound b : bound) {
            for (long nanos : handoffs) {
                b.handoff.record(nanos, TimeUnit.NANOSECONDS);
            }
            b.step.record(step.windowNanos(), TimeUnit.NANOSECONDS);
            for (int rank = 0; rank < step.rankCount(); rank++) {
                b.rankCompute.computeIfAbsent(rank, r -> Timer.builder("symmem.pipeline.rank.compute")
                                .description("One rank's forward and backward passes in one step").tags(b.tags)
                                .tag("rank", Integer.toString(r)).register(b.registry))
                        .record(step.computeNanos(rank), TimeUnit.NANOSECONDS);
            }
            b.bubbleBits.set(Double.doubleToRawLongBits(step.bubbleFraction()));
        }
    }

    /**
     * What a trainer adds per step: the step's examples and loss.
     *
     * @param examples examples the step trained on
     * @param loss the step's loss
     */
    public void recordTraining(long examples, double loss) {
        for (Bound b : bound) {
            b.examples.increment(examples);
            b.lossBits.set(Double.doubleToRawLongBits(loss));
        }
    }

    /**
     * One step that failed.
     *
     * @param reason why the step failed
     */
    public void recordFailure(FailureReason reason) {
        Objects.requireNonNull(reason, "reason");
        for (Bound b : bound) {
            b.failures.get(reason).increment();
        }
    }
}
